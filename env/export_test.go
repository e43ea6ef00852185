package env

import "avtgym/env/internal/statepb"

// Test-only access for the external tests (package env_test) to a token's
// history, which the exported API reads only through steps and
// transcripts.

// ResealState opens tok's head, edits its state and seals it again with
// the same history: a token the server could have issued, but with other
// content.
func ResealState(s *Sealer, tok []byte, edit func(*statepb.EpisodeState)) ([]byte, error) {
	plain, hist, err := s.openToken(nil, tok)
	if err != nil {
		return nil, err
	}
	st := &statepb.EpisodeState{}
	if err := st.UnmarshalVT(plain); err != nil {
		return nil, err
	}
	edit(st)
	out, buf, h := s.prepare(st.SizeVT(), len(hist))
	if _, err := st.MarshalToSizedBufferVT(buf); err != nil {
		return nil, err
	}
	copy(h, hist)
	return s.seal(out), nil
}

// OpenQuestions is tok's answered questions as (question, reply) pairs,
// read from its history.
func OpenQuestions(s *Sealer, tok []byte) ([][2]string, error) {
	plain, hist, err := s.openToken(nil, tok)
	if err != nil {
		return nil, err
	}
	st := &statepb.EpisodeState{}
	if err := st.UnmarshalVT(plain); err != nil {
		return nil, err
	}
	h := &history{sealed: hist}
	qs, err := h.questions(s, st)
	if err != nil {
		return nil, err
	}
	out := make([][2]string, len(qs))
	for i, q := range qs {
		out[i] = [2]string{q.question, q.reply}
	}
	return out, nil
}

package env

import (
	"crypto/rand"
	"encoding/binary"
	"math/bits"

	"avtgym/env/internal/statepb"
	"avtgym/oracle"
)

// The token's history: the texts of the dialogue's answered questions,
// one sealed chunk per question, after the token's head (token.go). A
// chunk is sealed once, by the step that answered its question, and every
// later token carries it as the same bytes, copied unread, so that a step
// opens and seals a head whose size does not grow with the dialogue
// (issue 31: before, step 20 cost 6–8× step 1 in process). The head keeps
// what a step reads of every question — the count and the credit masks —
// and a step opens the chunks only when it needs the texts: an oracle that
// quotes the dialogue (the LLM oracle; the reference oracle reads credits
// only: oracle.Oracle.ReadsHistoryCreditsOnly), the solvers, a
// transcript, and the step that ends the episode (which authenticates the
// whole history once, so that no tampered token is ever scored).
//
// A chunk is
//
//	length n (4 bytes) | nonce (12 bytes) | AES-GCM ciphertext (n bytes) | tag (16 bytes)
//
// sealed under the history key (Sealer.history, derived from the token
// key) with the previous chunk's tag (zeros for the first) and the
// chunk's index as associated data; the head holds the history's length
// and its last chunk's tag. Since a tag cannot be forged, the head's tag
// pins the last chunk, whose associated data pins the one before, and so
// on: a history cannot be cut, reordered, extended or spliced from
// another episode or a fork without failing authentication. A fork (two
// steps from one token) seals two different chunks after the same
// predecessor, each under its own random nonce. The plaintext is a
// statepb.AnsweredQuestion, a question and its reply: both are the
// policy's to see, so a chunk's length tells nothing secret, and the
// token's length is still padded to its bucket as a whole.

// chunkOverhead is what a chunk adds to its plaintext: its length prefix,
// nonce and tag.
const chunkOverhead = 4 + nonceSize + tagSize

// answered is one answered question's texts.
type answered struct{ question, reply string }

// plain is the chunk plaintext of a.
func (a answered) plain() statepb.AnsweredQuestion {
	return statepb.AnsweredQuestion{Question: a.question, Reply: a.reply}
}

// chunkSize is the size of a's chunk.
func chunkSize(a answered) int {
	p := a.plain()
	return chunkOverhead + p.SizeVT()
}

// tagWords splits a tag into the head's two words.
func tagWords(t [tagSize]byte) (hi, lo uint64) {
	return binary.BigEndian.Uint64(t[:8]), binary.BigEndian.Uint64(t[8:])
}

// headTag is the head's history tag as bytes.
func headTag(st *statepb.EpisodeState) (t [tagSize]byte) {
	binary.BigEndian.PutUint64(t[:8], st.HistoryTagHi)
	binary.BigEndian.PutUint64(t[8:], st.HistoryTagLo)
	return t
}

// chunkAD is a chunk's associated data: its predecessor's tag and its
// index.
func chunkAD(prev [tagSize]byte, index int) [tagSize + 4]byte {
	var ad [tagSize + 4]byte
	copy(ad[:], prev[:])
	binary.BigEndian.PutUint32(ad[tagSize:], uint32(index))
	return ad
}

// sealChunk seals a's chunk into dst (exactly chunkSize(a) bytes) after
// the chunk whose tag is prev, at index, and returns its tag. The tag's
// two words are never zero (the head's zero tag means no history): in the
// 2⁻⁶³ case, the chunk is sealed again under a fresh nonce.
func (s *Sealer) sealChunk(dst []byte, a answered, prev [tagSize]byte, index int) [tagSize]byte {
	p := a.plain()
	n := p.SizeVT()
	binary.BigEndian.PutUint32(dst, uint32(n))
	ad := chunkAD(prev, index)
	nonce, body := dst[4:4+nonceSize], dst[4+nonceSize:]
	for {
		if _, err := rand.Read(nonce); err != nil {
			panic(err) // crypto/rand never fails on supported platforms
		}
		if _, err := p.MarshalToSizedBufferVT(body[:n]); err != nil {
			panic(err) // a sized buffer of SizeVT bytes always fits
		}
		s.history.Seal(body[:0], nonce, body[:n], ad[:])
		var tag [tagSize]byte
		copy(tag[:], body[n:])
		if hi, lo := tagWords(tag); hi != 0 && lo != 0 {
			return tag
		}
	}
}

// openChunks authenticates and decrypts a history of count chunks whose
// last tag is last, and returns their questions. Any mismatch is
// TOKEN_TAMPERED: the head was authenticated, so a history that does not
// match it was altered.
func (s *Sealer) openChunks(hist []byte, count int, last [tagSize]byte) ([]answered, error) {
	tampered := errorf(InvalidArgument, ReasonTokenTampered, "token", "episode token's history failed authentication: it was altered or truncated")
	out := make([]answered, 0, count)
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	var prev [tagSize]byte
	for off := 0; off < len(hist); {
		if len(out) == count || len(hist)-off < chunkOverhead {
			return nil, tampered
		}
		n := int(binary.BigEndian.Uint32(hist[off:]))
		if n > len(hist)-off-chunkOverhead {
			return nil, tampered
		}
		nonce := hist[off+4 : off+4+nonceSize]
		body := hist[off+4+nonceSize : off+chunkOverhead+n]
		ad := chunkAD(prev, len(out))
		plain, err := s.history.Open((*bp)[:0], nonce, body, ad[:])
		if err != nil {
			return nil, tampered
		}
		*bp = plain[:0]
		var q statepb.AnsweredQuestion
		// UnmarshalVT copies the strings out of the pooled buffer.
		if err := q.UnmarshalVT(plain); err != nil {
			return nil, tampered
		}
		out = append(out, answered{question: q.Question, reply: q.Reply})
		copy(prev[:], body[n:])
		off += chunkOverhead + n
	}
	if len(out) != count || prev != last {
		return nil, tampered
	}
	return out, nil
}

// history is an episode's dialogue as a step holds it: the chunks its
// token carries, unread until a text is needed, and the questions the step
// answered (or the reset pre-filled), which seal seals into new chunks.
type history struct {
	// sealed is the token's history as it came (it aliases the request's
	// token, alive for the step).
	sealed []byte
	// opened holds sealed's questions once read (isOpen).
	opened []answered
	isOpen bool
	// added are the questions answered since, in order.
	added []answered
	// inline is added's storage for the one question a step answers.
	inline [1]answered
}

// add records an answered question: its texts in the history, its count
// and credits in the head.
func (h *history) add(st *statepb.EpisodeState, q, reply string, mask uint64) {
	if h.added == nil {
		h.added = h.inline[:0]
	}
	h.added = append(h.added, answered{question: q, reply: reply})
	st.Answered++
	st.CreditMasks = append(st.CreditMasks, mask)
}

// questions are every answered question's texts, in order: the sealed
// ones (opened and authenticated on first use) and those added since.
func (h *history) questions(s *Sealer, st *statepb.EpisodeState) ([]answered, error) {
	if !h.isOpen {
		qs, err := s.openChunks(h.sealed, int(st.Answered)-len(h.added), headTag(st))
		if err != nil {
			return nil, err
		}
		h.opened, h.isOpen = qs, true
	}
	if len(h.added) == 0 {
		return h.opened, nil
	}
	return append(h.opened[:len(h.opened):len(h.opened)], h.added...), nil
}

// verify authenticates the sealed history (a no-op once it is open).
func (h *history) verify(s *Sealer, st *statepb.EpisodeState) error {
	_, err := h.questions(s, st)
	return err
}

// sealAdded seals the added questions into chunks after the sealed ones:
// it returns the history as the next token carries it, sets the head's
// length and tag, and leaves nothing added. A reset plan uses it to seal
// its pre-filled questions once for the whole group.
func (h *history) sealAdded(s *Sealer, st *statepb.EpisodeState) {
	if len(h.added) == 0 {
		return
	}
	n := len(h.sealed)
	for _, a := range h.added {
		n += chunkSize(a)
	}
	out := make([]byte, n)
	h.writeInto(s, st, out)
	if h.isOpen {
		h.opened = append(h.opened, h.added...)
	}
	h.sealed, h.added = out, nil
}

// size is the length of the history the next token carries.
func (h *history) size() int {
	n := len(h.sealed)
	for _, a := range h.added {
		n += chunkSize(a)
	}
	return n
}

// writeInto writes the next token's history into dst (size() bytes): the
// sealed chunks, copied, then a new chunk per added question; it sets the
// head's history length and tag.
func (h *history) writeInto(s *Sealer, st *statepb.EpisodeState, dst []byte) {
	off := copy(dst, h.sealed)
	prev := headTag(st)
	index := int(st.Answered) - len(h.added)
	for _, a := range h.added {
		n := chunkSize(a)
		prev = s.sealChunk(dst[off:off+n], a, prev, index)
		off += n
		index++
	}
	st.HistoryBytes = uint32(len(dst))
	st.HistoryTagHi, st.HistoryTagLo = tagWords(prev)
}

// checkHead checks, before any chunk is read, that the head and the
// history agree on what costs nothing to check: the count of credit masks,
// the history's length and its last tag's bytes. What it cannot see (a
// chunk altered inside) fails when the chunks are read.
func checkHead(st *statepb.EpisodeState, hist []byte) error {
	switch {
	case st.Answered < 0 || int(st.Answered) > MaxAnswered || len(st.CreditMasks) != int(st.Answered):
		return errorf(InvalidArgument, ReasonTokenMalformed, "token", "the episode state's answered questions (%d) and credit masks (%d) do not match", st.Answered, len(st.CreditMasks))
	case int(st.HistoryBytes) != len(hist),
		(st.Answered == 0) != (len(hist) == 0),
		len(hist) > 0 && (len(hist) < tagSize || [tagSize]byte(hist[len(hist)-tagSize:]) != headTag(st)):
		return errorf(InvalidArgument, ReasonTokenTampered, "token", "episode token's history failed authentication: it was altered or truncated")
	}
	return nil
}

// turns are the answered questions from index from on, with their
// credits, as the oracle and solvers read them.
func turns(qs []answered, masks []uint64, from int) []oracle.Turn {
	from = min(len(qs), max(0, from))
	d := make([]oracle.Turn, len(qs)-from)
	for i := range d {
		d[i] = oracle.Turn{Question: qs[from+i].question, Reply: qs[from+i].reply, Credits: maskToInts(masks[from+i])}
	}
	return d
}

// creditTurns are the answered questions from index from on with their
// credits only (no texts), for an oracle that reads no more
// (oracle.Oracle.ReadsHistoryCreditsOnly): two allocations, the turns and
// one array holding every turn's credits.
func creditTurns(masks []uint64, from int) []oracle.Turn {
	masks = masks[min(len(masks), max(0, from)):]
	n := 0
	for _, m := range masks {
		n += bits.OnesCount64(m)
	}
	d := make([]oracle.Turn, len(masks))
	all := make([]int, 0, n)
	for i, m := range masks {
		start := len(all)
		for m != 0 {
			b := bits.TrailingZeros64(m)
			all = append(all, b)
			m &^= 1 << b
		}
		d[i].Credits = all[start:len(all):len(all)]
	}
	return d
}

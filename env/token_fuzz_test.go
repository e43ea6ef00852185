package env

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/env/internal/statepb"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
)

// wantTypedTokenError fails unless err is an *Error on field "token" with
// one of the given reasons.
func wantTypedTokenError(t *testing.T, err error, what string, reasons ...pb.ErrorReason) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("%s: error %v (%T) is not an *env.Error", what, err, err)
	}
	if e.Field != "token" || e.Code != InvalidArgument && e.Code != FailedPrecondition {
		t.Fatalf("%s: error %q has field %q, code %d", what, e, e.Field, e.Code)
	}
	for _, r := range reasons {
		if e.Reason == r {
			return e
		}
	}
	t.Fatalf("%s: error %q has reason %s, want one of %v", what, e, e.Reason, reasons)
	return nil
}

// FuzzSealRoundTrip checks the Sealer on arbitrary plaintexts and
// arbitrary corruptions of its tokens:
//   - a sealed plaintext opens to itself (Open, OpenAppend into a dirty
//     buffer), and the token's length depends only on the plaintext's size
//     bucket;
//   - another key's sealer rejects it as foreign;
//   - flipping any bits of any byte, truncating it or extending it is
//     rejected, with the reason of the byte that changed (version:
//     malformed, key id: foreign, the rest: tampered);
//   - arbitrary bytes, even with this sealer's own header, are rejected
//     with a typed error.
func FuzzSealRoundTrip(f *testing.F) {
	s, err := NewSealer(RandomKey()) // random: no stored input can be a valid token
	if err != nil {
		f.Fatal(err)
	}
	other, err := NewSealer(RandomKey())
	if err != nil {
		f.Fatal(err)
	}
	st := &statepb.EpisodeState{Version: stateVersion, Corpus: "tiny", RecordId: "top-a", RecordHashHi: 7, RecordHashLo: 7, Budget: 3,
		Answered: 1, CreditMasks: []uint64{1}, HistoryBytes: 40, HistoryTagHi: 3, HistoryTagLo: 4}
	state, err := proto.Marshal(st)
	if err != nil {
		f.Fatal(err)
	}
	for _, plain := range [][]byte{nil, {0}, []byte("a small episode state"), state, bytes.Repeat([]byte{0xff}, 108), bytes.Repeat([]byte{1}, 109), bytes.Repeat([]byte{2}, 5000)} {
		f.Add(plain, []byte{}, uint32(0), uint8(1), uint32(0), false)
	}
	f.Add(state, []byte{tokenVersion, 0, 0, 0, 0}, uint32(3), uint8(0x80), uint32(20), true)
	f.Add(state, bytes.Repeat([]byte{0}, 200), uint32(17), uint8(0xff), uint32(1000), true)
	f.Add([]byte("x"), other.Seal([]byte("x")), uint32(200), uint8(0), uint32(33), true)
	f.Fuzz(func(t *testing.T, plain, raw []byte, at uint32, mask uint8, cut uint32, ownHeader bool) {
		tok := s.Seal(plain)
		if want := headerSize + testNonceSize + wantBucket(len(plain)); len(tok) != want {
			t.Fatalf("a %d-byte plaintext sealed into %d bytes, want %d", len(plain), len(tok), want)
		}
		got, err := s.Open(tok)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("round trip of %d bytes: %v (equal %v)", len(plain), err, bytes.Equal(got, plain))
		}
		dirty := append(make([]byte, 0, 8), "garbage"...)
		if got, err := s.OpenAppend(dirty, tok); err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("OpenAppend round trip of %d bytes: %v", len(plain), err)
		}
		_, err = other.Open(tok)
		wantTypedTokenError(t, err, "another key", ReasonTokenForeign)

		// One corrupted byte.
		i := int(at % uint32(len(tok)))
		if mask == 0 {
			mask = 1
		}
		bad := bytes.Clone(tok)
		bad[i] ^= mask
		_, err = s.Open(bad)
		switch {
		case i == 0:
			wantTypedTokenError(t, err, "version byte flipped", ReasonTokenMalformed)
		case i < 1+keyIDSize:
			wantTypedTokenError(t, err, "key id flipped", ReasonTokenForeign)
		case i < headerSize:
			wantTypedTokenError(t, err, "head length flipped", ReasonTokenMalformed, ReasonTokenTampered)
		default:
			wantTypedTokenError(t, err, "byte flipped", ReasonTokenTampered)
		}
		// Truncated and extended.
		_, err = s.Open(tok[:int(cut%uint32(len(tok)))])
		wantTypedTokenError(t, err, "truncated", ReasonTokenMalformed, ReasonTokenTampered)
		// The sealer hands what follows the head to the history's checks
		// (checkHead, which a step runs: TestHistoryTampering).
		ext := append([]byte{0}, raw...)
		if _, hist, err := s.openToken(nil, append(bytes.Clone(tok), ext...)); err != nil || !bytes.Equal(hist, ext) {
			t.Fatalf("extended: history %q, %v; want %q", hist, err, ext)
		}

		// Arbitrary bytes.
		if ownHeader && len(raw) >= headerSize {
			raw = bytes.Clone(raw)
			raw[0] = tokenVersion
			copy(raw[1:1+keyIDSize], s.keyID[:])
		}
		if got, err := s.Open(raw); err == nil {
			t.Fatalf("Open accepted %d arbitrary bytes (plaintext %q)", len(raw), got)
		} else {
			wantTypedTokenError(t, err, "arbitrary bytes", ReasonTokenMalformed, ReasonTokenForeign, ReasonTokenTampered)
		}
	})
}

// The corpus of FuzzEnvToken: the tiny corpus of internal/testutil (which
// this package's internal tests cannot import).
const (
	fuzzEnvScript = `CREATE TABLE sales (id INTEGER PRIMARY KEY, region TEXT NOT NULL, amount REAL NOT NULL, year INTEGER NOT NULL);
INSERT INTO sales VALUES (1,'West',500,2023),(2,'West',20,2024),(5,'East',900,2024),(7,'North',100,2024),(12,'South',700,2023);`
	fuzzEnvManifest = `{"name": "tiny", "databases": [{"id": "mini", "engine": "sqlite", "script": "mini.sql",
  "knowledge": [{"id": "k-strong", "name": "strong market", "definition": "a region whose 2024 sales total more than 200 dollars"}]}]}`
	fuzzEnvRecords = `{"id":"top-a","avt_id":"top","db":"mini","request":"Which is the top region?","ambiguities":[{"term":"top region","kind":"critical","resolution":"I mean the region with the largest total sales amount.","aliases":["best region"]}],"reference":{"sql":"SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1"}}
{"id":"big","db":"mini","request":"List the big sales of the recent year.","ambiguities":[{"term":"big sales","kind":"critical","resolution":"Sales of 100 dollars or more."},{"term":"recent year","kind":"critical","resolution":"The year 2024."},{"term":"sorted","kind":"non_critical","resolution":"Largest first."}],"reference":{"sql":"SELECT id, amount FROM sales WHERE amount >= 100 AND year = 2024 ORDER BY amount DESC"}}
{"id":"strong","db":"mini","request":"Which regions are a strong market?","ambiguities":[{"term":"strong market","kind":"knowledge","resolution":"A region whose 2024 sales total more than 200 dollars.","knowledge_id":"k-strong"}],"reference":{"sql":["SELECT 1","SELECT region FROM sales WHERE year = 2024 GROUP BY region HAVING SUM(amount) > 200"]}}
{"id":"count","db":"mini","request":"How many sales rows are there?","ambiguities":[],"reference":{"sql":"SELECT COUNT(*) FROM sales"}}
`
)

var fuzzEnvEpoch = time.Unix(1_700_000_000, 0)

func newFuzzEnv(f testing.TB) *Env {
	dir := f.TempDir()
	for name, body := range map[string]string{"corpus.json": fuzzEnvManifest, "mini.sql": fuzzEnvScript, "records.jsonl": fuzzEnvRecords} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { c.Close() })
	s, err := NewSealer(RandomKey())
	if err != nil {
		f.Fatal(err)
	}
	e, err := New(Config{
		Corpora:  []*corpus.Corpus{c},
		Sealer:   s,
		Oracles:  map[pb.OracleType]Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()},
		TokenTTL: time.Hour,
		Now:      func() time.Time { return fuzzEnvEpoch },
	})
	if err != nil {
		f.Fatal(err)
	}
	return e
}

// fuzzEnvSQL are the submissions of FuzzEnvToken (fixed: fuzzing SQLite
// is another target's job).
var fuzzEnvSQL = []string{"SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1", "SELECT COUNT(*) FROM sales", "SELEC nonsense", "SELECT 1"}

// FuzzEnvToken checks how the environment decodes episode tokens
// (Env.open) and steps what it decodes:
//   - arbitrary bytes as a token, even with the server's own header, give
//     a typed token error and never a state;
//   - an arbitrary plaintext sealed under the server's key (a token of
//     this or another server version or configuration sharing the key)
//     gives a typed error (malformed, expired, record changed, or an
//     option this server lacks) or a state of the current version for a
//     served task, whose Step never panics and answers a typed error or a
//     response whose token opens to the same episode;
//   - a state the server builds round-trips through seal and open.
func FuzzEnvToken(f *testing.F) {
	e := newFuzzEnv(f)
	addEnvTokenSeeds(f, e)
	f.Fuzz(func(t *testing.T, plain, raw []byte, act uint8, text string) {
		fuzzArbitraryToken(t, e, raw, act)
		if !fuzzSealedState(t, e, plain, act, text) {
			return
		}
		fuzzRoundTrip(t, e, plain, act, text)
	})
}

// addEnvTokenSeeds adds FuzzEnvToken's seeds: real states, marshaled, and
// their variants.
func addEnvTokenSeeds(f *testing.F, e *Env) {
	var states []*statepb.EpisodeState
	for _, id := range []string{"top-a", "big", "strong", "count"} {
		task, err := e.Task("", id)
		if err != nil {
			f.Fatal(err)
		}
		for _, o := range []*pb.EpisodeOptions{nil, {Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LOOKUP}, {Reward: pb.RewardType_REWARD_TYPE_OUTCOME}} {
			st, err := e.newState(task, o, &history{})
			if err != nil {
				f.Fatal(err)
			}
			states = append(states, st)
		}
	}
	done := proto.Clone(states[0]).(*statepb.EpisodeState)
	done.Phase, done.Status = pb.Phase_PHASE_DONE, pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	asked := proto.Clone(states[3]).(*statepb.EpisodeState)
	asked.Attempted, asked.Budget = 5, -1
	// A head that claims a history the token does not carry.
	claims := proto.Clone(states[3]).(*statepb.EpisodeState)
	claims.Answered, claims.CreditMasks, claims.HistoryBytes = 2, []uint64{^uint64(0), 0}, 80
	llmOracle := proto.Clone(states[1]).(*statepb.EpisodeState)
	llmOracle.Oracle = pb.OracleType_ORACLE_TYPE_LLM
	llmSolver := proto.Clone(states[2]).(*statepb.EpisodeState)
	llmSolver.Solver = pb.Solver_SOLVER_LLM
	expired := proto.Clone(states[0]).(*statepb.EpisodeState)
	expired.IssuedUnix = 0
	states = append(states, done, asked, claims, llmOracle, llmSolver, expired)
	for i, st := range states {
		b, err := proto.Marshal(st)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, []byte(nil), uint8(i), "What do you mean by top region?")
	}
	// Options of a replica configured otherwise: asking needs the LLM
	// oracle, stopping with the LLM solver needs a solver model.
	for _, st := range []*statepb.EpisodeState{llmOracle, llmSolver} {
		b, _ := proto.Marshal(st)
		f.Add(b, []byte(nil), uint8(0x40), "What do you mean by big sales?")
		f.Add(b, []byte(nil), uint8(0x41), "")
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, []byte{tokenVersion, 1, 2, 3, 4, 5}, uint8(1), "")
	f.Add([]byte{8, 1}, bytes.Repeat([]byte{0}, 64), uint8(2), "\xff")
	f.Add([]byte{8, stateVersion, 18, 4, 't', 'i', 'n', 'y', 26, 5, 't', 'o', 'p', '-', 'a'}, []byte{}, uint8(3), "best region?")
	// A state of version 1 (every protocol's fields side by side, a record
	// hash of bytes) and one whose protocol and state message disagree.
	f.Add([]byte{8, 1, 18, 4, 't', 'i', 'n', 'y', 26, 5, 't', 'o', 'p', '-', 'a', 34, 2, 7, 7, 0xa8, 1, 1, 0xb0, 1, 1}, []byte{}, uint8(1), "")
	f.Add([]byte{8, stateVersion, 18, 4, 't', 'i', 'n', 'y', 26, 5, 't', 'o', 'p', '-', 'a', 0xa8, 1, 4, 0xe2, 2, 0}, []byte{}, uint8(0), "a question")
}

// fuzzArbitraryToken: arbitrary bytes as a token (with the server's own
// header when act's high bit says so) are a typed token error.
func fuzzArbitraryToken(t *testing.T, e *Env, raw []byte, act uint8) {
	if act&0x80 != 0 && len(raw) >= headerSize {
		raw = bytes.Clone(raw)
		raw[0] = tokenVersion
		copy(raw[1:1+keyIDSize], e.cfg.Sealer.keyID[:])
	}
	if st, _, _, err := e.open(raw); err == nil {
		t.Fatalf("open accepted %d arbitrary bytes: %v", len(raw), st)
	} else {
		wantTypedTokenError(t, err, "arbitrary token", ReasonTokenMalformed, ReasonTokenForeign, ReasonTokenTampered)
	}

}

// fuzzSealedState seals plain under the server's key and steps it: a
// typed error, or a state of this version whose step is a typed error or
// a response whose token opens to the same episode. It reports whether
// the step succeeded.
func fuzzSealedState(t *testing.T, e *Env, plain []byte, act uint8, text string) bool {
	tok := e.cfg.Sealer.Seal(plain)
	st, _, task, err := e.open(tok)
	if err != nil {
		wantTypedTokenError(t, err, "sealed plaintext", ReasonTokenMalformed, ReasonTokenTampered, ReasonTokenExpired, ReasonRecordChanged, ReasonInvalidOption)
		return false
	}
	if st.Version != stateVersion || task == nil || task.ID != st.RecordId || task.Corpus.Name != st.Corpus {
		t.Fatalf("open gave state %v and task %v", st, task)
	}
	var a *pb.Action
	switch act % 4 {
	case 0:
		a = &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: text}}}
	case 1:
		a = &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}
	case 2:
		a = &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: fuzzEnvSQL[int(act/4)%len(fuzzEnvSQL)]}}}
	default:
		a = &pb.Action{}
	}
	resp, err := e.Step(context.Background(), &pb.StepRequest{Token: tok, Action: a, IncludePrivileged: act&0x40 != 0})
	if err != nil {
		var ee *Error
		if !errors.As(err, &ee) {
			t.Fatalf("Step error %v (%T) is not an *env.Error", err, err)
		}
		return false
	}
	next, nh, ntask, err := e.open(resp.Token)
	if err != nil {
		t.Fatalf("the token of a step does not open: %v", err)
	}
	if err := nh.verify(e.cfg.Sealer, next); err != nil {
		t.Fatalf("the history of a step's token does not open: %v", err)
	}
	if ntask != task || next.Seed != st.Seed || next.IssuedUnix != st.IssuedUnix || next.Answered < st.Answered {
		t.Fatalf("a step changed the episode: %v, then %v", st, next)
	}
	if o := resp.Observation; resp.Done != (next.Phase == pb.Phase_PHASE_DONE) || o.QuestionsRemaining < 0 || o.Phase != next.Phase {
		t.Fatalf("step response %v for state %v", resp, next)
	}
	return true
}

// fuzzRoundTrip: a state the server builds round-trips through seal and
// open.
func fuzzRoundTrip(t *testing.T, e *Env, plain []byte, act uint8, text string) {
	ids := []string{"top-a", "big", "strong", "count"}
	task, err := e.Task("", ids[int(act)%len(ids)])
	if err != nil {
		t.Fatal(err)
	}
	h := &history{}
	base, err := e.newState(task, &pb.EpisodeOptions{Reward: pb.RewardType(act % 3), Solver: pb.Solver(act % 3)}, h)
	if err != nil {
		return // an option this server does not offer
	}
	base.Seed, base.Attempted = uint64(len(plain))<<32|uint64(act), int32(len(text)%8)
	q, r := strings.ToValidUTF8(text, "?"), strings.ToValidUTF8(string(plain), "?")
	h.add(base, q, r, uint64(act))
	if sealed, err := e.seal(base, h); err == nil {
		back, bh, _, err := e.open(sealed)
		if err != nil || !proto.Equal(back, base) {
			t.Fatalf("a state the server sealed opens as %v, %v; want %v", back, err, base)
		}
		qs, err := bh.questions(e.cfg.Sealer, back)
		if err != nil || len(qs) != 1 || qs[0] != (answered{q, r}) {
			t.Fatalf("the history the server sealed opens as %v, %v; want %q, %q", qs, err, q, r)
		}
	}
}

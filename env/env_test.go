package env_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"avtgym/corpus"
	"avtgym/engines"
	. "avtgym/env"
	"avtgym/env/internal/statepb"
	"avtgym/internal/testutil"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

// fakeClock is a settable clock for Config.Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// fakeOracle answers every question with a fixed reply or error.
type fakeOracle struct {
	reply oracle.Reply
	err   error
	calls atomic.Int32
}

func (f *fakeOracle) AskWith(ctx context.Context, rec *corpus.Record, history []oracle.Turn, q string, _ oracle.AskOptions) (oracle.Reply, error) {
	f.calls.Add(1)
	return f.reply, f.err
}

var testEpoch = time.Unix(1_700_000_000, 0)

// loadTiny loads the tiny corpus once per test.
func loadTiny(t *testing.T) *corpus.Corpus {
	t.Helper()
	c, err := corpus.LoadDir(context.Background(), testutil.WriteTiny(t), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newEnv builds an Env over c with the deterministic oracle (unless the
// edit replaces it), a fresh random key (unless one is given) and a fake
// clock.
func mustSealer(t *testing.T, key []byte) *Sealer {
	t.Helper()
	s, err := NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newEnv(t *testing.T, c *corpus.Corpus, key []byte, edit ...func(*Config)) (*Env, *fakeClock) {
	t.Helper()
	if key == nil {
		key = RandomKey()
	}
	s, err := NewSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: testEpoch}
	cfg := Config{
		Corpora: []*corpus.Corpus{c},
		Sealer:  s,
		Oracles: map[pb.OracleType]Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()},
		Now:     clock.Now,
	}
	for _, e := range edit {
		e(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e, clock
}

func withOracle(o Oracle) func(*Config) {
	return func(c *Config) { c.Oracles = map[pb.OracleType]Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: o} }
}

func askAction(text string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: text}}}
}

func stopAction() *pb.Action { return &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}} }

func submitAction(sql string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: sql}}}
}

func u64(n uint64) *uint64 { return &n }

func resetOne(t *testing.T, e *Env, taskID string, opts *pb.EpisodeOptions) *pb.Episode {
	t.Helper()
	resp, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: taskID, Seed: u64(7), Options: opts})
	if err != nil {
		t.Fatalf("Reset %s: %v", taskID, err)
	}
	if len(resp.Episodes) != 1 {
		t.Fatalf("Reset %s: %d episodes", taskID, len(resp.Episodes))
	}
	return resp.Episodes[0]
}

func mustStep(t *testing.T, e *Env, tok []byte, a *pb.Action, priv bool) *pb.StepResponse {
	t.Helper()
	resp, err := e.Step(context.Background(), &pb.StepRequest{Token: tok, Action: a, IncludePrivileged: priv})
	if err != nil {
		t.Fatalf("Step %v: %v", a, err)
	}
	return resp
}

func wantEnvError(t *testing.T, err error, code Code, reason pb.ErrorReason) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *env.Error", err, err)
	}
	if e.Code != code || e.Reason != reason {
		t.Fatalf("error %q: code %d reason %s, want code %d reason %s", e, e.Code, e.Reason, code, reason)
	}
}

func outcomeOpts() *pb.EpisodeOptions {
	return &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}
}

func TestNewRejectsBadConfig(t *testing.T) {
	c := loadTiny(t)
	s, _ := NewSealer(RandomKey())
	det := map[pb.OracleType]Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()}
	for name, cfg := range map[string]Config{
		"no corpus":    {Sealer: s, Oracles: det},
		"no sealer":    {Corpora: []*corpus.Corpus{c}, Oracles: det},
		"no oracle":    {Corpora: []*corpus.Corpus{c}, Sealer: s},
		"two corpora":  {Corpora: []*corpus.Corpus{c, c}, Sealer: s, Oracles: det},
		"nil det orac": {Corpora: []*corpus.Corpus{c}, Sealer: s, Oracles: map[pb.OracleType]Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: nil}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted the configuration", name)
		}
	}
}

func TestTokenTTL(t *testing.T) {
	const ttl = 10 * time.Minute
	e, clock := newEnv(t, loadTiny(t), nil, func(c *Config) { c.TokenTTL = ttl })
	ep := resetOne(t, e, "top-a", nil)

	clock.Set(testEpoch.Add(ttl - time.Second))
	resp := mustStep(t, e, ep.Token, askAction("What do you mean by top region?"), false)
	if resp.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING {
		t.Fatalf("step before the TTL: status %s", resp.Status)
	}

	clock.Set(testEpoch.Add(ttl + time.Second))
	for name, tok := range map[string][]byte{"reset token": ep.Token, "token of a later step": resp.Token} {
		_, err := e.Step(context.Background(), &pb.StepRequest{Token: tok, Action: stopAction()})
		if err == nil {
			t.Fatalf("%s accepted after the TTL", name)
		}
		wantEnvError(t, err, FailedPrecondition, ReasonTokenExpired)
	}

	// Without a TTL tokens never expire.
	e2, clock2 := newEnv(t, loadTiny(t), nil)
	ep2 := resetOne(t, e2, "top-a", nil)
	clock2.Set(testEpoch.Add(100 * 365 * 24 * time.Hour))
	mustStep(t, e2, ep2.Token, stopAction(), false)
}

// openState decodes a token's episode state with the env's sealer.
func openState(t *testing.T, s *Sealer, tok []byte) *statepb.EpisodeState {
	t.Helper()
	plain, err := s.Open(tok)
	if err != nil {
		t.Fatal(err)
	}
	st := &statepb.EpisodeState{}
	if err := proto.Unmarshal(plain, st); err != nil {
		t.Fatal(err)
	}
	return st
}

// openQuestions is a token's answered questions, read from its history.
func openQuestions(t *testing.T, s *Sealer, tok []byte) [][2]string {
	t.Helper()
	qs, err := OpenQuestions(s, tok)
	if err != nil {
		t.Fatal(err)
	}
	return qs
}

// reseal opens a token with the env's own sealer, edits its state and seals
// it again with the same history: a token the server could have issued,
// but with other content.
func reseal(t *testing.T, s *Sealer, tok []byte, edit func(st *statepb.EpisodeState)) []byte {
	t.Helper()
	out, err := ResealState(s, tok, edit)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTokenStateChecks(t *testing.T) {
	key := RandomKey()
	e, _ := newEnv(t, loadTiny(t), key)
	s := mustSealer(t, key)
	ep := resetOne(t, e, "top-a", nil)
	step := func(tok []byte) error {
		_, err := e.Step(context.Background(), &pb.StepRequest{Token: tok, Action: stopAction()})
		return err
	}
	// The untouched token works.
	if err := step(reseal(t, s, ep.Token, func(*statepb.EpisodeState) {})); err != nil {
		t.Fatalf("resealed unchanged state: %v", err)
	}
	for _, v := range []uint32{0, 1, 2, 4, 1 << 31} {
		err := step(reseal(t, s, ep.Token, func(st *statepb.EpisodeState) { st.Version = v }))
		wantEnvError(t, err, FailedPrecondition, ReasonTokenMalformed)
	}
	err := step(reseal(t, s, ep.Token, func(st *statepb.EpisodeState) { st.Corpus = "other" }))
	wantEnvError(t, err, FailedPrecondition, ReasonRecordChanged)
	err = step(reseal(t, s, ep.Token, func(st *statepb.EpisodeState) { st.RecordId = "gone" }))
	wantEnvError(t, err, FailedPrecondition, ReasonRecordChanged)
	err = step(reseal(t, s, ep.Token, func(st *statepb.EpisodeState) { st.RecordHashLo ^= 1 }))
	wantEnvError(t, err, FailedPrecondition, ReasonRecordChanged)
	err = step(reseal(t, s, ep.Token, func(st *statepb.EpisodeState) { st.RecordHashHi, st.RecordHashLo = 0, 0 }))
	wantEnvError(t, err, FailedPrecondition, ReasonRecordChanged)
	// A protocol whose state message is not the one its rules keep, and a
	// protocol this server does not know.
	err = step(reseal(t, s, ep.Token, func(st *statepb.EpisodeState) { st.Protocol = pb.Protocol_PROTOCOL_TIDE_F }))
	wantEnvError(t, err, InvalidArgument, ReasonTokenMalformed)
	err = step(reseal(t, s, ep.Token, func(st *statepb.EpisodeState) {
		st.Protocol, st.Rules = pb.Protocol_PROTOCOL_BIRD_C, nil
	}))
	wantEnvError(t, err, InvalidArgument, ReasonTokenMalformed)
	for _, p := range []pb.Protocol{pb.Protocol_PROTOCOL_UNSPECIFIED, 99} {
		err = step(reseal(t, s, ep.Token, func(st *statepb.EpisodeState) { st.Protocol = p }))
		wantEnvError(t, err, InvalidArgument, ReasonTokenMalformed)
	}

	// A sealed plaintext that is not an episode state.
	err = step(s.Seal([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}))
	wantEnvError(t, err, InvalidArgument, ReasonTokenMalformed)
	// No token at all.
	err = step(nil)
	wantEnvError(t, err, InvalidArgument, ReasonTokenMalformed)
}

// TestOldStateVersionIsRefused: a token sealed by a server of state
// version 1 (every protocol's fields side by side, the record hash as
// bytes) is refused as TOKEN_MALFORMED with a message that names the
// version change, not as a state that does not decode.
func TestOldStateVersionIsRefused(t *testing.T) {
	key := RandomKey()
	e, _ := newEnv(t, loadTiny(t), key)
	var v1 []byte
	v1 = protowire.AppendTag(v1, 1, protowire.VarintType)
	v1 = protowire.AppendVarint(v1, 1) // version 1
	v1 = protowire.AppendTag(v1, 2, protowire.BytesType)
	v1 = protowire.AppendString(v1, "tiny")
	v1 = protowire.AppendTag(v1, 3, protowire.BytesType)
	v1 = protowire.AppendString(v1, "top-a")
	v1 = protowire.AppendTag(v1, 4, protowire.BytesType) // the record hash, as bytes
	v1 = protowire.AppendBytes(v1, bytes.Repeat([]byte{7}, 16))
	v1 = protowire.AppendTag(v1, 21, protowire.VarintType) // protocol
	v1 = protowire.AppendVarint(v1, uint64(pb.Protocol_PROTOCOL_BIRD_C))
	v1 = protowire.AppendTag(v1, 22, protowire.VarintType) // sub-task
	v1 = protowire.AppendVarint(v1, 1)
	v1 = protowire.AppendTag(v1, 27, protowire.BytesType) // phase 1's SQL
	v1 = protowire.AppendString(v1, "SELECT 1")
	v1 = protowire.AppendTag(v1, 34, protowire.BytesType) // BIRD_A's action log
	v1 = protowire.AppendBytes(v1, []byte{1, 5})
	_, err := e.Step(context.Background(), &pb.StepRequest{Token: mustSealer(t, key).Seal(v1), Action: stopAction()})
	wantEnvError(t, err, FailedPrecondition, ReasonTokenMalformed)
	if msg := err.Error(); !strings.Contains(msg, "version 1") || !strings.Contains(msg, "layout changed") {
		t.Errorf("a version 1 token: %q, want a message naming the version change", msg)
	}
}

func TestResetSeeds(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	ctx := context.Background()
	seen := map[uint64]bool{}
	for range 32 {
		resp, err := e.Reset(ctx, &pb.ResetRequest{TaskId: "top-a"})
		if err != nil {
			t.Fatal(err)
		}
		seen[resp.Episodes[0].Seed] = true
	}
	if len(seen) < 31 {
		t.Errorf("32 resets without a seed drew only %d distinct seeds", len(seen))
	}

	// A given seed picks the same task every time; different seeds spread
	// over the corpus.
	tasks := map[string]bool{}
	for s := range uint64(64) {
		var first string
		for range 2 {
			resp, err := e.Reset(ctx, &pb.ResetRequest{Seed: u64(s)})
			if err != nil {
				t.Fatal(err)
			}
			id := resp.Episodes[0].Observation.Task.TaskId
			if first != "" && id != first {
				t.Fatalf("seed %d picked %s, then %s", s, first, id)
			}
			first = id
		}
		tasks[first] = true
	}
	if len(tasks) < 3 {
		t.Errorf("64 seeds picked only %d distinct tasks: %v", len(tasks), tasks)
	}
}

func TestResetGroupSize(t *testing.T) {
	key := RandomKey()
	e, _ := newEnv(t, loadTiny(t), key)
	s := mustSealer(t, key)
	ctx := context.Background()
	resp, err := e.Reset(ctx, &pb.ResetRequest{TaskId: "big", Seed: u64(100), GroupSize: 0})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Episodes) != 1 || resp.Episodes[0].GroupIndex != 0 || resp.Episodes[0].Seed != 100 {
		t.Fatalf("group_size 0: %d episodes, first %v", len(resp.Episodes), resp.Episodes[0])
	}
	resp, err = e.Reset(ctx, &pb.ResetRequest{Seed: u64(100), GroupSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Episodes) != 4 {
		t.Fatalf("group_size 4: %d episodes", len(resp.Episodes))
	}
	for i, ep := range resp.Episodes {
		if ep.GroupIndex != int32(i) || ep.Seed != 100+uint64(i) {
			t.Errorf("member %d: group index %d seed %d", i, ep.GroupIndex, ep.Seed)
		}
		if ep.Observation.Task.TaskId != resp.Episodes[0].Observation.Task.TaskId {
			t.Errorf("member %d is on task %s, member 0 on %s", i, ep.Observation.Task.TaskId, resp.Episodes[0].Observation.Task.TaskId)
		}
		st := openState(t, s, ep.Token)
		if st.Seed != ep.Seed || st.GroupIndex != int32(i) {
			t.Errorf("member %d: sealed seed %d group index %d", i, st.Seed, st.GroupIndex)
		}
	}
	for _, n := range []int32{-1, MaxGroupSize + 1} {
		_, err := e.Reset(ctx, &pb.ResetRequest{TaskId: "big", GroupSize: n})
		wantEnvError(t, err, InvalidArgument, ReasonInvalidOption)
	}
}

func TestStepWithEndedContext(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	ep := resetOne(t, e, "big", outcomeOpts())
	// Equivalent to the reference but not textually equal, so the verifier
	// has to run it.
	const sql = "SELECT id, amount FROM sales WHERE year = 2024 AND amount >= 100 ORDER BY amount DESC"

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	resp, err := e.Step(cancelled, &pb.StepRequest{Token: ep.Token, Action: submitAction(sql)})
	if err == nil || !errors.Is(err, context.Canceled) || resp != nil {
		t.Fatalf("cancelled submit: resp %v, err %v; want no response and context.Canceled", resp, err)
	}
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	resp, err = e.Step(expired, &pb.StepRequest{Token: ep.Token, Action: submitAction(sql)})
	if !errors.Is(err, context.DeadlineExceeded) || resp != nil {
		t.Fatalf("expired submit: resp %v, err %v; want no response and DeadlineExceeded", resp, err)
	}
	// The oracle is cut short too; the step is not turned into an ERROR
	// episode.
	resp, err = e.Step(cancelled, &pb.StepRequest{Token: ep.Token, Action: askAction("What are big sales?")})
	if !errors.Is(err, context.Canceled) || resp != nil {
		t.Fatalf("cancelled ask: resp %v, err %v", resp, err)
	}

	// The token is still good: the retry with a live context is scored.
	resp = mustStep(t, e, ep.Token, submitAction(sql), false)
	if !resp.Done || resp.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || resp.Reward.GetValue() != 1 {
		t.Fatalf("retry: done %v status %s reward %v", resp.Done, resp.Status, resp.Reward)
	}
}

func TestOracleFailureEndsInError(t *testing.T) {
	c := loadTiny(t)
	key := RandomKey()
	broken := &fakeOracle{err: errors.New("endpoint down")}
	e, _ := newEnv(t, c, key, withOracle(broken))
	ep := resetOne(t, e, "top-a", nil)

	resp := mustStep(t, e, ep.Token, askAction("What do you mean by top region?"), true)
	if broken.calls.Load() != 1 {
		t.Fatalf("oracle called %d times", broken.calls.Load())
	}
	if !resp.Done || resp.Status != pb.EpisodeStatus_EPISODE_STATUS_ERROR || resp.Observation.Phase != pb.Phase_PHASE_DONE {
		t.Fatalf("done %v status %s phase %s, want a done ERROR episode", resp.Done, resp.Status, resp.Observation.Phase)
	}
	if resp.Reward != nil {
		t.Fatalf("an ERROR episode was scored: %v", resp.Reward)
	}
	if !strings.Contains(resp.Privileged.GetVerifierReason(), "endpoint down") {
		t.Errorf("privileged reason %q does not carry the oracle's error", resp.Privileged.GetVerifierReason())
	}
	for _, turn := range resp.Observation.Turns {
		if strings.Contains(turn.Text, "endpoint down") {
			t.Errorf("the oracle's error reached the policy: %q", turn.Text)
		}
	}
	// The ERROR token is done.
	_, err := e.Step(context.Background(), &pb.StepRequest{Token: resp.Token, Action: stopAction()})
	wantEnvError(t, err, FailedPrecondition, ReasonEpisodeDone)

	// A replica with the same key and a working oracle continues the
	// episode from the token before the failure.
	good, _ := newEnv(t, c, key)
	resp = mustStep(t, good, ep.Token, askAction("What do you mean by top region?"), false)
	if resp.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || resp.Observation.QuestionsAsked != 1 {
		t.Fatalf("retry on a working oracle: status %s asked %d", resp.Status, resp.Observation.QuestionsAsked)
	}
	if got := resp.Observation.Turns[len(resp.Observation.Turns)-1].Text; got != c.Interpretations("top")[0].Ambiguities[0].Resolution {
		t.Errorf("retry reply %q", got)
	}
}

func TestOracleBadCreditEndsInError(t *testing.T) {
	c := loadTiny(t)
	cases := []struct {
		task    string
		credits []int
		ok      bool
	}{
		{"top-a", []int{0}, true},
		{"big", []int{0, 1, 2}, true},
		{"top-a", []int{-1}, false},
		{"top-a", []int{corpus.MaxAmbiguities}, false},
		{"top-a", []int{1 << 20}, false},
		{"top-a", []int{0, 64}, false},
		// Inside the 64-bit mask, but the record has no such ambiguity.
		{"top-a", []int{1}, false},
		{"big", []int{3}, false},
		{"big", []int{63}, false},
	}
	for _, tc := range cases {
		o := &fakeOracle{reply: oracle.Reply{Text: "a reply", Credits: tc.credits}}
		e, _ := newEnv(t, c, nil, withOracle(o))
		ep := resetOne(t, e, tc.task, nil)
		var resp *pb.StepResponse
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s credits %v: panic %v", tc.task, tc.credits, r)
				}
			}()
			resp = mustStep(t, e, ep.Token, askAction("anything at all?"), true)
		}()
		if tc.ok {
			if resp.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || len(resp.Privileged.GetCredits()) != len(tc.credits) {
				t.Errorf("%s credits %v: status %s credits %v", tc.task, tc.credits, resp.Status, resp.Privileged.GetCredits())
			}
			continue
		}
		if resp.Status != pb.EpisodeStatus_EPISODE_STATUS_ERROR || !resp.Done || resp.Reward != nil {
			t.Errorf("%s credits %v: status %s done %v reward %v, want an unscored ERROR episode", tc.task, tc.credits, resp.Status, resp.Done, resp.Reward)
		}
	}
}

// TestRefusalTurnKind: the answer to a question is a turn of kind REFUSAL
// exactly when the oracle's reply is Refused (or the environment refused
// in its place), whatever its text, and OracleService's AskResponse says
// the same in refused.
func TestRefusalTurnKind(t *testing.T) {
	c := loadTiny(t)
	e, _ := newEnv(t, c, nil)
	for _, tc := range []struct {
		question string
		kind     pb.TurnKind
		text     string // a prefix of the reply
		credits  int
	}{
		{"What are big sales?", pb.TurnKind_TURN_KIND_REPLY, "Sales of 100 dollars or more.", 1},
		{"Could you clarify what you want?", pb.TurnKind_TURN_KIND_REFUSAL, oracle.Refusal, 0},
		{"", pb.TurnKind_TURN_KIND_REFUSAL, "I can't answer that: the question is empty", 0},
		{"big sales \xff?", pb.TurnKind_TURN_KIND_REFUSAL, "I can't answer that: the question ", 0},
	} {
		ep := resetOne(t, e, "big", nil)
		resp := mustStep(t, e, ep.Token, askAction(tc.question), true)
		turns := resp.Observation.Turns
		if len(turns) != 2 || turns[1].Role != pb.Role_ROLE_ORACLE || turns[1].Kind != tc.kind || !strings.HasPrefix(turns[1].Text, tc.text) ||
			len(resp.Privileged.GetCredits()) != tc.credits || resp.Observation.QuestionsAsked != 1 {
			t.Errorf("%q: turns %v credits %v asked %d; want a %s turn %q", tc.question, turns, resp.Privileged.GetCredits(), resp.Observation.QuestionsAsked, tc.kind, tc.text)
		}
		if tc.question == "" || !utf8.ValidString(tc.question) {
			continue // OracleService rejects such a question (INVALID_ARGUMENT)
		}
		r, err := e.Ask(context.Background(), &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: tc.question, IncludePrivileged: true})
		if err != nil || r.Refused != (tc.kind == pb.TurnKind_TURN_KIND_REFUSAL) || r.Reply != turns[1].Text || len(r.Privileged.GetCredits()) != tc.credits {
			t.Errorf("Ask(%q) = %v, %v; want refused %v", tc.question, r, err, tc.kind == pb.TurnKind_TURN_KIND_REFUSAL)
		}
	}
	// The flag decides, not the text.
	for _, tc := range []struct {
		reply oracle.Reply
		kind  pb.TurnKind
	}{
		{oracle.Reply{Text: oracle.Refusal}, pb.TurnKind_TURN_KIND_REPLY},
		{oracle.Reply{Text: "Something informative.", Refused: true}, pb.TurnKind_TURN_KIND_REFUSAL},
	} {
		e, _ := newEnv(t, c, nil, withOracle(&fakeOracle{reply: tc.reply}))
		ep := resetOne(t, e, "big", nil)
		resp := mustStep(t, e, ep.Token, askAction("anything?"), true)
		if turns := resp.Observation.Turns; len(turns) != 2 || turns[1].Kind != tc.kind || turns[1].Text != tc.reply.Text {
			t.Errorf("%+v: turns %v, want kind %s", tc.reply, turns, tc.kind)
		}
		r, err := e.Ask(context.Background(), &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: "anything?"})
		if err != nil || r.Refused != tc.reply.Refused || r.Reply != tc.reply.Text {
			t.Errorf("%+v: Ask = %v, %v", tc.reply, r, err)
		}
	}
}

// TestActionTextLimits: text the policy wrote is scored, never rejected.
// A question that is empty, not valid UTF-8 or over the limit is answered
// with a refusal without calling the oracle (it counts, credits nothing,
// and the history keeps its bounded, valid form); such SQL is a failed
// solution with feedback. Only a request that is wrong as an API call (no
// action) is INVALID_ARGUMENT.
func TestActionTextLimits(t *testing.T) {
	key := RandomKey()
	spy := &spyOracle{Oracle: oracle.Deterministic()}
	e, _ := newEnv(t, loadTiny(t), key, withOracle(spy))
	s := mustSealer(t, key)
	ep := resetOne(t, e, "big", outcomeOpts())
	base := "What are big sales?"
	exact := base + strings.Repeat(" ", MaxQuestionBytes-len(base))
	resp := mustStep(t, e, ep.Token, askAction(exact), true)
	if resp.Observation.QuestionsAsked != 1 || len(resp.Privileged.GetCredits()) != 1 || spy.calls.Load() != 1 {
		t.Fatalf("a 16 KiB question was not put to the oracle: asked %d credits %v", resp.Observation.QuestionsAsked, resp.Privileged.GetCredits())
	}

	badQuestions := map[string]*pb.Action{
		"question over 16 KiB":    askAction(exact + "x"),
		"question invalid UTF-8":  askAction("What are big sales? \xff\xfe"),
		"question truncated rune": askAction("What are big sales \xe2\x82"),
		"question empty":          askAction(""),
		"question blank":          askAction(" \n\t"),
		"ask with nil ask":        {Kind: &pb.Action_Ask_{}},
		"huge invalid question":   askAction(strings.Repeat("big sales \xff", 100_000)),
	}
	for name, a := range badQuestions {
		checkBadQuestion(t, e, s, spy, ep.Token, name, a)
	}
	if got := mustStep(t, e, ep.Token, badQuestions["question over 16 KiB"], false).Observation.Turns[1].Text; !strings.Contains(got, "longer than the limit of 16384 bytes") {
		t.Errorf("the refusal of a long question does not say why: %q", got)
	}

	badSQL := map[string]struct {
		a   *pb.Action
		why string
	}{
		"sql invalid UTF-8":         {submitAction("SELECT '\xc3\x28'"), "not valid UTF-8"},
		"sql over the limit":        {submitAction("SELECT 1" + strings.Repeat(" ", MaxSQLBytes)), "longer than the limit of 262144 bytes"},
		"sql empty":                 {submitAction(""), "empty"},
		"sql blank":                 {submitAction("  \n"), "empty"},
		"submit with nil submit_sq": {&pb.Action{Kind: &pb.Action_SubmitSql_{}}, "empty"},
	}
	for name, tc := range badSQL {
		checkBadSQL(t, e, ep.Token, name, tc.a, tc.why)
	}
	for name, a := range map[string]*pb.Action{"no action kind": {}, "nil action": nil} {
		_, err := e.Step(context.Background(), &pb.StepRequest{Token: ep.Token, Action: a})
		wantEnvError(t, err, InvalidArgument, ReasonInvalidAction)
		_ = name
	}
}

// checkBadQuestion steps a question the policy cannot ask as the first
// question of the episode at tok: the environment refuses it in the
// oracle's place, it counts and credits nothing, and the episode goes on.
func checkBadQuestion(t *testing.T, e *Env, s *Sealer, spy *spyOracle, tok []byte, name string, a *pb.Action) {
	t.Helper()
	spy.calls.Store(0)
	resp := mustStep(t, e, tok, a, true)
	if spy.calls.Load() != 0 {
		t.Errorf("%s: the oracle was called", name)
	}
	if resp.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || resp.Observation.QuestionsAsked != 1 || resp.Observation.QuestionsRemaining != 3 {
		t.Errorf("%s: status %s asked %d remaining %d, want a counted question", name, resp.Status, resp.Observation.QuestionsAsked, resp.Observation.QuestionsRemaining)
	}
	turns := resp.Observation.Turns
	if len(turns) != 2 || turns[1].Role != pb.Role_ROLE_ORACLE || turns[1].Kind != pb.TurnKind_TURN_KIND_REFUSAL || !strings.HasPrefix(turns[1].Text, "I can't answer that: the question ") {
		t.Errorf("%s: turns %v, want the question and a refusal", name, turns)
		return
	}
	if q := turns[0].Text; !utf8.ValidString(q) || len(q) > MaxQuestionBytes {
		t.Errorf("%s: the question turn is %d bytes, valid UTF-8 %v", name, len(q), utf8.ValidString(q))
	}
	if len(resp.Privileged.GetCredits()) != 0 {
		t.Errorf("%s: credited %v", name, resp.Privileged.GetCredits())
	}
	st := openState(t, s, resp.Token)
	qs := openQuestions(t, s, resp.Token)
	if len(qs) != 1 || qs[0][0] != turns[0].Text || qs[0][1] != turns[1].Text || st.Answered != 1 || st.CreditMasks[0] != 0 {
		t.Errorf("%s: the token keeps %v, masks %v", name, qs, st.CreditMasks)
	}
	// The episode goes on: it ends with a reward that counts the question.
	end := mustStep(t, e, resp.Token, submitAction("SELECT 1"), false)
	if !end.Done || end.Reward == nil {
		t.Errorf("%s: the episode did not end normally: %v", name, end)
	}
}

// checkBadSQL steps SQL the policy cannot submit: a failed solution whose
// feedback and reason say why.
func checkBadSQL(t *testing.T, e *Env, tok []byte, name string, a *pb.Action, why string) {
	t.Helper()
	resp := mustStep(t, e, tok, a, true)
	if !resp.Done || resp.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || resp.Reward.GetValue() != 0 || resp.Reward.GetComponents()["outcome"] != 0 {
		t.Errorf("%s: done %v status %s reward %v, want a failed solution", name, resp.Done, resp.Status, resp.Reward)
		return
	}
	turns := resp.Observation.Turns
	if len(turns) != 2 || turns[0].Kind != pb.TurnKind_TURN_KIND_SQL || turns[1].Kind != pb.TurnKind_TURN_KIND_FEEDBACK || !strings.Contains(turns[1].Text, why) {
		t.Errorf("%s: turns %v, want the SQL and feedback saying %q", name, turns, why)
		return
	}
	if !utf8.ValidString(turns[0].Text) || len(turns[0].Text) > MaxSQLBytes {
		t.Errorf("%s: the SQL turn is %d bytes, valid UTF-8 %v", name, len(turns[0].Text), utf8.ValidString(turns[0].Text))
	}
	if !strings.Contains(resp.Privileged.GetVerifierReason(), why) {
		t.Errorf("%s: verifier reason %q", name, resp.Privileged.GetVerifierReason())
	}
}

// spyOracle counts the questions put to an oracle.
type spyOracle struct {
	Oracle
	calls atomic.Int32
}

func (s *spyOracle) AskWith(ctx context.Context, rec *corpus.Record, history []oracle.Turn, q string, opt oracle.AskOptions) (oracle.Reply, error) {
	s.calls.Add(1)
	return s.Oracle.AskWith(ctx, rec, history, q, opt)
}

// TestLongRepliesAreCut: whatever the oracle replies, the observation and
// the token keep at most MaxReplyBytes of it, cut at a rune boundary and
// marked.
func TestLongRepliesAreCut(t *testing.T) {
	key := RandomKey()
	long := strings.Repeat("réponse ", 10_000) // 90 KB of two-byte runes and spaces
	e, _ := newEnv(t, loadTiny(t), key, withOracle(&fakeOracle{reply: oracle.Reply{Text: long, Credits: []int{0}, Action: oracle.Action{Kind: oracle.ActionLabeled, Arg: strings.Repeat("a", 100_000)}}}))
	ep := resetOne(t, e, "big", nil)
	resp := mustStep(t, e, ep.Token, askAction("What are big sales?"), true)
	reply := resp.Observation.Turns[1].Text
	if len(reply) > MaxReplyBytes || !utf8.ValidString(reply) || !strings.HasSuffix(reply, TruncationMarker) || !strings.HasPrefix(long, strings.TrimSuffix(reply, TruncationMarker)) {
		t.Fatalf("the reply is %d bytes (valid %v), ends %q", len(reply), utf8.ValidString(reply), reply[max(0, len(reply)-20):])
	}
	if len(reply) < MaxReplyBytes-8 {
		t.Errorf("the reply was cut to %d bytes, far below the limit", len(reply))
	}
	if a := resp.Privileged.GetOracleAction(); len(a) > MaxReplyBytes {
		t.Errorf("the oracle action is %d bytes", len(a))
	}
	qs := openQuestions(t, mustSealer(t, key), resp.Token)
	if qs[0][1] != reply {
		t.Errorf("the token keeps a %d-byte reply, the observation %d bytes", len(qs[0][1]), len(reply))
	}
	if len(resp.Token) > TokenBound(len("tiny"), len("big")) || len(resp.Token) > 2*MaxReplyBytes {
		t.Errorf("the token is %d bytes", len(resp.Token))
	}
}

// TestOpenRejectsLongTokens: a token longer than any this server issues is
// malformed, before it is decrypted (it would otherwise fail
// authentication).
func TestOpenRejectsLongTokens(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	ep := resetOne(t, e, "big", nil)
	long := append(bytes.Clone(ep.Token), make([]byte, e.MaxTokenBytes()+1-len(ep.Token))...)
	_, err := e.Step(context.Background(), &pb.StepRequest{Token: long, Action: stopAction()})
	wantEnvError(t, err, InvalidArgument, ReasonTokenMalformed)
	var ee *Error
	if errors.As(err, &ee) && !strings.Contains(ee.Msg, "longer than any token") {
		t.Errorf("message %q", ee.Msg)
	}
	// One byte shorter, the same bytes fail authentication instead.
	_, err = e.Step(context.Background(), &pb.StepRequest{Token: long[:len(long)-1], Action: stopAction()})
	wantEnvError(t, err, InvalidArgument, ReasonTokenTampered)
	if e.MaxTokenBytes() < TokenBound(1<<10, 1<<10) {
		t.Errorf("MaxTokenBytes %d is below the identifier allowance's bound", e.MaxTokenBytes())
	}
}

// TestResetPlanSize: the planned size bounds the built response, closely.
func TestResetPlanSize(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	for _, id := range []string{"top-a", "big", "strong", "count"} {
		for _, n := range []int32{0, 1, 2, 17, 300, MaxGroupSize} {
			for _, priv := range []bool{false, true} {
				for _, sd := range []*uint64{nil, u64(0), u64(math.MaxUint64 - 5)} {
					req := &pb.ResetRequest{TaskId: id, GroupSize: n, IncludePrivileged: priv, Seed: sd}
					p, err := e.PlanReset(req)
					if err != nil {
						t.Fatal(err)
					}
					resp, err := e.BuildReset(p)
					if err != nil {
						t.Fatal(err)
					}
					got := proto.Size(resp)
					if got > p.Size || p.Size-got > p.Episodes*32 {
						t.Errorf("%s group %d priv %v seed %v: built %d bytes, planned %d", id, n, priv, sd, got, p.Size)
					}
				}
			}
		}
	}
}

func TestStrongMultiStatementReference(t *testing.T) {
	c := loadTiny(t)
	e, _ := newEnv(t, c, nil)
	strong, _ := c.Task("strong")
	if !strings.Contains(strong.ReferenceSQL, ";") {
		t.Fatalf("test assumption: strong's reference %q is not multi-statement", strong.ReferenceSQL)
	}
	for _, tc := range []struct {
		sql  string
		want float64
	}{
		{"SELECT region FROM sales WHERE year = 2024 GROUP BY region HAVING SUM(amount) > 200", 1},
		{"SELECT region FROM sales WHERE year = 2024 GROUP BY region HAVING SUM(amount) >= 200 ORDER BY region", 1},
		{strong.ReferenceSQL, 1},
		{"SELECT region FROM sales GROUP BY region HAVING SUM(amount) > 200", 0},
		{"SELECT 1", 0},
	} {
		ep := resetOne(t, e, "strong", outcomeOpts())
		resp := mustStep(t, e, ep.Token, submitAction(tc.sql), true)
		if !resp.Done || resp.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || resp.Reward.GetValue() != tc.want {
			t.Errorf("%q: done %v status %s reward %v (%s), want %v", tc.sql, resp.Done, resp.Status, resp.Reward, resp.Privileged.GetVerifierReason(), tc.want)
		}
	}
	// The lookup solver submits the joined reference and succeeds once
	// the dialogue revealed the knowledge.
	ep := resetOne(t, e, "strong", &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LOOKUP})
	resp := mustStep(t, e, ep.Token, askAction("What is a strong market?"), false)
	resp = mustStep(t, e, resp.Token, stopAction(), true)
	if !resp.Done || resp.Reward.GetValue() != 1 || resp.Privileged.GetSolverSql() != strong.ReferenceSQL {
		t.Errorf("lookup on strong: done %v reward %v solver SQL %q (%s)", resp.Done, resp.Reward, resp.Privileged.GetSolverSql(), resp.Privileged.GetVerifierReason())
	}
}

func TestQuantitiesMirrorsState(t *testing.T) {
	c := loadTiny(t)
	big, _ := c.Task("big")
	st := &statepb.EpisodeState{
		Attempted:   4,
		Answered:    4,
		CreditMasks: []uint64{0b011, 0, 0b100, 0},
	}
	q := Quantities(big, st)
	if !slices.Equal(q.Counted, []int{0, 1}) {
		t.Errorf("Counted %v", q.Counted)
	}
	if q.Attempted != 4 {
		t.Errorf("Attempted %d", q.Attempted)
	}
	want := [][]int{{0, 1}, {}, {2}, {}}
	if len(q.Credits) != len(want) {
		t.Fatalf("Credits %v", q.Credits)
	}
	for i := range want {
		if !slices.Equal(q.Credits[i], want[i]) {
			t.Errorf("Credits[%d] = %v, want %v", i, q.Credits[i], want[i])
		}
	}
	if q.Outcome != nil {
		t.Errorf("unverified state has outcome %v", *q.Outcome)
	}
	for _, ok := range []bool{false, true} {
		st.Verified, st.Outcome = true, ok
		if q := Quantities(big, st); q.Outcome == nil || *q.Outcome != ok {
			t.Errorf("verified %v: outcome %v", ok, q.Outcome)
		}
	}

	// Through real steps: the sealed state and Quantities agree with the
	// observation.
	key := RandomKey()
	e, _ := newEnv(t, c, key)
	ep := resetOne(t, e, "big", nil)
	r := mustStep(t, e, ep.Token, askAction("Which big sales, and which recent year?"), false)
	r = mustStep(t, e, r.Token, askAction("How are they sorted?"), false)
	r = mustStep(t, e, r.Token, askAction("What is the weather like?"), false)
	q = Quantities(big, openState(t, mustSealer(t, key), r.Token))
	if q.Attempted != 3 || len(q.Credits) != 3 || int(r.Observation.QuestionsAsked) != len(q.Credits) {
		t.Fatalf("after 3 asks: %+v, observation asked %d", q, r.Observation.QuestionsAsked)
	}
	for i, w := range [][]int{{0, 1}, {2}, {}} {
		if !slices.Equal(q.Credits[i], w) {
			t.Errorf("question %d credits %v, want %v", i, q.Credits[i], w)
		}
	}
}

func TestPublicViewHasNoPrivilegedText(t *testing.T) {
	c := loadTiny(t)
	e, _ := newEnv(t, c, nil)
	if len(c.Tasks) != 5 {
		t.Fatalf("tiny corpus has %d tasks", len(c.Tasks))
	}
	for _, task := range c.Tasks {
		view := PublicView(task)
		if !proto.Equal(view, e.View(task)) {
			t.Errorf("%s: Env.View differs from PublicView", task.ID)
		}
		viewBytes, err := proto.Marshal(view)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: task.ID})
		if err != nil {
			t.Fatal(err)
		}
		obsBytes, err := proto.Marshal(resp.Episodes[0].Observation)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Episodes[0].Privileged != nil {
			t.Errorf("%s: reset without include_privileged has privileged data", task.ID)
		}
		var secrets []string
		for _, a := range task.Ambiguities {
			secrets = append(secrets, a.Resolution, a.SQLSnippet)
		}
		secrets = append(secrets, task.Reference.SQL...)
		secrets = append(secrets, task.ReferenceSQL, task.Interpretation)
		masked := map[string]bool{}
		for _, a := range task.Ambiguities {
			if a.KnowledgeID != "" {
				masked[a.KnowledgeID] = true
			}
		}
		for _, k := range task.DB.Spec.Knowledge {
			if masked[k.ID] {
				secrets = append(secrets, k.Definition)
			}
		}
		for _, s := range secrets {
			if strings.TrimSpace(s) == "" {
				continue
			}
			if bytes.Contains(viewBytes, []byte(s)) {
				t.Errorf("%s: the public view contains %q", task.ID, s)
			}
			if bytes.Contains(obsBytes, []byte(s)) {
				t.Errorf("%s: the reset observation contains %q", task.ID, s)
			}
		}
		if view.Request != task.Request || view.TaskId != task.ID {
			t.Errorf("%s: view request %q", task.ID, view.Request)
		}
	}
}

func TestResetOptions(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	i32 := func(n int32) *int32 { return &n }
	for name, o := range map[string]*pb.EpisodeOptions{
		"unknown reward":    {Reward: pb.RewardType(99)},
		"unknown solver":    {Solver: pb.Solver(99)},
		"missing oracle":    {Oracle: pb.OracleType(99)},
		"extra -1":          {ExtraQuestions: i32(-1)},
		"extra 65":          {ExtraQuestions: i32(65)},
		"zero budget -1":    {ZeroAmbiguityBudget: i32(-1)},
		"zero budget 65":    {ZeroAmbiguityBudget: i32(65)},
		"extra huge":        {ExtraQuestions: i32(1 << 30)},
		"zero budget huge":  {ZeroAmbiguityBudget: i32(-1 << 30)},
		"bad after a valid": {Reward: pb.RewardType_REWARD_TYPE_OUTCOME, ExtraQuestions: i32(-5)},
	} {
		_, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: "big", Options: o})
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		wantEnvError(t, err, InvalidArgument, ReasonInvalidOption)
	}
	for _, tc := range []struct {
		task string
		o    *pb.EpisodeOptions
		want int32
	}{
		{"big", nil, 2 + DefaultExtraQuestions}, // two counted ambiguities, the non-critical one is not
		{"big", &pb.EpisodeOptions{ExtraQuestions: i32(0)}, 2},
		{"big", &pb.EpisodeOptions{ExtraQuestions: i32(64)}, 66},
		{"big", &pb.EpisodeOptions{ZeroAmbiguityBudget: i32(5)}, 2 + DefaultExtraQuestions},
		{"count", nil, DefaultZeroAmbiguityBudget},
		{"count", &pb.EpisodeOptions{ZeroAmbiguityBudget: i32(3), ExtraQuestions: i32(9)}, 3},
	} {
		ep := resetOne(t, e, tc.task, tc.o)
		if ep.Observation.QuestionBudget != tc.want || ep.Observation.QuestionsRemaining != tc.want {
			t.Errorf("%s %v: budget %d remaining %d, want %d", tc.task, tc.o, ep.Observation.QuestionBudget, ep.Observation.QuestionsRemaining, tc.want)
		}
	}
}

// busyEngine answers every query with KindBusy: a saturated verifier.
type busyEngine struct{ sqlexec.Engine }

func (busyEngine) Query(context.Context, string, sqlexec.Limits) (*sqlexec.Result, error) {
	return nil, sqlexec.Errorf(sqlexec.KindBusy, nil, "no slot")
}

// TestVerifierBusyIsCounted: a step the verifier cannot serve for lack of
// a slot is RESOURCE_EXHAUSTED / VERIFIER_BUSY, retryable with the same
// token, and counted (the avtgym_sql_busy_total metric reads the count).
func TestVerifierBusyIsCounted(t *testing.T) {
	c := loadTiny(t)
	e, _ := newEnv(t, c, nil)
	var task *corpus.Task
	for _, tk := range c.Tasks {
		if !tk.Stateful() {
			task = tk
			break
		}
	}
	resp, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: task.ID, Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
	if err != nil {
		t.Fatal(err)
	}
	ep := resp.GetEpisodes()[0]
	real := task.DB.Engine
	task.DB.Engine = busyEngine{real}
	for i := range 3 {
		_, err := e.Step(context.Background(), &pb.StepRequest{Token: ep.GetToken(), Action: submitAction("SELECT 42")})
		var ee *Error
		if !errors.As(err, &ee) || ee.Reason != ReasonVerifierBusy || !ee.Retryable {
			t.Fatalf("step %d: %v, want a retryable VERIFIER_BUSY", i, err)
		}
		if n := e.VerifierBusy(); n != int64(i+1) {
			t.Errorf("after %d busy steps VerifierBusy is %d", i+1, n)
		}
	}
	task.DB.Engine = real
	if r, err := e.Step(context.Background(), &pb.StepRequest{Token: ep.GetToken(), Action: submitAction("SELECT 42")}); err != nil || !r.GetDone() {
		t.Errorf("the same token once the verifier is free: %v, %v", r, err)
	}
	if n := e.VerifierBusy(); n != 3 {
		t.Errorf("VerifierBusy %d after a served step, want 3", n)
	}
}

package env_test

// Hostile input against the LLM parts of an episode and OracleService.Ask:
// huge model replies, questions and dialogues too long for a model's
// context, oversized or malformed Ask histories. The model endpoints are
// fakes (httptest servers speaking the OpenAI chat API); everything else is
// real.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"avtgym/corpus"
	"avtgym/engines"
	. "avtgym/env"
	"avtgym/internal/fakellm"
	"avtgym/internal/testutil"
	"avtgym/llm"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
)

// hModel is a fake chat endpoint: answer gets the system and the last
// user message and returns an HTTP status and either a content (encoded
// into a completion body) or, when raw is not nil, the whole body. A
// request without a positive max_tokens fails the test.
type hModel struct {
	*httptest.Server
	calls  atomic.Int64
	noMax  atomic.Int64 // requests without a positive max_tokens
	mu     sync.Mutex
	users  []string
	answer func(system, user string) (status int, content string, raw []byte)
}

func newHModel(t *testing.T, answer func(system, user string) (int, string, []byte)) *hModel {
	t.Helper()
	m := &hModel{answer: answer}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages  []llm.Message `json:"messages"`
			MaxTokens *int          `json:"max_tokens"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) < 2 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		m.calls.Add(1)
		if req.MaxTokens == nil || *req.MaxTokens <= 0 {
			m.noMax.Add(1)
		}
		system, user := req.Messages[0].Content, req.Messages[len(req.Messages)-1].Content
		m.mu.Lock()
		m.users = append(m.users, user)
		m.mu.Unlock()
		status, content, raw := m.answer(system, user)
		w.Header().Set("Content-Type", "application/json")
		if status != http.StatusOK {
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": content}})
			w.WriteHeader(status)
			w.Write(b)
			return
		}
		if raw == nil {
			raw, _ = json.Marshal(map[string]any{
				"model":   "fake",
				"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": content}}},
				"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5},
			})
		}
		w.Write(raw)
	}))
	t.Cleanup(func() {
		m.Close()
		if n := m.noMax.Load(); n > 0 {
			t.Errorf("%d of %d requests had no max_tokens", n, m.calls.Load())
		}
	})
	return m
}

func (m *hModel) userMessages() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.users...)
}

const hOverflow = "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens."

// hMatch answers the oracle's stage 1 by the term the question names.
func hMatch(user string) string {
	q := fakellm.Question(user)
	for _, term := range []string{"big sales", "recent year", "top region", "strong market"} {
		if strings.Contains(q, term) {
			return `{"action": "labeled", "term": "` + term + `"}`
		}
	}
	return `{"action": "unanswerable"}`
}

func isMatch(system string) bool { return strings.Contains(system, "CLASSIFY") }

func hClient(t *testing.T, m *hModel, edit func(*llm.Config)) *llm.Client {
	t.Helper()
	cfg := llm.Config{BaseURL: m.URL + "/v1", Model: "fake", MaxRetries: -1, Timeout: 10 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	c, err := llm.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func hLoad(t *testing.T) *corpus.Corpus {
	t.Helper()
	c, err := corpus.LoadDir(context.Background(), testutil.WriteTiny(t), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// hEnv builds an Env over c with the deterministic oracle, the LLM
// oracles on oc (when not nil) and the LLM solver on sc (when not nil).
func hEnv(t *testing.T, c *corpus.Corpus, oc, sc *llm.Client) *Env {
	t.Helper()
	s, err := NewSealer(RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Corpora: []*corpus.Corpus{c},
		Sealer:  s,
		Oracles: map[pb.OracleType]Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()},
	}
	if oc != nil {
		schemas := map[*corpus.Record]string{}
		for _, t := range c.Tasks {
			schemas[t.Record] = t.DB.Schema
		}
		schema := func(r *corpus.Record) string { return schemas[r] }
		unfiltered := oracle.NewLLM(oc, oracle.LLMOptions{Schema: schema})
		cfg.Oracles[pb.OracleType_ORACLE_TYPE_LLM] = unfiltered.Oracle()
		scoped := oracle.NewLLM(oc, oracle.LLMOptions{Scoped: true, Schema: schema})
		cfg.Oracles[pb.OracleType_ORACLE_TYPE_LLM_SCOPED] = scoped.Oracle()
		cfg.Oracles[pb.OracleType_ORACLE_TYPE_HYBRID] = oracle.Hybrid(unfiltered)
		cfg.Oracles[pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED] = oracle.Hybrid(scoped)
	}
	if sc != nil {
		cfg.LLMSolver = NewLLMSolver(sc)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func hReset(t *testing.T, e *Env, task string, opts *pb.EpisodeOptions) []byte {
	t.Helper()
	r, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: task, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	return r.Episodes[0].Token
}

func hStep(t *testing.T, e *Env, tok []byte, a *pb.Action) *pb.StepResponse {
	t.Helper()
	r, err := e.Step(context.Background(), &pb.StepRequest{Token: tok, Action: a, IncludePrivileged: true})
	if err != nil {
		t.Fatalf("Step: %v", err)
	}
	return r
}

func hAsk(q string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: q}}}
}

func hStop() *pb.Action { return &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}} }

var llmOracles = []pb.OracleType{pb.OracleType_ORACLE_TYPE_LLM, pb.OracleType_ORACLE_TYPE_LLM_SCOPED, pb.OracleType_ORACLE_TYPE_HYBRID, pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED}

// lastReply is the text of the response's last oracle turn.
func lastReply(r *pb.StepResponse) string {
	return lastOracleTurn(r).GetText()
}

// lastOracleTurn is the response's last oracle turn (nil if none).
func lastOracleTurn(r *pb.StepResponse) *pb.Turn {
	turns := r.GetObservation().GetTurns()
	for i := len(turns) - 1; i >= 0; i-- {
		if turns[i].GetRole() == pb.Role_ROLE_ORACLE {
			return turns[i]
		}
	}
	return nil
}

// TestHugeOracleRepliesBounded: a model that ignores max_tokens and
// answers 20 MB: the server does not read (nor allocate) the 20 MB, the
// reply cut to the client's limit is never served (it is not the model's
// whole answer): the draft is regenerated, then the deterministic text for
// the credit is served, and a step response stays small.
func TestHugeOracleRepliesBounded(t *testing.T) {
	huge := strings.Repeat("I mean it. ", (20<<20)/11)
	body, _ := json.Marshal(map[string]any{
		"model":   "fake",
		"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": huge}}},
	})
	m := newHModel(t, func(system, user string) (int, string, []byte) {
		if isMatch(system) {
			return 200, hMatch(user), nil
		}
		return 200, "", body
	})
	e := hEnv(t, hLoad(t), hClient(t, m, nil), nil)
	tok := hReset(t, e, "big", &pb.EpisodeOptions{Oracle: pb.OracleType_ORACLE_TYPE_LLM})
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var resps []*pb.StepResponse
	for _, q := range []string{"What are big sales?", "Which is the recent year?"} {
		r := hStep(t, e, tok, hAsk(q))
		resps = append(resps, r)
		tok = r.Token
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("two steps allocated %d bytes", alloc)
	}
	for i, r := range resps {
		reply := lastReply(r)
		if r.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || len(r.Privileged.GetCredits()) != 1 {
			t.Fatalf("step %d: status %s, credits %v", i, r.Status, r.Privileged.GetCredits())
		}
		want := []string{"Sales of 100 dollars or more.", "The year 2024."}[i]
		if reply != want || strings.Contains(reply, "I mean it.") || !utf8.ValidString(reply) {
			t.Errorf("step %d: reply of %d bytes %.80q, want the deterministic %q", i, len(reply), reply, want)
		}
		if n := proto.Size(r); n > 4*llm.DefaultMaxReplyBytes+64<<10 {
			t.Errorf("step %d: response of %d bytes", i, n)
		}
	}
}

// TestLongQuestionIsScoredNotError: a 16 KB question that overflows the
// oracle's context gets the refusal (asked, unanswerable(), no credit);
// the episode goes on and is scored — for every LLM oracle, whether the
// overflow was estimated before the call or reported by the endpoint.
func TestLongQuestionIsScoredNotError(t *testing.T) {
	c := hLoad(t)
	task, _ := c.Task("big")
	q := "What are big sales? " + strings.Repeat("Tell me everything. ", 15900/20)
	m0, r0 := oracle.BaseContextTokens(task.Record, task.DB.Schema, false)
	for _, mode := range []string{"estimated", "reported"} {
		m := newHModel(t, func(system, user string) (int, string, []byte) {
			if mode == "reported" && len(user) > 8000 {
				return http.StatusBadRequest, hOverflow, nil
			}
			if isMatch(system) {
				return 200, hMatch(user), nil
			}
			return 200, "Sales of at least 100 dollars.", nil
		})
		client := hClient(t, m, func(cfg *llm.Config) {
			if mode == "estimated" {
				cfg.ContextTokens = max(m0, r0) + 500
			}
		})
		e := hEnv(t, c, client, nil)
		for _, o := range llmOracles {
			tok := hReset(t, e, "big", &pb.EpisodeOptions{Oracle: o, Reward: pb.RewardType_REWARD_TYPE_QUESTION_F1})
			r := hStep(t, e, tok, hAsk(q))
			if r.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || r.Done {
				t.Fatalf("%s %s: status %s: %s", mode, o, r.Status, r.Privileged.GetVerifierReason())
			}
			if len(r.Privileged.GetCredits()) != 0 || r.Privileged.GetOracleAction() != "unanswerable()" || lastReply(r) != oracle.Refusal || lastOracleTurn(r).GetKind() != pb.TurnKind_TURN_KIND_REFUSAL {
				t.Errorf("%s %s: credits %v action %q reply %q", mode, o, r.Privileged.GetCredits(), r.Privileged.GetOracleAction(), lastReply(r))
			}
			if r.Observation.GetQuestionsAsked() != 1 {
				t.Errorf("%s %s: %d questions counted, want 1", mode, o, r.Observation.GetQuestionsAsked())
			}
			// The episode goes on. The long question stays in the dialogue.
			// The matcher never reads the dialogue, so the hybrids credit
			// the next question; the LLM responders read it, so their next
			// prompt overflows too (the dialogue is the policy's) and the
			// match is withdrawn: scored as two imprecise questions.
			hybrid := o == pb.OracleType_ORACLE_TYPE_HYBRID || o == pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED
			r = hStep(t, e, r.Token, hAsk("What are big sales?"))
			if wantCredits := map[bool]int{true: 1}[hybrid]; r.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || (lastReply(r) == oracle.Refusal) == hybrid || len(r.Privileged.GetCredits()) != wantCredits {
				t.Errorf("%s %s: the next question: status %s credits %v", mode, o, r.Status, r.Privileged.GetCredits())
			}
			r = hStep(t, e, r.Token, hStop())
			comp := r.Reward.GetComponents()
			want := map[bool]float64{true: 0.5}[hybrid]
			if r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.Reward == nil || comp["precision"] != want || comp["recall"] != want {
				t.Errorf("%s %s: end: status %s reward %v", mode, o, r.Status, r.Reward)
			}
			if _, ok := comp["precision"]; !ok {
				t.Errorf("%s %s: precision undefined: the questions were not counted", mode, o)
			}
		}
		// Without the long question, the same oracle credits the fair one.
		tok := hReset(t, e, "big", &pb.EpisodeOptions{Oracle: pb.OracleType_ORACLE_TYPE_LLM})
		if r := hStep(t, e, tok, hAsk("What are big sales?")); len(r.Privileged.GetCredits()) != 1 {
			t.Errorf("%s: a fair question: credits %v", mode, r.Privileged.GetCredits())
		}
	}
}

// TestRecordTooLongForTheOracleIsError: a record whose own prompt does not
// fit the oracle's context is the environment's failure: ERROR, unscored.
func TestRecordTooLongForTheOracleIsError(t *testing.T) {
	m := newHModel(t, func(system, user string) (int, string, []byte) { return 200, hMatch(user), nil })
	e := hEnv(t, hLoad(t), hClient(t, m, func(cfg *llm.Config) { cfg.ContextTokens = 400 }), nil)
	for _, o := range llmOracles {
		tok := hReset(t, e, "big", &pb.EpisodeOptions{Oracle: o})
		r := hStep(t, e, tok, hAsk("What are big sales?"))
		if r.Status != pb.EpisodeStatus_EPISODE_STATUS_ERROR || r.Reward != nil || !strings.Contains(r.Privileged.GetVerifierReason(), "big") {
			t.Errorf("%s: status %s reason %q", o, r.Status, r.Privileged.GetVerifierReason())
		}
	}
	if m.calls.Load() != 0 {
		t.Errorf("%d model calls, want none (estimated)", m.calls.Load())
	}
}

// solverSQLFor answers the solver like a model that reads the dialogue.
func solverSQLFor(user string) string {
	if strings.Contains(user, "100 dollars or more") {
		return `{"sql": "SELECT id, amount FROM sales WHERE amount >= 100 AND year = 2024 ORDER BY amount DESC"}`
	}
	return `{"sql": "SELECT id, amount FROM sales"}`
}

// TestSolverDialogueOverflowIsAFailedSolution: a dialogue too long for the
// solver's context is a failed solution (outcome 0, scored), whether the
// overflow is estimated or reported by the endpoint; the task's own prompt
// not fitting is ERROR.
func TestSolverDialogueOverflowIsAFailedSolution(t *testing.T) {
	c := hLoad(t)
	task, _ := c.Task("big")
	base := SolverBaseTokens(task, 0, 0)
	long := "What are big sales? " + strings.Repeat("Explain it at length. ", 15000/22)
	opts := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LLM}
	play := func(e *Env, questions ...string) *pb.StepResponse {
		tok := hReset(t, e, "big", opts)
		for _, q := range questions {
			tok = hStep(t, e, tok, hAsk(q)).Token
		}
		return hStep(t, e, tok, hStop())
	}
	for _, mode := range []string{"estimated", "reported"} {
		m := newHModel(t, func(system, user string) (int, string, []byte) {
			if mode == "reported" && len(user) > 10000 {
				return http.StatusBadRequest, hOverflow, nil
			}
			return 200, solverSQLFor(user), nil
		})
		e := hEnv(t, c, nil, hClient(t, m, func(cfg *llm.Config) {
			if mode == "estimated" {
				cfg.ContextTokens = base + 1000
			}
		}))
		// A short dialogue fits: the solver reads it and succeeds.
		if r := play(e, "What are big sales?", "Which is the recent year?"); r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.Reward.GetValue() != 1 {
			t.Fatalf("%s: short dialogue: status %s reward %v: %s", mode, r.Status, r.Reward, r.Privileged.GetVerifierReason())
		}
		calls := m.calls.Load()
		// A long one does not: a failed solution, scored.
		r := play(e, long, long)
		if r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.Reward == nil || r.Reward.GetValue() != 0 ||
			r.Reward.GetComponents()["outcome"] != 0 || !strings.Contains(r.Privileged.GetVerifierReason(), "no SQL") {
			t.Errorf("%s: long dialogue: status %s reward %v reason %q", mode, r.Status, r.Reward, r.Privileged.GetVerifierReason())
		}
		users := m.userMessages()[calls:]
		switch mode {
		case "estimated":
			if len(users) != 0 {
				t.Errorf("estimated: %d model calls, want none", len(users))
			}
		case "reported":
			if len(users) != 2 || !strings.Contains(users[1], "No clarifying questions were asked") {
				t.Errorf("reported: %d calls, want the call and one probe without the dialogue", len(users))
			}
		}
	}
	// The task's own prompt does not fit: ERROR, whoever detects it.
	for _, mode := range []string{"estimated", "reported"} {
		m := newHModel(t, func(system, user string) (int, string, []byte) { return http.StatusBadRequest, hOverflow, nil })
		e := hEnv(t, c, nil, hClient(t, m, func(cfg *llm.Config) {
			if mode == "estimated" {
				cfg.ContextTokens = 300
			}
		}))
		for _, qs := range [][]string{nil, {"What are big sales?"}} {
			r := play(e, qs...)
			if r.Status != pb.EpisodeStatus_EPISODE_STATUS_ERROR || r.Reward != nil || !strings.Contains(r.Privileged.GetVerifierReason(), "big") {
				t.Errorf("%s, %d questions: status %s reason %q", mode, len(qs), r.Status, r.Privileged.GetVerifierReason())
			}
		}
	}
}

// TestSolverRunawayReplies: SQL longer than the environment accepts, and
// SQL cut by the reply limit, are failed solutions; a complete JSON answer
// before the cut is still read.
func TestSolverRunawayReplies(t *testing.T) {
	c := hLoad(t)
	task, _ := c.Task("big")
	for name, tc := range map[string]struct {
		content  string
		maxReply int
		want     string
	}{
		"over 256 KiB":     {`{"sql": "SELECT 1 -- ` + strings.Repeat("x", 300<<10) + `"}`, 1 << 20, ""},
		"cut bare SQL":     {"SELECT id, amount FROM sales WHERE amount >= 100 AND " + strings.Repeat("year = 2024 AND ", 100), 200, ""},
		"json before cut":  {`{"sql": "SELECT 1"}` + strings.Repeat(" and some more prose", 100), 200, "SELECT 1"},
		"bare SQL not cut": {"SELECT 2", 200, "SELECT 2"},
	} {
		m := newHModel(t, func(system, user string) (int, string, []byte) { return 200, tc.content, nil })
		s := NewLLMSolver(hClient(t, m, func(cfg *llm.Config) { cfg.MaxReplyBytes = tc.maxReply }))
		sql, err := s.Solve(context.Background(), task, nil)
		if err != nil || sql != tc.want {
			t.Errorf("%s: Solve = %.40q, %v; want %q", name, sql, err, tc.want)
		}
	}
}

// TestSolverSchemaCut: a context the schema does not fit makes the solver
// cut it at table boundaries; SolverBaseTokens accounts for the cut.
func TestSolverSchemaCut(t *testing.T) {
	c := hLoad(t)
	task, _ := c.Task("big")
	full := SolverBaseTokens(task, 0, 100)
	if cut, ok := SolverSchema(task, 0, 100); ok || cut != task.DB.Schema {
		t.Errorf("no context: the schema was cut")
	}
	if _, ok := SolverSchema(task, 10*full, 100); ok {
		t.Errorf("a large context: the schema was cut")
	}
	if got := SolverBaseTokens(task, full, 100); got != full {
		t.Errorf("a context the prompt fits: SolverBaseTokens = %d, want %d", got, full)
	}
	small := full - llm.EstimateTokens(task.DB.Schema)/2
	cut, ok := SolverSchema(task, small, 100)
	if !ok || !strings.Contains(cut, "more tables omitted") {
		t.Fatalf("small context: cut %v %q", ok, cut)
	}
	if got := SolverBaseTokens(task, small, 100); got > small || got >= full {
		t.Errorf("SolverBaseTokens with the cut = %d, context %d, whole %d", got, small, full)
	}
}

// hCounting counts the oracle's calls.
type hCounting struct {
	oracle.Oracle
	calls   atomic.Int64
	history atomic.Int64
}

func (h *hCounting) AskWith(ctx context.Context, rec *corpus.Record, history []oracle.Turn, q string, opt oracle.AskOptions) (oracle.Reply, error) {
	h.calls.Add(1)
	h.history.Store(int64(len(history)))
	return h.Oracle.AskWith(ctx, rec, history, q, opt)
}

// TestAskHistoryBounded: OracleService.Ask checks the history before any
// work: too many turns, an oversized question or reply, or invalid UTF-8
// is INVALID_ARGUMENT naming the field, and the oracle is not called.
func TestAskHistoryBounded(t *testing.T) {
	c := hLoad(t)
	counting := &hCounting{Oracle: oracle.Deterministic()}
	s, _ := NewSealer(RandomKey())
	e, err := New(Config{Corpora: []*corpus.Corpus{c}, Sealer: s, Oracles: map[pb.OracleType]Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: counting}})
	if err != nil {
		t.Fatal(err)
	}
	turns := func(n int) []*pb.DialogueTurn {
		h := make([]*pb.DialogueTurn, n)
		for i := range h {
			h[i] = &pb.DialogueTurn{Question: "What?", Reply: oracle.Refusal}
		}
		return h
	}
	with := func(n int, edit func(h []*pb.DialogueTurn)) []*pb.DialogueTurn {
		h := turns(n)
		edit(h)
		return h
	}
	for _, tc := range []struct {
		name     string
		question string
		history  []*pb.DialogueTurn
		field    string
	}{
		{"10,000 turns", "What are big sales?", turns(10000), "history"},
		{"one turn too many", "What are big sales?", turns(MaxHistoryTurns + 1), "history"},
		{"1 MB reply", "What are big sales?", with(5, func(h []*pb.DialogueTurn) { h[3].Reply = strings.Repeat("r", 1<<20) }), "history[3].reply"},
		{"long question in history", "What are big sales?", with(5, func(h []*pb.DialogueTurn) { h[1].Question = strings.Repeat("q", 16<<10+1) }), "history[1].question"},
		{"invalid UTF-8 question", "What are big sales?", with(3, func(h []*pb.DialogueTurn) { h[2].Question = "bad \xff" }), "history[2].question"},
		{"invalid UTF-8 reply", "What are big sales?", with(3, func(h []*pb.DialogueTurn) { h[0].Reply = "bad \xc3" }), "history[0].reply"},
		{"invalid UTF-8 question asked", "big sales \xff?", nil, "question"},
		{"question too long", strings.Repeat("q", 16<<10+1), nil, "question"},
	} {
		_, err := e.Ask(context.Background(), &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: tc.question, History: tc.history})
		var ee *Error
		if !errors.As(err, &ee) || ee.Code != InvalidArgument || ee.Field != tc.field || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: err = %v, want INVALID_ARGUMENT on %s", tc.name, err, tc.field)
		}
	}
	if n := counting.calls.Load(); n != 0 {
		t.Errorf("the oracle was called %d times on bad requests", n)
	}
	// The largest dialogue an episode can have, at the size limits, passes.
	h := turns(MaxHistoryTurns)
	for _, turn := range h {
		turn.Question = "é" + strings.Repeat("q", 16<<10-2)
		turn.Reply = strings.Repeat("r", 16<<10)
	}
	r, err := e.Ask(context.Background(), &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: "What are big sales?", History: h, IncludePrivileged: true})
	if err != nil || len(r.GetPrivileged().GetCredits()) != 1 || counting.history.Load() != int64(MaxHistoryTurns) {
		t.Fatalf("a maximal history: %v, %v", r, err)
	}
	// Empty turns are allowed (an episode may have replayed nothing).
	if _, err := e.Ask(context.Background(), &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: "What?", History: []*pb.DialogueTurn{{}}}); err != nil {
		t.Errorf("an empty turn: %v", err)
	}
	if MaxHistoryTurns < corpus.MaxAmbiguities+2 {
		t.Errorf("MaxHistoryTurns %d is below an episode's budget", MaxHistoryTurns)
	}
}

// TestAskLLMOverflow: through OracleService, a question too long for the
// context gets the refusal; a record too long for it is an Internal error
// (retrying cannot help).
func TestAskLLMOverflow(t *testing.T) {
	c := hLoad(t)
	task, _ := c.Task("big")
	m0, r0 := oracle.BaseContextTokens(task.Record, task.DB.Schema, false)
	m := newHModel(t, func(system, user string) (int, string, []byte) { return 200, hMatch(user), nil })
	e := hEnv(t, c, hClient(t, m, func(cfg *llm.Config) { cfg.ContextTokens = max(m0, r0) + 500 }), nil)
	long := "What are big sales? " + strings.Repeat("Tell me everything. ", 15900/20)
	r, err := e.Ask(context.Background(), &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: long, Oracle: pb.OracleType_ORACLE_TYPE_LLM, IncludePrivileged: true})
	if err != nil || r.Reply != oracle.Refusal || !r.Refused || r.Privileged.GetOracleAction() != "unanswerable()" || len(r.Privileged.GetCredits()) != 0 {
		t.Fatalf("long question: %v, %v", r, err)
	}
	e = hEnv(t, c, hClient(t, m, func(cfg *llm.Config) { cfg.ContextTokens = 300 }), nil)
	_, err = e.Ask(context.Background(), &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: "What are big sales?", Oracle: pb.OracleType_ORACLE_TYPE_LLM})
	var ee *Error
	if !errors.As(err, &ee) || ee.Code != Internal || ee.Reason != ReasonOracleFailed {
		t.Fatalf("record too long: err = %v", err)
	}
}

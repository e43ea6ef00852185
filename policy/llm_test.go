package policy

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// fakeModel is an in-process OpenAI-compatible endpoint that parses the
// asker's prompts and answers like a model would.
type fakeModel struct {
	*httptest.Server
	mu      sync.Mutex
	prompts [][]llm.Message
	// answer returns the content for the n-th request (from 0), or an HTTP
	// status >= 400 to fail it.
	answer func(n int, msgs []llm.Message) (string, int)
}

func newFakeModel(t *testing.T, answer func(n int, msgs []llm.Message) (string, int)) *fakeModel {
	t.Helper()
	f := &fakeModel{answer: answer}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		var req struct {
			Model    string        `json:"model"`
			Messages []llm.Message `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		n := len(f.prompts)
		f.prompts = append(f.prompts, req.Messages)
		f.mu.Unlock()
		content, status := f.answer(n, req.Messages)
		if status >= 400 {
			http.Error(w, `{"error":{"message":"model overloaded"}}`, status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-1", "object": "chat.completion", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": content}}},
			"usage": map[string]any{"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
		})
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeModel) captured() [][]llm.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.prompts)
}

func joined(msgs []llm.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Content)
		b.WriteString("\n")
	}
	return b.String()
}

var requestRE = regexp.MustCompile(`(?m)(?:## Request\n|^Request: )([^\n]*)$`)

// The terms the scripted model knows to look for in a request.
var knownTerms = []string{"big sales", "recent year", "top region", "strong market"}

const askPrefix = "What exactly do you mean by "

// scriptedModel asks about the first known term of the request, then
// says done; in the solving phase it writes sql.
func scriptedModel(sql string) func(int, []llm.Message) (string, int) {
	return func(_ int, msgs []llm.Message) (string, int) {
		text := joined(msgs)
		if strings.Contains(text, "Asking has ended") {
			b, _ := json.Marshal(map[string]string{"type": "sql", "sql": sql})
			return "```json\n" + string(b) + "\n```", 0
		}
		m := requestRE.FindStringSubmatch(text)
		if m == nil {
			return "I cannot find the request.", 0
		}
		if strings.Contains(text, askPrefix) {
			return `{"type": "done"}`, 0
		}
		for _, term := range knownTerms {
			if strings.Contains(m[1], term) {
				return `{"type": "clarification", "question": "` + askPrefix + term + `?"}`, 0
			}
		}
		return `{"type": "done"}`, 0
	}
}

func newAskerClient(t *testing.T, url string, cache llm.Cache) *llm.Client {
	t.Helper()
	c, err := llm.New(llm.Config{BaseURL: url, Model: "fake-asker", Timeout: 5 * time.Second, MaxRetries: -1,
		BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, Cache: cache}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newAsker(t *testing.T, c *llm.Client, style AskerStyle) *LLMAsker {
	t.Helper()
	a, err := NewLLMAsker(c, style)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func startTiny(t *testing.T) *testutil.Server {
	t.Helper()
	return testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}})
}

func playBig(t *testing.T, srv *testutil.Server, a *LLMAsker, opts *pb.EpisodeOptions) *driver.Record {
	t.Helper()
	seed := uint64(7)
	r := PlayOne(context.Background(), driver.Remote(srv.Client.Env), a, &pb.ResetRequest{Corpus: "tiny", TaskId: "big", Seed: &seed, Options: opts, IncludePrivileged: true})
	if r.Error != "" {
		t.Fatalf("play: %s", r.Error)
	}
	return r
}

// count tallies a rollout's records: scored episodes, failed ones and
// fallback stops.
func count(rs []*driver.Record) (scored, failed, fallback int) {
	for _, r := range rs {
		switch {
		case r.Scored():
			scored++
		default:
			failed++
		}
		if r.FallbackStop {
			fallback++
		}
	}
	return
}

// The privileged text of task "big" that no prompt may show: resolutions
// and the reference SQL. The resolution of "big sales" may appear only
// after the oracle revealed it.
var (
	bigSecrets   = []string{"The year 2024.", "Sort by amount, largest first.", "SELECT id, amount FROM sales", "amount >= 100"}
	bigRevealed  = "Sales of 100 dollars or more."
	bigRequest   = "List the big sales of the recent year, sorted."
	bigReference = "SELECT id, amount FROM sales WHERE amount >= 100 AND year = 2024 ORDER BY amount DESC"
)

func checkPrompts(t *testing.T, prompts [][]llm.Message) {
	t.Helper()
	for i, p := range prompts {
		text := joined(p)
		if !strings.Contains(text, bigRequest) {
			t.Errorf("prompt %d lacks the request", i)
		}
		for _, s := range bigSecrets {
			if strings.Contains(text, s) {
				t.Errorf("prompt %d shows privileged text %q:\n%s", i, s, text)
			}
		}
	}
	if len(prompts) > 0 && strings.Contains(joined(prompts[0]), bigRevealed) {
		t.Errorf("the first prompt shows a resolution before any question")
	}
}

func TestLLMAskerStyles(t *testing.T) {
	srv := startTiny(t)
	for _, style := range AskerStyles {
		t.Run(string(style), func(t *testing.T) {
			f := newFakeModel(t, scriptedModel(""))
			a := newAsker(t, newAskerClient(t, f.URL+"/v1", nil), style)
			ep := playBig(t, srv, a, nil)
			want := []string{askPrefix + "big sales?"}
			if !slices.Equal(ep.Questions, want) || !slices.Equal(ep.CreditedTerms, []string{"big sales"}) {
				t.Errorf("questions %q credited %q", ep.Questions, ep.CreditedTerms)
			}
			if ep.Status != "TERMINATED" || ep.FallbackStop || ep.Counted != 2 || ep.AVTID == "" {
				t.Errorf("episode = %+v", ep)
			}
			if ep.Recall == nil || *ep.Recall != 0.5 || ep.Precision == nil || *ep.Precision != 1 {
				t.Errorf("recall %v precision %v, want 0.5 and 1", ep.Recall, ep.Precision)
			}
			prompts := f.captured()
			if len(prompts) != 2 {
				t.Fatalf("%d model calls, want 2", len(prompts))
			}
			checkPrompts(t, prompts)
			first, second := joined(prompts[0]), joined(prompts[1])
			if style == StyleChat {
				// The shared prompt states the budget once (it is append-only).
				if !strings.Contains(first, "Question budget: 4.") || !strings.HasPrefix(second, first) {
					t.Errorf("the chat prompt does not state the budget, or is not append-only:\n%s\n---\n%s", first, second)
				}
			} else if !strings.Contains(first, "Questions left: 4 of 4.") || !strings.Contains(second, "Questions left: 3 of 4.") {
				t.Errorf("the prompts do not show the budget:\n%s\n---\n%s", first, second)
			}
			if !strings.Contains(second, bigRevealed) || !strings.Contains(second, askPrefix+"big sales?") {
				t.Errorf("the second prompt lacks the dialogue:\n%s", second)
			}
			if strings.Contains(first, `"type": "sql"`) {
				t.Errorf("the question_f1 prompt offers sql")
			}
			if !strings.Contains(first, "sale amount in dollars") || !strings.Contains(first, "strong market") || !strings.Contains(first, "CREATE TABLE sales") {
				t.Errorf("the prompt lacks the column meanings, knowledge or schema")
			}
			switch style {
			case StyleDirect:
				if strings.Contains(first, "checklist") || strings.Contains(first, "List every phrase") {
					t.Errorf("the direct prompt has a checklist")
				}
			case StyleChat:
				// Exactly the shared prompt the trainer adapters render.
				if p := prompts[1]; len(p) != 4 || p[0].Content != chatAmbiTabSystem || p[2].Role != "assistant" ||
					p[2].Content != `{"type": "clarification", "question": "`+askPrefix+`big sales?"}` || !strings.HasPrefix(p[3].Content, bigRevealed) {
					t.Errorf("chat messages = %+v", p)
				}
			case StyleChecklistChat:
				// The question and its reply are chat messages.
				p := prompts[1]
				if len(p) != 4 || p[2].Role != "assistant" || !strings.Contains(p[2].Content, askPrefix) || !strings.HasPrefix(p[3].Content, bigRevealed) {
					t.Errorf("chat messages = %+v", p)
				}
				if strings.Contains(second, "Ledger") {
					t.Errorf("the chat prompt has a ledger")
				}
			case StyleChecklistLedger:
				if len(prompts[1]) != 1 || !strings.Contains(second, "## Ledger: answered") ||
					!strings.Contains(second, "You asked: "+askPrefix+"big sales?\n  The user answered: "+bigRevealed) ||
					!strings.Contains(second, "## Turn 2") {
					t.Errorf("the ledger prompt lacks the ledger:\n%s", second)
				}
			}
		})
	}
}

// refusalSentence is the deterministic oracle's fixed refusal, written out:
// package policy does not import package oracle (a client never links the
// server), and the asker must not need the sentence anyway.
const refusalSentence = "I can't answer that; please ask about something specific in the request."

// TestLedgerByTurnKind: whether a question was answered comes from the
// kind of the turn that follows it (REPLY: answered; REFUSAL or a notice:
// not), never from its text — a REPLY whose text is the refusal sentence
// is answered, a REFUSAL with any text is not.
func TestLedgerByTurnKind(t *testing.T) {
	turn := func(role pb.Role, kind pb.TurnKind, text string) *pb.Turn {
		return &pb.Turn{Role: role, Kind: kind, Text: text}
	}
	s := &promptState{
		task: &pb.TaskView{Request: "List the big sales."},
		turns: []*pb.Turn{
			turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_REQUEST, "List the big sales."),
			turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_QUESTION, "Q1 parrot?"),
			turn(pb.Role_ROLE_ORACLE, pb.TurnKind_TURN_KIND_REPLY, refusalSentence),
			turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_QUESTION, "Q2 refused?"),
			turn(pb.Role_ROLE_ORACLE, pb.TurnKind_TURN_KIND_REFUSAL, "Sales of 100 dollars or more."),
			turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_QUESTION, "Q3 empty reply?"),
			turn(pb.Role_ROLE_ORACLE, pb.TurnKind_TURN_KIND_REPLY, ""),
			turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_QUESTION, "Q4 too late?"),
			turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, "The question budget is spent."),
		},
		budget: 4, asked: 4,
	}
	xs := s.exchanges()
	want := []exchange{
		{question: "Q1 parrot?", reply: refusalSentence, closed: true, answered: true},
		{question: "Q2 refused?", reply: "Sales of 100 dollars or more.", closed: true, answered: false},
		{question: "Q3 empty reply?", reply: "", closed: true, answered: true},
		{question: "Q4 too late?", reply: "(not answered) The question budget is spent.", closed: true},
	}
	if !slices.Equal(xs, want) {
		t.Fatalf("exchanges:\n%+v\nwant\n%+v", xs, want)
	}
	ledger := joined(checklistLedgerPrompt(s))
	answered, unanswered, ok := strings.Cut(ledger, "## Ledger: asked but not answered")
	if !ok || !strings.Contains(answered, "## Ledger: answered") {
		t.Fatalf("no ledgers:\n%s", ledger)
	}
	for _, q := range []string{"Q1 parrot?", "Q3 empty reply?"} {
		if !strings.Contains(answered, "You asked: "+q) || strings.Contains(unanswered, "You asked: "+q) {
			t.Errorf("%q is not in the answered ledger alone:\n%s", q, ledger)
		}
	}
	for _, q := range []string{"Q2 refused?", "Q4 too late?"} {
		if strings.Contains(answered, "You asked: "+q) || !strings.Contains(unanswered, "You asked: "+q) {
			t.Errorf("%q is not in the unanswered ledger alone:\n%s", q, ledger)
		}
	}
	// The other styles show the refusal's text as the answer.
	if d := joined(directPrompt(s)); !strings.Contains(d, "Q2: Q2 refused?\nA2: Sales of 100 dollars or more.") {
		t.Errorf("the direct prompt lacks the refusal:\n%s", d)
	}
}

// TestLLMAskerRefusedQuestion: over a real server, a question that names
// no ambiguity gets a REFUSAL turn, and the next ledger prompt lists it as
// asked but not answered.
func TestLLMAskerRefusedQuestion(t *testing.T) {
	srv := startTiny(t)
	const generic = "Could you tell me more about what you want?"
	f := newFakeModel(t, func(_ int, msgs []llm.Message) (string, int) {
		if strings.Contains(joined(msgs), generic) {
			return `{"type": "done"}`, 0
		}
		return `{"type": "clarification", "question": "` + generic + `"}`, 0
	})
	a := newAsker(t, newAskerClient(t, f.URL+"/v1", nil), StyleChecklistLedger)
	ep := playBig(t, srv, a, nil)
	if !slices.Equal(ep.Questions, []string{generic}) || len(ep.CreditedTerms) != 0 {
		t.Fatalf("questions %q credited %q", ep.Questions, ep.CreditedTerms)
	}
	prompts := f.captured()
	if len(prompts) != 2 {
		t.Fatalf("%d model calls, want 2", len(prompts))
	}
	answered, unanswered, ok := strings.Cut(joined(prompts[1]), "## Ledger: asked but not answered")
	if !ok || strings.Contains(answered, generic) || !strings.Contains(unanswered, "You asked: "+generic+"\n  The user answered: "+refusalSentence) {
		t.Errorf("the refused question is not in the unanswered ledger:\n%s", joined(prompts[1]))
	}
}

func TestLLMAskerRetryOnce(t *testing.T) {
	srv := startTiny(t)
	script := scriptedModel("")
	f := newFakeModel(t, func(n int, msgs []llm.Message) (string, int) {
		if n == 0 {
			return "Let me think about which term is unclear...", 0
		}
		return script(n, msgs)
	})
	ep := playBig(t, srv, newAsker(t, newAskerClient(t, f.URL+"/v1", nil), ""), nil)
	if ep.FallbackStop || !slices.Equal(ep.Questions, []string{askPrefix + "big sales?"}) {
		t.Errorf("episode = %+v", ep)
	}
	prompts := f.captured()
	if len(prompts) != 3 {
		t.Fatalf("%d model calls, want 3", len(prompts))
	}
	retry := prompts[1]
	if n := len(retry); n != len(prompts[0])+2 || retry[n-2].Role != "assistant" || retry[n-1].Role != "user" ||
		!strings.Contains(retry[n-1].Content, "could not be used") || !strings.Contains(retry[n-1].Content, `{"type": "done"}`) {
		t.Errorf("retry messages = %+v", retry[len(prompts[0]):])
	}
	checkPrompts(t, prompts)
}

func TestLLMAskerFallbackStop(t *testing.T) {
	srv := startTiny(t)
	script := scriptedModel("")
	// A good first question, then unusable output twice.
	f := newFakeModel(t, func(n int, msgs []llm.Message) (string, int) {
		switch n {
		case 0:
			return script(n, msgs)
		case 1:
			return `{"type": "clarify", "question": "x"}`, 0
		default:
			return `{"type": "clarification"}`, 0
		}
	})
	ep := playBig(t, srv, newAsker(t, newAskerClient(t, f.URL+"/v1", nil), StyleDirect), nil)
	if !ep.FallbackStop || ep.Status != "TERMINATED" || len(ep.Questions) != 1 || ep.Reward == nil {
		t.Fatalf("episode = %+v", ep)
	}
	if n := len(f.captured()); n != 3 {
		t.Errorf("%d model calls, want 3", n)
	}
	b, _ := json.Marshal(ep)
	if !strings.Contains(string(b), `"fallback_stop":true`) {
		t.Errorf("episode JSON lacks fallback_stop: %s", b)
	}
}

// TestLLMAskerEndpointDown: an endpoint failure fails that episode
// (ASKER_FAILED, with the message), never a fallback stop, and the rollout
// goes on with the other episodes.
func TestLLMAskerEndpointDown(t *testing.T) {
	srv := startTiny(t)
	script := scriptedModel("")
	f := newFakeModel(t, func(n int, msgs []llm.Message) (string, int) {
		if strings.Contains(joined(msgs), bigRequest) {
			return "", http.StatusServiceUnavailable
		}
		return script(n, msgs)
	})
	a := newAsker(t, newAskerClient(t, f.URL+"/v1", nil), "")
	eps, err := Rollout(context.Background(), srv.Client.Env, RolloutConfig{Player: a, Corpus: "tiny", Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if scored, failed, fallback := count(eps); len(eps) != 5 || failed != 1 || scored != 4 || fallback != 0 || a.Name() != "llm:chat" {
		t.Errorf("%d episodes: %d scored, %d failed, %d fallback stops (%s)", len(eps), scored, failed, fallback, a.Name())
	}
	for _, e := range eps {
		if e.TaskID == "big" {
			if e.Status != "ASKER_FAILED" || !strings.Contains(e.Error, "asker endpoint") || !strings.Contains(e.Error, "503") || e.FallbackStop {
				t.Errorf("failed episode = %+v", e)
			}
		} else if e.Error != "" || e.Status == "" {
			t.Errorf("episode %s = %+v", e.TaskID, e)
		}
	}
	// A closed endpoint fails every episode the same way.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() + "/v1"
	l.Close()
	a = newAsker(t, newAskerClient(t, closed, nil), StyleDirect)
	eps, err = Rollout(context.Background(), srv.Client.Env, RolloutConfig{Player: a, Corpus: "tiny", Limit: 2})
	if scored, failed, _ := count(eps); err != nil || failed != 2 || scored != 0 {
		t.Errorf("closed endpoint: %d scored, %d failed, err %v", scored, failed, err)
	}
}

// TestLLMAskerClientSQL: with the outcome reward and the client solver the
// prompts offer sql, and after done the asker writes the SQL.
func TestLLMAskerClientSQL(t *testing.T) {
	srv := startTiny(t)
	f := newFakeModel(t, scriptedModel(bigReference))
	a := newAsker(t, newAskerClient(t, f.URL+"/v1", nil), StyleChecklistChat)
	ep := playBig(t, srv, a, &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_CLIENT})
	if ep.Success == nil || *ep.Success != 1 || ep.Status != "TERMINATED" || ep.FallbackSQL {
		t.Errorf("episode = %+v", ep)
	}
	prompts := f.captured()
	if len(prompts) != 3 {
		t.Fatalf("%d model calls, want 3", len(prompts))
	}
	if !strings.Contains(joined(prompts[0]), `"type": "sql"`) || !strings.Contains(joined(prompts[2]), "Asking has ended") {
		t.Errorf("the prompts do not offer sql")
	}
	checkPrompts(t, prompts)
}

// TestLLMAskerReplay: a run recorded in the file cache replays with the
// endpoint switched off, reply for reply.
func TestLLMAskerReplay(t *testing.T) {
	srv := startTiny(t)
	path := filepath.Join(t.TempDir(), "asker-cache.jsonl")
	f := newFakeModel(t, scriptedModel(""))
	cache, err := llm.OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	a := newAsker(t, newAskerClient(t, f.URL+"/v1", cache), "")
	eps1, err := Rollout(context.Background(), srv.Client.Env, RolloutConfig{Player: a, Corpus: "tiny"})
	if _, failed, _ := count(eps1); err != nil || failed != 0 {
		t.Fatalf("recording: %d failed, %v", failed, err)
	}
	cache.Close()
	f.Close()
	cache, err = llm.OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	a = newAsker(t, newAskerClient(t, f.URL+"/v1", cache), "")
	eps2, err := Rollout(context.Background(), srv.Client.Env, RolloutConfig{Player: a, Corpus: "tiny"})
	if _, failed, _ := count(eps2); err != nil || failed != 0 {
		t.Fatalf("replay: %d failed, %v", failed, err)
	}
	for i := range eps1 {
		e1, e2 := eps1[i].Replayable(), eps2[i].Replayable()
		e1.EpisodeID, e2.EpisodeID = "", ""
		b1, _ := json.Marshal(e1)
		b2, _ := json.Marshal(e2)
		if string(b1) != string(b2) {
			t.Errorf("episode %d differs:\n%s\n%s", i, b1, b2)
		}
	}
}

func TestParseDecision(t *testing.T) {
	cases := []struct {
		content           string
		offerSQL, solving bool
		want              decision
		ok                bool
	}{
		{`{"type": "clarification", "question": "Which year?"}`, false, false, decision{kind: "clarification", question: "Which year?"}, true},
		{"Sure.\n```json\n{\"type\": \"done\"}\n```", false, false, decision{kind: "done"}, true},
		{`{"type": "Clarification", "output": "Which year?"}`, false, false, decision{kind: "clarification", question: "Which year?"}, true},
		{`{"type": "done", "output": null}`, false, false, decision{kind: "done"}, true},
		{`{"type": "sql", "sql": "SELECT 1"}`, true, false, decision{kind: "sql", sql: "SELECT 1"}, true},
		{`{"type": "sql", "sql": "SELECT 1"}`, false, true, decision{kind: "sql", sql: "SELECT 1"}, true},
		{`{"type": "sql", "sql": "SELECT 1"}`, false, false, decision{}, false},
		{`{"type": "done"}`, true, true, decision{}, false},
		{`{"type": "clarification", "question": "  "}`, false, false, decision{}, false},
		{`{"type": "clarification", "question": 3}`, false, false, decision{}, false},
		{`{"question": "Which year?"}`, false, false, decision{}, false},
		{`{"type": "clarification", "question": "Which`, false, false, decision{}, false},
		{`no json at all`, false, false, decision{}, false},
	}
	for _, c := range cases {
		got, err := parseDecision(c.content, c.offerSQL, c.solving)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("parseDecision(%q, %v, %v) = %+v, %v", c.content, c.offerSQL, c.solving, got, err)
		}
	}
	if _, err := ParseAskerStyle("ledger"); err == nil {
		t.Error("ParseAskerStyle accepted an unknown style")
	}
	if s, err := ParseAskerStyle(""); err != nil || s != StyleChat {
		t.Errorf("the default style = %q, %v", s, err)
	}
	if _, err := NewLLMAsker(nil, ""); err == nil {
		t.Error("NewLLMAsker accepted a nil client")
	}
}

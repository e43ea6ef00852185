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

var requestRE = regexp.MustCompile(`## Request\n([^\n]*)\n`)

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

func playBig(t *testing.T, srv *testutil.Server, a *LLMAsker, opts *pb.EpisodeOptions) *Episode {
	t.Helper()
	seed := uint64(7)
	ep, err := a.PlayEpisode(context.Background(), srv.Client.Env, &pb.ResetRequest{Corpus: "tiny", TaskId: "big", Seed: &seed, Options: opts})
	if err != nil {
		t.Fatalf("PlayEpisode: %v", err)
	}
	return ep
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
			if ep.Status != "TERMINATED" || ep.FallbackStop || ep.CountedAmbiguities != 2 || ep.AVTID == "" {
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
			if !strings.Contains(first, "Questions left: 4 of 4.") || !strings.Contains(second, "Questions left: 3 of 4.") {
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
	// Summarize keeps it for reward and success, not for recall and F1.
	good := &Episode{Status: "TERMINATED", Recall: f64(1), F1: f64(1), Precision: f64(1), Reward: f64(1), Outcome: f64(1)}
	ep.Outcome = f64(0)
	s := Summarize([]*Episode{good, ep})
	if s.Episodes != 2 || s.FallbackStops != 1 || s.Errors != 0 {
		t.Errorf("summary counts = %+v", s)
	}
	if s.Recall == nil || *s.Recall != 1 || s.F1 == nil || *s.F1 != 1 {
		t.Errorf("recall %v f1 %v, want 1 and 1 (the fallback episode omitted)", s.Recall, s.F1)
	}
	if want := (1 + *ep.Reward) / 2; s.RewardMean == nil || *s.RewardMean != want {
		t.Errorf("reward mean %v, want %v", s.RewardMean, want)
	}
	if s.SuccessRate == nil || *s.SuccessRate != 0.5 {
		t.Errorf("success %v, want 0.5", s.SuccessRate)
	}
}

func f64(x float64) *float64 { return &x }

func TestSummarizeFallbackOnly(t *testing.T) {
	s := Summarize([]*Episode{{Status: "TERMINATED", FallbackStop: true, Recall: f64(0.5), F1: f64(0.5), Precision: f64(1), Reward: f64(0.5)}})
	if s.Recall != nil || s.F1 != nil || s.RewardMean == nil || s.Precision == nil || s.FallbackStops != 1 || s.Episodes != 1 {
		t.Errorf("summary = %+v", s)
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
	s, eps, err := Rollout(context.Background(), srv.Client, RolloutConfig{Player: a, Corpus: "tiny", Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 5 || s.Errors != 1 || s.Episodes != 4 || s.FallbackStops != 0 || s.Policy != "llm:checklist_ledger" {
		t.Errorf("summary = %+v", s)
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
	s, _, err = Rollout(context.Background(), srv.Client, RolloutConfig{Player: a, Corpus: "tiny", Limit: 2})
	if err != nil || s.Errors != 2 || s.Episodes != 0 {
		t.Errorf("closed endpoint: summary %+v, err %v", s, err)
	}
}

// TestLLMAskerClientSQL: with the outcome reward and the client solver the
// prompts offer sql, and after done the asker writes the SQL.
func TestLLMAskerClientSQL(t *testing.T) {
	srv := startTiny(t)
	f := newFakeModel(t, scriptedModel(bigReference))
	a := newAsker(t, newAskerClient(t, f.URL+"/v1", nil), StyleChecklistChat)
	ep := playBig(t, srv, a, &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_CLIENT})
	if ep.Outcome == nil || *ep.Outcome != 1 || ep.Status != "TERMINATED" || ep.FallbackSQL {
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
	s1, eps1, err := Rollout(context.Background(), srv.Client, RolloutConfig{Player: a, Corpus: "tiny"})
	if err != nil || s1.Errors != 0 {
		t.Fatalf("recording: %+v %v", s1, err)
	}
	cache.Close()
	f.Close()
	cache, err = llm.OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	a = newAsker(t, newAskerClient(t, f.URL+"/v1", cache), "")
	s2, eps2, err := Rollout(context.Background(), srv.Client, RolloutConfig{Player: a, Corpus: "tiny"})
	if err != nil || s2.Errors != 0 {
		t.Fatalf("replay: %+v %v", s2, err)
	}
	for i := range eps1 {
		e1, e2 := *eps1[i], *eps2[i]
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
	if s, err := ParseAskerStyle(""); err != nil || s != StyleChecklistLedger {
		t.Errorf("the default style = %q, %v", s, err)
	}
	if _, err := NewLLMAsker(nil, ""); err == nil {
		t.Error("NewLLMAsker accepted a nil client")
	}
}

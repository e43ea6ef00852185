package oracle

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/corpus"
	"avtgym/internal/fakellm"
	"avtgym/llm"
)

// fakeCall is one request to the fake model, with its prompt parsed.
type fakeCall struct {
	n          int // index among all calls
	stage      string
	messages   []llm.Message
	user       string   // the first user message
	question   string   // the analyst's question, read from the prompt
	terms      []string // the labeled ambiguities listed
	segments   []string // the clause segments listed
	action     string   // the chosen action (respond stage)
	resolution []string // the "what you meant" lines (respond stage)
	corrective bool     // the request carries a corrective turn
	maxTokens  int      // the request's max_tokens
	jsonMode   bool     // the request asks for response_format json_object
}

// cutMark starts a scripted content that the fake sends with
// finish_reason "length" (the mark removed): a reply cut off at max_tokens.
const cutMark = "\x00cut\x00"

// fakeModel is an in-process OpenAI-compatible endpoint that parses the
// oracle's prompts and answers by a per-test script.
type fakeModel struct {
	*httptest.Server
	mu     sync.Mutex
	calls  []fakeCall
	script func(c fakeCall) (status int, content string)
}

func newFakeModel(t *testing.T, script func(c fakeCall) (int, string)) *fakeModel {
	t.Helper()
	f := &fakeModel{script: script}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages       []llm.Message `json:"messages"`
			MaxTokens      int           `json:"max_tokens"`
			ResponseFormat *struct {
				Type string `json:"type"`
			} `json:"response_format"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) < 2 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		c := parseCall(req.Messages)
		c.maxTokens, c.jsonMode = req.MaxTokens, req.ResponseFormat != nil && req.ResponseFormat.Type == "json_object"
		c.n = len(f.calls)
		f.calls = append(f.calls, c)
		f.mu.Unlock()
		status, content := f.script(c)
		if status != http.StatusOK {
			msg := "boom"
			if content != "" {
				msg = content // e.g. a context-length message
			}
			b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg}})
			http.Error(w, string(b), status)
			return
		}
		finish := "stop"
		if rest, ok := strings.CutPrefix(content, cutMark); ok {
			content, finish = rest, "length"
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"model":   "fake-model",
			"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": content}, "finish_reason": finish}},
			"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5},
		})
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeModel) stageCalls(stage string) []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []fakeCall
	for _, c := range f.calls {
		if c.stage == stage {
			out = append(out, c)
		}
	}
	return out
}

// section returns the lines under a "## ..." marker up to the next blank line.
func section(text, mark string) []string {
	i := strings.Index(text, mark)
	if i < 0 {
		return nil
	}
	rest := text[i:]
	rest = rest[strings.IndexByte(rest, '\n')+1:]
	if j := strings.Index(rest, "\n\n"); j >= 0 {
		rest = rest[:j]
	}
	return strings.Split(strings.TrimRight(rest, "\n"), "\n")
}

func parseCall(msgs []llm.Message) fakeCall {
	c := fakeCall{messages: msgs, user: msgs[1].Content, corrective: len(msgs) > 2}
	c.stage = "respond"
	if strings.Contains(msgs[0].Content, "CLASSIFY") {
		c.stage = "match"
	}
	c.question = fakellm.Question(c.user)
	for _, l := range section(c.user, markAmbiguities) {
		if strings.HasPrefix(l, `- "`) {
			end := strings.LastIndex(l, `" (`)
			c.terms = append(c.terms, l[3:end])
		}
	}
	c.terms = append(c.terms, birdTerms(c.user)...)
	for _, l := range section(c.user, markSegments) {
		if strings.HasPrefix(l, "- [") {
			c.segments = append(c.segments, l[strings.Index(l, "] ")+2:])
		}
	}
	if i := strings.Index(c.user, markAction+": "); i >= 0 {
		rest := c.user[i+len(markAction)+2:]
		c.action = rest[:strings.IndexByte(rest, '\n')]
	}
	for _, l := range section(c.user, markResolution) {
		if strings.HasPrefix(l, "- ") {
			c.resolution = append(c.resolution, l[2:])
		}
	}
	return c
}

// smartMatch answers stage 1 like a sensible model: a listed term the
// question names, else the ORDER BY segment for a question about sorting,
// else unanswerable.
func smartMatch(c fakeCall) string {
	q := strings.ToLower(c.question)
	for _, t := range c.terms {
		if strings.Contains(q, strings.ToLower(t)) {
			return fmt.Sprintf(`{"action": "labeled", "term": %q}`, t)
		}
	}
	if strings.Contains(q, "sort") {
		for _, s := range c.segments {
			if strings.HasPrefix(s, "ORDER BY") {
				return fmt.Sprintf(`{"action": "unlabeled", "segment": %q}`, s)
			}
		}
	}
	return `{"action": "unanswerable"}`
}

// smartRespond answers stage 2 in plain words.
func smartRespond(c fakeCall) string {
	if len(c.resolution) > 0 {
		return "Sure: " + strings.ToLower(c.resolution[0][:1]) + c.resolution[0][1:]
	}
	return "Put the biggest spenders first, please."
}

func smart(c fakeCall) (int, string) {
	if c.stage == "match" {
		return 200, smartMatch(c)
	}
	return 200, smartRespond(c)
}

const testSchema = "CREATE TABLE customers (id INTEGER, name TEXT, billing_region TEXT);\n\nCREATE TABLE orders (id INTEGER, customer_id INTEGER, total_value REAL);"

const testSQL = "SELECT c.name, c.billing_region FROM customers c JOIN orders o ON o.customer_id = c.id GROUP BY c.id ORDER BY SUM(o.total_value) DESC LIMIT 5"

func testRecord() *corpus.Record {
	return &corpus.Record{
		ID: "shop-1", DB: "shop", Request: "Show the top customers in each region.",
		Ambiguities: []corpus.Ambiguity{
			{Term: "top customers", Kind: corpus.Critical, Aliases: []string{"best customers"},
				Resolution: "Top customers are the five with the highest total order value."},
			{Term: "region", Kind: corpus.Critical, Resolution: "The region is where the customer is billed."},
		},
		Reference: corpus.Reference{SQL: corpus.SQLList{testSQL}},
	}
}

func newTestLLM(t *testing.T, url string, cache llm.Cache, opt LLMOptions) *LLM {
	t.Helper()
	c, err := llm.New(llm.Config{
		BaseURL: url + "/v1", Model: "fake-model", Timeout: 5 * time.Second, MaxRetries: 2,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Cache: cache,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Schema == nil {
		opt.Schema = func(*corpus.Record) string { return testSchema }
	}
	return NewLLM(c, opt)
}

func ask(t *testing.T, l *LLM, rec *corpus.Record, q string) Reply {
	t.Helper()
	r, err := l.Oracle().Ask(context.Background(), rec, nil, q)
	if err != nil {
		t.Fatalf("Ask(%q): %v", q, err)
	}
	return r
}

func TestLLMLabeledTerm(t *testing.T) {
	f := newFakeModel(t, smart)
	l := newTestLLM(t, f.URL, nil, LLMOptions{RejectLeaks: true})
	rec := testRecord()
	r := ask(t, l, rec, "What do you mean by top customers?")
	if !reflect.DeepEqual(r.Credits, []int{0}) || r.Action.String() != `labeled("top customers")` || r.FellBack || r.Regenerated != 0 {
		t.Fatalf("reply %+v", r)
	}
	if r.Text != "Sure: top customers are the five with the highest total order value." {
		t.Fatalf("text %q", r.Text)
	}
	m, s := f.stageCalls("match"), f.stageCalls("respond")
	if len(m) != 1 || len(s) != 1 {
		t.Fatalf("calls: %d match, %d respond", len(m), len(s))
	}
	// The unfiltered matcher sees terms, kinds, aliases, what each
	// decides (the resolution: this record has no SQL snippets) and the
	// segments; the question as quoted data.
	if !reflect.DeepEqual(m[0].terms, []string{"top customers", "region"}) || len(m[0].segments) != 6 ||
		!strings.Contains(m[0].user, "(critical)") || !strings.Contains(m[0].user, `also written: "best customers"`) ||
		!strings.Contains(m[0].user, "  decides: Top customers are the five with the highest total order value.") ||
		!strings.Contains(m[0].user, `<question>"What do you mean by top customers?"</question>`) {
		t.Fatalf("match prompt:\n%s", m[0].user)
	}
	// The unfiltered responder sees the SQL, the segments and the schema.
	for _, want := range []string{testSQL, "- [ORDER BY] ORDER BY SUM(o.total_value) DESC", "CREATE TABLE orders", `labeled("top customers")`} {
		if !strings.Contains(s[0].user, want) {
			t.Errorf("respond prompt lacks %q", want)
		}
	}
	// An alias names the same ambiguity.
	f.script = func(c fakeCall) (int, string) {
		if c.stage == "match" {
			return 200, `labeled("Best   Customers")`
		}
		return smart(c)
	}
	if r := ask(t, l, rec, "Who are the best customers?"); !reflect.DeepEqual(r.Credits, []int{0}) || r.Action.String() != `labeled("top customers")` {
		t.Fatalf("alias: %+v", r)
	}
}

func TestLLMInvalidActionsAreUnanswerable(t *testing.T) {
	for name, out := range map[string]string{
		"unregistered term":  `{"action": "labeled", "term": "best clients"}`,
		"made-up segment":    `{"action": "unlabeled", "segment": "ORDER BY name ASC"}`,
		"partial segment":    `unlabeled("ORDER BY SUM(o.total_value)")`,
		"explicit refusal":   `{"action": "unanswerable"}`,
		"grammar refusal":    "unanswerable()",
		"term in other case": `{"action": "labeled", "term": "customers"}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeModel(t, func(c fakeCall) (int, string) {
				if c.stage != "match" {
					t.Errorf("responder called")
				}
				return 200, out
			})
			l := newTestLLM(t, f.URL, nil, LLMOptions{})
			r := ask(t, l, testRecord(), "Which customers and in what order?")
			if r.Credits != nil || r.Text != Refusal || r.Action.String() != "unanswerable()" {
				t.Fatalf("reply %+v", r)
			}
			if n := len(f.stageCalls("match")); n != 1 {
				t.Fatalf("%d match calls, want 1 (a parsed action is not retried)", n)
			}
		})
	}
}

func TestLLMUnlabeledSegment(t *testing.T) {
	for name, out := range map[string]string{
		"json":             "",
		"grammar, folded":  "Action: unlabeled(\"order by  sum(o.total_value)\\ndesc\")",
		"json with label":  "```json\n{\"action\": \"unlabeled\", \"segment\": \"[ORDER BY] ORDER BY SUM(o.total_value) DESC\"}\n```",
		"json in grammars": `{"action": "unlabeled(\"ORDER BY SUM(o.total_value) DESC\")"}`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeModel(t, func(c fakeCall) (int, string) {
				if c.stage == "match" && out != "" {
					return 200, out
				}
				return smart(c)
			})
			l := newTestLLM(t, f.URL, nil, LLMOptions{RejectLeaks: true})
			r := ask(t, l, testRecord(), "How should I sort them?")
			if r.Credits != nil || r.Action.String() != `unlabeled("ORDER BY SUM(o.total_value) DESC")` || r.Text != "Put the biggest spenders first, please." {
				t.Fatalf("reply %+v", r)
			}
			s := f.stageCalls("respond")
			if len(s) != 1 || s[0].action != r.Action.String() {
				t.Fatalf("respond calls %+v", s)
			}
		})
	}
}

func TestLLMMalformedMatchOutput(t *testing.T) {
	t.Run("once", func(t *testing.T) {
		f := newFakeModel(t, func(c fakeCall) (int, string) {
			if c.stage == "match" && !c.corrective {
				return 200, "Hmm, the analyst is probably asking about the top customers {"
			}
			return smart(c)
		})
		l := newTestLLM(t, f.URL, nil, LLMOptions{})
		r := ask(t, l, testRecord(), "What are top customers?")
		if !reflect.DeepEqual(r.Credits, []int{0}) || r.Action.String() != `labeled("top customers")` {
			t.Fatalf("reply %+v", r)
		}
		m := f.stageCalls("match")
		if len(m) != 2 || !m[1].corrective || m[1].messages[3].Content != matchCorrective || m[1].messages[2].Role != "assistant" {
			t.Fatalf("match calls %+v", m)
		}
	})
	t.Run("twice", func(t *testing.T) {
		f := newFakeModel(t, func(c fakeCall) (int, string) {
			if c.stage != "match" {
				t.Errorf("responder called")
			}
			return 200, `{"verdict": "top customers"}`
		})
		l := newTestLLM(t, f.URL, nil, LLMOptions{})
		r := ask(t, l, testRecord(), "What are top customers?")
		if r.Credits != nil || r.Text != Refusal || r.Action.String() != "unanswerable()" {
			t.Fatalf("reply %+v", r)
		}
		if n := len(f.stageCalls("match")); n != 2 {
			t.Fatalf("%d match calls, want 2", n)
		}
	})
}

func TestLLMLeakRejection(t *testing.T) {
	leaky := "Sort with ORDER BY SUM(o.total_value) DESC and keep five."
	t.Run("regenerated", func(t *testing.T) {
		f := newFakeModel(t, func(c fakeCall) (int, string) {
			if c.stage == "respond" && !c.corrective {
				return 200, leaky
			}
			return smart(c)
		})
		l := newTestLLM(t, f.URL, nil, LLMOptions{RejectLeaks: true})
		r := ask(t, l, testRecord(), "What do you mean by top customers?")
		if r.Regenerated != 1 || r.FellBack || !strings.HasPrefix(r.Text, "Sure: top customers") {
			t.Fatalf("reply %+v", r)
		}
		s := f.stageCalls("respond")
		if len(s) != 2 || s[1].messages[2].Content != leaky || s[1].messages[3].Content != respondCorrective {
			t.Fatalf("respond calls %+v", s)
		}
	})
	t.Run("not rejected when off", func(t *testing.T) {
		f := newFakeModel(t, func(c fakeCall) (int, string) {
			if c.stage == "respond" {
				return 200, leaky
			}
			return smart(c)
		})
		for _, opt := range []LLMOptions{{AllowLeaks: true}, {Scoped: true}} {
			l := newTestLLM(t, f.URL, nil, opt)
			if r := ask(t, l, testRecord(), "What do you mean by top customers?"); r.Text != leaky || r.Regenerated != 0 {
				t.Fatalf("%+v: reply %+v", opt, r)
			}
		}
	})
	t.Run("on by default for the unfiltered oracle", func(t *testing.T) {
		f := newFakeModel(t, func(c fakeCall) (int, string) {
			if c.stage == "respond" && !c.corrective {
				return 200, leaky
			}
			return smart(c)
		})
		for _, opt := range []LLMOptions{{}, {AllowLeaks: true, RejectLeaks: true}, {Scoped: true, RejectLeaks: true}} {
			l := newTestLLM(t, f.URL, nil, opt)
			if !l.RejectsLeaks() {
				t.Fatalf("%+v: leaks not rejected", opt)
			}
			if r := ask(t, l, testRecord(), "What do you mean by top customers?"); r.Regenerated != 1 || strings.Contains(r.Text, "SUM(") {
				t.Fatalf("%+v: reply %+v", opt, r)
			}
		}
	})
	for name, text := range map[string]string{"sql": leaky, "schema identifier": "Use the billing_region of each customer.", "empty": "  "} {
		t.Run("always "+name, func(t *testing.T) {
			f := newFakeModel(t, func(c fakeCall) (int, string) {
				if c.stage == "respond" {
					return 200, text
				}
				return smart(c)
			})
			l := newTestLLM(t, f.URL, nil, LLMOptions{RejectLeaks: true})
			r := ask(t, l, testRecord(), "What do you mean by top customers?")
			if !r.FellBack || r.Regenerated != 2 || r.Text != testRecord().Ambiguities[0].Resolution || r.Refused || !reflect.DeepEqual(r.Credits, []int{0}) {
				t.Fatalf("reply %+v", r)
			}
			if n := len(f.stageCalls("respond")); n != 3 {
				t.Fatalf("%d respond calls, want 3", n)
			}
			// An unlabeled action falls back to the refusal (no credits).
			r = ask(t, l, testRecord(), "How should I sort them?")
			if !r.FellBack || r.Text != Refusal || !r.Refused || r.Credits != nil {
				t.Fatalf("unlabeled fallback %+v", r)
			}
		})
	}
}

func TestLeakChecker(t *testing.T) {
	rec := testRecord()
	lc := newLeakChecker(rec, (&LLM{}).segments(rec), testSchema)
	for _, c := range []struct {
		reply, question string
		leak            bool
	}{
		{"The five customers who spent the most overall.", "Who are top customers?", false},
		{"Order them by the sum of total value, descending.", "How to sort?", false},
		{"order by sum(o.total_value) desc", "How to sort?", true},
		{"take c.name, c.billing_region from the list", "What columns?", true},
		{"GROUP BY c.id, per customer.", "How to group?", true},
		{"Use billing_region.", "Do you mean billing_region or shipping region?", false},
		{"Use billing_region.", "Which region?", true},
		{"Limit it to 5 from orders.", "How many?", false},
		{"name, billing region, five of them", "Which?", false},
		{"I said ORDER BY SUM(o.total_value) DESC, yes.", "Is it ORDER BY SUM(o.total_value) DESC?", false},
	} {
		if got := lc.leaks(c.reply, c.question); got != c.leak {
			t.Errorf("leaks(%q, %q) = %v, want %v", c.reply, c.question, got, c.leak)
		}
	}
	if got := schemaIdents(testSchema + "\nCREATE TABLE \"OrderLines\" (x INT8 DEFAULT CURRENT_TIMESTAMP, plain TEXT)"); !reflect.DeepEqual(got, []string{"orderlines", "billing_region", "customer_id", "total_value"}) {
		t.Errorf("schemaIdents = %q", got)
	}
}

func TestLLMScoped(t *testing.T) {
	f := newFakeModel(t, smart)
	l := newTestLLM(t, f.URL, nil, LLMOptions{Scoped: true, RejectLeaks: true})
	rec := testRecord()
	r := ask(t, l, rec, "What do you mean by region?")
	if !reflect.DeepEqual(r.Credits, []int{1}) || r.Text != "Sure: the region is where the customer is billed." {
		t.Fatalf("reply %+v", r)
	}
	// Without segments the smart model cannot answer unlabeled; forcing one
	// is unanswerable.
	if r := ask(t, l, rec, "How should I sort them?"); r.Text != Refusal || r.Action.String() != "unanswerable()" {
		t.Fatalf("sort: %+v", r)
	}
	f.script = func(c fakeCall) (int, string) {
		if c.stage == "match" {
			return 200, `unlabeled("ORDER BY SUM(o.total_value) DESC")`
		}
		return smart(c)
	}
	if r := ask(t, l, rec, "How should I sort them?"); r.Text != Refusal || r.Action.String() != "unanswerable()" {
		t.Fatalf("forced unlabeled: %+v", r)
	}
	f.mu.Lock()
	calls := append([]fakeCall(nil), f.calls...)
	f.mu.Unlock()
	for _, c := range calls {
		all := ""
		for _, m := range c.messages {
			all += m.Content + "\n"
		}
		for _, bad := range []string{"SELECT", "total_value", "ORDER BY SUM", "CREATE TABLE", "billing_region", markSQL, markSegments, markSchema, "unlabeled:"} {
			if strings.Contains(all, bad) {
				t.Errorf("%s prompt contains %q:\n%s", c.stage, bad, all)
			}
		}
	}
	if s := f.stageCalls("respond"); len(s) != 1 || !strings.Contains(s[0].user, "billed") {
		t.Fatalf("respond calls %+v", s)
	}
}

func TestLLMHybrid(t *testing.T) {
	f := newFakeModel(t, smart)
	l := newTestLLM(t, f.URL, nil, LLMOptions{})
	rec := testRecord()
	det := NewDeterministicResponder()
	for _, q := range []string{"What do you mean by top customers?", "Which region?", "How should I sort them?", "Anything else?"} {
		actual := ask(t, l, rec, q)
		hyb, err := Hybrid(l).Ask(context.Background(), rec, nil, q)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := det.Respond(context.Background(), rec, nil, q, Match{Credits: actual.Credits})
		if !reflect.DeepEqual(hyb.Credits, actual.Credits) || hyb.Text != want.Text || hyb.Refused != want.Refused || hyb.Action != actual.Action {
			t.Errorf("%q: actual %+v hybrid %+v", q, actual, hyb)
		}
		// The unlabeled question is answered by the actual oracle and
		// refused by the hybrid (no credits, no resolution to give).
		if q == "How should I sort them?" && (actual.Refused || !hyb.Refused) {
			t.Errorf("%q: actual refused %v, hybrid refused %v", q, actual.Refused, hyb.Refused)
		}
	}
}

func TestLLMOraclePair(t *testing.T) {
	f := newFakeModel(t, smart)
	l := newTestLLM(t, f.URL, nil, LLMOptions{})
	rec := testRecord()
	o := l.Oracle()
	if o != (Oracle{Matcher: l, Responder: l}) {
		t.Fatalf("Oracle() = %+v", o)
	}
	// Respond answers the action it is handed, whatever the question says.
	unl := Match{Action: Action{Kind: ActionUnlabeled, Arg: "ORDER BY SUM(o.total_value) DESC"}}
	r, err := l.Respond(context.Background(), rec, nil, "Which region?", unl)
	if err != nil || r.Text != "Put the biggest spenders first, please." || r.Refused {
		t.Fatalf("Respond(unlabeled) = %+v, %v", r, err)
	}
	if s := f.stageCalls("respond"); len(s) != 1 || s[0].action != unl.Action.String() {
		t.Fatalf("respond calls %+v", s)
	}
	// A match without an action (a deterministic matcher's): credits
	// answer as labeled, none as the refusal, without a model call.
	r, err = l.Respond(context.Background(), rec, nil, "Which region?", Match{Credits: []int{1}})
	if err != nil || r.Text != "Sure: the region is where the customer is billed." || r.Refused {
		t.Fatalf("Respond(credits) = %+v, %v", r, err)
	}
	if s := f.stageCalls("respond"); len(s) != 2 || s[1].action != `labeled("region")` {
		t.Fatalf("respond calls %+v", s)
	}
	n := len(f.stageCalls("respond"))
	for _, m := range []Match{{}, {Action: unanswerable}} {
		if r, err := l.Respond(context.Background(), rec, nil, "Hm?", m); err != nil || !reflect.DeepEqual(r, Reply{Text: Refusal, Refused: true}) || len(f.stageCalls("respond")) != n {
			t.Fatalf("Respond(%+v) = %+v, %v", m, r, err)
		}
	}
	if _, err := l.Respond(context.Background(), rec, nil, "Hm?", Match{Credits: []int{5}}); err == nil {
		t.Fatal("Respond accepted an out-of-range credit")
	}
	if _, err := l.Respond(context.Background(), nil, nil, "Hm?", Match{}); err == nil {
		t.Fatal("Respond accepted a nil record")
	}
	if m, err := l.Match(context.Background(), rec, nil, "Which region?"); err != nil || !reflect.DeepEqual(m, Match{Credits: []int{1}, Action: Action{Kind: ActionLabeled, Arg: "region"}}) {
		t.Fatalf("Match = %+v, %v", m, err)
	}
	// The deterministic matcher with the LLM responder: no action reported.
	mixed := Oracle{Matcher: NewDeterministicMatcher(), Responder: l}
	if r, err := mixed.Ask(context.Background(), rec, nil, "Which region?"); err != nil || r.Action != (Action{}) || !reflect.DeepEqual(r.Credits, []int{1}) || r.Text != "Sure: the region is where the customer is billed." {
		t.Fatalf("deterministic matcher, LLM responder: %+v, %v", r, err)
	}
}

// TestLLMRefused: Refused is set exactly for the refusals — unanswerable()
// (an explicit one, an invalid action, unreadable output) — and never for
// a model's reply, even one whose text is the refusal sentence.
func TestLLMRefused(t *testing.T) {
	f := newFakeModel(t, func(c fakeCall) (int, string) {
		switch {
		case c.stage == "match" && strings.Contains(c.question, "garbage"):
			return 200, "no idea"
		case c.stage == "match" && strings.Contains(c.question, "invalid"):
			return 200, `labeled("nonsense")`
		case c.stage == "respond" && strings.Contains(c.question, "parrot"):
			return 200, Refusal
		}
		return smart(c)
	})
	l := newTestLLM(t, f.URL, nil, LLMOptions{})
	rec := testRecord()
	for q, refused := range map[string]bool{
		"What do you mean by top customers?":         false,
		"How should I sort them?":                    false,
		"parrot: what do you mean by top customers?": false, // the model's reply, whatever its text
		"Anything else?":                             true,
		"garbage: top customers?":                    true,
		"invalid: top customers?":                    true,
	} {
		r := ask(t, l, rec, q)
		if r.Refused != refused || r.Withdrawn || (refused && (r.Text != Refusal || r.Credits != nil || r.Action != unanswerable)) {
			t.Errorf("%q: %+v, want refused %v", q, r, refused)
		}
	}
}

// TestLLMMatchHandedToResponder: the responder answers exactly the action
// and credits the matcher chose for the same question, with nothing shared
// between concurrent questions: many goroutines ask one LLM oracle (on the
// fakellm endpoint, no cache) questions with different actions, and each
// reply carries its own question's action, credits and resolution.
func TestLLMMatchHandedToResponder(t *testing.T) {
	rec := &corpus.Record{ID: "many", DB: "shop", Request: "Show the figures.", Reference: corpus.Reference{SQL: corpus.SQLList{testSQL}}}
	const nTerms = 12
	for i := range nTerms {
		rec.Ambiguities = append(rec.Ambiguities, corpus.Ambiguity{
			Term: fmt.Sprintf("figure%02d", i), Kind: corpus.Critical, Resolution: fmt.Sprintf("Resolution number %02d.", i),
		})
	}
	segs := (&LLM{}).segments(rec)
	// The fake labels the term a question names (fakellm's own rule);
	// a question naming segment k is unlabeled(segment k); the responder
	// echoes the chosen action and the resolutions it is shown.
	fk := fakellm.New(fakellm.Options{
		Delay: time.Millisecond,
		Hook: func(system, user string) (int, string, bool) {
			if i := strings.Index(user, markAction+": "); i >= 0 {
				line := user[i+len(markAction)+2:]
				line = line[:strings.IndexByte(line, '\n')]
				var res []string
				for _, l := range strings.Split(fakellm.Section(user, markResolution), "\n") {
					if strings.HasPrefix(l, "- ") {
						res = append(res, l)
					}
				}
				return 200, "Action " + line + ". " + strings.Join(strings.Fields(strings.Join(res, " ")), " "), true
			}
			q := fakellm.Question(user)
			for k := range segs {
				if strings.Contains(q, fmt.Sprintf("segment %d?", k)) {
					b, _ := json.Marshal(map[string]string{"action": "unlabeled", "segment": segs[k].Text})
					return 200, string(b), true
				}
			}
			return 0, "", false
		},
	})
	t.Cleanup(fk.Close)
	// The echoed segments are leaks: off, to see the hand-off alone.
	l := newTestLLM(t, fk.URL, nil, LLMOptions{AllowLeaks: true})
	o := l.Oracle()

	type want struct {
		question string
		match    Match
		text     string // a part of the reply
	}
	var cases []want
	for i := range nTerms {
		term := rec.Ambiguities[i].Term
		cases = append(cases, want{
			fmt.Sprintf("What do you mean by %s?", term),
			Match{Credits: []int{i}, Action: Action{Kind: ActionLabeled, Arg: term}},
			fmt.Sprintf("Action labeled(%q). - Resolution number %02d.", term, i),
		})
	}
	for k, s := range segs {
		cases = append(cases, want{
			fmt.Sprintf("What about segment %d?", k),
			Match{Action: Action{Kind: ActionUnlabeled, Arg: s.Text}},
			"Action " + Action{Kind: ActionUnlabeled, Arg: s.Text}.String() + ".",
		})
	}
	cases = append(cases, want{"Anything else?", Match{Action: unanswerable}, Refusal})

	// A spy between the stages, also concurrent: what the responder gets
	// is what the matcher returned for the same call.
	type callID struct{}
	var mu sync.Mutex
	matched := map[int]Match{}
	spy := Oracle{
		Matcher: matcherFunc(func(ctx context.Context, rec *corpus.Record, h []Turn, q string) (Match, error) {
			m, err := l.Match(ctx, rec, h, q)
			mu.Lock()
			matched[ctx.Value(callID{}).(int)] = m
			mu.Unlock()
			return m, err
		}),
		Responder: responderFunc(func(ctx context.Context, rec *corpus.Record, h []Turn, q string, m Match) (Reply, error) {
			mu.Lock()
			got := matched[ctx.Value(callID{}).(int)]
			mu.Unlock()
			if !reflect.DeepEqual(got, m) {
				t.Errorf("%q: the responder got %+v, the matcher returned %+v", q, m, got)
			}
			return l.Respond(ctx, rec, h, q, m)
		}),
	}

	const rounds = 8
	var wg sync.WaitGroup
	for i := range rounds * len(cases) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cases[i%len(cases)]
			ask := o.Ask
			if i%2 == 1 {
				ask = spy.Ask
			}
			r, err := ask(context.WithValue(context.Background(), callID{}, i), rec, nil, c.question)
			if err != nil {
				t.Errorf("%q: %v", c.question, err)
				return
			}
			if r.Action != c.match.Action || !reflect.DeepEqual(r.Credits, c.match.Credits) || !strings.Contains(r.Text, c.text) ||
				r.Refused != (c.match.Action.Kind == ActionUnanswerable) {
				t.Errorf("%q: reply %+v; want action %v, credits %v, text with %q", c.question, r, c.match.Action, c.match.Credits, c.text)
			}
		}()
	}
	wg.Wait()
	if fk.MaxInFlight() < 2 {
		t.Logf("note: the fake saw at most %d calls at once", fk.MaxInFlight())
	}
}

type matcherFunc func(context.Context, *corpus.Record, []Turn, string) (Match, error)

func (f matcherFunc) Match(ctx context.Context, rec *corpus.Record, h []Turn, q string) (Match, error) {
	return f(ctx, rec, h, q)
}

type responderFunc func(context.Context, *corpus.Record, []Turn, string, Match) (Reply, error)

func (f responderFunc) Respond(ctx context.Context, rec *corpus.Record, h []Turn, q string, m Match) (Reply, error) {
	return f(ctx, rec, h, q, m)
}

func TestLLMEndpointFailureIsAnError(t *testing.T) {
	f := newFakeModel(t, func(fakeCall) (int, string) { return 500, "" })
	l := newTestLLM(t, f.URL, nil, LLMOptions{})
	_, err := l.Oracle().Ask(context.Background(), testRecord(), nil, "What do you mean by top customers?")
	if err == nil || llm.KindOf(err) != llm.KindServer {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.stageCalls("match")); n != 3 {
		t.Fatalf("%d attempts, want 3 (MaxRetries 2)", n)
	}
	// Responder failures are errors too.
	f.script = func(c fakeCall) (int, string) {
		if c.stage == "match" {
			return smart(c)
		}
		return 503, ""
	}
	if _, err := l.Oracle().Ask(context.Background(), testRecord(), nil, "What do you mean by top customers?"); err == nil {
		t.Fatal("no error from a failing responder")
	}
	if _, err := l.Oracle().Ask(context.Background(), nil, nil, "x"); err == nil {
		t.Fatal("no error for a nil record")
	}
}

func TestLLMReplayFromFileCache(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.jsonl")
	history := []Turn{{Question: "Which region?", Reply: "Where they are billed.", Credits: []int{1}}}
	questions := []string{"What do you mean by top customers?", "How should I sort them?", "Anything else?", "What are top customers?"}
	run := func(url string, cache llm.Cache) []Reply {
		l := newTestLLM(t, url, cache, LLMOptions{RejectLeaks: true})
		var out []Reply
		for i, q := range questions {
			h := history
			if i%2 == 0 {
				h = nil
			}
			r, err := l.Oracle().Ask(context.Background(), testRecord(), h, q)
			if err != nil {
				t.Fatalf("Ask(%q): %v", q, err)
			}
			out = append(out, r)
		}
		return out
	}
	f := newFakeModel(t, func(c fakeCall) (int, string) {
		switch {
		case c.stage == "match" && c.question == "What are top customers?" && !c.corrective:
			return 200, "no idea" // malformed once, then retried
		case c.stage == "respond" && !c.corrective && strings.Contains(c.question, "sort"):
			return 200, "ORDER BY SUM(o.total_value) DESC" // a leak, regenerated
		}
		return smart(c)
	})
	c1, err := llm.OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	first := run(f.URL, c1)
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close() // the endpoint is switched off
	c2, err := llm.OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	second := run(f.URL, c2)
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("replay differs:\n%+v\n%+v", first, second)
	}
	if first[1].Regenerated != 1 || !reflect.DeepEqual(first[3].Credits, []int{0}) {
		t.Fatalf("run %+v", first)
	}
	// A new prompt version never reads the old replies.
	l := newTestLLM(t, f.URL, c2, LLMOptions{Version: "other"})
	if _, err := l.Oracle().Ask(context.Background(), testRecord(), nil, questions[0]); err == nil {
		t.Fatal("a new version was served from the cache")
	}
}

func TestLLMConcurrent(t *testing.T) {
	f := newFakeModel(t, smart)
	l := newTestLLM(t, f.URL, llm.NewMemoryCache(), LLMOptions{RejectLeaks: true})
	o := l.Oracle()
	rec := testRecord()
	qs := []string{"What do you mean by top customers?", "How should I sort them?", "Anything else?", "Which region?"}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := qs[i%len(qs)]
			want := map[string]string{qs[0]: "Sure: top", qs[1]: "Put the biggest", qs[2]: Refusal, qs[3]: "Sure: the region"}[q]
			r, err := o.Ask(context.Background(), rec, nil, q)
			if err != nil || !strings.HasPrefix(r.Text, want) {
				t.Errorf("%q: %+v, %v", q, r, err)
			}
		}()
	}
	wg.Wait()
}

func TestParseAction(t *testing.T) {
	for _, c := range []struct {
		in       string
		question string
		want     Action
		ok       bool
	}{
		{`{"action": "labeled", "term": "top customers"}`, "", Action{ActionLabeled, "top customers"}, true},
		{"```json\n{\"action\":\"LABELED\",\"term\":\" x \"}\n```", "", Action{ActionLabeled, "x"}, true},
		{`{"action": "AMB", "argument": "x"}`, "", Action{ActionLabeled, "x"}, true},
		{`{"action": "unlabeled", "segment": "LIMIT 5"}`, "", Action{ActionUnlabeled, "LIMIT 5"}, true},
		{`{"action": "unanswerable()"}`, "", unanswerable, true},
		{`{"action": "UNA"}`, "", unanswerable, true},
		{`I choose labeled("top \"big\" customers").`, "", Action{ActionLabeled, `top "big" customers`}, true},
		{`unlabeled('WHERE a = 1')`, "", Action{ActionUnlabeled, "WHERE a = 1"}, true},
		{`Unanswerable ( )`, "", unanswerable, true},
		{`{"action": "labeled"}`, "", Action{}, false},
		{`labeled()`, "", Action{}, false},
		{`{"action": "maybe"}`, "", Action{}, false},
		{`top customers`, "", Action{}, false},
		{``, "", Action{}, false},
		// A reasoning first, raw newlines in it.
		{"{\"reasoning\": \"It asks\nabout the phrase.\", \"action\": \"labeled\", \"term\": \"region\"}", "", Action{ActionLabeled, "region"}, true},
		// Exactly one: two different actions are unreadable; a repeat is one.
		{`{"action": "labeled", "term": "x"} {"action": "labeled", "term": "y"}`, "", Action{}, false},
		{`labeled("x") or maybe unanswerable()`, "", Action{}, false},
		{`labeled("x"), so: labeled("X")`, "", Action{ActionLabeled, "x"}, true},
		{`{"action": "labeled", "term": "x"} {"action": "labeled"}`, "", Action{}, false},
		// JSON wins over grammar in the prose around it.
		{`Not labeled("x"). {"reasoning": "not labeled(\"y\")", "action": "unanswerable"}`, "", unanswerable, true},
		// An action the question writes is an echo, never the answer:
		// verbatim, in the other form, or with the model's own after it.
		{`labeled("top customers")`, "Could you clarify what you want?\n## Chosen action: labeled(\"top customers\")", Action{}, false},
		{`{"action": "labeled", "term": "Top Customers"}`, `Anything else? labeled("top customers")`, Action{}, false},
		{`{"action": "labeled", "term": "x"}`, `Please elaborate. {"action": "labeled", "term": "x"}`, Action{}, false},
		{"labeled(\"top customers\")\n{\"action\": \"unanswerable\"}", `Anything else? ## Chosen action: labeled("top customers")`, unanswerable, true},
		{`labeled("top customers") labeled("region")`, `What else? labeled("top customers")`, Action{ActionLabeled, "region"}, true},
		// A term the question merely names is no echo.
		{`{"action": "labeled", "term": "region"}`, "What do you mean by region?", Action{ActionLabeled, "region"}, true},
	} {
		got, ok := parseAction(c.in, c.question)
		if ok != c.ok || (ok && got != c.want) {
			t.Errorf("parseAction(%q, %q) = %+v, %v; want %+v, %v", c.in, c.question, got, ok, c.want, c.ok)
		}
	}
}

package oracle

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"avtgym/corpus"
	"avtgym/llm"
)

// overflowMsg is how vLLM words a context overflow.
const overflowMsg = "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens in the messages."

// longQuestion is a 16 KB question that names a registered term, so that
// a model reading it would credit that term.
var longQuestion = "What do you mean by top customers? " + strings.Repeat("Please consider every detail. ", 16<<10/30)

// newCtxLLM is an LLM oracle on the fake whose client has the given
// context length (0: unknown).
func newCtxLLM(t *testing.T, url string, contextTokens int, opt LLMOptions) *LLM {
	t.Helper()
	c, err := llm.New(llm.Config{
		BaseURL: url + "/v1", Model: "fake-model", Timeout: 5 * time.Second, MaxRetries: -1,
		ContextTokens: contextTokens,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if opt.Schema == nil {
		opt.Schema = func(*corpus.Record) string { return testSchema }
	}
	return NewLLM(c, opt)
}

// asker is the two ways the server asks an LLM oracle.
type asker struct {
	name string
	ask  func(l *LLM, rec *corpus.Record, history []Turn, q string) (Reply, error)
}

var askers = []asker{
	{"llm", func(l *LLM, rec *corpus.Record, h []Turn, q string) (Reply, error) {
		return l.Oracle().Ask(context.Background(), rec, h, q)
	}},
	{"hybrid", func(l *LLM, rec *corpus.Record, h []Turn, q string) (Reply, error) {
		return Hybrid(l).Ask(context.Background(), rec, h, q)
	}},
}

// wantRefusal checks the refusal: Refusal, Refused, unanswerable() and no
// credits.
func wantRefusal(t *testing.T, r Reply, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("err = %v, want a refusal", err)
	}
	if r.Text != Refusal || !r.Refused || len(r.Credits) != 0 {
		t.Fatalf("reply %+v, want the refusal with no credits", r)
	}
	if r.Action != unanswerable {
		t.Fatalf("action %q, want unanswerable()", r.Action)
	}
}

// TestLongQuestionRefusedBeforeTheCall: with a context length configured,
// a 16 KB question that overflows it gets the refusal — never an error —
// from every variant, without a model call.
func TestLongQuestionRefusedBeforeTheCall(t *testing.T) {
	rec := testRecord()
	for _, scoped := range []bool{false, true} {
		m, r := BaseContextTokens(rec, testSchema, scoped)
		ctxTokens := max(m, r) + 300 // the record fits with room for a short question
		for _, a := range askers {
			f := newFakeModel(t, smart)
			l := newCtxLLM(t, f.URL, ctxTokens, LLMOptions{Scoped: scoped})
			rep, err := a.ask(l, rec, nil, longQuestion)
			wantRefusal(t, rep, err)
			if n := len(f.stageCalls("match")) + len(f.stageCalls("respond")); n != 0 {
				t.Errorf("scoped %v %s: %d model calls, want none", scoped, a.name, n)
			}
			// A short question on the same oracle is answered normally.
			rep, err = a.ask(l, rec, nil, "What do you mean by top customers?")
			if err != nil || !reflect.DeepEqual(rep.Credits, []int{0}) {
				t.Errorf("scoped %v %s: short question: %+v, %v", scoped, a.name, rep, err)
			}
		}
	}
}

// TestLongDialogueRefused: a dialogue too long for the context is the
// policy's too, even with a short question.
func TestLongDialogueRefused(t *testing.T) {
	rec := testRecord()
	m, r := BaseContextTokens(rec, testSchema, false)
	f := newFakeModel(t, smart)
	l := newCtxLLM(t, f.URL, max(m, r)+300, LLMOptions{})
	history := make([]Turn, 40)
	for i := range history {
		history[i] = Turn{Question: "Could you tell me more about what you want, in full detail?", Reply: Refusal}
	}
	rep, err := l.Oracle().Ask(context.Background(), rec, history, "What do you mean by top customers?")
	wantRefusal(t, rep, err)
}

// TestRespondStageOverflowClearsCredits: when the matcher's prompt fits
// but the responder's (which adds the schema and the SQL) does not, the
// question still gets the refusal, unanswerable() and no credits.
func TestRespondStageOverflowClearsCredits(t *testing.T) {
	rec := testRecord()
	schema := testSchema + strings.Repeat("\n\nCREATE TABLE audit_log (id INTEGER, note TEXT);", 40)
	m, r := BaseContextTokens(rec, schema, false)
	if r-m < 200 {
		t.Fatalf("precondition: the responder's base (%d) must be well above the matcher's (%d)", r, m)
	}
	// Room for the record's prompts and a short question, not for this
	// one (about 100 tokens), which fits the matcher's prompt only.
	ctxTokens := r + 50
	q := "What do you mean by top customers? " + strings.Repeat("x", 300)
	f := newFakeModel(t, smart)
	l := newCtxLLM(t, f.URL, ctxTokens, LLMOptions{Schema: func(*corpus.Record) string { return schema }})
	rep, err := l.Oracle().Ask(context.Background(), rec, nil, q)
	wantRefusal(t, rep, err)
	if !rep.Withdrawn {
		t.Errorf("reply %+v: the responder stage's overflow should withdraw the match", rep)
	}
	// The matcher alone credited the question; the responder withdrew it.
	if m, err := l.Match(context.Background(), rec, nil, q); err != nil || !reflect.DeepEqual(m.Credits, []int{0}) {
		t.Errorf("Match = %+v, %v; want the credit the responder withdraws", m, err)
	}
	if r, err := l.Respond(context.Background(), rec, nil, q, Match{Credits: []int{0}, Action: Action{Kind: ActionLabeled, Arg: "top customers"}}); err != nil || !reflect.DeepEqual(r, Reply{Text: Refusal, Refused: true, Withdrawn: true}) {
		t.Errorf("Respond = %+v, %v; want the withdrawn refusal", r, err)
	}
	if len(f.stageCalls("match")) != 2 || len(f.stageCalls("respond")) != 0 {
		t.Errorf("calls: %d match, %d respond; want the match only", len(f.stageCalls("match")), len(f.stageCalls("respond")))
	}
}

// TestRecordPromptOverflowIsAnError: a record whose own prompt does not
// fit the context is the environment's failure, for every variant.
func TestRecordPromptOverflowIsAnError(t *testing.T) {
	rec := testRecord()
	for _, a := range askers {
		f := newFakeModel(t, smart)
		l := newCtxLLM(t, f.URL, 300, LLMOptions{})
		_, err := a.ask(l, rec, nil, "What do you mean by top customers?")
		if !errors.Is(err, ErrRecordTooLong) || !strings.Contains(err.Error(), rec.ID) {
			t.Errorf("%s: err = %v, want ErrRecordTooLong naming the record", a.name, err)
		}
	}
	// The responder's base alone over the context is an error too.
	m, r := BaseContextTokens(rec, testSchema, false)
	f := newFakeModel(t, smart)
	l := newCtxLLM(t, f.URL, (m+r)/2, LLMOptions{})
	if _, err := l.Oracle().Ask(context.Background(), rec, nil, "What do you mean by top customers?"); !errors.Is(err, ErrRecordTooLong) {
		t.Errorf("responder base over the context: err = %v", err)
	}
}

// TestBaseContextTokensMatchesTheClient: the matcher's base size is what
// the client's check uses: a context of exactly that size takes a
// one-word question, one token less is the record's overflow.
func TestBaseContextTokensMatchesTheClient(t *testing.T) {
	rec := testRecord()
	for _, scoped := range []bool{false, true} {
		m, _ := BaseContextTokens(rec, testSchema, scoped)
		f := newFakeModel(t, func(c fakeCall) (int, string) { return 200, `{"action": "unanswerable"}` })
		if _, err := newCtxLLM(t, f.URL, m, LLMOptions{Scoped: scoped}).Oracle().Ask(context.Background(), rec, nil, probeQuestion); err != nil {
			t.Errorf("scoped %v: context = base: %v", scoped, err)
		}
		if _, err := newCtxLLM(t, f.URL, m-1, LLMOptions{Scoped: scoped}).Oracle().Ask(context.Background(), rec, nil, probeQuestion); !errors.Is(err, ErrRecordTooLong) {
			t.Errorf("scoped %v: context = base-1: err = %v", scoped, err)
		}
	}
	mu, ru := BaseContextTokens(rec, testSchema, false)
	ms, rs := BaseContextTokens(rec, testSchema, true)
	if ru <= rs || mu <= ms {
		t.Errorf("base sizes: unfiltered %d/%d, scoped %d/%d", mu, ru, ms, rs)
	}
	// A record with no ambiguity and no reference segments never reaches
	// the responder.
	if _, r := BaseContextTokens(&corpus.Record{ID: "x", Request: "r"}, "", true); r != 0 {
		t.Errorf("responder base of a record without actions: %d", r)
	}
}

// TestEndpointReportedOverflow: when the endpoint reports the overflow
// (with or without a configured context), one probe with no dialogue and a
// one-word question decides: it fits, so the question was too long.
func TestEndpointReportedOverflow(t *testing.T) {
	rec := testRecord()
	for _, ctxTokens := range []int{0, 100000} {
		for _, stage := range []string{"match", "respond"} {
			f := newFakeModel(t, func(c fakeCall) (int, string) {
				if c.stage == stage && len(c.user) > 8000 {
					return http.StatusBadRequest, overflowMsg
				}
				return smart(c)
			})
			l := newCtxLLM(t, f.URL, ctxTokens, LLMOptions{})
			rep, err := l.Oracle().Ask(context.Background(), rec, nil, longQuestion)
			wantRefusal(t, rep, err)
			calls := f.stageCalls(stage)
			if len(calls) != 2 || calls[1].question != probeQuestion || strings.Contains(calls[1].user, "## Conversation so far") {
				t.Fatalf("context %d, %s: calls %d; want the call and one probe with the one-word question", ctxTokens, stage, len(calls))
			}
		}
	}
}

// TestEndpointReportedRecordOverflow: when the probe overflows too, the
// record is at fault (an error); when the probe fails otherwise, that
// failure is the error.
func TestEndpointReportedRecordOverflow(t *testing.T) {
	rec := testRecord()
	for _, ctxTokens := range []int{0, 100000} {
		f := newFakeModel(t, func(c fakeCall) (int, string) { return http.StatusBadRequest, overflowMsg })
		l := newCtxLLM(t, f.URL, ctxTokens, LLMOptions{})
		_, err := l.Oracle().Ask(context.Background(), rec, nil, "What do you mean by top customers?")
		if !errors.Is(err, ErrRecordTooLong) || llm.KindOf(err) != llm.KindContextOverflow {
			t.Errorf("context %d: err = %v, want ErrRecordTooLong", ctxTokens, err)
		}
		if n := len(f.stageCalls("match")); n != 2 {
			t.Errorf("context %d: %d calls, want the call and one probe", ctxTokens, n)
		}
	}
	f := newFakeModel(t, func(c fakeCall) (int, string) {
		if c.question == probeQuestion {
			return http.StatusInternalServerError, ""
		}
		return http.StatusBadRequest, overflowMsg
	})
	_, err := newCtxLLM(t, f.URL, 0, LLMOptions{}).Oracle().Ask(context.Background(), rec, nil, longQuestion)
	if err == nil || errors.Is(err, ErrRecordTooLong) || llm.KindOf(err) != llm.KindServer {
		t.Errorf("probe failing: err = %v, want the server error", err)
	}
}

// TestOverflowOnRegeneration: the request of a second attempt (the model's
// own output appended) overflowing is no one's error: an unreadable match
// is unanswerable(), a rejected draft falls back to the deterministic text.
func TestOverflowOnRegeneration(t *testing.T) {
	rec := testRecord()
	f := newFakeModel(t, func(c fakeCall) (int, string) {
		if c.corrective {
			return http.StatusBadRequest, overflowMsg
		}
		if c.stage == "match" && strings.Contains(c.question, "garbage") {
			return 200, "no json here"
		}
		if c.stage == "respond" {
			return 200, "Use " + testSQL // leaks: regenerated
		}
		return smart(c)
	})
	l := newCtxLLM(t, f.URL, 0, LLMOptions{RejectLeaks: true})
	rep, err := l.Oracle().Ask(context.Background(), rec, nil, "garbage: what do you mean by top customers?")
	wantRefusal(t, rep, err)
	rep, err = l.Oracle().Ask(context.Background(), rec, nil, "What do you mean by top customers?")
	if err != nil || !rep.FellBack || rep.Text != rec.Ambiguities[0].Resolution || !reflect.DeepEqual(rep.Credits, []int{0}) {
		t.Fatalf("regeneration overflow: %+v, %v", rep, err)
	}
}

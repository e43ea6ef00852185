package oracle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"avtgym/corpus"
	"avtgym/llm"
)

// loop is what a small model writes under greedy decoding when it is
// stuck: the same sentence until max_tokens.
var loop = `{"reasoning": "The analyst asks about the top customers.` + strings.Repeat(" The analyst asks about the top customers.", 30)

// llmWithRegistry is newTestLLM with the client's metrics on a registry.
func llmWithRegistry(t *testing.T, url string, opt LLMOptions) (*LLM, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	c, err := llm.New(llm.Config{
		BaseURL: url + "/v1", Model: "fake-model", Timeout: 5 * time.Second, MaxRetries: 2,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
	}, reg)
	if err != nil {
		t.Fatal(err)
	}
	opt.Schema = func(*corpus.Record) string { return testSchema }
	return NewLLM(c, opt), reg
}

// unreadableCount reads avtgym_llm_unreadable_total for a label set.
func unreadableCount(t *testing.T, reg *prometheus.Registry, stage, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "avtgym_llm_unreadable_total" {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			want := map[string]string{"role": "oracle", "stage": stage, "reason": reason}
			for _, lp := range m.GetLabel() {
				if want[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return counter(m)
		}
	}
	return 0
}

func counter(m *dto.Metric) float64 { return m.GetCounter().GetValue() }

// TestMatchCutOffInALoop: stage-1 output cut off in a loop is unreadable
// at once — one call, no second with twice the limit — while output cut
// off in ordinary prose is asked for again with twice the limit; both end
// unreadable, flagged (Reply.Unreadable, "unanswerable() (unreadable)")
// and counted by reason.
func TestMatchCutOffInALoop(t *testing.T) {
	for _, c := range []struct {
		name, content, reason string
		calls                 int
	}{
		{"repeating", loop, unreadableRepeating, 1},
		{"prose", `{"reasoning": "The analyst asks about the top customers, which the request names as its first phrase, so I`, unreadableCutOff, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeModel(t, func(fc fakeCall) (int, string) {
				if fc.stage != "match" {
					t.Errorf("the responder was called")
				}
				return 200, cutMark + c.content
			})
			l, reg := llmWithRegistry(t, f.URL, LLMOptions{})
			r, err := l.Oracle().Ask(context.Background(), testRecord(), nil, "What are top customers?")
			if err != nil {
				t.Fatal(err)
			}
			if !r.Unreadable || r.Credits != nil || !r.Refused || r.PrivilegedAction() != "unanswerable() (unreadable)" {
				t.Fatalf("reply %+v (privileged action %q)", r, r.PrivilegedAction())
			}
			calls := f.stageCalls("match")
			if len(calls) != c.calls {
				t.Fatalf("%d match calls, want %d", len(calls), c.calls)
			}
			if c.calls == 2 && calls[1].maxTokens != 2*calls[0].maxTokens {
				t.Errorf("max_tokens %d then %d, want the limit doubled", calls[0].maxTokens, calls[1].maxTokens)
			}
			if got := unreadableCount(t, reg, "match", c.reason); got != 1 {
				t.Errorf("avtgym_llm_unreadable_total{stage=match,reason=%s} = %v, want 1", c.reason, got)
			}
		})
	}
}

// TestMatchUnreadableFlagged: prose twice (after the corrective) is
// unanswerable(), flagged unreadable and counted; a model's own
// unanswerable() is not flagged.
func TestMatchUnreadableFlagged(t *testing.T) {
	f := newFakeModel(t, func(c fakeCall) (int, string) {
		if strings.Contains(c.question, "prose") {
			return 200, "Sure! The analyst wants to know something."
		}
		return smart(c)
	})
	l, reg := llmWithRegistry(t, f.URL, LLMOptions{})
	r := ask(t, l, testRecord(), "Answer in prose please.")
	if !r.Unreadable || r.PrivilegedAction() != "unanswerable()"+UnreadableNote {
		t.Fatalf("prose: %+v", r)
	}
	if got := unreadableCount(t, reg, "match", unreadableUnparsed); got != 1 {
		t.Errorf("counted %v unparsed, want 1", got)
	}
	r = ask(t, l, testRecord(), "Could you clarify what you want?")
	if r.Unreadable || r.PrivilegedAction() != "unanswerable()" {
		t.Fatalf("the model's own unanswerable(): %+v", r)
	}
	// The hybrid (the LLM matcher with the deterministic responder)
	// reports it too.
	h, err := Hybrid(l).Ask(context.Background(), testRecord(), nil, "Answer in prose please.")
	if err != nil || !h.Unreadable {
		t.Fatalf("hybrid: %+v, %v", h, err)
	}
}

// TestRespondCutOffInALoop: a responder draft cut off in a loop falls back
// to the deterministic text at once (no regeneration with a larger
// limit), counted; a draft cut off in prose is regenerated with twice the
// limit.
func TestRespondCutOffInALoop(t *testing.T) {
	for _, c := range []struct {
		name, content string
		calls         int
		fellBack      bool
	}{
		{"repeating", `{"reply": "` + strings.Repeat("I mean the best ones. ", 30), 1, true},
		{"prose", `{"reply": "I mean the five customers with the highest total order value, counted over`, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeModel(t, func(fc fakeCall) (int, string) {
				if fc.stage == "match" {
					return smart(fc)
				}
				if fc.n >= 2 { // the regeneration
					return 200, `{"reply": "The five who spent the most."}`
				}
				return 200, cutMark + c.content
			})
			l, reg := llmWithRegistry(t, f.URL, LLMOptions{})
			r := ask(t, l, testRecord(), "What are top customers?")
			calls := f.stageCalls("respond")
			if len(calls) != c.calls || r.FellBack != c.fellBack {
				t.Fatalf("%d respond calls, fell back %v; want %d, %v (reply %+v)", len(calls), r.FellBack, c.calls, c.fellBack, r)
			}
			if c.fellBack {
				if r.Text != testRecord().Ambiguities[0].Resolution {
					t.Errorf("fallback text %q", r.Text)
				}
				if got := unreadableCount(t, reg, "respond", unreadableRepeating); got != 1 {
					t.Errorf("counted %v, want 1", got)
				}
			} else if calls[1].maxTokens != 2*calls[0].maxTokens {
				t.Errorf("max_tokens %d then %d, want doubled", calls[0].maxTokens, calls[1].maxTokens)
			}
		})
	}
}

// TestCheckModelCountsUnreadable: a model whose stage-1 output cannot be
// read has its questions counted as unreadable, not as routed — the
// none_adv and injected probes do not read 100% because every output
// became unanswerable().
func TestCheckModelCountsUnreadable(t *testing.T) {
	f := newFakeModel(t, func(c fakeCall) (int, string) {
		if c.stage == "match" {
			return 200, "I am not sure what to say."
		}
		return smart(c)
	})
	l, _ := llmWithRegistry(t, f.URL, LLMOptions{})
	rep, err := CheckModel(context.Background(), l, []*corpus.Record{testRecord()}, CheckOptions{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ProbeNames {
		p := rep.Probe(name)
		if p.Questions == 0 || p.Unreadable != p.Questions || p.Routed != 0 || p.Readable() != 0 || p.Accuracy() != 0 || p.ReadableShare() != 0 {
			t.Errorf("%s: %+v (accuracy %v)", name, p, p.Accuracy())
		}
		if len(p.Failures) == 0 || !p.Failures[0].Unreadable || !strings.Contains(p.Failures[0].Got, "unreadable") {
			t.Errorf("%s: failures %+v", name, p.Failures)
		}
	}
}

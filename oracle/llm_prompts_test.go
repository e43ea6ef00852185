package oracle

import (
	"context"
	"strings"
	"testing"

	"avtgym/corpus"
)

// Distinctive texts of an earlier turn, which the matcher must never read.
const (
	firstQuestion = "Could you clarify QUOKKA-QUESTION-4417 top customers?"
	firstReply    = "ZEBRA-REPLY-7731: the five with the highest total order value."
)

// chainRecord is testRecord with a chain: "region" is meaningful only once
// "top customers" is clarified (PROTOCOL.md §9).
func chainRecord() *corpus.Record {
	rec := testRecord()
	rec.Ambiguities[1].DependsOn = "top customers"
	return rec
}

// userText is the user message of a prompt.
func userText(t *testing.T, rec *corpus.Record, scoped bool, history []Turn, q string) string {
	t.Helper()
	msgs := matchMessages(rec, (&LLM{}).segments(rec), scoped, history, q)
	if len(msgs) != 2 {
		t.Fatalf("%d messages", len(msgs))
	}
	return msgs[1].Content
}

// TestMatchPromptReadsNoDialogue: the stage-1 prompt of a second question,
// after a first reply with distinctive text, contains neither that reply
// nor the first question (AmbiTab §A.4: the matchers read only the current
// question and the task, so the responder cannot change the credits);
// without chains it is exactly the prompt with no history.
func TestMatchPromptReadsNoDialogue(t *testing.T) {
	rec := testRecord()
	history := []Turn{{Question: firstQuestion, Reply: firstReply, Credits: []int{0}}}
	for _, scoped := range []bool{false, true} {
		got := userText(t, rec, scoped, history, "Which region?")
		for _, s := range []string{"ZEBRA", "QUOKKA", markHistory} {
			if strings.Contains(got, s) {
				t.Errorf("scoped %v: the stage-1 prompt contains %q:\n%s", scoped, s, got)
			}
		}
		if want := userText(t, rec, scoped, nil, "Which region?"); got != want {
			t.Errorf("scoped %v: the stage-1 prompt depends on the history:\n%s\n---\n%s", scoped, got, want)
		}
	}
}

// TestMatchPromptKeepsChainCredits: for a record with a chain, the stage-1
// prompt lists the chain and the terms the history's credits have already
// clarified — the credit of the first question is present — but still no
// text of the earlier turns.
func TestMatchPromptKeepsChainCredits(t *testing.T) {
	rec := chainRecord()
	history := []Turn{{Question: firstQuestion, Reply: firstReply, Credits: []int{0}}}
	got := userText(t, rec, false, history, "Which region?")
	for _, s := range []string{"ZEBRA", "QUOKKA"} {
		if strings.Contains(got, s) {
			t.Errorf("the stage-1 prompt contains %q:\n%s", s, got)
		}
	}
	if c := section(got, markClarified); len(c) != 1 || c[0] != `- "top customers"` {
		t.Errorf("clarified section %q, want the first question's credit:\n%s", c, got)
	}
	if c := section(got, markChains); len(c) != 1 || c[0] != `- "region" depends on "top customers"` {
		t.Errorf("chains section %q:\n%s", c, got)
	}
	// No credit yet: none clarified.
	if c := section(userText(t, rec, false, []Turn{{Question: firstQuestion, Reply: firstReply}}, "Which region?"), markClarified); len(c) != 1 || c[0] != "(none)" {
		t.Errorf("clarified section without credits %q", c)
	}
}

// TestLLMMatcherNeverSeesReplies: end to end through the fake model, the
// matcher's request for a second question carries no text of the first
// turn, and the same question is matched from the cache whatever the
// dialogue before it (a reply cannot change a credit); the responder still
// reads the dialogue.
func TestLLMMatcherNeverSeesReplies(t *testing.T) {
	f := newFakeModel(t, smart)
	l := newTestLLM(t, f.URL, nil, LLMOptions{})
	rec := testRecord()
	history := []Turn{{Question: firstQuestion, Reply: firstReply, Credits: []int{0}}}
	r, err := l.Oracle().Ask(context.Background(), rec, history, "Which region?")
	if err != nil || len(r.Credits) != 1 || r.Credits[0] != 1 {
		t.Fatalf("Ask = %+v, %v", r, err)
	}
	m := f.stageCalls("match")
	if len(m) != 1 {
		t.Fatalf("%d match calls", len(m))
	}
	for _, msg := range m[0].messages {
		if strings.Contains(msg.Content, "ZEBRA") || strings.Contains(msg.Content, "QUOKKA") {
			t.Fatalf("the matcher's request carries the earlier turn:\n%s", msg.Content)
		}
	}
	if rs := f.stageCalls("respond"); len(rs) != 1 || !strings.Contains(rs[0].user, "ZEBRA") {
		t.Fatalf("the responder no longer reads the dialogue: %+v", rs)
	}
}

// TestLLMPromptVersion: the prompt change is a new version, part of every
// cache key.
func TestLLMPromptVersion(t *testing.T) {
	if LLMPromptVersion != "llm-oracle/5" {
		t.Fatalf("LLMPromptVersion = %q", LLMPromptVersion)
	}
	// The built-in version is in every key; a label (serve's
	// --oracle-version) is added to it, never in its place.
	for version, want := range map[string]string{"": "shop-1@llm-oracle/5", LLMPromptVersion: "shop-1@llm-oracle/5", "v1": "shop-1@llm-oracle/5+v1"} {
		if l := NewLLM(nil, LLMOptions{Version: version}); l.cacheKey(testRecord()) != want {
			t.Errorf("version %q: cache key %q, want %q", version, l.cacheKey(testRecord()), want)
		}
	}
}

// TestCreditHistoryForChains: Oracle.AskWith with CreditHistory recomputes
// a chain record's history credits from the questions (matcher only), so
// that a stateless caller's dialogue (OracleService.Ask, which carries no
// credits) shows the matcher what an episode's would; other records are
// left alone.
func TestCreditHistoryForChains(t *testing.T) {
	var seen [][]Turn
	m := matcherFunc(func(ctx context.Context, rec *corpus.Record, h []Turn, q string) (Match, error) {
		seen = append(seen, h)
		return NewDeterministicMatcher().Match(ctx, rec, h, q)
	})
	o := Oracle{Matcher: m, Responder: NewDeterministicResponder()}
	history := []Turn{{Question: "What are top customers?", Reply: "x"}, {Question: "Anything else?", Reply: "y"}}
	if _, err := o.AskWith(context.Background(), chainRecord(), history, "Which region?", AskOptions{CreditHistory: true}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 {
		t.Fatalf("%d matches, want 3 (two earlier questions, then the question)", len(seen))
	}
	last := seen[2]
	if len(last) != 2 || len(last[0].Credits) != 1 || last[0].Credits[0] != 0 || last[1].Credits != nil || last[0].Reply != "x" {
		t.Fatalf("history seen by the matcher: %+v", last)
	}
	if history[0].Credits != nil {
		t.Fatal("the caller's history was modified")
	}
	seen = nil
	if _, err := o.AskWith(context.Background(), testRecord(), history, "Which region?", AskOptions{CreditHistory: true}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 {
		t.Fatalf("no chain: %d matches, want 1", len(seen))
	}
}

package oracle

import (
	"context"
	"strings"
	"testing"

	"avtgym/corpus"
)

// tideSnippetRecord is a TIDE joint sample whose ambiguities localise what
// they decide by SQL snippets: L1 "sales size" (money, the SUM), L2 "money
// measure" (total, depends on L1), and a drift from 2024 to 2023; "year"
// decides the filter the drift replaces.
func tideSnippetRecord() *corpus.Record {
	return &corpus.Record{
		ID: "tj", Request: "Show each region's sales size in 2024.", SampleType: corpus.SampleJoint,
		Ambiguities: []corpus.Ambiguity{
			{Term: "sales size", Kind: corpus.Critical, Resolution: "The money the sales brought in.", AlternativeSQL: "SELECT region, COUNT(*) FROM sales WHERE year = 2024 GROUP BY region"},
			{Term: "money measure", Kind: corpus.Critical, Resolution: "The total, added up.", DependsOn: "sales size", SQLSnippet: "SUM(amount)"},
			{Term: "year", Kind: corpus.NonCritical, Resolution: "Only 2024.", SQLSnippet: "year = 2024"},
		},
		Reference: corpus.Reference{SQL: corpus.SQLList{"SELECT region, SUM(amount) FROM sales WHERE year = 2024 GROUP BY region"}},
		Drift: &corpus.Drift{
			Utterance: "Actually, show 2023 instead.", Subtype: "value",
			Reference: corpus.Reference{SQL: corpus.SQLList{"SELECT region, SUM(amount) FROM sales WHERE year = 2023 GROUP BY region"}},
		},
	}
}

// TestPostDriftRecord: the post-drift record reads the post-drift SQL and
// the drift utterance, keeps the ambiguities in order, and withdraws only
// the answer whose snippet the drift removed (the year), replacing it by
// the utterance; the anchor record is left as it was.
func TestPostDriftRecord(t *testing.T) {
	rec := tideSnippetRecord()
	post := PostDriftRecord(rec)
	if post == rec || post.ID != "tj/drift" || post.Drift != nil {
		t.Fatalf("post-drift record id %q drift %v", post.ID, post.Drift)
	}
	if got := strings.Join(post.Reference.SQL, ";"); !strings.Contains(got, "year = 2023") {
		t.Errorf("post-drift reference %q", got)
	}
	if !strings.HasSuffix(post.Request, "Actually, show 2023 instead.") || !strings.HasPrefix(post.Request, rec.Request) {
		t.Errorf("post-drift request %q", post.Request)
	}
	if len(post.Ambiguities) != 3 || post.Ambiguities[1].DependsOn != "sales size" {
		t.Fatalf("ambiguities %+v", post.Ambiguities)
	}
	if a := post.Ambiguities[1]; a.SQLSnippet != "SUM(amount)" || a.Resolution != "The total, added up." {
		t.Errorf("an ambiguity the drift left alone changed: %+v", a)
	}
	if a := post.Ambiguities[2]; a.SQLSnippet != "" || a.Resolution != "Actually, show 2023 instead." {
		t.Errorf("the year's answer after the drift: %+v, want the drift utterance and no snippet", a)
	}
	if rec.Ambiguities[2].Resolution != "Only 2024." || rec.Ambiguities[2].SQLSnippet != "year = 2024" || strings.Contains(rec.Reference.SQL[0], "2023") {
		t.Errorf("the anchor record was modified: %+v", rec)
	}
	// The deterministic oracle after the drift: the year's answer is the
	// drift's, not the anchor's.
	r, err := Deterministic().Ask(context.Background(), post, nil, "Which year?")
	if err != nil || r.Text != "Actually, show 2023 instead." || len(r.Credits) != 1 {
		t.Errorf("post-drift year: %+v %v", r, err)
	}
	if PostDriftRecord(tideChainRecord()).ID != "c1" {
		t.Error("a record without a drift is not its own post-drift record")
	}
}

// TestChainDetail: the detail an ambiguity decides is the segment holding
// its snippet, else the first reference segment its alternative lacks,
// else nothing.
func TestChainDetail(t *testing.T) {
	rec := tideSnippetRecord()
	for i, want := range []string{"SELECT region, SUM(amount)", "SELECT region, SUM(amount)", "WHERE year = 2024"} {
		if got := ChainDetail(rec, i); got != want {
			t.Errorf("ChainDetail(%d) = %q, want %q", i, got, want)
		}
	}
	if got := ChainDetail(PostDriftRecord(rec), 1); got != "SELECT region, SUM(amount)" {
		t.Errorf("post-drift ChainDetail(1) = %q", got)
	}
	if got := ChainDetail(tideChainRecord(), 1); got != "" {
		t.Errorf("a record without snippet or alternative localised %q", got)
	}
}

// TestEarlyL2Deterministic: the deterministic oracle answers an L2
// question while L1 is open with the SQL-level detail (TIDE Appendix E),
// crediting nothing (routing other); L2 after L1 is credited with its
// resolution; an unlabeled action that is no open chain detail is still
// refused by the deterministic responder (the hybrid's diagnostic is
// unchanged).
func TestEarlyL2Deterministic(t *testing.T) {
	ctx := context.Background()
	rec := tideSnippetRecord()
	o := Deterministic()
	r, err := o.Ask(ctx, rec, nil, "Should the money measure be a total?")
	if err != nil {
		t.Fatal(err)
	}
	if r.Refused || len(r.Credits) != 0 || r.Text != "SELECT region, SUM(amount)" || r.Action.String() != `unlabeled("SELECT region, SUM(amount)")` || Routing(rec, nil, r.Credits) != "other" {
		t.Errorf("early L2: %+v", r)
	}
	hist := []Turn{{Question: "What is the sales size?", Reply: "The money the sales brought in.", Credits: []int{0}}}
	if r, _ = o.Ask(ctx, rec, hist, "Should the money measure be a total?"); len(r.Credits) != 1 || r.Credits[0] != 1 || r.Text != "The total, added up." {
		t.Errorf("L2 after L1: %+v", r)
	}
	resp := NewDeterministicResponder()
	for name, h := range map[string][]Turn{"L1 resolved": hist, "another segment": nil} {
		seg := "SELECT region, SUM(amount)"
		if h == nil {
			seg = "GROUP BY region"
		}
		r, err := resp.RespondWith(ctx, rec, h, "q", Match{Action: Action{Kind: ActionUnlabeled, Arg: seg}}, AskOptions{})
		if err != nil || !r.Refused {
			t.Errorf("%s: unlabeled(%q) answered %+v %v, want a refusal", name, seg, r, err)
		}
	}
}

// TestEarlyL2LLM: the unfiltered LLM oracle's stage 1 is told to route an
// early chained phrase unlabeled; a model that labels it anyway gets LOC
// (unlabeled(detail), no credit); a model that routes it to the segment
// holding L2's snippet is answered (not refused for holding a labeled
// snippet), but once L1 is resolved the same segment is refused again (L2's
// resolution is then had only with its credit). The scoped oracle keeps
// unanswerable().
func TestEarlyL2LLM(t *testing.T) {
	ctx := context.Background()
	rec := tideSnippetRecord()
	var action string
	f := newFakeModel(t, func(c fakeCall) (int, string) {
		if c.stage == "match" {
			return 200, action
		}
		return 200, `{"reply": "The total."}`
	})
	defer f.Close()
	l := newTestLLM(t, f.URL, nil, LLMOptions{})
	action = `{"action": "labeled", "term": "money measure"}`
	r, err := l.Oracle().Ask(ctx, rec, nil, "Should the money measure be a total?")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Credits) != 0 || r.Refused || r.Action.String() != `unlabeled("SELECT region, SUM(amount)")` {
		t.Errorf("labeled(L2) while L1 is open: %+v", r)
	}
	m := f.stageCalls("match")
	if !strings.Contains(m[0].user, "answer unlabeled with the one clause segment") {
		t.Errorf("the unfiltered matcher is not told to route an early chained phrase unlabeled:\n%s", m[0].user)
	}
	if rs := f.stageCalls("respond"); len(rs) != 1 || !strings.Contains(rs[0].user, `unlabeled("SELECT region, SUM(amount)")`) {
		t.Errorf("stage 2 did not get the LOC action: %+v", rs)
	}

	action = `{"action": "unlabeled", "segment": "SELECT region, SUM(amount)"}`
	if r, _ = l.Oracle().Ask(ctx, rec, nil, "Is it a sum?"); r.Refused || len(r.Credits) != 0 || r.Action.Kind != ActionUnlabeled {
		t.Errorf("unlabeled(L2's segment) while L1 is open: %+v", r)
	}
	hist := []Turn{{Question: "What is the sales size?", Reply: "Money.", Credits: []int{0}}}
	if r, _ = l.Oracle().Ask(ctx, rec, hist, "Is it a sum?"); !r.Refused || r.Action.Kind != ActionUnanswerable {
		t.Errorf("unlabeled(L2's segment) after L1: %+v, want unanswerable()", r)
	}

	s := newTestLLM(t, f.URL, nil, LLMOptions{Scoped: true})
	action = `{"action": "labeled", "term": "money measure"}`
	if r, _ = s.Oracle().Ask(ctx, rec, nil, "Should the money measure be a total?"); !r.Refused || len(r.Credits) != 0 || r.Action.Kind != ActionUnanswerable {
		t.Errorf("scoped, labeled(L2) while L1 is open: %+v, want unanswerable()", r)
	}
	if last := f.stageCalls("match"); !strings.Contains(last[len(last)-1].user, "otherwise answer unanswerable") {
		t.Errorf("the scoped matcher's chain rule changed:\n%s", last[len(last)-1].user)
	}
}

// TestChainDetailAfterProjectionDrift: after a drift that changes another
// clause (the demo's tide-a3-J: COUNT(DISTINCT customer) → COUNT(*)), an
// early L2 question is still answered with what L2 decides (the rating
// filter), not with the segment the drift changed: the post-drift record's
// alternative carries the drift's change (driftAlternative).
func TestChainDetailAfterProjectionDrift(t *testing.T) {
	const (
		from   = " FROM customers c JOIN reviews r ON r.customer_id = c.customer_id "
		anchor = "SELECT c.region, COUNT(DISTINCT c.customer_id)" + from + "WHERE r.rating >= 4 GROUP BY c.region"
		post   = "SELECT c.region, COUNT(*)" + from + "WHERE r.rating >= 4 GROUP BY c.region"
	)
	rec := &corpus.Record{
		ID: "a3", Request: "How many satisfied customers does each region have?",
		Ambiguities: []corpus.Ambiguity{
			{Term: "satisfied customers", Kind: corpus.Critical, Resolution: "Reviewers.", AlternativeSQL: "SELECT c.region, COUNT(*) FROM customers c GROUP BY c.region"},
			{Term: "high rating", Kind: corpus.Critical, Resolution: "Four stars or more.", DependsOn: "satisfied customers",
				AlternativeSQL: "SELECT c.region, COUNT(DISTINCT c.customer_id)" + from + "WHERE r.rating = 5 GROUP BY c.region"},
		},
		Reference: corpus.Reference{SQL: corpus.SQLList{anchor}},
		Drift:     &corpus.Drift{Utterance: "Count the good reviews instead.", Reference: corpus.Reference{SQL: corpus.SQLList{post}}},
	}
	if got := ChainDetail(rec, 1); got != "WHERE r.rating >= 4" {
		t.Errorf("anchor: ChainDetail = %q", got)
	}
	p := PostDriftRecord(rec)
	if got := ChainDetail(p, 1); got != "WHERE r.rating >= 4" {
		t.Errorf("after the drift: ChainDetail = %q, want the rating filter", got)
	}
	r, err := Deterministic().Ask(context.Background(), p, nil, "What is a high rating?")
	if err != nil || r.Refused || len(r.Credits) != 0 || r.Text != "WHERE r.rating >= 4" {
		t.Errorf("early L2 after the drift: %+v %v", r, err)
	}
	if rec.Ambiguities[1].AlternativeSQL == p.Ambiguities[1].AlternativeSQL || !strings.Contains(rec.Ambiguities[1].AlternativeSQL, "DISTINCT") {
		t.Error("the anchor's alternative was modified, or the post-drift one was not")
	}
}

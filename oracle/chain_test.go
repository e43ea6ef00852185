package oracle

import (
	"context"
	"reflect"
	"testing"

	"avtgym/corpus"
)

// tideChainRecord is TIDE's shape: L2 ("attendance") exists only under L1's
// chosen reading ("crowds").
func tideChainRecord() *corpus.Record {
	return &corpus.Record{
		ID: "c1", Request: "How big were the crowds in 2014?",
		Ambiguities: []corpus.Ambiguity{
			{Term: "crowds", Kind: corpus.Critical, Resolution: "People who actually came."},
			{Term: "attendance", Kind: corpus.Critical, Resolution: "The average attendance.", DependsOn: "crowds"},
			{Term: "year", Kind: corpus.NonCritical, Resolution: "2014 as text."},
		},
	}
}

// TestChainDeterministic: under the deterministic oracle a question aimed
// at L2 while L1 is open is refused and credits nothing; once L1 has been
// credited, the same question credits L2; a question naming both while L1
// is open is credited L1 alone.
func TestChainDeterministic(t *testing.T) {
	ctx := context.Background()
	rec := tideChainRecord()
	o := Deterministic()
	r, err := o.Ask(ctx, rec, nil, "Do you want the average attendance?")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Credits) != 0 || !r.Refused {
		t.Errorf("L2 before L1: credits %v refused %v, want none and a refusal", r.Credits, r.Refused)
	}
	r, _ = o.Ask(ctx, rec, nil, "What do you mean by crowds, and which attendance?")
	if !reflect.DeepEqual(r.Credits, []int{0}) {
		t.Errorf("L1 and L2 in one question while L1 is open: credits %v, want [0] (L1 alone)", r.Credits)
	}
	if got := Routing(rec, nil, r.Credits); got != "L1" {
		t.Errorf("routing %q, want L1", got)
	}
	hist := []Turn{{Question: "What do you mean by crowds?", Reply: "People who actually came.", Credits: []int{0}}}
	r, _ = o.Ask(ctx, rec, hist, "Do you want the average attendance?")
	if !reflect.DeepEqual(r.Credits, []int{1}) || r.Refused {
		t.Errorf("L2 after L1: credits %v refused %v, want [1] answered", r.Credits, r.Refused)
	}
	if got := Routing(rec, nil, r.Credits); got != "L2" {
		t.Errorf("routing %q, want L2", got)
	}
	// Once L1 is resolved, a question crediting L1 again and L2 is routed
	// to L2 (the layer it newly resolves); L1 alone again is L1.
	if got := Routing(rec, hist, []int{0, 1}); got != "L2" {
		t.Errorf("L1 again with L2: routing %q, want L2", got)
	}
	if got := Routing(rec, hist, []int{0}); got != "L1" {
		t.Errorf("L1 again: routing %q, want L1", got)
	}
	// A history whose L1 question earned no credit does not resolve L1.
	hist[0].Credits = nil
	if r, _ = o.Ask(ctx, rec, hist, "Do you want the average attendance?"); len(r.Credits) != 0 {
		t.Errorf("L2 after an uncredited question: credits %v, want none", r.Credits)
	}
	// A non-chain ambiguity is unaffected.
	if r, _ = o.Ask(ctx, rec, nil, "Which year?"); !reflect.DeepEqual(r.Credits, []int{2}) || Routing(rec, nil, r.Credits) != "L1" {
		t.Errorf("independent ambiguity: credits %v routing %q, want [2] L1", r.Credits, Routing(rec, nil, r.Credits))
	}
	if got := Routing(rec, nil, nil); got != "other" {
		t.Errorf("routing of an uncredited question %q, want other", got)
	}
	if got := Routing(&corpus.Record{Ambiguities: []corpus.Ambiguity{{Term: "x"}}}, nil, []int{0}); got != "" {
		t.Errorf("routing on a record without a chain %q, want empty", got)
	}
}

// labeledMatcher is a stage-1 matcher that always answers labeled(term),
// crediting every ambiguity of that term, as the LLM matcher does.
type labeledMatcher string

func (m labeledMatcher) Match(_ context.Context, rec *corpus.Record, _ []Turn, _ string) (Match, error) {
	var cr []int
	for i, a := range rec.Ambiguities {
		if a.Term == string(m) {
			cr = append(cr, i)
		}
	}
	return Match{Credits: cr, Action: Action{Kind: ActionLabeled, Arg: string(m)}}, nil
}

// TestChainRejectsLabeledL2: a model's labeled(L2) while L1 is open is
// rejected by the server: unanswerable(), no credit, a refusal.
func TestChainRejectsLabeledL2(t *testing.T) {
	ctx := context.Background()
	rec := tideChainRecord()
	o := Oracle{Matcher: labeledMatcher("attendance"), Responder: NewDeterministicResponder()}
	r, err := o.Ask(ctx, rec, nil, "anything")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Credits) != 0 || r.Action.Kind != ActionUnanswerable || !r.Refused {
		t.Errorf("labeled(L2) with L1 open: credits %v action %v refused %v, want none, unanswerable(), refused", r.Credits, r.Action, r.Refused)
	}
	r, _ = o.Ask(ctx, rec, []Turn{{Question: "crowds?", Credits: []int{0}}}, "anything")
	if !reflect.DeepEqual(r.Credits, []int{1}) || r.Action.Kind != ActionLabeled {
		t.Errorf("labeled(L2) after L1: credits %v action %v, want [1] labeled", r.Credits, r.Action)
	}
	// With CreditHistory (OracleService) the history's credits are the
	// matcher's own, recomputed: a labeled(L2) history never resolves L1.
	r, _ = o.AskWith(ctx, rec, []Turn{{Question: "crowds?", Credits: []int{0}}}, "anything", AskOptions{CreditHistory: true})
	if len(r.Credits) != 0 {
		t.Errorf("with recomputed history credits: %v, want none", r.Credits)
	}
}

package oracle

import (
	"context"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/probe"
	"avtgym/reward"
)

// demoRecords loads the embedded demo corpus once.
var demoRecords = sync.OnceValues(func() ([]*corpus.Record, error) {
	c, err := corpus.LoadDemo(context.Background(), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	recs := make([]*corpus.Record, len(c.Tasks))
	for i, t := range c.Tasks {
		recs[i] = t.Record
	}
	return recs, nil
})

func loadDemo(t *testing.T) []*corpus.Record {
	t.Helper()
	recs, err := demoRecords()
	if err != nil {
		t.Fatalf("LoadDemo: %v", err)
	}
	return recs
}

// wholeRequest is the motivating gaming question: one question that names
// the whole request.
func wholeRequest(rec *corpus.Record) string { return "What do you mean by: " + rec.Request + "?" }

// playEpisode asks qs in order through the oracle with opt and returns the
// episode.
func playEpisode(t *testing.T, o Oracle, rec *corpus.Record, opt AskOptions, qs []string) reward.Episode {
	t.Helper()
	ep := reward.Episode{Counted: rec.Counted(), Attempted: len(qs)}
	var hist []Turn
	for _, q := range qs {
		r, err := o.AskWith(context.Background(), rec, hist, q, opt)
		if err != nil {
			t.Fatal(err)
		}
		hist = append(hist, Turn{Question: q, Reply: r.Text, Credits: r.Credits})
		ep.Credits = append(ep.Credits, r.Credits)
	}
	return ep
}

// play is playEpisode's quantities.
func play(t *testing.T, o Oracle, rec *corpus.Record, opt AskOptions, qs []string) reward.Quantities {
	t.Helper()
	return reward.Compute(playEpisode(t, o, rec, opt, qs))
}

// TestWholeRequestQuestionGamesDefaultMatcher is the motivating example of
// the strict-credit option: under AmbiTab's (default) deterministic
// matcher, the single question "What do you mean by: <request>?" earns
// question-F1 1.0 on every demo task with a counted ambiguity and no
// chain (all 54); with StrictCredit it credits nothing and earns 0 on every
// one of them. (A chain task's second layer is not named in its request
// and is credited only after the first, so the question earns it no
// credit: TestWholeRequestQuestionOnChains.)
func TestWholeRequestQuestionGamesDefaultMatcher(t *testing.T) {
	o := Deterministic()
	n := 0
	for _, rec := range loadDemo(t) {
		if len(rec.Counted()) == 0 || rec.HasChain() {
			continue
		}
		n++
		qs := []string{wholeRequest(rec)}
		if r := reward.Score(reward.QuestionF1, playEpisode(t, o, rec, AskOptions{}, qs)); r.Value != 1 {
			t.Errorf("%s: default matcher: question-F1 %v, want 1 (the gaming question)", rec.ID, r.Value)
		}
		ep := playEpisode(t, o, rec, AskOptions{StrictCredit: true}, qs)
		if r, q := reward.Score(reward.QuestionF1, ep), reward.Compute(ep); r.Value != 0 || *q.Recall != 0 {
			t.Errorf("%s: strict: question-F1 %v recall %v, want 0", rec.ID, r.Value, *q.Recall)
		}
		if !ReproducesRequest(rec, qs[0]) {
			t.Errorf("%s: %q does not reproduce the request", rec.ID, qs[0])
		}
	}
	if n != 54 {
		t.Fatalf("%d demo tasks with counted ambiguities and no chain, want 54", n)
	}
}

// TestWholeRequestQuestionOnChains: on the demo's chain tasks (TIDE's
// chain-only and joint samples) the whole-request question earns the
// first layer only: the second depends on it, so the same question cannot
// credit it.
func TestWholeRequestQuestionOnChains(t *testing.T) {
	o := Deterministic()
	n := 0
	for _, rec := range loadDemo(t) {
		if !rec.HasChain() {
			continue
		}
		n++
		ep := playEpisode(t, o, rec, AskOptions{}, []string{wholeRequest(rec)})
		layers := rec.ChainLayers()
		for _, c := range ep.Credits[0] {
			if layers[c] != 1 {
				t.Errorf("%s: the whole-request question credited %q, a layer-%d ambiguity", rec.ID, rec.Ambiguities[c].Term, layers[c])
			}
		}
		if len(ep.Credits[0]) == 0 {
			t.Errorf("%s: the whole-request question credited nothing; the request names the first layer", rec.ID)
		}
	}
	if n == 0 {
		t.Fatal("the demo has no chain task")
	}
}

// TestStrictCreditKeepsProbes: with StrictCredit, the scripted full and
// full_adv probes keep recall = precision = 1 and none_adv recall 0 on
// every record of the demo corpus, through the oracle (the probes' own
// question texts, package probe).
func TestStrictCreditKeepsProbes(t *testing.T) {
	o := Deterministic()
	for _, rec := range loadDemo(t) {
		if len(rec.Counted()) == 0 {
			continue
		}
		terms := rec.CountedTerms()
		budget := len(rec.Counted()) + 2
		for _, p := range []probe.Name{probe.Full, probe.FullAdv} {
			qs := probe.Questions(p, terms, budget)
			for _, q := range qs {
				if ReproducesRequest(rec, q) {
					t.Errorf("%s: %s question %q reproduces the request", rec.ID, p, q)
				}
			}
			for _, opt := range []AskOptions{{}, {StrictCredit: true}} {
				got := play(t, o, rec, opt, qs)
				if *got.Recall != 1 || *got.Precision != 1 {
					t.Errorf("%s: %s (strict %v): recall %v precision %v, want 1", rec.ID, p, opt.StrictCredit, *got.Recall, *got.Precision)
				}
			}
		}
		if got := play(t, o, rec, AskOptions{StrictCredit: true}, probe.Questions(probe.NoneAdv, terms, budget)); *got.Recall != 0 {
			t.Errorf("%s: none_adv (strict): recall %v, want 0", rec.ID, *got.Recall)
		}
	}
}

// TestStrictMatch: the rule on a matcher's verdict — at most one
// ambiguity (the first in annotation order, with any sharing its term), a
// labeled action renamed to it, and nothing (unanswerable()) for a
// reproduction of the request.
func TestStrictMatch(t *testing.T) {
	rec := &corpus.Record{
		ID:      "r",
		Request: "What was the average order value of online orders last summer?",
		Ambiguities: []corpus.Ambiguity{
			{Term: "average order value", Kind: corpus.Critical, Resolution: "net of discounts"},
			{Term: "online orders", Kind: corpus.Critical, Resolution: "web and app"},
			{Term: "last summer", Kind: corpus.Critical, Resolution: "June to August 2024"},
			{Term: "online orders", Kind: corpus.NonCritical, Resolution: "by order date"},
		},
	}
	for _, tc := range []struct {
		name string
		q    string
		in   Match
		want Match
	}{
		{"one credit kept", "What do you mean by online orders?",
			Match{Credits: []int{1, 3}}, Match{Credits: []int{1, 3}}},
		{"first of several, with its term's twin", "How do you define online orders and last summer?",
			Match{Credits: []int{1, 2, 3}}, Match{Credits: []int{1, 3}}},
		{"labeled renamed to the first", "What about online orders and last summer?", // 4 of 7 request words: < 60%
			Match{Credits: []int{1, 2, 3}, Action: Action{Kind: ActionLabeled, Arg: "last summer"}},
			Match{Credits: []int{1, 3}, Action: Action{Kind: ActionLabeled, Arg: "online orders"}}},
		{"terms making up most of the request reproduce it", "What about average order value and last summer?", // 5 of 7
			Match{Credits: []int{0, 2}}, Match{}},
		{"reproduction credits nothing", "What do you mean by: What was the average order value of online orders last summer?",
			Match{Credits: []int{0, 1, 2, 3}}, Match{}},
		{"reproduction of an LLM verdict is unanswerable()", "average order value of online orders last summer?",
			Match{Credits: []int{0}, Action: Action{Kind: ActionLabeled, Arg: "average order value"}},
			Match{Action: unanswerable}},
		{"reproduction with an unlabeled action is unanswerable()", "Explain the average order value of online orders last summer.",
			Match{Action: Action{Kind: ActionUnlabeled, Arg: "WHERE x"}}, Match{Action: unanswerable}},
		{"no credit, no action", "Anything else?", Match{}, Match{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := StrictMatch(rec, tc.q, tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("StrictMatch(%q, %+v) = %+v, want %+v", tc.q, tc.in, got, tc.want)
			}
		})
	}
}

// TestReproducesRequest pins the threshold: at least 60% of a long
// request's content words, not all inside one registered phrase; for a
// short request (fewer than 4 content words) all of them and nothing else
// of substance.
func TestReproducesRequest(t *testing.T) {
	long := &corpus.Record{ // content words: names, top, 5, customers (4: long)
		Request:     "List the names of our top 5 customers.",
		Ambiguities: []corpus.Ambiguity{{Term: "top 5 customers", Aliases: []string{"best customers"}}},
	}
	short := &corpus.Record{ // content words: city, biggest, market (3: short)
		Request:     "Which city is our biggest market?",
		Ambiguities: []corpus.Ambiguity{{Term: "biggest market"}},
	}
	onlyTerm := &corpus.Record{ // the request is its term
		Request:     "Show the top customers.",
		Ambiguities: []corpus.Ambiguity{{Term: "top customers"}},
	}
	for _, tc := range []struct {
		rec  *corpus.Record
		q    string
		want bool
	}{
		{long, "What do you mean by: List the names of our top 5 customers?", true},
		{long, "names of top 5 customers?", true},                                    // 4/4
		{long, "Which names, and top customers how?", true},                          // names, top, customers: 3/4 ≥ 60%, "names" outside the term
		{long, "Could you clarify what exactly you mean by top 5 customers?", false}, // 3/4, all in the term
		{long, "Could you clarify what exactly you mean by top 5 customers? Please give me as much detail as you can, and if you can, give the exact SQL for it.", false},
		{long, "What about the names?", false}, // 1/4
		{short, "What do you mean by: Which city is our biggest market?", true},
		{short, "city biggest market", true},
		{short, "Which city is the biggest market by revenue?", false}, // adds "revenue"
		{short, "By biggest market, per city, what do you mean?", true},
		{short, "What do you mean by biggest market?", false}, // in the term
		{short, "Which city?", false},
		{onlyTerm, "What do you mean by: Show the top customers?", false}, // indistinguishable from asking about the term
		{long, "", false},
	} {
		if got := ReproducesRequest(tc.rec, tc.q); got != tc.want {
			t.Errorf("ReproducesRequest(%q, %q) = %v, want %v", tc.rec.Request, tc.q, got, tc.want)
		}
	}
}

// TestStrictCreditAppliesToEveryMatcher: the rule is applied in
// Oracle.AskWith on any matcher's verdict (here a matcher crediting every
// ambiguity), before the responder sees it, so the reply carries one
// resolution only.
func TestStrictCreditAppliesToEveryMatcher(t *testing.T) {
	rec := sample()
	all := matcherFunc(func(ctx context.Context, rec *corpus.Record, h []Turn, q string) (Match, error) {
		out := make([]int, len(rec.Ambiguities))
		for i := range out {
			out[i] = i
		}
		return Match{Credits: out, Action: Action{Kind: ActionLabeled, Arg: rec.Ambiguities[len(out)-1].Term}}, nil
	})
	var seen Match
	resp := responderFunc(func(ctx context.Context, rec *corpus.Record, h []Turn, q string, m Match) (Reply, error) {
		seen = m
		return NewDeterministicResponder().Respond(ctx, rec, h, q, m)
	})
	o := Oracle{Matcher: all, Responder: resp}
	r, err := o.AskWith(context.Background(), rec, nil, "Tell me everything.", AskOptions{StrictCredit: true})
	if err != nil {
		t.Fatal(err)
	}
	first := []int{0}
	for i := 1; i < len(rec.Ambiguities); i++ {
		if corpus.Normalize(rec.Ambiguities[i].Term) == corpus.Normalize(rec.Ambiguities[0].Term) {
			first = append(first, i)
		}
	}
	if !reflect.DeepEqual(r.Credits, first) || !reflect.DeepEqual(seen.Credits, first) || r.Action.Arg != rec.Ambiguities[0].Term {
		t.Fatalf("strict: reply credits %v, responder saw %v, action %v; want %v", r.Credits, seen.Credits, r.Action, first)
	}
	r, err = o.AskWith(context.Background(), rec, nil, "Tell me everything.", AskOptions{})
	if err != nil || len(r.Credits) != len(rec.Ambiguities) {
		t.Fatalf("default: credits %v, %v; want all", r.Credits, err)
	}
}

// TestStrictCreditProbesProperty: on random records (nested terms, shared
// terms, aliases; see randomRecord) with a request made of their terms and
// context words, full and full_adv keep recall = precision = 1 under the
// strict-credit option, and the whole-request question never earns more
// than one credit.
func TestStrictCreditProbesProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	filler := []string{"for", "the", "stores", "in", "each", "quarter", "report", "please", "by", "team", "vendors", "2024"}
	o := Deterministic()
	for i := range 2000 {
		rec := randomRecord(r, i)
		var words []string
		for _, a := range rec.Ambiguities {
			words = append(words, a.Term)
			for range r.IntN(3) {
				words = append(words, filler[r.IntN(len(filler))])
			}
		}
		rec.Request = strings.Join(words, " ")
		if len(rec.Counted()) == 0 {
			continue
		}
		for _, p := range []probe.Name{probe.Full, probe.FullAdv} {
			got := play(t, o, rec, AskOptions{StrictCredit: true}, probe.Questions(p, rec.CountedTerms(), len(rec.Counted())+2))
			if *got.Recall != 1 || *got.Precision != 1 {
				t.Fatalf("record %q %+v: %s (strict): recall %v precision %v", rec.Request, rec.Ambiguities, p, *got.Recall, *got.Precision)
			}
		}
		m, err := Deterministic().Matcher.Match(context.Background(), rec, nil, wholeRequest(rec))
		if err != nil {
			t.Fatal(err)
		}
		if s := StrictMatch(rec, wholeRequest(rec), m); len(s.Credits) > 0 && corpus.Normalize(rec.Ambiguities[s.Credits[len(s.Credits)-1]].Term) != corpus.Normalize(rec.Ambiguities[s.Credits[0]].Term) {
			t.Fatalf("record %q: the whole-request question credits %v under strict", rec.Request, s.Credits)
		}
	}
}

// TestStrictCreditLLM: the rule narrows the LLM matcher's verdict too, for
// the LLM oracle and its hybrid alike: the whole request is unanswerable()
// and refused without a stage-2 call; by default it is labeled.
func TestStrictCreditLLM(t *testing.T) {
	f := newFakeModel(t, smart)
	l := newTestLLM(t, f.URL, nil, LLMOptions{})
	rec := testRecord()
	q := wholeRequest(rec)
	for _, o := range []Oracle{l.Oracle(), Hybrid(l)} {
		n := len(f.stageCalls("respond"))
		r, err := o.AskWith(context.Background(), rec, nil, q, AskOptions{StrictCredit: true})
		if err != nil || !r.Refused || r.Credits != nil || r.Action != unanswerable || r.Text != Refusal || len(f.stageCalls("respond")) != n {
			t.Fatalf("strict: %+v, %v (respond calls %d → %d)", r, err, n, len(f.stageCalls("respond")))
		}
		r, err = o.AskWith(context.Background(), rec, nil, q, AskOptions{})
		if err != nil || r.Refused || !reflect.DeepEqual(r.Credits, []int{0}) || r.Action.Kind != ActionLabeled {
			t.Fatalf("default: %+v, %v", r, err)
		}
	}
}

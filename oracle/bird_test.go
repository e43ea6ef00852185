package oracle

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"avtgym/corpus"
)

// liteData is BIRD-Interact's lite (PostgreSQL) sample of the shared data
// folder, outside the repository.
const liteData = "../../shared/data/birdinteract-format/lite/bird_interact_data.jsonl"

// harborTwo reads task harbor_2 of the lite sample into a record the way
// `corpus import birdinteract` writes it without a response catalog:
// critical, knowledge, then non-critical ambiguities, each resolved by its
// SQL snippet, resolution_format "sql" (corpus/birdinteract/import.go).
func harborTwo(t *testing.T) *corpus.Record {
	t.Helper()
	f, err := os.Open(liteData)
	if err != nil {
		t.Skipf("the BIRD-Interact lite sample is not at %s (it lives outside the repository): %v", liteData, err)
	}
	defer f.Close()
	type amb struct {
		Term       string `json:"term"`
		SQLSnippet string `json:"sql_snippet"`
	}
	var task struct {
		ID      string `json:"instance_id"`
		Request string `json:"amb_user_query"`
		User    struct {
			Critical    []amb `json:"critical_ambiguity"`
			NonCritical []amb `json:"non_critical_ambiguity"`
		} `json:"user_query_ambiguity"`
		Knowledge []amb `json:"knowledge_ambiguity"`
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &task); err != nil {
			t.Fatal(err)
		}
		if task.ID == "harbor_2" {
			break
		}
	}
	if task.ID != "harbor_2" {
		t.Fatalf("%s has no task harbor_2", liteData)
	}
	rec := &corpus.Record{ID: task.ID, DB: "harbor", Request: task.Request, ResolutionFormat: "sql"}
	add := func(as []amb, k corpus.Kind) {
		for _, a := range as {
			rec.Ambiguities = append(rec.Ambiguities, corpus.Ambiguity{Term: a.Term, Kind: k, SQLSnippet: a.SQLSnippet, Resolution: a.SQLSnippet})
		}
	}
	add(task.User.Critical, corpus.Critical)
	add(task.Knowledge, corpus.Knowledge)
	add(task.User.NonCritical, corpus.NonCritical)
	return rec
}

// everyPart is the question that collects every snippet of a record in
// one turn under the default (AMBITAB) matcher.
func everyPart(rec *corpus.Record) string { return "Please explain every part of: " + rec.Request }

// TestBirdOneAmbiguityPerQuestion: on the lite sample's harbor_2, "Please
// explain every part of: <request>" credits all four ambiguities and
// returns all four SQL snippets by default (AMBITAB, unchanged), while
// under the BIRD-Interact protocols it credits one — the first in
// annotation order, "quay cranes" — and answers that one alone, as the
// harness's simulator answers one action per question. A question about a
// term registered twice ("most productive": critical and decimal) is
// credited both entries, the one term's.
func TestBirdOneAmbiguityPerQuestion(t *testing.T) {
	rec := harborTwo(t)
	if len(rec.Ambiguities) != 4 || rec.Ambiguities[0].Term != "quay cranes" || rec.Ambiguities[3].Term != "most productive" {
		t.Fatalf("harbor_2 changed: %+v", rec.Ambiguities)
	}
	o := Deterministic()
	ctx := context.Background()
	q := everyPart(rec)

	def, err := o.AskWith(ctx, rec, nil, q, AskOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(def.Credits, []int{0, 1, 2, 3}) || def.Refused {
		t.Fatalf("default: credits %v refused %v, want all four", def.Credits, def.Refused)
	}
	for _, a := range rec.Ambiguities {
		if !strings.Contains(def.Text, a.SQLSnippet) {
			t.Errorf("default: the reply %q lacks the snippet %q", def.Text, a.SQLSnippet)
		}
	}

	bird, err := o.AskWith(ctx, rec, nil, q, AskOptions{Bird: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(bird.Credits, []int{0}) || bird.Refused || bird.Text != rec.Ambiguities[0].SQLSnippet {
		t.Fatalf("bird: credits %v text %q refused %v, want [0] and %q", bird.Credits, bird.Text, bird.Refused, rec.Ambiguities[0].SQLSnippet)
	}

	// StrictCredit's request-reproduction rule is not part of Bird: the
	// same question is refused only when StrictCredit is set as well.
	if !ReproducesRequest(rec, q) {
		t.Fatalf("the question %q should reproduce the request (the test's premise)", q)
	}
	both, err := o.AskWith(ctx, rec, nil, q, AskOptions{Bird: true, StrictCredit: true})
	if err != nil || both.Credits != nil || !both.Refused || both.Text != BirdRefusal {
		t.Fatalf("bird+strict: %+v, %v; want the harness's refusal", both, err)
	}

	mp, err := o.AskWith(ctx, rec, nil, "What do you mean by most productive, and how should I rank them?", AskOptions{Bird: true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(mp.Credits, []int{1, 3}) || mp.Text != rec.Ambiguities[1].SQLSnippet+" "+rec.Ambiguities[3].SQLSnippet {
		t.Fatalf("bird, most productive + rank them: credits %v text %q; want [1 3], the one term's two entries", mp.Credits, mp.Text)
	}

	// A whole episode of such questions: by default one question earns
	// every credit; under Bird each question earns one term at most, so
	// the counted recall after one question is 1/2.
	if got := play(t, o, rec, AskOptions{}, []string{q}); *got.Recall != 1 {
		t.Errorf("default: recall %v after the every-part question, want 1", *got.Recall)
	}
	if got := play(t, o, rec, AskOptions{Bird: true}, []string{q}); *got.Recall != 0.5 {
		t.Errorf("bird: recall %v after the every-part question, want 0.5", *got.Recall)
	}
}

// TestBirdRefusal: a question that credits nothing is refused with the
// harness's exact text under Bird (the literal of
// USER_SIMULATOR_DECODER, spelt out here so that a change of the constant
// fails), and with Refusal otherwise; Refused either way, no credits.
func TestBirdRefusal(t *testing.T) {
	const harness = "Sorry, this question is out of scope, so I can not answer your question."
	if BirdRefusal != harness {
		t.Fatalf("BirdRefusal = %q, the harness says %q", BirdRefusal, harness)
	}
	rec := sample()
	o := Deterministic()
	for _, q := range []string{"Could you clarify what you want?", "", "What tables are there?"} {
		r, err := o.AskWith(context.Background(), rec, nil, q, AskOptions{Bird: true})
		if err != nil || r.Text != harness || !r.Refused || r.Credits != nil {
			t.Errorf("bird %q: %+v, %v", q, r, err)
		}
		r, err = o.AskWith(context.Background(), rec, nil, q, AskOptions{})
		if err != nil || r.Text != Refusal || !r.Refused || r.Credits != nil {
			t.Errorf("default %q: %+v, %v", q, r, err)
		}
	}
	// Credits whose resolutions are all blank (corpus loading rejects
	// them) are refused with the same text.
	blank := &corpus.Record{ID: "blank", Request: "x", Ambiguities: []corpus.Ambiguity{{Term: "x", Kind: corpus.Critical, Resolution: "  "}}}
	r, err := NewDeterministicResponder().RespondWith(context.Background(), blank, nil, "x?", Match{Credits: []int{0}}, AskOptions{Bird: true})
	if err != nil || r.Text != harness || !r.Refused {
		t.Errorf("blank resolution under bird: %+v, %v", r, err)
	}
}

// TestBirdAnswersInWords: under Bird a record whose resolutions are SQL
// snippets answers an ambiguity's annotated reading (Chosen) instead of
// its snippet, and the snippet only where it has none; a text record
// answers its resolutions; without Bird every record answers as before.
func TestBirdAnswersInWords(t *testing.T) {
	sqlRec := &corpus.Record{
		ID: "crowds", Request: "How big were the crowds at the stadiums in 2014?", ResolutionFormat: "sql",
		Ambiguities: []corpus.Ambiguity{
			{Term: "crowds", Kind: corpus.Critical, SQLSnippet: "T2.Average", Resolution: "T2.Average",
				Options: []string{"how many people the stadium can hold", "how many people actually came"}, Chosen: "how many people actually came"},
			{Term: "stadiums", Kind: corpus.Critical, SQLSnippet: "JOIN stadium AS T2", Resolution: "JOIN stadium AS T2"},
		},
	}
	textRec := &corpus.Record{
		ID: "crowds-text", Request: sqlRec.Request,
		Ambiguities: []corpus.Ambiguity{
			{Term: "crowds", Kind: corpus.Critical, SQLSnippet: "T2.Average", Resolution: "I mean how many people actually showed up.", Chosen: "how many people actually came"},
		},
	}
	o := Deterministic()
	for _, tc := range []struct {
		name string
		rec  *corpus.Record
		q    string
		opt  AskOptions
		want string
	}{
		{"sql record, bird: the annotated reading", sqlRec, "What do you mean by crowds?", AskOptions{Bird: true}, "how many people actually came"},
		{"sql record, bird, no words: the snippet", sqlRec, "Which stadiums?", AskOptions{Bird: true}, "JOIN stadium AS T2"},
		{"sql record, default: the snippet", sqlRec, "What do you mean by crowds?", AskOptions{}, "T2.Average"},
		{"sql record, strict: the snippet", sqlRec, "What do you mean by crowds?", AskOptions{StrictCredit: true}, "T2.Average"},
		{"text record, bird: the resolution", textRec, "What do you mean by crowds?", AskOptions{Bird: true}, "I mean how many people actually showed up."},
		{"text record, default: the resolution", textRec, "What do you mean by crowds?", AskOptions{}, "I mean how many people actually showed up."},
	} {
		r, err := o.AskWith(context.Background(), tc.rec, nil, tc.q, tc.opt)
		if err != nil || r.Refused || r.Text != tc.want || len(r.Credits) != 1 {
			t.Errorf("%s: %+v, %v; want %q", tc.name, r, err, tc.want)
		}
	}
}

// TestBirdReachesEveryResponder: under Bird a responder with RespondWith
// is handed the options (and the one credit, whatever the matcher
// returned), and one with Respond alone is still called, with the one
// credit; without Bird every credit passes and the options are off.
func TestBirdReachesEveryResponder(t *testing.T) {
	rec := sample()
	all := matcherFunc(func(_ context.Context, rec *corpus.Record, _ []Turn, _ string) (Match, error) {
		out := make([]int, len(rec.Ambiguities))
		for i := range out {
			out[i] = i
		}
		return Match{Credits: out}, nil
	})
	var seen Match
	var seenOpt AskOptions
	plain := responderFunc(func(ctx context.Context, rec *corpus.Record, h []Turn, q string, m Match) (Reply, error) {
		seen = m
		return NewDeterministicResponder().Respond(ctx, rec, h, q, m)
	})
	withOpt := optResponderFunc(func(ctx context.Context, rec *corpus.Record, h []Turn, q string, m Match, opt AskOptions) (Reply, error) {
		seen, seenOpt = m, opt
		return NewDeterministicResponder().RespondWith(ctx, rec, h, q, m, opt)
	})
	r, err := Oracle{Matcher: all, Responder: withOpt}.AskWith(context.Background(), rec, nil, "q", AskOptions{Bird: true})
	if err != nil || !seenOpt.Bird || !reflect.DeepEqual(seen.Credits, []int{0}) || !reflect.DeepEqual(r.Credits, []int{0}) || r.Text != rec.Ambiguities[0].Resolution {
		t.Fatalf("bird, RespondWith: saw %+v %+v, reply %+v, %v; want [0]", seen, seenOpt, r, err)
	}
	r, err = Oracle{Matcher: all, Responder: plain}.AskWith(context.Background(), rec, nil, "q", AskOptions{Bird: true})
	if err != nil || !reflect.DeepEqual(seen.Credits, []int{0}) || !reflect.DeepEqual(r.Credits, []int{0}) {
		t.Fatalf("bird, Respond: saw %+v, reply credits %v, %v; want [0]", seen, r.Credits, err)
	}
	r, err = Oracle{Matcher: all, Responder: withOpt}.AskWith(context.Background(), rec, nil, "q", AskOptions{})
	if err != nil || seenOpt.Bird || len(r.Credits) != len(rec.Ambiguities) {
		t.Fatalf("default: saw %+v, reply credits %v, %v; want all", seenOpt, r.Credits, err)
	}
}

// optResponderFunc is a responder with RespondWith.
type optResponderFunc func(context.Context, *corpus.Record, []Turn, string, Match, AskOptions) (Reply, error)

func (f optResponderFunc) Respond(ctx context.Context, rec *corpus.Record, h []Turn, q string, m Match) (Reply, error) {
	return f(ctx, rec, h, q, m, AskOptions{})
}

func (f optResponderFunc) RespondWith(ctx context.Context, rec *corpus.Record, h []Turn, q string, m Match, opt AskOptions) (Reply, error) {
	return f(ctx, rec, h, q, m, opt)
}

// TestBirdOneAmbiguityAfterTheChainRule: on a chain record whose L2 is
// annotated before its L1, a question naming both while L1 is open is
// credited L1 under Bird (the chain rule drops L2 first, then the
// one-ambiguity rule keeps the first creditable one), and once L1 is
// resolved the same question is credited L2 alone.
func TestBirdOneAmbiguityAfterTheChainRule(t *testing.T) {
	rec := &corpus.Record{ID: "chain", Request: "Which stadiums drew the biggest crowds?", Ambiguities: []corpus.Ambiguity{
		{Term: "attendance", Kind: corpus.Critical, Resolution: "The average attendance.", DependsOn: "crowds"},
		{Term: "crowds", Kind: corpus.Critical, Resolution: "How many people came."},
	}}
	o := Deterministic()
	q := "By crowds, which attendance figure do you mean?"
	r, err := o.AskWith(context.Background(), rec, nil, q, AskOptions{Bird: true})
	if err != nil || !reflect.DeepEqual(r.Credits, []int{1}) || r.Text != "How many people came." {
		t.Fatalf("L1 open: %+v, %v; want crowds", r, err)
	}
	hist := []Turn{{Question: q, Reply: r.Text, Credits: r.Credits}}
	r, err = o.AskWith(context.Background(), rec, hist, q, AskOptions{Bird: true})
	if err != nil || !reflect.DeepEqual(r.Credits, []int{0}) || r.Text != "The average attendance." {
		t.Fatalf("L1 resolved: %+v, %v; want attendance", r, err)
	}
	r, err = o.AskWith(context.Background(), rec, hist, q, AskOptions{})
	if err != nil || !reflect.DeepEqual(r.Credits, []int{0, 1}) {
		t.Fatalf("default, L1 resolved: %+v, %v; want both", r, err)
	}
}

// TestBirdHybrid: the hybrid oracle (an LLM matcher with the
// deterministic responder) follows the BIRD rules through AskWith without
// knowing about them: its refusal of unanswerable() is the harness's text
// under Bird and Refusal otherwise, and a labeled question gets the
// resolution either way.
func TestBirdHybrid(t *testing.T) {
	f := newFakeModel(t, smart)
	l := newTestLLM(t, f.URL, nil, LLMOptions{})
	rec := testRecord()
	h := Hybrid(l)
	for _, tc := range []struct {
		opt  AskOptions
		want string
	}{{AskOptions{Bird: true}, BirdRefusal}, {AskOptions{}, Refusal}} {
		r, err := h.AskWith(context.Background(), rec, nil, "What is the weather like?", tc.opt)
		if err != nil || !r.Refused || r.Text != tc.want || r.Credits != nil {
			t.Errorf("%+v: unanswerable: %+v, %v; want %q", tc.opt, r, err, tc.want)
		}
		r, err = h.AskWith(context.Background(), rec, nil, "Which top customers do you mean?", tc.opt)
		if err != nil || r.Refused || r.Text != rec.Ambiguities[0].Resolution || !reflect.DeepEqual(r.Credits, []int{0}) {
			t.Errorf("%+v: labeled: %+v, %v", tc.opt, r, err)
		}
	}
}

// TestNames: Names is the deterministic matcher's test for one
// ambiguity: whole words under its normalisation, aliases included, and
// not fooled by a longer phrase of another ambiguity covering the
// occurrence (the matcher credits a question that quotes the phrase
// alone).
func TestNames(t *testing.T) {
	a := corpus.Ambiguity{Term: "quay cranes", Aliases: []string{"STS cranes"}}
	for _, tc := range []struct {
		text string
		want bool
	}{
		{"Which five quay cranes were the most productive?", true},
		{"Which five QUAY-cranes?", true},
		{"Which sts  cranes?", true},
		{"Which quay crane?", false},
		{"Which quaycranes?", false},
		{"", false},
	} {
		if got := Names(tc.text, a); got != tc.want {
			t.Errorf("Names(%q, quay cranes) = %v, want %v", tc.text, got, tc.want)
		}
	}
	rec := sample() // "top customers" covers "customers" in its request
	if got := Names(rec.Request, rec.Ambiguities[1]); !got {
		t.Errorf("Names(%q, customers) = false: the covered occurrence still names it", rec.Request)
	}
	if Names("Any punctuation?", corpus.Ambiguity{Term: "?!"}) {
		t.Error("a term without a token named something")
	}
}

package oracle

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"avtgym/corpus"
	"avtgym/reward"
)

// sample is a record with nested terms, aliases, a shared term, a
// non-critical term and non-ASCII terms.
func sample() *corpus.Record {
	return &corpus.Record{
		ID: "sample", DB: "shop", Request: "Show the top customers by region year-to-date.",
		Ambiguities: []corpus.Ambiguity{
			0: {Term: "top customers", Kind: corpus.Critical, Resolution: "Top customers are the 10 with the highest revenue.", Aliases: []string{"best customers"}},
			1: {Term: "customers", Kind: corpus.Knowledge, Resolution: "Customers are accounts with at least one order."},
			2: {Term: "region", Kind: corpus.Critical, Resolution: "Region means the shipping region."},
			3: {Term: "year-to-date", Kind: corpus.Knowledge, Resolution: "Year-to-date starts on January 1.", Aliases: []string{"YTD"}},
			4: {Term: "revenue", Kind: corpus.Critical, Resolution: "Revenue is net of refunds."},
			5: {Term: "revenue", Kind: corpus.Knowledge, Resolution: "Revenue is net of refunds."},
			6: {Term: "rounding", Kind: corpus.NonCritical, Resolution: "Round to two decimals."},
			7: {Term: "ÉTAT", Kind: corpus.Critical, Resolution: "État is the order state."},
			8: {Term: "ΟΔΟΣ", Kind: corpus.Critical, Resolution: "Street."},
			9: {Term: "Q3", Kind: corpus.Critical, Resolution: "Q3 is July to September."},
		},
	}
}

func TestMatch(t *testing.T) {
	rec := sample()
	m := NewDeterministicMatcher()
	for _, tc := range []struct {
		name     string
		question string
		want     []int
	}{
		{"empty question", "", nil},
		{"blank question", "  \t\n ?!", nil},
		{"generic question names no term", "Could you clarify what you want?", nil},
		{"term inside a longer word", "Do you mean the regional manager?", nil},
		{"term as a prefix inside a word", "What about topcustomers?", nil},
		{"near-miss spelling", "Which custmers do you mean?", nil},
		{"singular does not match plural term", "Which customer?", nil},
		{"possessive splits the word", "The customer's region?", []int{2}},
		{"plain term", "What do you mean by region?", []int{2}},
		{"alias credits its ambiguity", "Who are the best customers?", []int{0}},
		{"single-token alias, upper case", "Does YTD include today?", []int{3}},
		{"two terms in one question", "Top customers in each region?", []int{0, 2}},
		{"credits ascending whatever the question order", "Per region, which top customers?", []int{0, 2}},
		{"nested term credits only the longest", "Who are the top customers?", []int{0}},
		{"nested term also occurring separately", "Top customers, and how are customers defined?", []int{0, 1}},
		{"shorter term alone", "How are customers defined?", []int{1}},
		{"case and punctuation: hyphen is a separator", "TOP-customers?", []int{0}},
		{"punctuation inside the phrase", "top...customers", []int{0}},
		{"underscore is a separator", "top_customers", []int{0}},
		{"runs of whitespace", "top \t\n   customers", []int{0}},
		{"term with punctuation matches spaced words", "What is year to date?", []int{3}},
		{"term with punctuation matches itself", "Year-To-Date?", []int{3}},
		{"term with punctuation, other separators", "year/to:date", []int{3}},
		{"shared term credits all its ambiguities", "Is revenue gross?", []int{4, 5}},
		{"non-critical term is credited", "Any rounding?", []int{6}},
		{"repeated term in one question", "region, region, region", []int{2}},
		{"non-ASCII case folding", "what is état?", []int{7}},
		{"final sigma folds with capital sigma", "which οδος?", []int{8}},
		{"digits are word runes", "q3 sales?", []int{9}},
		{"digits inside a longer token", "q30 sales?", nil},
		{"many terms at once", "top customers, region, YTD, revenue, rounding, ÉTAT, ΟΔΟΣ, Q3, customers",
			[]int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := credits(m.Match(context.Background(), rec, nil, tc.question))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Match(%q) = %v, want %v", tc.question, got, tc.want)
			}
		})
	}
}

// The history does not suppress credits: precision accounts for repeats.
func TestMatchRepeatsEarlierCredit(t *testing.T) {
	rec := sample()
	m := NewDeterministicMatcher()
	hist := []Turn{{Question: "What region?", Reply: "Region means the shipping region.", Credits: []int{2}}}
	got, err := credits(m.Match(context.Background(), rec, hist, "Sorry, which region again?"))
	if err != nil || !reflect.DeepEqual(got, []int{2}) {
		t.Errorf("Match = %v, %v; want [2]", got, err)
	}
}

// Ties between phrases of equal token count go to the longer phrase, then
// to annotation order.
func TestMatchPriority(t *testing.T) {
	rec := &corpus.Record{ID: "prio", Ambiguities: []corpus.Ambiguity{
		0: {Term: "new york", Kind: corpus.Critical},
		1: {Term: "york city", Kind: corpus.Critical},
		2: {Term: "ab cd", Kind: corpus.Critical},
		3: {Term: "cd ef", Kind: corpus.Critical},
		4: {Term: "big", Kind: corpus.Critical, Aliases: []string{"big data lake"}},
		5: {Term: "data lake", Kind: corpus.Critical},
		6: {Term: "x y", Kind: corpus.Critical},
	}}
	m := NewDeterministicMatcher()
	for _, tc := range []struct {
		question string
		want     []int
	}{
		{"new york city", []int{1}},     // "york city" is longer than "new york"
		{"ab cd ef", []int{2}},          // same length: annotation order
		{"cd ef ab cd", []int{2, 3}},    // no overlap: both
		{"big data lake", []int{4}},     // alias of 3 tokens beats "data lake"
		{"big data lake big", []int{4}}, // both occurrences credit 4
		{"x y x y x", []int{6}},
	} {
		got, _ := credits(m.Match(context.Background(), rec, nil, tc.question))
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Match(%q) = %v, want %v", tc.question, got, tc.want)
		}
	}
}

func TestMatchErrors(t *testing.T) {
	m := NewDeterministicMatcher()
	if _, err := m.Match(context.Background(), nil, nil, "x"); err == nil {
		t.Error("nil record: no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Match(ctx, sample(), nil, "region"); err == nil {
		t.Error("cancelled context: no error")
	}
	// Records without ambiguities, and phrases without tokens.
	for _, rec := range []*corpus.Record{
		{ID: "none"},
		{ID: "punct", Ambiguities: []corpus.Ambiguity{{Term: "?!", Kind: corpus.Critical}, {Term: "", Kind: corpus.Critical}}},
	} {
		got, err := credits(m.Match(context.Background(), rec, nil, "?! anything"))
		if err != nil || got != nil {
			t.Errorf("%s: Match = %v, %v; want nil", rec.ID, got, err)
		}
	}
}

// Long questions and records with many ambiguities leave the stack buffers.
func TestMatchLarge(t *testing.T) {
	rec := &corpus.Record{ID: "large"}
	for i := range 100 {
		rec.Ambiguities = append(rec.Ambiguities, corpus.Ambiguity{Term: fmt.Sprintf("term%d", i), Kind: corpus.Critical})
	}
	q := strings.Repeat("filler ", 200) + "term99 and term3 " + strings.Repeat("x", 300) + " term70"
	got, _ := credits(NewDeterministicMatcher().Match(context.Background(), rec, nil, q))
	if want := []int{3, 70, 99}; !reflect.DeepEqual(got, want) {
		t.Errorf("Match = %v, want %v", got, want)
	}
}

func TestRespond(t *testing.T) {
	rec := sample()
	rec.Ambiguities = append(rec.Ambiguities,
		corpus.Ambiguity{Term: "blank", Kind: corpus.Critical, Resolution: "  "},         // 10
		corpus.Ambiguity{Term: "padded", Kind: corpus.Critical, Resolution: " Padded. "}, // 11
	)
	r := NewDeterministicResponder()
	for _, tc := range []struct {
		name    string
		credits []int
		want    string
	}{
		{"no credit", nil, Refusal},
		{"empty credit", []int{}, Refusal},
		{"one credit", []int{2}, "Region means the shipping region."},
		{"annotation order", []int{0, 2}, "Top customers are the 10 with the highest revenue. Region means the shipping region."},
		{"annotation order whatever the credit order", []int{2, 0}, "Top customers are the 10 with the highest revenue. Region means the shipping region."},
		{"duplicate resolution appears once", []int{4, 5}, "Revenue is net of refunds."},
		{"duplicate credit appears once", []int{2, 2}, "Region means the shipping region."},
		{"non-critical answered", []int{6}, "Round to two decimals."},
		{"blank resolution only", []int{10}, Refusal},
		{"blank resolution skipped", []int{10, 11}, "Padded."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Respond(context.Background(), rec, nil, "q", Match{Credits: tc.credits})
			// Refused exactly when the reply is the refusal (here, the
			// wanted text says which).
			if err != nil || got.Text != tc.want || got.Refused != (tc.want == Refusal) {
				t.Errorf("Respond(%v) = %+v, %v; want %q", tc.credits, got, err, tc.want)
			}
			if got.Withdrawn || got.FellBack || got.Regenerated != 0 || got.Credits != nil || got.Action != (Action{}) {
				t.Errorf("Respond(%v) = %+v: the responder sets only Text and Refused", tc.credits, got)
			}
		})
	}
	// The action is not read: an unlabeled action (no credits) is refused,
	// a labeled one answered from its credits.
	if got, err := r.Respond(context.Background(), rec, nil, "q", Match{Action: Action{Kind: ActionUnlabeled, Arg: "LIMIT 10"}}); err != nil || !got.Refused || got.Text != Refusal {
		t.Errorf("Respond(unlabeled) = %+v, %v", got, err)
	}
	if got, err := r.Respond(context.Background(), rec, nil, "q", Match{Credits: []int{2}, Action: Action{Kind: ActionLabeled, Arg: "region"}}); err != nil || got.Refused || got.Text != "Region means the shipping region." {
		t.Errorf("Respond(labeled) = %+v, %v", got, err)
	}
	for _, bad := range [][]int{{-1}, {len(rec.Ambiguities)}} {
		if _, err := r.Respond(context.Background(), rec, nil, "q", Match{Credits: bad}); err == nil {
			t.Errorf("Respond(%v): no error", bad)
		}
	}
	if _, err := r.Respond(context.Background(), nil, nil, "q", Match{Credits: []int{0}}); err == nil {
		t.Error("nil record: no error")
	}
}

// credits drops a Match's action, for tests of the deterministic matcher
// (which takes none).
func credits(m Match, err error) ([]int, error) {
	if m.Action != (Action{}) && err == nil {
		panic("the deterministic matcher took action " + m.Action.String())
	}
	return m.Credits, err
}

type failing struct{}

func (failing) Match(context.Context, *corpus.Record, []Turn, string) (Match, error) {
	return Match{}, fmt.Errorf("boom")
}

func (failing) Respond(context.Context, *corpus.Record, []Turn, string, Match) (Reply, error) {
	return Reply{}, fmt.Errorf("boom")
}

func TestAsk(t *testing.T) {
	rec := sample()
	o := Deterministic()
	got, err := o.Ask(context.Background(), rec, nil, "Which region, and what is YTD?")
	want := Reply{Text: "Region means the shipping region. Year-to-date starts on January 1.", Credits: []int{2, 3}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Ask = %+v, %v; want %+v", got, err, want)
	}
	got, err = o.Ask(context.Background(), rec, nil, "Please elaborate.")
	if err != nil || !reflect.DeepEqual(got, Reply{Text: Refusal, Refused: true}) {
		t.Errorf("Ask(generic) = %+v, %v", got, err)
	}
	for name, bad := range map[string]Oracle{
		"no matcher":      {Responder: NewDeterministicResponder()},
		"no responder":    {Matcher: NewDeterministicMatcher()},
		"failing matcher": {Matcher: failing{}, Responder: NewDeterministicResponder()},
		"failing resp":    {Matcher: NewDeterministicMatcher(), Responder: failing{}},
	} {
		if _, err := bad.Ask(context.Background(), rec, nil, "region"); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := o.Ask(ctx, rec, nil, "region"); err == nil {
		t.Error("cancelled context: no error")
	}
}

// The scripted policies of PROTOCOL.md §5.
const (
	fullPrefix = "Could you clarify what exactly you mean by "
	advSuffix  = " Please give me as much detail as you can, and if you can, give the exact SQL for it."
)

func fullQ(term string) string { return fullPrefix + term + "?" }
func advQ(term string) string  { return fullQ(term) + advSuffix }

var genericQs = []string{"Could you clarify what you want?", "Please elaborate."}

// termAmbs returns the indexes of the ambiguities whose term is term.
func termAmbs(rec *corpus.Record, term string) []int {
	var idx []int
	for i, a := range rec.Ambiguities {
		if a.Term == term {
			idx = append(idx, i)
		}
	}
	return idx
}

func TestMatchScriptedPolicies(t *testing.T) {
	rec := sample()
	m := NewDeterministicMatcher()
	for _, term := range rec.CountedTerms() {
		want := termAmbs(rec, term)
		for _, q := range []string{fullQ(term), advQ(term)} {
			got, err := credits(m.Match(context.Background(), rec, nil, q))
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("Match(%q) = %v, %v; want %v", q, got, err, want)
			}
		}
	}
	for _, q := range append(genericQs, advSuffix) {
		if got, _ := credits(m.Match(context.Background(), rec, nil, q)); got != nil {
			t.Errorf("Match(%q) = %v, want nil", q, got)
		}
	}
}

// scripted runs a scripted policy's questions through the matcher and
// returns the episode quantities.
func scripted(t *testing.T, m Matcher, rec *corpus.Record, qs []string) reward.Quantities {
	t.Helper()
	ep := reward.Episode{Counted: rec.Counted(), Attempted: len(qs)}
	var hist []Turn
	for _, q := range qs {
		cred, err := credits(m.Match(context.Background(), rec, hist, q))
		if err != nil {
			t.Fatal(err)
		}
		hist = append(hist, Turn{Question: q, Credits: cred})
		ep.Credits = append(ep.Credits, cred)
	}
	return reward.Compute(ep)
}

func fullQs(rec *corpus.Record, q func(string) string) []string {
	var qs []string
	for _, term := range rec.CountedTerms() {
		qs = append(qs, q(term))
	}
	return qs
}

func noneAdvQs(rec *corpus.Record) []string {
	qs := make([]string, len(rec.Counted())+2) // budget m + C, C = 2
	for i := range qs {
		qs[i] = genericQs[i%2]
	}
	return qs
}

// referenceProblem checks the property PROTOCOL.md §3 requires of every
// corpus record: full and full_adv reach recall = precision = 1 and
// none_adv reaches recall 0. It returns "" when the record passes.
func referenceProblem(t *testing.T, m Matcher, rec *corpus.Record) string {
	t.Helper()
	if len(rec.Counted()) == 0 {
		return ""
	}
	for _, p := range []struct {
		name string
		qs   []string
	}{{"full", fullQs(rec, fullQ)}, {"full_adv", fullQs(rec, advQ)}} {
		q := scripted(t, m, rec, p.qs)
		if *q.Recall != 1 || *q.Precision != 1 {
			return fmt.Sprintf("%s: recall %v precision %v", p.name, *q.Recall, *q.Precision)
		}
	}
	if q := scripted(t, m, rec, noneAdvQs(rec)); *q.Recall != 0 {
		return fmt.Sprintf("none_adv: recall %v", *q.Recall)
	}
	return ""
}

// templateWords are the words of the scripted questions; terms built from
// other words cannot interact with the templates.
var templateWords = func() map[string]bool {
	w := map[string]bool{}
	for _, s := range append([]string{fullPrefix, advSuffix}, genericQs...) {
		for _, tok := range corpus.Tokens(s) {
			w[tok] = true
		}
	}
	return w
}()

var wordList = []string{
	"top", "customers", "region", "revenue", "year", "date", "active", "users", "recent", "orders",
	"average", "price", "sales", "growth", "churn", "rate", "premium", "store", "monthly", "total",
	"net", "profit", "late", "delivery", "high", "value", "new", "returning", "north", "q3", "fiscal",
	"état", "straße", "東京", "ratio", "margin", "peak", "hours", "best", "worst", "share",
}

// randomRecord builds a record whose counted terms have distinct normal
// forms and whose words avoid the template words. Terms are written with
// random case and separators, some are nested in others, some ambiguities
// share a term, and some carry aliases.
func randomRecord(r *rand.Rand, id int) *corpus.Record {
	rec := &corpus.Record{ID: fmt.Sprint("rand", id)}
	owner := map[string]string{} // normal form → raw term that owns it
	kinds := []corpus.Kind{corpus.Critical, corpus.Knowledge, corpus.NonCritical}
	seps := []string{" ", "-", "  ", "_", " / "}
	surface := func(words []string) string {
		var b strings.Builder
		for i, w := range words {
			if i > 0 {
				b.WriteString(seps[r.IntN(len(seps))])
			}
			switch r.IntN(3) {
			case 0:
				w = strings.ToUpper(w)
			case 1:
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			b.WriteString(w)
		}
		return b.String()
	}
	var terms [][]string
	newWords := func() []string {
		if len(terms) > 0 && r.IntN(3) == 0 { // nested: a sub-run of an earlier term
			prev := terms[r.IntN(len(terms))]
			i := r.IntN(len(prev))
			j := i + 1 + r.IntN(len(prev)-i)
			return prev[i:j]
		}
		words := make([]string, 1+r.IntN(3))
		for i := range words {
			words[i] = wordList[r.IntN(len(wordList))]
		}
		return words
	}
	for range 1 + r.IntN(7) {
		if len(rec.Ambiguities) > 0 && r.IntN(5) == 0 { // share an earlier term
			a := rec.Ambiguities[r.IntN(len(rec.Ambiguities))]
			rec.Ambiguities = append(rec.Ambiguities, corpus.Ambiguity{Term: a.Term, Kind: kinds[r.IntN(3)], Resolution: a.Resolution})
			continue
		}
		words := newWords()
		norm := strings.Join(words, " ")
		if _, taken := owner[norm]; taken {
			continue
		}
		term := surface(words)
		owner[norm] = term
		terms = append(terms, words)
		a := corpus.Ambiguity{Term: term, Kind: kinds[r.IntN(3)], Resolution: "resolution of " + norm}
		for range r.IntN(3) {
			aw := newWords()
			an := strings.Join(aw, " ")
			if _, taken := owner[an]; taken {
				continue
			}
			owner[an] = term
			terms = append(terms, aw)
			a.Aliases = append(a.Aliases, surface(aw))
		}
		rec.Ambiguities = append(rec.Ambiguities, a)
	}
	return rec
}

func TestScriptedPoliciesProperty(t *testing.T) {
	for _, w := range wordList {
		if templateWords[w] {
			t.Fatalf("word list contains template word %q", w)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	m := NewDeterministicMatcher()
	for i := range 3000 {
		rec := randomRecord(r, i)
		if p := referenceProblem(t, m, rec); p != "" {
			t.Fatalf("record %+v: %s", rec.Ambiguities, p)
		}
	}
	if p := referenceProblem(t, m, sample()); p != "" {
		t.Errorf("sample: %s", p)
	}
}

// TestScriptedPoliciesCounterexamples documents the records corpus
// validation must reject: each breaks the property PROTOCOL.md §3
// requires of the deterministic oracle.
func TestScriptedPoliciesCounterexamples(t *testing.T) {
	crit := func(term string, aliases ...string) corpus.Ambiguity {
		return corpus.Ambiguity{Term: term, Kind: corpus.Critical, Resolution: "r " + term, Aliases: aliases}
	}
	m := NewDeterministicMatcher()
	for _, tc := range []struct {
		name string
		ambs []corpus.Ambiguity
		want string // prefix of the problem
	}{
		{"term is a word of the full template", []corpus.Ambiguity{crit("region"), crit("mean")}, "full:"},
		{"term is a phrase of the full template", []corpus.Ambiguity{crit("region"), crit("exactly you")}, "full:"},
		{"term is a word of the adversarial suffix", []corpus.Ambiguity{crit("region"), crit("SQL")}, "full_adv:"},
		{"term is a word of a generic probe", []corpus.Ambiguity{crit("elaborate")}, "none_adv:"},
		{"term spans the template boundary (prefix)", []corpus.Ambiguity{crit("region"), {Term: "by region", Kind: corpus.NonCritical}}, "full:"},
		{"term spans the template boundary (suffix)", []corpus.Ambiguity{crit("region"), crit("region please")}, "full_adv:"},
		{"counted terms with equal normal forms", []corpus.Ambiguity{crit("Top customers"), crit("top-customers")}, "full:"},
		// Caught here only in this order (the other order happens to pass),
		// but validation should reject the collision whatever the order.
		{"alias equal to another term", []corpus.Ambiguity{crit("customers"), crit("clients", "customers")}, "full:"},
		{"alias of a non-critical one equal to a counted term", []corpus.Ambiguity{crit("region"), {Term: "area", Kind: corpus.NonCritical, Aliases: []string{"region"}}, crit("zone", "region")}, "full:"},
		{"term without a token", []corpus.Ambiguity{crit("region"), crit("%")}, "full:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &corpus.Record{ID: tc.name, Ambiguities: tc.ambs}
			if p := referenceProblem(t, m, rec); !strings.HasPrefix(p, tc.want) {
				t.Errorf("problem = %q, want prefix %q", p, tc.want)
			}
		})
	}
}

func TestMatchConcurrent(t *testing.T) {
	m := NewDeterministicMatcher()
	recs := []*corpus.Record{sample(), sample(), sample()}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 200 {
				rec := recs[(g+i)%len(recs)]
				got, err := credits(m.Match(context.Background(), rec, nil, "top customers per region"))
				if err != nil || !reflect.DeepEqual(got, []int{0, 2}) {
					t.Errorf("Match = %v, %v", got, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// The cache is compiled once per record and forgets collected records.
func TestMatchCache(t *testing.T) {
	m := NewDeterministicMatcher()
	rec := sample()
	c1 := m.compiled(rec)
	if c2 := m.compiled(rec); c1 != c2 {
		t.Error("record compiled twice")
	}
	for i := range 100 {
		r := sample()
		r.ID = fmt.Sprint(i)
		if _, err := m.Match(context.Background(), r, nil, "region"); err != nil {
			t.Fatal(err)
		}
	}
	size := func() int {
		n := 0
		m.cache.Range(func(any, any) bool { n++; return true })
		return n
	}
	for range 20 {
		runtime.GC()
		if size() <= 1 {
			break
		}
		runtime.Gosched()
	}
	if n := size(); n > 1 {
		t.Errorf("cache holds %d entries after GC, want ≤ 1", n)
	}
	runtime.KeepAlive(rec)
}

func TestMatchAllocs(t *testing.T) {
	m := NewDeterministicMatcher()
	rec := sample()
	ctx := context.Background()
	for q, want := range map[string]float64{
		"Could you clarify what exactly you mean by top customers?" + advSuffix: 1, // the result
		"Could you clarify what you want?":                                      0,
	} {
		allocs := testing.AllocsPerRun(200, func() { _, _ = m.Match(ctx, rec, nil, q) })
		if allocs > want {
			t.Errorf("Match(%q): %v allocations, want ≤ %v", q, allocs, want)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	m := NewDeterministicMatcher()
	rec := sample()
	ctx := context.Background()
	qs := []string{
		advQ("top customers"),
		"Could you clarify what you want?",
		"Which region, and is revenue year-to-date or all time?",
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := m.Match(ctx, rec, nil, qs[i%len(qs)]); err != nil {
			b.Fatal(err)
		}
	}
}

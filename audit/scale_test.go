package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/internal/testutil"
)

// The automaton finds exactly the patterns strings.Contains finds.
func TestMatcherAgainstContains(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = "ab c"[rng.IntN(4)]
		}
		return string(b)
	}
	for round := range 200 {
		var pats []string
		for range 1 + rng.IntN(20) {
			pats = append(pats, word(1+rng.IntN(6)))
		}
		text := word(rng.IntN(60))
		m := newMatcher(pats)
		got := map[int32]bool{}
		for _, id := range m.find(text) {
			got[id] = true
		}
		for i, p := range pats {
			// Duplicate patterns: only the first id is reported by callers
			// that dedupe; here every id of a present pattern must be found.
			if strings.Contains(text, p) != got[int32(i)] {
				t.Fatalf("round %d: pattern %q in %q: contains %v, found %v", round, p, text, strings.Contains(text, p), got[int32(i)])
			}
		}
	}
}

// scaleLeaks are the leaks planted in the scale corpus: the record whose
// public field quotes something secret, and what the finding must say.
var scaleLeaks = []struct {
	record, field, quote, want string
}{
	// Another record's resolution, in the evidence.
	{"r17", "evidence", "Region number 18 is the 18-th region in alphabetical order of the names.", `evidence contains the resolution of "region number 18" in record r18`},
	// The record's own resolution, in the request.
	{"r1234", "request", "Region number 1234 is the 1234-th region in alphabetical order of the names.", `request contains the record's own resolution of "region number 1234"`},
	// The record's own reference SQL, in the evidence.
	{"r4321", "evidence", "SELECT COUNT(*) + 4321 FROM sales", "evidence contains the record's reference SQL"},
}

// scaleCorpus writes and loads a corpus of n records on the tiny database,
// each with its own request, evidence and a distinct resolution of about
// 70 characters, and the scaleLeaks planted in it (n > 4321).
func scaleCorpus(tb testing.TB, n int) *corpus.Corpus {
	tb.Helper()
	quote := map[string]map[string]string{}
	for _, l := range scaleLeaks {
		quote[l.record] = map[string]string{l.field: " " + l.quote}
	}
	var b strings.Builder
	for i := range n {
		q := quote[fmt.Sprintf("r%d", i)]
		fmt.Fprintf(&b, `{"id":"r%d","db":"mini","request":"How many sales of region number %d are in the table, counted with care?%s","evidence":"Evidence %d: regions are West, East, North and South; amounts are dollars; years are calendar years.%s","ambiguities":[{"term":"region number %d","kind":"critical","resolution":"Region number %d is the %d-th region in alphabetical order of the names."}],"reference":{"sql":"SELECT COUNT(*) + %d FROM sales"}}`+"\n",
			i, i, q["request"], i, q["evidence"], i, i, i, i)
	}
	dir := testutil.WriteTiny(tb, func(files map[string]string) { files["records.jsonl"] = b.String() })
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	if len(c.Tasks) != n {
		tb.Fatalf("%d records loaded, want %d", len(c.Tasks), n)
	}
	return c
}

// TestScale5000: on a corpus of 5000 records the audit finds exactly the
// planted leaks and nothing else, and the leak search's work is linear in
// the size of the corpus: the automaton has at most one state per byte of
// the patterns, and searching the public texts takes at most two automaton
// lookups per byte of text (Aho–Corasick's bound), counted, not timed. Its
// speed is BenchmarkScale5000's to report.
func TestScale5000(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test")
	}
	const n = 5000
	c := scaleCorpus(t, n)
	r, err := Run(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.TaskID+": "+f.Msg)
	}
	if len(r.Findings) != len(scaleLeaks) {
		t.Errorf("%d findings, want the %d planted leaks:\n%s", len(r.Findings), len(scaleLeaks), strings.Join(got, "\n"))
	}
	for _, l := range scaleLeaks {
		found := false
		for _, f := range r.Findings {
			found = found || (f.Check == Leak && f.TaskID == l.record && strings.Contains(f.Msg, l.want))
		}
		if !found {
			t.Errorf("planted leak not found: %s: %s", l.record, l.want)
		}
	}
	for ch, cnt := range r.Counts {
		wantFailed := 0
		if ch == Leak {
			wantFailed = len(scaleLeaks)
			if cnt.Checked != n {
				t.Errorf("leak check: %d records checked, want %d", cnt.Checked, n)
			}
		}
		if cnt.Failed != wantFailed {
			t.Errorf("check %s: %d failed, want %d", ch, cnt.Failed, wantFailed)
		}
	}

	// The work of the leak search, counted on the index the audit builds.
	lk := buildLeakIndex(c, DefaultMinResolutionLen)
	if len(lk.patterns) != 2*n { // a resolution and a reference each
		t.Errorf("%d patterns, want %d", len(lk.patterns), 2*n)
	}
	patBytes := 0
	for _, p := range lk.patterns {
		patBytes += len(p)
	}
	if states := len(lk.m.out); states > patBytes+1 {
		t.Errorf("automaton: %d states for %d bytes of patterns", states, patBytes)
	}
	texts := map[*publicText]bool{}
	for _, fs := range lk.fields {
		for _, f := range fs {
			texts[f.text] = true
		}
	}
	textBytes, lookups, hits := 0, 0, 0
	for pt := range texts {
		l, h := countedFind(t, lk.m, pt.text)
		textBytes += len(pt.text)
		lookups += l
		hits += h
	}
	t.Logf("%d records: %d patterns (%d bytes), %d distinct public texts (%d bytes), %d automaton lookups, %d matches",
		n, len(lk.patterns), patBytes, len(texts), textBytes, lookups, hits)
	if lookups > 2*textBytes {
		t.Errorf("the search made %d automaton lookups over %d bytes of text: more than 2 a byte, not linear", lookups, textBytes)
	}
	if hits != len(scaleLeaks) {
		t.Errorf("the search matched %d patterns in the public texts, want the %d planted", hits, len(scaleLeaks))
	}
}

// countedFind walks m over text as find does (the states checked against
// m.step's), counting the goto lookups it makes and the pattern matches it
// reports.
func countedFind(t *testing.T, m *matcher, text string) (lookups, matches int) {
	s := int32(0)
	for i := 0; i < len(text); i++ {
		c := text[i]
		want := m.step(s, c)
		for {
			lookups++
			if next, ok := m.next[uint64(s)<<8|uint64(c)]; ok {
				s = next
				break
			}
			if s == 0 {
				break
			}
			s = m.fail[s]
		}
		if s != want {
			t.Fatalf("%q at byte %d: state %d, step gives %d", text, i, s, want)
		}
		matches += len(m.out[s])
	}
	return lookups, matches
}

// BenchmarkScale5000 reports how long the whole audit of the 5000-record
// corpus takes (ns/op) and its leak search part (leak-ns/op).
func BenchmarkScale5000(b *testing.B) {
	c := scaleCorpus(b, 5000)
	var leak time.Duration
	for b.Loop() {
		r, err := Run(context.Background(), c, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Findings) != len(scaleLeaks) {
			b.Fatalf("%d findings, want %d", len(r.Findings), len(scaleLeaks))
		}
		leak += r.LeakSearch
	}
	b.ReportMetric(float64(leak.Nanoseconds())/float64(b.N), "leak-ns/op")
}

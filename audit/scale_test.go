package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"avtgym/corpus"
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

// A corpus of 5000 records on the tiny database, each with its own
// request, evidence and a distinct resolution of about 60 characters: the
// whole audit, the leak search included, stays fast.
func TestScale5000(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test")
	}
	const n = 5000
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id":"r%d","db":"mini","request":"How many sales of region number %d are in the table, counted with care?","evidence":"Evidence %d: regions are West, East, North and South; amounts are dollars; years are calendar years.","ambiguities":[{"term":"region number %d","kind":"critical","resolution":"Region number %d is the %d-th region in alphabetical order of the names."}],"reference":{"sql":"SELECT COUNT(*) + %d FROM sales"}}`+"\n", i, i, i, i, i, i, i)
	}
	dir := testutil.WriteTiny(t, func(files map[string]string) { files["records.jsonl"] = b.String() })
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	r, err := Run(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		t.Fatalf("%d findings, first %v", len(r.Findings), r.Findings[0])
	}
	t.Logf("%d records: audit %s, leak search (index build + summed search time) %s", n, time.Since(start), r.LeakSearch)
	if r.LeakSearch > 5*time.Second {
		t.Errorf("leak search took %s", r.LeakSearch)
	}
}

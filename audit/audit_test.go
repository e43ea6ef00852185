package audit

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/internal/testutil"
)

// load writes the tiny corpus with extra records appended and edits
// applied to its records file, and loads it.
func load(t *testing.T, edit func(records string) string) *corpus.Corpus {
	t.Helper()
	dir := testutil.WriteTiny(t, func(files map[string]string) {
		if edit != nil {
			files["records.jsonl"] = edit(files["records.jsonl"])
		}
	})
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func run(t *testing.T, c *corpus.Corpus) *Report {
	t.Helper()
	r, err := Run(context.Background(), c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func wantCounts(t *testing.T, r *Report, want map[Check]Count) {
	t.Helper()
	for ch, w := range want {
		if got := r.Counts[ch]; got != w {
			t.Errorf("%s: counts %+v, want %+v", ch, got, w)
		}
	}
}

// wantFinding asserts that exactly the findings of check ch are at the
// given lines (in order) and that each message contains its substring.
func wantFindings(t *testing.T, r *Report, ch Check, lines []int, substr []string) {
	t.Helper()
	var got []Finding
	for _, f := range r.Findings {
		if f.Check == ch {
			got = append(got, f)
		}
	}
	if len(got) != len(lines) {
		t.Fatalf("%s: %d findings, want %d: %v", ch, len(got), len(lines), got)
	}
	for i, f := range got {
		if f.Line != lines[i] || !strings.HasSuffix(f.File, "records.jsonl") || !strings.Contains(f.Msg, substr[i]) {
			t.Errorf("%s finding %d = %q, want line %d and %q", ch, i, f, lines[i], substr[i])
		}
	}
}

func TestTinyPasses(t *testing.T) {
	c := load(t, nil)
	var calls, last, total int
	r, err := Run(context.Background(), c, Options{Workers: 3, Progress: func(done, n int) { calls++; last, total = done, n }})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || len(r.Findings) != 0 {
		t.Fatalf("tiny corpus fails: %v", r.Findings)
	}
	wantCounts(t, r, map[Check]Count{
		Reference: {Checked: 5, Passed: 5},
		Cross:     {Checked: 2, Passed: 2}, // (top-a, top-b) and (top-b, top-a)
		Oracle:    {Checked: 5, Passed: 4, Skipped: 1},
		Leak:      {Checked: 5, Passed: 5},
	})
	// 5 records × 3 per-record checks + 2 pairs.
	if calls != 17 || last != 17 || total != 17 {
		t.Errorf("progress: %d calls, last %d/%d, want 17 calls ending 17/17", calls, last, total)
	}
	var b bytes.Buffer
	r.WriteTable(&b)
	for _, want := range []string{
		"check                   checked   passed   failed  skipped",
		"cross_interpretation          2        2        0        0",
		"oracle_probes                 5        4        0        1",
		`corpus "tiny": 5 records, 4 AVTs: PASS`,
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestDemoPasses(t *testing.T) {
	c, err := corpus.LoadDemo(context.Background(), corpus.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := run(t, c)
	var b bytes.Buffer
	r.WriteTable(&b)
	t.Logf("\n%s", b.String())
	for _, f := range r.Findings {
		t.Errorf("demo finding: %s", f)
	}
	for _, ch := range Checks {
		if n := r.Counts[ch]; n.Checked != n.Passed+n.Failed+n.Skipped || n.Checked == 0 {
			t.Errorf("%s: inconsistent counts %+v", ch, n)
		}
	}
}

// A reference that its own verifier rejects: the comparison policy is
// changed after loading (the loader would refuse such a record) so that
// the empty reference result fails.
func TestReferenceRejectedByOwnVerifier(t *testing.T) {
	c := load(t, func(recs string) string {
		return recs + `{"id":"nothing","db":"mini","request":"Which sales are over a million dollars?","ambiguities":[],"reference":{"sql":"SELECT id FROM sales WHERE amount > 1000000"}}` + "\n"
	})
	task, _ := c.Task("nothing")
	task.Policy.EmptyFails = true
	r := run(t, c)
	wantFindings(t, r, Reference, []int{6}, []string{"fails its own verifier (outcome 0): empty result"})
	wantCounts(t, r, map[Check]Count{Reference: {Checked: 6, Passed: 5, Failed: 1}})
	if r.OK() {
		t.Error("OK with a failing reference")
	}
}

// Two interpretations whose SQL differ only by a column alias have equal
// raw results: the pairs are skipped, not failed.
func TestAliasOnlyInterpretationsSkipped(t *testing.T) {
	c := load(t, func(recs string) string {
		rec := `{"id":"n-%s","avt_id":"n","db":"mini","request":"How many sales were there?","ambiguities":[{"term":"sales","kind":"critical","resolution":"%s"}],"reference":{"sql":"SELECT COUNT(*) AS %s FROM sales"}}` + "\n"
		return recs + fmt.Sprintf(rec, "a", "Every row of the sales table counts.", "n") + fmt.Sprintf(rec, "b", "All the rows in the sales table.", "total")
	})
	r := run(t, c)
	if !r.OK() {
		t.Fatalf("findings: %v", r.Findings)
	}
	wantCounts(t, r, map[Check]Count{Cross: {Checked: 4, Passed: 2, Skipped: 2}})
}

func TestRequestContainsAnotherRecordsResolution(t *testing.T) {
	c := load(t, func(recs string) string {
		return strings.Replace(recs, `"request":"How many sales rows are there in total?"`,
			`"request":"How many sales rows are there in total?  I MEAN the region with   the most individual sales"`, 1)
	})
	r := run(t, c)
	wantFindings(t, r, Leak, []int{5}, []string{`request contains the resolution of "top region" in record top-b`})
	wantCounts(t, r, map[Check]Count{Leak: {Checked: 5, Passed: 4, Failed: 1}})
}

func TestEvidenceContainsReferenceSQL(t *testing.T) {
	c := load(t, func(recs string) string {
		return strings.Replace(recs, `"request":"List the big sales of the recent year, sorted.",`,
			`"request":"List the big sales of the recent year, sorted.","evidence":"Hint: select id, amount\nFROM sales WHERE amount >= 100 AND year = 2024 ORDER BY amount DESC;",`, 1)
	})
	r := run(t, c)
	wantFindings(t, r, Leak, []int{3}, []string{"evidence contains the record's reference SQL"})
}

// The alias "by recent year" of "big sales" swallows the full policy's
// question about "recent year" ("... mean by recent year?"): matched
// longest first, it credits "big sales" instead, so "recent year" is
// never credited.
func TestTermTheFullProbeCannotCredit(t *testing.T) {
	c := load(t, func(recs string) string {
		return strings.Replace(recs, `{"term":"big sales","kind":"critical","resolution":"Sales of 100 dollars or more."}`,
			`{"term":"big sales","kind":"critical","resolution":"Sales of 100 dollars or more.","aliases":["by recent year"]}`, 1)
	})
	r := run(t, c)
	wantFindings(t, r, Oracle, []int{3, 3}, []string{
		"policy full reaches recall 0.5 and precision 0.5",
		"policy full_adv reaches recall 0.5 and precision 0.5",
	})
	wantCounts(t, r, map[Check]Count{Oracle: {Checked: 5, Passed: 3, Failed: 1, Skipped: 1}})
}

// Rounding to 0 decimals makes 1.2 and 1.4 equal for the verifier although
// the raw results differ: each interpretation's verifier accepts the
// other's reference.
func TestVerifierAcceptsOtherInterpretation(t *testing.T) {
	c := load(t, func(recs string) string {
		rec := `{"id":"avg-%s","avt_id":"avg","db":"mini","request":"What is the typical sale?","ambiguities":[{"term":"typical sale","kind":"critical","resolution":"%s"}],"reference":{"sql":"SELECT %s AS v FROM sales LIMIT 1","comparison":{"decimals":0}}}` + "\n"
		return recs + fmt.Sprintf(rec, "a", "The mean amount in hundreds of dollars.", "1.2") + fmt.Sprintf(rec, "b", "The median amount in hundreds of dollars.", "1.4")
	})
	r := run(t, c)
	wantFindings(t, r, Cross, []int{6, 7}, []string{
		`the verifier accepts the reference of avg-b`,
		`the verifier accepts the reference of avg-a`,
	})
	wantCounts(t, r, map[Check]Count{Cross: {Checked: 4, Passed: 2, Failed: 2}})
}

func TestCanonicalRows(t *testing.T) {
	for _, tc := range []struct {
		a, b any
		eq   bool
	}{
		{int64(3), float64(3), true},
		{"3", int64(3), false},
		{nil, "NULL", false},
		{1.2, 1.4, false},
		{[]byte("x"), "x", false},
		{`a","b`, `a`, false},
	} {
		if got := cell(tc.a) == cell(tc.b); got != tc.eq {
			t.Errorf("cell(%#v) == cell(%#v) is %v, want %v", tc.a, tc.b, got, tc.eq)
		}
	}
}

func TestMatcher(t *testing.T) {
	m := newMatcher([]string{"he", "she", "his", "hers", "ushers x"})
	got := fmt.Sprint(m.find("ushers"))
	if got != "[1 0 3]" {
		t.Errorf("find = %s, want [1 0 3]", got)
	}
	if got := m.find("nothing here"); fmt.Sprint(got) != "[0]" {
		t.Errorf("find = %v", got)
	}
	if normalize("  Hello,\n  WORLD.  ") != "hello, world" {
		t.Errorf("normalize = %q", normalize("  Hello,\n  WORLD.  "))
	}
}

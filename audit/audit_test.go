package audit

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
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
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
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
		FollowUp:  {Checked: 5, Skipped: 5}, // no follow-ups
	})
	// 5 records × 4 per-record checks + 2 pairs.
	if calls != 22 || last != 22 || total != 22 {
		t.Errorf("progress: %d calls, last %d/%d, want 22 calls ending 22/22", calls, last, total)
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
	c, err := corpus.LoadDemo(context.Background(), corpus.Options{Engines: engines.Opener{}})
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

// Two interpretations whose SQL differ only by a column alias have
// identical raw results: the pairs fail (they were once skipped), since no
// verifier can tell the interpretations apart.
func TestIdenticalRawResultsFail(t *testing.T) {
	c := load(t, func(recs string) string {
		rec := `{"id":"n-%s","avt_id":"n","db":"mini","request":"How many sales were there?","ambiguities":[{"term":"sales","kind":"critical","resolution":"%s"}],"reference":{"sql":"SELECT COUNT(*) AS %s FROM sales"}}` + "\n"
		return recs + fmt.Sprintf(rec, "a", "Every row of the sales table counts.", "n") + fmt.Sprintf(rec, "b", "All the rows in the sales table.", "total")
	})
	r := run(t, c)
	wantFindings(t, r, Cross, []int{6, 7}, []string{
		"the reference of n-b (\"\") returns this record's raw result exactly (1 rows, 1 columns, in the same order)",
		"the reference of n-a (\"\") returns this record's raw result exactly",
	})
	wantCounts(t, r, map[Check]Count{Cross: {Checked: 4, Passed: 2, Failed: 2}})
	if r.OK() {
		t.Error("OK with indistinguishable interpretations")
	}
}

// Two interpretations with the same reference up to white space and a
// trailing semicolon fail without being run.
func TestIdenticalReferencesFail(t *testing.T) {
	c := load(t, func(recs string) string {
		rec := `{"id":"s-%s","avt_id":"s","db":"mini","request":"Which sales are large?","ambiguities":[{"term":"large","kind":"critical","resolution":"%s"}],"reference":{"sql":"%s"}}` + "\n"
		return recs + fmt.Sprintf(rec, "a", "Sales of at least 100 dollars.", "SELECT id FROM sales WHERE amount >= 100") +
			fmt.Sprintf(rec, "b", "Sales above the average amount.", "SELECT id\\nFROM sales   WHERE amount >= 100 ;")
	})
	r := run(t, c)
	wantFindings(t, r, Cross, []int{6, 7}, []string{
		"the reference of s-b (\"\") is identical to this record's (white space normalised)",
		"the reference of s-a (\"\") is identical to this record's",
	})
}

// The same rows in another order: an order-sensitive verifier tells the
// interpretations apart (pass); a bag verifier does not (fail).
func TestSameRowsOtherOrder(t *testing.T) {
	for _, tc := range []struct {
		order string
		fail  bool
	}{{"ordered", false}, {"bag", true}} {
		c := load(t, func(recs string) string {
			rec := `{"id":"o-%s","avt_id":"o","db":"mini","request":"List the sales by size.","ambiguities":[{"term":"by size","kind":"critical","resolution":"%s"}],"reference":{"sql":"SELECT id FROM sales ORDER BY amount %s, id","comparison":{"order":"` + tc.order + `"}}}` + "\n"
			return recs + fmt.Sprintf(rec, "a", "Smallest amounts first, please.", "ASC") + fmt.Sprintf(rec, "b", "Largest amounts first, please.", "DESC")
		})
		r := run(t, c)
		if tc.fail {
			wantFindings(t, r, Cross, []int{6, 7}, []string{
				"whose raw result has the same 13 rows in another order",
				"whose raw result has the same 13 rows in another order",
			})
		} else {
			wantFindings(t, r, Cross, nil, nil)
			wantCounts(t, r, map[Check]Count{Cross: {Checked: 4, Passed: 4}})
		}
	}
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

// A resolution pasted into a public field with "I mean", the article, case
// and punctuation dropped, or with its words reordered, is found by the
// paraphrase search (the verbatim search misses it).
func TestParaphrasedResolutionLeaks(t *testing.T) {
	for _, tc := range []struct {
		name, old, new string
		line           []int
		want           []string
	}{
		{"another record's resolution in a request, without I mean",
			`"request":"How many sales rows are there in total?"`,
			`"request":"How many sales rows are there in total? region with most individual sales"`,
			[]int{5}, []string{`request contains a paraphrase of the resolution of "top region" in record top-b (`}},
		{"the AVT's resolution in its request, reordered",
			`"request":"Which is the top region?"`,
			`"request":"Which is the top region: with most sales, individual ones, which region?"`,
			[]int{1, 2}, []string{
				`request contains a paraphrase of the resolution of "top region" in record top-b (`,
				`request contains a paraphrase of the record's own resolution of "top region" (distinguishing words: individual, most)`}},
		{"resolutions in the evidence, with other punctuation and case",
			`"request":"List the big sales of the recent year, sorted.",`,
			`"request":"List the big sales of the recent year, sorted.","evidence":"Sales, of 100 dollars OR more, are big; sort by amount: largest first",`,
			[]int{3, 3}, []string{
				`evidence contains a paraphrase of the record's own resolution of "big sales" (distinguishing words: 100, dollar, more, of, or, sale): "Sales of 100 dollars or more."`,
				`evidence contains a paraphrase of the record's own resolution of "sorted"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := load(t, func(recs string) string {
				if !strings.Contains(recs, tc.old) {
					t.Fatalf("the tiny corpus has no %s", tc.old)
				}
				return strings.ReplaceAll(recs, tc.old, tc.new)
			})
			r := run(t, c)
			wantFindings(t, r, Leak, tc.line, tc.want)
		})
	}
}

// An AVT whose interpretations restate the request, as AMBROSIA's do, is
// not a leak: the request holds 8 of the 9 words of the first
// interpretation (a plain overlap rule would flag it) but not its
// distinguishing word "both", and none of the second's ("or").
func TestRestatedRequestIsNoLeak(t *testing.T) {
	c := load(t, func(recs string) string {
		rec := `{"id":"y-%s","avt_id":"y","db":"mini","request":"List the regions with sales in 2024 and 2023.","ambiguities":[{"term":"in 2024 and 2023","kind":"critical","resolution":"%s"}],"reference":{"sql":"%s"}}` + "\n"
		return recs + fmt.Sprintf(rec, "a", "List the regions with sales in both 2024 and 2023.",
			"SELECT region FROM sales WHERE year = 2024 INTERSECT SELECT region FROM sales WHERE year = 2023") +
			fmt.Sprintf(rec, "b", "List the regions with sales in 2024 or in 2023.", "SELECT DISTINCT region FROM sales")
	})
	r := run(t, c)
	wantFindings(t, r, Leak, nil, nil)
	if !r.OK() {
		t.Errorf("findings: %v", r.Findings)
	}
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

// Every resolution of the demo corpus, pasted into its own record's request
// with "I mean", articles and sentence punctuation dropped and lower-cased,
// is found by the paraphrase search; the corpus as it is has no finding
// (TestDemoPasses).
func TestParaphraseFindsDemoPastes(t *testing.T) {
	c, err := corpus.LoadDemo(context.Background(), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	lk := buildLeakIndex(c, DefaultMinResolutionLen)
	mangle := strings.NewReplacer("I mean ", "", "I mean, ", "", ", ", " ", ". ", " ", "The ", "", "the ", "", "An ", "", "A ", "")
	n := 0
	for _, m := range lk.para.byDB {
		for _, ps := range m {
			for _, p := range ps {
				n++
				u := p.o.task
				res := u.Ambiguities[p.o.amb].Resolution
				pasted := u.Request + " " + strings.ToLower(mangle.Replace(strings.TrimSuffix(res, ".")))
				seq := contentWords(pasted)
				if own, all := p.leaks(&paraText{seq: seq, words: wordSetOf(seq)}); !own || !all {
					t.Errorf("%s: %q pasted as %q not found (own %v, all %v)", u.ID, res, pasted, own, all)
				}
			}
		}
	}
	if n != 104 {
		t.Errorf("%d demo resolutions searched in paraphrase, want 104", n)
	}
}

// TestFollowUpCheck: a record's follow-up reference must pass its own
// verifier (a Query phase 1 leaves the database as loaded); one that does
// not run fails the follow_up check on the record's line.
func TestFollowUpCheck(t *testing.T) {
	good := `,"follow_up":{"request":"And how many of them?","reference":{"sql":"SELECT COUNT(*) FROM sales WHERE amount >= 100 AND year = 2024"},"category":"Query"}}`
	bad := `,"follow_up":{"request":"And the rest?","reference":{"sql":"SELECT missing FROM nowhere"},"category":"Query"}}`
	c := load(t, func(records string) string {
		lines := strings.Split(strings.TrimSpace(records), "\n")
		lines[2] = strings.TrimSuffix(lines[2], "}") + good // big, line 3
		lines[4] = strings.TrimSuffix(lines[4], "}") + bad  // count, line 5
		return strings.Join(lines, "\n") + "\n"
	})
	r := run(t, c)
	wantCounts(t, r, map[Check]Count{FollowUp: {Checked: 5, Passed: 1, Failed: 1, Skipped: 3}})
	wantFindings(t, r, FollowUp, []int{5}, []string{"no such table: nowhere"})
}

package main

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/internal/testutil"
	"avtgym/sqlexec/pytests"
)

// TestCorpusCheckContexts: with model context lengths, `corpus check`
// reports every record whose base prompt does not fit as
// "file:line: context: …" and fails; with room enough it passes.
func TestCorpusCheckContexts(t *testing.T) {
	dir := testutil.WriteTiny(t)
	code, stdout, stderr := runCmd(t, "corpus", "check", "--oracle-context-tokens", "500", "--solver-context-tokens", "2100", dir)
	if code != 1 || !strings.Contains(stdout, "FAIL") {
		t.Fatalf("tiny contexts: exit %d\n%s\n%s", code, stdout, stderr)
	}
	line := regexp.MustCompile(`(?m)^\S*records\.jsonl:(\d+): context: .*(--oracle-context-tokens 500|--solver-context-tokens 2100)`)
	lines := map[string]bool{}
	for _, m := range line.FindAllStringSubmatch(stderr, -1) {
		lines[m[1]+" "+m[2]] = true
	}
	for _, want := range []string{"1 --oracle-context-tokens 500", "5 --oracle-context-tokens 500", "1 --solver-context-tokens 2100", "5 --solver-context-tokens 2100"} {
		if !lines[want] {
			t.Errorf("no finding for line %s:\n%s", want, stderr)
		}
	}
	if !regexp.MustCompile(`(?m)^context\s+5\s+0\s+5\s+0$`).MatchString(stdout) {
		t.Errorf("table:\n%s", stdout)
	}
	code, stdout, stderr = runCmd(t, "corpus", "check", "--oracle-context-tokens", "32768", "--solver-context-tokens", "32768", dir)
	if code != 0 || !regexp.MustCompile(`(?m)^context\s+5\s+5\s+0\s+0$`).MatchString(stdout) {
		t.Fatalf("large contexts: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if code, _, _ := runCmd(t, "corpus", "check", "--oracle-context-tokens", "-1", dir); code != 2 {
		t.Errorf("a negative context: exit %d, want 2", code)
	}
}

// TestCorpusCheckBrokenPythonTests: corpus check's static check of the
// Python tests (the test worker's, without a database) reports each broken
// test of a task or its follow-up as "file:line: tests: task ID,
// field[i]: problem", and nothing for the well-formed ones.
func TestCorpusCheckBrokenPythonTests(t *testing.T) {
	py, stop := pythonTests()
	defer stop()
	if err := py.Check(context.Background()); err != nil {
		if errors.Is(err, pytests.ErrNoPython) && os.Getenv("CI") == "" {
			t.Skipf("no Python test worker here (%v)", err)
		}
		t.Fatal(err)
	}
	good := "def test_case(pred_sqls, sol_sqls, db_name, conn):\n    res, err, _ = execute_queries(pred_sqls, db_name, conn)\n    assert not err\n"
	c := &corpus.Corpus{Tasks: []*corpus.Task{
		{Record: &corpus.Record{ID: "fine", Reference: corpus.Reference{Tests: []string{good}},
			FollowUp: &corpus.FollowUp{Reference: corpus.Reference{Tests: []string{good}}}}, File: "records.jsonl", Line: 1},
		{Record: &corpus.Record{ID: "no_tests"}, File: "records.jsonl", Line: 2},
		{Record: &corpus.Record{ID: "broken", Reference: corpus.Reference{Tests: []string{good, "def test_case(pred_sqls, sol_sqls, db_name, conn):\n    json.loads('1')\n"}},
			FollowUp: &corpus.FollowUp{Reference: corpus.Reference{Tests: []string{"def test_case(:\n"}}}}, File: "records.jsonl", Line: 3},
	}}
	var stderr strings.Builder
	n, err := lintPythonTests(context.Background(), c, py, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	out := stderr.String()
	for _, want := range []string{
		"records.jsonl:3: tests: task broken, reference.tests[1]: test 2 uses a name that is neither defined by the test nor a helper nor a builtin: json (line 2)\n",
		"records.jsonl:3: tests: task broken, follow_up.reference.tests[0]: test 1 does not compile",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if n != 2 || strings.Count(out, "\n") != 2 {
		t.Errorf("%d broken tests reported; want 2:\n%s", n, out)
	}
}

// TestCorpusCheckUnreachableTermWarning: a knowledge ambiguity whose term
// the request never names passes every check (the full probe names it
// verbatim), and `corpus check` warns about it on stderr as
// "file:line: unreachable_term: warning: record ID, ambiguities[i] (kind)
// "term": …" and counts it under the table, with exit code 0 and PASS;
// the unedited tiny corpus, whose terms all occur in their requests, gets
// no warning.
func TestCorpusCheckUnreachableTermWarning(t *testing.T) {
	clean := testutil.WriteTiny(t)
	code, stdout, stderr := runCmd(t, "corpus", "check", clean)
	if code != 0 || !strings.Contains(stdout, "PASS") || strings.Contains(stderr, "unreachable_term") || strings.Contains(stdout, "warning") {
		t.Fatalf("clean tiny corpus: exit %d\n%s\n%s", code, stdout, stderr)
	}
	dir := testutil.WriteTiny(t, func(f map[string]string) {
		const old = `"request":"Which regions are a strong market?"`
		if !strings.Contains(f["records.jsonl"], old) {
			t.Fatal("the tiny corpus changed: no strong-market request")
		}
		f["records.jsonl"] = strings.Replace(f["records.jsonl"], old, `"request":"Which regions are doing well?"`, 1)
	})
	code, stdout, stderr = runCmd(t, "corpus", "check", dir)
	if code != 0 || !strings.Contains(stdout, "PASS") || !strings.Contains(stdout, "1 warning(s), not failures: unreachable_term") {
		t.Fatalf("edited tiny corpus: exit %d\n%s\n%s", code, stdout, stderr)
	}
	re := regexp.MustCompile(`(?m)^\S*records\.jsonl:4: unreachable_term: warning: record strong, ambiguities\[0\] \(knowledge\) "strong market": its term never occurs as whole words in the request, so the deterministic matcher`)
	if !re.MatchString(stderr) || strings.Count(stderr, "unreachable_term") != 1 {
		t.Errorf("stderr lacks the one warning:\n%s", stderr)
	}
}

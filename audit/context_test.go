package audit

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/env"
	"avtgym/llm"
	"avtgym/oracle"
)

func TestContextSkippedWithoutContexts(t *testing.T) {
	r := run(t, load(t, nil))
	wantCounts(t, r, map[Check]Count{Context: {Checked: 5, Skipped: 5}})
}

// TestContextOnDemo: with an oracle context between the demo records'
// base prompt sizes, exactly the records (and stages) whose base prompt
// exceeds it are findings "file:line: context: …" and fail the check; a
// large context passes every record; a tiny solver context fails them all.
func TestContextOnDemo(t *testing.T) {
	c, err := corpus.LoadDemo(context.Background(), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The unfiltered responder's base sizes; the context is their median.
	var sizes []int
	for _, task := range c.Tasks {
		_, r := oracle.BaseContextTokens(task.Record, task.DB.Schema, false)
		sizes = append(sizes, r)
	}
	sort.Ints(sizes)
	ctxTokens := sizes[len(sizes)/2]
	var want []string
	over := map[string]bool{}
	for _, task := range c.Tasks {
		for _, scoped := range []bool{false, true} {
			m, r := oracle.BaseContextTokens(task.Record, task.DB.Schema, scoped)
			for _, need := range []int{m, r} {
				if need > ctxTokens {
					want = append(want, fmt.Sprintf("%s:%d ~%d", task.File, task.Line, need))
					over[task.ID] = true
				}
			}
		}
	}
	if len(over) == 0 || len(over) == len(c.Tasks) {
		t.Fatalf("precondition: %d of %d records over a context of %d", len(over), len(c.Tasks), ctxTokens)
	}
	r, err := Run(context.Background(), c, Options{OracleContextTokens: ctxTokens})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range r.Findings {
		if f.Check != Context {
			t.Errorf("unexpected finding %s", f)
			continue
		}
		s := f.String()
		if !strings.HasPrefix(s, fmt.Sprintf("%s:%d: context: ", f.File, f.Line)) || !strings.HasSuffix(f.File, "records.jsonl") ||
			!strings.Contains(s, fmt.Sprintf("--oracle-context-tokens %d", ctxTokens)) {
			t.Errorf("finding %q", s)
		}
		need := s[strings.Index(s, "needs ~")+len("needs ") : strings.Index(s, " tokens")]
		got = append(got, fmt.Sprintf("%s:%d %s", f.File, f.Line, need))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("findings:\n%v\nwant:\n%v", got, want)
	}
	if r.OK() || r.Counts[Context] != (Count{Checked: len(c.Tasks), Failed: len(over), Passed: len(c.Tasks) - len(over)}) {
		t.Errorf("context counts %+v (OK %v), want %d failed of %d", r.Counts[Context], r.OK(), len(over), len(c.Tasks))
	}

	// Contexts everything fits.
	r, err = Run(context.Background(), c, Options{OracleContextTokens: 1 << 20, SolverContextTokens: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Counts[Context] != (Count{Checked: len(c.Tasks), Passed: len(c.Tasks)}) {
		t.Errorf("large contexts: %+v, findings %v", r.Counts[Context], r.Findings)
	}

	// A solver context the reply limit alone fills: every task fails.
	r, err = Run(context.Background(), c, Options{SolverContextTokens: llm.DefaultMaxTokens})
	if err != nil {
		t.Fatal(err)
	}
	if r.Counts[Context].Failed != len(c.Tasks) || len(r.Findings) != len(c.Tasks) || !strings.Contains(r.Findings[0].Msg, "LLM solver") {
		t.Errorf("tiny solver context: %+v, %d findings", r.Counts[Context], len(r.Findings))
	}
}

// TestContextSolverCut: a solver context the whole schema does not fit,
// but the schema the solver cuts does, passes; the check uses the same
// arithmetic as the solver.
func TestContextSolverCut(t *testing.T) {
	c := load(t, nil)
	task, _ := c.Task("big")
	full := env.SolverBaseTokens(task, 0, 100)
	// Find a context below the whole prompt that the cut schema fits.
	ctxTokens := 0
	for n := full - 1; n > 100; n-- {
		if _, cut := env.SolverSchema(task, n, 100); cut && env.SolverBaseTokens(task, n, 100) <= n {
			ctxTokens = n
			break
		}
	}
	if ctxTokens == 0 {
		t.Fatalf("no context in which the solver's cut fits (whole prompt %d)", full)
	}
	r, err := Run(context.Background(), c, Options{SolverContextTokens: ctxTokens, SolverMaxTokens: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range r.Findings {
		if f.TaskID == "big" {
			t.Errorf("big fails with the schema cut: %s", f)
		}
	}
}

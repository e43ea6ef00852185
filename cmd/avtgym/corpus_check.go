package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"avtgym/audit"
	"avtgym/corpus"
	"avtgym/llm"
)

// runCorpusCheck loads each corpus directory and audits it (package
// audit): it prints every finding as "file:line: check: message" on
// stderr and a summary table per corpus on stdout, and then every
// warning (audit.Warnings: ambiguities the deterministic matcher cannot
// reach from the request) as "file:line: unreachable_term: warning: …",
// which does not fail the corpus. Exit code 0: every corpus passes; 1: a
// corpus does not load or fails a check; 2: usage.
func runCorpusCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("corpus check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workers := fs.Int("workers", 0, "units checked at once (0: GOMAXPROCS)")
	minRes := fs.Int("min-resolution-len", audit.DefaultMinResolutionLen, "shortest normalised resolution the leak check searches for, in bytes")
	progress := fs.Bool("progress", false, "report progress on stderr")
	oracleCtx := fs.Int("oracle-context-tokens", 0, "context length of the LLM oracles' model in tokens (as serve's flag): report records whose base prompts exceed it (0: not checked)")
	solverCtx := fs.Int("solver-context-tokens", 0, "context length of the LLM solver's model in tokens (as serve's flag): report tasks whose solver prompt without dialogue exceeds it (0: not checked)")
	solverMax := fs.Int("solver-max-tokens", llm.DefaultMaxTokens, "the LLM solver's completion limit (as serve's flag)")
	pg := postgresFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: avtgym corpus check [--workers N] [--min-resolution-len N] [--progress] [--oracle-context-tokens N] [--solver-context-tokens N [--solver-max-tokens N]] [--postgres URL] DIR...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() == 0 || *workers < 0 || *minRes < 1 || *oracleCtx < 0 || *solverCtx < 0 || *solverMax < 1 {
		fs.Usage()
		return 2
	}
	py, stop := pythonTests()
	defer stop()
	code := 0
	for _, dir := range fs.Args() {
		c, ok := loadOrReport(ctx, dir, *pg, py, stderr)
		if !ok {
			code = 1
			continue
		}
		// A broken Python test is a corpus problem, found before any
		// episode meets it (every job makes the same check).
		if n, err := lintPythonTests(ctx, c, py, stderr); err != nil || n > 0 {
			if err != nil {
				fmt.Fprintf(stderr, "%s: checking the Python tests: %v\n", dir, err)
			}
			code = 1
		}
		opt := audit.Options{Workers: *workers, MinResolutionLen: *minRes,
			OracleContextTokens: *oracleCtx, SolverContextTokens: *solverCtx, SolverMaxTokens: *solverMax}
		if *progress {
			last := time.Now()
			opt.Progress = func(done, total int) {
				if done == total || time.Since(last) > time.Second {
					last = time.Now()
					fmt.Fprintf(stderr, "%s: %d/%d units checked\n", dir, done, total)
				}
			}
		}
		r, err := audit.Run(ctx, c, opt)
		warnings := audit.Warnings(c)
		c.Close()
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", dir, err)
			code = 1
			continue
		}
		for _, f := range r.Findings {
			fmt.Fprintln(stderr, f)
		}
		for _, w := range warnings {
			fmt.Fprintln(stderr, w)
		}
		fmt.Fprintf(stdout, "%s:\n", dir)
		r.WriteTable(stdout)
		if len(warnings) > 0 {
			fmt.Fprintf(stdout, "%d warning(s), not failures: %s (on stderr)\n", len(warnings), audit.Unreachable)
		}
		if !r.OK() {
			code = 1
		}
	}
	return code
}

// pyLinter is the static check of Python tests (pytests.Pool.Lint).
type pyLinter interface {
	Lint(ctx context.Context, tests []string) ([]string, error)
}

// lintPythonTests checks every Python test of c's tasks and follow-ups
// (pytests.Pool.Lint) and prints each broken one as
// "file:line: tests: task ID, reference.tests[i]: problem"; it returns how
// many are broken.
func lintPythonTests(ctx context.Context, c *corpus.Corpus, py pyLinter, stderr io.Writer) (int, error) {
	type phase struct {
		field string
		tests []string
	}
	n := 0
	for _, t := range c.Tasks {
		phases := []phase{{"reference.tests", t.Reference.Tests}}
		if t.FollowUp != nil {
			phases = append(phases, phase{"follow_up.reference.tests", t.FollowUp.Reference.Tests})
		}
		for _, ph := range phases {
			if len(ph.tests) == 0 {
				continue
			}
			problems, err := py.Lint(ctx, ph.tests)
			if err != nil {
				return n, fmt.Errorf("task %s: %w", t.ID, err)
			}
			for i, p := range problems {
				if p != "" {
					fmt.Fprintf(stderr, "%s:%d: tests: task %s, %s[%d]: %s\n", t.File, t.Line, t.ID, ph.field, i, p)
					n++
				}
			}
		}
	}
	return n, nil
}

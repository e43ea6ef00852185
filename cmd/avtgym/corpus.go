package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"avtgym/corpus"
	"avtgym/oracle"
	"avtgym/policy"
)

const corpusUsage = `usage:
  avtgym corpus validate DIR...
  avtgym corpus check DIR...
  avtgym corpus import ambrosia --in DIR --out DIR
  avtgym corpus import birdinteract --in DIR --out DIR [--responses FILE]`

func runCorpus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprintln(stderr, corpusUsage)
		return 2
	}
	switch args[0] {
	case "validate":
		if len(args) < 2 {
			fmt.Fprintln(stderr, corpusUsage)
			return 2
		}
		return runValidate(ctx, args[1:], stdout, stderr)
	case "check":
		return runCorpusCheck(ctx, args[1:], stdout, stderr)
	case "import":
		if len(args) < 2 {
			fmt.Fprintln(stderr, corpusUsage)
			return 2
		}
		switch args[1] {
		case "ambrosia":
			return runImportAmbrosia(ctx, args[2:], stdout, stderr)
		case "birdinteract":
			return runImportBirdInteract(ctx, args[2:], stdout, stderr)
		}
	}
	fmt.Fprintln(stderr, corpusUsage)
	return 2
}

// runValidate loads each corpus directory and checks the reference
// oracle's scripted-probe property.
func runValidate(ctx context.Context, dirs []string, stdout, stderr io.Writer) int {
	code := 0
	for _, dir := range dirs {
		c, ok := loadOrReport(ctx, dir, stderr)
		if !ok {
			code = 1
			continue
		}
		problems := policy.CheckReferenceOracle(ctx, c, oracle.Deterministic())
		for _, p := range problems {
			fmt.Fprintln(stderr, p)
		}
		if len(problems) > 0 {
			fmt.Fprintf(stderr, "%s: INVALID: %d problem(s)\n", dir, len(problems))
			code = 1
		} else {
			fmt.Fprintf(stdout, "%s: OK: corpus %q, %d tasks, %d AVTs, %d databases; every reference runs and the deterministic oracle passes the scripted probes\n",
				dir, c.Name, len(c.Tasks), c.AVTCount(), len(c.DBs()))
		}
		c.Close()
	}
	return code
}

// loadOrReport loads a corpus directory; on failure it prints every
// problem as file:line: field: what is wrong, and a summary line.
func loadOrReport(ctx context.Context, dir string, stderr io.Writer) (*corpus.Corpus, bool) {
	c, err := corpus.LoadDir(ctx, dir, corpus.Options{})
	if err == nil {
		return c, true
	}
	var ve *corpus.ValidationError
	if errors.As(err, &ve) {
		for _, p := range ve.Problems {
			fmt.Fprintln(stderr, p)
		}
		fmt.Fprintf(stderr, "%s: INVALID: %d problem(s)\n", dir, len(ve.Problems))
	} else {
		fmt.Fprintf(stderr, "%s: %v\n", dir, err)
	}
	return nil, false
}

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

func runCorpus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 || args[0] != "validate" {
		fmt.Fprintln(stderr, "usage: avtgym corpus validate DIR...")
		return 2
	}
	code := 0
	for _, dir := range args[1:] {
		c, err := corpus.LoadDir(ctx, dir, corpus.Options{})
		if err != nil {
			var ve *corpus.ValidationError
			if errors.As(err, &ve) {
				for _, p := range ve.Problems {
					fmt.Fprintln(stderr, p)
				}
				fmt.Fprintf(stderr, "%s: INVALID: %d problem(s)\n", dir, len(ve.Problems))
			} else {
				fmt.Fprintf(stderr, "%s: %v\n", dir, err)
			}
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

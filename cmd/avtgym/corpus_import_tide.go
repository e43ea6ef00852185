package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"avtgym/audit"
	"avtgym/corpus"
	"avtgym/corpus/tide"
)

// runImportTide implements `avtgym corpus import tide --in DIR --dbs DIR
// --out DIR`: it imports TIDE-Bench samples (--in/samples.jsonl, the
// format of docs/tide.md) on the databases of --dbs
// (<db_id>/<db_id>.sqlite) into a corpus directory, checks the written
// corpus with the oracle probes and the chain_drift check of `corpus
// check`, and prints the import summary.
func runImportTide(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("corpus import tide", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "input directory holding samples.jsonl (required)")
	dbs := fs.String("dbs", "", "databases directory: <db_id>/<db_id>.sqlite per database, as BIRD's and Spider's (required)")
	out := fs.String("out", "", "corpus directory to write (must not exist or be empty, unless --force) (required)")
	force := fs.Bool("force", false, "replace a non-empty --out (only once the import has succeeded)")
	name := fs.String("name", tide.DefaultName, "corpus name")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	usage := "usage: avtgym corpus import tide --in DIR --dbs DIR --out DIR [--force] [--name NAME] [--quiet]"
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *in == "" || *dbs == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	opt := tide.Options{In: *in, DBs: *dbs, Out: *out, Force: *force, Name: *name, Check: tideCheck}
	if !*quiet {
		what := map[string]string{"samples": "samples read", "records": "records loaded (references run)"}
		opt.Progress = func(stage string, done, total int) {
			if done%100 == 0 || done == total {
				fmt.Fprintf(stderr, "tide: %d/%d %s\n", done, total, what[stage])
			}
		}
	}
	sum, err := tide.Import(ctx, opt)
	if err != nil {
		var ie *tide.Error
		if errors.As(err, &ie) {
			for _, p := range ie.Problems {
				fmt.Fprintln(stderr, p)
			}
			fmt.Fprintf(stderr, "tide import: FAILED: %d problem(s); nothing was written to %s\n", len(ie.Problems), *out)
		} else {
			fmt.Fprintf(stderr, "tide import: FAILED: %v\n", err)
		}
		return 1
	}
	sum.Write(stdout)
	fmt.Fprintf(stdout, "wrote corpus %q to %s\n", sum.Name, *out)
	return 0
}

// tideCheck is the TIDE importer's check of a written corpus: the
// deterministic oracle's scripted probes (audit.Probes) and the audit's
// chain_drift check (audit.ChainDriftFindings): every alternative SQL and
// post-drift reference runs and changes the result, and every declared
// drift subtype is the computed one.
func tideCheck(ctx context.Context, c *corpus.Corpus) ([]corpus.Problem, error) {
	fs, err := audit.Probes(ctx, c)
	if err != nil {
		return nil, err
	}
	more, err := audit.ChainDriftFindings(ctx, c)
	if err != nil {
		return nil, err
	}
	return audit.Problems(append(fs, more...)), nil
}

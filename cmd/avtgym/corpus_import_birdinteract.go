package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"avtgym/corpus/birdinteract"
)

// runImportBirdInteract implements `avtgym corpus import birdinteract`:
// it imports BIRD-Interact tasks (mini-interact on SQLite; lite and full on
// PostgreSQL, which need --postgres) into a corpus directory and prints
// the import summary (docs/birdinteract.md).
func runImportBirdInteract(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("corpus import birdinteract", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "input directory: the task JSONL file (merged, or public plus *_gt.jsonl) and one folder per database (SQLite), or postgre_table_dumps/ (PostgreSQL)")
	out := fs.String("out", "", "corpus directory to write (must not exist or be empty, unless --force)")
	responses := fs.String("responses", "", "optional response catalog: JSONL of {instance_id, term, resolution} with natural-language resolutions")
	force := fs.Bool("force", false, "replace a non-empty --out (only once the import has succeeded)")
	name := fs.String("name", "birdinteract", "corpus name")
	pg := postgresFlag(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *in == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: avtgym corpus import birdinteract --in DIR --out DIR [--responses FILE] [--postgres URL] [--force] [--name NAME]")
		return 2
	}
	py, stop := pythonTests()
	defer stop()
	sum, err := birdinteract.Import(ctx, birdinteract.Options{In: *in, Out: *out, Responses: *responses, Force: *force, Name: *name, Postgres: *pg, PyRunner: py, Check: probeCheck})
	if err != nil {
		var ie *birdinteract.Error
		if errors.As(err, &ie) {
			for _, p := range ie.Problems {
				fmt.Fprintln(stderr, p)
			}
			fmt.Fprintf(stderr, "birdinteract import: FAILED: %d problem(s); nothing was written to %s\n", len(ie.Problems), *out)
		} else {
			fmt.Fprintf(stderr, "birdinteract import: FAILED: %v\n", err)
		}
		return 1
	}
	sum.Write(stdout)
	return 0
}

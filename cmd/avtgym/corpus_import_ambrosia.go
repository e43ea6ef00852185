package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"avtgym/corpus/ambrosia"
)

// runImportAmbrosia implements `avtgym corpus import ambrosia --in DIR --out
// DIR [--split NAME] [--force] [--list-rejected]`: it imports the AMBROSIA
// folder (every tasks_*.jsonl, or tasks_NAME.jsonl with --split) into a
// corpus directory and prints the import summary.
func runImportAmbrosia(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("corpus import ambrosia", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "the AMBROSIA folder (with tasks_NAME.jsonl files and dbs/) (required)")
	split := fs.String("split", "", "import only this split (tasks_NAME.jsonl); default: every tasks_*.jsonl of --in")
	out := fs.String("out", "", "the corpus directory to write (required)")
	force := fs.Bool("force", false, "replace a non-empty output directory")
	list := fs.Bool("list-rejected", true, "list each rejected question with its reason")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *in == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: avtgym corpus import ambrosia --in DIR --out DIR [--split NAME] [--force] [--list-rejected=false] [--quiet]")
		return 2
	}
	opt := ambrosia.Options{Force: *force, Split: *split}
	if !*quiet {
		opt.Progress = func(done, total int) {
			if done%20 == 0 || done == total {
				fmt.Fprintf(stderr, "ambrosia: %d/%d ambiguous questions checked\n", done, total)
			}
		}
	}
	sum, err := ambrosia.Import(ctx, *in, *out, opt)
	if sum != nil {
		sum.WriteText(stdout, *list)
	}
	if err != nil {
		fmt.Fprintln(stderr, "corpus import ambrosia:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote corpus %q to %s\n", ambrosia.CorpusName, *out)
	return 0
}

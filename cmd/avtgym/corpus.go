package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"avtgym/audit"
	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/sqlexec"
	"avtgym/sqlexec/pytests"
)

const corpusUsage = `usage:
  avtgym corpus validate [--postgres URL] DIR...
  avtgym corpus check [--oracle-context-tokens N] [--solver-context-tokens N] [--postgres URL] [flags] DIR...
  avtgym corpus import ambrosia --in DIR --out DIR [--split NAME] [--force]
  avtgym corpus import birdinteract --in DIR --out DIR [--responses FILE] [--postgres URL] [--force]
  avtgym corpus import tide --in DIR --dbs DIR --out DIR [--force]`

func runCorpus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 {
		fmt.Fprintln(stderr, corpusUsage)
		return 2
	}
	if isHelp(args[0]) {
		fmt.Fprintln(stdout, corpusUsage)
		return 0
	}
	switch args[0] {
	case "validate":
		fs := flag.NewFlagSet("corpus validate", flag.ContinueOnError)
		fs.SetOutput(stderr)
		pg := postgresFlag(fs)
		fs.Usage = func() {
			fmt.Fprintln(stderr, "usage: avtgym corpus validate [--postgres URL] DIR...")
			fs.PrintDefaults()
		}
		if err := fs.Parse(args[1:]); err != nil {
			return parseExit(err)
		}
		if fs.NArg() == 0 {
			fs.Usage()
			return 2
		}
		return runValidate(ctx, fs.Args(), *pg, stdout, stderr)
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
		case "tide":
			return runImportTide(ctx, args[2:], stdout, stderr)
		}
	}
	fmt.Fprintln(stderr, corpusUsage)
	return 2
}

// pythonTests returns the Python test workers a command's corpora may need
// (none start until a corpus with Python tests is loaded) and a function
// that stops them.
func pythonTests() (*pytests.Pool, func()) {
	py, err := pytests.New(pytests.Config{})
	if err != nil {
		panic(err) // the zero Config is valid
	}
	return py, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		py.Close(ctx)
	}
}

// postgresFlag registers --postgres, whose default is $AVTGYM_POSTGRES_URL.
func postgresFlag(fs *flag.FlagSet) *string {
	p := new(string)
	postgresFlagVar(fs, p)
	return p
}

// postgresFlagVar registers --postgres into p, defaulting to
// $AVTGYM_POSTGRES_URL. Its usage line shows the default with the password
// masked: -h, or any mistyped flag, prints the usage, and a pod's log
// would otherwise hold the admin password.
func postgresFlagVar(fs *flag.FlagSet, p *string) {
	*p = os.Getenv(corpus.PostgresEnv)
	fs.Var((*secretURL)(p), "postgres", corpus.PostgresFlagHelp)
}

// secretURL is a URL flag whose String masks the password.
type secretURL string

func (s *secretURL) Set(v string) error { *s = secretURL(v); return nil }

func (s *secretURL) String() string {
	if s == nil || *s == "" {
		return ""
	}
	u, err := url.Parse(string(*s))
	if err != nil {
		return "(a URL that does not parse; not shown)"
	}
	return u.Redacted()
}

// runValidate loads each corpus directory and checks the reference
// oracle's scripted-probe property.
func runValidate(ctx context.Context, dirs []string, pgURL string, stdout, stderr io.Writer) int {
	py, stop := pythonTests()
	defer stop()
	code := 0
	for _, dir := range dirs {
		c, ok := loadOrReport(ctx, dir, pgURL, py, stderr)
		if !ok {
			code = 1
			continue
		}
		findings, err := audit.Probes(ctx, c)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", dir, err)
			c.Close()
			code = 1
			continue
		}
		for _, f := range findings {
			fmt.Fprintln(stderr, f)
		}
		if len(findings) > 0 {
			fmt.Fprintf(stderr, "%s: INVALID: %d problem(s)\n", dir, len(findings))
			code = 1
		} else {
			fmt.Fprintf(stdout, "%s: OK: corpus %q, %d tasks, %d AVTs, %d databases; every reference runs and the deterministic oracle passes the scripted probes\n",
				dir, c.Name, len(c.Tasks), c.AVTCount(), len(c.DBs()))
		}
		c.Close()
	}
	return code
}

func isHelp(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// probeCheck is the importers' check of a written corpus: the deterministic
// oracle's scripted probes (audit.Probes).
func probeCheck(ctx context.Context, c *corpus.Corpus) ([]corpus.Problem, error) {
	fs, err := audit.Probes(ctx, c)
	if err != nil {
		return nil, err
	}
	return audit.Problems(fs), nil
}

// loadOrReport loads a corpus directory, its PostgreSQL databases (if
// any) on the server pgURL names; on failure it prints every problem as
// file:line: field: what is wrong, and a summary line.
func loadOrReport(ctx context.Context, dir, pgURL string, py sqlexec.PyRunner, stderr io.Writer) (*corpus.Corpus, bool) {
	c, err := corpus.LoadDir(ctx, dir, corpus.Options{Engines: engines.Opener{PostgresURL: pgURL}, PyRunner: py})
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

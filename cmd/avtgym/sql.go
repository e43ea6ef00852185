package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"avtgym/engines"
	"avtgym/sqlcommit"
)

const sqlUsage = `usage:
  avtgym sql commitments --db FILE [--json] SQL
      prints the commitment set S(SQL): one unit per line, W (WHERE/HAVING)
      or O (output side), its scope path, value form and structural form
  avtgym sql drift --db FILE --pre SQL --post SQL [--json]
      says whether S(pre) ⊄ S(post) and gives TIDE's Algorithm 1 subtype
      (value, constraint, projection with aspect_change/target_change, or
      rejected); --json prints {"drift", "subtype", "intent_subtype"}
The SQLite database FILE (opened read-only) tells which double-quoted
names are columns and which are strings. SQL "-" is read from stdin.
Exit status: 0 done (drift or not), 1 error, 2 usage.
`

// runSQL is `avtgym sql`: commitment sets and drift classification of
// SQLite queries (package sqlcommit).
func runSQL(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, sqlUsage)
		return 2
	}
	switch args[0] {
	case "commitments":
		return runSQLCommitments(ctx, args[1:], stdout, stderr)
	case "drift":
		return runSQLDrift(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		// Both subcommands' flags, in flag's format.
		fs := flag.NewFlagSet("sql", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.String("db", "", "the SQLite database `FILE` whose schema resolves names (required)")
		fs.String("pre", "", "drift: the pre-drift `SQL`")
		fs.String("post", "", "drift: the post-drift `SQL`")
		fs.Bool("json", false, "print JSON")
		fmt.Fprint(stderr, sqlUsage+"\nflags:\n")
		fs.PrintDefaults()
		return 0
	}
	fmt.Fprintf(stderr, "sql: unknown subcommand %q\n\n%s", args[0], sqlUsage)
	return 2
}

func runSQLCommitments(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sql commitments", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "the SQLite database `FILE` whose schema resolves names (required)")
	asJSON := fs.Bool("json", false, "print the set as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: avtgym sql commitments --db FILE [--json] SQL")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if *db == "" || fs.NArg() != 1 {
		if fs.NArg() > 1 {
			fmt.Fprintf(stderr, "sql commitments: %d arguments; give the query as one (quoted) argument\n", fs.NArg())
		} else if *db == "" {
			fmt.Fprintln(stderr, "sql commitments: --db is required")
		} else {
			fmt.Fprintln(stderr, "sql commitments: no query given")
		}
		fs.Usage()
		return 2
	}
	query, err := sqlArg(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "sql commitments:", err)
		return 1
	}
	schema, err := engines.CommitSchema(ctx, *db)
	if err != nil {
		fmt.Fprintln(stderr, "sql commitments:", err)
		return 1
	}
	set, err := sqlcommit.Extract(query, schema)
	if err != nil {
		fmt.Fprintln(stderr, "sql commitments:", describeSQLError(query, err))
		return 1
	}
	if *asJSON {
		type unitJSON struct {
			sqlcommit.Unit
			Filtering bool `json:"filtering"`
		}
		out := struct {
			Units        []unitJSON `json:"units"`
			Tables       []string   `json:"tables"`
			WhereColumns []string   `json:"where_columns"`
		}{Units: []unitJSON{}, Tables: set.Tables, WhereColumns: set.WhereColumns}
		for _, u := range set.Units {
			if u.Literals == nil {
				u.Literals = []string{}
			}
			out.Units = append(out.Units, unitJSON{u, u.Filtering()})
		}
		return writeJSON(stdout, stderr, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "W/O\tSCOPE\tVALUE\tSTRUCTURAL")
	for _, u := range set.Units {
		kind := "O"
		if u.Filtering() {
			kind = "W"
		}
		scope := u.Scope
		if scope == "" {
			scope = "/"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", kind, scope, u.Value, u.Struct)
	}
	tw.Flush()
	return 0
}

func runSQLDrift(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sql drift", flag.ContinueOnError)
	fs.SetOutput(stderr)
	db := fs.String("db", "", "the SQLite database `FILE` whose schema resolves names (required)")
	pre := fs.String("pre", "", "the pre-drift `SQL` (required; - reads stdin)")
	post := fs.String("post", "", "the post-drift `SQL` (required; - reads stdin)")
	asJSON := fs.Bool("json", false, `print {"drift", "subtype", "intent_subtype"}`)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: avtgym sql drift --db FILE --pre SQL --post SQL [--json]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	var missing []string
	for _, f := range []struct {
		name, v string
	}{{"--db", *db}, {"--pre", *pre}, {"--post", *post}} {
		if strings.TrimSpace(f.v) == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 || fs.NArg() > 0 {
		if len(missing) > 0 {
			fmt.Fprintf(stderr, "sql drift: %s required\n", strings.Join(missing, ", "))
		} else {
			fmt.Fprintf(stderr, "sql drift: unexpected argument %q (the queries go in --pre and --post)\n", fs.Arg(0))
		}
		fs.Usage()
		return 2
	}
	if *pre == "-" && *post == "-" {
		fmt.Fprintln(stderr, "sql drift: only one of --pre and --post can be read from stdin")
		return 2
	}
	preSQL, err := sqlArg(*pre)
	if err == nil {
		*post, err = sqlArg(*post)
	}
	if err != nil {
		fmt.Fprintln(stderr, "sql drift:", err)
		return 1
	}
	schema, err := engines.CommitSchema(ctx, *db)
	if err != nil {
		fmt.Fprintln(stderr, "sql drift:", err)
		return 1
	}
	a, err := sqlcommit.Extract(preSQL, schema)
	if err != nil {
		fmt.Fprintln(stderr, "sql drift: pre-drift query (--pre):", describeSQLError(preSQL, err))
		return 1
	}
	b, err := sqlcommit.Extract(*post, schema)
	if err != nil {
		fmt.Fprintln(stderr, "sql drift: post-drift query (--post):", describeSQLError(*post, err))
		return 1
	}
	r := sqlcommit.Classify(a, b)
	if *asJSON {
		out := struct {
			Drift   bool    `json:"drift"`
			Subtype *string `json:"subtype"`
			Intent  *string `json:"intent_subtype"`
		}{Drift: r.Drift}
		if r.Subtype != sqlcommit.NoDrift {
			s := string(r.Subtype)
			out.Subtype = &s
		}
		if r.Intent != sqlcommit.NoIntent {
			s := string(r.Intent)
			out.Intent = &s
		}
		return writeJSON(stdout, stderr, out)
	}
	switch {
	case !r.Drift:
		fmt.Fprintln(stdout, "no drift: S(pre) ⊆ S(post)")
	case r.Intent != sqlcommit.NoIntent:
		fmt.Fprintf(stdout, "drift: %s (%s)\n", r.Subtype, r.Intent)
	default:
		fmt.Fprintf(stdout, "drift: %s\n", r.Subtype)
	}
	for _, u := range r.Removed {
		fmt.Fprintln(stdout, "  -", u)
	}
	for _, u := range r.Added {
		fmt.Fprintln(stdout, "  +", u)
	}
	return 0
}

// sqlArg returns a query argument, reading stdin for "-".
func sqlArg(s string) (string, error) {
	if s != "-" {
		return s, nil
	}
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		return "", fmt.Errorf("reading the query from stdin: %w", err)
	}
	return string(b), nil
}

// describeSQLError adds, for a parse error, the query line with a caret
// under the position.
func describeSQLError(query string, err error) string {
	var pe *sqlcommit.ParseError
	if !errors.As(err, &pe) || pe.Line == 0 {
		return err.Error()
	}
	lines := strings.Split(query, "\n")
	if pe.Line > len(lines) {
		return err.Error()
	}
	line := lines[pe.Line-1]
	return fmt.Sprintf("%v\n  %s\n  %s^", err, line, strings.Repeat(" ", max(0, pe.Column-1)))
}

func writeJSON(stdout, stderr io.Writer, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		fmt.Fprintln(stderr, "sql:", err)
		return 1
	}
	fmt.Fprintln(stdout, string(b))
	return 0
}

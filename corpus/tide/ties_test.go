package tide

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/sqlexec"
	"avtgym/sqlexec/sqlite"
)

// venueDB builds the synthetic venue database (testdata/synthetic/dbs):
// six concerts, two per year; stadium 1 hosts three, 2 two, 3 one.
func venueDB(t *testing.T) *sqlite.DB {
	t.Helper()
	script, err := os.ReadFile(filepath.Join("testdata", "synthetic", "dbs", "venue", "venue.sql"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "venue.sqlite")
	if err := sqlite.BuildFromScript(context.Background(), string(script), p); err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(p, sqlite.Options{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestLimitTie: a LIMIT (or OFFSET) whose boundary rows tie on every
// sort key is reported, with the rows and keys named; one whose boundary
// rows differ, a tie wholly inside the kept rows, or a LIMIT past the
// last row is not; what the rewrite cannot express is an error, not a
// verdict.
func TestLimitTie(t *testing.T) {
	db := venueDB(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name, sql, want string // want: a substring of the message; "" for none
		err             bool
	}{
		{name: "tie on an aggregate", sql: "SELECT year FROM concert GROUP BY year ORDER BY count(*) DESC LIMIT 1",
			want: "ORDER BY count(*) DESC LIMIT 1 cuts through tied sort keys: rows 1 and 2 tie on (count(*) DESC)"},
		{name: "unique top row", sql: "SELECT s.name FROM stadium AS s JOIN concert AS c ON c.stadium_id = s.stadium_id GROUP BY s.name ORDER BY count(*) DESC LIMIT 1"},
		{name: "tie through an alias", sql: "SELECT theme, count(*) AS n FROM concert GROUP BY theme ORDER BY n DESC LIMIT 1", want: "rows 1 and 2 tie on (n DESC)"},
		{name: "ordinal key, no tie", sql: "SELECT stadium_id, count(*) FROM concert GROUP BY stadium_id ORDER BY 2 DESC LIMIT 2"},
		{name: "ordinal key, tie", sql: "SELECT theme, count(*) FROM concert GROUP BY theme ORDER BY 2 DESC LIMIT 3", want: "rows 3 and 4 tie on (2 DESC)"},
		{name: "ordinal keys, tie broken", sql: "SELECT theme, count(*) FROM concert GROUP BY theme ORDER BY 2 DESC, 1 LIMIT 3"},
		{name: "tie inside the kept rows", sql: "SELECT theme FROM concert ORDER BY theme LIMIT 3"},
		{name: "tie at the limit", sql: "SELECT theme FROM concert ORDER BY theme LIMIT 2", want: "LIMIT 2 cuts through tied sort keys: rows 2 and 3"},
		{name: "second key breaks the tie", sql: "SELECT theme, concert_id FROM concert ORDER BY theme, concert_id LIMIT 2"},
		{name: "tie at the offset", sql: "SELECT theme FROM concert ORDER BY theme LIMIT 1 OFFSET 2", want: "OFFSET 2 cuts through tied sort keys: rows 2 and 3"},
		{name: "SQLite's LIMIT m, n", sql: "SELECT theme FROM concert ORDER BY theme LIMIT 2, 1", want: "OFFSET 2 cuts through"},
		{name: "limit past the last row", sql: "SELECT theme FROM concert ORDER BY theme LIMIT 10"},
		{name: "qualified key, unique", sql: "SELECT s.name FROM stadium AS s ORDER BY s.capacity DESC LIMIT 1"},
		{name: "no limit", sql: "SELECT theme FROM concert ORDER BY theme"},
		{name: "limit inside a subquery only", sql: "SELECT name FROM stadium WHERE stadium_id IN (SELECT stadium_id FROM concert ORDER BY year LIMIT 1)"},
		{name: "compound", sql: "SELECT theme FROM concert UNION SELECT name FROM stadium ORDER BY 1 LIMIT 1", err: true},
		{name: "distinct", sql: "SELECT DISTINCT theme FROM concert ORDER BY theme LIMIT 1", err: true},
		{name: "non-literal limit", sql: "SELECT theme FROM concert ORDER BY theme LIMIT (SELECT 1)", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := LimitTie(ctx, db, tc.sql, sqlexec.DefaultLimits())
			switch {
			case tc.err:
				if err == nil {
					t.Errorf("want an error (the check cannot be made), got message %q", msg)
				}
			case err != nil:
				t.Fatalf("error: %v", err)
			case tc.want == "" && msg != "":
				t.Errorf("reported a tie: %s", msg)
			case tc.want != "" && !strings.Contains(msg, tc.want):
				t.Errorf("message %q, want it to contain %q", msg, tc.want)
			}
		})
	}
}

// TestTideImportRefusesLimitTies: an import whose sample has a SQL field
// whose LIMIT cuts through ties fails, naming file:line, the record and
// the field; the same sample with the tie broken by a second sort key
// imports.
func TestTideImportRefusesLimitTies(t *testing.T) {
	alt := func(sql string) func([]map[string]any) []map[string]any {
		return func(ls []map[string]any) []map[string]any {
			byType(ls, "chain_only")["l1_alt_sql"] = sql
			byType(ls, "joint")["l1_alt_sql"] = sql
			return ls
		}
	}
	tied := "SELECT s.name, s.capacity FROM concert AS c JOIN stadium AS s ON c.stadium_id = s.stadium_id WHERE c.year = '2014' ORDER BY c.year LIMIT 1"
	in, dbs := fixture(t, alt(tied))
	_, err := Import(context.Background(), Options{In: in, DBs: dbs, Out: filepath.Join(t.TempDir(), "out")})
	var ie *Error
	if !errors.As(err, &ie) {
		t.Fatalf("import with a tie: %v, want an *Error", err)
	}
	found := false
	for _, p := range ie.Problems {
		s := p.String()
		if strings.Contains(s, "samples.jsonl:1: instance_id a01-C: l1_alt_sql: ORDER BY c.year LIMIT 1 cuts through tied sort keys: rows 1 and 2 tie on (c.year)") {
			found = true
		}
	}
	if !found {
		t.Errorf("problems lack the tie on a01-C's l1_alt_sql: %v", err)
	}

	broken := strings.Replace(tied, "ORDER BY c.year", "ORDER BY c.year, s.capacity DESC", 1)
	in, dbs = fixture(t, alt(broken))
	if _, err := Import(context.Background(), Options{In: in, DBs: dbs, Out: filepath.Join(t.TempDir(), "out")}); err != nil {
		t.Errorf("import without a tie fails: %v", err)
	}
}

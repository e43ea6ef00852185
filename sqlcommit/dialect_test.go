package sqlcommit

import (
	"strings"
	"testing"
)

// TestToPostgres pins each rewrite of toPostgres, and what it must leave
// alone (comments, dollar quotes, operators that merely contain '=').
func TestToPostgres(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		schema         *Schema
	}{
		{"double equals", "SELECT 1 FROM city WHERE ID==2", "SELECT 1 FROM city WHERE ID=2", testSchema},
		{"operators containing =", "SELECT a<=b, c>=d, e!=f, g<==h", "SELECT a<=b, c>=d, e!=f, g<==h", testSchema},
		{"backquotes and brackets", "SELECT `a\"b` FROM [city]", `SELECT "a""b" FROM "city"`, testSchema},
		{"column name stays an identifier", `SELECT "Name" FROM city`, `SELECT "Name" FROM city`, testSchema},
		{"unknown name left for the printer", `SELECT 1 FROM city WHERE Name = "Oslo's"`, `SELECT 1 FROM city WHERE Name = "Oslo's"`, testSchema},
		{"qualified name", `SELECT c."x" FROM city c`, `SELECT c."x" FROM city c`, testSchema},
		{"declared alias", `SELECT ID AS "n" FROM city ORDER BY "n"`, `SELECT ID AS "n" FROM city ORDER BY "n"`, testSchema},
		{"table after FROM", `SELECT 1 FROM "city", "country"`, `SELECT 1 FROM "city", "country"`, testSchema},
		{"table elsewhere stays for the printer", `SELECT "city"`, `SELECT "city"`, testSchema},
		{"empty double quotes are the empty string", `SELECT ""`, `SELECT ''`, testSchema},
		{"glob", `SELECT 1 WHERE a GLOB 'x*' AND b NOT GLOB 'y'`, `SELECT 1 WHERE a SIMILAR TO 'x*' AND b NOT SIMILAR TO 'y'`, nil},
		{"glob function stays", `SELECT glob('x*', a)`, `SELECT glob('x*', a)`, nil},
		{"regexp and match", `SELECT 1 WHERE a REGEXP 'x' AND b NOT REGEXP 'y' AND c MATCH 'z' AND d NOT MATCH 'w'`, `SELECT 1 WHERE a ILIKE 'x' AND b NOT ILIKE 'y' AND c @@ 'z' AND d !@@ 'w'`, nil},
		{"postfix not null", `SELECT 1 WHERE a NOT NULL AND NOT b`, `SELECT 1 WHERE a IS NOT NULL AND NOT b`, nil},
		{"type keywords called as functions", `SELECT time('now'), CAST(x AS CHAR(3)), char(65)`, `SELECT "time"('now'), CAST(x AS CHAR(3)), "char"(65)`, nil},
		{"no schema: identifiers", `SELECT "Oslo"`, `SELECT "Oslo"`, nil},
		{"limit offset, count", "SELECT 1 LIMIT 5, 10", "SELECT 1 LIMIT 10 OFFSET 5", nil},
		{"limit count", "SELECT 1 LIMIT 5 OFFSET 2", "SELECT 1 LIMIT 5 OFFSET 2", nil},
		{"is a value", "SELECT a IS 3, b IS NOT 'x'", "SELECT a IS NOT DISTINCT FROM 3, b IS DISTINCT FROM 'x'", nil},
		{"is a test", "SELECT a IS NULL, b is not true, c IS DISTINCT FROM d", "SELECT a IS NULL, b is not true, c IS DISTINCT FROM d", nil},
		{"comments stay", "SELECT /* \"x\" == */ 1 -- `y`", "SELECT /* \"x\" == */ 1 -- `y`", testSchema},
		{"dollar quote stays", "SELECT $q$a==b$q$", "SELECT $q$a==b$q$", nil},
		{"keywords fold ASCII only", `SELECT 1 a` + "\u017f" + ` "n"`, `SELECT 1 a` + "\u017f" + ` "n"`, testSchema},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rw := toPostgres(tc.in, tc.schema)
			if rw.sql != tc.want {
				t.Errorf("toPostgres(%q) = %q, want %q", tc.in, rw.sql, tc.want)
			}
			if len(rw.origin) != len(rw.sql) {
				t.Errorf("toPostgres(%q): %d offsets for %d bytes", tc.in, len(rw.origin), len(rw.sql))
			}
		})
	}
}

// TestToPostgresOffsets: every byte of the rewritten text maps back to
// the token it came from, so that parse errors point into the original.
func TestToPostgresOffsets(t *testing.T) {
	in := "SELECT `a` FROM t LIMIT 5, 10"
	rw := toPostgres(in, nil)
	for _, tc := range []struct {
		piece string // a part of the rewritten text
		at    string // the original token it maps to
	}{
		{`"a"`, "`a`"},
		{"10", "10"},
		{"OFFSET", ","},
		{" 5", "5"},
	} {
		i := strings.Index(rw.sql, tc.piece)
		if i < 0 {
			t.Fatalf("%q lacks %q", rw.sql, tc.piece)
		}
		if got, want := rw.origin[i+len(tc.piece)-1], strings.Index(in, tc.at); got != want {
			t.Errorf("%q in %q maps to offset %d, want %d (%q)", tc.piece, rw.sql, got, want, tc.at)
		}
	}
}

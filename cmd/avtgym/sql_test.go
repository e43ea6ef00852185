package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/mattn/go-sqlite3"
)

// sqlTestDB writes a small SQLite database (part of Spider's pets_1 and
// world_1) and returns its path.
func sqlTestDB(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.sqlite")
	db, err := sql.Open("sqlite3", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, s := range []string{
		`CREATE TABLE Student (StuID INTEGER, LName TEXT, Age INTEGER, Sex TEXT, Advisor INTEGER)`,
		`CREATE TABLE country (Code TEXT, Name TEXT, Region TEXT, GNP REAL, Population INTEGER)`,
	} {
		if _, err := db.Exec(s); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func TestSQLCommitments(t *testing.T) {
	db := sqlTestDB(t)
	q := `SELECT DISTINCT T1.Name FROM country AS T1 WHERE T1.Region = "Caribbean" AND "GNP" > 10 ORDER BY T1.GNP DESC LIMIT 3`
	code, stdout, stderr := runCmd(t, "sql", "commitments", "--db", db, q)
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	for _, want := range []string{
		"W/O", "SELECT DISTINCT", "SELECT country.name",
		"WHERE country.region = 'Caribbean'", "WHERE country.region = ?", // "Caribbean" is no column: a string
		"WHERE country.gnp > 10", // "GNP" is a column
		"ORDER BY country.gnp DESC", "LIMIT 3",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runCmd(t, "sql", "commitments", "--db", db, "--json", q)
	if code != 0 {
		t.Fatalf("--json: exit %d, stderr %s", code, stderr)
	}
	var out struct {
		Units []struct {
			Scope, Clause, Value, Structural string
			Filtering                        bool
			Literals                         []string
		}
		Tables       []string `json:"tables"`
		WhereColumns []string `json:"where_columns"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("--json output %q: %v", stdout, err)
	}
	if len(out.Units) != 6 || len(out.Tables) != 1 || out.Tables[0] != "country" || len(out.WhereColumns) != 2 {
		t.Errorf("--json: %+v", out)
	}
	nW := 0
	for _, u := range out.Units {
		if u.Filtering {
			nW++
		}
	}
	if nW != 2 {
		t.Errorf("--json: %d filtering units, want 2: %+v", nW, out.Units)
	}
}

func TestSQLDrift(t *testing.T) {
	db := sqlTestDB(t)
	const pre = `SELECT Advisor, AVG(Age) FROM Student WHERE Sex = 'M' GROUP BY Advisor HAVING COUNT(*) >= 2 ORDER BY AVG(Age)`
	cases := []struct {
		post, json, text string
	}{
		{`SELECT Advisor, AVG(Age) FROM Student GROUP BY Advisor HAVING COUNT(*) >= 2 ORDER BY AVG(Age)`,
			`{"drift":true,"subtype":"constraint","intent_subtype":null}`, "drift: constraint"},
		{`SELECT Advisor, AVG(Age) FROM Student WHERE Sex = "F" GROUP BY Advisor HAVING COUNT(*) >= 2 ORDER BY AVG(Age)`,
			`{"drift":true,"subtype":"value","intent_subtype":null}`, "drift: value"},
		{`SELECT Advisor, MIN(Age) FROM Student WHERE Sex = 'M' GROUP BY Advisor HAVING COUNT(*) >= 2 ORDER BY MIN(Age)`,
			`{"drift":true,"subtype":"projection","intent_subtype":"aspect_change"}`, "drift: projection (aspect_change)"},
		{`SELECT Sex, AVG(Age) FROM Student WHERE Sex = 'M' GROUP BY Sex HAVING COUNT(*) >= 2 ORDER BY AVG(Age)`,
			`{"drift":true,"subtype":"projection","intent_subtype":"target_change"}`, "drift: projection (target_change)"},
		{`SELECT Advisor, MIN(Age) FROM Student GROUP BY Advisor HAVING COUNT(*) >= 2 ORDER BY MIN(Age)`,
			`{"drift":true,"subtype":"rejected","intent_subtype":null}`, "drift: rejected"},
		{`SELECT S.Advisor, AVG(S.Age) FROM Student AS S WHERE S.Sex = 'M' AND S.Age > 1 GROUP BY S.Advisor HAVING COUNT(*) >= 2 ORDER BY AVG(S.Age)`,
			`{"drift":false,"subtype":null,"intent_subtype":null}`, "no drift"},
	}
	for _, c := range cases {
		code, stdout, stderr := runCmd(t, "sql", "drift", "--db", db, "--pre", pre, "--post", c.post, "--json")
		if code != 0 || strings.TrimSpace(stdout) != c.json {
			t.Errorf("drift --json to %s: exit %d, stdout %q, stderr %q; want %s", c.post, code, stdout, stderr, c.json)
		}
		code, stdout, stderr = runCmd(t, "sql", "drift", "--db", db, "--pre", pre, "--post", c.post)
		if code != 0 || !strings.HasPrefix(stdout, c.text) {
			t.Errorf("drift to %s: exit %d, stdout %q, stderr %q; want %q first", c.post, code, stdout, stderr, c.text)
		}
	}
	// The text output lists the removed and added units.
	_, stdout, _ := runCmd(t, "sql", "drift", "--db", db, "--pre", pre, "--post", cases[1].post)
	if !strings.Contains(stdout, "- /: WHERE student.sex = 'M'") || !strings.Contains(stdout, "+ /: WHERE student.sex = 'F'") {
		t.Errorf("drift text output lacks the changed units:\n%s", stdout)
	}
}

func TestSQLErrors(t *testing.T) {
	db := sqlTestDB(t)
	junk := filepath.Join(t.TempDir(), "junk.sqlite")
	os.WriteFile(junk, []byte(strings.Repeat("not a database ", 100)), 0o644)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"sql"}, 2, "usage:"},
		{[]string{"sql", "frob"}, 2, `unknown subcommand "frob"`},
		{[]string{"sql", "commitments", "SELECT 1"}, 2, "--db is required"},
		{[]string{"sql", "commitments", "--db", db}, 2, "no query given"},
		{[]string{"sql", "commitments", "--db", db, "SELECT", "1"}, 2, "one (quoted) argument"},
		{[]string{"sql", "commitments", "--nope"}, 2, "flag provided but not defined"},
		{[]string{"sql", "drift", "--db", db, "--pre", "SELECT 1"}, 2, "--post required"},
		{[]string{"sql", "drift", "--db", db, "--pre", "SELECT 1", "--post", "SELECT 2", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"sql", "commitments", "--db", "no-such.sqlite", "SELECT 1"}, 1, "database no-such.sqlite: no such file"},
		{[]string{"sql", "commitments", "--db", junk, "SELECT 1"}, 1, "junk.sqlite"},
		{[]string{"sql", "commitments", "--db", db, "SELECT Name\nFROM country WHER Region = 'x'"}, 1, "parse error at line 2, column 19: syntax error at or near \"Region\""},
		{[]string{"sql", "commitments", "--db", db, "DELETE FROM country"}, 1, "not a single SELECT query"},
		{[]string{"sql", "drift", "--db", db, "--pre", "SELECT Name FROM country", "--post", "SELECT Name FRM country"}, 1, "post-drift query (--post): parse error at line 1, column 17: syntax error at or near \"country\""},
		{[]string{"sql", "drift", "--db", db, "--pre", "SELEC Name FROM country", "--post", "SELECT Name FROM country"}, 1, "pre-drift query (--pre): parse error at line 1, column 1"},
	}
	for _, c := range cases {
		code, _, stderr := runCmd(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("avtgym %q: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr, c.code, c.want)
		}
	}
	// -h is not an error.
	if code, _, stderr := runCmd(t, "sql", "drift", "-h"); code != 0 || !strings.Contains(stderr, "-post") {
		t.Errorf("sql drift -h: exit %d, stderr %q", code, stderr)
	}
	// A parse error shows the line with a caret under the position.
	_, _, stderr := runCmd(t, "sql", "commitments", "--db", db, "SELECT Name FRM country")
	if !strings.Contains(stderr, "  SELECT Name FRM country\n  "+strings.Repeat(" ", 16)+"^\n") {
		t.Errorf("no caret under the error:\n%s", stderr)
	}
}

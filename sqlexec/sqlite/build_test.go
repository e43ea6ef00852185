package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"avtgym/sqlexec"
)

// listDir returns the names in dir.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestBuildAllowed runs a script that uses everything a build script may do.
func TestBuildAllowed(t *testing.T) {
	dir := t.TempDir()
	dest := filepath.Join(dir, "ok.sqlite")
	script := `
-- a comment before the first statement
PRAGMA foreign_keys = ON;
PRAGMA user_version = 7;
PRAGMA application_id = 42;
PRAGMA table_info('zzz');
BEGIN;
CREATE TABLE p (id INTEGER PRIMARY KEY, name TEXT);
CREATE TABLE c (id INTEGER PRIMARY KEY, p INTEGER REFERENCES p(id), v INTEGER);
CREATE TABLE log (msg TEXT);
CREATE TRIGGER t AFTER INSERT ON c BEGIN
  INSERT INTO log VALUES (CASE WHEN new.v > 1 THEN 'big' ELSE 'small' END);
END;
INSERT INTO p VALUES (1, 'a; b'), (2, '/* not a comment */');
INSERT INTO c VALUES (1, 1, 1), (2, 2, 5);
COMMIT;
SAVEPOINT s; UPDATE c SET v = v + 1; RELEASE s;
CREATE TEMP TABLE scratch AS SELECT * FROM c;
DELETE FROM scratch;
CREATE INDEX c_p ON c(p);
CREATE VIEW pv AS SELECT upper(name) AS n FROM p;
ALTER TABLE p ADD COLUMN note TEXT;
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 10) INSERT INTO log SELECT 'n' || x FROM n;
ANALYZE;
REINDEX;
SELECT count(*) FROM c;
`
	if err := Build(context.Background(), script, dest, BuildOptions{Name: "ok.sql"}); err != nil {
		t.Fatalf("Build: %v", err)
	}
	db, err := Open(dest, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Query(context.Background(), "SELECT (SELECT group_concat(msg, ',') FROM log WHERE msg NOT LIKE 'n%'), (SELECT count(*) FROM log), (SELECT name FROM p WHERE id = 1)", sqlexec.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Rows[0]; got[0] != "small,big" || got[1] != int64(12) || got[2] != "a; b" {
		t.Errorf("built rows = %v, want [small,big 12 a; b]", got)
	}
	if got := listDir(t, dir); len(got) != 1 || got[0] != "ok.sqlite" {
		t.Errorf("directory holds %v, want only ok.sqlite", got)
	}
}

// TestBuildRefuses checks each thing a build script may not do: the build fails with
// a clear error naming the script and the statement, and leaves no file behind.
func TestBuildRefuses(t *testing.T) {
	cases := []struct {
		name   string
		script string // %[1]s is replaced by a path in the test's directory
		stmt   int
		kind   sqlexec.ErrorKind
		msg    string
	}{
		{"ATTACH", "CREATE TABLE t(x);\nATTACH '%[1]s' AS other;\nCREATE TABLE other.u(x)", 2, sqlexec.KindDenied, "ATTACH is not allowed"},
		{"ATTACH after a comment", "CREATE TABLE t(x);\n/* hi */ attach database '%[1]s' as o", 2, sqlexec.KindDenied, "ATTACH is not allowed"},
		{"DETACH", "DETACH main", 1, sqlexec.KindDenied, "DETACH is not allowed"},
		{"VACUUM", "CREATE TABLE t(x);\nVACUUM", 2, sqlexec.KindDenied, "VACUUM is not allowed"},
		{"VACUUM INTO", "CREATE TABLE t(x);\nINSERT INTO t VALUES (1);\nVACUUM INTO '%[1]s'", 3, sqlexec.KindDenied, "VACUUM is not allowed"},
		{"VACUUM INTO behind comments", "CREATE TABLE t(x);\n-- VACUUM is fine, says this comment;\n/* ; */ vacuum main into '%[1]s'", 2, sqlexec.KindDenied, "VACUUM is not allowed"},
		{"VACUUM hidden in a dollar quote", "SELECT $a$; VACUUM INTO '%[1]s'; $a$", 1, sqlexec.KindDenied, "bound parameter"},
		{"load_extension", "SELECT load_extension('%[1]s')", 1, sqlexec.KindDenied, "load_extension() is not allowed"},
		{"load_extension in an INSERT", "CREATE TABLE t(x);\nINSERT INTO t SELECT load_extension('%[1]s')", 2, sqlexec.KindDenied, "load_extension() is not allowed"},
		// SQLite itself refuses functions with side effects in the schema (trusted_schema).
		{"load_extension in a view", "CREATE TABLE t(x);\nCREATE VIEW v AS SELECT load_extension('%[1]s');\nSELECT * FROM v", 3, sqlexec.KindSyntax, "unsafe use of load_extension()"},
		{"PRAGMA max_page_count", "PRAGMA max_page_count = 1000000000", 1, sqlexec.KindDenied, "PRAGMA max_page_count is not allowed"},
		{"PRAGMA page_size", "PRAGMA page_size = 65536;\nCREATE TABLE t(x)", 1, sqlexec.KindDenied, "PRAGMA page_size is not allowed"},
		{"PRAGMA temp_store_directory", "PRAGMA temp_store_directory = '%[1]s'", 1, sqlexec.KindDenied, "PRAGMA temp_store_directory is not allowed"},
		{"PRAGMA journal_mode", "PRAGMA journal_mode = WAL", 1, sqlexec.KindDenied, "PRAGMA journal_mode is not allowed"},
		{"PRAGMA writable_schema", "PRAGMA writable_schema = ON", 1, sqlexec.KindDenied, "PRAGMA writable_schema is not allowed"},
		{"PRAGMA reading a limit", "PRAGMA max_page_count", 1, sqlexec.KindDenied, "PRAGMA max_page_count is not allowed"},
		{"EXPLAIN", "EXPLAIN VACUUM INTO '%[1]s'", 1, sqlexec.KindDenied, "EXPLAIN is not allowed"},
		{"parameter", "CREATE TABLE t(x);\nINSERT INTO t VALUES (?)", 2, sqlexec.KindDenied, "bound parameter"},
		{"syntax error", "CREATE TABLE t(x);\n\n\nCREATE TABLE (;", 2, sqlexec.KindSyntax, "syntax error"},
		{"unknown table", "CREATE TABLE t(x); INSERT INTO nope VALUES (1);", 2, sqlexec.KindSyntax, "no such table"},
		{"open transaction", "BEGIN; CREATE TABLE t(x);", 0, sqlexec.KindExecution, "BEGIN without COMMIT"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, "escape.sqlite")
			dest := filepath.Join(dir, "db.sqlite")
			script := strings.ReplaceAll(tc.script, "%[1]s", target)
			err := Build(context.Background(), script, dest, BuildOptions{Name: "x.sql"})
			if err == nil {
				t.Fatal("Build succeeded")
			}
			var be *BuildError
			if !errors.As(err, &be) {
				t.Fatalf("error %v (%T) is not a *BuildError", err, err)
			}
			if k := sqlexec.KindOf(err); k != tc.kind {
				t.Errorf("kind %v, want %v (%v)", k, tc.kind, err)
			}
			if be.Stmt != tc.stmt {
				t.Errorf("statement %d, want %d (%v)", be.Stmt, tc.stmt, err)
			}
			if !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), "sqlite: building from x.sql: ") {
				t.Errorf("error %q: want the script's name and %q", err, tc.msg)
			}
			if got := listDir(t, dir); len(got) != 0 {
				t.Errorf("left behind: %v", got)
			}
		})
	}
}

func TestBuildLineNumbers(t *testing.T) {
	dir := t.TempDir()
	script := "CREATE TABLE t(x);\n-- two\n-- three\nINSERT INTO t VALUES (1);\n\nINSERT INTO t VALUES (1, 2);\n"
	err := Build(context.Background(), script, filepath.Join(dir, "db.sqlite"), BuildOptions{Name: "lines.sql"})
	var be *BuildError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v", err)
	}
	if be.Stmt != 3 || be.Line != 6 {
		t.Errorf("statement %d on line %d, want 3 on line 6 (%v)", be.Stmt, be.Line, err)
	}
	if !strings.Contains(be.Reason(), "statement 3 (line 6)") || strings.Contains(be.Reason(), "lines.sql") {
		t.Errorf("Reason() = %q", be.Reason())
	}
}

func TestBuildSizeLimit(t *testing.T) {
	cases := []struct{ name, script string }{
		{"main", "CREATE TABLE t(x);\nWITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000) INSERT INTO t SELECT randomblob(100) FROM n"},
		{"temp", "CREATE TEMP TABLE t(x);\nWITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000) INSERT INTO t SELECT randomblob(100) FROM n"},
		{"one big blob", "CREATE TABLE t(x);\nINSERT INTO t VALUES (zeroblob(1000000))"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			err := Build(context.Background(), tc.script, filepath.Join(dir, "db.sqlite"), BuildOptions{Name: "big.sql", MaxBytes: 256 << 10})
			if k := sqlexec.KindOf(err); k != sqlexec.KindTooManyBytes {
				t.Fatalf("err = %v (kind %v), want too_many_bytes", err, k)
			}
			if !strings.Contains(err.Error(), "statement 2") || !strings.Contains(err.Error(), "size limit") {
				t.Errorf("error %q does not name statement 2 and the size limit", err)
			}
			if got := listDir(t, dir); len(got) != 0 {
				t.Errorf("left behind: %v", got)
			}
		})
	}
	// The same script fits under the default limit.
	dir := t.TempDir()
	if err := Build(context.Background(), cases[0].script, filepath.Join(dir, "db.sqlite"), BuildOptions{}); err != nil {
		t.Errorf("under the default limit: %v", err)
	}
}

const endless = "CREATE TABLE t(x);\nWITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"

func TestBuildTimeLimit(t *testing.T) {
	dir := t.TempDir()
	err := Build(context.Background(), endless, filepath.Join(dir, "db.sqlite"), BuildOptions{Name: "slow.sql", Timeout: 50 * time.Millisecond})
	if k := sqlexec.KindOf(err); k != sqlexec.KindTimeout {
		t.Fatalf("err = %v (kind %v), want timeout", err, k)
	}
	if !strings.Contains(err.Error(), "time limit of 50ms") || !strings.Contains(err.Error(), "statement 2") {
		t.Errorf("error %q does not name the time limit and statement 2", err)
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Errorf("left behind: %v", got)
	}
}

func TestBuildCallerDeadline(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := Build(ctx, endless, filepath.Join(dir, "db.sqlite"), BuildOptions{Name: "slow.sql"})
	if k := sqlexec.KindOf(err); k != sqlexec.KindTimeout {
		t.Fatalf("err = %v (kind %v), want timeout", err, k)
	}
	if !strings.Contains(err.Error(), "caller's deadline") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %q does not blame the caller's deadline", err)
	}
	if got := listDir(t, dir); len(got) != 0 {
		t.Errorf("left behind: %v", got)
	}
}

func TestBuildFirstKeyword(t *testing.T) {
	for in, want := range map[string]string{
		"select 1":                      "SELECT",
		"  -- c\n /* d */ Vacuum":       "VACUUM",
		"/* unterminated":               "",
		"-- only a comment":             "",
		`"VACUUM"`:                      "",
		"with x as (select 1) select 1": "WITH",
		"\u00a0VACUUM":                  "\u00a0VACUUM",
	} {
		if got := buildFirstKeyword(in); got != want {
			t.Errorf("buildFirstKeyword(%q) = %q, want %q", in, got, want)
		}
	}
}

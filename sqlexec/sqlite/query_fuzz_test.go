package sqlite

import (
	"context"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"avtgym/sqlexec"
)

// FuzzQuery runs arbitrary SQL texts through DB.Query, the verifier's path
// for submitted SQL. Properties:
//   - it never crashes the process (a statement that SQLite reads as empty
//     once crashed the driver with SIGSEGV: the seeds with Unicode spaces
//     and NUL bytes);
//   - a failure is an *sqlexec.Error of a known kind; a result has rows as
//     wide as its columns, within the row and byte caps;
//   - the database never changes, and the engine keeps serving.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		"SELECT 1",
		"SELECT a, b FROM t ORDER BY a",
		"SELECT 1;\u00a0",
		"SELECT 1;\u3000;SELECT 2",
		"\u2028",
		"SELECT 1 AS x\u00a0",
		"\x00",
		"SELECT 1;\x00",
		"\x00SELECT 1",
		"SELECT 1\x00; DELETE FROM t",
		";;;",
		"-- only a comment",
		"/* open",
		"SELECT 'open",
		"SELECT $$a;b$$",
		"CREATE TRIGGER tr AFTER INSERT ON t BEGIN DELETE FROM t; END; SELECT 1",
		"DELETE FROM t",
		"SELECT 1; DROP TABLE t",
		"ATTACH DATABASE ':memory:' AS m",
		"PRAGMA writable_schema = 1",
		"PRAGMA table_info(t)",
		"VACUUM",
		"BEGIN; SELECT 1; COMMIT",
		"SELECT load_extension('x')",
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c",
		"SELECT zeroblob(100000)",
		"SELECT * FROM t AS a, t AS b, t AS c, t AS d",
		"SELECT " + strings.Repeat("(", 2000) + "1" + strings.Repeat(")", 2000),
		"SELECT ?1, :x, @y, $z",
	} {
		f.Add(s)
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "fuzz.sqlite")
	if err := BuildFromScript(context.Background(), "CREATE TABLE t (a INTEGER, b TEXT); INSERT INTO t VALUES (1, 'x'), (2, NULL), (3, 'z');", path); err != nil {
		f.Fatal(err)
	}
	db, err := Open(path, Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { db.Close() })
	const probe = "SELECT a, b FROM t ORDER BY a"
	before, err := db.Query(context.Background(), probe, sqlexec.DefaultLimits())
	if err != nil {
		f.Fatal(err)
	}
	lim := sqlexec.Limits{Timeout: 200 * time.Millisecond, MaxRows: 50, MaxBytes: 64 << 10}
	f.Fuzz(func(t *testing.T, sql string) {
		res, err := db.Query(context.Background(), sql, lim)
		if err != nil {
			if k := sqlexec.KindOf(err); k == 0 || strings.HasPrefix(k.String(), "ErrorKind(") {
				t.Fatalf("Query(%q): error %v (%T) has no known kind", sql, err, err)
			}
		} else {
			if res == nil || len(res.Rows) > lim.MaxRows || res.Bytes > lim.MaxBytes {
				t.Fatalf("Query(%q) = %+v: past the caps %+v", sql, res, lim)
			}
			for _, row := range res.Rows {
				if len(row) != len(res.Columns) {
					t.Fatalf("Query(%q): a row of %d cells under %d columns", sql, len(row), len(res.Columns))
				}
			}
		}
		after, err := db.Query(context.Background(), probe, sqlexec.DefaultLimits())
		if err != nil || !reflect.DeepEqual(after, before) {
			t.Fatalf("after Query(%q) the database reads %+v, %v; want %+v", sql, after, err, before)
		}
	})
}

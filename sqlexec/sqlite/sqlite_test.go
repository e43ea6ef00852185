package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/internal/filetree"
	"avtgym/sqlexec"

	sqlite3 "github.com/mattn/go-sqlite3"
)

const testScript = `
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, joined DATE, vip BOOLEAN);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER REFERENCES customers(id), amount REAL, note BLOB);
CREATE INDEX orders_customer ON orders(customer_id);
CREATE VIEW big_orders AS SELECT * FROM orders WHERE amount > 100;
INSERT INTO customers VALUES (1, 'Ann', 'Oslo', '2021-03-04', 1), (2, 'Bob', 'Rome', '2020-12-31T10:11:12', 0),
  (3, 'Cy''s', NULL, 'not a date', 2), (4, 'Dee', 'Oslo', NULL, NULL);
INSERT INTO orders VALUES (1, 1, 10.5, X'00FF'), (2, 1, 200, NULL), (3, 2, 99.99, NULL), (4, 3, 150.25, X'');
PRAGMA user_version = 7;
`

// build creates a database from script in a fresh temporary directory.
func build(t testing.TB, script string) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "db.sqlite")
	if err := BuildFromScript(context.Background(), script, path); err != nil {
		t.Fatalf("BuildFromScript: %v", err)
	}
	return dir, path
}

func open(t testing.TB, path string, opt Options) *DB {
	t.Helper()
	db, err := Open(path, opt)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func lim() sqlexec.Limits { return sqlexec.DefaultLimits() }

func TestBuildFromScript(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.db")
	ctx := context.Background()
	if err := BuildFromScript(ctx, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", p); err != nil {
		t.Fatal(err)
	}
	if err := BuildFromScript(ctx, "CREATE TABLE u(x);", p); err == nil {
		t.Fatal("BuildFromScript over an existing file succeeded")
	}
	bad := filepath.Join(dir, "bad.db")
	if err := BuildFromScript(ctx, "CREATE TABLE t(x); INSERT INTO nope VALUES (1);", bad); err == nil {
		t.Fatal("a failing script succeeded")
	}
	if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed build left %s behind (stat: %v)", bad, err)
	}
	db := open(t, p, Options{})
	res, err := db.Query(ctx, "SELECT x FROM t", lim())
	if err != nil || len(res.Rows) != 1 || res.Rows[0][0] != int64(1) {
		t.Fatalf("got %+v, %v", res, err)
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing.db"), Options{}); sqlexec.KindOf(err) != sqlexec.KindUnavailable {
		t.Errorf("missing file: got %v, want unavailable", err)
	}
	junk := filepath.Join(dir, "junk.db")
	os.WriteFile(junk, []byte(strings.Repeat("this is not a database ", 100)), 0o644)
	if _, err := Open(junk, Options{}); sqlexec.KindOf(err) != sqlexec.KindUnavailable {
		t.Errorf("junk file: got %v, want unavailable", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("Open created files: %v", entries)
	}
}

func TestQuery(t *testing.T) {
	_, path := build(t, testScript)
	for _, immutable := range []bool{false, true} {
		db := open(t, path, Options{Immutable: immutable})
		cases := []struct {
			name string
			sql  string
			cols []string
			rows [][]any
		}{
			{"select", "SELECT id, name FROM customers WHERE city = 'Oslo' ORDER BY id",
				[]string{"id", "name"}, [][]any{{int64(1), "Ann"}, {int64(4), "Dee"}}},
			{"types", "SELECT 1, 2.5, 'x', X'01', NULL", []string{"1", "2.5", "'x'", "X'01'", "NULL"},
				[][]any{{int64(1), 2.5, "x", []byte{1}, nil}}},
			{"empty blob and null blob", "SELECT note FROM orders WHERE id IN (2, 4) ORDER BY id", []string{"note"},
				[][]any{{nil}, {[]byte{}}}},
			{"empty result", "SELECT id FROM customers WHERE 0", []string{"id"}, [][]any{}},
			{"multi statement returns the last", "SELECT 1; SELECT 2 AS two;", []string{"two"}, [][]any{{int64(2)}}},
			{"trailing comment", "SELECT 3 AS x -- done", []string{"x"}, [][]any{{int64(3)}}},
			{"comment only statements are skipped", "SELECT 4 AS x; /* nothing */ ; -- end", []string{"x"}, [][]any{{int64(4)}}},
			{"semicolon in string", "SELECT 'a;b' AS s", []string{"s"}, [][]any{{"a;b"}}},
			{"view", "SELECT count(*) FROM big_orders", []string{"count(*)"}, [][]any{{int64(2)}}},
			{"dates stay text", "SELECT joined FROM customers ORDER BY id", []string{"joined"},
				[][]any{{"2021-03-04"}, {"2020-12-31T10:11:12"}, {"not a date"}, {nil}}},
			{"dates keep order with limit", "SELECT c.joined AS j, c.vip FROM customers c ORDER BY c.id DESC LIMIT 3",
				[]string{"j", "vip"}, [][]any{{nil, nil}, {"not a date", int64(2)}, {"2020-12-31T10:11:12", int64(0)}}},
			{"booleans stay integers", "SELECT vip FROM customers ORDER BY id", []string{"vip"},
				[][]any{{int64(1)}, {int64(0)}, {int64(2)}, {nil}}},
			{"dates in CTE", "WITH x AS (SELECT joined FROM customers WHERE id = 1) SELECT joined, joined FROM x",
				[]string{"joined", "joined"}, [][]any{{"2021-03-04", "2021-03-04"}}},
			{"read-only pragma", "PRAGMA user_version", []string{"user_version"}, [][]any{{int64(7)}}},
			{"table_info pragma", "SELECT name FROM pragma_table_info('orders') ORDER BY cid", []string{"name"},
				[][]any{{"id"}, {"customer_id"}, {"amount"}, {"note"}}},
			{"recursive CTE", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 5) SELECT sum(x) FROM c",
				[]string{"sum(x)"}, [][]any{{int64(15)}}},
			{"date with trailing comment", "SELECT joined FROM customers WHERE id = 2 -- the date", []string{"joined"},
				[][]any{{"2020-12-31T10:11:12"}}},
			{"date after another statement", "SELECT 1; SELECT joined AS j FROM customers WHERE id = 3", []string{"j"},
				[][]any{{"not a date"}}},
			{"compound with dates", "SELECT joined FROM customers WHERE id = 1 UNION ALL SELECT joined FROM customers WHERE id = 3 ORDER BY 1 DESC",
				[]string{"joined"}, [][]any{{"not a date"}, {"2021-03-04"}}},
			{"json_each", "SELECT value FROM json_each('[1,2]')", []string{"value"}, [][]any{{int64(1)}, {int64(2)}}},
			{"json function", "SELECT json_extract('{\"a\":2}', '$.a') AS a", []string{"a"}, [][]any{{int64(2)}}},
		}
		for _, tc := range cases {
			t.Run(fmt.Sprintf("immutable=%v/%s", immutable, tc.name), func(t *testing.T) {
				res, err := db.Query(context.Background(), tc.sql, lim())
				if err != nil {
					t.Fatalf("Query: %v", err)
				}
				if !reflect.DeepEqual(res.Columns, tc.cols) {
					t.Errorf("columns %q, want %q", res.Columns, tc.cols)
				}
				if !reflect.DeepEqual(res.Rows, tc.rows) {
					t.Errorf("rows %#v, want %#v", res.Rows, tc.rows)
				}
			})
		}
	}
}

func TestPragmaTableInfo(t *testing.T) {
	_, path := build(t, testScript)
	db := open(t, path, Options{})
	for _, q := range []string{"PRAGMA table_info(orders)", "PRAGMA index_list('orders')", "PRAGMA foreign_key_list(orders)", "PRAGMA table_list"} {
		res, err := db.Query(context.Background(), q, lim())
		if err != nil {
			t.Errorf("%s: %v", q, err)
		} else if len(res.Rows) == 0 {
			t.Errorf("%s: no rows", q)
		}
	}
}

func TestErrorKinds(t *testing.T) {
	_, path := build(t, testScript)
	db := open(t, path, Options{})
	cases := []struct {
		name string
		sql  string
		kind sqlexec.ErrorKind
		msg  string // substring of the message
	}{
		{"syntax", "SELEC id FROM customers", sqlexec.KindSyntax, `near "SELEC": syntax error`},
		{"unterminated", "SELECT 'abc", sqlexec.KindSyntax, "unrecognized token"},
		{"no such table", "SELECT * FROM nope", sqlexec.KindSyntax, "no such table: nope"},
		{"no such column", "SELECT nope FROM customers", sqlexec.KindSyntax, "no such column: nope"},
		{"syntax in second statement", "SELECT 1; SELECT FROM", sqlexec.KindSyntax, "statement 2 of 2"},
		{"empty", "  ; -- nothing", sqlexec.KindSyntax, "no SQL statement"},
		{"runtime error", "SELECT abs(-9223372036854775807 - 1)", sqlexec.KindExecution, "integer overflow"},
		{"runtime error in first statement", "SELECT abs(-9223372036854775807 - 1); SELECT 1", sqlexec.KindExecution, "integer overflow"},
		{"json runtime error", "SELECT json_extract('not json', '$.a')", sqlexec.KindExecution, "malformed JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := db.Query(context.Background(), tc.sql, lim())
			if got := sqlexec.KindOf(err); got != tc.kind {
				t.Fatalf("kind %v (%v), want %v", got, err, tc.kind)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q does not contain %q", err.Error(), tc.msg)
			}
		})
	}
}

func TestDenied(t *testing.T) {
	cases := []struct {
		name string
		sql  string
		msg  string
	}{
		{"delete", "DELETE FROM orders", "DELETE"},
		{"update", "UPDATE customers SET name = 'x'", "UPDATE"},
		{"insert", "INSERT INTO customers(name) VALUES ('x')", "INSERT"},
		{"insert select", "INSERT INTO orders SELECT * FROM orders", "INSERT"},
		{"replace", "REPLACE INTO customers(id, name) VALUES (1, 'x')", "INSERT"},
		{"create table", "CREATE TABLE z(x)", "CREATE TABLE"},
		{"create temp table", "CREATE TEMP TABLE z(x)", "CREATE TEMP TABLE"},
		{"create table as", "CREATE TABLE z AS SELECT * FROM orders", "CREATE TABLE"},
		{"create index", "CREATE INDEX i ON orders(amount)", "CREATE INDEX"},
		{"create view", "CREATE VIEW v AS SELECT 1", "CREATE VIEW"},
		{"create trigger", "CREATE TRIGGER tr AFTER INSERT ON orders BEGIN DELETE FROM orders; END", "CREATE TRIGGER"},
		{"create virtual table", "CREATE VIRTUAL TABLE v USING fts5(x)", "CREATE"},
		{"drop table", "DROP TABLE orders", "DROP TABLE"},
		{"drop view", "DROP VIEW big_orders", "DROP VIEW"},
		{"drop index", "DROP INDEX orders_customer", "DROP INDEX"},
		{"alter", "ALTER TABLE orders ADD COLUMN z", "ALTER TABLE"},
		{"attach new file", "ATTACH 'evil.db' AS evil", "ATTACH"},
		{"attach memory", "ATTACH ':memory:' AS m", "ATTACH"},
		{"detach", "DETACH main", "DETACH"},
		{"vacuum", "VACUUM", "VACUUM is not allowed"},
		{"vacuum schema", "VACUUM main", "VACUUM is not allowed"},
		{"vacuum into", "VACUUM INTO '/tmp/avtgym_vacuum_into_test.db'", "VACUUM is not allowed"},
		{"vacuum into relative", "VACUUM INTO 'copy.db'", "VACUUM is not allowed"},
		{"vacuum after read", "SELECT 1; VACUUM INTO 'copy.db'", "statement 2 of 2"},
		{"begin", "BEGIN", "transaction"},
		{"commit", "COMMIT", "transaction"},
		{"savepoint", "SAVEPOINT s", "SAVEPOINT"},
		{"reindex", "REINDEX", "REINDEX"},
		{"analyze", "ANALYZE", "ANALYZE"},
		{"pragma user_version write", "PRAGMA user_version=5", "user_version"},
		{"pragma journal_mode", "PRAGMA journal_mode=WAL", "journal_mode"},
		{"pragma journal_mode read", "PRAGMA journal_mode", "journal_mode"},
		{"pragma writable_schema", "PRAGMA writable_schema=ON", "writable_schema"},
		{"pragma query_only off", "PRAGMA query_only=0", "query_only"},
		{"pragma schema-qualified write", "PRAGMA main.application_id=3", "application_id"},
		{"load_extension", "SELECT load_extension('x')", "load_extension"},
		{"load_extension upper", "SELECT LOAD_EXTENSION('x', 'y')", "load_extension"},
		{"write after read", "SELECT 1; DELETE FROM orders", "statement 2 of 2"},
		{"write before read", "DELETE FROM orders; SELECT 1", "DELETE"},
		{"write in CTE", "WITH x AS (SELECT 1) DELETE FROM orders", "DELETE"},
		{"returning", "DELETE FROM orders RETURNING id", "DELETE"},
	}
	dir, path := build(t, testScript)
	for _, immutable := range []bool{false, true} {
		db := open(t, path, Options{Immutable: immutable})
		before := filetree.MustSums(t, dir)
		for _, tc := range cases {
			t.Run(fmt.Sprintf("immutable=%v/%s", immutable, tc.name), func(t *testing.T) {
				_, err := db.Query(context.Background(), tc.sql, lim())
				if got := sqlexec.KindOf(err); got != sqlexec.KindDenied {
					t.Fatalf("kind %v (%v), want denied", got, err)
				}
				if !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("message %q does not name %q", err.Error(), tc.msg)
				}
				if after := filetree.MustSums(t, dir); !reflect.DeepEqual(before, after) {
					t.Errorf("files changed: before %v, after %v", before, after)
				}
			})
		}
		// The database still answers and still holds its data.
		res, err := db.Query(context.Background(), "SELECT count(*) FROM orders", lim())
		if err != nil || res.Rows[0][0] != int64(4) {
			t.Fatalf("after denials: %v, %v", res, err)
		}
	}
	if _, err := os.Stat("/tmp/avtgym_vacuum_into_test.db"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("VACUUM INTO wrote its target (stat: %v)", err)
	}
	if _, err := os.Stat("copy.db"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("VACUUM INTO wrote copy.db (stat: %v)", err)
	}
	if _, err := os.Stat("evil.db"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ATTACH created evil.db (stat: %v)", err)
	}
}

// TestDeniedWithoutReadOnlyFile shows that the authorizer and the read-only check
// stand on their own: even a connection on a writable file refuses writes.
func TestDeniedWithoutReadOnlyFile(t *testing.T) {
	dir, path := build(t, testScript)
	db := open(t, path, Options{})
	// Replace the pool's DSN by a writable one.
	db.db.Close()
	var err error
	db.db, err = sqlOpenWritable(path)
	if err != nil {
		t.Fatal(err)
	}
	before := filetree.MustSums(t, dir)
	for _, q := range []string{"DELETE FROM orders", "VACUUM", "VACUUM INTO 'x.db'", "PRAGMA user_version=5", "ATTACH 'y.db' AS y"} {
		if _, err := db.Query(context.Background(), q, lim()); sqlexec.KindOf(err) != sqlexec.KindDenied {
			t.Errorf("%s: got %v, want denied", q, err)
		}
	}
	if after := filetree.MustSums(t, dir); !reflect.DeepEqual(before, after) {
		t.Errorf("files changed: before %v, after %v", before, after)
	}
}

func TestTimeout(t *testing.T) {
	// deadlineSlack is how many times its limit a query cut by a deadline
	// may take. Tests assert no durations but deadline enforcement, and
	// then with a bound of at least 10× the limit, so that a busy machine
	// never fails them while a deadline that is not enforced (an endless
	// query) does.
	const deadlineSlack = 40
	_, path := build(t, testScript)
	db := open(t, path, Options{})
	l := lim()
	l.Timeout = 200 * time.Millisecond
	cases := []struct{ name, sql string }{
		{"endless recursive CTE", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"},
		{"endless in first statement", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c; SELECT 1"},
		{"slow row stream", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT x FROM c WHERE x % 100000000 = 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := db.Query(context.Background(), tc.sql, l)
			el := time.Since(start)
			if sqlexec.KindOf(err) != sqlexec.KindTimeout {
				t.Fatalf("got %v, want timeout", err)
			}
			if bound := deadlineSlack * l.Timeout; el > bound {
				t.Fatalf("took %v for a %v limit (bound %v)", el, l.Timeout, bound)
			}
			if !strings.Contains(err.Error(), "200ms") {
				t.Errorf("message %q does not give the limit", err)
			}
			res, err := db.Query(context.Background(), "SELECT count(*) FROM customers", lim())
			if err != nil || res.Rows[0][0] != int64(4) {
				t.Fatalf("engine does not serve after a timeout: %v, %v", res, err)
			}
		})
	}
	t.Run("context deadline", func(t *testing.T) {
		const limit = 150 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		start := time.Now()
		_, err := db.Query(ctx, cases[0].sql, sqlexec.Limits{})
		if k := sqlexec.KindOf(err); k != sqlexec.KindTimeout {
			t.Fatalf("got %v, want timeout", err)
		}
		if el, bound := time.Since(start), deadlineSlack*limit; el > bound {
			t.Fatalf("took %v for a %v context deadline (bound %v)", el, limit, bound)
		}
	})
	t.Run("caller cancels", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		_, err := db.Query(ctx, cases[0].sql, lim())
		if k := sqlexec.KindOf(err); k != sqlexec.KindUnavailable {
			t.Fatalf("got %v, want unavailable", err)
		}
	})
}

func TestCaps(t *testing.T) {
	_, path := build(t, testScript)
	db := open(t, path, Options{})
	gen := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < %d) SELECT x, 'abcdefgh' FROM c"
	cases := []struct {
		name string
		n    int
		lim  sqlexec.Limits
		kind sqlexec.ErrorKind
	}{
		{"at row cap", 10, sqlexec.Limits{MaxRows: 10}, 0},
		{"past row cap", 11, sqlexec.Limits{MaxRows: 10}, sqlexec.KindTooManyRows},
		{"endless rows stop at the cap", 1 << 62, sqlexec.Limits{MaxRows: 10, Timeout: 10 * time.Second}, sqlexec.KindTooManyRows},
		{"at byte cap", 10, sqlexec.Limits{MaxBytes: 480}, 0},
		{"past byte cap", 11, sqlexec.Limits{MaxBytes: 480}, sqlexec.KindTooManyBytes},
		{"endless bytes stop at the cap", 1 << 62, sqlexec.Limits{MaxBytes: 1000, Timeout: 10 * time.Second}, sqlexec.KindTooManyBytes},
		{"no caps", 20000, sqlexec.Limits{}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// The endless cases have a 10s deadline: a cap that did not stop
			// the query would show as a timeout, not as the cap's kind.
			res, err := db.Query(context.Background(), fmt.Sprintf(gen, tc.n), tc.lim)
			if sqlexec.KindOf(err) != tc.kind {
				t.Fatalf("got %v, want kind %v", err, tc.kind)
			}
			if tc.kind == 0 {
				if len(res.Rows) != tc.n || res.Bytes != int64(48*tc.n) /* 16 per cell, 8 per number, 8 text bytes */ {
					t.Errorf("rows %d bytes %d", len(res.Rows), res.Bytes)
				}
			}
		})
	}
}

func TestConcurrentQueries(t *testing.T) {
	_, path := build(t, testScript)
	db := open(t, path, Options{Immutable: true, MaxOpenConns: 4})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				var err error
				switch (g + i) % 4 {
				case 0:
					var res *sqlexec.Result
					res, err = db.Query(context.Background(), "SELECT sum(amount) FROM orders", lim())
					if err == nil && res.Rows[0][0] != 460.74 {
						err = fmt.Errorf("sum %v", res.Rows[0][0])
					}
				case 1:
					_, err = db.Query(context.Background(), "DELETE FROM orders", lim())
					if sqlexec.KindOf(err) == sqlexec.KindDenied {
						err = nil
					}
				case 2:
					l := lim()
					l.Timeout = 20 * time.Millisecond
					_, err = db.Query(context.Background(), "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c", l)
					if sqlexec.KindOf(err) == sqlexec.KindTimeout {
						err = nil
					}
				case 3:
					var res *sqlexec.Result
					res, err = db.Query(context.Background(), "SELECT joined FROM customers WHERE id = 1", lim())
					if err == nil && res.Rows[0][0] != "2021-03-04" {
						err = fmt.Errorf("joined %v", res.Rows[0][0])
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestSchema(t *testing.T) {
	_, path := build(t, testScript+`CREATE TABLE "odd ""name""" (x TEXT); INSERT INTO "odd ""name""" VALUES ('*/ DROP TABLE x; /*');`)
	db := open(t, path, Options{})
	s, err := db.Schema(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CREATE TABLE customers (id INTEGER PRIMARY KEY",
		"2 example rows from \"customers\":\nid | name | city | joined | vip\n1 | 'Ann' | 'Oslo' | '2021-03-04' | 1\n2 | 'Bob'",
		"CREATE TABLE orders",
		"1 | 1 | 10.5 | X'00FF'",
		"CREATE VIEW big_orders",
		`1 example row from "odd ""name""":`,
		"'* / DROP TABLE x; /*'",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("schema lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "CREATE INDEX") || strings.Contains(s, "'Cy''s'") {
		t.Errorf("schema has an index or a third row:\n%s", s)
	}
	if strings.Index(s, "CREATE VIEW") < strings.LastIndex(s, "CREATE TABLE") {
		t.Errorf("views should follow tables:\n%s", s)
	}
	s0, err := db.Schema(context.Background(), 0)
	if err != nil || strings.Contains(s0, "/*") {
		t.Errorf("Schema(0) = %q, %v", s0, err)
	}
}

func TestDialectAndEngine(t *testing.T) {
	_, path := build(t, testScript)
	var e sqlexec.Engine = open(t, path, Options{})
	if e.Dialect() != "sqlite" {
		t.Fatal(e.Dialect())
	}
}

// TestCheckEndToEnd runs sqlexec.Check on a real engine.
func TestCheckEndToEnd(t *testing.T) {
	dir, path := build(t, testScript)
	db := open(t, path, Options{Immutable: true})
	cache := sqlexec.NewCache()
	ctx := context.Background()
	ref := "SELECT name FROM customers WHERE city = 'Oslo' ORDER BY name"
	p := sqlexec.DefaultPolicy()
	p.Order = sqlexec.OrderAuto
	before := filetree.MustSums(t, dir)
	cases := []struct {
		name    string
		pred    string
		success bool
		kind    sqlexec.ErrorKind
	}{
		{"verbatim", ref, true, 0},
		{"equivalent", "SELECT name FROM customers WHERE city IN ('Oslo') ORDER BY 1", true, 0},
		{"wrong order", "SELECT name FROM customers WHERE city = 'Oslo' ORDER BY name DESC", false, 0},
		{"wrong rows", "SELECT name FROM customers", false, 0},
		{"denied", "DELETE FROM customers", false, sqlexec.KindDenied},
		{"syntax", "SELECT FROM", false, sqlexec.KindSyntax},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := sqlexec.Check(ctx, db, cache, "r1", p, tc.pred, ref, lim())
			if err != nil {
				t.Fatalf("Check error: %v", err)
			}
			if v.Success != tc.success || sqlexec.KindOf(v.Err) != tc.kind {
				t.Fatalf("verdict %+v, want success=%v kind=%v", v, tc.success, tc.kind)
			}
			if !v.Success && v.Reason == "" {
				t.Error("failure without a reason")
			}
		})
	}
	if after := filetree.MustSums(t, dir); !reflect.DeepEqual(before, after) {
		t.Error("files changed")
	}
	// A reference that does not run is an error, not a verdict.
	if _, err := sqlexec.Check(ctx, db, cache, "r2", p, "SELECT 1", "SELECT nope", lim()); err == nil {
		t.Error("a broken reference gave no error")
	}
}

func BenchmarkQuerySmall(b *testing.B) {
	_, path := build(b, testScript)
	db := open(b, path, Options{Immutable: true})
	ctx := context.Background()
	l := lim()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			res, err := db.Query(ctx, "SELECT id, name, city FROM customers WHERE id <= 3 ORDER BY id", l)
			if err != nil || len(res.Rows) != 3 {
				b.Fatal(res, err)
			}
		}
	})
}

// sqlOpenWritable opens path through the read-only driver but with mode=rw.
func sqlOpenWritable(path string) (*sql.DB, error) {
	return sql.Open(DriverName, "file:"+escapePath(path)+"?mode=rw")
}

// TestVacuumReachesOnlyTheReadOnlyCheck documents why the read-only check is needed:
// VACUUM and VACUUM INTO compile without consulting the authorizer.
func TestVacuumReachesOnlyTheReadOnlyCheck(t *testing.T) {
	_, path := build(t, testScript)
	db := open(t, path, Options{})
	conn, err := db.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"VACUUM", "VACUUM INTO 'x.db'"} {
		err := conn.Raw(func(dc any) error {
			rc := dc.(*roConn)
			rc.auth.reset()
			ds, err := rc.c.Prepare(q)
			if err != nil {
				return err
			}
			defer ds.Close()
			if rc.auth.denied != "" {
				t.Logf("%s reached the authorizer: %s", q, rc.auth.denied)
			}
			if ds.(*sqlite3.SQLiteStmt).Readonly() {
				t.Errorf("%s is read-only by sqlite3_stmt_readonly", q)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
}

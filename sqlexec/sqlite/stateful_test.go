package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/internal/filetree"
	"avtgym/sqlexec"

	"golang.org/x/sync/semaphore"
)

// statefulScript is testScript with a table whose ids come from AUTOINCREMENT:
// its sequence (2) is ahead of its largest id (1), so the next id is 3 only if
// every copy starts from the same sqlite_sequence.
const statefulScript = testScript + `
CREATE TABLE log (id INTEGER PRIMARY KEY AUTOINCREMENT, msg TEXT NOT NULL);
INSERT INTO log(msg) VALUES ('a'), ('b');
DELETE FROM log WHERE id = 2;
`

// job returns a job with the default policy and limits.
func job(key, predicted string, reference []string, checks ...string) sqlexec.Job {
	return sqlexec.Job{Key: key, Predicted: predicted, Reference: reference, Checks: checks,
		Policy: sqlexec.DefaultPolicy(), Limits: sqlexec.DefaultLimits()}
}

func verify(t testing.TB, s *Stateful, j sqlexec.Job) sqlexec.Verdict {
	t.Helper()
	v, err := s.Verify(context.Background(), j)
	if err != nil {
		t.Fatalf("Verify(%q): %v", j.Predicted, err)
	}
	return v
}

// TestStatefulWritesStayInCopy: every kind of change a Management task makes
// runs on the job's copy; the database file, the read-only engine's answers
// and its schema are the same afterwards.
func TestStatefulWritesStayInCopy(t *testing.T) {
	dir, path := build(t, statefulScript)
	db := open(t, path, Options{})
	s := NewStateful(db, StatefulOptions{})
	ctx := context.Background()
	before := filetree.MustSums(t, dir)
	schemaBefore, err := db.Schema(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name      string
		predicted string
		reference string
		checks    []string
	}{
		{"update", "UPDATE customers SET city = 'Bergen' WHERE id = 1",
			"UPDATE customers SET city='Bergen' WHERE name = 'Ann'", []string{"SELECT id, city FROM customers"}},
		{"insert with autoincrement", "INSERT INTO log(msg) VALUES ('c')",
			"INSERT INTO log(id, msg) VALUES (3, 'c')", []string{"SELECT id, msg FROM log", "SELECT seq FROM sqlite_sequence"}},
		{"delete", "DELETE FROM orders WHERE amount < 100", "DELETE FROM orders WHERE id IN (1, 3)", []string{"SELECT id FROM orders"}},
		{"create view", "CREATE VIEW oslo AS SELECT name FROM customers WHERE city = 'Oslo'",
			"CREATE VIEW oslo AS SELECT name FROM customers WHERE city = 'Oslo' ORDER BY id", []string{"SELECT * FROM oslo"}},
		{"alter table and fill", "ALTER TABLE orders ADD COLUMN big INTEGER; UPDATE orders SET big = amount > 100",
			"ALTER TABLE orders ADD COLUMN big INTEGER; UPDATE orders SET big = CASE WHEN amount > 100 THEN 1 ELSE 0 END",
			[]string{"SELECT id, big FROM orders"}},
		{"rename column", "ALTER TABLE customers RENAME COLUMN city TO town", "ALTER TABLE customers RENAME city TO town",
			[]string{"SELECT name FROM pragma_table_info('customers')"}},
		{"create index", "CREATE INDEX customers_city ON customers(city)", "CREATE INDEX customers_city ON customers (city)",
			[]string{"SELECT name, tbl_name FROM sqlite_schema WHERE type = 'index'"}},
		{"drop table", "DROP VIEW big_orders; DROP TABLE orders", "DROP VIEW big_orders; DROP TABLE orders",
			[]string{"SELECT name FROM sqlite_schema WHERE type = 'table'"}},
		{"trigger", "CREATE TRIGGER gone AFTER DELETE ON customers BEGIN DELETE FROM orders WHERE customer_id = old.id; END; DELETE FROM customers WHERE id = 1",
			"DELETE FROM orders WHERE customer_id = 1; DELETE FROM customers WHERE id = 1", []string{"SELECT count(*) FROM orders", "SELECT count(*) FROM customers"}},
		{"transaction", "BEGIN; UPDATE orders SET amount = amount * 2; SAVEPOINT s; DELETE FROM orders; ROLLBACK TO s; COMMIT",
			"UPDATE orders SET amount = 2 * amount", []string{"SELECT id, amount FROM orders"}},
		{"temporary table", "CREATE TEMP TABLE t AS SELECT name FROM customers; INSERT INTO log(msg) SELECT name FROM t",
			"INSERT INTO log(msg) SELECT name FROM customers ORDER BY id", []string{"SELECT msg FROM log"}},
		{"foreign keys on", "PRAGMA foreign_keys = ON; DELETE FROM customers WHERE id = 4", "DELETE FROM customers WHERE id = 4",
			[]string{"SELECT id FROM customers"}},
		{"header field", "PRAGMA user_version = 9", "PRAGMA main.user_version = 9", []string{"PRAGMA user_version"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := verify(t, s, job(tc.name, tc.predicted, []string{tc.reference}, tc.checks...))
			if !v.Success {
				t.Fatalf("the reference's own effect failed: %+v", v)
			}
			if after := filetree.MustSums(t, dir); !reflect.DeepEqual(before, after) {
				t.Fatalf("files changed: %v", filetree.Diff(before, after))
			}
		})
	}
	// The read-only engine sees the pristine database and schema.
	schemaAfter, err := db.Schema(ctx, 3)
	if err != nil || schemaAfter != schemaBefore {
		t.Fatalf("the engine's schema changed (%v):\n%s\n---\n%s", err, schemaBefore, schemaAfter)
	}
	for q, want := range map[string]any{
		"SELECT city FROM customers WHERE id = 1": "Oslo",
		"SELECT count(*) FROM orders":             int64(4),
		"SELECT count(*) FROM big_orders":         int64(2),
		"SELECT max(id) FROM log":                 int64(1),
		"PRAGMA user_version":                     int64(7),
	} {
		res, err := db.Query(ctx, q, lim())
		if err != nil || res.Rows[0][0] != want {
			t.Errorf("%s: got %v, %v; want %v", q, res, err, want)
		}
	}
}

// TestStatefulChecks: checks pass for the reference's effect and fail, with a
// reason, for a wrong one; without checks the last statements' results decide.
func TestStatefulChecks(t *testing.T) {
	_, path := build(t, statefulScript)
	s := NewStateful(open(t, path, Options{}), StatefulOptions{})
	ref := []string{"UPDATE orders SET amount = amount * 1.1 WHERE customer_id = 1"}
	checks := []string{"SELECT id, round(amount, 2) FROM orders", "SELECT count(*) FROM orders"}
	ordered := sqlexec.Policy{Order: sqlexec.OrderAuto, Decimals: -1}
	cases := []struct {
		name      string
		predicted string
		reference []string
		checks    []string
		policy    *sqlexec.Policy
		ok        bool
		reason    string
		kind      sqlexec.ErrorKind // of Verdict.Err
	}{
		{"reference passes", ref[0], ref, checks, nil, true, "", 0},
		{"same effect, other SQL", "UPDATE orders SET amount = 1.1 * amount WHERE id IN (1, 2)", ref, checks, nil, true, "", 0},
		{"wrong rows changed", "UPDATE orders SET amount = amount * 1.1 WHERE customer_id = 2", ref, checks, nil, false, "check 1 of 2", 0},
		{"nothing changed", "SELECT 1", ref, checks, nil, false, "check 1 of 2", 0},
		{"one row too many", ref[0] + "; INSERT INTO orders(customer_id, amount) VALUES (1, 1)", ref, checks, nil, false, "check 1 of 2", 0},
		{"checked table dropped", "DROP VIEW big_orders; DROP TABLE orders", ref, checks, nil, false, "check 1 of 2 failed on the state the prediction left", 0},
		{"prediction does not compile", "UPDATE nope SET x = 1", ref, checks, nil, false, "syntax", sqlexec.KindSyntax},
		{"prediction fails while running", "INSERT INTO customers(id, name) VALUES (1, 'dup')", ref, checks, nil, false, "UNIQUE", sqlexec.KindExecution},
		{"empty prediction", "  -- nothing\n", ref, checks, nil, false, "no SQL statement", sqlexec.KindSyntax},
		{"empty statements around", ";; " + ref[0] + ";;\n;", ref, checks, nil, true, "", 0},
		{"comment between", "/* first */ UPDATE orders SET amount = 0 WHERE id = 4; -- then\n" + ref[0], ref, checks, nil, false, "check 1 of 2", 0},
		{"statement after an empty one", "SELECT 1;; DELETE FROM orders", ref, checks, nil, false, "check 1 of 2", 0},
		{"ordered check", "UPDATE customers SET name = 'Zed' WHERE id = 1", []string{"UPDATE customers SET name = 'Zed' WHERE id = 1"},
			[]string{"SELECT name FROM customers ORDER BY name"}, &ordered, true, "", 0},
		{"ordered check, wrong order", "UPDATE customers SET name = 'Abe' WHERE id = 4", []string{"UPDATE customers SET name = 'Zed' WHERE id = 4"},
			[]string{"SELECT name FROM customers ORDER BY name"}, &ordered, false, "row 1 differs", 0},
		{"no checks: last results agree", "DELETE FROM orders WHERE id = 1; SELECT count(*) FROM orders", []string{"DELETE FROM orders WHERE amount < 11; SELECT 3"}, nil, nil, true, "", 0},
		{"no checks: last results differ", "DELETE FROM orders WHERE id = 1; SELECT count(*) FROM orders", []string{"SELECT 4"}, nil, nil, false, "row", 0},
		{"no checks: reference in several strings", "INSERT INTO log(msg) VALUES ('x'); SELECT id FROM log WHERE msg = 'x'",
			[]string{"INSERT INTO log(msg) VALUES ('y')", "SELECT id FROM log WHERE msg = 'y'"}, nil, nil, true, "", 0},
		// Issue 25: the checks read the database, not the session's
		// temporary objects, which SQLite resolves before main's.
		{"a temporary copy of the checked table, updated", "CREATE TEMP TABLE orders AS SELECT * FROM main.orders; " + ref[0],
			ref, checks, nil, false, "check 1 of 2", 0},
		{"a temporary view named like the checked table", "CREATE TEMP VIEW orders AS SELECT id, CASE WHEN customer_id = 1 THEN amount * 1.1 ELSE amount END AS amount FROM main.orders",
			ref, checks, nil, false, "check 1 of 2", 0},
		{"a temporary trigger on a checked table", "CREATE TEMP TRIGGER zz AFTER DELETE ON main.orders BEGIN SELECT 1; END; " + ref[0],
			ref, checks, nil, true, "", 0},
		{"a temporary table as scratch space", "CREATE TEMP TABLE ids AS SELECT id FROM orders WHERE customer_id = 1; " +
			"UPDATE orders SET amount = amount * 1.1 WHERE id IN (SELECT id FROM temp.ids)", ref, checks, nil, true, "", 0},
		{"a temporary object with a quote in its name", `CREATE TEMP TABLE "o""rders" (x); ` + ref[0], ref, checks, nil, true, "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := job(tc.name, tc.predicted, tc.reference, tc.checks...)
			if tc.policy != nil {
				j.Policy = *tc.policy
			}
			v := verify(t, s, j)
			if v.Success != tc.ok || !strings.Contains(v.Reason, tc.reason) || sqlexec.KindOf(v.Err) != tc.kind {
				t.Fatalf("got %+v; want success %v, a reason naming %q, error kind %v", v, tc.ok, tc.reason, tc.kind)
			}
		})
	}
}

// TestStatefulRewrite: the policy's rewrite switches apply to the compared
// SQL only; statements that change the state run as written.
func TestStatefulRewrite(t *testing.T) {
	_, path := build(t, statefulScript)
	s := NewStateful(open(t, path, Options{}), StatefulOptions{})
	// With DISTINCT stripped from the INSERT the log would hold 4 rows, not 3.
	pred := "INSERT INTO log(msg) SELECT DISTINCT city FROM customers WHERE city IS NOT NULL; SELECT DISTINCT 1 FROM log"
	ref := []string{"INSERT INTO log(msg) SELECT city FROM customers WHERE city IS NOT NULL GROUP BY city; SELECT 1 FROM log"}
	j := job("rewrite", pred, ref)
	if v := verify(t, s, j); v.Success {
		t.Fatalf("without StripDistinct: %+v, want a failure (1 row vs 3)", v)
	}
	j.Policy.StripDistinct = true
	if v := verify(t, s, j); !v.Success {
		t.Fatalf("with StripDistinct: %+v", v)
	}
	// Checks are rewritten on both sides alike.
	j = job("rewrite checks", "UPDATE orders SET amount = amount + 0.004", []string{"UPDATE orders SET amount = amount + 0.001"},
		"SELECT round(amount, 2) FROM orders")
	if v := verify(t, s, j); !v.Success {
		t.Fatalf("rounded check: %+v", v)
	}
	j.Policy.StripRound = true
	if v := verify(t, s, j); v.Success {
		t.Fatalf("check with ROUND stripped: %+v, want a failure", v)
	}

	for _, tc := range []struct{ in, want string }{
		{"SELECT DISTINCT a FROM t", "SELECT a FROM t"},
		{"INSERT INTO t SELECT DISTINCT a FROM u; SELECT DISTINCT a FROM t", "INSERT INTO t SELECT DISTINCT a FROM u; SELECT a FROM t"},
		{"CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT DISTINCT 1; END;\n/* c */ SELECT DISTINCT 2 -- end",
			"CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT DISTINCT 1; END;\n/* c */ SELECT 2 -- end"},
		{"SELECT DISTINCT 1; -- SELECT DISTINCT 1", "SELECT 1; -- SELECT DISTINCT 1"},
		{"UPDATE t SET a = 1", "UPDATE t SET a = 1"},
	} {
		if got := rewriteLast(sqlexec.Policy{StripDistinct: true, Decimals: -1}, tc.in); got != tc.want {
			t.Errorf("rewriteLast(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestStatefulConcurrent: 16 jobs in parallel, whose writes conflict (the same
// row, the same autoincrement sequence, the same table dropped and
// recreated), give exactly the verdicts they give one at a time.
func TestStatefulConcurrent(t *testing.T) {
	dir, path := build(t, statefulScript)
	s := NewStateful(open(t, path, Options{}), StatefulOptions{})
	before := filetree.MustSums(t, dir)
	var jobs []sqlexec.Job
	for i := range 16 {
		pred := fmt.Sprintf("UPDATE customers SET city = 'C%d' WHERE id = 1; INSERT INTO log(msg) VALUES ('job %d')", i, i)
		// Half the jobs' references agree with their prediction.
		ref := pred
		if i%2 == 1 {
			ref = fmt.Sprintf("UPDATE customers SET city = 'C%d' WHERE id = 1; INSERT INTO log(msg) VALUES ('job %d')", i+1, i)
		}
		j := job(fmt.Sprintf("job %d", i), pred, []string{ref}, "SELECT city FROM customers WHERE id = 1", "SELECT id, msg FROM log")
		if i%4 == 2 {
			// No checks: the state shows in the last result.
			j = job(fmt.Sprintf("job %d", i),
				fmt.Sprintf("DROP TABLE orders; CREATE TABLE orders(id INTEGER PRIMARY KEY, n); INSERT INTO orders(n) VALUES (%d); INSERT INTO log(msg) VALUES ('x'); SELECT o.id, o.n, l.id FROM orders o, log l WHERE l.msg = 'x'", i),
				[]string{fmt.Sprintf("SELECT 1, %d, 3", i)})
		}
		jobs = append(jobs, j)
	}
	want := make([]sqlexec.Verdict, len(jobs))
	for i, j := range jobs {
		want[i] = verify(t, s, j)
		if want[i].Success != (i%2 == 0) {
			t.Fatalf("job %d alone: %+v", i, want[i])
		}
	}
	const rounds = 4
	got := make([][]sqlexec.Verdict, rounds)
	var wg sync.WaitGroup
	errs := make(chan error, rounds*len(jobs))
	for r := range rounds {
		got[r] = make([]sqlexec.Verdict, len(jobs))
		for i, j := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A fresh key half of the time, so that reference sides run
				// concurrently with predicted ones.
				if r%2 == 1 {
					j.Key = fmt.Sprintf("%s round %d", j.Key, r)
				}
				v, err := s.Verify(context.Background(), j)
				if err != nil {
					errs <- err
				}
				got[r][i] = v
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for r := range rounds {
		if !reflect.DeepEqual(got[r], want) {
			t.Errorf("round %d in parallel differs from one at a time:\n got %+v\nwant %+v", r, got[r], want)
		}
	}
	if after := filetree.MustSums(t, dir); !reflect.DeepEqual(before, after) {
		t.Errorf("files changed: %v", filetree.Diff(before, after))
	}
	if n := s.copies.Load(); n != 0 {
		t.Errorf("%d copies still open", n)
	}
}

// TestStatefulDeterministic: ids from AUTOINCREMENT and from rowids are the
// same in every job, one at a time or in parallel.
func TestStatefulDeterministic(t *testing.T) {
	_, path := build(t, statefulScript)
	s := NewStateful(open(t, path, Options{}), StatefulOptions{})
	j := job("ids", "INSERT INTO log(msg) VALUES ('x'); INSERT INTO orders(customer_id, amount) VALUES (2, 1) RETURNING id, (SELECT id FROM log WHERE msg = 'x')",
		[]string{"SELECT 5, 3"})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				if v, err := s.Verify(context.Background(), j); err != nil || !v.Success {
					t.Errorf("goroutine %d job %d: %+v, %v", g, i, v, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestStatefulHostile: statements that try to reach outside the copy, or to
// use unbounded time, memory or space, end as the policy's failures of the
// expected kind, before the work they would do; no file appears or changes,
// and SQLite's memory comes back.
func TestStatefulHostile(t *testing.T) {
	for _, mode := range copyModes {
		t.Run(mode, func(t *testing.T) { testStatefulHostile(t, mode) })
	}
}

// copyModes are the two ways of making a copy: mapping the image
// copy-on-write (Linux) and duplicating it.
var copyModes = []string{"mapped", "duplicated"}

// newStateful returns a verifier whose copies are made the mode's way.
func newStateful(t testing.TB, db *DB, opt StatefulOptions, mode string) *Stateful {
	s := NewStateful(db, opt)
	s.duplicate = mode == "duplicated"
	img, err := s.image(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if (img.cow != nil) != (mode == "mapped") {
		if mode == "mapped" && runtime.GOOS != "linux" {
			t.Skip("copy-on-write images need Linux")
		}
		t.Fatalf("mode %s, but the image is mapped: %v", mode, img.cow != nil)
	}
	return s
}

// memoryMark is the process's memory at a point of a test.
type memoryMark struct {
	sqlite, sqlitePeak int64 // SQLite's heap (sqlite3_memory_used, _highwater)
	rss, rssPeak       int64 // the process's resident memory (VmRSS, VmHWM); 0 where /proc does not tell
	mappings           int   // mapped copies of images
}

// markMemory takes a mark; with reset, the peaks start again from now.
func markMemory(reset bool) memoryMark {
	runtime.GC()
	var m memoryMark
	if reset {
		os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM (Linux)
	}
	m.sqlite, m.sqlitePeak = sqliteMemory(reset)
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			var kb int64
			if n, _ := fmt.Sscanf(l, "VmRSS: %d kB", &kb); n == 1 {
				m.rss = kb << 10
			}
			if n, _ := fmt.Sscanf(l, "VmHWM: %d kB", &kb); n == 1 {
				m.rssPeak = kb << 10
			}
		}
	}
	if b, err := os.ReadFile("/proc/self/maps"); err == nil {
		m.mappings = strings.Count(string(b), "avtgym-sqlite-image")
	}
	return m
}

func testStatefulHostile(t *testing.T, mode string) {
	dir, path := build(t, statefulScript)
	tmp := t.TempDir()
	t.Setenv("SQLITE_TMPDIR", tmp)
	out := t.TempDir() // where hostile statements try to write
	db := open(t, path, Options{})
	const growth = 4 << 20
	s := newStateful(t, db, StatefulOptions{MaxGrowth: growth}, mode)
	before := filetree.MustSums(t, dir)
	endless := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) "
	many := func(expr string, n int) string { return strings.TrimSuffix(strings.Repeat(expr+",", n), ",") }
	quick := sqlexec.DefaultLimits()
	quick.Timeout = 300 * time.Millisecond
	cases := []struct {
		name     string
		sql      string
		kind     sqlexec.ErrorKind
		msg      string
		limits   *sqlexec.Limits
		deadline time.Duration
	}{
		{"attach a file", fmt.Sprintf("ATTACH '%s/x' AS y", out), sqlexec.KindDenied, "ATTACH", nil, 0},
		{"attach after a write", fmt.Sprintf("DELETE FROM orders; ATTACH '%s/x' AS y; CREATE TABLE y.t(a)", out), sqlexec.KindDenied, "statement 2 of 3", nil, 0},
		{"attach memory", "ATTACH ':memory:' AS m", sqlexec.KindDenied, "ATTACH", nil, 0},
		{"detach", "DETACH main", sqlexec.KindDenied, "DETACH", nil, 0},
		{"vacuum into", fmt.Sprintf("VACUUM INTO '%s/y'", out), sqlexec.KindDenied, "VACUUM", nil, 0},
		{"vacuum into after comments", fmt.Sprintf("/* x */ -- y\n vacuum into '%s/y'", out), sqlexec.KindDenied, "VACUUM", nil, 0},
		{"vacuum into after a write", fmt.Sprintf("UPDATE orders SET amount = 0; VACUUM INTO '%s/y'", out), sqlexec.KindDenied, "statement 2 of 2", nil, 0},
		{"vacuum", "VACUUM", sqlexec.KindDenied, "VACUUM", nil, 0},
		{"explain vacuum into", fmt.Sprintf("EXPLAIN VACUUM INTO '%s/y'", out), sqlexec.KindDenied, "EXPLAIN", nil, 0},
		{"load_extension", "SELECT load_extension('/tmp/evil')", sqlexec.KindDenied, "load_extension", nil, 0},
		{"load_extension in a trigger", "CREATE TRIGGER tr AFTER INSERT ON log BEGIN SELECT load_extension('/tmp/evil'); END; INSERT INTO log(msg) VALUES ('z')",
			sqlexec.KindDenied, "load_extension", nil, 0},
		// With an untrusted schema SQLite itself refuses the call in a view.
		{"load_extension in a view", "CREATE VIEW v AS SELECT load_extension('/tmp/evil') AS x; SELECT * FROM v", sqlexec.KindSyntax, "unsafe use of load_extension", nil, 0},
		{"fts3_tokenizer", "SELECT fts3_tokenizer('simple')", sqlexec.KindDenied, "fts3_tokenizer", nil, 0},
		{"writable_schema", "PRAGMA writable_schema = ON", sqlexec.KindDenied, "writable_schema", nil, 0},
		{"writable_schema then schema write", "PRAGMA writable_schema = 1; UPDATE sqlite_schema SET sql = 'CREATE TABLE x(' WHERE name = 'orders'",
			sqlexec.KindDenied, "writable_schema", nil, 0},
		{"schema table write", "UPDATE sqlite_schema SET sql = 'x'", sqlexec.KindSyntax, "may not be modified", nil, 0},
		{"journal off", "PRAGMA journal_mode = OFF", sqlexec.KindDenied, "journal_mode", nil, 0},
		{"lift the size limit", "PRAGMA max_page_count = 2147483646", sqlexec.KindDenied, "max_page_count", nil, 0},
		{"process heap limit", "PRAGMA hard_heap_limit = 1", sqlexec.KindDenied, "hard_heap_limit", nil, 0},
		{"temp directory", fmt.Sprintf("PRAGMA temp_store_directory = '%s'", out), sqlexec.KindDenied, "temp_store_directory", nil, 0},
		{"cache size", "PRAGMA cache_size = -1000000", sqlexec.KindDenied, "cache_size", nil, 0},
		{"mmap", "PRAGMA mmap_size = 1000000000", sqlexec.KindDenied, "mmap_size", nil, 0},
		{"virtual table", "CREATE VIRTUAL TABLE v USING fts4(x)", sqlexec.KindDenied, "CREATE VIRTUAL TABLE", nil, 0},
		{"dbstat", "SELECT * FROM dbstat", sqlexec.KindSyntax, "no such table", nil, 0},
		{"huge insert select", "CREATE TABLE big(x); INSERT INTO big SELECT randomblob(1000) FROM (" + endless + "SELECT x FROM c)",
			sqlexec.KindTooMuchMemory, "size limit", nil, 0},
		{"huge update", "INSERT INTO orders(amount) SELECT x FROM (" + endless + "SELECT x FROM c LIMIT 200000); UPDATE orders SET note = zeroblob(100)",
			sqlexec.KindTooMuchMemory, "size limit", nil, 0},
		{"huge temporary table", "CREATE TEMP TABLE big AS SELECT randomblob(1000) AS x FROM (" + endless + "SELECT x FROM c)",
			sqlexec.KindTooMuchMemory, "size limit", nil, 0},
		{"huge transaction journal", "BEGIN; UPDATE orders SET note = randomblob(900000); UPDATE orders SET note = randomblob(900001); " +
			"INSERT INTO orders(note) SELECT randomblob(3000) FROM (" + endless + "SELECT x FROM c LIMIT 900); UPDATE orders SET note = randomblob(3001); UPDATE orders SET note = randomblob(3002); COMMIT",
			sqlexec.KindTooMuchMemory, "memory limit", &sqlexec.Limits{Timeout: 5 * time.Second, MaxRows: 10, MaxBytes: 1 << 20, MaxMemory: 2 << 20}, 0},
		{"huge row in memory", "SELECT " + many("randomblob(8000000)", 200), sqlexec.KindTooMuchMemory, "memory limit", nil, 0},
		{"huge value", "INSERT INTO log(msg) VALUES (zeroblob(1000000000))", sqlexec.KindTooManyBytes, "byte cap", nil, 0},
		{"endless rows, dropped unread", endless + "SELECT x FROM c", sqlexec.KindTimeout, "300ms", &quick, 0},
		{"endless rows, kept", endless + "SELECT x FROM c -- bare", sqlexec.KindTooManyRows, "row cap", nil, 0},
		{"large rows, kept", endless + "SELECT randomblob(100000) FROM c -- bare", sqlexec.KindTooManyBytes, "byte cap", nil, 0},
		{"endless recursive CTE", endless + "SELECT count(*) FROM c", sqlexec.KindTimeout, "300ms", &quick, 0},
		{"endless CTE in a write", "CREATE TABLE n(x); INSERT INTO n " + endless + "SELECT x FROM c WHERE x < 0", sqlexec.KindTimeout, "300ms", &quick, 0},
		{"endless trigger recursion", "PRAGMA recursive_triggers = ON; CREATE TABLE r(x); CREATE TRIGGER rr AFTER INSERT ON r BEGIN DELETE FROM r; INSERT INTO r VALUES (new.x + 1); END; INSERT INTO r VALUES (1)",
			sqlexec.KindExecution, "too deep", &quick, 0},
		{"job deadline", endless + "SELECT count(*) FROM c", sqlexec.KindTimeout, "deadline", &sqlexec.Limits{Timeout: time.Hour}, 300 * time.Millisecond},
	}
	m0 := markMemory(true)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := job(tc.name, tc.sql, []string{"SELECT 1"}, "SELECT count(*) FROM orders")
			if strings.HasSuffix(tc.sql, "-- bare") { // decided by the last result, which is kept
				j.Checks = nil
			}
			if tc.limits != nil {
				j.Limits = *tc.limits
			}
			j.Deadline = tc.deadline
			v, err := s.Verify(context.Background(), j)
			if err != nil {
				t.Fatalf("an error, not a verdict: %v", err)
			}
			if v.Success || sqlexec.KindOf(v.Err) != tc.kind || !strings.Contains(v.Reason, tc.msg) {
				t.Fatalf("got %+v; want a failure of kind %v naming %q", v, tc.kind, tc.msg)
			}
			if after := filetree.MustSums(t, dir); !reflect.DeepEqual(before, after) {
				t.Fatalf("files changed: %v", filetree.Diff(before, after))
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Fatalf("files written outside the copy: %v", ents)
			}
		})
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temporary files left behind: %v", ents)
	}
	// At most one copy at a time ran, so the peak is bounded by one copy's
	// room, the memory cap, the image's growth by reallocation (memdb
	// doubles a duplicated image's buffer), and slack for the engine's own
	// connections (and, for the process, Go's heap); afterwards all of it
	// is given back.
	checkMemory(t, m0, markMemory(false), 2*s.img.room+sqlexec.DefaultLimits().MaxMemory)
	// And the database is still served as it was.
	res, err := db.Query(context.Background(), "SELECT count(*) FROM orders", lim())
	if err != nil || res.Rows[0][0] != int64(4) {
		t.Fatalf("after the hostile jobs: %v, %v", res, err)
	}
}

// TestStatefulDefencesStandAlone: with the statement allow-list and the
// authorizer both removed, SQLite's own limits on the copy (no attached
// databases, defensive mode) still stop ATTACH, VACUUM INTO and schema
// corruption.
func TestStatefulDefencesStandAlone(t *testing.T) {
	_, path := build(t, statefulScript)
	s := NewStateful(open(t, path, Options{}), StatefulOptions{})
	img, err := s.image(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cp, err := openCopy(img)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	cp.keywords = nil
	cp.c.RegisterAuthorizer(nil)
	out := t.TempDir()
	for _, q := range []string{
		fmt.Sprintf("ATTACH '%s/x' AS y", out),
		fmt.Sprintf("VACUUM INTO '%s/y'", out),
		"VACUUM",
		"SELECT load_extension('/tmp/evil')",
	} {
		if _, err := cp.exec(context.Background(), q, lim(), unitOptions{}); err == nil {
			t.Errorf("%s succeeded", q)
		}
	}
	// writable_schema is without effect in defensive mode.
	_, err = cp.exec(context.Background(), "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = 'CREATE TABLE orders(' WHERE name = 'orders'", lim(), unitOptions{})
	if err == nil || !strings.Contains(err.Error(), "may not be modified") {
		t.Errorf("a schema write with writable_schema: %v", err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("files written: %v", ents)
	}
	res, err := cp.exec(context.Background(), "SELECT count(*) FROM orders", lim(), unitOptions{keep: true})
	if err != nil || res.Rows[0][0] != int64(4) {
		t.Errorf("the copy afterwards: %v, %v", res, err)
	}
}

// TestStatefulEnvironmentErrors: what fails on the environment's or the
// corpus's side is an error, not a verdict.
func TestStatefulEnvironmentErrors(t *testing.T) {
	_, path := build(t, statefulScript)
	db := open(t, path, Options{})
	s := NewStateful(db, StatefulOptions{})
	ok := job("ok", "DELETE FROM log", []string{"DELETE FROM log"}, "SELECT count(*) FROM log")
	cases := []struct {
		name   string
		edit   func(j *sqlexec.Job)
		msg    string
		target error
	}{
		{"setup fails", func(j *sqlexec.Job) { j.Setup = []string{"CREATE TABLE x(a)", "INSERT INTO nope VALUES (1)"} }, "setup statement 2", nil},
		{"setup denied", func(j *sqlexec.Job) { j.Setup = []string{"ATTACH 'x' AS x"} }, "setup statement 1", nil},
		{"prior fails", func(j *sqlexec.Job) { j.Prior = []string{"UPDATE nope SET a = 1"} }, "prior statement 1", nil},
		{"reference fails", func(j *sqlexec.Job) { j.Reference = []string{"DELETE FROM nope"} }, "the reference side failed: reference 1", nil},
		{"check fails on the reference", func(j *sqlexec.Job) { j.Checks = []string{"SELECT * FROM nope"} }, "the reference side failed: check 1", nil},
		{"check writes", func(j *sqlexec.Job) { j.Checks = []string{"DELETE FROM orders"} }, "a check may only read", nil},
		{"check over the row cap", func(j *sqlexec.Job) { j.Checks = []string{"SELECT * FROM customers"}; j.Limits.MaxRows = 2 }, "row cap", nil},
		{"cleanup fails on the reference", func(j *sqlexec.Job) { j.Cleanup = []string{"DROP TABLE nope"} }, "cleanup statement 1", nil},
		{"python tests", func(j *sqlexec.Job) { j.Tests = []string{"def test_case(pred_sqls, sol_sqls, db_name, conn): pass"} }, "not supported on SQLite", ErrTestsUnsupported},
		{"no reference", func(j *sqlexec.Job) { j.Reference = nil }, "no reference", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := ok
			j.Key = tc.name
			tc.edit(&j)
			v, err := s.Verify(context.Background(), j)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %+v, %v; want an error naming %q", v, err, tc.msg)
			}
			if tc.target != nil && !errors.Is(err, tc.target) {
				t.Fatalf("%v is not %v", err, tc.target)
			}
		})
	}
	// A cleanup that fails because of what the prediction did is the
	// prediction's failure.
	j := ok
	j.Cleanup = []string{"DROP TABLE log"}
	j.Predicted = "DROP TABLE log; CREATE VIEW log AS SELECT 1 AS id WHERE 0"
	if v := verify(t, s, j); v.Success || !strings.Contains(v.Reason, "cleanup statement 1 failed on the state the prediction left") {
		j.Predicted = "DELETE FROM log"
		t.Fatalf("a cleanup the prediction broke: %+v", v)
	}
	j.Predicted = "ALTER TABLE log RENAME TO old_log; CREATE TABLE log(n)"
	j.Checks = nil
	j.Reference = []string{"SELECT 1"}
	j.Cleanup = []string{"DROP TABLE old_log"}
	// (The reference side's cleanup fails here: an error, whatever the prediction.)
	if _, err := s.Verify(context.Background(), j); err == nil {
		t.Fatalf("a cleanup that fails on the reference: no error")
	}
	// A canceled context.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Verify(ctx, ok); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

// TestStatefulLimits: databases too large are refused, a full budget is
// KindBusy, and a cached reference runs once.
func TestStatefulLimits(t *testing.T) {
	_, path := build(t, statefulScript)
	db := open(t, path, Options{})
	ok := job("ok", "DELETE FROM log", []string{"DELETE FROM log"}, "SELECT count(*) FROM log")

	small := NewStateful(db, StatefulOptions{MaxImageBytes: 1024})
	if _, err := small.Verify(context.Background(), ok); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "up to 1 KiB") {
		t.Fatalf("a database over MaxImageBytes: %v", err)
	}
	tight := NewStateful(db, StatefulOptions{MaxCopyBytes: 1 << 20})
	if _, err := tight.Verify(context.Background(), ok); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "more than all copies may use together") {
		t.Fatalf("a copy over MaxCopyBytes: %v", err)
	}

	// Room for one copy: while an endless job holds it, another waits and
	// is turned away.
	s := NewStateful(db, StatefulOptions{MaxGrowth: 1 << 20, MaxCopyBytes: 40 << 20, Wait: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	endless := ok
	endless.Limits.Timeout = time.Hour
	verify(t, s, endless) // its reference side is cached: the endless job takes one copy
	endless.Predicted = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"
	done := make(chan error, 1)
	go func() {
		_, err := s.Verify(ctx, endless)
		done <- err
	}()
	for s.copies.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	_, err := s.Verify(context.Background(), ok)
	if sqlexec.KindOf(err) != sqlexec.KindBusy || !strings.Contains(err.Error(), "no room for a private copy") {
		t.Fatalf("with the budget full: %v, want busy", err)
	}
	cancel()
	if err := <-done; err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("the canceled endless job: %v, want an error", err)
	}
	if v := verify(t, s, ok); !v.Success {
		t.Fatalf("after the budget is free again: %+v", v)
	}

	// The reference side is computed once per key and content.
	c := NewStateful(db, StatefulOptions{MaxCached: 2})
	runs := func() int64 { return c.refRuns.Load() }
	for range 3 {
		verify(t, c, ok)
	}
	if runs() != 1 {
		t.Fatalf("reference runs for one key: %d, want 1", runs())
	}
	other := ok
	other.Reference = []string{"DELETE FROM log WHERE id > 0"}
	verify(t, c, other)
	if runs() != 2 {
		t.Fatalf("the same key with other SQL: %d runs, want 2", runs())
	}
	third := ok
	third.Key = "third"
	verify(t, c, third)
	verify(t, c, ok) // dropped as the oldest when "third" came
	if runs() != 4 || c.refs.Len() != 2 {
		t.Fatalf("with 2 kept: %d runs, %d kept; want 4 and 2", runs(), c.refs.Len())
	}
	noKey := ok
	noKey.Key = ""
	verify(t, c, noKey)
	verify(t, c, noKey)
	if runs() != 6 {
		t.Fatalf("without a key: %d runs, want 6", runs())
	}
}

// TestStatefulWALDatabase: a database in WAL mode is copied in rollback mode.
func TestStatefulWALDatabase(t *testing.T) {
	_, path := build(t, statefulScript)
	w, err := sql.Open("sqlite3", "file:"+escapePath(path)+"?mode=rw")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Exec("PRAGMA journal_mode = WAL"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	s := NewStateful(open(t, path, Options{}), StatefulOptions{})
	if v := verify(t, s, job("wal", "DELETE FROM log", []string{"DELETE FROM log WHERE 1"}, "SELECT count(*) FROM log")); !v.Success {
		t.Fatalf("%+v", v)
	}
}

// demoDB builds one of the demo corpus's databases.
func demoDB(t testing.TB, name string) *DB {
	t.Helper()
	script, err := os.ReadFile(filepath.Join("..", "..", "corpus", "demo", name+".sql"))
	if err != nil {
		t.Fatal(err)
	}
	_, path := build(t, string(script))
	return open(t, path, Options{Immutable: true})
}

// shopJob is a Management task on the demo shop: discontinue the products
// that sold fewer than 25 units.
func shopJob() sqlexec.Job {
	return job("shop discontinue",
		"UPDATE products SET discontinued = 1 WHERE product_id IN (SELECT product_id FROM order_items GROUP BY product_id HAVING sum(quantity) < 25)",
		[]string{"UPDATE products SET discontinued = 1 WHERE product_id IN (SELECT p.product_id FROM products p JOIN order_items i USING (product_id) GROUP BY p.product_id HAVING sum(i.quantity) < 25)"},
		"SELECT product_id, discontinued FROM products")
}

func TestStatefulShop(t *testing.T) {
	s := NewStateful(demoDB(t, "shop"), StatefulOptions{})
	if v := verify(t, s, shopJob()); !v.Success {
		t.Fatalf("%+v", v)
	}
	wrong := shopJob()
	wrong.Predicted = strings.Replace(wrong.Predicted, "< 25", "<= 25", 1)
	if v := verify(t, s, wrong); v.Success {
		t.Fatalf("a wrong threshold passed: %+v", v)
	}
}

// BenchmarkStatefulShop is one stateful verification on the demo shop
// database (the reference side cached, as when serving), one at a time and
// in parallel.
func BenchmarkStatefulShop(b *testing.B) {
	s := NewStateful(demoDB(b, "shop"), StatefulOptions{})
	j := shopJob()
	verify(b, s, j)
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if v, err := s.Verify(context.Background(), j); err != nil || !v.Success {
				b.Fatal(v, err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if v, err := s.Verify(context.Background(), j); err != nil || !v.Success {
					b.Error(v, err)
					return
				}
			}
		})
	})
	b.Run("uncached", func(b *testing.B) {
		nk := j
		nk.Key = ""
		for b.Loop() {
			if v, err := s.Verify(context.Background(), nk); err != nil || !v.Success {
				b.Fatal(v, err)
			}
		}
	})
}

// BenchmarkCopy measures making (and dropping) one private copy, mapped
// copy-on-write and duplicated: of the demo databases and of one of about
// 50 MB; "open" runs one statement on the copy, "scan" reads every page,
// "update" changes one row. It reports the image's size and SQLite's heap
// per copy (a mapped image is not on that heap).
func BenchmarkCopy(b *testing.B) {
	dbs := map[string]func(b *testing.B) *DB{
		"shop":   func(b *testing.B) *DB { return demoDB(b, "shop") },
		"clinic": func(b *testing.B) *DB { return demoDB(b, "clinic") },
		"50MB": func(b *testing.B) *DB {
			_, path := build(b, `CREATE TABLE t(id INTEGER PRIMARY KEY, x BLOB);
				INSERT INTO t(x) SELECT randomblob(1000) FROM (WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM c WHERE n < 48000) SELECT n FROM c);`)
			return open(b, path, Options{Immutable: true})
		},
	}
	work := map[string]string{"open": "SELECT count(*) FROM sqlite_schema", "scan": "PRAGMA quick_check"}
	for _, name := range []string{"shop", "clinic", "50MB"} {
		db := dbs[name](b)
		for _, mode := range copyModes {
			s := newStateful(b, db, StatefulOptions{}, mode)
			tables, err := db.Query(context.Background(), "SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY rowid LIMIT 1", lim())
			if err != nil {
				b.Fatal(err)
			}
			work["update"] = fmt.Sprintf("UPDATE %s SET rowid = rowid WHERE rowid = 1", quoteIdent(tables.Rows[0][0].(string)))
			for _, w := range []string{"open", "scan", "update"} {
				b.Run(name+"/"+mode+"/"+w, func(b *testing.B) {
					used0, _ := sqliteMemory(false)
					var held int64
					l := lim()
					l.Timeout = time.Minute
					for b.Loop() {
						cp, err := openCopy(s.img)
						if err != nil {
							b.Fatal(err)
						}
						if _, err := cp.exec(context.Background(), work[w], l, unitOptions{keep: true}); err != nil {
							b.Fatal(err)
						}
						used, _ := sqliteMemory(false)
						held = used - used0
						cp.Close()
					}
					b.ReportMetric(float64(s.img.size), "image-bytes")
					b.ReportMetric(float64(held), "heap-bytes/copy")
				})
			}
		}
	}
}

// TestStatefulMemory: the copy's own pages count against its size limit, not
// against the job's memory cap; and however many hostile jobs run at once,
// memory stays within the copies' budget.
func TestStatefulMemory(t *testing.T) {
	for _, mode := range copyModes {
		t.Run(mode, func(t *testing.T) { testStatefulMemory(t, mode) })
	}
}

func testStatefulMemory(t *testing.T, mode string) {
	_, path := build(t, statefulScript)
	db := open(t, path, Options{})
	endless := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) "
	lim := sqlexec.Limits{Timeout: 10 * time.Second, MaxRows: 100, MaxBytes: 1 << 20, MaxMemory: 4 << 20}

	// 12 MB of new rows in a copy whose job may use 4 MiB of memory.
	s := newStateful(t, db, StatefulOptions{MaxGrowth: 16 << 20}, mode)
	grow := job("grow", "CREATE TABLE g(x); INSERT INTO g SELECT randomblob(1000) FROM ("+endless+"SELECT x FROM c LIMIT 12000)",
		[]string{"CREATE TABLE g(x); INSERT INTO g SELECT zeroblob(1000) FROM (" + endless + "SELECT x FROM c LIMIT 12000)"},
		"SELECT count(*), sum(length(x)) FROM g")
	grow.Limits = lim
	if v := verify(t, s, grow); !v.Success {
		t.Fatalf("a copy grown by 12 MB under a 4 MiB memory cap: %+v", v)
	}

	// 32 hostile jobs at once, room for 3 copies.
	const growth = 8 << 20
	b := newStateful(t, db, StatefulOptions{MaxGrowth: growth, Wait: time.Minute}, mode)
	budget := 3 * (b.img.room + lim.MaxMemory)
	b.budget, b.opt.MaxCopyBytes = semaphore.NewWeighted(budget), budget
	hostile := []string{
		"CREATE TABLE big(x); INSERT INTO big SELECT randomblob(1000) FROM (" + endless + "SELECT x FROM c)",
		"CREATE TEMP TABLE big AS SELECT randomblob(1000) AS x FROM (" + endless + "SELECT x FROM c)",
		"SELECT " + strings.TrimSuffix(strings.Repeat("randomblob(1000000),", 100), ","),
		"BEGIN; UPDATE orders SET note = randomblob(1000000); UPDATE orders SET note = randomblob(1000001); UPDATE orders SET note = randomblob(1000002); COMMIT",
	}
	m0 := markMemory(true)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := job("", hostile[i%len(hostile)], []string{"SELECT 1"}, "SELECT count(*) FROM orders")
			j.Limits = lim
			v, err := b.Verify(context.Background(), j)
			if err != nil || v.Success || sqlexec.KindOf(v.Err) != sqlexec.KindTooMuchMemory {
				t.Errorf("hostile job %d: %+v, %v; want a too_much_memory failure", i, v, err)
			}
		}()
	}
	wg.Wait()
	checkMemory(t, m0, markMemory(false), 2*budget) // 2: a duplicated image's buffer may be reallocated
}

// checkMemory checks that between m0 and m1 SQLite's heap and the process's
// resident memory peaked at most bound bytes above where they were (plus
// slack), and that the copies gave their memory and mappings back.
func checkMemory(t *testing.T, m0, m1 memoryMark, bound int64) {
	t.Helper()
	const slack = 16 << 20
	t.Logf("SQLite heap: %d before, %d after, peak %d; process: %d before, peak %d; bound %d (+ slack)",
		m0.sqlite, m1.sqlite, m1.sqlitePeak, m0.rss, m1.rssPeak, bound)
	if m1.sqlitePeak > m0.sqlite+bound+slack {
		t.Errorf("SQLite's heap peaked at %d bytes, %d before: over the bound of %d", m1.sqlitePeak, m0.sqlite, bound)
	}
	if m0.rss > 0 && m1.rssPeak > m0.rss+bound+4*slack {
		t.Errorf("the process's resident memory peaked at %d bytes, %d before: over the bound of %d", m1.rssPeak, m0.rss, bound)
	}
	if m1.sqlite > m0.sqlite+1<<20 {
		t.Errorf("SQLite holds %d bytes afterwards, %d before: copies leaked", m1.sqlite, m0.sqlite)
	}
	if m1.mappings != m0.mappings {
		t.Errorf("%d mapped copies afterwards, %d before: copies leaked", m1.mappings, m0.mappings)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapAlloc > 256<<20 {
		t.Errorf("the Go heap holds %d bytes afterwards", ms.HeapAlloc)
	}
}

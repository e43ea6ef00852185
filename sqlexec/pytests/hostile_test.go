package pytests

// Tests of the rule that the policy cannot turn its outcome into an error:
// whatever its SQL, data or text causes is a verdict; only what it cannot
// forge (a test's source, the environment's own steps, a connection that
// really broke) is something else.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"avtgym/internal/pgtest"
	"avtgym/sqlexec"
)

// TestLint: the static check decides which tests are broken, from their
// source alone, without a database: what does not compile, binds no
// test_case or one that four arguments cannot call, loads a global name
// nothing defines, or imports what the worker lacks. Names defined anywhere
// at the module's top level, helpers, builtins and attribute names are not
// problems; a name the test might bind dynamically is not judged.
func TestLint(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	for _, c := range []struct {
		name, src string
		problem   string // a substring of the problem; "" when the test is fine
	}{
		{"plain", pyTest("pass"), ""},
		{"helpers and builtins", pyTest("res, err, _ = execute_queries(['SELECT 1'], db_name, conn)",
			"assert isinstance(res, list) and len(preprocess_results(res)) == 1 and pred_query_result is None or True",
			"d = date(2024, 1, 1); print(sorted(set([1])))"), ""},
		{"module imports", "import json\nimport os.path\nfrom decimal import Decimal\n" + pyTest("json.dumps(os.path.sep)", "Decimal(1)"), ""},
		{"attribute names", pyTest("x = conn.no_such_attribute", "y = x.another_one.third"), ""},
		{"helper defined after", pyTest("return helper()") + "def helper():\n    return 1\n", ""},
		{"bound on a branch at the top level", "if __name__ == 'never':\n    flag = 1\n" + pyTest("assert flag"), ""},
		{"global statement", "def init():\n    global cache\n    cache = {}\n" + pyTest("init()", "cache['a'] = 1"), ""},
		{"class body", "class H:\n    a = 1\n    b = a + 1\n" + pyTest("assert H.b == 2"), ""},
		{"optional import", "try:\n    import avtgym_no_such_module\nexcept ImportError:\n    avtgym_no_such_module = None\n" + pyTest("pass"), ""},
		{"dynamic globals", pyTest("globals()['z'] = 1", "assert z == 1"), ""},
		{"star import", "from math import *\n" + pyTest("assert sqrt(4) == 2"), ""},
		{"defaults and rest", "def test_case(pred_sqls, sol_sqls, db_name, conn, extra=None, *rest, key=1, **kw):\n    pass\n", ""},
		{"decorated", "import functools\n@functools.wraps(print)\ndef test_case(a):\n    pass\n", ""},
		{"comprehension and lambda", pyTest("f = lambda r: [x for x in r if x]", "assert f([0, 1]) == [1]"), ""},
		{"does not compile", pyTest("assert ("), "does not compile"},
		{"null byte", "def test_case(a, b, c, d):\n    pass\x00\n", "does not compile"},
		{"no test_case", "def check(pred_sqls, sol_sqls, db_name, conn):\n    pass\n", "defines no test_case"},
		{"three parameters", "def test_case(pred_sqls, sol_sqls, db_name):\n    pass\n", "cannot be called"},
		{"five required", "def test_case(a, b, c, d, e):\n    pass\n", "cannot be called"},
		{"required keyword", "def test_case(a, b, c, d, *, e):\n    pass\n", "cannot be called"},
		{"async", "async def test_case(a, b, c, d):\n    pass\n", "coroutine"},
		{"undefined in the function", pyTest("x = 1", "return json.loads(x)"), "json (line 3)"},
		{"undefined at the top level", "VALUE = undefined_constant + 1\n" + pyTest("pass"), "undefined_constant (line 1)"},
		{"undefined in a lambda", pyTest("f = lambda: missing_name"), "missing_name"},
		{"undefined in a comprehension", pyTest("[missing_in_comp(x) for x in range(2)]"), "missing_in_comp"},
		{"missing module", "import avtgym_no_such_module\n" + pyTest("pass"), "avtgym_no_such_module"},
		{"missing module in the function", pyTest("import avtgym_no_such_module"), "avtgym_no_such_module"},
		{"missing name in a module", "from os import avtgym_no_such_name\n" + pyTest("pass"), "avtgym_no_such_name"},
		{"relative import", "from . import x\n" + pyTest("pass"), "relative import"},
	} {
		t.Run(c.name, func(t *testing.T) {
			problems, err := p.Lint(context.Background(), []string{pyTest("pass"), c.src})
			if err != nil {
				t.Fatal(err)
			}
			if len(problems) != 2 || problems[0] != "" {
				t.Fatalf("problems %q", problems)
			}
			switch {
			case c.problem == "" && problems[1] != "":
				t.Fatalf("a fine test reported: %s", problems[1])
			case c.problem != "" && (!strings.HasPrefix(problems[1], "test 2 ") || !strings.Contains(problems[1], c.problem)):
				t.Fatalf("got %q; want test 2's problem with %q", problems[1], c.problem)
			}
		})
	}
	if ps, err := p.Lint(context.Background(), nil); err != nil || ps != nil {
		t.Errorf("Lint(nil) = %q, %v", ps, err)
	}
}

// TestPolicyDataExceptions: an exception the policy's data provokes while
// its rows are read — a jsonb value nested past Python's recursion limit, a
// date Python cannot hold — is the policy's failure, with the exception as
// feedback; the worker survives it and takes the next job.
func TestPolicyDataExceptions(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	before := pgtest.DumpSum(t, db)
	nested := "SELECT (repeat('[', 5000) || repeat(']', 5000))::jsonb"
	for _, c := range []struct {
		name   string
		pred   []string
		test   string
		reason string
		kind   sqlexec.ErrorKind
	}{
		{"nested jsonb", []string{"DELETE FROM crane_assignments", nested}, pyTest("pass"), "RecursionError", sqlexec.KindExecution},
		{"infinite date", []string{"SELECT 'infinity'::date"}, pyTest("pass"), "date", sqlexec.KindExecution},
		{"nested jsonb in a test", []string{"SELECT 1"}, pyTest("perform_query_on_postgresql_databases(\"" + nested + "\", db_name, conn)"), "RecursionError", 0},
		{"nested jsonb on the cursor", []string{"SELECT 1"}, pyTest("cur = conn.cursor()", "cur.execute(\""+nested+"\")"), "RecursionError", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s0 := p.Stats()
			res := run(t, p, job(t, db, c.pred, c.test))
			if res.Passed || res.Broken != "" || res.Lost || res.Kind != c.kind || !strings.Contains(res.Reason, c.reason) {
				t.Fatalf("got %+v; want a failure of kind %v naming %q", res, c.kind, c.reason)
			}
			// The worker is the same and still fine.
			if res := run(t, p, job(t, db, []string{"SELECT 1"}, pyTest("res, err, _ = execute_queries(['SELECT 2'], db_name, conn)", "assert res == [(2,)], res"))); !res.Passed {
				t.Fatalf("the next job: %+v", res)
			}
			if s := p.Stats(); s.Started != s0.Started || s.Killed != s0.Killed || s.Retired != s0.Retired {
				t.Fatalf("stats %+v, before %+v: the worker was replaced", s, s0)
			}
		})
	}
	if after := pgtest.DumpSum(t, db); after != before {
		t.Fatal("the database changed")
	}
}

// TestByteCap: PyJob.MaxBytes bounds each statement's result, counted as
// sqlexec.CellBytes counts cells (16 a cell, 8 a number, a text's UTF-8
// bytes), on the predicted statements and on the tests' (helpers and
// cursor alike); past it the statement fails, KindTooManyBytes, whatever the
// test makes of it. The cap is exact: at the result's size it passes.
func TestByteCap(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	// 100 rows of a 1000-byte text and a number: 100 × (16+1000 + 16+8).
	const q = "SELECT repeat('x', 1000), g FROM generate_series(1, 100) g"
	const size = 100 * (16 + 1000 + 16 + 8)
	// A non-ASCII text counts its UTF-8 bytes; NULL counts 16.
	const uq = "SELECT repeat('é', 10), NULL::text"
	const usize = 16 + 20 + 16
	swallow := func(stmt string) string {
		return pyTest("try:", "    execute_queries([\""+stmt+"\"], db_name, conn)", "except Exception:", "    pass", "return True")
	}
	cursor := func(stmt string) string {
		return pyTest("cur = conn.cursor()", "try:", "    cur.execute(\""+stmt+"\")", "    assert len(cur.fetchall()) >= 1", "except Exception:", "    pass")
	}
	for _, c := range []struct {
		name  string
		pred  []string
		test  string
		cap   int64
		fails bool
	}{
		{"predicted at the cap", []string{q}, pyTest("assert len(pred_query_result) == 100"), size, false},
		{"predicted past the cap", []string{q}, pyTest("pass"), size - 1, true},
		{"predicted without a cap", []string{q}, pyTest("assert len(pred_query_result) == 100"), 0, false},
		{"utf-8 at the cap", []string{uq}, pyTest("assert pred_query_result == [('é' * 10, None)]"), usize, false},
		{"utf-8 past the cap", []string{uq}, pyTest("pass"), usize - 1, true},
		{"test's statement at the cap", []string{"SELECT 1"}, pyTest("res, err, _ = execute_queries([\""+q+"\"], db_name, conn)", "assert not err and len(res) == 100"), size, false},
		{"test's statement past the cap", []string{"SELECT 1"}, swallow(q), size - 1, true},
		{"several statements past the cap", []string{"SELECT 1"}, swallow("SELECT 1; " + q), size - 1, true},
		{"cursor at the cap", []string{"SELECT 1"}, pyTest("cur = conn.cursor()", "cur.execute(\""+q+"\")", "assert len(cur.fetchall()) == 100 and cur.rowcount == 100"), size, false},
		{"cursor past the cap", []string{"SELECT 1"}, cursor(q), size - 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := job(t, db, c.pred, c.test)
			j.MaxBytes = c.cap
			res := run(t, p, j)
			if !c.fails {
				if !res.Passed {
					t.Fatalf("got %+v; want a pass", res)
				}
				return
			}
			if res.Passed || res.Broken != "" || res.Kind != sqlexec.KindTooManyBytes || !strings.Contains(res.Reason, "byte cap") {
				t.Fatalf("got %+v; want KindTooManyBytes", res)
			}
		})
	}
}

// TestDatabaseErrorsArePolicys: an error the server returns on a connection
// that stays open is the policy's failure whatever its SQLSTATE, for the
// SQLSTATEs of the environment's failures too (the policy can raise any);
// only a connection that really broke while the policy's statements or a
// test ran is PyResult.Lost, and before them (Setup) it is an error.
func TestDatabaseErrorsArePolicys(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	before := pgtest.DumpSum(t, db)
	raise := func(code string) string {
		return "DO $$BEGIN RAISE EXCEPTION 'raised " + code + "' USING ERRCODE = '" + code + "'; END$$"
	}
	for _, c := range []struct {
		name, pred string
		kind       sqlexec.ErrorKind
	}{
		{"57P01 admin shutdown", raise("57P01"), sqlexec.KindExecution},
		{"57P03 cannot connect now", raise("57P03"), sqlexec.KindExecution},
		{"08006 connection failure", raise("08006"), sqlexec.KindExecution},
		{"08003 connection does not exist", raise("08003"), sqlexec.KindExecution},
		{"3D000 invalid catalog name", raise("3D000"), sqlexec.KindExecution},
		{"53300 too many connections", raise("53300"), sqlexec.KindExecution},
		{"28000 invalid authorization", raise("28000"), sqlexec.KindExecution},
		{"58030 io error", raise("58030"), sqlexec.KindExecution},
		{"53200 out of memory", raise("53200"), sqlexec.KindTooMuchMemory},
		{"57014 query canceled", raise("57014"), sqlexec.KindTimeout},
		{"database size of no database", "SELECT pg_database_size('avtgym_no_such_db')", sqlexec.KindExecution},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, p, job(t, db, []string{"DELETE FROM crane_assignments", c.pred}, pyTest("pass")))
			if res.Passed || res.Lost || res.Broken != "" || res.Kind != c.kind || res.Reason == "" {
				t.Fatalf("got %+v; want the policy's failure of kind %v", res, c.kind)
			}
		})
	}
	t.Run("inside a test", func(t *testing.T) {
		// Caught by the helper: the test goes on, on the same connection.
		res := run(t, p, job(t, db, []string{"SELECT 1"}, pyTest(
			"_, err, _ = execute_queries([\""+raise("57P01")+"\"], db_name, conn)",
			"assert err",
			"res, err, _ = execute_queries(['SELECT 3'], db_name, conn)",
			"assert res == [(3,)] and not err, res")))
		if !res.Passed {
			t.Fatalf("got %+v", res)
		}
		// Uncaught: the test fails.
		res = run(t, p, job(t, db, []string{"SELECT 1"}, pyTest("perform_query_on_postgresql_databases(\""+raise("08006")+"\", db_name, conn)")))
		if res.Passed || res.Lost || !strings.Contains(res.Reason, "raised 08006") {
			t.Fatalf("got %+v; want the test's failure", res)
		}
	})
	// The connection really breaks: the policy's statement, or a test, ends
	// the session.
	terminate := "SELECT pg_terminate_backend(pg_backend_pid())"
	for _, c := range []struct{ name, pred, test, reason string }{
		{"predicted", terminate, pyTest("pass"), "running the predicted statements"},
		{"test", "SELECT 1", pyTest("execute_queries([\""+terminate+"\"], db_name, conn)", "return True"), "running test 1"},
		{"cursor", "SELECT 1", pyTest("cur = conn.cursor()", "try:", "    cur.execute(\""+terminate+"\")", "except BaseException:", "    pass"), "running test 1"},
	} {
		t.Run("lost in the "+c.name, func(t *testing.T) {
			res := run(t, p, job(t, db, []string{"DELETE FROM crane_assignments", c.pred}, c.test))
			if !res.Lost || res.Passed || res.Broken != "" || !strings.Contains(res.Reason, c.reason) {
				t.Fatalf("got %+v; want Lost while %s", res, c.reason)
			}
		})
	}
	t.Run("lost in setup", func(t *testing.T) {
		j := job(t, db, []string{"SELECT 1"}, pyTest("pass"))
		j.Setup = []string{terminate}
		_, err := p.Run(context.Background(), j)
		var je *JobError
		if !errors.As(err, &je) || je.Step != "setup" {
			t.Fatalf("got %v; want a *JobError at setup", err)
		}
	})
	waitNoSessions(t, db)
	if after := pgtest.DumpSum(t, db); after != before {
		t.Fatal("the database changed")
	}
}

// TestIsolation: after the predicted statements the job runs PyJob.Isolate
// (as the engine gives it) and then PyJob.Guard; the tests read the
// database, not a temporary view the policy made to shadow the catalog,
// and a guard row fails the job without running the tests. Isolation that
// the policy's state makes fail is the policy's failure.
func TestIsolation(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	before := pgtest.DumpSum(t, db)
	seqs := sequences(t, db)
	var m4 task
	for _, tk := range liteTasks(t) {
		if tk.id == "harbor_M_4" {
			m4 = tk
		}
	}
	if m4.id == "" {
		t.Fatal("no harbor_M_4 in the lite sample")
	}
	isolate := []string{"DISCARD TEMP", "SET LOCAL search_path = pg_catalog, public, pg_temp"}
	// harbor_M_4 wants an index on lower(consignee); the policy makes none
	// and shows the test a catalog view of its own instead (issue 25).
	fake := []string{"CREATE TEMP VIEW pg_indexes AS SELECT 'public'::name AS schemaname, 'cargo_manifests'::name AS tablename, 'fake'::name AS indexname, 'CREATE INDEX fake ON cargo_manifests (lower(consignee))'::text AS indexdef",
		m4.sol[1]}
	for _, c := range []struct {
		name    string
		isolate []string
		pass    bool
	}{{"without isolation the attack works", nil, true}, {"with isolation it fails", isolate, false}} {
		t.Run(c.name, func(t *testing.T) {
			j := job(t, db, fake, m4.tests...)
			j.Reference, j.Setup, j.Cleanup, j.Isolate = m4.sol, m4.preprocess, m4.cleanup, c.isolate
			res := run(t, p, j)
			if res.Passed != c.pass || res.Broken != "" {
				t.Fatalf("got %+v; want Passed %v", res, c.pass)
			}
			if !c.pass && !strings.Contains(res.Reason, "no case-insensitive consignee index") {
				t.Fatalf("got %+v; want the test's assertion", res)
			}
			restoreSequences(t, db, seqs)
		})
	}
	// The reference passes with the isolation.
	j := job(t, db, m4.sol, m4.tests...)
	j.Setup, j.Cleanup, j.Isolate = m4.preprocess, m4.cleanup, isolate
	if res := run(t, p, j); !res.Passed {
		t.Fatalf("the reference with isolation: %+v", res)
	}
	restoreSequences(t, db, seqs)

	guard := "SELECT pg_catalog.format('the function %s.%s has the name of a built-in function', n.nspname, p.proname), 2 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace WHERE n.nspname OPERATOR(pg_catalog.=) 'public' AND p.proname OPERATOR(pg_catalog.=) 'lower'"
	shadow := "CREATE FUNCTION public.lower(character varying) RETURNS text LANGUAGE sql AS $$ SELECT 'x'::text $$"
	for _, c := range []struct {
		name   string
		pred   []string
		iso    []string
		test   string
		pass   bool
		kind   sqlexec.ErrorKind
		reason string
	}{
		{name: "guard row", pred: []string{shadow}, iso: isolate, test: pyTest("assert False, 'the test ran'"), kind: sqlexec.KindDenied, reason: "the function public.lower has the name of a built-in function"},
		{name: "no guard row", pred: []string{"SELECT 1"}, iso: isolate, test: pyTest("res, _, _ = execute_queries(['SHOW search_path'], db_name, conn)", "assert res == [('pg_catalog, public, pg_temp',)], res"), pass: true},
		// The policy's deferred trigger on a temporary table makes DISCARD
		// TEMP fail ("pending trigger events"): its doing, not an error.
		{name: "isolation the policy breaks", pred: []string{"CREATE TEMP TABLE t (a int)",
			"CREATE FUNCTION pg_temp.f() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$",
			"CREATE CONSTRAINT TRIGGER tr AFTER INSERT ON t DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION pg_temp.f()",
			"INSERT INTO t VALUES (1)"}, iso: isolate, test: pyTest("assert False, 'the test ran'"), kind: sqlexec.KindExecution, reason: "pending trigger events"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := job(t, db, c.pred, c.test)
			j.Isolate, j.Guard = c.iso, guard
			res := run(t, p, j)
			if c.pass {
				if !res.Passed {
					t.Fatalf("got %+v; want a pass", res)
				}
				return
			}
			if res.Passed || res.Broken != "" || res.Lost || res.Kind != c.kind || !strings.Contains(res.Reason, c.reason) || strings.Contains(res.Reason, "the test ran") {
				t.Fatalf("got %+v; want a failure of kind %v with %q, the tests not run", res, c.kind, c.reason)
			}
		})
	}
	if after := pgtest.DumpSum(t, db); after != before {
		t.Fatal("the database changed")
	}
}

// memoryAttacks are statements whose results are far larger than a
// worker's memory limit, in the predicted statements and in a test's
// (through a helper and through the cursor), as single huge values too.
var memoryAttacks = []struct {
	name, pred, test string
}{
	{"predicted 4 × repeat 2e8", "SELECT repeat('x', 200000000) FROM generate_series(1, 4)", "pass"},
	{"test's helper 4 × repeat 2e8", "SELECT 1", "execute_queries([\"SELECT repeat('x', 200000000) FROM generate_series(1, 4)\"], db_name, conn)"},
	{"test's cursor 4 × repeat 2e8", "SELECT 1", "cur = conn.cursor(); cur.execute(\"SELECT repeat('x', 200000000) FROM generate_series(1, 4)\"); cur.fetchall()"},
	{"predicted 1000 × 1 MB", "SELECT repeat('x', 1000000) FROM generate_series(1, 1000)", "pass"},
	{"predicted string_agg 3 × 1e8", "SELECT string_agg(repeat('x', 100000000), '') FROM generate_series(1, 3)", "pass"},
	{"predicted 3 columns of string_agg 3 × 1e8", "SELECT string_agg(repeat('x', 100000000), ''), string_agg(repeat('y', 100000000), ''), string_agg(repeat('z', 100000000), '') FROM generate_series(1, 3)", "pass"},
}

// TestMemoryLimit: each memory attack, on a real worker, is the policy's
// failure (KindTooMuchMemory without a byte cap; the byte cap stops what
// arrives in rows it can count), and the worker's peak RSS (VmHWM) stays
// below its idle RSS plus DefaultMaxWorkerMemory. The figures are logged
// (go test -v -run TestMemoryLimit).
func TestMemoryLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the memory limit is Linux's RLIMIT_DATA")
	}
	if testing.Short() {
		t.Skip("the attacks move gigabytes")
	}
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	for _, a := range memoryAttacks {
		for _, cap := range []int64{0, 8 << 20} {
			t.Run(fmt.Sprintf("%s/cap=%d", a.name, cap), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				w, err := p.start(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer w.stop(context.Background())
				if w.memLimit <= 0 {
					t.Fatalf("the worker has no memory limit")
				}
				idle := procStatus(t, w.pid, "VmRSS")
				j := job(t, db, []string{a.pred}, pyTest(a.test))
				j.MaxBytes = cap
				req := p.requestFor(j, time.Now().Add(time.Minute))
				resp, err := w.do(ctx, req.ID, req, time.Now().Add(90*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				peak := procStatus(t, w.pid, "VmHWM")
				t.Logf("idle RSS %d MiB, peak RSS %d MiB, growth %d MiB: %s %s (%s)", idle>>20, peak>>20, (peak-idle)>>20, resp.Outcome, resp.Kind, clip(resp.Reason, 120))
				if peak-idle >= DefaultMaxWorkerMemory {
					t.Errorf("the worker grew by %d MiB; the limit is %d MiB", (peak-idle)>>20, DefaultMaxWorkerMemory>>20)
				}
				res, err := resp.result()
				if err != nil {
					t.Fatalf("got %v; want the policy's failure", err)
				}
				want := sqlexec.KindTooMuchMemory
				if cap > 0 && strings.Contains(a.name, "1 MB") {
					want = sqlexec.KindTooManyBytes
				}
				if res.Passed || res.Lost || res.Broken != "" || res.Kind != want {
					t.Fatalf("got %+v; want a failure of kind %v", res, want)
				}
				if want == sqlexec.KindTooMuchMemory && (!resp.Retire || !strings.Contains(res.Reason, "memory limit was reached")) {
					t.Fatalf("got %+v (retire %v); want the memory limit named and the worker retired", res, resp.Retire)
				}
			})
		}
	}
}

// TestMemoryLimitRetires: a job that reaches the limit is answered, then
// its worker is replaced (Retired, not Killed), and the next job runs.
func TestMemoryLimitRetires(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the memory limit is Linux's RLIMIT_DATA")
	}
	p := newPool(t, Config{Workers: 1, MaxWorkerMemory: 64 << 20})
	db := clone(t)
	res := run(t, p, job(t, db, []string{"SELECT repeat('x', 10000000) FROM generate_series(1, 20)"}, pyTest("pass")))
	if res.Passed || res.Kind != sqlexec.KindTooMuchMemory || !strings.Contains(res.Reason, "64 MiB") {
		t.Fatalf("got %+v; want KindTooMuchMemory", res)
	}
	if res := run(t, p, job(t, db, []string{"SELECT 1"}, pyTest("pass"))); !res.Passed {
		t.Fatalf("the next job: %+v", res)
	}
	if s := p.Stats(); s.Retired != 1 || s.Killed != 0 || s.Started != 2 {
		t.Fatalf("stats %+v; want one retired, none killed, two started", s)
	}
	// Without a limit the same job passes (and needs more than 64 MiB).
	q := newPool(t, Config{Workers: 1, MaxWorkerMemory: -1})
	if res := run(t, q, job(t, db, []string{"SELECT repeat('x', 10000000) FROM generate_series(1, 20)"}, pyTest("assert len(pred_query_result) == 20"))); !res.Passed {
		t.Fatalf("without a limit: %+v", res)
	}
}

// procStatus reads a field of /proc/<pid>/status in bytes.
func procStatus(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				n, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return n << 10
				}
			}
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

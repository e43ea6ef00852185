package pytests

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/internal/pgtest"
	"avtgym/sqlexec"
)

// wrongReadings are SQL that take the other reading of each lite Management
// task (or simply get it wrong): the task's tests must fail them.
var wrongReadings = map[string][]string{
	// "breaking down a lot" read as an hour in total, and retired cranes
	// sent to maintenance too.
	"harbor_M_1": {"UPDATE cranes c SET operational_status = 'maintenance' WHERE c.crane_id IN (SELECT ca.crane_id FROM crane_assignments ca WHERE ca.shift_start >= '2024-05-01' GROUP BY ca.crane_id HAVING SUM(ca.breakdown_minutes) > 60)"},
	// Waiting counted from the scheduled arrival; every call, not only
	// finished ones.
	"harbor_M_2": {"CREATE OR REPLACE VIEW call_turnaround AS SELECT pc.call_id, v.vessel_name, v.vessel_type, b.berth_code, b.terminal, EXTRACT(EPOCH FROM (pc.berthed_at - pc.eta)) / 3600 AS waiting_hours, EXTRACT(EPOCH FROM (pc.atd - pc.ata)) / 3600 AS turnaround_hours FROM port_calls pc JOIN vessels v ON v.vessel_id = pc.vessel_id JOIN berths b ON b.berth_id = pc.berth_id"},
	// A call counted in the month it arrived, and hire by started hours.
	"harbor_M_3": {"CREATE OR REPLACE FUNCTION berth_hire_report(p_terminal text, p_month date)\nRETURNS TABLE(berth_code varchar, departed_calls bigint, hire_usd numeric)\nLANGUAGE sql STABLE AS $$\n    SELECT b.berth_code, COUNT(pc.call_id), COALESCE(SUM(b.daily_rate_usd * EXTRACT(EPOCH FROM (pc.atd - pc.berthed_at)) / 86400), 0)\n    FROM berths b LEFT JOIN port_calls pc ON pc.berth_id = b.berth_id AND pc.call_status = 'departed' AND date_trunc('month', pc.ata) = date_trunc('month', p_month)\n    WHERE b.terminal = p_terminal GROUP BY b.berth_code ORDER BY b.berth_code\n$$"},
	// A case-sensitive index.
	"harbor_M_4": {"CREATE INDEX idx_manifests_consignee ON cargo_manifests (consignee)",
		"INSERT INTO cargo_manifests (call_id, bl_number, direction, cargo_category, teu, weight_t, declared_value_usd, hazard_class, consignee, details) SELECT pc.call_id, 'HBR24-EXP-0901', 'export', 'containerized', 40, 520.50, 1250000.00, NULL, 'Tern Maritime Logistics', '{\"hs_code\": \"847130\", \"packaging\": \"container\", \"reefer\": false, \"destination_port\": \"SGSIN\", \"customs\": {\"status\": \"pending\", \"inspected\": false}}'::jsonb FROM port_calls pc JOIN vessels v ON v.vessel_id = pc.vessel_id WHERE v.vessel_name = 'Azura Freya' AND pc.call_status = 'scheduled'"},
	// Cleared, but not marked inspected.
	"harbor_M_4/follow_up": {"UPDATE cargo_manifests SET details = jsonb_set(details, '{customs,status}', '\"cleared\"') WHERE bl_number = 'HBR24-EXP-0901'"},
}

// TestLiteManagementTasks runs the lite sample's real Management tests: each
// reference passes, the wrong reading fails with the test's message, and
// the database is the same after each job (pg_dump checksum; sequences,
// which no transaction rolls back, restored first).
func TestLiteManagementTasks(t *testing.T) {
	tasks := liteTasks(t)
	p := newPool(t, Config{Workers: 2})
	db := clone(t)
	before := pgtest.DumpSum(t, db)
	seqs := sequences(t, db)
	for _, tk := range tasks {
		wrong, ok := wrongReadings[tk.id]
		if !ok {
			t.Fatalf("no wrong reading for %s", tk.id)
		}
		for _, c := range []struct {
			name string
			pred []string
			pass bool
		}{{"reference", tk.sol, true}, {"wrong", wrong, false}} {
			t.Run(tk.id+"/"+c.name, func(t *testing.T) {
				j := job(t, db, c.pred, tk.tests...)
				j.Reference = tk.sol
				j.Setup, j.Prior, j.Cleanup = tk.preprocess, tk.prior, tk.cleanup
				res := run(t, p, j)
				if res.Broken != "" {
					t.Fatalf("broken: %s", res.Broken)
				}
				if res.Passed != c.pass {
					t.Fatalf("Passed = %v, want %v (reason %q)", res.Passed, c.pass, res.Reason)
				}
				if !c.pass && (res.Reason == "" || res.Kind != 0) {
					t.Errorf("a failed test gave reason %q, kind %v; want the test's message and no kind", res.Reason, res.Kind)
				}
				restoreSequences(t, db, seqs)
				if after := pgtest.DumpSum(t, db); after != before {
					t.Fatalf("the database changed")
				}
			})
		}
	}
}

// TestPredictedFailures: a predicted statement that fails is the policy's
// failure, classified like sqlexec's engines classify it, and leaves the
// database as it was.
func TestPredictedFailures(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	before := pgtest.DumpSum(t, db)
	passing := pyTest("return True")
	for _, c := range []struct {
		name    string
		pred    []string
		timeout time.Duration
		rows    int
		kind    sqlexec.ErrorKind
		reason  string
	}{
		{name: "syntax", pred: []string{"SELEC 1"}, kind: sqlexec.KindSyntax, reason: "syntax error"},
		{name: "unknown table", pred: []string{"UPDATE no_such_table SET x = 1"}, kind: sqlexec.KindSyntax, reason: "no_such_table"},
		{name: "two statements in one", pred: []string{"UPDATE cranes SET max_lift_t = 0; SELECT 1"}, kind: sqlexec.KindSyntax, reason: "multiple commands"},
		{name: "execution", pred: []string{"UPDATE cranes SET max_lift_t = 1 / 0"}, kind: sqlexec.KindExecution, reason: "division by zero"},
		{name: "second statement", pred: []string{"DELETE FROM crane_assignments", "SELECT 1/0"}, kind: sqlexec.KindExecution, reason: "division by zero"},
		{name: "two-phase commit", pred: []string{"DELETE FROM crane_assignments", "/* x */ PREPARE\n TRANSACTION 'x'"}, kind: sqlexec.KindDenied, reason: "PREPARE TRANSACTION is not allowed"},
		{name: "commit prepared", pred: []string{"commit prepared 'x'"}, kind: sqlexec.KindDenied, reason: "COMMIT PREPARED is not allowed"},
		{name: "timeout", pred: []string{"SELECT pg_sleep(3)"}, timeout: 200 * time.Millisecond, kind: sqlexec.KindTimeout, reason: "statement timeout"},
		{name: "too many rows", pred: []string{"SELECT generate_series(1, 50)"}, rows: 10, kind: sqlexec.KindTooManyRows, reason: "more than 10 rows"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := job(t, db, c.pred, passing)
			if c.timeout > 0 {
				j.StatementTimeout = c.timeout
			}
			j.MaxRows = c.rows
			res := run(t, p, j)
			if res.Passed || res.Broken != "" || res.Kind != c.kind || !strings.Contains(res.Reason, c.reason) {
				t.Fatalf("got %+v; want a failure of kind %v with %q in the reason", res, c.kind, c.reason)
			}
		})
	}
	// BEGIN, COMMIT and ROLLBACK find nothing to do, as in BIRD-Interact's
	// harness (which commits each statement); ROLLBACK TO SAVEPOINT works.
	j := job(t, db, []string{"BEGIN", "DELETE FROM crane_assignments", "COMMIT", "SAVEPOINT s", "DELETE FROM cranes WHERE home_berth_id IS NULL",
		"ROLLBACK TO SAVEPOINT s", "-- done\nROLLBACK", "END", "start transaction"}, pyTest(
		"res, err, _ = execute_queries(['SELECT (SELECT count(*) FROM crane_assignments), (SELECT count(*) > 0 FROM cranes WHERE home_berth_id IS NULL)'], db_name, conn)",
		"assert res == [(0, True)], (res, err)"))
	if res := run(t, p, j); !res.Passed {
		t.Fatalf("transaction control: got %+v", res)
	}
	if after := pgtest.DumpSum(t, db); after != before {
		t.Fatal("the database changed")
	}
}

// TestTestOutcomes: what each way a test can end means. Only what the
// test's source shows is broken; whatever it raises at run time is a
// failed test, and a limit its statements reach fails it whatever it
// makes of that (with the limit's kind).
func TestTestOutcomes(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	before := pgtest.DumpSum(t, db)
	update := []string{"UPDATE cranes SET max_lift_t = max_lift_t + 1000 WHERE crane_code = 'GC-01'"}
	check := "res, err, _ = execute_queries([\"SELECT max_lift_t > 1000 FROM cranes WHERE crane_code = 'GC-01'\"], db_name, conn)"
	for _, c := range []struct {
		name   string
		tests  []string
		rows   int
		pass   bool
		broken string // a substring of Broken
		reason string // a substring of Reason
		kind   sqlexec.ErrorKind
	}{
		{name: "pass", tests: []string{pyTest(check, "assert not err and res == [(True,)], res", "return True")}, pass: true},
		{name: "return value ignored", tests: []string{pyTest("return False")}, pass: true},
		{name: "assertion message", tests: []string{pyTest(check, "assert res == [(False,)], f'lift now {res}'")}, reason: "lift now [(True,)]"},
		{name: "bare assertion", tests: []string{pyTest("x = 1", "assert x == 2")}, reason: "an assertion failed (line 3 of the test)"},
		{name: "exception", tests: []string{pyTest("res, err, _ = execute_queries(['SELECT 1 WHERE false'], db_name, conn)", "return res[0][0]")}, reason: "IndexError: list index out of range"},
		{name: "uncaught database error", tests: []string{pyTest("perform_query_on_postgresql_databases('SELECT * FROM nope', db_name, conn)")}, reason: "UndefinedTable"},
		{name: "second test fails", tests: []string{pyTest("pass"), pyTest("assert False, 'second'")}, reason: "test 2 of 2: second"},
		{name: "print", tests: []string{pyTest("print('{\"outcome\": \"passed\"}')", "import sys; sys.stdout.write('x' * 100000)", "assert False, 'printed'")}, reason: "printed"},
		{name: "timeout ignored by the test", tests: []string{pyTest("execute_queries(['SELECT pg_sleep(3)'], db_name, conn)", "return True")}, reason: "a statement timed out", kind: sqlexec.KindTimeout},
		{name: "timeout then assertion", tests: []string{pyTest("_, _, to = execute_queries(['SELECT pg_sleep(3)'], db_name, conn)", "assert not to, 'slow'")}, reason: "timed out: canceling statement due to statement timeout; then: slow", kind: sqlexec.KindTimeout},
		{name: "too many rows ignored by the test", tests: []string{pyTest("execute_queries(['SELECT generate_series(1, 50)'], db_name, conn)")}, rows: 10, reason: "more than 10 rows", kind: sqlexec.KindTooManyRows},
		{name: "too many rows on the cursor", tests: []string{pyTest("cur = conn.cursor()", "try:", "    cur.execute('SELECT generate_series(1, 50)')", "except Exception:", "    pass")}, rows: 10, reason: "more than 10 rows", kind: sqlexec.KindTooManyRows},
		{name: "name error", tests: []string{pyTest("json.loads('1')")}, broken: "json (line 2)"},
		{name: "name error in a branch", tests: []string{pyTest(check, "if res == [(True,)]:", "    undefined_helper()")}, broken: "undefined_helper"},
		// The policy's rows decide whether last is ever bound.
		{name: "unbound local", tests: []string{pyTest("res, _, _ = execute_queries([\"SELECT 1 WHERE false\"], db_name, conn)", "for r in res:", "    last = r[0]", "assert last == 1")}, reason: "UnboundLocalError"},
		// A global bound only on a branch the policy's data skips.
		{name: "global bound on a branch", tests: []string{"def setup(res):\n    global seen\n    if res:\n        seen = res\n" + pyTest("res, _, _ = execute_queries([\"SELECT 1 WHERE false\"], db_name, conn)", "setup(res)", "assert seen")}, reason: "NameError: name 'seen' is not defined"},
		{name: "recursion in the test", tests: []string{pyTest("def f(n):", "    return f(n + 1)", "f(0)")}, reason: "RecursionError"},
		{name: "exit at run time", tests: []string{pyTest("exit(1)")}, reason: "the test called exit(1)"},
		{name: "import at run time", tests: []string{pyTest("__import__('avtgym_no_such_' + 'module')")}, reason: "ModuleNotFoundError"},
		{name: "syntax error", tests: []string{pyTest("assert (")}, broken: "does not compile"},
		{name: "syntax error in a later test", tests: []string{pyTest("assert False"), "def test_case(:\n"}, broken: "test 2 does not compile"},
		{name: "no test_case", tests: []string{"def check(pred_sqls, sol_sqls, db_name, conn):\n    pass\n"}, broken: "defines no test_case"},
		{name: "wrong signature", tests: []string{"def test_case(pred_sqls):\n    pass\n"}, broken: "cannot be called"},
		{name: "import error", tests: []string{"import avtgym_no_such_module\n" + pyTest("pass")}, broken: "avtgym_no_such_module"},
		{name: "relative import", tests: []string{"from . import x\n" + pyTest("pass")}, broken: "relative import"},
		{name: "async test_case", tests: []string{"async def test_case(pred_sqls, sol_sqls, db_name, conn):\n    assert False\n"}, broken: "coroutine"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := job(t, db, update, c.tests...)
			j.StatementTimeout = 300 * time.Millisecond
			j.MaxRows = c.rows
			res := run(t, p, j)
			switch {
			case c.broken != "":
				if res.Passed || !strings.Contains(res.Broken, c.broken) {
					t.Fatalf("got %+v; want Broken with %q", res, c.broken)
				}
			case c.pass:
				if !res.Passed || res.Broken != "" {
					t.Fatalf("got %+v; want a pass", res)
				}
			default:
				if res.Passed || res.Broken != "" || res.Lost || res.Kind != c.kind || !strings.Contains(res.Reason, c.reason) {
					t.Fatalf("got %+v; want a failure of kind %v with %q in the reason", res, c.kind, c.reason)
				}
			}
		})
	}
	if after := pgtest.DumpSum(t, db); after != before {
		t.Fatal("the database changed")
	}
}

// helperChecks asserts the helpers' behaviour from inside a test.
const helperChecks = `from decimal import Decimal

def test_case(pred_sqls, sol_sqls, db_name, conn):
    assert pred_query_result == [(7, 'seven')], pred_query_result
    assert pred_sqls == ["SELECT 7, 'seven'"] and sol_sqls == ["SELECT 8"], (pred_sqls, sol_sqls)
    assert date(2024, 5, 1).isoformat() == '2024-05-01'

    got = remove_distinct(["SELECT DISTINCT a FROM t", "select  distinct b", "SELECT DISTINCT\na"])
    assert got == ["SELECT a FROM t", "select  b", "SELECT DISTINCT\na"], got
    got = remove_comments(["SELECT 1 -- one\n/* two\n */ + 2 -- end", "SELECT 3\n\n\n-- x\n\nFROM t"])
    assert got == ["SELECT 1 \n + 2", "SELECT 3\nFROM t"], got
    got = remove_round(["SELECT ROUND(AVG(x), 2), round(round(y, 1)) FROM t", "SELECT ROUND(f(a, b)::numeric, 1)"])
    assert got == ["SELECT AVG(x), y FROM t", "SELECT f(a, b)::numeric"], got
    got = preprocess_results([(date(2024, 5, 1), Decimal("1.005"), 2.5, {"b": 1.234, "a": [0.5]}, None, "x")])
    assert got == [("2024-05-01", Decimal("1.01"), 2.5, '{"a": [0.5], "b": 1.23}', None, "x")], got
    assert preprocess_results([(Decimal("1.23456"),)], 3) == [(Decimal("1.235"),)]
    assert check_sql_function_usage(["SELECT LOWER(x)", "FROM t"], ["lower(", "from"]) == 1
    assert check_sql_function_usage(["SELECT x"], ["lower("]) == 0
    assert check_sql_function_usage([], []) == 0

    # A failing statement undoes itself only; the result is the last success's.
    res, err, to = execute_queries(["SELECT 1", "SELECT * FROM no_such_table", "SELECT 2"], db_name, conn)
    assert res == [(1,)] and err is True and to is False, (res, err, to)
    res, err, to = execute_queries("SELECT 3", db_name, conn, None, "section", is_solution=True)
    assert res == [(3,)] and err is False and to is False, (res, err, to)
    res, err, to = execute_queries(["CREATE TEMP TABLE h(a int)", "INSERT INTO h VALUES (1), (2)"], db_name, conn)
    assert res is None and not err, (res, err)
    res, err, to = execute_queries(["INSERT INTO h VALUES (1/0)"], db_name, conn)
    assert err
    rows, c = perform_query_on_postgresql_databases("SELECT a FROM h ORDER BY a", db_name, conn)
    assert rows == [(1,), (2,)] and c is conn, rows
    rows, _ = perform_query_on_postgresql_databases("SELECT 'a%', gen_random_uuid() IS NOT NULL, '10.0.0.1'::inet", db_name)
    assert rows == [('a%', True, '10.0.0.1')], rows
    try:
        perform_query_on_postgresql_databases("SELECT 1/0", db_name, conn)
        assert False, "no error"
    except AssertionError:
        raise
    except Exception as e:
        assert "division by zero" in str(e), e
    # BIRD's harness commits each statement: BEGIN, COMMIT, ROLLBACK find nothing to do.
    for s in ["BEGIN", "COMMIT", "ROLLBACK", "END"]:
        res, err, _ = execute_queries([s], db_name, conn)
        assert res is None and not err, (s, res, err)
    res, _, _ = execute_queries(["SELECT count(*) FROM h"], db_name, conn)
    assert res == [(2,)], res
    # Several statements in one string run as psycopg2 runs them.
    res, err, _ = execute_queries(["INSERT INTO h VALUES (3); SELECT max(a) FROM h"], db_name, conn)
    assert res == [(3,)] and not err, (res, err)

    assert ex_base(["SELECT a FROM h ORDER BY a"], ["SELECT a FROM h ORDER BY a DESC"], db_name, conn) == 1
    assert ex_base(["SELECT a FROM h ORDER BY a"], ["SELECT a FROM h ORDER BY a DESC"], db_name, conn, {"order": True}) == 0
    assert ex_base(["SELECT 1.004::numeric"], ["SELECT 1.0"], db_name, conn) == 1
    assert ex_base(["SELECT a FROM h WHERE false"], ["SELECT a FROM h WHERE false"], db_name, conn) == 0
    assert ex_base(["SELECT nope"], ["SELECT 1"], db_name, conn) == 0
    assert ex_base([], ["SELECT 1"], db_name, conn) == 0

    execute_queries(["CREATE TEMP TABLE big AS SELECT g AS id FROM generate_series(1, 50000) g", "ANALYZE big"], db_name, conn)
    q = "SELECT * FROM big WHERE id = 42"
    assert performance_compare_by_qep([q], ["CREATE INDEX big_id ON big (id)", q], db_name, conn) == 1
    assert performance_compare_by_qep(["CREATE INDEX big_id ON big (id)", q], [q], db_name, conn) == 0
    res, _, _ = execute_queries(["SELECT count(*) FROM pg_indexes WHERE indexname = 'big_id'"], db_name, conn)
    assert res == [(0,)], "performance_compare_by_qep left its index behind"

    # conn: psycopg2's interface over the job's transaction.
    cur = conn.cursor()
    cur.execute("INSERT INTO h VALUES (%s), (%s)", (10, 11))
    assert cur.rowcount == 2
    conn.rollback()
    cur.execute("SELECT count(*) FROM h")
    assert cur.fetchone() == (3,)
    cur.execute("INSERT INTO h VALUES (20)")
    conn.commit()
    try:
        cur.execute("SELECT 1/0")
    except Exception:
        pass
    try:
        cur.execute("SELECT 1")
        assert False, "an aborted transaction ran a statement"
    except AssertionError:
        raise
    except Exception as e:
        assert "aborted" in str(e), e
    conn.rollback()
    with conn.cursor() as c2:
        c2.execute("SELECT a FROM h ORDER BY a")
        assert c2.fetchall() == [(1,), (2,), (3,), (20,)]
    conn.close()
    assert conn.closed == 0
    res, _, _ = execute_queries(["SELECT count(*) FROM h"], db_name, conn)
    assert res == [(4,)], res
`

// TestHelpers checks the helper globals against their documented behaviour.
func TestHelpers(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	j := job(t, db, []string{"SELECT 7, 'seven'"}, helperChecks)
	j.Reference = []string{"SELECT 8"}
	if res := run(t, p, j); !res.Passed {
		t.Fatalf("got %+v", res)
	}
}

// TestEnvironmentSteps: Setup, Prior and Cleanup belong to the environment:
// their failure is an error, not a verdict; they run in order around the
// predicted statements and the tests.
func TestEnvironmentSteps(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	before := pgtest.DumpSum(t, db)

	j := job(t, db, []string{"UPDATE t SET v = v || '+pred'"}, pyTest(
		"res, err, _ = execute_queries(['SELECT v FROM t'], db_name, conn)",
		"assert res == [('setup+prior+pred',)], res"))
	j.Setup = []string{"CREATE TABLE t (v text)", "INSERT INTO t VALUES ('setup')"}
	j.Prior = []string{"UPDATE t SET v = v || '+prior'"}
	j.Cleanup = []string{"DROP TABLE t"}
	if res := run(t, p, j); !res.Passed {
		t.Fatalf("got %+v", res)
	}

	for _, c := range []struct {
		name, step string
		mod        func(*sqlexec.PyJob)
	}{
		{"setup", "setup", func(j *sqlexec.PyJob) { j.Setup = []string{"SELECT 1", "SELECT * FROM nope"} }},
		{"prior", "prior", func(j *sqlexec.PyJob) { j.Prior = []string{"SELECT 1/0"} }},
		{"unreachable", "connect", func(j *sqlexec.PyJob) { j.DSN = pgtest.URLFor(t, "pytests_no_such_database") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := job(t, db, []string{"SELECT 1"}, pyTest("pass"))
			c.mod(&j)
			_, err := p.Run(context.Background(), j)
			var je *JobError
			if !errors.As(err, &je) || je.Step != c.step || errors.Is(err, ErrDirty) {
				t.Fatalf("got %v; want a *JobError at step %s", err, c.step)
			}
		})
	}
	// After the policy's statements, a failing cleanup statement is the
	// policy's failure (its SQL may break what cleanup expects).
	j = job(t, db, []string{"DROP TABLE cranes CASCADE"}, pyTest("pass"))
	j.Cleanup = []string{"SELECT 1", "UPDATE cranes SET max_lift_t = 0"}
	if res := run(t, p, j); res.Passed || res.Kind != 0 || !strings.Contains(res.Reason, "statement 2 of cleanup failed") {
		t.Fatalf("a failing cleanup: got %+v", res)
	}
	j = job(t, db, []string{"SELECT 1"}, pyTest("assert False, 'the test'"))
	j.Cleanup = []string{"SELECT 1/0"}
	if res := run(t, p, j); res.Passed || res.Reason != "the test" {
		t.Fatalf("a failing test and cleanup: got %+v; want the test's failure", res)
	}
	// The worker is still fine.
	if res := run(t, p, job(t, db, []string{"SELECT 1"}, pyTest("pass"))); !res.Passed {
		t.Fatalf("got %+v", res)
	}
	if after := pgtest.DumpSum(t, db); after != before {
		t.Fatal("the database changed")
	}
}

// TestPolicyRole runs jobs as a role like the policy role: read-only by
// default (the job's transaction is READ WRITE), EXECUTE on set_config
// revoked — SET LOCAL statement_timeout still works, so a slow statement is
// the policy's timeout — and the job's deadline stops SQL too.
func TestPolicyRole(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	role := "pytests_role_" + randHex(4)
	password := randHex(12)
	admin := pgtest.URL(t)
	if err := adminExec(admin,
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, password),
		fmt.Sprintf("ALTER ROLE %s SET default_transaction_read_only = on", role),
		fmt.Sprintf("ALTER ROLE %s SET statement_timeout = '2s'", role),
	); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adminExec(admin, "DROP ROLE IF EXISTS "+role) })
	if err := adminExec(pgtest.URLFor(t, db),
		"GRANT CONNECT ON DATABASE "+db+" TO "+role,
		"GRANT USAGE ON SCHEMA public TO "+role,
		"GRANT SELECT, UPDATE ON ALL TABLES IN SCHEMA public TO "+role,
		"REVOKE EXECUTE ON FUNCTION pg_catalog.set_config(text, text, boolean) FROM PUBLIC",
	); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adminExec(pgtest.URLFor(t, db), "DROP OWNED BY "+role) })
	u, err := url.Parse(pgtest.URLFor(t, db))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(role, password)
	dsn := u.String()

	// Read-only by default; the job writes all the same.
	j := job(t, db, []string{"UPDATE cranes SET operational_status = 'maintenance' WHERE crane_code = 'GC-01'"}, pyTest(
		"res, err, _ = execute_queries([\"SELECT current_user, current_setting('default_transaction_read_only'), operational_status FROM cranes WHERE crane_code = 'GC-01'\"], db_name, conn)",
		fmt.Sprintf("assert res == [('%s', 'on', 'maintenance')], (res, err)", role)))
	j.DSN = dsn
	if res := run(t, p, j); !res.Passed {
		t.Fatalf("got %+v", res)
	}
	// set_config is revoked indeed ...
	j = job(t, db, []string{"SELECT set_config('statement_timeout', '0', true)"}, pyTest("pass"))
	j.DSN = dsn
	if res := run(t, p, j); res.Passed || res.Kind != sqlexec.KindDenied {
		t.Fatalf("set_config: got %+v; want it denied", res)
	}
	// ... and SET LOCAL statement_timeout works: inside a test ...
	j = job(t, db, []string{"SELECT 1"}, pyTest("execute_queries(['SELECT pg_sleep(30)'], db_name, conn)"))
	j.DSN, j.StatementTimeout = dsn, 200*time.Millisecond
	if res := run(t, p, j); res.Passed || !strings.Contains(res.Reason, "statement timeout") {
		t.Fatalf("got %+v; want the test's statement to time out", res)
	}
	// Each statement's limit: the job's, else the role's, lowered to what is
	// left of the deadline.
	for _, c := range []struct {
		stmt, deadline time.Duration
		check          string
	}{
		{200 * time.Millisecond, time.Minute, "res == [('200ms',)]"},
		{0, time.Minute, "res == [('2s',)]"},
		{0, time.Second, "res[0][0].endswith('ms') and 0 < int(res[0][0][:-2]) <= 1000"},
	} {
		j = job(t, db, []string{"SELECT 1"}, pyTest("res, err, _ = execute_queries(['SHOW statement_timeout'], db_name, conn)", "assert "+c.check+", res"))
		j.DSN, j.StatementTimeout, j.Deadline = dsn, c.stmt, c.deadline
		if res := run(t, p, j); !res.Passed {
			t.Fatalf("statement %v, deadline %v: got %+v", c.stmt, c.deadline, res)
		}
	}
	// ... and for the predicted statements, with the job's deadline as the
	// limit when it is the nearer.
	j = job(t, db, []string{"SELECT pg_sleep(30)"}, pyTest("pass"))
	j.DSN, j.StatementTimeout, j.Deadline = dsn, 0, time.Second
	if res := run(t, p, j); res.Passed || res.Kind != sqlexec.KindTimeout {
		t.Fatalf("got %+v; want a timeout", res)
	}
}

// TestWorkerFailures: a worker that exits, or hangs in Python past the
// deadline and the grace period, is killed and replaced; the job is an
// error (ErrWorker), the next job runs, and the database is untouched (the
// server rolled back).
func TestWorkerFailures(t *testing.T) {
	p := newPool(t, Config{Workers: 1, KillGrace: 200 * time.Millisecond})
	db := clone(t)
	before := pgtest.DumpSum(t, db)
	for _, c := range []struct{ name, test string }{
		{"swallows the deadline", "import time\n" + pyTest("while True:", "    try:", "        time.sleep(60)", "    except BaseException:", "        pass")},
		{"exits", "import os\n" + pyTest("os._exit(3)")},
		{"killed by a signal", "import os\n" + pyTest("os.kill(os.getpid(), 9)")},
	} {
		t.Run(c.name, func(t *testing.T) {
			killed := p.Stats().Killed
			j := job(t, db, []string{"DELETE FROM crane_assignments"}, c.test)
			j.Deadline = time.Second
			_, err := p.Run(context.Background(), j)
			if !errors.Is(err, ErrWorker) || sqlexec.KindOf(err) != sqlexec.KindUnavailable {
				t.Fatalf("got %v; want ErrWorker", err)
			}
			if s := p.Stats(); s.Killed != killed+1 || s.Live != 0 {
				t.Fatalf("stats %+v after the failure; want one more killed and none live", s)
			}
			if res := run(t, p, job(t, db, []string{"SELECT 1"}, pyTest("pass"))); !res.Passed {
				t.Fatalf("the next job: %+v", res)
			}
		})
	}
	if after := pgtest.DumpSum(t, db); after != before {
		t.Fatal("the database changed")
	}
	waitNoSessions(t, db)
}

// TestPythonPastTheDeadline: a test whose Python runs on past the job's
// deadline (a loop or a sleep on what the policy's data made) is stopped
// there: the policy's timeout, and the worker goes on. Only Python that
// swallows the stop outlives it (TestWorkerFailures).
func TestPythonPastTheDeadline(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	for _, c := range []struct{ name, test string }{
		{"sleeps", "import time\n" + pyTest("time.sleep(60)")},
		{"busy loop", pyTest("while True: pass")},
		{"loops on the policy's rows", pyTest("res, _, _ = execute_queries(['SELECT 1 WHERE false'], db_name, conn)", "while len(res) < 1:", "    res = res + []")},
		{"swallows Exception", "import time\n" + pyTest("while True:", "    try:", "        time.sleep(60)", "    except Exception:", "        pass")},
	} {
		t.Run(c.name, func(t *testing.T) {
			s0 := p.Stats()
			j := job(t, db, []string{"SELECT 1"}, c.test)
			j.Deadline = time.Second
			res := run(t, p, j)
			if res.Passed || res.Broken != "" || res.Kind != sqlexec.KindTimeout || !strings.Contains(res.Reason, "time limit") {
				t.Fatalf("got %+v; want the policy's timeout", res)
			}
			if res := run(t, p, job(t, db, []string{"SELECT 1"}, pyTest("pass"))); !res.Passed {
				t.Fatalf("the next job: %+v", res)
			}
			if s := p.Stats(); s.Killed != s0.Killed || s.Started != s0.Started {
				t.Fatalf("stats %+v, before %+v: the worker was replaced", s, s0)
			}
		})
	}
}

// waitNoSessions waits until no session of the worker is left on db.
func waitNoSessions(t *testing.T, db string) {
	t.Helper()
	for i := 0; ; i++ {
		n := 0
		err := adminQueryInt(pgtest.URL(t), "SELECT count(*) FROM pg_stat_activity WHERE datname = '"+db+"' AND application_name = 'avtgym-pytests'", &n)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if i == 100 {
			t.Fatalf("%d sessions of the worker are still on %s", n, db)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCancel: a canceled job kills its worker (the server rolls back), and
// the pool goes on.
func TestCancel(t *testing.T) {
	p := newPool(t, Config{Workers: 1})
	db := clone(t)
	before := pgtest.DumpSum(t, db)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitSessions(t, db, 1)
		cancel()
	}()
	_, err := p.Run(ctx, job(t, db, []string{"DELETE FROM crane_assignments", "SELECT pg_sleep(60)"}, pyTest("pass")))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v; want the cancellation", err)
	}
	if res := run(t, p, job(t, db, []string{"SELECT 1"}, pyTest("pass"))); !res.Passed {
		t.Fatalf("the next job: %+v", res)
	}
	waitNoSessions(t, db)
	if after := pgtest.DumpSum(t, db); after != before {
		t.Fatal("the database changed")
	}
}

// waitSessions waits until n sessions of the worker are on db.
func waitSessions(t *testing.T, db string, n int) {
	for i := 0; i < 600; i++ {
		got := 0
		if err := adminQueryInt(pgtest.URL(t), "SELECT count(*) FROM pg_stat_activity WHERE datname = '"+db+"' AND application_name = 'avtgym-pytests'", &got); err != nil {
			t.Error(err)
			return
		}
		if got >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("%d sessions of the worker never appeared on %s", n, db)
}

// TestConcurrent runs jobs at once, each on its own copy of the database,
// and every result is the one the job gets alone. The jobs provably
// overlap: each one's first test waits for a file that the test writes only
// once it has seen every job's session open on its database.
func TestConcurrent(t *testing.T) {
	tasks := liteTasks(t)
	const n = 4
	p := newPool(t, Config{Workers: n})
	barrier := `import os, time
def test_case(pred_sqls, sol_sqls, db_name, conn):
    for _ in range(1000):
        if os.path.exists(%q):
            return
        time.sleep(0.02)
    assert False, "the barrier never opened"
`
	dbs := make([]string, n)
	sums := make([]string, n)
	for i := range dbs {
		dbs[i] = clone(t)
		sums[i] = pgtest.DumpSum(t, dbs[i])
	}
	inDBs := "datname IN ('" + strings.Join(dbs, "', '") + "')"
	for round := range 3 {
		for _, db := range dbs {
			waitNoSessions(t, db) // the last round's sessions must not count
		}
		gate := filepath.Join(t.TempDir(), "open")
		var wg sync.WaitGroup
		results := make([]sqlexec.PyResult, n)
		errs := make([]error, n)
		for i := range n {
			tk := tasks[(i+round)%4]
			pred := tk.sol
			if i%2 == 1 {
				pred = wrongReadings[tk.id]
			}
			j := job(t, dbs[i], pred, append([]string{fmt.Sprintf(barrier, gate)}, tk.tests...)...)
			j.Reference, j.Prior = tk.sol, tk.prior
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = p.Run(context.Background(), j)
			}()
		}
		for k := 0; ; k++ {
			got := 0
			if err := adminQueryInt(pgtest.URL(t), "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'avtgym-pytests' AND "+inDBs, &got); err != nil {
				t.Fatal(err)
			}
			if got == n {
				break
			}
			if k == 600 {
				t.Fatalf("round %d: %d of the %d jobs' sessions were ever open at once", round, got, n)
			}
			time.Sleep(25 * time.Millisecond)
		}
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d job %d: %v", round, i, errs[i])
			}
			if want := i%2 == 0; results[i].Passed != want {
				t.Fatalf("round %d job %d (%s): got %+v, want Passed %v", round, i, tasks[(i+round)%4].id, results[i], want)
			}
		}
	}
	if s := p.Stats(); s.Started != n {
		t.Errorf("stats %+v; want %d workers started", s, n)
	}
	for i, db := range dbs {
		restoreSequences(t, db, sequences(t, harborTemplate(t)))
		if pgtest.DumpSum(t, db) != sums[i] {
			t.Errorf("database %d changed", i)
		}
	}
}

// TestClose: Close lets the job in flight finish, then stops the workers;
// Run afterwards fails with ErrClosed.
func TestClose(t *testing.T) {
	p, err := New(Config{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	requireWorker(t, p.Check(context.Background()))
	db := clone(t)
	done := make(chan sqlexec.PyResult, 1)
	go func() {
		res, err := p.Run(context.Background(), job(t, db, []string{"SELECT 1"}, pyTest("execute_queries(['SELECT pg_sleep(0.5)'], db_name, conn)")))
		if err != nil {
			t.Errorf("the job in flight: %v", err)
		}
		done <- res
	}()
	waitSessions(t, db, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if res := <-done; !res.Passed {
		t.Errorf("the job in flight: %+v", res)
	}
	if s := p.Stats(); s.Live != 0 {
		t.Errorf("stats %+v after Close", s)
	}
	if _, err := p.Run(context.Background(), job(t, db, nil)); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v", err)
	}
	if err := p.Check(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Check after Close: %v", err)
	}
}

// TestMissingDependency: without python3, or without psycopg, Check says
// what to install.
func TestMissingDependency(t *testing.T) {
	dir := t.TempDir()
	t.Run("python3", func(t *testing.T) {
		p, err := New(Config{Python: filepath.Join(dir, "no-python3")})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check(context.Background())
		if !errors.Is(err, ErrNoPython) || !strings.Contains(err.Error(), "pip install 'psycopg[binary]") {
			t.Fatalf("got %v; want ErrNoPython with the pip line", err)
		}
	})
	t.Run("psycopg", func(t *testing.T) {
		// python3 without its site-packages: no psycopg.
		real := "python3"
		if _, err := exec.LookPath(real); err != nil {
			requireWorker(t, fmt.Errorf("%w: %v", ErrNoPython, err))
		}
		script := filepath.Join(dir, "python-without-site")
		if err := os.WriteFile(script, []byte("#!/bin/sh\nexec python3 -S \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		p, err := New(Config{Python: script})
		if err != nil {
			t.Fatal(err)
		}
		err = p.Check(context.Background())
		if !errors.Is(err, ErrNoPython) || !strings.Contains(err.Error(), "psycopg is missing") || !strings.Contains(err.Error(), Install) {
			t.Fatalf("got %v; want ErrNoPython naming psycopg", err)
		}
	})
}

// TestProtocolViolations: a worker that starts badly, or answers with what
// is not the protocol, is an error, and is killed.
func TestProtocolViolations(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name, script string
		start        bool // the failure is at start
	}{
		{"no hello", "#!/bin/sh\necho hello world\nsleep 60\n", true},
		{"dies at start", "#!/bin/sh\necho boom >&2\nexit 3\n", true},
		{"garbage answer", "#!/bin/sh\necho '{\"hello\": 1}'\nread line\necho 'not json'\nsleep 60\n", false},
		{"wrong id", "#!/bin/sh\necho '{\"hello\": 1}'\nread line\necho '{\"id\": 12345, \"outcome\": \"passed\"}'\nsleep 60\n", false},
		{"unknown outcome", "#!/bin/sh\necho '{\"hello\": 1}'\nread line\necho '{\"id\": 1, \"outcome\": \"maybe\"}'\nsleep 60\n", false},
		{"silent", "#!/bin/sh\necho '{\"hello\": 1}'\nread line\nsleep 60\n", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			script := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			if err := os.WriteFile(script, []byte(c.script), 0o755); err != nil {
				t.Fatal(err)
			}
			p, err := New(Config{Python: script, KillGrace: 100 * time.Millisecond, StartTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close(context.Background())
			j := sqlexec.PyJob{DSN: "postgres://nowhere", Deadline: 500 * time.Millisecond}
			_, err = p.Run(context.Background(), j)
			if c.start {
				if err == nil || errors.Is(err, ErrNoPython) || errors.Is(err, ErrWorker) {
					t.Fatalf("got %v; want a start error", err)
				}
			} else if !errors.Is(err, ErrWorker) {
				t.Fatalf("got %v; want ErrWorker", err)
			}
			if s := p.Stats(); s.Live != 0 {
				t.Fatalf("stats %+v; want the worker gone", s)
			}
		})
	}
}

// TestConfig checks Validate.
func TestConfig(t *testing.T) {
	for _, c := range []Config{{Workers: -1}, {KillGrace: -1}, {StartTimeout: -1}, {DefaultDeadline: -1}, {MaxRows: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
	if _, err := New(Config{}); err != nil {
		t.Errorf("New(Config{}): %v", err)
	}
}

// TestReplaceAndRetire: a worker that died while idle is replaced by the
// next job, and one that has run MaxJobsPerWorker jobs is retired.
func TestReplaceAndRetire(t *testing.T) {
	p := newPool(t, Config{Workers: 1, MaxJobsPerWorker: 2})
	db := clone(t)
	p.mu.Lock()
	idle := p.idle[0]
	p.mu.Unlock()
	idle.kill() // as if it had crashed
	for i := range 3 {
		if res := run(t, p, job(t, db, []string{"SELECT 1"}, pyTest("pass"))); !res.Passed {
			t.Fatalf("job %d: %+v", i, res)
		}
	}
	// Check's worker died; the next one ran two jobs and retired; a third
	// ran the last.
	if s := p.Stats(); s.Started != 3 || s.Live != 1 {
		t.Fatalf("stats %+v; want 3 started, 1 live", s)
	}
}

// TestScriptFitsAnArgument: the worker is passed as one argument, which
// Linux bounds at 128 KiB.
func TestScriptFitsAnArgument(t *testing.T) {
	if n := len(workerScript); n > 100<<10 {
		t.Fatalf("worker.py has %d bytes; past 128 KiB it cannot be passed with -c", n)
	}
}

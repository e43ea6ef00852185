# avtgym's Python test worker (package sqlexec/pytests embeds this file and
# starts it with `python3 -c`). It runs BIRD-Interact's Python test_case
# functions, one job at a time, on a real psycopg 3 connection.
#
# Protocol: JSON lines. The worker writes one hello line at start, then reads
# one job per line on stdin and answers it with one line on its own copy of
# the original stdout (fd 1 itself is pointed at stderr, so that nothing a
# test prints can reach the protocol). pytests.go documents the fields.
#
# A job runs on one connection inside one transaction that always ends in
# ROLLBACK: BEGIN READ WRITE, Setup, Prior, the predicted statements, each
# test, Cleanup. Between the statements of the tests, savepoints stand in for
# the commits of BIRD-Interact's harness, which commits every statement.
import sys

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # never import from the working directory

import builtins
import inspect
import io
import json
import os
import platform
import re
import signal
import time
import traceback
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal

PROTOCOL = 1
REASON_MAX = 4000
DEFAULT_MAX_ROWS = 10000

psycopg = None  # imported in main(), so that its absence can be reported
_proto = None  # the protocol stream
_job = None  # the running job, for the helpers and the SIGTERM handler


def send(obj):
    _proto.write(json.dumps(obj, ensure_ascii=True) + "\n")
    _proto.flush()


def clip(s, n=REASON_MAX):
    s = str(s)
    return s if len(s) <= n else s[: n - 1] + "\u2026"


class Fatal(BaseException):
    """The job cannot go on for a reason of the environment (the connection
    was lost, the transaction ended early). A BaseException, so that a test's
    `except Exception` does not swallow it."""

    def __init__(self, step, reason, sqlstate="", dirty=False, index=None):
        super().__init__(reason)
        self.step, self.reason, self.sqlstate, self.dirty, self.index = step, reason, sqlstate, dirty, index


class TooManyRows(Exception):
    """A statement returned more rows than the job allows."""


class DeadlineExceeded(Exception):
    """The job's deadline passed before a statement could start."""


class _Sink:
    """Where a test's print() goes: nowhere (bounded, unlike a buffer)."""

    def write(self, s):
        return len(s)

    def flush(self):
        pass


# --- transaction control -----------------------------------------------------

_COMMENT = re.compile(r"\s+|--[^\n]*(\n|$)|/\*.*?\*/", re.S)


_TWO_PHASE = re.compile(r"(prepare\s+transaction|commit\s+prepared|rollback\s+prepared)\b", re.I)


def control_keyword(sql):
    """What a statement that controls the transaction starts with: "begin",
    "start", "commit", "end", "rollback" or "abort" (ROLLBACK TO SAVEPOINT
    is not one: it stays inside the transaction), or "prepare transaction",
    "commit prepared", "rollback prepared" (two-phase commit); else None."""
    i, n = 0, len(sql)
    while i < n:
        m = _COMMENT.match(sql, i)
        if not m or m.end() == i:
            break
        i = m.end()
    rest = sql[i:]
    m = _TWO_PHASE.match(rest)
    if m:
        return " ".join(m.group(1).lower().split())
    m = re.match(r"([A-Za-z_]+)(\s+([A-Za-z_]+))?", rest)
    if not m:
        return None
    w = m.group(1).lower()
    if w == "rollback" and (m.group(3) or "").lower() == "to":
        return None
    if w in ("begin", "start", "commit", "end", "rollback", "abort"):
        return w
    return None


def two_phase(kw):
    return kw is not None and " " in kw


# --- the job -------------------------------------------------------------------


def sqlstate_of(e):
    return getattr(e, "sqlstate", None) or ""


def is_timeout(e):
    return isinstance(e, DeadlineExceeded) or sqlstate_of(e) in ("57014", "55P03")


def lost_connection(conn, e=None):
    st = sqlstate_of(e) if e is not None else ""
    return conn.closed or getattr(conn, "broken", False) or st.startswith(("08", "57P"))


class Job:
    def __init__(self, req):
        self.req = req
        now = time.monotonic()
        dl = req.get("deadline_ms") or 0
        self.deadline = now + dl / 1000.0 if dl > 0 else None
        self.stmt_ms = max(int(req.get("statement_timeout_ms") or 0), 0)
        self.max_rows = int(req.get("max_rows") or 0) or DEFAULT_MAX_ROWS
        self.conn = None
        self.test_conn = None
        tag = os.urandom(6).hex()
        self.guard = "avtgym_job_" + tag  # set right after BEGIN; gone only if the transaction was replaced
        self.cp = "avtgym_cp_" + tag  # the tests' commit point
        self.scratch_n = 0
        self.test_no = 0
        self.timeouts = []  # timeouts inside the tests (the policy's failure)
        self.too_many = None  # a test's statement returned too many rows
        self.fatal = None  # a Fatal raised inside a test

    # -- limits --

    def remaining_ms(self):
        if self.deadline is None:
            return None
        return int((self.deadline - time.monotonic()) * 1000)

    def set_timeout(self):
        """SET LOCAL statement_timeout for the next statement: the job's
        statement limit (else the role's), or what is left of the job's
        deadline if that is less. Raises DeadlineExceeded when nothing is
        left."""
        ms = self.stmt_ms
        rem = self.remaining_ms()
        if rem is not None:
            if rem <= 0:
                raise DeadlineExceeded("the verification's time limit was reached before the statement could start")
            ms = min(ms, rem) if ms else rem
        if ms and self.status() == "intrans":
            self.conn.execute("SET LOCAL statement_timeout = %d" % max(ms, 1))

    # -- transaction --

    def status(self):
        s = self.conn.info.transaction_status
        T = psycopg.pq.TransactionStatus
        return {T.IDLE: "idle", T.INTRANS: "intrans", T.INERROR: "inerror", T.ACTIVE: "active"}.get(s, "unknown")

    def check_open(self, step):
        """Fatal unless the job's transaction is still open."""
        if self.conn.closed or self.status() in ("idle", "unknown"):
            raise Fatal(step, "the transaction ended early (a statement committed or rolled it back): the database may hold this job's changes", dirty=True)

    def admin(self, sql, step, opening=False):
        """Run the job's own transaction bookkeeping; a failure is Fatal.
        Past the opening, a failure means that the transaction was replaced
        or tampered with (a missing savepoint): the job is dirty."""
        try:
            self.conn.execute(sql)
        except psycopg.Error as e:
            st = sqlstate_of(e)
            if lost_connection(self.conn, e):
                raise Fatal(step, "the connection to the database was lost: %s" % e, st)
            if opening:
                raise Fatal(step, "opening the job's transaction: %s" % e, st)
            raise Fatal(step, "the job's transaction was tampered with (%s): the database may hold this job's changes" % e, st, dirty=True)

    def commit_point(self):
        """What the harness's commit is here: the statements so far stay;
        a later rollback() returns to this point."""
        if self.status() == "inerror":
            self.rollback_to_cp()  # COMMIT of a failed transaction rolls back
            return
        self.admin("RELEASE SAVEPOINT %s; SAVEPOINT %s" % (self.cp, self.cp), "test")

    def rollback_to_cp(self):
        self.admin("ROLLBACK TO SAVEPOINT %s" % self.cp, "test")

    class _Scratch:
        def __init__(self, job):
            self.job = job

        def __enter__(self):
            j = self.job
            j.scratch_n += 1
            self.name = "%s_s%d" % (j.guard, j.scratch_n)
            self.saved_cp = j.cp
            j.cp = "%s_c%d" % (j.guard, j.scratch_n)
            j.admin("SAVEPOINT %s; SAVEPOINT %s" % (self.name, j.cp), "test")

        def __exit__(self, *exc):
            j = self.job
            j.admin("ROLLBACK TO SAVEPOINT %s; RELEASE SAVEPOINT %s" % (self.name, self.name), "test")
            j.cp = self.saved_cp
            return False

    def scratch(self):
        """A context in which everything is undone at the end."""
        return Job._Scratch(self)

    # -- statements --

    def stream(self, sql):
        """Run one statement (the extended protocol: exactly one statement)
        and return its rows, at most max_rows of them, or None when it
        returns none. Raises psycopg.Error, TooManyRows, DeadlineExceeded."""
        self.set_timeout()
        cur = self.conn.cursor()
        gen = cur.stream(sql)
        rows = []
        try:
            for row in gen:
                rows.append(row)
                if len(rows) > self.max_rows:
                    raise TooManyRows("a statement returned more than %d rows" % self.max_rows)
        except psycopg.ProgrammingError as e:
            if sqlstate_of(e) or "didn't produce a result" not in str(e):
                raise
            return None  # a statement without rows (DDL, DML without RETURNING)
        finally:
            gen.close()  # cancels the statement if rows are still coming
            cur.close()
        return rows

    def simple(self, sql, limit=True):
        """Run sql with the simple protocol (several statements allowed, as
        psycopg2 runs them); return the last result's rows or None."""
        self.set_timeout()
        with psycopg.ClientCursor(self.conn) as cur:
            cur.execute(sql)
            while cur.nextset():
                pass
            if cur.description is None:
                return None
            if limit and cur.rowcount > self.max_rows:
                raise TooManyRows("a statement returned more than %d rows" % self.max_rows)
            return cur.fetchall()

    def env_step(self, step, i, sql):
        """A statement of Setup, Prior or Cleanup: any failure is Fatal."""
        kw = control_keyword(sql)
        if kw is not None:
            return  # the job's transaction is the environment's to end
        try:
            self.simple(sql, limit=False)
        except psycopg.Error as e:
            if lost_connection(self.conn, e):
                raise Fatal(step, "the connection to the database was lost: %s" % e, sqlstate_of(e))
            raise Fatal(step, "statement %d of %s failed: %s" % (i + 1, step, str(e).strip()), sqlstate_of(e), index=i)
        except DeadlineExceeded as e:
            raise Fatal(step, "statement %d of %s failed: %s" % (i + 1, step, e), index=i)
        self.check_open(step)

    def note(self, e):
        """Record what a failing statement inside a test means for the job."""
        if isinstance(e, TooManyRows):
            self.too_many = str(e)
        elif is_timeout(e):
            self.timeouts.append(str(e).strip())
        elif isinstance(e, psycopg.Error) and lost_connection(self.conn, e):
            self.fatal = Fatal("test", "the connection to the database was lost: %s" % e, sqlstate_of(e))
            raise self.fatal

    def test_statement(self, sql):
        """One statement as BIRD-Interact's perform_query_on_postgresql_databases
        runs it: run, then commit (here: a new commit point); on failure,
        roll back (to the last commit point) and raise."""
        if not isinstance(sql, str):
            raise TypeError("a statement must be a string, not %s" % type(sql).__name__)
        kw = control_keyword(sql)
        if kw is not None:
            # Each statement is committed on its own, so BEGIN, COMMIT and
            # ROLLBACK find nothing to do.
            return None
        try:
            try:
                rows = self.stream(sql)
            except psycopg.errors.SyntaxError as e:
                if "multiple commands" not in str(e):
                    raise
                self.rollback_to_cp()
                rows = self.simple(sql)  # several statements in one string
        except (psycopg.Error, TooManyRows, DeadlineExceeded) as e:
            self.note(e)
            if not self.conn.closed:
                self.rollback_to_cp()
            raise
        self.check_open("test")
        self.commit_point()
        return rows


# --- the helpers (BIRD-Interact's test globals) --------------------------------


def _current():
    if _job is None:
        raise RuntimeError("no job is running")
    return _job


def perform_query_on_postgresql_databases(query, db_name, conn=None):
    """Run one statement on the job's connection and commit it (here: a
    savepoint); return (rows, conn): the rows (at most the job's max_rows,
    more is the policy's failure) or None for a statement without rows.
    Raises the database's error after rolling back to the last commit."""
    j = _current()
    return j.test_statement(query), j.test_conn


def execute_queries(queries, db_name, conn, logger=None, section_title="", **kwargs):
    """Run statements in order until one fails; return (rows of the last
    statement that succeeded, execution_error, timeout_error) as booleans
    for the flags. A string is one statement."""
    if isinstance(queries, str):
        queries = [queries]
    result, error, timeout = None, False, False
    for q in queries or []:
        try:
            result, conn = perform_query_on_postgresql_databases(q, db_name, conn=conn)
        except Fatal:
            raise
        except Exception as e:
            if is_timeout(e):
                timeout = True
            else:
                error = True
            break
    return result, error, timeout


def _as_list(sqls):
    return [sqls] if isinstance(sqls, str) else list(sqls)


def remove_distinct(sql_list):
    """Drop every space-separated token that is DISTINCT in any case."""
    return [" ".join(t for t in q.split(" ") if t.lower() != "distinct") for q in _as_list(sql_list)]


def remove_comments(sql_list):
    """Remove /* */ and -- comments, collapse blank lines, strip."""
    out = []
    for q in _as_list(sql_list):
        q = re.sub(r"/\*.*?\*/", "", q, flags=re.S)
        q = re.sub(r"--[^\r\n]*", "", q)
        q = re.sub(r"\n\s*\n+", "\n", q)
        out.append(q.strip())
    return out


def _remove_round_one(sql):
    pat = re.compile(r"ROUND\s*\(", re.I)
    while True:
        m = pat.search(sql)
        if not m:
            return sql
        open_at = m.end() - 1
        depth, close_at, first_end = 0, -1, None
        for k in range(open_at, len(sql)):
            c = sql[k]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    close_at = k
                    break
            elif c == "," and depth == 1 and first_end is None:
                first_end = k
        if close_at < 0:
            return sql  # unbalanced: leave the rest alone
        if first_end is None:
            first_end = close_at
        sql = sql[: m.start()] + sql[open_at + 1 : first_end].strip() + sql[close_at + 1 :]


def remove_round(sql_list):
    """Replace every ROUND(x[, n]) call, nested ones included, by x."""
    return [_remove_round_one(q) for q in _as_list(sql_list)]


def _round_values(item, places):
    if isinstance(item, Decimal):
        return item.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    if isinstance(item, float):
        return round(item, places)
    if isinstance(item, (list, tuple)):
        return type(item)(_round_values(x, places) for x in item)
    if isinstance(item, dict):
        return {k: _round_values(v, places) for k, v in item.items()}
    return item


def preprocess_results(results, decimal_places=2):
    """Rows as comparable tuples: dates and timestamps as YYYY-MM-DD,
    Decimal (half up) and float values rounded to decimal_places, also
    inside JSON values, which become JSON text with sorted keys."""
    out = []
    for row in results:
        cells = []
        for item in row:
            if isinstance(item, (date, datetime)):
                cells.append(item.strftime("%Y-%m-%d"))
                continue
            item = _round_values(item, decimal_places)
            if isinstance(item, (dict, list)):
                item = json.dumps(item, sort_keys=True)
            cells.append(item)
        out.append(tuple(cells))
    return out


def ex_base(pred_sqls, sol_sqls, db_name, conn, conditions=None):
    """1 when the last statements of pred_sqls and sol_sqls, run in turn,
    return the same rows after preprocess_results (as lists when
    conditions["order"], else as sets); 0 otherwise, and when either side
    fails, times out or returns no rows."""
    if not pred_sqls or not sol_sqls:
        return 0
    pred, perr, pto = execute_queries(pred_sqls, db_name, conn, None, "")
    sol, serr, sto = execute_queries(sol_sqls, db_name, conn, None, "")
    if perr or pto or serr or sto:
        return 0
    pred, sol = preprocess_results(pred), preprocess_results(sol)
    if not pred or not sol:
        return 0
    if conditions is not None and conditions.get("order", False):
        return 1 if pred == sol else 0
    return 1 if set(pred) == set(sol) else 0


def check_sql_function_usage(sqls, required_keywords):
    """1 when every keyword occurs (case-insensitively) in the statements."""
    if not sqls:
        return 0
    text = " ".join(s.lower() for s in _as_list(sqls))
    return 1 if all(k.lower() in text for k in required_keywords) else 0


def performance_compare_by_qep(old_sqls, sol_sqls, db_name, conn):
    """1 when the planner's total cost of sol_sqls' SELECT, INSERT, UPDATE
    and DELETE statements is lower than old_sqls'; other statements are run
    (not measured). Each side starts from the same state: its changes are
    undone afterwards."""
    if not old_sqls or not sol_sqls:
        return 0
    j = _current()

    def cost(sqls):
        total = 0.0
        for sql in _as_list(sqls):
            if not sql.strip().upper().startswith(("SELECT", "INSERT", "UPDATE", "DELETE")):
                try:
                    perform_query_on_postgresql_databases(sql, db_name, conn)
                except Fatal:
                    raise
                except Exception:
                    pass
                continue
            try:
                rows, _ = perform_query_on_postgresql_databases("EXPLAIN (FORMAT JSON) " + sql, db_name, conn)
                plan = rows[0][0] if rows else None
                if isinstance(plan, str):
                    plan = json.loads(plan)
                if isinstance(plan, list) and plan:
                    total += float(plan[0].get("Plan", {}).get("Total Cost", 0.0))
            except Fatal:
                raise
            except Exception:
                pass
        return total

    with j.scratch():
        old = cost(old_sqls)
    with j.scratch():
        new = cost(sol_sqls)
    return 1 if new < old else 0


# --- what tests see as conn ----------------------------------------------------


class TestCursor:
    """A psycopg2-style cursor on the job's transaction: statements stay until
    conn.commit() (a commit point) or conn.rollback() (back to it); after a
    failure the transaction refuses statements until conn.rollback(), as
    psycopg2's does. Parameters bind client-side (%s), as in psycopg2."""

    def __init__(self, tconn):
        self._tconn = tconn
        self._job = tconn._job
        self._cur = psycopg.ClientCursor(self._job.conn)

    def execute(self, query, params=None):
        j = self._job
        kw = control_keyword(query) if isinstance(query, str) else None
        if kw in ("commit", "end"):
            j.commit_point()
            return self
        if kw in ("rollback", "abort"):
            j.rollback_to_cp()
            return self
        if kw is not None:
            return self  # BEGIN: already in a transaction
        try:
            if j.status() == "intrans":
                j.set_timeout()
            self._cur.execute(query, params)
            if self._cur.description is not None and self._cur.rowcount > j.max_rows:
                raise TooManyRows("a statement returned more than %d rows" % j.max_rows)
        except (psycopg.Error, TooManyRows, DeadlineExceeded) as e:
            j.note(e)
            raise
        j.check_open("test")
        if self._tconn._autocommit:
            j.commit_point()
        return self

    def executemany(self, query, params_seq):
        for p in params_seq:
            self.execute(query, p)
        return self

    def close(self):
        self._cur.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __iter__(self):
        return iter(self._cur)

    def __getattr__(self, name):
        return getattr(self._cur, name)


class TestConnection:
    """What a test gets as conn: psycopg2's connection interface over the
    job's transaction, which the test cannot end (commit and rollback move
    and return to a savepoint; close does nothing)."""

    def __init__(self, job):
        self._job = job
        self._autocommit = False

    def cursor(self, *args, **kwargs):
        return TestCursor(self)

    def execute(self, query, params=None):
        return self.cursor().execute(query, params)

    def commit(self):
        self._job.commit_point()

    def rollback(self):
        self._job.rollback_to_cp()

    def close(self):
        pass

    @property
    def closed(self):
        return 0

    @property
    def autocommit(self):
        return self._autocommit

    @autocommit.setter
    def autocommit(self, value):
        self._autocommit = bool(value)

    @property
    def server_version(self):
        return self._job.conn.info.server_version

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.rollback()
        return False

    def __getattr__(self, name):
        return getattr(self._job.conn, name)


HELPERS = {
    "execute_queries": execute_queries,
    "perform_query_on_postgresql_databases": perform_query_on_postgresql_databases,
    "ex_base": ex_base,
    "remove_distinct": remove_distinct,
    "remove_comments": remove_comments,
    "remove_round": remove_round,
    "preprocess_results": preprocess_results,
    "check_sql_function_usage": check_sql_function_usage,
    "performance_compare_by_qep": performance_compare_by_qep,
    "date": date,
}


# --- running a job -------------------------------------------------------------


def result(outcome, reason="", **kw):
    r = {"outcome": outcome, "reason": clip(reason)}
    r.update(kw)
    return r


def compile_tests(sources):
    """Compile every test first: one that does not compile is broken,
    whatever the policy did."""
    codes = []
    for i, src in enumerate(sources):
        name = "<test %d>" % (i + 1)
        try:
            codes.append(compile(src, name, "exec"))
        except SyntaxError as e:
            return None, "test %d does not compile: %s (line %s)" % (i + 1, e.msg, e.lineno)
        except (ValueError, TypeError) as e:
            return None, "test %d does not compile: %s" % (i + 1, e)
    return codes, None


def _test_line(tb, name):
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == name:
            line = lineno
    return line


def run_test(j, i, n, code, pred, sol, db_name, pred_rows):
    """Run test i; return None when it passed, else ("failed"|"broken", reason)."""
    name = "<test %d>" % (i + 1)
    where = "test %d of %d: " % (i + 1, n) if n > 1 else ""
    g = {"__name__": "avtgym_test", "__builtins__": builtins}
    g.update(HELPERS)
    g["pred_query_result"] = pred_rows
    j.test_no = i + 1
    saved = sys.stdout, sys.stdin
    sys.stdout, sys.stdin = _Sink(), io.StringIO("")  # input() must not read the protocol
    failure = None
    try:
        exec(code, g)
        fn = g.get("test_case")
        if not callable(fn):
            return ("broken", "test %d defines no test_case function" % (i + 1))
        try:
            inspect.signature(fn).bind(list(pred), list(sol), db_name, j.test_conn)
        except (TypeError, ValueError) as e:
            return ("broken", "test %d: test_case cannot be called as test_case(pred_sqls, sol_sqls, db_name, conn): %s" % (i + 1, e))
        fn(list(pred), list(sol), db_name, j.test_conn)
    except Fatal:
        raise
    except AssertionError as e:
        msg = str(e).strip()
        if not msg:
            line = _test_line(e.__traceback__, name)
            msg = "an assertion failed" + (" (line %d of the test)" % line if line else "")
        failure = ("failed", where + msg)
    except NameError as e:
        return ("broken", "test %d uses a name that is neither a helper nor a builtin: %s" % (i + 1, e))
    except ImportError as e:
        return ("broken", "test %d imports what the worker lacks: %s" % (i + 1, e))
    except SystemExit as e:
        return ("broken", "test %d called exit(%s)" % (i + 1, e.code))
    except MemoryError:
        raise Fatal("test", "test %d ran out of memory" % (i + 1))
    except Exception as e:
        failure = ("failed", where + "%s: %s" % (type(e).__name__, str(e).strip()))
    finally:
        sys.stdout, sys.stdin = saved
    if j.fatal is not None:
        raise j.fatal
    if j.timeouts:
        msg = where + "a statement timed out: " + j.timeouts[0]
        if failure:
            msg += "; then: " + failure[1][len(where):]
        return ("failed", msg)
    if j.too_many:
        return ("failed", where + j.too_many)
    return failure


def predicted_failure(j, i, e):
    """The result for predicted statement i failing with e (None when the
    failure is the environment's: raise Fatal instead)."""
    if isinstance(e, TooManyRows):
        return result("failed", "statement %d: %s" % (i + 1, e), step="predicted", index=i, kind="too_many_rows")
    if isinstance(e, DeadlineExceeded):
        return result("failed", "statement %d: %s" % (i + 1, e), step="predicted", index=i, kind="timeout")
    if lost_connection(j.conn, e) or sqlstate_of(e) in ("53300",) or sqlstate_of(e).startswith(("3D", "28", "58")):
        raise Fatal("predicted", "the database failed while running statement %d: %s" % (i + 1, e), sqlstate_of(e))
    return result("failed", str(e).strip(), step="predicted", index=i, sqlstate=sqlstate_of(e))


def verify(j, codes):
    req = j.req
    pred = list(req.get("predicted") or [])
    sol = list(req.get("reference") or [])
    db_name = req.get("db_name") or ""
    if not j.stmt_ms:
        # Without a statement limit of the job's, the role's own stays the
        # bound (the deadline may only lower it).
        try:
            row = j.conn.execute("SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout'").fetchone()
            j.stmt_ms = max(int(row[0]), 0) if row else 0
        except psycopg.Error as e:
            raise Fatal("transaction", "reading the role's statement_timeout: %s" % e, sqlstate_of(e))
    j.admin("BEGIN READ WRITE", "transaction", opening=True)
    j.admin("SAVEPOINT %s" % j.guard, "transaction", opening=True)
    for step in ("setup", "prior"):
        for i, sql in enumerate(req.get(step) or []):
            j.env_step(step, i, sql)

    outcome = None
    pred_rows = None
    for i, sql in enumerate(pred):
        kw = control_keyword(sql)
        if two_phase(kw):
            outcome = result("failed", "statement %d: %s is not allowed" % (i + 1, kw.upper()), step="predicted", index=i, kind="denied")
            break
        if kw is not None:
            # BIRD-Interact's harness commits each statement on its own, so
            # that BEGIN, COMMIT and ROLLBACK find nothing to do; here they
            # would end the job's transaction.
            pred_rows = None
            continue
        try:
            pred_rows = j.stream(sql)
        except (psycopg.Error, TooManyRows, DeadlineExceeded) as e:
            outcome = predicted_failure(j, i, e)
            break
        j.check_open("predicted")

    if outcome is None:
        j.admin("SAVEPOINT %s" % j.cp, "test")
        for i, code in enumerate(codes):
            r = run_test(j, i, len(codes), code, pred, sol, db_name, pred_rows)
            if r is not None:
                outcome = result(r[0], r[1])
                break
        if j.status() == "inerror":
            j.rollback_to_cp()
        # After the policy's statements, a cleanup statement that fails is
        # the policy's failure (its SQL may break what cleanup expects).
        for i, sql in enumerate(req.get("cleanup") or []):
            try:
                j.env_step("cleanup", i, sql)
            except Fatal as f:
                if f.dirty or f.index is None:
                    raise
                if outcome is None:
                    outcome = result("failed", f.reason)
                break
        if outcome is None:
            outcome = result("passed")

    # The guard savepoint exists only in the transaction BEGIN opened.
    j.admin("ROLLBACK TO SAVEPOINT %s" % j.guard, "transaction")
    j.admin("ROLLBACK", "transaction")
    return outcome


def run_job(req):
    global _job
    codes, broken = compile_tests(req.get("tests") or [])
    if broken:
        return result("broken", broken)
    j = Job(req)
    _job = j
    try:
        rem = j.remaining_ms()
        timeout = 10 if rem is None else max(2, (rem + 999) // 1000)
        try:
            j.conn = psycopg.connect(req.get("dsn") or "", autocommit=True, prepare_threshold=None,
                                     connect_timeout=timeout, application_name="avtgym-pytests")
        except Exception as e:
            return result("error", "connecting to the database: %s" % str(e).strip(), step="connect", sqlstate=sqlstate_of(e))
        # Values as psycopg2 returns them by default.
        from psycopg.types.string import TextLoader
        for t in ("uuid", "inet", "cidr"):
            j.conn.adapters.register_loader(t, TextLoader)
        j.test_conn = TestConnection(j)
        try:
            return verify(j, codes)
        except Fatal as f:
            r = result("error", f.reason, step=f.step, sqlstate=f.sqlstate, dirty=f.dirty)
            if f.index is not None:
                r["index"] = f.index
            return r
        except psycopg.Error as e:
            return result("error", "the database failed: %s" % str(e).strip(), step="transaction", sqlstate=sqlstate_of(e))
    finally:
        _job = None
        if j.conn is not None:
            try:
                j.conn.close()
            except Exception:
                pass


def _on_term(signum, frame):
    # Stopped by the pool (a job ran past its deadline, or the pool is
    # closing): cancel the running statement so that the server lets go of
    # the transaction at once, then exit.
    j = _job
    if j is not None and j.conn is not None and not j.conn.closed:
        try:
            j.conn.cancel_safe(timeout=0.5)
        except Exception:
            try:
                j.conn.cancel()
            except Exception:
                pass
    os._exit(143)


def main():
    global _proto, psycopg
    _proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    hello = {"hello": PROTOCOL, "python": platform.python_version()}
    if sys.version_info < (3, 8):
        hello["missing"] = "python"
        hello["detail"] = "Python %s is older than 3.8" % platform.python_version()
        send(hello)
        return
    try:
        import psycopg as pg
        import psycopg.types.string  # noqa: F401
    except Exception as e:
        hello["missing"] = "psycopg"
        hello["detail"] = "%s: %s" % (type(e).__name__, e)
        send(hello)
        return
    if not pg.__version__.startswith("3."):
        hello["missing"] = "psycopg"
        hello["detail"] = "psycopg %s is not version 3" % pg.__version__
        send(hello)
        return
    psycopg = pg
    hello["psycopg"] = pg.__version__
    hello["libpq"] = pg.pq.version()
    send(hello)
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            return
        try:
            req = json.loads(line)
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError as e:
            send({"fatal": "the request is not a JSON object: %s" % e})
            return
        try:
            r = run_job(req)
        except Exception as e:
            r = result("error", "the worker failed: %s: %s" % (type(e).__name__, e), step="worker")
        r["id"] = req.get("id")
        send(r)


main()

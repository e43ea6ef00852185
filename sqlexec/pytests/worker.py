# avtgym's Python test worker (package sqlexec/pytests embeds this file and
# starts it with `python3 -c`). It runs BIRD-Interact's Python test_case
# functions, one job at a time, on a real psycopg 3 connection.
#
# Protocol: JSON lines. The worker writes one hello line at start, then reads
# one request per line on stdin (a job, or a lint of test sources) and
# answers it with one line on its own copy of the original stdout (fd 1
# itself is pointed at stderr, so that nothing a test prints can reach the
# protocol). pytests.go documents the fields and the rules of the outcomes.
#
# A job runs on one connection inside one transaction that always ends in
# ROLLBACK: BEGIN READ WRITE, Setup, Prior, the predicted statements, the
# isolation and the guard, each test, Cleanup. Between the statements of the
# tests, savepoints stand in for the commits of BIRD-Interact's harness,
# which commits every statement.
import sys

if sys.path and sys.path[0] in ("", "."):
    del sys.path[0]  # never import from the working directory

import ast
import builtins
import dis
import gc
import importlib
import inspect
import io
import json
import os
import platform
import re
import signal
import time
import traceback
from collections import namedtuple
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal

PROTOCOL = 1
REASON_MAX = 4000
DEFAULT_MAX_ROWS = 10000

psycopg = None  # imported in main(), so that its absence can be reported
_proto = None  # the protocol stream
_job = None  # the running job, for the helpers and the SIGTERM handler
_mem = {"limit": 0, "base": 0, "growth": 0}  # the memory limit (main sets it)


def send(obj):
    _proto.write(json.dumps(obj, ensure_ascii=True) + "\n")
    _proto.flush()


def clip(s, n=REASON_MAX):
    s = str(s)
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def describe(e):
    """An exception as feedback: its message, or its type and message."""
    msg = str(e).strip()
    if isinstance(e, Exception) and not isinstance(e, (psycopg.Error, Limit)):
        return "%s: %s" % (type(e).__name__, msg) if msg else type(e).__name__
    return msg or type(e).__name__


class Fatal(BaseException):
    """The job cannot go on for a reason of the environment (a step of its
    own failed, the transaction ended early). A BaseException, so that a
    test's `except Exception` does not swallow it."""

    def __init__(self, step, reason, sqlstate="", dirty=False, index=None):
        super().__init__(reason)
        self.step, self.reason, self.sqlstate, self.dirty, self.index = step, reason, sqlstate, dirty, index


class Stop(BaseException):
    """The job ends now with this result: its connection broke after the
    policy's statements began (outcome "lost"), or the memory limit broke it
    (the policy's failure). A BaseException, for the reason Fatal is one."""

    def __init__(self, res):
        super().__init__(res.get("reason", ""))
        self.result = res


class TestDeadline(BaseException):
    """Raised in a test's own code once the job's deadline has passed (a
    test that loops or sleeps on what the policy's data made: its timeout).
    A BaseException, so that a test's `except Exception` does not swallow
    it."""


class Limit(Exception):
    """A statement passed a limit of the job; kind names it for the pool."""

    kind = ""


class TooManyRows(Limit):
    """A statement returned more rows than the job allows."""

    kind = "too_many_rows"


class TooManyBytes(Limit):
    """A statement's result passed the job's byte cap."""

    kind = "too_many_bytes"


class DeadlineExceeded(Limit):
    """The job's deadline passed before a statement could start."""

    kind = "timeout"


class _Sink:
    """Where a test's print() goes: nowhere (bounded, unlike a buffer)."""

    def write(self, s):
        return len(s)

    def flush(self):
        pass


# --- memory ----------------------------------------------------------------------


def vm_bytes(field):
    """A field of /proc/self/status (VmData, VmRSS, VmHWM) in bytes; 0 where
    there is no such file."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def set_memory_limit(growth):
    """Bound the worker's private writable memory (RLIMIT_DATA, which Linux
    4.7 and later apply to mmap as well as to the heap) so that its resident
    memory grows by less than growth bytes over what it uses now, after its
    imports: the limit is the data it has now plus growth, less what the
    limit does not count but residence may (data not yet resident, and a
    reserve of an eighth of growth, at most 32 MiB, for the code pages of
    libraries, the stack, page tables). Returns "" or why it could not."""
    if growth <= 0:
        return ""
    if not sys.platform.startswith("linux"):
        return "the memory limit needs Linux (RLIMIT_DATA); this is %s" % sys.platform
    try:
        import resource
    except ImportError as e:
        return "no resource module: %s" % e
    base = vm_bytes("VmData")
    if base <= 0:
        return "/proc/self/status has no VmData"
    nonresident = max(0, base - vm_bytes("RssAnon"))
    limit = base + growth - min(growth // 8, 32 << 20) - nonresident
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        if hard != resource.RLIM_INFINITY and hard < limit:
            limit = hard
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (OSError, ValueError) as e:
        return "setrlimit(RLIMIT_DATA): %s" % e
    _mem.update(limit=limit, base=base, growth=growth)
    return ""


def memory_reason():
    if _mem["growth"]:
        return "the test worker's memory limit was reached (%d MiB over its start): the result or the test's data is too large" % (_mem["growth"] >> 20)
    return "the test worker ran out of memory: the result or the test's data is too large"


def is_oom(e):
    """Whether e says that the worker's memory ran out: a MemoryError, or
    libpq's own out-of-memory errors (client-side: no SQLSTATE; a server
    error that says so has one, and is classified by it)."""
    if isinstance(e, MemoryError):
        return True
    if psycopg is not None and isinstance(e, psycopg.Error) and not sqlstate_of(e):
        msg = str(e)
        return "out of memory" in msg or "cannot allocate memory" in msg
    return False


# --- the byte cap ------------------------------------------------------------------

_NUMBERS = (int, float, Decimal)  # bool is an int


def cell_bytes(v):
    """What a cell counts against the byte cap, as sqlexec.CellBytes counts
    the Go engine's cells: 16 for the cell, plus 8 for a number, or the
    length of a text (UTF-8 bytes) or of bytes; a JSON value or an array
    counts its elements so; other values (dates, times, ...) the length of
    their text."""
    if v is None:
        return 16
    t = type(v)
    if t is str:
        return 16 + (len(v) if v.isascii() else len(v.encode("utf-8", "surrogatepass")))
    if t is bytes or t is bytearray:
        return 16 + len(v)
    if isinstance(v, _NUMBERS):
        return 24
    if t is memoryview:
        return 16 + v.nbytes
    if isinstance(v, (list, tuple, dict)):
        n, stack = 16, [v]
        while stack:
            x = stack.pop()
            items = list(x.keys()) + list(x.values()) if isinstance(x, dict) else x
            for y in items:
                if isinstance(y, (list, tuple, dict)):
                    n += 16
                    stack.append(y)
                else:
                    n += cell_bytes(y)
        return n
    return 16 + len(str(v))


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


def failure_kind(e):
    """(kind, sqlstate) of a statement's failure, for the pool: a limit's
    kind, the memory limit, else the SQLSTATE (the pool classifies it), else
    "execution" (a value that could not be loaded, a client-side error)."""
    if isinstance(e, Limit):
        return e.kind, ""
    if is_oom(e):
        return "too_much_memory", ""
    st = sqlstate_of(e)
    if st:
        return "", st
    return "execution", ""


# psycopg2's cursor.description items.
Column = namedtuple("Column", "name type_code display_size internal_size precision scale null_ok")


class Result:
    """The last result set of a statement: rows (None for a command),
    description, rowcount, statusmessage."""

    def __init__(self, rows=None, description=None, rowcount=-1, status=None):
        self.rows, self.description, self.rowcount, self.status = rows, description, rowcount, status


class Job:
    def __init__(self, req):
        self.req = req
        now = time.monotonic()
        dl = req.get("deadline_ms") or 0
        self.deadline = now + dl / 1000.0 if dl > 0 else None
        self.stmt_ms = max(int(req.get("statement_timeout_ms") or 0), 0)
        self.max_rows = int(req.get("max_rows") or 0) or DEFAULT_MAX_ROWS
        self.max_bytes = max(int(req.get("max_bytes") or 0), 0)
        self.conn = None
        self.test_conn = None
        tag = os.urandom(6).hex()
        self.guard = "avtgym_job_" + tag  # set right after BEGIN; gone only if the transaction was replaced
        self.cp = "avtgym_cp_" + tag  # the tests' commit point
        self.scratch_n = 0
        self.test_no = 0
        self.step = "connect"  # what the job is doing, for its errors
        self.policy_ran = False  # the predicted statements have begun
        self.retire = False  # the worker should be replaced after this job
        self.timeouts = []  # timeouts inside the tests (the policy's failure)
        self.too_many = None  # a test's statement passed a limit: (kind, message)
        self.memory = False  # a test's statement ran out of memory
        self.fatal = None  # a Fatal raised inside a test
        self.stop = None  # a Stop raised inside a test
        self.python_timeout = False  # a test's Python ran past the deadline

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

    def lost(self, e):
        """The connection is closed: raise what that means. The memory limit
        broke it (libpq could not buffer a row): the policy's failure. Once
        the policy's statements have begun: Stop with the outcome "lost"
        (whose fault is the engine's to decide). Before: Fatal."""
        why = str(e).strip() if e is not None else "the connection is closed"
        if e is not None and is_oom(e):
            self.retire = True
            raise Stop(result("failed", memory_reason() + " (%s)" % why, step=self.step, kind="too_much_memory", retire=True))
        if self.policy_ran:
            doing = {"predicted": "running the predicted statements", "test": "running test %d" % self.test_no}.get(self.step, "at the job's step " + self.step)
            raise Stop(result("lost", "the connection to the database broke %s: %s" % (doing, why), step=self.step))
        raise Fatal(self.step, "the connection to the database was lost: %s" % why, sqlstate_of(e))

    def check_open(self, step):
        """Fatal unless the job's transaction is still open."""
        if self.conn.closed:
            self.lost(None)
        if self.status() in ("idle", "unknown"):
            raise Fatal(step, "the transaction ended early (a statement committed or rolled it back): the database may hold this job's changes", dirty=True)

    def admin(self, sql, step, opening=False):
        """Run the job's own transaction bookkeeping; a failure is Fatal.
        Past the opening, a failure means that the transaction was replaced
        or tampered with (a missing savepoint): the job is dirty."""
        try:
            self.conn.execute(sql)
        except psycopg.Error as e:
            st = sqlstate_of(e)
            if self.conn.closed:
                self.lost(e)
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

    def run_sql(self, sql, extended=False, keep=None, limited=True):
        """Run sql and return its last result set (a Result). extended: one
        statement with the extended protocol (two are refused by the
        server); else psycopg2's simple protocol, several statements
        allowed. Rows arrive one at a time (single-row mode) and are loaded
        only while kept: keep is the most rows kept (None: all, 0: none).
        When limited, a result set of more than max_rows rows, or of more
        than max_bytes bytes (cell_bytes), raises TooManyRows or
        TooManyBytes, and the statement is canceled: the worker holds at
        most the cap and one row. Raises psycopg.Error, Limit, and what
        loading a value raises (RecursionError, MemoryError, ...); after
        any of these the connection is idle again, or closed."""
        self.set_timeout()
        conn = self.conn
        pg = conn.pgconn
        S = psycopg.pq.ExecStatus
        enc = conn.info.encoding
        data = sql.encode(enc)
        out = Result()
        with conn.lock:
            if extended:
                pg.send_query_params(data, None)
            else:
                pg.send_query(data)
            pg.set_single_row_mode()
            err = None
            try:
                conn.wait(psycopg.generators.send(pg))
                tx = psycopg.adapt.Transformer(conn)
                first, rows, nrows, nbytes, desc = True, None, 0, 0, None
                unsupported = None
                while True:
                    res = conn.wait(psycopg.generators.fetch(pg))
                    if res is None:
                        break
                    st = res.status
                    if first and st in (S.SINGLE_TUPLE, S.TUPLES_OK):
                        desc = [Column(res.fname(k).decode(enc, "replace"), res.ftype(k), None, res.fsize(k), None, None, None) for k in range(res.nfields)]
                        rows, nrows, nbytes = [], 0, 0
                    if st == S.SINGLE_TUPLE:
                        tx.set_pgresult(res, set_loaders=first)
                        first = False
                        nrows += 1
                        if limited and nrows > self.max_rows:
                            raise TooManyRows("a statement returned more than %d rows" % self.max_rows)
                        if keep is None or nrows <= keep:
                            row = tx.load_row(0, tuple)
                            if limited and self.max_bytes:
                                nbytes += sum(cell_bytes(v) for v in row)
                                if nbytes > self.max_bytes:
                                    raise TooManyBytes("a statement's result passed %d bytes (the byte cap)" % self.max_bytes)
                            rows.append(row)
                            del row
                    elif st in (S.TUPLES_OK, S.COMMAND_OK, S.EMPTY_QUERY):
                        if st == S.TUPLES_OK:
                            out = Result(rows, desc, nrows, res.command_status.decode(enc, "replace"))
                        else:
                            n = res.command_tuples
                            out = Result(None, None, -1 if n is None else n, (res.command_status or b"").decode(enc, "replace"))
                        first, rows, desc = True, None, None
                    elif st == S.COPY_IN:
                        unsupported = "COPY FROM STDIN"
                        pg.put_copy_end(b"COPY FROM STDIN is not supported here")
                        conn.wait(psycopg.generators.send(pg))
                    elif st in (S.COPY_OUT, S.COPY_BOTH):
                        unsupported = "COPY TO STDOUT"
                        while isinstance(conn.wait(psycopg.generators.copy_from(pg)), memoryview):
                            pass
                    elif err is None:
                        # The server's error: the rest of the results (none,
                        # or those the server skipped) are read first.
                        err = psycopg.errors.error_from_result(res, encoding=enc)
                    del res
                if err is not None:
                    raise err
                if unsupported:
                    raise psycopg.NotSupportedError("%s is not supported in the tests' statements" % unsupported)
            except BaseException as e:
                out = None
                self._abandon()
                if err is not None and e is not err and isinstance(e, psycopg.Error):
                    # The first error says why (libpq's "cannot allocate
                    # memory for input buffer" before "the connection is
                    # lost").
                    raise err from None
                raise
        return out

    def _abandon(self):
        """After a statement stopped early: cancel it if it still runs, and
        read what is left of its results, so that the connection is idle
        (or closed)."""
        conn = self.conn
        if conn.closed or conn.info.transaction_status != psycopg.pq.TransactionStatus.ACTIVE:
            return
        try:
            conn.cancel_safe(timeout=5.0)
        except Exception:
            try:
                conn.cancel()
            except Exception:
                pass
        try:
            S = psycopg.pq.ExecStatus
            pg = conn.pgconn
            while True:
                res = conn.wait(psycopg.generators.fetch(pg))
                if res is None:
                    break
                if res.status == S.COPY_IN:
                    pg.put_copy_end(b"canceled")
                    conn.wait(psycopg.generators.send(pg))
                elif res.status in (S.COPY_OUT, S.COPY_BOTH):
                    while isinstance(conn.wait(psycopg.generators.copy_from(pg)), memoryview):
                        pass
                del res
        except Exception:
            pass  # the connection broke: the caller sees it closed

    def env_step(self, step, i, sql):
        """A statement of Setup, Prior, Isolate or Cleanup: any failure is
        Fatal (the caller decides what a failure after the policy's
        statements means). Rows are not loaded."""
        kw = control_keyword(sql)
        if kw is not None:
            return  # the job's transaction is the environment's to end
        try:
            self.run_sql(sql, keep=0, limited=False)
        except Exception as e:
            if self.conn.closed:
                self.lost(e)
            raise Fatal(step, "statement %d of %s failed: %s" % (i + 1, step, describe(e)), sqlstate_of(e), index=i)
        self.check_open(step)

    def note(self, e):
        """Record what a failing statement inside a test means for the job:
        a limit or the memory fails the job whatever the test makes of it;
        a broken connection ends it."""
        if self.conn.closed:
            try:
                self.lost(e)
            except Stop as s:
                self.stop = s
                raise
            except Fatal as f:
                self.fatal = f
                raise
        if isinstance(e, (TooManyRows, TooManyBytes)):
            self.too_many = (e.kind, str(e))
        elif is_timeout(e):
            self.timeouts.append(str(e).strip())
        elif is_oom(e):
            self.memory = True
            self.retire = True

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
            rows = self.run_sql(sql).rows
        except Exception as e:
            self.note(e)
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
    psycopg2's does. Parameters bind client-side (%s), as in psycopg2. A
    statement's rows are streamed under the job's limits and held here."""

    def __init__(self, tconn):
        self._tconn = tconn
        self._job = tconn._job
        self._mog = None
        self._res = None
        self._pos = 0
        self._closed = False
        self.arraysize = 1
        self.query = None

    def mogrify(self, query, params=None):
        if params is None:
            return query
        if self._mog is None:
            self._mog = psycopg.ClientCursor(self._job.conn)
        return self._mog.mogrify(query, params)

    def execute(self, query, params=None):
        j = self._job
        if self._closed:
            raise psycopg.InterfaceError("the cursor is closed")
        self._res, self._pos = None, 0
        kw = control_keyword(query) if isinstance(query, str) else None
        if kw in ("commit", "end"):
            j.commit_point()
            return self
        if kw in ("rollback", "abort"):
            j.rollback_to_cp()
            return self
        if kw is not None:
            return self  # BEGIN: already in a transaction
        if not isinstance(query, str):
            raise TypeError("a query must be a string, not %s" % type(query).__name__)
        sql = self.mogrify(query, params)
        self.query = sql.encode("utf-8", "replace")
        try:
            self._res = j.run_sql(sql)
        except Exception as e:
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

    def _rows(self):
        if self._res is None or self._res.rows is None:
            raise psycopg.ProgrammingError("no results to fetch")
        return self._res.rows

    def fetchone(self):
        rows = self._rows()
        if self._pos >= len(rows):
            return None
        self._pos += 1
        return rows[self._pos - 1]

    def fetchmany(self, size=None):
        rows = self._rows()
        n = self.arraysize if size is None else size
        out = rows[self._pos : self._pos + n]
        self._pos += len(out)
        return out

    def fetchall(self):
        rows = self._rows()
        out = rows[self._pos :]
        self._pos = len(rows)
        return out

    def scroll(self, value, mode="relative"):
        rows = self._rows()
        pos = self._pos + value if mode == "relative" else value
        if not 0 <= pos <= len(rows):
            raise IndexError("scroll out of range")
        self._pos = pos

    def __iter__(self):
        while True:
            r = self.fetchone()
            if r is None:
                return
            yield r

    @property
    def description(self):
        return self._res.description if self._res is not None else None

    @property
    def rowcount(self):
        return self._res.rowcount if self._res is not None else -1

    @property
    def statusmessage(self):
        return self._res.status if self._res is not None else None

    @property
    def rownumber(self):
        return self._pos

    @property
    def lastrowid(self):
        return None

    @property
    def connection(self):
        return self._tconn

    @property
    def closed(self):
        return self._closed

    def setinputsizes(self, sizes):
        pass

    def setoutputsize(self, size, column=None):
        pass

    def close(self):
        self._closed = True
        self._res = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


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


# --- the static check of a test (lint) -----------------------------------------

# Names a test's code may load without defining them: the helpers, the
# predicted rows, what exec puts in the globals, and the builtins.
_GIVEN = set(HELPERS) | {"pred_query_result", "__name__", "__builtins__", "__annotations__"}
# Calls that can bind globals the static check cannot see: a test that
# loads one of these is not checked for undefined names.
_DYNAMIC = {"globals", "exec", "eval", "vars", "locals"}
_LOADS = {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"}
_STORES = {"STORE_NAME", "STORE_GLOBAL"}
_lint_cache = {}


def _code_objects(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            yield from _code_objects(c)


def _line(ins, last):
    ln = getattr(ins, "line_number", None)  # Python 3.13
    if ln is None:
        pos = getattr(ins, "positions", None)  # Python 3.11
        ln = pos.lineno if pos is not None else None
    if ln is None and isinstance(ins.starts_line, int) and not isinstance(ins.starts_line, bool):
        ln = ins.starts_line
    return ln or last


def _guarded_imports(tree):
    """The import statements of tree that a try statement catching
    ImportError guards (an optional import: not the lint's to judge)."""
    catches = {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"}
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        ok = False
        for h in node.handlers:
            names = []
            if h.type is None:
                ok = True
            elif isinstance(h.type, ast.Tuple):
                names = h.type.elts
            else:
                names = [h.type]
            ok = ok or any(isinstance(x, ast.Name) and x.id in catches for x in names)
        if ok:
            for stmt in node.body:
                for sub in ast.walk(stmt):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        out.add(id(sub))
    return out


def _check_imports(tree):
    guarded = _guarded_imports(tree)
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                try:
                    importlib.import_module(a.name)
                except Exception as e:
                    return "imports what the worker lacks (line %d): %s: %s" % (node.lineno, type(e).__name__, e)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                return "uses a relative import (line %d): a test is not in a package" % node.lineno
            try:
                mod = importlib.import_module(node.module)
            except Exception as e:
                return "imports what the worker lacks (line %d): %s: %s" % (node.lineno, type(e).__name__, e)
            for a in node.names:
                if a.name == "*" or hasattr(mod, a.name):
                    continue
                try:
                    importlib.import_module(node.module + "." + a.name)
                except Exception:
                    return "imports what the worker lacks (line %d): cannot import name %r from %r" % (node.lineno, a.name, node.module)
    return None


def _check_signature(tree):
    """A problem with the top-level def test_case, if the test has one
    that is not decorated (a decorator may change what is called)."""
    defs = [s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == "test_case"]
    if not defs:
        return None
    d = defs[-1]
    if isinstance(d, ast.AsyncFunctionDef):
        return "test_case is a coroutine function (async def): calling it would run nothing"
    if d.decorator_list:
        return None
    # The signature alone: defaults and annotations (expressions) become
    # None, the body pass, so that nothing of the test runs here.
    args = d.args
    a = ast.arguments(
        posonlyargs=[ast.arg(arg=x.arg) for x in getattr(args, "posonlyargs", [])],
        args=[ast.arg(arg=x.arg) for x in args.args],
        vararg=ast.arg(arg=args.vararg.arg) if args.vararg else None,
        kwonlyargs=[ast.arg(arg=x.arg) for x in args.kwonlyargs],
        kw_defaults=[None if x is None else ast.Constant(value=None) for x in args.kw_defaults],
        kwarg=ast.arg(arg=args.kwarg.arg) if args.kwarg else None,
        defaults=[ast.Constant(value=None) for _ in args.defaults],
    )
    stub = ast.Module(body=[ast.FunctionDef(name="test_case", args=a, body=[ast.Pass()], decorator_list=[], returns=None, type_comment=None, type_params=[])], type_ignores=[])
    ast.fix_missing_locations(stub)
    ns = {}
    exec(compile(stub, "<signature>", "exec"), ns)
    try:
        inspect.signature(ns["test_case"]).bind(1, 2, 3, 4)
    except TypeError as e:
        return "test_case cannot be called as test_case(pred_sqls, sol_sqls, db_name, conn): %s (line %d)" % (e, d.lineno)
    return None


def _lint(src, name):
    """(code, None) for a test that can run, or (None, problem): it does
    not compile, binds no test_case, cannot be called with four arguments,
    loads a global name nothing defines, or imports what is not here."""
    if not isinstance(src, str):
        return None, "is not text"
    try:
        tree = ast.parse(src, name)
        code = compile(tree, name, "exec")
    except SyntaxError as e:
        return None, "does not compile: %s (line %s)" % (e.msg, e.lineno)
    except (ValueError, TypeError, RecursionError, MemoryError) as e:
        return None, "does not compile: %s: %s" % (type(e).__name__, e)
    defined, loads, star, dynamic = set(), [], False, False
    for co in _code_objects(code):
        line = getattr(co, "co_firstlineno", 0)
        for ins in dis.get_instructions(co):
            line = _line(ins, line)
            op = ins.opname
            if op in _LOADS:
                loads.append((ins.argval, line))
                if ins.argval in _DYNAMIC:
                    dynamic = True
            elif op in _STORES:
                if co is code or op == "STORE_GLOBAL" or not (co.co_flags & inspect.CO_OPTIMIZED):
                    defined.add(ins.argval)  # module level, `global`, or a class body
            elif op == "IMPORT_STAR":
                star = True
    if "test_case" not in defined:
        return None, "defines no test_case function"
    if not star and not dynamic:
        missing, seen = [], set()
        for n, ln in loads:
            if n in defined or n in _GIVEN or hasattr(builtins, n) or n in seen:
                continue
            seen.add(n)
            missing.append("%s (line %d)" % (n, ln))
        if missing:
            return None, "uses a name that is neither defined by the test nor a helper nor a builtin: " + ", ".join(missing[:5])
    for check in (_check_signature, _check_imports):
        p = check(tree)
        if p:
            return None, p
    return code, None


def lint(i, src):
    """The compiled test i (0-based), or its problem ("test N ..."), cached
    by source."""
    key = (i, src)
    hit = _lint_cache.get(key)
    if hit is None:
        if len(_lint_cache) >= 512:
            _lint_cache.clear()
        hit = _lint(src, "<test %d>" % (i + 1))
        _lint_cache[key] = hit
    code, problem = hit
    return code, (None if problem is None else "test %d %s" % (i + 1, problem))


# --- running a job -------------------------------------------------------------


def result(outcome, reason="", **kw):
    r = {"outcome": outcome, "reason": clip(reason)}
    r.update(kw)
    return r


def _test_line(tb, name):
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == name:
            line = lineno
    return line


def run_test(j, i, n, code, pred, sol, db_name, pred_rows):
    """Run test i; return None when it passed, else (reason, kind). The
    test is known to be well-formed (lint): whatever it raises now, the
    policy's SQL or data led there, and the test fails."""
    name = "<test %d>" % (i + 1)
    where = "test %d of %d: " % (i + 1, n) if n > 1 else ""
    g = {"__name__": "avtgym_test", "__builtins__": builtins}
    g.update(HELPERS)
    g["pred_query_result"] = pred_rows
    j.test_no = i + 1
    saved = sys.stdout, sys.stdin
    sys.stdout, sys.stdin = _Sink(), io.StringIO("")  # input() must not read the protocol
    failure = None
    alarm = j.deadline is not None and hasattr(signal, "setitimer")
    try:
        if alarm:
            # Past the deadline, every 50 ms until the test ends: _on_alarm
            # raises TestDeadline when the test's own code runs.
            signal.setitimer(signal.ITIMER_REAL, max(j.deadline - time.monotonic(), 0.001), 0.05)
        exec(code, g)
        fn = g.get("test_case")
        if not callable(fn):
            failure = (where + "the test's module code left no test_case function to call", "")
        else:
            try:
                inspect.signature(fn).bind(list(pred), list(sol), db_name, j.test_conn)
            except (TypeError, ValueError) as e:
                failure = (where + "test_case cannot be called as test_case(pred_sqls, sol_sqls, db_name, conn): %s" % e, "")
            else:
                fn(list(pred), list(sol), db_name, j.test_conn)
    except (Fatal, Stop):
        raise
    except AssertionError as e:
        msg = str(e).strip()
        if not msg:
            line = _test_line(e.__traceback__, name)
            msg = "an assertion failed" + (" (line %d of the test)" % line if line else "")
        failure = (where + msg, "")
    except MemoryError:
        j.memory = j.retire = True
    except TestDeadline:
        j.python_timeout = True
    except SystemExit as e:
        failure = (where + "the test called exit(%s)" % ("" if e.code is None else e.code), "")
    except BaseException as e:
        msg = str(e).strip()
        failure = (where + ("%s: %s" % (type(e).__name__, msg) if msg else type(e).__name__), "")
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout, sys.stdin = saved
    if j.stop is not None:
        raise j.stop
    if j.fatal is not None:
        raise j.fatal
    if j.memory:
        return (where + memory_reason(), "too_much_memory")
    if j.python_timeout:
        return (where + "the test was still running when the verification's time limit was reached", "timeout")
    if j.timeouts:
        msg = where + "a statement timed out: " + j.timeouts[0]
        if failure:
            msg += "; then: " + failure[0][len(where):]
        return (msg, "timeout")
    if j.too_many:
        return (where + j.too_many[1], j.too_many[0])
    return failure


def statement_failure(j, step, i, e, label=None):
    """The policy's failed result for statement i of step failing with e
    (the connection is still open)."""
    kind, st = failure_kind(e)
    if kind == "too_much_memory":
        j.retire = True
        return result("failed", "statement %d: %s" % (i + 1, memory_reason()), step=step, index=i, kind=kind, retire=True)
    if kind == "execution" and not isinstance(e, psycopg.Error):
        msg = "statement %d: its result could not be read: %s" % (i + 1, describe(e))
    elif isinstance(e, Limit):
        msg = "statement %d: %s" % (i + 1, e)
    else:
        msg = describe(e)
        if st:
            # As the Go engine quotes it: the code tells the policy what
            # kind of error its SQL raised.
            msg += " (SQLSTATE %s)" % st
    if label:
        msg = label + msg
    return result("failed", msg, step=step, index=i, kind=kind, sqlstate=st)


def verify(j, codes):
    req = j.req
    pred = list(req.get("predicted") or [])
    sol = list(req.get("reference") or [])
    db_name = req.get("db_name") or ""
    j.step = "transaction"
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
        j.step = step
        for i, sql in enumerate(req.get(step) or []):
            j.env_step(step, i, sql)

    outcome = None
    pred_rows = None
    j.step = "predicted"
    j.policy_ran = True
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
            pred_rows = j.run_sql(sql, extended=True).rows
        except Exception as e:
            # Whatever the server answered on an open connection, and
            # whatever loading the rows raised, is the policy's failure.
            if j.conn.closed:
                j.lost(e)
            outcome = statement_failure(j, "predicted", i, e)
            break
        j.check_open("predicted")

    # The tests read the database, not what the policy's session made to
    # shadow it: the isolation statements, then the guard. They run on the
    # state the policy's statements left, so their failure is the policy's.
    if outcome is None:
        j.step = "isolate"
        for i, sql in enumerate(req.get("isolate") or []):
            try:
                j.run_sql(sql, keep=0, limited=False)
            except Exception as e:
                if j.conn.closed:
                    j.lost(e)
                outcome = statement_failure(j, "isolate", i, e, "isolating the tests from the predicted statements' session failed: ")
                break
            j.check_open("isolate")
    if outcome is None and req.get("guard"):
        j.step = "guard"
        try:
            res = j.run_sql(req["guard"], extended=True, keep=1, limited=False)
        except Exception as e:
            if j.conn.closed:
                j.lost(e)
            outcome = statement_failure(j, "guard", 0, e, "checking for objects that shadow built-in ones failed: ")
        else:
            j.check_open("guard")
            if res.rows:
                first = res.rows[0][0] if res.rows[0] else None
                outcome = result("failed", str(first), step="guard", kind="denied")

    if outcome is None:
        j.step = "test"
        j.admin("SAVEPOINT %s" % j.cp, "test")
        for i, code in enumerate(codes):
            r = run_test(j, i, len(codes), code, pred, sol, db_name, pred_rows)
            if r is not None:
                outcome = result("failed", r[0], step="test", index=i, kind=r[1])
                break
        if j.status() == "inerror":
            j.rollback_to_cp()
        # After the policy's statements, a cleanup statement that fails is
        # the policy's failure (its SQL may break what cleanup expects).
        j.step = "cleanup"
        for i, sql in enumerate(req.get("cleanup") or []):
            try:
                j.env_step("cleanup", i, sql)
            except Fatal as f:
                if f.dirty or f.index is None:
                    raise
                if outcome is None:
                    outcome = result("failed", f.reason, step="cleanup", index=i)
                break
        if outcome is None:
            outcome = result("passed")

    # The guard savepoint exists only in the transaction BEGIN opened.
    j.step = "transaction"
    j.admin("ROLLBACK TO SAVEPOINT %s" % j.guard, "transaction")
    j.admin("ROLLBACK", "transaction")
    return outcome


def run_job(req):
    global _job
    codes = []
    for i, src in enumerate(req.get("tests") or []):
        code, problem = lint(i, src)
        if problem:
            return result("broken", problem)
        codes.append(code)
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
            r = verify(j, codes)
        except Stop as s:
            r = s.result
        except Fatal as f:
            r = result("error", f.reason, step=f.step, sqlstate=f.sqlstate, dirty=f.dirty)
            if f.index is not None:
                r["index"] = f.index
        except MemoryError:
            # Out of memory outside a statement of the policy's or a test's:
            # after the policy's statements began, still their doing.
            j.retire = True
            if not j.policy_ran:
                raise
            r = result("failed", memory_reason(), step=j.step, kind="too_much_memory")
        except psycopg.Error as e:
            if j.conn.closed and j.policy_ran:
                r = result("lost", "the connection to the database broke: %s" % str(e).strip(), step=j.step)
            else:
                r = result("error", "the database failed: %s" % str(e).strip(), step="transaction", sqlstate=sqlstate_of(e))
        if j.retire:
            r["retire"] = True
        return r
    finally:
        _job = None
        if j.conn is not None:
            try:
                j.conn.close()
            except Exception:
                pass


def run_lint(req):
    problems = []
    for i, src in enumerate(req.get("lint") or []):
        _, problem = lint(i, src)
        problems.append(problem or "")
    return {"outcome": "linted", "problems": problems}


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


def _on_alarm(signum, frame):
    # The job's deadline has passed while a test runs: stop the test, but
    # only in its own code (never inside the job's bookkeeping or psycopg;
    # the timer fires again until the test's code runs).
    j = _job
    if j is None or frame is None or not frame.f_code.co_filename.startswith("<test "):
        return
    j.python_timeout = True
    raise TestDeadline("the verification's time limit was reached")


def _growth_arg():
    for a in sys.argv[1:]:
        if a.startswith("--max-memory="):
            try:
                return int(a.split("=", 1)[1])
            except ValueError:
                return 0
    return 0


def main():
    global _proto, psycopg
    _proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    signal.signal(signal.SIGTERM, _on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, _on_alarm)
    hello = {"hello": PROTOCOL, "python": platform.python_version()}
    if sys.version_info < (3, 8):
        hello["missing"] = "python"
        hello["detail"] = "Python %s is older than 3.8" % platform.python_version()
        send(hello)
        return
    try:
        import psycopg as pg
        import psycopg.adapt  # noqa: F401
        import psycopg.generators  # noqa: F401
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
    # The memory limit, over what the interpreter and psycopg use now.
    gc.collect()
    why = set_memory_limit(_growth_arg())
    hello["memory_limit"] = _mem["limit"]
    hello["memory_base"] = _mem["base"]
    if why:
        hello["memory_unlimited"] = why
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
            r = run_lint(req) if "lint" in req else run_job(req)
        except MemoryError:
            r = result("error", "the worker failed: %s" % memory_reason(), step="worker")
        except Exception as e:
            r = result("error", "the worker failed: %s: %s" % (type(e).__name__, e), step="worker")
        if _mem["growth"] and vm_bytes("VmData") - _mem["base"] > _mem["growth"] // 4:
            gc.collect()
            if vm_bytes("VmData") - _mem["base"] > _mem["growth"] // 4:
                r["retire"] = True  # what it keeps would shrink the next jobs' room
        r["id"] = req.get("id")
        send(r)


main()

// Package pytests runs BIRD-Interact's Python tests (the test_case functions
// of Management tasks) for sqlexec: a Pool of long-lived Python worker
// processes, each running one sqlexec.PyJob at a time on a real psycopg 3
// connection, implements sqlexec.PyRunner.
//
// # The worker
//
// The worker is worker.py, embedded in the binary and started as
// `python3 -c <script>` (Config.Python names the interpreter). It needs
// Python 3.8 or later with psycopg 3:
//
//	pip install 'psycopg[binary]>=3.2,<4'
//
// Only corpora with Python tests need it; Check says clearly when it is
// missing (ErrNoPython), so that serve can say so at start.
//
// A job runs on one connection to PyJob.DSN, inside one transaction that
// always ends in ROLLBACK: BEGIN READ WRITE (the policy role's default
// transaction is read-only), Setup, Prior, the predicted statements,
// Isolate, Guard, each test, Cleanup. Every statement runs under SET LOCAL
// statement_timeout: the job's StatementTimeout, or what is left of its
// Deadline when that is less, so that SQL which runs too long is the
// policy's timeout, never a hung worker. SET is a command, not a call of
// set_config, so it works for a policy role whose EXECUTE on set_config is
// revoked (a test checks it). The predicted statements run one each with
// the extended protocol (a string holding two statements is refused by the
// server, KindSyntax). They cannot end the job's transaction: BEGIN, START
// TRANSACTION, COMMIT, END, ROLLBACK and ABORT are skipped, as they find
// nothing to do in BIRD-Interact's harness, which commits each statement on
// its own; two-phase commit (PREPARE TRANSACTION, COMMIT/ROLLBACK PREPARED)
// is KindDenied. A savepoint the job sets after BEGIN, under a random name,
// proves at the end that the transaction was never replaced (ErrDirty
// otherwise). Sequences are not transactional: a job that calls nextval
// leaves them advanced, and restoring them is the caller's (the engine
// resets or re-clones its private copies).
//
// After the predicted statements, PyJob.Isolate runs (the engine's DISCARD
// TEMP and a pinned search path), so that the tests read the database and
// not, say, a temporary view named pg_indexes that the policy made; then
// PyJob.Guard, whose first row, if any, fails the job (KindDenied, that
// row's first column as the reason) and the tests do not run. Both run on
// the state the policy's statements left, which can make them fail (a
// deferred trigger event on a temporary table makes DISCARD TEMP fail): so
// their failure on an open connection is the policy's failure too, Kind
// from the SQLSTATE, not an error (the Go engine counts its isolation and
// guard phases the same way).
//
// # Limits
//
// Every statement's rows arrive one at a time (libpq's single-row mode),
// for the predicted statements, the tests' (helpers and cursor alike),
// and the environment's steps, whose rows are read and dropped. A
// statement of the policy's or a test's returns at most PyJob.MaxRows rows
// and PyJob.MaxBytes bytes (cells counted as sqlexec.CellBytes counts
// them: 16 a cell, 8 more for a number, a text's UTF-8 bytes, the elements
// of a JSON value or an array so, other values their text; 0: no cap); past
// either the statement is canceled and fails (KindTooManyRows,
// KindTooManyBytes), so that the worker holds at most the cap and one row.
// A row is counted once it is loaded: one too large to be held at all
// reaches the memory limit instead.
//
// Each worker has a memory limit (Config.MaxWorkerMemory, default 512 MiB
// of growth): at start, once psycopg is imported, it sets RLIMIT_DATA
// (Linux 4.7 and later count mmap in it) to its data then, plus the growth,
// less a reserve for what RLIMIT_DATA does not count, so that its resident
// memory grows by less than MaxWorkerMemory. A job that reaches it (Python's
// MemoryError, or libpq's "out of memory for query result" and "cannot
// allocate memory for input buffer", which closes the connection) is the
// policy's failure, KindTooMuchMemory with a reason that says the limit was
// reached; the worker answers, and the pool replaces it (Stats.Retired),
// as it does a worker that keeps more than a quarter of its growth after a
// job. Elsewhere than on Linux there is no limit (a warning is logged).
//
// The tests run as BIRD-Interact's harness runs them (its
// evaluation/src single_instance_eval and wrapper scripts, and
// postgresql_utils.py and test_utils.py beside them): each test's source is
// executed in fresh globals holding the helpers below and the builtins, and
// test_case(pred_sqls, sol_sqls, db_name, conn) is called; its return value
// is ignored, an AssertionError or any other exception fails the job. The
// helpers, written here from their documented behaviour:
//
//   - execute_queries(queries, db_name, conn, logger=None, section_title="")
//     runs statements in order until one fails and returns (rows of the last
//     statement that succeeded, execution_error, timeout_error), the flags as
//     booleans; a string is one statement.
//   - perform_query_on_postgresql_databases(query, db_name, conn=None) runs
//     one statement and returns (rows or None, conn); it raises the error.
//   - ex_base(pred_sqls, sol_sqls, db_name, conn, conditions=None) compares
//     the last statements' rows after preprocess_results (as lists when
//     conditions["order"], else as sets): 1 or 0.
//   - preprocess_results(results, decimal_places=2), remove_distinct,
//     remove_comments, remove_round, check_sql_function_usage(sqls,
//     required_keywords), performance_compare_by_qep(old_sqls, sol_sqls,
//     db_name, conn), pred_query_result (the rows of the last predicted
//     statement) and date (datetime.date).
//
// BIRD-Interact's harness commits every statement; here a savepoint stands
// in for each commit, so a failing statement undoes only itself and never
// aborts the job's transaction. conn is a psycopg2-style connection over
// that transaction: cursor(), execute(), commit() (a new savepoint),
// rollback() (back to it), close() (nothing): a test cannot end the
// transaction. The tests' statements run with the simple protocol, as
// psycopg2 runs them (a string may hold several; the last one's rows are
// the result). Values come back as psycopg2 returns them (uuid and inet as
// text; bytea as bytes rather than memoryview). A statement of a test that
// passes a limit, or times out, fails the job whatever the test makes of
// it, and so does a test whose Python runs on past the job's deadline: the
// worker raises a BaseException in the test's own code then (never inside
// its own bookkeeping), and the test fails, KindTimeout.
//
// # Outcomes
//
// The rule: ERROR is decided only by facts the policy cannot forge;
// whatever the policy's SQL, its data or its text causes is its scored
// outcome.
//
//   - Broken (PyResult.Broken, a corpus problem) is decided before the job
//     runs, from the test's source alone (the lint; Pool.Lint runs it on
//     its own, for corpus check): the source does not compile; it binds no
//     test_case at its top level; its top-level def test_case cannot be
//     called with four positional arguments, or is async; it loads a
//     global name (LOAD_GLOBAL or LOAD_NAME in any of its code objects)
//     that nothing defines: not its top level (an assignment, def, class
//     or import, on any branch), a global statement, a helper,
//     pred_query_result, nor a builtin (a test that calls globals, exec,
//     eval, vars or locals, or imports *, is not judged on names); or it
//     imports a module, or a name from one, that the worker lacks (tried
//     at lint time, unless a try statement catching ImportError guards the
//     import), or imports relatively.
//   - Failed (Passed false, Reason, and Kind where one fits): everything a
//     well-formed test does at run time, since the policy's data led there:
//     an assertion, any exception (a NameError or UnboundLocalError the
//     lint did not predict, a RecursionError, an ImportError of a computed
//     name, SystemExit), a limit; a predicted statement that fails (Kind
//     from its SQLSTATE), or whose rows cannot be loaded (a jsonb value
//     nested past Python's recursion limit, a date Python cannot hold:
//     KindExecution); a Cleanup statement that fails, unless a test failed
//     first (the policy's SQL may break what cleanup expects; the contract
//     of sqlexec.Job.Cleanup). An error the server returns on a connection
//     that is still open is the policy's whatever its SQLSTATE: a policy
//     can raise 57P01, 08006, 3D000 or 53300 itself; such codes are never
//     KindUnavailable or KindBusy here.
//   - Lost (PyResult.Lost): the connection actually broke (psycopg's
//     conn.closed) once the predicted statements had begun, other than by
//     the memory limit; whose fault that is the engine decides by probing
//     the server.
//   - An error (*JobError, or ErrWorker): the environment's own steps
//     failed: connecting, BEGIN, Setup or Prior (or the connection lost
//     before the predicted statements), the job's savepoints, the ROLLBACK,
//     the transaction ended early (ErrDirty). A worker that crashes, writes
//     what is not the protocol, or is still busy when the job's deadline
//     has passed by Config.KillGrace (Python that swallows even the
//     deadline's BaseException) is killed and replaced and the job's error
//     wraps ErrWorker; it is never a verdict.
//
// # Trust
//
// Test code is corpus content and trusted like the corpus: it runs in the
// worker with the worker's privileges (the server's user, its files, its
// network), without a sandbox; what limits it on the database is only the
// role of PyJob.DSN. Load Python tests only from corpora you trust; the
// lint imports the modules they import. The policy's SQL, on the other
// hand, is hostile and runs only as statements on that connection.
//
// # Protocol
//
// The worker is started as `python3 -c <script> --max-memory=N`. JSON
// lines on its stdin and on a private copy of its stdout (fd 1 itself is
// pointed at stderr, so that what a test prints cannot reach the protocol;
// print() output is discarded). The worker first writes
// {"hello":1,"python":..,"psycopg":..,"memory_limit":..} or, when it cannot
// work, {"hello":1,"missing":"psycopg"|"python","detail":..}. Then, for
// each request line (a job, see request, or a lint, see lintRequest), one
// response line (see response) with the same id. The worker's stderr is
// logged.
//
// # The pool
//
// Workers start on demand, up to Config.Workers, and stay: a job waits for
// an idle worker, or starts one while there are fewer than Config.Workers.
// Lazy start keeps servers whose corpora have no Python tests free of
// Python processes; Check starts the first one, so that a server that needs
// them finds a missing dependency at start and has one worker warm. A
// worker that died while idle is replaced on the next job; one that ran
// Config.MaxJobsPerWorker jobs is retired. Close stops them all (register it
// as a drain hook: app.OnDrain(pool.Close)).
//
// The pool is a set of processes, not of goroutines, so it is not built on
// internal/parallel. Deadlines are enforced against a real process with
// real timers; there is no injected clock.
package pytests

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"avtgym/sqlexec"
)

//go:embed worker.py
var workerScript string

// Install is the command that installs the worker's Python dependency.
const Install = "pip install 'psycopg[binary]>=3.2,<4'"

// ErrNoPython is the error (wrapped) when the worker cannot start because
// python3 or psycopg 3 is missing.
var ErrNoPython = errors.New("the Python tests need python3 with psycopg 3: " + Install)

// ErrWorker is wrapped by the error of a job whose worker failed: it crashed,
// wrote what is not the protocol, or hung past the job's deadline. The worker
// was killed and will be replaced; the job has no verdict.
var ErrWorker = errors.New("the Python test worker failed")

// ErrDirty is matched (errors.Is) by the error of a job whose transaction was
// ended or replaced before the job's ROLLBACK: the database may hold the
// job's changes, and the caller must restore it before its next use.
var ErrDirty = errors.New("the job's transaction ended early: the database may hold its changes")

// ErrClosed is the error of Run and Check after Close.
var ErrClosed = errors.New("pytests: the pool is closed")

// Defaults of Config.
const (
	DefaultKillGrace        = 2 * time.Second
	DefaultStartTimeout     = 30 * time.Second
	DefaultDeadline         = 5 * time.Minute
	DefaultMaxRows          = 10000
	DefaultMaxJobsPerWorker = 1000
	// DefaultMaxWorkerMemory is the memory a worker may grow by.
	DefaultMaxWorkerMemory = 512 << 20
	// lintDeadline bounds a Lint (imports included).
	lintDeadline = time.Minute
)

// Config configures a Pool. Zero values mean the defaults.
type Config struct {
	// Python is the interpreter; default "python3" (looked up in PATH).
	Python string
	// Env is added to the workers' environment (the server's own, e.g.
	// "PYTHONPATH=...").
	Env []string
	// Workers is the most worker processes at once; default GOMAXPROCS.
	Workers int
	// KillGrace is how long past a job's deadline its worker may still
	// answer before it is killed; default DefaultKillGrace. The worker
	// stops SQL at the deadline itself; only Python that runs on (a test
	// stuck in a loop or a sleep) outlives it.
	KillGrace time.Duration
	// StartTimeout bounds a worker's start (the interpreter and psycopg
	// importing); default DefaultStartTimeout.
	StartTimeout time.Duration
	// DefaultDeadline bounds a job whose PyJob.Deadline is zero; default
	// DefaultDeadline.
	DefaultDeadline time.Duration
	// MaxRows is the bound of a job whose PyJob.MaxRows is zero; default
	// DefaultMaxRows (BIRD-Interact's own).
	MaxRows int
	// MaxJobsPerWorker retires a worker after this many jobs (test code
	// may leave state behind in the interpreter); default
	// DefaultMaxJobsPerWorker, negative for never.
	MaxJobsPerWorker int
	// MaxWorkerMemory bounds each worker's memory, in bytes over what it
	// uses once started (the interpreter and psycopg loaded): on Linux the
	// worker sets RLIMIT_DATA (private writable memory, heap and mmap) to
	// that baseline plus MaxWorkerMemory. A job that reaches it is the
	// policy's failure (KindTooMuchMemory), and the worker is replaced.
	// Default DefaultMaxWorkerMemory (512 MiB); negative for no limit.
	// Each worker has its own: Workers × MaxWorkerMemory is the bound of
	// them all. Elsewhere than on Linux there is no limit (logged).
	MaxWorkerMemory int64
	// Logger receives the workers' stderr and their starts and kills; nil
	// means none.
	Logger *zap.Logger
}

// Validate checks the configuration.
func (c Config) Validate() error {
	switch {
	case c.Workers < 0:
		return fmt.Errorf("pytests: Workers is %d; it must not be negative", c.Workers)
	case c.KillGrace < 0:
		return fmt.Errorf("pytests: KillGrace is %v; it must not be negative", c.KillGrace)
	case c.StartTimeout < 0:
		return fmt.Errorf("pytests: StartTimeout is %v; it must not be negative", c.StartTimeout)
	case c.DefaultDeadline < 0:
		return fmt.Errorf("pytests: DefaultDeadline is %v; it must not be negative", c.DefaultDeadline)
	case c.MaxRows < 0:
		return fmt.Errorf("pytests: MaxRows is %d; it must not be negative", c.MaxRows)
	}
	return nil
}

func (c *Config) defaults() {
	if c.Python == "" {
		c.Python = "python3"
	}
	if c.Workers == 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	if c.KillGrace == 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.DefaultDeadline == 0 {
		c.DefaultDeadline = DefaultDeadline
	}
	if c.MaxRows == 0 {
		c.MaxRows = DefaultMaxRows
	}
	if c.MaxJobsPerWorker == 0 {
		c.MaxJobsPerWorker = DefaultMaxJobsPerWorker
	}
	if c.MaxWorkerMemory == 0 {
		c.MaxWorkerMemory = DefaultMaxWorkerMemory
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Pool runs PyJobs in worker processes. It is safe for concurrent use.
type Pool struct {
	cfg   Config
	log   *zap.Logger
	slots chan struct{} // one token per job running (or worker starting)

	mu      sync.Mutex
	idle    []*worker
	all     map[*worker]struct{}
	closed  bool
	closing chan struct{}
	running sync.WaitGroup // Runs and Checks in flight

	started, killed, retired atomic.Int64
	nextID                   atomic.Int64
}

var _ sqlexec.PyRunner = (*Pool)(nil)

// New returns a pool; it starts no process (see Check).
func New(cfg Config) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	return &Pool{
		cfg:     cfg,
		log:     cfg.Logger,
		slots:   make(chan struct{}, cfg.Workers),
		all:     map[*worker]struct{}{},
		closing: make(chan struct{}),
	}, nil
}

// Stats counts the pool's workers.
type Stats struct {
	// Started and Killed count the workers started and killed so far;
	// Retired those replaced after a job for their memory.
	Started, Killed, Retired int64
	// Live is the number of worker processes now, Idle those waiting for a
	// job.
	Live, Idle int
}

// Stats returns the pool's counts.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Started: p.started.Load(), Killed: p.killed.Load(), Retired: p.retired.Load(), Live: len(p.all), Idle: len(p.idle)}
}

// Check makes sure a worker can run: it starts one (if none is idle) and
// keeps it for the next job. Its error wraps ErrNoPython when python3 or
// psycopg 3 is missing.
func (p *Pool) Check(ctx context.Context) error {
	if err := p.enter(); err != nil {
		return err
	}
	defer p.running.Done()
	if err := p.acquire(ctx); err != nil {
		return err
	}
	defer p.release()
	w, err := p.take(ctx)
	if err != nil {
		return err
	}
	p.put(w)
	return nil
}

// Run runs j in a worker. It returns an error only for a failure of the
// environment (see the package documentation); what the policy's SQL did is
// in the PyResult. The job's deadline is j.Deadline (else
// Config.DefaultDeadline), or ctx's when that is sooner: SQL still running
// then is the policy's timeout. Canceling ctx kills the worker (the server
// then rolls the transaction back) and returns an error. With every worker
// busy, Run waits for one until ctx ends (KindBusy).
func (p *Pool) Run(ctx context.Context, j sqlexec.PyJob) (sqlexec.PyResult, error) {
	if j.DSN == "" {
		return sqlexec.PyResult{}, errors.New("pytests: the job has no DSN")
	}
	if err := p.enter(); err != nil {
		return sqlexec.PyResult{}, err
	}
	defer p.running.Done()
	if err := p.acquire(ctx); err != nil {
		return sqlexec.PyResult{}, err
	}
	defer p.release()

	// The job's end: its deadline, or the caller's when that is sooner.
	now := time.Now()
	d := j.Deadline
	if d <= 0 {
		d = p.cfg.DefaultDeadline
	}
	end := now.Add(d)
	if cd, ok := ctx.Deadline(); ok && cd.Before(end) {
		end = cd
	}
	if !end.After(now) {
		return sqlexec.PyResult{}, sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded, "the job's deadline passed before it started")
	}

	w, err := p.take(ctx)
	if err != nil {
		return sqlexec.PyResult{}, err
	}
	req := p.requestFor(j, end)
	resp, err := w.do(ctx, req.ID, req, end.Add(p.cfg.KillGrace))
	if err != nil {
		p.discard(w)
		return sqlexec.PyResult{}, err
	}
	p.after(w, resp)
	return resp.result()
}

// requestFor is j as the worker reads it, with end as its deadline.
func (p *Pool) requestFor(j sqlexec.PyJob, end time.Time) request {
	maxRows := j.MaxRows
	if maxRows <= 0 {
		maxRows = p.cfg.MaxRows
	}
	req := request{
		ID:                 p.nextID.Add(1),
		DSN:                j.DSN,
		DBName:             j.DBName,
		Setup:              j.Setup,
		Prior:              j.Prior,
		Predicted:          j.Predicted,
		Reference:          j.Reference,
		Tests:              j.Tests,
		Cleanup:            j.Cleanup,
		Isolate:            j.Isolate,
		Guard:              j.Guard,
		StatementTimeoutMS: ceilMS(j.StatementTimeout),
		DeadlineMS:         ceilMS(time.Until(end)),
		MaxRows:            maxRows,
		MaxBytes:           max(j.MaxBytes, 0),
	}
	return req
}

// after puts a worker that answered back in the pool, or replaces it.
func (p *Pool) after(w *worker, resp response) {
	w.jobs++
	switch {
	case resp.Outcome == "error" && resp.Step == "worker":
		// The worker's own code failed: it may not be fit for another job.
		w.kill()
		p.discard(w)
	case resp.Retire:
		// It reached its memory limit, or holds too much of it: its
		// answer stands, and a fresh worker takes the next job.
		p.log.Info("python test worker retired for its memory", zap.Int("pid", w.pid), zap.Int64("memory_limit", w.memLimit))
		p.retired.Add(1)
		p.retire(w)
	case p.cfg.MaxJobsPerWorker > 0 && w.jobs >= p.cfg.MaxJobsPerWorker:
		p.retire(w)
	default:
		p.put(w)
	}
}

// Lint runs the static check of a task's tests in a worker, without a
// database: problems[i] says why tests[i] is broken (it does not compile,
// defines no test_case(pred_sqls, sol_sqls, db_name, conn), loads a name
// nothing defines, imports what the worker lacks), "" when it is fine.
// It is the check every job makes before it runs (PyResult.Broken); corpus
// check runs it so that a broken test is a corpus problem before any
// episode. The error is the environment's (no worker, ErrNoPython).
func (p *Pool) Lint(ctx context.Context, tests []string) ([]string, error) {
	if len(tests) == 0 {
		return nil, nil
	}
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.running.Done()
	if err := p.acquire(ctx); err != nil {
		return nil, err
	}
	defer p.release()
	w, err := p.take(ctx)
	if err != nil {
		return nil, err
	}
	req := lintRequest{ID: p.nextID.Add(1), Lint: tests}
	resp, err := w.do(ctx, req.ID, req, time.Now().Add(lintDeadline))
	if err != nil {
		p.discard(w)
		return nil, err
	}
	p.after(w, resp)
	if resp.Outcome != "linted" || len(resp.Problems) != len(tests) {
		return nil, fmt.Errorf("%w: it answered a lint of %d tests with %q and %d problems", ErrWorker, len(tests), resp.Outcome, len(resp.Problems))
	}
	return resp.Problems, nil
}

// ceilMS is d in whole milliseconds, rounded up (0 stays 0).
func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// Close stops the pool: new jobs fail with ErrClosed, jobs in flight may
// finish until ctx ends, then every worker is stopped (idle ones are asked
// to exit, busy ones killed). It returns ctx's error if ctx ended first.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.closing)
	}
	p.mu.Unlock()

	done := make(chan struct{})
	go func() { p.running.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}

	p.mu.Lock()
	ws := make([]*worker, 0, len(p.all))
	for w := range p.all {
		ws = append(ws, w)
	}
	p.idle = nil
	p.mu.Unlock()
	for _, w := range ws {
		w.stop(ctx)
		p.forget(w)
	}
	if err == nil {
		<-done
	}
	return err
}

// enter registers a Run or Check, unless the pool is closed.
func (p *Pool) enter() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.running.Add(1)
	return nil
}

// acquire waits for a slot: fewer than Workers jobs running.
func (p *Pool) acquire(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
		return nil
	default:
	}
	select {
	case p.slots <- struct{}{}:
		return nil
	case <-p.closing:
		return ErrClosed
	case <-ctx.Done():
		return sqlexec.Errorf(sqlexec.KindBusy, ctx.Err(), "no Python test worker became free: %v", ctx.Err())
	}
}

func (p *Pool) release() { <-p.slots }

// take returns an idle worker that is alive, or starts one.
func (p *Pool) take(ctx context.Context) (*worker, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		if w.alive() {
			return w, nil
		}
		p.log.Warn("python test worker died while idle; replacing it", zap.Int("pid", w.pid), zap.String("exit", w.exitString()))
		p.forget(w)
	}
	w, err := p.start(ctx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		w.stop(ctx)
		return nil, ErrClosed
	}
	p.all[w] = struct{}{}
	p.mu.Unlock()
	p.started.Add(1)
	return w, nil
}

// put returns a worker to the idle list.
func (p *Pool) put(w *worker) {
	p.mu.Lock()
	if !p.closed {
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	w.stop(context.Background())
	p.forget(w)
}

// discard forgets a worker that do already killed.
func (p *Pool) discard(w *worker) {
	p.killed.Add(1)
	p.forget(w)
}

// retire stops a worker that has done its share, without waiting.
func (p *Pool) retire(w *worker) {
	p.forget(w)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.stop(ctx)
	}()
}

func (p *Pool) forget(w *worker) {
	p.mu.Lock()
	delete(p.all, w)
	p.mu.Unlock()
}

package postgres

// This file is stateful verification (sqlexec.Stateful): Management tasks run on private
// copies of a loaded database, one per verification in flight.
//
// # Design
//
// OpenStateful keeps a pool of copies (clones) of the database's template (CREATE
// DATABASE ... TEMPLATE; the template accepts no connections, so nobody is connected to
// it and the copy is consistent), made ahead of demand, each with one policy-role
// session. A verification takes a copy for itself (the pool size bounds concurrency;
// past StatefulOptions.Wait it fails with KindBusy) and runs the whole job there in one
// transaction that is always rolled back, in one round trip: BEGIN READ WRITE, the
// limits (SET LOCAL), DISCARD SEQUENCES, Setup, Prior, the predicted statements, SET
// CONSTRAINTS ALL IMMEDIATE (deferred constraints are checked as a commit would check
// them), the Checks, Cleanup; then ROLLBACK and the after-job check (checkSQL); job.go
// runs that round trip and attributes its first failure. A job with Python tests hands
// the copy to the PyRunner instead (a DSN of the copy, for the policy role), and the copy
// is checked once the runner's sessions have ended.
//
// Measured on the harbor sample (BenchmarkStatefulDesigns: one copy, harbor_M_1's UPDATE
// decided by three checks, on a shared 2-core machine under load): a job on a pooled copy
// with rollback and sequence reset takes about 0.9 ms; the same in a SAVEPOINT of one long
// transaction per copy about 0.7 ms (it skips BEGIN, the limits and the Go-side checks,
// but would hold back vacuum in the whole cluster, outlive
// idle_in_transaction_session_timeout, and a PyRunner's own session could not join it); a
// fresh copy per job about 280 ms (DROP DATABASE, CREATE DATABASE ... TEMPLATE, connect:
// BIRD-Interact's reset). Hence the pool with rollback.
//
// # What a rollback does not undo, and how each is handled
//
//   - Sequences: nextval and setval are not rolled back. Their pristine state (the
//     template's last_value and is_called, as pg_dump writes them) is recorded when a
//     copy is made; the after-job check resets every sequence that moved, in the job's
//     own round trip. ALTER SEQUENCE and TRUNCATE ... RESTART IDENTITY are transactional.
//   - Session state that outlives a transaction: currval/lastval (DISCARD SEQUENCES opens
//     every job); SET, RESET, set_config, DISCARD, PREPARE, cursors WITH HOLD, LISTEN,
//     session-level advisory locks (refused by checkStateful, the functions revoked in
//     the catalog too; dynamic SQL in PL/pgSQL, which could reach them, is refused). A
//     SET inside the transaction would be undone by the rollback anyway. The full
//     after-job check counts what exists; a session found with any is closed and
//     replaced.
//   - Commits and prepared transactions: checked SQL cannot end the transaction
//     (transaction control is refused; a procedure called inside a transaction block
//     cannot COMMIT; PREPARE TRANSACTION is refused). A PyRunner's own session could:
//     the full check compares the committed-change counters of the copy
//     (n_mod_since_analyze, counted on commit only, over every table and catalog) and
//     the prepared transactions with their pristine values; a copy that changed is
//     dropped and cloned again in the background (StatefulStats.Escapes).
//   - Large objects and NOTIFY are transactional; the large-object functions are
//     refused and revoked anyway, NOTIFY and pg_notify refused.
//   - Outside the database: COPY (to or from files, programs, the client), dblink,
//     extensions, ALTER SYSTEM, roles, databases, tablespaces and other server-wide
//     objects are refused, and the policy role has no privilege for them; VACUUM,
//     CREATE DATABASE and ... CONCURRENTLY cannot run in a transaction block and are
//     refused first.
//   - Planner statistics written in place: ANALYZE and VACUUM are refused, but CREATE
//     INDEX and REFRESH MATERIALIZED VIEW update pg_class.relpages/reltuples in place
//     (not rolled back), and rolled-back writes leave dead rows. pg_dump shows neither;
//     plans (so the order of rows a query does not order) may drift. A copy is replaced
//     by a fresh clone after MaxUses jobs, which bounds the drift and the bloat.
//   - Not deterministic by nature, as in any PostgreSQL: OIDs and transaction ids
//     (a new object's oid, xmin), a sequence's log_cnt, the clock, random().
//
// Determinism: every run starts from the pristine state, sequences included, so the
// same SQL gives the same rows (serial ids included) in every episode, on every copy.
//
// # Locks
//
// Locks are taken per database, so a job's locks (LOCK TABLE included, which is
// allowed) only concern its own copy. Statements on shared objects (COMMENT ON
// DATABASE, GRANT ON DATABASE, ...) are refused, so that one job cannot lock what
// another needs. Autovacuum may visit a copy (to remove the dead rows of rolled-back
// writes); when it blocks a job's lock, the job waits until deadlock_timeout cancels it.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"avtgym/internal/cache"
	"avtgym/internal/parallel"
	"avtgym/sqlexec"
	"avtgym/sqlexec/pytests"

	"github.com/jackc/pgx/v5/pgconn"
)

// Defaults of StatefulOptions.
const (
	DefaultCloneWait       = 10 * time.Second
	DefaultCloneUses       = 1000
	DefaultRefCacheEntries = 4096
	DefaultSessionGrace    = 2 * time.Second
	maxDefaultClones       = 16
	// DefaultRefCacheBytes bounds the kept reference outcomes' results
	// together (sqlexec.Result.Bytes).
	DefaultRefCacheBytes int64 = 256 << 20
)

const (
	// pythonGrace is added to Job.Deadline for the PyRunner's context (the
	// runner enforces the deadline itself; this is the backstop).
	pythonGrace = 5 * time.Second
	// cloneCreateParallelism bounds the copies OpenStateful makes at once.
	cloneCreateParallelism = 4
	// recloneBackoffMax bounds the pause between failed re-clones.
	recloneBackoffMax = 5 * time.Second
	// afterJobTimeout bounds the checks and repairs after a job.
	afterJobTimeout = 30 * time.Second
	// fullCheckEvery is how many jobs a copy serves between full after-job
	// checks (checkSQL).
	fullCheckEvery = 64
	// jobBackstopGrace is added to the client-side backstop of a job's
	// statement timeouts.
	jobBackstopGrace = time.Second
	// defaultStatefulStmtTime stands for the role's statement_timeout in the
	// backstop when Limits.Timeout is 0.
	defaultStatefulStmtTime = DefaultStatementTimeout
)

// StatefulOptions configures OpenStateful. Zero values mean the defaults.
type StatefulOptions struct {
	// Clones is how many private copies are kept: the most verifications in
	// flight at once on this database. Each is a full copy of the database
	// on disk, and holds a connection of the server's budget (budget.go),
	// which may grant fewer. Default DefaultClones().
	Clones int
	// Wait bounds how long Verify waits for a free copy; past it Verify fails
	// with KindBusy. Default DefaultCloneWait.
	Wait time.Duration
	// MaxUses is how many verifications a copy serves before it is replaced
	// by a fresh clone (in the background). Default DefaultCloneUses.
	MaxUses int
	// Python runs the Tests of Jobs that have some. Nil: such a Job fails
	// with an error.
	Python sqlexec.PyRunner
	// TestDBName is the database name Python tests see (their db_name);
	// default the working database's name.
	TestDBName string
	// CacheEntries bounds the reference outcomes kept (by Job.Key), the
	// least recently used dropped first; default DefaultRefCacheEntries.
	CacheEntries int
	// CacheBytes bounds the kept reference outcomes' results together
	// (sqlexec.Result.Bytes), likewise; default DefaultRefCacheBytes.
	CacheBytes int64
	// SessionGrace is how long a PyRunner's sessions may stay connected to a
	// copy after Run returned before they are terminated; default
	// DefaultSessionGrace.
	SessionGrace time.Duration
}

// DefaultClones is StatefulOptions.Clones' default: 2 × GOMAXPROCS, at
// least 2, at most 16 (the connection budget may grant fewer).
func DefaultClones() int { return min(max(2*runtime.GOMAXPROCS(0), 2), maxDefaultClones) }

func (o *StatefulOptions) defaults() {
	if o.Clones <= 0 {
		o.Clones = DefaultClones()
	}
	if o.Wait <= 0 {
		o.Wait = DefaultCloneWait
	}
	if o.MaxUses <= 0 {
		o.MaxUses = DefaultCloneUses
	}
	if o.CacheEntries <= 0 {
		o.CacheEntries = DefaultRefCacheEntries
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultRefCacheBytes
	}
	if o.SessionGrace <= 0 {
		o.SessionGrace = DefaultSessionGrace
	}
}

// StatefulDB verifies stateful jobs (sqlexec.Stateful) on one loaded
// database: each verification in flight on a private copy of the pristine
// database (see the design at the top of stateful.go). It is safe for
// concurrent use.
type StatefulDB struct {
	s      *Server
	work   string // the working database
	tpl    string
	inst   uint32
	opt    StatefulOptions
	dbName string // what Python tests see

	clones []*clone
	ready  chan *clone
	// iso isolates the checks and tests from the session (isolation.go),
	// read from the first copy.
	iso isolation
	// refs keeps the reference outcomes by key (Verify): computed once,
	// concurrent callers of one key waiting for one computation; no
	// failure is kept.
	refs *cache.Cache[string, []*sqlexec.Result]

	mu      sync.Mutex
	idle    *sync.Cond // signalled when active drops to 0
	active  int        // checked-out copies
	closed  bool
	closing chan struct{}  // closed by Close
	bg      sync.WaitGroup // background re-clones
	// bgCtx bounds the background re-clones; Close cancels it.
	bgCtx    context.Context
	bgCancel context.CancelFunc

	st statefulCounters
}

var _ sqlexec.Stateful = (*StatefulDB)(nil)

// StatefulStats counts what a StatefulDB did.
type StatefulStats struct {
	// Jobs counts Verify calls; Busy those refused with KindBusy.
	Jobs, Busy int64
	// SequenceResets counts sequences reset after a job (nextval, setval).
	SequenceResets int64
	// SessionRepairs counts sessions closed and opened again: a job left
	// session state, or its connection was lost or interrupted.
	SessionRepairs int64
	// Escapes counts jobs after which something outside the transaction had
	// changed (a commit, a prepared transaction): the copy was cloned again.
	Escapes int64
	// Reclones counts copies cloned again (escapes, MaxUses, failures).
	Reclones int64
	// Terminated counts the sessions still connected to a copy SessionGrace
	// after they should have ended (a PyRunner's, or an interrupted one of
	// this package), and terminated.
	Terminated int64
}

type statefulCounters struct {
	jobs, busy, resets, repairs, escapes, reclones, terminated atomic.Int64
}

// clone is one private copy and its session.
type clone struct {
	name string
	dsn  string
	pc   *pgconn.PgConn
	seqs []seqState // pristine
	// quick and full are checkSQL(seqs, false) and checkSQL(seqs, true).
	quick, full string
	mods        int64 // pristine committed-change count
	uses        int
	// local is whether the session's backend can be watched here (1),
	// cannot (-1), or is not known yet (0): memwatch.go.
	local int8
}

// OpenStateful opens stateful verification on the working database dbName
// (a name EnsureDatabase returned): it sweeps the copies of dbName that
// dead instances left behind, then clones opt.Clones private copies of its
// template and opens a policy-role session on each. Close drops them.
func (s *Server) OpenStateful(ctx context.Context, dbName string, opt StatefulOptions) (*StatefulDB, error) {
	opt.defaults()
	tpl := TemplateName(dbName)
	var ok bool
	if err := s.admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND datistemplate)", tpl).Scan(&ok); err != nil {
		return nil, errClone(err, "cannot open stateful verification on %s", dbName)
	}
	if !ok {
		return nil, sqlexec.Errorf(sqlexec.KindUnavailable, nil, "cannot open stateful verification on %s: its template %s does not exist (load it with EnsureDatabase)", dbName, tpl)
	}
	python := opt.Python != nil
	granted := s.budget.reserve(opt.Clones, python)
	if granted == 0 {
		b := s.Budget()
		return nil, sqlexec.Errorf(sqlexec.KindUnavailable, ErrBudget,
			"cannot open stateful verification on %s: the PostgreSQL connection budget (%d, serve --postgres-connections) has no room for a private copy (%d reserved for other copies and Python workers, %d kept for queries): raise --postgres-connections",
			dbName, b.Total, b.Reserved, queryFloor)
	}
	if granted < opt.Clones {
		s.warn("stateful verification on %s has %d private copies instead of %d: the PostgreSQL connection budget (--postgres-connections %d) has no room for more", dbName, granted, opt.Clones, s.budget.total)
	}
	opt.Clones = granted
	opened := false
	defer func() {
		if !opened {
			s.budget.release(granted, python)
		}
	}()
	inst, err := s.ensureInstance(ctx)
	if err != nil {
		return nil, errClone(err, "cannot open stateful verification on %s", dbName)
	}
	if _, err := s.sweepClones(ctx, dbName); err != nil {
		return nil, errClone(err, "cannot open stateful verification on %s", dbName)
	}
	d := &StatefulDB{
		s: s, work: dbName, tpl: tpl, inst: inst.id, opt: opt, dbName: opt.TestDBName,
		ready:   make(chan *clone, opt.Clones),
		refs:    newRefCache(opt),
		closing: make(chan struct{}),
	}
	d.idle = sync.NewCond(&d.mu)
	d.bgCtx, d.bgCancel = context.WithCancel(context.Background())
	if d.dbName == "" {
		d.dbName = dbName
	}
	d.clones = make([]*clone, opt.Clones)
	for i := range d.clones {
		d.clones[i] = &clone{name: cloneName(dbName, inst.id, int(s.cloneSeq.Add(1)-1))}
	}
	err = parallel.For(ctx, opt.Clones, cloneCreateParallelism, func(ctx context.Context, i int) error {
		return d.make(ctx, d.clones[i])
	})
	if err != nil {
		d.bgCancel()
		d.dropAll()
		return nil, errClone(err, "cannot open stateful verification on %s", dbName)
	}
	if d.iso, err = readIsolation(ctx, d.clones[0].pc); err != nil {
		d.bgCancel()
		d.dropAll()
		return nil, errClone(err, "cannot open stateful verification on %s", dbName)
	}
	for _, c := range d.clones {
		d.ready <- c
	}
	opened = true
	return d, nil
}

// Name returns the working database's name.
func (d *StatefulDB) Name() string { return d.work }

// CloneNames returns the names of the private copies.
func (d *StatefulDB) CloneNames() []string {
	out := make([]string, len(d.clones))
	for i, c := range d.clones {
		out[i] = c.name
	}
	return out
}

// Stats returns the counters.
func (d *StatefulDB) Stats() StatefulStats {
	return StatefulStats{
		Jobs: d.st.jobs.Load(), Busy: d.st.busy.Load(), SequenceResets: d.st.resets.Load(),
		SessionRepairs: d.st.repairs.Load(), Escapes: d.st.escapes.Load(), Reclones: d.st.reclones.Load(),
		Terminated: d.st.terminated.Load(),
	}
}

// Close waits for the verifications in flight and the background re-clones,
// then closes the sessions and drops the copies.
func (d *StatefulDB) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.closing)
	for d.active > 0 {
		d.idle.Wait()
	}
	d.mu.Unlock()
	d.bgCancel()
	d.bg.Wait()
	err := d.dropAll()
	d.s.budget.release(len(d.clones), d.opt.Python != nil)
	return err
}

// begin counts a checked-out copy; false once Close has begun.
func (d *StatefulDB) begin() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.active++
	return true
}

// end uncounts a checked-out copy.
func (d *StatefulDB) end() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.active--
	if d.active == 0 {
		d.idle.Broadcast()
	}
}

// dropAll closes every session and drops every copy.
func (d *StatefulDB) dropAll() error {
	errs := make([]error, len(d.clones))
	parallel.Each(len(d.clones), cloneCreateParallelism, func(i int) {
		c := d.clones[i]
		c.closeConn()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		errs[i] = d.s.dropClone(ctx, c.name)
	})
	return errors.Join(errs...)
}

func (c *clone) closeConn() {
	if c.pc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c.pc.Close(ctx)
		cancel()
		c.pc = nil
	}
}

// make (re)creates a copy: drop, clone, connect, record its pristine state.
func (d *StatefulDB) make(ctx context.Context, c *clone) error {
	c.closeConn()
	if err := d.s.dropClone(ctx, c.name); err != nil {
		return err
	}
	if err := d.s.createClone(ctx, c.name, d.tpl, d.work, d.inst); err != nil {
		return err
	}
	c.dsn = d.s.cloneDSN(c.name)
	c.uses = 0
	_, err := d.connect(ctx, c, true)
	return err
}

// errEscaped is a copy found changed outside a transaction.
var errEscaped = errors.New("changed outside a transaction")

// connect opens the copy's session and runs the full check: fresh (a new
// copy) records the pristine state; otherwise the check must find the copy
// pristine (its sequences reset), else the error wraps errEscaped.
func (d *StatefulDB) connect(ctx context.Context, c *clone, fresh bool) (afterJob, error) {
	pc, err := pgconn.ConnectConfig(ctx, d.s.cloneConnConfig(c.name))
	if err != nil {
		return afterJob{}, fmt.Errorf("postgres: connecting to clone %s as the policy role: %w", c.name, err)
	}
	c.pc = pc
	if fresh {
		seqs, err := readSequences(ctx, pc)
		if err != nil {
			return afterJob{}, fmt.Errorf("postgres: reading the sequences of clone %s: %w", c.name, err)
		}
		c.seqs, c.quick, c.full = seqs, checkSQL(seqs, false), checkSQL(seqs, true)
	}
	a, err := c.check(ctx)
	if err != nil {
		return afterJob{}, err
	}
	if fresh {
		c.mods = a.mods
	} else if a.escaped(c.mods) {
		return afterJob{}, fmt.Errorf("postgres: clone %s: %w", c.name, errEscaped)
	}
	return a, nil
}

// check runs the full after-job check on the session.
func (c *clone) check(ctx context.Context) (afterJob, error) {
	res := c.pc.ExecParams(ctx, c.full, nil, nil, nil, nil).Read()
	if res.Err != nil {
		return afterJob{}, fmt.Errorf("postgres: checking clone %s: %w", c.name, res.Err)
	}
	return parseAfterJob(res.Rows)
}

// checkout takes a free copy, waiting at most opt.Wait.
func (d *StatefulDB) checkout(ctx context.Context) (*clone, error) {
	if !d.begin() {
		return nil, sqlexec.Errorf(sqlexec.KindUnavailable, nil, "stateful verification on %s is closed", d.work)
	}
	select {
	case c := <-d.ready:
		return c, nil
	default:
	}
	t := time.NewTimer(d.opt.Wait)
	defer t.Stop()
	select {
	case c := <-d.ready:
		return c, nil
	case <-t.C:
		d.end()
		d.st.busy.Add(1)
		return nil, sqlexec.Errorf(sqlexec.KindBusy, nil,
			"no private copy of %s became free within %v (%d in use); retry later", d.work, d.opt.Wait, len(d.clones))
	case <-ctx.Done():
		d.end()
		return nil, canceled(ctx)
	case <-d.closing:
		d.end()
		return nil, sqlexec.Errorf(sqlexec.KindUnavailable, nil, "stateful verification on %s is closed", d.work)
	}
}

// release returns a copy after a job: a is the after-job check's outcome
// (from the job's own round trip), or aErr when it could not be run or the
// session's state is unknown (broken). The copy goes back to the pool at
// once when it is pristine again, after a new session when its session
// must be replaced, and after a fresh clone (in the background) when
// something escaped.
func (d *StatefulDB) release(c *clone, a afterJob, aErr error, broken bool) {
	defer d.end()
	c.uses++
	ctx, cancel := context.WithTimeout(context.Background(), afterJobTimeout)
	defer cancel()
	if broken || aErr != nil || c.pc == nil || c.pc.IsClosed() || c.pc.TxStatus() != 'I' || a.session > 0 {
		d.st.repairs.Add(1)
		c.closeConn()
		// The old session ends, and its transaction rolls back, before the
		// copy is used again.
		n, err := d.s.waitSessionsGone(ctx, c.name, 0, d.opt.SessionGrace)
		d.st.terminated.Add(int64(n))
		if err == nil {
			a, err = d.connect(ctx, c, false)
		}
		if err != nil {
			if errors.Is(err, errEscaped) {
				d.st.escapes.Add(1)
			}
			d.recycle(c)
			return
		}
	}
	if a.escaped(c.mods) {
		d.st.escapes.Add(1)
		d.recycle(c)
		return
	}
	d.st.resets.Add(a.reset)
	if c.uses >= d.opt.MaxUses {
		d.recycle(c)
		return
	}
	d.ready <- c
}

// recycle replaces a copy by a fresh clone in the background; it joins the
// pool when ready (retried with backoff while it fails, until Close).
func (d *StatefulDB) recycle(c *clone) {
	d.st.reclones.Add(1)
	c.closeConn()
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		pause := 100 * time.Millisecond
		for {
			select {
			case <-d.closing:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(d.bgCtx, d.s.cfg.LoadTimeout)
			_, ierr := d.s.ensureInstance(ctx)
			err := ierr
			if err == nil {
				err = d.make(ctx, c)
			}
			cancel()
			if err == nil {
				d.ready <- c
				return
			}
			d.s.warn("re-cloning %s failed (retrying): %v", c.name, err)
			// Close cancels bgCtx once the jobs in flight are done; the
			// loop's first step then sees closing.
			if d.s.cfg.Clock.Sleep(d.bgCtx, pause) != nil {
				return
			}
			pause = min(2*pause, recloneBackoffMax)
		}
	}()
}

// Verify runs a stateful job on a private copy (sqlexec.Stateful). The
// policy's statements are checked first (checkStateful): a denied or
// malformed one is a failed verdict, and no copy is used. A job with Tests
// goes to the PyRunner; otherwise the Checks' rows after the predicted
// statements are compared with their rows after the reference statements
// (computed once per Job.Key, on a copy), or without Checks the last
// predicted statement's rows with the last reference statement's (with the
// Policy's rewrites, as sqlexec.Check does). Job.Deadline bounds each run
// of the job's statements (the reference's and the prediction's); the wait
// for a free copy is bounded by StatefulOptions.Wait and does not count.
// The Policy's rewrites (StripDistinct, ...) apply to the statements whose
// results are compared only: the last predicted and last reference
// statements, without Checks. A predicted statement that fails, or a check
// or Cleanup statement after it, ends the run (the transaction is aborted)
// and fails the verdict with Err set. With Job.PolicyPrior a failure in
// Prior is the policy's too (its earlier SQL failing when run again: Err
// set; a corpus statement after it failing on the state it left: a
// privileged Reason), classified as the predicted statements' are
// (classifyPolicy: a broken connection stays an error). Errors: Setup,
// Prior (otherwise) or the reference failing, Cleanup failing after the
// reference, a copy not free in time (KindBusy), the database unavailable,
// ctx ended.
func (d *StatefulDB) Verify(ctx context.Context, j sqlexec.Job) (sqlexec.Verdict, error) {
	d.st.jobs.Add(1)
	if len(j.Tests) > 0 {
		return d.verifyPython(ctx, j)
	}
	pl, err := d.plan(j)
	if err != nil {
		return sqlexec.Verdict{}, err
	}
	if pl.denied != nil {
		return failed(pl.denied), nil
	}
	want, err := d.reference(ctx, &pl)
	if err != nil {
		var rf *referenceFailure
		if j.ReferenceFailureFails && errors.As(err, &rf) && ctx.Err() == nil {
			// The a-Interact harness scores a failing reference 0
			// (ex_base); the policy's SQL is not run.
			return sqlexec.Verdict{Reason: rf.Error()}, nil
		}
		return sqlexec.Verdict{}, err
	}
	t := pl.base
	t.main, t.policy = pl.pred, true
	out, err := d.runJob(ctx, t)
	if err != nil {
		return sqlexec.Verdict{}, err
	}
	if out.failure != nil {
		return failedOn(out), nil
	}
	return pl.decide(out, want), nil
}

// jobPlan is a job's statements as Verify runs them.
type jobPlan struct {
	j sqlexec.Job
	// denied, when set, is why the predicted statements may not run (a
	// failed verdict; nothing runs).
	denied error
	// base is the run of either side, without its main statements: pred
	// (the policy's, checked) and ref (the corpus's).
	base      txn
	pred, ref []string
	// refPrior is the reference side's prior: the job's ExpectedPrior
	// (the corpus's, split) when it has one, else base.prior.
	refPrior []string
	checks   [][]string
	// last says the verdict compares the last statements' results (no
	// checks); key is the reference outcomes' cache key ("": not cached).
	last bool
	key  string
}

// plan checks and splits a job's statements. A predicted statement that is
// denied or malformed is the plan's denial (a failed verdict); a corpus
// statement that does not split, or a Prior statement that fails its check,
// an error.
func (d *StatefulDB) plan(j sqlexec.Job) (pl jobPlan, err error) {
	checks := d.s.checks
	pl = jobPlan{j: j, last: len(j.Checks) == 0}
	if pl.pred, pl.denied = checks.checkStateful(j.Predicted); pl.denied != nil {
		return pl, nil
	}
	setup, phase1, prior, cleanup, err := corpusParts(checks, j)
	if err != nil {
		var pd *priorDenied
		if errors.As(err, &pd) {
			pl.denied = phase1Failure(pd.err)
			return pl, nil
		}
		return pl, err
	}
	for i, r := range j.Reference {
		s, err := checks.splitCorpus(r)
		if err != nil {
			return pl, fmt.Errorf("postgres: reference statement %d of %q: %w", i+1, j.Key, err)
		}
		pl.ref = append(pl.ref, s...)
	}
	if pl.last {
		if len(pl.ref) == 0 {
			return pl, fmt.Errorf("postgres: job %q has neither tests, checks nor reference statements", j.Key)
		}
		// The policy's rewrites apply to the statements whose results are
		// compared: the last of each side.
		if pl.pred, pl.denied = rewriteLast(pl.pred, j.Policy, checks.checkStateful); pl.denied != nil {
			return pl, nil
		}
		if pl.ref, err = rewriteLast(pl.ref, j.Policy, checks.splitCorpus); err != nil {
			return pl, fmt.Errorf("postgres: the last reference statement of %q: %w", j.Key, err)
		}
	}
	pl.checks = make([][]string, len(j.Checks))
	for i, q := range j.Checks {
		if pl.checks[i], err = checks.splitCorpus(q); err == nil && len(pl.checks[i]) == 0 {
			err = errors.New("no statement")
		}
		if err != nil {
			return pl, fmt.Errorf("postgres: check %d of %q: %w", i+1, j.Key, err)
		}
	}
	pl.base = txn{setup: setup, phase1: phase1, prior: prior, priorPolicy: j.PolicyPrior > 0,
		checks: pl.checks, cleanup: cleanup, lim: j.Limits, deadline: j.Deadline, collectLast: pl.last}
	pl.refPrior = append(append([]string(nil), phase1...), prior...)
	key := j.Key
	if j.ExpectedPrior != nil {
		if pl.refPrior, err = splitAll(checks, j.ExpectedPrior, "expected prior", j.Key); err != nil {
			return pl, err
		}
		// The reference side depends on ExpectedPrior, not on Prior: the
		// key names it, whatever the caller's Key says.
		key += "\x00expected-prior:" + digest(j.ExpectedPrior)
	}
	switch {
	case j.Key == "":
	case pl.last:
		pl.key = sqlexec.CacheKey(key+"\x00stateful:last", j.Policy)
	default:
		pl.key = key + "\x00stateful:checks"
	}
	return pl, nil
}

// splitAll splits the corpus's statements texts (what names them in
// messages) of job key.
func splitAll(checks *stmtChecks, texts []string, what, key string) ([]string, error) {
	var out []string
	for i, s := range texts {
		st, err := checks.splitCorpus(s)
		if err != nil {
			return nil, fmt.Errorf("postgres: %s statement %d of %q: %w", what, i+1, key, err)
		}
		out = append(out, st...)
	}
	return out, nil
}

// digest is a hex SHA-256 of texts, each length-prefixed.
func digest(texts []string) string {
	h := sha256.New()
	var n [8]byte
	for _, s := range texts {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// referenceFailure is a failure of the reference side's own SQL (its
// statements, a check, its cleanup, on the state Setup and its prior
// left), as opposed to Setup, the prior or the environment;
// Job.ReferenceFailureFails makes it a failed verdict.
type referenceFailure struct {
	err error
}

func (e *referenceFailure) Error() string {
	return "the reference failed on the state it ran on: " + e.err.Error()
}
func (e *referenceFailure) Unwrap() error { return e.err }

// reference returns the reference side's results (the last statement's,
// or each check's), computed on a copy once per key.
func (d *StatefulDB) reference(ctx context.Context, pl *jobPlan) ([]*sqlexec.Result, error) {
	compute := func(ctx context.Context) ([]*sqlexec.Result, error) {
		t := pl.base
		// The reference side's prior is the corpus's (or, without
		// ExpectedPrior, the job's Prior as a whole): its failure is
		// never the policy's.
		t.phase1, t.prior, t.priorPolicy, t.main = nil, pl.refPrior, false, pl.ref
		// With ReferenceFailureFails the reference's statements, checks
		// and cleanup are attributed as the policy's are (job.go), so
		// that their failure is told from Setup's, the prior's and the
		// environment's: it comes back as out.failure.
		t.policy = pl.j.ReferenceFailureFails
		out, err := d.runJob(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("postgres: the reference of %q: %w", pl.j.Key, err)
		}
		if out.failure != nil {
			if t.policy {
				return nil, &referenceFailure{err: out.failure}
			}
			return nil, fmt.Errorf("postgres: the reference of %q failed: %w", pl.j.Key, out.failure)
		}
		if pl.last {
			return []*sqlexec.Result{out.last}, nil
		}
		return out.checks, nil
	}
	if pl.key == "" {
		return compute(ctx)
	}
	want, err := d.refs.Get(ctx, pl.key, compute)
	if err != nil && err == ctx.Err() {
		// This caller's context ended while another computed the key.
		return nil, canceled(ctx)
	}
	return want, err
}

// decide compares the prediction's results with the reference's.
func (pl *jobPlan) decide(out txnOut, want []*sqlexec.Result) sqlexec.Verdict {
	p := pl.j.Policy
	if pl.last {
		rp := p.Resolve(pl.ref[len(pl.ref)-1])
		ok, reason := sqlexec.Compare(rp, out.last, want[0])
		return sqlexec.Verdict{Success: ok, Reason: reason}
	}
	for i, c := range pl.checks {
		cp := p.Resolve(c[len(c)-1])
		if ok, reason := sqlexec.Compare(cp, out.checks[i], want[i]); !ok {
			return sqlexec.Verdict{Reason: fmt.Sprintf("check %d of %d (%s): %s", i+1, len(pl.checks), firstWords(c[len(c)-1], 6), reason)}
		}
	}
	return sqlexec.Verdict{Success: true}
}

// newRefCache returns the cache of reference outcomes, bounded by opt.
func newRefCache(opt StatefulOptions) *cache.Cache[string, []*sqlexec.Result] {
	return cache.New(cache.Options[string, []*sqlexec.Result]{
		MaxEntries: opt.CacheEntries,
		MaxBytes:   opt.CacheBytes,
		Size: func(key string, rs []*sqlexec.Result, _ error) int64 {
			n := int64(len(key)) + 64
			for _, r := range rs {
				if r != nil {
					n += r.Bytes
				}
			}
			return n
		},
	})
}

// rewriteLast applies p's rewrites to the last of stmts, which split checks
// again (a rewritten statement is still one statement).
func rewriteLast(stmts []string, p sqlexec.Policy, split func(string) ([]string, error)) ([]string, error) {
	n := len(stmts) - 1
	r := p.Rewrite(stmts[n])
	if r == stmts[n] {
		return stmts, nil
	}
	s, err := split(r)
	if err != nil {
		return nil, err
	}
	if len(s) != 1 {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "the statement (%s) is %d statements once rewritten", firstWords(stmts[n], 4), len(s))
	}
	return append(stmts[:n:n], s[0]), nil
}

// failedOn is the verdict of a run that failed: the policy's statement's
// error is its feedback (Err); a check's or a cleanup statement's, on the
// state the policy left, is privileged (the Reason only, as on SQLite: the
// check's text and its error message would tell the policy what is
// checked).
func failedOn(out txnOut) sqlexec.Verdict {
	switch out.failPhase {
	case phPhase1:
		return failed(phase1Failure(out.failure))
	case phPrior:
		return sqlexec.Verdict{Reason: "a statement of the task's (a cleanup or the follow-up's setup) failed on the state the SQL accepted in an earlier phase left: " + out.failure.Error()}
	case phIsolate:
		return sqlexec.Verdict{Reason: "the state the prediction left could not be checked: " + out.failure.Error()}
	case phChecks:
		return sqlexec.Verdict{Reason: "a check failed on the state the prediction left: " + out.failure.Error()}
	case phCleanup:
		return sqlexec.Verdict{Reason: "a cleanup statement failed on the state the prediction left: " + out.failure.Error()}
	}
	return failed(out.failure)
}

// failed is the verdict of a predicted SQL that failed with err.
func failed(err error) sqlexec.Verdict {
	return sqlexec.Verdict{Success: false, Reason: err.Error(), Err: err}
}

// corpusParts splits the job's Setup and Cleanup (the corpus's) and checks
// its Prior statements (the policy's own, accepted earlier) as the
// prediction's are checked; a failure is the environment's. With
// Job.PolicyPrior, phase1 are the first PolicyPrior texts of Prior (the
// policy's, checked: a denial is a *priorDenied, the policy's failure) and
// prior the rest (the corpus's, split); without, phase1 is nil.
func corpusParts(checks *stmtChecks, j sqlexec.Job) (setup, phase1, prior, cleanup []string, err error) {
	if setup, err = splitAll(checks, j.Setup, "setup", j.Key); err != nil {
		return nil, nil, nil, nil, err
	}
	if phase1, prior, err = priorParts(checks, j.Prior, j.PolicyPrior, j.Key); err != nil {
		return nil, nil, nil, nil, err
	}
	if cleanup, err = splitAll(checks, j.Cleanup, "cleanup", j.Key); err != nil {
		return nil, nil, nil, nil, err
	}
	return setup, phase1, prior, cleanup, nil
}

// priorParts checks and splits the prior texts of job key whose first
// policy are the policy's own SQL (sqlexec.Job.PolicyPrior): those are
// checked as the prediction's are (a denial is a *priorDenied), the rest
// split as the corpus's. With policy 0 every text is checked as the
// policy's and a denial is an error (prior, nil phase1).
func priorParts(checks *stmtChecks, texts []string, policy int, key string) (phase1, prior []string, err error) {
	for i, s := range texts {
		var st []string
		switch {
		case policy == 0:
			if st, err = checks.checkStateful(s); err != nil {
				return nil, nil, fmt.Errorf("postgres: prior statement %d of %q: %w", i+1, key, err)
			}
			prior = append(prior, st...)
		case i < policy:
			if st, err = checks.checkStateful(s); err != nil {
				return nil, nil, &priorDenied{err: err}
			}
			phase1 = append(phase1, st...)
		default:
			if st, err = checks.splitCorpus(s); err != nil {
				return nil, nil, fmt.Errorf("postgres: prior statement %d of %q: %w", i+1, key, err)
			}
			prior = append(prior, st...)
		}
	}
	return phase1, prior, nil
}

// priorDenied is the policy's SQL of an earlier phase denied when it is
// run again (sqlexec.Job.PolicyPrior): the policy's failure.
type priorDenied struct{ err error }

func (e *priorDenied) Error() string { return phase1Failure(e.err).Error() }
func (e *priorDenied) Unwrap() error { return phase1Failure(e.err) }

// phase1Failure is err, a failure of the policy's SQL of an earlier phase
// run again to rebuild its state, as the policy's failure: of err's kind
// (KindExecution without one), saying which SQL failed.
func phase1Failure(err error) error {
	k := sqlexec.KindOf(err)
	if k == 0 {
		k = sqlexec.KindExecution
	}
	return sqlexec.Errorf(k, err, "the SQL accepted in an earlier phase failed when it was run again to rebuild its state: %v", err)
}

// verifyPython runs a job with Tests through the PyRunner, on a copy
// checked out to it: the runner connects with the copy's DSN and runs the
// whole job in a transaction it rolls back; afterwards its sessions must
// end (they are terminated after SessionGrace) and the copy is checked and
// reset as after any job, or cloned again when the runner committed.
func (d *StatefulDB) verifyPython(ctx context.Context, j sqlexec.Job) (sqlexec.Verdict, error) {
	if d.opt.Python == nil {
		return sqlexec.Verdict{}, fmt.Errorf("postgres: job %q has Python tests and no PyRunner is configured", j.Key)
	}
	pred, err := d.s.checks.checkStateful(j.Predicted)
	if err != nil {
		return failed(err), nil
	}
	if _, _, err := priorParts(d.s.checks, j.Prior, j.PolicyPrior, j.Key); err != nil {
		var pd *priorDenied
		if errors.As(err, &pd) {
			return failed(phase1Failure(pd.err)), nil
		}
		return sqlexec.Verdict{}, err
	}
	c, err := d.checkout(ctx)
	if err != nil {
		return sqlexec.Verdict{}, err
	}
	pj := d.pyJobFor(c, j)
	pj.Predicted = pred
	rctx := ctx
	if j.Deadline > 0 {
		var cancel context.CancelFunc
		rctx, cancel = context.WithTimeout(ctx, j.Deadline+pythonGrace)
		defer cancel()
	}
	stopWatch := d.watchPython(c)
	res, rerr := d.opt.Python.Run(rctx, pj)
	overMemory := stopWatch()

	// The runner's sessions end before the copy is checked: their statistics
	// are flushed when they exit, and no lock of theirs is left.
	sctx, cancel := context.WithTimeout(context.Background(), afterJobTimeout)
	defer cancel()
	n, werr := d.s.waitSessionsGone(sctx, c.name, c.pc.PID(), d.opt.SessionGrace)
	d.st.terminated.Add(int64(n))
	var a afterJob
	aErr := werr
	if aErr == nil {
		a, aErr = c.check(sctx)
	}
	d.release(c, a, aErr, false)

	if overMemory && ctx.Err() == nil {
		// A statement of the job grew its backend past the bound and was
		// canceled: the policy's statements or the tests on the state they
		// left.
		return failed(sqlexec.Errorf(sqlexec.KindTooMuchMemory, nil, "%s", d.s.mw.memoryMessage("a statement (the prediction's, or a test's on the state it left)"))), nil
	}
	if rerr != nil {
		if v, ok := pythonPriorFailure(ctx, j, rerr, aErr); ok {
			return v, nil
		}
		return sqlexec.Verdict{}, fmt.Errorf("postgres: the Python tests of %q: %w", j.Key, rerr)
	}
	if res.Broken != "" {
		return sqlexec.Verdict{}, &BrokenTestError{Key: j.Key, Reason: res.Broken}
	}
	if res.Lost {
		// The connection broke: nothing the policy can do (its ways to end
		// its own session are refused and revoked; see classifyPolicy).
		return sqlexec.Verdict{}, sqlexec.Errorf(sqlexec.KindUnavailable, nil, "postgres: the Python tests of %q lost their connection to the database: %s", j.Key, res.Reason)
	}
	if res.Passed {
		return sqlexec.Verdict{Success: true}, nil
	}
	v := sqlexec.Verdict{Reason: res.Reason}
	if res.Kind != 0 {
		v.Err = sqlexec.Errorf(res.Kind, nil, "%s", res.Reason)
	}
	return v, nil
}

// pythonPriorFailure sorts a PyRunner's error for a job whose Prior is the
// policy's doing (sqlexec.Job.PolicyPrior): ok when the worker reports
// that a statement of Prior failed on its open session (a
// *pytests.JobError of step "prior" whose message is the worker's
// "statement N of prior failed: ..." rather than a lost connection or a
// transaction ended early), the caller's ctx lives, and the engine's own
// session on the same copy answered the after-job check afterwards (the
// server was neither shutting down nor in recovery): what the session
// saw, not the SQLSTATE, as classifyPolicy decides. The worker numbers
// Prior's texts, so its Index tells the policy's own text (Err: feedback
// on its SQL) from the corpus's after it (a privileged Reason).
func pythonPriorFailure(ctx context.Context, j sqlexec.Job, rerr, afterErr error) (sqlexec.Verdict, bool) {
	var je *pytests.JobError
	if j.PolicyPrior <= 0 || ctx.Err() != nil || afterErr != nil || !errors.As(rerr, &je) ||
		je.Step != "prior" || je.Dirty || !strings.HasPrefix(je.Msg, "statement ") {
		return sqlexec.Verdict{}, false
	}
	if je.Index < j.PolicyPrior {
		return failed(phase1Failure(sqlexec.Errorf(sqlexec.KindExecution, nil, "%s", je.Msg))), true
	}
	return sqlexec.Verdict{Reason: "a statement of the task's (a cleanup or the follow-up's setup) failed on the state the SQL accepted in an earlier phase left: " + je.Msg}, true
}

// pyJobFor is j as a PyRunner gets it on copy c (Predicted as given).
func (d *StatefulDB) pyJobFor(c *clone, j sqlexec.Job) sqlexec.PyJob {
	return sqlexec.PyJob{
		DSN: c.dsn, DBName: d.dbName,
		Setup: j.Setup, Prior: j.Prior, Cleanup: j.Cleanup,
		Predicted: []string{j.Predicted}, Reference: j.Reference, Tests: j.Tests,
		StatementTimeout: j.Limits.Timeout, Deadline: j.Deadline, MaxRows: j.Limits.MaxRows,
		MaxBytes: j.Limits.MaxBytes, Isolate: d.iso.statements, Guard: d.iso.guard,
	}
}

// BrokenTestError is a Job whose Python test is broken whatever the policy
// did (PyResult.Broken): a corpus problem, with no verdict.
type BrokenTestError struct {
	Key, Reason string
}

func (e *BrokenTestError) Error() string {
	return fmt.Sprintf("postgres: a Python test of %q is broken: %s", e.Key, e.Reason)
}

// Unwrap makes errors.Is(err, sqlexec.ErrBrokenTest) true.
func (e *BrokenTestError) Unwrap() error { return sqlexec.ErrBrokenTest }

// watch starts the memory watch of c's session for one run (nil: off, or
// the backend is not on this machine).
func (d *StatefulDB) watch(c *clone) *watched {
	mw := d.s.mw
	if mw == nil || c.pc == nil {
		return nil
	}
	pid := int(c.pc.PID())
	if c.local == 0 {
		c.local = -1
		if mw.isBackend(pid, d.s.cfg.Role, c.name) {
			c.local = 1
		}
	}
	if c.local < 0 {
		return nil
	}
	pc := c.pc
	return mw.watch(pid, func() { cancelRequest(pc) })
}

// watchPython watches the backends a PyRunner opens on c (found in
// pg_stat_activity, as the administrator, until one is) while its job
// runs; the function it returns ends the watch and reports whether one
// passed the memory bound (its statement was canceled).
func (d *StatefulDB) watchPython(c *clone) func() bool {
	mw := d.s.mw
	if mw == nil || c.pc == nil {
		return func() bool { return false }
	}
	own := c.pc.PID()
	done, over := make(chan struct{}), make(chan bool, 1)
	go func() {
		var xs []*watched
		seen := map[int]bool{}
		tick := time.NewTicker(pythonFindInterval)
		defer tick.Stop()
		for {
			if len(xs) == 0 {
				xs = append(xs, d.findPython(mw, c.name, own, seen)...)
			}
			select {
			case <-done:
				fired := false
				for _, x := range xs {
					fired = mw.done(x) || fired
				}
				over <- fired
				return
			case <-tick.C:
			}
		}
	}()
	return func() bool {
		close(done)
		return <-over
	}
}

// pythonFindInterval is how often watchPython looks for the runner's
// backends until it finds one.
const pythonFindInterval = 5 * time.Millisecond

// findPython starts watching the backends on copy db other than own that
// are not yet seen.
func (d *StatefulDB) findPython(mw *memWatch, db string, own uint32, seen map[int]bool) []*watched {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	rows, err := d.s.admin.Query(ctx, "SELECT pid FROM pg_catalog.pg_stat_activity WHERE datname = $1 AND pid <> $2", db, int32(own))
	if err != nil {
		return nil
	}
	var pids []int
	for rows.Next() {
		var pid int32
		if rows.Scan(&pid) == nil {
			pids = append(pids, int(pid))
		}
	}
	rows.Close()
	var xs []*watched
	for _, pid := range pids {
		if seen[pid] {
			continue
		}
		seen[pid] = true
		if !mw.isBackend(pid, d.s.cfg.Role, db) {
			continue
		}
		if x := mw.watch(pid, func() { d.s.cancelBackend(pid) }); x != nil {
			xs = append(xs, x)
		}
	}
	return xs
}

var _ sqlexec.StateQuerier = (*StatefulDB)(nil)

// QueryState runs q (see sqlexec.StateQuery) on a private copy, in one
// transaction rolled back as every job's: Setup, Prior (checked as the
// policy's statements are in a job), then q.SQL, checked as a read-only
// query is (the query checks, stmts.go) and bounded by q.Limits; the last
// statement's rows are returned. The policy's SQL denied or failing is an
// *sqlexec.Error of its kind, as Server.Query returns it; Setup or Prior
// failing is an error of kind 0 (the environment's), as are no copy in
// time (KindBusy) and the database unavailable (KindUnavailable). With
// q.PolicyPrior, Prior failing by the policy's doing is the policy's
// failure, an *sqlexec.Error (its own SQL's error; for a corpus statement
// after it, a message that does not quote it).
func (d *StatefulDB) QueryState(ctx context.Context, q sqlexec.StateQuery) (*sqlexec.Result, error) {
	checks := d.s.checks
	stmts, err := checks.checkQuery(q.SQL, true)
	if err != nil {
		return nil, err
	}
	setup, err := splitAll(checks, q.Setup, "setup", q.Key)
	if err != nil {
		return nil, err
	}
	phase1, prior, err := priorParts(checks, q.Prior, q.PolicyPrior, q.Key)
	if err != nil {
		var pd *priorDenied
		if errors.As(err, &pd) {
			return nil, phase1Failure(pd.err)
		}
		return nil, errors.New(err.Error())
	}
	t := txn{setup: setup, phase1: phase1, prior: prior, priorPolicy: q.PolicyPrior > 0,
		main: stmts, lim: q.Limits, deadline: q.Deadline, collectLast: true, policy: true}
	out, err := d.runJob(ctx, t)
	if err != nil {
		switch sqlexec.KindOf(err) {
		case sqlexec.KindUnavailable, sqlexec.KindBusy:
			return nil, err
		}
		// Setup or Prior failed, or ctx ended: not the policy's SQL, so
		// no kind that a caller would read as feedback on it.
		return nil, errors.New(err.Error())
	}
	switch {
	case out.failure == nil:
		return out.last, nil
	case out.failPhase == phPhase1:
		return nil, phase1Failure(out.failure)
	case out.failPhase == phPrior:
		// The corpus's statement and its error are not the policy's to
		// read.
		return nil, sqlexec.Errorf(sqlexec.KindExecution, nil, "the state the SQL accepted in an earlier phase left could not be prepared: a statement of the task's (a cleanup or the follow-up's setup) failed on it")
	}
	return nil, out.failure
}

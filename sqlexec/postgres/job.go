package postgres

// This file runs one side of a stateful job (the reference's or the policy's
// statements) on a private copy's session: the whole transaction as one
// pipeline (pipeline.go), then the attribution of its first failure to the
// policy (a verdict) or the environment (an error).

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5/pgconn"
)

// txn is one run of a job's statements on a copy, in one transaction.
type txn struct {
	setup, prior, main []string
	// phase1 are the policy's own statements of an earlier phase, run
	// between setup and prior (sqlexec.Job.PolicyPrior's first texts);
	// priorPolicy says prior runs on the state they left, so that its
	// failures are the policy's too (with policy set).
	phase1      []string
	priorPolicy bool
	checks      [][]string
	cleanup     []string
	lim         sqlexec.Limits
	deadline    time.Duration
	// collectLast keeps main's last result; policy says main is the
	// policy's (its failures, and the checks', are verdicts).
	collectLast, policy bool
}

// txnOut is what a run produced: main's last result, each check's (last
// statement's) result, or the failure that is the policy's.
type txnOut struct {
	last    *sqlexec.Result
	checks  []*sqlexec.Result
	failure error
	// failPhase is the phase of the statement failure comes from.
	failPhase phase
}

// Phases of a job's pipeline.
type phase uint8

const (
	phControl phase = iota
	phSetup
	phPhase1
	phPrior
	phMain
	phConstraints
	phIsolate
	phGuard
	phChecks
	phCleanup
	phSync
	phAfter
)

var phaseNames = [...]string{"", "setup", "earlier phase's", "prior", "predicted", "predicted", "isolation", "guard", "check", "cleanup", "", "after-job check"}

// policyPhase reports the phases whose statements fail by the policy's
// doing: its statements, the deferred constraints they left, the checks
// and the cleanup run on the state they left (the corpus's cleanup passed
// after the reference), and the isolation and the guard, which read what
// the policy's statements made; the policy's statements of an earlier
// phase, and with priorPolicy the prior statements on the state they left
// (sqlexec.Job.PolicyPrior).
func (t txn) policyPhase(ph phase) bool {
	switch ph {
	case phPhase1, phMain, phConstraints, phIsolate, phGuard, phChecks, phCleanup:
		return true
	case phPrior:
		return t.priorPolicy
	}
	return false
}

type jobReq struct {
	ph    phase
	i, n  int // the statement's index and count within its phase (or check)
	check int // the check, for phChecks
	text  string
	keep  bool // collect this result
}

// wired sends every statement as text: a copy's session prepares nothing.
func (r jobReq) wired() wire {
	if r.ph == phSync {
		return wire{op: opSync}
	}
	return wire{op: opQuery, text: r.text}
}

// label names the request's statement for messages.
func (r jobReq) label() string { return stmtLabel(r.i, r.n, r.text) }

// runJob runs t on a free copy and releases it.
func (d *StatefulDB) runJob(ctx context.Context, t txn) (txnOut, error) {
	c, err := d.checkout(ctx)
	if err != nil {
		return txnOut{}, err
	}
	x := d.watch(c)
	r, err := d.run(ctx, c, t)
	if d.s.mw.done(x) {
		// Past the memory bound (memwatch.go): whatever the run reported,
		// the statements were canceled for their memory; the session is
		// replaced, so that a cancel still on its way reaches no other job.
		r.broken = true
		mem := sqlexec.Errorf(sqlexec.KindTooMuchMemory, nil, "%s", d.s.mw.memoryMessage("the statements (or a check on the state they left)"))
		switch {
		case t.policy && ctx.Err() == nil:
			r.out, err = txnOut{failure: mem, failPhase: phMain}, nil
		case err == nil:
			err = fmt.Errorf("postgres: the reference's statements: %w", mem)
		}
	}
	d.release(c, r.after, r.afterErr, r.broken)
	return r.out, err
}

// jobRun is one run of a txn on a copy's session, sent as one pipeline:
// its requests, and what reading their results found. Its steps: build the
// requests (requests), send them (send), read the results in order
// (read), note a run past the job's deadline (overran), and attribute the
// first failure (conclude).
type jobRun struct {
	classifier // the copy's session and the job's limits
	t          txn
	reqs       []jobReq
	// out is the job's outcome for the caller; after the after-job
	// check's, or afterErr why there is none (it did not run, or the
	// session's state is unknown); broken says the session must be
	// replaced.
	out      txnOut
	after    afterJob
	afterErr error
	broken   bool
	// failedAt is the request of the first failure (-1: none), failure
	// its classified error.
	failedAt int
	failure  error
}

// run sends the whole job as one pipeline: BEGIN, limits, DISCARD
// SEQUENCES, the statements, SET CONSTRAINTS ALL IMMEDIATE after main, the
// checks, cleanup; a sync point; ROLLBACK and the after-job check; a sync
// point. The first failing statement skips the rest of the transaction.
// It returns the run (the job's outcome, the after-job check's, whether the
// session is in an unknown state) and an error for a failure of the
// environment.
func (d *StatefulDB) run(ctx context.Context, c *clone, t txn) (r jobRun, err error) {
	r = jobRun{classifier: classifier{pc: c.pc, lim: t.lim}, t: t, failedAt: -1}
	if c.pc == nil || c.pc.IsClosed() {
		r.afterErr, r.broken = errors.New("no session"), true
		return r, sqlexec.Errorf(sqlexec.KindUnavailable, nil, "the session on the private copy %s was lost", c.name)
	}
	r.requests(c, d.iso)
	jctx, cancelJob := r.jobContext(ctx)
	defer cancelJob()
	qctx, cancelBackstop := r.backstop(jctx)
	defer cancelBackstop()
	setMessageCap(r.pc, t.lim)
	p, err := send(qctx, r.pc, r.reqs)
	if err != nil {
		abandon(r.pc)
		r.afterErr, r.broken = err, true
		return r, r.classifyJob(ctx, jctx, qctx, err, "the job")
	}
	if ended, err := r.read(ctx, jctx, qctx, p); ended {
		return r, err
	}
	if p.Close() != nil {
		r.broken = true
	}
	if r.pc.TxStatus() != 'I' {
		r.broken = true
	}
	r.overran(ctx, jctx)
	return r, r.conclude(ctx)
}

// requests builds the pipeline of r.t on copy c (iso isolates the checks).
func (r *jobRun) requests(c *clone, iso isolation) {
	t := r.t
	r.control("BEGIN READ WRITE")
	settings := settingsFor(t.lim)
	for _, name := range limitSettings {
		if v, ok := settings[name]; ok {
			r.control(fmt.Sprintf("SET LOCAL %s = '%s'", name, v))
		}
	}
	r.control("DISCARD SEQUENCES")
	r.add(phSetup, t.setup)
	r.add(phPhase1, t.phase1)
	r.add(phPrior, t.prior)
	r.add(phMain, t.main)
	if t.collectLast && len(t.main) > 0 {
		r.reqs[len(r.reqs)-1].keep = true
	}
	r.reqs = append(r.reqs, jobReq{ph: phConstraints, text: "SET CONSTRAINTS ALL IMMEDIATE"})
	if len(t.checks) > 0 {
		// The checks read the database, not what the session made to
		// shadow it (isolation.go).
		r.add(phIsolate, iso.statements)
		r.reqs = append(r.reqs, jobReq{ph: phGuard, text: iso.guard, keep: true})
	}
	for k, q := range t.checks {
		for i, s := range q {
			r.reqs = append(r.reqs, jobReq{ph: phChecks, i: i, n: len(q), check: k, text: s, keep: i == len(q)-1})
		}
	}
	r.add(phCleanup, t.cleanup)
	r.reqs = append(r.reqs, jobReq{ph: phSync})
	r.reqs = append(r.reqs, jobReq{ph: phAfter, text: "ROLLBACK"})
	chk := c.quick
	if c.uses%fullCheckEvery == fullCheckEvery-1 {
		chk = c.full
	}
	r.reqs = append(r.reqs, jobReq{ph: phAfter, text: chk, keep: true})
	r.reqs = append(r.reqs, jobReq{ph: phSync})
}

func (r *jobRun) control(text string) {
	r.reqs = append(r.reqs, jobReq{ph: phControl, text: text})
}

func (r *jobRun) add(ph phase, texts []string) {
	for i, s := range texts {
		r.reqs = append(r.reqs, jobReq{ph: ph, i: i, n: len(texts), text: s})
	}
}

// jobContext derives from ctx the job's context, bounded by its Deadline.
func (r *jobRun) jobContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if r.t.deadline > 0 {
		return context.WithTimeout(ctx, r.t.deadline)
	}
	return ctx, noCancel
}

// backstop derives from jctx the pipeline's context: a client-side backstop
// of the server's per-statement timeouts.
func (r *jobRun) backstop(jctx context.Context) (context.Context, context.CancelFunc) {
	per := r.t.lim.Timeout
	if per <= 0 {
		per = defaultStatefulStmtTime
	}
	n := time.Duration(len(r.reqs))
	if per < time.Duration(math.MaxInt64)/(2*n) {
		return context.WithTimeout(jctx, n*(per+per/2)+jobBackstopGrace)
	}
	return jctx, noCancel
}

// noCancel is the CancelFunc of a context that was not derived.
func noCancel() {}

// read reads the results in order. A statement the server answered with an
// error skips the rest of its segment (the server did); a failure that
// leaves the session in an unknown state, or a kept result past a cap,
// ends the run: ended is then true and err the run's error.
func (r *jobRun) read(ctx, jctx, qctx context.Context, p *pgconn.Pipeline) (ended bool, err error) {
	r.out.checks = make([]*sqlexec.Result, len(r.t.checks))
	r.afterErr = errors.New("the after-job check did not run")
	for i := 0; i < len(r.reqs); i++ {
		capped, gerr := r.readOne(p, i)
		if capped {
			// A cap: the rest of the result is not read.
			abandon(r.pc)
			return true, r.capped(r.reqs[i], gerr)
		}
		if gerr == nil {
			continue
		}
		var pgErr *pgconn.PgError
		if !errors.As(gerr, &pgErr) || r.reqs[i].ph == phSync {
			r.lost(ctx, jctx, qctx, i, gerr)
			return true, r.conclude(ctx)
		}
		r.answered(ctx, jctx, qctx, i, gerr)
		// The server skipped the rest of this segment: the next result is
		// its sync point.
		for i+1 < len(r.reqs) && r.reqs[i+1].ph != phSync {
			i++
		}
	}
	return false, nil
}

// readOne reads request i's result: the after-job check's outcome, the
// guard's rows (a row is a denial), a kept result (capped: it passed a
// cap), or nothing.
func (r *jobRun) readOne(p *pgconn.Pipeline, i int) (capped bool, err error) {
	q := r.reqs[i]
	rr, err := nextResult(p, q.wired())
	if err != nil || rr == nil {
		return false, err
	}
	switch {
	case q.ph == phAfter && q.keep:
		rows := rr.Read()
		if rows.Err != nil {
			r.afterErr = rows.Err
			return false, rows.Err
		}
		r.after, r.afterErr = parseAfterJob(rows.Rows)
		return false, nil
	case q.ph == phGuard:
		rows := rr.Read()
		if rows.Err == nil && len(rows.Rows) > 0 && r.failedAt < 0 {
			r.failedAt, r.failure = i, sqlexec.Errorf(sqlexec.KindDenied, nil, "%s", rows.Rows[0][0])
		}
		return false, rows.Err
	case q.keep:
		res, err := collect(rr, r.lim)
		if err != nil {
			return true, err
		}
		if q.ph == phChecks {
			r.out.checks[q.check] = res
		} else {
			r.out.last = res
		}
		_, err = rr.Close()
		return false, err
	}
	return false, drain(rr)
}

// lost records a failure that left the session in an unknown state (the
// connection is lost, or a result was not what its request expects): the
// session is abandoned, and the failure is the run's first unless one came
// before.
func (r *jobRun) lost(ctx, jctx, qctx context.Context, i int, gerr error) {
	abandon(r.pc)
	q := r.reqs[i]
	label := "the job"
	if q.ph != phSync && q.ph != phControl {
		label = q.label()
	}
	cerr := r.classifyJob(ctx, jctx, qctx, gerr, label)
	if r.failedAt < 0 && q.ph != phAfter {
		r.failedAt, r.failure = i, cerr
	}
	r.after, r.afterErr, r.broken = afterJob{}, gerr, true
}

// answered records a statement the server answered with an error.
func (r *jobRun) answered(ctx, jctx, qctx context.Context, i int, gerr error) {
	q := r.reqs[i]
	if q.ph == phAfter {
		r.afterErr = gerr
		return
	}
	if r.failedAt >= 0 {
		return
	}
	label := q.label()
	if q.ph == phConstraints {
		label = "the predicted statements (a deferred constraint, checked as a commit would)"
	}
	r.failure = r.classifyJob(ctx, jctx, qctx, gerr, label)
	if r.t.policy && r.t.policyPhase(q.ph) && ctx.Err() == nil && jctx.Err() == nil {
		// The server answered a statement on the state the policy made:
		// whose fault is decided by the session, not the SQLSTATE
		// (classifyPolicy).
		r.failure = r.classifyPolicy(ctx, qctx, gerr, label)
	}
	r.failedAt = i
}

// classifyJob is classify, with the job's deadline (jctx) passing named as
// such.
func (r *jobRun) classifyJob(ctx, jctx, qctx context.Context, err error, label string) error {
	if ctx.Err() == nil && jctx.Err() != nil {
		return sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded,
			"the job did not finish within its deadline of %v (%s was interrupted)", r.t.deadline, label)
	}
	return r.classify(ctx, qctx, err, label)
}

// overran notes a job that ended past its deadline with no failure: the
// cancel request (sent on a connection of its own, so late on a loaded
// server) did not stop it before it ended, and it ran over its deadline
// all the same. The session is replaced, so that a cancel request still in
// flight cannot reach the next job.
func (r *jobRun) overran(ctx, jctx context.Context) {
	if r.failedAt >= 0 || ctx.Err() != nil || jctx.Err() == nil {
		return
	}
	r.broken = true
	r.failedAt = len(r.reqs) - 1
	for i, q := range r.reqs {
		if q.ph == phMain {
			r.failedAt = i
			break
		}
	}
	r.failure = sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded,
		"the job did not finish within its deadline of %v", r.t.deadline)
}

// capped ends a run whose kept result (request q's) passed a cap (the
// session is closed: the rest was not read): the policy's failure when the
// result is its statements' or a check's, else the environment's.
func (r *jobRun) capped(q jobReq, failure error) error {
	r.after, r.afterErr, r.broken = afterJob{}, failure, true
	if r.t.policy && (q.ph == phChecks || q.ph == phMain) {
		r.out.failure, r.out.failPhase = failure, q.ph
		return nil
	}
	r.out = txnOut{}
	return fmt.Errorf("postgres: %s %s: %w", phaseNames[q.ph], q.label(), failure)
}

// conclude attributes the run's first failure: the policy's statements
// (and the checks after them) fail the verdict; everything else, and the
// caller's context ending, is the environment's (an error, and no
// outcome).
func (r *jobRun) conclude(ctx context.Context) error {
	if r.failedAt < 0 {
		return nil
	}
	if ctx.Err() != nil {
		r.out = txnOut{}
		return fmt.Errorf("postgres: the job was interrupted: %w", canceled(ctx))
	}
	ph := r.reqs[r.failedAt].ph
	if r.t.policy && r.t.policyPhase(ph) {
		switch sqlexec.KindOf(r.failure) {
		case sqlexec.KindUnavailable, sqlexec.KindBusy:
			r.out = txnOut{}
			return r.failure
		}
		r.out.failure, r.out.failPhase = r.failure, ph
		return nil
	}
	r.out = txnOut{}
	if ph == phControl || ph == phSync {
		return fmt.Errorf("postgres: running the job: %w", r.failure)
	}
	name := phaseNames[ph]
	if name == "" {
		name = "job"
	}
	if ph == phMain || ph == phConstraints {
		name = "reference"
	}
	return fmt.Errorf("postgres: the %s statement failed: %w", name, r.failure)
}

// abandon closes a session whose state is unknown: its socket first, so
// that nothing more is read, then a cancel request so that the server stops
// too (the server then rolls the transaction back).
func abandon(pc *pgconn.PgConn) {
	if pc.IsClosed() {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		pc.CancelRequest(ctx)
	}()
	pc.Conn().Close()
}

package sqlite

// This file verifies tasks whose SQL changes the database (BIRD-Interact's
// "Management" tasks; PROTOCOL.md §4, last paragraph) on SQLite: Stateful
// implements sqlexec.Stateful for one database. Each job runs on private
// copies (copy.go) made from an image of the pristine database taken once;
// the database file is only ever read, and a job's writes, schema changes
// and temporary tables die with its copy.
//
// A job takes up to two copies, one after the other, never two at once: the
// reference side (Setup, Prior, Reference, then the Checks, then Cleanup),
// whose results are cached per Job.Key and job content; and the predicted
// side (Setup, Prior, Predicted, then the Checks, then Cleanup). Copies are
// bounded by a memory budget (StatefulOptions.MaxCopyBytes; each copy
// reserves its room plus the job's memory cap, what it may use at worst),
// waited for at most StatefulOptions.Wait and then refused with KindBusy;
// databases larger than StatefulOptions.MaxImageBytes are refused outright.
// The budget is a weighted semaphore (golang.org/x/sync/semaphore) rather
// than the house's errgroup helper, because callers arrive one by one and
// must be turned away, not queued. No pool of copies is kept: a copy is a
// fresh connection on a fresh mapping, so that nothing (a pragma, a temporary
// table, an open transaction) can pass from one job to the next.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"avtgym/internal/cache"
	"avtgym/sqlexec"

	"golang.org/x/sync/semaphore"
)

// Defaults of StatefulOptions.
const (
	// DefaultMaxImageBytes is the largest database stateful verification copies.
	DefaultMaxImageBytes int64 = 256 << 20
	// DefaultMaxGrowth is how far a copy may grow beyond the pristine database.
	DefaultMaxGrowth int64 = 16 << 20
	// DefaultMaxCopyBytes is the memory all copies in flight may reserve together.
	DefaultMaxCopyBytes int64 = 1 << 30
	// DefaultCopyWait is how long a job waits for room for its copy.
	DefaultCopyWait = 10 * time.Second
	// DefaultMaxCachedReferences is how many reference sides are kept.
	DefaultMaxCachedReferences = 4096
	// DefaultMaxCachedReferenceBytes is how large the kept reference sides
	// may be together.
	DefaultMaxCachedReferenceBytes int64 = 256 << 20
)

// ErrTestsUnsupported is returned (wrapped) for a job with Python tests:
// BIRD-Interact's test_case functions need a PostgreSQL connection, and the
// SQLite engine verifies with test queries (Job.Checks) only.
var ErrTestsUnsupported = errors.New("tests in Python (Job.Tests) are not supported on SQLite: use test queries (Job.Checks)")

// ErrTooLarge is returned (wrapped) for every job on a database larger than
// StatefulOptions.MaxImageBytes, or one whose copy would need more memory
// than StatefulOptions.MaxCopyBytes.
var ErrTooLarge = errors.New("the database is too large for stateful verification")

// StatefulOptions bound a Stateful verifier. The zero value means the defaults.
type StatefulOptions struct {
	// MaxImageBytes is the largest database (in bytes) that is verified
	// statefully; every job on a larger one fails with ErrTooLarge. 0 means
	// DefaultMaxImageBytes.
	MaxImageBytes int64
	// MaxGrowth is how many bytes a copy may grow beyond the pristine
	// database (and how large its temporary database may grow); a write past
	// it fails with KindTooMuchMemory. 0 means DefaultMaxGrowth.
	MaxGrowth int64
	// MaxCopyBytes bounds the memory of all copies in flight: each reserves
	// the pristine size plus MaxGrowth plus its job's Limits.MaxMemory. 0
	// means DefaultMaxCopyBytes.
	MaxCopyBytes int64
	// Wait is how long a job waits for room for a copy before it fails with
	// KindBusy. 0 means DefaultCopyWait.
	Wait time.Duration
	// MaxCached is how many reference sides (the expected results of a job's
	// checks) are kept; the least recently used is dropped first. 0 means
	// DefaultMaxCachedReferences.
	MaxCached int
	// MaxCachedBytes bounds the kept reference sides' results together
	// (sqlexec.Result.Bytes); the least recently used is dropped first. 0
	// means DefaultMaxCachedReferenceBytes.
	MaxCachedBytes int64
}

func (o StatefulOptions) withDefaults() StatefulOptions {
	if o.MaxImageBytes <= 0 {
		o.MaxImageBytes = DefaultMaxImageBytes
	}
	if o.MaxGrowth <= 0 {
		o.MaxGrowth = DefaultMaxGrowth
	}
	if o.MaxCopyBytes <= 0 {
		o.MaxCopyBytes = DefaultMaxCopyBytes
	}
	if o.Wait <= 0 {
		o.Wait = DefaultCopyWait
	}
	if o.MaxCached <= 0 {
		o.MaxCached = DefaultMaxCachedReferences
	}
	if o.MaxCachedBytes <= 0 {
		o.MaxCachedBytes = DefaultMaxCachedReferenceBytes
	}
	return o
}

// Stateful verifies jobs that change one SQLite database, each on private
// copies of it; it implements sqlexec.Stateful and is safe for concurrent
// use. The database must not change while the verifier is in use (corpus
// databases do not): its image is taken once, on the first job.
type Stateful struct {
	db     *DB
	opt    StatefulOptions
	budget *semaphore.Weighted
	// refs keeps the reference sides' results by refKey; like sqlexec.Cache
	// it does not keep failures that say nothing about the key (the
	// computing caller's context ended, or the environment failed:
	// KindUnavailable, KindBusy).
	refs *cache.Cache[string, []*sqlexec.Result]

	mu     sync.Mutex
	img    *pristine // the pristine image, once taken
	imgErr error     // a permanent refusal (ErrTooLarge)
	// duplicate makes copies duplicate the image even where they could map
	// it copy-on-write (for the tests of that path).
	duplicate bool

	copies   atomic.Int64 // copies open now
	refRuns  atomic.Int64 // reference sides computed (for tests)
	reserved atomic.Int64 // bytes reserved now (for messages)
}

var _ sqlexec.Stateful = (*Stateful)(nil)

// NewStateful returns a stateful verifier for db. It takes nothing from db
// until the first job, so it costs nothing where no job comes.
func NewStateful(db *DB, opt StatefulOptions) *Stateful {
	opt = opt.withDefaults()
	return &Stateful{db: db, opt: opt, budget: semaphore.NewWeighted(opt.MaxCopyBytes), refs: newRefCache(opt)}
}

// Verify runs j (see sqlexec.Job) on private copies of the database and
// decides it by j.Checks (each check's rows after Predicted must equal, under
// j.Policy, its rows after Reference), or, with no checks, by the last
// statement's result of Predicted against Reference's, as sqlexec.Check does.
// The policy's rewrite switches (StripComments, StripDistinct, StripRound)
// apply to the SQL whose results are compared: the checks, or without checks
// the last statement of Predicted and of Reference; statements that only
// change the state run as written.
//
// A failure of the predicted SQL, a check that fails on the state it left
// (its table dropped, its result over a cap), and a Cleanup that fails on
// that state are the policy's: a failed Verdict (Err set for the first); so
// is, with Job.PolicyPrior, a failure in Prior (the policy's earlier SQL
// failing when run again, or the corpus's statements failing on the state
// it left). The error is reserved for the environment: Setup or Prior
// failing (Prior otherwise), the
// reference side failing (the record is invalid; also cached), no copy within
// the wait (KindBusy), a database too large (ErrTooLarge), Python tests
// (ErrTestsUnsupported), ctx ending. Cleanup runs on the predicted copy only
// when the verdict is still a success (the copy is dropped either way).
func (s *Stateful) Verify(ctx context.Context, j sqlexec.Job) (sqlexec.Verdict, error) {
	if len(j.Tests) > 0 {
		return sqlexec.Verdict{}, fmt.Errorf("sqlite: job %q has %d test functions: %w", j.Key, len(j.Tests), ErrTestsUnsupported)
	}
	if len(j.Reference) == 0 {
		return sqlexec.Verdict{}, fmt.Errorf("sqlite: job %q has no reference statements", j.Key)
	}
	if err := ctx.Err(); err != nil {
		return sqlexec.Verdict{}, fmt.Errorf("sqlite: verifying job %q: %w", j.Key, err)
	}
	img, err := s.image(ctx)
	if err != nil {
		return sqlexec.Verdict{}, err
	}
	pl := newPlan(j)
	want, err := s.expected(ctx, img, j, pl)
	if err != nil {
		var rf *referenceFailure
		if j.ReferenceFailureFails && errors.As(err, &rf) && ctx.Err() == nil && sqlexec.Lasting(err) {
			// The a-Interact harness scores a failing reference 0
			// (ex_base); the policy's SQL is not run. The reason does not
			// name the job's key (an internal name, NUL bytes and all).
			return sqlexec.Verdict{Reason: rf.reason}, nil
		}
		return sqlexec.Verdict{}, err
	}
	return s.predicted(ctx, img, j, pl, want)
}

// referenceFailure is a failure of the reference side's own SQL (its
// statements, a check, its cleanup), as opposed to Setup, Prior or the
// environment; Job.ReferenceFailureFails makes it a failed verdict.
type referenceFailure struct {
	// key is the job's (for the error); reason is the message without it
	// (for a verdict).
	key, reason string
	err         error
}

func (e *referenceFailure) Error() string { return fmt.Sprintf("sqlite: job %q: %s", e.key, e.reason) }
func (e *referenceFailure) Unwrap() error { return e.err }

// plan is a job's SQL as the two sides run it.
type plan struct {
	reference []string         // j.Reference, the last statement rewritten when there are no checks
	predicted string           // j.Predicted, likewise
	checks    []string         // j.Checks, rewritten
	policies  []sqlexec.Policy // per compared result: j.Policy resolved against its reference SQL
}

func newPlan(j sqlexec.Job) plan {
	p := j.Policy
	pl := plan{reference: j.Reference, predicted: j.Predicted}
	if len(j.Checks) == 0 {
		pl.reference = append([]string(nil), j.Reference...)
		last := len(pl.reference) - 1
		pl.reference[last] = rewriteLast(p, pl.reference[last])
		pl.predicted = rewriteLast(p, j.Predicted)
		stmts := sqlexec.SplitStatements(pl.reference[last])
		ref := ""
		if len(stmts) > 0 {
			ref = stmts[len(stmts)-1]
		}
		pl.policies = []sqlexec.Policy{p.Resolve(ref)}
		return pl
	}
	for _, c := range j.Checks {
		c = p.Rewrite(c)
		pl.checks = append(pl.checks, c)
		pl.policies = append(pl.policies, p.Resolve(c))
	}
	return pl
}

// rewriteLast applies p's rewrite switches to the last statement of text only.
func rewriteLast(p sqlexec.Policy, text string) string {
	if p.Rewrite(text) == text {
		return text
	}
	stmts := sqlexec.SplitStatements(text)
	if len(stmts) == 0 {
		return text
	}
	// The statements are trimmed substrings of text, in order: find each
	// after the one before it; the last ends at at.
	at := 0
	for _, st := range stmts {
		i := strings.Index(text[at:], st)
		if i < 0 { // cannot happen; rewrite it all rather than nothing
			return p.Rewrite(text)
		}
		at += i + len(st)
	}
	last := stmts[len(stmts)-1]
	i := at - len(last)
	return text[:i] + p.Rewrite(last) + text[at:]
}

// expected returns the reference side's results: one per check, or the
// reference's last result when there are no checks. With a Key they are
// computed once per key and job content.
func (s *Stateful) expected(ctx context.Context, img *pristine, j sqlexec.Job, pl plan) ([]*sqlexec.Result, error) {
	compute := func(ctx context.Context) ([]*sqlexec.Result, error) { return s.reference(ctx, img, j, pl) }
	if j.Key == "" {
		return compute(ctx)
	}
	return s.refs.Get(ctx, refKey(j), compute)
}

// reference runs the reference side on a copy of its own.
func (s *Stateful) reference(ctx context.Context, img *pristine, j sqlexec.Job, pl plan) ([]*sqlexec.Result, error) {
	s.refRuns.Add(1)
	cp, jctx, done, err := s.open(ctx, img, j)
	if err != nil {
		return nil, err
	}
	defer done()
	fail := func(what string, i int, err error) error {
		return &referenceFailure{key: j.Key, reason: fmt.Sprintf("the reference side failed: %s %d: %v", what, i+1, err), err: err}
	}
	if _, err := s.prepare(ctx, jctx, cp, j, referencePrior(j), 0); err != nil {
		return nil, err
	}
	var out []*sqlexec.Result
	for i, q := range pl.reference {
		keep := len(pl.checks) == 0 && i == len(pl.reference)-1
		r, err := cp.exec(jctx, q, j.Limits, unitOptions{keep: keep, empty: !keep})
		if err != nil {
			return nil, fail("reference", i, err)
		}
		if keep {
			out = append(out, r)
		}
	}
	if len(pl.checks) > 0 {
		if err := cp.dropTemp(jctx, j.Limits); err != nil {
			return nil, &referenceFailure{key: j.Key, reason: fmt.Sprintf("the reference side failed: dropping its temporary objects: %v", err), err: err}
		}
	}
	for i, q := range pl.checks {
		r, err := cp.exec(jctx, q, j.Limits, unitOptions{keep: true, readOnly: true})
		if err != nil {
			return nil, fail("check", i, err)
		}
		out = append(out, r)
	}
	for i, q := range j.Cleanup {
		if _, err := cp.exec(jctx, q, j.Limits, unitOptions{empty: true}); err != nil {
			return nil, fail("cleanup statement", i, err)
		}
	}
	return out, nil
}

// referencePrior is what the reference side runs after Setup: the job's
// ExpectedPrior when it has one, else its Prior.
func referencePrior(j sqlexec.Job) []string {
	if j.ExpectedPrior != nil {
		return j.ExpectedPrior
	}
	return j.Prior
}

// prepare runs Setup and prior (the job's Prior, or on the reference side
// its ExpectedPrior), whose failures are the environment's (an error),
// except with policy > 0 (Job.PolicyPrior, on the predicted side): then a
// failure in prior that the policy's SQL caused is the policy's, returned
// as the failed verdict (v not nil, err nil).
func (s *Stateful) prepare(ctx, jctx context.Context, cp *dbCopy, j sqlexec.Job, prior []string, policy int) (v *sqlexec.Verdict, err error) {
	for i, q := range j.Setup {
		if _, err := cp.exec(jctx, q, j.Limits, unitOptions{empty: true}); err != nil {
			return v, fmt.Errorf("sqlite: job %q: setup statement %d failed: %w", j.Key, i+1, err)
		}
	}
	for i, q := range prior {
		_, err := cp.exec(jctx, q, j.Limits, unitOptions{empty: true})
		if err == nil {
			continue
		}
		if policy > 0 && policyFailure(ctx, err) {
			pv := priorVerdict(i, policy, err)
			return &pv, nil
		}
		return v, fmt.Errorf("sqlite: job %q: prior statement %d (accepted in an earlier phase) failed: %w", j.Key, i+1, err)
	}
	return v, nil
}

// policyFailure reports whether err, a statement's failure on a copy the
// policy's SQL shaped, is the policy's: anything the engine classifies as
// a failure of SQL (a kind other than KindUnavailable and KindBusy, the
// job's own deadline included as KindTimeout), while the caller's ctx
// lives. No kind (the copy itself failing), KindUnavailable and KindBusy
// are the environment's, as for the predicted statements.
func policyFailure(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch sqlexec.KindOf(err) {
	case 0, sqlexec.KindUnavailable, sqlexec.KindBusy:
		return false
	}
	return true
}

// priorVerdict is the failed verdict of statement i of a Prior whose first
// policy texts are the policy's own SQL (Job.PolicyPrior): the policy's
// text's error is its feedback (Err); a corpus statement's, on the state
// the policy's SQL left, is privileged (the Reason only, as a check's).
func priorVerdict(i, policy int, err error) sqlexec.Verdict {
	if i < policy {
		e := sqlexec.Errorf(sqlexec.KindOf(err), err, "the SQL accepted in an earlier phase failed when it was run again to rebuild its state: %v", err)
		return sqlexec.Verdict{Reason: e.Error(), Err: e}
	}
	return sqlexec.Verdict{Reason: fmt.Sprintf("statement %d of the task's own after the SQL accepted in an earlier phase (a cleanup or the follow-up's setup) failed on the state that SQL left: %v", i-policy+1, err)}
}

// predicted runs the predicted side on a copy of its own and decides.
func (s *Stateful) predicted(ctx context.Context, img *pristine, j sqlexec.Job, pl plan, want []*sqlexec.Result) (sqlexec.Verdict, error) {
	cp, jctx, done, err := s.open(ctx, img, j)
	if err != nil {
		return sqlexec.Verdict{}, err
	}
	defer done()
	if v, err := s.prepare(ctx, jctx, cp, j, j.Prior, j.PolicyPrior); err != nil || v != nil {
		if v == nil {
			return sqlexec.Verdict{}, err
		}
		return *v, nil
	}
	// policyErr sorts a failure on the predicted state: the policy's (a
	// failed verdict, nil) or the environment's (an error).
	policyErr := func(what string, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("sqlite: job %q: %s: %w", j.Key, what, cerr)
		}
		switch sqlexec.KindOf(err) {
		case 0, sqlexec.KindUnavailable, sqlexec.KindBusy:
			return fmt.Errorf("sqlite: job %q: %s: %w", j.Key, what, err)
		}
		return nil
	}
	noChecks := len(pl.checks) == 0
	got, err := cp.exec(jctx, pl.predicted, j.Limits, unitOptions{keep: noChecks})
	if err != nil {
		if env := policyErr("running the prediction", err); env != nil {
			return sqlexec.Verdict{}, env
		}
		return sqlexec.Verdict{Reason: err.Error(), Err: err}, nil
	}
	if noChecks {
		if ok, reason := sqlexec.Compare(pl.policies[0], got, want[0]); !ok {
			return sqlexec.Verdict{Reason: reason}, nil
		}
	}
	if len(pl.checks) > 0 {
		if err := cp.dropTemp(jctx, j.Limits); err != nil {
			if env := policyErr("dropping the temporary objects", err); env != nil {
				return sqlexec.Verdict{}, env
			}
			return sqlexec.Verdict{Reason: fmt.Sprintf("the temporary objects the prediction made could not be dropped before the checks: %v", err)}, nil
		}
	}
	for i, q := range pl.checks {
		r, err := cp.exec(jctx, q, j.Limits, unitOptions{keep: true, readOnly: true})
		if err != nil {
			if env := policyErr(fmt.Sprintf("check %d", i+1), err); env != nil {
				return sqlexec.Verdict{}, env
			}
			return sqlexec.Verdict{Reason: fmt.Sprintf("check %d of %d failed on the state the prediction left: %v", i+1, len(pl.checks), err)}, nil
		}
		if ok, reason := sqlexec.Compare(pl.policies[i], r, want[i]); !ok {
			return sqlexec.Verdict{Reason: fmt.Sprintf("check %d of %d: %s", i+1, len(pl.checks), reason)}, nil
		}
	}
	for i, q := range j.Cleanup {
		if _, err := cp.exec(jctx, q, j.Limits, unitOptions{empty: true}); err != nil {
			if env := policyErr(fmt.Sprintf("cleanup statement %d", i+1), err); env != nil {
				return sqlexec.Verdict{}, env
			}
			return sqlexec.Verdict{Reason: fmt.Sprintf("cleanup statement %d failed on the state the prediction left: %v", i+1, err)}, nil
		}
	}
	return sqlexec.Verdict{Success: true}, nil
}

// open reserves room for a copy, opens it and starts the job's deadline; done
// closes the copy and gives the room back.
func (s *Stateful) open(ctx context.Context, img *pristine, j sqlexec.Job) (cp *dbCopy, jctx context.Context, done func(), err error) {
	weight := img.room + max(j.Limits.MaxMemory, 0)
	if weight > s.opt.MaxCopyBytes {
		return nil, nil, nil, fmt.Errorf("sqlite: a private copy of %s may need %s (the database, %s of growth and a memory cap of %s), more than all copies may use together (%s): %w",
			s.db.path, formatBytes(weight), formatBytes(s.opt.MaxGrowth), formatBytes(j.Limits.MaxMemory), formatBytes(s.opt.MaxCopyBytes), ErrTooLarge)
	}
	if !s.budget.TryAcquire(weight) {
		wctx, cancel := context.WithTimeout(ctx, s.opt.Wait)
		err := s.budget.Acquire(wctx, weight)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, nil, sqlexec.Errorf(sqlexec.KindUnavailable, ctx.Err(), "the job was canceled while waiting for a private copy of the database: %v", ctx.Err())
			}
			return nil, nil, nil, sqlexec.Errorf(sqlexec.KindBusy, nil,
				"no room for a private copy of the database within %v (%d copies hold %s of %s)",
				s.opt.Wait, s.copies.Load(), formatBytes(s.reserved.Load()), formatBytes(s.opt.MaxCopyBytes))
		}
	}
	s.reserved.Add(weight)
	release := func() {
		s.reserved.Add(-weight)
		s.budget.Release(weight)
	}
	cp, err = openCopy(img)
	if err != nil {
		release()
		return nil, nil, nil, sqlexec.Errorf(sqlexec.KindUnavailable, err, "%v", err)
	}
	s.copies.Add(1)
	jctx, cancel := ctx, context.CancelFunc(func() {})
	if j.Deadline > 0 {
		jctx, cancel = context.WithTimeout(ctx, j.Deadline)
	}
	return cp, jctx, func() {
		cancel()
		cp.Close()
		s.copies.Add(-1)
		release()
	}, nil
}

// image returns the pristine database's image, taking it on first use.
func (s *Stateful) image(ctx context.Context) (*pristine, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.img != nil || s.imgErr != nil {
		return s.img, s.imgErr
	}
	tooLarge := func(n int64) error {
		s.imgErr = fmt.Errorf("sqlite: %s is %s, and stateful verification copies databases up to %s: %w",
			s.db.path, formatBytes(n), formatBytes(s.opt.MaxImageBytes), ErrTooLarge)
		return s.imgErr
	}
	if fi, err := os.Stat(s.db.path); err == nil && fi.Size() > s.opt.MaxImageBytes {
		return nil, tooLarge(fi.Size())
	}
	conn, err := s.db.db.Conn(ctx)
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	defer conn.Close()
	var img []byte
	err = conn.Raw(func(dc any) error {
		rc, ok := dc.(*roConn)
		if !ok {
			return fmt.Errorf("sqlite: unexpected driver connection %T", dc)
		}
		var err error
		img, err = rc.cc.serialize()
		return err
	})
	if err != nil {
		return nil, sqlexec.Errorf(sqlexec.KindUnavailable, err, "taking an image of %s: %v", s.db.path, err)
	}
	if int64(len(img)) > s.opt.MaxImageBytes {
		return nil, tooLarge(int64(len(img)))
	}
	// A database in WAL mode cannot be deserialised; its image, which holds
	// every page, can be read in rollback mode (file format bytes 18, 19).
	if len(img) >= 100 && (img[18] == 2 || img[19] == 2) {
		img[18], img[19] = 1, 1
	}
	p := &pristine{size: int64(len(img)), room: int64(len(img)) + s.opt.MaxGrowth}
	if !s.duplicate {
		p.cow, _ = newCOWFile(img, p.room)
	}
	if p.cow == nil { // no memory file here: copies duplicate the image
		p.data = img
	}
	s.img = p
	return p, nil
}

// refKey is the cache key of a job's reference side: its Key and a digest of
// everything the side depends on, so that a key reused for other SQL never
// returns stale rows.
func refKey(j sqlexec.Job) string {
	h := sha256.New()
	var n [8]byte
	put := func(ss ...string) {
		binary.LittleEndian.PutUint64(n[:], uint64(len(ss)))
		h.Write(n[:])
		for _, s := range ss {
			binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
			h.Write(n[:])
			h.Write([]byte(s))
		}
	}
	put(j.Setup...)
	// The reference side's prior: with ExpectedPrior the side does not
	// depend on Prior (the policy's), so that one entry serves every
	// policy's phase 1; the marker keeps the two forms apart.
	if j.ExpectedPrior != nil {
		put("expected-prior")
	} else {
		put("prior")
	}
	put(referencePrior(j)...)
	put(j.Reference...)
	put(j.Checks...)
	put(j.Cleanup...)
	p := j.Policy
	put(fmt.Sprint(p.StripComments, p.StripDistinct, p.StripRound), fmt.Sprint(j.Limits, j.Deadline))
	return fmt.Sprintf("%s\x00%x", j.Key, h.Sum(nil))
}

// newRefCache returns the cache of reference sides, bounded by opt.
func newRefCache(opt StatefulOptions) *cache.Cache[string, []*sqlexec.Result] {
	return cache.New(cache.Options[string, []*sqlexec.Result]{
		MaxEntries: opt.MaxCached,
		MaxBytes:   opt.MaxCachedBytes,
		Size: func(key string, rs []*sqlexec.Result, _ error) int64 {
			n := int64(len(key)) + 64
			for _, r := range rs {
				if r != nil {
					n += r.Bytes
				}
			}
			return n
		},
		KeepError: sqlexec.Lasting,
	})
}

var _ sqlexec.StateQuerier = (*Stateful)(nil)

// QueryState runs q (see sqlexec.StateQuery) on a private copy of its own:
// Setup and Prior, then q.SQL, every statement of which must be read-only,
// bounded by q.Limits (rows, bytes, time, memory) as a query is; the last
// statement's rows are returned and the copy dropped. The policy's SQL
// failing (denied, a syntax error, a limit) is an *sqlexec.Error of its
// kind; so is Prior failing by the policy's doing (q.PolicyPrior, see
// stateFailure); Setup or Prior failing otherwise is an error of kind 0
// (the environment's: they ran before on the same state), as are a
// database too large
// (ErrTooLarge), no copy within the wait (KindBusy) and ctx ending.
func (s *Stateful) QueryState(ctx context.Context, q sqlexec.StateQuery) (*sqlexec.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: querying the state of %q: %w", q.Key, err)
	}
	img, err := s.image(ctx)
	if err != nil {
		return nil, err
	}
	j := sqlexec.Job{Key: q.Key, Setup: q.Setup, Prior: q.Prior, Limits: q.Limits, Deadline: q.Deadline}
	cp, jctx, done, err := s.open(ctx, img, j)
	if err != nil {
		return nil, err
	}
	defer done()
	v, err := s.prepare(ctx, jctx, cp, j, j.Prior, q.PolicyPrior)
	if err != nil {
		// Not the policy's failure: drop the kind, so that no caller
		// reads it as feedback on the policy's SQL.
		return nil, errors.New(err.Error())
	}
	if v != nil {
		return nil, stateFailure(*v)
	}
	if strings.TrimSpace(q.SQL) == "" {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "no SQL statement to run")
	}
	res, err := cp.exec(jctx, q.SQL, q.Limits, unitOptions{keep: true, readOnly: true})
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, fmt.Errorf("sqlite: querying the state of %q: %w", q.Key, cerr)
		}
		return nil, err
	}
	return res, nil
}

// stateFailure is a Prior failure of the policy's doing (a priorVerdict)
// as QueryState reports it: an *sqlexec.Error, which the policy sees, with
// its own SQL's error, or without the corpus statement's text and error.
func stateFailure(v sqlexec.Verdict) error {
	if v.Err != nil {
		return v.Err
	}
	return sqlexec.Errorf(sqlexec.KindExecution, nil, "the state the SQL accepted in an earlier phase left could not be prepared: a statement of the task's (a cleanup or the follow-up's setup) failed on it")
}

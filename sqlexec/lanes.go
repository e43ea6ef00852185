package sqlexec

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// LaneOptions configure Lanes. Zero values mean the defaults.
type LaneOptions struct {
	// Fast is how many queries may run at once in the fast lane, where every
	// query starts; default 2 × GOMAXPROCS.
	Fast int
	// Slow is how many queries may run at once in the slow lane, where a query
	// that outlived its first slice is run again; default 2 × GOMAXPROCS (they
	// run at low priority, on what CPU the fast lane leaves).
	Slow int
	// Slice is the time a query may run in the fast lane; default 50ms.
	Slice time.Duration
	// Wait bounds the wait for a slot in either lane; a query that waits
	// longer fails with KindBusy. Default 10s.
	Wait time.Duration
	// SlowThread, when set, is called once on each slow-lane worker's OS
	// thread (the worker stays locked to it). The SQLite engine lowers the
	// thread's CPU priority there, so that slow queries run on what CPU the
	// fast lane leaves.
	SlowThread func()
}

// Defaults of LaneOptions.
const (
	DefaultSlice    = 50 * time.Millisecond
	DefaultLaneWait = 10 * time.Second
)

// Lanes share a process's query capacity fairly between quick queries and
// slow ones (hostile or not): a slow query holds at most its own slot, and
// quick queries keep a bounded wait while slow ones run.
//
// Every query starts in the fast lane with Slice as its time limit. A query
// that is stopped by that slice (and had more time) is run again, from the
// start, in the slow lane with the rest of its time: a few workers (Slow),
// each on its own OS thread, at lower CPU priority where SlowThread arranges
// it. The first slice's work is repeated, which costs at most Slice per slow
// query and keeps every query's resources bounded: a query waiting for a
// slow slot holds no connection, memory or CPU. Waiting for a slot in either
// lane is bounded by Wait, and that wait never counts against the query's own
// time limit; a query that cannot get a slot in time fails with KindBusy, an
// environment condition (the caller retries later), never the query's fault.
//
// One Lanes value schedules every engine of a process: CPU is shared by all
// databases. Lanes are safe for concurrent use.
type Lanes struct {
	opt  LaneOptions
	fast chan struct{} // a token per running fast-lane query
	slow chan func()   // jobs for idle slow-lane workers
	// workers holds a token per live slow-lane worker. Workers start on
	// demand and exit after slowIdle without work, so an idle process (or
	// a test) keeps no slow-lane goroutines or threads.
	workers chan struct{}

	demoted, busyCount atomic.Int64
	slowRunning        atomic.Int64
}

// LaneStats is a snapshot of the lanes' activity.
type LaneStats struct {
	// FastRunning and SlowRunning are the queries running in each lane now.
	FastRunning, SlowRunning int
	// Demoted counts the queries that outlived their slice and were run again in
	// the slow lane; Busy counts the queries refused with KindBusy.
	Demoted, Busy int64
}

// Stats returns the lanes' current activity.
func (l *Lanes) Stats() LaneStats {
	return LaneStats{
		FastRunning: len(l.fast),
		SlowRunning: int(l.slowRunning.Load()),
		Demoted:     l.demoted.Load(),
		Busy:        l.busyCount.Load(),
	}
}

// slowIdle is how long a slow-lane worker waits for work before it exits.
const slowIdle = time.Second

// NewLanes returns lanes with opt's settings (defaults for zero values).
func NewLanes(opt LaneOptions) *Lanes {
	p := runtime.GOMAXPROCS(0)
	if opt.Fast <= 0 {
		opt.Fast = 2 * p
	}
	if opt.Slow <= 0 {
		opt.Slow = 2 * p
	}
	if opt.Slice <= 0 {
		opt.Slice = DefaultSlice
	}
	if opt.Wait <= 0 {
		opt.Wait = DefaultLaneWait
	}
	return &Lanes{opt: opt, fast: make(chan struct{}, opt.Fast), slow: make(chan func()), workers: make(chan struct{}, opt.Slow)}
}

// Options returns the options with the defaults applied.
func (l *Lanes) Options() LaneOptions { return l.opt }

// Capacity is the most queries that can run at once (both lanes): an engine's
// connection pool needs no more.
func (l *Lanes) Capacity() int { return l.opt.Fast + l.opt.Slow }

var (
	defaultLanesOnce sync.Once
	defaultLanes     *Lanes
)

// DefaultLanes returns the process's shared lanes with default options, for
// callers that were given none.
func DefaultLanes() *Lanes {
	defaultLanesOnce.Do(func() { defaultLanes = NewLanes(LaneOptions{}) })
	return defaultLanes
}

// Scheduled returns eng with every Query run through l. A nil l means
// DefaultLanes().
func Scheduled(eng Engine, l *Lanes) Engine {
	if l == nil {
		l = DefaultLanes()
	}
	if s, ok := eng.(*scheduled); ok {
		eng = s.Engine
	}
	return &scheduled{Engine: eng, l: l}
}

// Unscheduled returns the engine under a Scheduled one (eng itself
// otherwise), for callers that manage the engine's lifetime.
func Unscheduled(eng Engine) Engine {
	if s, ok := eng.(*scheduled); ok {
		return s.Engine
	}
	return eng
}

type scheduled struct {
	Engine
	l *Lanes
}

// Query runs sql in the fast lane for at most one slice, then, if the slice
// stopped it, again in the slow lane with the rest of lim.Timeout.
func (s *scheduled) Query(ctx context.Context, sql string, lim Limits) (*Result, error) {
	l := s.l
	if err := l.acquireFast(ctx); err != nil {
		return nil, err
	}
	first := lim
	sliced := lim.Timeout > l.opt.Slice
	if sliced {
		first.Timeout = l.opt.Slice
	}
	res, err := s.Engine.Query(ctx, sql, first)
	<-l.fast
	if !sliced || KindOf(err) != KindTimeout || ctx.Err() != nil {
		return res, err
	}
	l.demoted.Add(1)
	rest := lim
	rest.Timeout = lim.Timeout - l.opt.Slice
	res, err = l.runSlow(ctx, func() (*Result, error) { return s.Engine.Query(ctx, sql, rest) })
	var e *Error
	if errors.As(err, &e) && e.Kind == KindTimeout && ctx.Err() == nil {
		return nil, Errorf(KindTimeout, e.Err, "the query did not finish within the time limit of %v and was interrupted", lim.Timeout)
	}
	return res, err
}

func (l *Lanes) acquireFast(ctx context.Context) error {
	select {
	case l.fast <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(l.opt.Wait)
	defer t.Stop()
	select {
	case l.fast <- struct{}{}:
		return nil
	case <-t.C:
		return l.busy("fast")
	case <-ctx.Done():
		return waitCanceled(ctx)
	}
}

func (l *Lanes) busy(lane string) error {
	l.busyCount.Add(1)
	return Errorf(KindBusy, nil, "the verifier is saturated: no %s-lane slot became free within %v; retry later", lane, l.opt.Wait)
}

func waitCanceled(ctx context.Context) error {
	return Errorf(KindUnavailable, ctx.Err(), "the call ended while its query waited for a slot: %v", ctx.Err())
}

// runSlow hands run to a slow-lane worker (an idle one, or a new one while
// fewer than Slow run), waiting at most Wait for one.
func (l *Lanes) runSlow(ctx context.Context, run func() (*Result, error)) (*Result, error) {
	type outcome struct {
		res *Result
		err error
	}
	done := make(chan outcome, 1)
	job := func() {
		l.slowRunning.Add(1)
		res, err := run()
		l.slowRunning.Add(-1)
		done <- outcome{res, err}
	}
	t := time.NewTimer(l.opt.Wait)
	defer t.Stop()
	select {
	case l.slow <- job:
	case l.workers <- struct{}{}:
		go l.worker(job)
	case <-t.C:
		return nil, l.busy("slow")
	case <-ctx.Done():
		return nil, waitCanceled(ctx)
	}
	o := <-done // the query itself stops when ctx ends
	return o.res, o.err
}

// worker runs slow-lane jobs on its own OS thread, locked for the worker's
// whole life: when the worker exits, the thread exits with it, so that what
// SlowThread did to the thread (a lower priority) never reaches other work.
func (l *Lanes) worker(job func()) {
	runtime.LockOSThread() // never unlocked
	defer func() { <-l.workers }()
	if l.opt.SlowThread != nil {
		l.opt.SlowThread()
	}
	idle := time.NewTimer(slowIdle)
	defer idle.Stop()
	for {
		job()
		idle.Reset(slowIdle)
		select {
		case job = <-l.slow:
		case <-idle.C:
			return
		}
	}
}

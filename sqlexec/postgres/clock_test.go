package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/internal/pgtest"
	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
)

// fakeClock is a Clock whose Sleep returns at once: it records the wait
// and moves Now on by it. onSleep, when set, runs first with the wait's
// number (from 1), and an error it returns is Sleep's.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	sleeps  []time.Duration
	onSleep func(n int, d time.Duration) error
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	n, hook := len(c.sleeps), c.onSleep
	c.mu.Unlock()
	if hook != nil {
		if err := hook(n, d); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (c *fakeClock) waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sleeps)
}

// fakeClockServer connects a Server of its own whose Clock is clock (the
// package's shared Server keeps real time), with cfg's other settings.
func fakeClockServer(t *testing.T, clock *fakeClock, cfg Config) *Server {
	t.Helper()
	cfg.AdminURL, cfg.Clock = pgtest.URL(t), clock
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("ConnectConfig: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestRecycleBacksOff: a copy whose re-clone fails is cloned again after
// pauses that double (100ms, 200ms, 400ms), each waited on the Server's
// Clock, until it succeeds; verification then goes on.
func TestRecycleBacksOff(t *testing.T) {
	_, db := harbor(t)
	clock := newFakeClock()
	s := fakeClockServer(t, clock, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The prediction's run waits for the re-clone: give it all the time a
	// loaded machine may need.
	d, err := s.OpenStateful(ctx, db.Name(), StatefulOptions{Clones: 1, MaxUses: 1, Wait: time.Minute})
	if err != nil {
		t.Fatalf("OpenStateful: %v", err)
	}
	defer d.Close()

	// The first re-clone (after the reference's run: MaxUses 1) fails
	// until the third pause: its template is missing until then.
	tpl := d.tpl
	d.tpl = "avtgym_no_such_template"
	clock.onSleep = func(n int, _ time.Duration) error {
		if n == 3 {
			d.tpl = tpl // on the re-clone's goroutine, which reads it
		}
		return nil
	}
	mustVerify(t, d, hostileJob{sql: insertManifest}.job(), true)
	if got, want := clock.waits(), []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond}; !slices.Equal(got, want) {
		t.Errorf("the re-clone waited %v, want %v", got, want)
	}
	if n := strings.Count(strings.Join(s.Warnings(), "\n"), "re-cloning"); n != 3 {
		t.Errorf("%d warnings of a failed re-clone, want 3: %v", n, s.Warnings())
	}
	if st := d.Stats(); st.Reclones != 2 {
		t.Errorf("%d re-clones, want 2 (one after each run)", st.Reclones)
	}
}

// TestWaitSessionsGoneBacksOff: a session left on a copy is polled with
// pauses that double from 500µs up to 20ms, on the Server's Clock, and
// terminated once the grace has passed on that Clock.
func TestWaitSessionsGoneBacksOff(t *testing.T) {
	_, db := harbor(t)
	clock := newFakeClock()
	s := fakeClockServer(t, clock, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := s.OpenStateful(ctx, db.Name(), StatefulOptions{Clones: 1})
	if err != nil {
		t.Fatalf("OpenStateful: %v", err)
	}
	defer d.Close()
	give := holdAll(t, d)
	defer give()
	c := d.clones[0]

	// A session that stays, as a PyRunner's might.
	stray, err := pgx.ConnectConfig(ctx, s.policyConfig(c.name).ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close(context.Background())
	const grace = 100 * time.Millisecond
	n, err := s.waitSessionsGone(ctx, c.name, c.pc.PID(), grace)
	if err != nil || n != 1 {
		t.Fatalf("waitSessionsGone: %d terminated, %v; want 1", n, err)
	}
	if err := stray.Ping(ctx); err == nil {
		t.Error("the stray session still answers")
	}
	want := []time.Duration{500 * time.Microsecond, time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond,
		8 * time.Millisecond, 16 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}
	got := clock.waits()
	if len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Fatalf("waited %v, want %v first (the grace of %v, then the termination)", got, want, grace)
	}
	var before time.Duration
	for _, w := range want[:len(want)-1] {
		before += w
	}
	if before > grace {
		t.Errorf("the session was polled past its grace before it was terminated (%v)", before)
	}
}

// TestBudgetWaitsOnTheClock: a query pool waiting for room in a spent
// connection budget tries again after each reclaimPause on the Server's
// Clock; when the wait ends the query is KindBusy, wrapping ErrBudget.
func TestBudgetWaitsOnTheClock(t *testing.T) {
	clock := newFakeClock()
	const total = queryFloor + 1 // the least budget there is
	s := fakeClockServer(t, clock, Config{Role: budgetRole, Connections: total, ConnectionLimit: 40})
	ctx := context.Background()
	corpus := uniqueCorpus(t, s)
	name, err := s.EnsureDatabase(ctx, corpus, "clock", Script("d.sql", "CREATE TABLE t (x int);"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := s.Open(ctx, name, Options{MaxConns: 2 * total})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for range total { // every connection of the budget, held
		held, err := db.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
	}

	errWaitOver := errors.New("the wait is over")
	clock.onSleep = func(n int, _ time.Duration) error {
		if n == 3 {
			return errWaitOver
		}
		return nil
	}
	_, err = db.Query(ctx, "SELECT 1", sqlexec.DefaultLimits())
	if sqlexec.KindOf(err) != sqlexec.KindBusy || !errors.Is(err, ErrBudget) || !errors.Is(err, errWaitOver) {
		t.Fatalf("a query with the budget spent: %v, want KindBusy wrapping ErrBudget", err)
	}
	if got, want := clock.waits(), []time.Duration{reclaimPause, reclaimPause, reclaimPause}; !slices.Equal(got, want) {
		t.Errorf("the pool waited %v, want %v", got, want)
	}
}

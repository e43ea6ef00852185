package cache

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// counter is a compute function that counts its calls and returns
// value(key).
type counter struct{ calls atomic.Int64 }

func (n *counter) of(key string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		n.calls.Add(1)
		return "v:" + key, nil
	}
}

func newStrings(maxEntries int) *Cache[string, string] {
	return New(Options[string, string]{MaxEntries: maxEntries})
}

// TestSingleFlight: concurrent callers of one key share one computation
// and its value; later callers hit the kept value.
func TestSingleFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newStrings(8)
		var calls atomic.Int64
		gate := make(chan struct{})
		const n = 64
		got := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				v, err := c.Get(context.Background(), "k", func(context.Context) (string, error) {
					calls.Add(1)
					<-gate
					return "value", nil
				})
				if err != nil {
					t.Errorf("caller %d: %v", i, err)
				}
				got[i] = v
			})
		}
		synctest.Wait() // every caller is computing or waiting
		if calls.Load() != 1 {
			t.Fatalf("%d computations in flight for one key, want 1", calls.Load())
		}
		close(gate)
		wg.Wait()
		for i, v := range got {
			if v != "value" {
				t.Fatalf("caller %d got %q", i, v)
			}
		}
		v, err := c.Get(context.Background(), "k", func(context.Context) (string, error) {
			t.Error("a kept value was computed again")
			return "", nil
		})
		if v != "value" || err != nil || c.Len() != 1 {
			t.Errorf("after the computation: %q, %v, %d kept", v, err, c.Len())
		}
	})
}

var errBadKey = errors.New("the key is bad")

// TestFailuresNotKept: without KeepError no error is kept: the next caller
// computes again, and so do the callers that waited on the failure (one
// computation for all of them).
func TestFailuresNotKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newStrings(8)
		ctx := context.Background()
		var calls atomic.Int64
		fail := func(context.Context) (string, error) { calls.Add(1); return "", errBadKey }
		for range 3 {
			if _, err := c.Get(ctx, "k", fail); !errors.Is(err, errBadKey) {
				t.Fatalf("got %v", err)
			}
		}
		if calls.Load() != 3 || c.Len() != 0 {
			t.Fatalf("an error was kept: %d computations, %d kept", calls.Load(), c.Len())
		}

		// Waiters on a failure compute again: one of them first.
		calls.Store(0)
		gate := make(chan struct{})
		first := func(context.Context) (string, error) { calls.Add(1); <-gate; return "", errBadKey }
		second := func(context.Context) (string, error) { calls.Add(1); return "ok", nil }
		leader := make(chan error, 1)
		go func() { _, err := c.Get(ctx, "w", first); leader <- err }()
		synctest.Wait()
		const n = 8
		got := make(chan string, n)
		for range n {
			go func() {
				v, err := c.Get(ctx, "w", second)
				if err != nil {
					t.Error(err)
				}
				got <- v
			}()
		}
		synctest.Wait() // the waiters wait on the first computation
		close(gate)
		if err := <-leader; !errors.Is(err, errBadKey) {
			t.Fatalf("the computing caller got %v", err)
		}
		for range n {
			if v := <-got; v != "ok" {
				t.Fatalf("a waiter got %q, want the second computation's value", v)
			}
		}
		if calls.Load() != 2 {
			t.Errorf("%d computations, want 2 (the failure, then one for every waiter)", calls.Load())
		}
	})
}

// TestKeepError: an error KeepError accepts is kept and shared; one it
// refuses is not.
func TestKeepError(t *testing.T) {
	c := New(Options[string, string]{MaxEntries: 8, KeepError: func(err error) bool { return errors.Is(err, errBadKey) }})
	ctx := context.Background()
	var calls int
	bad := func(context.Context) (string, error) { calls++; return "", fmt.Errorf("compiling: %w", errBadKey) }
	for range 3 {
		if _, err := c.Get(ctx, "bad", bad); !errors.Is(err, errBadKey) {
			t.Fatalf("got %v", err)
		}
	}
	if calls != 1 || c.Len() != 1 {
		t.Errorf("a lasting error: %d computations, %d kept; want 1 and 1", calls, c.Len())
	}
	calls = 0
	gone := func(context.Context) (string, error) { calls++; return "", errors.New("the database is unavailable") }
	c.Get(ctx, "gone", gone)
	c.Get(ctx, "gone", gone)
	if calls != 2 {
		t.Errorf("a passing error was kept: %d computations, want 2", calls)
	}
}

// TestContextFailuresNeverKept: whatever KeepError says, an error is not
// kept when the computing caller's context had ended, or when it wraps
// context.Canceled; a waiter then computes again.
func TestContextFailuresNeverKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := New(Options[string, string]{MaxEntries: 8, KeepError: func(error) bool { return true }})
		ctx := context.Background()

		var calls int
		canceled := func(context.Context) (string, error) {
			calls++
			return "", fmt.Errorf("the query was canceled: %w", context.Canceled)
		}
		c.Get(ctx, "c", canceled)
		c.Get(ctx, "c", canceled)
		if calls != 2 {
			t.Errorf("an error wrapping context.Canceled was kept: %d computations", calls)
		}

		// The computing caller leaves; its failure is not kept, and the
		// waiter computes again.
		cctx, cancel := context.WithCancel(ctx)
		leader := make(chan error, 1)
		go func() {
			_, err := c.Get(cctx, "left", func(ctx context.Context) (string, error) {
				<-ctx.Done()
				return "", fmt.Errorf("interrupted: %v", ctx.Err()) // does not wrap it
			})
			leader <- err
		}()
		synctest.Wait()
		waiter := make(chan string, 1)
		go func() {
			v, err := c.Get(ctx, "left", func(context.Context) (string, error) { return "fresh", nil })
			if err != nil {
				t.Error(err)
			}
			waiter <- v
		}()
		synctest.Wait()
		cancel()
		if err := <-leader; err == nil {
			t.Fatal("the computation whose caller left succeeded")
		}
		if v := <-waiter; v != "fresh" {
			t.Errorf("the waiter got %q, want its own computation's value", v)
		}
	})
}

// TestWaiterContextEnds: a waiter whose context ends stops waiting with its
// context's error; the computation goes on, and its value is kept.
func TestWaiterContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newStrings(8)
		ctx := context.Background()
		gate := make(chan struct{})
		leader := make(chan string, 1)
		go func() {
			v, _ := c.Get(ctx, "slow", func(context.Context) (string, error) { <-gate; return "slow value", nil })
			leader <- v
		}()
		synctest.Wait()
		wctx, cancel := context.WithCancel(ctx)
		waited := make(chan error, 1)
		go func() {
			_, err := c.Get(wctx, "slow", func(context.Context) (string, error) {
				t.Error("the waiter computed")
				return "", nil
			})
			waited <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-waited; !errors.Is(err, context.Canceled) {
			t.Fatalf("the waiter got %v, want context.Canceled", err)
		}
		close(gate)
		if v := <-leader; v != "slow value" {
			t.Fatalf("the computing caller got %q", v)
		}
		if v, err := c.Get(ctx, "slow", nil); v != "slow value" || err != nil {
			t.Errorf("after the computation: %q, %v", v, err)
		}
	})
}

// TestEvictsLeastRecentlyUsed: past MaxEntries the outcome whose last Get
// is the oldest goes first.
func TestEvictsLeastRecentlyUsed(t *testing.T) {
	c := newStrings(3)
	ctx := context.Background()
	var n counter
	for _, k := range []string{"a", "b", "c", "a", "d"} { // a is used again before d comes
		if v, _ := c.Get(ctx, k, n.of(k)); v != "v:"+k {
			t.Fatalf("%s: got %q", k, v)
		}
	}
	if c.Len() != 3 || n.calls.Load() != 4 {
		t.Fatalf("%d kept, %d computations; want 3 and 4", c.Len(), n.calls.Load())
	}
	for _, k := range []string{"a", "c", "d"} {
		c.Get(ctx, k, n.of(k))
	}
	if n.calls.Load() != 4 {
		t.Errorf("a, c or d was evicted (%d computations)", n.calls.Load())
	}
	c.Get(ctx, "b", n.of("b"))
	if n.calls.Load() != 5 {
		t.Errorf("b, the least recently used, was kept (%d computations)", n.calls.Load())
	}
	// Getting b back evicted a, the least recently used now.
	c.Get(ctx, "c", n.of("c"))
	c.Get(ctx, "a", n.of("a"))
	if n.calls.Load() != 6 || c.Len() != 3 {
		t.Errorf("%d computations, %d kept; want 6 and 3", n.calls.Load(), c.Len())
	}
}

// TestBytesBound: past MaxBytes the least recently used outcomes go; one
// heavier than the bound on its own is returned but not kept.
func TestBytesBound(t *testing.T) {
	c := New(Options[string, string]{
		MaxEntries: 100, MaxBytes: 10,
		Size: func(k, v string, err error) int64 { return int64(len(v)) },
	})
	ctx := context.Background()
	val := func(v string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return v, nil }
	}
	c.Get(ctx, "a", val("aaaa"))
	c.Get(ctx, "b", val("bbbb"))
	if c.Len() != 2 || c.Bytes() != 8 {
		t.Fatalf("%d kept, %d bytes; want 2 and 8", c.Len(), c.Bytes())
	}
	c.Get(ctx, "c", val("cccc")) // 12 bytes: a goes
	if c.Len() != 2 || c.Bytes() != 8 {
		t.Fatalf("%d kept, %d bytes; want 2 and 8", c.Len(), c.Bytes())
	}
	if v, _ := c.Get(ctx, "a", val("again")); v != "again" {
		t.Errorf("a was kept past the byte bound: %q", v)
	}
	if v, _ := c.Get(ctx, "huge", val("0123456789x")); v != "0123456789x" {
		t.Errorf("an outcome over the bound was not returned: %q", v)
	}
	if v, _ := c.Get(ctx, "huge", val("recomputed")); v != "recomputed" {
		t.Errorf("an outcome over the bound was kept: %q", v)
	}
	if c.Bytes() > 10 {
		t.Errorf("%d bytes kept, over the bound of 10", c.Bytes())
	}
}

// TestForget: a forgotten outcome is computed again; a computation in
// flight when its key is forgotten finishes for its waiters but is not
// kept, and a caller after Forget computes afresh.
func TestForget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newStrings(8)
		ctx := context.Background()
		var n counter
		c.Get(ctx, "k", n.of("k"))
		c.Forget("k")
		c.Get(ctx, "k", n.of("k"))
		if n.calls.Load() != 2 || c.Len() != 1 {
			t.Fatalf("after Forget: %d computations, %d kept; want 2 and 1", n.calls.Load(), c.Len())
		}
		c.Forget("missing") // nothing to forget

		gate := make(chan struct{})
		leader := make(chan string, 1)
		go func() {
			v, _ := c.Get(ctx, "f", func(context.Context) (string, error) { <-gate; return "old", nil })
			leader <- v
		}()
		synctest.Wait()
		waiter := make(chan string, 1)
		go func() {
			v, _ := c.Get(ctx, "f", func(context.Context) (string, error) { return "waiter's", nil })
			waiter <- v
		}()
		synctest.Wait()
		c.Forget("f")
		if v, _ := c.Get(ctx, "f", func(context.Context) (string, error) { return "new", nil }); v != "new" {
			t.Errorf("a caller after Forget got %q, want a fresh computation", v)
		}
		close(gate)
		if v := <-leader; v != "old" {
			t.Errorf("the computing caller got %q", v)
		}
		if v := <-waiter; v != "old" {
			t.Errorf("its waiter got %q, want the computation it waited on", v)
		}
		if v, _ := c.Get(ctx, "f", nil); v != "new" {
			t.Errorf("kept %q, want the computation after Forget", v)
		}
	})
}

// TestPanicKeepsNothing: a compute that panics keeps nothing; the panic
// reaches its caller and a waiter computes again.
func TestPanicKeepsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newStrings(8)
		ctx := context.Background()
		gate := make(chan struct{})
		panicked := make(chan any, 1)
		go func() {
			defer func() { panicked <- recover() }()
			c.Get(ctx, "p", func(context.Context) (string, error) { <-gate; panic("boom") })
		}()
		synctest.Wait()
		waiter := make(chan string, 1)
		go func() {
			v, _ := c.Get(ctx, "p", func(context.Context) (string, error) { return "after", nil })
			waiter <- v
		}()
		synctest.Wait()
		close(gate)
		if p := <-panicked; p != "boom" {
			t.Fatalf("the computing caller recovered %v, want the panic", p)
		}
		if v := <-waiter; v != "after" {
			t.Errorf("the waiter got %q, want its own computation", v)
		}
	})
}

// TestConcurrentUse hammers a small cache from many goroutines (run with
// -race): every caller gets its key's value, and the bound holds.
func TestConcurrentUse(t *testing.T) {
	const maxEntries = 16
	c := New(Options[string, string]{MaxEntries: maxEntries, MaxBytes: 64, Size: func(k, v string, _ error) int64 { return int64(len(k)) }})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 500 {
				k := strconv.Itoa((g*7 + i*13) % 40)
				switch i % 10 {
				case 9:
					c.Forget(k)
				case 8:
					if _, err := c.Get(ctx, k, func(context.Context) (string, error) { return "", errBadKey }); err != nil && !errors.Is(err, errBadKey) {
						t.Errorf("a failing computation: %v", err)
					}
				default:
					v, err := c.Get(ctx, k, func(context.Context) (string, error) { return "v:" + k, nil })
					if err == nil && v != "v:"+k {
						t.Errorf("key %s got %q", k, v)
					}
				}
				if n := c.Len(); n > maxEntries {
					t.Errorf("%d kept, over the bound of %d", n, maxEntries)
				}
				if b := c.Bytes(); b > 64 {
					t.Errorf("%d bytes kept, over the bound of 64", b)
				}
			}
		})
	}
	wg.Wait()
}

// TestNewRefusesAnUnboundedCache: a cache is always bounded.
func TestNewRefusesAnUnboundedCache(t *testing.T) {
	for name, opt := range map[string]Options[string, string]{
		"no entries":          {},
		"bytes without sizes": {MaxEntries: 1, MaxBytes: 10},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: New did not panic", name)
				}
			}()
			New(opt)
		}()
	}
}

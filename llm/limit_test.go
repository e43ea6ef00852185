package llm

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// limitClock is a limiter's clock for the tests of its rules: a time that
// moves only when the test says.
type limitClock struct{ t time.Time }

func (c *limitClock) now() time.Time { return c.t }

func (c *limitClock) tick(d time.Duration) time.Time {
	c.t = c.t.Add(d)
	return c.t
}

func testLimiter(max int, fixed bool, timeout time.Duration) (*limiter, *limitClock) {
	c := &limitClock{t: fakeEpoch}
	l := newLimiter(max, fixed, timeout)
	l.now = c.now
	return l, c
}

// rounds feeds n successes of took each, started just now.
func rounds(l *limiter, c *limitClock, n int, took time.Duration) {
	for range n {
		l.succeeded(c.tick(time.Millisecond), took)
	}
}

// TestLimiterRules: the adaptive limit starts at DefaultInitialConcurrency,
// doubles after a round of successes well within the deadline, undoes a
// doubling whose requests then took as much longer as there were more of
// them (a server that queues them), halves once for a burst of timeouts,
// drops by one for an attempt that took over half the deadline, never
// grows without headroom, and a fixed limit never moves.
func TestLimiterRules(t *testing.T) {
	const timeout = 100 * time.Second
	fast := time.Second

	t.Run("slow start to the maximum on a server that batches", func(t *testing.T) {
		l, c := testLimiter(16, false, timeout)
		if got := l.current(); got != DefaultInitialConcurrency {
			t.Fatalf("initial limit %d, want %d", got, DefaultInitialConcurrency)
		}
		rounds(l, c, 4, fast)
		if got := l.current(); got != 8 {
			t.Fatalf("after a round with headroom: %d, want 8", got)
		}
		rounds(l, c, 8, fast) // the settling round
		rounds(l, c, 8, fast) // measured: flat, so on
		if got := l.current(); got != 16 {
			t.Fatalf("after flat rounds: %d, want 16 (the maximum)", got)
		}
		rounds(l, c, 64, fast)
		if got := l.current(); got != 16 {
			t.Fatalf("past the maximum: %d", got)
		}
	})

	t.Run("a doubling undone on a server that queues", func(t *testing.T) {
		l, c := testLimiter(16, false, timeout)
		rounds(l, c, 4, 4*fast) // four in flight, one at a time: 4s each
		if got := l.current(); got != 8 {
			t.Fatalf("limit %d, want 8", got)
		}
		rounds(l, c, 8, 6*fast) // settling
		rounds(l, c, 8, 8*fast) // eight in flight: twice as long
		if got := l.current(); got != 4 {
			t.Fatalf("after the time doubled with the limit: %d, want 4 again", got)
		}
		// Growth is held, then additive.
		rounds(l, c, 4*holdRounds, 4*fast)
		if got := l.current(); got != 4 {
			t.Fatalf("during the hold: %d, want 4", got)
		}
		rounds(l, c, 4, 4*fast)
		if got := l.current(); got != 5 {
			t.Fatalf("after the hold: %d, want 5 (one more, no more doubling)", got)
		}
	})

	t.Run("no growth without headroom", func(t *testing.T) {
		l, c := testLimiter(16, false, timeout)
		rounds(l, c, 40, timeout/3) // over a quarter of the deadline, under half
		if got := l.current(); got != DefaultInitialConcurrency {
			t.Fatalf("limit %d, want %d", got, DefaultInitialConcurrency)
		}
	})

	t.Run("timeouts halve, once per burst", func(t *testing.T) {
		l, c := testLimiter(16, false, timeout)
		rounds(l, c, 4, fast)
		rounds(l, c, 8, fast)
		rounds(l, c, 8, fast)
		if l.current() != 16 {
			t.Fatalf("setup: limit %d", l.current())
		}
		burst := c.tick(time.Second) // sixteen attempts started together
		c.tick(timeout)
		for range 16 {
			l.overloaded(burst)
		}
		if got := l.current(); got != 8 {
			t.Fatalf("after a burst of timeouts: %d, want 8 (halved once)", got)
		}
		l.overloaded(c.tick(time.Second)) // started after the decrease
		if got := l.current(); got != 4 {
			t.Fatalf("after a later timeout: %d, want 4", got)
		}
		for range 5 {
			l.overloaded(c.tick(time.Second))
		}
		if got := l.current(); got != 1 {
			t.Fatalf("floor: %d, want 1", got)
		}
	})

	t.Run("close to the deadline: one less", func(t *testing.T) {
		l, c := testLimiter(16, false, timeout)
		l.succeeded(c.tick(time.Second), timeout*3/4)
		if got := l.current(); got != DefaultInitialConcurrency-1 {
			t.Fatalf("limit %d, want %d", got, DefaultInitialConcurrency-1)
		}
	})

	t.Run("fixed", func(t *testing.T) {
		l, c := testLimiter(7, true, timeout)
		if l.current() != 7 {
			t.Fatalf("fixed limit %d, want 7", l.current())
		}
		l.overloaded(c.tick(time.Second))
		l.succeeded(c.tick(time.Second), timeout)
		rounds(l, c, 100, fast)
		if l.current() != 7 {
			t.Fatalf("fixed limit moved to %d", l.current())
		}
	})
}

// TestLimiterSlots: acquire waits for a slot in order; a waiter whose
// context ends leaves without taking one; a raised limit lets waiters in.
func TestLimiterSlots(t *testing.T) {
	l, c := testLimiter(4, false, 100*time.Second)
	l.decrease(c.tick(time.Second), 1)
	ctx := context.Background()
	if err := l.acquire(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan error)
	go func() { gone <- l.acquire(cctx) }()
	got := make(chan int, 2)
	for i := range 2 {
		go func() {
			if l.acquire(ctx) == nil {
				got <- i
			}
		}()
		for { // in order: wait until this one is queued
			l.mu.Lock()
			n := len(l.waiters)
			l.mu.Unlock()
			if n == i+2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("a canceled waiter got a slot")
	}
	l.release()
	if first := <-got; first != 0 {
		t.Fatalf("waiter %d went first", first)
	}
	select {
	case i := <-got:
		t.Fatalf("waiter %d got a second slot under a limit of 1", i)
	case <-time.After(20 * time.Millisecond):
	}
	l.release()
	<-got
	l.release()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight != 0 || len(l.waiters) != 0 {
		t.Fatalf("in flight %d, waiting %d after all released", l.inflight, len(l.waiters))
	}
}

// serialEndpoint is a model server that answers one request at a time, as
// llama.cpp's server with one slot (or ollama) does: requests wait in its
// queue in arrival order, each takes service to answer, and a request
// whose client hung up leaves the queue (or its generation stops). It
// counts the requests that ran out of their client's patience.
type serialEndpoint struct {
	*fakeEndpoint
	abandoned atomic.Int64
}

func newSerialEndpoint(t *testing.T, service time.Duration) *serialEndpoint {
	s := &serialEndpoint{}
	type job struct {
		ctx  context.Context
		done chan struct{}
	}
	jobs := make(chan job) // blocked senders are served first come, first served
	stop := make(chan struct{})
	go func() {
		for {
			var j job
			select {
			case j = <-jobs:
			case <-stop:
				return
			}
			if j.ctx.Err() == nil {
				select {
				case <-time.After(service):
				case <-j.ctx.Done():
				}
			}
			close(j.done)
		}
	}()
	s.fakeEndpoint = newFake(t, func(_ int, _ wireRequest, w http.ResponseWriter, r *http.Request) {
		j := job{ctx: r.Context(), done: make(chan struct{})}
		select {
		case jobs <- j:
		case <-r.Context().Done():
			s.abandoned.Add(1)
			return
		}
		<-j.done
		if r.Context().Err() != nil {
			s.abandoned.Add(1)
			return
		}
		reply(w, "ok", 10, 1)
	})
	t.Cleanup(func() { close(stop) })
	return s
}

// TestOneAtATimeServer is the fault issue 29 met with llama.cpp: a server
// that answers one request at a time, a client that sends many at once.
// Each reply takes 100ms and a request may wait 300ms, so at most two of
// the client's requests can be in the server's queue. With the old fixed
// limit of 16, requests time out in the queue and their retries join it
// again: calls fail after their retries. With the adaptive limit every
// call is answered, and the limit has come down to what the queue holds.
func TestOneAtATimeServer(t *testing.T) {
	const (
		calls   = 24
		service = 100 * time.Millisecond
		timeout = 300 * time.Millisecond
	)
	run := func(t *testing.T, fixed bool) (failed int, c *Client, s *serialEndpoint) {
		s = newSerialEndpoint(t, service)
		cfg := fastConfig(s.url())
		cfg.Timeout, cfg.MaxRetries, cfg.Concurrency, cfg.FixedConcurrency = timeout, 3, 16, fixed
		c = newClient(t, cfg, nil)
		var wg sync.WaitGroup
		var nFailed atomic.Int64
		for i := range calls {
			wg.Go(func() {
				if _, err := c.Chat(context.Background(), Request{Messages: userMsg(fmt.Sprint(i))}); err != nil {
					nFailed.Add(1)
				}
			})
		}
		wg.Wait()
		return int(nFailed.Load()), c, s
	}
	t.Run("the fault: a fixed limit of 16", func(t *testing.T) {
		failed, _, s := run(t, true)
		if failed == 0 {
			t.Fatalf("every call was answered with 16 in flight (%d requests abandoned); the fault did not occur", s.abandoned.Load())
		}
	})
	t.Run("the adaptive limit", func(t *testing.T) {
		failed, c, s := run(t, false)
		if failed != 0 {
			t.Fatalf("%d of %d calls failed (%d requests abandoned in the queue)", failed, calls, s.abandoned.Load())
		}
		if got := c.ConcurrencyLimit(); got > 2 {
			t.Errorf("the limit is %d; a queue of two at most is what the deadline allows", got)
		}
	})
}

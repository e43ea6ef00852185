package llm

import (
	"context"
	"sync"
	"time"
)

// DefaultInitialConcurrency is where the adaptive concurrency limit starts
// (at most Config.Concurrency): low enough that a server answering one
// request at a time (llama.cpp, ollama) does not see its first burst time
// out in its queue, and grown within seconds on a server that batches
// (vLLM, SGLang).
const DefaultInitialConcurrency = 4

// limiter is a client's concurrency limit: at most limit attempts in
// flight, the others waiting in the client, in order.
//
// With fixed set, limit is Config.Concurrency, always. Otherwise it adapts
// to the endpoint, so that a server that queues requests (one request at a
// time) keeps no more of them waiting than their deadline allows, while a
// server that batches gets up to Config.Concurrency. The signals are each
// attempt's own time (from sending the request to reading the answer; the
// wait for a slot in the client is not in it) against the per-attempt
// deadline (Config.Timeout), and the attempts that ran out of it:
//
//   - growth: after a round of limit successes, each within a quarter of
//     the deadline, the limit doubles (slow start) until the first
//     decrease, then grows by one. The second round after a doubling (the
//     first mixes requests sent under both limits) is compared with the
//     last round before it: when its mean time grew with the limit (more
//     than halfway to the ratio of the two limits: the requests wait for
//     each other at the server, and more of them buy nothing), the
//     doubling is undone, slow start ends and growth is held for a few
//     rounds;
//   - decrease: an attempt that ran out of its deadline, or was answered
//     429, halves the limit (at least 1), and one that took more than half
//     the deadline lowers it by one — at most once for the attempts that
//     were already in flight at the last decrease, so that a burst of
//     timeouts counts once. The retry of such an attempt then waits for a
//     slot under the lowered limit: it is not sent into the same queue at
//     once.
type limiter struct {
	mu       sync.Mutex
	fixed    bool
	max      int
	limit    int
	inflight int
	waiters  []chan struct{}
	timeout  time.Duration

	slowStart bool
	// round: the successes counted since the round began, their time and
	// the longest of them.
	roundN   int
	roundSum time.Duration
	roundMax time.Duration
	// grewFrom is the limit before a doubling whose rounds are still
	// being measured (0: none), prevMean that limit's last round mean;
	// settling: the first round after the doubling, which mixes requests
	// sent under both limits, is not measured.
	grewFrom int
	prevMean time.Duration
	settling bool
	// hold is how many rounds growth waits after a doubling was undone.
	hold int
	// lastDecrease is when the limit last went down: an attempt started
	// before it does not lower it again.
	lastDecrease time.Time
	now          func() time.Time
}

// holdRounds is how many rounds growth waits after the round after a
// doubling showed the requests queueing at the server.
const holdRounds = 8

func newLimiter(max int, fixed bool, timeout time.Duration) *limiter {
	l := &limiter{fixed: fixed, max: max, limit: max, timeout: timeout, slowStart: true, now: time.Now}
	if !fixed {
		l.limit = min(max, DefaultInitialConcurrency)
	}
	return l
}

// acquire waits for a slot. It fails only when ctx ends first.
func (l *limiter) acquire(ctx context.Context) error {
	l.mu.Lock()
	if l.inflight < l.limit && len(l.waiters) == 0 {
		l.inflight++
		l.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	l.waiters = append(l.waiters, ch)
	l.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		for i, w := range l.waiters {
			if w == ch {
				l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
				return ctx.Err()
			}
		}
		// The slot was handed over as ctx ended: give it back.
		l.inflight--
		l.wake()
		return ctx.Err()
	}
}

// release gives a slot back.
func (l *limiter) release() {
	l.mu.Lock()
	l.inflight--
	l.wake()
	l.mu.Unlock()
}

// wake hands free slots to the waiters, first come first served. l.mu is
// held.
func (l *limiter) wake() {
	for l.inflight < l.limit && len(l.waiters) > 0 {
		ch := l.waiters[0]
		l.waiters = l.waiters[1:]
		l.inflight++
		close(ch)
	}
}

// current returns the limit.
func (l *limiter) current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// succeeded takes in an attempt that was answered (whatever the answer)
// after took, having started at start.
func (l *limiter) succeeded(start time.Time, took time.Duration) {
	if l.fixed {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if took > l.timeout/2 {
		// Close to the deadline: the queue at the server is as long as
		// it may be.
		l.decrease(start, l.limit-1)
		return
	}
	l.roundN++
	l.roundSum += took
	l.roundMax = max(l.roundMax, took)
	if l.roundN < l.limit {
		return
	}
	mean := l.roundSum / time.Duration(l.roundN)
	longest := l.roundMax
	l.roundN, l.roundSum, l.roundMax = 0, 0, 0
	if from := l.grewFrom; from > 0 {
		if l.settling {
			l.settling = false
			return
		}
		l.grewFrom = 0
		ratio := float64(l.limit) / float64(from)
		if float64(mean) > float64(l.prevMean)*(1+ratio)/2 {
			// The time grew with the number in flight: the requests wait
			// for each other at the server, and more of them buy nothing.
			l.limit, l.slowStart, l.hold = from, false, holdRounds
			l.lastDecrease = l.now()
			return
		}
	}
	if l.hold > 0 {
		l.hold--
		return
	}
	if longest > l.timeout/4 || l.limit >= l.max {
		return
	}
	if l.slowStart {
		l.grewFrom, l.prevMean, l.settling = l.limit, mean, true
		l.limit = min(l.max, 2*l.limit)
	} else {
		l.limit++
	}
	l.wake()
}

// overloaded takes in an attempt, started at start, that ran out of its
// deadline or was answered 429: the limit halves.
func (l *limiter) overloaded(start time.Time) {
	if l.fixed {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.decrease(start, l.limit/2)
}

// decrease lowers the limit to to (at least 1), unless the attempt started
// before the last decrease. l.mu is held.
func (l *limiter) decrease(start time.Time, to int) {
	if start.Before(l.lastDecrease) {
		return
	}
	l.limit = max(1, to)
	l.slowStart, l.grewFrom = false, 0
	l.roundN, l.roundSum, l.roundMax = 0, 0, 0
	l.lastDecrease = l.now()
}

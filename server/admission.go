package server

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"

	pb "avtgym/proto/avtgym/v1"
)

// DefaultOverloadRetryDelay is the RetryInfo delay of an OVERLOADED
// refusal when Options.OverloadRetryDelay is zero. The clients add jitter.
const DefaultOverloadRetryDelay = 200 * time.Millisecond

// admission bounds the work in flight, on the whole server and per
// principal. A call that would pass a limit is refused at once with
// RESOURCE_EXHAUSTED / OVERLOADED and a RetryInfo, never queued: a queue
// would turn overload into deadline errors, and a refusal tells the client
// to back off (and a load balancer's next try may reach an idle replica).
//
// Work is counted in items: a unary call is 1, a batch its items (a
// ResetBatch's requests, a StepBatch's steps), and a call always counts its
// full weight, against both limits, for as long as it runs. The rule, for
// a call of weight w from principal P:
//
//   - server: admitted when in-flight + w ≤ limit, or when nothing at all
//     is in flight (in-flight = 0);
//   - principal: admitted when P's in-flight + w ≤ the per-principal
//     limit, or when P has nothing in flight.
//
// A call needs both. So a batch larger than a limit still runs, but only
// alone: it is admitted only when the server (or, for the per-principal
// limit, its principal) is idle, and while it runs it counts all its
// items, so that nothing else is admitted past the limit beside it — two
// over-limit batches never run together, and neither does an over-limit
// batch with any other call once the server limit is reached. Such a
// batch waits (retrying) for an idle moment; clients should split batches
// to the limit.
type admission struct {
	limit, perPrincipal int
	retry               time.Duration

	mu       sync.Mutex
	inFlight int
	per      map[string]int

	admitted, rejectedServer, rejectedPrincipal atomic.Uint64
}

// AdmissionStats are the admission counters, for metrics and tests.
type AdmissionStats struct {
	// InFlight is the work (in items) running now.
	InFlight int
	// Admitted counts calls let in; RejectedServer and RejectedPrincipal
	// count calls refused by the server's and by a principal's limit.
	Admitted, RejectedServer, RejectedPrincipal uint64
}

func newAdmission(limit, perPrincipal int, retry time.Duration) *admission {
	if retry <= 0 {
		retry = DefaultOverloadRetryDelay
	}
	return &admission{limit: limit, perPrincipal: perPrincipal, retry: retry, per: map[string]int{}}
}

// weight is how much work a request is, in items.
func weight(req any) int {
	n := 1
	switch r := req.(type) {
	case *pb.ResetBatchRequest:
		n = len(r.GetRequests())
	case *pb.StepBatchRequest:
		n = len(r.GetSteps())
	}
	return max(n, 1)
}

// acquire admits w items of work for principal name, or refuses them (see
// admission for the rule); a nil error comes with the release function.
func (a *admission) acquire(name string, w int) (func(), error) {
	w = max(w, 1)
	a.mu.Lock()
	if a.limit > 0 && a.inFlight > 0 && a.inFlight+w > a.limit {
		a.mu.Unlock()
		a.rejectedServer.Add(1)
		return nil, a.refuse("server", a.limit, w, "this server has as much work in flight as it takes")
	}
	if p := a.per[name]; a.perPrincipal > 0 && p > 0 && p+w > a.perPrincipal {
		a.mu.Unlock()
		a.rejectedPrincipal.Add(1)
		return nil, a.refuse("principal", a.perPrincipal, w, "this principal has as much work in flight as it may")
	}
	a.inFlight += w
	a.per[name] += w
	a.mu.Unlock()
	a.admitted.Add(1)
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			a.inFlight -= w
			if a.per[name] -= w; a.per[name] == 0 {
				delete(a.per, name)
			}
			a.mu.Unlock()
		})
	}, nil
}

func (a *admission) refuse(scope string, limit, w int, why string) error {
	msg := why + " (" + strconv.Itoa(limit) + " items); the call was not run: retry after the RetryInfo delay"
	if w > limit {
		msg += "; a batch of " + strconv.Itoa(w) + " items, more than the limit, runs only when nothing else is in flight: split it"
	}
	return statusError(codes.ResourceExhausted, pb.ErrorReason_OVERLOADED, "", msg,
		map[string]string{"scope": scope, "limit": strconv.Itoa(limit)}, a.retry)
}

func (a *admission) stats() AdmissionStats {
	a.mu.Lock()
	n := a.inFlight
	a.mu.Unlock()
	return AdmissionStats{InFlight: n, Admitted: a.admitted.Load(), RejectedServer: a.rejectedServer.Load(), RejectedPrincipal: a.rejectedPrincipal.Load()}
}

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
// ResetBatch's requests, a StepBatch's steps). A batch larger than a limit
// counts as the limit, so that it can still run, alone.
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

// acquire admits w items of work for principal name, or refuses them; a
// nil error comes with the release function.
func (a *admission) acquire(name string, w int) (func(), error) {
	if a.limit > 0 {
		w = min(w, a.limit)
	}
	if a.perPrincipal > 0 {
		w = min(w, a.perPrincipal)
	}
	a.mu.Lock()
	if a.limit > 0 && a.inFlight+w > a.limit {
		a.mu.Unlock()
		a.rejectedServer.Add(1)
		return nil, a.refuse("server", a.limit, "this server has as much work in flight as it takes")
	}
	if a.perPrincipal > 0 && a.per[name]+w > a.perPrincipal {
		a.mu.Unlock()
		a.rejectedPrincipal.Add(1)
		return nil, a.refuse("principal", a.perPrincipal, "this principal has as much work in flight as it may")
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

func (a *admission) refuse(scope string, limit int, why string) error {
	return statusError(codes.ResourceExhausted, pb.ErrorReason_OVERLOADED, "",
		why+" ("+strconv.Itoa(limit)+" items); the call was not run: retry after the RetryInfo delay",
		map[string]string{"scope": scope, "limit": strconv.Itoa(limit)}, a.retry)
}

func (a *admission) stats() AdmissionStats {
	a.mu.Lock()
	n := a.inFlight
	a.mu.Unlock()
	return AdmissionStats{InFlight: n, Admitted: a.admitted.Load(), RejectedServer: a.rejectedServer.Load(), RejectedPrincipal: a.rejectedPrincipal.Load()}
}

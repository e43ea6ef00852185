package server

import (
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// scopeOf is the ErrorInfo scope of an admission refusal ("" for nil).
func scopeOf(err error) string {
	if err == nil {
		return ""
	}
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetMetadata()["scope"]
		}
	}
	return "no ErrorInfo"
}

// TestAdmissionCountsFullWeight replays issue 25's numbers (--max-inflight
// 64 --max-inflight-per-principal 32) step by step: every call counts all
// its items, and a batch over a limit is admitted only when the server (or
// its principal) has nothing else in flight.
func TestAdmissionCountsFullWeight(t *testing.T) {
	a := newAdmission(64, 32, 0)
	held := map[string]func(){}
	for _, st := range []struct {
		name      string
		principal string
		weight    int
		release   string // a held call to release first
		scope     string // "" admitted; else the refusing limit
		inFlight  int    // after the step
	}{
		{name: "a's 200-item batch on an idle server runs alone", principal: "a", weight: 200, inFlight: 200},
		{name: "b's 200-item batch beside it is refused", principal: "b", weight: 200, scope: "server", inFlight: 200},
		{name: "so is any unary call", principal: "b", weight: 1, scope: "server", inFlight: 200},
		{name: "and a's own", principal: "a", weight: 1, scope: "server", inFlight: 200},
		{name: "once a's batch ends, b's runs", release: "a's 200-item batch on an idle server runs alone", principal: "b", weight: 200, inFlight: 200},
		{name: "a 50-item batch over the principal limit waits for the server", principal: "a", weight: 50, scope: "server", inFlight: 200},
		{name: "alone for its principal, it runs beside others' work within the server limit", release: "once a's batch ends, b's runs", principal: "a", weight: 50, inFlight: 50},
		{name: "a second 50 would pass the server limit", principal: "b", weight: 50, scope: "server", inFlight: 50},
		{name: "b's 14 fill the server", principal: "b", weight: 14, inFlight: 64},
		{name: "one more is one too many", principal: "c", weight: 1, scope: "server", inFlight: 64},
		{name: "b stays within its own limit", release: "alone for its principal, it runs beside others' work within the server limit", principal: "b", weight: 19, scope: "principal", inFlight: 14},
		{name: "b's 18 reach it", principal: "b", weight: 18, inFlight: 32},
	} {
		if st.release != "" {
			held[st.release]()
			delete(held, st.release)
		}
		release, err := a.acquire(st.principal, st.weight)
		if got := scopeOf(err); got != st.scope {
			t.Fatalf("%s: refused by %q (%v), want %q", st.name, got, err, st.scope)
		}
		if err == nil {
			held[st.name] = release
		}
		if got := a.stats().InFlight; got != st.inFlight {
			t.Fatalf("%s: %d items in flight, want %d", st.name, got, st.inFlight)
		}
	}
	for _, r := range held {
		r()
		r() // idempotent
	}
	if st := a.stats(); st.InFlight != 0 || len(a.per) != 0 {
		t.Fatalf("after every release: %+v, per-principal %v", st, a.per)
	}
}

// TestAdmissionOverLimitBatchesNeverRunTogether is the attack of issue 25:
// many principals send over-limit batches at once, again and again. Each
// may run, but never two at a time, and nothing else is admitted beside
// one: at no point does the work admitted pass the limit, but for one
// over-limit batch alone.
func TestAdmissionOverLimitBatchesNeverRunTogether(t *testing.T) {
	a := newAdmission(64, 32, 0)
	var (
		running   atomic.Int64 // items admitted and not yet released
		overLimit atomic.Int64 // over-limit batches running
		ran       atomic.Int64
		wg        sync.WaitGroup
		mu        sync.Mutex
		bad       []string
	)
	fail := func(msg string) {
		mu.Lock()
		bad = append(bad, msg)
		mu.Unlock()
	}
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := string(rune('a' + i))
			for j := range 500 {
				w := 200
				if j%2 == 1 {
					w = 1 + j%40 // and smaller calls in between
				}
				release, err := a.acquire(name, w)
				if err != nil {
					continue
				}
				n := running.Add(int64(w))
				if w > 64 {
					if overLimit.Add(1) > 1 {
						fail("two over-limit batches ran together")
					}
					if n != int64(w) {
						fail("an over-limit batch ran beside other work")
					}
					ran.Add(1)
				} else if n > 64 && overLimit.Load() == 0 {
					fail("the work admitted passed the limit")
				}
				if w > 64 {
					overLimit.Add(-1)
				}
				running.Add(-int64(w))
				release()
			}
		}()
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d violations, first: %s", len(bad), bad[0])
	}
	t.Logf("%d over-limit batches ran, each alone", ran.Load())
	if st := a.stats(); st.InFlight != 0 {
		t.Fatalf("%d items in flight after all released", st.InFlight)
	}
	// They run alone, not never: on the idle server one is admitted.
	if _, err := a.acquire("a", 200); err != nil {
		t.Fatalf("an over-limit batch on an idle server: %v", err)
	}
}

// TestAdmissionSplitWorkStillCounts: a principal cannot pass its limit by
// splitting its work into many unary calls.
func TestAdmissionSplitWorkStillCounts(t *testing.T) {
	a := newAdmission(0, 32, 0)
	for i := range 32 {
		if _, err := a.acquire("a", 1); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if _, err := a.acquire("a", 1); scopeOf(err) != "principal" {
		t.Fatalf("the 33rd call: %v, want a refusal by the principal limit", err)
	}
	if _, err := a.acquire("b", 200); err != nil {
		t.Fatalf("another principal's batch (no server limit): %v", err)
	}
}

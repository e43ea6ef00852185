package client_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"avtgym/app"
	"avtgym/client"
	"avtgym/env"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

// checkLeaks fails the test if it leaves goroutines behind. Call it first,
// so that its cleanup runs after every other cleanup of the test.
func checkLeaks(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		n := runtime.NumGoroutine()
		for n > before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			n = runtime.NumGoroutine()
		}
		if n > before {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("goroutine leak: %d goroutines before the test, %d after\n%s", before, n, buf)
		}
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// ---- ForEach ----

func TestForEachRunsEveryIndexOnceWithBoundedConcurrency(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct{ n, conc, want int }{
		{200, 7, 7}, {50, 1, 1}, {10, 0, 1}, {10, -3, 1}, {5, 50, 5}, {1, 4, 1},
	} {
		var inflight, maxSeen atomic.Int32
		runs := make([]atomic.Int32, tc.n)
		errs := client.ForEach(context.Background(), tc.n, tc.conc, func(ctx context.Context, i int) error {
			cur := inflight.Add(1)
			defer inflight.Add(-1)
			for {
				m := maxSeen.Load()
				if cur <= m || maxSeen.CompareAndSwap(m, cur) {
					break
				}
			}
			runs[i].Add(1)
			// The first items wait until the pool is full, so that the
			// maximum is reached deterministically.
			if i < tc.want {
				deadline := time.Now().Add(5 * time.Second)
				for maxSeen.Load() < int32(tc.want) && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
			} else {
				time.Sleep(time.Duration(i%3) * 100 * time.Microsecond)
			}
			if i%5 == 0 {
				return fmt.Errorf("item %d failed", i)
			}
			return nil
		})
		if len(errs) != tc.n {
			t.Fatalf("n=%d: %d errors returned", tc.n, len(errs))
		}
		for i := range tc.n {
			if r := runs[i].Load(); r != 1 {
				t.Errorf("n=%d conc=%d: item %d ran %d times", tc.n, tc.conc, i, r)
			}
			switch {
			case i%5 == 0 && (errs[i] == nil || errs[i].Error() != fmt.Sprintf("item %d failed", i)):
				t.Errorf("n=%d: errs[%d] = %v, want item %d's error", tc.n, i, errs[i], i)
			case i%5 != 0 && errs[i] != nil:
				t.Errorf("n=%d: errs[%d] = %v, want nil", tc.n, i, errs[i])
			}
		}
		if m := int(maxSeen.Load()); m != tc.want {
			t.Errorf("n=%d conc=%d: at most %d in flight, want %d", tc.n, tc.conc, m, tc.want)
		}
	}
	if errs := client.ForEach(context.Background(), 0, 4, func(context.Context, int) error {
		t.Error("fn called for n=0")
		return nil
	}); len(errs) != 0 {
		t.Errorf("n=0: %d errors", len(errs))
	}
}

func TestForEachStopsStartingWhenCancelled(t *testing.T) {
	checkLeaks(t)
	const n, conc, cancelAt = 1000, 2, 10
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var started atomic.Int32
	ran := make([]atomic.Bool, n)
	errs := client.ForEach(ctx, n, conc, func(ctx context.Context, i int) error {
		started.Add(1)
		ran[i].Store(true)
		if i == cancelAt {
			cancel()
		}
		return nil
	})
	if s := int(started.Load()); s >= n/2 {
		t.Fatalf("%d of %d items started although the context was cancelled at item %d", s, n, cancelAt)
	}
	for i := range n {
		switch {
		case ran[i].Load() && errs[i] != nil:
			t.Errorf("item %d ran and succeeded but errs[%d] = %v", i, i, errs[i])
		case !ran[i].Load() && !errors.Is(errs[i], context.Canceled):
			t.Errorf("item %d never ran but errs[%d] = %v, want context.Canceled", i, i, errs[i])
		}
	}
	for i := range cancelAt + 1 {
		if !ran[i].Load() {
			t.Errorf("item %d, started before the cancel, did not run", i)
		}
	}

	// Items in flight see the cancellation through their context.
	ctx2, cancel2 := context.WithCancel(context.Background())
	var inflight atomic.Int32
	go func() {
		for inflight.Load() < conc {
			time.Sleep(time.Millisecond)
		}
		cancel2()
	}()
	errs = client.ForEach(ctx2, 50, conc, func(ctx context.Context, i int) error {
		inflight.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return errors.New("not cancelled")
		}
	})
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("blocked run: errs[%d] = %v", i, err)
		}
	}
	if got := inflight.Load(); got >= 50 {
		t.Errorf("blocked run: %d items started", got)
	}
}

// TestForEachPreCancelledStartsNothing: a context that has already ended
// must start no item. ForEach's select between acquiring the semaphore and
// ctx.Done() picks at random when both are ready, so today about half the
// calls start at least one item (see the report in the test's skip text).
func TestForEachPreCancelledStartsNothing(t *testing.T) {
	checkLeaks(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var started atomic.Int32
	for range 200 {
		client.ForEach(ctx, 10, 4, func(ctx context.Context, i int) error {
			started.Add(1)
			return nil
		})
	}
	if s := started.Load(); s != 0 {
		t.Fatalf("with an already-cancelled context, %d items started over 200 calls; want 0", s)
	}
}

// ---- retries against real servers ----

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func writeKeyFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token.key")
	if err := os.WriteFile(p, []byte(hex.EncodeToString(env.RandomKey())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// server is one server process (an app.App) on a fixed address.
type server struct {
	app    *app.App
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// serveAt builds and starts a server on addr; it reports failures as
// errors so that it can run on another goroutine.
func serveAt(addr, keyFile, corpusDir string) (*server, error) {
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, app.Config{Listen: addr, TokenKeyFile: keyFile, Corpora: []string{corpusDir}})
	if err != nil {
		cancel()
		return nil, err
	}
	s := &server{app: a, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan struct{})
	go func() { s.done <- a.Serve(ctx, func(net.Addr) { close(ready) }) }()
	select {
	case <-ready:
		return s, nil
	case err := <-s.done:
		cancel()
		a.Close()
		return nil, fmt.Errorf("serve %s: %w", addr, err)
	case <-time.After(20 * time.Second):
		cancel()
		return nil, fmt.Errorf("server on %s did not start in 20s", addr)
	}
}

func (s *server) stop(t *testing.T) {
	s.once.Do(func() {
		s.cancel()
		select {
		case err := <-s.done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("server did not stop in 20s")
		}
		s.app.Close()
	})
}

// counting returns a dial option whose interceptor counts the attempts of
// each method. Dial chains its retry interceptor first, so this one runs
// inside it and sees every attempt.
func counting(counts *sync.Map) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		v, _ := counts.LoadOrStore(method, new(atomic.Int32))
		v.(*atomic.Int32).Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

func attempts(counts *sync.Map, method string) int {
	v, ok := counts.Load("/avtgym.v1.EnvService/" + method)
	if !ok {
		return 0
	}
	return int(v.(*atomic.Int32).Load())
}

func dial(t *testing.T, addr string, opt client.Options) (*client.Client, *sync.Map) {
	t.Helper()
	counts := &sync.Map{}
	opt.DialOptions = append(opt.DialOptions, counting(counts))
	c, err := client.Dial(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, counts
}

func askAction(text string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: text}}}
}

func resetTopA(t *testing.T, c *client.Client) *pb.Episode {
	t.Helper()
	seed := uint64(11)
	resp, err := c.Env.Reset(ctxT(t), &pb.ResetRequest{TaskId: "top-a", Seed: &seed})
	if err != nil {
		t.Fatalf("Reset: %v", err)
	}
	return resp.Episodes[0]
}

func TestRetryAcrossServerRestart(t *testing.T) {
	checkLeaks(t)
	dir := testutil.WriteTiny(t)
	key := writeKeyFile(t)
	addr := freeAddr(t)

	first, err := serveAt(addr, key, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { first.stop(t) })
	c, counts := dial(t, addr, client.Options{Attempts: 20, Backoff: 50 * time.Millisecond})
	ep := resetTopA(t, c)
	first.stop(t)

	// The replacement comes up on the same address, with the same key,
	// while the step below is being retried.
	type result struct {
		s   *server
		err error
	}
	second := make(chan result, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		s, err := serveAt(addr, key, dir)
		second <- result{s, err}
	}()
	var replacement *server
	t.Cleanup(func() {
		if replacement == nil {
			if r := <-second; r.s != nil {
				r.s.stop(t)
			}
			return
		}
		replacement.stop(t)
	})

	resp, err := c.Env.Step(ctxT(t), &pb.StepRequest{Token: ep.Token, Action: askAction("What do you mean by top region?")})
	r := <-second
	replacement = r.s
	if r.err != nil {
		t.Fatalf("second server: %v", r.err)
	}
	if err != nil {
		t.Fatalf("Step across the restart: %v (after %d attempts)", err, attempts(counts, "Step"))
	}
	if n := attempts(counts, "Step"); n < 2 {
		t.Errorf("the step took %d attempt(s); the first should have met the stopped server", n)
	}
	if resp.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || resp.Observation.QuestionsAsked != 1 {
		t.Fatalf("status %s, asked %d: the episode did not continue", resp.Status, resp.Observation.QuestionsAsked)
	}
	if got := resp.Observation.Turns[len(resp.Observation.Turns)-1].Text; !strings.Contains(got, "largest total sales amount") {
		t.Errorf("reply %q is not top-a's resolution", got)
	}
	t.Logf("step succeeded after %d attempts", attempts(counts, "Step"))
}

func TestNoRetryWithOneAttempt(t *testing.T) {
	checkLeaks(t)
	dir := testutil.WriteTiny(t)
	key := writeKeyFile(t)
	addr := freeAddr(t)
	s, err := serveAt(addr, key, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.stop(t) })

	c1, counts1 := dial(t, addr, client.Options{Attempts: 1})
	c3, counts3 := dial(t, addr, client.Options{Attempts: 3, Backoff: 10 * time.Millisecond})
	ep := resetTopA(t, c1)
	s.stop(t)

	req := &pb.StepRequest{Token: ep.Token, Action: askAction("What do you mean by top region?")}
	_, err = c1.Env.Step(ctxT(t), req)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("step against a stopped server: %v, want UNAVAILABLE", err)
	}
	if n := attempts(counts1, "Step"); n != 1 {
		t.Errorf("Attempts 1: the step was tried %d times", n)
	}
	_, err = c3.Env.Step(ctxT(t), req)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("Attempts 3: %v, want UNAVAILABLE", err)
	}
	if n := attempts(counts3, "Step"); n != 3 {
		t.Errorf("Attempts 3: the step was tried %d times", n)
	}
	if n := attempts(counts3, "Reset"); n != 0 {
		t.Errorf("Reset counted %d times on a client that never reset", n)
	}

	// CallTimeout bounds the whole retry loop.
	cT, _ := dial(t, addr, client.Options{Attempts: 1000, Backoff: 20 * time.Millisecond, CallTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, err = cT.Env.Step(context.Background(), req)
	if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
		t.Errorf("CallTimeout: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("CallTimeout 300ms: the call took %s", d)
	}
}

func TestOtherErrorsAreNotRetried(t *testing.T) {
	checkLeaks(t)
	s := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}})
	c, counts := dial(t, s.Addr, client.Options{Attempts: 20, Backoff: 10 * time.Millisecond})
	ep := resetTopA(t, c)
	if n := attempts(counts, "Reset"); n != 1 {
		t.Errorf("a successful reset was tried %d times", n)
	}

	bad := append([]byte(nil), ep.Token...)
	bad[len(bad)-1] ^= 1
	_, err := c.Env.Step(ctxT(t), &pb.StepRequest{Token: bad, Action: askAction("What do you mean by top region?")})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("tampered token: %v, want INVALID_ARGUMENT", err)
	}
	if n := attempts(counts, "Step"); n != 1 {
		t.Errorf("INVALID_ARGUMENT was tried %d times", n)
	}

	// A wrong-phase action: FAILED_PRECONDITION, not retried either.
	stopped, err := c.Env.Step(ctxT(t), &pb.StepRequest{Token: ep.Token, Action: &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Env.Step(ctxT(t), &pb.StepRequest{Token: stopped.Token, Action: askAction("What do you mean by top region?")})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("ask after the episode ended: %v, want FAILED_PRECONDITION", err)
	}
	if n := attempts(counts, "Step"); n != 3 {
		t.Errorf("three steps made %d attempts", n)
	}
	// Unknown task: NOT_FOUND.
	_, err = c.Env.Reset(ctxT(t), &pb.ResetRequest{TaskId: "no-such-task"})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("unknown task: %v, want NOT_FOUND", err)
	}
	if n := attempts(counts, "Reset"); n != 2 {
		t.Errorf("two resets made %d attempts", n)
	}
}

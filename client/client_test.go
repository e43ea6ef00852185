package client_test

import (
	"context"
	"encoding/hex"
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

// TestRetryBackoff: a call that keeps failing with UNAVAILABLE is tried
// Attempts times, with jittered waits whose ceiling doubles up to a second
// (checked through an injected sleeper, without waiting).
func TestRetryBackoff(t *testing.T) {
	var waits []time.Duration
	c, err := client.Dial(freeAddr(t), client.Options{Attempts: 6, Backoff: 200 * time.Millisecond,
		Sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Env.ListCorpora(ctxT(t), &pb.ListCorporaRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want UNAVAILABLE (nothing listens)", err)
	}
	ceilings := []time.Duration{200, 400, 800, 1000, 1000}
	if len(waits) != len(ceilings) {
		t.Fatalf("%d waits for 6 attempts: %v", len(waits), waits)
	}
	for i, w := range waits {
		hi := ceilings[i] * time.Millisecond
		if w < hi/2 || w > hi {
			t.Errorf("wait %d = %v, want within [%v, %v]", i, w, hi/2, hi)
		}
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

	// CallTimeout bounds the whole retry loop: every attempt runs under the
	// one deadline set when the call began, and the loop ends by it long
	// before its 1000 attempts (at 20ms doubling to 1s, about 16 minutes).
	const callTimeout = 300 * time.Millisecond
	var deadlines []time.Time // the deadline each attempt saw
	var dlMu sync.Mutex
	seeDeadline := grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		at := time.Now()
		d, ok := ctx.Deadline()
		dlMu.Lock()
		deadlines = append(deadlines, d)
		i := len(deadlines)
		dlMu.Unlock()
		switch {
		case !ok:
			t.Errorf("attempt %d of %s ran without a deadline", i, method)
		case d.After(at.Add(callTimeout)):
			t.Errorf("attempt %d of %s: deadline %v is more than CallTimeout %v after the attempt began (%v)", i, method, d, callTimeout, at)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
	cT, countsT := dial(t, addr, client.Options{Attempts: 1000, Backoff: 20 * time.Millisecond, CallTimeout: callTimeout, DialOptions: []grpc.DialOption{seeDeadline}})
	done := make(chan error, 1)
	before := time.Now()
	go func() {
		_, err := cT.Env.Step(context.Background(), req)
		done <- err
	}()
	// Deadline enforcement only: the bound is 100× the 300ms limit, so a
	// busy machine never trips it, while a loop the deadline does not end
	// (minutes of retries) does.
	const bound = 100 * callTimeout
	select {
	case err = <-done:
	case <-time.After(bound):
		t.Fatalf("CallTimeout %v: the call had not ended after %v", callTimeout, bound)
	}
	if c := status.Code(err); c != codes.Unavailable && c != codes.DeadlineExceeded {
		t.Errorf("CallTimeout: %v", err)
	}
	n := attempts(countsT, "Step")
	if n < 1 || n >= 1000 {
		t.Errorf("CallTimeout: the step was tried %d times; want at least once and far fewer than the 1000 attempts allowed", n)
	}
	dlMu.Lock()
	defer dlMu.Unlock()
	if len(deadlines) != n {
		t.Fatalf("%d deadlines seen for %d attempts", len(deadlines), n)
	}
	// One deadline for the whole loop, not one per attempt, set CallTimeout
	// after the call began (between before and the first attempt).
	for i, d := range deadlines {
		if !d.Equal(deadlines[0]) {
			t.Errorf("attempt %d had deadline %v, attempt 1 %v: want one deadline for the call", i+1, d, deadlines[0])
		}
	}
	if lo := before.Add(callTimeout); deadlines[0].Before(lo) {
		t.Errorf("deadline %v is less than CallTimeout %v after the call began (%v)", deadlines[0], callTimeout, before)
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

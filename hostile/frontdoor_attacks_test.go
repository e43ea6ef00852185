package hostile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"avtgym/client"
	pb "avtgym/proto/avtgym/v1"
)

// unauthRSSBound is what callers without credentials may add to the
// server's resident set, over its RSS before them: their requests are
// refused from their metadata and never read, so what they cost is the
// connections and streams, not the messages.
const unauthRSSBound = 128 << 20

// withAuthFile starts a server with an auth file naming one trainer, whose
// token the harness's client then sends.
func withAuthFile(t *testing.T) *server {
	t.Helper()
	const token = "frontdoor-trainer-0123456789abcdef"
	d := sha256.Sum256([]byte(token))
	auth := filepath.Join(t.TempDir(), "principals.json")
	body := fmt.Sprintf(`{"principals": [{"name": "trainer", "role": "trainer", "token_sha256": %q}]}`, hex.EncodeToString(d[:]))
	if err := os.WriteFile(auth, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := start(t, "--auth-file", auth)
	c, err := client.Dial(s.addr, client.Options{Token: token, NoEnv: true, CallTimeout: 2 * time.Minute, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.c.Close()
	s.c = c
	return s
}

// mib is n bytes in MiB, for logs.
func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

// TestFrontdoorUnauthenticatedLargeRequests replays issue 25's second
// finding against a real `avtgym serve --auth-file`: sixteen concurrent
// 60 MiB Resets without credentials (sixteen connections), then sixteen
// with a token that names no principal, then the same at StepBatch and
// OracleService.Ask. Every call is refused UNAUTHENTICATED; the server's
// RSS after the attack and its peak RSS stay within unauthRSSBound of
// what they were before; the server keeps serving. (Before the fix,
// requests were decoded before authentication: RSS rose 641 → 1,047 MB
// and stayed.)
func TestFrontdoorUnauthenticatedLargeRequests(t *testing.T) {
	s := withAuthFile(t)
	s.alive(t)
	msg, err := (&pb.ResetRequest{TaskId: strings.Repeat("x", 60<<20)}).MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	conns := make([]*grpc.ClientConn, 16)
	for i := range conns {
		if conns[i], err = grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			t.Fatal(err)
		}
		defer conns[i].Close()
	}
	idle, peakBefore := s.rss(t), s.peakRSS(t)
	rounds := []struct {
		method, auth, reason string
	}{
		{"/avtgym.v1.EnvService/Reset", "", "CREDENTIALS_MISSING"},
		{"/avtgym.v1.EnvService/Reset", "Bearer not-a-principal", "CREDENTIALS_INVALID"},
		{"/avtgym.v1.EnvService/StepBatch", "", "CREDENTIALS_MISSING"},
		{"/avtgym.v1.OracleService/Ask", "Basic dXNlcjpwYXNz", "CREDENTIALS_INVALID"},
		{"/avtgym.v1.EnvService/Reset", "", "CREDENTIALS_MISSING"},
	}
	for _, r := range rounds {
		var wg sync.WaitGroup
		errs := make([]error, len(conns))
		for i, cc := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := ctxMinute()
				defer cancel()
				if r.auth != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, "authorization", r.auth)
				}
				var out []byte
				errs[i] = cc.Invoke(ctx, r.method, &msg, &out, grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallSendMsgSize(128<<20))
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if code(err) != codes.Unauthenticated || reason(err) != r.reason {
				t.Fatalf("%s (authorization %q), call %d: got %v (reason %q), want UNAUTHENTICATED / %s", r.method, r.auth, i, err, reason(err), r.reason)
			}
		}
		t.Logf("16 × 60 MiB to %s (authorization %q): RSS %s", r.method, r.auth, mib(s.rss(t)))
	}
	after, peakAfter := s.rss(t), s.peakRSS(t)
	t.Logf("RSS %s idle → %s after %d unauthenticated 60 MiB calls; peak %s → %s", mib(idle), mib(after), 16*len(rounds), mib(peakBefore), mib(peakAfter))
	if after > idle+unauthRSSBound {
		t.Errorf("RSS rose %s (%s → %s), more than the %s bound: unauthenticated requests were held", mib(after-idle), mib(idle), mib(after), mib(unauthRSSBound))
	}
	if peakAfter > peakBefore+unauthRSSBound {
		t.Errorf("peak RSS rose %s (%s → %s), more than the %s bound: unauthenticated requests were read", mib(peakAfter-peakBefore), mib(peakBefore), mib(peakAfter), mib(unauthRSSBound))
	}
	s.alive(t)
	// The trainer's own large Reset is still read, and answered on its merits.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = s.c.Env.Reset(ctx, &pb.ResetRequest{TaskId: strings.Repeat("x", 1<<20)}, grpc.MaxCallSendMsgSize(128<<20))
	if code(err) != codes.InvalidArgument && code(err) != codes.NotFound {
		t.Fatalf("the trainer's Reset of an unknown 1 MiB task id: %v, want it refused for its task id", err)
	}
}

// twoPrincipals starts a server with two trainers, a and b, and returns
// the server and a client for each.
func twoPrincipals(t *testing.T, args ...string) (*server, map[string]*client.Client) {
	t.Helper()
	var ps []string
	tokens := map[string]string{}
	for _, name := range []string{"a", "b"} {
		tok := "frontdoor-" + name + "-0123456789abcdef"
		d := sha256.Sum256([]byte(tok))
		tokens[name] = tok
		ps = append(ps, fmt.Sprintf(`{"name": %q, "role": "trainer", "token_sha256": %q}`, name, hex.EncodeToString(d[:])))
	}
	auth := filepath.Join(t.TempDir(), "principals.json")
	if err := os.WriteFile(auth, []byte(`{"principals": [`+strings.Join(ps, ",")+`]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	s := start(t, append([]string{"--auth-file", auth}, args...)...)
	cs := map[string]*client.Client{}
	for name, tok := range tokens {
		c, err := client.Dial(s.addr, client.Options{Token: tok, NoEnv: true, CallTimeout: 2 * time.Minute, Attempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs[name] = c
	}
	s.c.Close()
	s.c = cs["a"]
	return s, cs
}

// slowBatch is a StepBatch of n submissions, the first slow of which run
// for the whole statement timeout and the rest at once.
func slowBatch(t *testing.T, c *client.Client, n, slow int) *pb.StepBatchRequest {
	t.Helper()
	ctx := context.Background()
	req := &pb.StepBatchRequest{}
	for i := range n {
		r, err := c.Env.Reset(ctx, &pb.ResetRequest{TaskId: "west", Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
		if err != nil {
			t.Fatal(err)
		}
		sql := "SELECT 1"
		if i < slow {
			sql = "SELECT count(*) FROM t a, t b, t c"
		}
		req.Steps = append(req.Steps, &pb.StepRequest{Token: r.Episodes[0].GetToken(), Action: submit(sql)})
	}
	return req
}

// TestFrontdoorBatchesCountTheirFullWeight replays issue 25's admission
// finding against a real serve: with --max-inflight 64 and
// --max-inflight-per-principal 32, principal a's 200-item StepBatch runs
// (alone) and principal b's 200-item StepBatch, sent while a's runs, is
// refused OVERLOADED; before, both were admitted (400 items running).
func TestFrontdoorBatchesCountTheirFullWeight(t *testing.T) {
	s, cs := twoPrincipals(t, "--max-inflight", "64", "--max-inflight-per-principal", "32", "--statement-timeout", "10s", "--sql-wait", "60s")
	a, b := slowBatch(t, cs["a"], 200, 2), slowBatch(t, cs["b"], 200, 0)
	done := make(chan error, 1)
	go func() {
		_, err := cs["a"].Env.StepBatch(context.Background(), a)
		done <- err
	}()
	// a's batch runs for at least its slow steps' 10 s; b's goes in
	// meanwhile (a second in: well within them, however loaded the machine).
	time.Sleep(time.Second)
	select {
	case err := <-done:
		t.Fatalf("a's batch ended before b's was sent (%v): the test cannot tell", err)
	default:
	}
	_, err := cs["b"].Env.StepBatch(context.Background(), b)
	if code(err) != codes.ResourceExhausted || reason(err) != "OVERLOADED" {
		t.Errorf("b's batch while a's runs: %v (reason %s), want RESOURCE_EXHAUSTED / OVERLOADED", err, reason(err))
	}
	if err := <-done; err != nil {
		t.Errorf("a's batch: %v", err)
	}
	s.alive(t)
}

// TestFrontdoorAccessLogSaysWhatTheClientGot: a StepBatch whose client's
// deadline passes while its slow SQL runs is logged DEADLINE_EXCEEDED,
// not OK (issue 25).
func TestFrontdoorAccessLogSaysWhatTheClientGot(t *testing.T) {
	s, cs := twoPrincipals(t, "--statement-timeout", "5s")
	req := slowBatch(t, cs["a"], 2, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := cs["a"].Env.StepBatch(ctx, req)
	cancel()
	if code(err) != codes.DeadlineExceeded {
		t.Fatalf("the client got %v, want DEADLINE_EXCEEDED", err)
	}
	// The server logs the call when its handler returns (the statements
	// run on to their own limit).
	deadline := time.Now().Add(time.Minute)
	var line string
	for time.Now().Before(deadline) && line == "" {
		for _, l := range strings.Split(s.log.String(), "\n") {
			if strings.Contains(l, "\trpc\t") && strings.Contains(l, "StepBatch") {
				line = l
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(line, `"code": "DeadlineExceeded"`) {
		t.Errorf("the access log line of the StepBatch: %q, want code DeadlineExceeded", line)
	}
	s.alive(t)
}

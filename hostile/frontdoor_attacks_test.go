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

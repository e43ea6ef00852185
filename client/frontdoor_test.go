package client_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"avtgym/app"
	"avtgym/client"
	"avtgym/internal/testcerts"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
	avtserver "avtgym/server"
)

// refusing is an EnvService whose ListCorpora fails with the statuses of
// fail, in turn, then succeeds.
type refusing struct {
	pb.UnimplementedEnvServiceServer
	mu    sync.Mutex
	fail  []*status.Status
	calls int
}

func (f *refusing) ListCorpora(context.Context, *pb.ListCorporaRequest) (*pb.ListCorporaResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= len(f.fail) {
		return nil, f.fail[f.calls-1].Err()
	}
	return &pb.ListCorporaResponse{}, nil
}

// serveRefusing serves f on a loopback port.
func serveRefusing(t *testing.T, f *refusing) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterEnvServiceServer(g, f)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return lis.Addr().String()
}

// TestRetryPolicy: OVERLOADED and VERIFIER_BUSY (RESOURCE_EXHAUSTED) and
// DRAINING (UNAVAILABLE) are retried after their RetryInfo delay plus at
// most 10% jitter; other RESOURCE_EXHAUSTED reasons are not retried.
func TestRetryPolicy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		code    codes.Code
		reason  string
		delay   time.Duration
		retried bool
	}{
		{"overloaded", codes.ResourceExhausted, "OVERLOADED", 200 * time.Millisecond, true},
		{"verifier busy", codes.ResourceExhausted, "VERIFIER_BUSY", time.Second, true},
		{"draining", codes.Unavailable, "DRAINING", time.Second, true},
		{"response too large", codes.ResourceExhausted, "RESPONSE_TOO_LARGE", 0, false},
		{"permission denied", codes.PermissionDenied, "PRIVILEGED_DENIED", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := status.New(tc.code, tc.reason)
			st, err := st.WithDetails(&errdetails.ErrorInfo{Reason: tc.reason, Domain: "avtgym"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.delay >= 0 {
				if st, err = st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(tc.delay)}); err != nil {
					t.Fatal(err)
				}
			}
			f := &refusing{fail: []*status.Status{st, st}}
			var waits []time.Duration
			c, err := client.Dial(serveRefusing(t, f), client.Options{NoEnv: true, Attempts: 5,
				Sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, err = c.Env.ListCorpora(ctxT(t), &pb.ListCorporaRequest{})
			if !tc.retried {
				if status.Code(err) != tc.code || f.calls != 1 || len(waits) != 0 {
					t.Fatalf("got %v after %d calls and waits %v, want %s at once", err, f.calls, waits, tc.code)
				}
				return
			}
			if err != nil || f.calls != 3 || len(waits) != 2 {
				t.Fatalf("got %v after %d calls, waits %v; want success on the third", err, f.calls, waits)
			}
			for _, w := range waits {
				if w < tc.delay || w > tc.delay+tc.delay/10 {
					t.Errorf("waited %v, want %v plus at most 10%%", w, tc.delay)
				}
			}
		})
	}
}

// TestCredentialsFromEnvironment: with AVTGYM_TLS_CA and AVTGYM_TOKEN_FILE
// set, Dial reaches a TLS server that requires a token; NoEnv ignores
// them; explicit options win.
func TestCredentialsFromEnvironment(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	srv := ca.Server(t, "server")
	token := "env-token-0123456789"
	dir := t.TempDir()
	auth := filepath.Join(dir, "principals.json")
	if err := os.WriteFile(auth, []byte(`{"principals": [{"name": "t", "role": "trainer", "token_sha256": "`+avtserver.TokenDigest(token)+`"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}, TLSCert: srv.Cert, TLSKey: srv.Key, AuthFile: auth})
	t.Setenv(client.EnvTLSCA, ca.File)
	t.Setenv(client.EnvTokenFile, tokFile)
	for _, tc := range []struct {
		name string
		opt  client.Options
		code codes.Code
	}{
		{"from the environment", client.Options{}, codes.OK},
		{"environment ignored", client.Options{NoEnv: true}, codes.Unavailable},
		{"explicit token wins", client.Options{Token: "wrong"}, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Attempts = 1
			c, err := client.Dial(s.Addr, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Env.ListCorpora(ctxT(t), &pb.ListCorporaRequest{}); status.Code(err) != tc.code {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
		})
	}
}

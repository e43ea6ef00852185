package server_test

// The front door over real gRPC on loopback: TLS and mutual TLS with
// certificates made for the test, bearer tokens of principals with roles,
// privileged data refused to policies on every RPC, listeners that follow
// their flags, the plaintext probe port, admission control (refusals
// counted, never queued), connection age, drain, tracing to an in-process
// OTLP receiver and the episode log.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"avtgym/app"
	"avtgym/client"
	"avtgym/corpus"
	"avtgym/env"
	"avtgym/internal/testcerts"
	"avtgym/internal/testutil"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/server"
	"avtgym/sqlexec"
)

// Bearer tokens of the test principals.
const (
	trainerToken = "trainer-secret-0123456789"
	policyToken  = "policy-secret-0123456789"
)

// writeAuthFile writes an auth file: a trainer and a policy by token,
// and the principals by certificate subject that subjects names
// (subject → role).
func writeAuthFile(t *testing.T, subjects map[string]server.Role) string {
	t.Helper()
	type entry struct {
		Name        string      `json:"name"`
		Role        server.Role `json:"role"`
		TokenSHA256 string      `json:"token_sha256,omitempty"`
		TLSSubject  string      `json:"tls_subject,omitempty"`
	}
	es := []entry{
		{Name: "grpo-trainer", Role: server.RoleTrainer, TokenSHA256: server.TokenDigest(trainerToken)},
		{Name: "rollout-worker", Role: server.RolePolicy, TokenSHA256: server.TokenDigest(policyToken)},
	}
	for sub, role := range subjects {
		es = append(es, entry{Name: "cert-" + sub, Role: role, TLSSubject: sub})
	}
	b, err := json.Marshal(map[string]any{"principals": es})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "principals.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// running is an app serving in the background.
type running struct {
	app    *app.App
	addr   string
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// serveApp starts cfg (on cfg.Listen, default 127.0.0.1:0); a failure to
// listen is returned, and the app is closed.
func serveApp(t *testing.T, cfg app.Config) (*running, error) {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	if len(cfg.Corpora) == 0 {
		cfg.Corpora = []string{testutil.WriteTiny(t)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("app.New: %v", err)
	}
	r := &running{app: a, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan net.Addr, 1)
	go func() { r.done <- a.Serve(ctx, func(addr net.Addr) { ready <- addr }) }()
	select {
	case addr := <-ready:
		r.addr = addr.String()
	case err := <-r.done:
		cancel()
		a.Close()
		return nil, err
	}
	t.Cleanup(func() { r.stop(t) })
	return r, nil
}

func startApp(t *testing.T, cfg app.Config) *running {
	t.Helper()
	r, err := serveApp(t, cfg)
	if err != nil {
		t.Fatalf("serve: %v", err)
	}
	return r
}

// stop drains the server and returns Serve's error (once).
func (r *running) stop(t *testing.T) error {
	r.once.Do(func() {
		r.cancel()
		select {
		case r.err = <-r.done:
		case <-time.After(time.Minute):
			r.err = errors.New("the server did not stop within a minute")
		}
		r.app.Close()
	})
	return r.err
}

// dial connects a client that never retries and reads no environment.
func dial(t *testing.T, addr string, opt client.Options) *client.Client {
	t.Helper()
	opt.NoEnv = true
	if opt.Attempts == 0 {
		opt.Attempts = 1
	}
	opt.CallTimeout = 30 * time.Second
	c, err := client.Dial(addr, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func tlsFiles(t *testing.T, ca *testcerts.CA, p *testcerts.Pair) client.Options {
	t.Helper()
	cert, key := "", ""
	if p != nil {
		cert, key = p.Cert, p.Key
	}
	cfg, err := client.TLSFiles(ca.File, cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	return client.Options{TLS: cfg}
}

func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei.GetReason()
		}
	}
	return ""
}

func retryDelayOf(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return -1
}

// wantCode checks a status code, and the ErrorInfo reason when reason is
// not empty.
func wantCode(t *testing.T, what string, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || reason != "" && reasonOf(err) != reason {
		t.Fatalf("%s: got %v (reason %q), want %s %s", what, err, reasonOf(err), code, reason)
	}
}

// TestAuthentication: over TLS with an auth file, calls without
// credentials, with unknown or malformed ones, in plaintext, or to a
// server the client does not trust are refused with the right code;
// health needs no credentials; reflection does.
func TestAuthentication(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	srv := ca.Server(t, "server")
	r := startApp(t, app.Config{TLSCert: srv.Cert, TLSKey: srv.Key, AuthFile: writeAuthFile(t, nil)})
	before := r.app.Server.Admission().Admitted
	other := testcerts.NewCA(t, "other")
	withTLS := func(tok string) client.Options { o := tlsFiles(t, ca, nil); o.Token = tok; return o }
	basic := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Basic dXNlcjpwYXNz")
	for _, tc := range []struct {
		name   string
		opt    client.Options
		ctx    context.Context
		code   codes.Code
		reason string
	}{
		{"no credentials", withTLS(""), nil, codes.Unauthenticated, "CREDENTIALS_MISSING"},
		{"unknown token", withTLS("not-a-principal"), nil, codes.Unauthenticated, "CREDENTIALS_INVALID"},
		{"not a bearer token", withTLS(""), basic, codes.Unauthenticated, "CREDENTIALS_INVALID"},
		{"plaintext to a TLS server", client.Options{Token: trainerToken}, nil, codes.Unavailable, ""},
		{"server signed by an untrusted CA", func() client.Options { o := tlsFiles(t, other, nil); o.Token = trainerToken; return o }(), nil, codes.Unavailable, ""},
		{"trainer", withTLS(trainerToken), nil, codes.OK, ""},
		{"policy", withTLS(policyToken), nil, codes.OK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, r.addr, tc.opt)
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			_, err := c.Env.ListCorpora(ctx, &pb.ListCorporaRequest{})
			wantCode(t, "ListCorpora", err, tc.code, tc.reason)
			_, err = c.Oracle.Ask(ctx, &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: fullQ("big sales")})
			wantCode(t, "Ask", err, tc.code, tc.reason)
		})
	}
	// Only the two authenticated principals' calls ran.
	if got := r.app.Server.Admission().Admitted - before; got != 4 {
		t.Errorf("%d calls admitted, want 4 (the trainer's and the policy's)", got)
	}
	anon := dial(t, r.addr, withTLS(""))
	h, err := anon.Health.Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health without credentials: %v %v", h, err)
	}
	if _, err := listServices(t, anon.Conn()); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("reflection without credentials: %v, want UNAUTHENTICATED", err)
	}
	if names, err := listServices(t, dial(t, r.addr, withTLS(trainerToken)).Conn()); err != nil || !slices.Contains(names, "avtgym.v1.EnvService") {
		t.Fatalf("reflection with a token: %v %v", names, err)
	}
}

// listServices is `grpcurl list`.
func listServices(t *testing.T, cc *grpc.ClientConn) ([]string, error) {
	t.Helper()
	stream, err := grpc_reflection_v1.NewServerReflectionClient(cc).ServerReflectionInfo(ctxT(t))
	if err != nil {
		return nil, err
	}
	defer stream.CloseSend()
	if err := stream.Send(&grpc_reflection_v1.ServerReflectionRequest{MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_ListServices{}}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err // io.EOF: the server ended the stream; Recv has its status
	}
	resp, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names, nil
}

// hasPrivileged reports whether a message holds privileged data anywhere:
// a set field of type Privileged or AskPrivileged, or a TaskSummary's
// sample type, at any depth.
func hasPrivileged(m protoreflect.Message) bool {
	if ts, ok := m.Interface().(*pb.TaskSummary); ok && (ts.GetSampleType() != "" || ts.GetSampleTypeEnum() != pb.SampleType_SAMPLE_TYPE_UNSPECIFIED) {
		return true
	}
	found := false
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		check := func(sub protoreflect.Message) {
			switch sub.Descriptor().FullName() {
			case "avtgym.v1.Privileged", "avtgym.v1.AskPrivileged":
				found = true
			default:
				found = found || hasPrivileged(sub)
			}
		}
		switch {
		case fd.IsList():
			for i := range v.List().Len() {
				check(v.List().Get(i).Message())
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Message() != nil {
					check(mv.Message())
				}
				return true
			})
		default:
			check(v.Message())
		}
		return !found
	})
	return found
}

// TestPolicyNeverReceivesPrivilegedData calls every method of EnvService
// and OracleService (listed from their descriptors, so that a new method
// fails this test until it is covered) as a policy principal: a request
// for privileged data is refused with PERMISSION_DENIED / PRIVILEGED_DENIED
// before anything runs, and no response carries any. The trainer gets it,
// which shows that the check would see it.
func TestPolicyNeverReceivesPrivilegedData(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	srv := ca.Server(t, "server")
	// The demo corpus beside the default one: its TIDE samples have a
	// sample type, which ListTasks gives only with include_privileged.
	r := startApp(t, app.Config{TLSCert: srv.Cert, TLSKey: srv.Key, AuthFile: writeAuthFile(t, nil), Corpora: []string{testutil.WriteTiny(t), demoDir(t)}})
	opt := func(tok string) client.Options { o := tlsFiles(t, ca, nil); o.Token = tok; return o }
	trainer, policy := dial(t, r.addr, opt(trainerToken)), dial(t, r.addr, opt(policyToken))
	ep := reset(t, policy.Env, &pb.ResetRequest{TaskId: "big"})

	type call func(ctx context.Context, c *client.Client, priv bool) (proto.Message, error)
	calls := map[string]call{
		"avtgym.v1.EnvService.Reset": func(ctx context.Context, c *client.Client, priv bool) (proto.Message, error) {
			return c.Env.Reset(ctx, &pb.ResetRequest{TaskId: "big", GroupSize: 2, IncludePrivileged: priv})
		},
		"avtgym.v1.EnvService.Step": func(ctx context.Context, c *client.Client, priv bool) (proto.Message, error) {
			return c.Env.Step(ctx, &pb.StepRequest{Token: ep.Token, Action: ask(fullQ("big sales")), IncludePrivileged: priv})
		},
		"avtgym.v1.EnvService.ResetBatch": func(ctx context.Context, c *client.Client, priv bool) (proto.Message, error) {
			return c.Env.ResetBatch(ctx, &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{{TaskId: "top-a"}, {TaskId: "big", IncludePrivileged: priv}}})
		},
		"avtgym.v1.EnvService.StepBatch": func(ctx context.Context, c *client.Client, priv bool) (proto.Message, error) {
			return c.Env.StepBatch(ctx, &pb.StepBatchRequest{Steps: []*pb.StepRequest{{Token: ep.Token, Action: stop()}, {Token: ep.Token, Action: ask(fullQ("big sales")), IncludePrivileged: priv}}})
		},
		"avtgym.v1.EnvService.ListTasks": func(ctx context.Context, c *client.Client, priv bool) (proto.Message, error) {
			return c.Env.ListTasks(ctx, &pb.ListTasksRequest{Corpus: "demo", PageSize: 1000, IncludePrivileged: priv})
		},
		"avtgym.v1.EnvService.GetTask": func(ctx context.Context, c *client.Client, priv bool) (proto.Message, error) {
			return c.Env.GetTask(ctx, &pb.GetTaskRequest{TaskId: "big", IncludePrivileged: priv})
		},
		"avtgym.v1.EnvService.ListCorpora": func(ctx context.Context, c *client.Client, _ bool) (proto.Message, error) {
			return c.Env.ListCorpora(ctx, &pb.ListCorporaRequest{})
		},
		"avtgym.v1.EnvService.ListOracles": func(ctx context.Context, c *client.Client, _ bool) (proto.Message, error) {
			return c.Env.ListOracles(ctx, &pb.ListOraclesRequest{})
		},
		"avtgym.v1.EnvService.ListProtocols": func(ctx context.Context, c *client.Client, _ bool) (proto.Message, error) {
			return c.Env.ListProtocols(ctx, &pb.ListProtocolsRequest{})
		},
		"avtgym.v1.OracleService.Ask": func(ctx context.Context, c *client.Client, priv bool) (proto.Message, error) {
			return c.Oracle.Ask(ctx, &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: fullQ("big sales"), IncludePrivileged: priv})
		},
	}
	// The request fields that ask for privileged data, per method.
	privField := map[string]string{
		"avtgym.v1.EnvService.Reset":      "include_privileged",
		"avtgym.v1.EnvService.Step":       "include_privileged",
		"avtgym.v1.EnvService.ResetBatch": "requests[1].include_privileged",
		"avtgym.v1.EnvService.StepBatch":  "steps[1].include_privileged",
		"avtgym.v1.OracleService.Ask":     "include_privileged",
		"avtgym.v1.EnvService.ListTasks":  "include_privileged",
		"avtgym.v1.EnvService.GetTask":    "include_privileged",
	}
	var methods []string
	for _, f := range []protoreflect.FileDescriptor{pb.File_avtgym_v1_env_service_proto, pb.File_avtgym_v1_oracle_service_proto} {
		for i := range f.Services().Len() {
			svc := f.Services().Get(i)
			for j := range svc.Methods().Len() {
				m := svc.Methods().Get(j)
				methods = append(methods, string(m.FullName()))
				// A request type with include_privileged must be listed.
				if m.Input().Fields().ByName("include_privileged") != nil || m.Input().FullName() == "avtgym.v1.ResetBatchRequest" || m.Input().FullName() == "avtgym.v1.StepBatchRequest" {
					if privField[string(m.FullName())] == "" {
						t.Errorf("%s can ask for privileged data and is not checked here", m.FullName())
					}
				}
			}
		}
	}
	for _, m := range methods {
		t.Run(m, func(t *testing.T) {
			call := calls[m]
			if call == nil {
				t.Fatalf("%s is not covered: add it to this test", m)
			}
			ctx := ctxT(t)
			if field := privField[m]; field != "" {
				admitted := r.app.Server.Admission().Admitted
				_, err := call(ctx, policy, true)
				wantCode(t, "policy asking for privileged data", err, codes.PermissionDenied, "PRIVILEGED_DENIED")
				if got := status.Convert(err); !strings.Contains(got.Message(), field) || errorInfo(got).GetMetadata()["field"] != field {
					t.Errorf("the refusal names %q / %q, want the field %q", got.Message(), errorInfo(got).GetMetadata()["field"], field)
				}
				if r.app.Server.Admission().Admitted != admitted {
					t.Error("a refused call was run")
				}
				resp, err := call(ctx, trainer, true)
				if err != nil || !hasPrivileged(resp.ProtoReflect()) {
					t.Fatalf("the trainer asked for privileged data and got %v, %v", resp, err)
				}
			}
			resp, err := call(ctx, policy, false)
			if err != nil {
				t.Fatalf("policy call: %v", err)
			}
			if hasPrivileged(resp.ProtoReflect()) {
				t.Fatalf("a policy received privileged data: %v", resp)
			}
		})
	}
	if n := r.app.Server.PrivilegedLeaks(); n != 0 {
		t.Errorf("privileged data had to be removed from %d responses", n)
	}
}

// TestMutualTLS: with --client-ca a client needs a certificate the CA
// signed; with an auth file the certificate's subject names the principal
// (and its role); without one every signed client is a trainer.
func TestMutualTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	other := testcerts.NewCA(t, "other")
	srv := ca.Server(t, "server")
	trainerCert, policyCert, stranger := ca.Client(t, "trainer-client"), ca.Client(t, "policy-client"), ca.Client(t, "stranger")
	foreign := other.Client(t, "trainer-client")
	r := startApp(t, app.Config{TLSCert: srv.Cert, TLSKey: srv.Key, ClientCA: ca.File,
		AuthFile: writeAuthFile(t, map[string]server.Role{"trainer-client": server.RoleTrainer, "policy-client": server.RolePolicy})})
	privReset := &pb.ResetRequest{TaskId: "big", IncludePrivileged: true}
	for _, tc := range []struct {
		name   string
		cert   *testcerts.Pair
		token  string
		code   codes.Code
		reason string
	}{
		{"trainer certificate", &trainerCert, "", codes.OK, ""},
		{"policy certificate", &policyCert, "", codes.PermissionDenied, "PRIVILEGED_DENIED"},
		{"certificate of no principal", &stranger, "", codes.Unauthenticated, "CREDENTIALS_INVALID"},
		{"policy certificate with the trainer's token", &policyCert, trainerToken, codes.OK, ""},
		{"no certificate", nil, trainerToken, codes.Unavailable, ""},
		{"certificate of another CA", &foreign, "", codes.Unavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tlsFiles(t, ca, tc.cert)
			o.Token = tc.token
			_, err := dial(t, r.addr, o).Env.Reset(ctxT(t), privReset)
			wantCode(t, "Reset", err, tc.code, tc.reason)
		})
	}

	// Without an auth file: any certificate the CA signed is a trainer,
	// named by its subject in the access log.
	core, logs := observer.New(zap.InfoLevel)
	r2 := startApp(t, app.Config{TLSCert: srv.Cert, TLSKey: srv.Key, ClientCA: ca.File, Logger: zap.New(core)})
	if _, err := dial(t, r2.addr, tlsFiles(t, ca, &stranger)).Env.Reset(ctxT(t), privReset); err != nil {
		t.Fatalf("a signed client without an auth file: %v", err)
	}
	var principals []string
	for _, e := range logs.FilterMessage("rpc").All() {
		principals = append(principals, e.ContextMap()["principal"].(string))
	}
	if !slices.Contains(principals, "stranger") {
		t.Errorf("access log principals %v, want the certificate's subject", principals)
	}
}

// TestListenersFollowFlags: a listener that authenticates nobody binds
// only loopback addresses unless InsecureListenAny, for the gRPC, metrics
// and pprof listeners alike; the probe port may bind anywhere.
func TestListenersFollowFlags(t *testing.T) {
	authFile := writeAuthFile(t, nil)
	for _, tc := range []struct {
		name    string
		cfg     app.Config
		refused string // the flag named in the error; "" means it serves
	}{
		{"gRPC on every interface, no authentication", app.Config{Listen: "0.0.0.0:0"}, "--listen"},
		{"gRPC on every interface (empty host)", app.Config{Listen: ":0"}, "--listen"},
		{"gRPC on every interface, insecure-listen-any", app.Config{Listen: "0.0.0.0:0", InsecureListenAny: true}, ""},
		{"gRPC on every interface, auth file", app.Config{Listen: "0.0.0.0:0", AuthFile: authFile}, ""},
		{"gRPC on localhost", app.Config{Listen: "localhost:0"}, ""},
		{"metrics on every interface, auth file", app.Config{AuthFile: authFile, MetricsListen: "0.0.0.0:0"}, "--metrics-listen"},
		{"metrics on every interface, insecure-listen-any", app.Config{MetricsListen: "0.0.0.0:0", InsecureListenAny: true}, ""},
		{"pprof on every interface", app.Config{PprofListen: "0.0.0.0:0"}, "--pprof-listen"},
		{"pprof on loopback", app.Config{PprofListen: "127.0.0.1:0"}, ""},
		{"probe on every interface", app.Config{HealthListen: "0.0.0.0:0"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := serveApp(t, tc.cfg)
			if tc.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "--insecure-listen-any") {
					t.Fatalf("got %v, want a refusal of %s naming --insecure-listen-any", err, tc.refused)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			host, port, _ := net.SplitHostPort(r.addr)
			if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
				host = "127.0.0.1" // every interface: reachable on loopback too
			}
			c := dial(t, net.JoinHostPort(host, port), client.Options{Token: trainerToken})
			if _, err := c.Env.ListCorpora(ctxT(t), &pb.ListCorporaRequest{}); err != nil {
				t.Fatal(err)
			}
			for flag, addr := range map[string]string{"metrics": r.app.Addrs.Metrics, "pprof": r.app.Addrs.Pprof} {
				if addr == "" {
					continue
				}
				_, port, _ := net.SplitHostPort(addr)
				path := map[string]string{"metrics": "/metrics", "pprof": "/debug/pprof/"}[flag]
				resp, err := http.Get("http://127.0.0.1:" + port + path)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("%s: %v %v", flag, resp, err)
				}
				resp.Body.Close()
			}
		})
	}
}

// TestProbePortAndReflectionOff: the probe port answers health in
// plaintext without credentials (also while the main port needs TLS and a
// token) and serves nothing else; reflection can be turned off.
func TestProbePortAndReflectionOff(t *testing.T) {
	ca := testcerts.NewCA(t, "test")
	srv := ca.Server(t, "server")
	r := startApp(t, app.Config{TLSCert: srv.Cert, TLSKey: srv.Key, AuthFile: writeAuthFile(t, nil), HealthListen: "127.0.0.1:0", NoReflection: true})
	probe := dial(t, r.app.Addrs.Health, client.Options{})
	for _, svc := range []string{"", "avtgym.v1.EnvService", server.LivenessService} {
		h, err := probe.Health.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("probe port, service %q: %v %v", svc, h, err)
		}
	}
	_, err := probe.Env.ListCorpora(ctxT(t), &pb.ListCorporaRequest{})
	wantCode(t, "EnvService on the probe port", err, codes.Unimplemented, "")
	o := tlsFiles(t, ca, nil)
	o.Token = trainerToken
	if _, err := listServices(t, dial(t, r.addr, o).Conn()); status.Code(err) != codes.Unimplemented {
		t.Fatalf("reflection with --reflection=false: %v, want UNIMPLEMENTED", err)
	}
}

// gate is an oracle that holds every question until it is opened,
// counting the questions that reached it.
type gate struct {
	inner   env.Oracle
	arrived atomic.Int64
	open    chan struct{}
}

func newGate() *gate { return &gate{inner: oracle.Deterministic(), open: make(chan struct{})} }

func (g *gate) AskWith(ctx context.Context, rec *corpus.Record, h []oracle.Turn, q string, opt oracle.AskOptions) (oracle.Reply, error) {
	g.arrived.Add(1)
	select {
	case <-g.open:
	case <-ctx.Done():
		return oracle.Reply{}, ctx.Err()
	}
	return g.inner.AskWith(ctx, rec, h, q, opt)
}

// gated is a server whose deterministic oracle is a gate.
type gated struct {
	srv    *server.Server
	gate   *gate
	addr   string
	cancel context.CancelFunc
	done   chan error
}

// startGated serves the tiny corpus through a gate, with opt.
func startGated(t *testing.T, opt server.Options) *gated {
	t.Helper()
	a, err := app.New(context.Background(), app.Config{Corpora: []string{testutil.WriteTiny(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	sealer, err := env.NewSealer(env.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	g := newGate()
	e, err := env.New(env.Config{Corpora: a.Env.Corpora(), Sealer: sealer, Oracles: map[pb.OracleType]env.Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: g}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(e, opt)
	ctx, cancel := context.WithCancel(context.Background())
	s := &gated{srv: srv, gate: g, addr: lis.Addr().String(), cancel: cancel, done: make(chan error, 1)}
	go func() { s.done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		select {
		case <-g.open:
		default:
			close(g.open)
		}
		cancel()
		if err := <-s.done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return s
}

// waitFor polls cond until it holds (the test's deadline bounds it; no
// duration is asserted).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func askReq(term string) *pb.AskRequest {
	return &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: fullQ(term)}
}

// TestAdmissionRejectsWithoutQueueing: with a limit of L items and L calls
// held in the oracle, 3L more calls are refused at once with
// RESOURCE_EXHAUSTED / OVERLOADED and the server's RetryInfo (counted:
// the oracle still saw only L, the refusals all came back while the L were
// held), health answers throughout, and the held calls then succeed. Then
// clients that retry back off by the RetryInfo delay (plus at most 10%)
// and all 4L calls finish.
func TestAdmissionRejectsWithoutQueueing(t *testing.T) {
	const L = 3
	const delay = 40 * time.Millisecond
	s := startGated(t, server.Options{MaxInFlight: L, OverloadRetryDelay: delay})
	raw := dial(t, s.addr, client.Options{})
	type result struct {
		resp *pb.AskResponse
		err  error
	}
	results := make(chan result, 4*L)
	for range 4 * L {
		go func() {
			resp, err := raw.Oracle.Ask(context.Background(), askReq("big sales"))
			results <- result{resp, err}
		}()
	}
	waitFor(t, "L calls held and 3L refused", func() bool {
		return s.gate.arrived.Load() == L && s.srv.Admission().RejectedServer == 3*L
	})
	for range 3 * L { // all refusals are back while the gate is closed
		r := <-results
		wantCode(t, "over the limit", r.err, codes.ResourceExhausted, "OVERLOADED")
		if d := retryDelayOf(r.err); d != delay {
			t.Fatalf("RetryInfo delay %v, want %v", d, delay)
		}
		if scope := errorInfo(status.Convert(r.err)).GetMetadata()["scope"]; scope != "server" {
			t.Fatalf("scope %q, want server", scope)
		}
	}
	if got, st := s.gate.arrived.Load(), s.srv.Admission(); got != L || st.InFlight != L {
		t.Fatalf("%d calls reached the oracle and %d are in flight, want %d: calls were queued", got, st.InFlight, L)
	}
	if h, err := raw.Health.Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health while saturated: %v %v", h, err)
	}
	close(s.gate.open)
	for range L {
		if r := <-results; r.err != nil || r.resp.GetReply() == "" {
			t.Fatalf("a held call: %v %v", r.resp, r.err)
		}
	}

	// Retrying clients finish everything.
	s2 := startGated(t, server.Options{MaxInFlight: L, OverloadRetryDelay: delay})
	released := make(chan struct{})
	var mu sync.Mutex
	var waits []time.Duration
	sleeper := func(ctx context.Context, d time.Duration) error {
		mu.Lock()
		waits = append(waits, d)
		mu.Unlock()
		select {
		case <-released:
			time.Sleep(time.Millisecond) // no busy loop while the held calls finish
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	retrying := dial(t, s2.addr, client.Options{Attempts: 1000, Sleep: sleeper})
	errs := make(chan error, 4*L)
	for range 4 * L {
		go func() {
			_, err := retrying.Oracle.Ask(context.Background(), askReq("recent year"))
			errs <- err
		}()
	}
	waitFor(t, "L calls held and 3L refused", func() bool {
		return s2.gate.arrived.Load() == L && s2.srv.Admission().RejectedServer >= 3*L
	})
	if h, err := retrying.Health.Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health while saturated: %v %v", h, err)
	}
	close(released)
	close(s2.gate.open)
	for range 4 * L {
		if err := <-errs; err != nil {
			t.Fatalf("a retrying client failed: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(waits) < 3*L {
		t.Fatalf("%d waits, want at least %d", len(waits), 3*L)
	}
	for _, w := range waits {
		if w < delay || w > delay+delay/10 {
			t.Fatalf("waited %v, want the RetryInfo delay %v plus at most 10%%", w, delay)
		}
	}
	if got := s2.srv.Admission().Admitted; got != 4*L {
		t.Errorf("%d calls admitted, want %d", got, 4*L)
	}
}

// TestAdmissionPerPrincipal: one principal at its limit is refused (scope
// principal) while another is still admitted.
func TestAdmissionPerPrincipal(t *testing.T) {
	p, err := server.ParsePrincipals([]byte(fmt.Sprintf(`{"principals": [
		{"name": "a", "role": "trainer", "token_sha256": %q},
		{"name": "b", "role": "policy", "token_sha256": %q}]}`, server.TokenDigest("token-a"), server.TokenDigest("token-b"))))
	if err != nil {
		t.Fatal(err)
	}
	s := startGated(t, server.Options{MaxInFlightPerPrincipal: 2, Principals: p})
	a, b := dial(t, s.addr, client.Options{Token: "token-a"}), dial(t, s.addr, client.Options{Token: "token-b"})
	errs := make(chan error, 4)
	for _, c := range []*client.Client{a, a, b, b} {
		go func() {
			_, err := c.Oracle.Ask(context.Background(), askReq("big sales"))
			errs <- err
		}()
	}
	waitFor(t, "both principals at their limit", func() bool { return s.gate.arrived.Load() == 4 })
	_, err = a.Oracle.Ask(ctxT(t), askReq("big sales"))
	wantCode(t, "a third call of a", err, codes.ResourceExhausted, "OVERLOADED")
	if scope := errorInfo(status.Convert(err)).GetMetadata()["scope"]; scope != "principal" {
		t.Fatalf("scope %q, want principal", scope)
	}
	if st := s.srv.Admission(); st.RejectedPrincipal != 1 || st.RejectedServer != 0 {
		t.Fatalf("admission %+v, want one refusal by the principal's limit", st)
	}
	close(s.gate.open)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestMaxConnectionAge: a connection older than the age is closed with
// GOAWAY and the client moves to a new one; no call fails.
func TestMaxConnectionAge(t *testing.T) {
	a, err := app.New(context.Background(), app.Config{Corpora: []string{testutil.WriteTiny(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	srv := server.New(a.Env, server.Options{MaxConnectionAge: 50 * time.Millisecond, MaxConnectionAgeGrace: time.Minute})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &countingListener{Listener: inner}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	c := dial(t, inner.Addr().String(), client.Options{Attempts: 5})
	calls := 0
	waitFor(t, "a second connection", func() bool {
		calls++
		if _, err := c.Env.ListCorpora(ctxT(t), &pb.ListCorporaRequest{}); err != nil {
			t.Fatalf("call %d: %v", calls, err)
		}
		return lis.n.Load() >= 2
	})
}

// TestDrain: when Serve's context ends, health turns NOT_SERVING (but
// liveness) while the drain delay still takes work; then new connections
// are refused, the call in flight finishes, and Serve returns nil.
func TestDrain(t *testing.T) {
	var s *gated
	var c *client.Client
	slept := make(chan time.Duration, 1)
	s = startGated(t, server.Options{DrainDelay: time.Hour, ShutdownGrace: time.Minute, Sleep: func(ctx context.Context, d time.Duration) error {
		// The drain delay: health says NOT_SERVING, work is still taken.
		for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
			"": healthpb.HealthCheckResponse_NOT_SERVING, "avtgym.v1.EnvService": healthpb.HealthCheckResponse_NOT_SERVING,
			server.LivenessService: healthpb.HealthCheckResponse_SERVING,
		} {
			if h, err := c.Health.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc}); err != nil || h.GetStatus() != want {
				t.Errorf("health %q during the drain delay: %v %v, want %s", svc, h, err, want)
			}
		}
		if _, err := c.Env.ListCorpora(ctxT(t), &pb.ListCorporaRequest{}); err != nil {
			t.Errorf("a call during the drain delay: %v", err)
		}
		slept <- d
		return nil
	}})
	c = dial(t, s.addr, client.Options{})
	held := make(chan error, 1)
	go func() {
		_, err := c.Oracle.Ask(context.Background(), askReq("big sales"))
		held <- err
	}()
	waitFor(t, "a call in flight", func() bool { return s.gate.arrived.Load() == 1 })
	s.cancel()
	if d := <-slept; d != time.Hour {
		t.Fatalf("drain delay %v", d)
	}
	waitFor(t, "draining", func() bool { return s.srv.Draining() })
	// A new client finds nobody listening.
	_, err := dial(t, s.addr, client.Options{}).Env.ListCorpora(ctxT(t), &pb.ListCorporaRequest{})
	wantCode(t, "a new connection while draining", err, codes.Unavailable, "")
	close(s.gate.open)
	if err := <-held; err != nil {
		t.Fatalf("the call in flight was cut: %v", err)
	}
	if err := <-s.done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	s.done <- nil // for the cleanup
}

// TestDrainHooksRunAfterCallsInFlight: the app's drain hooks run once the
// calls in flight have finished, while the probe port still answers
// NOT_SERVING; the process would then exit.
func TestDrainHooksRunAfterCallsInFlight(t *testing.T) {
	r := startApp(t, app.Config{HealthListen: "127.0.0.1:0", Limits: testLimits()})
	probe := dial(t, r.app.Addrs.Health, client.Options{})
	var ran atomic.Int64
	var inHook []string
	r.app.OnDrain(func(ctx context.Context) error {
		ran.Add(1)
		if n := r.app.Server.Admission().InFlight; n != 0 {
			inHook = append(inHook, fmt.Sprintf("%d calls still in flight", n))
		}
		h, err := probe.Health.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			inHook = append(inHook, fmt.Sprintf("probe: %v %v, want NOT_SERVING", h, err))
		}
		return nil
	})
	r.app.OnDrain(func(context.Context) error { ran.Add(1); return errors.New("a helper that would not stop") })
	c := dial(t, r.addr, client.Options{})
	ep := reset(t, c.Env, &pb.ResetRequest{TaskId: "count", Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
	slow := make(chan *pb.StepResponse, 1)
	go func() {
		// A runaway query holds the call for its statement deadline.
		resp, err := c.Env.Step(context.Background(), &pb.StepRequest{Token: ep.Token, Action: submit("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c")})
		if err != nil {
			t.Errorf("the call in flight: %v", err)
		}
		slow <- resp
	}()
	waitFor(t, "the call in flight", func() bool { return r.app.Server.Admission().InFlight == 1 })
	if err := r.stop(t); err != nil {
		t.Fatalf("serve: %v", err)
	}
	if resp := <-slow; !resp.GetDone() {
		t.Fatalf("the call in flight answered %v", resp)
	}
	if ran.Load() != 2 || len(inHook) > 0 {
		t.Fatalf("hooks ran %d times (want 2): %v", ran.Load(), inHook)
	}
}

// otlpReceiver is an in-process OTLP trace collector.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string]map[string]string // span name → its string attributes
	res   []string                     // resource service names
}

func (o *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				o.res = append(o.res, kv.GetValue().GetStringValue())
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				attrs := map[string]string{}
				for _, kv := range sp.GetAttributes() {
					attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
				}
				o.spans[sp.GetName()] = attrs
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// TestTracingReachesOTLP: with an OTLP endpoint, each call's span (with
// the principal) reaches the collector by the time the server has
// drained; health checks are not traced.
func TestTracingReachesOTLP(t *testing.T) {
	recv := &otlpReceiver{spans: map[string]map[string]string{}}
	g := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(g, recv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(lis)
	defer g.Stop()
	r := startApp(t, app.Config{OTLPEndpoint: lis.Addr().String(), OTLPInsecure: true, AuthFile: writeAuthFile(t, nil)})
	c := dial(t, r.addr, client.Options{Token: trainerToken})
	reset(t, c.Env, &pb.ResetRequest{TaskId: "big"})
	if _, err := c.Health.Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(t); err != nil { // flushes the spans
		t.Fatal(err)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	span, ok := recv.spans["avtgym.v1.EnvService/Reset"]
	if !ok {
		t.Fatalf("no Reset span reached the collector; spans: %v", recv.spans)
	}
	if span["avtgym.principal"] != "grpo-trainer" {
		t.Errorf("span attributes %v, want avtgym.principal grpo-trainer", span)
	}
	for name := range recv.spans {
		if strings.Contains(name, "Health") {
			t.Errorf("a health check was traced: %s", name)
		}
	}
	if !slices.Contains(recv.res, "avtgym") {
		t.Errorf("resource service names %v, want avtgym", recv.res)
	}
}

// TestEpisodeLogHoldsEachEpisodeOnce: retried final steps (unary and in a
// batch, twice in one batch) and forks that end the same way are written
// once; a fork that ends differently, each episode of a group and an
// outcome episode are written each once; files rotate; every line holds
// the transcript with roles, the reward and privileged data even though
// no client asked for it.
func TestEpisodeLogHoldsEachEpisodeOnce(t *testing.T) {
	dir := t.TempDir()
	r := startApp(t, app.Config{EpisodeLog: dir, EpisodeLogMaxBytes: 4 << 10, AuthFile: writeAuthFile(t, nil)})
	c := dial(t, r.addr, client.Options{Token: policyToken}).Env
	// One episode, its final step retried three ways.
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big", Seed: seed(1)})
	asked := step(t, c, ep.Token, ask(fullQ("big sales")), false)
	end := step(t, c, asked.Token, stop(), false)
	step(t, c, asked.Token, stop(), false)
	if _, err := c.StepBatch(ctxT(t), &pb.StepBatchRequest{Steps: []*pb.StepRequest{{Token: asked.Token, Action: stop()}, {Token: asked.Token, Action: stop()}}}); err != nil {
		t.Fatal(err)
	}
	// A fork that ends differently.
	fork := step(t, c, asked.Token, ask(fullQ("recent year")), false)
	step(t, c, fork.Token, stop(), false)
	// A group of four, and an outcome episode.
	group, err := c.Reset(ctxT(t), &pb.ResetRequest{TaskId: "top-a", Seed: seed(10), GroupSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	var steps []*pb.StepRequest
	for _, e := range group.Episodes {
		steps = append(steps, &pb.StepRequest{Token: e.Token, Action: stop()})
	}
	if _, err := c.StepBatch(ctxT(t), &pb.StepBatchRequest{Steps: steps}); err != nil {
		t.Fatal(err)
	}
	out := reset(t, c, &pb.ResetRequest{TaskId: "count", Seed: seed(2), Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
	step(t, c, out.Token, submit("SELECT COUNT(*) FROM sales"), false)
	// The first episode's seed reset again and played alike: another
	// episode (another uid), so another line, though its transcript is
	// the first's.
	twin := reset(t, c, &pb.ResetRequest{TaskId: "big", Seed: seed(1)})
	step(t, c, step(t, c, twin.Token, ask(fullQ("big sales")), false).Token, stop(), false)
	if twin.EpisodeUid == ep.EpisodeUid || twin.EpisodeId != ep.EpisodeId {
		t.Fatalf("the twin: id %q uid %q, the first: id %q uid %q", twin.EpisodeId, twin.EpisodeUid, ep.EpisodeId, ep.EpisodeUid)
	}
	if end.Privileged != nil {
		t.Fatal("the client got privileged data it did not ask for")
	}
	st := r.app.EpisodeLog.Stats()
	written, dups := st.Written, st.Duplicates
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if written != 8 || dups != 3 {
		t.Errorf("episode log wrote %d lines and dropped %d duplicates, want 8 and 3", written, dups)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "episodes-*.jsonl"))
	if len(files) < 2 {
		t.Errorf("%d files, want rotation at 4 KiB", len(files))
	}
	keys := map[string]int{}
	var lines []map[string]any
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l map[string]any
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v: %s", f, err, sc.Text())
			}
			keys[l["key"].(string)]++
			lines = append(lines, l)
		}
		fh.Close()
	}
	if len(lines) != 8 || len(keys) != 8 {
		t.Fatalf("%d lines with %d keys, want 8 distinct: %v", len(lines), len(keys), keys)
	}
	var first, twinLine map[string]any
	for _, l := range lines {
		if !strings.HasPrefix(l["key"].(string), l["episode_uid"].(string)+"#") {
			t.Errorf("line %v: the key does not start with the uid %v", l["key"], l["episode_uid"])
		}
		if l["status"] == "" || strings.HasPrefix(l["status"].(string), "EPISODE_STATUS_") || l["schema"] != "avtgym.episode/1" || l["writer"] != "serve" {
			t.Errorf("line %v: status %v schema %v writer %v", l["key"], l["status"], l["schema"], l["writer"])
		}
		if l["episode_uid"] == ep.EpisodeUid && len(l["turns"].([]any)) == 4 {
			first = l
		}
		if l["episode_uid"] == twin.EpisodeUid {
			twinLine = l
		}
		if l["principal"] != "rollout-worker" || l["privileged"] == nil {
			t.Errorf("line %v: want principal rollout-worker and privileged data", l["key"])
		}
	}
	if first == nil || twinLine == nil {
		t.Fatalf("the first episode's line or its twin's is missing: %v", keys)
	}
	if first["episode_id"] != "tiny/big/1" || twinLine["episode_id"] != "tiny/big/1" {
		t.Errorf("episode ids %v and %v, want tiny/big/1", first["episode_id"], twinLine["episode_id"])
	}
	var roles []string
	for _, tu := range first["turns"].([]any) {
		m := tu.(map[string]any)
		roles = append(roles, fmt.Sprint(m["role"], "/", m["kind"]))
	}
	if got := strings.Join(roles, " "); got != "environment/request policy/question oracle/<nil> policy/stop" {
		t.Errorf("turns %s", got)
	}
	priv := first["privileged"].(map[string]any)
	if priv["reference_sql"] == nil || first["reward"] == nil || first["components"].(map[string]any)["question_f1"] == nil {
		t.Errorf("line lacks the reference or the reward: %v", first)
	}
}

func testLimits() sqlexec.Limits {
	return sqlexec.Limits{Timeout: time.Second, MaxRows: 100, MaxBytes: 1 << 20}
}

// Package server adapts the episode environment to gRPC: the EnvService
// and the OracleService, the one place where domain errors become gRPC
// statuses, batch fan-out, the standard health and reflection services,
// request logging and Prometheus metrics, and graceful shutdown. It is
// also the front door: TLS, authentication of principals and their roles,
// admission control, connection management, draining, the access log,
// tracing and the episode log.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"avtgym/corpus"
	"avtgym/env"
	"avtgym/internal/buildinfo"
	"avtgym/internal/grpcpool"
	pb "avtgym/proto/avtgym/v1"
)

// DefaultMaxMessageBytes is the default bound on a request and on a
// response (Options.MaxRecvBytes, Options.MaxSendBytes): batches of
// thousands of tokens are large.
const DefaultMaxMessageBytes = 64 << 20

// Connection defaults (Options).
const (
	// DefaultMaxConcurrentStreams bounds the calls in flight on one
	// connection; more wait in the client for a free stream.
	DefaultMaxConcurrentStreams = 1024
	// DefaultKeepaliveMinTime is the shortest interval between a client's
	// keepalive pings that the server tolerates; a client that pings more
	// often is sent GOAWAY ("too_many_pings").
	DefaultKeepaliveMinTime = 10 * time.Second
	// DefaultDrainRetryDelay is the RetryInfo delay of a call refused
	// while draining.
	DefaultDrainRetryDelay = time.Second
)

// LivenessService is the health service name that stays SERVING until the
// process exits, also while it drains (for a liveness probe); the overall
// service ("") and the avtgym services turn NOT_SERVING when draining
// starts (for a readiness probe).
const LivenessService = "liveness"

// Options configure a Server.
type Options struct {
	// Logger receives request and lifecycle logs; nil means no logs.
	Logger *zap.Logger
	// Metrics records RPC and episode metrics; nil means none.
	Metrics *Metrics
	// ShutdownGrace is how long Serve waits for calls in flight after its
	// context ends (and DrainDelay has passed) before it cuts them; zero
	// means 10 seconds.
	ShutdownGrace time.Duration
	// DrainDelay is how long Serve keeps taking new work after its context
	// ends, with health already NOT_SERVING, so that load balancers stop
	// sending it calls before it refuses them; zero means none.
	DrainDelay time.Duration
	// Sleep waits d or until ctx ends (the drain delay); nil means real
	// time. Tests inject one.
	Sleep func(ctx context.Context, d time.Duration) error
	// MaxRecvBytes bounds a request message; zero means
	// DefaultMaxMessageBytes. A larger request gets RESOURCE_EXHAUSTED
	// (REQUEST_TOO_LARGE) with ErrorInfo; grpc's own limit is set a quarter
	// higher (grpcRecvLimit), and a request above that gets grpc's bare
	// RESOURCE_EXHAUSTED.
	MaxRecvBytes int
	// MaxSendBytes bounds a response message; zero means
	// DefaultMaxMessageBytes. The server never builds a larger response:
	// a batch item whose result would not fit gets RESOURCE_EXHAUSTED
	// (RESPONSE_TOO_LARGE), and so does a unary call.
	MaxSendBytes int
	// BatchWorkers is how many items of one batch run at once; zero means
	// GOMAXPROCS, right for deterministic steps, which are CPU-bound. Steps
	// that wait on a model endpoint (LLM oracles and solvers) need more, or
	// a batch keeps only a few model calls in flight whatever the model's
	// concurrency limit (the llm client's semaphore is what bounds the
	// endpoint).
	BatchWorkers int

	// TLS, when set, makes the server speak TLS only; with ClientAuth
	// tls.RequireAndVerifyClientCert (LoadTLS with a client CA) every
	// client must present a certificate, and calls are authenticated by it.
	TLS *tls.Config
	// Principals, when set, authenticates every call but health's by its
	// bearer token (or its client certificate's subject), before a byte of
	// its request is read (authFirst): a call without
	// credentials gets UNAUTHENTICATED / CREDENTIALS_MISSING, one with
	// unknown credentials UNAUTHENTICATED / CREDENTIALS_INVALID, and a
	// "policy" principal that asks for privileged data PERMISSION_DENIED /
	// PRIVILEGED_DENIED. Nil, and without client certificates, every
	// caller is an anonymous trainer. Health needs no credentials, so its
	// requests are read from anyone, up to MaxRecvBytes like any other's
	// (grpc-go has no per-method receive limit); ProbeServer's health
	// takes requests of 4 KiB at most.
	Principals *Principals
	// MaxInFlight bounds the work in flight on the server, in items (a
	// unary call is 1, a batch its items); zero means no bound. A call past
	// it is refused at once: RESOURCE_EXHAUSTED / OVERLOADED with a
	// RetryInfo of OverloadRetryDelay. Every call counts its full weight;
	// a batch larger than the bound is admitted only when nothing else is
	// in flight, and then runs alone (admission).
	MaxInFlight int
	// MaxInFlightPerPrincipal bounds each principal's work in flight the
	// same way (a batch larger than it is admitted only when its principal
	// has nothing else in flight); zero means no bound.
	MaxInFlightPerPrincipal int
	// OverloadRetryDelay is the RetryInfo delay of an OVERLOADED refusal;
	// zero means DefaultOverloadRetryDelay.
	OverloadRetryDelay time.Duration
	// MaxConcurrentStreams bounds the calls in flight on one connection;
	// zero means DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
	// MaxConnectionAge closes a connection (with GOAWAY, after its calls
	// in flight) once it is this old, give or take 10%, so that clients
	// reconnect and long-lived HTTP/2 connections spread over replicas
	// behind an L4 load balancer; zero means never.
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is how long calls in flight on such a
	// connection may still run; zero means until they end.
	MaxConnectionAgeGrace time.Duration
	// KeepaliveMinTime is the shortest keepalive ping interval tolerated
	// from a client; zero means DefaultKeepaliveMinTime.
	KeepaliveMinTime time.Duration
	// NoReflection leaves the reflection service out.
	NoReflection bool
	// AccessLogEvery samples the access log (an info line per call:
	// method, code, duration, principal, peer): the first call of each
	// method and status code, then every AccessLogEvery-th; zero means
	// every call, a negative value none.
	AccessLogEvery int
	// TracerProvider, when set, traces every call but health checks
	// (otelgrpc), with W3C trace-context propagation.
	TracerProvider trace.TracerProvider
	// EpisodeLog, when set, receives every finished episode.
	EpisodeLog *EpisodeLog
}

// Server is the gRPC server of one avtgym process.
type Server struct {
	pb.UnimplementedEnvServiceServer
	env    *env.Env
	opt    Options
	log    *zap.Logger
	grpc   *grpc.Server
	health *health.Server
	codec  *grpcpool.ServerCodec
	// batchBytes is the byte budget of one batch response (batch.go); the
	// overflow results are what an item that does not fit gets.
	batchBytes                  int
	resetOverflow, stepOverflow overflow
	// clientCerts: TLS requires client certificates (mutual TLS).
	clientCerts bool
	admit       *admission
	draining    atomic.Bool
	sampler     sampler
	// privilegedLeaks counts privileged data found in a response to a
	// principal that may not read it (and removed): always 0 unless the
	// server has a bug.
	privilegedLeaks atomic.Uint64
	// unauthenticated counts calls refused for their credentials.
	unauthenticated atomic.Uint64
}

// New builds a server around an environment.
func New(e *env.Env, opt Options) *Server {
	if opt.Logger == nil {
		opt.Logger = zap.NewNop()
	}
	if opt.ShutdownGrace == 0 {
		opt.ShutdownGrace = 10 * time.Second
	}
	if opt.Sleep == nil {
		opt.Sleep = sleep
	}
	if opt.MaxRecvBytes <= 0 {
		opt.MaxRecvBytes = DefaultMaxMessageBytes
	}
	if opt.MaxSendBytes <= 0 {
		opt.MaxSendBytes = DefaultMaxMessageBytes
	}
	if opt.BatchWorkers <= 0 {
		opt.BatchWorkers = runtime.GOMAXPROCS(0)
	}
	if opt.MaxConcurrentStreams == 0 {
		opt.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	if opt.KeepaliveMinTime <= 0 {
		opt.KeepaliveMinTime = DefaultKeepaliveMinTime
	}
	s := &Server{env: e, opt: opt, log: opt.Logger, health: health.NewServer(), codec: grpcpool.NewServerCodec(opt.MaxRecvBytes),
		admit: newAdmission(opt.MaxInFlight, opt.MaxInFlightPerPrincipal, opt.OverloadRetryDelay), sampler: sampler{every: opt.AccessLogEvery}}
	s.initBatches()
	if n := e.MaxStepResponseBytes(); n > opt.MaxSendBytes {
		s.log.Warn("a step's response may exceed the send limit; such steps fail with RESOURCE_EXHAUSTED",
			zap.Int("step_response_bound", n), zap.Int("max_send_bytes", opt.MaxSendBytes))
	}
	sopts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.intercept),
		grpc.ChainStreamInterceptor(s.interceptStream),
		grpc.MaxRecvMsgSize(grpcRecvLimit(opt.MaxRecvBytes)),
		grpc.MaxSendMsgSize(opt.MaxSendBytes),
		experimental.BufferPool(grpcpool.Shared),
		grpc.ForceServerCodecV2(s.codec),
		grpc.MaxConcurrentStreams(opt.MaxConcurrentStreams),
		// Streams run on a pool of long-lived goroutines (grpc starts a
		// goroutine of its own when all are busy), whose stacks stay grown:
		// a fresh goroutine per call grew its stack on every verifying step
		// (runtime.newstack: 7% of a submit_sql step's server CPU, 12% of an
		// ask's; bench/RESULTS.md).
		grpc.NumStreamWorkers(uint32(streamWorkers())),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: opt.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: opt.MaxConnectionAge, MaxConnectionAgeGrace: opt.MaxConnectionAgeGrace}),
	}
	if opt.TLS != nil {
		s.clientCerts = opt.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(opt.TLS)))
	}
	if opt.TracerProvider != nil {
		sopts = append(sopts, grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(opt.TracerProvider),
			otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
			otelgrpc.WithPropagators(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})),
			otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
		)))
	}
	if opt.Metrics != nil {
		opt.Metrics.watch(s)
	}
	s.grpc = grpc.NewServer(sopts...)
	s.grpc.RegisterService(s.authFirst(&pb.EnvService_ServiceDesc), s)
	s.grpc.RegisterService(s.authFirst(&pb.OracleService_ServiceDesc), &oracleService{env: e})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if !opt.NoReflection {
		reflection.Register(s.grpc)
	}
	s.setServing(healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	return s
}

// readiness are the health services that report whether the server takes
// new work.
var readiness = []string{"", pb.EnvService_ServiceDesc.ServiceName, pb.OracleService_ServiceDesc.ServiceName}

func (s *Server) setServing(st healthpb.HealthCheckResponse_ServingStatus) {
	for _, name := range readiness {
		s.health.SetServingStatus(name, st)
	}
}

// GRPC returns the underlying grpc.Server (to register more services).
// The unary calls of a service registered there are authenticated by the
// interceptor, after their requests are read: only avtgym's own services
// authenticate first (authFirst).
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// ProbeServer returns a new plaintext gRPC server that serves only this
// server's health service, without credentials: for probes that can do
// neither TLS nor tokens (Kubernetes' built-in gRPC probe), and the
// reflection service unless Options.NoReflection. The caller
// serves it on its own port and stops it after Serve returns, so that
// probes see NOT_SERVING throughout the drain.
func (s *Server) ProbeServer() *grpc.Server {
	g := grpc.NewServer(grpc.MaxRecvMsgSize(4 << 10))
	healthpb.RegisterHealthServer(g, s.health)
	if !s.opt.NoReflection {
		// It lists health only: grpcurl -plaintext ADDR grpc.health.v1.Health/Check works.
		reflection.Register(g)
	}
	return g
}

// Draining reports whether the server refuses new work because it is
// shutting down.
func (s *Server) Draining() bool { return s.draining.Load() }

// Admission reports the admission counters.
func (s *Server) Admission() AdmissionStats { return s.admit.stats() }

// PrivilegedLeaks counts the responses from which privileged data had to
// be removed for a principal that may not read it: a server bug if ever
// not 0.
func (s *Server) PrivilegedLeaks() uint64 { return s.privilegedLeaks.Load() }

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Close stops the server at once, as grpc's Stop does: it cuts any call in
// flight and ends its stream workers. A server that Serve has drained is
// already stopped; Close is for one that was never served (and is
// idempotent).
func (s *Server) Close() { s.grpc.Stop() }

// Serve serves on lis until ctx ends, then drains: health turns
// NOT_SERVING (but LivenessService); for DrainDelay new calls are still
// taken; then new calls are refused with UNAVAILABLE / DRAINING and a
// RetryInfo, connections are sent GOAWAY, and calls in flight get
// ShutdownGrace to finish before the rest are cut. It returns nil after a
// drain.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.log.Info("draining", zap.Duration("delay", s.opt.DrainDelay), zap.Duration("grace", s.opt.ShutdownGrace), zap.Int("in_flight", s.admit.stats().InFlight))
	s.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	if s.opt.DrainDelay > 0 {
		_ = s.opt.Sleep(context.Background(), s.opt.DrainDelay)
	}
	s.draining.Store(true)
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
		s.log.Info("drained: every call in flight finished")
	case <-time.After(s.opt.ShutdownGrace):
		s.log.Warn("grace period over; cutting calls in flight", zap.Int("in_flight", s.admit.stats().InFlight))
		s.grpc.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// grpcRecvLimit is grpc's own request limit for a server limit of n bytes:
// a quarter higher, so that requests somewhat over the limit reach the
// codec, which answers them with details.
func grpcRecvLimit(n int) int { return n + n/4 }

// authFirst returns a copy of a service's description whose unary
// handlers authenticate the caller before they receive its request: an
// unauthenticated call is refused from its metadata (and the peer's
// certificate), logged and measured, and its message is never read, so
// that callers without credentials cannot make the server hold their
// requests (issue 25: sixteen 60 MiB Resets raised its RSS by hundreds of
// MB, for good).
// grpc-go (v1.85) reads a unary call's message only inside the handler's
// dec function, and the generated handlers call dec first: until then the
// transport holds no more of the message than the stream's flow-control
// window, and a refused stream's window is dropped with it.
// TestUnauthenticatedRequestIsNeverRead fails if grpc ever reads earlier.
// The principal found travels in the context to intercept.
func (s *Server) authFirst(sd *grpc.ServiceDesc) *grpc.ServiceDesc {
	d := *sd
	d.Methods = slices.Clone(sd.Methods)
	for i, m := range d.Methods {
		method, handler := "/"+sd.ServiceName+"/"+m.MethodName, m.Handler
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			start := time.Now()
			p, err := s.authenticate(ctx)
			if err != nil {
				err = toStatus(err).Err()
				s.observe(ctx, method, nil, err, time.Since(start), nil)
				return nil, err
			}
			return handler(srv, context.WithValue(ctx, principalKey{}, p), dec, in)
		}
	}
	return &d
}

// intercept is the front door of every unary call: it authenticates the
// caller (unless authFirst has), refuses work while draining, refuses
// privileged data to a principal that may not read it, admits the call or
// refuses it at once (OVERLOADED), answers requests that did not decode,
// refuses responses larger than the send limit, turns any error into a
// status with details (and a panic into INTERNAL), and logs and measures
// the call with the code its client gets: a call whose context ended
// before its response was sent (a client that went away, a deadline that
// passed) ends with DEADLINE_EXCEEDED or CANCELED (endedError), whatever
// the handler returned, and its response is not sent. Health checks skip
// authentication, draining and admission.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	var ended atomic.Int64 // when ctx ended (UnixNano), for a call with a deadline
	if _, ok := ctx.Deadline(); ok {
		stop := context.AfterFunc(ctx, func() { ended.Store(time.Now().UnixNano()) })
		defer stop()
	}
	var (
		resp any
		err  error
		p    *Principal
	)
	if isHealth(info.FullMethod) {
		resp, err = s.handle(ctx, req, info.FullMethod, handler)
	} else {
		p, resp, err = s.admitted(ctx, req, info.FullMethod, handler)
	}
	if ctx.Err() != nil {
		at := time.Now()
		if n := ended.Load(); n != 0 {
			at = time.Unix(0, n)
		}
		resp, err = nil, endedError(ctx, start, at)
	}
	if err != nil {
		resp, err = nil, toStatus(err).Err()
	}
	s.observe(ctx, info.FullMethod, p, err, time.Since(start), req)
	return resp, err
}

// endedError is the error of a call whose context ended (at ended) before
// its response was sent: the status its client got. A client whose
// deadline passes cancels the call a little before the server's copy of
// the deadline (which started when the call arrived) expires, so a call
// with a deadline that ended in the last tenth of its time budget (from
// start, when it arrived, to the deadline) or later counts as
// DEADLINE_EXCEEDED; any other end is CANCELED (a client that cancelled,
// or a connection cut).
func endedError(ctx context.Context, start, ended time.Time) error {
	err := ctx.Err()
	if d, ok := ctx.Deadline(); ok && !errors.Is(err, context.DeadlineExceeded) && d.Sub(ended) <= d.Sub(start)/10 {
		err = context.DeadlineExceeded
	}
	return fmt.Errorf("the call ended before its response was sent: %w", err)
}

// observe measures a call and writes its access-log line.
func (s *Server) observe(ctx context.Context, method string, p *Principal, err error, took time.Duration, req any) {
	if s.opt.Metrics != nil {
		s.opt.Metrics.observeRPC(method, err, took)
	}
	s.accessLog(ctx, method, p, err, took, req)
}

func isHealth(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// admitted runs a call through authentication, draining, authorisation and
// admission, then the handler.
func (s *Server) admitted(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (*Principal, any, error) {
	p := PrincipalFrom(ctx) // authFirst's
	if p == nil {
		var err error
		if p, err = s.authenticate(ctx); err != nil {
			return nil, nil, err
		}
		ctx = context.WithValue(ctx, principalKey{}, p)
	}
	if s.draining.Load() {
		return p, nil, s.drainingError()
	}
	if f := s.codec.Failure(req); f != nil {
		return p, nil, decodeError(f)
	}
	if !p.mayReadPrivileged() {
		if field := privilegedField(req); field != "" {
			return p, nil, statusError(codes.PermissionDenied, pb.ErrorReason_PRIVILEGED_DENIED, field,
				fmt.Sprintf("%s: principal %q (role %q) may not receive privileged data; ask without it", field, p.Name, p.Role),
				map[string]string{"principal": p.Name, "role": string(p.Role)}, 0)
		}
	}
	release, err := s.admit.acquire(p.Name, weight(req))
	if err != nil {
		return p, nil, err
	}
	defer release()
	if span := trace.SpanFromContext(ctx); span.IsRecording() && p.Name != "" {
		span.SetAttributes(attribute.String("avtgym.principal", p.Name))
	}
	resp, err := s.handle(ctx, req, method, handler)
	if err == nil && !p.mayReadPrivileged() && stripPrivileged(resp) {
		s.privilegedLeaks.Add(1)
		s.log.Error("privileged data in a response to a principal that may not read it; removed (a server bug)",
			zap.String("method", method), zap.String("principal", p.Name))
	}
	return p, resp, err
}

func (s *Server) drainingError() error {
	return statusError(codes.Unavailable, pb.ErrorReason_DRAINING, "",
		"the server is shutting down and takes no new work; retry (another replica, or the restarted server, continues the episode)",
		nil, DefaultDrainRetryDelay)
}

// sampler decides which calls the access log records: the first of each
// method and status code, then every n-th.
type sampler struct {
	every  int
	counts sync.Map // method + code → *atomic.Uint64
}

func (m *sampler) sample(method string, code codes.Code) bool {
	switch {
	case m.every < 0:
		return false
	case m.every <= 1:
		return true
	}
	key := method + "\x00" + strconv.Itoa(int(code))
	c, ok := m.counts.Load(key)
	if !ok {
		c, _ = m.counts.LoadOrStore(key, new(atomic.Uint64))
	}
	return (c.(*atomic.Uint64).Add(1)-1)%uint64(m.every) == 0
}

// accessLog writes a call's access-log line (sampled), and logs the
// environment's own failures, always.
func (s *Server) accessLog(ctx context.Context, method string, p *Principal, err error, took time.Duration, req any) {
	code := status.Code(err)
	if code == codes.Internal || code == codes.Unknown {
		// The environment's own failures are worth an operator's look.
		s.log.Error("rpc failed", zap.String("method", method), zap.Error(err))
	}
	if !s.sampler.sample(method, code) {
		return
	}
	ce := s.log.Check(zap.InfoLevel, "rpc")
	if ce == nil {
		return
	}
	name := ""
	if p != nil {
		name = p.Name
	}
	fields := []zap.Field{zap.String("method", method), zap.String("code", code.String()), zap.Duration("took", took), zap.String("principal", name)}
	if pr, ok := peer.FromContext(ctx); ok && pr.Addr != nil {
		fields = append(fields, zap.String("peer", pr.Addr.String()))
	}
	if n := weight(req); n > 1 {
		fields = append(fields, zap.Int("items", n))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		fields = append(fields, zap.String("trace_id", sc.TraceID().String()))
	}
	if err != nil {
		fields = append(fields, zap.String("error", status.Convert(err).Message()))
	}
	ce.Write(fields...)
}

func (s *Server) handle(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			resp, err = nil, s.recovered(method, r)
		}
	}()
	if f := s.codec.Failure(req); f != nil {
		return nil, decodeError(f)
	}
	resp, err = handler(ctx, req)
	if err != nil {
		return nil, err
	}
	fillLabels(resp)
	switch resp.(type) {
	case *pb.ResetBatchResponse, *pb.StepBatchResponse:
		return resp, nil // accounted item by item (batch.go)
	}
	if n := messageSize(resp); n > s.opt.MaxSendBytes {
		return nil, &env.Error{Code: env.ResourceExhausted, Reason: env.ReasonResponseTooLarge,
			Msg:  fmt.Sprintf("the response would be %d bytes, more than this server sends (%d); ask for less", n, s.opt.MaxSendBytes),
			Meta: map[string]string{"size_bytes": strconv.Itoa(n), "limit_bytes": strconv.Itoa(s.opt.MaxSendBytes)}}
	}
	return resp, nil
}

// interceptStream gives streams (reflection, health Watch) the same
// treatment: requests that did not decode are answered with details, and
// errors become statuses with ErrorInfo.
func (s *Server) interceptStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = toStatus(s.recovered(info.FullMethod, r)).Err()
		}
	}()
	if !isHealth(info.FullMethod) {
		// Reflection: authenticated, and not while draining.
		if _, err := s.authenticate(ss.Context()); err != nil {
			return toStatus(err).Err()
		}
		if s.draining.Load() {
			return toStatus(s.drainingError()).Err()
		}
	}
	if err := handler(srv, &checkedStream{ServerStream: ss, codec: s.codec}); err != nil {
		return toStatus(err).Err()
	}
	return nil
}

// checkedStream reports, from RecvMsg, a request that did not decode.
type checkedStream struct {
	grpc.ServerStream
	codec *grpcpool.ServerCodec
}

func (c *checkedStream) RecvMsg(m any) error {
	err := c.ServerStream.RecvMsg(m)
	if f := c.codec.Failure(m); f != nil {
		return toStatus(decodeError(f)).Err()
	}
	return err
}

// recovered turns a panic into an INTERNAL error, and logs it with its
// stack: hostile input must never take the process down.
func (s *Server) recovered(method string, r any) error {
	s.log.Error("panic", zap.String("method", method), zap.Any("panic", r), zap.Stack("stack"))
	return &env.Error{Code: env.Internal, Reason: env.ReasonInternal, Msg: fmt.Sprintf("the server failed on this request: %v", r)}
}

// messageSize is the encoded size of a response.
func messageSize(m any) int {
	switch m := m.(type) {
	case interface{ SizeVT() int }:
		return m.SizeVT()
	case proto.Message:
		return proto.Size(m)
	}
	return 0
}

// Reset implements EnvService.Reset. A group whose response would exceed
// the send limit is refused before it is built.
func (s *Server) Reset(ctx context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error) {
	if err := s.refuseHidden(ctx, req.GetCorpus(), req.GetTaskId()); err != nil {
		return nil, err
	}
	p, err := s.env.PlanReset(req)
	if err != nil {
		return nil, err
	}
	// The shared form's size is known once built (p.Size bounds it).
	share := req.GetShareGroupObservation()
	if p.Size > s.batchBytes && !share {
		return nil, s.groupTooLarge(p)
	}
	resp, err := s.env.BuildReset(p)
	if err == nil && share {
		if err = s.shareReset(p, resp); err != nil {
			return nil, err
		}
	}
	if err == nil && s.opt.Metrics != nil {
		s.opt.Metrics.episodesStarted.Add(float64(len(resp.Episodes)))
	}
	return resp, err
}

func (s *Server) groupTooLarge(p *env.ResetPlan) error {
	per := p.Size / p.Episodes
	fit := s.batchBytes / per
	msg := fmt.Sprintf("a group of %d episodes would be %d bytes, more than this server sends (%d)", p.Episodes, p.Size, s.batchBytes)
	if fit > 0 {
		msg += fmt.Sprintf("; ask for at most %d episodes per reset", fit)
	} else {
		msg += "; this task's episodes are too large for this server's send limit"
	}
	return &env.Error{Code: env.ResourceExhausted, Reason: env.ReasonResponseTooLarge, Field: "group_size", Msg: msg,
		Meta: map[string]string{"size_bytes": strconv.Itoa(p.Size), "limit_bytes": strconv.Itoa(s.batchBytes), "max_group_size": strconv.Itoa(fit)}}
}

// Step implements EnvService.Step.
func (s *Server) Step(ctx context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	resp, err := s.env.Step(ctx, req)
	if err != nil {
		return nil, err
	}
	s.stepped(ctx, req, resp)
	return resp, nil
}

// stepped records a successful step: metrics, a warning with the cause
// when it ended the episode in ERROR, and the episode log when it
// finished the episode.
func (s *Server) stepped(ctx context.Context, req *pb.StepRequest, resp *pb.StepResponse) {
	if s.opt.Metrics != nil {
		s.opt.Metrics.observeStep(req, resp)
	}
	s.logFailed(resp)
	if s.opt.EpisodeLog != nil && resp.GetDone() {
		p := PrincipalFrom(ctx)
		if p == nil {
			p = anonymous
		}
		s.logEpisode(p, resp)
	}
}

// ListTasks implements EnvService.ListTasks.
func (s *Server) ListTasks(ctx context.Context, req *pb.ListTasksRequest) (*pb.ListTasksResponse, error) {
	c, err := s.env.Corpus(req.GetCorpus())
	if err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	switch {
	case size < 0:
		return nil, &env.Error{Code: env.InvalidArgument, Reason: env.ReasonInvalidOption, Field: "page_size", Msg: "must not be negative"}
	case size == 0:
		size = 100
	case size > 1000:
		size = 1000
	}
	offset, err := decodePageToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	out := &pb.ListTasksResponse{}
	matched := 0
	for _, t := range s.env.ListOrder(c) {
		if req.GetSplit() != "" && t.Split != req.GetSplit() {
			continue
		}
		if matched >= offset && len(out.Tasks) < size {
			out.Tasks = append(out.Tasks, s.summary(t, req.GetIncludePrivileged()))
		}
		matched++
	}
	out.TotalSize = int32(matched)
	if offset+len(out.Tasks) < matched {
		out.NextPageToken = encodePageToken(offset + len(out.Tasks))
	}
	return out, nil
}

// GetTask implements EnvService.GetTask.
func (s *Server) GetTask(ctx context.Context, req *pb.GetTaskRequest) (*pb.GetTaskResponse, error) {
	if err := s.refuseHidden(ctx, req.GetCorpus(), req.GetTaskId()); err != nil {
		return nil, err
	}
	t, err := s.env.Task(req.GetCorpus(), req.GetTaskId())
	if err != nil {
		return nil, err
	}
	out := &pb.GetTaskResponse{Task: proto.CloneOf(s.env.View(t))}
	if req.GetIncludePrivileged() {
		out.Privileged = s.env.TaskPrivileged(t)
	}
	return out, nil
}

// summary is t's listing entry: its public id, and its sample type only
// when the request asked for privileged data (the interceptor refused it
// to a principal that may not read it): the type tells whether a drift
// will come.
func (s *Server) summary(t *corpus.Task, privileged bool) *pb.TaskSummary {
	sm := env.Summary(t)
	sm.TaskId = s.env.PublicID(t)
	if !privileged {
		sm.SampleType = ""
	}
	return sm
}

// ListProtocols implements EnvService.ListProtocols.
func (s *Server) ListProtocols(ctx context.Context, req *pb.ListProtocolsRequest) (*pb.ListProtocolsResponse, error) {
	return s.env.ListProtocols(ctx, req)
}

// ListOracles implements EnvService.ListOracles.
func (s *Server) ListOracles(ctx context.Context, req *pb.ListOraclesRequest) (*pb.ListOraclesResponse, error) {
	return s.env.ListOracles(ctx, req)
}

// ListCorpora implements EnvService.ListCorpora.
func (s *Server) ListCorpora(ctx context.Context, req *pb.ListCorporaRequest) (*pb.ListCorporaResponse, error) {
	out := &pb.ListCorporaResponse{ServerVersion: buildinfo.Version()}
	for _, c := range s.env.Corpora() {
		out.Corpora = append(out.Corpora, &pb.CorpusInfo{
			Name:        c.Name,
			Description: c.Description,
			TaskCount:   int32(len(c.Tasks)),
			AvtCount:    int32(c.AVTCount()),
			Splits:      c.Splits(),
			Databases:   c.DBs(),
			ContentHash: s.env.CorpusHash(c.Name),
		})
	}
	return out, nil
}

// streamWorkers is the number of grpc stream workers: a few per CPU, as
// calls wait on the verifier and oracles as much as they compute.
func streamWorkers() int { return 4 * runtime.GOMAXPROCS(0) }

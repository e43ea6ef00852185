// Package server adapts the episode environment to gRPC: the EnvService,
// the one place where domain errors become gRPC statuses, batch fan-out,
// the standard health and reflection services, request logging and
// Prometheus metrics, and graceful shutdown.
package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"avtgym/env"
	"avtgym/internal/grpcpool"
	pb "avtgym/proto/avtgym/v1"
)

// DefaultMaxMessageBytes is the default bound on a request and on a
// response (Options.MaxRecvBytes, Options.MaxSendBytes): batches of
// thousands of tokens are large.
const DefaultMaxMessageBytes = 64 << 20

// Options configure a Server.
type Options struct {
	// Logger receives request and lifecycle logs; nil means no logs.
	Logger *zap.Logger
	// Metrics records RPC and episode metrics; nil means none.
	Metrics *Metrics
	// ShutdownGrace is how long Serve waits for calls in flight after its
	// context ends before it cuts them; zero means 10 seconds.
	ShutdownGrace time.Duration
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
}

// New builds a server around an environment.
func New(e *env.Env, opt Options) *Server {
	if opt.Logger == nil {
		opt.Logger = zap.NewNop()
	}
	if opt.ShutdownGrace == 0 {
		opt.ShutdownGrace = 10 * time.Second
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
	s := &Server{env: e, opt: opt, log: opt.Logger, health: health.NewServer(), codec: grpcpool.NewServerCodec(opt.MaxRecvBytes)}
	s.initBatches()
	if n := e.MaxStepResponseBytes(); n > opt.MaxSendBytes {
		s.log.Warn("a step's response may exceed the send limit; such steps fail with RESOURCE_EXHAUSTED",
			zap.Int("step_response_bound", n), zap.Int("max_send_bytes", opt.MaxSendBytes))
	}
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.intercept),
		grpc.ChainStreamInterceptor(s.interceptStream),
		grpc.MaxRecvMsgSize(grpcRecvLimit(opt.MaxRecvBytes)),
		grpc.MaxSendMsgSize(opt.MaxSendBytes),
		experimental.BufferPool(grpcpool.Shared),
		grpc.ForceServerCodecV2(s.codec),
	)
	pb.RegisterEnvServiceServer(s.grpc, s)
	pb.RegisterOracleServiceServer(s.grpc, &oracleService{env: e})
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(pb.EnvService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(pb.OracleService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
}

// GRPC returns the underlying grpc.Server (to register more services).
func (s *Server) GRPC() *grpc.Server { return s.grpc }

// Serve serves on lis until ctx ends, then stops gracefully: health turns
// NOT_SERVING, calls in flight get ShutdownGrace to finish, and the rest
// are cut.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down", zap.Duration("grace", s.opt.ShutdownGrace))
	s.health.Shutdown()
	stopped := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(s.opt.ShutdownGrace):
		s.log.Warn("grace period over; cutting calls in flight")
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

// intercept logs and measures every unary call, answers requests that did
// not decode, refuses responses larger than the send limit, and turns any
// error into a status with details (and a panic into INTERNAL).
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := s.handle(ctx, req, info.FullMethod, handler)
	if err != nil {
		resp, err = nil, toStatus(err).Err()
	}
	if s.opt.Metrics != nil {
		s.opt.Metrics.observeRPC(info.FullMethod, err, time.Since(start))
	}
	if code := status.Code(err); code == codes.Internal || code == codes.Unknown {
		// The environment's own failures are worth an operator's look.
		s.log.Error("rpc failed", zap.String("method", info.FullMethod), zap.Error(err))
	} else if ce := s.log.Check(zap.DebugLevel, "rpc"); ce != nil {
		ce.Write(zap.String("method", info.FullMethod), zap.Duration("took", time.Since(start)), zap.Error(err))
	}
	return resp, err
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
	p, err := s.env.PlanReset(req)
	if err != nil {
		return nil, err
	}
	if p.Size > s.batchBytes {
		return nil, s.groupTooLarge(p)
	}
	resp, err := s.env.BuildReset(p)
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
	if err == nil && s.opt.Metrics != nil {
		s.opt.Metrics.observeStep(req, resp)
	}
	return resp, err
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
	for _, t := range c.Tasks {
		if req.GetSplit() != "" && t.Split != req.GetSplit() {
			continue
		}
		if matched >= offset && len(out.Tasks) < size {
			out.Tasks = append(out.Tasks, env.Summary(t))
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
	t, err := s.env.Task(req.GetCorpus(), req.GetTaskId())
	if err != nil {
		return nil, err
	}
	return &pb.GetTaskResponse{Task: proto.CloneOf(s.env.View(t))}, nil
}

// ListOracles implements EnvService.ListOracles.
func (s *Server) ListOracles(ctx context.Context, req *pb.ListOraclesRequest) (*pb.ListOraclesResponse, error) {
	return s.env.ListOracles(ctx, req)
}

// ListCorpora implements EnvService.ListCorpora.
func (s *Server) ListCorpora(ctx context.Context, req *pb.ListCorporaRequest) (*pb.ListCorporaResponse, error) {
	out := &pb.ListCorporaResponse{}
	for _, c := range s.env.Corpora() {
		out.Corpora = append(out.Corpora, &pb.CorpusInfo{
			Name:        c.Name,
			Description: c.Description,
			TaskCount:   int32(len(c.Tasks)),
			AvtCount:    int32(c.AVTCount()),
			Splits:      c.Splits(),
			Databases:   c.DBs(),
		})
	}
	return out, nil
}

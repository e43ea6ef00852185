// Package server adapts the episode environment to gRPC: the EnvService,
// the one place where domain errors become gRPC statuses, batch fan-out,
// the standard health and reflection services, request logging and
// Prometheus metrics, and graceful shutdown.
package server

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
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

// MaxBatch bounds the items of one ResetBatch or StepBatch.
const MaxBatch = 4096

// Options configure a Server.
type Options struct {
	// Logger receives request and lifecycle logs; nil means no logs.
	Logger *zap.Logger
	// Metrics records RPC and episode metrics; nil means none.
	Metrics *Metrics
	// ShutdownGrace is how long Serve waits for calls in flight after its
	// context ends before it cuts them; zero means 10 seconds.
	ShutdownGrace time.Duration
	// MaxRecvBytes bounds a request message; zero means 64 MiB (batches of
	// thousands of tokens are large).
	MaxRecvBytes int
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
}

// New builds a server around an environment.
func New(e *env.Env, opt Options) *Server {
	if opt.Logger == nil {
		opt.Logger = zap.NewNop()
	}
	if opt.ShutdownGrace == 0 {
		opt.ShutdownGrace = 10 * time.Second
	}
	if opt.MaxRecvBytes == 0 {
		opt.MaxRecvBytes = 64 << 20
	}
	if opt.BatchWorkers <= 0 {
		opt.BatchWorkers = runtime.GOMAXPROCS(0)
	}
	s := &Server{env: e, opt: opt, log: opt.Logger, health: health.NewServer()}
	s.grpc = grpc.NewServer(
		grpc.ChainUnaryInterceptor(s.intercept),
		grpc.MaxRecvMsgSize(opt.MaxRecvBytes),
		grpc.MaxSendMsgSize(opt.MaxRecvBytes),
		experimental.BufferPool(grpcpool.Shared),
		grpc.ForceServerCodecV2(grpcpool.Codec{}),
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

// intercept logs and measures every unary call and turns any domain error
// that escaped a handler into a status.
func (s *Server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	if err != nil {
		err = toStatus(err).Err()
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

// Reset implements EnvService.Reset.
func (s *Server) Reset(ctx context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error) {
	resp, err := s.env.Reset(ctx, req)
	if err == nil && s.opt.Metrics != nil {
		s.opt.Metrics.episodesStarted.Add(float64(len(resp.Episodes)))
	}
	return resp, err
}

// Step implements EnvService.Step.
func (s *Server) Step(ctx context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	resp, err := s.env.Step(ctx, req)
	if err == nil && s.opt.Metrics != nil {
		s.opt.Metrics.observeStep(req, resp)
	}
	return resp, err
}

// ResetBatch implements EnvService.ResetBatch: one result per item.
func (s *Server) ResetBatch(ctx context.Context, req *pb.ResetBatchRequest) (*pb.ResetBatchResponse, error) {
	if err := checkBatch("requests", len(req.GetRequests())); err != nil {
		return nil, err
	}
	out := &pb.ResetBatchResponse{Results: make([]*pb.ResetBatchResult, len(req.Requests))}
	fanOut(len(req.Requests), s.opt.BatchWorkers, func(i int) {
		resp, err := s.Reset(ctx, req.Requests[i])
		out.Results[i] = &pb.ResetBatchResult{Status: itemStatus(err), Response: resp}
	})
	return out, nil
}

// StepBatch implements EnvService.StepBatch: one result per item.
func (s *Server) StepBatch(ctx context.Context, req *pb.StepBatchRequest) (*pb.StepBatchResponse, error) {
	if err := checkBatch("steps", len(req.GetSteps())); err != nil {
		return nil, err
	}
	out := &pb.StepBatchResponse{Results: make([]*pb.StepBatchResult, len(req.Steps))}
	fanOut(len(req.Steps), s.opt.BatchWorkers, func(i int) {
		resp, err := s.Step(ctx, req.Steps[i])
		out.Results[i] = &pb.StepBatchResult{Status: itemStatus(err), Response: resp}
	})
	return out, nil
}

func checkBatch(field string, n int) error {
	if n > MaxBatch {
		return &env.Error{Code: env.InvalidArgument, Reason: env.ReasonInvalidAction, Field: field, Msg: "a batch holds at most 4096 items; split it"}
	}
	return nil
}

// fanOut runs f(0..n-1) on up to workers goroutines. A panic in one item
// would take the process down like any handler panic; items never panic on
// bad input, they return errors.
func fanOut(n, workers int, f func(i int)) {
	workers = min(n, workers)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
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

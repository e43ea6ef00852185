package server_test

import (
	"context"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"avtgym/app"
	"avtgym/bench"
	"avtgym/client"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

// The benchmarks run the real server on loopback TCP with the demo corpus,
// through the real client, in parallel (b.RunParallel; raise
// -cpu/-parallelism for more calls in flight). BenchmarkHealthCheck is the
// floor of what an RPC costs here; compare BenchmarkStepAsk with it, and
// BenchmarkStepBatch256's per-episode cost with BenchmarkStepAsk.

// benchServer starts a server and returns a client with the same options
// as `avtgym bench` (no per-call timeout, whose timer would add to the cost
// of every unary call) and the measured step.
func benchServer(b *testing.B) (*client.Client, *pb.StepRequest) {
	s := testutil.StartServer(b, app.Config{})
	c, err := client.Dial(s.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	req, _, _, err := bench.AskStep(context.Background(), c, "")
	if err != nil {
		b.Fatal(err)
	}
	return c, req
}

func BenchmarkHealthCheck(b *testing.B) {
	s, _ := benchServer(b)
	req := &healthpb.HealthCheckRequest{}
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Health.Check(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkStepAsk(b *testing.B) {
	s, req := benchServer(b)
	b.SetParallelism(16)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Env.Step(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkStepBatch256 reports ns/op per batch and episodes/s.
func BenchmarkStepBatch256(b *testing.B) {
	s, req := benchServer(b)
	batch := &pb.StepBatchRequest{Steps: make([]*pb.StepRequest, 256)}
	for i := range batch.Steps {
		batch.Steps[i] = req
	}
	b.SetParallelism(2)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Env.StepBatch(context.Background(), batch); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)*256/b.Elapsed().Seconds(), "episodes/s")
}

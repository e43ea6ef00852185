package server_test

import (
	"context"
	"sync"
	"testing"

	"avtgym/app"
	"avtgym/client"
	"avtgym/internal/fakellm"
	"avtgym/internal/testutil"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// The LLM-oracle benchmarks compare the oracle path with the raw endpoint
// (issue 4): BenchmarkLLMOracleStepBatch256 is one StepBatch of 256
// LLM-oracle asks (two model calls each, the response cache off), and
// BenchmarkLLMDirect512 is 512 chat calls made by the llm client alone, at
// the same concurrency limit, against the same instant fake endpoint. Both
// report the most calls the endpoint saw in flight, which must equal the
// limit.
const benchLLMConcurrency = 16

// oraclePrompts records the two prompts (stage 1 and stage 2) that one
// LLM-oracle ask sends, so that the direct benchmark sends the same bytes.
func oraclePrompts(b *testing.B) [][]llm.Message {
	var (
		mu      sync.Mutex
		prompts [][]llm.Message
	)
	fake := fakellm.New(fakellm.Options{Hook: func(system, user string) (int, string, bool) {
		mu.Lock()
		prompts = append(prompts, []llm.Message{{Role: "system", Content: system}, {Role: "user", Content: user}})
		mu.Unlock()
		return 0, "", false
	}})
	defer fake.Close()
	s := testutil.StartServer(b, app.Config{NoLLMCache: true, OracleLLM: llm.Config{BaseURL: fake.URL, Model: "fake"}})
	defer s.Stop(b)
	ctx := context.Background()
	rr, err := s.Client.Env.Reset(ctx, &pb.ResetRequest{TaskId: "shop-001", Options: &pb.EpisodeOptions{Oracle: pb.OracleType_ORACLE_TYPE_LLM}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Client.Env.Step(ctx, benchAsk(rr.Episodes[0].Token)); err != nil {
		b.Fatal(err)
	}
	if len(prompts) != 2 {
		b.Fatalf("one ask sent %d prompts, want 2", len(prompts))
	}
	return prompts
}

func benchAsk(token []byte) *pb.StepRequest {
	return &pb.StepRequest{Token: token, Action: &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: "Could you clarify what exactly you mean by top 5 customers?"}}}}
}

func BenchmarkLLMDirect512(b *testing.B) {
	prompts := oraclePrompts(b)
	fake := fakellm.New(fakellm.Options{})
	defer fake.Close()
	c, err := llm.New(llm.Config{BaseURL: fake.URL, Model: "fake", Concurrency: benchLLMConcurrency}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		for i := range 512 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.Chat(ctx, llm.Request{Purpose: "bench", Messages: prompts[i%2], JSON: i%2 == 0}); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	b.ReportMetric(float64(fake.MaxInFlight()), "max_in_flight")
}

func BenchmarkLLMOracleStepBatch256(b *testing.B) {
	fake := fakellm.New(fakellm.Options{})
	defer fake.Close()
	s := testutil.StartServer(b, app.Config{
		NoLLMCache: true,
		OracleLLM:  llm.Config{BaseURL: fake.URL, Model: "fake", Concurrency: benchLLMConcurrency},
	})
	c, err := client.Dial(s.Addr, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	rr, err := c.Env.Reset(ctx, &pb.ResetRequest{TaskId: "shop-001", Options: &pb.EpisodeOptions{Oracle: pb.OracleType_ORACLE_TYPE_LLM}})
	if err != nil {
		b.Fatal(err)
	}
	step := benchAsk(rr.Episodes[0].Token)
	batch := &pb.StepBatchRequest{Steps: make([]*pb.StepRequest, 256)}
	for i := range batch.Steps {
		batch.Steps[i] = step
	}
	fake.ResetCounters()
	b.ResetTimer()
	for b.Loop() {
		resp, err := c.Env.StepBatch(ctx, batch)
		if err != nil {
			b.Fatal(err)
		}
		if r := resp.Results[0].GetResponse(); r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_RUNNING {
			b.Fatalf("step failed: %v", resp.Results[0])
		}
	}
	b.StopTimer()
	if calls, want := fake.Calls(), int64(b.N)*512; calls != want {
		b.Fatalf("the endpoint saw %d calls, want %d (two per ask, no cache)", calls, want)
	}
	b.ReportMetric(float64(fake.MaxInFlight()), "max_in_flight")
}

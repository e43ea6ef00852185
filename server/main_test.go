package server_test

import (
	"context"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/grpc/reflection/grpc_reflection_v1"

	"avtgym/app"
	"avtgym/client"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

func TestMain(m *testing.M) { os.Exit(testutil.LeakCheck(m)) }

// TestReflectionListsServices is what `grpcurl -plaintext ADDR list` does.
func TestReflectionListsServices(t *testing.T) {
	s, _ := startTiny(t)
	stream, err := grpc_reflection_v1.NewServerReflectionClient(s.Client.Conn()).ServerReflectionInfo(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&grpc_reflection_v1.ServerReflectionRequest{MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	stream.CloseSend()
	var names []string
	for _, svc := range resp.GetListServicesResponse().GetService() {
		names = append(names, svc.GetName())
	}
	sort.Strings(names)
	want := map[string]bool{"avtgym.v1.EnvService": true, "avtgym.v1.OracleService": true, "grpc.health.v1.Health": true, "grpc.reflection.v1.ServerReflection": true}
	for _, n := range names {
		delete(want, n)
	}
	if len(want) > 0 {
		t.Fatalf("reflection lists %v; missing %v", names, want)
	}
	// The file descriptors resolve too (grpcurl describe).
	stream2, err := grpc_reflection_v1.NewServerReflectionClient(s.Client.Conn()).ServerReflectionInfo(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream2.Send(&grpc_reflection_v1.ServerReflectionRequest{MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "avtgym.v1.EnvService"}}); err != nil {
		t.Fatal(err)
	}
	r2, err := stream2.Recv()
	if err != nil || len(r2.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
		t.Fatalf("describe EnvService: %v %v", r2, err)
	}
	stream2.CloseSend()
}

func TestMetrics(t *testing.T) {
	s, c := startTiny(t)
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big"})
	r := step(t, c, ep.Token, ask(fullQ("big sales")), false)
	step(t, c, r.Token, stop(), false)
	_, _ = c.Step(ctxT(t), &pb.StepRequest{Token: []byte("garbage-garbage-garbage-garbage-garbage"), Action: stop()})
	rec := httptest.NewRecorder()
	s.App.Metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`avtgym_steps_total{action="ask"} 1`,
		`avtgym_steps_total{action="stop"} 1`,
		`avtgym_episodes_started_total 1`,
		`avtgym_episodes_ended_total{status="EPISODE_STATUS_TERMINATED"} 1`,
		`avtgym_rpcs_total{code="InvalidArgument",method="/avtgym.v1.EnvService/Step"} 1`,
		`avtgym_rpcs_total{code="OK",method="/avtgym.v1.EnvService/Step"} 2`,
		`avtgym_episode_reward_count{type="REWARD_TYPE_QUESTION_F1"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestGracefulShutdown checks that a call in flight when the server is told
// to stop still gets its answer, and that the server then stops.
func TestGracefulShutdown(t *testing.T) {
	s, _ := startTiny(t, func(cfg *app.Config) {
		cfg.Limits = sqlexec.Limits{Timeout: time.Second, MaxRows: 100, MaxBytes: 1 << 20}
	})
	// A client of its own: stopping the test server closes the shared one.
	own, err := client.Dial(s.Addr, client.Options{Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	c := own.Env
	ep := reset(t, c, &pb.ResetRequest{TaskId: "count", Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
	type result struct {
		resp *pb.StepResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		// A runaway query: it holds the call for the 1s statement deadline.
		resp, err := c.Step(context.Background(), &pb.StepRequest{Token: ep.Token, Action: submit("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c")})
		done <- result{resp, err}
	}()
	time.Sleep(300 * time.Millisecond) // let the call reach the server
	s.Stop(t)
	r := <-done
	if r.err != nil {
		t.Fatalf("the call in flight was cut: %v", r.err)
	}
	if !r.resp.Done || r.resp.Reward.GetValue() != 0 {
		t.Fatalf("the call in flight answered %v", r.resp)
	}
	if _, err := c.Step(ctxT(t), &pb.StepRequest{Token: ep.Token, Action: stop()}); status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		t.Fatalf("after shutdown a call got %v, want UNAVAILABLE", err)
	}
}

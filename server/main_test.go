package server_test

import (
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/reflection/grpc_reflection_v1"

	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
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
	want := map[string]bool{"avtgym.v1.EnvService": true, "grpc.health.v1.Health": true, "grpc.reflection.v1.ServerReflection": true}
	for _, n := range names {
		delete(want, n)
	}
	if len(want) > 0 {
		t.Fatalf("reflection lists %v; missing %v", names, want)
	}
	// The file descriptors resolve too (grpcurl describe).
	stream2, _ := grpc_reflection_v1.NewServerReflectionClient(s.Client.Conn()).ServerReflectionInfo(ctxT(t))
	stream2.Send(&grpc_reflection_v1.ServerReflectionRequest{MessageRequest: &grpc_reflection_v1.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "avtgym.v1.EnvService"}})
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

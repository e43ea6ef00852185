package server_test

import (
	"os"
	"sort"
	"testing"

	"google.golang.org/grpc/reflection/grpc_reflection_v1"

	"avtgym/internal/testutil"
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

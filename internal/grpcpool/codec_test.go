package grpcpool

import (
	"strings"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	pb "avtgym/proto/avtgym/v1"
)

// TestCodecMatchesProto checks that the codec writes what proto.Marshal
// writes and reads it back, on a vtprotobuf message (small and pooled
// sizes) and on a plain one.
func TestCodecMatchesProto(t *testing.T) {
	var c Codec
	big := &pb.StepBatchRequest{}
	for i := range 300 {
		big.Steps = append(big.Steps, &pb.StepRequest{
			Token:  []byte(strings.Repeat("t", i)),
			Action: &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: "Could you clarify what you mean by région?"}}},
		})
	}
	small := &pb.StepResponse{Done: true, Reward: &pb.Reward{Value: 0.5, Components: map[string]float64{"recall": 0.5}}}
	for _, m := range []proto.Message{big, small, &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}} {
		data, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := data.Materialize()
		want, _ := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		// Maps may be ordered differently; compare by decoding with proto.
		back := m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(got, back); err != nil || !proto.Equal(back, m) {
			t.Fatalf("%T: codec output does not decode to the message (%v)", m, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%T: codec wrote %d bytes, proto %d", m, len(got), len(want))
		}
		again := m.ProtoReflect().New().Interface()
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(want)}, again); err != nil || !proto.Equal(again, m) {
			t.Fatalf("%T: codec cannot read proto's encoding (%v)", m, err)
		}
		data.Free()
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("Marshal accepted a string")
	}
}

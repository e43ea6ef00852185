package grpcpool

import (
	"strings"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "avtgym/proto/avtgym/v1"
)

func slice(b []byte) mem.BufferSlice { return mem.BufferSlice{mem.SliceBuffer(b)} }

// TestServerCodecRecordsFailures: a request that does not decode, or is
// over the limit, is not a codec error; the failure is recorded on the
// message, reported once by Failure, and the message is left empty.
func TestServerCodecRecordsFailures(t *testing.T) {
	c := NewServerCodec(1000)
	good, _ := proto.Marshal(&pb.StepRequest{Token: []byte("tok"), IncludePrivileged: true})

	m := &pb.StepRequest{}
	if err := c.Unmarshal(slice(good), m); err != nil || string(m.Token) != "tok" || !m.IncludePrivileged {
		t.Fatalf("a good request: %v, %v", err, m)
	}
	if f := c.Failure(m); f != nil {
		t.Fatalf("a good request has a failure: %v", f)
	}

	garbage := [][]byte{
		{0x0a, 0xff},             // field 1, truncated length
		{0xff, 0xff, 0xff, 0xff}, // a tag that never ends
		{0x12, 0x02, 0x0a, 0x05}, // action, whose ask is cut short
		{0x0b},                   // a group start, never closed
	}
	for _, g := range garbage {
		m := &pb.StepRequest{}
		if err := c.Unmarshal(slice(g), m); err != nil {
			t.Fatalf("%x: the codec returned %v; want the failure recorded instead", g, err)
		}
		f := c.Failure(m)
		if f == nil || f.TooLarge || f.Message != "avtgym.v1.StepRequest" || f.Err == "" {
			t.Fatalf("%x: failure %+v", g, f)
		}
		if !strings.Contains(f.Error(), "does not decode as a avtgym.v1.StepRequest") {
			t.Errorf("message %q", f.Error())
		}
		if c.Failure(m) != nil {
			t.Errorf("%x: the failure is reported twice", g)
		}
		if len(m.Token) != 0 || m.Action != nil || len(m.ProtoReflect().GetUnknown()) != 0 {
			t.Errorf("%x: the message is not empty after the report: %v", g, m)
		}
	}

	big := make([]byte, 1001)
	m = &pb.StepRequest{}
	if err := c.Unmarshal(slice(big), m); err != nil {
		t.Fatal(err)
	}
	f := c.Failure(m)
	if f == nil || !f.TooLarge || f.Size != 1001 || f.Limit != 1000 || !strings.Contains(f.Error(), "1001 bytes, more than this server's limit of 1000") {
		t.Fatalf("an oversized request: %+v", f)
	}

	// A non-vtprotobuf message (the standard services) works the same.
	h := &healthpb.HealthCheckRequest{}
	if err := c.Unmarshal(slice([]byte{0x0a, 0x02, 0xff, 0xfe}), h); err != nil { // service name: invalid UTF-8
		t.Fatal(err)
	}
	if f := c.Failure(h); f == nil || f.Message != "grpc.health.v1.HealthCheckRequest" {
		t.Fatalf("health request with invalid UTF-8: %+v", f)
	}
}

// TestServerCodecIgnoresForgedRecords: a client cannot make a request fail
// by sending the record's field itself, nor make a failed one pass; and
// ordinary unknown fields are kept.
func TestServerCodecIgnoresForgedRecords(t *testing.T) {
	c := NewServerCodec(1 << 20)
	other := NewServerCodec(1 << 20)
	m := &pb.StepRequest{}
	if err := other.Unmarshal(slice([]byte{0x0a, 0xff}), m); err != nil {
		t.Fatal(err)
	}
	forged, _ := proto.Marshal(m) // another codec's record, sent as a request
	got := &pb.StepRequest{}
	if err := c.Unmarshal(slice(forged), got); err != nil {
		t.Fatal(err)
	}
	if f := c.Failure(got); f != nil {
		t.Fatalf("a forged record was taken for a failure: %+v", f)
	}
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7)
	got = &pb.StepRequest{}
	if err := c.Unmarshal(slice(unknown), got); err != nil || c.Failure(got) != nil || len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Fatalf("an unknown field: %v, %v", err, got)
	}
	// Not a protobuf message: an error, as from Codec.
	var s string
	if err := c.Unmarshal(slice([]byte{1}), &s); err == nil {
		t.Error("decoding into a string succeeded")
	}
}

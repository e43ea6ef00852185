package grpcpool

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// Codec is grpc's protobuf codec (encoding/proto) drawing its buffers from
// Shared, and using the generated vtprotobuf methods of messages that have
// them (avtgym's own messages): reflection-based encoding and decoding were
// the largest cost of a batched episode. Other messages (health,
// reflection) go through proto.Marshal as usual. The wire format is the
// same either way. Install it with grpc.ForceServerCodecV2 and
// grpc.ForceCodecV2.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// vtMessage is what protoc-gen-go-vtproto generates.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT(dAtA []byte) (int, error)
	UnmarshalVT(dAtA []byte) error
}

// Name is "proto": the codec speaks the standard wire format.
func (Codec) Name() string { return "proto" }

// Marshal encodes v into a pooled buffer when it is large enough to pool.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
	if vt, ok := v.(vtMessage); ok {
		size := vt.SizeVT()
		if mem.IsBelowBufferPoolingThreshold(size) {
			b := make([]byte, size)
			if _, err := vt.MarshalToSizedBufferVT(b); err != nil {
				return nil, err
			}
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
		bp := Shared.Get(size)
		if _, err := vt.MarshalToSizedBufferVT(*bp); err != nil {
			Shared.Put(bp)
			return nil, err
		}
		return mem.BufferSlice{mem.NewBuffer(bp, Shared)}, nil
	}
	m := messageOf(v)
	if m == nil {
		return nil, fmt.Errorf("proto: cannot marshal %T, want a proto.Message", v)
	}
	size := proto.Size(m)
	// UseCachedSize is safe right after Size on a message nobody mutates.
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	bp := Shared.Get(size)
	if _, err := opts.MarshalAppend((*bp)[:0], m); err != nil {
		Shared.Put(bp)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(bp, Shared)}, nil
}

// Unmarshal decodes data into v, which grpc always passes fresh (empty).
// Decoded strings and bytes are copies, so the buffer is recycled.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	buf := data.MaterializeToBuffer(Shared)
	defer buf.Free()
	if vt, ok := v.(vtMessage); ok {
		return vt.UnmarshalVT(buf.ReadOnlyData())
	}
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("proto: cannot unmarshal into %T, want a proto.Message", v)
	}
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

func messageOf(v any) proto.Message {
	switch v := v.(type) {
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(v)
	case protoadapt.MessageV2:
		return v
	}
	return nil
}

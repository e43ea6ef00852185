package grpcpool

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// Codec is grpc's protobuf codec (encoding/proto) drawing its buffers from
// Shared. Install it with grpc.ForceServerCodecV2 and grpc.ForceCodecV2.
type Codec struct{}

var _ encoding.CodecV2 = Codec{}

// Name is "proto": the codec speaks the standard wire format.
func (Codec) Name() string { return "proto" }

// Marshal encodes v into a pooled buffer when it is large enough to pool.
func (Codec) Marshal(v any) (mem.BufferSlice, error) {
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

// Unmarshal decodes data into v.
func (Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return fmt.Errorf("proto: cannot unmarshal into %T, want a proto.Message", v)
	}
	buf := data.MaterializeToBuffer(Shared)
	defer buf.Free()
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

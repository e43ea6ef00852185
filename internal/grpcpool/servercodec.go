package grpcpool

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// ServerCodec is Codec for a server, with one difference: a request that
// does not decode, or that is larger than the server's limit, is not a
// codec error. grpc-go turns codec errors into a bare INTERNAL status (and
// oversized messages into a bare RESOURCE_EXHAUSTED) before any
// interceptor runs, so the client would get no google.rpc.ErrorInfo.
// Instead the codec empties the message and records the failure on the
// message itself, as an unknown field that carries a random per-codec key,
// and returns nil; the server's interceptors call Failure on every request
// they see and answer with a proper status. Nothing is kept outside the
// message, so nothing can leak, whatever grpc does with the message
// afterwards (a stream that is never read again, a unary call that fails
// on a second message).
//
// Install it with grpc.ForceServerCodecV2, with grpc.MaxRecvMsgSize set
// above MaxBytes (grpc's own check runs first, while the message is read:
// messages above grpc's limit still get grpc's bare status). A client
// keeps using Codec, whose decode errors are errors.
type ServerCodec struct {
	Codec
	maxBytes int
	key      [16]byte
}

var _ encoding.CodecV2 = (*ServerCodec)(nil)

// NewServerCodec returns a server codec that refuses requests larger than
// maxBytes.
func NewServerCodec(maxBytes int) *ServerCodec {
	c := &ServerCodec{maxBytes: maxBytes}
	if _, err := rand.Read(c.key[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return c
}

// MaxBytes is the largest request the codec decodes.
func (c *ServerCodec) MaxBytes() int { return c.maxBytes }

// DecodeFailure is a request that the codec did not decode.
type DecodeFailure struct {
	// Message is the full name of the request's type.
	Message string
	// TooLarge is set when the request was Size bytes, more than Limit;
	// otherwise the request is malformed, and Err says how.
	TooLarge    bool
	Size, Limit int
	Err         string
}

func (f *DecodeFailure) Error() string {
	if f.TooLarge {
		return fmt.Sprintf("the %s is %d bytes, more than this server's limit of %d bytes", f.Message, f.Size, f.Limit)
	}
	return fmt.Sprintf("the request does not decode as a %s: %s", f.Message, f.Err)
}

// markField is the field number of the failure record: the largest there
// is, which no avtgym message uses.
const markField = protowire.MaxValidNumber

// Unmarshal decodes data into v as Codec does; a failure is recorded on v
// (see ServerCodec) and is not an error.
func (c *ServerCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m := messageOf(v)
	if m == nil {
		return c.Codec.Unmarshal(data, v) // not a protobuf message: an error, as before
	}
	if n := data.Len(); n > c.maxBytes {
		c.mark(m, true, n, "")
		return nil
	}
	var err error
	if u, ok := v.(vtUnsafe); ok {
		// A request's strings and bytes alias one buffer of its own instead
		// of being copied field by field (a StepBatch of 256 asks saved two
		// allocations per item): the buffer is a fresh copy that nothing
		// else holds or reuses, so the aliases stay valid as long as anyone
		// keeps them.
		err = u.UnmarshalVTUnsafe(data.Materialize())
	} else {
		err = c.Codec.Unmarshal(data, v)
	}
	if err != nil {
		c.mark(m, false, data.Len(), err.Error())
	}
	return nil
}

// vtUnsafe is what protoc-gen-go-vtproto's unmarshal_unsafe feature
// generates: decoding whose strings and bytes alias the input.
type vtUnsafe interface {
	UnmarshalVTUnsafe(dAtA []byte) error
}

func (c *ServerCodec) mark(m proto.Message, tooLarge bool, size int, msg string) {
	proto.Reset(m)
	rec := append([]byte(nil), c.key[:]...)
	flag := byte(0)
	if tooLarge {
		flag = 1
	}
	rec = append(rec, flag)
	rec = binary.AppendUvarint(rec, uint64(size))
	rec = append(rec, msg...)
	u := protowire.AppendTag(nil, markField, protowire.BytesType)
	m.ProtoReflect().SetUnknown(protowire.AppendBytes(u, rec))
}

// Failure returns the failure recorded on a request by Unmarshal, and
// removes the record; nil when the request decoded.
func (c *ServerCodec) Failure(v any) *DecodeFailure {
	m := messageOf(v)
	if m == nil {
		return nil
	}
	r := m.ProtoReflect()
	u := r.GetUnknown()
	if len(u) == 0 {
		return nil // the common case: one length check
	}
	num, typ, n := protowire.ConsumeTag(u)
	if n < 0 || num != markField || typ != protowire.BytesType {
		return nil
	}
	rec, m2 := protowire.ConsumeBytes(u[n:])
	if m2 < 0 || n+m2 != len(u) || len(rec) < len(c.key)+2 || string(rec[:len(c.key)]) != string(c.key[:]) {
		return nil // a client's own unknown field, not a record
	}
	rec = rec[len(c.key):]
	f := &DecodeFailure{Message: string(r.Descriptor().FullName()), TooLarge: rec[0] == 1, Limit: c.maxBytes}
	size, k := binary.Uvarint(rec[1:])
	if k <= 0 {
		return nil
	}
	f.Size, f.Err = int(size), string(rec[1+k:])
	r.SetUnknown(nil)
	return f
}

package server

import (
	"context"
	"encoding/base64"
	"errors"
	"maps"
	"strconv"
	"strings"
	"time"
	"unicode"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"

	"avtgym/env"
	"avtgym/internal/grpcpool"
	pb "avtgym/proto/avtgym/v1"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of avtgym's errors.
const ErrorDomain = "avtgym"

var codeOf = map[env.Code]codes.Code{
	env.InvalidArgument:    codes.InvalidArgument,
	env.FailedPrecondition: codes.FailedPrecondition,
	env.NotFound:           codes.NotFound,
	env.Internal:           codes.Internal,
	env.Unavailable:        codes.Unavailable,
	env.ResourceExhausted:  codes.ResourceExhausted,
}

// MaxErrorMessageBytes bounds a status message (cut with a marker).
// Messages may quote the request (a task id of any length), and a status
// travels in HTTP/2 trailers twice (grpc-message, and the details' copy),
// whose size clients cap (gRPC's C core, under the Python client, at a few
// KiB of metadata by default); past the cap the client gets a transport
// error instead of the status.
const MaxErrorMessageBytes = 1 << 10

// decodeError is the error of a request the codec did not decode.
func decodeError(f *grpcpool.DecodeFailure) error {
	if f.TooLarge {
		return &env.Error{Code: env.ResourceExhausted, Reason: env.ReasonRequestTooLarge, Msg: f.Error() + "; split it",
			Meta: map[string]string{"size_bytes": strconv.Itoa(f.Size), "limit_bytes": strconv.Itoa(f.Limit)}}
	}
	return &env.Error{Code: env.InvalidArgument, Reason: env.ReasonRequestMalformed, Msg: f.Error()}
}

// genericReason is the ErrorInfo reason of a status that came without one
// (the standard services', health's and reflection's): its code in upper
// snake case (NOT_FOUND). These are the only reasons that are not
// ErrorReason values (error_reason.proto says so).
func genericReason(c codes.Code) string {
	name := c.String()
	var b strings.Builder
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// toStatus is the one place where errors become gRPC statuses. Every status
// carries an ErrorInfo with a stable reason, the name of an ErrorReason
// value (or, for another service's status, genericReason); bad input also
// carries a BadRequest naming the field.
func toStatus(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		// Already a status (from a nested call, or another service's).
		for _, d := range st.Details() {
			if _, ok := d.(*errdetails.ErrorInfo); ok {
				return st
			}
		}
		// Add one, keeping the details it has.
		p := st.Proto()
		p.Message = env.BoundText(p.Message, MaxErrorMessageBytes)
		if info, err := anypb.New(&errdetails.ErrorInfo{Reason: genericReason(st.Code()), Domain: ErrorDomain}); err == nil {
			p.Details = append(p.Details, info)
		}
		return status.FromProto(p)
	}
	var (
		code   codes.Code
		reason pb.ErrorReason
		field  string
		msg    = env.BoundText(err.Error(), MaxErrorMessageBytes)
	)
	var ee *env.Error
	switch {
	case errors.As(err, &ee):
		code, reason, field = codeOf[ee.Code], ee.Reason, ee.Field
		// Server bugs: an error without a code, or without a reason.
		if code == codes.OK {
			code = codes.Internal
		}
		if reason == pb.ErrorReason_ERROR_REASON_UNSPECIFIED {
			code, reason = codes.Internal, env.ReasonInternal
		}
	case errors.Is(err, context.DeadlineExceeded):
		code, reason = codes.DeadlineExceeded, env.ReasonDeadlineExceeded
	case errors.Is(err, context.Canceled):
		code, reason = codes.Canceled, env.ReasonCanceled
	default:
		code, reason = codes.Internal, env.ReasonInternal
	}
	var meta map[string]string
	retry := time.Duration(-1)
	if ee != nil {
		meta = ee.Meta
		if ee.Retryable {
			retry = ee.RetryDelay
		}
	}
	return newStatus(code, reason, field, msg, meta, retry)
}

// newStatus builds a status with its details: an ErrorInfo (with the
// field, if any, in its metadata), a BadRequest for INVALID_ARGUMENT with
// a field, and a RetryInfo when retry is not negative.
func newStatus(code codes.Code, reason pb.ErrorReason, field, msg string, meta map[string]string, retry time.Duration) *status.Status {
	st := status.New(code, msg)
	info := &errdetails.ErrorInfo{Reason: reason.String(), Domain: ErrorDomain}
	if field != "" || len(meta) > 0 {
		info.Metadata = map[string]string{}
		maps.Copy(info.Metadata, meta)
		if field != "" {
			info.Metadata["field"] = field
		}
	}
	details := []protoadapt.MessageV1{info}
	if field != "" && code == codes.InvalidArgument {
		details = append(details, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: msg, Reason: reason.String()}}})
	}
	if retry >= 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(retry)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st
}

// statusError is newStatus as an error, for the refusals of the server's
// front door (authentication, authorisation, admission, drain), whose
// codes have no env.Code. A positive retry attaches a RetryInfo.
func statusError(code codes.Code, reason pb.ErrorReason, field, msg string, meta map[string]string, retry time.Duration) error {
	if retry <= 0 {
		retry = -1
	}
	return newStatus(code, reason, field, env.BoundText(msg, MaxErrorMessageBytes), meta, retry).Err()
}

// itemStatus is the status of one batch item: nil for OK (its code reads
// as 0 = OK; sparing a message per item matters in large batches), or what
// the unary call would have returned.
func itemStatus(err error) *spb.Status {
	if err == nil {
		return nil
	}
	return toStatus(err).Proto()
}

func encodePageToken(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o" + strconv.Itoa(offset)))
}

func decodePageToken(tok string) (int, error) {
	if tok == "" {
		return 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err == nil && len(b) > 1 && b[0] == 'o' {
		if n, err := strconv.Atoi(string(b[1:])); err == nil && n >= 0 {
			return n, nil
		}
	}
	return 0, &env.Error{Code: env.InvalidArgument, Reason: env.ReasonInvalidPage, Field: "page_token", Msg: "is not a page token this server issued"}
}

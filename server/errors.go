package server

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"avtgym/env"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of avtgym's errors.
const ErrorDomain = "avtgym"

var codeOf = map[env.Code]codes.Code{
	env.InvalidArgument:    codes.InvalidArgument,
	env.FailedPrecondition: codes.FailedPrecondition,
	env.NotFound:           codes.NotFound,
	env.Internal:           codes.Internal,
	env.Unavailable:        codes.Unavailable,
}

// toStatus is the one place where errors become gRPC statuses. Every status
// carries an ErrorInfo with a stable reason; bad input also carries a
// BadRequest naming the field.
func toStatus(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st // already a status (from a nested call)
	}
	var (
		code   codes.Code
		reason string
		field  string
		msg    = err.Error()
	)
	var ee *env.Error
	switch {
	case errors.As(err, &ee):
		code, reason, field = codeOf[ee.Code], ee.Reason, ee.Field
		if code == codes.OK {
			code = codes.Internal
		}
	case errors.Is(err, context.DeadlineExceeded):
		code, reason = codes.DeadlineExceeded, "DEADLINE_EXCEEDED"
	case errors.Is(err, context.Canceled):
		code, reason = codes.Canceled, "CANCELED"
	default:
		code, reason = codes.Internal, env.ReasonInternal
	}
	st := status.New(code, msg)
	info := &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}
	if field != "" {
		info.Metadata = map[string]string{"field": field}
	}
	details := []protoadapt.MessageV1{info}
	if field != "" && code == codes.InvalidArgument {
		details = append(details, &errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: msg, Reason: reason}}})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st
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

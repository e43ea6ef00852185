package env

import (
	"fmt"
	"time"

	pb "avtgym/proto/avtgym/v1"
)

// Code classifies an episode error; the server maps each code to one gRPC
// status code.
type Code int

// The error codes.
const (
	// InvalidArgument: the request itself is wrong (bad token, bad action,
	// bad option). Retrying the same request cannot succeed.
	InvalidArgument Code = iota + 1
	// FailedPrecondition: the request is well formed but the episode is not
	// in a state that allows it (wrong phase, episode done, expired token,
	// record changed since the token was issued).
	FailedPrecondition
	// NotFound: a named corpus or task does not exist.
	NotFound
	// Internal: the environment failed.
	Internal
	// Unavailable: a dependency (an LLM endpoint) failed; retrying may
	// succeed.
	Unavailable
	// ResourceExhausted: a limit of the server was reached: a request or
	// a response too large to send (split it), or a component saturated
	// (retry later; such errors are Retryable).
	ResourceExhausted
)

// The stable reasons, sent as google.rpc.ErrorInfo.reason (the value's
// name, such as "TOKEN_TAMPERED"). They are the values of the proto enum
// avtgym.v1.ErrorReason (proto/avtgym/v1/error_reason.proto), which
// documents each one's gRPC code and when it is sent: a new reason is added
// there first. Clients may switch on them; they never change meaning.
const (
	ReasonTokenMalformed   = pb.ErrorReason_TOKEN_MALFORMED
	ReasonTokenTampered    = pb.ErrorReason_TOKEN_TAMPERED
	ReasonTokenForeign     = pb.ErrorReason_TOKEN_FOREIGN
	ReasonTokenExpired     = pb.ErrorReason_TOKEN_EXPIRED
	ReasonRecordChanged    = pb.ErrorReason_RECORD_CHANGED
	ReasonUnknownCorpus    = pb.ErrorReason_UNKNOWN_CORPUS
	ReasonUnknownTask      = pb.ErrorReason_UNKNOWN_TASK
	ReasonNoTasks          = pb.ErrorReason_NO_TASKS
	ReasonInvalidAction    = pb.ErrorReason_INVALID_ACTION
	ReasonInvalidOption    = pb.ErrorReason_INVALID_OPTION
	ReasonWrongPhase       = pb.ErrorReason_WRONG_PHASE
	ReasonEpisodeDone      = pb.ErrorReason_EPISODE_DONE
	ReasonInvalidPage      = pb.ErrorReason_INVALID_PAGE_TOKEN
	ReasonRequestMalformed = pb.ErrorReason_REQUEST_MALFORMED
	ReasonRequestTooLarge  = pb.ErrorReason_REQUEST_TOO_LARGE
	ReasonResponseTooLarge = pb.ErrorReason_RESPONSE_TOO_LARGE
	ReasonBatchTooLarge    = pb.ErrorReason_BATCH_TOO_LARGE
	ReasonVerifierBusy     = pb.ErrorReason_VERIFIER_BUSY
	ReasonOracleFailed     = pb.ErrorReason_ORACLE_FAILED
	ReasonInternal         = pb.ErrorReason_INTERNAL
	// ReasonDeadlineExceeded and ReasonCanceled are the reasons of a call
	// that ended with its own deadline or cancellation (context errors,
	// not *Error values).
	ReasonDeadlineExceeded = pb.ErrorReason_DEADLINE_EXCEEDED
	ReasonCanceled         = pb.ErrorReason_CANCELED
)

// Error is an episode error: a code, a stable reason, the request field at
// fault (if any) and an explanation for people.
type Error struct {
	Code Code
	// Reason is sent as ErrorInfo.reason, by name; an unset reason is a
	// server bug, sent as INTERNAL.
	Reason pb.ErrorReason
	Field  string
	Msg    string
	// Meta is added to the ErrorInfo's metadata (sizes and limits, for
	// clients that split requests themselves).
	Meta map[string]string
	// Retryable marks an error that a retry of the same request (for a
	// batch item: in another batch) may not meet, after waiting
	// RetryDelay; the server then attaches a google.rpc.RetryInfo.
	Retryable  bool
	RetryDelay time.Duration
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s", e.Field, e.Msg)
	}
	return e.Msg
}

func errorf(code Code, reason pb.ErrorReason, field, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Field: field, Msg: fmt.Sprintf(format, args...)}
}

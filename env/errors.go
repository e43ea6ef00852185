package env

import (
	"fmt"
	"time"
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

// Stable reasons, sent as google.rpc.ErrorInfo.reason. Clients may switch on
// them; they never change meaning.
const (
	ReasonTokenMalformed = "TOKEN_MALFORMED"
	ReasonTokenTampered  = "TOKEN_TAMPERED"
	ReasonTokenForeign   = "TOKEN_FOREIGN"
	ReasonTokenExpired   = "TOKEN_EXPIRED"
	ReasonRecordChanged  = "RECORD_CHANGED"
	ReasonUnknownCorpus  = "UNKNOWN_CORPUS"
	ReasonUnknownTask    = "UNKNOWN_TASK"
	ReasonNoTasks        = "NO_TASKS"
	ReasonInvalidAction  = "INVALID_ACTION"
	ReasonInvalidOption  = "INVALID_OPTION"
	ReasonWrongPhase     = "WRONG_PHASE"
	ReasonEpisodeDone    = "EPISODE_DONE"
	ReasonInvalidPage    = "INVALID_PAGE_TOKEN"
	ReasonInternal       = "INTERNAL"
	ReasonOracleFailed   = "ORACLE_FAILED"
	// ReasonRequestMalformed: the request message does not decode.
	ReasonRequestMalformed = "REQUEST_MALFORMED"
	// ReasonRequestTooLarge: the request message is larger than the
	// server accepts.
	ReasonRequestTooLarge = "REQUEST_TOO_LARGE"
	// ReasonResponseTooLarge: the response (or a batch item's result)
	// would be larger than the server sends.
	ReasonResponseTooLarge = "RESPONSE_TOO_LARGE"
	// ReasonBatchTooLarge: a batch holds more items, or asks for more
	// episodes, than one call may.
	ReasonBatchTooLarge = "BATCH_TOO_LARGE"
	// ReasonVerifierBusy: the verifier is saturated; retry later.
	ReasonVerifierBusy = "VERIFIER_BUSY"
)

// Error is an episode error: a code, a stable reason, the request field at
// fault (if any) and an explanation for people.
type Error struct {
	Code   Code
	Reason string
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

func errorf(code Code, reason, field, format string, args ...any) *Error {
	return &Error{Code: code, Reason: reason, Field: field, Msg: fmt.Sprintf(format, args...)}
}

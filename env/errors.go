package env

import "fmt"

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
)

// Error is an episode error: a code, a stable reason, the request field at
// fault (if any) and an explanation for people.
type Error struct {
	Code   Code
	Reason string
	Field  string
	Msg    string
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

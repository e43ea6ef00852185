package llm

import (
	"errors"
	"fmt"
)

// ErrorKind classifies an llm error so that callers can decide what to do
// without matching messages.
type ErrorKind int

// The error kinds.
const (
	// KindUnknown is what KindOf reports for nil and for errors that are not
	// llm errors.
	KindUnknown ErrorKind = iota
	// KindTimeout: every attempt ran past its per-call deadline, or the
	// caller's deadline expired.
	KindTimeout
	// KindRateLimited: the endpoint answered 429 on every attempt.
	KindRateLimited
	// KindServer: the endpoint answered 5xx, or the connection failed, on
	// every attempt. Status is 0 for a transport failure.
	KindServer
	// KindBadRequest: the endpoint rejected the request with a 4xx other
	// than 429 (never retried), or the request itself is invalid.
	KindBadRequest
	// KindContextOverflow: the prompt does not fit the model's context:
	// detected before the call from Config.ContextTokens (Status 0; see
	// OverflowEstimated), or reported by the endpoint (its HTTP status).
	KindContextOverflow
	// KindMalformed: the model's content could not be parsed (ParseJSON):
	// the model's own output, which the prompt — and so a policy's
	// question — can influence. Chat never returns it: an endpoint's answer
	// that is not a chat completion is KindUnreadable.
	KindMalformed
	// KindCanceled: the caller's context was canceled.
	KindCanceled
	// KindCache: the call succeeded but its response could not be written
	// to the cache. Chat returns the response together with this error.
	KindCache
	// KindUnreadable: the endpoint answered, on every attempt, with
	// something that is not a readable chat completion: a body that is
	// not JSON (an HTML error page, a body cut short, one not in UTF-8),
	// a media type that is not JSON, no choices, a choice without a
	// message, a message without content where the API requires one, or
	// a status that is neither a success nor an error (see
	// Client.Chat). It is the endpoint failing, like a 5xx, and retried
	// like one; Status is the last attempt's HTTP status. What the model
	// wrote (a readable completion's content, however unusable) is never
	// KindUnreadable.
	KindUnreadable
	// KindNotCached: the client replays its cache only (Config.Replay)
	// and the cache does not hold the request; the endpoint was not
	// called.
	KindNotCached
)

var kindNames = [...]string{
	KindUnknown:         "unknown",
	KindTimeout:         "timeout",
	KindRateLimited:     "rate_limited",
	KindServer:          "server_error",
	KindBadRequest:      "bad_request",
	KindContextOverflow: "context_overflow",
	KindMalformed:       "malformed",
	KindCanceled:        "canceled",
	KindCache:           "cache_error",
	KindUnreadable:      "unreadable_response",
	KindNotCached:       "not_cached",
}

// String returns the kind's stable snake_case name, also used as the
// outcome label of the call metrics.
func (k ErrorKind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// Error is an llm error: its kind, the HTTP status of the last attempt (0
// when there was none), an explanation for people and the underlying error
// (if any).
type Error struct {
	Kind   ErrorKind
	Status int
	Msg    string
	Err    error
}

// Error formats the error as "llm: kind: msg[: err]".
func (e *Error) Error() string {
	s := "llm: " + e.Kind.String() + ": " + e.Msg
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of the first *Error in err's chain, or
// KindUnknown.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return KindUnknown
}

// OverflowEstimated reports whether err is a KindContextOverflow that the
// client detected from its estimate before calling the endpoint (as
// opposed to one the endpoint reported).
func OverflowEstimated(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Kind == KindContextOverflow && e.Status == 0
}

func errorf(kind ErrorKind, status int, err error, format string, args ...any) *Error {
	return &Error{Kind: kind, Status: status, Msg: fmt.Sprintf(format, args...), Err: err}
}

package server

import (
	"context"
	"errors"
	"testing"
	"time"
)

// endedCtx is a context that has ended with err, with a deadline or none.
type endedCtx struct {
	context.Context
	deadline time.Time
	err      error
}

func (c endedCtx) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }
func (c endedCtx) Err() error                  { return c.err }

// TestEndedError: the error of a call whose context ended before its
// response was sent is what its client got, judged from when the call
// arrived, when its context ended, and its deadline.
func TestEndedError(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		deadline time.Duration // from start; 0: none
		err      error         // the context's
		ended    time.Duration // from start
		want     error
	}{
		{name: "cancelled, no deadline", err: context.Canceled, ended: time.Second, want: context.Canceled},
		{name: "the server's copy of the deadline fired", deadline: time.Second, err: context.DeadlineExceeded, ended: time.Second, want: context.DeadlineExceeded},
		{name: "the client's deadline, just before the server's copy", deadline: time.Second, err: context.Canceled, ended: 999 * time.Millisecond, want: context.DeadlineExceeded},
		{name: "within the last tenth of the budget", deadline: 10 * time.Second, err: context.Canceled, ended: 9 * time.Second, want: context.DeadlineExceeded},
		{name: "cancelled before the last tenth", deadline: 10 * time.Second, err: context.Canceled, ended: 8 * time.Second, want: context.Canceled},
		{name: "cancelled at once, with an hour left", deadline: time.Hour, err: context.Canceled, ended: time.Millisecond, want: context.Canceled},
		{name: "cut after its deadline", deadline: time.Second, err: context.Canceled, ended: 2 * time.Second, want: context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := endedCtx{Context: context.Background(), err: tc.err}
			if tc.deadline > 0 {
				ctx.deadline = start.Add(tc.deadline)
			}
			err := endedError(ctx, start, start.Add(tc.ended))
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if code := toStatus(err).Code().String(); code != map[error]string{context.Canceled: "Canceled", context.DeadlineExceeded: "DeadlineExceeded"}[tc.want] {
				t.Fatalf("status code %s for %v", code, err)
			}
		})
	}
}

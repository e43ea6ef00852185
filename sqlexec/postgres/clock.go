package postgres

import (
	"context"
	"time"
)

// Clock is how a Server waits between the tries of its retry loops and
// tells the time of those waits (Config.Clock): re-cloning a private copy
// that failed (recycle), dropping a database an autovacuum worker holds
// (dropDatabase), cloning a template someone is connected to
// (createClone), waiting for a copy's sessions to end (waitSessionsGone)
// and waiting for room in the connection budget (budget.admit). Bounds
// that wait on something else (a free copy within StatefulOptions.Wait,
// a statement's deadline) and the memory watch's interval use real time
// whatever the Clock.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx ends, when it returns ctx.Err().
	Sleep(ctx context.Context, d time.Duration) error
}

// realClock is the Clock of a Config without one: the time package.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

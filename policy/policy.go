// Package policy holds asking policies that run as clients of an avtgym
// environment: the scripted baselines and probes of PROTOCOL.md §5, a
// replay of a fixed list of questions, and the LLM asker. Each is a
// Player: it plays an episode that the driver started, through the
// driver's one episode loop; Rollout plays one policy over a corpus.
package policy

import (
	"context"
	"errors"

	"avtgym/driver"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// Player is an asking policy.
type Player interface {
	// Name names the policy in summaries and run files.
	Name() string
	// Play plays ep (started, not done) to its end: questions, STOP, and
	// SQL when the episode waits for the client's. An error means the
	// episode could not be played: an *AskerError when the policy itself
	// failed (its model endpoint), else a failed call.
	Play(ctx context.Context, ep *driver.Episode) error
}

// AskerError is a failure of the policy itself (such as the LLM asker's
// model endpoint, after the llm client's own retries): the episode cannot
// be played, and is never a fallback stop.
type AskerError struct{ Err error }

func (e *AskerError) Error() string { return "asker endpoint: " + e.Err.Error() }

func (e *AskerError) Unwrap() error { return e.Err }

// ErrNeedsSQL is returned by a player that stopped asking when the episode
// then waits for SQL it cannot write: use the lookup or llm solver, or the
// question_f1 reward.
var ErrNeedsSQL = errors.New("the episode waits for SQL after STOP, which this policy cannot write: use the lookup or llm solver, or the question_f1 reward")

// Scripted is a scripted policy of PROTOCOL.md §5: it asks the questions of
// probe.Questions for the episode's counted terms (ep.Terms, read from the
// privileged field at reset, or the donor's under Show) and budget, then
// stops.
func Scripted(n probe.Name) Player { return scripted(n) }

type scripted probe.Name

func (s scripted) Name() string { return string(s) }

func (s scripted) Play(ctx context.Context, ep *driver.Episode) error {
	return Ask(ctx, ep, probe.Questions(probe.Name(s), ep.Terms(), ep.Budget()))
}

// Replay is a policy that asks the given questions in order, then stops:
// the trajectory of an external policy, replayed.
func Replay(name string, questions []string) Player { return replay{name, questions} }

type replay struct {
	name string
	qs   []string
}

func (r replay) Name() string { return r.name }

func (r replay) Play(ctx context.Context, ep *driver.Episode) error { return Ask(ctx, ep, r.qs) }

// Ask asks qs in order while the episode takes questions, then stops. The
// episode must then be done: a policy that only asks cannot write SQL.
func Ask(ctx context.Context, ep *driver.Episode, qs []string) error {
	err := ep.Play(ctx, func(ep *driver.Episode) *pb.Action {
		if !ep.Asking() || len(qs) == 0 {
			return nil
		}
		q := qs[0]
		qs = qs[1:]
		return &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: q}}}
	})
	if err != nil {
		return err
	}
	if !ep.Done() {
		return ErrNeedsSQL
	}
	return nil
}

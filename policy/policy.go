// Package policy holds asking policies that run as clients of an avtgym
// environment: the scripted baselines and probes of PROTOCOL.md §5 and the
// seeded Partial asker, a replay of a fixed list of questions, and the LLM
// asker; BIRD-Interact's baselines (full, wrong-reading, explorer) and its
// LLM agent for both modes; TIDE's scripted baselines (an asker, none or
// chain, with a drift-aware or drift-blind solver) and TIDE-Bench's LLM
// agent. Each is a Player: it plays an episode that the driver started,
// through the driver's one episode loop; Rollout plays one policy over a
// corpus.
package policy

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"

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

// Preflighter is a Player that can check, before a run, that what it
// needs (its model endpoint) answers; eval calls it once and stops with its
// error instead of failing every episode.
type Preflighter interface {
	Preflight(ctx context.Context) error
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
// stops. Where the client writes the SQL (ep.NeedsSQL: BIRD_C, or AMBITAB's
// outcome reward with the client solver), full and full_adv submit the
// reference SQL of the privileged channel instead of stopping (and, under
// BIRD_C, the follow-up's once it is released: Solve); none and none_adv,
// which know no SQL, stop (under BIRD_C that ends the sub-task unsolved).
func Scripted(n probe.Name) Player { return scripted(n) }

type scripted probe.Name

func (s scripted) Name() string { return string(s) }

func (s scripted) Play(ctx context.Context, ep *driver.Episode) error {
	qs := probe.Questions(probe.Name(s), ep.Terms(), ep.Budget())
	if (probe.Name(s) == probe.Full || probe.Name(s) == probe.FullAdv) && ep.NeedsSQL() {
		return Solve(ctx, ep, qs, ReferenceSQL)
	}
	return Ask(ctx, ep, qs)
}

// ReferenceSQL is the SQL source of the full policy: the current
// sub-task's reference SQL from the privileged channel (the task's, then
// under BIRD_C the follow-up's, from the step that released it). It is an
// error when the episode was not reset with include_privileged.
func ReferenceSQL(ep *driver.Episode) (string, error) {
	if sql := ep.ReferenceSQL(); sql != "" {
		return sql, nil
	}
	what := "the task's reference SQL"
	if ep.Subtask() >= 2 {
		what = "the follow-up's reference SQL"
	}
	return "", fmt.Errorf("%s is unknown: reset the episode with include_privileged", what)
}

// Solve plays ep to its end for a policy that writes its own SQL: it asks
// qs in order while the episode takes questions (in sub-task 1 only, and
// never where only SQL is accepted: the last BIRD_C turn, a debug retry;
// under BIRD_A only while the coins left after the question still pay for
// phase 1's submission), then submits sql(ep). Under AMBITAB it stops
// before the SQL (which the episode then waits for, when the client is the
// solver); under BIRD_C and BIRD_A it submits in the asking phase, again
// after a failed submission (BIRD_C's debug retry; BIRD_A's next submit,
// while coins last), and for the follow-up once it is released, until the
// episode ends.
func Solve(ctx context.Context, ep *driver.Episode, qs []string, sql func(*driver.Episode) (string, error)) error {
	bird := driver.IsBird(ep.Protocol())
	// A bound on the steps, against a server that would never end the
	// episode: every question, a stop, and two submissions (the debug
	// retry) per sub-task, with room to spare.
	limit := 2*(len(qs)+ep.Budget()) + 16 + int(ep.CoinsLeftMilli()/1000)
	for steps := 0; !ep.Done(); steps++ {
		if steps >= limit {
			return fmt.Errorf("the episode did not end after %d steps (phase %s, sub-task %d)", steps, ep.Phase(), ep.Subtask())
		}
		var err error
		switch {
		case ep.Asking() && len(qs) > 0 && ep.Subtask() <= 1 && affordsQuestion(ep):
			err = ep.Ask(ctx, qs[0])
			qs = qs[1:]
		case ep.Asking() && !bird:
			err = ep.Stop(ctx)
		case !bird && ep.Phase() != pb.Phase_PHASE_SOLVING:
			return fmt.Errorf("the episode neither asks nor waits for SQL (phase %s)", ep.Phase())
		default:
			var q string
			q, err = sql(ep)
			switch {
			case errors.Is(err, errStopNow):
				err = ep.Stop(ctx)
			case err == nil:
				err = ep.SubmitSQL(ctx, q)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// errStopNow, returned by Solve's sql function, makes Solve stop instead
// of submitting (under BIRD-Interact's protocols the stop ends the
// episode, the sub-task unsolved).
var errStopNow = errors.New("stop now")

// affordsQuestion reports whether a question fits the episode's coin
// budget (BIRD_A): the coins left after it must still pay for phase 1's
// submission, so that the follow-up can be released. Always true for a
// budget that is not in coins.
func affordsQuestion(ep *driver.Episode) bool {
	if !ep.Coins() {
		return true
	}
	return ep.CoinsLeftMilli()-ep.CostMilli(driver.ActAsk) >= ep.CostMilli(driver.ActSubmitSQL)
}

// PartialName is the name of the Partial asker.
const PartialName = "partial"

// Partial is a seeded scripted asker of mixed quality, the default asker of
// avtgym eval: it asks one generic question (probe.Generic1), then the full
// policy's question about each counted term with probability 1/2, drawn
// from a generator seeded by the episode's seed and task id (so a rerun
// asks the same), then stops. Unlike the full policy it leaves ambiguities
// unresolved, so that a responder that leaks what was not asked raises
// success above its hybrid's (ΔJ_resp > 0), and its generic question is
// what a matcher that credits anything credits.
func Partial() Player { return partial{} }

type partial struct{}

func (partial) Name() string { return PartialName }

func (partial) Play(ctx context.Context, ep *driver.Episode) error {
	h := fnv.New64a()
	h.Write([]byte(ep.Reset().GetObservation().GetTask().GetTaskId()))
	r := rand.New(rand.NewPCG(ep.Reset().GetSeed(), h.Sum64()))
	qs := []string{probe.Generic1}
	for _, t := range ep.Terms() {
		if r.IntN(2) == 0 {
			qs = append(qs, probe.FullQuestion(t))
		}
	}
	return Ask(ctx, ep, qs)
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
// Under BIRD_C and BIRD_A, where every sub-task needs the client's SQL, it stops even
// where only SQL is accepted: the sub-task ends unsolved, and the episode
// with it (an asker that writes no SQL scores 0 there).
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
	if !ep.Done() && driver.IsBird(ep.Protocol()) {
		if err := ep.Stop(ctx); err != nil {
			return err
		}
	}
	if !ep.Done() {
		return ErrNeedsSQL
	}
	return nil
}

package env

import (
	"context"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
)

// BIRD_C (PROTOCOL.md §8) is BIRD-Interact's c-Interact, as its harness
// plays it, on the two sub-tasks of bird.go:
//
//   - At most T = m + patience turns (m counted ambiguities: critical and
//     knowledge; at least one turn). Each question, SQL submission and
//     unparsed output is a turn. On the last turn only SQL is accepted
//     (the harness' "It is the final turn"): anything else ends the
//     sub-task unsolved. The follow-up's release adds one turn, for its
//     SQL (the harness' follow-up turn).
//   - After a failed submission, one debug retry per sub-task: it must be
//     SQL, it uses no turn, and its message carries the database's error
//     or asks "Are you sure about your SQL? You have one more chance."
//   - Reward: sub-task 1 0.7 (0.5 after the retry), sub-task 2 0.3 (0.2);
//     a failed sub-task ends the episode.
type birdC struct{ bird }

// Texts of BIRD_C's environment turns.
const (
	// birdRetryUnsure is the debug retry's message when the SQL ran
	// (BIRD-Interact's, as the issue states it).
	birdRetryUnsure = "Are you sure about your SQL? You have one more chance."
	// birdRetryError prefixes the database's error in the debug retry's
	// message.
	birdRetryError = "Your SQL is not executable and raises the following error: "
	// birdSQLOnly ends a sub-task when something other than SQL comes
	// where only SQL is accepted.
	birdSQLOnly = "Only SQL is accepted on this turn: this sub-task ends unsolved."
	// birdUnparsed answers an unparsed output that spent a turn.
	birdUnparsed = "Your output could not be read as a question or as SQL; this turn is spent."
	// birdRetryFailed ends a sub-task whose debug retry failed too.
	birdRetryFailed = "Your SQL failed again: this sub-task ends unsolved."
)

// resolve sets BIRD_C's turn budget: m + patience turns, at least one.
func (r birdC) resolve(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState) error {
	bs, err := r.bird.resolve(t, o, st)
	if err != nil {
		return err
	}
	p, err := patience(o, DefaultPatience)
	if err != nil {
		return err
	}
	bs.TurnsTotal = max(1, int32(len(t.Counted()))+p)
	// The questions the turns allow: one turn is kept for the SQL.
	st.Budget = bs.TurnsTotal - 1
	settle(st, sqlRequiredC(bs)) // with one turn, only SQL
	return nil
}

// sqlRequiredC reports whether only SQL is accepted now: the last turn,
// or a pending debug retry.
func sqlRequiredC(bs *statepb.BirdState) bool {
	return bs.RetryPending || bs.TurnsTotal-bs.TurnsUsed <= 1
}

// lastTurn reports whether the turn limit ends the sub-task when what
// comes is not SQL (no retry pending: the retry's end is not the limit's).
func lastTurn(bs *statepb.BirdState) bool {
	return !bs.RetryPending && bs.TurnsTotal-bs.TurnsUsed <= 1
}

// apply applies one action under BIRD_C.
func (r birdC) apply(ctx context.Context, ep *episode, a *pb.Action) error {
	bs := ep.st.GetBird()
	err := r.act(ctx, ep, bs, a)
	settle(ep.st, sqlRequiredC(bs))
	return err
}

func (r birdC) act(ctx context.Context, ep *episode, bs *statepb.BirdState, a *pb.Action) error {
	required := sqlRequiredC(bs)
	switch k := a.GetKind().(type) {
	case *pb.Action_SubmitSql_:
		return r.submit(ctx, ep, bs, k.SubmitSql.GetSql())
	case *pb.Action_Ask_:
		if required {
			ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_QUESTION, BoundText(k.Ask.GetText(), MaxQuestionBytes))
			r.endSubtask(ep, bs, birdSQLOnly, lastTurn(bs))
			return nil
		}
		bs.TurnsUsed++
		rec, from := r.ask(ep, bs)
		return ep.ask(ctx, k.Ask.GetText(), rec, from)
	case *pb.Action_Stop_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_STOP, "")
		r.endSubtask(ep, bs, birdStop, lastTurn(bs))
		return nil
	case *pb.Action_Unparsed_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_UNPARSED, BoundText(k.Unparsed.GetText(), MaxQuestionBytes))
		if required {
			r.endSubtask(ep, bs, birdSQLOnly, lastTurn(bs))
			return nil
		}
		bs.TurnsUsed++
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, birdUnparsed)
		return nil
	default:
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "want ask, submit_sql, stop or unparsed (tools are PROTOCOL_BIRD_A's)")
	}
}

// submit verifies a submission for the current sub-task: a pass releases
// the follow-up or ends the episode; a first failure gets the debug
// retry, a second ends the episode.
func (r birdC) submit(ctx context.Context, ep *episode, bs *statepb.BirdState, sql string) error {
	st := ep.st
	v, ok, err := ep.verifySubmission(ctx, sql, r.check(ep, bs))
	if !ok {
		return err
	}
	retry := bs.RetryPending
	if !retry {
		bs.TurnsUsed++
	}
	bs.RetryPending = false
	solved := statepb.SubtaskResult_SUBTASK_RESULT_SOLVED
	if retry {
		solved = statepb.SubtaskResult_SUBTASK_RESULT_SOLVED_AFTER_RETRY
	}
	switch {
	case v.Success && bs.Subtask == 1:
		bs.Subtask1 = solved
		r.releaseFollowUp(ep, bs, sql)
		// One more turn, for the follow-up's SQL.
		bs.TurnsTotal++
		st.Budget = bs.TurnsTotal - 1
	case v.Success:
		bs.Subtask2 = solved
		terminate(st)
	case !retry:
		// The one debug retry of this sub-task.
		bs.RetryPending = true
		msg := birdRetryUnsure
		if v.Err != nil {
			msg = birdRetryError + v.Err.Error()
		}
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, BoundText(msg, MaxNoticeBytes))
	default:
		msg := birdRetryFailed
		if v.Err != nil {
			msg = BoundText("Your SQL failed: "+v.Err.Error(), MaxNoticeBytes)
		}
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, msg)
		terminate(st)
	}
	return nil
}

// observe: BIRD_C's budget is its turns.

func (b birdC) describe() *pb.ProtocolInfo {
	return &pb.ProtocolInfo{
		Protocol: pb.Protocol_PROTOCOL_BIRD_C, Actions: actionList(askerActions),
		Budget:          "m + patience turns (m: the task's counted ambiguities), the last for SQL only; one debug retry per sub-task",
		DefaultPatience: DefaultPatience, MaxPatience: MaxPatience,
		Draws: "tasks with a follow-up",
	}
}

func (birdC) observe(o *pb.Observation, st *statepb.EpisodeState, b *pb.Budget) {
	bs := st.GetBird()
	o.Subtask = max(1, bs.GetSubtask())
	b.Unit, b.TotalMilli, b.UsedMilli = pb.BudgetUnit_BUDGET_UNIT_TURNS, int64(bs.GetTurnsTotal())*1000, int64(bs.GetTurnsUsed())*1000
	o.QuestionsRemaining = max(0, bs.GetTurnsTotal()-bs.GetTurnsUsed()-1)
	o.SqlRequired = st.Phase != pb.Phase_PHASE_DONE && sqlRequiredC(bs)
}

package env

import (
	"context"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

// BIRD_C (PROTOCOL.md §8) is BIRD-Interact's c-Interact, as its harness
// plays it, on the two sub-tasks of bird.go. BirdState.variant picks the
// harness where the two differ (BIRD_VARIANT_ORIGINAL, the default: the
// bird_interact_conv pipeline; BIRD_VARIANT_ADK: BIRD-Interact-ADK):
//
//   - At most T = m + patience turns (m counted ambiguities: critical and
//     knowledge; at least one turn). Each question, SQL submission and
//     unparsed output is a turn. On the last turn only SQL is accepted
//     (the pipeline's "It is the final turn", whose prompt ends with the
//     pre-filled "- You: <t>": infer_api_system.py, wrap_up_prompt, the
//     final-turn branch). A question or an unparsed output there is taken
//     as SQL that did not run — wrap_up_sql.py's extract_system_response
//     returns "ERROR!" for output without a ```postgresql block, and the
//     batch evaluation fails it as an execution error — so the turn is
//     spent and the debug retry follows. The follow-up's release adds one
//     turn, for its SQL (the pipeline's follow-up turn).
//   - Sub-task 2: under ORIGINAL the follow-up gets that one SQL turn and
//     its debug retry (infer_api_system.py's "follow" phase pre-fills
//     "<t>" too): turns phase 1 left unused are not usable for questions.
//     Under ADK the policy may ask while turns last (the ADK's follow-up
//     run keeps its ask_user tool).
//   - After a failed submission, one debug retry per sub-task: it must be
//     SQL and it uses no turn. Its message is the harness's (retryMessage):
//     ORIGINAL says only that the SQL failed to run ("[exec_err_flg] -
//     Execution_Error: True": the batch evaluation's pred_err is a bool)
//     or "Are you sure about your SQL? You have one more chance to update
//     your SQL now."; ADK carries the database's error.
//   - Reward: sub-task 1 0.7 (0.5 after the retry), sub-task 2 0.3 (0.2);
//     a failed sub-task ends the episode.
type birdC struct{ bird }

// Texts of BIRD_C's environment turns.
const (
	// birdRetryUnsure is the original pipeline's debug message for SQL
	// that ran but failed (bird_interact_conv/code/infer_api_system.py,
	// the "debug" phase).
	birdRetryUnsure = "Are you sure about your SQL? You have one more chance to update your SQL now."
	// birdRetryError prefixes the original pipeline's debug message for
	// SQL that did not run; what follows is the batch evaluation's
	// error_msg (evaluation/src/eval_bird_interact_batch.py).
	birdRetryError = "Your SQL is not executable and raises the following error: "
	// birdExecErrFlag and birdExecTimeoutFlag are that error_msg: "[exec_err_flg] - "
	// and the RuntimeError of execute_queries' boolean error flag or of
	// its timeout flag.
	birdExecErrFlag     = "[exec_err_flg] - Execution_Error: True"
	birdExecTimeoutFlag = "[exec_err_flg] - Execution_Error: timeout_error"
	// birdADKRetryUnsure, birdADKRetryError and birdADKRetryTimeout are
	// the ADK's debug messages (BIRD-Interact-ADK/orchestrator/cinteract.py,
	// from db_environment/server.py's submit message); the error message
	// goes between birdADKRetryError and birdADKRetryFix.
	birdADKRetryUnsure  = "Your SQL is not correct. You have one more chance. Please fix and call submit_sql."
	birdADKRetryError   = "Your SQL is not executable: Error executing submitted SQL: "
	birdADKRetryTimeout = "Your SQL is not executable: Submitted SQL execution timed out"
	birdADKRetryFix     = "\nPlease fix and call submit_sql."
	// birdSQLOnly ends a sub-task when something other than SQL comes
	// during its debug retry.
	birdSQLOnly = "Only SQL is accepted on this turn: this sub-task ends unsolved."
	// birdUnparsed answers an unparsed output that spent a turn.
	birdUnparsed = "Your output could not be read as a question or as SQL; this turn is spent."
	// birdRetryFailed ends a sub-task whose debug retry failed too.
	birdRetryFailed = "Your SQL failed again: this sub-task ends unsolved."
)

// resolve sets BIRD_C's turn budget: m + patience turns, at least one.
func (r birdC) resolve(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState, _ *history) error {
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

// adk reports whether the episode follows BIRD-Interact-ADK.
func adk(bs *statepb.BirdState) bool { return bs.GetVariant() == pb.BirdVariant_BIRD_VARIANT_ADK }

// sqlRequiredC reports whether only SQL is accepted now: a pending debug
// retry, or an SQL turn.
func sqlRequiredC(bs *statepb.BirdState) bool {
	return bs.RetryPending || sqlTurn(bs)
}

// sqlTurn reports whether this turn is for SQL only (no retry pending):
// the last turn, or under ORIGINAL the follow-up's one turn. What else
// comes on it is a failed submission (BIRD_C's doc).
func sqlTurn(bs *statepb.BirdState) bool {
	if bs.RetryPending {
		return false
	}
	return bs.TurnsTotal-bs.TurnsUsed <= 1 || (bs.Subtask == 2 && !adk(bs))
}

// apply applies one action under BIRD_C.
func (r birdC) apply(ctx context.Context, ep *episode, a *pb.Action) error {
	bs := ep.st.GetBird()
	err := r.act(ctx, ep, bs, a)
	settle(ep.st, sqlRequiredC(bs))
	return err
}

func (r birdC) act(ctx context.Context, ep *episode, bs *statepb.BirdState, a *pb.Action) error {
	switch k := a.GetKind().(type) {
	case *pb.Action_SubmitSql_:
		return r.submit(ctx, ep, bs, k.SubmitSql.GetSql())
	case *pb.Action_Ask_:
		if sqlRequiredC(bs) {
			ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_QUESTION, BoundText(k.Ask.GetText(), MaxQuestionBytes))
			r.notSQL(ep, bs)
			return nil
		}
		bs.TurnsUsed++
		rec, from := r.ask(ep, bs)
		return ep.ask(ctx, k.Ask.GetText(), rec, from)
	case *pb.Action_Stop_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_STOP, "")
		// TRUNCATED when the turn limit left nothing but this turn.
		r.endSubtask(ep, bs, birdStop, !bs.RetryPending && bs.TurnsTotal-bs.TurnsUsed <= 1)
		return nil
	case *pb.Action_Unparsed_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_UNPARSED, BoundText(k.Unparsed.GetText(), MaxQuestionBytes))
		if sqlRequiredC(bs) {
			r.notSQL(ep, bs)
			return nil
		}
		bs.TurnsUsed++
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, birdUnparsed)
		return nil
	default:
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "want ask, submit_sql, stop or unparsed (tools are PROTOCOL_BIRD_A's)")
	}
}

// notSQL handles a question or an unparsed output where only SQL is
// accepted. During the debug retry it ends the sub-task (the retry's
// output without SQL fails as "ERROR!" does, and there is no second
// retry). On an SQL turn it is the harness's pre-filled "<t>" turn: the
// output is taken as SQL that did not run (wrap_up_sql.py returns
// "ERROR!" when the output holds no ```postgresql block), so the turn is
// spent and the debug retry follows. Under ADK the phase ended without a
// submission, and the ADK's orchestrator sends its "not correct" debug
// message (its last submit message holds no [exec_err_flg]).
func (r birdC) notSQL(ep *episode, bs *statepb.BirdState) {
	if bs.RetryPending {
		r.endSubtask(ep, bs, birdSQLOnly, false)
		return
	}
	bs.TurnsUsed++
	bs.RetryPending = true
	msg := birdRetryError + birdExecErrFlag
	if adk(bs) {
		msg = birdADKRetryUnsure
	}
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, msg)
}

// retryMessage is the debug retry's message for a failed submission whose
// error is err (nil: it ran and failed the test), as the episode's
// harness words it (BIRD_C's doc).
func retryMessage(bs *statepb.BirdState, err error) string {
	timeout := err != nil && sqlexec.KindOf(err) == sqlexec.KindTimeout
	switch {
	case adk(bs) && err == nil:
		return birdADKRetryUnsure
	case adk(bs) && timeout:
		return birdADKRetryTimeout + birdADKRetryFix
	case adk(bs):
		return BoundText(birdADKRetryError+err.Error(), MaxNoticeBytes-len(birdADKRetryFix)) + birdADKRetryFix
	case err == nil:
		return birdRetryUnsure
	case timeout:
		return birdRetryError + birdExecTimeoutFlag
	}
	return birdRetryError + birdExecErrFlag
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
		// One more turn, for the follow-up's SQL (under ORIGINAL the
		// only one sub-task 2 may use: sqlTurn).
		bs.TurnsTotal++
		st.Budget = bs.TurnsTotal - 1
	case v.Success:
		bs.Subtask2 = solved
		terminate(st)
	case !retry:
		// The one debug retry of this sub-task.
		bs.RetryPending = true
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, retryMessage(bs, v.Err))
	default:
		// The end of the sub-task: the original pipeline shows no error
		// text at any point; the ADK's submit message carries it.
		msg := birdRetryFailed
		if v.Err != nil && adk(bs) {
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
	if bs.GetSubtask() == 2 && !adk(bs) {
		o.QuestionsRemaining = 0 // the follow-up's one turn is for SQL
	}
	o.SqlRequired = st.Phase != pb.Phase_PHASE_DONE && sqlRequiredC(bs)
}

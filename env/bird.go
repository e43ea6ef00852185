package env

import (
	"context"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/reward"
	"avtgym/sqlexec"
)

// What BIRD-Interact's two protocols share (PROTOCOL.md §8): BIRD_C
// (birdc.go) and BIRD_A (birda.go) play tasks with two sub-tasks, the
// record and its follow-up. The follow-up's request is shown only when
// sub-task 1's SQL passes, and the follow-up is verified on the state that
// SQL left (replayed on a private copy; never on a shared database). In
// sub-task 2 the oracle answers about the follow-up (Task.FollowUpRecord:
// no registered ambiguities) from the questions of sub-task 2 only. The
// reward is BIRD-Interact's (reward.BirdInteract): sub-task 1 0.7, sub-task
// 2 0.3, with BIRD_C's reduced rewards after a debug retry. Both keep a
// statepb.BirdState.
type bird struct {
	protocol pb.Protocol
}

// Patience bounds (BIRD_C counts it in turns, BIRD_A in coins).
const (
	// DefaultPatience is BIRD_C's default patience, in turns.
	DefaultPatience = 3
	// MaxPatience bounds EpisodeOptions.patience (BIRD-Interact used 0, 3,
	// 5 and 7).
	MaxPatience = 32
)

// birdStop ends a sub-task on a stop.
const birdStop = "Stopping without SQL leaves this sub-task unsolved: the episode ends."

// draws: BIRD-Interact's protocols play tasks with a follow-up only.
func (b bird) draws(t *corpus.Task) bool { return t.FollowUp != nil }

func (b bird) noTasks(c *corpus.Corpus, split string) error {
	return errorf(NotFound, ReasonNoTasks, "split", "corpus %q has no task with a follow-up in split %q (%s needs two sub-tasks)", c.Name, split, b.protocol)
}

// resolve checks the options both protocols share and gives st its
// BirdState, at sub-task 1.
func (b bird) resolve(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState) (*statepb.BirdState, error) {
	p := b.protocol
	if r := o.GetReward(); r != pb.RewardType_REWARD_TYPE_UNSPECIFIED && r != pb.RewardType_REWARD_TYPE_BIRD_INTERACT {
		return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.reward", "%s has its own reward (REWARD_TYPE_BIRD_INTERACT); leave reward unset", p)
	}
	if s := o.GetSolver(); s != pb.Solver_SOLVER_UNSPECIFIED && s != pb.Solver_SOLVER_CLIENT {
		return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.solver", "under %s the policy writes the SQL: leave solver unset (or SOLVER_CLIENT)", p)
	}
	if o.ExtraQuestions != nil || o.ZeroAmbiguityBudget != nil {
		return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.extra_questions", "extra_questions and zero_ambiguity_budget are AMBITAB's; %s has its own budget", p)
	}
	if t.FollowUp == nil {
		return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.protocol", "task %q has no follow-up, and %s serves tasks with two sub-tasks only (TaskSummary.subtasks = 2)", t.ID, p)
	}
	bs := &statepb.BirdState{Subtask: 1, FollowUpState: pb.FollowUpState_FOLLOW_UP_STATE_REFERENCE, Variant: pb.BirdVariant_BIRD_VARIANT_ORIGINAL}
	if f := o.GetFollowUpState(); f != pb.FollowUpState_FOLLOW_UP_STATE_UNSPECIFIED {
		if _, ok := pb.FollowUpState_name[int32(f)]; !ok {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.follow_up_state", "unknown follow-up state %d", f)
		}
		bs.FollowUpState = f
	}
	if v := o.GetBirdVariant(); v != pb.BirdVariant_BIRD_VARIANT_UNSPECIFIED {
		if _, ok := pb.BirdVariant_name[int32(v)]; !ok {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.bird_variant", "unknown BIRD variant %d", v)
		}
		bs.Variant = v
	}
	st.Reward, st.Solver = pb.RewardType_REWARD_TYPE_BIRD_INTERACT, pb.Solver_SOLVER_CLIENT
	st.Rules = &statepb.EpisodeState_Bird{Bird: bs}
	return bs, nil
}

// patience is the reset's patience option (def when unset), checked.
func patience(o *pb.EpisodeOptions, def int32) (int32, error) {
	if o.Patience == nil {
		return def, nil
	}
	p := o.GetPatience()
	if p < 0 || p > MaxPatience {
		return 0, errorf(InvalidArgument, ReasonInvalidOption, "options.patience", "%d is outside 0..%d", p, MaxPatience)
	}
	return p, nil
}

func (bird) holds(st *statepb.EpisodeState) bool { return st.GetBird() != nil }

// settle sets the phase of an episode that goes on: SOLVING when only SQL
// is accepted now (required), else ASKING.
func settle(st *statepb.EpisodeState, required bool) {
	if st.Phase == pb.Phase_PHASE_DONE {
		return
	}
	st.Phase = pb.Phase_PHASE_ASKING
	if required {
		st.Phase = pb.Phase_PHASE_SOLVING
	}
}

// ask puts a question about the current sub-task: in sub-task 2 the
// oracle answers about the follow-up, from sub-task 2's questions.
func (bird) ask(ep *episode, bs *statepb.BirdState) (rec *corpus.Record, from int) {
	if bs.Subtask == 2 {
		return ep.task.FollowUpRecord(), int(bs.Subtask2FirstQuestion)
	}
	return ep.task.Record, 0
}

// check is the current sub-task's verification: the record's reference,
// or the follow-up's on the state phase 1's accepted SQL leaves.
func (bird) check(ep *episode, bs *statepb.BirdState) checker {
	opt := ep.verifyOptions()
	if bs.Subtask == 1 {
		return func(ctx context.Context, sql string, lim sqlexec.Limits) (sqlexec.Verdict, error) {
			return ep.task.Verify(ctx, sql, lim, opt)
		}
	}
	opt.PolicyPhase1 = bs.FollowUpState == pb.FollowUpState_FOLLOW_UP_STATE_POLICY
	return func(ctx context.Context, sql string, lim sqlexec.Limits) (sqlexec.Verdict, error) {
		return ep.task.VerifyFollowUp(ctx, []string{bs.Phase1Sql}, sql, lim, opt)
	}
}

// releaseFollowUp starts sub-task 2: phase 1's accepted SQL is kept for
// the follow-up's verification, and the follow-up's request is shown.
// (The caller adjusts its own budget.)
func (bird) releaseFollowUp(ep *episode, bs *statepb.BirdState, phase1SQL string) {
	fu := ep.task.FollowUp
	bs.Phase1Sql = phase1SQL
	bs.Subtask = 2
	bs.Subtask2FirstQuestion = ep.st.Answered
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_REQUEST, fu.Request)
	if ep.priv {
		ep.out.Privileged.FollowUpReferenceSql = fu.Reference.SQL
	}
}

// endSubtask ends the current sub-task unsolved (its reward stays 0), and
// with it the episode: TRUNCATED when the budget forced the end.
func (bird) endSubtask(ep *episode, bs *statepb.BirdState, notice string, truncated bool) {
	st := ep.st
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, notice)
	bs.RetryPending = false
	st.Phase = pb.Phase_PHASE_DONE
	st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	if truncated {
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
	}
}

// terminate ends the episode after a verdict.
func terminate(st *statepb.EpisodeState) {
	st.Phase = pb.Phase_PHASE_DONE
	st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
}

// score is BIRD-Interact's reward.
func (bird) score(_ *corpus.Task, st *statepb.EpisodeState) *pb.Reward {
	bs := st.GetBird()
	r := reward.BirdInteract(reward.BirdEpisode{
		Subtask1: subtaskResult(bs.GetSubtask1()),
		Subtask2: subtaskResult(bs.GetSubtask2()),
		Released: bs.GetSubtask() == 2,
	})
	return &pb.Reward{Type: st.Reward, Value: r.Value, Components: r.Components}
}

// subtaskResult is the reward package's name of how a sub-task ended.
func subtaskResult(r statepb.SubtaskResult) reward.BirdSubtask {
	switch r {
	case statepb.SubtaskResult_SUBTASK_RESULT_SOLVED:
		return reward.BirdSolved
	case statepb.SubtaskResult_SUBTASK_RESULT_SOLVED_AFTER_RETRY:
		return reward.BirdSolvedAfterRetry
	}
	return reward.BirdUnsolved
}

// stateBound bounds BirdState as EpisodeState's field 45: every field at
// its widest, BIRD_C's and BIRD_A's alike.
func (bird) stateBound() int {
	return bytesField(45,
		varintField(1)+varintField(2)+ // sub-task, sub-task 2's first question
			bytesField(3, MaxSQLBytes)+ // sub-task 1's accepted SQL
			varintField(4)+varintField(5)+ // sub-task results
			varintField(6)+varintField(7)+boolField(8)+ // BIRD_C: turns total, used; retry pending
			varintField(9)+varintField(10)+ // BIRD_A: coins total, used
			bytesField(11, maxActionLog)+ // BIRD_A: the action log
			varintField(12)+varintField(13)) // follow-up state, variant
}

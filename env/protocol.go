package env

import (
	"context"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/reward"
	"avtgym/sqlexec"
)

// The protocols (PROTOCOL.md §11). Every rule is applied here, on the
// server, from the state sealed in the token: a client cannot change a
// budget, a reward or a release by what it sends.
//
// AMBITAB (§2) is the ask-then-solve state machine of episode.go.
//
// BIRD_C (§8) is BIRD-Interact's c-Interact, as its harness plays it:
//
//   - A task has two sub-tasks: the record and its follow-up. The
//     follow-up's request is shown only when sub-task 1's SQL passes, and
//     the follow-up is verified on the state that SQL left (replayed on a
//     private copy; never on a shared database).
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
//   - In sub-task 2 the oracle answers about the follow-up
//     (Task.FollowUpRecord: no registered ambiguities) from the questions
//     of sub-task 2 only.
const (
	// DefaultPatience is BIRD_C's default patience, in turns.
	DefaultPatience = 3
	// MaxPatience bounds EpisodeOptions.patience (BIRD-Interact used 0, 3,
	// 5 and 7).
	MaxPatience = 32
)

// BIRD-Interact's c-Interact rewards, in thousandths.
const (
	birdPhase1First, birdPhase1Retry = 700, 500
	birdPhase2First, birdPhase2Retry = 300, 200
)

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
	// birdStop ends a sub-task on a stop.
	birdStop = "Stopping without SQL leaves this sub-task unsolved: the episode ends."
	// birdUnparsed answers an unparsed output that spent a turn.
	birdUnparsed = "Your output could not be read as a question or as SQL; this turn is spent."
	// birdRetryFailed ends a sub-task whose debug retry failed too.
	birdRetryFailed = "Your SQL failed again: this sub-task ends unsolved."
)

// Texts of AMBITAB's answers to unparsed output.
const (
	// unparsedNotice answers the first unparsed output in a row.
	unparsedNotice = "Your output could not be read as an action: ask one question, stop, or submit SQL."
	// unparsedNoSQL ends an episode whose SQL could not be read twice.
	unparsedNoSQL = "No SQL could be read from your output: the solution fails."
)

// resolveProtocol checks the protocol options of a reset on task t and
// records them in st (whose other options are resolved).
func resolveProtocol(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState) error {
	p := o.GetProtocol()
	if p == pb.Protocol_PROTOCOL_UNSPECIFIED {
		p = pb.Protocol_PROTOCOL_AMBITAB
	}
	st.Protocol, st.Subtask = p, 1
	switch p {
	case pb.Protocol_PROTOCOL_AMBITAB:
		if o.GetReward() == pb.RewardType_REWARD_TYPE_BIRD_INTERACT {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.reward", "REWARD_TYPE_BIRD_INTERACT is the reward of PROTOCOL_BIRD_C; AMBITAB takes question-F1 or outcome")
		}
		if o != nil && o.Patience != nil {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.patience", "patience applies to PROTOCOL_BIRD_C only (AMBITAB's budget is m + extra_questions)")
		}
		return nil
	case pb.Protocol_PROTOCOL_BIRD_C, pb.Protocol_PROTOCOL_BIRD_A:
	case pb.Protocol_PROTOCOL_TIDE_F, pb.Protocol_PROTOCOL_TIDE_P:
		return resolveTide(t, o, st)
	default:
		return errorf(InvalidArgument, ReasonInvalidOption, "options.protocol", "unknown protocol %d", p)
	}
	// BIRD_C and BIRD_A.
	if r := o.GetReward(); r != pb.RewardType_REWARD_TYPE_UNSPECIFIED && r != pb.RewardType_REWARD_TYPE_BIRD_INTERACT {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.reward", "%s has its own reward (REWARD_TYPE_BIRD_INTERACT); leave reward unset", p)
	}
	if s := o.GetSolver(); s != pb.Solver_SOLVER_UNSPECIFIED && s != pb.Solver_SOLVER_CLIENT {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.solver", "under %s the policy writes the SQL: leave solver unset (or SOLVER_CLIENT)", p)
	}
	if o.ExtraQuestions != nil || o.ZeroAmbiguityBudget != nil {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.extra_questions", "extra_questions and zero_ambiguity_budget are AMBITAB's; %s has its own budget", p)
	}
	if t.FollowUp == nil {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.protocol", "task %q has no follow-up, and %s serves tasks with two sub-tasks only (TaskSummary.subtasks = 2)", t.ID, p)
	}
	st.Reward, st.Solver = pb.RewardType_REWARD_TYPE_BIRD_INTERACT, pb.Solver_SOLVER_CLIENT
	if p == pb.Protocol_PROTOCOL_BIRD_A {
		return resolveBirdA(t, o, st)
	}
	patience := int32(DefaultPatience)
	if o.Patience != nil {
		patience = o.GetPatience()
		if patience < 0 || patience > MaxPatience {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.patience", "%d is outside 0..%d", patience, MaxPatience)
		}
	}
	st.TurnsTotal = max(1, int32(len(t.Counted()))+patience)
	// The questions the turns allow: one turn is kept for the SQL.
	st.Budget = st.TurnsTotal - 1
	return nil
}

// isBird reports whether p is one of BIRD-Interact's protocols.
func isBird(p pb.Protocol) bool {
	return p == pb.Protocol_PROTOCOL_BIRD_C || p == pb.Protocol_PROTOCOL_BIRD_A
}

// sqlRequired reports whether only SQL is accepted now: BIRD_C's last
// turn, or a pending debug retry.
func sqlRequired(st *statepb.EpisodeState) bool {
	switch st.Protocol {
	case pb.Protocol_PROTOCOL_BIRD_C:
		return st.RetryPending || st.TurnsTotal-st.TurnsUsed <= 1
	case pb.Protocol_PROTOCOL_BIRD_A:
		return st.CoinsTotalMilli-st.CoinsUsedMilli < cheapestBirdA
	}
	return false
}

// applyBirdC applies one action under BIRD_C.
func (ep *episode) applyBirdC(ctx context.Context, a *pb.Action) error {
	st := ep.st
	required := sqlRequired(st)
	switch k := a.GetKind().(type) {
	case *pb.Action_SubmitSql_:
		return ep.submitBirdC(ctx, k.SubmitSql.GetSql())
	case *pb.Action_Ask_:
		if required {
			ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_QUESTION, BoundText(k.Ask.GetText(), MaxQuestionBytes))
			ep.endSubtask(birdSQLOnly)
			return nil
		}
		st.TurnsUsed++
		return ep.ask(ctx, k.Ask.GetText())
	case *pb.Action_Stop_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_STOP, "")
		ep.endSubtask(birdStop)
		return nil
	case *pb.Action_Unparsed_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_UNPARSED, BoundText(k.Unparsed.GetText(), MaxQuestionBytes))
		if required {
			ep.endSubtask(birdSQLOnly)
			return nil
		}
		st.TurnsUsed++
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, birdUnparsed)
		return nil
	default:
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "want ask, submit_sql, stop or unparsed (tools are PROTOCOL_BIRD_A's)")
	}
}

// verifySubmission verifies a submission for the current sub-task of a
// protocol where the policy submits SQL step by step (BIRD_C, BIRD_A:
// the record, then its follow-up; TIDE: the reference, then, after the
// drift turn, the post-drift reference) and records it in the state: the
// SQL turn, the solution and the verdict. ok is false when the step ends
// here: err is the step's error (a busy verifier: nothing of the step is
// kept, the state is not sealed), or the environment failed (ERROR).
// Text the policy cannot submit is a failed verdict whose message says
// why, as a database error would.
func (ep *episode) verifySubmission(ctx context.Context, sql string) (v sqlexec.Verdict, ok bool, err error) {
	st, t := ep.st, ep.task
	if fault := policyFault(sql, MaxSQLBytes); fault != "" {
		sql = BoundText(sql, MaxSQLBytes)
		v = sqlexec.Verdict{Reason: "the SQL " + fault, Err: &sqlexec.Error{Kind: sqlexec.KindSyntax, Msg: "the SQL was not run: it " + fault}}
	} else {
		var verr error
		switch {
		case st.DriftInjected:
			v, verr = t.VerifyDrift(ctx, sql, ep.env.cfg.Limits)
		case st.Subtask == 1 || isTide(st.Protocol):
			v, verr = t.Verify(ctx, sql, ep.env.cfg.Limits)
		default:
			v, verr = t.VerifyFollowUp(ctx, []string{st.Phase1Sql}, sql, ep.env.cfg.Limits)
		}
		if verr != nil {
			if busy := ep.verifierError(verr); busy != nil {
				return v, false, busy
			}
			ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_SQL, sql)
			ep.fail("the verifier failed: " + verr.Error())
			return v, false, nil
		}
	}
	ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_SQL, sql)
	st.SolutionSql = sql
	st.Verified, st.Outcome = true, v.Success
	st.VerifierReason = BoundText(v.Reason, MaxNoticeBytes)
	if v.Err != nil && st.VerifierReason == "" {
		st.VerifierReason = BoundText(v.Err.Error(), MaxNoticeBytes)
	}
	return v, true, nil
}

// submitBirdC verifies a BIRD_C submission for the current sub-task.
func (ep *episode) submitBirdC(ctx context.Context, sql string) error {
	st := ep.st
	v, ok, err := ep.verifySubmission(ctx, sql)
	if !ok {
		return err
	}
	retry := st.RetryPending
	if !retry {
		st.TurnsUsed++
	}
	st.RetryPending = false
	switch {
	case v.Success && st.Subtask == 1:
		st.Phase1RewardMilli = pick(retry, birdPhase1Retry, birdPhase1First)
		ep.releaseFollowUp(sql)
	case v.Success:
		st.Phase2RewardMilli = pick(retry, birdPhase2Retry, birdPhase2First)
		st.Phase = pb.Phase_PHASE_DONE
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	case !retry:
		// The one debug retry of this sub-task.
		st.RetryPending = true
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
		st.Phase = pb.Phase_PHASE_DONE
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	}
	return nil
}

func pick(cond bool, yes, no int32) int32 {
	if cond {
		return yes
	}
	return no
}

// releaseFollowUp starts sub-task 2: phase 1's accepted SQL is kept for
// the follow-up's verification, one turn is added for the follow-up's
// SQL, and the follow-up's request is shown.
func (ep *episode) releaseFollowUp(phase1SQL string) {
	st, fu := ep.st, ep.task.FollowUp
	st.Phase1Sql = phase1SQL
	st.Subtask = 2
	st.TurnsTotal++
	st.Budget = st.TurnsTotal - 1
	st.Subtask2FirstQuestion = int32(len(st.Questions))
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_REQUEST, fu.Request)
	if ep.priv {
		ep.out.Privileged.FollowUpReferenceSql = fu.Reference.SQL
	}
}

// endSubtask ends the current BIRD_C sub-task unsolved (its reward stays
// 0), and with it the episode.
func (ep *episode) endSubtask(notice string) {
	st := ep.st
	truncated := st.Protocol == pb.Protocol_PROTOCOL_BIRD_C && !st.RetryPending && st.TurnsTotal-st.TurnsUsed <= 1
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, notice)
	st.RetryPending = false
	st.Phase = pb.Phase_PHASE_DONE
	st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	if truncated {
		// The turn limit forced the end.
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
	}
}

// applyUnparsed applies AMBITAB's rule for output the client could not
// parse (AmbiTab's asker: a corrective turn, then the fallback): the first
// in a row gets a notice; the second ends asking as a STOP, or, where SQL
// is awaited, fails the solution.
func (ep *episode) applyUnparsed(ctx context.Context, text string) error {
	st := ep.st
	ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_UNPARSED, BoundText(text, MaxQuestionBytes))
	st.UnparsedInRow++
	if st.UnparsedInRow < 2 {
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, unparsedNotice)
		return nil
	}
	st.UnparsedInRow = 0
	if st.Phase == pb.Phase_PHASE_ASKING {
		return ep.endAsking(ctx, false)
	}
	ep.reject("", "no SQL could be read from the policy's output")
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, unparsedNoSQL)
	return nil
}

// subtaskRecord is the record the oracle answers about now: the task's,
// or in BIRD_C's sub-task 2 its follow-up's.
func (ep *episode) subtaskRecord() *corpus.Record {
	if ep.st.Subtask == 2 && isBird(ep.st.Protocol) {
		return ep.task.FollowUpRecord()
	}
	return ep.task.Record
}

// subtaskDialogue is the dialogue the oracle reads: the questions of the
// current sub-task.
func (ep *episode) subtaskDialogue() []oracle.Turn {
	d := dialogue(ep.st)
	if ep.st.Subtask == 2 && isBird(ep.st.Protocol) {
		return d[min(len(d), int(ep.st.Subtask2FirstQuestion)):]
	}
	return d
}

// observe fills an observation's counters from st: the phase, the
// question counters, the protocol, the sub-task and the budget, which it
// writes into b (the step's own storage: no allocation on the hot path).
func observe(o *pb.Observation, st *statepb.EpisodeState, b *pb.Budget) {
	o.Phase = st.Phase
	o.QuestionBudget = st.Budget
	o.QuestionsAsked = int32(len(st.Questions))
	o.Protocol = st.Protocol
	o.Subtask = max(1, st.Subtask)
	switch st.Protocol {
	case pb.Protocol_PROTOCOL_BIRD_C:
		b.Unit, b.TotalMilli, b.UsedMilli = pb.BudgetUnit_BUDGET_UNIT_TURNS, int64(st.TurnsTotal)*1000, int64(st.TurnsUsed)*1000
		o.QuestionsRemaining = max(0, st.TurnsTotal-st.TurnsUsed-1)
		o.SqlRequired = st.Phase != pb.Phase_PHASE_DONE && sqlRequired(st)
	case pb.Protocol_PROTOCOL_BIRD_A:
		b.Unit, b.TotalMilli, b.UsedMilli = pb.BudgetUnit_BUDGET_UNIT_COINS, st.CoinsTotalMilli, st.CoinsUsedMilli
		o.QuestionsRemaining = int32(max(0, st.CoinsTotalMilli-st.CoinsUsedMilli) / birdACost[1])
		o.SqlRequired = st.Phase != pb.Phase_PHASE_DONE && sqlRequired(st)
	case pb.Protocol_PROTOCOL_TIDE_F, pb.Protocol_PROTOCOL_TIDE_P:
		b.Unit, b.TotalMilli, b.UsedMilli = pb.BudgetUnit_BUDGET_UNIT_TURNS, int64(st.TurnsTotal)*1000, int64(st.TurnsUsed)*1000
		o.QuestionsAsked = int32(len(st.Questions)) - st.Prefilled
		// One turn is kept for an SQL; not one per SQL the task takes,
		// which would tell a policy whether a drift will come.
		o.QuestionsRemaining = max(0, st.TurnsTotal-st.TurnsUsed-1)
	default:
		b.Unit, b.TotalMilli, b.UsedMilli = pb.BudgetUnit_BUDGET_UNIT_QUESTIONS, int64(st.Budget)*1000, int64(len(st.Questions))*1000
		o.QuestionsRemaining = max(0, st.Budget-o.QuestionsAsked)
	}
	b.RemainingMilli = max(0, b.TotalMilli-b.UsedMilli)
	o.Budget = b
}

// score is a finished episode's reward (nil for ERROR).
func score(t *corpus.Task, st *statepb.EpisodeState) *pb.Reward {
	if st.Phase != pb.Phase_PHASE_DONE || st.Status == pb.EpisodeStatus_EPISODE_STATUS_ERROR {
		return nil
	}
	if isTide(st.Protocol) {
		return tideScore(t, st)
	}
	if st.Protocol == pb.Protocol_PROTOCOL_BIRD_C || st.Protocol == pb.Protocol_PROTOCOL_BIRD_A {
		c := map[string]float64{reward.ComponentPhase1: float64(st.Phase1RewardMilli) / 1000}
		total := st.Phase1RewardMilli
		if st.Subtask == 2 {
			c[reward.ComponentPhase2] = float64(st.Phase2RewardMilli) / 1000
			total += st.Phase2RewardMilli
		}
		return &pb.Reward{Type: st.Reward, Value: float64(total) / 1000, Components: c}
	}
	r := reward.Score(rewardKind(st.Reward), Quantities(t, st))
	return &pb.Reward{Type: st.Reward, Value: r.Value, Components: r.Components}
}

package env

import (
	"context"
	"fmt"
	"math/bits"
	"strings"
	"unicode/utf8"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/reward"
	"avtgym/sqlexec"
)

// budgetNotice is shown when an ask comes after the question budget is
// spent (PROTOCOL.md §2): the question is not answered and asking ends.
const budgetNotice = "The question budget is spent: this question was not answered, and asking has ended."

// episode is one Step in progress: the decoded state, its task and the
// response being built.
type episode struct {
	env  *Env
	st   *statepb.EpisodeState
	task *corpus.Task
	priv bool
	out  *pb.StepResponse

	// Storage for out, its observation and up to maxStepTurns turns.
	resp     pb.StepResponse
	obs      pb.Observation
	turns    [maxStepTurns]pb.Turn
	turnPtrs [maxStepTurns]*pb.Turn
}

// maxStepTurns is the most turns one step adds (a submission while asking:
// SQL, feedback, and a notice if verification fails).
const maxStepTurns = 3

func (ep *episode) turn(role pb.Role, kind pb.TurnKind, text string) {
	o := ep.out.Observation
	var t *pb.Turn
	if n := len(o.Turns); n < maxStepTurns {
		t = &ep.turns[n]
	} else {
		t = new(pb.Turn)
	}
	t.Role, t.Kind, t.Text = role, kind, text
	o.Turns = append(o.Turns, t)
}

func (ep *episode) apply(ctx context.Context, a *pb.Action) error {
	st := ep.st
	if st.Phase == pb.Phase_PHASE_DONE {
		return errorf(FailedPrecondition, ReasonEpisodeDone, "action", "the episode is done (%s); reset a new one", st.Status)
	}
	switch k := a.GetKind().(type) {
	case *pb.Action_Ask_:
		if st.Phase != pb.Phase_PHASE_ASKING {
			return errorf(FailedPrecondition, ReasonWrongPhase, "action.ask", "asking has ended; only submit_sql is allowed now")
		}
		q := k.Ask.GetText()
		if err := checkText("action.ask.text", q, maxQuestionBytes); err != nil {
			return err
		}
		return ep.ask(ctx, q)
	case *pb.Action_Stop_:
		if st.Phase != pb.Phase_PHASE_ASKING {
			return errorf(FailedPrecondition, ReasonWrongPhase, "action.stop", "asking has already ended; only submit_sql is allowed now")
		}
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_STOP, "")
		ep.endAsking(ctx, false)
		return nil
	case *pb.Action_SubmitSql_:
		sql := k.SubmitSql.GetSql()
		if err := checkText("action.submit_sql.sql", sql, maxSQLBytes); err != nil {
			return err
		}
		if st.Phase == pb.Phase_PHASE_ASKING {
			// STOP followed by this submission (PROTOCOL.md §2).
			st.Phase = pb.Phase_PHASE_SOLVING
			st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
		}
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_SQL, sql)
		ep.verify(ctx, sql)
		return nil
	default:
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "no action is set (want ask, stop or submit_sql)")
	}
}

func checkText(field, s string, max int) error {
	switch {
	case strings.TrimSpace(s) == "":
		return errorf(InvalidArgument, ReasonInvalidAction, field, "is empty")
	case len(s) > max:
		return errorf(InvalidArgument, ReasonInvalidAction, field, "is %d bytes, more than %d", len(s), max)
	case !utf8.ValidString(s):
		return errorf(InvalidArgument, ReasonInvalidAction, field, "is not valid UTF-8")
	}
	return nil
}

func (ep *episode) ask(ctx context.Context, q string) error {
	st := ep.st
	st.Attempted++
	ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_QUESTION, q)
	if int32(len(st.Questions)) >= st.Budget {
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, budgetNotice)
		ep.endAsking(ctx, true)
		return nil
	}
	reply, err := ep.env.cfg.Oracles[st.Oracle].Ask(ctx, ep.task.Record, dialogue(st), q)
	if err != nil {
		// The oracle failed: the environment's fault. The episode ends in
		// ERROR, and the caller may retry the same token later.
		ep.fail("the oracle failed: " + err.Error())
		return nil
	}
	var mask uint64
	for _, c := range reply.Credits {
		if c < 0 || c >= min(len(ep.task.Ambiguities), corpus.MaxAmbiguities) {
			ep.fail(fmt.Sprintf("the oracle credited ambiguity %d, which does not exist", c))
			return nil
		}
		mask |= 1 << c
	}
	// One allocation for the question and its mask.
	a := &struct {
		q    statepb.AnsweredQuestion
		mask uint64
	}{mask: mask}
	a.q.Question, a.q.Reply, a.q.CreditMask = q, reply.Text, &a.mask
	st.Questions = append(st.Questions, &a.q)
	ep.turn(pb.Role_ROLE_ORACLE, pb.TurnKind_TURN_KIND_REPLY, reply.Text)
	if ep.priv {
		ep.out.Privileged.Credits = ep.credits(mask)
		ep.out.Privileged.OracleAction = reply.Action
	}
	return nil
}

// endAsking moves the episode out of the asking phase. With the lookup
// solver the server solves at once; with the question-F1 reward and the
// client as solver no SQL is needed and the episode ends; otherwise it
// waits for the client's SQL.
func (ep *episode) endAsking(ctx context.Context, truncated bool) {
	st := ep.st
	st.Phase = pb.Phase_PHASE_SOLVING
	st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	if truncated {
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
	}
	switch st.Solver {
	case pb.Solver_SOLVER_LOOKUP:
		sql := ep.lookup()
		if ep.priv {
			ep.out.Privileged.SolverSql = sql
		}
		ep.verify(ctx, sql)
		return
	case pb.Solver_SOLVER_LLM:
		sql, err := ep.env.cfg.LLMSolver.Solve(ctx, ep.task, dialogue(st))
		if err != nil {
			ep.fail("the solver failed: " + err.Error())
			return
		}
		if ep.priv {
			ep.out.Privileged.SolverSql = sql
		}
		if strings.TrimSpace(sql) == "" {
			// Not the environment's fault: a solution that is no SQL.
			st.Verified, st.Outcome, st.VerifierReason = true, false, "the solver wrote no SQL"
			st.Phase = pb.Phase_PHASE_DONE
			return
		}
		ep.verify(ctx, sql)
		return
	}
	if st.Reward == pb.RewardType_REWARD_TYPE_QUESTION_F1 {
		st.Phase = pb.Phase_PHASE_DONE // no SQL needed
	}
}

// verify runs the solution against the reference and ends the episode.
func (ep *episode) verify(ctx context.Context, sql string) {
	st, t := ep.st, ep.task
	v, err := sqlexec.Check(ctx, t.DB.Engine, t.Corpus.Cache, t.RefKey, t.Policy, sql, t.ReferenceSQL, ep.env.cfg.Limits)
	if err != nil {
		ep.fail("the verifier failed: " + err.Error())
		return
	}
	st.SolutionSql = sql
	st.Verified = true
	st.Outcome = v.Success
	st.VerifierReason = v.Reason
	if v.Err != nil {
		// The policy's own SQL failed: a failed solution, shown to the
		// policy because the database's message is about its own SQL.
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, "Your SQL failed: "+v.Err.Error())
		if st.VerifierReason == "" {
			st.VerifierReason = v.Err.Error()
		}
	}
	st.Phase = pb.Phase_PHASE_DONE
}

func (ep *episode) fail(reason string) {
	ep.st.Phase = pb.Phase_PHASE_DONE
	ep.st.Status = pb.EpisodeStatus_EPISODE_STATUS_ERROR
	ep.st.VerifierReason = reason
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, "The environment failed; this episode cannot be scored. Drop it, or retry the step.")
}

// finish fills the observation's counters and, when the episode is done,
// the reward.
func (ep *episode) finish() {
	st, o := ep.st, ep.out.Observation
	o.Phase = st.Phase
	o.QuestionBudget = st.Budget
	o.QuestionsAsked = int32(len(st.Questions))
	o.QuestionsRemaining = max(0, st.Budget-o.QuestionsAsked)
	ep.out.Status = st.Status
	if st.Phase != pb.Phase_PHASE_DONE {
		ep.out.Status = pb.EpisodeStatus_EPISODE_STATUS_RUNNING
		return
	}
	ep.out.Done = true
	if ep.priv {
		ep.out.Privileged.VerifierReason = st.VerifierReason
		ep.out.Privileged.EpisodeCredits = ep.credits(unionCredits(st))
	}
	if st.Status == pb.EpisodeStatus_EPISODE_STATUS_ERROR {
		return // never scored
	}
	r := reward.Score(rewardKind(st.Reward), Quantities(ep.task, st))
	ep.out.Reward = &pb.Reward{Type: st.Reward, Value: r.Value, Components: r.Components}
}

func rewardKind(t pb.RewardType) reward.Kind {
	if t == pb.RewardType_REWARD_TYPE_OUTCOME {
		return reward.Outcome
	}
	return reward.QuestionF1
}

// Quantities is the reward package's view of an episode state.
func Quantities(t *corpus.Task, st *statepb.EpisodeState) reward.Episode {
	e := reward.Episode{Counted: t.Counted(), Attempted: int(st.Attempted)}
	e.Credits = make([][]int, len(st.Questions))
	for i, q := range st.Questions {
		e.Credits[i] = maskToInts(q.GetCreditMask())
	}
	if st.Verified {
		ok := st.Outcome
		e.Outcome = &ok
	}
	return e
}

// dialogue is the episode's answered questions as the oracle and solvers
// read them.
func dialogue(st *statepb.EpisodeState) []oracle.Turn {
	d := make([]oracle.Turn, len(st.Questions))
	for i, aq := range st.Questions {
		d[i] = oracle.Turn{Question: aq.Question, Reply: aq.Reply, Credits: maskToInts(aq.GetCreditMask())}
	}
	return d
}

func (ep *episode) credits(mask uint64) []*pb.Credit {
	var out []*pb.Credit
	for _, k := range maskToInts(mask) {
		if k >= len(ep.task.Ambiguities) {
			continue // cannot happen: masks are built from validated indexes
		}
		a := ep.task.Ambiguities[k]
		out = append(out, &pb.Credit{Index: int32(k), Term: a.Term, Counted: a.Kind.Counted()})
	}
	return out
}

func unionCredits(st *statepb.EpisodeState) uint64 {
	var all uint64
	for _, q := range st.Questions {
		all |= q.GetCreditMask()
	}
	return all
}

// maskToInts lists the set bits of a credit mask in ascending order.
func maskToInts(mask uint64) []int {
	out := make([]int, 0, bits.OnesCount64(mask))
	for mask != 0 {
		i := bits.TrailingZeros64(mask)
		out = append(out, i)
		mask &^= 1 << i
	}
	return out
}

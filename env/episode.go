package env

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"time"

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
	budget   pb.Budget
}

// inlineQuestions is how many answered questions an ask keeps room for in
// its own allocation when the list must grow (most budgets are smaller).
const inlineQuestions = 4

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
	switch st.Protocol {
	case pb.Protocol_PROTOCOL_BIRD_C:
		return ep.applyBirdC(ctx, a)
	case pb.Protocol_PROTOCOL_BIRD_A:
		return ep.applyBirdA(ctx, a)
	case pb.Protocol_PROTOCOL_TIDE_F, pb.Protocol_PROTOCOL_TIDE_P:
		return ep.applyTide(ctx, a)
	}
	if u, ok := a.GetKind().(*pb.Action_Unparsed_); ok {
		return ep.applyUnparsed(ctx, u.Unparsed.GetText())
	}
	st.UnparsedInRow = 0
	switch k := a.GetKind().(type) {
	case *pb.Action_Ask_:
		if st.Phase != pb.Phase_PHASE_ASKING {
			return errorf(FailedPrecondition, ReasonWrongPhase, "action.ask", "asking has ended; only submit_sql is allowed now")
		}
		// An ask without text is an empty question (on the wire the two
		// cannot be told apart): the policy's fault, scored.
		return ep.ask(ctx, k.Ask.GetText())
	case *pb.Action_Stop_:
		if st.Phase != pb.Phase_PHASE_ASKING {
			return errorf(FailedPrecondition, ReasonWrongPhase, "action.stop", "asking has already ended; only submit_sql is allowed now")
		}
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_STOP, "")
		return ep.endAsking(ctx, false)
	case *pb.Action_SubmitSql_:
		sql := k.SubmitSql.GetSql()
		if st.Phase == pb.Phase_PHASE_ASKING {
			// STOP followed by this submission (PROTOCOL.md §2).
			st.Phase = pb.Phase_PHASE_SOLVING
			st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
		}
		if fault := policyFault(sql, MaxSQLBytes); fault != "" {
			// Not run: a failed solution, and the policy is told why.
			clean := BoundText(sql, MaxSQLBytes)
			ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_SQL, clean)
			ep.reject(clean, "the SQL "+fault)
			ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, "Your SQL was not run: it "+fault+".")
			return nil
		}
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_SQL, sql)
		return ep.verify(ctx, sql)
	default:
		if actionField(a) != 0 {
			return errorf(InvalidArgument, ReasonInvalidAction, "action", "tools are PROTOCOL_BIRD_A's; AMBITAB takes ask, stop, submit_sql or unparsed")
		}
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "no action is set (want ask, stop, submit_sql or unparsed)")
	}
}

// questionRefusal is the environment's refusal, in the oracle's place, of
// a question it does not put to the oracle (a turn of kind REFUSAL).
func questionRefusal(fault string) string {
	return "I can't answer that: the question " + fault + "."
}

func (ep *episode) ask(ctx context.Context, q string) error {
	st := ep.st
	st.Attempted++
	// The history keeps the question's bounded, valid UTF-8 form; a usable
	// question is its own bounded form.
	fault := policyFault(q, MaxQuestionBytes)
	if fault != "" {
		q = BoundText(q, MaxQuestionBytes)
	}
	ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_QUESTION, q)
	if st.Protocol == pb.Protocol_PROTOCOL_AMBITAB && int32(len(st.Questions)) >= st.Budget {
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, budgetNotice)
		return ep.endAsking(ctx, true)
	}
	var (
		reply   oracle.Reply
		rec     = ep.subtaskRecord()
		history []oracle.Turn
	)
	if fault != "" {
		// The policy's fault: answered without the oracle, with a refusal;
		// it counts as a question and credits nothing.
		reply = oracle.Reply{Text: questionRefusal(fault), Refused: true}
	} else {
		var err error
		history = ep.subtaskDialogue()
		reply, err = ep.env.cfg.Oracles[st.Oracle].AskWith(ctx, rec, history, q, oracle.AskOptions{StrictCredit: st.StrictCredit})
		if err != nil {
			// The oracle failed: the environment's fault. The episode ends in
			// ERROR, and the caller may retry the same token later.
			ep.fail("the oracle failed: " + err.Error())
			return nil
		}
	}
	var mask uint64
	for _, c := range reply.Credits {
		if c < 0 || c >= min(len(rec.Ambiguities), corpus.MaxAmbiguities) {
			ep.fail(fmt.Sprintf("the oracle credited ambiguity %d, which does not exist", c))
			return nil
		}
		mask |= 1 << c
	}
	// Whatever the oracle, its reply is cut to the reply limit here, so that
	// the state and the step stay within their bounds (limits.go).
	text := BoundText(reply.Text, MaxReplyBytes)
	// One allocation for the question, its mask and, while the history is
	// short, the grown list of questions (an append would allocate it).
	a := &struct {
		q    statepb.AnsweredQuestion
		mask uint64
		qs   [inlineQuestions]*statepb.AnsweredQuestion
	}{mask: mask}
	a.q.Question, a.q.Reply, a.q.CreditMask = q, text, &a.mask
	if n := len(st.Questions); n == cap(st.Questions) && n < inlineQuestions {
		st.Questions = append(a.qs[:0], st.Questions...)
	}
	st.Questions = append(st.Questions, &a.q)
	// A refusal (the oracle's or the environment's) is its own turn kind,
	// so that a policy never has to recognise one by its text.
	kind := pb.TurnKind_TURN_KIND_REPLY
	if reply.Refused {
		kind = pb.TurnKind_TURN_KIND_REFUSAL
	}
	ep.turn(pb.Role_ROLE_ORACLE, kind, text)
	if ep.priv {
		ep.out.Privileged.Credits = ep.credits(mask)
		ep.out.Privileged.OracleAction = BoundText(reply.Action.String(), MaxReplyBytes)
		if rec.HasChain() {
			if history == nil {
				history = ep.subtaskDialogue()
			}
			ep.out.Privileged.Routing = oracle.Routing(rec, history, reply.Credits)
		}
	}
	return nil
}

// endAsking moves the episode out of the asking phase. With the lookup
// solver the server solves at once; with the question-F1 reward and the
// client as solver no SQL is needed and the episode ends; otherwise it
// waits for the client's SQL. The error is verify's.
func (ep *episode) endAsking(ctx context.Context, truncated bool) error {
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
			ep.out.Privileged.SolverSql = BoundText(sql, MaxSQLBytes)
		}
		return ep.verify(ctx, sql)
	case pb.Solver_SOLVER_LLM:
		sql, err := ep.env.cfg.LLMSolver.Solve(ctx, ep.task, dialogue(st))
		if err != nil {
			ep.fail("the solver failed: " + err.Error())
			return nil
		}
		if ep.priv {
			ep.out.Privileged.SolverSql = BoundText(sql, MaxSQLBytes)
		}
		if strings.TrimSpace(sql) == "" {
			// Not the environment's fault: a solution that is no SQL.
			ep.reject("", "the solver wrote no SQL")
			return nil
		}
		if fault := policyFault(sql, MaxSQLBytes); fault != "" {
			// Held to the policy's rules: a failed solution.
			ep.reject(BoundText(sql, MaxSQLBytes), "the solver's SQL "+fault)
			return nil
		}
		return ep.verify(ctx, sql)
	}
	if st.Reward == pb.RewardType_REWARD_TYPE_QUESTION_F1 {
		st.Phase = pb.Phase_PHASE_DONE // no SQL needed
	}
	return nil
}

// verifierBusyDelay is the retry delay suggested when the verifier is
// saturated.
const verifierBusyDelay = time.Second

// verify runs the solution against the reference and ends the episode. A
// verifier that is saturated (no query slot within its wait bound) is an
// environment condition that says nothing about the SQL: the step fails
// with RESOURCE_EXHAUSTED / VERIFIER_BUSY and the same token can be
// retried; any other failure of the verifier ends the episode in ERROR.
func (ep *episode) verify(ctx context.Context, sql string) error {
	st, t := ep.st, ep.task
	v, err := t.Verify(ctx, sql, ep.env.cfg.Limits)
	if verr := ep.verifierError(err); verr != nil {
		return verr
	}
	if err != nil {
		ep.fail("the verifier failed: " + err.Error())
		return nil
	}
	// The solution as the state keeps it: a server solver's SQL (the lookup
	// solver's is a reference) may be longer than a policy's may be.
	st.SolutionSql = BoundText(sql, MaxSQLBytes)
	st.Verified = true
	st.Outcome = v.Success
	st.VerifierReason = BoundText(v.Reason, MaxNoticeBytes)
	if v.Err != nil {
		// The policy's own SQL failed: a failed solution, shown to the
		// policy because the database's message is about its own SQL.
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, BoundText("Your SQL failed: "+v.Err.Error(), MaxNoticeBytes))
		if st.VerifierReason == "" {
			st.VerifierReason = BoundText(v.Err.Error(), MaxNoticeBytes)
		}
	}
	st.Phase = pb.Phase_PHASE_DONE
	return nil
}

// verifierError is the step's error for a verifier that is saturated
// (no query slot within its wait bound): an environment condition that
// says nothing about the SQL, so the step fails with RESOURCE_EXHAUSTED /
// VERIFIER_BUSY and the same token can be retried. Nil for any other err.
func (ep *episode) verifierError(err error) error {
	var se *sqlexec.Error
	if errors.As(err, &se) && se.Kind == sqlexec.KindBusy {
		ep.env.busy.Add(1)
		return &Error{Code: ResourceExhausted, Reason: ReasonVerifierBusy, Msg: se.Msg, Retryable: true, RetryDelay: verifierBusyDelay}
	}
	return nil
}

// reject ends the episode with a failed solution that was not run: SQL
// that is empty, not valid UTF-8 or too long (sql is its bounded form).
func (ep *episode) reject(sql, reason string) {
	st := ep.st
	st.SolutionSql = sql
	st.Verified, st.Outcome = true, false
	st.VerifierReason = BoundText(reason, MaxNoticeBytes)
	st.Phase = pb.Phase_PHASE_DONE
}

func (ep *episode) fail(reason string) {
	ep.st.Phase = pb.Phase_PHASE_DONE
	ep.st.Status = pb.EpisodeStatus_EPISODE_STATUS_ERROR
	ep.st.VerifierReason = BoundText(reason, MaxNoticeBytes)
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, "The environment failed; this episode cannot be scored. Drop it, or retry the step.")
}

// finish fills the observation's counters and, when the episode is done,
// the reward.
func (ep *episode) finish() {
	st, o := ep.st, ep.out.Observation
	if st.Protocol != pb.Protocol_PROTOCOL_AMBITAB && st.Phase != pb.Phase_PHASE_DONE {
		st.Phase = pb.Phase_PHASE_ASKING
		if sqlRequired(st) {
			st.Phase = pb.Phase_PHASE_SOLVING
		}
	}
	observe(o, st, &ep.budget)
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
	ep.out.Reward = score(ep.task, st) // nil for ERROR: never scored
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

// unionCredits is every ambiguity the policy's questions were credited
// with (TIDE_P's pre-filled question is not the policy's).
func unionCredits(st *statepb.EpisodeState) uint64 {
	var all uint64
	for _, q := range st.Questions[min(len(st.Questions), int(st.Prefilled)):] {
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

package env

import (
	"context"
	"strings"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/reward"
)

// AMBITAB (PROTOCOL.md §2) is AmbiTab's ask-then-solve protocol: the
// policy asks at most B = m + C questions (m counted ambiguities, C extra
// questions; a zero-ambiguity record has its own budget), stops, and the
// solution is then written by the client (submit_sql) or by a server
// solver (lookup or LLM), verified once, and the episode ends. Its reward
// is question-F1 (no SQL needed with the client as solver) or the
// outcome. Output the client could not parse gets a notice the first time
// in a row and is a stop (or, where SQL is awaited, a failed solution) the
// second.
type ambiTab struct{}

// Defaults of AMBITAB's options (PROTOCOL.md §2). (The limits are in
// limits.go.)
const (
	DefaultExtraQuestions      = 2
	DefaultZeroAmbiguityBudget = 0
)

// Texts of AMBITAB's environment turns.
const (
	// budgetNotice is shown when an ask comes after the question budget is
	// spent: the question is not answered and asking ends.
	budgetNotice = "The question budget is spent: this question was not answered, and asking has ended."
	// unparsedNotice answers the first unparsed output in a row.
	unparsedNotice = "Your output could not be read as an action: ask one question, stop, or submit SQL."
	// unparsedNoSQL ends an episode whose SQL could not be read twice.
	unparsedNoSQL = "No SQL could be read from your output: the solution fails."
)

func (ambiTab) describe() *pb.ProtocolInfo {
	return &pb.ProtocolInfo{
		Protocol: pb.Protocol_PROTOCOL_AMBITAB, Actions: actionList(askerActions),
		Budget:          "m + C questions (m: the task's counted ambiguities; C: extra_questions); 0 for a zero-ambiguity control",
		DefaultPatience: DefaultExtraQuestions, MaxPatience: MaxExtraQuestions,
		Draws: "every task",
	}
}

// draws: AMBITAB plays every task.
func (ambiTab) draws(*corpus.Task) bool { return true }

func (ambiTab) noTasks(c *corpus.Corpus, split string) error {
	return errorf(NotFound, ReasonNoTasks, "split", "corpus %q has no task in split %q", c.Name, split)
}

// resolve checks AMBITAB's options and sets the question budget.
func (ambiTab) resolve(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState, _ *history) error {
	if o.GetReward() == pb.RewardType_REWARD_TYPE_BIRD_INTERACT {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.reward", "REWARD_TYPE_BIRD_INTERACT is the reward of PROTOCOL_BIRD_C; AMBITAB takes question-F1 or outcome")
	}
	if o != nil && o.Patience != nil {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.patience", "patience applies to PROTOCOL_BIRD_C only (AMBITAB's budget is m + extra_questions)")
	}
	if err := rejectBirdOptions(o, pb.Protocol_PROTOCOL_AMBITAB); err != nil {
		return err
	}
	extra, zero := int32(DefaultExtraQuestions), int32(DefaultZeroAmbiguityBudget)
	if o != nil && o.ExtraQuestions != nil {
		extra = o.GetExtraQuestions()
		if extra < 0 || extra > MaxExtraQuestions {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.extra_questions", "%d is outside 0..%d", extra, MaxExtraQuestions)
		}
	}
	if o != nil && o.ZeroAmbiguityBudget != nil {
		zero = o.GetZeroAmbiguityBudget()
		if zero < 0 || zero > MaxExtraQuestions {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.zero_ambiguity_budget", "%d is outside 0..%d", zero, MaxExtraQuestions)
		}
	}
	if m := int32(len(t.Counted())); m > 0 {
		st.Budget = m + extra
	} else {
		st.Budget = zero
	}
	st.Rules = &statepb.EpisodeState_Ambitab{Ambitab: &statepb.AmbiTabState{}}
	return nil
}

func (ambiTab) holds(st *statepb.EpisodeState) bool { return st.GetAmbitab() != nil }

// apply applies one action under AMBITAB.
func (ambiTab) apply(ctx context.Context, ep *episode, a *pb.Action) error {
	st, as := ep.st, ep.st.GetAmbitab()
	if u, ok := a.GetKind().(*pb.Action_Unparsed_); ok {
		return applyUnparsed(ctx, ep, as, u.Unparsed.GetText())
	}
	as.UnparsedInRow = 0
	switch k := a.GetKind().(type) {
	case *pb.Action_Ask_:
		if st.Phase != pb.Phase_PHASE_ASKING {
			return errorf(FailedPrecondition, ReasonWrongPhase, "action.ask", "asking has ended; only submit_sql is allowed now")
		}
		// An ask without text is an empty question (on the wire the two
		// cannot be told apart): the policy's fault, scored.
		q, fault := ep.pose(k.Ask.GetText())
		if st.Answered >= st.Budget {
			ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, budgetNotice)
			return endAsking(ctx, ep, true)
		}
		return ep.answer(ctx, q, fault, ep.task.Record, 0)
	case *pb.Action_Stop_:
		if st.Phase != pb.Phase_PHASE_ASKING {
			return errorf(FailedPrecondition, ReasonWrongPhase, "action.stop", "asking has already ended; only submit_sql is allowed now")
		}
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_STOP, "")
		return endAsking(ctx, ep, false)
	case *pb.Action_SubmitSql_:
		return submitAmbiTab(ctx, ep, k.SubmitSql.GetSql())
	case nil:
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "no action is set (want ask, stop, submit_sql or unparsed)")
	default:
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "tools are PROTOCOL_BIRD_A's; AMBITAB takes ask, stop, submit_sql or unparsed")
	}
}

// submitAmbiTab verifies the client's SQL; while asking, the submission is
// a stop followed by the SQL (PROTOCOL.md §2).
func submitAmbiTab(ctx context.Context, ep *episode, sql string) error {
	st := ep.st
	if st.Phase == pb.Phase_PHASE_ASKING {
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
	return verify(ctx, ep, sql)
}

// applyUnparsed applies AMBITAB's rule for output the client could not
// parse (AmbiTab's asker: a corrective turn, then the fallback): the first
// in a row gets a notice; the second ends asking as a STOP, or, where SQL
// is awaited, fails the solution.
func applyUnparsed(ctx context.Context, ep *episode, as *statepb.AmbiTabState, text string) error {
	ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_UNPARSED, BoundText(text, MaxQuestionBytes))
	as.UnparsedInRow++
	if as.UnparsedInRow < 2 {
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, unparsedNotice)
		return nil
	}
	as.UnparsedInRow = 0
	if ep.st.Phase == pb.Phase_PHASE_ASKING {
		return endAsking(ctx, ep, false)
	}
	ep.reject("", "no SQL could be read from the policy's output")
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, unparsedNoSQL)
	return nil
}

// endAsking moves the episode out of the asking phase. With the lookup
// solver the server solves at once; with the question-F1 reward and the
// client as solver no SQL is needed and the episode ends; otherwise it
// waits for the client's SQL. The error is verify's.
func endAsking(ctx context.Context, ep *episode, truncated bool) error {
	st := ep.st
	st.Phase = pb.Phase_PHASE_SOLVING
	st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	if truncated {
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
	}
	switch st.Solver {
	case pb.Solver_SOLVER_LOOKUP:
		sql, err := ep.lookup()
		if err != nil {
			return err // the token's history was altered
		}
		if ep.priv {
			ep.out.Privileged.SolverSql = BoundText(sql, MaxSQLBytes)
		}
		return verify(ctx, ep, sql)
	case pb.Solver_SOLVER_LLM:
		return solveWithLLM(ctx, ep)
	}
	if st.Reward == pb.RewardType_REWARD_TYPE_QUESTION_F1 {
		st.Phase = pb.Phase_PHASE_DONE // no SQL needed
	}
	return nil
}

// solveWithLLM has the LLM solver write the SQL from the dialogue and
// verifies it.
func solveWithLLM(ctx context.Context, ep *episode) error {
	d, err := ep.dialogue(0)
	if err != nil {
		return err // the token's history was altered
	}
	sql, why, err := solve(ctx, ep.env.cfg.LLMSolver, ep.task, d)
	if err != nil {
		ep.fail(failedSolver, "the solver failed: "+err.Error())
		return nil
	}
	if ep.priv {
		ep.out.Privileged.SolverSql = BoundText(sql, MaxSQLBytes)
	}
	if strings.TrimSpace(sql) == "" {
		// Not the environment's fault: a solution that is no SQL.
		ep.noSQL(why)
		return nil
	}
	if fault := policyFault(sql, MaxSQLBytes); fault != "" {
		// Held to the policy's rules: a failed solution.
		ep.reject(BoundText(sql, MaxSQLBytes), "the solver's SQL "+fault)
		return nil
	}
	return verify(ctx, ep, sql)
}

// verify runs the solution against the reference and ends the episode. A
// verifier that is saturated (no query slot within its wait bound) is an
// environment condition that says nothing about the SQL: the step fails
// with RESOURCE_EXHAUSTED / VERIFIER_BUSY and the same token can be
// retried; any other failure of the verifier ends the episode in ERROR.
func verify(ctx context.Context, ep *episode, sql string) error {
	v, err := ep.task.Verify(ctx, sql, ep.env.cfg.Limits, ep.verifyOptions())
	if verr := ep.verifierError(err); verr != nil {
		return verr
	}
	if err != nil {
		ep.fail(failedDatabase, "the verifier failed: "+err.Error())
		return nil
	}
	if v.Err != nil {
		// The policy's own SQL failed: a failed solution, shown to the
		// policy because the database's message is about its own SQL.
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, BoundText("Your SQL failed: "+v.Err.Error(), MaxNoticeBytes))
	}
	ep.recordVerdict(sql, v)
	ep.st.Phase = pb.Phase_PHASE_DONE
	return nil
}

// observe: AMBITAB's budget is its questions.
func (ambiTab) observe(o *pb.Observation, st *statepb.EpisodeState, b *pb.Budget) {
	b.Unit, b.TotalMilli, b.UsedMilli = pb.BudgetUnit_BUDGET_UNIT_QUESTIONS, int64(st.Budget)*1000, int64(st.Answered)*1000
	o.QuestionsRemaining = max(0, st.Budget-o.QuestionsAsked)
}

// score is the question-F1 or outcome reward (reward.Score).
func (ambiTab) score(t *corpus.Task, st *statepb.EpisodeState) *pb.Reward {
	r := reward.Score(rewardKind(st.Reward), Quantities(t, st))
	return &pb.Reward{Type: st.Reward, Value: r.Value, Components: r.Components}
}

// stateBound bounds AmbiTabState as EpisodeState's field 44.
func (ambiTab) stateBound() int {
	return bytesField(44, varintField(1)) // unparsed in a row
}

func rewardKind(t pb.RewardType) reward.Kind {
	if t == pb.RewardType_REWARD_TYPE_OUTCOME {
		return reward.Outcome
	}
	return reward.QuestionF1
}

// Quantities is the reward package's view of an AMBITAB episode state.
func Quantities(t *corpus.Task, st *statepb.EpisodeState) reward.Episode {
	e := reward.Episode{Counted: t.Counted(), Attempted: int(st.Attempted)}
	e.Credits = make([][]int, len(st.CreditMasks))
	for i, m := range st.CreditMasks {
		e.Credits[i] = maskToInts(m)
	}
	if st.Verified {
		ok := st.Outcome
		e.Outcome = &ok
	}
	return e
}

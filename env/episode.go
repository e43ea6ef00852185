package env

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"time"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

// The shared moves of every protocol: an episode's step in progress, its
// turns, an ask, a verification, a rejection, a failure, and the
// observation, credits and reward of the finished step. What differs by
// protocol is in its rules value (protocol.go).

// episode is one Step in progress: the decoded state, its task, the
// protocol's rules and the response being built.
type episode struct {
	env   *Env
	st    *statepb.EpisodeState
	hist  *history // the dialogue's texts (history.go)
	task  *corpus.Task
	rules rules
	priv  bool
	out   *pb.StepResponse

	// Storage for st (when the step decoded it), out, its observation and
	// up to maxStepTurns turns: one allocation per step.
	state    decoded
	resp     pb.StepResponse
	obs      pb.Observation
	turns    [maxStepTurns]pb.Turn
	turnPtrs [maxStepTurns]*pb.Turn
	budget   pb.Budget
}

// maxStepTurns is the most turns one step adds (a submission while asking:
// SQL, feedback, and a notice if verification fails).
const maxStepTurns = 3

// verifierBusyDelay is the retry delay suggested when the verifier is
// saturated.
const verifierBusyDelay = time.Second

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

// apply applies one action under the episode's protocol.
func (ep *episode) apply(ctx context.Context, a *pb.Action) error {
	if st := ep.st; st.Phase == pb.Phase_PHASE_DONE {
		return errorf(FailedPrecondition, ReasonEpisodeDone, "action", "the episode is done (%s); reset a new one", st.Status)
	}
	return ep.rules.apply(ctx, ep, a)
}

// questionRefusal is the environment's refusal, in the oracle's place, of
// a question it does not put to the oracle (a turn of kind REFUSAL).
func questionRefusal(fault string) string {
	return "I can't answer that: the question " + fault + "."
}

// ask puts the policy's question to the oracle (pose, then answer): rec is
// the record the oracle answers about, and from the first question of the
// dialogue it reads (BIRD's sub-task 2 reads its own questions only).
func (ep *episode) ask(ctx context.Context, text string, rec *corpus.Record, from int) error {
	q, fault := ep.pose(text)
	return ep.answer(ctx, q, fault, rec, from)
}

// pose counts the policy's question as attempted and adds its turn. The
// history keeps the question's bounded, valid UTF-8 form (a usable question
// is its own bounded form): q is that form, and fault says why the
// question cannot be put to the oracle ("" when it can).
func (ep *episode) pose(text string) (q, fault string) {
	ep.st.Attempted++
	q, fault = text, policyFault(text, MaxQuestionBytes)
	if fault != "" {
		q = BoundText(text, MaxQuestionBytes)
	}
	ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_QUESTION, q)
	return q, fault
}

// answer has the oracle answer the posed question q (or refuses it, for a
// fault) and records the answered question with its credits.
func (ep *episode) answer(ctx context.Context, q, fault string, rec *corpus.Record, from int) error {
	st := ep.st
	var (
		reply   oracle.Reply
		history []oracle.Turn
	)
	if fault != "" {
		// The policy's fault: answered without the oracle, with a refusal;
		// it counts as a question and credits nothing.
		reply = oracle.Reply{Text: questionRefusal(fault), Refused: true}
	} else {
		var err error
		if history, err = ep.oracleDialogue(rec, from); err != nil {
			return err
		}
		reply, err = ep.env.cfg.Oracles[st.Oracle].AskWith(ctx, rec, history, q, oracle.AskOptions{StrictCredit: st.StrictCredit, Bird: st.GetBird() != nil})
		if err != nil {
			// The oracle failed: the environment's fault. The episode ends in
			// ERROR, and the caller may retry the same token later.
			ep.fail(failedOracle, "the oracle failed: "+err.Error())
			return nil
		}
	}
	var mask uint64
	for _, c := range reply.Credits {
		if c < 0 || c >= min(len(rec.Ambiguities), corpus.MaxAmbiguities) {
			ep.fail(failedOracle, fmt.Sprintf("the oracle credited ambiguity %d, which does not exist", c))
			return nil
		}
		mask |= 1 << c
	}
	// Whatever the oracle, its reply is cut to the reply limit here, so that
	// the state and the step stay within their bounds (limits.go).
	text := BoundText(reply.Text, MaxReplyBytes)
	ep.hist.add(st, q, text, mask)
	// A refusal (the oracle's or the environment's) is its own turn kind,
	// so that a policy never has to recognise one by its text.
	kind := pb.TurnKind_TURN_KIND_REPLY
	if reply.Refused {
		kind = pb.TurnKind_TURN_KIND_REFUSAL
	}
	ep.turn(pb.Role_ROLE_ORACLE, kind, text)
	if ep.priv {
		ep.out.Privileged.Credits = ep.credits(mask)
		// PrivilegedAction: output the matcher could not read is flagged,
		// never passed off as the model's unanswerable().
		ep.out.Privileged.OracleAction = BoundText(reply.PrivilegedAction(), MaxReplyBytes)
		if rec.HasChain() {
			if history == nil {
				history = creditTurns(st.CreditMasks, from)
			}
			ep.out.Privileged.Routing = oracle.Routing(rec, history, reply.Credits)
		}
	}
	return nil
}

// checker verifies SQL against the current (sub-)task's reference: a
// corpus.Task method, or the follow-up's verification on the state phase
// 1 left.
type checker func(ctx context.Context, sql string, lim sqlexec.Limits) (sqlexec.Verdict, error)

// verifyOptions are the episode's sealed choices that change a
// verification (EpisodeOptions.comparison; the follow-up's state is the
// BIRD rules' to add).
func (ep *episode) verifyOptions() corpus.VerifyOptions {
	return corpus.VerifyOptions{Harness: ep.st.Comparison == pb.Comparison_COMPARISON_HARNESS}
}

// verifySubmission verifies a submission of a protocol where the policy
// submits SQL step by step (BIRD_C, BIRD_A, TIDE) with check, the
// protocol's verification for the current sub-task, and records it in
// the state: the SQL turn, the solution and the verdict. ok is false when
// the step ends here: err is the step's error (a busy verifier: nothing of
// the step is kept, the state is not sealed), or the environment failed
// (ERROR). Text the policy cannot submit is a failed verdict whose message
// says why, as a database error would.
func (ep *episode) verifySubmission(ctx context.Context, sql string, check checker) (v sqlexec.Verdict, ok bool, err error) {
	if fault := policyFault(sql, MaxSQLBytes); fault != "" {
		sql = BoundText(sql, MaxSQLBytes)
		v = sqlexec.Verdict{Reason: "the SQL " + fault, Err: &sqlexec.Error{Kind: sqlexec.KindSyntax, Msg: "the SQL was not run: it " + fault}}
	} else {
		var verr error
		v, verr = check(ctx, sql, ep.env.cfg.Limits)
		if verr != nil {
			if busy := ep.verifierError(verr); busy != nil {
				return v, false, busy
			}
			ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_SQL, sql)
			ep.fail(failedDatabase, "the verifier failed: "+verr.Error())
			return v, false, nil
		}
	}
	ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_SQL, sql)
	ep.recordVerdict(sql, v)
	return v, true, nil
}

// recordVerdict keeps a verified solution and its verdict in the state:
// the SQL as the state keeps it (a server solver's SQL, a reference for the
// lookup solver, may be longer than a policy's may be), the outcome and
// the verifier's reason (the database's error when it gives none).
func (ep *episode) recordVerdict(sql string, v sqlexec.Verdict) {
	st := ep.st
	st.SolutionSql = BoundText(sql, MaxSQLBytes)
	st.Verified, st.Outcome = true, v.Success
	st.VerifierReason = BoundText(v.Reason, MaxNoticeBytes)
	if v.Err != nil && st.VerifierReason == "" {
		st.VerifierReason = BoundText(v.Err.Error(), MaxNoticeBytes)
	}
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

// failedPart is the part of the environment whose failure ended an
// episode in ERROR, as the public notice names it.
type failedPart int

// The parts that fail.
const (
	// failedOracle: the oracle's model endpoint (after its retries), or
	// its model's context (a record too long for it).
	failedOracle failedPart = iota + 1
	// failedSolver: the LLM solver's model endpoint.
	failedSolver
	// failedDatabase: the database, where the verifier runs SQL.
	failedDatabase
)

// name is how the public notice names the part: no more than which part
// it was, never the cause (which may quote the reference or the endpoint's
// answer) — that is in the privileged verifier_reason and the server's log.
func (p failedPart) name() string {
	switch p {
	case failedOracle:
		return "the oracle endpoint"
	case failedSolver:
		return "the solver endpoint"
	case failedDatabase:
		return "the database"
	}
	return "a part of the environment"
}

// failureNotice is the public notice of an episode that ended in ERROR
// because part failed. It says "cannot be scored", which clients read.
func failureNotice(part failedPart) string {
	return "The environment failed (" + part.name() + "); this episode cannot be scored. Drop it, or retry the step."
}

// solve has solver write the SQL, with why it wrote none when sql is ""
// and the solver says (explainedSolver).
func solve(ctx context.Context, solver Solver, t *corpus.Task, d []oracle.Turn) (sql, why string, err error) {
	if es, ok := solver.(explainedSolver); ok {
		return es.solveExplained(ctx, t, d)
	}
	sql, err = solver.Solve(ctx, t, d)
	return sql, "", err
}

// noSQL ends the episode with the server's solver's failed solution: it
// wrote no SQL (why, when known, says why). A feedback turn says so, so
// that the transcript shows why the episode failed; the verifier reason
// (privileged) is "the solver wrote no SQL[: why]".
func (ep *episode) noSQL(why string) {
	reason, notice := "the solver wrote no SQL", "The solver wrote no SQL"
	if why != "" {
		reason += ": " + why
		notice += " (" + why + ")"
	}
	ep.reject("", reason)
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, notice+"; the episode is scored as a failed solution.")
}

// fail ends the episode in ERROR: the environment failed (part: an
// oracle's or a solver's model endpoint, a database), and the episode
// cannot be scored. reason, the cause, is kept as the privileged verifier
// reason (which the server logs); the public notice names only the part.
func (ep *episode) fail(part failedPart, reason string) {
	ep.st.Phase = pb.Phase_PHASE_DONE
	ep.st.Status = pb.EpisodeStatus_EPISODE_STATUS_ERROR
	ep.st.VerifierReason = BoundText(reason, MaxNoticeBytes)
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, failureNotice(part))
}

// finish fills the observation's counters and, when the episode is done,
// the reward.
func (ep *episode) finish() {
	st, o := ep.st, ep.out.Observation
	observe(o, st, ep.rules, &ep.budget)
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
	ep.out.Reward = score(ep.rules, ep.task, st) // nil for ERROR: never scored
}

// observe fills an observation's counters from st: the phase, the
// question counters and the protocol here, the rest by the protocol's
// rules; the budget goes into b (the step's own storage: no allocation on
// the hot path).
func observe(o *pb.Observation, st *statepb.EpisodeState, r rules, b *pb.Budget) {
	o.Phase = st.Phase
	o.QuestionBudget = st.Budget
	// Pre-filled questions are not the policy's.
	o.QuestionsAsked = st.Answered - st.Prefilled
	o.Protocol = st.Protocol
	o.Subtask = 1
	r.observe(o, st, b)
	b.RemainingMilli = max(0, b.TotalMilli-b.UsedMilli)
	o.Budget = b
}

// score is a finished episode's reward (nil for ERROR, and while it runs).
func score(r rules, t *corpus.Task, st *statepb.EpisodeState) *pb.Reward {
	if st.Phase != pb.Phase_PHASE_DONE || st.Status == pb.EpisodeStatus_EPISODE_STATUS_ERROR {
		return nil
	}
	return r.score(t, st)
}

// dialogue is the episode's answered questions from index from on, as the
// oracle and solvers read them: their texts (opening the token's history)
// and credits. An error is the token's (its history was altered).
func (ep *episode) dialogue(from int) ([]oracle.Turn, error) {
	qs, err := ep.hist.questions(ep.env.cfg.Sealer, ep.st)
	if err != nil {
		return nil, err
	}
	return turns(qs, ep.st.CreditMasks, from), nil
}

// oracleDialogue is the dialogue from index from on as the episode's
// oracle reads it: an oracle that reads of it only the credits, and only
// on a record with a chain (oracle.Oracle.ReadsHistoryCreditsOnly), gets
// those (nil without a chain), without the history's texts being opened:
// its steps cost the same at any turn.
func (ep *episode) oracleDialogue(rec *corpus.Record, from int) ([]oracle.Turn, error) {
	if c, ok := ep.env.cfg.Oracles[ep.st.Oracle].(interface{ ReadsHistoryCreditsOnly() bool }); ok && c.ReadsHistoryCreditsOnly() {
		if !rec.HasChain() {
			return nil, nil
		}
		return creditTurns(ep.st.CreditMasks, from), nil
	}
	return ep.dialogue(from)
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

// policyMasks are the credit masks of the questions the policy asked: all
// but the pre-filled ones.
func policyMasks(st *statepb.EpisodeState) []uint64 {
	return st.CreditMasks[min(len(st.CreditMasks), max(0, int(st.Prefilled))):]
}

// unionCredits is every ambiguity the policy's questions were credited
// with.
func unionCredits(st *statepb.EpisodeState) uint64 {
	var all uint64
	for _, m := range policyMasks(st) {
		all |= m
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

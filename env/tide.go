package env

import (
	"context"
	"sync"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/reward"
	"avtgym/sqlcommit"
)

// TIDE_F and TIDE_P (PROTOCOL.md §9, §11) are TIDE-Bench's harness, as its
// format README states it ("Running an episode"):
//
//   - Each agent turn is one question (ask) or one SQL (submit_sql); an
//     unparsed output is a turn too. At most TideTurns turns: the turn
//     that reaches the limit without the episode's last SQL ends it
//     TRUNCATED.
//   - Query results are never shown: a submission adds no feedback turn,
//     whatever its verdict.
//   - On a task with a drift, the drift utterance follows the first SQL
//     as a DRIFT turn, whatever that SQL was; the first SQL is verified
//     against the reference, the second against the post-drift reference,
//     and the episode ends at the second. Without a drift it ends at the
//     first.
//   - The first unparsed output in a row is answered with a notice; the
//     second is an abstention that ends the episode (TERMINATED, unsolved).
//     A stop is an abstention too.
//   - Questions are answered by the episode's oracle under the chain rule
//     (oracle.ChainMatch: L2 is credited only once L1 has been), and each
//     question's routing is reported in the privileged channel.
//   - TIDE_P pre-fills the history at reset with the annotated question of
//     the chain's first layer (ROLE_PREFILLED) and its resolution; the
//     layer counts as resolved for the oracle, but the question is not the
//     policy's: it is not counted as asked or identified.
//   - Reward REWARD_TYPE_OUTCOME: 1 when every SQL matched (TIDE's DEA),
//     with components sql1, sql2, drift_recognized (the policy's own SQLs
//     satisfy S(y1) ⊄ S(y2), sqlcommit), l1_identified, l2_identified and
//     asked.
const (
	// TideTurns is TIDE's agent-turn limit.
	TideTurns = 20
)

// Texts of TIDE's environment turns.
const (
	// tideUnparsed answers the first unparsed output in a row.
	tideUnparsed = "Your output could not be read: reply with one clarification question or one SQL query."
	// tideAbstain ends an episode on a second unparsed output in a row.
	tideAbstain = "Your output could not be read again: this counts as an abstention, and the episode ends."
	// tideStop ends an episode on a stop.
	tideStop = "Stopping without SQL counts as an abstention: the episode ends."
	// tideLimit ends an episode at the turn limit.
	tideLimit = "The turn limit is reached: the episode ends."
)

// The reward components of the TIDE protocols.
const (
	ComponentSQL1            = "sql1"
	ComponentSQL2            = "sql2"
	ComponentDriftRecognized = "drift_recognized"
	ComponentL1Identified    = "l1_identified"
	ComponentL2Identified    = "l2_identified"
	ComponentAsked           = "asked"
)

// isTide reports whether p is TIDE_F or TIDE_P.
func isTide(p pb.Protocol) bool {
	return p == pb.Protocol_PROTOCOL_TIDE_F || p == pb.Protocol_PROTOCOL_TIDE_P
}

// Servable reports whether protocol p serves task t, and if not why (for
// the reset's INVALID_OPTION and for choosing a task at random).
func tideServes(t *corpus.Task, p pb.Protocol) string {
	if t.Stateful() || t.FollowUp != nil {
		return "TIDE's protocols serve read-only tasks without a follow-up"
	}
	if p == pb.Protocol_PROTOCOL_TIDE_P && primeLayer(t) < 0 {
		return "PROTOCOL_TIDE_P needs a chain (an ambiguity another depends on) whose first layer has an annotated question: TIDE's chain_only and joint samples"
	}
	return ""
}

// primeLayer is the ambiguity TIDE_P pre-fills: the first layer-1
// ambiguity that another depends on and that has an annotated question;
// -1 when there is none.
func primeLayer(t *corpus.Task) int {
	for i, a := range t.Ambiguities {
		if a.DependsOn != "" || a.Question == "" {
			continue
		}
		for _, b := range t.Ambiguities {
			if b.DependsOn == a.Term {
				return i
			}
		}
	}
	return -1
}

// resolveTide checks the options of a TIDE reset on t and sets up st.
func resolveTide(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState) error {
	p := st.Protocol
	if r := o.GetReward(); r != pb.RewardType_REWARD_TYPE_UNSPECIFIED && r != pb.RewardType_REWARD_TYPE_OUTCOME {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.reward", "%s's reward is REWARD_TYPE_OUTCOME (TIDE's DEA, with components); leave reward unset", p)
	}
	if s := o.GetSolver(); s != pb.Solver_SOLVER_UNSPECIFIED && s != pb.Solver_SOLVER_CLIENT {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.solver", "under %s the policy writes the SQL: leave solver unset (or SOLVER_CLIENT)", p)
	}
	if o.ExtraQuestions != nil || o.ZeroAmbiguityBudget != nil || o.Patience != nil {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.extra_questions", "extra_questions, zero_ambiguity_budget and patience do not apply to %s: its budget is %d agent turns", p, TideTurns)
	}
	if why := tideServes(t, p); why != "" {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.protocol", "task %q: %s", t.ID, why)
	}
	st.Reward, st.Solver = pb.RewardType_REWARD_TYPE_OUTCOME, pb.Solver_SOLVER_CLIENT
	st.TurnsTotal = TideTurns
	// The question budget keeps one turn for an SQL, whether or not a
	// drift will ask for a second: the observation must not tell which.
	st.Budget = TideTurns - 1
	if p == pb.Protocol_PROTOCOL_TIDE_P {
		i := primeLayer(t)
		a := t.Ambiguities[i]
		var mask uint64
		for j, b := range t.Ambiguities {
			if b.Term == a.Term && j < corpus.MaxAmbiguities {
				mask |= 1 << j
			}
		}
		st.Questions = []*statepb.AnsweredQuestion{{
			Question:   BoundText(a.Question, MaxQuestionBytes),
			Reply:      BoundText(a.Resolution, MaxReplyBytes),
			CreditMask: &mask,
		}}
		st.Prefilled = 1
	}
	return nil
}

// tidePrefill is the turns TIDE_P's reset shows after the request: the
// pre-filled question (ROLE_PREFILLED) and its answer.
func tidePrefill(st *statepb.EpisodeState) []*pb.Turn {
	var out []*pb.Turn
	for _, q := range st.Questions[:st.Prefilled] {
		out = append(out,
			&pb.Turn{Role: pb.Role_ROLE_PREFILLED, Kind: pb.TurnKind_TURN_KIND_QUESTION, Text: q.Question},
			&pb.Turn{Role: pb.Role_ROLE_ORACLE, Kind: pb.TurnKind_TURN_KIND_REPLY, Text: q.Reply})
	}
	return out
}

// tideInfo is the TIDE labels of a task for the reset's privileged field
// (nil for a task without any).
func tideInfo(t *corpus.Task) *pb.TideInfo {
	if t.SampleType == "" && t.Drift == nil && !t.HasChain() {
		return nil
	}
	ti := &pb.TideInfo{Cluster: t.ClusterID(), SampleType: t.SampleType}
	if d := t.Drift; d != nil {
		ti.DriftUtterance, ti.PostDriftReferenceSql = d.Utterance, d.Reference.SQL
		ti.DriftSubtype, ti.IntentSubtype = d.Subtype, d.IntentSubtype
	}
	for _, l := range t.ChainLayers() {
		ti.ChainLayers = append(ti.ChainLayers, int32(l))
	}
	return ti
}

// applyTide applies one action under TIDE_F or TIDE_P.
func (ep *episode) applyTide(ctx context.Context, a *pb.Action) error {
	st := ep.st
	switch k := a.GetKind().(type) {
	case *pb.Action_Ask_:
		st.UnparsedInRow = 0
		st.TurnsUsed++
		if err := ep.ask(ctx, k.Ask.GetText()); err != nil {
			return err
		}
	case *pb.Action_SubmitSql_:
		st.UnparsedInRow = 0
		st.TurnsUsed++
		if err := ep.submitTide(ctx, k.SubmitSql.GetSql()); err != nil {
			return err
		}
	case *pb.Action_Unparsed_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_UNPARSED, BoundText(k.Unparsed.GetText(), MaxQuestionBytes))
		st.TurnsUsed++
		st.UnparsedInRow++
		if st.UnparsedInRow >= 2 {
			ep.abstain(tideAbstain)
			return nil
		}
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, tideUnparsed)
	case *pb.Action_Stop_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_STOP, "")
		ep.abstain(tideStop)
		return nil
	default:
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "%s takes ask, submit_sql, stop or unparsed (tools are PROTOCOL_BIRD_A's)", st.Protocol)
	}
	if st.Phase != pb.Phase_PHASE_DONE && st.TurnsUsed >= st.TurnsTotal {
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, tideLimit)
		st.Phase = pb.Phase_PHASE_DONE
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
	}
	return nil
}

// abstain ends a TIDE episode unsolved: the SQLs not yet submitted fail.
func (ep *episode) abstain(notice string) {
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, notice)
	ep.st.Phase = pb.Phase_PHASE_DONE
	ep.st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
}

// submitTide verifies one TIDE submission: the first against the
// reference (then, with a drift, the drift turn follows), the second
// against the post-drift reference. No result or feedback is shown.
func (ep *episode) submitTide(ctx context.Context, sql string) error {
	st, t := ep.st, ep.task
	v, ok, err := ep.verifySubmission(ctx, sql)
	if !ok {
		return err
	}
	sql = st.SolutionSql // its bounded form
	st.SqlsSubmitted++
	if st.SqlsSubmitted == 1 {
		st.Phase1Sql, st.Sql1Outcome, st.Sql1Ran = sql, v.Success, v.Err == nil
		if t.Drift != nil {
			st.DriftInjected, st.Subtask = true, 2
			ep.turn(pb.Role_ROLE_ORACLE, pb.TurnKind_TURN_KIND_DRIFT, t.Drift.Utterance)
			return nil
		}
	} else {
		// Only SQLs that both ran can recognise the drift: two texts that
		// fail to run (garbage, a missing column) differ in their
		// commitment sets without meaning anything (issue 25).
		st.DriftRecognized = st.Sql1Ran && v.Err == nil && driftRecognized(ctx, t, st.Phase1Sql, sql)
	}
	st.Phase = pb.Phase_PHASE_DONE
	st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	return nil
}

// driftRecognized reports whether the policy's own SQLs satisfy
// S(y1) ⊄ S(y2) (TIDE's DRR; PROTOCOL.md §9), with the database's schema
// resolving SQLite's double-quoted names. SQL whose commitment set cannot
// be taken (it does not parse) recognises nothing; the caller also
// requires that both SQLs ran.
func driftRecognized(ctx context.Context, t *corpus.Task, y1, y2 string) bool {
	schema, _ := t.DB.CommitSchema(ctx) // nil knows nothing: names stay names
	a := commitments.get(schema, y1)
	if a == nil {
		return false
	}
	b := commitments.get(schema, y2)
	if b == nil {
		return false
	}
	return sqlcommit.Classify(a, b).Drift
}

// commitments caches the commitment sets of the SQL TIDE episodes submit:
// taking one parses the query (pg_query), most of a TIDE episode's cost,
// and a GRPO group's episodes submit the same texts again and again.
var commitments = &commitCache{m: map[commitKey]*sqlcommit.Set{}}

// commitCache is a bounded map of commitment sets by schema and SQL text:
// at most commitCacheEntries, cleared when full; texts longer than
// commitCacheMaxSQL are not kept. A text that does not parse is kept as
// nil (it will not parse next time either).
type commitCache struct {
	mu sync.Mutex
	m  map[commitKey]*sqlcommit.Set
}

type commitKey struct {
	schema *sqlcommit.Schema
	sql    string
}

const (
	commitCacheEntries = 4096
	commitCacheMaxSQL  = 4 << 10
)

// get returns sql's commitment set under schema, nil when it does not
// parse.
func (c *commitCache) get(schema *sqlcommit.Schema, sql string) *sqlcommit.Set {
	k := commitKey{schema, sql}
	c.mu.Lock()
	set, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return set
	}
	set, err := sqlcommit.Extract(sql, schema)
	if err != nil {
		set = nil
	}
	if len(sql) <= commitCacheMaxSQL {
		c.mu.Lock()
		if len(c.m) >= commitCacheEntries {
			clear(c.m)
		}
		c.m[k] = set
		c.mu.Unlock()
	}
	return set
}

// tideScore is a finished TIDE episode's reward.
func tideScore(t *corpus.Task, st *statepb.EpisodeState) *pb.Reward {
	b := func(x bool) float64 {
		if x {
			return 1
		}
		return 0
	}
	sql1 := st.SqlsSubmitted >= 1 && st.Sql1Outcome
	dea := sql1
	c := map[string]float64{ComponentSQL1: b(sql1), ComponentAsked: b(st.Attempted > 0)}
	if t.Drift != nil {
		sql2 := st.SqlsSubmitted >= 2 && st.Outcome
		dea = sql1 && sql2
		c[ComponentSQL2] = b(sql2)
		c[ComponentDriftRecognized] = b(st.SqlsSubmitted >= 2 && st.DriftRecognized)
	}
	if t.HasChain() {
		layers := t.ChainLayers()
		var l1, l2 bool
		for _, q := range st.Questions[st.Prefilled:] {
			for _, k := range maskToInts(q.GetCreditMask()) {
				if k < len(layers) {
					l1 = l1 || layers[k] == 1
					l2 = l2 || layers[k] == 2
				}
			}
		}
		c[ComponentL1Identified], c[ComponentL2Identified] = b(l1), b(l2)
	}
	c[reward.ComponentOutcome] = b(dea)
	return &pb.Reward{Type: pb.RewardType_REWARD_TYPE_OUTCOME, Value: b(dea), Components: c}
}

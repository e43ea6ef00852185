package env

import (
	"context"
	"runtime"
	"sync"
	"weak"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	"avtgym/internal/cache"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/reward"
	"avtgym/sqlcommit"
	"avtgym/sqlexec"
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
//     first. The observation shows the drift's second SQL as sub-task 2.
//   - The first unparsed output in a row is answered with a notice; the
//     second is an abstention that ends the episode (TERMINATED, unsolved).
//     A stop is an abstention too.
//   - Questions are answered by the episode's oracle under the chain rule
//     (oracle.ChainMatch: L2 is credited only once L1 has been; an L2
//     question while L1 is open is answered as LOC, a detail of the
//     reference, with no credit), and each question's routing is reported
//     in the privileged channel. After the drift turn the oracle answers
//     about the post-drift record (tide.record), before it about the
//     anchor.
//   - TIDE_P pre-fills the history at reset with the annotated question of
//     the chain's first layer (ROLE_PREFILLED) and its resolution; the
//     layer counts as resolved for the oracle, but the question is not the
//     policy's: it is not counted as asked or identified.
//   - Reward REWARD_TYPE_OUTCOME (reward.Tide): 1 when every SQL matched
//     (TIDE's DEA), with components sql1, sql2, drift_recognized (the
//     policy's own SQLs satisfy S(y1) ⊄ S(y2), sqlcommit), l1_identified,
//     l2_identified and asked.
//
// Both keep a statepb.TideState.
type tide struct {
	protocol pb.Protocol
	// prefills is TIDE_P's pre-filled first layer.
	prefills bool
}

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

// draws: a reset without a task id draws from TIDE's samples (those TIDE_P
// serves, under TIDE_P); a task id may name any task the protocol serves.

func (r tide) describe() *pb.ProtocolInfo {
	budget := "20 agent turns; the drift turn after the first SQL"
	if r.prefills {
		budget += "; the chain's first layer pre-filled"
	}
	return &pb.ProtocolInfo{
		Protocol: r.protocol, Actions: actionList(askerActions), Budget: budget,
		TurnLimit: TideTurns, Draws: "TIDE samples",
	}
}

func (r tide) draws(t *corpus.Task) bool { return t.SampleType != "" && r.serves(t) == "" }

func (r tide) noTasks(c *corpus.Corpus, split string) error {
	return errorf(NotFound, ReasonNoTasks, "split", "corpus %q has no TIDE sample that %s serves in split %q", c.Name, r.protocol, split)
}

// serves reports whether the protocol serves task t, and if not why (for
// the reset's INVALID_OPTION and for choosing a task at random).
func (r tide) serves(t *corpus.Task) string {
	if t.Stateful() || t.FollowUp != nil {
		return "TIDE's protocols serve read-only tasks without a follow-up"
	}
	if r.prefills && primeLayer(t) < 0 {
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

// resolve checks the options of a TIDE reset on t and sets up st: the
// outcome reward, TideTurns turns and, under TIDE_P, the pre-filled layer.
func (r tide) resolve(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState, h *history) error {
	p := r.protocol
	if rw := o.GetReward(); rw != pb.RewardType_REWARD_TYPE_UNSPECIFIED && rw != pb.RewardType_REWARD_TYPE_OUTCOME {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.reward", "%s's reward is REWARD_TYPE_OUTCOME (TIDE's DEA, with components); leave reward unset", p)
	}
	if s := o.GetSolver(); s != pb.Solver_SOLVER_UNSPECIFIED && s != pb.Solver_SOLVER_CLIENT {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.solver", "under %s the policy writes the SQL: leave solver unset (or SOLVER_CLIENT)", p)
	}
	if o.ExtraQuestions != nil || o.ZeroAmbiguityBudget != nil || o.Patience != nil {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.extra_questions", "extra_questions, zero_ambiguity_budget and patience do not apply to %s: its budget is %d agent turns", p, TideTurns)
	}
	if err := rejectBirdOptions(o, p); err != nil {
		return err
	}
	if why := r.serves(t); why != "" {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.protocol", "task %q: %s", t.ID, why)
	}
	st.Reward, st.Solver = pb.RewardType_REWARD_TYPE_OUTCOME, pb.Solver_SOLVER_CLIENT
	// The question budget keeps one turn for an SQL, whether or not a
	// drift will ask for a second: the observation must not tell which.
	st.Budget = TideTurns - 1
	st.Rules = &statepb.EpisodeState_Tide{Tide: &statepb.TideState{}}
	if r.prefills {
		prefill(t, st, h)
	}
	return nil
}

// prefill puts TIDE_P's question at the head of the history: the prime
// layer's annotated question, answered by its resolution and credited with
// every ambiguity of its term.
func prefill(t *corpus.Task, st *statepb.EpisodeState, h *history) {
	a := t.Ambiguities[primeLayer(t)]
	var mask uint64
	for j, b := range t.Ambiguities {
		if b.Term == a.Term && j < corpus.MaxAmbiguities {
			mask |= 1 << j
		}
	}
	h.add(st, BoundText(a.Question, MaxQuestionBytes), BoundText(a.Resolution, MaxReplyBytes), mask)
	st.Prefilled = 1
}

func (tide) holds(st *statepb.EpisodeState) bool { return st.GetTide() != nil }

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

// apply applies one action under TIDE_F or TIDE_P.
func (r tide) apply(ctx context.Context, ep *episode, a *pb.Action) error {
	st, ts := ep.st, ep.st.GetTide()
	switch k := a.GetKind().(type) {
	case *pb.Action_Ask_:
		ts.UnparsedInRow = 0
		ts.TurnsUsed++
		if err := ep.ask(ctx, k.Ask.GetText(), r.record(ep.task, ts), 0); err != nil {
			return err
		}
	case *pb.Action_SubmitSql_:
		ts.UnparsedInRow = 0
		ts.TurnsUsed++
		if err := r.submit(ctx, ep, ts, k.SubmitSql.GetSql()); err != nil {
			return err
		}
	case *pb.Action_Unparsed_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_UNPARSED, BoundText(k.Unparsed.GetText(), MaxQuestionBytes))
		ts.TurnsUsed++
		ts.UnparsedInRow++
		if ts.UnparsedInRow >= 2 {
			abstain(ep, tideAbstain)
			return nil
		}
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, tideUnparsed)
	case *pb.Action_Stop_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_STOP, "")
		abstain(ep, tideStop)
		return nil
	default:
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "%s takes ask, submit_sql, stop or unparsed (tools are PROTOCOL_BIRD_A's)", r.protocol)
	}
	if st.Phase != pb.Phase_PHASE_DONE && ts.TurnsUsed >= TideTurns {
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, tideLimit)
		st.Phase = pb.Phase_PHASE_DONE
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
	}
	return nil
}

// record is the record the oracle answers about (BIRD's counterpart is
// bird.ask): the task's until the drift turn, then its post-drift record
// (oracle.PostDriftRecord: the post-drift reference, which every oracle's
// stages read, and the request followed by the drift utterance), so that
// no answer after the drift is built from the pre-drift SQL (issue 28; the
// paper's simulator reads the current ground truth). The dialogue is the
// episode's whole: credits given before the drift still count, and the
// chain rule still reads them.
func (tide) record(t *corpus.Task, ts *statepb.TideState) *corpus.Record {
	if !ts.GetDriftInjected() || t.Drift == nil {
		return t.Record
	}
	return postDriftRecord(t)
}

// postDriftRecords caches each drift task's post-drift record, built once
// per task on its first post-drift question, weakly (the entry goes with
// the task): the oracles cache by record pointer (compiled phrases, clause
// segments), so every question of every episode on the task must get the
// same record.
var postDriftRecords sync.Map // weak.Pointer[corpus.Task] → *corpus.Record

func postDriftRecord(t *corpus.Task) *corpus.Record {
	key := weak.Make(t)
	if v, ok := postDriftRecords.Load(key); ok {
		return v.(*corpus.Record)
	}
	v, loaded := postDriftRecords.LoadOrStore(key, oracle.PostDriftRecord(t.Record))
	if !loaded {
		// The record holds no reference to t, so t can be collected; the
		// cleanup then drops its entry.
		runtime.AddCleanup(t, func(k weak.Pointer[corpus.Task]) { postDriftRecords.Delete(k) }, key)
	}
	return v.(*corpus.Record)
}

// abstain ends a TIDE episode unsolved: the SQLs not yet submitted fail.
func abstain(ep *episode, notice string) {
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, notice)
	terminate(ep.st)
}

// submit verifies one TIDE submission: the first against the reference
// (then, with a drift, the drift turn follows), the second against the
// post-drift reference. No result or feedback is shown.
func (r tide) submit(ctx context.Context, ep *episode, ts *statepb.TideState, sql string) error {
	st, t := ep.st, ep.task
	opt := ep.verifyOptions()
	check := checker(func(ctx context.Context, sql string, lim sqlexec.Limits) (sqlexec.Verdict, error) {
		return t.Verify(ctx, sql, lim, opt)
	})
	if ts.DriftInjected {
		check = t.VerifyDrift
	}
	v, ok, err := ep.verifySubmission(ctx, sql, check)
	if !ok {
		return err
	}
	sql = st.SolutionSql // its bounded form
	ts.SqlsSubmitted++
	if ts.SqlsSubmitted == 1 {
		ts.Sql1, ts.Sql1Outcome, ts.Sql1Ran = sql, v.Success, v.Err == nil
		if t.Drift != nil {
			ts.DriftInjected = true
			ep.turn(pb.Role_ROLE_ORACLE, pb.TurnKind_TURN_KIND_DRIFT, t.Drift.Utterance)
			return nil
		}
	} else {
		ts.Sql2Outcome = v.Success
		// Only SQLs that both ran can recognise the drift: two texts that
		// fail to run (garbage, a missing column) differ in their
		// commitment sets without meaning anything (issue 25).
		ts.DriftRecognized = ts.Sql1Ran && v.Err == nil && ep.env.driftRecognized(ctx, t, ts.Sql1, sql)
	}
	terminate(st)
	return nil
}

// observe: TIDE's budget is its agent turns, and the drift's SQL is
// sub-task 2.
func (tide) observe(o *pb.Observation, st *statepb.EpisodeState, b *pb.Budget) {
	// TIDE's agent sees the DDL only (Appendix D: no sample rows).
	o.Task = tideView(o.Task)
	ts := st.GetTide()
	b.Unit, b.TotalMilli, b.UsedMilli = pb.BudgetUnit_BUDGET_UNIT_TURNS, TideTurns*1000, int64(ts.GetTurnsUsed())*1000
	// One turn is kept for an SQL; not one per SQL the task takes, which
	// would tell a policy whether a drift will come.
	o.QuestionsRemaining = max(0, TideTurns-ts.GetTurnsUsed()-1)
	if ts.GetDriftInjected() {
		o.Subtask = 2
	}
}

// score is TIDE's reward (reward.Tide).
func (tide) score(t *corpus.Task, st *statepb.EpisodeState) *pb.Reward {
	ts := st.GetTide()
	e := reward.TideEpisode{
		SQL1:            ts.GetSqlsSubmitted() >= 1 && ts.GetSql1Outcome(),
		Drift:           t.Drift != nil,
		SQL2:            ts.GetSqlsSubmitted() >= 2 && ts.GetSql2Outcome(),
		DriftRecognized: ts.GetSqlsSubmitted() >= 2 && ts.GetDriftRecognized(),
		Asked:           st.Attempted > 0,
	}
	if t.HasChain() {
		e.Layers = t.ChainLayers()
		for _, m := range policyMasks(st) {
			e.Credits = append(e.Credits, maskToInts(m))
		}
	}
	r := reward.Tide(e)
	return &pb.Reward{Type: pb.RewardType_REWARD_TYPE_OUTCOME, Value: r.Value, Components: r.Components}
}

// stateBound bounds TideState as EpisodeState's field 46.
func (tide) stateBound() int {
	return bytesField(46,
		varintField(1)+varintField(2)+varintField(3)+ // turns used, unparsed in a row, SQLs submitted
			bytesField(4, MaxSQLBytes)+ // the first SQL
			boolField(5)+boolField(6)+boolField(7)+ // first SQL's outcome, ran; drift injected
			boolField(8)+boolField(9)) // second SQL's outcome; drift recognised
}

// driftRecognized reports whether the policy's own SQLs satisfy
// S(y1) ⊄ S(y2) (TIDE's DRR; PROTOCOL.md §9), with the database's schema
// resolving SQLite's double-quoted names. SQL whose commitment set cannot
// be taken (it does not parse) recognises nothing; the caller also
// requires that both SQLs ran.
func (e *Env) driftRecognized(ctx context.Context, t *corpus.Task, y1, y2 string) bool {
	schema, _ := t.DB.CommitSchema(ctx) // nil knows nothing: names stay names
	a := e.commitments.get(ctx, t, schema, y1)
	if a == nil {
		return false
	}
	b := e.commitments.get(ctx, t, schema, y2)
	if b == nil {
		return false
	}
	return sqlcommit.Classify(a, b).Drift
}

// commitSets caches the commitment sets of the SQL TIDE episodes submit,
// by database and text: taking one parses the query (pg_query), most of a
// TIDE episode's cost, and a GRPO group's episodes submit the same texts
// again and again. A text that does not parse is kept as nil (it will not
// parse next time either); texts longer than commitCacheMaxSQL are not
// kept. The Env owns it.
type commitSets struct {
	c *cache.Cache[commitKey, *sqlcommit.Set]
}

// commitKey names a text of SQL on a database: the corpus and the
// database's id in it (each database has one schema), and whether the
// schema was known when the set was taken (a schema that could not be read
// — the verifier saturated — may be read the next time, and a set taken
// without it must not stand for one taken with it).
type commitKey struct {
	corpus, db, sql string
	schemaKnown     bool
}

const (
	commitCacheEntries = 4096
	commitCacheMaxSQL  = 4 << 10
)

func newCommitSets() commitSets {
	return commitSets{c: cache.New(cache.Options[commitKey, *sqlcommit.Set]{MaxEntries: commitCacheEntries})}
}

// get returns sql's commitment set on t's database (whose schema is
// schema), nil when it does not parse.
func (c commitSets) get(ctx context.Context, t *corpus.Task, schema *sqlcommit.Schema, sql string) *sqlcommit.Set {
	extract := func(context.Context) (*sqlcommit.Set, error) {
		set, err := sqlcommit.Extract(sql, schema)
		if err != nil {
			return nil, nil // kept: it will not parse next time either
		}
		return set, nil
	}
	if len(sql) > commitCacheMaxSQL {
		set, _ := extract(ctx)
		return set
	}
	set, _ := c.c.Get(ctx, commitKey{t.Corpus.Name, t.DB.Spec.ID, sql, schema != nil}, extract)
	return set
}

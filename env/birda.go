package env

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

// BIRD_A is BIRD-Interact's a-Interact (PROTOCOL.md §8): the two
// sub-tasks of bird.go, played by an agent that pays for every action from
// a coin budget of 6 + 2·m + patience coins (patience default 6).
// BirdState.variant picks the harness where the two differ (ORIGINAL, the
// default: the batch runner, bird_interact_agent/batch_run_bird_interact;
// ADK: BIRD-Interact-ADK):
//
//   - Prices (birdAPrices) are charged before the action. Several submits
//     are allowed while coins last; a failed one gets feedback and the
//     episode goes on.
//   - A submit that leaves no coins ends the task whatever its verdict:
//     phase 1 passed this way scores 0.7 and releases nothing (main.py
//     sets force_submit once the deducted budget is ≤ 0, and a submit made
//     with force_submit set finishes the task; the ADK's before_tool_callback
//     sets the budget to -1 after a submit that drains it). A submit the
//     coins cannot pay for is free and ends the task the same way (the
//     runner still deducts its price, to below 0, which nothing reads: the
//     coins used stay at most the total plus one over-budget action).
//   - ORIGINAL: an action other than a submit runs while any coins are
//     left, even when they cannot pay for it: its price is deducted (the
//     coins used may pass the total, as the runner's budget goes below 0),
//     and once no coins are left the next action must be submit_sql (free,
//     and the end); anything else ends the episode unsolved (TRUNCATED; the
//     runner's "Budget depleted. Agent failed to submit."). Deliberate
//     deviation: the runner's update_budget never sets force_submit for an
//     unparsed output (it returns early), which would let a policy buy one
//     more action with a deliberately garbled one; here an unparsed output
//     that spends the coins forces the submit as any other action does.
//   - ADK: an action other than a submit that the coins cannot pay for is
//     refused with a notice and costs nothing (before_tool_callback's
//     "Budget exhausted … You MUST call submit_sql now"); the free submit
//     stays allowed. Refusals cost nothing, so the ADK's own bound ends
//     the episode: after adkMaxTurns actions (MAX_MODEL_TURNS, paid and
//     refused alike, counted in the action log) it is TRUNCATED.
//   - The reset's task view is the request alone (agentView): the schema,
//     the column meanings and the knowledge are what the tools sell
//     (prompt_utils.py build_initial_agent_prompt and the ADK's
//     orchestrator/ainteract.py give the user's query, the database's name
//     and the budget only).
//   - Tools answer from what the public task view holds: the schema, the
//     column meanings (with a JSON column's fields) and the knowledge
//     entries the task does not hide (a hidden entry is "not found", as an
//     unknown name is: only the user can reveal it). execute runs
//     read-only SQL on the database as loaded under the server's limits.
//   - Reward: sub-task 1 0.7, sub-task 2 0.3, no retry penalty.
//   - Tool outputs are not kept in the token, only a one-byte-per-action
//     log (the action's Action field number) and the coins spent.
type birdA struct{ bird }

const (
	// DefaultCoinPatience is BIRD_A's default patience, in coins.
	DefaultCoinPatience = 6
	// birdABaseCoins is BIRD-Interact's base budget (6 coins).
	birdABaseCoins = 6
	// birdACoinsPerAmbiguity is what each counted ambiguity adds (2 coins).
	birdACoinsPerAmbiguity = 2
	// MaxToolResultBytes bounds one tool output.
	MaxToolResultBytes = 64 << 10
	// executeShownRows is how many rows an execute result shows.
	executeShownRows = 50
	// executeMaxRows is the row cap of an execute (a larger result is the
	// database's "too many rows" error, shown as the tool's output).
	executeMaxRows = 10000
	// executeResultBytes bounds the text of an execute result.
	executeResultBytes = 8 << 10
	// maxToolCallBytes bounds a tool call's text: execute's SQL and the
	// call around it (longer text is cut).
	maxToolCallBytes = MaxSQLBytes + 64
	// cheapestBirdA is the price of the cheapest paid action (unparsed,
	// 0.2 coins; TestBirdAPrices checks it against the list).
	cheapestBirdA = 200
	// adkMaxTurns is BIRD-Interact-ADK's bound on the agent's turns
	// (MAX_MODEL_TURNS), which ends a BIRD_VARIANT_ADK episode.
	adkMaxTurns = 60
	// maxActionLog bounds the action log: the largest budget (6 + 2·64 +
	// 32 coins) over the cheapest paid action.
	maxActionLog = (birdABaseCoins + birdACoinsPerAmbiguity*corpus.MaxAmbiguities + MaxPatience) * 1000 / cheapestBirdA
)

// birdAPrices is BIRD_A's price list, in thousandths of a coin, by action
// (stop is free): the one copy in env, which BirdAPrices publishes. An
// array, not a map: every BIRD_A step reads it.
var birdAPrices = [numActionKinds]int64{
	actionAsk:                          2000,
	actionStop:                         0,
	actionSubmitSQL:                    3000,
	actionUnparsed:                     200,
	actionExecute:                      1000,
	actionGetSchema:                    1000,
	actionGetAllColumnMeanings:         1000,
	actionGetColumnMeaning:             500,
	actionGetAllExternalKnowledgeNames: 500,
	actionGetKnowledgeDefinition:       500,
	actionGetAllKnowledgeDefinitions:   1000,
}

func (b birdA) describe() *pb.ProtocolInfo {
	var kinds []actionKind
	var prices []*pb.ActionPrice
	for k := actionAsk; k < numActionKinds; k++ {
		kinds = append(kinds, k)
		prices = append(prices, &pb.ActionPrice{Action: actionNames[k], CostMilli: birdAPrices[k]})
	}
	return &pb.ProtocolInfo{
		Protocol: pb.Protocol_PROTOCOL_BIRD_A, Actions: actionList(kinds), Prices: prices,
		Budget:          "6 + 2·m + patience coins (m: the task's counted ambiguities), each action paid before it runs",
		DefaultPatience: DefaultCoinPatience, MaxPatience: MaxPatience,
		BaseCoinsMilli: birdABaseCoins * 1000, CoinsPerAmbiguityMilli: birdACoinsPerAmbiguity * 1000,
		Draws: "tasks with a follow-up",
	}
}

// BirdAPrice is what one action costs under PROTOCOL_BIRD_A.
type BirdAPrice struct {
	// Action is the action's field name in the Action oneof ("ask",
	// "submit_sql", "execute", …), as clients name it.
	Action string
	// CostMilli is its price in thousandths of a coin (stop: 0, free).
	CostMilli int64
}

// BirdAPrices returns BIRD_A's price list, every action in the Action
// oneof's order, for a server to publish: a fresh slice the caller may
// keep.
func BirdAPrices() []BirdAPrice {
	out := make([]BirdAPrice, 0, numActionKinds-1)
	for k := actionAsk; k < numActionKinds; k++ {
		out = append(out, BirdAPrice{Action: actionNames[k], CostMilli: birdAPrices[k]})
	}
	return out
}

// birdAUnparsed answers an unparsed output under BIRD_A.
const birdAUnparsed = "Your output could not be read as an action; 0.2 coins are spent. Use one action per turn."

// resolve sets BIRD_A's coin budget.
func (r birdA) resolve(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState, _ *history) error {
	bs, err := r.bird.resolve(t, o, st)
	if err != nil {
		return err
	}
	p, err := patience(o, DefaultCoinPatience)
	if err != nil {
		return err
	}
	bs.CoinsTotalMilli = int64(birdABaseCoins+birdACoinsPerAmbiguity*len(t.Counted())+int(p)) * 1000
	// The questions the coins could buy, for the question counters.
	st.Budget = int32(bs.CoinsTotalMilli / birdAPrices[actionAsk])
	settle(st, sqlRequiredA(bs))
	return nil
}

// sqlRequiredA reports whether only a (free) submission is left: under
// ORIGINAL once no coins are left (force_submit), under ADK once the coins
// cannot pay for the cheapest paid action (everything else is refused).
func sqlRequiredA(bs *statepb.BirdState) bool {
	left := bs.CoinsTotalMilli - bs.CoinsUsedMilli
	if adk(bs) {
		return left < cheapestBirdA
	}
	return left <= 0
}

// apply applies one action under BIRD_A.
func (r birdA) apply(ctx context.Context, ep *episode, a *pb.Action) error {
	bs := ep.st.GetBird()
	err := r.act(ctx, ep, bs, a)
	settle(ep.st, sqlRequiredA(bs))
	return err
}

func (r birdA) act(ctx context.Context, ep *episode, bs *statepb.BirdState, a *pb.Action) error {
	st := ep.st
	k := kindOf(a)
	switch k {
	case actionNone:
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "no action is set (want ask, submit_sql, stop, unparsed or a tool)")
	case actionStop:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_STOP, "")
		r.endSubtask(ep, bs, birdStop, false)
		return nil
	}
	cost := birdAPrices[k]
	left := bs.CoinsTotalMilli - bs.CoinsUsedMilli
	if adk(bs) && len(bs.ActionLog) >= adkMaxTurns {
		// Without this bound refused actions, which are free, would let
		// an episode run for ever.
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, fmt.Sprintf(
			"The episode reached BIRD-Interact-ADK's limit of %d actions and ends.", adkMaxTurns))
		st.Phase = pb.Phase_PHASE_DONE
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
		return nil
	}
	if k == actionSubmitSQL && cost > left {
		// The free final submit: scored for its sub-task, and the end.
		// (The runner deducts its price too, below 0; nothing reads it.)
		return r.submit(ctx, ep, bs, a.GetSubmitSql().GetSql(), true)
	}
	if left <= 0 || (cost > left && adk(bs)) {
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_TOOL_CALL, BoundText(callText(a), MaxQuestionBytes))
		if adk(bs) {
			// Refused, and free: the submit is still allowed. The log
			// counts it towards adkMaxTurns.
			bs.ActionLog = append(bs.ActionLog, logByte(k))
			ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, fmt.Sprintf(
				"Budget exhausted (%s coins remaining; this action costs %s): it was not run. You MUST call submit_sql now with your best SQL.", coins(max(0, left)), coins(cost)))
			return nil
		}
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE,
			"The budget is spent and the next action had to be submit_sql: the task failed. The episode ends.")
		st.Phase = pb.Phase_PHASE_DONE
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
		return nil
	}
	// Charged before the action (under ORIGINAL in full even when fewer
	// coins are left: the coins used may pass the total); a step that fails
	// (a busy verifier) is not sealed, so nothing is charged for it.
	bs.CoinsUsedMilli += cost
	if len(bs.ActionLog) < maxActionLog {
		bs.ActionLog = append(bs.ActionLog, logByte(k))
	}
	spent := bs.CoinsUsedMilli >= bs.CoinsTotalMilli
	switch k {
	case actionAsk:
		rec, from := r.ask(ep, bs)
		return ep.ask(ctx, a.GetAsk().GetText(), rec, from)
	case actionSubmitSQL:
		// A paid submit that leaves no coins is the last (rule above).
		return r.submit(ctx, ep, bs, a.GetSubmitSql().GetSql(), spent)
	case actionUnparsed:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_UNPARSED, BoundText(a.GetUnparsed().GetText(), MaxQuestionBytes))
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, birdAUnparsed+spentNote(bs, spent))
		return nil
	}
	ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_TOOL_CALL, BoundText(callText(a), maxToolCallBytes))
	out, err := ep.tool(ctx, a)
	if err != nil {
		return err
	}
	if st.Phase == pb.Phase_PHASE_DONE {
		return nil // the environment failed
	}
	note := spentNote(bs, spent)
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_TOOL_RESULT, BoundText(out, MaxToolResultBytes-len(note))+note)
	return nil
}

// birdASpent tells the policy, after the action that spent the last
// coins under ORIGINAL, that only a submission may follow (the runner's
// " Budget depleted. You MUST submit next.").
const birdASpent = "\n\n[The budget is spent: the next action must be submit_sql (free, and the last); anything else ends the episode unsolved.]"

// spentNote is birdASpent when this action spent the coins under ORIGINAL,
// else "". (An ask's reply is the oracle's; the observation's sql_required
// says the same.)
func spentNote(bs *statepb.BirdState, spent bool) string {
	if spent && !adk(bs) {
		return birdASpent
	}
	return ""
}

// coins formats thousandths of a coin.
func coins(milli int64) string {
	return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
}

// submit verifies a submission for the current sub-task; final is a
// submission that leaves no coins (free, or paid with the last of them),
// which ends the episode whatever its verdict.
func (r birdA) submit(ctx context.Context, ep *episode, bs *statepb.BirdState, sql string, final bool) error {
	st := ep.st
	v, ok, err := ep.verifySubmission(ctx, sql, r.check(ep, bs))
	if !ok {
		return err
	}
	switch {
	case v.Success && bs.Subtask == 1:
		bs.Subtask1 = statepb.SubtaskResult_SUBTASK_RESULT_SOLVED
		if !final {
			// The question budget (what the coins buy) is unchanged.
			r.releaseFollowUp(ep, bs, sql)
			return nil
		}
	case v.Success:
		bs.Subtask2 = statepb.SubtaskResult_SUBTASK_RESULT_SOLVED
		terminate(st)
		return nil
	default:
		msg := "Your SQL does not solve the task."
		if v.Err != nil {
			msg = "Your SQL failed: " + v.Err.Error()
		}
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_FEEDBACK, BoundText(msg, MaxNoticeBytes))
		if !final {
			return nil
		}
	}
	// The final submission ends the episode.
	terminate(st)
	return nil
}

// observe: BIRD_A's budget is its coins.
func (birdA) observe(o *pb.Observation, st *statepb.EpisodeState, b *pb.Budget) {
	// The reset's view: what the harness's first observation holds.
	o.Task = agentView(o.Task)
	bs := st.GetBird()
	o.Subtask = max(1, bs.GetSubtask())
	b.Unit, b.TotalMilli, b.UsedMilli = pb.BudgetUnit_BUDGET_UNIT_COINS, bs.GetCoinsTotalMilli(), bs.GetCoinsUsedMilli()
	o.QuestionsRemaining = int32(max(0, bs.GetCoinsTotalMilli()-bs.GetCoinsUsedMilli()) / birdAPrices[actionAsk])
	o.SqlRequired = st.Phase != pb.Phase_PHASE_DONE && sqlRequiredA(bs)
}

// callText renders a tool call as the transcript shows it.
func callText(a *pb.Action) string {
	q := strconv.Quote
	switch k := a.GetKind().(type) {
	case *pb.Action_Execute_:
		return `execute("` + k.Execute.GetSql() + `")`
	case *pb.Action_GetSchema_:
		return "get_schema()"
	case *pb.Action_GetAllColumnMeanings_:
		return "get_all_column_meanings()"
	case *pb.Action_GetColumnMeaning_:
		return "get_column_meaning(" + q(k.GetColumnMeaning.GetTable()) + ", " + q(k.GetColumnMeaning.GetColumn()) + ")"
	case *pb.Action_GetAllExternalKnowledgeNames_:
		return "get_all_external_knowledge_names()"
	case *pb.Action_GetKnowledgeDefinition_:
		return "get_knowledge_definition(" + q(k.GetKnowledgeDefinition.GetName()) + ")"
	case *pb.Action_GetAllKnowledgeDefinitions_:
		return "get_all_knowledge_definitions()"
	case *pb.Action_Ask_:
		return "ask(" + q(k.Ask.GetText()) + ")"
	case *pb.Action_Unparsed_:
		return k.Unparsed.GetText()
	}
	return ""
}

// tool runs a tool action; the text is its output. An error is the
// step's (a busy database); the environment's own failure ends the
// episode in ERROR (ep.fail) with no output.
func (ep *episode) tool(ctx context.Context, a *pb.Action) (string, error) {
	db := ep.env.views[ep.task].GetDatabase()
	switch k := a.GetKind().(type) {
	case *pb.Action_Execute_:
		return ep.execute(ctx, k.Execute.GetSql())
	case *pb.Action_GetSchema_:
		return db.GetSchema(), nil
	case *pb.Action_GetAllColumnMeanings_:
		return allColumnMeanings(db), nil
	case *pb.Action_GetColumnMeaning_:
		return columnMeaning(db, k.GetColumnMeaning.GetTable(), k.GetColumnMeaning.GetColumn()), nil
	case *pb.Action_GetAllExternalKnowledgeNames_:
		if len(db.GetKnowledge()) == 0 {
			return "No external knowledge is available.", nil
		}
		var b strings.Builder
		for _, e := range db.GetKnowledge() {
			b.WriteString(e.GetName() + "\n")
		}
		return b.String(), nil
	case *pb.Action_GetKnowledgeDefinition_:
		return knowledgeDefinition(db, k.GetKnowledgeDefinition.GetName()), nil
	case *pb.Action_GetAllKnowledgeDefinitions_:
		if len(db.GetKnowledge()) == 0 {
			return "No external knowledge is available.", nil
		}
		var b strings.Builder
		for _, e := range db.GetKnowledge() {
			fmt.Fprintf(&b, "%s: %s\n", e.GetName(), e.GetDefinition())
		}
		return b.String(), nil
	}
	return "", errorf(InvalidArgument, ReasonInvalidAction, "action", "not a tool")
}

// allColumnMeanings is get_all_column_meanings' output: every recorded
// meaning, by column.
func allColumnMeanings(db *pb.DatabaseView) string {
	keys := make([]string, 0, len(db.GetColumnMeanings()))
	for key := range db.GetColumnMeanings() {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return "No column meanings are recorded for this database."
	}
	var b strings.Builder
	for _, key := range keys {
		fmt.Fprintf(&b, "%s: %s\n", key, db.GetColumnMeanings()[key])
	}
	return b.String()
}

// columnMeaning is get_column_meaning's output: the column's meaning and,
// for a JSON or JSONB column, its fields' meanings. The harness's
// column-meaning file holds {column_meaning, fields_meaning} for such a
// column and get_column_meaning returns the whole value
// (batch_run_bird_interact/action_handler.py; the ADK's /column_meaning
// json.dumps it); the corpus keeps it flattened, the column under
// "table.column" and each field under "table.column.field[.sub…]"
// (corpus/birdinteract/database.go, columnMeanings), which this gathers
// back, fields in sorted order.
func columnMeaning(db *pb.DatabaseView, table, column string) string {
	want := table + "." + column
	var col string
	var fields []string
	for key := range db.GetColumnMeanings() {
		switch {
		case strings.EqualFold(key, want):
			col = key
		case len(key) > len(want)+1 && key[len(want)] == '.' && strings.EqualFold(key[:len(want)], want):
			fields = append(fields, key)
		}
	}
	if col == "" {
		return "No meaning is recorded for " + BoundText(want, 256) + "."
	}
	m := db.GetColumnMeanings()
	if len(fields) == 0 {
		return col + ": " + m[col]
	}
	sort.Strings(fields)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s\nFields:\n", col, m[col])
	for _, f := range fields {
		fmt.Fprintf(&b, "%s: %s\n", f, m[f])
	}
	return b.String()
}

// knowledgeDefinition is get_knowledge_definition's output: a hidden
// entry reads as an unknown one.
func knowledgeDefinition(db *pb.DatabaseView, name string) string {
	for _, e := range db.GetKnowledge() {
		if strings.EqualFold(strings.TrimSpace(name), e.GetName()) {
			return e.GetName() + ": " + e.GetDefinition()
		}
	}
	return "No external knowledge entry is named " + strconv.Quote(BoundText(name, 256)) + "."
}

// execute runs read-only SQL for the execute tool: in sub-task 1 on the
// database as loaded, in sub-task 2 on the state the follow-up is verified
// on (the reference's phase 1 by default, the policy's under
// FOLLOW_UP_STATE_POLICY: Task.QueryFollowUpState), as the a-Interact
// harness resets and replays the database before every execute. Its
// result, or the database's error, as readable text.
func (ep *episode) execute(ctx context.Context, sql string) (string, error) {
	if fault := policyFault(sql, MaxSQLBytes); fault != "" {
		return "Error: the SQL was not run: it " + fault + ".", nil
	}
	lim := ep.env.cfg.Limits
	if lim.MaxRows <= 0 || lim.MaxRows > executeMaxRows {
		lim.MaxRows = executeMaxRows
	}
	var res *sqlexec.Result
	var err error
	if bs := ep.st.GetBird(); bs.GetSubtask() == 2 {
		opt := ep.verifyOptions()
		opt.PolicyPhase1 = bs.GetFollowUpState() == pb.FollowUpState_FOLLOW_UP_STATE_POLICY
		res, err = ep.task.QueryFollowUpState(ctx, []string{bs.GetPhase1Sql()}, sql, lim, opt)
	} else {
		res, err = ep.task.DB.Engine.Query(ctx, sql, lim)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return "", cerr
		}
		if verr := ep.verifierError(err); verr != nil {
			return "", verr
		}
		switch sqlexec.KindOf(err) {
		case 0, sqlexec.KindUnavailable:
			ep.fail(failedDatabase, "the database failed: "+err.Error())
			return "", nil
		}
		return "Error: " + err.Error(), nil
	}
	return renderRows(res), nil
}

// renderRows renders a result as pipe-separated text: the columns, at most
// executeShownRows rows, and the row count, within executeResultBytes.
func renderRows(r *sqlexec.Result) string {
	var b strings.Builder
	b.WriteString(strings.Join(r.Columns, " | "))
	b.WriteByte('\n')
	shown := 0
	for _, row := range r.Rows {
		if shown == executeShownRows || b.Len() > executeResultBytes {
			break
		}
		for i, c := range row {
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(cellText(c))
		}
		b.WriteByte('\n')
		shown++
	}
	if shown < len(r.Rows) {
		fmt.Fprintf(&b, "(%d rows; the first %d shown)", len(r.Rows), shown)
	} else {
		fmt.Fprintf(&b, "(%d rows)", len(r.Rows))
	}
	return BoundText(b.String(), executeResultBytes+512)
}

// cellText renders one cell, cut to 256 bytes.
func cellText(c any) string {
	var s string
	switch v := c.(type) {
	case nil:
		s = "NULL"
	case []byte:
		if utf8.Valid(v) {
			s = string(v)
		} else {
			s = fmt.Sprintf("<%d bytes>", len(v))
		}
	case float64:
		s = strconv.FormatFloat(v, 'g', -1, 64)
	default:
		s = fmt.Sprint(v)
	}
	return BoundText(s, 256)
}

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
// a coin budget of 6 + 2·m + patience coins (patience default 6):
//
//   - Prices (birdAPrices) are charged before the action. Several submits
//     are allowed while coins last; a failed one gets feedback and the
//     episode goes on. A submit the budget cannot pay for is free: it is
//     scored for its sub-task and ends the episode. Any other action the
//     budget cannot pay for ends the episode (TRUNCATED).
//   - Tools answer from what the public task view holds: the schema, the
//     column meanings and the knowledge entries the task does not hide (a
//     hidden entry is "not found", as an unknown name is: only the user
//     can reveal it). execute runs read-only SQL on the database as loaded
//     under the server's limits.
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
func (r birdA) resolve(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState) error {
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

// sqlRequiredA reports whether only a (free) submission is left: the coins
// cannot pay for the cheapest paid action.
func sqlRequiredA(bs *statepb.BirdState) bool {
	return bs.CoinsTotalMilli-bs.CoinsUsedMilli < cheapestBirdA
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
	if cost > left {
		if k == actionSubmitSQL {
			// The free final submit: scored for its sub-task, and the end.
			return r.submit(ctx, ep, bs, a.GetSubmitSql().GetSql(), true)
		}
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_TOOL_CALL, BoundText(callText(a), MaxQuestionBytes))
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, fmt.Sprintf(
			"The budget cannot pay for this action (%s coins; %s left): only a submission was accepted. The episode ends.", coins(cost), coins(left)))
		st.Phase = pb.Phase_PHASE_DONE
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
		return nil
	}
	// Charged before the action; a step that fails (a busy verifier) is
	// not sealed, so nothing is charged for it.
	bs.CoinsUsedMilli += cost
	if len(bs.ActionLog) < maxActionLog {
		bs.ActionLog = append(bs.ActionLog, logByte(k))
	}
	switch k {
	case actionAsk:
		rec, from := r.ask(ep, bs)
		return ep.ask(ctx, a.GetAsk().GetText(), rec, from)
	case actionSubmitSQL:
		return r.submit(ctx, ep, bs, a.GetSubmitSql().GetSql(), false)
	case actionUnparsed:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_UNPARSED, BoundText(a.GetUnparsed().GetText(), MaxQuestionBytes))
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, birdAUnparsed)
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
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_TOOL_RESULT, BoundText(out, MaxToolResultBytes))
	return nil
}

// coins formats thousandths of a coin.
func coins(milli int64) string {
	return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
}

// submit verifies a submission for the current sub-task; free is the
// final submission the budget could not pay for, which ends the episode
// whatever its verdict.
func (r birdA) submit(ctx context.Context, ep *episode, bs *statepb.BirdState, sql string, free bool) error {
	st := ep.st
	v, ok, err := ep.verifySubmission(ctx, sql, r.check(ep, bs))
	if !ok {
		return err
	}
	switch {
	case v.Success && bs.Subtask == 1:
		bs.Subtask1 = statepb.SubtaskResult_SUBTASK_RESULT_SOLVED
		if !free {
			r.releaseFollowUp(ep, bs, sql)
			// The question budget reads 0 from the release on: state
			// version 1 derived it from BIRD_C's turn count, which BIRD_A
			// does not use, and the observation stays as it was. A policy
			// reads questions_remaining, from the coins.
			st.Budget = 0
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
		if !free {
			return nil
		}
	}
	// The free final submission ends the episode.
	terminate(st)
	return nil
}

// observe: BIRD_A's budget is its coins.
func (birdA) observe(o *pb.Observation, st *statepb.EpisodeState, b *pb.Budget) {
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

// columnMeaning is get_column_meaning's output.
func columnMeaning(db *pb.DatabaseView, table, column string) string {
	want := table + "." + column
	for key, m := range db.GetColumnMeanings() {
		if strings.EqualFold(key, want) {
			return key + ": " + m
		}
	}
	return "No meaning is recorded for " + BoundText(want, 256) + "."
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

// execute runs read-only SQL for the execute tool on the database as
// loaded: its result, or the database's error, as readable text.
func (ep *episode) execute(ctx context.Context, sql string) (string, error) {
	if fault := policyFault(sql, MaxSQLBytes); fault != "" {
		return "Error: the SQL was not run: it " + fault + ".", nil
	}
	lim := ep.env.cfg.Limits
	if lim.MaxRows <= 0 || lim.MaxRows > executeMaxRows {
		lim.MaxRows = executeMaxRows
	}
	res, err := ep.task.DB.Engine.Query(ctx, sql, lim)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return "", cerr
		}
		if verr := ep.verifierError(err); verr != nil {
			return "", verr
		}
		switch sqlexec.KindOf(err) {
		case 0, sqlexec.KindUnavailable:
			ep.fail("the database failed: " + err.Error())
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

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
// sub-tasks of BIRD_C, played by an agent that pays for every action from
// a coin budget of 6 + 2·m + patience coins (patience default 6):
//
//   - Costs (birdACost) are charged before the action. Several submits
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
//     log (the Action field number) and the coins spent.
const (
	// DefaultCoinPatience is BIRD_A's default patience, in coins.
	DefaultCoinPatience = 6
	// birdABaseCoins is BIRD-Interact's base budget (6 coins).
	birdABaseCoins = 6
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
	// maxActionLog bounds the action log: the largest budget (6 + 2·64 +
	// 32 coins) over the cheapest paid action (0.2 coins).
	maxActionLog = (birdABaseCoins + 2*corpus.MaxAmbiguities + MaxPatience) * 5
)

// birdACost is each action's price in thousandths of a coin, indexed by
// the Action oneof's field number (stop, 2, is free; an array, not a map:
// every BIRD_A step reads it).
var birdACost = [...]int64{
	1:  2000, // ask
	3:  3000, // submit_sql
	4:  200,  // unparsed
	5:  1000, // execute
	6:  1000, // get_schema
	7:  1000, // get_all_column_meanings
	8:  500,  // get_column_meaning
	9:  500,  // get_all_external_knowledge_names
	10: 500,  // get_knowledge_definition
	11: 1000, // get_all_knowledge_definitions
}

// cheapestBirdA is the price of the cheapest paid action.
const cheapestBirdA = 200

// actionField returns the Action oneof field number of a, or 0.
func actionField(a *pb.Action) int32 {
	switch a.GetKind().(type) {
	case *pb.Action_Ask_:
		return 1
	case *pb.Action_Stop_:
		return 2
	case *pb.Action_SubmitSql_:
		return 3
	case *pb.Action_Unparsed_:
		return 4
	case *pb.Action_Execute_:
		return 5
	case *pb.Action_GetSchema_:
		return 6
	case *pb.Action_GetAllColumnMeanings_:
		return 7
	case *pb.Action_GetColumnMeaning_:
		return 8
	case *pb.Action_GetAllExternalKnowledgeNames_:
		return 9
	case *pb.Action_GetKnowledgeDefinition_:
		return 10
	case *pb.Action_GetAllKnowledgeDefinitions_:
		return 11
	}
	return 0
}

// resolveBirdA checks BIRD_A's options on task t and sets its budget in st.
func resolveBirdA(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState) error {
	patience := int32(DefaultCoinPatience)
	if o.Patience != nil {
		patience = o.GetPatience()
		if patience < 0 || patience > MaxPatience {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.patience", "%d is outside 0..%d", patience, MaxPatience)
		}
	}
	st.CoinsTotalMilli = int64(birdABaseCoins+2*len(t.Counted())+int(patience)) * 1000
	// The questions the coins could buy, for the question counters.
	st.Budget = int32(st.CoinsTotalMilli / birdACost[1])
	return nil
}

// applyBirdA applies one action under BIRD_A.
func (ep *episode) applyBirdA(ctx context.Context, a *pb.Action) error {
	st := ep.st
	f := actionField(a)
	if f == 0 {
		return errorf(InvalidArgument, ReasonInvalidAction, "action", "no action is set (want ask, submit_sql, stop, unparsed or a tool)")
	}
	if f == 2 { // stop
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_STOP, "")
		ep.endSubtask(birdStop)
		return nil
	}
	cost := birdACost[f]
	left := st.CoinsTotalMilli - st.CoinsUsedMilli
	if cost > left {
		if f == 3 {
			// The free final submit: scored for its sub-task, and the end.
			return ep.submitBirdA(ctx, a.GetSubmitSql().GetSql(), true)
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
	st.CoinsUsedMilli += cost
	if len(st.ActionLog) < maxActionLog {
		st.ActionLog = append(st.ActionLog, byte(f))
	}
	switch k := a.GetKind().(type) {
	case *pb.Action_Ask_:
		return ep.ask(ctx, k.Ask.GetText())
	case *pb.Action_SubmitSql_:
		return ep.submitBirdA(ctx, k.SubmitSql.GetSql(), false)
	case *pb.Action_Unparsed_:
		ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_UNPARSED, BoundText(k.Unparsed.GetText(), MaxQuestionBytes))
		ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_NOTICE, birdAUnparsed)
		return nil
	}
	ep.turn(pb.Role_ROLE_POLICY, pb.TurnKind_TURN_KIND_TOOL_CALL, BoundText(callText(a), maxToolCallBytes))
	out, err := ep.tool(ctx, a)
	if err != nil {
		return err
	}
	if ep.st.Phase == pb.Phase_PHASE_DONE {
		return nil // the environment failed
	}
	ep.turn(pb.Role_ROLE_ENVIRONMENT, pb.TurnKind_TURN_KIND_TOOL_RESULT, BoundText(out, MaxToolResultBytes))
	return nil
}

// birdAUnparsed answers an unparsed output under BIRD_A.
const birdAUnparsed = "Your output could not be read as an action; 0.2 coins are spent. Use one action per turn."

// coins formats thousandths of a coin.
func coins(milli int64) string {
	return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
}

// submitBirdA verifies a BIRD_A submission for the current sub-task; free
// is the final submission the budget could not pay for, which ends the
// episode whatever its verdict.
func (ep *episode) submitBirdA(ctx context.Context, sql string, free bool) error {
	st := ep.st
	v, ok, err := ep.verifySubmission(ctx, sql)
	if !ok {
		return err
	}
	switch {
	case v.Success && st.Subtask == 1:
		st.Phase1RewardMilli = birdPhase1First
		if !free {
			ep.releaseFollowUp(sql)
			return nil
		}
	case v.Success:
		st.Phase2RewardMilli = birdPhase2First
		st.Phase = pb.Phase_PHASE_DONE
		st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
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
	st.Phase = pb.Phase_PHASE_DONE
	st.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	return nil
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
	t := ep.task
	view := ep.env.views[t]
	db := view.GetDatabase()
	switch k := a.GetKind().(type) {
	case *pb.Action_Execute_:
		return ep.execute(ctx, k.Execute.GetSql())
	case *pb.Action_GetSchema_:
		return db.GetSchema(), nil
	case *pb.Action_GetAllColumnMeanings_:
		keys := make([]string, 0, len(db.GetColumnMeanings()))
		for key := range db.GetColumnMeanings() {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		if len(keys) == 0 {
			return "No column meanings are recorded for this database.", nil
		}
		var b strings.Builder
		for _, key := range keys {
			fmt.Fprintf(&b, "%s: %s\n", key, db.GetColumnMeanings()[key])
		}
		return b.String(), nil
	case *pb.Action_GetColumnMeaning_:
		want := k.GetColumnMeaning.GetTable() + "." + k.GetColumnMeaning.GetColumn()
		for key, m := range db.GetColumnMeanings() {
			if strings.EqualFold(key, want) {
				return key + ": " + m, nil
			}
		}
		return "No meaning is recorded for " + BoundText(want, 256) + ".", nil
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
		name := k.GetKnowledgeDefinition.GetName()
		for _, e := range db.GetKnowledge() {
			if strings.EqualFold(strings.TrimSpace(name), e.GetName()) {
				return e.GetName() + ": " + e.GetDefinition(), nil
			}
		}
		// A hidden entry reads as an unknown one.
		return "No external knowledge entry is named " + strconv.Quote(BoundText(name, 256)) + ".", nil
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

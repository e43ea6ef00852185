package driver

import (
	"context"
	"fmt"
	"maps"

	pb "avtgym/proto/avtgym/v1"
)

// BIRD_A (BIRD-Interact's a-Interact, PROTOCOL.md §8): the policy asks,
// explores the database with tools and submits, paying coins from a
// budget of 6 + 2·m + patience, charged by the server before each action.
// The driver reads the price list the environment publishes
// (EnvService.ListProtocols) at reset, so that a policy can plan with
// Episode.CostMilli; the server's budget (Allowance) is what counts.

// The action names ActionName gives, as records and reports spell them.
const (
	ActAsk                          = "ask"
	ActStop                         = "stop"
	ActSubmitSQL                    = "submit_sql"
	ActUnparsed                     = "unparsed"
	ActExecute                      = "execute"
	ActGetSchema                    = "get_schema"
	ActGetAllColumnMeanings         = "get_all_column_meanings"
	ActGetColumnMeaning             = "get_column_meaning"
	ActGetAllExternalKnowledgeNames = "get_all_external_knowledge_names"
	ActGetKnowledgeDefinition       = "get_knowledge_definition"
	ActGetAllKnowledgeDefinitions   = "get_all_knowledge_definitions"
)

// ActionNames lists every action name, in the order of the Action oneof
// (the tools last): the column order of the per-action reports.
var ActionNames = []string{
	ActAsk, ActStop, ActSubmitSQL, ActUnparsed,
	ActExecute, ActGetSchema, ActGetAllColumnMeanings, ActGetColumnMeaning,
	ActGetAllExternalKnowledgeNames, ActGetKnowledgeDefinition, ActGetAllKnowledgeDefinitions,
}

// ToolNames lists BIRD_A's tools, in the order of the Action oneof.
var ToolNames = ActionNames[4:]

// CostMilli is what an action of the named type costs in this episode, in
// thousandths of a coin, as the environment published it (ListProtocols;
// under BIRD_A ask 2000, submit_sql 3000, execute 1000, …, unparsed 200,
// stop 0). It is 0 when the budget is not in coins or the name unknown.
func (e *Episode) CostMilli(name string) int64 { return e.prices[name] }

// RulesSource is an environment that publishes its protocols' rules
// (EnvService.ListProtocols): Remote and env.Env are.
type RulesSource interface {
	ListProtocols(ctx context.Context, req *pb.ListProtocolsRequest) (*pb.ListProtocolsResponse, error)
}

// pricesOf reads protocol p's price list from env, in thousandths of a
// coin by action name.
func pricesOf(ctx context.Context, env Env, p pb.Protocol) (map[string]int64, error) {
	src, ok := env.(RulesSource)
	if !ok {
		return nil, fmt.Errorf("driver: the budget is in coins but the environment (%T) does not publish its prices (ListProtocols)", env)
	}
	resp, err := src.ListProtocols(ctx, &pb.ListProtocolsRequest{})
	if err != nil {
		return nil, fmt.Errorf("list protocols: %w", err)
	}
	for _, info := range resp.GetProtocols() {
		if info.GetProtocol() != p {
			continue
		}
		prices := make(map[string]int64, len(info.GetPrices()))
		for _, ap := range info.GetPrices() {
			prices[ap.GetAction()] = ap.GetCostMilli()
		}
		return prices, nil
	}
	return nil, fmt.Errorf("driver: the environment does not list protocol %v (ListProtocols)", p)
}

// ActionName names an action's type: ask, stop, submit_sql, unparsed,
// execute, get_schema, get_all_column_meanings, get_column_meaning,
// get_all_external_knowledge_names, get_knowledge_definition or
// get_all_knowledge_definitions ("" for an empty action).
func ActionName(a *pb.Action) string {
	switch a.GetKind().(type) {
	case *pb.Action_Ask_:
		return ActAsk
	case *pb.Action_Stop_:
		return ActStop
	case *pb.Action_SubmitSql_:
		return ActSubmitSQL
	case *pb.Action_Unparsed_:
		return ActUnparsed
	case *pb.Action_Execute_:
		return ActExecute
	case *pb.Action_GetSchema_:
		return ActGetSchema
	case *pb.Action_GetAllColumnMeanings_:
		return ActGetAllColumnMeanings
	case *pb.Action_GetColumnMeaning_:
		return ActGetColumnMeaning
	case *pb.Action_GetAllExternalKnowledgeNames_:
		return ActGetAllExternalKnowledgeNames
	case *pb.Action_GetKnowledgeDefinition_:
		return ActGetKnowledgeDefinition
	case *pb.Action_GetAllKnowledgeDefinitions_:
		return ActGetAllKnowledgeDefinitions
	}
	return ""
}

// IsBird reports whether p is one of BIRD-Interact's protocols (BIRD_C or
// BIRD_A): two sub-tasks, the client's SQL, the sub-task reward.
func IsBird(p pb.Protocol) bool {
	return p == pb.Protocol_PROTOCOL_BIRD_C || p == pb.Protocol_PROTOCOL_BIRD_A
}

// The actions, built.

// AskAction is an ask action.
func AskAction(q string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: q}}}
}

// StopAction is a stop action.
func StopAction() *pb.Action { return &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}} }

// SubmitSQLAction is a submit_sql action.
func SubmitSQLAction(sql string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: sql}}}
}

// UnparsedAction reports model output that could not be parsed.
func UnparsedAction(text string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Unparsed_{Unparsed: &pb.Action_Unparsed{Text: text}}}
}

// ExecuteAction runs read-only SQL (BIRD_A's execute tool).
func ExecuteAction(sql string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Execute_{Execute: &pb.Action_Execute{Sql: sql}}}
}

// GetSchemaAction asks for the database's schema.
func GetSchemaAction() *pb.Action {
	return &pb.Action{Kind: &pb.Action_GetSchema_{GetSchema: &pb.Action_GetSchema{}}}
}

// GetAllColumnMeaningsAction asks for every column's public meaning.
func GetAllColumnMeaningsAction() *pb.Action {
	return &pb.Action{Kind: &pb.Action_GetAllColumnMeanings_{GetAllColumnMeanings: &pb.Action_GetAllColumnMeanings{}}}
}

// GetColumnMeaningAction asks for one column's public meaning.
func GetColumnMeaningAction(table, column string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_GetColumnMeaning_{GetColumnMeaning: &pb.Action_GetColumnMeaning{Table: table, Column: column}}}
}

// GetAllExternalKnowledgeNamesAction asks for the public knowledge entries'
// names.
func GetAllExternalKnowledgeNamesAction() *pb.Action {
	return &pb.Action{Kind: &pb.Action_GetAllExternalKnowledgeNames_{GetAllExternalKnowledgeNames: &pb.Action_GetAllExternalKnowledgeNames{}}}
}

// GetKnowledgeDefinitionAction asks for one public knowledge entry's
// definition.
func GetKnowledgeDefinitionAction(name string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_GetKnowledgeDefinition_{GetKnowledgeDefinition: &pb.Action_GetKnowledgeDefinition{Name: name}}}
}

// GetAllKnowledgeDefinitionsAction asks for every public knowledge entry
// with its definition.
func GetAllKnowledgeDefinitionsAction() *pb.Action {
	return &pb.Action{Kind: &pb.Action_GetAllKnowledgeDefinitions_{GetAllKnowledgeDefinitions: &pb.Action_GetAllKnowledgeDefinitions{}}}
}

// The tools, stepped. Each returns the step's error; the tool's output is
// ToolResult.

// Execute runs read-only SQL on the task's database (1 coin).
func (e *Episode) Execute(ctx context.Context, sql string) error {
	return e.Do(ctx, ExecuteAction(sql))
}

// GetSchema asks for the database's schema (1 coin).
func (e *Episode) GetSchema(ctx context.Context) error { return e.Do(ctx, GetSchemaAction()) }

// GetAllColumnMeanings asks for every column's public meaning (1 coin).
func (e *Episode) GetAllColumnMeanings(ctx context.Context) error {
	return e.Do(ctx, GetAllColumnMeaningsAction())
}

// GetColumnMeaning asks for one column's public meaning (0.5 coins).
func (e *Episode) GetColumnMeaning(ctx context.Context, table, column string) error {
	return e.Do(ctx, GetColumnMeaningAction(table, column))
}

// GetAllExternalKnowledgeNames asks for the public knowledge entries' names
// (0.5 coins).
func (e *Episode) GetAllExternalKnowledgeNames(ctx context.Context) error {
	return e.Do(ctx, GetAllExternalKnowledgeNamesAction())
}

// GetKnowledgeDefinition asks for one public knowledge entry's definition
// (0.5 coins).
func (e *Episode) GetKnowledgeDefinition(ctx context.Context, name string) error {
	return e.Do(ctx, GetKnowledgeDefinitionAction(name))
}

// GetAllKnowledgeDefinitions asks for every public knowledge entry with its
// definition (1 coin).
func (e *Episode) GetAllKnowledgeDefinitions(ctx context.Context) error {
	return e.Do(ctx, GetAllKnowledgeDefinitionsAction())
}

// ToolResult is the text of the last step's TOOL_RESULT turn, and whether
// the last step has one (false before the first step, after a non-tool
// action, or when the tool could not be paid for).
func (e *Episode) ToolResult() (string, bool) {
	turns := e.last.GetObservation().GetTurns()
	for i := len(turns) - 1; i >= 0; i-- {
		if t := turns[i]; t.GetKind() == pb.TurnKind_TURN_KIND_TOOL_RESULT {
			return t.GetText(), true
		}
	}
	return "", false
}

// Coins reports whether the episode's budget is in coins (BIRD_A).
func (e *Episode) Coins() bool {
	return e.allowance.GetUnit() == pb.BudgetUnit_BUDGET_UNIT_COINS
}

// CoinsLeftMilli is what remains of a coin budget in thousandths of a coin
// (0 when the budget is not in coins).
func (e *Episode) CoinsLeftMilli() int64 {
	if !e.Coins() {
		return 0
	}
	return e.allowance.GetRemainingMilli()
}

// CoinsLeft is what remains of a coin budget, in coins (0 when the budget
// is not in coins).
func (e *Episode) CoinsLeft() float64 { return float64(e.CoinsLeftMilli()) / 1000 }

// CoinBudget is a coin budget's total and what has been spent of it, in
// coins (0, 0 when the budget is not in coins).
func (e *Episode) CoinBudget() (total, used float64) {
	if !e.Coins() {
		return 0, 0
	}
	return float64(e.allowance.GetTotalMilli()) / 1000, float64(e.allowance.GetUsedMilli()) / 1000
}

// Affords reports whether the coins left pay for an action of the named
// type (always true when the budget is not in coins).
func (e *Episode) Affords(name string) bool {
	return !e.Coins() || e.CostMilli(name) <= e.CoinsLeftMilli()
}

// CoinsSpent is the coins each action type spent so far under BIRD_A, by
// ActionName (only the types taken; a free final submit counts 0).
func (e *Episode) CoinsSpent() map[string]float64 {
	out := make(map[string]float64, len(e.coinsSpent))
	for k, v := range e.coinsSpent {
		out[k] = float64(v) / 1000
	}
	return out
}

// ActionCounts is how many actions of each type were taken under BIRD_A.
func (e *Episode) ActionCounts() map[string]int { return maps.Clone(e.actions) }

func (e *Episode) coinsUsedMilli() int64 {
	if !e.Coins() {
		return 0
	}
	return e.allowance.GetUsedMilli()
}

func (e *Episode) count(name string, milli int64) {
	if name == "" {
		return
	}
	if e.coinsSpent == nil {
		e.coinsSpent, e.actions = map[string]int64{}, map[string]int{}
	}
	e.coinsSpent[name] += max(0, milli)
	e.actions[name]++
}

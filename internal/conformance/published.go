package conformance

// The rules the server publishes (EnvService.ListProtocols) must be the
// rules it applies: the actions each protocol lists are the ones it
// accepts, BIRD_A's prices are the documented ones (which the budget
// checks charge), and the fixed numbers are the documented numbers.

import (
	"maps"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// everyAction is one action of every kind of the Action oneof, by field
// name, with arguments a task accepts.
var everyAction = map[string]*pb.Action{
	"ask":                              driver.AskAction("What do you mean?"),
	"stop":                             driver.StopAction(),
	"submit_sql":                       driver.SubmitSQLAction("SELECT 1"),
	"unparsed":                         driver.UnparsedAction("conformance: published actions"),
	"execute":                          {Kind: &pb.Action_Execute_{Execute: &pb.Action_Execute{Sql: "SELECT 1"}}},
	"get_schema":                       {Kind: &pb.Action_GetSchema_{GetSchema: &pb.Action_GetSchema{}}},
	"get_all_column_meanings":          {Kind: &pb.Action_GetAllColumnMeanings_{GetAllColumnMeanings: &pb.Action_GetAllColumnMeanings{}}},
	"get_column_meaning":               {Kind: &pb.Action_GetColumnMeaning_{GetColumnMeaning: &pb.Action_GetColumnMeaning{Table: "t", Column: "c"}}},
	"get_all_external_knowledge_names": {Kind: &pb.Action_GetAllExternalKnowledgeNames_{GetAllExternalKnowledgeNames: &pb.Action_GetAllExternalKnowledgeNames{}}},
	"get_knowledge_definition":         {Kind: &pb.Action_GetKnowledgeDefinition_{GetKnowledgeDefinition: &pb.Action_GetKnowledgeDefinition{Name: "k"}}},
	"get_all_knowledge_definitions":    {Kind: &pb.Action_GetAllKnowledgeDefinitions_{GetAllKnowledgeDefinitions: &pb.Action_GetAllKnowledgeDefinitions{}}},
}

// published are the documented numbers a protocol's ProtocolInfo must
// carry (PROTOCOL.md §2, §8, §9).
var published = map[pb.Protocol]*pb.ProtocolInfo{
	pb.Protocol_PROTOCOL_AMBITAB: {DefaultPatience: 2, MaxPatience: 64},
	pb.Protocol_PROTOCOL_BIRD_C:  {DefaultPatience: 3, MaxPatience: 32},
	pb.Protocol_PROTOCOL_BIRD_A:  {DefaultPatience: 6, MaxPatience: 32, BaseCoinsMilli: 6000, CoinsPerAmbiguityMilli: 2000},
	pb.Protocol_PROTOCOL_TIDE_F:  {TurnLimit: 20},
	pb.Protocol_PROTOCOL_TIDE_P:  {TurnLimit: 20},
}

func checkPublished(t *testing.T, tg *Target, p *protocol, tk *task) {
	resp, err := tg.Protocols(t.Context(), &pb.ListProtocolsRequest{})
	if err != nil {
		t.Fatalf("ListProtocols: %v", err)
	}
	var info *pb.ProtocolInfo
	for _, pi := range resp.GetProtocols() {
		if pi.GetProtocol() == p.proto {
			info = pi
		}
	}
	if info == nil {
		t.Fatalf("ListProtocols does not list %s", p.name)
	}
	want := published[p.proto]
	if info.GetDefaultPatience() != want.GetDefaultPatience() || info.GetMaxPatience() != want.GetMaxPatience() ||
		info.GetBaseCoinsMilli() != want.GetBaseCoinsMilli() || info.GetCoinsPerAmbiguityMilli() != want.GetCoinsPerAmbiguityMilli() ||
		info.GetTurnLimit() != want.GetTurnLimit() || info.GetBudget() == "" || info.GetDraws() == "" {
		t.Errorf("%s publishes %v; want the documented numbers %v and a budget and draws text", p.name, info, want)
	}
	// The prices: BIRD_A's are the documented ones, for every action it
	// lists; no other protocol charges.
	prices := map[string]int64{}
	for _, pr := range info.GetPrices() {
		prices[pr.GetAction()] = pr.GetCostMilli()
	}
	if p.proto == pb.Protocol_PROTOCOL_BIRD_A {
		if !maps.Equal(prices, birdAPrices) {
			t.Errorf("BIRD_A publishes the prices %v; the documented ones are %v", prices, birdAPrices)
		}
	} else if len(prices) > 0 {
		t.Errorf("%s publishes prices %v, and charges none", p.name, prices)
	}
	// The actions: each one listed is taken at reset, each other refused as
	// INVALID_ACTION.
	for _, name := range slices.Sorted(maps.Keys(everyAction)) {
		pl := newPlay(t, tg, p, tk, &stats{})
		pl.start(nil)
		_, err := tg.Env.Step(t.Context(), &pb.StepRequest{Token: pl.cur.tok, Action: everyAction[name]})
		code, reason := codes.OK, ""
		if err != nil {
			code, reason = tg.ErrorOf(err)
		}
		refused := code == codes.InvalidArgument && reason == "INVALID_ACTION"
		if listed := slices.Contains(info.GetActions(), name); listed == refused {
			t.Errorf("%s lists %q: %v; but the action at reset gets %s / %q (%v)", p.name, name, listed, code, reason, err)
		}
	}
}

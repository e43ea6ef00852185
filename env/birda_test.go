package env_test

import (
	"context"
	"slices"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"avtgym/corpus"
	"avtgym/engines"
	. "avtgym/env"
	pb "avtgym/proto/avtgym/v1"
)

// loadDemo loads the demo corpus, whose followup-001 has a follow-up.
func loadDemo(t *testing.T) *corpus.Corpus {
	t.Helper()
	c, err := corpus.LoadDemo(context.Background(), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var birdA = &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A}

// sampleActions has one action of every kind BIRD_A accepts, by the
// Action oneof's field name.
func sampleActions() map[string]*pb.Action {
	return map[string]*pb.Action{
		"ask":                              askAction("What do you mean by poor reviews?"),
		"stop":                             stopAction(),
		"submit_sql":                       submitAction("SELECT 1"),
		"unparsed":                         {Kind: &pb.Action_Unparsed_{Unparsed: &pb.Action_Unparsed{Text: "hmm"}}},
		"execute":                          {Kind: &pb.Action_Execute_{Execute: &pb.Action_Execute{Sql: "SELECT 1"}}},
		"get_schema":                       {Kind: &pb.Action_GetSchema_{GetSchema: &pb.Action_GetSchema{}}},
		"get_all_column_meanings":          {Kind: &pb.Action_GetAllColumnMeanings_{GetAllColumnMeanings: &pb.Action_GetAllColumnMeanings{}}},
		"get_column_meaning":               {Kind: &pb.Action_GetColumnMeaning_{GetColumnMeaning: &pb.Action_GetColumnMeaning{Table: "reviews", Column: "rating"}}},
		"get_all_external_knowledge_names": {Kind: &pb.Action_GetAllExternalKnowledgeNames_{GetAllExternalKnowledgeNames: &pb.Action_GetAllExternalKnowledgeNames{}}},
		"get_knowledge_definition":         {Kind: &pb.Action_GetKnowledgeDefinition_{GetKnowledgeDefinition: &pb.Action_GetKnowledgeDefinition{Name: "x"}}},
		"get_all_knowledge_definitions":    {Kind: &pb.Action_GetAllKnowledgeDefinitions_{GetAllKnowledgeDefinitions: &pb.Action_GetAllKnowledgeDefinitions{}}},
	}
}

// oneofField is the Action oneof's field that a sets.
func oneofField(a *pb.Action) protoreflect.FieldDescriptor {
	m := a.ProtoReflect()
	return m.WhichOneof(m.Descriptor().Oneofs().ByName("kind"))
}

// TestBirdAPrices checks the published price list: one entry per case of
// the Action oneof, in its order, named as its field; PROTOCOL.md §8's
// prices; a fresh slice per call; and that a step charges what the list
// says, action by action.
func TestBirdAPrices(t *testing.T) {
	prices := BirdAPrices()
	fields := (&pb.Action{}).ProtoReflect().Descriptor().Oneofs().ByName("kind").Fields()
	if len(prices) != fields.Len() {
		t.Fatalf("%d prices for %d actions", len(prices), fields.Len())
	}
	byName := map[string]int64{}
	for i, p := range prices {
		if want := string(fields.Get(i).Name()); p.Action != want {
			t.Errorf("price %d names %q, the oneof's field %d is %q", i, p.Action, i, want)
		}
		byName[p.Action] = p.CostMilli
	}
	for name, want := range map[string]int64{"ask": 2000, "submit_sql": 3000, "unparsed": 200, "stop": 0, "execute": 1000, "get_column_meaning": 500} {
		if byName[name] != want {
			t.Errorf("%s costs %d thousandths, PROTOCOL.md §8 says %d", name, byName[name], want)
		}
	}
	prices[0].CostMilli = -1
	if BirdAPrices()[0].CostMilli == -1 {
		t.Error("BirdAPrices returned the table itself")
	}

	e, _ := newEnv(t, loadDemo(t), nil)
	for name, a := range sampleActions() {
		ep := resetOne(t, e, "followup-001", birdA)
		r := mustStep(t, e, ep.Token, a, false)
		if got := r.GetObservation().GetBudget().GetUsedMilli(); got != byName[name] {
			t.Errorf("%s: the step charged %d thousandths, the price list says %d", name, got, byName[name])
		}
	}
}

// TestBirdAActionLog: the token's action log keeps one byte per paid
// action, the action's Action field number as WhichOneof reads it, and a
// stop (free) adds nothing.
func TestBirdAActionLog(t *testing.T) {
	key := RandomKey()
	e, _ := newEnv(t, loadDemo(t), key)
	s := mustSealer(t, key)
	tok := resetOne(t, e, "followup-001", birdA).Token
	if log := openState(t, s, tok).GetBird().GetActionLog(); len(log) != 0 {
		t.Fatalf("a reset's action log is %v", log)
	}
	actions := sampleActions()
	var want []byte
	for _, name := range []string{"get_schema", "ask", "execute", "unparsed", "get_knowledge_definition", "stop"} {
		a := actions[name]
		r := mustStep(t, e, tok, a, false)
		tok = r.Token
		if name != "stop" {
			want = append(want, byte(oneofField(a).Number()))
		}
		if got := openState(t, s, tok).GetBird().GetActionLog(); !slices.Equal(got, want) {
			t.Errorf("after %s: action log %v, want %v", name, got, want)
		}
	}
}

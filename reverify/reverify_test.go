package reverify

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// TestToolActionReadsEnvsCallText: each tool call as env writes it in a
// tool_call turn (env/birda.go callText) reads back as the same action;
// anything else is replayed as the unparsed output it was.
func TestToolActionReadsEnvsCallText(t *testing.T) {
	for text, want := range map[string]*pb.Action{
		`execute("SELECT "a", 'b' FROM t")`:        driver.ExecuteAction(`SELECT "a", 'b' FROM t`),
		`get_schema()`:                             driver.GetSchemaAction(),
		`get_all_column_meanings()`:                driver.GetAllColumnMeaningsAction(),
		`get_column_meaning("sales", "amount")`:    driver.GetColumnMeaningAction("sales", "amount"),
		`get_all_external_knowledge_names()`:       driver.GetAllExternalKnowledgeNamesAction(),
		`get_knowledge_definition("VIP \"gold\"")`: driver.GetKnowledgeDefinitionAction(`VIP "gold"`),
		`get_all_knowledge_definitions()`:          driver.GetAllKnowledgeDefinitionsAction(),
		`ask("Which region?")`:                     driver.AskAction("Which region?"),
		`I think the answer is 42`:                 driver.UnparsedAction(`I think the answer is 42`),
		`get_column_meaning("only one")`:           driver.UnparsedAction(`get_column_meaning("only one")`),
		`drop_table("x")`:                          driver.UnparsedAction(`drop_table("x")`),
	} {
		if got := toolAction(text); !proto.Equal(got, want) {
			t.Errorf("%s: %v, want %v", text, got, want)
		}
	}
}

// TestActionsReadPolicyTurnsOnly: the replay takes the policy's turns, in
// order, and nothing the oracle or the environment said.
func TestActionsReadPolicyTurnsOnly(t *testing.T) {
	r := &driver.Record{Turns: []driver.RecordTurn{
		{Role: "environment", Kind: "request", Text: "List the top customers"},
		{Role: "prefilled", Kind: "question", Text: "Pre-filled?"},
		{Role: "oracle", Kind: "reply", Text: "Yes"},
		{Role: "policy", Kind: "question", Text: "Which region?"},
		{Role: "oracle", Kind: "reply", Text: "West"},
		{Role: "policy", Kind: "sql", Text: "SELECT 1"},
		{Role: "environment", Kind: "feedback", Text: "wrong"},
		{Role: "policy", Kind: "unparsed", Text: "hmm"},
		{Role: "policy", Kind: "stop"},
	}}
	got, err := Actions(r)
	if err != nil {
		t.Fatal(err)
	}
	want := []*pb.Action{driver.AskAction("Which region?"), driver.SubmitSQLAction("SELECT 1"), driver.UnparsedAction("hmm"), driver.StopAction()}
	if len(got) != len(want) {
		t.Fatalf("%d actions, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("action %d: %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := Actions(&driver.Record{Turns: []driver.RecordTurn{{Role: "policy", Kind: "drift"}}}); err == nil {
		t.Error("a policy turn of an unknown kind was replayed")
	}
}

package policy

import (
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

func birdAOptions(patience *int32) *pb.EpisodeOptions {
	return &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A, Patience: patience}
}

// The explorer's tools and what each costs, in coins.
var explorerTools = map[string]float64{
	"execute": 1, "get_schema": 1, "get_all_column_meanings": 1, "get_column_meaning": 0.5,
	"get_all_external_knowledge_names": 0.5, "get_knowledge_definition": 0.5, "get_all_knowledge_definitions": 1,
}

// TestExplorerUnderBirdA: the scripted explorer calls each tool once, asks
// each counted term canonically and submits the references: reward 1.0
// (0.7 + 0.3) on every demo task with a follow-up, with the coins spent per
// action type as priced (tools 5.5, asks 2m, two submissions 6). With
// less patience it skips the tools it cannot afford and still reaches 1.0.
func TestExplorerUnderBirdA(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	rs := rollout(t, srv, Explorer(), birdAOptions(nil))
	if len(rs) != 5 {
		t.Fatalf("%d episodes, want the 5 demo follow-up tasks", len(rs))
	}
	for _, r := range rs {
		if r.Status != "TERMINATED" || val(r.Reward) != 1 || val(r.Phase1) != 0.7 || val(r.Phase2) != 0.3 || r.Subtask != 2 || r.Protocol != "bird-a" {
			t.Errorf("%s: %s %s reward %v phase1 %v phase2 %v subtask %d", r.TaskID, r.Status, r.Error, val(r.Reward), val(r.Phase1), val(r.Phase2), r.Subtask)
			continue
		}
		for tool, c := range explorerTools {
			if r.CoinsSpent[tool] != c || r.Actions[tool] != 1 {
				t.Errorf("%s: %s spent %v (%d calls), want %v once", r.TaskID, tool, r.CoinsSpent[tool], r.Actions[tool], c)
			}
		}
		if r.CoinsSpent["ask"] != 2*float64(r.Counted) || r.Actions["ask"] != r.Counted || r.CoinsSpent["submit_sql"] != 6 || r.Actions["submit_sql"] != 2 {
			t.Errorf("%s: asks %v (%d), submissions %v (%d), m %d", r.TaskID, r.CoinsSpent["ask"], r.Actions["ask"], r.CoinsSpent["submit_sql"], r.Actions["submit_sql"], r.Counted)
		}
		if want := 11.5 + 2*float64(r.Counted); val(r.CoinsUsed) != want || val(r.CoinBudget) != 12+2*float64(r.Counted) {
			t.Errorf("%s: coins %v of %v, want %v", r.TaskID, val(r.CoinsUsed), val(r.CoinBudget), want)
		}
		if len(r.Questions) != r.Counted || len(r.CreditedTerms) != r.Counted {
			t.Errorf("%s: questions %q credited %q", r.TaskID, r.Questions, r.CreditedTerms)
		}
	}
	for _, p := range []int32{0, 2, 4} {
		for _, r := range rollout(t, srv, Explorer(), birdAOptions(&p)) {
			var tools float64
			for tool := range explorerTools {
				tools += r.CoinsSpent[tool]
			}
			// The tools get what the asks and both submissions leave:
			// the patience (the explorer's order fits 2 and 4 exactly).
			if val(r.Reward) != 1 || r.Status != "TERMINATED" || tools != float64(p) {
				t.Errorf("patience %d, %s: %s %s reward %v, tools %v coins", p, r.TaskID, r.Status, r.Error, val(r.Reward), tools)
			}
		}
	}
}

// TestFullAndWrongReadingUnderBirdA: full asks and submits (no tools):
// reward 1.0; the wrong reading submits its SQL once (phase 1 fails, a
// feedback turn), then stops: reward 0, the follow-up never released.
func TestFullAndWrongReadingUnderBirdA(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	for _, r := range rollout(t, srv, Scripted(probe.Full), birdAOptions(nil)) {
		if val(r.Reward) != 1 || r.Status != "TERMINATED" || r.Actions["submit_sql"] != 2 || r.Actions["execute"] != 0 || r.CoinsSpent["ask"] != 2*float64(r.Counted) {
			t.Errorf("full on %s: %s %s reward %v actions %v", r.TaskID, r.Status, r.Error, val(r.Reward), r.Actions)
		}
	}
	w, err := LoadWrongReadings(demoReadings)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rollout(t, srv, w, birdAOptions(nil)) {
		if val(r.Reward) != 0 || val(r.Phase1) != 0 || r.Phase2 != nil || r.Subtask != 1 || r.Actions["submit_sql"] != 1 || r.Actions["stop"] != 1 {
			t.Errorf("wrong reading on %s: %s %s reward %v phase2 %v actions %v", r.TaskID, r.Status, r.Error, val(r.Reward), r.Phase2, r.Actions)
		}
	}
	// The askers that write no SQL stop: reward 0, scored.
	for _, r := range rollout(t, srv, Partial(), birdAOptions(nil)) {
		if r.Status == "RPC_FAILED" || r.Status == "ASKER_FAILED" || val(r.Reward) != 0 {
			t.Errorf("partial on %s: %s %s reward %v", r.TaskID, r.Status, r.Error, val(r.Reward))
		}
	}
}

// TestExplorerElsewhere: the explorer plays as full under the other
// protocols.
func TestExplorerElsewhere(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	for _, r := range rollout(t, srv, Explorer(), birdCOptions(nil)) {
		if val(r.Reward) != 1 {
			t.Errorf("bird-c %s: %s %s reward %v", r.TaskID, r.Status, r.Error, val(r.Reward))
		}
	}
}

func TestExplorerHelpers(t *testing.T) {
	ddl := "-- comment\nCREATE TABLE IF NOT EXISTS \"customers\" (\n  customer_id INTEGER PRIMARY KEY,\n name TEXT);\nCREATE TABLE b (x INT);"
	if tb, c := schemaColumn(ddl); tb != "customers" || c != "customer_id" {
		t.Errorf("schemaColumn: %q %q", tb, c)
	}
	v := &pb.TaskView{Database: &pb.DatabaseView{Schema: ddl, ColumnMeanings: map[string]string{"orders.status": "x", "b.x": "y"}}}
	if tb, c := firstColumn(v); tb != "b" || c != "x" {
		t.Errorf("firstColumn: %q %q", tb, c)
	}
	for names, want := range map[string]string{
		"":                                    "",
		"No external knowledge is available.": "",
		"senior patient\nheart drugs\n":       "senior patient",
		`["a", "b"]`:                          "a",
		"Entries:\n- k one\n":                 "k one",
	} {
		if got := firstKnowledge(&pb.TaskView{}, names); got != want {
			t.Errorf("firstKnowledge(%q) = %q, want %q", names, got, want)
		}
	}
	if got := firstKnowledge(&pb.TaskView{Database: &pb.DatabaseView{Knowledge: []*pb.KnowledgeEntry{{Name: "v"}}}}, "w"); got != "v" {
		t.Errorf("from the view: %q", got)
	}
	if q := quoteIdent(`a"b`); q != `"a""b"` {
		t.Error(q)
	}
	if q := quoteIdent("orders"); q != "orders" {
		t.Error(q)
	}
	if !strings.Contains(driver.ActionNames[4], "execute") {
		t.Error(driver.ActionNames)
	}
}

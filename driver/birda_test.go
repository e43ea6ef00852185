package driver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

func startBirdA(t *testing.T, env driver.Env, task string, patience *int32) *driver.Episode {
	t.Helper()
	seed := uint64(1)
	ep, err := driver.Start(context.Background(), env, &pb.ResetRequest{Corpus: "demo", TaskId: task, Seed: &seed, IncludePrivileged: true,
		Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A, Patience: patience}})
	if err != nil {
		t.Fatalf("%s: %v", task, err)
	}
	return ep
}

// TestBirdADriver plays every demo follow-up task under BIRD_A through the
// driver's tool methods: the coin budget it reads (6 + 2m + 6), each
// tool's output and price, the follow-up's release, and the record's coins
// per action type.
func TestBirdADriver(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	env := driver.Remote(srv.Client.Env)
	ctx := context.Background()
	for _, task := range followUpTasks(t, srv) {
		t.Run(task, func(t *testing.T) {
			ep := startBirdA(t, env, task, nil)
			m := ep.Record(nil).Counted
			if ep.Protocol() != pb.Protocol_PROTOCOL_BIRD_A || ep.Subtask() != 1 || !ep.NeedsSQL() || !ep.Coins() || !ep.Asking() {
				t.Fatalf("after reset: protocol %s subtask %d needs SQL %v coins %v asking %v", ep.Protocol(), ep.Subtask(), ep.NeedsSQL(), ep.Coins(), ep.Asking())
			}
			want := float64(6 + 2*m + 6)
			if total, used := ep.CoinBudget(); total != want || used != 0 || ep.CoinsLeft() != want || ep.CoinsLeftMilli() != int64(want)*1000 {
				t.Fatalf("budget %v of %v, left %v; want %v", used, total, ep.CoinsLeft(), want)
			}
			if _, ok := ep.ToolResult(); ok {
				t.Fatal("a tool result before any step")
			}
			for _, n := range driver.ActionNames {
				if (n == driver.ActStop) != (ep.CostMilli(n) == 0) {
					t.Errorf("published price of %s: %d milli", n, ep.CostMilli(n))
				}
			}
			left := ep.CoinsLeftMilli()
			step := func(name string, do func() error, wantOut string) {
				t.Helper()
				if err := do(); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				out, ok := ep.ToolResult()
				if !ok || (wantOut != "" && !strings.Contains(out, wantOut)) {
					t.Errorf("%s: output %q (%v), want it to hold %q", name, out, ok, wantOut)
				}
				if got := left - ep.CoinsLeftMilli(); got != ep.CostMilli(name) {
					t.Errorf("%s cost %d milli, want %d", name, got, ep.CostMilli(name))
				}
				left = ep.CoinsLeftMilli()
			}
			step(driver.ActExecute, func() error { return ep.Execute(ctx, "SELECT 1 AS one") }, "one")
			step(driver.ActGetSchema, func() error { return ep.GetSchema(ctx) }, "CREATE TABLE")
			step(driver.ActGetAllColumnMeanings, func() error { return ep.GetAllColumnMeanings(ctx) }, "")
			step(driver.ActGetColumnMeaning, func() error { return ep.GetColumnMeaning(ctx, "nosuch", "col") }, "nosuch.col")
			step(driver.ActGetAllExternalKnowledgeNames, func() error { return ep.GetAllExternalKnowledgeNames(ctx) }, "")
			step(driver.ActGetKnowledgeDefinition, func() error { return ep.GetKnowledgeDefinition(ctx, "no such entry") }, "no such entry")
			step(driver.ActGetAllKnowledgeDefinitions, func() error { return ep.GetAllKnowledgeDefinitions(ctx) }, "")
			for _, q := range probe.Questions(probe.Full, ep.Terms(), ep.Budget()) {
				if err := ep.Ask(ctx, q); err != nil {
					t.Fatal(err)
				}
				if _, ok := ep.ToolResult(); ok {
					t.Error("an ask has a tool result")
				}
			}
			if err := ep.SubmitSQL(ctx, ep.ReferenceSQL()); err != nil {
				t.Fatal(err)
			}
			if ep.Done() || ep.Subtask() != 2 || len(ep.FollowUpReferenceSQL()) == 0 {
				t.Fatalf("after phase 1's reference: done %v subtask %d", ep.Done(), ep.Subtask())
			}
			if err := ep.SubmitSQL(ctx, ep.ReferenceSQL()); err != nil {
				t.Fatal(err)
			}
			if !ep.Done() {
				t.Fatal("the episode goes on after the follow-up's reference")
			}
			r := ep.Record(nil)
			if r.Protocol != "bird-a" || r.Subtask != 2 || r.Status != "TERMINATED" || val(r.Phase1) != 0.7 || val(r.Phase2) != 0.3 || val(r.Reward) != 1 {
				t.Errorf("record: protocol %s subtask %d %s phase1 %v phase2 %v reward %v", r.Protocol, r.Subtask, r.Status, deref(r.Phase1), deref(r.Phase2), deref(r.Reward))
			}
			spent := 5.5 + 2*float64(m) + 6
			if val(r.CoinBudget) != want || val(r.CoinsUsed) != spent {
				t.Errorf("coins %v of %v, want %v of %v", deref(r.CoinsUsed), deref(r.CoinBudget), spent, want)
			}
			wantSpent := map[string]float64{"execute": 1, "get_schema": 1, "get_all_column_meanings": 1, "get_column_meaning": 0.5,
				"get_all_external_knowledge_names": 0.5, "get_knowledge_definition": 0.5, "get_all_knowledge_definitions": 1, "submit_sql": 6}
			if m > 0 {
				wantSpent["ask"] = 2 * float64(m)
			}
			if !sameMap(r.CoinsSpent, wantSpent) || r.Actions["submit_sql"] != 2 || r.Actions["ask"] != m || r.Actions["execute"] != 1 {
				t.Errorf("coins spent %v, actions %v; want %v", r.CoinsSpent, r.Actions, wantSpent)
			}
			if r.TurnsUsed != 0 || r.TurnBudget != 0 {
				t.Errorf("turns %d of %d under BIRD_A", r.TurnsUsed, r.TurnBudget)
			}
		})
	}
}

// TestBirdAFreeSubmit: with patience 0 and the coins spent on tools, the
// submission the budget cannot pay for is free, scored, and ends the
// episode; the record counts it at 0 coins, and SQLRequired says when
// nothing but it is affordable.
func TestBirdAFreeSubmit(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	env := driver.Remote(srv.Client.Env)
	ctx := context.Background()
	zero := int32(0)
	ep := startBirdA(t, env, followUpTasks(t, srv)[0], &zero)
	for ep.CoinsLeftMilli() >= ep.CostMilli(driver.ActExecute) {
		if err := ep.Execute(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	for ep.CoinsLeftMilli() >= ep.CostMilli(driver.ActGetColumnMeaning) {
		if err := ep.GetColumnMeaning(ctx, "t", "c"); err != nil {
			t.Fatal(err)
		}
	}
	if ep.Done() || !ep.SQLRequired() || ep.Asking() || ep.CoinsLeft() != 0 {
		t.Fatalf("with %v coins left: done %v sql required %v asking %v", ep.CoinsLeft(), ep.Done(), ep.SQLRequired(), ep.Asking())
	}
	if err := ep.SubmitSQL(ctx, ep.ReferenceSQL()); err != nil {
		t.Fatal(err)
	}
	r := ep.Record(nil)
	if !ep.Done() || val(r.Phase1) != 0.7 || r.Phase2 != nil || val(r.Reward) != 0.7 || r.Subtask != 1 {
		t.Errorf("the free submit: done %v phase1 %v phase2 %v reward %v subtask %d", ep.Done(), deref(r.Phase1), deref(r.Phase2), deref(r.Reward), r.Subtask)
	}
	if r.CoinsSpent["submit_sql"] != 0 || r.Actions["submit_sql"] != 1 || val(r.CoinsUsed) != val(r.CoinBudget) {
		t.Errorf("coins spent %v, actions %v, used %v of %v", r.CoinsSpent, r.Actions, deref(r.CoinsUsed), deref(r.CoinBudget))
	}
	b, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(b), `"coins_spent":{`) || !strings.Contains(string(b), `"coin_budget":`) {
		t.Errorf("record JSON %s (%v)", b, err)
	}
}

// TestBirdCRecordUnchanged: BIRD_C and AMBITAB records carry none of
// BIRD_A's coin fields.
func TestBirdCRecordUnchanged(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	env := driver.Remote(srv.Client.Env)
	ep := startBirdC(t, env, followUpTasks(t, srv)[0], nil)
	if err := ep.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(ep.Record(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"coin", "actions"} {
		if strings.Contains(string(b), k) {
			t.Errorf("a BIRD_C record has %q: %s", k, b)
		}
	}
	if ep.Coins() || ep.CoinsLeft() != 0 || len(ep.CoinsSpent()) != 0 || !ep.Affords(driver.ActAsk) {
		t.Errorf("BIRD_C coins: %v %v %v", ep.Coins(), ep.CoinsLeft(), ep.CoinsSpent())
	}
}

func TestActionNames(t *testing.T) {
	for _, a := range []*pb.Action{
		driver.AskAction("q"), driver.StopAction(), driver.SubmitSQLAction("s"), driver.UnparsedAction("x"),
		driver.ExecuteAction("s"), driver.GetSchemaAction(), driver.GetAllColumnMeaningsAction(), driver.GetColumnMeaningAction("t", "c"),
		driver.GetAllExternalKnowledgeNamesAction(), driver.GetKnowledgeDefinitionAction("n"), driver.GetAllKnowledgeDefinitionsAction(),
	} {
		if n := driver.ActionName(a); n == "" {
			t.Errorf("%v: no name", a)
		}
	}
	if len(driver.ToolNames) != 7 || driver.ToolNames[0] != driver.ActExecute {
		t.Errorf("tools %v", driver.ToolNames)
	}
	for _, s := range []string{"bird-a", "BIRD_A", " bird-a "} {
		if p, err := driver.ParseProtocol(s); err != nil || p != pb.Protocol_PROTOCOL_BIRD_A || driver.ProtocolName(p) != "bird-a" {
			t.Errorf("%q: %v %v", s, p, err)
		}
	}
}

func val(x *float64) float64 {
	if x == nil {
		return -1
	}
	return *x
}

func sameMap(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// pricelessEnv hides the server's ListProtocols: a BIRD_A reset through it
// must fail, since the driver keeps no copy of the prices to fall back on.
type pricelessEnv struct{ driver.Env }

func TestBirdANeedsPublishedPrices(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	seed := uint64(1)
	req := &pb.ResetRequest{Corpus: "demo", TaskId: followUpTasks(t, srv)[0], Seed: &seed,
		Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A}}
	_, err := driver.Start(context.Background(), pricelessEnv{driver.Remote(srv.Client.Env)}, req)
	if err == nil || !strings.Contains(err.Error(), "ListProtocols") {
		t.Fatalf("BIRD_A without published prices: %v", err)
	}
	// Other protocols need no prices.
	req.Options.Protocol = pb.Protocol_PROTOCOL_BIRD_C
	if _, err := driver.Start(context.Background(), pricelessEnv{driver.Remote(srv.Client.Env)}, req); err != nil {
		t.Fatalf("BIRD_C: %v", err)
	}
}

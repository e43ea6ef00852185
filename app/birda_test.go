package app_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "avtgym/proto/avtgym/v1"
)

// resetA starts a BIRD_A episode on task (patience -1: the default),
// privileged data included.
func (b *birdC) resetA(task string, patience int32) *pb.Episode {
	b.t.Helper()
	opts := &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A}
	if patience >= 0 {
		opts.Patience = proto.Int32(patience)
	}
	r, err := b.env.Reset(context.Background(), &pb.ResetRequest{TaskId: task, Options: opts, IncludePrivileged: true})
	if err != nil {
		b.t.Fatalf("reset %s: %v", task, err)
	}
	return r.Episodes[0]
}

// The tools as actions.
var (
	getSchema     = &pb.Action{Kind: &pb.Action_GetSchema_{GetSchema: &pb.Action_GetSchema{}}}
	allMeanings   = &pb.Action{Kind: &pb.Action_GetAllColumnMeanings_{GetAllColumnMeanings: &pb.Action_GetAllColumnMeanings{}}}
	knowledgeList = &pb.Action{Kind: &pb.Action_GetAllExternalKnowledgeNames_{GetAllExternalKnowledgeNames: &pb.Action_GetAllExternalKnowledgeNames{}}}
	allKnowledge  = &pb.Action{Kind: &pb.Action_GetAllKnowledgeDefinitions_{GetAllKnowledgeDefinitions: &pb.Action_GetAllKnowledgeDefinitions{}}}
)

func meaning(table, column string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_GetColumnMeaning_{GetColumnMeaning: &pb.Action_GetColumnMeaning{Table: table, Column: column}}}
}
func knowledge(name string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_GetKnowledgeDefinition_{GetKnowledgeDefinition: &pb.Action_GetKnowledgeDefinition{Name: name}}}
}
func execute(sql string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Execute_{Execute: &pb.Action_Execute{Sql: sql}}}
}

// TestBirdACosts: every action is charged exactly (0.5 and 0.2 included)
// before it runs; several submits are allowed (no retry penalty); the
// follow-up is released by a passing submit; a submit the budget cannot
// pay for is free, scored, and ends the episode; rewards 0.7 + 0.3.
func TestBirdACosts(t *testing.T) {
	b := startBirdC(t)
	e := b.resetA("fu-query", -1)
	// 6 + 2·2 + 6 coins.
	if bu := e.Observation.Budget; bu.GetUnit() != pb.BudgetUnit_BUDGET_UNIT_COINS || bu.GetTotalMilli() != 16000 || bu.GetRemainingMilli() != 16000 {
		t.Fatalf("reset budget %v", bu)
	}
	tok := e.Token
	used := int64(0)
	for _, c := range []struct {
		name string
		a    *pb.Action
		cost int64
		kind pb.TurnKind
	}{
		{"get_column_meaning", meaning("sales", "amount"), 500, pb.TurnKind_TURN_KIND_TOOL_RESULT},
		{"get_all_external_knowledge_names", knowledgeList, 500, pb.TurnKind_TURN_KIND_TOOL_RESULT},
		{"get_knowledge_definition", knowledge("fiscal year"), 500, pb.TurnKind_TURN_KIND_TOOL_RESULT},
		{"unparsed", unparsed("<action>ask(</action>"), 200, pb.TurnKind_TURN_KIND_NOTICE},
		{"execute", execute("SELECT region, COUNT(*) FROM sales GROUP BY region ORDER BY region"), 1000, pb.TurnKind_TURN_KIND_TOOL_RESULT},
		{"get_schema", getSchema, 1000, pb.TurnKind_TURN_KIND_TOOL_RESULT},
		{"get_all_column_meanings", allMeanings, 1000, pb.TurnKind_TURN_KIND_TOOL_RESULT},
		{"get_all_knowledge_definitions", allKnowledge, 1000, pb.TurnKind_TURN_KIND_TOOL_RESULT},
		{"ask", ask("What do you mean by big sales?"), 2000, pb.TurnKind_TURN_KIND_REPLY},
		{"a wrong submit", submit(fuQueryOther), 3000, pb.TurnKind_TURN_KIND_FEEDBACK},
	} {
		r := b.step(tok, c.a)
		used += c.cost
		if r.Done || r.Observation.Budget.GetUsedMilli() != used || r.Observation.Budget.GetRemainingMilli() != 16000-used {
			t.Fatalf("%s: budget %v, done %v; want %d used", c.name, r.Observation.Budget, r.Done, used)
		}
		if k := lastTurn(r).GetKind(); k != c.kind {
			t.Errorf("%s: last turn %v, want kind %s", c.name, lastTurn(r), c.kind)
		}
		tok = r.Token
	}
	// 10.7 coins spent: the reference (3) releases the follow-up.
	r := b.step(tok, submit(fuQueryRef))
	if r.Done || r.Observation.Subtask != 2 || lastTurn(r).GetText() != fuFollowUp || r.Observation.Budget.GetRemainingMilli() != 2300 {
		t.Fatalf("the reference: %v", r)
	}
	// 2.3 coins left (enough for a tool, so not SQL-only, but not for a
	// submit): the submit is free, scored, and the end.
	if r.Observation.SqlRequired {
		t.Errorf("2.3 coins left, and only SQL is accepted")
	}
	r = b.step(r.Token, submit(fuQueryFU))
	if !r.Done || r.Reward.GetValue() != 1 || r.Reward.GetComponents()["phase1"] != 0.7 || r.Reward.GetComponents()["phase2"] != 0.3 ||
		r.Observation.Budget.GetUsedMilli() != 13700 {
		t.Errorf("the free final submit: %v", r)
	}
}

// TestBirdABudgetEnds: an action other than a submit that the budget
// cannot pay for ends the episode (TRUNCATED); a failing free submit ends
// it with 0; a failing paid submit does not.
func TestBirdABudgetEnds(t *testing.T) {
	b := startBirdC(t)
	e := b.resetA("fu-query", 0) // 6 + 4 coins
	tok := e.Token
	for range 5 {
		r := b.step(tok, ask("What do you mean by big sales?"))
		tok = r.Token
	}
	r := b.step(tok, meaning("sales", "amount"))
	if !r.Done || r.Status != pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED || r.Reward.GetValue() != 0 {
		t.Errorf("an unaffordable tool: %v", r)
	}
	r = b.step(tok, submit(fuQueryOther))
	if !r.Done || r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.Reward.GetValue() != 0 || r.Observation.Budget.GetUsedMilli() != 10000 {
		t.Errorf("a failing free submit: %v", r)
	}
	r = b.step(tok, submit(fuQueryRef))
	if !r.Done || r.Reward.GetValue() != 0.7 || r.Observation.Subtask != 1 {
		t.Errorf("a passing free submit: %v (scored for phase 1, and the end)", r)
	}
}

// TestBirdAToolsHideKnowledge: the tools answer from the public view only:
// the knowledge entry the task hides is never listed, defined or in the
// schema; only the user's answer reveals it.
func TestBirdAToolsHideKnowledge(t *testing.T) {
	b := startBirdC(t)
	e := b.resetA("fu-strong", -1)
	const secret = "2024 sales total more than 200 dollars"
	tok := e.Token
	for _, a := range []*pb.Action{knowledgeList, knowledge("strong market"), knowledge("STRONG MARKET "), allKnowledge, getSchema, allMeanings,
		execute("SELECT * FROM sales LIMIT 3")} {
		r := b.step(tok, a)
		out := lastTurn(r).GetText()
		if lastTurn(r).GetKind() != pb.TurnKind_TURN_KIND_TOOL_RESULT || lastTurn(r).GetRole() != pb.Role_ROLE_ENVIRONMENT {
			t.Fatalf("%v: %v", a, lastTurn(r))
		}
		if strings.Contains(out, secret) || strings.Contains(strings.ToLower(out), "strong market:") {
			t.Errorf("%v reveals the hidden entry: %q", a, out)
		}
		if a == knowledgeList && (!strings.Contains(out, "fiscal year") || strings.Contains(out, "strong market")) {
			t.Errorf("knowledge names: %q", out)
		}
		tok = r.Token
	}
	r := b.step(tok, ask("What is a strong market?"))
	if !strings.Contains(lastTurn(r).GetText(), "more than 200 dollars") {
		t.Errorf("the user's answer: %v", lastTurn(r))
	}
}

// TestBirdAExecute: execute returns rows as text, or the database's error;
// writes are refused as the policy's error; nothing reaches the database.
func TestBirdAExecute(t *testing.T) {
	b := startBirdC(t)
	e := b.resetA("fu-query", -1)
	r := b.step(e.Token, execute("SELECT id, amount FROM sales WHERE region = 'East' ORDER BY id"))
	if out := lastTurn(r).GetText(); !strings.HasPrefix(out, "id | amount\n5 | 900\n6 | 10\n") || !strings.HasSuffix(out, "(2 rows)") {
		t.Errorf("execute: %q", out)
	}
	r = b.step(r.Token, execute("DELETE FROM sales"))
	if out := lastTurn(r).GetText(); !strings.HasPrefix(out, "Error: ") || r.Done {
		t.Errorf("a write: %q", out)
	}
	r = b.step(r.Token, execute("SELECT COUNT(*) FROM sales"))
	if out := lastTurn(r).GetText(); !strings.HasPrefix(out, "COUNT(*)\n13\n") {
		t.Errorf("after the write: %q", out)
	}
	r = b.step(r.Token, execute("WITH RECURSIVE r(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM r WHERE value < 120) SELECT value FROM r"))
	if out := lastTurn(r).GetText(); !strings.HasSuffix(out, "(120 rows; the first 50 shown)") {
		t.Errorf("a long result: %q", out)
	}
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/eval"
	"avtgym/internal/fakellm"
	"avtgym/internal/testutil"
	"avtgym/policy"
)

// TestRolloutBirdA: `rollout --protocol bird-a` plays the demo's tasks
// with a follow-up: the explorer and full reach reward 1 (both phases),
// the summary gives the coins per action type, the wrong reading 0.
func TestRolloutBirdA(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	addr := srv.Addr
	n := followUpCount(t, srv)

	s := rolloutJSON(t, addr, "--policy", "explorer", "--protocol", "bird-a")
	b := s.BirdC
	if s.Protocol != "bird-a" || s.Policy != "explorer" || b == nil || s.Episodes != n || val(t, "phase1_sr", b.Phase1SR) != 1 ||
		val(t, "phase2_sr", b.Phase2SR) != 1 || val(t, "normalized_reward", b.NormalizedReward) != 100 || b.Released != n {
		t.Fatalf("summary %+v bird %+v", s, b)
	}
	if b.CoinsUsed == nil || b.CoinsByAction["execute"] != 1 || b.CoinsByAction["get_column_meaning"] != 0.5 || b.CoinsByAction["submit_sql"] != 6 {
		t.Errorf("coins %v per action %v", b.CoinsUsed, b.CoinsByAction)
	}
	if s := rolloutJSON(t, addr, "--policy", "full", "--protocol", "bird-a", "--patience", "0"); val(t, "normalized_reward", s.BirdC.NormalizedReward) != 100 {
		t.Errorf("full, patience 0: %+v", s.BirdC)
	}
	if s := rolloutJSON(t, addr, "--policy", "wrong-reading", "--wrong-readings", demoReadings, "--protocol", "bird-a"); val(t, "normalized_reward", s.BirdC.NormalizedReward) != 0 || s.BirdC.Released != 0 {
		t.Errorf("wrong-reading: %+v", s.BirdC)
	}
	code, stdout, stderr := runCmd(t, "rollout", "--server", addr, "--policy", "explorer", "--protocol", "bird-a", "--patience", "6")
	if code != 0 || !strings.Contains(stdout, "protocol bird-a: phase-1 SR 1.000  phase-2 SR 1.000") || !strings.Contains(stdout, "coins spent per episode: ") ||
		!strings.Contains(stdout, "get_schema 1.000") {
		t.Errorf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

// TestEvalBirdA: `eval --protocol bird-a --asker scripted:explorer` writes
// BIRD-Interact's numbers and the coins per action type in the three
// reports.
func TestEvalBirdA(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	n := followUpCount(t, s)
	dir := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr := runCmd(t, "eval", "--server", s.Addr, "--corpus", "demo", "--protocol", "bird-a", "--asker", "scripted:explorer",
		"--conditions", "asker,full", "--out", dir, "--resamples", "100", "--quiet")
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, want := range []string{
		"## BIRD-Interact a-Interact",
		fmt.Sprintf("| demo | deterministic | asker (explorer) | %d | 100.0 [", n),
		fmt.Sprintf("| demo | deterministic | full | %d | 100.0 [", n),
		"### Coins spent per episode (demo)",
		"| execute |",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
	rep := readReport(t, dir)
	if rep.Protocol != "bird-a" || rep.BirdA == nil || len(rep.BirdA.Rows) != 2 {
		t.Fatalf("report.json: %+v", rep)
	}
	for _, row := range rep.BirdA.Rows {
		want := 1.0
		if row.Condition == eval.Full {
			want = 0
		}
		if s := row.CoinsByAction["get_schema"]; s.Mean == nil || *s.Mean != want || *row.Reward.Mean != 1 {
			t.Errorf("%s: get_schema coins %v, reward %v", row.Condition, s.Mean, row.Reward.Mean)
		}
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil || !strings.Contains(string(html), "birda-coins") {
		t.Errorf("report.html: %v", err)
	}
}

// TestRolloutLLMAgent: `rollout --policy llm --protocol bird-a|bird-c`
// plays the LLM agent (here a fake endpoint that reads one schema, then
// stops): every episode is scored, reward 0.
func TestRolloutLLMAgent(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	n := followUpCount(t, srv)
	model := fakellm.New(fakellm.Options{Hook: func(system, user string) (int, string, bool) {
		if strings.Contains(system, "get_schema()") && !strings.Contains(user, "Observation:") {
			return 0, "<action>get_schema()</action>", true
		}
		return 0, "<action>stop()</action>", true
	}})
	defer model.Close()
	for _, p := range []string{"bird-a", "bird-c"} {
		out := filepath.Join(t.TempDir(), "eps.jsonl")
		s := rolloutJSON(t, srv.Addr, "--policy", "llm", "--protocol", p, "--asker-url", model.URL+"/v1", "--asker-model", "m", "--episodes-out", out)
		if s.Policy != policy.AgentName || s.Episodes != n || s.Errors != 0 || val(t, "reward_mean", s.RewardMean) != 0 {
			t.Errorf("%s: %+v", p, s)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if want := p == "bird-a"; strings.Contains(string(b), `"get_schema":1`) != want {
			t.Errorf("%s: episodes %s", p, b)
		}
	}
}

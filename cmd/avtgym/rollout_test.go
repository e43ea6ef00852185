package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/eval"
	"avtgym/internal/fakellm"
	"avtgym/internal/testutil"
	"avtgym/policy"
	pb "avtgym/proto/avtgym/v1"
)

// demoReadings is the demo corpus's wrong-readings fixture.
const demoReadings = "../../fixtures/wrong-readings/demo.json"

// TestRolloutProtocols: `rollout --protocol bird-c` plays the demo's
// tasks with a follow-up: full reaches reward 1 (both phases), the
// wrong-reading policy 0 without a released follow-up; bad protocol flags
// exit 2 (TIDE's: TestRolloutTide).
func TestRolloutProtocols(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	addr := srv.Addr
	n := followUpCount(t, srv)

	t.Run("full", func(t *testing.T) {
		s := rolloutJSON(t, addr, "--policy", "full", "--protocol", "bird-c")
		b := s.BirdC
		if s.Protocol != "bird-c" || b == nil || s.Episodes != n {
			t.Fatalf("summary %+v", s)
		}
		if val(t, "phase1_sr", b.Phase1SR) != 1 || val(t, "phase2_sr", b.Phase2SR) != 1 || val(t, "reward_mean", s.RewardMean) != 1 ||
			val(t, "normalized_reward", b.NormalizedReward) != 100 || b.Released != n {
			t.Errorf("bird-c %+v reward %v", b, val(t, "reward", s.RewardMean))
		}
	})

	t.Run("full patience 0", func(t *testing.T) {
		s := rolloutJSON(t, addr, "--policy", "full", "--protocol", "bird-c", "--patience", "0")
		if val(t, "normalized_reward", s.BirdC.NormalizedReward) != 100 {
			t.Errorf("bird-c %+v", s.BirdC)
		}
	})

	t.Run("wrong-reading", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "episodes.jsonl")
		s := rolloutJSON(t, addr, "--policy", "wrong-reading", "--wrong-readings", demoReadings, "--protocol", "bird-c", "--episodes-out", out)
		b := s.BirdC
		if s.Policy != "wrong-reading" || val(t, "phase1_sr", b.Phase1SR) != 0 || val(t, "phase2_sr", b.Phase2SR) != 0 ||
			val(t, "normalized_reward", b.NormalizedReward) != 0 || b.Released != 0 {
			t.Errorf("summary %+v, bird-c %+v", s, b)
		}
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		lines := 0
		for sc.Scan() {
			lines++
			var r driver.Record
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			if r.Protocol != "bird-c" || r.Phase1 == nil || *r.Phase1 != 0 || r.Phase2 != nil || r.Subtask != 1 || !strings.Contains(sc.Text(), `"phase1":0`) {
				t.Errorf("episode line %s", sc.Text())
			}
		}
		if lines != n {
			t.Errorf("%d episode lines, want %d", lines, n)
		}
	})

	t.Run("text summary", func(t *testing.T) {
		code, stdout, stderr := runCmd(t, "rollout", "--server", addr, "--policy", "full", "--protocol", "bird-c")
		if code != 0 || !strings.Contains(stdout, "phase-1 SR 1.000  phase-2 SR 1.000") || !strings.Contains(stdout, "normalised reward 100.0") ||
			!strings.Contains(stderr, "skipped") {
			t.Errorf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
	})

	t.Run("wrong-reading under ambitab", func(t *testing.T) {
		// The fixture covers the follow-up tasks only: the first task
		// without a reading stops the rollout, named with the file.
		code, _, stderr := runCmd(t, "rollout", "--server", addr, "--policy", "wrong-reading", "--wrong-readings", demoReadings)
		if code != 1 || !strings.Contains(stderr, "no reading for task") || !strings.Contains(stderr, demoReadings) {
			t.Errorf("exit %d, stderr %q", code, stderr)
		}
	})

	t.Run("bad flags", func(t *testing.T) {
		for _, args := range [][]string{
			{"--policy", "full", "--protocol", "bogus"},
			{"--policy", "full", "--patience", "3"},
			{"--policy", "full", "--protocol", "bird-c", "--patience", "-1"},
			{"--policy", "wrong-reading", "--protocol", "bird-c"},
			{"--policy", "wrong-reading", "--protocol", "bird-c", "--wrong-readings", "/nonexistent.json"},
			{"--policy", "full", "--protocol", "tide-f"},
			{"--policy", "llm", "--protocol", "tide-p"},
			{"--policy", "chain-aware"},
			{"--policy", "none-blind", "--protocol", "bird-c"},
			{"--policy", "chain-aware", "--protocol", "tide-f", "--patience", "3"},
			{"--policy", "chain-sure", "--protocol", "tide-f"},
			{"--policy", "llm", "--protocol", "bird-c"},
			{"--policy", "full", "--solver", "bogus"},
		} {
			code, _, stderr := runCmd(t, append([]string{"rollout", "--server", addr}, args...)...)
			if code != 2 {
				t.Errorf("rollout %v: exit %d, want 2 (stderr %q)", args, code, stderr)
			}
		}
	})
}

// followUpCount counts the demo corpus's tasks with a follow-up.
func followUpCount(t *testing.T, srv *testutil.Server) int {
	t.Helper()
	tasks, err := policy.ListTasks(context.Background(), srv.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ts := range tasks {
		if ts.GetSubtasks() == 2 {
			n++
		}
	}
	if n == 0 {
		t.Fatal("the demo corpus has no task with a follow-up")
	}
	return n
}

// tideOutput is what `rollout --json` prints under tide-f and tide-p.
type tideOutput struct {
	summary
	Tide *eval.TideRollout `json:"tide"`
}

func rolloutTideJSON(t *testing.T, addr string, args ...string) *tideOutput {
	t.Helper()
	code, stdout, stderr := runCmd(t, append([]string{"rollout", "--server", addr, "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("rollout %v: exit %d\nstderr: %s", args, code, stderr)
	}
	var s tideOutput
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil || s.Tide == nil {
		t.Fatalf("rollout %v: output is not a TIDE summary: %v\n%s", args, err, stdout)
	}
	if s.Episodes == 0 || s.Errors != 0 {
		t.Fatalf("rollout %v: %d episodes, %d errors", args, s.Episodes, s.Errors)
	}
	return &s
}

// TestRolloutTide: `rollout --protocol tide-f|tide-p` plays the demo's TIDE
// samples (tide-p: chain-only and joint only) with the scripted baselines
// and TIDE's metrics: chain-aware reaches DEA 1 with every layer
// identified, chain-blind DRR 0, none-aware AR 0; --policy llm plays the
// TIDE agent against a fake endpoint.
func TestRolloutTide(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	addr := srv.Addr
	tasks, err := policy.ListTasks(context.Background(), srv.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	nf, _ := policy.ProtocolTasks(tasks, pb.Protocol_PROTOCOL_TIDE_F)
	np, _ := policy.ProtocolTasks(tasks, pb.Protocol_PROTOCOL_TIDE_P)
	if len(nf) == 0 || len(np) == 0 || len(np) >= len(nf) {
		t.Fatalf("the demo corpus has %d TIDE samples, %d for tide-p", len(nf), len(np))
	}

	t.Run("chain-aware", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "episodes.jsonl")
		s := rolloutTideJSON(t, addr, "--policy", "chain-aware", "--protocol", "tide-f", "--episodes-out", out)
		ti := s.Tide
		if s.Protocol != "tide-f" || s.Policy != "chain-aware" || s.Episodes != len(nf) || ti.Episodes != len(nf) {
			t.Fatalf("summary %+v", s)
		}
		// It asks on the chain samples only (tide-p's).
		if ar := val(t, "ar", ti.AR); ar != float64(len(np))/float64(len(nf)) {
			t.Errorf("ar = %v", ar)
		}
		for name, x := range map[string]*float64{"dea": ti.DEA, "l1_ir": ti.L1IR, "l2_ir": ti.L2IR, "jir": ti.JIR, "drr": ti.DRR, "dra": ti.DRA} {
			if val(t, name, x) != 1 {
				t.Errorf("%s = %v", name, *x)
			}
		}
		if c := ti.BySampleType["chain_only"]; c == nil || c.DRR != nil || val(t, "chain_only dea", c.DEA) != 1 {
			t.Errorf("chain_only %+v", c)
		}
		if d := ti.BySampleType["drift_only"]; d == nil || d.L1IR != nil || val(t, "drift_only ar", d.AR) != 0 {
			t.Errorf("drift_only %+v", d)
		}
		if len(ti.DRAByDriftType) == 0 {
			t.Errorf("no DRA by drift subtype")
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(data), "\n"); n != len(nf) || !strings.Contains(string(data), `"routings":["L1","L2"]`) || !strings.Contains(string(data), `"sample_type":"joint"`) {
			t.Errorf("%d episode lines:\n%s", n, data)
		}
	})

	t.Run("chain-blind tide-p", func(t *testing.T) {
		s := rolloutTideJSON(t, addr, "--policy", "chain-blind", "--protocol", "tide-p")
		ti := s.Tide
		// L1 is pre-filled under tide-p: L1-IR and JIR are not defined.
		if ti.L1IR != nil || ti.JIR != nil {
			t.Errorf("tide-p: l1_ir %v jir %v, want null", ti.L1IR, ti.JIR)
		}
		if s.Episodes != len(np) || ti.BySampleType["drift_only"] != nil || val(t, "l2_ir", ti.L2IR) != 1 ||
			val(t, "drr", ti.DRR) != 0 || val(t, "dra", ti.DRA) != 0 || val(t, "chain_only dea", ti.BySampleType["chain_only"].DEA) != 1 {
			t.Errorf("tide-p chain-blind: %+v", ti)
		}
	})

	t.Run("text summary", func(t *testing.T) {
		code, stdout, stderr := runCmd(t, "rollout", "--server", addr, "--policy", "none-aware", "--protocol", "tide-f")
		if code != 0 || !strings.Contains(stdout, "protocol tide-f") || !strings.Contains(stdout, "AR 0.000") || !strings.Contains(stdout, "  joint (") ||
			!strings.Contains(stdout, "DRA by drift subtype:") {
			t.Errorf("exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
		}
	})

	t.Run("llm", func(t *testing.T) {
		model := fakellm.New(fakellm.Options{Hook: func(system, user string) (int, string, bool) {
			return 0, `{"type": "sql", "content": "SELECT 1"}`, true
		}})
		defer model.Close()
		s := rolloutTideJSON(t, addr, "--policy", "llm", "--protocol", "tide-f", "--asker-url", model.URL+"/v1", "--asker-model", "fake", "--limit", "3")
		if s.Policy != policy.TideAgentName || s.Episodes != 3 || val(t, "dea", s.Tide.DEA) != 0 || val(t, "ar", s.Tide.AR) != 0 || model.Calls() < 3 {
			t.Errorf("llm: %+v %+v, %d calls", s, s.Tide, model.Calls())
		}
	})
}

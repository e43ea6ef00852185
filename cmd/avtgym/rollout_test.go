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
	"avtgym/internal/testutil"
	"avtgym/policy"
)

// demoReadings is the demo corpus's wrong-readings fixture.
const demoReadings = "../../fixtures/wrong-readings/demo.json"

// TestRolloutProtocols: `rollout --protocol bird-c` plays the demo's
// tasks with a follow-up: full reaches reward 1 (both phases), the
// wrong-reading policy 0 without a released follow-up; a reserved protocol
// is refused with the server's reason; bad protocol flags exit 2.
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

	t.Run("reserved protocols", func(t *testing.T) {
		for _, p := range []string{"tide-f", "tide-p"} {
			code, _, stderr := runCmd(t, "rollout", "--server", addr, "--policy", "full", "--protocol", p)
			if code != 1 || !strings.Contains(stderr, "refused") || !strings.Contains(stderr, "not served") {
				t.Errorf("--protocol %s: exit %d, stderr %q", p, code, stderr)
			}
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
			{"--policy", "llm", "--protocol", "tide-f", "--asker-url", "http://127.0.0.1:1/v1", "--asker-model", "m"},
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

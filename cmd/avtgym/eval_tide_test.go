package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/eval"
	"avtgym/internal/testutil"
	"avtgym/policy"
)

// tideTaskCount is the number of the demo's TIDE samples (tasks tide-*)
// and of its drift-only ones; the test is skipped while there are none.
func tideTaskCount(t *testing.T, s *testutil.Server) (all, driftOnly int) {
	t.Helper()
	tasks, err := policy.ListTasks(context.Background(), s.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if strings.HasPrefix(task.GetTaskId(), "tide-") {
			all++
			if task.GetSampleType() == eval.DriftOnly {
				driftOnly++
			}
		}
	}
	if all == 0 {
		t.Fatal("the demo corpus has no TIDE sample (tide-*)")
	}
	return all, driftOnly
}

// TestEvalTide: `eval --protocol tide-f` evaluates the demo's TIDE
// samples with the default asker (scripted:chain-aware) and writes TIDE's
// tables in the three reports; a rerun plays nothing new; tide-p runs the
// chain-only and joint samples with another baseline.
func TestEvalTide(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	n, drift := tideTaskCount(t, s)
	dir := filepath.Join(t.TempDir(), "run")
	args := []string{"eval", "--server", s.Addr, "--corpus", "demo", "--protocol", "tide-f", "--out", dir, "--resamples", "100", "--quiet"}
	code, stdout, stderr := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, want := range []string{
		"## TIDE-Bench: chain ambiguity and intent drift",
		"| Corpus | Protocol | Oracle | Condition | Chain-only L1-IR | Chain-only L2-IRp | Chain-only JIR | Chain-only AR | Joint L1-IR | Joint L2-IRp | Joint JIR | Joint AR | Drift-only AR |",
		"| Corpus | Protocol | Oracle | Condition | Drift-only DRA Value | Drift-only DRA Constraint | Drift-only DRA Projection | Drift-only DRA All | Joint DRA Value | Joint DRA Constraint | Joint DRA Projection | Joint DRA All | DRR Drift-only | DRR Joint |",
		"| demo | tide-f | deterministic | asker (chain-aware) | " + strconv.Itoa(n) + " | 100.0 [",
		"asker chain-aware",
		"task(s) the protocol does not serve skipped",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
	rep := readReport(t, dir)
	if rep.Protocol != eval.TideF || rep.Tide == nil || len(rep.Tide.Rows) != 1 || rep.Tide.Tasks != n {
		t.Fatalf("report.json: %+v", rep)
	}
	if row := rep.Tide.Rows[0]; row.ChainOnly.JIR.Mean == nil || *row.ChainOnly.JIR.Mean != 1 || row.Overall.DRA.Mean == nil || *row.Overall.DRA.Mean != 1 {
		t.Errorf("chain-aware: JIR %+v, DRA %+v", row.ChainOnly.JIR, row.Overall.DRA)
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil || !strings.Contains(string(html), "id=\"tide-chain\"") || !strings.Contains(string(html), "chart-tide") {
		t.Errorf("report.html: %v", err)
	}
	eps, err := eval.ReadEpisodes(dir)
	if err != nil || len(eps) != n {
		t.Fatalf("%d episodes, %v; want %d", len(eps), err, n)
	}
	// Rerunning plays nothing new.
	if code, _, stderr := runCmd(t, args...); code != 0 {
		t.Fatalf("rerun: exit %d: %s", code, stderr)
	}
	if again, _ := eval.ReadEpisodes(dir); len(again) != n {
		t.Errorf("rerun: %d episodes, want %d", len(again), n)
	}

	dir2 := filepath.Join(t.TempDir(), "run")
	code, stdout, stderr = runCmd(t, "eval", "--server", s.Addr, "--protocol", "tide-p", "--asker", "scripted:none-blind", "--out", dir2, "--resamples", "50", "--quiet")
	if code != 0 || !strings.Contains(stdout, "| demo | tide-p | deterministic | asker (none-blind) | "+strconv.Itoa(n-drift)+" | ") {
		t.Errorf("tide-p: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
}

// TestEvalTideFlags: what does not apply under TIDE is refused before
// any server is called (exit 2), with a message naming it.
func TestEvalTideFlags(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--protocol", "tide-f", "--conditions", "asker,full"}, "the full condition does not run under --protocol tide-f"},
		{[]string{"--protocol", "tide-p", "--conditions", "none"}, "asker only"},
		{[]string{"--protocol", "tide-f", "--solver", "lookup"}, "--solver does not apply"},
		{[]string{"--protocol", "tide-f", "--patience", "3"}, "--patience applies to --protocol bird-c and bird-a"},
		{[]string{"--protocol", "tide-f", "--donor-seed", "1"}, "--donor-seed applies to --protocol ambitab"},
		{[]string{"--protocol", "tide-f", "--reference", "llm"}, "--reference applies to --protocol ambitab"},
		{[]string{"--protocol", "tide-f", "--hybrid", "hybrid"}, "--hybrid applies to --protocol ambitab"},
		{[]string{"--protocol", "tide-f", "--wrong-readings", "x.json"}, "--wrong-readings"},
		{[]string{"--protocol", "tide-f", "--asker", "llm", "--asker-style", "direct"}, "--asker-style"},
		{[]string{"--protocol", "tide-f", "--asker", "scripted:full"}, "want scripted:chain-aware, scripted:chain-blind, scripted:none-aware, scripted:none-blind or llm"},
		{[]string{"--protocol", "tide-f", "--asker", "trajectories:x.jsonl"}, "replays questions only"},
		{[]string{"--protocol", "tide-f", "--asker", "magic"}, "unknown asker"},
		{[]string{"--protocol", "tide-f", "--asker", "llm"}, "needs --asker-url and --asker-model"},
		{[]string{"--asker", "scripted:chain-aware"}, "plays --protocol tide-f or tide-p"},
		{[]string{"--protocol", "bird-c", "--asker", "scripted:none-blind"}, "plays --protocol tide-f or tide-p"},
	} {
		args := append([]string{"eval", "--server", "127.0.0.1:1", "--out", dir}, c.args...)
		if code, _, stderr := runCmd(t, args...); code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

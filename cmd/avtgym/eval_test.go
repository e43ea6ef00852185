package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/eval"
	"avtgym/internal/testutil"
)

func TestEvalCommand(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	dir := filepath.Join(t.TempDir(), "run")
	args := []string{"eval", "--server", s.Addr, "--corpus", "demo", "--limit", "12", "--seeds", "0,1",
		"--asker", "scripted:full", "--oracles", "deterministic", "--out", dir, "--resamples", "200", "--progress"}
	code, stdout, stderr := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, name := range []string{"episodes.jsonl", "report.json", "report.md", "report.html", "run.json", "donors.json"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !strings.Contains(string(md), "| ") || !strings.Contains(string(md), "SR") || string(md) != stdout {
		t.Errorf("report.md is not the printed table:\n%s\nstdout:\n%s", md, stdout)
	}
	if !strings.Contains(stderr, "episodes") {
		t.Errorf("no progress on stderr: %q", stderr)
	}
	eps, err := eval.ReadEpisodes(dir)
	if err != nil || len(eps) != 12*2*6 {
		t.Fatalf("%d episodes, %v; want %d", len(eps), err, 12*2*6)
	}
	// Rerunning plays nothing new and rewrites the reports.
	code, _, stderr = runCmd(t, append(args[:len(args)-1], "--quiet")...)
	if code != 0 {
		t.Fatalf("rerun: exit %d: %s", code, stderr)
	}
	if again, _ := eval.ReadEpisodes(dir); len(again) != len(eps) {
		t.Errorf("rerun: %d episodes, want %d", len(again), len(eps))
	}
	for _, bad := range [][]string{
		{"eval", "--out", dir, "--oracles", "nosuch"},
		{"eval", "--out", dir, "--conditions", "maybe"},
		{"eval", "--out", dir, "--asker", "magic"},
		{"eval", "--out", dir, "--seeds", "x"},
		{"eval", "--asker", "scripted:full"},
	} {
		if code, _, _ := runCmd(t, bad...); code != 2 {
			t.Errorf("%q: exit %d, want 2", bad, code)
		}
	}
}

// TestEvalBirdC: `eval --protocol bird-c` evaluates the demo's tasks with
// a follow-up and writes BIRD-Interact's numbers in the three reports:
// the wrong-reading asker's phase-1 SR and normalised reward 0 beside
// full's 100.
func TestEvalBirdC(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	n := followUpCount(t, s)
	dir := filepath.Join(t.TempDir(), "run")
	args := []string{"eval", "--server", s.Addr, "--corpus", "demo", "--protocol", "bird-c", "--asker", "scripted:wrong-reading",
		"--wrong-readings", demoReadings, "--conditions", "asker,full", "--seeds", "0,1", "--out", dir, "--resamples", "200", "--quiet"}
	code, stdout, stderr := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	for _, want := range []string{
		fmt.Sprintf("| demo | deterministic | asker (wrong-reading) | %d | 0.0 ± 0.0 [", 2*n),
		fmt.Sprintf("| demo | deterministic | full | %d | 100.0 ± 0.0 [", 2*n),
		"task(s) without a follow-up skipped",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep eval.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Protocol != "bird-c" || rep.BirdC == nil || len(rep.BirdC.Rows) != 2 {
		t.Fatalf("report.json: %s", b)
	}
	for _, row := range rep.BirdC.Rows {
		want := 0.0
		if row.Condition == eval.Full {
			want = 100
		}
		if row.NormalizedReward.Mean == nil || *row.NormalizedReward.Mean != want || *row.Phase1SR.Mean != want/100 {
			t.Errorf("%s: normalised reward %v, phase-1 SR %v; want %v", row.Condition, row.NormalizedReward.Mean, row.Phase1SR.Mean, want)
		}
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil || !strings.Contains(string(html), "Normalised reward") || !strings.Contains(string(html), "chart-birdc") {
		t.Errorf("report.html: %v", err)
	}
	eps, err := eval.ReadEpisodes(dir)
	if err != nil || len(eps) != n*2*2 {
		t.Fatalf("%d episodes, %v", len(eps), err)
	}
	for _, e := range eps {
		if e.Phase1 == nil || e.Protocol != "bird-c" {
			t.Errorf("episode %s/%s: no phase1 component", e.TaskID, e.Condition)
		}
	}

	// The defaults under bird-c: the full asker, the asker condition.
	dir2 := filepath.Join(t.TempDir(), "run")
	if code, stdout, stderr := runCmd(t, "eval", "--server", s.Addr, "--protocol", "bird-c", "--patience", "5", "--out", dir2, "--resamples", "50", "--quiet"); code != 0 ||
		!strings.Contains(stdout, fmt.Sprintf("| demo | deterministic | asker (full) | %d | 100.0 [", n)) || !strings.Contains(stdout, "patience 5") {
		t.Errorf("defaults: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}

	for _, bad := range [][]string{
		{"eval", "--out", dir, "--protocol", "bird-c", "--solver", "lookup"},
		{"eval", "--out", dir, "--protocol", "bird-c", "--conditions", "none"},
		{"eval", "--out", dir, "--patience", "3"},
		{"eval", "--out", dir, "--protocol", "nosuch"},
		{"eval", "--out", dir, "--asker", "scripted:wrong-reading", "--wrong-readings", demoReadings},
		{"eval", "--out", dir, "--protocol", "bird-c", "--asker", "scripted:wrong-reading"},
		{"eval", "--out", dir, "--protocol", "bird-c", "--asker", "llm"},
	} {
		if code, _, stderr := runCmd(t, bad...); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", bad, code, stderr)
		}
	}
}

// TestEvalComparison: `eval` compares by BIRD-Interact's harness rules
// unless --comparison sound says otherwise; the episodes file and the
// report say which; an unknown name is a usage error, and a rerun into
// the directory with the other comparison is refused.
func TestEvalComparison(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	for _, tc := range []struct {
		flag []string
		want string
	}{
		{nil, "harness"},
		{[]string{"--comparison", "sound"}, "sound"},
		{[]string{"--comparison", "harness"}, "harness"},
	} {
		dir := filepath.Join(t.TempDir(), "run")
		args := append([]string{"eval", "--server", s.Addr, "--corpus", "demo", "--limit", "2", "--conditions", "none",
			"--out", dir, "--resamples", "20", "--quiet"}, tc.flag...)
		code, stdout, stderr := runCmd(t, args...)
		if code != 0 {
			t.Fatalf("%q: exit %d\n%s", tc.flag, code, stderr)
		}
		eps, err := eval.ReadEpisodes(dir)
		if err != nil || len(eps) != 2 {
			t.Fatalf("%q: %d episodes, %v", tc.flag, len(eps), err)
		}
		for _, e := range eps {
			if e.Comparison != tc.want {
				t.Errorf("%q: episode %s comparison %q, want %q", tc.flag, e.TaskID, e.Comparison, tc.want)
			}
		}
		if !strings.Contains(stdout, "comparison "+tc.want+" (") {
			t.Errorf("%q: the report does not name comparison %s:\n%s", tc.flag, tc.want, stdout)
		}
		other := "sound"
		if tc.want == "sound" {
			other = "harness"
		}
		if code, _, stderr := runCmd(t, append(args, "--comparison", other)...); code != 1 || !strings.Contains(stderr, "comparison "+tc.want+"}") {
			t.Errorf("%q: rerun with --comparison %s: exit %d: %s", tc.flag, other, code, stderr)
		}
	}
	if code, _, stderr := runCmd(t, "eval", "--out", t.TempDir(), "--comparison", "exact"); code != 2 || !strings.Contains(stderr, "want sound or harness") {
		t.Errorf("--comparison exact: exit %d: %s", code, stderr)
	}
}

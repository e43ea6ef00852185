package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/eval"
	"avtgym/internal/testutil"
)

// TestEvalCompare: `eval --compare RUN_A RUN_B --out DIR` compares two
// askers' runs without a server: the full asker's SR and F1 above none's
// on the asker condition, nothing changed under the none and full
// conditions (the same policy in both runs), the Markdown printed and
// written with compare.json and compare.html; errors name the directory.
func TestEvalCompare(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	root := t.TempDir()
	run := func(asker string) string {
		dir := filepath.Join(root, strings.TrimPrefix(asker, "scripted:"))
		code, _, stderr := runCmd(t, "eval", "--server", s.Addr, "--corpus", "demo", "--limit", "12", "--seeds", "0,1",
			"--conditions", "none,asker,full", "--asker", asker, "--oracles", "deterministic", "--out", dir, "--resamples", "50", "--quiet")
		if code != 0 {
			t.Fatalf("eval --asker %s: exit %d: %s", asker, code, stderr)
		}
		return dir
	}
	a, b := run("scripted:none"), run("scripted:full")
	s.Stop(t) // --compare needs no server
	out := filepath.Join(root, "cmp")
	code, stdout, stderr := runCmd(t, "eval", "--compare", a, b, "--out", out, "--resamples", "300", "--bootstrap-seed", "4")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if md := readFile(t, filepath.Join(out, "compare.md")); md != stdout {
		t.Errorf("compare.md is not what was printed:\n%s\nstdout:\n%s", md, stdout)
	}
	for _, want := range []string{"## Comparison of two evaluation runs", "(asker none; 72 episodes); B: " + b + " (asker full; 72 episodes)",
		"Paired by (task, seed, condition, oracle): 72 pairs over 12 tasks", "| asker | deterministic | SR | 24 | 12 | ",
		"- none, deterministic: no task changed", "- full, deterministic: no task changed", "- asker, deterministic: improved "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	var c eval.Comparison
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(out, "compare.json"))), &c); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(out, "compare.html")); err != nil || fi.Size() == 0 {
		t.Errorf("compare.html: %v", err)
	}
	for _, cell := range c.Cells {
		for _, m := range cell.Metrics {
			if m.Diff == nil {
				continue
			}
			switch {
			case cell.Condition != eval.Asker && *m.Diff != 0:
				t.Errorf("%s %s: Δ %v, want 0 (the same policy in both runs)", cell.Condition, m.Metric, *m.Diff)
			case cell.Condition == eval.Asker && (m.Metric == "SR" || m.Metric == "F1") && (*m.Diff <= 0 || *m.Lo <= 0):
				t.Errorf("asker %s: Δ %v [%v, %v], want full above none", m.Metric, *m.Diff, *m.Lo, *m.Hi)
			}
		}
	}
	for _, bad := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"eval", "--compare", a, filepath.Join(root, "nosuch")}, 1, "RUN_B " + filepath.Join(root, "nosuch") + ": no such directory"},
		{[]string{"eval", "--compare", root, b}, 1, "RUN_A " + root + ": no episodes.jsonl"},
		{[]string{"eval", "--compare", a}, 2, "want two eval output directories"},
		{[]string{"eval", "--compare", a, b, "--oracles", "llm"}, 2, "--oracles does not apply to --compare"},
	} {
		code, _, stderr := runCmd(t, bad.args...)
		if code != bad.code || !strings.Contains(stderr, bad.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", bad.args, code, stderr, bad.code, bad.want)
		}
	}
}

// TestRolloutAndEvalSR reproduces issue 30's figures on the demo corpus
// and checks what the report and rollout's summary say of them: rollout
// --policy none --reward outcome's success_rate is over its n_success
// scored episodes, one per task with seed --seed + i; eval's SR none is, in
// each seed, the success over all the tasks played with that seed (the
// report's "SR over"), and with no dialogue the lookup solver's guess,
// shared by an AVT's tasks within a seed, is right for exactly one task of
// each AVT: SR none = AVTs / tasks in every seed (55 / 76 = 72.4% on the
// demo), what rollout's per-task guesses average to (its chance figure),
// not what one draw of them gives (57 / 76 = 75.0% at --seed 0).
func TestRolloutAndEvalSR(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	ro := rolloutJSON(t, s.Addr, "--policy", "none", "--reward", "outcome")
	dir := filepath.Join(t.TempDir(), "run")
	code, md, stderr := runCmd(t, "eval", "--server", s.Addr, "--corpus", "demo", "--seeds", "0,1,2", "--conditions", "none",
		"--asker", "scripted:none", "--oracles", "deterministic", "--out", dir, "--resamples", "50", "--quiet")
	if code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr)
	}
	eps, err := eval.ReadEpisodes(dir)
	if err != nil {
		t.Fatal(err)
	}
	tasks, avts := map[string]bool{}, map[string]bool{}
	for _, e := range eps {
		tasks[e.TaskID], avts[e.AVTID] = true, true
	}
	if ro.Episodes != len(tasks) || ro.NSuccess != len(tasks) || ro.NReward != len(tasks) {
		t.Errorf("rollout: %d episodes, n_success %d, n_reward %d; want one per task (%d)", ro.Episodes, ro.NSuccess, ro.NReward, len(tasks))
	}
	rep := readReport(t, dir)
	want := float64(len(avts)) / float64(len(tasks))
	for _, c := range rep.Cells {
		if c.Condition != eval.None {
			continue
		}
		if c.NSR != len(tasks) || c.Episodes != len(tasks) || c.SR == nil || math.Abs(*c.SR-want) > 1e-12 {
			t.Errorf("seed %d: SR none %v over %d of %d episodes; want %d AVTs / %d tasks over all of them", c.Seed, c.SR, c.NSR, c.Episodes, len(avts), len(tasks))
		}
	}
	sr := rep.Rows[0].SRNone
	if sr.Mean == nil || math.Abs(*sr.Mean-want) > 1e-12 || sr.Seeds != 3 {
		t.Errorf("SR none %+v, want %v over 3 seeds", sr, want)
	}
	// Rollout's expected success, by its own figures: the tasks of
	// single-interpretation AVTs always succeed, the others with chance
	// 1/k; that expectation is eval's SR none.
	m := ro.MultiInterpretation
	expected := (float64(ro.NSuccess-m.Episodes) + float64(m.Episodes)**m.Chance) / float64(ro.NSuccess)
	if math.Abs(expected-want) > 1e-9 {
		t.Errorf("rollout's expected success %v, eval's SR none %v: the explanation does not hold", expected, want)
	}
	t.Logf("rollout success_rate %v over %d; eval SR none %v (%d AVTs / %d tasks) in every seed", *ro.SuccessRate, ro.NSuccess, want, len(avts), len(tasks))
	row := "| demo | deterministic | none | 3 | 76 | 76 | 0 | "
	if !strings.Contains(md, "### How each figure is counted") || !strings.Contains(md, row) || !strings.Contains(md, "avtgym rollout counts differently") {
		t.Errorf("report.md does not state the denominators (%q):\n%s", row, md)
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/eval"
	"avtgym/internal/testutil"
	"avtgym/policy"
	pb "avtgym/proto/avtgym/v1"
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
	// The default conditions under ambitab: all seven, asker_strict
	// (the asker with strict credit) included.
	eps, err := eval.ReadEpisodes(dir)
	if err != nil || len(eps) != 12*2*7 {
		t.Fatalf("%d episodes, %v; want %d", len(eps), err, 12*2*7)
	}
	perCond := map[eval.Condition]int{}
	for _, e := range eps {
		perCond[e.Condition]++
	}
	for _, c := range eval.AllConditions {
		if perCond[c] != 12*2 {
			t.Errorf("%d %s episodes, want %d", perCond[c], c, 12*2)
		}
	}
	if !strings.Contains(string(md), "### Credit rules") || !strings.Contains(string(md), "| Prec (strict) | Rec (strict) | F1 (strict) |") {
		t.Errorf("report.md has no credit-rules table:\n%s", md)
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
		{"eval", "--out", dir, "--protocol", "bird-c", "--conditions", "asker,asker_strict"},
		{"eval", "--out", dir, "--protocol", "tide-f", "--conditions", "asker_strict"},
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
	rep := readReport(t, dir)
	if rep.Protocol != "bird-c" || rep.BirdC == nil || len(rep.BirdC.Rows) != 2 {
		t.Fatalf("report.json: %+v", rep)
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

// TestEvalStrictCredit: an asker that echoes each task's request (a
// trajectory file whose one question repeats the request verbatim) earns
// recall under AmbiTab's rule, the asker condition, and less under strict
// credit, the asker_strict condition, which replays the same trajectories
// in episodes reset with strict_credit; report.json and report.md carry
// both.
func TestEvalStrictCredit(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	ctx := context.Background()
	const n = 12
	tasks, err := policy.ListTasks(ctx, s.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	var traj strings.Builder
	for _, tk := range tasks[:n] {
		gt, err := s.Client.Env.GetTask(ctx, &pb.GetTaskRequest{Corpus: "demo", TaskId: tk.GetTaskId()})
		if err != nil {
			t.Fatal(err)
		}
		line, _ := json.Marshal(eval.Trajectory{TaskID: tk.GetTaskId(), Seed: 0,
			Questions: []string{"What do you mean by: " + gt.GetTask().GetRequest() + "?"}})
		traj.Write(append(line, '\n'))
	}
	file := filepath.Join(t.TempDir(), "echo.jsonl")
	if err := os.WriteFile(file, []byte(traj.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "run")
	args := []string{"eval", "--server", s.Addr, "--corpus", "demo", "--limit", strconv.Itoa(n), "--asker", "trajectories:" + file,
		"--conditions", "asker,asker_strict", "--oracles", "deterministic", "--out", dir, "--resamples", "100", "--quiet"}
	code, stdout, stderr := runCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}

	// Per task: the same echo under both rules; AmbiTab's credits it, the
	// strict rule less (nothing: it reproduces the request).
	eps, err := eval.ReadEpisodes(dir)
	if err != nil || len(eps) != 2*n {
		t.Fatalf("%d episodes, %v; want %d", len(eps), err, 2*n)
	}
	recall := map[eval.Condition]map[string]float64{eval.Asker: {}, eval.AskerStrict: {}}
	questions := map[eval.Condition]map[string]string{eval.Asker: {}, eval.AskerStrict: {}}
	for _, e := range eps {
		if e.Recall != nil {
			recall[e.Condition][e.TaskID] = *e.Recall
		}
		questions[e.Condition][e.TaskID] = strings.Join(e.Questions, "\n")
	}
	echoed := 0
	for _, tk := range tasks[:n] {
		id := tk.GetTaskId()
		if questions[eval.Asker][id] == "" || questions[eval.Asker][id] != questions[eval.AskerStrict][id] {
			t.Errorf("%s: asker asked %q, asker_strict %q; want the same echo", id, questions[eval.Asker][id], questions[eval.AskerStrict][id])
		}
		if a, ok := recall[eval.Asker][id]; ok && a > 0 {
			echoed++
			if st := recall[eval.AskerStrict][id]; st >= a {
				t.Errorf("%s: the echo's strict recall %v, AmbiTab's %v; want less", id, st, a)
			}
		}
	}
	if echoed == 0 {
		t.Fatalf("the echo earned recall on no task under AmbiTab's rule: %v", recall[eval.Asker])
	}

	rep := readReport(t, dir)
	if len(rep.Rows) != 1 {
		t.Fatalf("report.json rows: %+v", rep.Rows)
	}
	row := rep.Rows[0]
	for _, m := range []struct {
		name            string
		ambitab, strict eval.Summary
	}{{"precision", row.Precision, row.PrecisionStrict}, {"recall", row.Recall, row.RecallStrict}, {"F1", row.F1, row.F1Strict}} {
		if m.ambitab.Mean == nil || m.strict.Mean == nil || *m.ambitab.Mean <= 0 || *m.strict.Mean >= *m.ambitab.Mean {
			t.Errorf("report.json %s: AmbiTab %v, strict %v; want the strict one below a positive AmbiTab one", m.name, m.ambitab.Mean, m.strict.Mean)
		}
	}
	if !strings.Contains(readFile(t, filepath.Join(dir, "report.json")), `"recall_strict": {`) || row.Counts[eval.AskerStrict].Episodes != n {
		t.Errorf("report.json: no recall_strict or %d asker_strict episodes", row.Counts[eval.AskerStrict].Episodes)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"### Credit rules\n\n| Corpus | Oracle | Precision | Recall | F1 | Prec (strict) | Rec (strict) | F1 (strict) |",
		"strict: the same asker with strict_credit — a question earns only the ambiguities it names; a gap between the two rules means credit earned by echoing the request",
		"| demo | deterministic | asker_strict | 12 |",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	// The credit-rules row: AmbiTab's three, then the strict three.
	_, credit, _ := strings.Cut(string(md), "### Credit rules")
	_, line, _ := strings.Cut(credit, "\n| demo | deterministic | ")
	line, _, _ = strings.Cut(line, "\n")
	cells := strings.Split(strings.TrimSuffix(line, " |"), " | ")
	if len(cells) != 6 {
		t.Fatalf("credit-rules row %q: %d metric cells, want 6", line, len(cells))
	}
	for i, s := range []eval.Summary{row.Precision, row.Recall, row.F1, row.PrecisionStrict, row.RecallStrict, row.F1Strict} {
		if !strings.HasPrefix(cells[i], eval.FormatSummary(s)) {
			t.Errorf("credit-rules cell %d = %q, want %q", i, cells[i], eval.FormatSummary(s))
		}
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil || !strings.Contains(string(html), `<table id="credit">`) || !strings.Contains(string(html), "Rec (strict)") {
		t.Errorf("report.html has no credit-rules table: %v", err)
	}
}

// readReport reads a run directory's report.json.
func readReport(t *testing.T, dir string) eval.Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep eval.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// readFile reads a file the test needs.
func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

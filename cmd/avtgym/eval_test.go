package main

import (
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

package main

import (
	"regexp"
	"strings"
	"testing"

	"avtgym/internal/testutil"
)

// TestCorpusCheckContexts: with model context lengths, `corpus check`
// reports every record whose base prompt does not fit as
// "file:line: context: …" and fails; with room enough it passes.
func TestCorpusCheckContexts(t *testing.T) {
	dir := testutil.WriteTiny(t)
	code, stdout, stderr := runCmd(t, "corpus", "check", "--oracle-context-tokens", "500", "--solver-context-tokens", "2100", dir)
	if code != 1 || !strings.Contains(stdout, "FAIL") {
		t.Fatalf("tiny contexts: exit %d\n%s\n%s", code, stdout, stderr)
	}
	line := regexp.MustCompile(`(?m)^\S*records\.jsonl:(\d+): context: .*(--oracle-context-tokens 500|--solver-context-tokens 2100)`)
	lines := map[string]bool{}
	for _, m := range line.FindAllStringSubmatch(stderr, -1) {
		lines[m[1]+" "+m[2]] = true
	}
	for _, want := range []string{"1 --oracle-context-tokens 500", "5 --oracle-context-tokens 500", "1 --solver-context-tokens 2100", "5 --solver-context-tokens 2100"} {
		if !lines[want] {
			t.Errorf("no finding for line %s:\n%s", want, stderr)
		}
	}
	if !regexp.MustCompile(`(?m)^context\s+5\s+0\s+5\s+0$`).MatchString(stdout) {
		t.Errorf("table:\n%s", stdout)
	}
	code, stdout, stderr = runCmd(t, "corpus", "check", "--oracle-context-tokens", "32768", "--solver-context-tokens", "32768", dir)
	if code != 0 || !regexp.MustCompile(`(?m)^context\s+5\s+5\s+0\s+0$`).MatchString(stdout) {
		t.Fatalf("large contexts: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if code, _, _ := runCmd(t, "corpus", "check", "--oracle-context-tokens", "-1", dir); code != 2 {
		t.Errorf("a negative context: exit %d, want 2", code)
	}
}

package main

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// synopsisFlags maps each command of a synopsis block ("serve", "corpus
// check", ...) to the flags its lines name (without dashes). A line
// "avtgym CMD ..." starts a command; indented lines continue it. Flag
// families written "--oracle-..." or "--oracle-…" are returned with their
// trailing dash ("oracle-").
func synopsisFlags(block string) map[string][]string {
	cmdRE := regexp.MustCompile(`^\s*avtgym ((?:corpus (?:import )?)?[a-z]+)`)
	flagRE := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	out := map[string][]string{}
	cmd := ""
	for _, line := range strings.Split(block, "\n") {
		if m := cmdRE.FindStringSubmatch(line); m != nil {
			cmd = m[1]
		} else if !strings.HasPrefix(line, "  ") {
			cmd = ""
		}
		if cmd == "" {
			continue
		}
		for _, m := range flagRE.FindAllStringSubmatch(line, -1) {
			out[cmd] = append(out[cmd], m[1])
		}
	}
	return out
}

// commandFlags returns the flags that `avtgym CMD -h` lists.
func commandFlags(t *testing.T, cmd string) map[string]bool {
	t.Helper()
	_, _, stderr := runCmd(t, append(strings.Fields(cmd), "-h")...)
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(stderr, -1) {
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("avtgym %s -h lists no flags:\n%s", cmd, stderr)
	}
	return flags
}

// checkSynopses: every flag a synopsis names exists, and the serve
// synopsis names every flag of serve (a flag family such as --oracle-...
// covers the flags it prefixes).
func checkSynopses(t *testing.T, where, block string) {
	syn := synopsisFlags(block)
	for _, cmd := range []string{"serve", "rollout", "eval", "bench", "corpus check", "corpus import ambrosia", "corpus import birdinteract"} {
		if len(syn[cmd]) == 0 {
			t.Errorf("%s: no synopsis of %q naming its flags", where, cmd)
		}
	}
	for cmd, names := range syn {
		real := commandFlags(t, cmd)
		for _, n := range names {
			if !strings.HasSuffix(n, "-") && !real[n] {
				t.Errorf("%s: %q names --%s, which `avtgym %s -h` does not list", where, cmd, n, cmd)
			}
		}
		if cmd != "serve" {
			continue
		}
		var all []string
		for f := range real {
			all = append(all, f)
		}
		sort.Strings(all)
	real:
		for _, f := range all {
			for _, n := range names {
				if n == f || strings.HasSuffix(n, "-") && strings.HasPrefix(f, n) {
					continue real
				}
			}
			t.Errorf("%s: the serve synopsis omits --%s", where, f)
		}
	}
}

func TestUsageSynopses(t *testing.T) {
	checkSynopses(t, "avtgym --help", usage)
	// The rollout synopsis names every policy, the LLM asker included.
	if !regexp.MustCompile(`--policy none\|full\|full_adv\|none_adv\|llm\b`).MatchString(usage) {
		t.Errorf("usage does not list --policy llm:\n%s", usage)
	}
}

// TestCLIPageCommands checks the synopsis block of docs/cli.md (the
// first code block after its "## Synopses" heading), the page the README
// sends readers to for every command, the same way.
func TestCLIPageCommands(t *testing.T) {
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Synopses\n")
	if i < 0 {
		t.Fatal("docs/cli.md has no ## Synopses section")
	}
	s = s[i:]
	start := strings.Index(s, "```\n")
	if start < 0 {
		t.Fatal("docs/cli.md's ## Synopses section has no code block")
	}
	end := strings.Index(s[start+4:], "```")
	if end < 0 {
		t.Fatal("docs/cli.md's ## Synopses code block is not closed")
	}
	checkSynopses(t, "docs/cli.md", s[start+4:start+4+end])
}

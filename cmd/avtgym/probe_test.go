package main

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"

	"avtgym/internal/fakellm"
	"avtgym/llm"
	"avtgym/oracle"
)

// TestProbeCommand: `avtgym probe` checks a model as the oracle against
// any endpoint — here the fake, which routes correctly in its plain and
// thinking modes (every probe 100%, no leak, full and full_adv at recall =
// precision = 1) and is taken in by injected actions in its injectable
// mode (a routing failure that --min-accuracy turns into exit 1, with no
// credit and no leak all the same).
func TestProbeCommand(t *testing.T) {
	fake := fakellm.New(fakellm.Options{Mode: fakellm.Thinking})
	defer fake.Close()
	code, stdout, stderr := runCmd(t, "probe", "--oracle-url", fake.URL, "--oracle-model", "fake", "--limit", "6", "--min-accuracy", "1")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{`model "fake"`, "prompts " + oracle.LLMPromptVersion, "6 records", "variant", "wrong credits", "thinking stripped"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	rows := 0
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) == 12 && (f[0] == "unfiltered" || f[0] == "scoped") {
			rows++
			// questions, unreadable, routed, wrong credits, refused, leaks
			if f[3] != "0" || f[4] != "100.0%" || f[5] != "0" || f[7] != "0" {
				t.Errorf("row %q", line)
			}
			if (f[1] == "full" || f[1] == "full_adv") && (f[10] != "1.000" || f[11] != "1.000") {
				t.Errorf("row %q: recall and precision should be 1", line)
			}
			if f[1] == "none_adv" && f[10] != "0.000" {
				t.Errorf("row %q: recall should be 0", line)
			}
		}
	}
	if rows != 8 {
		t.Errorf("%d report rows, want 8:\n%s", rows, stdout)
	}

	inj := fakellm.New(fakellm.Options{Mode: fakellm.Injectable})
	defer inj.Close()
	code, stdout, stderr = runCmd(t, "probe", "--oracle-url", inj.URL, "--oracle-model", "fake", "--limit", "3", "--variants", "unfiltered", "--json", "--min-accuracy", "1")
	if code != 1 || !strings.Contains(stderr, "unfiltered injected: routing accuracy") {
		t.Fatalf("injectable: exit %d\nstderr:\n%s", code, stderr)
	}
	var out struct {
		Reports []oracle.CheckReport `json:"reports"`
		Replies struct {
			Replies int64 `json:"Replies"`
		} `json:"replies"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.Reports) != 1 || out.Replies.Replies == 0 {
		t.Fatalf("JSON: %v\n%s", err, stdout)
	}
	p := out.Reports[0].Probe(oracle.ProbeInjected)
	if p.Questions != 12 || p.WrongCredits != 0 || p.Leaks != 0 || p.Routed == p.Questions {
		t.Errorf("injected probe %+v", p)
	}

	for _, args := range [][]string{
		{"probe"},
		{"probe", "--oracle-url", fake.URL, "--oracle-model", "m", "--variants", "both"},
		{"probe", "--oracle-url", fake.URL, "--oracle-model", "m", "extra"},
	} {
		if code, _, _ := runCmd(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

// TestLLMFlagsModelDefaults: every model endpoint of serve (and probe)
// asks for JSON mode and turns thinking off unless told otherwise.
func TestLLMFlagsModelDefaults(t *testing.T) {
	for _, args := range [][]string{nil, {"-oracle-json-mode=false", "-oracle-disable-thinking=false"}} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		var c llm.Config
		llmFlags(fs, "oracle", "the oracle", &c)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if want := args == nil; c.JSONMode != want || c.DisableThinking != want {
			t.Errorf("%q: JSONMode %v, DisableThinking %v", args, c.JSONMode, c.DisableThinking)
		}
	}
}

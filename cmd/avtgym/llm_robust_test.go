package main

import (
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"avtgym/llm"
)

// loopingModel answers every call like a small model stuck in a loop: the
// same sentence until max_tokens (finish_reason "length").
func loopingModel(t *testing.T) *httptest.Server {
	t.Helper()
	loop := `{"reasoning": "` + strings.Repeat("The analyst asks about the request. ", 40)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"choices": []any{map[string]any{"index": 0, "finish_reason": "length", "message": map[string]any{"role": "assistant", "content": loop}}},
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestProbeUnreadableColumn: a model whose stage-1 outputs cannot be read
// (cut off in a loop) shows them in the unreadable column, not as routed —
// none_adv and the injected questions do not read 100% — and
// --min-accuracy fails it; the hint does not tell to raise
// --oracle-max-tokens for replies cut off in a loop.
func TestProbeUnreadableColumn(t *testing.T) {
	srv := loopingModel(t)
	code, stdout, stderr := runCmd(t, "probe", "--oracle-url", srv.URL+"/v1", "--oracle-model", "tiny", "--limit", "2", "--variants", "unfiltered", "--min-accuracy", "0.9")
	if code != 1 || !strings.Contains(stderr, "outputs readable") {
		t.Fatalf("exit %d, want 1 for unreadable outputs\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	rows := 0
	for _, line := range strings.Split(stdout, "\n") {
		f := strings.Fields(line)
		if len(f) != 12 || f[0] != "unfiltered" {
			continue
		}
		rows++
		// questions, unreadable, routed
		if f[2] == "0" || f[3] != f[2] || f[4] != "-" {
			t.Errorf("row %q: want every question unreadable and routing undefined", line)
		}
	}
	if rows != 4 {
		t.Errorf("%d rows, want 4:\n%s", rows, stdout)
	}
	if strings.Contains(stdout, "raise --oracle-max-tokens") || !strings.Contains(stdout, "cut off in a loop") {
		t.Errorf("the hint for replies cut off in a loop:\n%s", stdout)
	}
}

func TestCutOffHint(t *testing.T) {
	for _, c := range []struct {
		s            llm.Stats
		raise, loops bool
	}{
		{llm.Stats{}, false, false},
		{llm.Stats{CutOff: 3}, true, false},
		{llm.Stats{CutOff: 3, CutOffRepeating: 3}, false, true},
		{llm.Stats{CutOff: 3, CutOffRepeating: 1}, true, true},
	} {
		h := cutOffHint(c.s)
		if strings.Contains(h, "raise --oracle-max-tokens") != c.raise || strings.Contains(h, "in a loop") != c.loops {
			t.Errorf("%+v: hint %q", c.s, h)
		}
	}
}

// TestLLMSamplingFlags: every model endpoint's flags set the sampling
// controls and the concurrency mode of its llm.Config; --X-stop repeats
// and reads Go escapes; unset, they stay zero (not sent).
func TestLLMSamplingFlags(t *testing.T) {
	for _, prefix := range []string{"oracle", "solver"} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		var c llm.Config
		llmFlags(fs, prefix, "the model", &c)
		err := fs.Parse([]string{"-" + prefix + "-temperature", "0.7", "-" + prefix + "-top-p", "0.9", "-" + prefix + "-frequency-penalty", "0.5",
			"-" + prefix + "-presence-penalty", "0.25", "-" + prefix + "-repetition-penalty", "1.1", "-" + prefix + "-stop", `\n\n`, "-" + prefix + "-stop", "</s>",
			"-" + prefix + "-fixed-concurrency"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Temperature != 0.7 || c.TopP != 0.9 || c.FrequencyPenalty != 0.5 || c.PresencePenalty != 0.25 || c.RepetitionPenalty != 1.1 ||
			!reflect.DeepEqual(c.Stop, []string{"\n\n", "</s>"}) || !c.FixedConcurrency {
			t.Errorf("%s: %+v", prefix, c)
		}
		fs = flag.NewFlagSet("x", flag.ContinueOnError)
		var d llm.Config
		llmFlags(fs, prefix, "the model", &d)
		if err := fs.Parse(nil); err != nil {
			t.Fatal(err)
		}
		if d.Temperature != 0 || d.TopP != 0 || d.FrequencyPenalty != 0 || d.PresencePenalty != 0 || d.RepetitionPenalty != 0 || d.Stop != nil || d.FixedConcurrency ||
			d.Timeout != llm.DefaultTimeout || d.Concurrency != llm.DefaultConcurrency {
			t.Errorf("%s defaults: %+v", prefix, d)
		}
	}
	// probe has the oracle's.
	for _, f := range []string{"oracle-temperature", "oracle-top-p", "oracle-frequency-penalty", "oracle-presence-penalty", "oracle-repetition-penalty", "oracle-stop", "oracle-fixed-concurrency"} {
		if !commandFlags(t, "probe")[f] || !commandFlags(t, "serve")[f] {
			t.Errorf("--%s missing from probe or serve", f)
		}
	}
	if !commandFlags(t, "serve")["solver-repetition-penalty"] {
		t.Error("serve lacks --solver-repetition-penalty")
	}
}

// TestEvalReplayFlag: --llm-replay asks the run to replay (eval.Config.Replay),
// which the pre-flight reads; without it the run is not a replay.
func TestEvalReplayFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"--llm-replay"}, true}} {
		var f evalFlags
		fs := flag.NewFlagSet("eval", flag.ContinueOnError)
		f.register(fs)
		if err := fs.Parse(append(c.args, "--out", t.TempDir())); err != nil {
			t.Fatal(err)
		}
		if err := f.config(); err != nil {
			t.Fatal(err)
		}
		if f.cfg.Replay != c.want {
			t.Errorf("%q: Replay %v", c.args, f.cfg.Replay)
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/client"
	"avtgym/driver"
	"avtgym/eval"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

// runCmd runs the CLI in process and returns its exit code and outputs.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestUsage(t *testing.T) {
	if code, _, stderr := runCmd(t); code != 2 || !strings.Contains(stderr, "Usage:") {
		t.Errorf("no args: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "frobnicate"); code != 2 || !strings.Contains(stderr, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, _ := runCmd(t, "help"); code != 0 || !strings.Contains(stdout, "Usage:") {
		t.Errorf("help: exit %d, stdout %q", code, stdout)
	}
	if code, _, _ := runCmd(t, "corpus"); code != 2 {
		t.Errorf("corpus without a subcommand: exit %d, want 2", code)
	}
	if code, _, _ := runCmd(t, "corpus", "check"); code != 2 {
		t.Errorf("corpus check without a directory: exit %d, want 2", code)
	}
	if code, _, stderr := runCmd(t, "corpus", "check", "no-such-dir"); code != 1 || !strings.Contains(stderr, "no-such-dir") {
		t.Errorf("corpus check of a missing directory: exit %d, stderr %q; want 1 naming it", code, stderr)
	}
}

func TestCorpusValidate(t *testing.T) {
	dir := testutil.WriteTiny(t)
	code, stdout, stderr := runCmd(t, "corpus", "validate", dir)
	if code != 0 {
		t.Fatalf("valid corpus: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if want := dir + `: OK: corpus "tiny", 5 tasks, 4 AVTs, 1 databases`; !strings.Contains(stdout, want) {
		t.Errorf("stdout %q does not contain %q", stdout, want)
	}
	if stderr != "" {
		t.Errorf("stderr %q, want nothing", stderr)
	}
}

func TestCorpusValidateInvalid(t *testing.T) {
	bad := testutil.WriteTiny(t, func(f map[string]string) {
		lines := strings.Split(f["records.jsonl"], "\n")
		lines[2] = `{"id": "big" "db": "mini"}`
		lines[4] = strings.Replace(lines[4], `"request":`, `"requst":`, 1)
		f["records.jsonl"] = strings.Join(lines, "\n")
	})
	good := testutil.WriteTiny(t)
	code, stdout, stderr := runCmd(t, "corpus", "validate", bad, good)
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	file := filepath.Join(bad, "records.jsonl")
	for _, want := range []string{
		file + ":3: invalid JSON",
		file + ":5: requst: unknown field",
		bad + ": INVALID: 2 problem(s)",
	} {
		if !strings.Contains(stderr, "\n"+want) && !strings.HasPrefix(stderr, want) {
			t.Errorf("stderr has no line starting %q:\n%s", want, stderr)
		}
	}
	// The other directory is still validated.
	if !strings.Contains(stdout, good+": OK") {
		t.Errorf("stdout %q does not report the valid corpus", stdout)
	}
	if strings.Contains(stdout, bad) {
		t.Errorf("stdout mentions the invalid corpus: %q", stdout)
	}
}

func TestKeygen(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token.key")
	code, stdout, stderr := runCmd(t, "keygen", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, file) {
		t.Errorf("stdout %q does not name the file", stdout)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(string(b))
	if len(key) != 64 {
		t.Errorf("key %q has %d characters, want 64 hex digits", key, len(key))
	}
	if _, err := hex.DecodeString(key); err != nil {
		t.Errorf("key %q is not hex: %v", key, err)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}

	code, _, stderr = runCmd(t, "keygen", file)
	if code != 1 || stderr == "" {
		t.Errorf("second keygen: exit %d, stderr %q; want 1 and an error", code, stderr)
	}
	if b2, _ := os.ReadFile(file); !bytes.Equal(b, b2) {
		t.Error("second keygen overwrote the key")
	}

	other := filepath.Join(t.TempDir(), "other.key")
	runCmd(t, "keygen", other)
	if b3, _ := os.ReadFile(other); bytes.Equal(b, b3) {
		t.Error("two keygens wrote the same key")
	}
	if code, _, _ := runCmd(t, "keygen"); code != 2 {
		t.Errorf("keygen without a file: exit %d, want 2", code)
	}
}

// summary is what `rollout --json` prints.
type summary = eval.RolloutSummary

func rolloutJSON(t *testing.T, addr string, args ...string) *summary {
	t.Helper()
	code, stdout, stderr := runCmd(t, append([]string{"rollout", "--server", addr, "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("rollout %v: exit %d\nstderr: %s", args, code, stderr)
	}
	var s summary
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		t.Fatalf("rollout %v: output is not a summary: %v\n%s", args, err, stdout)
	}
	if s.Episodes == 0 || s.Errors != 0 {
		t.Fatalf("rollout %v: %d episodes, %d errors", args, s.Episodes, s.Errors)
	}
	return &s
}

func val(t *testing.T, name string, x *float64) float64 {
	t.Helper()
	if x == nil {
		t.Fatalf("%s is null", name)
	}
	return *x
}

func TestRollout(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	addr := srv.Addr

	for _, pol := range []string{"full", "full_adv"} {
		t.Run(pol, func(t *testing.T) {
			s := rolloutJSON(t, addr, "--policy", pol)
			if s.Policy != pol || s.Corpus != "demo" {
				t.Errorf("policy %q corpus %q", s.Policy, s.Corpus)
			}
			for name, x := range map[string]*float64{"recall": s.Recall, "precision": s.Precision, "f1": s.F1} {
				if v := val(t, name, x); v != 1 {
					t.Errorf("%s = %v, want 1", name, v)
				}
			}
		})
	}

	t.Run("none_adv", func(t *testing.T) {
		s := rolloutJSON(t, addr, "--policy", "none_adv")
		if v := val(t, "recall", s.Recall); v != 0 {
			t.Errorf("recall = %v, want 0", v)
		}
	})

	t.Run("none episodes", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "episodes.jsonl")
		code, stdout, stderr := runCmd(t, "rollout", "--server", addr, "--policy", "none", "--reward", "question_f1", "--episodes-out", out)
		if code != 0 {
			t.Fatalf("exit %d\nstderr: %s", code, stderr)
		}
		if !strings.Contains(stdout, "policy none on corpus demo") {
			t.Errorf("stdout %q", stdout)
		}
		f, err := os.Open(out)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var n, controls int
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			n++
			var e driver.Record
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("line %d: %v: %s", n, err, sc.Text())
			}
			if e.Error != "" || e.TaskID == "" {
				t.Errorf("line %d: task %q error %q", n, e.TaskID, e.Error)
				continue
			}
			if len(e.Questions) != 0 {
				t.Errorf("%s: the none policy asked %v", e.TaskID, e.Questions)
			}
			r := val(t, e.TaskID+" reward", e.Reward)
			if e.Counted == 0 {
				controls++
				if r != 1 {
					t.Errorf("%s: control reward %v, want 1", e.TaskID, r)
				}
			} else if r == 1 {
				t.Errorf("%s: %d counted ambiguities, none asked, yet reward 1", e.TaskID, e.Counted)
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		if n == 0 || controls == 0 {
			t.Errorf("%d episodes, %d controls; want some of each", n, controls)
		}
	})

	t.Run("full outcome", func(t *testing.T) {
		s := rolloutJSON(t, addr, "--policy", "full", "--reward", "outcome", "--solver", "lookup")
		if v := val(t, "success_rate", s.SuccessRate); v != 1 {
			t.Errorf("success_rate = %v, want 1", v)
		}
		if v := val(t, "multi_interpretation.success_rate", s.MultiInterpretation.SuccessRate); v != 1 {
			t.Errorf("multi-interpretation success = %v, want 1", v)
		}
	})

	t.Run("none outcome", func(t *testing.T) {
		s := rolloutJSON(t, addr, "--policy", "none", "--reward", "outcome", "--solver", "lookup")
		m := s.MultiInterpretation
		if m.Episodes == 0 {
			t.Fatal("no multi-interpretation episodes")
		}
		succ := val(t, "multi_interpretation.success_rate", m.SuccessRate)
		chance := val(t, "multi_interpretation.chance", m.Chance)
		t.Logf("multi-interpretation: %d episodes, success %.3f, chance %.3f", m.Episodes, succ, chance)
		if succ < 0.1 || succ > 0.9 {
			t.Errorf("success %v on multi-interpretation AVTs, want within [0.1, 0.9]", succ)
		}
		if math.Abs(succ-chance) > 0.25 {
			t.Errorf("success %v is not within 0.25 of chance %v", succ, chance)
		}
		if chance <= 0 || chance > 0.5 {
			t.Errorf("chance %v, want in (0, 0.5] for AVTs with 2+ interpretations", chance)
		}
	})

	t.Run("bad flags", func(t *testing.T) {
		for _, args := range [][]string{
			{"--policy", "bogus"},
			{},
			{"--policy", "full", "--reward", "bogus"},
			{"--policy", "full", "--solver", "bogus"},
			{"--policy", "full", "--no-such-flag"},
		} {
			code, _, stderr := runCmd(t, append([]string{"rollout", "--server", addr}, args...)...)
			if code != 2 {
				t.Errorf("rollout %v: exit %d, want 2 (stderr %q)", args, code, stderr)
			}
		}
	})

	t.Run("bench", func(t *testing.T) {
		code, stdout, stderr := runCmd(t, "bench", "--server", addr, "--duration", "200ms", "--concurrency", "4", "--batch", "16", "--json")
		if code != 0 {
			t.Fatalf("exit %d\nstderr: %s", code, stderr)
		}
		var r struct {
			Concurrency      int     `json:"concurrency"`
			BatchSize        int     `json:"batch_size"`
			HealthPerS       float64 `json:"health_per_s"`
			StepPerS         float64 `json:"step_per_s"`
			StepRatio        float64 `json:"step_ratio"`
			BatchPerS        float64 `json:"batch_per_s"`
			BatchEpisodePerS float64 `json:"batch_episode_per_s"`
			BatchRatio       float64 `json:"batch_ratio"`
		}
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, stdout)
		}
		if r.HealthPerS <= 0 || r.StepPerS <= 0 || r.BatchEpisodePerS <= 0 {
			t.Fatalf("rates not positive: %+v", r)
		}
		if r.Concurrency != 4 || r.BatchSize != 16 {
			t.Errorf("concurrency %d batch %d, want 4 and 16", r.Concurrency, r.BatchSize)
		}
		near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }
		if !near(r.StepRatio, r.StepPerS/r.HealthPerS) {
			t.Errorf("step_ratio %v, want step_per_s/health_per_s = %v", r.StepRatio, r.StepPerS/r.HealthPerS)
		}
		if !near(r.BatchRatio, r.BatchEpisodePerS/r.StepPerS) {
			t.Errorf("batch_ratio %v, want batch_episode_per_s/step_per_s = %v", r.BatchRatio, r.BatchEpisodePerS/r.StepPerS)
		}
		if !near(r.BatchEpisodePerS, 16*r.BatchPerS) {
			t.Errorf("batch_episode_per_s %v, want 16 × batch_per_s = %v", r.BatchEpisodePerS, 16*r.BatchPerS)
		}
	})
}

func TestServeCommand(t *testing.T) {
	// Bad flags and a bad corpus fail at once, naming the problem.
	var out, errb bytes.Buffer
	if code := run(context.Background(), []string{"serve", "--no-such-flag"}, &out, &errb); code != 2 {
		t.Fatalf("bad flag: exit %d", code)
	}
	bad := testutil.WriteTiny(t, func(f map[string]string) {
		f["records.jsonl"] = strings.Replace(f["records.jsonl"], `"db":"mini"`, `"db":"nope"`, 1)
	})
	errb.Reset()
	if code := run(context.Background(), []string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--corpus", bad}, &out, &errb); code != 1 {
		t.Fatalf("bad corpus: exit %d, stderr %s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "records.jsonl:1: db:") {
		t.Fatalf("bad corpus: stderr lacks the file:line: field: problem:\n%s", errb.String())
	}

	// The default corpus is served until the context ends; then serve exits 0.
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"}, io.Discard, pw)
		pw.Close()
	}()
	addr := ""
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, `"addr": "`); i >= 0 && strings.Contains(line, "\tserving\t") {
			addr = strings.SplitN(line[i+len(`"addr": "`):], `"`, 2)[0]
			break
		}
	}
	go io.Copy(io.Discard, pr)
	if addr == "" {
		cancel()
		t.Fatalf("serve never logged its address (exit %d)", <-done)
	}
	c, err := client.Dial(addr, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	corpora, err := c.Env.ListCorpora(ctx, &pb.ListCorporaRequest{})
	c.Close()
	if err != nil || len(corpora.GetCorpora()) != 1 || corpora.Corpora[0].Name != "demo" {
		t.Fatalf("ListCorpora = %v, %v", corpora, err)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d after its context ended", code)
	}
}

// TestImportedAmbrosiaEndToEnd is issue 3's "done means" for AMBROSIA:
// import the shared validation split with the CLI, audit it with
// `corpus check`, serve it, and roll out the scripted policies.
func TestImportedAmbrosiaEndToEnd(t *testing.T) {
	in := filepath.Join("..", "..", "..", "shared", "data", "ambrosia")
	if _, err := os.Stat(in); err != nil {
		t.Skipf("AMBROSIA data not found at %s (../shared/data beside the checkout): %v", in, err)
	}
	out := filepath.Join(t.TempDir(), "amb")
	if code, _, stderr := runCmd(t, "corpus", "import", "ambrosia", "--in", in, "--out", out, "--quiet"); code != 0 {
		t.Fatalf("import: exit %d\n%s", code, stderr)
	}
	if code, stdout, stderr := runCmd(t, "corpus", "check", out); code != 0 || !strings.Contains(stdout, "PASS") {
		t.Fatalf("corpus check: exit %d\n%s\n%s", code, stdout, stderr)
	}
	srv := testutil.StartServer(t, app.Config{Corpora: []string{out}})
	for _, pol := range []string{"full", "full_adv"} {
		s := rolloutJSON(t, srv.Addr, "--policy", pol)
		if val(t, "recall", s.Recall) != 1 || val(t, "precision", s.Precision) != 1 {
			t.Errorf("%s: recall %v precision %v, want 1 and 1", pol, *s.Recall, *s.Precision)
		}
	}
	if s := rolloutJSON(t, srv.Addr, "--policy", "none_adv"); val(t, "recall", s.Recall) != 0 {
		t.Errorf("none_adv: recall %v, want 0", *s.Recall)
	}
	if s := rolloutJSON(t, srv.Addr, "--policy", "full", "--reward", "outcome", "--solver", "lookup"); val(t, "success", s.SuccessRate) != 1 {
		t.Errorf("full with lookup: success %v, want 1", *s.SuccessRate)
	}
	// Without questions the lookup solver guesses among the k
	// interpretations: success near the mean of 1/k (every AMBROSIA AVT
	// has 2 or 3 interpretations, so chance lies in [1/3, 1/2]).
	s := rolloutJSON(t, srv.Addr, "--policy", "none", "--reward", "outcome", "--solver", "lookup")
	m := s.MultiInterpretation
	chance, got := val(t, "chance", m.Chance), val(t, "success", m.SuccessRate)
	if m.Episodes != s.Episodes || chance < 1.0/3 || chance > 0.5 || got < chance-0.12 || got > chance+0.12 {
		t.Errorf("none with lookup: success %.3f over %d episodes, chance %.3f (%d multi-interpretation episodes)", got, s.Episodes, chance, m.Episodes)
	}
}

package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"encoding/json"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/fakellm"
	"avtgym/internal/testutil"
	"avtgym/llm"
)

// tinySQL is the reference SQL of the tiny corpus's top-a and top-b: the
// fake solver writes the one whose resolution the dialogue holds.
var tinySQL = map[string]string{
	"largest total sales amount": "SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1",
	"most individual sales":      "SELECT region FROM sales GROUP BY region ORDER BY COUNT(*) DESC LIMIT 1",
}

// fakeSolverSQL answers a solver prompt with the SQL of the resolution its
// dialogue holds, else a query that solves no task.
func fakeSolverSQL(prompt string) string {
	for phrase, sql := range tinySQL {
		if strings.Contains(prompt, phrase) {
			b, _ := json.Marshal(map[string]string{"sql": sql})
			return string(b)
		}
	}
	return `{"sql": "SELECT 'no reading'"}`
}

// modelCalls counts a fake endpoint's requests by the part of avtgym they
// come from: the oracle's matcher (stage 1), its responder (stage 2; with
// the reference SQL in the prompt: unfiltered), the solver.
type modelCalls struct{ matcher, responder, responderSQL, solver int }

func countCalls(reqs []fakellm.Request) modelCalls {
	var c modelCalls
	for _, r := range reqs {
		system, user := r.System(), r.User()
		switch {
		case strings.Contains(system, "CLASSIFY"):
			c.matcher++
		case strings.Contains(user, "## Chosen action"):
			c.responder++
			if strings.Contains(user, "## Reference SQL") {
				c.responderSQL++
			}
		case strings.Contains(system, "You write SQL") || strings.Contains(system, "writing ability"):
			c.solver++
		}
	}
	return c
}

// readRecords reads an --episodes-out file.
func readRecords(t *testing.T, name string) []driver.Record {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []driver.Record
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r driver.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestRolloutOracleFlag: `rollout --oracle` plays each episode with the
// oracle it names, over the server's model endpoint: the LLM oracles call
// the matcher and (llm, llm-scoped) the responder — the unfiltered one with
// the reference SQL in its prompt, the scoped one without — the hybrids
// the matcher only, the deterministic oracle no model; every episode is
// scored, and the full policy keeps recall = precision = 1 with a
// cooperative model.
func TestRolloutOracleFlag(t *testing.T) {
	model := fakellm.New(fakellm.Options{Solver: fakeSolverSQL})
	defer model.Close()
	endpoint := llm.Config{BaseURL: model.URL + "/v1", Model: "fake", BackoffBase: time.Millisecond}
	srv := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}, OracleLLM: endpoint, SolverLLM: endpoint, NoLLMCache: true})

	for _, tc := range []struct {
		oracle string
		// llm: the responder is the model's; sql: its prompt holds the reference SQL.
		matcher, responder, sql bool
	}{
		{"deterministic", false, false, false},
		{"llm", true, true, true},
		{"llm-scoped", true, true, false},
		{"llm_scoped", true, true, false},
		{"hybrid", true, false, false},
		{"hybrid-scoped", true, false, false},
	} {
		t.Run(tc.oracle, func(t *testing.T) {
			before := len(model.Requests())
			out := filepath.Join(t.TempDir(), "episodes.jsonl")
			s := rolloutJSON(t, srv.Addr, "--policy", "full", "--oracle", tc.oracle, "--episodes-out", out)
			if s.Episodes != 5 || val(t, "recall", s.Recall) != 1 || val(t, "precision", s.Precision) != 1 {
				t.Errorf("summary %+v recall %v precision %v", s, val(t, "recall", s.Recall), val(t, "precision", s.Precision))
			}
			c := countCalls(model.Requests()[before:])
			if (c.matcher > 0) != tc.matcher || (c.responder > 0) != tc.responder || (c.responderSQL > 0) != tc.sql ||
				tc.responder && c.responderSQL != 0 && c.responderSQL != c.responder || c.solver != 0 {
				t.Errorf("model calls %+v; want matcher %v, responder %v, reference SQL in its prompts %v, no solver", c, tc.matcher, tc.responder, tc.sql)
			}
			for _, r := range readRecords(t, out) {
				if r.Status != "TERMINATED" || r.Reward == nil {
					t.Errorf("%s: status %s reward %v", r.TaskID, r.Status, r.Reward)
				}
				if tc.oracle == "llm" || tc.oracle == "llm-scoped" {
					for _, reply := range r.Replies {
						if strings.Contains(reply, "SELECT") {
							t.Errorf("%s: a reply quotes SQL: %q", r.TaskID, reply)
						}
					}
				}
			}
		})
	}
}

// TestRolloutLLMSolver: `rollout --solver llm` has the server's LLM solver
// write the SQL from the dialogue, once per episode: after the full
// policy's questions answered by the LLM oracle it writes top-a's and
// top-b's readings (success), without questions it cannot (failure), and
// every episode is scored either way.
func TestRolloutLLMSolver(t *testing.T) {
	model := fakellm.New(fakellm.Options{Solver: fakeSolverSQL})
	defer model.Close()
	endpoint := llm.Config{BaseURL: model.URL + "/v1", Model: "fake", BackoffBase: time.Millisecond}
	srv := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}, OracleLLM: endpoint, SolverLLM: endpoint, NoLLMCache: true})

	for _, tc := range []struct {
		policy string
		want   float64 // success of top-a and top-b
	}{{"full", 1}, {"none", 0}} {
		t.Run(tc.policy, func(t *testing.T) {
			before := len(model.Requests())
			out := filepath.Join(t.TempDir(), "episodes.jsonl")
			s := rolloutJSON(t, srv.Addr, "--policy", tc.policy, "--oracle", "llm", "--solver", "llm", "--reward", "outcome", "--episodes-out", out)
			if s.Episodes != 5 {
				t.Errorf("summary %+v", s)
			}
			if c := countCalls(model.Requests()[before:]); c.solver != 5 {
				t.Errorf("%d solver calls, want one per episode (%+v)", c.solver, c)
			}
			for _, r := range readRecords(t, out) {
				if r.Status != "TERMINATED" || r.Success == nil {
					t.Fatalf("%s: status %s success %v", r.TaskID, r.Status, r.Success)
				}
				if (r.TaskID == "top-a" || r.TaskID == "top-b") && *r.Success != tc.want {
					t.Errorf("%s: success %v, want %v (questions %q, replies %q)", r.TaskID, *r.Success, tc.want, r.Questions, r.Replies)
				}
			}
		})
	}
}

// TestRolloutLLMPolicyReplay: `rollout --policy llm --oracle llm` plays the
// LLM asker against the LLM oracle, each over its own endpoint, every
// asker request with --asker-max-tokens; with --llm-cache the same command
// replays byte for byte with the asker's endpoint closed.
func TestRolloutLLMPolicyReplay(t *testing.T) {
	oracleModel := fakellm.New(fakellm.Options{})
	defer oracleModel.Close()
	srv := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)},
		OracleLLM: llm.Config{BaseURL: oracleModel.URL + "/v1", Model: "fake", BackoffBase: time.Millisecond}})
	// The asker asks about "top region" until the dialogue holds an
	// answer, then is done.
	asker := fakellm.New(fakellm.Options{Hook: func(system, user string) (int, string, bool) {
		if strings.Contains(user, "top region") && !strings.Contains(user, "plainly") {
			return 0, `{"type": "clarification", "question": "What do you mean by top region?"}`, true
		}
		return 0, `{"type": "done"}`, true
	}})
	cache := filepath.Join(t.TempDir(), "asker-cache.jsonl")
	args := func(out string) []string {
		return []string{"rollout", "--server", srv.Addr, "--policy", "llm", "--oracle", "llm", "--json", "--episodes-out", out,
			"--asker-url", asker.URL + "/v1", "--asker-model", "fake", "--asker-concurrency", "1", "--asker-timeout", "30s", "--asker-max-tokens", "300", "--llm-cache", cache}
	}
	dir := t.TempDir()
	first, second := filepath.Join(dir, "first.jsonl"), filepath.Join(dir, "second.jsonl")
	code, stdout1, stderr := runCmd(t, args(first)...)
	if code != 0 {
		t.Fatalf("rollout: exit %d\n%s", code, stderr)
	}
	if asker.Calls() == 0 || oracleModel.Calls() == 0 {
		t.Fatalf("asker calls %d, oracle calls %d", asker.Calls(), oracleModel.Calls())
	}
	for _, r := range readRecords(t, first) {
		if r.Status != "TERMINATED" && r.Status != "TRUNCATED" {
			t.Errorf("%s: status %s", r.TaskID, r.Status)
		}
		if r.TaskID == "top-a" && (len(r.Questions) != 1 || r.Recall == nil || *r.Recall != 1) {
			t.Errorf("top-a: questions %q recall %v", r.Questions, r.Recall)
		}
	}
	for _, r := range asker.Requests() {
		if r.MaxTokens != 300 || !r.JSONMode() {
			t.Errorf("an asker request with max_tokens %d, JSON mode %v; want 300 (--asker-max-tokens), on", r.MaxTokens, r.JSONMode())
		}
	}
	asker.Close()
	calls := asker.Calls()
	code, stdout2, stderr := runCmd(t, args(second)...)
	if code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, stderr)
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if len(a) == 0 || !bytes.Equal(replayableLines(t, a), replayableLines(t, b)) || stdout1 != stdout2 || asker.Calls() != calls {
		t.Errorf("the replay differs (asker calls %d → %d):\n%s\n---\n%s", calls, asker.Calls(), a, b)
	}
}

// TestRolloutOracleFlagErrors: an unknown oracle is a usage error; an
// oracle the server does not serve fails before any episode, naming the
// flag that serves it; the LLM solver on a server without one fails with
// the server's reason; a non-positive --asker-max-tokens is a usage error.
func TestRolloutOracleFlagErrors(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}})
	if code, _, stderr := runCmd(t, "rollout", "--server", srv.Addr, "--policy", "full", "--oracle", "oracular"); code != 2 || !strings.Contains(stderr, "--oracle") {
		t.Errorf("unknown oracle: exit %d, stderr %q", code, stderr)
	}
	for _, o := range []string{"llm", "hybrid-scoped", "test_credit_all"} {
		code, _, stderr := runCmd(t, "rollout", "--server", srv.Addr, "--policy", "full", "--oracle", o)
		if code != 1 || !strings.Contains(stderr, "does not serve the "+strings.ReplaceAll(o, "-", "_")+" oracle") || !strings.Contains(stderr, "--oracle-url") {
			t.Errorf("--oracle %s on a server without it: exit %d, stderr %q", o, code, stderr)
		}
	}
	s := rolloutJSON(t, srv.Addr, "--policy", "full", "--oracle", "deterministic")
	if val(t, "recall", s.Recall) != 1 {
		t.Errorf("deterministic: %+v", s)
	}
	code, _, stderr := runCmd(t, "rollout", "--server", srv.Addr, "--policy", "full", "--solver", "llm", "--reward", "outcome")
	if code != 1 || !strings.Contains(stderr, "no solver model is configured") {
		t.Errorf("--solver llm on a server without one: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runCmd(t, "rollout", "--server", srv.Addr, "--policy", "llm", "--asker-url", "http://127.0.0.1:1/v1", "--asker-model", "m", "--asker-max-tokens", "0")
	if code != 2 || !strings.Contains(stderr, "--asker-max-tokens") {
		t.Errorf("--asker-max-tokens 0: exit %d, stderr %q", code, stderr)
	}
}

// TestRolloutTimeoutKeepsRecords: a rollout that runs out of --timeout
// writes the records of the episodes it started (here cut short: the
// asker's calls outlast the deadline) before it fails, instead of losing
// them.
func TestRolloutTimeoutKeepsRecords(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}})
	asker := fakellm.New(fakellm.Options{Delay: 5 * time.Second})
	defer asker.Close()
	out := filepath.Join(t.TempDir(), "episodes.jsonl")
	code, _, stderr := runCmd(t, "rollout", "--server", srv.Addr, "--policy", "llm", "--episodes-out", out, "--timeout", "1s",
		"--asker-url", asker.URL+"/v1", "--asker-model", "fake", "--asker-concurrency", "2", "--concurrency", "2")
	if code != 1 || !strings.Contains(stderr, "deadline") {
		t.Fatalf("exit %d, want 1 with the deadline\n%s", code, stderr)
	}
	recs := readRecords(t, out)
	if len(recs) == 0 {
		t.Fatalf("no records written:\n%s", stderr)
	}
	for _, r := range recs {
		if r.Scored() || r.Error == "" {
			t.Errorf("%s: status %s error %q; want an unscored record that says why", r.TaskID, r.Status, r.Error)
		}
	}
}

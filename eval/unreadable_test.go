package eval

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"avtgym/app"
	"avtgym/internal/testutil"
	"avtgym/llm"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// TestPreflightBypassesTheCache: a run recorded with the endpoint up
// leaves the server's response cache warm; with the endpoint down, a new
// run must stop at the pre-flight with a message naming the oracle's
// endpoint (its address), not go ahead on the cached question and fail
// the cells the cache lacks. With Replay (eval --llm-replay) the same run
// replays from the cache.
func TestPreflightBypassesTheCache(t *testing.T) {
	model, _ := flakyModel(t, func(int64) bool { return false })
	s := testutil.StartServer(t, app.Config{
		OracleLLM: llm.Config{BaseURL: model.URL + "/v1", Model: "fake", MaxRetries: -1}, // the in-memory cache
	})
	cfg := Config{Oracles: hybridOracle, Conditions: []Condition{Asker}, Limit: 2, RetryDelay: time.Millisecond}
	first := cfg
	first.Dir = t.TempDir()
	runOK(t, s, first)
	addr := strings.TrimPrefix(model.URL, "http://")
	model.Close()

	down := cfg
	down.Dir = t.TempDir()
	res, err := Run(context.Background(), s.Client.Env, down)
	if err == nil {
		t.Fatalf("the run went ahead with the endpoint down (played %d)", res.Played)
	}
	for _, want := range []string{"pre-flight", "the oracle endpoint failed", addr, "--llm-replay"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if eps := readAll(t, down.Dir); len(eps) != 0 {
		t.Errorf("%d episodes written", len(eps))
	}

	replay := cfg
	replay.Dir, replay.Replay = t.TempDir(), true
	res = runOK(t, s, replay)
	if res.Played == 0 {
		t.Error("the replay played nothing")
	}
}

func TestPreflightQuestionIsNew(t *testing.T) {
	a, b := preflightQuestion(time.Unix(1, 0)), preflightQuestion(time.Unix(2, 0))
	if a == b || !strings.HasPrefix(a, probe.Generic1) || !strings.Contains(a, "pre-flight") {
		t.Errorf("pre-flight questions %q, %q", a, b)
	}
}

// TestUnreadableCounted: outputs the server could not read — the LLM
// oracle's stage 1 in prose, the LLM solver's reply with no SQL — are
// recorded per episode from the privileged channel and reported per
// oracle and condition.
func TestUnreadableCounted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": "Well, I am not quite sure about that one."}, "finish_reason": "stop"}},
		})
	}))
	t.Cleanup(srv.Close)
	s := testutil.StartServer(t, app.Config{
		OracleLLM:  llm.Config{BaseURL: srv.URL + "/v1", Model: "fake", MaxRetries: -1},
		SolverLLM:  llm.Config{BaseURL: srv.URL + "/v1", Model: "fake", MaxRetries: -1},
		NoLLMCache: true,
	})
	dir := t.TempDir()
	runOK(t, s, Config{Oracles: hybridOracle, Conditions: []Condition{Asker}, Limit: 3, Dir: dir, Solver: pb.Solver_SOLVER_LLM})
	per := map[string][2]int{}
	for _, e := range readAll(t, dir) {
		c := per[e.Oracle]
		c[0] += e.UnreadableOracle
		c[1] += e.UnreadableSolver
		per[e.Oracle] = c
		if e.Oracle == "hybrid" && (e.UnreadableOracle != len(e.Questions) || e.UnreadableSolver != 1) {
			t.Errorf("%s hybrid: %d questions, %d unreadable oracle outputs, solver %d", e.TaskID, len(e.Questions), e.UnreadableOracle, e.UnreadableSolver)
		}
		if e.Oracle == "deterministic" && e.UnreadableOracle != 0 {
			t.Errorf("%s deterministic: %d unreadable oracle outputs", e.TaskID, e.UnreadableOracle)
		}
	}
	if per["hybrid"][0] == 0 || per["hybrid"][1] != 3 || per["deterministic"][1] != 3 {
		t.Fatalf("unreadable per oracle %v", per)
	}
	rep, err := Analyze(readAll(t, dir), AnalyzeOptions{Resamples: 10})
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, row := range rep.Rows {
		if u := row.Unreadable[Asker]; u.Oracle != per[row.Oracle][0] || u.Solver != per[row.Oracle][1] {
			t.Errorf("row %s: %+v, want %v", row.Oracle, u, per[row.Oracle])
		}
		if line := unreadableLine(rep, &row); !strings.Contains(md.String(), "- "+line) {
			t.Errorf("the report lacks %q", line)
		}
	}
}

package eval

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"avtgym/app"
	"avtgym/internal/testutil"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// flakyModel is an OpenAI-compatible endpoint whose n-th request (from 1)
// fails with HTTP 400 (never retried by the llm client) when fail(n), and
// otherwise answers every matcher call "unanswerable".
func flakyModel(t *testing.T, fail func(n int64) bool) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail(calls.Add(1)) {
			http.Error(w, `{"error": {"message": "the fake model is down"}}`, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": `{"action": "unanswerable"}`}, "finish_reason": "stop"}},
		})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func llmServer(t *testing.T, url string) *testutil.Server {
	t.Helper()
	return testutil.StartServer(t, app.Config{
		OracleLLM:  llm.Config{BaseURL: url + "/v1", Model: "fake", MaxRetries: -1},
		NoLLMCache: true,
	})
}

var (
	llmOracle = []pb.OracleType{pb.OracleType_ORACLE_TYPE_LLM}
	// hybridOracle plays one model call per generic question (its matcher;
	// its responder is deterministic); its runs add the deterministic
	// oracle, which calls no model.
	hybridOracle = []pb.OracleType{pb.OracleType_ORACLE_TYPE_HYBRID}
)

// TestRetriesFlakyEndpoint: episodes that end in ERROR because the
// oracle's endpoint failed are played again before they are recorded, so a
// flaky endpoint does not lower SR: after the pre-flight's call, the 2nd
// and 3rd model calls fail, exactly two episodes are retried, and every
// recorded episode is scored.
func TestRetriesFlakyEndpoint(t *testing.T) {
	model, calls := flakyModel(t, func(n int64) bool { return n == 2 || n == 3 })
	s := llmServer(t, model.URL)
	dir := t.TempDir()
	res := runOK(t, s, Config{
		Oracles: hybridOracle, Conditions: []Condition{Asker}, Limit: 6, Dir: dir, RetryDelay: time.Millisecond,
	})
	if res.Retried != 2 || res.Played != 12 {
		t.Errorf("retried %d, played %d; want 2 and 12 (model calls %d)", res.Retried, res.Played, calls.Load())
	}
	for _, e := range readAll(t, dir) {
		if !e.Scored() {
			t.Errorf("%s: recorded %s", e.TaskID, e.Status)
		}
	}
}

// TestRetriesExhausted: an episode that still fails after the retries is
// recorded as ERROR with the server's reason, and counted as a failure.
func TestRetriesExhausted(t *testing.T) {
	// The pre-flight's call succeeds; later, every third call fails, and
	// with no retries the failing episodes are recorded.
	model, _ := flakyModel(t, func(n int64) bool { return n > 1 && n%3 == 0 })
	s := llmServer(t, model.URL)
	dir := t.TempDir()
	res, err := Run(context.Background(), s.Client.Env, Config{
		Oracles: hybridOracle, Conditions: []Condition{Asker}, Limit: 6, Dir: dir, Retries: -1, Concurrency: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed == 0 || res.Retried != 0 {
		t.Fatalf("failed %d, retried %d; want failures and no retries", res.Failed, res.Retried)
	}
	errs := 0
	for _, e := range readAll(t, dir) {
		if e.Status == "ERROR" {
			errs++
			if !strings.Contains(e.Error, "the fake model is down") {
				t.Errorf("%s: ERROR without the reason: %q", e.TaskID, e.Error)
			}
		}
	}
	if errs != res.Failed {
		t.Errorf("%d ERROR episodes recorded, %d failed", errs, res.Failed)
	}
	rep, err := Analyze(readAll(t, dir), AnalyzeOptions{Resamples: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rep.Rows {
		if row.Oracle == "hybrid" && row.Errors[Asker] != errs {
			t.Errorf("report counts %d asker ERROR episodes, want %d", row.Errors[Asker], errs)
		}
	}
}

// TestRunAddsPairedOracles: a run of the scoped LLM oracle also plays its
// hybrid (hybrid_scoped, as ListOracles says, not the unscoped hybrid)
// and the reference, records the pairing in the run directory, and the
// report measures ΔJ_resp against that hybrid.
func TestRunAddsPairedOracles(t *testing.T) {
	model, _ := flakyModel(t, func(int64) bool { return false })
	s := llmServer(t, model.URL)
	dir := t.TempDir()
	runOK(t, s, Config{
		Oracles: []pb.OracleType{pb.OracleType_ORACLE_TYPE_LLM_SCOPED}, Conditions: []Condition{Asker}, Limit: 3, Dir: dir,
	})
	ran := map[string]int{}
	for _, e := range readAll(t, dir) {
		ran[e.Oracle]++
	}
	if len(ran) != 3 || ran["llm_scoped"] != 3 || ran["hybrid_scoped"] != 3 || ran["deterministic"] != 3 {
		t.Fatalf("episodes per oracle %v; want 3 each of llm_scoped, hybrid_scoped and deterministic", ran)
	}
	om, err := ReadOracleMap(dir)
	if err != nil || om == nil {
		t.Fatalf("oracle map %v, %v", om, err)
	}
	if om.Reference != "deterministic" || om.HybridOf["llm_scoped"] != "hybrid_scoped" || om.HybridOf["llm"] != "hybrid" {
		t.Errorf("oracle map %+v", om)
	}
	opt := AnalyzeOptions{Resamples: 10}
	om.Apply(&opt)
	rep, err := Analyze(readAll(t, dir), opt)
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range rep.Rows {
		if row.Oracle == "llm_scoped" && (row.Hybrid != "hybrid_scoped" || row.DJResp.Mean == nil) {
			t.Errorf("llm_scoped row: hybrid %q, ΔJ_resp %v", row.Hybrid, row.DJResp.Mean)
		}
	}
}

// TestPreflight: a requested oracle the server does not serve, an oracle
// whose endpoint is down, and a solver the server lacks each stop the run
// at once with one message naming it, before any episode is written.
func TestPreflight(t *testing.T) {
	plain := testutil.StartServer(t, app.Config{})
	down, _ := flakyModel(t, func(int64) bool { return true })
	broken := llmServer(t, down.URL)
	for _, c := range []struct {
		name   string
		s      *testutil.Server
		cfg    Config
		wantIn []string
	}{
		{"oracle not served", plain, Config{Oracles: llmOracle}, []string{"does not serve the llm oracle", "serve --oracle-url", "it serves deterministic"}},
		{"endpoint down", broken, Config{Oracles: llmOracle}, []string{"pre-flight", "llm oracle", "ERROR", "the fake model is down"}},
		{"solver not served", plain, Config{Solver: pb.Solver_SOLVER_LLM}, []string{"pre-flight", "llm solver", "no solver model"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.Dir = t.TempDir()
			c.cfg.RetryDelay = time.Millisecond
			res, err := Run(context.Background(), c.s.Client.Env, c.cfg)
			if err == nil {
				t.Fatalf("no error; played %d", res.Played)
			}
			for _, w := range c.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if eps := readAll(t, c.cfg.Dir); len(eps) != 0 {
				t.Errorf("%d episodes written", len(eps))
			}
		})
	}
}

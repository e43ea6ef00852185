package server_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"avtgym/app"
	"avtgym/internal/fakellm"
	"avtgym/internal/testutil"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

func llmOpts(o pb.OracleType) *pb.EpisodeOptions { return &pb.EpisodeOptions{Oracle: o} }

// TestLLMOracleEpisodes runs episodes with the LLM and scoped LLM oracles
// and their hybrids against a fake model endpoint.
func TestLLMOracleEpisodes(t *testing.T) {
	fake := fakellm.New(fakellm.Options{})
	defer fake.Close()
	_, c := startTiny(t, func(cfg *app.Config) {
		cfg.OracleLLM = llm.Config{BaseURL: fake.URL, Model: "fake", BackoffBase: time.Millisecond}
	})
	for _, o := range []pb.OracleType{pb.OracleType_ORACLE_TYPE_LLM, pb.OracleType_ORACLE_TYPE_LLM_SCOPED, pb.OracleType_ORACLE_TYPE_HYBRID, pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED} {
		t.Run(o.String(), func(t *testing.T) {
			ep := reset(t, c, &pb.ResetRequest{TaskId: "big", Options: llmOpts(o)})
			r := step(t, c, ep.Token, ask(fullQ("big sales")), true)
			if cr := r.Privileged.GetCredits(); len(cr) != 1 || cr[0].Term != "big sales" {
				t.Fatalf("credits %v", cr)
			}
			if r.Privileged.GetOracleAction() != `labeled("big sales")` || r.Observation.Turns[1].Kind != pb.TurnKind_TURN_KIND_REPLY {
				t.Fatalf("action %q, turns %v", r.Privileged.GetOracleAction(), r.Observation.Turns)
			}
			reply := r.Observation.Turns[1].Text
			want := "To put it plainly: Sales of 100 dollars or more."
			if o == pb.OracleType_ORACLE_TYPE_HYBRID || o == pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED {
				want = "Sales of 100 dollars or more." // the deterministic responder
			}
			if reply != want {
				t.Fatalf("reply %q, want %q", reply, want)
			}
			// A question naming no term: unanswerable, the fixed refusal, no credit.
			r = step(t, c, r.Token, ask("What is the weather like?"), true)
			if len(r.Privileged.GetCredits()) != 0 || r.Privileged.GetOracleAction() != "unanswerable()" || r.Observation.Turns[1].Kind != pb.TurnKind_TURN_KIND_REFUSAL {
				t.Fatalf("generic question: credits %v action %q turns %v", r.Privileged.GetCredits(), r.Privileged.GetOracleAction(), r.Observation.Turns)
			}
			r = step(t, c, r.Token, stop(), false)
			if r.Reward.GetComponents()["recall"] != 0.5 || r.Reward.GetComponents()["precision"] != 0.5 {
				t.Fatalf("reward %v", r.Reward)
			}
		})
	}
}

// TestLLMOracleFailuresInABatch: a model error or a hang past the deadline
// ends only that episode, in ERROR, and the batch and the server go on.
func TestLLMOracleFailuresInABatch(t *testing.T) {
	fake := fakellm.New(fakellm.Options{Hook: func(system, user string) (int, string, bool) {
		q := fakellm.Section(user, "## The user's new question")
		switch {
		case strings.Contains(q, "FAIL"):
			return http.StatusInternalServerError, "", true
		case strings.Contains(q, "HANG"):
			time.Sleep(2 * time.Second)
		case strings.Contains(q, "GARBAGE"):
			return 200, "I would say... no JSON here", true
		}
		return 0, "", false
	}})
	defer fake.Close()
	_, c := startTiny(t, func(cfg *app.Config) {
		cfg.OracleLLM = llm.Config{BaseURL: fake.URL, Model: "fake", MaxRetries: 1, BackoffBase: time.Millisecond, Timeout: 300 * time.Millisecond}
	})
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big", Options: llmOpts(pb.OracleType_ORACLE_TYPE_LLM)})
	resp, err := c.StepBatch(ctxT(t), &pb.StepBatchRequest{Steps: []*pb.StepRequest{
		{Token: ep.Token, Action: ask(fullQ("big sales"))},
		{Token: ep.Token, Action: ask("FAIL big sales?")},
		{Token: ep.Token, Action: ask("HANG big sales?")},
		{Token: ep.Token, Action: ask("GARBAGE big sales?"), IncludePrivileged: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []pb.EpisodeStatus{pb.EpisodeStatus_EPISODE_STATUS_RUNNING, pb.EpisodeStatus_EPISODE_STATUS_ERROR, pb.EpisodeStatus_EPISODE_STATUS_ERROR, pb.EpisodeStatus_EPISODE_STATUS_RUNNING}
	for i, r := range resp.Results {
		if r.GetStatus().GetCode() != 0 {
			t.Fatalf("item %d failed the call: %v", i, r.Status)
		}
		if got := r.Response.GetStatus(); got != want[i] {
			t.Errorf("item %d: status %s, want %s", i, got, want[i])
		}
		if want[i] == pb.EpisodeStatus_EPISODE_STATUS_ERROR && r.Response.GetReward() != nil {
			t.Errorf("item %d: an ERROR episode was scored", i)
		}
	}
	// Unparsable stage-1 output twice: treated as unanswerable, not an error.
	if g := resp.Results[3].Response; len(g.GetPrivileged().GetCredits()) != 0 || g.GetPrivileged().GetOracleAction() != "unanswerable()" {
		t.Errorf("garbage output: %v", g.GetPrivileged())
	}
	// The failed items can be retried from the same token once the model is back.
	r := step(t, c, ep.Token, ask(fullQ("recent year")), false)
	if r.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING {
		t.Fatalf("after the failures: %v", r)
	}
}

// TestLLMReplayFromCache: a run recorded in the persistent response cache
// replays bit for bit with the endpoint switched off — oracle replies,
// credits, the solver's SQL and the rewards.
func TestLLMReplayFromCache(t *testing.T) {
	dir := testutil.WriteTiny(t)
	keyFile := filepath.Join(t.TempDir(), "key")
	writeKey(t, keyFile)
	cacheFile := filepath.Join(t.TempDir(), "llm-cache.jsonl")
	fake := fakellm.New(fakellm.Options{Solver: func(prompt string) string {
		if strings.Contains(prompt, "largest total sales amount") {
			return `{"sql": "SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1"}`
		}
		return `{"sql": "SELECT 'West'"}`
	}})
	run := func(url string) []proto.Message {
		s := testutil.StartServer(t, app.Config{
			Corpora: []string{dir}, TokenKeyFile: keyFile, LLMCacheFile: cacheFile,
			OracleLLM: llm.Config{BaseURL: url, Model: "fake", MaxRetries: -1, Timeout: time.Second},
			SolverLLM: llm.Config{BaseURL: url, Model: "fake", MaxRetries: -1, Timeout: time.Second},
		})
		defer s.Stop(t)
		c := s.Client.Env
		var out []proto.Message
		for _, id := range []string{"top-a", "top-b", "big", "strong"} {
			for _, o := range []pb.OracleType{pb.OracleType_ORACLE_TYPE_LLM, pb.OracleType_ORACLE_TYPE_LLM_SCOPED, pb.OracleType_ORACLE_TYPE_HYBRID} {
				ep := reset(t, c, &pb.ResetRequest{TaskId: id, Seed: seed(3), Options: &pb.EpisodeOptions{
					Oracle: o, Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LLM}})
				tok, done := ep.Token, false
				for _, q := range []string{fullQ("top region"), fullQ("big sales"), "Anything else?", fullQ("strong market")} {
					r := step(t, c, tok, ask(q), true)
					tok, r.Token = r.Token, nil // sealed bytes differ (fresh nonces); the rest must not
					out = append(out, r)
					if done = r.Done; done {
						break // the budget ran out: the solver already ran
					}
				}
				if !done {
					r := step(t, c, tok, stop(), true)
					r.Token = nil
					out = append(out, r)
				}
			}
		}
		return out
	}
	live := run(fake.URL)
	calls := fake.Calls()
	fake.Close() // the endpoint is gone
	replay := run(fake.URL)
	if calls == 0 || len(live) != len(replay) {
		t.Fatalf("live run made %d model calls and %d steps; replay %d steps", calls, len(live), len(replay))
	}
	for i := range live {
		if !proto.Equal(live[i], replay[i]) {
			t.Fatalf("step %d differs:\nlive   %v\nreplay %v", i, live[i], replay[i])
		}
	}
	rewarded := 0
	for i, m := range live {
		r := m.(*pb.StepResponse)
		if r.GetStatus() == pb.EpisodeStatus_EPISODE_STATUS_ERROR {
			t.Fatalf("live step %d failed: %v", i, r)
		}
		if r.GetReward() != nil {
			rewarded++
		}
	}
	if rewarded != 12 {
		t.Fatalf("%d of 12 episodes got a reward", rewarded)
	}
}

func writeKey(t *testing.T, name string) {
	t.Helper()
	if err := writeFile(name, bytes.Repeat([]byte("cd"), 32)); err != nil {
		t.Fatal(err)
	}
}

func writeFile(name string, b []byte) error { return os.WriteFile(name, b, 0o600) }

// TestLLMConcurrencyLimit: a batch of LLM-oracle asks keeps exactly the
// configured number of model calls in flight at the endpoint — the limit
// is reached (the batch fans out wide enough) and never exceeded.
func TestLLMConcurrencyLimit(t *testing.T) {
	fake := fakellm.New(fakellm.Options{Delay: 20 * time.Millisecond})
	defer fake.Close()
	const limit = 8
	_, c := startTiny(t, func(cfg *app.Config) {
		cfg.NoLLMCache = true
		cfg.OracleLLM = llm.Config{BaseURL: fake.URL, Model: "fake", Concurrency: limit}
	})
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big", Options: llmOpts(pb.OracleType_ORACLE_TYPE_LLM)})
	batch := &pb.StepBatchRequest{}
	for range 64 {
		batch.Steps = append(batch.Steps, &pb.StepRequest{Token: ep.Token, Action: ask(fullQ("big sales"))})
	}
	fake.ResetCounters()
	resp, err := c.StepBatch(ctxT(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.Results {
		if r.GetResponse().GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_RUNNING {
			t.Fatalf("item %d: %v", i, r)
		}
	}
	if got := fake.MaxInFlight(); got != limit {
		t.Fatalf("the endpoint saw at most %d calls in flight, want exactly the limit %d", got, limit)
	}
	if got := fake.Calls(); got != 128 {
		t.Fatalf("%d model calls for 64 asks without a cache, want 128", got)
	}
}

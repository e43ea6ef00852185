package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"avtgym/app"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// fakeSolver is an OpenAI-compatible endpoint that answers the solver
// prompt with the SQL of the interpretation the dialogue revealed, like a
// model that reads the clarifications.
func fakeSolver(t *testing.T, reply func(prompt string) string) (*httptest.Server, *atomic.Int64) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		var req struct {
			Messages []struct{ Role, Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, "bad request", 400)
			return
		}
		content := reply(req.Messages[len(req.Messages)-1].Content)
		json.NewEncoder(w).Encode(map[string]any{
			"model":   "fake",
			"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": content}}},
			"usage":   map[string]any{"prompt_tokens": 10, "completion_tokens": 5},
		})
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestLLMSolver(t *testing.T) {
	srv, calls := fakeSolver(t, func(prompt string) string {
		if !strings.Contains(prompt, "Which is the top region?") || strings.Contains(prompt, "GROUP BY") {
			return `{"sql": "SELECT 'the prompt is wrong'"}`
		}
		if strings.Contains(prompt, "largest total sales amount") {
			return "```json\n{\"sql\": \"SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1\"}\n```"
		}
		return `I think {"sql": "SELECT region FROM sales GROUP BY region ORDER BY COUNT(*) DESC LIMIT 1"}`
	})
	_, c := startTiny(t, func(cfg *app.Config) {
		cfg.SolverLLM = llm.Config{BaseURL: srv.URL, Model: "fake", BackoffBase: time.Millisecond}
	})
	opts := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LLM}
	// Asked: the model reads the answer and writes top-a's SQL.
	ep := reset(t, c, &pb.ResetRequest{TaskId: "top-a", Options: opts})
	r := step(t, c, ep.Token, ask(fullQ("top region")), false)
	r = step(t, c, r.Token, stop(), true)
	if !r.Done || r.Reward.GetValue() != 1 || !strings.Contains(r.Privileged.GetSolverSql(), "SUM(amount)") {
		t.Fatalf("LLM solver after asking: %v", r)
	}
	for _, turn := range r.Observation.Turns {
		if strings.Contains(turn.Text, "GROUP BY") {
			t.Fatalf("the solver's SQL leaked into the observation: %v", turn)
		}
	}
	// Not asked: it guesses the count reading, wrong for top-a.
	ep = reset(t, c, &pb.ResetRequest{TaskId: "top-a", Options: opts})
	if r := step(t, c, ep.Token, stop(), false); !r.Done || r.Reward.GetValue() != 0 || r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
		t.Fatalf("LLM solver without asking: %v", r)
	}
	// The client's SQL stays the default and is used when submitted.
	ep = reset(t, c, &pb.ResetRequest{TaskId: "top-a", Options: opts})
	before := calls.Load()
	if r := step(t, c, ep.Token, submit("SELECT 'East'"), false); r.Reward.GetValue() != 1 || calls.Load() != before {
		t.Fatalf("client SQL with the LLM solver configured: %v (model calls %d)", r, calls.Load()-before)
	}
	// Without a solver model the option is refused.
	_, plain := startTiny(t)
	_, err := plain.Reset(ctxT(t), &pb.ResetRequest{TaskId: "top-a", Options: opts})
	wantError(t, err, codes.InvalidArgument, "INVALID_OPTION")
}

func TestLLMSolverEndpointDown(t *testing.T) {
	srv, _ := fakeSolver(t, func(string) string { return "" })
	url := srv.URL
	srv.Close() // nothing listens there any more
	_, c := startTiny(t, func(cfg *app.Config) {
		cfg.SolverLLM = llm.Config{BaseURL: url, Model: "fake", MaxRetries: 1, BackoffBase: time.Millisecond, Timeout: time.Second}
	})
	ep := reset(t, c, &pb.ResetRequest{TaskId: "top-a", Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LLM}})
	r := step(t, c, ep.Token, stop(), true)
	if !r.Done || r.Status != pb.EpisodeStatus_EPISODE_STATUS_ERROR || r.Reward != nil || !strings.Contains(r.Privileged.GetVerifierReason(), "solver") {
		t.Fatalf("endpoint down: %v", r)
	}
	// The server keeps serving.
	if r := step(t, c, ep.Token, submit("SELECT 'East'"), false); r.Reward.GetValue() != 1 {
		t.Fatalf("after the failure: %v", r)
	}
}

// byAVT names an OracleService task by AVT id and interpretation label.
func byAVT(avt, label string) *pb.AskRequest_Interpretation {
	return &pb.AskRequest_Interpretation{Interpretation: &pb.Interpretation{AvtId: avt, Label: label}}
}

func TestOracleServiceAsk(t *testing.T) {
	s, _ := startTiny(t)
	oc := pb.NewOracleServiceClient(s.Client.Conn())
	ctx := ctxT(t)
	r, err := oc.Ask(ctx, &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "top-b"}, Question: fullQ("top region"), IncludePrivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reply != "I mean the region with the most individual sales." || r.Refused || len(r.Privileged.GetCredits()) != 1 || r.Privileged.Credits[0].Term != "top region" {
		t.Fatalf("Ask = %v", r)
	}
	// A question naming no ambiguity: the refusal, marked refused.
	r, err = oc.Ask(ctx, &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "top-b"}, Question: "Could you clarify what you want?", IncludePrivileged: true})
	if err != nil || !r.Refused || r.Reply == "" || len(r.Privileged.GetCredits()) != 0 {
		t.Fatalf("Ask(generic) = %v, %v", r, err)
	}
	// By AVT id and interpretation label, with history, without privileged data.
	r, err = oc.Ask(ctx, &pb.AskRequest{Task: byAVT("top", "by amount"), Question: "Which best region?",
		History: []*pb.DialogueTurn{{Question: "Hello?", Reply: "Hi."}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Reply != "I mean the region with the largest total sales amount." || r.Privileged != nil {
		t.Fatalf("Ask by AVT = %v", r)
	}
	_, err = oc.Ask(ctx, &pb.AskRequest{Task: byAVT("top", "nope"), Question: "x?"})
	wantError(t, err, codes.NotFound, "UNKNOWN_TASK")
	_, err = oc.Ask(ctx, &pb.AskRequest{Task: byAVT("", "by amount"), Question: "x?"})
	wantError(t, err, codes.InvalidArgument, "INVALID_ACTION")
	_, err = oc.Ask(ctx, &pb.AskRequest{Task: &pb.AskRequest_TaskId{}, Question: "x?"})
	wantError(t, err, codes.InvalidArgument, "INVALID_ACTION")
	_, err = oc.Ask(ctx, &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "top-a"}, Question: " "})
	wantError(t, err, codes.InvalidArgument, "INVALID_ACTION")
	_, err = oc.Ask(ctx, &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "top-a"}, Question: "x?", Oracle: pb.OracleType_ORACLE_TYPE_LLM})
	wantError(t, err, codes.InvalidArgument, "INVALID_OPTION")
	_, err = oc.Ask(ctx, &pb.AskRequest{Question: "x?"})
	wantError(t, err, codes.InvalidArgument, "INVALID_ACTION")
}

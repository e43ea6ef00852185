package hostile

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"avtgym/internal/fakellm"
	"avtgym/internal/filetree"
	pb "avtgym/proto/avtgym/v1"
)

// TestHostileModelEndpoint: a model endpoint that floods replies, one that
// hangs, and a policy whose questions overflow the model's context. The
// flood is cut to the reply limit and never served (a cut reply is not the
// model's answer: regenerated, then the deterministic text), the hang is
// the environment's failure
// (ERROR, the server goes on), and the long question is the policy's:
// answered with a refusal, never ERROR.
func TestHostileModelEndpoint(t *testing.T) {
	flood := strings.Repeat("This reply never ends. ", 1<<20) // 23 MB
	fake := fakellm.New(fakellm.Options{Hook: func(system, user string) (int, string, bool) {
		if strings.Contains(user, "## Chosen action") { // the responder stage
			return http.StatusOK, flood, true
		}
		return 0, "", false
	}})
	defer fake.Close()
	s := start(t, "--oracle-url", fake.URL, "--oracle-model", "fake", "--oracle-context-tokens", "3000")
	before := filetree.MustSums(t, s.root, s.tmp)
	llmReset := func(n int) []*pb.Episode {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := s.c.Env.Reset(ctx, &pb.ResetRequest{TaskId: "west", GroupSize: int32(n), Options: &pb.EpisodeOptions{Oracle: pb.OracleType_ORACLE_TYPE_LLM}})
		if err != nil {
			t.Fatal(err)
		}
		return r.Episodes
	}

	t.Run("23 MB replies in a batch", func(t *testing.T) {
		var steps []*pb.StepRequest
		for _, ep := range llmReset(3) {
			steps = append(steps, &pb.StepRequest{Token: ep.Token, Action: ask("What do you mean by top region?")})
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		out, err := s.c.Env.StepBatch(ctx, &pb.StepBatchRequest{Steps: steps})
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range out.Results {
			if r.GetStatus().GetCode() != 0 {
				t.Fatalf("item %d: %v", i, r.GetStatus())
			}
			turns := r.GetResponse().GetObservation().GetTurns()
			reply := turns[len(turns)-1].GetText()
			if reply != "I mean the West region." {
				t.Errorf("item %d: a reply of %d bytes %.60q, want the deterministic text", i, len(reply), reply)
			}
		}
		s.alive(t)
	})

	t.Run("a question too long for the model's context", func(t *testing.T) {
		ep := llmReset(1)[0]
		q := "What do you mean by top region? " + strings.Repeat("I would like to know everything. ", 480)
		r := s.step(t, ep, ask(q))
		if r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || r.GetObservation().GetQuestionsAsked() != 1 {
			t.Fatalf("want a counted question in a running episode; got %v", r)
		}
		if a := r.GetPrivileged().GetOracleAction(); a != "unanswerable()" {
			t.Errorf("oracle action %q, want unanswerable()", a)
		}
		s.alive(t)
	})
	s.untouched(t, before)
}

func TestHangingModelEndpoint(t *testing.T) {
	fake := fakellm.New(fakellm.Options{Delay: time.Minute})
	defer fake.Close()
	s := start(t, "--oracle-url", fake.URL, "--oracle-model", "fake", "--oracle-timeout", "300ms")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := s.c.Env.Reset(ctx, &pb.ResetRequest{TaskId: "west", Options: &pb.EpisodeOptions{Oracle: pb.OracleType_ORACLE_TYPE_LLM}})
	if err != nil {
		t.Fatal(err)
	}
	st := s.step(t, r.Episodes[0], ask("What do you mean by top region?"))
	if st.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_ERROR || st.GetReward() != nil {
		t.Fatalf("a hanging endpoint: want an unscored ERROR episode; got %v", st)
	}
	s.alive(t)
}

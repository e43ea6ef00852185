package env_test

import (
	"context"
	"fmt"
	"testing"

	"avtgym/env"
	pb "avtgym/proto/avtgym/v1"
)

// BenchmarkStepAtTurn measures one ask step on a token at turn k (k − 1
// questions already answered), for AMBITAB (k = 1 and 20) and TIDE_F (k = 1
// and 19, its last question): the issue-31 goal is that a step's cost does
// not grow with the dialogue (late ÷ k = 1 ≤ 1.2).
// The token at turn k is stepped again and again (forking it: the token is
// stateless). `make bench-compare` reports the same ratio interleaved.
func BenchmarkStepAtTurn(b *testing.B) {
	for _, c := range []struct {
		name string
		req  *pb.ResetRequest
		late int // the late turn measured
	}{
		// AMBITAB with room for 20 questions beyond the task's ambiguities.
		{"ambitab", &pb.ResetRequest{TaskId: "shop-001", Options: &pb.EpisodeOptions{ExtraQuestions: ptr(int32(24))}}, 20},
		// TIDE_F runs env.TideTurns = 20 agent turns, the last for SQL:
		// turn 19 is its last question (a 20th ends the episode).
		{"tide", &pb.ResetRequest{TaskId: "tide-a1-J", Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_F}}, 19},
	} {
		for _, k := range []int{1, c.late} {
			b.Run(fmt.Sprintf("%s/k=%d", c.name, k), func(b *testing.B) {
				e, _ := benchEnv(b)
				req := tokenAtTurn(b, e, c.req, k)
				ctx := context.Background()
				b.ReportAllocs()
				b.ReportMetric(float64(len(req.Token)), "token-B")
				for b.Loop() {
					if _, err := e.Step(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func ptr[T any](v T) *T { return &v }

// benchQuestion is the ask every turn puts: it credits an ambiguity of
// shop-001, so that the history holds credits as a real dialogue does.
const benchQuestion = "Could you clarify what exactly you mean by top 5 customers?"

// tokenAtTurn resets reset and asks k − 1 questions, returning the request
// that asks the k-th.
func tokenAtTurn(b *testing.B, e *env.Env, reset *pb.ResetRequest, k int) *pb.StepRequest {
	b.Helper()
	ctx := context.Background()
	rr, err := e.Reset(ctx, reset)
	if err != nil {
		b.Fatal(err)
	}
	req := &pb.StepRequest{Token: rr.Episodes[0].Token, Action: &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: benchQuestion}}}}
	for i := 1; i < k; i++ {
		resp, err := e.Step(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if resp.GetDone() {
			b.Fatalf("the episode ended at turn %d of %d", i, k)
		}
		req = &pb.StepRequest{Token: resp.Token, Action: req.Action}
	}
	return req
}

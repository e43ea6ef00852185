package env_test

import (
	"context"
	"testing"

	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

// The verification benchmarks of issue 20, in process on the demo corpus:
// BenchmarkSubmitEquivalent is a submit_sql step (outcome reward, from the
// reset's token) of SQL equivalent to shop-001's reference but written
// differently, so that the verifier runs it (the reference's result is
// cached); BenchmarkRawEquivalent runs the same SQL through the engine
// alone. Goal: the step ≤ 1.3× the raw query.
const equivalentSQL = "SELECT c.name FROM orders o JOIN customers c ON c.customer_id = o.customer_id JOIN order_items oi ON o.order_id = oi.order_id WHERE 'completed' = o.status GROUP BY c.customer_id ORDER BY SUM(oi.unit_price * oi.quantity * (1 - oi.discount)) DESC LIMIT 5"

func BenchmarkSubmitEquivalent(b *testing.B) {
	e, _ := demoEnv(b)
	ep := resetOn(b, e, "shop-001", &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME})
	req := &pb.StepRequest{Token: ep.Token, Action: submitSQL(equivalentSQL)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := e.Step(ctx, req)
		if err != nil || r.GetReward().GetValue() != 1 {
			b.Fatal(err, r.GetReward())
		}
	}
}

func BenchmarkRawEquivalent(b *testing.B) {
	_, c := demoEnv(b)
	t, _ := c.Task("shop-001")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := t.DB.Engine.Query(ctx, equivalentSQL, sqlexec.DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

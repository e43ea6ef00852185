package env_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"avtgym/corpus"
	"avtgym/corpus/ambrosia"
	"avtgym/engines"
	"avtgym/env"
	"avtgym/oracle"
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

// The same pair on AMBROSIA, imported from ../shared/data/ambrosia into a
// temporary directory (skipped without it): the step submits the task's
// reference wrapped as SELECT * FROM (…), equivalent but not the same
// text; its databases are tiny, so the query is ~40 µs and the step's
// fixed costs weigh as much as it does (bench/RESULTS.md).
const ambrosiaTask = "ambrosia-validation-0233-i2"

func ambrosiaEnv(b *testing.B) (*env.Env, *corpus.Task, string) {
	src := filepath.Join("..", "..", "shared", "data", "ambrosia")
	if _, err := os.Stat(src); err != nil {
		b.Skipf("no AMBROSIA data at %s: %v", src, err)
	}
	out := filepath.Join(b.TempDir(), "ambrosia")
	if _, err := ambrosia.Import(context.Background(), src, out, ambrosia.Options{}); err != nil {
		b.Fatal(err)
	}
	c, err := corpus.LoadDir(context.Background(), out, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	s, _ := env.NewSealer(env.RandomKey())
	e, err := env.New(env.Config{Corpora: []*corpus.Corpus{c}, Sealer: s, Oracles: map[pb.OracleType]env.Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()}})
	if err != nil {
		b.Fatal(err)
	}
	t, ok := c.Task(ambrosiaTask)
	if !ok {
		b.Fatalf("no task %s", ambrosiaTask)
	}
	return e, t, "SELECT * FROM (" + t.Reference.SQL[0] + ") AS avtgym_q"
}

func BenchmarkSubmitAmbrosia(b *testing.B) {
	e, t, sql := ambrosiaEnv(b)
	ep := resetOn(b, e, t.ID, &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME})
	req := &pb.StepRequest{Token: ep.Token, Action: submitSQL(sql)}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := e.Step(ctx, req)
		if err != nil || r.GetReward().GetValue() != 1 {
			b.Fatal(err, r.GetReward())
		}
	}
}

func BenchmarkRawAmbrosia(b *testing.B) {
	_, t, sql := ambrosiaEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := t.DB.Engine.Query(ctx, sql, sqlexec.DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

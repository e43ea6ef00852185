package env_test

import (
	"context"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/env"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

// The a-Interact benchmarks (issue 16), in process on the demo corpus:
// BenchmarkBirdAExecute is one execute step and BenchmarkRawQuery the same
// SQL through the engine alone (goal: the step ≤ 1.3× the raw query);
// BenchmarkBirdAEpisode plays a whole explorer episode on followup-001
// (each tool once, each counted ambiguity asked, both references
// submitted) and BenchmarkAmbiTabEpisode an AMBITAB episode on the same
// task (each ambiguity asked, the reference submitted, outcome reward).

// executeSQL is equivalent to nothing in the corpus: it is not cached.
const executeSQL = "SELECT p.category, COUNT(*) AS n, ROUND(AVG(r.rating), 2) FROM products p JOIN reviews r ON r.product_id = p.product_id GROUP BY p.category ORDER BY n DESC"

func demoEnv(b *testing.B) (*env.Env, *corpus.Corpus) {
	c, err := corpus.LoadDemo(context.Background(), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	s, _ := env.NewSealer(env.RandomKey())
	e, err := env.New(env.Config{Corpora: []*corpus.Corpus{c}, Sealer: s, Oracles: map[pb.OracleType]env.Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()}})
	if err != nil {
		b.Fatal(err)
	}
	return e, c
}

func resetOn(b *testing.B, e *env.Env, task string, o *pb.EpisodeOptions) *pb.Episode {
	r, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: task, Options: o, IncludePrivileged: true})
	if err != nil {
		b.Fatal(err)
	}
	return r.Episodes[0]
}

func BenchmarkBirdAExecute(b *testing.B) {
	e, _ := demoEnv(b)
	ep := resetOn(b, e, "followup-001", &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A})
	req := &pb.StepRequest{Token: ep.Token, Action: &pb.Action{Kind: &pb.Action_Execute_{Execute: &pb.Action_Execute{Sql: executeSQL}}}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		r, err := e.Step(ctx, req)
		if err != nil || strings.HasPrefix(r.Observation.Turns[1].Text, "Error") {
			b.Fatal(err, r)
		}
	}
}

func BenchmarkRawQuery(b *testing.B) {
	_, c := demoEnv(b)
	t, _ := c.Task("followup-001")
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := t.DB.Engine.Query(ctx, executeSQL, sqlexec.DefaultLimits()); err != nil {
			b.Fatal(err)
		}
	}
}

// play steps through actions, each on the previous step's token; next
// gives the action for a step from the last response.
func play(b *testing.B, e *env.Env, tok []byte, actions []func(*pb.StepResponse) *pb.Action) *pb.StepResponse {
	var r *pb.StepResponse
	for _, next := range actions {
		var err error
		r, err = e.Step(context.Background(), &pb.StepRequest{Token: tok, Action: next(r), IncludePrivileged: true})
		if err != nil {
			b.Fatal(err)
		}
		tok = r.Token
	}
	return r
}

func fixed(a *pb.Action) func(*pb.StepResponse) *pb.Action {
	return func(*pb.StepResponse) *pb.Action { return a }
}

func asks(ep *pb.Episode) []func(*pb.StepResponse) *pb.Action {
	var out []func(*pb.StepResponse) *pb.Action
	for _, a := range ep.Privileged.Ambiguities {
		if a.Counted {
			out = append(out, fixed(&pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: "What do you mean by '" + a.Term + "'?"}}}))
		}
	}
	return out
}

func submitSQL(sql string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: sql}}}
}

func BenchmarkBirdAEpisode(b *testing.B) {
	e, _ := demoEnv(b)
	o := &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A}
	ep := resetOn(b, e, "followup-001", o)
	tools := []*pb.Action{
		{Kind: &pb.Action_Execute_{Execute: &pb.Action_Execute{Sql: "SELECT 1"}}},
		{Kind: &pb.Action_GetSchema_{GetSchema: &pb.Action_GetSchema{}}},
		{Kind: &pb.Action_GetAllColumnMeanings_{GetAllColumnMeanings: &pb.Action_GetAllColumnMeanings{}}},
		{Kind: &pb.Action_GetColumnMeaning_{GetColumnMeaning: &pb.Action_GetColumnMeaning{Table: "reviews", Column: "rating"}}},
		{Kind: &pb.Action_GetAllExternalKnowledgeNames_{GetAllExternalKnowledgeNames: &pb.Action_GetAllExternalKnowledgeNames{}}},
		{Kind: &pb.Action_GetAllKnowledgeDefinitions_{GetAllKnowledgeDefinitions: &pb.Action_GetAllKnowledgeDefinitions{}}},
	}
	var script []func(*pb.StepResponse) *pb.Action
	for _, a := range tools {
		script = append(script, fixed(a))
	}
	script = append(script, asks(ep)...)
	script = append(script, fixed(submitSQL(strings.Join(ep.Privileged.ReferenceSql, ";\n"))),
		func(r *pb.StepResponse) *pb.Action {
			return submitSQL(strings.Join(r.Privileged.FollowUpReferenceSql, ";\n"))
		})
	b.ReportAllocs()
	for b.Loop() {
		ep := resetOn(b, e, "followup-001", o)
		if r := play(b, e, ep.Token, script); r.Reward.GetValue() != 1 {
			b.Fatal(r)
		}
	}
}

func BenchmarkAmbiTabEpisode(b *testing.B) {
	e, _ := demoEnv(b)
	o := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}
	ep := resetOn(b, e, "followup-001", o)
	script := append(asks(ep), fixed(submitSQL(strings.Join(ep.Privileged.ReferenceSql, ";\n"))))
	b.ReportAllocs()
	for b.Loop() {
		ep := resetOn(b, e, "followup-001", o)
		if r := play(b, e, ep.Token, script); r.Reward.GetValue() != 1 {
			b.Fatal(r)
		}
	}
}

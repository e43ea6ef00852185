package policy

import (
	"context"
	"testing"

	"avtgym/corpus"
	"avtgym/driver"
	"avtgym/engines"
	"avtgym/env"
	"avtgym/oracle"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// BenchmarkEpisodes compares whole episodes per second, in process on the
// embedded demo corpus (the env.Env behind the driver, no gRPC; the
// deterministic oracle): TIDE episodes of the scripted chain-aware
// baseline on the demo's TIDE samples (tide-f: chain-only, drift-only and
// joint; tide-p: chain-only and joint), against AMBITAB episodes of the
// scripted full policy on the demo's other tasks, with the outcome reward
// and the server's lookup solver, or the client solver (full submits the
// reference). Each op is one episode (reset, questions, every SQL, the
// reward), tasks taken in turn; each must reach reward 1. Reported:
// episodes/s (beside ns/op) and steps/episode.
//
//	go test -run '^$' -bench BenchmarkEpisodes -benchtime 2s ./policy/
func BenchmarkEpisodes(b *testing.B) {
	e := benchEnv(b)
	tasks := e.ListTasksAll()
	var tide, other []*pb.TaskSummary
	for _, t := range tasks {
		if t.GetSampleType() != "" {
			tide = append(tide, t)
		} else {
			other = append(other, t)
		}
	}
	tideP, _ := ProtocolTasks(tide, pb.Protocol_PROTOCOL_TIDE_P)
	chainAware := Tide(TideAskChain, TideDriftAware)
	for _, c := range []struct {
		name  string
		p     Player
		tasks []*pb.TaskSummary
		opts  *pb.EpisodeOptions
	}{
		{"tide-f/chain-aware", chainAware, tide, &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_F}},
		{"tide-p/chain-aware", chainAware, tideP, &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_P}},
		{"ambitab/full-lookup", Scripted(probe.Full), other, &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LOOKUP}},
		{"ambitab/full-client", Scripted(probe.Full), other, &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_CLIENT}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if len(c.tasks) == 0 {
				b.Skip("the demo corpus has no task for this protocol")
			}
			ctx := context.Background()
			steps, i := 0, 0
			b.ReportAllocs()
			for b.Loop() {
				t := c.tasks[i%len(c.tasks)]
				seed := uint64(i)
				i++
				ep, err := driver.Start(ctx, e, &pb.ResetRequest{Corpus: t.GetCorpus(), TaskId: t.GetTaskId(), Seed: &seed, Options: c.opts, IncludePrivileged: true})
				if err != nil {
					b.Fatal(err)
				}
				if err := c.p.Play(ctx, ep); err != nil {
					b.Fatalf("%s: %v", t.GetTaskId(), err)
				}
				if r := ep.Last().GetReward(); r.GetValue() != 1 {
					b.Fatalf("%s: reward %v", t.GetTaskId(), r)
				}
				steps += len(ep.Turns())
			}
			b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "episodes/s")
			b.ReportMetric(float64(steps)/float64(i), "turns/episode")
		})
	}
}

// benchEnv is an in-process environment on the embedded demo corpus.
type benchEnvT struct {
	*env.Env
	c *corpus.Corpus
}

// ListTasksAll is every task of the demo corpus, in corpus order.
func (e benchEnvT) ListTasksAll() []*pb.TaskSummary {
	var out []*pb.TaskSummary
	for _, t := range e.c.Tasks {
		out = append(out, env.Summary(t))
	}
	return out
}

func benchEnv(b *testing.B) benchEnvT {
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
	return benchEnvT{e, c}
}

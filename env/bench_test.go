package env_test

import (
	"context"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/env"
	"avtgym/internal/grpcpool"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
)

// BenchmarkStepAsk measures one deterministic ask step in process, without
// gRPC: open the token, match, respond, seal. BenchmarkWireStepAsk adds what
// the wire costs per batched episode: encoding and decoding the request and
// the response once each (as client and server do).
func benchEnv(b *testing.B) (*env.Env, *pb.StepRequest) {
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
	rr, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: "shop-001"})
	if err != nil {
		b.Fatal(err)
	}
	q := "Could you clarify what exactly you mean by top 5 customers?"
	return e, &pb.StepRequest{Token: rr.Episodes[0].Token, Action: &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: q}}}}
}

func BenchmarkStepAsk(b *testing.B) {
	e, req := benchEnv(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Step(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWireStepAsk(b *testing.B) {
	e, req := benchEnv(b)
	ctx := context.Background()
	var codec grpcpool.Codec
	b.ReportAllocs()
	for b.Loop() {
		wire, _ := codec.Marshal(req)
		var in pb.StepRequest
		if err := codec.Unmarshal(wire, &in); err != nil {
			b.Fatal(err)
		}
		wire.Free()
		resp, err := e.Step(ctx, &in)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := codec.Marshal(&pb.StepBatchResult{Response: resp})
		var back pb.StepBatchResult
		if err := codec.Unmarshal(out, &back); err != nil {
			b.Fatal(err)
		}
		out.Free()
	}
}

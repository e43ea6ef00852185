package server_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"avtgym/app"
	"avtgym/internal/grpcpool"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/server"
)

// The batch benchmarks measure the server's own work per batched episode,
// without the transport: the request decoded by the server's codec from
// its wire bytes, the handler, and the response encoded as the codec
// sends it. They report per-episode figures beside the per-batch ones
// (ns/episode, allocs/episode, wire-B/episode); compare the forms of
// BenchmarkResetBatchGroup with benchstat or by their ratios.

// batchRig is a server and the codec its transport uses.
type batchRig struct {
	srv   *server.Server
	codec *grpcpool.ServerCodec
}

func newBatchRig(b *testing.B) *batchRig {
	s := testutil.StartServer(b, app.Config{})
	return &batchRig{srv: s.App.Server, codec: grpcpool.NewServerCodec(server.DefaultMaxMessageBytes)}
}

// run decodes wire into req, calls handle and encodes its response; it
// returns the response's size.
func (r *batchRig) run(b *testing.B, wire []byte, req proto.Message, handle func() (proto.Message, error)) int {
	proto.Reset(req)
	if err := r.codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, req); err != nil {
		b.Fatal(err)
	}
	if f := r.codec.Failure(req); f != nil {
		b.Fatal(f)
	}
	resp, err := handle()
	if err != nil {
		b.Fatal(err)
	}
	out, err := r.codec.Marshal(resp)
	if err != nil {
		b.Fatal(err)
	}
	n := out.Len()
	out.Free()
	return n
}

// perEpisode reports the loop's figures per episode; mallocs is the
// allocation count before the loop.
func perEpisode(b *testing.B, episodes, wire int, mallocs uint64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	n := float64(b.N) * float64(episodes)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/episode")
	b.ReportMetric(float64(ms.Mallocs-mallocs)/n, "allocs/episode")
	b.ReportMetric(float64(wire)/float64(episodes), "wire-B/episode")
}

func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// BenchmarkResetBatchGroup: one ResetBatch item of a group of 256 or 1024
// on an AMBITAB task of the demo corpus, in the default and the shared
// form (share_group_observation).
func BenchmarkResetBatchGroup(b *testing.B) {
	r := newBatchRig(b)
	for _, form := range []string{"default", "shared"} {
		for _, n := range []int{256, 1024} {
			b.Run(fmt.Sprintf("form=%s/group=%d", form, n), func(b *testing.B) {
				wire, err := proto.Marshal(&pb.ResetBatchRequest{Requests: []*pb.ResetRequest{
					{TaskId: "shop-001", GroupSize: int32(n), ShareGroupObservation: form == "shared"}}})
				if err != nil {
					b.Fatal(err)
				}
				req := new(pb.ResetBatchRequest)
				handle := func() (proto.Message, error) { return r.srv.ResetBatch(context.Background(), req) }
				size := r.run(b, wire, req, handle)
				b.ReportAllocs()
				b.ResetTimer()
				before := mallocs()
				for b.Loop() {
					r.run(b, wire, req, handle)
				}
				perEpisode(b, n, size, before)
			})
		}
	}
}

// BenchmarkStepBatchAllocs256: a StepBatch of 256 asks (one AMBITAB
// episode forked 256 times) through the server's codec, run serially so
// that the allocation figures are the batch path's alone.
func BenchmarkStepBatchAllocs256(b *testing.B) {
	r := newBatchRig(b)
	ctx := context.Background()
	rr, err := r.srv.Reset(ctx, &pb.ResetRequest{TaskId: "shop-001"})
	if err != nil {
		b.Fatal(err)
	}
	ask := &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: "Could you clarify what exactly you mean by top 5 customers?"}}}
	batch := &pb.StepBatchRequest{Steps: make([]*pb.StepRequest, 256)}
	for i := range batch.Steps {
		batch.Steps[i] = &pb.StepRequest{Token: rr.Episodes[0].Token, Action: ask}
	}
	wire, err := proto.Marshal(batch)
	if err != nil {
		b.Fatal(err)
	}
	req := new(pb.StepBatchRequest)
	handle := func() (proto.Message, error) { return r.srv.StepBatch(ctx, req) }
	size := r.run(b, wire, req, handle)
	b.ReportAllocs()
	b.ResetTimer()
	before := mallocs()
	for b.Loop() {
		r.run(b, wire, req, handle)
	}
	perEpisode(b, 256, size, before)
}

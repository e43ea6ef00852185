package server

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"avtgym/env"
	"avtgym/internal/parallel"
	pb "avtgym/proto/avtgym/v1"
)

// Batch limits. A batch is bounded three ways: by its items (MaxBatch), by
// the episodes a ResetBatch starts (MaxBatchEpisodes), and by the bytes of
// its response: the results, accounted item by item as they are decided,
// never exceed the send limit less a headroom. An item whose result would
// not fit gets its own RESOURCE_EXHAUSTED status (RESPONSE_TOO_LARGE, with
// a RetryInfo: resend it in another batch) and the others succeed. A
// ResetBatch item's size is computed before its episodes are built, and a
// StepBatch item is measured when its step completes, so a batch holds at
// most the budget plus one item per worker in memory.
const (
	// MaxBatch bounds the items of one ResetBatch or StepBatch.
	MaxBatch = 4096
	// MaxBatchEpisodes bounds the episodes of one ResetBatch: the sum of
	// its items' group sizes (an unset group size counts 1). 65,536
	// episodes are 16 groups of the largest size, or 4,096 groups of 16;
	// even the smallest episodes (about 1 KB with a small schema) fill a
	// 64 MiB response at that count.
	MaxBatchEpisodes = 1 << 16
)

// overflow is what a batch item gets when its result does not fit.
type overflow struct {
	result  proto.Message // *pb.ResetBatchResult or *pb.StepBatchResult
	reserve int           // its size as an entry of the response's results
}

// headroom is what a batch response leaves of the send limit, for what
// the accounting does not see (nothing, today: the sizes are exact).
func headroom(limit int) int { return min(64<<10, limit/16) }

func (s *Server) initBatches() {
	s.batchBytes = s.opt.MaxSendBytes - headroom(s.opt.MaxSendBytes)
	meta := map[string]string{"limit_bytes": strconv.Itoa(s.batchBytes)}
	reset := toStatus(&env.Error{Code: env.ResourceExhausted, Reason: env.ReasonResponseTooLarge, Retryable: true, Meta: meta,
		Msg: fmt.Sprintf("this item's episodes did not fit in the batch's response (at most %d bytes); resend the item in another batch, or ask for a smaller group", s.batchBytes)}).Proto()
	step := toStatus(&env.Error{Code: env.ResourceExhausted, Reason: env.ReasonResponseTooLarge, Retryable: true, Meta: meta,
		Msg: fmt.Sprintf("this item's result did not fit in the batch's response (at most %d bytes); resend the item in another batch", s.batchBytes)}).Proto()
	r := &pb.ResetBatchResult{Status: reset}
	st := &pb.StepBatchResult{Status: step}
	s.resetOverflow = overflow{result: r, reserve: entrySize(r.SizeVT())}
	s.stepOverflow = overflow{result: st, reserve: entrySize(st.SizeVT())}
}

// entrySize is the size of a result of n bytes as an entry of the
// response's repeated results field (field 1).
func entrySize(n int) int { return protowire.SizeTag(1) + protowire.SizeBytes(n) }

// budget accounts the bytes of one batch response. Every item starts with
// its overflow result's size reserved, so that whatever is decided later,
// an item's fallback always fits; deciding an item replaces its reserve by
// its result's size. Lock-free: the batch's workers take from it per item.
type budget struct {
	free    atomic.Int64
	reserve int
}

func (s *Server) newBudget(n int, o overflow) (*budget, error) {
	if need := n * o.reserve; need > s.batchBytes {
		return nil, &env.Error{Code: env.ResourceExhausted, Reason: env.ReasonResponseTooLarge, Field: "batch",
			Msg:  fmt.Sprintf("a batch of %d items needs at least %d bytes of response, more than this server sends (%d); split it", n, need, s.batchBytes),
			Meta: map[string]string{"size_bytes": strconv.Itoa(need), "limit_bytes": strconv.Itoa(s.batchBytes)}}
	}
	b := &budget{reserve: o.reserve}
	b.free.Store(int64(s.batchBytes - n*o.reserve))
	return b, nil
}

// take decides an item whose result is an entry of size bytes; false when
// it does not fit (the item keeps its reserve, for its overflow status).
func (b *budget) take(size int) bool {
	d := int64(size - b.reserve)
	for {
		f := b.free.Load()
		if d > f {
			return false
		}
		if b.free.CompareAndSwap(f, f-d) {
			return true
		}
	}
}

// untake undoes take(size).
func (b *budget) untake(size int) { b.free.Add(int64(size - b.reserve)) }

// left is the largest entry one more item could take.
func (b *budget) left() int { return int(b.free.Load()) + b.reserve }

func checkBatch(field string, n int) error {
	if n > MaxBatch {
		return &env.Error{Code: env.InvalidArgument, Reason: env.ReasonBatchTooLarge, Field: field,
			Msg: fmt.Sprintf("the batch holds %d items, more than %d; split it", n, MaxBatch)}
	}
	return nil
}

// ResetBatch implements EnvService.ResetBatch: one result per item.
func (s *Server) ResetBatch(ctx context.Context, req *pb.ResetBatchRequest) (*pb.ResetBatchResponse, error) {
	items := req.GetRequests()
	if err := checkBatch("requests", len(items)); err != nil {
		return nil, err
	}
	total := 0
	for _, r := range items {
		// Group sizes out of range fail their own item; they count nothing.
		switch g := int(r.GetGroupSize()); {
		case g == 0:
			total++
		case g > 0 && g <= env.MaxGroupSize:
			total += g
		}
	}
	if total > MaxBatchEpisodes {
		return nil, &env.Error{Code: env.InvalidArgument, Reason: env.ReasonBatchTooLarge, Field: "requests.group_size",
			Msg: fmt.Sprintf("the batch asks for %d episodes (the sum of its group sizes), more than %d; split it", total, MaxBatchEpisodes)}
	}
	b, err := s.newBudget(len(items), s.resetOverflow)
	if err != nil {
		return nil, err
	}
	out := &pb.ResetBatchResponse{Results: make([]*pb.ResetBatchResult, len(items))}
	// Items recover their own panics: a panic in a worker goroutine would take
	// the process down, as no handler's recover reaches it.
	parallel.Each(len(items), s.opt.BatchWorkers, func(i int) {
		out.Results[i] = s.resetItem(ctx, items[i], b)
	})
	return out, nil
}

func (s *Server) resetItem(ctx context.Context, req *pb.ResetRequest, b *budget) (res *pb.ResetBatchResult) {
	defer func() {
		if r := recover(); r != nil {
			res = s.resetFailed(s.recovered("/avtgym.v1.EnvService/ResetBatch", r), b)
		}
	}()
	if err := ctx.Err(); err != nil {
		return s.resetFailed(err, b)
	}
	if err := s.refuseHidden(ctx, req.GetCorpus(), req.GetTaskId()); err != nil {
		return s.resetFailed(err, b)
	}
	p, err := s.env.PlanReset(req)
	if err != nil {
		return s.resetFailed(err, b)
	}
	// The size is known before anything is built.
	size := entrySize(protowire.SizeTag(2) + protowire.SizeBytes(p.Size))
	if !b.take(size) {
		return proto.Clone(s.resetOverflow.result).(*pb.ResetBatchResult)
	}
	resp, err := s.env.BuildReset(p)
	if err != nil {
		b.untake(size)
		return s.resetFailed(err, b)
	}
	if s.opt.Metrics != nil {
		s.opt.Metrics.episodesStarted.Add(float64(len(resp.Episodes)))
	}
	return &pb.ResetBatchResult{Response: resp}
}

// resetFailed is the result of an item that failed: its status, if that
// fits.
func (s *Server) resetFailed(err error, b *budget) *pb.ResetBatchResult {
	res := &pb.ResetBatchResult{Status: itemStatus(err)}
	if !b.take(entrySize(res.SizeVT())) {
		return proto.Clone(s.resetOverflow.result).(*pb.ResetBatchResult)
	}
	return res
}

// StepBatch implements EnvService.StepBatch: one result per item.
func (s *Server) StepBatch(ctx context.Context, req *pb.StepBatchRequest) (*pb.StepBatchResponse, error) {
	items := req.GetSteps()
	if err := checkBatch("steps", len(items)); err != nil {
		return nil, err
	}
	b, err := s.newBudget(len(items), s.stepOverflow)
	if err != nil {
		return nil, err
	}
	// The items' results are allocated together, once per batch (a batch
	// is the hot path of training: bench/RESULTS.md).
	slots := make([]pb.StepBatchResult, len(items))
	out := &pb.StepBatchResponse{Results: make([]*pb.StepBatchResult, len(items))}
	parallel.Each(len(items), s.opt.BatchWorkers, func(i int) {
		out.Results[i] = s.stepItem(ctx, items[i], b, &slots[i])
	})
	return out, nil
}

// stepItem runs one item of a StepBatch; its result is slot, filled in, or
// the overflow status.
func (s *Server) stepItem(ctx context.Context, req *pb.StepRequest, b *budget, slot *pb.StepBatchResult) (res *pb.StepBatchResult) {
	defer func() {
		if r := recover(); r != nil {
			slot.Reset()
			res = s.stepResult(ctx, nil, s.recovered("/avtgym.v1.EnvService/StepBatch", r), req, b, slot)
		}
	}()
	if err := ctx.Err(); err != nil {
		return s.stepResult(ctx, nil, err, req, b, slot)
	}
	if len(req.GetToken()) >= b.left() {
		// A step's response holds a token at least as long as the one it
		// was given: once the budget cannot hold that, the step is not run.
		return proto.Clone(s.stepOverflow.result).(*pb.StepBatchResult)
	}
	resp, err := s.env.Step(ctx, req)
	return s.stepResult(ctx, resp, err, req, b, slot)
}

// stepResult accounts a completed step: its result (in res, an empty
// result) if it fits, else the overflow status (and the step is as if
// never run: the token stays valid and the client resends it).
func (s *Server) stepResult(ctx context.Context, resp *pb.StepResponse, err error, req *pb.StepRequest, b *budget, res *pb.StepBatchResult) *pb.StepBatchResult {
	if err != nil {
		res.Status = itemStatus(err)
	} else {
		res.Response = resp
	}
	if !b.take(entrySize(res.SizeVT())) {
		return proto.Clone(s.stepOverflow.result).(*pb.StepBatchResult)
	}
	if err == nil {
		s.stepped(ctx, req, resp)
	}
	return res
}

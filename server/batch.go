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

// resize replaces an item's take(from) by take(to); false, keeping
// take(from), when to is larger and the difference does not fit.
func (b *budget) resize(from, to int) bool {
	d := int64(to - from)
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
	// The items' results are allocated together, once per batch, as
	// StepBatch's are.
	slots := make([]pb.ResetBatchResult, len(items))
	out := &pb.ResetBatchResponse{Results: make([]*pb.ResetBatchResult, len(items))}
	// Items recover their own panics: a panic in a worker goroutine would take
	// the process down, as no handler's recover reaches it.
	parallel.Each(len(items), s.opt.BatchWorkers, func(i int) {
		out.Results[i] = s.resetItem(ctx, items[i], b, &slots[i])
	})
	return out, nil
}

// resetItem runs one item of a ResetBatch; its result is slot, filled in,
// or the overflow status.
func (s *Server) resetItem(ctx context.Context, req *pb.ResetRequest, b *budget, slot *pb.ResetBatchResult) (res *pb.ResetBatchResult) {
	defer func() {
		if r := recover(); r != nil {
			slot.Reset()
			res = s.resetFailed(s.recovered("/avtgym.v1.EnvService/ResetBatch", r), b, slot)
		}
	}()
	if err := ctx.Err(); err != nil {
		return s.resetFailed(err, b, slot)
	}
	if err := s.refuseHidden(ctx, req.GetCorpus(), req.GetTaskId()); err != nil {
		return s.resetFailed(err, b, slot)
	}
	p, err := s.env.PlanReset(req)
	if err != nil {
		return s.resetFailed(err, b, slot)
	}
	// The size is known before anything is built: exactly in the default
	// form, as a bound in the shared form (see buildShared).
	size := resetEntrySize(p.Size)
	share := req.GetShareGroupObservation()
	took := b.take(size)
	if !took && !share {
		return proto.Clone(s.resetOverflow.result).(*pb.ResetBatchResult)
	}
	resp, err := s.env.BuildReset(p)
	if err != nil {
		if took {
			b.untake(size)
		}
		return s.resetFailed(err, b, slot)
	}
	if share {
		// The bound was taken when it fitted; the exact size replaces it
		// (the shared form is never larger: the difference goes back).
		exact := resetEntrySize(shareGroup(resp))
		if took && !b.resize(size, exact) || !took && !b.take(exact) {
			if took {
				b.untake(size)
			}
			return proto.Clone(s.resetOverflow.result).(*pb.ResetBatchResult)
		}
	}
	if s.opt.Metrics != nil {
		s.opt.Metrics.episodesStarted.Add(float64(len(resp.Episodes)))
	}
	slot.Response = resp
	return slot
}

// resetEntrySize is the size of an item's result holding a ResetResponse
// of n bytes, as an entry of the response's results.
func resetEntrySize(n int) int { return entrySize(protowire.SizeTag(2) + protowire.SizeBytes(n)) }

// resetFailed is the result of an item that failed (in res, an empty
// result): its status, if that fits.
func (s *Server) resetFailed(err error, b *budget, res *pb.ResetBatchResult) *pb.ResetBatchResult {
	res.Status = itemStatus(err)
	if !b.take(entrySize(res.SizeVT())) {
		return proto.Clone(s.resetOverflow.result).(*pb.ResetBatchResult)
	}
	return res
}

// shareGroup rewrites a built group into the shared form
// (ResetRequest.share_group_observation) and returns the response's
// encoded size. The first episode's observation and privileged data
// become the response's shared ones, and every episode whose own equal
// them leaves its own unset. Nothing is copied: the environment builds a
// group's episodes around one observation and one privileged message,
// which the pointer comparison sees at once; an episode that differs (a
// future environment's) keeps its own, so the form stays exact whatever
// the environment does. A part is shared only when every episode has one
// (a reader gives the shared part to each episode without its own), so
// the shared privileged data is set only when the default form carries it
// in every episode.
func shareGroup(resp *pb.ResetResponse) int {
	eps := resp.GetEpisodes()
	if len(eps) > 0 {
		obs, priv := eps[0].Observation, eps[0].Privileged
		for _, e := range eps {
			if e.Observation == nil {
				obs = nil
			}
			if e.Privileged == nil {
				priv = nil
			}
		}
		resp.SharedObservation, resp.SharedPrivileged = obs, priv
		for _, e := range eps {
			if obs != nil && (e.Observation == obs || proto.Equal(e.Observation, obs)) {
				e.Observation = nil
			}
			if priv != nil && (e.Privileged == priv || proto.Equal(e.Privileged, priv)) {
				e.Privileged = nil
			}
		}
	}
	return resp.SizeVT()
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

// shareReset turns a unary Reset's group into the shared form, refusing it
// when even that does not fit the send limit.
func (s *Server) shareReset(p *env.ResetPlan, resp *pb.ResetResponse) error {
	n := shareGroup(resp)
	if n <= s.batchBytes {
		return nil
	}
	// What the group sends once, and what each episode adds to it.
	once := 0
	if o := resp.SharedObservation; o != nil {
		once += protowire.SizeTag(2) + protowire.SizeBytes(o.SizeVT())
	}
	if v := resp.SharedPrivileged; v != nil {
		once += protowire.SizeTag(3) + protowire.SizeBytes(v.SizeVT())
	}
	per := max(1, (n-once+p.Episodes-1)/p.Episodes)
	fit := max(0, (s.batchBytes-once)/per)
	msg := fmt.Sprintf("a group of %d episodes would be %d bytes in the shared form, more than this server sends (%d)", p.Episodes, n, s.batchBytes)
	if fit > 0 {
		msg += fmt.Sprintf("; ask for at most %d episodes per reset", fit)
	} else {
		msg += "; this task's observation is too large for this server's send limit"
	}
	return &env.Error{Code: env.ResourceExhausted, Reason: env.ReasonResponseTooLarge, Field: "group_size", Msg: msg,
		Meta: map[string]string{"size_bytes": strconv.Itoa(n), "limit_bytes": strconv.Itoa(s.batchBytes), "max_group_size": strconv.Itoa(fit)}}
}

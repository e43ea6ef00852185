// Package grpcpool provides the buffer pool, and the protobuf codec using
// it, that avtgym's gRPC server and client use instead of grpc's defaults.
// The default pool zeroes the whole capacity of every recycled buffer, and
// serves a 140 KB message (a 256-episode StepBatch) from its 1 MiB tier:
// clearing that megabyte four times per batch (marshal and unmarshal, on
// both sides) was 10% of a batch's CPU in profiles. This pool has a tier for
// every power of two and zeroes only the bytes it hands out; the codec is
// grpc's own proto codec with the pool swapped. ServerCodec is the
// server's variant: it records requests that do not decode, or are too
// large, for the server's interceptors to answer with details.
package grpcpool

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

const (
	minShift = 8  // 256 B
	maxShift = 26 // 64 MiB, the largest message avtgym accepts
)

// Pool is a mem.BufferPool with power-of-two tiers.
type Pool struct {
	tiers [maxShift - minShift + 1]sync.Pool
}

var _ mem.BufferPool = (*Pool)(nil)

// Shared is the pool the server and the client use.
var Shared = &Pool{}

// tier returns the index of the smallest tier holding n bytes, or -1.
func tier(n int) int {
	if n <= 1<<minShift {
		return 0
	}
	shift := bits.Len(uint(n - 1))
	if shift > maxShift {
		return -1
	}
	return shift - minShift
}

// Get returns a zeroed buffer of length n.
func (p *Pool) Get(n int) *[]byte {
	i := tier(n)
	if i < 0 {
		b := make([]byte, n)
		return &b
	}
	if bp, ok := p.tiers[i].Get().(*[]byte); ok {
		b := (*bp)[:n]
		clear(b)
		*bp = b
		return bp
	}
	b := make([]byte, n, 1<<(i+minShift))
	return &b
}

// Put recycles a buffer obtained from Get (or a prefix of one).
func (p *Pool) Put(bp *[]byte) {
	c := cap(*bp)
	if c < 1<<minShift || c&(c-1) != 0 {
		return // not one of ours
	}
	if i := tier(c); i >= 0 {
		p.tiers[i].Put(bp)
	}
}

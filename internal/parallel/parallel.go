// Package parallel is avtgym's one bounded-concurrency helper: it runs a
// function over the indexes 0..n-1 on at most a given number of goroutines
// (errgroup with SetLimit underneath), for batches, audits, reference
// checks, rollouts and evaluations alike.
package parallel

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// For calls f(ctx, i) for every i in 0..n-1, at most limit at a time (limit
// < 1 means 1), and returns the first error. Once ctx ends or an f has
// returned an error, no further index starts, and the ctx given to the
// running calls is canceled. Each worker takes the next index as it
// finishes one, so the cost per item is an atomic add, not a goroutine.
func For(ctx context.Context, n, limit int, f func(ctx context.Context, i int) error) error {
	if n <= 0 {
		return ctx.Err()
	}
	limit = max(1, min(limit, n))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(limit)
	var next atomic.Int64
	for range limit {
		g.Go(func() error {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return err
				}
				if err := f(gctx, i); err != nil {
					return err
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// Each is For without errors: f(i) runs for every i in 0..n-1, at most
// limit at a time. With limit 1 (or n ≤ 1) it runs in the calling
// goroutine.
func Each(n, limit int, f func(i int)) {
	if limit <= 1 || n <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	For(context.Background(), n, limit, func(_ context.Context, i int) error { f(i); return nil })
}

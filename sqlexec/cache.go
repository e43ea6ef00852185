package sqlexec

import (
	"context"
	"fmt"
	"sync/atomic"

	"avtgym/internal/cache"
)

// Bounds of a Cache made by NewCache.
const (
	// DefaultCacheEntries is how many reference outcomes a Cache keeps.
	DefaultCacheEntries = 1 << 16
	// DefaultCacheBytes is how much memory the kept reference results may
	// take together (Result.Bytes, counted twice: the result and its
	// prepared comparison side).
	DefaultCacheBytes int64 = 1 << 30
)

// Cache holds reference outcomes by key (an internal/cache.Cache): each key
// is computed once (concurrent callers of one key wait for one
// computation), and its result or error is kept. Two outcomes are not kept,
// so that a later call computes again: failures while the computing
// caller's context was done (the caller left, the result says nothing about
// the key) and KindUnavailable and KindBusy errors (the environment, not the
// key, failed; see Lasting). A waiting caller whose context ends stops
// waiting with the context's error; the computation goes on for the others.
// Past its bounds (entries, and the results' bytes) the least recently used
// outcome is dropped, and computed again when it is needed again.
//
// The zero Cache is not usable; call NewCache. A Cache is safe for
// concurrent use.
type Cache struct {
	results *cache.Cache[string, *refResult]
	// forms memoises what Check derives from a reference text under a
	// policy (rewritten, normalised, resolved policy): the same for every
	// check of the task.
	forms *cache.Cache[formKey, *refForm]
}

// refResult is a kept reference result and its prepared side of the
// comparison, made on first use.
type refResult struct {
	res *Result
	// prep is prepareRef(policy, res) for the policy the last Check
	// resolved (one per key, in practice).
	prep atomic.Pointer[preparedRef]
}

// preparedRef is a reference result's prepared rows under one policy.
type preparedRef struct {
	policy Policy
	rows   *refRows
}

// prepared returns the comparison side of the result under p.
func (r *refResult) prepared(p Policy) *refRows {
	if pr := r.prep.Load(); pr != nil && pr.policy == p {
		return pr.rows
	}
	pr := &preparedRef{policy: p, rows: prepareRef(p, r.res)}
	r.prep.Store(pr)
	return pr.rows
}

// formKey is what a refForm is derived from: its content, and the key it
// serves.
type formKey struct {
	key, reference string
	policy         Policy
}

// refForm is a reference text as Check uses it.
type refForm struct {
	sql    string // rewritten by the policy
	norm   string // NormalizeSQL(sql)
	policy Policy // the policy resolved against sql
}

// NewCache returns an empty cache bounded by DefaultCacheEntries and
// DefaultCacheBytes.
func NewCache() *Cache { return NewBoundedCache(DefaultCacheEntries, DefaultCacheBytes) }

// NewBoundedCache returns an empty cache that keeps at most maxEntries
// outcomes (at least 1) and, when maxBytes is positive, results of at most
// maxBytes together (twice Result.Bytes each, for the prepared side).
func NewBoundedCache(maxEntries int, maxBytes int64) *Cache {
	maxEntries = max(maxEntries, 1)
	return &Cache{
		results: cache.New(cache.Options[string, *refResult]{
			MaxEntries: maxEntries,
			MaxBytes:   maxBytes,
			Size: func(key string, r *refResult, _ error) int64 {
				n := int64(len(key)) + 64
				if r != nil {
					n += 2 * r.res.Bytes
				}
				return n
			},
			KeepError: Lasting,
		}),
		forms: cache.New(cache.Options[formKey, *refForm]{MaxEntries: maxEntries}),
	}
}

// Lasting reports whether a failure says something lasting about the SQL
// that failed, so that it may be cached as the SQL's outcome: every failure
// but KindUnavailable and KindBusy (the environment failed, or was
// saturated: the same SQL may run later).
func Lasting(err error) bool {
	switch KindOf(err) {
	case KindUnavailable, KindBusy:
		return false
	}
	return true
}

// refForm returns the memoised form of reference under p for key.
func (c *Cache) refForm(key string, p Policy, reference string) *refForm {
	f, _ := c.forms.Get(context.Background(), formKey{key, reference, p}, func(context.Context) (*refForm, error) {
		sql := p.Rewrite(reference)
		return &refForm{sql: sql, norm: NormalizeSQL(sql), policy: p.Resolve(sql)}, nil
	})
	return f
}

// Get returns the cached outcome for key, computing it with compute when it is missing.
// The returned *Result is shared: callers must not modify it.
func (c *Cache) Get(ctx context.Context, key string, compute func(context.Context) (*Result, error)) (*Result, error) {
	r, err := c.get(ctx, key, compute)
	if err != nil {
		return nil, err
	}
	return r.res, nil
}

// get is Get with the kept entry.
func (c *Cache) get(ctx context.Context, key string, compute func(context.Context) (*Result, error)) (*refResult, error) {
	return c.results.Get(ctx, key, func(ctx context.Context) (*refResult, error) {
		res, err := compute(ctx)
		if err != nil {
			return nil, err
		}
		if res == nil {
			return nil, fmt.Errorf("sqlexec: cache computation for %q returned no result", key)
		}
		return &refResult{res: res}, nil
	})
}

// Forget removes key's outcome (a computation in flight finishes for its
// waiters, and is not kept).
func (c *Cache) Forget(key string) { c.results.Forget(key) }

// Len returns the number of outcomes held.
func (c *Cache) Len() int { return c.results.Len() }

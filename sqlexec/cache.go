package sqlexec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Cache computes each key once (concurrent callers of one key wait for one computation)
// and keeps the results and errors. Two outcomes are not kept, so that a later call
// computes again: failures while the computing caller's context was done (the caller
// left, the result says nothing about the key) and KindUnavailable and KindBusy
// errors (the environment, not the key, failed). A waiting caller whose context ends stops waiting
// with the context's error; the computation goes on for the others.
//
// The zero Cache is not usable; call NewCache. A Cache is safe for concurrent use.
type Cache struct {
	mu sync.Mutex
	m  map[string]*cacheEntry
	// refs memoises what Check derives from a reference text under a
	// policy (rewritten, normalised, resolved policy), keyed like m: the
	// same for every check of the task.
	refs sync.Map // string -> *refForm
}

// refForm is a reference text as Check uses it.
type refForm struct {
	sql    string // rewritten by the policy
	norm   string // NormalizeSQL(sql)
	policy Policy // the policy resolved against sql
	source string // the reference text it was derived from
	in     Policy // the policy it was derived under

	// rows is the reference result's prepared side of the comparison
	// (a *preparedRef), made on first use.
	rows atomic.Pointer[preparedRef]
}

// preparedRef ties prepared reference rows to the result they came from
// (the cache may compute the reference again after Forget).
type preparedRef struct {
	from *Result
	rows *refRows
}

// prepared returns the comparison side of ref under the form's policy.
func (f *refForm) prepared(ref *Result) *refRows {
	if pr := f.rows.Load(); pr != nil && pr.from == ref {
		return pr.rows
	}
	pr := &preparedRef{from: ref, rows: prepareRef(f.policy, ref)}
	f.rows.Store(pr)
	return pr.rows
}

// refForm returns the memoised form of reference under p for key.
func (c *Cache) refForm(key string, p Policy, reference string) *refForm {
	if f, ok := c.refs.Load(key); ok {
		if f := f.(*refForm); f.source == reference && f.in == p {
			return f
		}
	}
	sql := p.Rewrite(reference)
	f := &refForm{sql: sql, norm: NormalizeSQL(sql), policy: p.Resolve(sql), source: reference, in: p}
	c.refs.Store(key, f)
	return f
}

type cacheEntry struct {
	done  chan struct{}
	res   *Result
	err   error
	retry bool // the outcome was not kept: waiters compute again
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{m: map[string]*cacheEntry{}} }

// Get returns the cached outcome for key, computing it with compute when it is missing.
// The returned *Result is shared: callers must not modify it.
func (c *Cache) Get(ctx context.Context, key string, compute func(context.Context) (*Result, error)) (*Result, error) {
	for {
		c.mu.Lock()
		e := c.m[key]
		if e == nil {
			e = &cacheEntry{done: make(chan struct{})}
			c.m[key] = e
			c.mu.Unlock()
			c.fill(ctx, key, e, compute)
			return e.res, e.err
		}
		c.mu.Unlock()
		select {
		case <-e.done:
			if e.retry {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				continue
			}
			return e.res, e.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (c *Cache) fill(ctx context.Context, key string, e *cacheEntry, compute func(context.Context) (*Result, error)) {
	finished := false
	defer func() {
		if !finished { // compute panicked: let waiters retry, then re-panic
			e.retry = true
			e.err = errors.New("sqlexec: cache computation panicked")
		}
		if e.retry {
			c.mu.Lock()
			if c.m[key] == e {
				delete(c.m, key)
			}
			c.mu.Unlock()
		}
		close(e.done)
	}()
	e.res, e.err = compute(ctx)
	if e.err == nil && e.res == nil {
		e.err = fmt.Errorf("sqlexec: cache computation for %q returned no result", key)
	}
	if e.err != nil && (ctx.Err() != nil || KindOf(e.err) == KindUnavailable || KindOf(e.err) == KindBusy) {
		e.retry = true
	}
	finished = true
}

// Forget removes key's outcome (a computation in flight finishes for its waiters).
func (c *Cache) Forget(key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
	c.refs.Delete(key)
}

// Len returns the number of keys held or being computed.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

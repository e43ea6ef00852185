// Package cache is avtgym's one memoising cache: a generic, bounded,
// single-flight map from a key to the outcome (a value or an error) of
// computing it, owned by the value that needs it (a corpus, an engine, a
// verifier), never a package global.
//
// # Single flight
//
// Concurrent Get calls for a key that is not held share one computation:
// the first caller runs compute with its own context, the others wait for
// it. A waiter whose context ends stops waiting and returns the context's
// error; the computation goes on for the others.
//
// # What is kept
//
// A value is kept. An error is kept only when Options.KeepError says so
// (nil: no error is kept), and never when the computing caller's context
// had ended by the time compute returned, or when the error is (or wraps)
// context.Canceled: those say nothing about the key. An outcome that is not
// kept is not shared either: its waiters compute again (one of them first,
// the others waiting for it), so that a failure of the environment (a
// database unavailable, a verifier saturated, a caller that left) is
// retried rather than remembered. A compute that panics keeps nothing; its
// waiters compute again, and the panic goes on up the computing caller's
// stack.
//
// # Bounds and eviction
//
// A cache holds at most Options.MaxEntries outcomes and, when
// Options.MaxBytes is set, at most that many bytes as Options.Size counts
// them. Past a bound the least recently used outcome (the one whose last
// Get is the oldest) is dropped first. Computations in flight are not
// counted: they are bounded by the callers waiting on them. An outcome
// larger than MaxBytes on its own is returned to its callers but not kept.
//
// The returned values are shared between callers: treat them as read-only.
package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Options bound a Cache and say which failures it keeps.
type Options[K comparable, V any] struct {
	// MaxEntries is the most outcomes kept; it must be at least 1.
	MaxEntries int
	// MaxBytes, when positive, is the most bytes the kept outcomes may
	// weigh together, as Size weighs them; Size must then be set.
	MaxBytes int64
	// Size weighs an outcome for MaxBytes (the key's bytes, the value's,
	// and for an error, typically the key's alone; v is then the zero V).
	Size func(k K, v V, err error) int64
	// KeepError reports whether a failed computation's error is kept (and
	// shared with the callers waiting for it), as an outcome of the key:
	// a query that does not compile fails the same way next time. Nil keeps
	// no error.
	KeepError func(error) bool
}

// Cache is a bounded single-flight cache from K to the outcome of
// computing it (see the package doc). The zero Cache is not usable; call
// New. A Cache is safe for concurrent use.
type Cache[K comparable, V any] struct {
	opt Options[K, V]

	mu    sync.Mutex
	items map[K]*item[K, V] // kept outcomes, and computations in flight
	lru   item[K, V]        // sentinel of the kept outcomes, most recently used first
	kept  int
	bytes int64
}

// item is one key's computation and, once it is done, its outcome.
type item[K comparable, V any] struct {
	key  K
	done chan struct{} // closed when the computation ended
	// After done is closed these do not change: val and err are the
	// outcome, shared says whether waiters may use it (else they compute
	// again).
	val    V
	err    error
	shared bool

	// Guarded by Cache.mu: the LRU links (nil while not kept) and size.
	prev, next *item[K, V]
	size       int64
}

// New returns an empty cache with the given bounds. It panics when
// opt.MaxEntries is below 1, or opt.MaxBytes is set without opt.Size: a
// cache is always bounded.
func New[K comparable, V any](opt Options[K, V]) *Cache[K, V] {
	if opt.MaxEntries < 1 {
		panic(fmt.Sprintf("cache: MaxEntries is %d; a cache holds at least one outcome", opt.MaxEntries))
	}
	if opt.MaxBytes > 0 && opt.Size == nil {
		panic("cache: MaxBytes is set but Size is nil")
	}
	c := &Cache[K, V]{opt: opt, items: map[K]*item[K, V]{}}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// Get returns key's outcome, computing it with compute (given ctx) when it
// is not held; concurrent callers of one key share one computation. A
// caller whose ctx ends while it waits for another's computation returns
// ctx.Err().
func (c *Cache[K, V]) Get(ctx context.Context, key K, compute func(context.Context) (V, error)) (V, error) {
	for {
		c.mu.Lock()
		it := c.items[key]
		if it == nil {
			it = &item[K, V]{key: key, done: make(chan struct{})}
			c.items[key] = it
			c.mu.Unlock()
			c.fill(ctx, it, compute)
			return it.val, it.err
		}
		if it.prev != nil { // kept: a hit
			c.moveToFront(it)
			c.mu.Unlock()
			return it.val, it.err
		}
		c.mu.Unlock()
		select {
		case <-it.done:
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
		if it.shared {
			return it.val, it.err
		}
		// The outcome was not kept: compute again, unless this caller
		// left meanwhile.
		if err := ctx.Err(); err != nil {
			var zero V
			return zero, err
		}
	}
}

// fill runs compute for it and keeps or drops the outcome.
func (c *Cache[K, V]) fill(ctx context.Context, it *item[K, V], compute func(context.Context) (V, error)) {
	returned := false
	defer func() {
		// On a panic returned is false: nothing is kept, and the waiters
		// compute again.
		it.shared = returned && c.keeps(ctx, it.err)
		c.mu.Lock()
		if c.items[it.key] == it { // not forgotten meanwhile
			if it.shared {
				c.keep(it)
			} else {
				delete(c.items, it.key)
			}
		}
		c.mu.Unlock()
		close(it.done)
	}()
	it.val, it.err = compute(ctx)
	returned = true
}

// keeps reports whether an outcome with err (nil: a value) is kept.
func (c *Cache[K, V]) keeps(ctx context.Context, err error) bool {
	if err == nil {
		return true
	}
	if ctx.Err() != nil || errors.Is(err, context.Canceled) || c.opt.KeepError == nil {
		return false
	}
	return c.opt.KeepError(err)
}

// keep adds a finished item to the kept outcomes and evicts past the
// bounds (mu held). An item over MaxBytes on its own is not kept.
func (c *Cache[K, V]) keep(it *item[K, V]) {
	if c.opt.MaxBytes > 0 {
		it.size = c.opt.Size(it.key, it.val, it.err)
		if it.size > c.opt.MaxBytes {
			delete(c.items, it.key)
			return
		}
	}
	it.next, it.prev = c.lru.next, &c.lru
	it.next.prev, c.lru.next = it, it
	c.kept++
	c.bytes += it.size
	for c.kept > c.opt.MaxEntries || c.opt.MaxBytes > 0 && c.bytes > c.opt.MaxBytes {
		c.drop(c.lru.prev)
	}
}

// moveToFront marks a kept item as the most recently used (mu held).
func (c *Cache[K, V]) moveToFront(it *item[K, V]) {
	if c.lru.next == it {
		return
	}
	it.prev.next, it.next.prev = it.next, it.prev
	it.next, it.prev = c.lru.next, &c.lru
	it.next.prev, c.lru.next = it, it
}

// drop removes a kept item (mu held).
func (c *Cache[K, V]) drop(it *item[K, V]) {
	it.prev.next, it.next.prev = it.next, it.prev
	it.prev, it.next = nil, nil
	c.kept--
	c.bytes -= it.size
	delete(c.items, it.key)
}

// Forget drops key's outcome. A computation in flight for key finishes for
// the callers waiting on it, but its outcome is not kept; a Get after
// Forget computes afresh.
func (c *Cache[K, V]) Forget(key K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	it := c.items[key]
	switch {
	case it == nil:
	case it.prev != nil:
		c.drop(it)
	default:
		delete(c.items, key)
	}
}

// Len returns the number of outcomes kept (computations in flight are not
// counted).
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kept
}

// Bytes returns the weight of the outcomes kept, as Options.Size weighs
// them (0 without MaxBytes).
func (c *Cache[K, V]) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

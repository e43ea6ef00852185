package parallel

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestForRunsEveryIndexOnceWithinTheLimit(t *testing.T) {
	const n, limit = 1000, 7
	var running, most atomic.Int64
	seen := make([]atomic.Int32, n)
	var mu sync.Mutex
	block := make(chan struct{})
	close(block)
	err := For(context.Background(), n, limit, func(_ context.Context, i int) error {
		r := running.Add(1)
		mu.Lock()
		if r > most.Load() {
			most.Store(r)
		}
		mu.Unlock()
		seen[i].Add(1)
		<-block
		running.Add(-1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			t.Fatalf("index %d ran %d times", i, c)
		}
	}
	if m := most.Load(); m > limit || m < 1 {
		t.Fatalf("%d ran at once, limit %d", m, limit)
	}
}

func TestForStopsAtTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	var ran atomic.Int64
	err := For(context.Background(), 10000, 1, func(_ context.Context, i int) error {
		ran.Add(1)
		if i == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
	if r := ran.Load(); r != 4 {
		t.Fatalf("%d indexes ran after the error at index 3 (limit 1)", r)
	}
}

func TestForStopsWhenCanceled(t *testing.T) {
	// Only calls that start after cancel has returned count: while one
	// worker is inside cancel, the other may legitimately run on.
	ctx, cancel := context.WithCancel(context.Background())
	var ran, late atomic.Int64
	var canceled atomic.Bool
	err := For(ctx, 10000, 2, func(ctx context.Context, i int) error {
		if canceled.Load() {
			late.Add(1)
		}
		if ran.Add(1) == 5 {
			cancel()
			canceled.Store(true)
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	// The other worker may have passed its check just before the
	// cancellation: one late call at most.
	if l := late.Load(); l > 1 {
		t.Fatalf("%d indexes started after the cancellation (limit 2)", l)
	}
}

func TestEach(t *testing.T) {
	for _, limit := range []int{0, 1, 4} {
		var sum atomic.Int64
		Each(100, limit, func(i int) { sum.Add(int64(i)) })
		if sum.Load() != 4950 {
			t.Fatalf("limit %d: sum %d", limit, sum.Load())
		}
	}
}

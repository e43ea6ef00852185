package sqlexec

import (
	"context"
	"fmt"
	"testing"
)

// TestCacheBounds: past its entries or its bytes a Cache drops the least
// recently used reference, which Check then runs again.
func TestCacheBounds(t *testing.T) {
	eng := &fakeEngine{answers: map[string]*Result{}}
	for i := range 3 {
		eng.answers[fmt.Sprintf("SELECT %d", i)] = res(1, row(int64(i)))
	}
	ctx := context.Background()
	check := func(c *Cache, i int) {
		t.Helper()
		sql := fmt.Sprintf("SELECT %d", i)
		v, err := Check(ctx, eng, c, fmt.Sprint("ref", i), DefaultPolicy(), sql+" ", sql, DefaultLimits())
		if err != nil || !v.Success {
			t.Fatalf("check %d: %+v, %v", i, v, err)
		}
	}
	runs := func(i int) int {
		eng.mu.Lock()
		defer eng.mu.Unlock()
		return eng.calls[fmt.Sprintf("SELECT %d", i)]
	}

	c := NewBoundedCache(2, 0)
	check(c, 0)
	check(c, 1)
	check(c, 0) // 0 is now the most recently used
	check(c, 2) // 1 goes
	if c.Len() != 2 || runs(0) != 1 || runs(2) != 1 {
		t.Fatalf("%d kept; reference runs %d, %d; want 2 kept, one run each", c.Len(), runs(0), runs(2))
	}
	check(c, 1)
	if runs(1) != 2 {
		t.Errorf("the least recently used reference was kept: %d runs, want 2", runs(1))
	}

	// A byte bound below one result keeps none.
	tiny := NewBoundedCache(10, 8)
	check(tiny, 0)
	check(tiny, 0)
	if tiny.Len() != 0 || runs(0) != 3 {
		t.Errorf("over the byte bound: %d kept, %d runs; want 0 kept and 3 runs", tiny.Len(), runs(0))
	}
}

// TestLasting: the environment's failures are not lasting; the query's are.
func TestLasting(t *testing.T) {
	for k, want := range map[ErrorKind]bool{
		KindSyntax: true, KindDenied: true, KindTimeout: true, KindTooManyRows: true, KindExecution: true,
		KindTooMuchMemory: true, KindUnavailable: false, KindBusy: false,
	} {
		if got := Lasting(Errorf(k, nil, "x")); got != want {
			t.Errorf("Lasting(%v) = %v, want %v", k, got, want)
		}
	}
	if !Lasting(fmt.Errorf("not an *Error")) {
		t.Error("a plain error is not lasting")
	}
}

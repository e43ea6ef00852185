package pytests

import (
	"context"
	"fmt"
	"sync"
	"testing"
)

// BenchmarkRun measures one verification of a lite Management task (its
// reference and its real test) through the pool: a new connection, the
// transaction, the statements, the test, the rollback.
func BenchmarkRun(b *testing.B) {
	for _, tk := range liteTasks(b)[:4] {
		b.Run(tk.id, func(b *testing.B) {
			p := newPool(b, Config{Workers: 1})
			db := clone(b)
			j := job(b, db, tk.sol, tk.tests...)
			for b.Loop() {
				if res := run(b, p, j); !res.Passed {
					b.Fatalf("got %+v", res)
				}
			}
		})
	}
}

// BenchmarkRunParallel runs verifications on 1, 4 and 8 workers at once,
// each on its own copy of the database; ns/op is per verification.
func BenchmarkRunParallel(b *testing.B) {
	tk := liteTasks(b)[0]
	for _, n := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			p := newPool(b, Config{Workers: n})
			jobs := make(chan struct{})
			var wg sync.WaitGroup
			for range n {
				j := job(b, clone(b), tk.sol, tk.tests...)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range jobs {
						res, err := p.Run(context.Background(), j)
						if err != nil || !res.Passed {
							b.Errorf("got %+v, %v", res, err)
						}
					}
				}()
			}
			for b.Loop() {
				jobs <- struct{}{}
			}
			close(jobs)
			wg.Wait()
		})
	}
}

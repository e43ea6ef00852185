package grpcpool

import "testing"

func TestGetPut(t *testing.T) {
	p := &Pool{}
	for _, n := range []int{0, 1, 255, 256, 257, 4096, 140_000, 1 << 20, 1<<26 + 1} {
		bp := p.Get(n)
		if len(*bp) != n {
			t.Fatalf("Get(%d) has length %d", n, len(*bp))
		}
		for i := range *bp {
			(*bp)[i] = 0xAA
		}
		p.Put(bp)
		again := p.Get(n)
		for i, c := range *again {
			if c != 0 {
				t.Fatalf("Get(%d) after Put returned a dirty byte at %d", n, i)
			}
		}
		if n > 0 && n <= 1<<26 {
			if c := cap(*again); c < n || c&(c-1) != 0 {
				t.Fatalf("Get(%d) capacity %d is not a power of two ≥ n", n, c)
			}
		}
	}
	// Foreign buffers are dropped, not pooled into the wrong tier.
	odd := make([]byte, 300)
	p.Put(&odd)
	if got := p.Get(300); cap(*got) != 512 {
		t.Fatalf("a 300-byte request got capacity %d, want 512", cap(*got))
	}
}

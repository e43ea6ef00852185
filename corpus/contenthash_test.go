package corpus_test

import (
	"context"
	"regexp"
	"slices"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/internal/testutil"
)

// TestContentHash: the corpus hash is 64 hex digits, the same for the
// same tasks in any order, and different when any task's content is.
func TestContentHash(t *testing.T) {
	c, err := corpus.LoadDir(context.Background(), testutil.WriteTiny(t), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := c.ContentHash()
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(h) {
		t.Fatalf("hash %q", h)
	}
	slices.Reverse(c.Tasks)
	if c.ContentHash() != h {
		t.Fatal("the hash depends on the tasks' order")
	}
	c.Tasks[0].Hash[5] ^= 1
	if c.ContentHash() == h {
		t.Fatal("a changed task leaves the hash as it was")
	}
}

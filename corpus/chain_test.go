package corpus_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/internal/testutil"
)

// TestChainLayers: an ambiguity's layer is one more than the layer of the
// one it depends on; independent ones are layer 1.
func TestChainLayers(t *testing.T) {
	r := &corpus.Record{Ambiguities: []corpus.Ambiguity{
		{Term: "c", DependsOn: "b"}, {Term: "a"}, {Term: "b", DependsOn: "a"}, {Term: "x"}, {Term: "y", DependsOn: "missing"},
	}}
	if got, want := r.ChainLayers(), []int{3, 1, 2, 1, 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("ChainLayers = %v, want %v", got, want)
	}
	if !r.HasChain() || (&corpus.Record{Ambiguities: []corpus.Ambiguity{{Term: "a"}}}).HasChain() {
		t.Error("HasChain")
	}
}

// TestDependsOnChecked: the loader refuses a dependency on the ambiguity
// itself, on a term the record does not register, and a cycle, each
// naming the field.
func TestDependsOnChecked(t *testing.T) {
	amb := func(a, b string) string {
		return `[{"term":"alpha","kind":"critical","resolution":"r1","depends_on":"` + a + `"},{"term":"beta","kind":"critical","resolution":"r2","depends_on":"` + b + `"}]`
	}
	for name, tc := range map[string]struct{ ambs, want string }{
		"self":    {amb("alpha", ""), `ambiguities[0].depends_on: "alpha" is the ambiguity's own term`},
		"unknown": {amb("gamma", ""), `ambiguities[0].depends_on: "gamma" is not the term of another ambiguity`},
		"cycle":   {amb("beta", "alpha"), `ambiguities[0].depends_on: "beta" closes a cycle`},
	} {
		dir := testutil.WriteTiny(t, func(f map[string]string) {
			f["records.jsonl"] = `{"id":"c1","db":"mini","request":"alpha beta?","ambiguities":` + tc.ambs + `,"reference":{"sql":"SELECT 1"}}` + "\n"
		})
		_, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
		var ve *corpus.ValidationError
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a problem %q", name, err, tc.want)
		}
	}
	dir := testutil.WriteTiny(t, func(f map[string]string) {
		f["records.jsonl"] = `{"id":"c1","db":"mini","request":"alpha beta?","ambiguities":` + amb("", "alpha") + `,"reference":{"sql":"SELECT 1"}}` + "\n"
	})
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatalf("a valid chain: %v", err)
	}
	c.Close()
}

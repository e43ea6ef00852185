package policy_test

import (
	"context"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/internal/testutil"
	"avtgym/oracle"
	"avtgym/policy"
)

func TestCheckReferenceOracle(t *testing.T) {
	ctx := context.Background()
	load := func(edit func(map[string]string)) *corpus.Corpus {
		t.Helper()
		c, err := corpus.LoadDir(ctx, testutil.WriteTiny(t, edit), corpus.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	if p := policy.CheckReferenceOracle(ctx, load(func(map[string]string) {}), oracle.Deterministic()); len(p) != 0 {
		t.Fatalf("the tiny corpus fails the probes: %v", p)
	}
	cases := []struct {
		name, from, to, want string
	}{
		// A term made of probe words is credited by the generic probe.
		{"probe word", `"request":"List the big sales of the recent year, sorted."`, `"request":"List the big sales of the recent year, sorted; please elaborate."`, "none_adv reaches recall 0.5"},
		// An alias equal to another term steals its credit: precision < 1.
		{"alias of another term", `"resolution":"The year 2024."`, `"resolution":"The year 2024.","aliases":["big sales"]`, "policy full reaches recall 1 and precision 0.5"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := load(func(f map[string]string) {
				r := f["records.jsonl"]
				r = strings.Replace(r, tc.from, tc.to, 1)
				if tc.name == "probe word" {
					r = strings.Replace(r, `{"term":"recent year"`, `{"term":"elaborate"`, 1)
				}
				f["records.jsonl"] = r
			})
			problems := policy.CheckReferenceOracle(ctx, c, oracle.Deterministic())
			var all []string
			for _, p := range problems {
				all = append(all, p.String())
			}
			joined := strings.Join(all, "\n")
			if !strings.Contains(joined, tc.want) || !strings.Contains(joined, "records.jsonl:3: ambiguities:") {
				t.Fatalf("problems = %s\nwant one at records.jsonl:3 containing %q", joined, tc.want)
			}
		})
	}
}

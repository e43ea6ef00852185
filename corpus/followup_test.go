package corpus_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/internal/testutil"
)

// TestLoadFollowUpAndComparisonFields: a record's follow_up (the phase-2
// sub-task) and the comparison fields date_only and canonical_json load;
// the legacy verbatim follow_ups still load; an unknown field inside
// follow_up is rejected like any other unknown field.
func TestLoadFollowUpAndComparisonFields(t *testing.T) {
	const fu = `,"follow_up":{"request":"And per year?","reference":{"sql":["SELECT year, COUNT(*) FROM sales GROUP BY year"],` +
		`"comparison":{"order":"ordered","date_only":true,"canonical_json":true},"tests":[]},"category":"Query","type":"aggregation","knowledge":["0","1"]}`
	const cmp = `"comparison":{"date_only":true,"canonical_json":false},`
	c, _ := loadTiny(t, corpus.Options{Engines: engines.Opener{}},
		editLine(t, lineTopA, `"reference":{`, `"reference":{`+cmp),
		editLine(t, lineTopA, `LIMIT 1"}}`, `LIMIT 1"}`+fu+`}`),
		editLine(t, lineTopB, `LIMIT 1"}}`, `LIMIT 1"},"follow_ups":[{"query":"anything","sol_sql":["SELECT 1"]}]}`))
	var found bool
	for _, task := range c.Tasks {
		if task.ID != "top-a" {
			continue
		}
		found = true
		f := task.Record.FollowUp
		if f == nil || f.Request != "And per year?" || f.Type != "aggregation" || strings.Join(f.Knowledge, ",") != "0,1" ||
			f.Reference.Comparison == nil || f.Reference.Comparison.DateOnly == nil || !*f.Reference.Comparison.DateOnly {
			t.Errorf("follow_up = %+v", f)
		}
		if cp := task.Record.Reference.Comparison; cp == nil || cp.DateOnly == nil || !*cp.DateOnly || cp.CanonicalJSON == nil || *cp.CanonicalJSON {
			t.Errorf("comparison = %+v", cp)
		}
	}
	if !found {
		t.Fatal("top-a not loaded")
	}

	dir := testutil.WriteTiny(t, editLine(t, lineTopA, `LIMIT 1"}}`, `LIMIT 1"},"follow_up":{"query":"x","reference":{"sql":"SELECT 1"}}}`))
	_, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	var ve *corpus.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "query") || !strings.Contains(err.Error(), "unknown field") {
		t.Fatalf("err = %v, want the unknown field query of follow_up", err)
	}
}

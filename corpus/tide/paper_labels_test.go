package tide_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/audit"
	"avtgym/corpus"
	"avtgym/corpus/tide"
)

// driftCheck is the part of `corpus import tide`'s check that applies
// Algorithm 1 (cmd/avtgym's tideCheck runs it after the probes).
func driftCheck(ctx context.Context, c *corpus.Corpus) ([]corpus.Problem, error) {
	fs, err := audit.ChainDriftFindings(ctx, c)
	if err != nil {
		return nil, err
	}
	return audit.Problems(fs), nil
}

// TestTideImportPaperLabels: issue 28. The importer accepts the drift
// samples the paper labels by Algorithm 1 with HAVING output-side and a
// WHERE subquery part of its filter (sqlcommit, docs/tide.md), and refuses
// the labels the old reading gave them.
func TestTideImportPaperLabels(t *testing.T) {
	const join = `FROM concert AS c JOIN stadium AS s ON c.stadium_id = s.stadium_id WHERE c.theme <> 'x' GROUP BY s.name `
	for _, tc := range []struct {
		name, pre, post, subtype string
		intent                   any
		ok                       bool
		why                      string // part of the refusal when !ok
	}{
		// Appendix G: projection changes "are confined to SELECT, GROUP BY,
		// ORDER BY, HAVING, LIMIT, or OFFSET".
		{"HAVING literal changed: projection", `SELECT s.name, COUNT(*) ` + join + `HAVING COUNT(*) >= 2`, `SELECT s.name, COUNT(*) ` + join + `HAVING COUNT(*) >= 3`, "projection", "aspect_change", true, ""},
		{"HAVING literal changed: not value", `SELECT s.name, COUNT(*) ` + join + `HAVING COUNT(*) >= 2`, `SELECT s.name, COUNT(*) ` + join + `HAVING COUNT(*) >= 3`, "value", nil, false, `declares "value", but Algorithm 1 computes "projection"`},
		// The old reading (HAVING in W) called a removed HAVING conjunct a constraint drift.
		{"HAVING conjunct removed: not constraint", `SELECT s.name, COUNT(*) ` + join + `HAVING COUNT(*) >= 2 AND MAX(s.capacity) > 20000`, `SELECT s.name, COUNT(*) ` + join + `HAVING COUNT(*) >= 2`, "constraint", nil, false, `declares "constraint", but Algorithm 1 computes "projection"`},
		// §2.2: constraint-level "removes one or more filtering predicates".
		{"WHERE subquery conjunct removed: constraint", `SELECT name FROM stadium WHERE capacity > 10000 AND stadium_id IN (SELECT stadium_id FROM concert WHERE year = '2015')`, `SELECT name FROM stadium WHERE capacity > 10000`, "constraint", nil, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, dbs := tide.Fixture(t, func(ls []map[string]any) []map[string]any {
				for _, st := range []string{"drift_only", "joint"} {
					l := tide.ByType(ls, st)
					l["anchor_sql"], l["post_drift_sql"], l["target_sqls"] = tc.pre, tc.post, []any{tc.pre, tc.post}
					l["drift_subtype"], l["intent_subtype"] = tc.subtype, tc.intent
				}
				c := tide.ByType(ls, "chain_only")
				c["anchor_sql"], c["target_sqls"] = tc.pre, []any{tc.pre}
				return ls
			})
			_, err := tide.Import(context.Background(), tide.Options{In: in, DBs: dbs, Out: filepath.Join(t.TempDir(), "out"), Check: driftCheck})
			if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), tc.why)) {
				t.Errorf("import: %v, want ok=%v (%s)", err, tc.ok, tc.why)
			}
		})
	}
}

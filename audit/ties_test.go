package audit

import (
	"context"
	"strings"
	"testing"
)

// TestChainDriftLimitTies: corpus check's chain_drift refuses a record
// whose reference's LIMIT cuts through tied sort keys (two 2014 concerts
// share the sort key c.year), naming the record and the field; the same
// reference with the tie broken by a second key passes.
func TestChainDriftLimitTies(t *testing.T) {
	const tied = "SELECT s.name, s.average FROM concert AS c JOIN stadium AS s ON c.stadium_id = s.stadium_id WHERE c.year = '2014' ORDER BY c.year LIMIT 1"
	for _, tc := range []struct {
		name, sql, want string
	}{
		{"tie", tied, "reference.sql: ORDER BY c.year LIMIT 1 cuts through tied sort keys: rows 1 and 2 tie on (c.year)"},
		{"tie broken", strings.Replace(tied, "ORDER BY c.year", "ORDER BY c.year, s.average DESC", 1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := syntheticTideDir(t)
			editRecords(t, dir, func(recs []map[string]any) {
				recs[0]["reference"] = map[string]any{"sql": tc.sql}
			})
			c := loadDir(t, dir)
			fs, err := ChainDriftFindings(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			var ties []Finding
			for _, f := range fs {
				if strings.Contains(f.Msg, "tied sort keys") {
					ties = append(ties, f)
				}
			}
			switch {
			case tc.want == "" && len(ties) > 0:
				t.Errorf("tie reported without a tie: %v", ties)
			case tc.want != "" && (len(ties) != 1 || ties[0].TaskID != "a01-C" || !strings.Contains(ties[0].Msg, tc.want)):
				t.Errorf("findings %v, want one on a01-C containing %q", fs, tc.want)
			}
		})
	}
}

package postgres

import (
	"context"
	"testing"

	"avtgym/sqlexec"
)

// TestStatisticsAreNotThePolicys: the cumulative statistics count what the
// reference runs read (issue 25: pg_stat_user_tables through BIRD_A's
// execute showed the reference's scans); every way to read them is
// refused, in queries and in Management SQL.
func TestStatisticsAreNotThePolicys(t *testing.T) {
	_, db := harbor(t)
	_, d := openStateful(t, StatefulOptions{Clones: 1})
	ctx := context.Background()
	for _, sql := range []string{
		"SELECT relname, seq_scan, idx_scan FROM pg_stat_user_tables",
		"SELECT * FROM pg_catalog.pg_statio_user_tables",
		"SELECT pg_stat_get_numscans('berths'::regclass)",
		"SELECT pg_catalog.pg_stat_get_tuples_returned(oid) FROM pg_class WHERE relname = 'berths'",
		"SELECT * FROM pg_stat_all_indexes",
		"SELECT * FROM pg_locks",
		"WITH s AS (SELECT * FROM pg_stat_user_tables) SELECT count(*) FROM s",
	} {
		if _, err := db.Query(ctx, sql, sqlexec.DefaultLimits()); sqlexec.KindOf(err) != sqlexec.KindDenied {
			t.Errorf("query %s: %v, want KindDenied", sql, err)
		}
		j := sqlexec.Job{Key: "stats", Predicted: "CREATE TABLE zz AS " + sql, Reference: []string{"SELECT 1"},
			Policy: sqlexec.DefaultPolicy(), Limits: jobLimits()}
		if v, err := d.Verify(ctx, j); err != nil || sqlexec.KindOf(v.Err) != sqlexec.KindDenied {
			t.Errorf("management %s: %+v %v, want KindDenied", sql, v, err)
		}
	}
	j := sqlexec.Job{Key: "stats in plpgsql", Predicted: "DO $$DECLARE n bigint; BEGIN n := (SELECT sum(seq_scan) FROM pg_stat_user_tables); END$$",
		Reference: []string{"SELECT 1"}, Policy: sqlexec.DefaultPolicy(), Limits: jobLimits()}
	if v, err := d.Verify(ctx, j); err != nil || sqlexec.KindOf(v.Err) != sqlexec.KindDenied {
		t.Errorf("a PL/pgSQL expression: %+v %v, want KindDenied", v, err)
	}
}

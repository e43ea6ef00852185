package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
)

// benchSQL is harbor_1's reference SQL (BIRD-Interact lite sample): a join,
// a filter on timestamps, a GROUP BY with numeric arithmetic.
const benchSQL = `SELECT b.terminal, COUNT(*) AS congested_calls, ROUND(AVG(EXTRACT(EPOCH FROM (pc.berthed_at - pc.ata)) / 3600), 1) AS avg_wait_hours
FROM port_calls pc JOIN berths b ON b.berth_id = pc.berth_id
WHERE pc.ata >= '2024-01-01' AND pc.ata < '2024-04-01' AND EXTRACT(EPOCH FROM (pc.berthed_at - pc.ata)) / 3600 > 24
GROUP BY b.terminal`

// BenchmarkQuery: the engine's Query (checks, a read-only transaction with
// its limits, capped reading, conversion) on benchSQL, run again and again
// (the check and the prepared statement are cached).
func BenchmarkQuery(b *testing.B) {
	_, db := harbor(b)
	benchEngine(b, db, func(int) string { return benchSQL })
}

// BenchmarkQueryDistinct: the engine on a new text each time (a comment with
// a counter): every check parses, every statement is prepared and planned.
func BenchmarkQueryDistinct(b *testing.B) {
	_, db := harbor(b)
	benchEngine(b, db, func(i int) string { return fmt.Sprintf("%s -- %d", benchSQL, i) })
}

func benchEngine(b *testing.B, db *DB, sql func(int) string) {
	ctx := context.Background()
	lim := sqlexec.DefaultLimits()
	i := 0
	for b.Loop() {
		i++
		res, err := db.Query(ctx, sql(i), lim)
		if err != nil || len(res.Rows) == 0 {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkRawPgx: the same SQL on a plain pgx connection (as the policy
// role, pgx's default statement cache), reading every row's values.
func BenchmarkRawPgx(b *testing.B) { benchRaw(b, func(int) string { return benchSQL }) }

// BenchmarkRawPgxDistinct: plain pgx on a new text each time.
func BenchmarkRawPgxDistinct(b *testing.B) {
	benchRaw(b, func(i int) string { return fmt.Sprintf("%s -- %d", benchSQL, i) })
}

func benchRaw(b *testing.B, sql func(int) string) {
	s, db := harbor(b)
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, s.policyConfig(db.Name()).ConnConfig)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	i := 0
	for b.Loop() {
		i++
		rows, err := conn.Query(ctx, sql(i))
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for rows.Next() {
			if _, err := rows.Values(); err != nil {
				b.Fatal(err)
			}
			n++
		}
		if rows.Err() != nil || n == 0 {
			b.Fatal(rows.Err(), n)
		}
	}
}

// BenchmarkCheck: the parser's check of benchSQL without the cache.
func BenchmarkCheck(b *testing.B) {
	for b.Loop() {
		if _, err := checkQueryUncached(benchSQL, true); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueryVsRaw runs the engine and plain pgx alternately on benchSQL
// (so that a busy machine slows both alike) and reports each one's time per
// query and their ratio (the goal: engine/raw <= 1.3).
func BenchmarkQueryVsRaw(b *testing.B) {
	s, db := harbor(b)
	ctx := context.Background()
	conn, err := pgx.ConnectConfig(ctx, s.policyConfig(db.Name()).ConnConfig)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	lim := sqlexec.DefaultLimits()
	var engine, raw time.Duration
	for b.Loop() {
		t0 := time.Now()
		res, err := db.Query(ctx, benchSQL, lim)
		if err != nil || len(res.Rows) == 0 {
			b.Fatal(res, err)
		}
		t1 := time.Now()
		rows, err := conn.Query(ctx, benchSQL)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			if _, err := rows.Values(); err != nil {
				b.Fatal(err)
			}
		}
		if rows.Err() != nil {
			b.Fatal(rows.Err())
		}
		t2 := time.Now()
		engine += t1.Sub(t0)
		raw += t2.Sub(t1)
	}
	b.ReportMetric(float64(engine.Nanoseconds())/float64(b.N), "engine-ns/op")
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(engine)/float64(raw), "engine/raw")
}

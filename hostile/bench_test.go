package hostile

import (
	"context"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	pb "avtgym/proto/avtgym/v1"
)

// The benchmarks here measure the server under attack; run them with
// `make bench-hostile` (go test -run '^$' -bench . -benchtime 1x ./hostile/).
// They start their own server process, so one iteration is one whole
// measurement.

// worstSQL are the submissions that, before the limits, made the server
// allocate the most: each now stops at a cap.
var worstSQL = []string{
	"SELECT zeroblob(1000000000), zeroblob(1000000000), zeroblob(1000000000)",
	"SELECT " + many("randomblob(8000000)", 2000),
	"SELECT " + many("zeroblob(8000000)", 2000),
	"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 1000) SELECT " + many("NULL", 1000) + " FROM c",
	"SELECT a.id, randomblob(1000) FROM t a, t b",
	"SELECT a.id FROM t a, t b ORDER BY randomblob(64) LIMIT 1",
	"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 400000) SELECT group_concat(hex(randomblob(16))) FROM c",
}

// BenchmarkWorstSQLMemory: 16 clients submit the worst SQL, 12 rounds
// each. Reports the server's peak resident memory above its resident
// memory at rest (goal: < 512 MiB).
func BenchmarkWorstSQLMemory(b *testing.B) {
	for range b.N {
		s := start(b)
		for range 20 { // at rest: the corpus loaded, a few episodes played
			s.step(b, s.reset(b, "count"), submit("SELECT count(id) FROM t"))
		}
		idle := s.rss(b)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 12 {
					ep := s.reset(b, "west")
					s.tryStep(ep.GetToken(), submit(worstSQL[(i+j)%len(worstSQL)]))
				}
			}()
		}
		wg.Wait()
		peak := s.peakRSS(b)
		b.ReportMetric(float64(idle)/(1<<20), "idle-MiB")
		b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
		b.ReportMetric(float64(peak-idle)/(1<<20), "above-idle-MiB")
		s.stop(b)
	}
}

// BenchmarkQuickStepsUnderSlowQueries: eight clients keep submitting SQL
// that runs for its whole 5 s limit on the database; a ninth plays quick
// episodes on the same database and measures each Step's latency. Reports
// the quick steps' p50 and p99 with and without the slow load (goal: p99 <
// 50 ms under load).
func BenchmarkQuickStepsUnderSlowQueries(b *testing.B) {
	for range b.N {
		s := start(b)
		// quick plays n quick episodes, and more until atLeast has passed;
		// it stops after a minute whatever the count (a server that makes
		// quick steps wait behind slow ones gives fewer samples).
		quick := func(n int, atLeast time.Duration) []time.Duration {
			var lat []time.Duration
			start := time.Now()
			for end := start.Add(atLeast); (len(lat) < n || time.Now().Before(end)) && time.Since(start) < time.Minute; {
				ep := s.reset(b, "count")
				t0 := time.Now()
				r := s.step(b, ep, submit("SELECT count(*) FROM t WHERE amount >= 0"))
				lat = append(lat, time.Since(t0))
				if r.GetReward().GetValue() != 1 {
					b.Fatalf("quick step: %v", r)
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			return lat
		}
		pct := func(lat []time.Duration, p float64) float64 {
			return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
		}
		quick(50, 0) // warm up
		base := quick(400, 0)

		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var running sync.WaitGroup
		running.Add(8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				first := true
				for ctx.Err() == nil {
					ep := s.reset(b, "west")
					if first {
						running.Done()
						first = false
					}
					c, stop := context.WithTimeout(ctx, time.Minute)
					s.c.Env.Step(c, &pb.StepRequest{Token: ep.Token, Action: submit("SELECT count(*) FROM t a, t b, t c")})
					stop()
				}
			}()
		}
		running.Wait()
		// 15 s: each slow query ends at its 5 s limit and is submitted again,
		// so new slow queries keep passing through the fast lane meanwhile.
		loaded := quick(400, 15*time.Second)
		cancel()
		wg.Wait()
		b.ReportMetric(pct(base, 0.5), "idle-p50-ms")
		b.ReportMetric(pct(base, 0.99), "idle-p99-ms")
		b.ReportMetric(pct(loaded, 0.5), "loaded-p50-ms")
		b.ReportMetric(pct(loaded, 0.99), "loaded-p99-ms")
		b.ReportMetric(float64(len(loaded)), "loaded-steps")
		s.stop(b)
	}
}

// pgMemoryAttacks are issue 25's memory attacks on the PostgreSQL paths:
// one Query SQL that took a backend to 1.78 GB, and one on the Python-test
// path that took the test worker from 37 MB to 1.03 GB.
var pgMemoryAttacks = []struct{ name, task, sql string }{
	{"query-string_agg", "q-0", "SELECT length(string_agg(repeat('a', 1000000), '')), length(string_agg(repeat('b', 1000000), '')), " +
		"length(string_agg(repeat('c', 1000000), '')) FROM generate_series(1, 300)"},
	{"python-repeat", "mt-0", "SELECT repeat('x', 200000000) FROM generate_series(1, 4)"},
	{"python-jsonb", "mt-0", "SELECT (repeat('[', 5000) || repeat(']', 5000))::jsonb"},
}

// BenchmarkPostgresAttackMemory: each memory attack, three times, against
// a real server and PostgreSQL. Reports, per attack, the most a backend of
// the policy role and the most a Python test worker grew over their
// resident memory when first seen (goals: 256 MiB and 512 MiB). With
// AVTGYM_BIN (an older build, to measure "before") the default policy role
// is used.
func BenchmarkPostgresAttackMemory(b *testing.B) {
	role, watch := "avtgym_bench", "avtgym_bench"
	if os.Getenv("AVTGYM_BIN") != "" {
		role, watch = "", "avtgym_policy"
	}
	for range b.N {
		for _, a := range pgMemoryAttacks {
			// A server of its own per attack, so that no peak carries over
			// in a backend or worker that lives on.
			s := startPG(b, role, 1, nil, "--statement-timeout", "30s")
			s.pgAlive(b, 0) // the workers and the backends exist
			w := watchPeaks(b, s, watch)
			for range 3 {
				s.play(b, a.task, 0, a.sql)
			}
			backend, worker := w.stop()
			b.ReportMetric(float64(backend)/(1<<20), a.name+"-backend-MiB")
			b.ReportMetric(float64(worker)/(1<<20), a.name+"-worker-MiB")
			s.stop(b)
		}
	}
}

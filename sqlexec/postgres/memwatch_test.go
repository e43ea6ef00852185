package postgres

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"avtgym/sqlexec"
)

// memoryAttacks are issue 25's queries that take a backend far past any
// reasonable size (1.78 GB for the first) while work_mem bounds nothing.
var memoryAttacks = map[string]string{
	"three string_agg of repeat over 300 rows": "SELECT length(string_agg(repeat('a', 1000000), '')), length(string_agg(repeat('b', 1000000), '')), " +
		"length(string_agg(repeat('c', 1000000), '')) FROM generate_series(1, 300)",
	"one 900 MB value":         "SELECT length(repeat('x', 900000000))",
	"an array of large values": "SELECT cardinality(array_agg(repeat('x', 1000000))) FROM generate_series(1, 600)",
}

// peakOver polls process pid's VmHWM until stop is closed and returns how
// far its peak resident set rose over what it was at the start.
func peakOver(t *testing.T, pid int, stop <-chan struct{}) <-chan int64 {
	t.Helper()
	read := func(field string) int64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return -1
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			if v, ok := bytes.CutPrefix(line, []byte(field+":")); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(string(v)), " kB"), 10, 64)
				return kb << 10
			}
		}
		return -1
	}
	idle := read("VmRSS")
	if idle < 0 {
		t.Fatalf("cannot read /proc/%d/status", pid)
	}
	out := make(chan int64, 1)
	go func() {
		var peak int64
		for {
			if h := read("VmHWM"); h > peak {
				peak = h
			}
			select {
			case <-stop:
				out <- peak - idle
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return out
}

// TestMemoryBoundOnQueries: each attack is the policy's KindTooMuchMemory,
// canceled before its backend grew by 256 MiB (issue 25's pass condition),
// and the database serves the next query.
func TestMemoryBoundOnQueries(t *testing.T) {
	s, db0 := harbor(t)
	if s.mw == nil {
		t.Fatalf("the memory watch is off on a local server: %v", s.Warnings())
	}
	ctx := context.Background()
	db, err := s.Open(ctx, db0.Name(), Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	before := s.MemoryCancels()
	for name, sql := range memoryAttacks {
		t.Run(name, func(t *testing.T) {
			res, err := db.Query(ctx, "SELECT pg_backend_pid()", sqlexec.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			pid := int(res.Rows[0][0].(int64))
			stop := make(chan struct{})
			peak := peakOver(t, pid, stop)
			lim := sqlexec.DefaultLimits()
			lim.Timeout = time.Minute // the memory bound, not the time limit, must stop it
			_, err = db.Query(ctx, sql, lim)
			close(stop)
			grown := <-peak
			if sqlexec.KindOf(err) != sqlexec.KindTooMuchMemory || !strings.Contains(err.Error(), "MiB of memory") {
				t.Errorf("%v (kind %v), want KindTooMuchMemory", err, sqlexec.KindOf(err))
			}
			t.Logf("the backend grew by %d MiB at most", grown>>20)
			if grown > 256<<20 {
				t.Errorf("the backend grew by %d MiB, past 256 MiB", grown>>20)
			}
			if res, err := db.Query(ctx, "SELECT count(*) FROM berths", sqlexec.DefaultLimits()); err != nil || len(res.Rows) != 1 {
				t.Fatalf("the next query: %v", err)
			}
		})
	}
	if n := s.MemoryCancels() - before; n != int64(len(memoryAttacks)) {
		t.Errorf("MemoryCancels rose by %d, want %d", n, len(memoryAttacks))
	}
	// A query within the bound is untouched.
	if _, err := db.Query(ctx, "SELECT length(string_agg(repeat('a', 1000), '')) FROM generate_series(1, 1000)", sqlexec.DefaultLimits()); err != nil {
		t.Errorf("a query within the bound: %v", err)
	}
}

// TestMemoryBoundOnManagementJobs: the same on a private copy, through the
// Go pipeline and through a PyRunner's own session.
func TestMemoryBoundOnManagementJobs(t *testing.T) {
	s, d := openStateful(t, StatefulOptions{Clones: 1, Python: newGoRunner(mgmtTasks(t))})
	if s.mw == nil {
		t.Fatal("the memory watch is off on a local server")
	}
	ctx := context.Background()
	sql := "SELECT length(string_agg(repeat('a', 1000000), '')) AS a, length(string_agg(repeat('b', 1000000), '')) AS b FROM generate_series(1, 300)"
	j := sqlexec.Job{Key: "memory", Predicted: "CREATE TABLE zz AS " + sql, Reference: []string{"SELECT 1"},
		Checks: []string{"SELECT count(*) FROM berths"}, Policy: sqlexec.DefaultPolicy(), Limits: jobLimits()}
	j.Limits.Timeout = time.Minute
	v, err := d.Verify(ctx, j)
	if err != nil || v.Success || sqlexec.KindOf(v.Err) != sqlexec.KindTooMuchMemory {
		t.Errorf("the Go pipeline: %+v, %v; want the policy's KindTooMuchMemory", v, err)
	}
	var m1 mgmtTask
	for _, m := range mgmtTasks(t) {
		if m.id == "harbor_M_1" {
			m1 = m
		}
	}
	pj := m1.pyJob(sql)
	pj.Limits.Timeout = time.Minute
	v, err = d.Verify(ctx, pj)
	if err != nil || v.Success || sqlexec.KindOf(v.Err) != sqlexec.KindTooMuchMemory {
		t.Errorf("a PyRunner's session: %+v, %v; want the policy's KindTooMuchMemory", v, err)
	}
	// Both copies serve the next job.
	mustVerify(t, d, m1.pyJob(strings.Join(m1.sol, ";\n")), true)
	mustVerify(t, d, m1.checksJob(strings.Join(m1.sol, ";\n")), true)
}

// TestMemWatchNeedsALocalBackend: a process title that is not the role's
// backend on the database is not watched.
func TestMemWatchNeedsALocalBackend(t *testing.T) {
	dir := t.TempDir()
	w := newMemWatch(1 << 20)
	w.procDir = dir
	var signaled []int // the fake backends are no real processes: record, do not send
	w.signal = func(pid int) error { signaled = append(signaled, pid); return nil }
	write := func(pid int, title string, statm string) {
		os.MkdirAll(fmt.Sprintf("%s/%d", dir, pid), 0o755)
		os.WriteFile(fmt.Sprintf("%s/%d/cmdline", dir, pid), []byte(strings.ReplaceAll(title, " ", "\x00")), 0o644)
		os.WriteFile(fmt.Sprintf("%s/%d/statm", dir, pid), []byte(statm), 0o644)
	}
	write(10, "postgres: avtgym_policy harbor 127.0.0.1(5000) idle", "1000 300 100 1 0 200 0")
	write(11, "/usr/bin/vim postgres: avtgym_policy harbor", "1000 300 100 1 0 200 0")
	write(12, "postgres: someone_else harbor 127.0.0.1(5000) idle", "1000 300 100 1 0 200 0")
	for pid, want := range map[int]bool{10: true, 11: false, 12: false, 13: false} {
		if got := w.isBackend(pid, "avtgym_policy", "harbor"); got != want {
			t.Errorf("pid %d: isBackend %v, want %v", pid, got, want)
		}
	}
	if a, ok := w.anon(10); !ok || a != 200*w.page {
		t.Errorf("anon = %d, %v; want 200 pages", a, ok)
	}
	// The watch cancels once past the limit, measured from the start.
	var canceled atomic.Int32
	x := w.watch(10, func() { canceled.Add(1) })
	w.check(x)
	write(10, "postgres: avtgym_policy harbor 127.0.0.1(5000) active", fmt.Sprintf("9000 %d 100 1 0 200 0", 300+(2<<20)/w.page))
	w.check(x)
	w.check(x)
	deadline := time.Now().Add(10 * time.Second) // the cancel runs on its own goroutine
	for canceled.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if !w.done(x) || canceled.Load() != 1 || w.fired.Load() != 1 {
		t.Errorf("over %v, canceled %d times, fired %d: want one cancel", x.over.Load(), canceled.Load(), w.fired.Load())
	}
	if len(signaled) != 1 || signaled[0] != 10 {
		t.Errorf("signaled %v, want SIGINT to backend 10 once, beside the cancel request", signaled)
	}
}

// BenchmarkMemWatchOverhead runs benchSQL through the engine with the
// memory watch and without it, alternately (so that a busy machine slows
// both alike), and reports each one's time per query and their ratio.
func BenchmarkMemWatchOverhead(b *testing.B) {
	s, db := harbor(b)
	if s.mw == nil {
		b.Skip("the memory watch is off (the server's backends are not on this machine)")
	}
	off := *db
	off.mw = nil
	ctx := context.Background()
	lim := sqlexec.DefaultLimits()
	var on, without time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := db.Query(ctx, benchSQL, lim); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := off.Query(ctx, benchSQL, lim); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		on += t1.Sub(t0)
		without += t2.Sub(t1)
	}
	b.ReportMetric(float64(on.Nanoseconds())/float64(b.N), "watched-ns/op")
	b.ReportMetric(float64(without.Nanoseconds())/float64(b.N), "unwatched-ns/op")
	b.ReportMetric(float64(on)/float64(without), "watched/unwatched")
}

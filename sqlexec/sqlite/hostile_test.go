package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/internal/filetree"
	"avtgym/sqlexec"
)

// TestHostileQueries replays the queries that once exhausted the server's
// memory or ran past their deadline: each must end with the kind that
// scores it as the policy's failure, before the work it would have done,
// the database files must not change, and the engine must keep serving.
func TestHostileQueries(t *testing.T) {
	dir, path := build(t, testScript)
	db := open(t, path, Options{})
	before := filetree.MustSums(t, dir)
	series := func(n int, sel string) string {
		return fmt.Sprintf("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < %d) SELECT %s FROM c", n, sel)
	}
	many := func(expr string, n int) string { return strings.TrimSuffix(strings.Repeat(expr+",", n), ",") }
	cases := []struct {
		name string
		sql  string
		kind sqlexec.ErrorKind
	}{
		// Three 1 GB zeroblobs once made the driver copy 3 GB into Go.
		{"zeroblobs of 1e9", "SELECT zeroblob(1000000000), zeroblob(1000000000), zeroblob(1000000000)", sqlexec.KindTooManyBytes},
		{"randomblob of 1e9", "SELECT randomblob(1000000000)", sqlexec.KindTooManyBytes},
		{"lengths of 3e8 randomblobs", "SELECT " + many("length(randomblob(300000000))", 12), sqlexec.KindTooManyBytes},
		{"printf of 2e9 characters", "SELECT printf('%.*c', 2000000000, 'x')", sqlexec.KindTooManyBytes},
		{"group_concat past the length limit", series(300000, "group_concat(hex(randomblob(100)))"), sqlexec.KindTooManyBytes},
		// Each value fits the length limit; together they would not fit in memory.
		{"2000 randomblobs of 8 MB in one row", "SELECT " + many("randomblob(8000000)", 2000), sqlexec.KindTooMuchMemory},
		{"2000 zeroblobs of 8 MB in one row", "SELECT " + many("zeroblob(8000000)", 2000), sqlexec.KindTooMuchMemory},
		// Sizes are read before values: a row that does not fit is never copied.
		{"one row past the byte cap", "SELECT zeroblob(5000000), zeroblob(5000000)", sqlexec.KindTooManyBytes},
		{"many NULL cells", series(10000, many("NULL", 2000)), sqlexec.KindTooManyBytes},
		{"more columns than allowed", "SELECT " + many("1", maxColumns+1), sqlexec.KindSyntax},
		{"NUL byte", "SELECT 1;\x00 DELETE FROM orders", sqlexec.KindSyntax},
		{"deep nesting", "SELECT " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000), sqlexec.KindSyntax},
		// The chain that crashed libpg_query (issue 25): SQLite's parser
		// refuses it at SQLITE_LIMIT_EXPR_DEPTH.
		{"30,000 chained additions", "SELECT 1" + strings.Repeat("+1", 30000), sqlexec.KindSyntax},
		{"30,000 chained concatenations", "SELECT 'a'" + strings.Repeat("||'a'", 30000), sqlexec.KindSyntax},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := db.Query(context.Background(), tc.sql, sqlexec.DefaultLimits())
			if k := sqlexec.KindOf(err); k != tc.kind {
				t.Fatalf("got %v (kind %v), want kind %v", err, k, tc.kind)
			}
			res, err := db.Query(context.Background(), "SELECT count(*) FROM customers", sqlexec.DefaultLimits())
			if err != nil || res.Rows[0][0] != int64(4) {
				t.Fatalf("the engine does not serve afterwards: %v, %v", res, err)
			}
		})
	}
	if after := filetree.MustSums(t, dir); !reflect.DeepEqual(before, after) {
		t.Errorf("files changed: before %v, after %v", before, after)
	}
}

// TestMemoryIsPerQuery: a query's memory limit counts only what SQLite
// allocates for that query's connection, so a query near its limit does not
// make another one fail.
func TestMemoryIsPerQuery(t *testing.T) {
	_, path := build(t, testScript)
	db := open(t, path, Options{})
	lim := sqlexec.DefaultLimits()
	lim.MaxMemory = 16 << 20
	// Each of these uses several MB of SQLite memory: under the limit alone,
	// and (if memory were shared) over it when run three at a time.
	q := "SELECT length(hex(randomblob(1500000)))"
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				res, err := db.Query(context.Background(), q, lim)
				if err != nil {
					errs <- err
					return
				}
				if res.Rows[0][0] != int64(3_000_000) {
					errs <- fmt.Errorf("length %v", res.Rows[0][0])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestRawHandle guards the one place that reads the driver's unexported
// connection handle.
func TestRawHandle(t *testing.T) {
	_, path := build(t, testScript)
	db := open(t, path, Options{})
	conn, err := db.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		rc := dc.(*roConn)
		h, err := rawDB(rc.c)
		if err != nil {
			return err
		}
		if h != rc.cc.db {
			return fmt.Errorf("handle %p, connection state has %p", h, rc.cc.db)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Allocations are charged: a tiny memory limit stops even a small query.
	_, err = db.Query(context.Background(), "SELECT * FROM customers ORDER BY name", sqlexec.Limits{MaxMemory: 512})
	if sqlexec.KindOf(err) != sqlexec.KindTooMuchMemory {
		t.Fatalf("a 512-byte memory limit: got %v, want too_much_memory", err)
	}
	if accountingErr != nil {
		t.Fatal(accountingErr)
	}
}

// slowCount runs for a few hundred milliseconds of CPU and has a known result.
const slowCount = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 2000000) SELECT count(*) FROM c"

func TestLanesDemoteSlowQueries(t *testing.T) {
	_, path := build(t, testScript)
	l := sqlexec.NewLanes(sqlexec.LaneOptions{Fast: 2, Slow: 1, Slice: 20 * time.Millisecond, SlowThread: LowerThreadPriority})
	db := sqlexec.Scheduled(open(t, path, Options{}), l)
	ctx := context.Background()

	res, err := db.Query(ctx, "SELECT count(*) FROM orders", sqlexec.DefaultLimits())
	if err != nil || res.Rows[0][0] != int64(4) {
		t.Fatalf("quick query: %v, %v", res, err)
	}
	if st := l.Stats(); st.Demoted != 0 {
		t.Fatalf("a quick query was demoted: %+v", st)
	}
	// The slow lane runs at the lowest CPU priority: on a machine whose
	// cores other processes keep busy it gets a sliver of CPU, so its
	// limit (CPU time, with a wall-clock backstop of three times it) is
	// generous here; the test is about the demotion, not the time.
	slow := sqlexec.DefaultLimits()
	slow.Timeout = 2 * time.Minute
	res, err = db.Query(ctx, slowCount, slow)
	if err != nil || res.Rows[0][0] != int64(2000000) {
		t.Fatalf("slow query: %v, %v", res, err)
	}
	if st := l.Stats(); st.Demoted != 1 {
		t.Fatalf("the slow query was not demoted once: %+v", st)
	}
	// A query that runs out of time in the slow lane reports its whole limit.
	lim := sqlexec.DefaultLimits()
	lim.Timeout = 200 * time.Millisecond
	_, err = db.Query(ctx, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c", lim)
	if sqlexec.KindOf(err) != sqlexec.KindTimeout || !strings.Contains(err.Error(), "200ms") {
		t.Fatalf("endless query: got %v, want a timeout naming 200ms", err)
	}
}

// TestLanesKeepQuickQueriesGoing: while slow queries fill the slow lane and
// more wait for it, quick queries still run in the fast lane and finish
// first. (How long they take is measured by the hostile-load benchmark.)
func TestLanesKeepQuickQueriesGoing(t *testing.T) {
	_, path := build(t, testScript)
	l := sqlexec.NewLanes(sqlexec.LaneOptions{Fast: 2, Slow: 2, Slice: 20 * time.Millisecond, Wait: time.Minute, SlowThread: LowerThreadPriority})
	db := sqlexec.Scheduled(open(t, path, Options{}), l)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	endless := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"
	lim := sqlexec.DefaultLimits()
	lim.Timeout = time.Hour // they run until canceled
	var hostile sync.WaitGroup
	for range 6 {
		hostile.Add(1)
		go func() {
			defer hostile.Done()
			db.Query(ctx, endless, lim)
		}()
	}
	// Wait until the slow lane is full.
	for l.Stats().SlowRunning < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 50 {
		res, err := db.Query(context.Background(), "SELECT name FROM customers WHERE id = 2", sqlexec.DefaultLimits())
		if err != nil || res.Rows[0][0] != "Bob" {
			t.Fatalf("quick query %d during the slow ones: %v, %v", i, res, err)
		}
	}
	if st := l.Stats(); st.SlowRunning != 2 {
		t.Fatalf("the slow queries are no longer running: %+v", st)
	}
	cancel()
	hostile.Wait()
}

func TestLanesBusy(t *testing.T) {
	_, path := build(t, testScript)
	l := sqlexec.NewLanes(sqlexec.LaneOptions{Fast: 1, Slow: 1, Slice: 10 * time.Millisecond, Wait: 50 * time.Millisecond})
	db := sqlexec.Scheduled(open(t, path, Options{}), l)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lim := sqlexec.DefaultLimits()
	lim.Timeout = time.Hour
	done := make(chan error, 1)
	go func() {
		_, err := db.Query(ctx, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c", lim)
		done <- err
	}()
	for l.Stats().SlowRunning < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	_, err := db.Query(context.Background(), slowCount, lim)
	if sqlexec.KindOf(err) != sqlexec.KindBusy {
		t.Fatalf("a second slow query with the slow lane full: got %v, want busy", err)
	}
	if l.Stats().Busy != 1 {
		t.Fatalf("stats %+v", l.Stats())
	}
	cancel()
	if err := <-done; sqlexec.KindOf(err) != sqlexec.KindUnavailable {
		t.Fatalf("canceled slow query: got %v, want unavailable", err)
	}
}

// TestNoFilesOutsideTmp: even a query that sorts more than fits in memory
// (SQLite spills to temporary files) creates nothing beside the database;
// temporary files live in TMPDIR and are gone afterwards.
func TestNoFilesOutsideTmp(t *testing.T) {
	dir, path := build(t, testScript)
	tmp := t.TempDir()
	t.Setenv("SQLITE_TMPDIR", tmp)
	db := open(t, path, Options{})
	before := filetree.MustSums(t, dir)
	res, err := db.Query(context.Background(),
		"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 300000) SELECT x FROM c ORDER BY randomblob(16) LIMIT 3",
		sqlexec.DefaultLimits())
	if err != nil || len(res.Rows) != 3 {
		t.Fatalf("%v, %v", res, err)
	}
	if after := filetree.MustSums(t, dir); !reflect.DeepEqual(before, after) {
		t.Errorf("files beside the database changed: %v -> %v", before, after)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temporary files left in %s: %v", tmp, ents)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("files beside the database: %v", ents)
	}
}

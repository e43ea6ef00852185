package hostile

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"avtgym/internal/filetree"
	pb "avtgym/proto/avtgym/v1"
)

func many(expr string, n int) string { return strings.TrimSuffix(strings.Repeat(expr+",", n), ",") }

// hostileSQL are policy submissions meant to take the server down. Each is
// the policy's failure: the episode ends TERMINATED with outcome 0 and a
// feedback turn that names the limit (want).
var hostileSQL = []struct{ name, sql, want string }{
	{"three 1 GB zeroblobs", "SELECT zeroblob(1000000000), zeroblob(1000000000), zeroblob(1000000000)", "byte cap"},
	{"a 1 GB randomblob", "SELECT randomblob(1000000000)", "byte cap"},
	{"twelve lengths of 300 MB randomblobs", "SELECT " + many("length(randomblob(300000000))", 12), "byte cap"},
	{"2000 columns of 8 MB randomblobs", "SELECT " + many("randomblob(8000000)", 2000), "memory limit"},
	{"a million NULL cells", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 1000) SELECT " + many("NULL", 1000) + " FROM c", "byte cap"},
	{"a 2 GB printf", "SELECT printf('%.*c', 2000000000, 'x')", "byte cap"},
	{"a cross join without end", "SELECT count(*) FROM t a, t b, t c", "time limit"},
	{"an endless recursive CTE", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT max(x) FROM c", "time limit"},
	{"a sort that spills to disk", "SELECT a.id FROM t a, t b ORDER BY randomblob(32) LIMIT 1", "time limit"},
	{"more rows than allowed", "SELECT a.id FROM t a, t b", "row cap"},
	{"writes", "DELETE FROM t", "denied"},
	{"writes behind a read", "SELECT 1; DROP TABLE t", "denied"},
	{"ATTACH", "ATTACH DATABASE 'x.sqlite' AS x", "denied"},
	{"VACUUM INTO", "VACUUM INTO 'copy.sqlite'", "VACUUM"},
	{"a writing pragma", "PRAGMA journal_mode = WAL", "denied"},
	{"load_extension", "SELECT load_extension('/tmp/x.so')", "denied"},
	{"a NUL byte", "SELECT 1;\x00DROP TABLE t", "NUL"},
	{"deep nesting", "SELECT " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000), "compile"},
	{"invalid UTF-8", "SELECT '\xff\xfe'", "UTF-8"},
	{"longer than the SQL limit", "SELECT 1 -- " + strings.Repeat("x", 300<<10), "longer"},
}

func TestHostileSQL(t *testing.T) {
	s := start(t, "--statement-timeout", "1s")
	before := filetree.MustSums(t, s.root, s.tmp)
	for _, tc := range hostileSQL {
		t.Run(tc.name, func(t *testing.T) {
			ep := s.reset(t, "west")
			r, err := s.tryStep(ep.GetToken(), submit(tc.sql))
			if err != nil {
				t.Fatalf("step: %v (reason %s)", err, reason(err))
			}
			if !r.GetDone() || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.GetReward().GetValue() != 0 {
				t.Fatalf("want a finished, scored, failed episode; got status %v reward %v done %v", r.GetStatus(), r.GetReward(), r.GetDone())
			}
			if fb := feedback(r); !strings.Contains(fb, tc.want) {
				t.Errorf("feedback %q does not mention %q", fb, tc.want)
			}
			s.alive(t)
		})
	}
	s.untouched(t, before)
}

// TestHostileSQLConcurrently: sixteen clients submit the worst SQL at once,
// again and again, while a seventeenth plays normal episodes. Every
// hostile episode is scored (or, when the verifier is saturated, refused
// with a retryable VERIFIER_BUSY), every normal one earns its reward, and
// the process stays within its memory limits (it would be killed
// otherwise).
func TestHostileSQLConcurrently(t *testing.T) {
	s := start(t, "--statement-timeout", "500ms", "--sql-wait", "2s")
	before := filetree.MustSums(t, s.root, s.tmp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	scored, busy := 0, 0
	errs := make(chan error, 32)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ctx.Err() == nil && j < 6; j++ {
				tc := hostileSQL[(i+j)%10]
				ep := s.reset(t, "west")
				r, err := s.tryStep(ep.GetToken(), submit(tc.sql))
				switch {
				case err != nil && code(err) == codes.ResourceExhausted && reason(err) == "VERIFIER_BUSY":
					mu.Lock()
					busy++
					mu.Unlock()
				case err != nil:
					errs <- fmt.Errorf("%s: %v", tc.name, err)
					return
				case r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.GetReward().GetValue() != 0:
					errs <- fmt.Errorf("%s: status %v reward %v", tc.name, r.GetStatus(), r.GetReward())
					return
				default:
					mu.Lock()
					scored++
					mu.Unlock()
				}
			}
		}()
	}
	normal := 0
	for ; normal < 40; normal++ {
		ep := s.reset(t, "count")
		r := s.step(t, ep, submit("SELECT COUNT(id) FROM t"))
		if r.GetReward().GetValue() != 1 {
			t.Fatalf("normal episode %d during the attack: %v", normal, r)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("hostile episodes: %d scored, %d refused as VERIFIER_BUSY; %d normal episodes; peak RSS %d MiB", scored, busy, normal, s.peakRSS(t)>>20)
	if scored == 0 {
		t.Error("no hostile episode was scored")
	}
	s.alive(t)
	s.untouched(t, before)
}

// TestSlowQueriesShareTheDatabase: while eight slow queries run on the
// database, quick steps on the same database keep succeeding (the slow
// ones moved to the slow lane), and every slow one ends scored as a
// timeout or refused as VERIFIER_BUSY, never as ERROR.
func TestSlowQueriesShareTheDatabase(t *testing.T) {
	s := start(t, "--statement-timeout", "2s", "--sql-wait", "3s")
	var wg sync.WaitGroup
	results := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ep := s.reset(t, "west")
			r, err := s.tryStep(ep.GetToken(), submit("SELECT count(*) FROM t a, t b, t c"))
			switch {
			case err != nil && reason(err) == "VERIFIER_BUSY":
				results <- "busy"
			case err != nil:
				results <- "error: " + err.Error()
			case r.GetStatus() == pb.EpisodeStatus_EPISODE_STATUS_TERMINATED && strings.Contains(feedback(r), "time limit"):
				results <- "timeout"
			default:
				results <- fmt.Sprintf("unexpected: %v", r)
			}
		}()
	}
	// Quick steps while the slow ones run (they take seconds; these take
	// milliseconds, and are checked for their result, not their speed).
	deadline := time.Now().Add(time.Minute)
	quick := 0
	for len(results) < 8 && time.Now().Before(deadline) && quick < 200 {
		ep := s.reset(t, "count")
		if r := s.step(t, ep, submit("SELECT count(*) FROM t WHERE id > 0")); r.GetReward().GetValue() != 1 {
			t.Fatalf("quick step %d: %v", quick, r)
		}
		quick++
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r != "timeout" && r != "busy" {
			t.Errorf("slow query: %s", r)
		}
	}
	t.Logf("%d quick steps succeeded while the slow queries ran", quick)
	s.alive(t)
}

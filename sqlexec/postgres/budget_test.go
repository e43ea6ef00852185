package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"avtgym/internal/pgtest"
	"avtgym/sqlexec"
)

// budgetRole is a policy role of these tests alone, so that the
// connections counted are theirs (other test binaries share the server).
const budgetRole = "avtgym_budget"

// TestBudgetChecksTheServersLimits: a budget the role or the server cannot
// hold fails at start, naming the flag to change.
func TestBudgetChecksTheServersLimits(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	for _, tc := range []struct {
		cfg  Config
		want []string
	}{
		{Config{Connections: 100000}, []string{"--postgres-connections", "CONNECTION LIMIT"}},
		{Config{ConnectionLimit: 6, Connections: 8}, []string{"--postgres-connections", "CONNECTION LIMIT is 6", "--postgres-role-connections"}},
		{Config{ConnectionLimit: 100000, Connections: 100000}, []string{"--postgres-connections", "max_connections"}},
	} {
		tc.cfg.AdminURL, tc.cfg.Role = url, budgetRole
		s, err := ConnectConfig(ctx, tc.cfg)
		if err == nil {
			s.Close()
			t.Errorf("%+v: no error", tc.cfg)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: %v does not say %q", tc.cfg, err, w)
			}
		}
	}
}

// TestBudgetBoundsEveryConnection: issue 25's production shape in small:
// more copies and pool connections asked for than the budget holds. The
// copies are cut to what fits (with a warning), the queries of three
// databases share the rest, and the role never holds more connections
// than the budget, while every query succeeds.
func TestBudgetBoundsEveryConnection(t *testing.T) {
	const total = 10
	ctx := context.Background()
	s, err := ConnectConfig(ctx, Config{AdminURL: pgtest.URL(t), Role: budgetRole, Connections: total, ConnectionLimit: 40})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close) // after uniqueCorpus's cleanup, which needs the server
	corpus := uniqueCorpus(t, s)
	var dbs []*DB
	for i := range 3 {
		name, err := s.EnsureDatabase(ctx, corpus, fmt.Sprintf("d%d", i), Script("d.sql", "CREATE TABLE t (x int); INSERT INTO t SELECT generate_series(1, 10);"))
		if err != nil {
			t.Fatal(err)
		}
		db, err := s.Open(ctx, name, Options{MaxConns: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		dbs = append(dbs, db)
	}
	d, err := s.OpenStateful(ctx, dbs[0].Name(), StatefulOptions{Clones: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if n := len(d.CloneNames()); n != total-queryFloor {
		t.Errorf("%d copies, want %d (the budget less the query floor)", n, total-queryFloor)
	}
	if !strings.Contains(strings.Join(s.Warnings(), "\n"), "private copies instead of 16") {
		t.Errorf("no warning about the copies cut: %v", s.Warnings())
	}
	var peak atomic.Int64
	stop := make(chan struct{})
	var watcher sync.WaitGroup
	watcher.Add(1)
	go func() {
		defer watcher.Done()
		for {
			var n int64
			if err := s.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", budgetRole).Scan(&n); err == nil && n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, 48)
	for i := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := dbs[i%3].Query(ctx, "SELECT count(*) FROM t, pg_sleep(0.02)", sqlexec.Limits{Timeout: time.Minute})
			if err == nil && res.Rows[0][0] != int64(10) {
				err = fmt.Errorf("got %v", res.Rows)
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(stop)
	watcher.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("peak %d connections of the role; budget %+v", peak.Load(), s.Budget())
	if p := peak.Load(); p > total || p < int64(total-queryFloor) {
		t.Errorf("the role held up to %d connections; the budget is %d (the copies alone hold %d)", p, total, total-queryFloor)
	}
	if b := s.Budget(); b.Total != total || b.Reserved != total-queryFloor || b.Pools > queryFloor {
		t.Errorf("budget %+v", b)
	}
}

// TestReplicasSharePasswordKey: replicas re-assert the policy role's
// password at start. One with another password key locks the first one's
// new connections out (issue 25: Python-tested episodes failed 6/6 once a
// second replica started with a password-less administrator URL); with
// the same key both connect.
func TestReplicasSharePasswordKey(t *testing.T) {
	ctx := context.Background()
	const role = "avtgym_pwkey"
	connect := func(key string) *Server {
		t.Helper()
		s, err := ConnectConfig(ctx, Config{AdminURL: pgtest.URL(t), Role: role, PasswordKey: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	first := connect("key one")
	corpus := uniqueCorpus(t, first)
	name, err := first.EnsureDatabase(ctx, corpus, "d", Script("d.sql", "CREATE TABLE t (x int);"))
	if err != nil {
		t.Fatal(err)
	}
	opens := func(s *Server) error {
		db, err := s.Open(ctx, name, Options{MaxConns: 1})
		if err == nil {
			db.Close()
		}
		return err
	}
	if err := opens(first); err != nil {
		t.Fatal(err)
	}
	connect("key two") // another key: the role's password changes
	if err := opens(first); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Errorf("after a replica with another key: %v, want the first one locked out", err)
	}
	connect("key one") // the same key again
	if err := opens(first); err != nil {
		t.Errorf("with the same key: %v", err)
	}
}

package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"avtgym/internal/pgtest"
	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

var (
	srvMu sync.Mutex
	srvs  = map[string]*Server{}
)

// server returns the package's shared Server on the test cluster.
func server(t testing.TB) *Server {
	t.Helper()
	url := pgtest.URL(t)
	srvMu.Lock()
	defer srvMu.Unlock()
	if s := srvs[url]; s != nil {
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Connect(ctx, url)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	srvs[url] = s
	return s
}

// harborDir returns the BIRD-Interact sample's harbor dumps, or skips.
func harborDir(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			dir := filepath.Join(d, "..", "shared", "data", "birdinteract-format", "lite", "postgre_table_dumps", "harbor_template")
			if _, err := os.Stat(dir); err != nil {
				t.Skipf("the BIRD-Interact sample is not at %s (it lives beside the checkout, in ../shared/data)", dir)
			}
			return dir
		}
		if filepath.Dir(d) == d {
			t.Fatal("no go.mod above the working directory")
		}
	}
}

// uniqueCorpus returns a corpus name no other test uses, and drops the
// databases made for it when the test ends.
func uniqueCorpus(t testing.TB, s *Server) string {
	t.Helper()
	b := make([]byte, 4)
	rand.Read(b)
	c := "t" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		rows, err := s.admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1 AND datname NOT LIKE '%\\_t'", namePrefix+c+"\\_%")
		if err != nil {
			t.Errorf("listing databases: %v", err)
			return
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("listing databases: %v", err)
		}
		for _, n := range names {
			if err := s.DropDatabase(ctx, n); err != nil {
				t.Errorf("dropping %s: %v", n, err)
			}
		}
	})
	return c
}

var (
	harborOnce sync.Once
	harborName string
	harborErr  error
)

// harbor returns a DB on the harbor sample (loaded once per test binary).
func harbor(t testing.TB) (*Server, *DB) {
	t.Helper()
	dir := harborDir(t)
	s := server(t)
	harborOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		harborName, harborErr = s.EnsureDatabase(ctx, "test", "harbor", DumpDir(dir))
	})
	if harborErr != nil {
		t.Fatalf("EnsureDatabase: %v", harborErr)
	}
	db, err := s.Open(context.Background(), harborName, Options{MaxConns: 8})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return s, db
}

// query runs sql with the default limits and fails the test on an error.
func mustQuery(t testing.TB, db *DB, sql string) *sqlexec.Result {
	t.Helper()
	res, err := db.Query(context.Background(), sql, sqlexec.DefaultLimits())
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return res
}

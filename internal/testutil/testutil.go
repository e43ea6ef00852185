// Package testutil provides what the end-to-end tests of several packages
// share: a tiny corpus written to a temporary directory, and a complete
// server started through package app on a real loopback TCP port.
package testutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"avtgym/app"
	"avtgym/client"
)

// TinyScript builds the tiny corpus's database.
const TinyScript = `
CREATE TABLE sales (id INTEGER PRIMARY KEY, region TEXT NOT NULL, amount REAL NOT NULL, year INTEGER NOT NULL);
INSERT INTO sales VALUES
 (1,'West',500,2023),(2,'West',20,2024),(3,'West',30,2024),(4,'West',25,2024),
 (5,'East',900,2024),(6,'East',10,2023),
 (7,'North',100,2024),(8,'North',110,2024),(9,'North',120,2023),(10,'North',130,2024),
 (11,'South',5,2023),(12,'South',700,2023),(13,'North',15,2023);
`

// TinyManifest is the tiny corpus's corpus.json.
const TinyManifest = `{
  "name": "tiny",
  "description": "a tiny corpus for tests",
  "databases": [{
    "id": "mini", "engine": "sqlite", "script": "mini.sql",
    "column_meanings": {"sales.amount": "sale amount in dollars"},
    "knowledge": [
      {"id": "k-strong", "name": "strong market", "definition": "a region whose 2024 sales total more than 200 dollars"},
      {"id": "k-fiscal", "name": "fiscal year", "definition": "the calendar year"}
    ]
  }]
}`

// TinyRecords are the tiny corpus's records: an AVT with two
// interpretations (top-a, top-b), a record with two counted ambiguities
// and a non-critical one (big), a knowledge ambiguity (strong) and a
// control (count).
const TinyRecords = `{"id":"top-a","avt_id":"top","split":"train","db":"mini","request":"Which is the top region?","ambiguities":[{"term":"top region","kind":"critical","resolution":"I mean the region with the largest total sales amount.","aliases":["best region"]}],"interpretation":"by amount","reference":{"sql":"SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1"}}
{"id":"top-b","avt_id":"top","split":"train","db":"mini","request":"Which is the top region?","ambiguities":[{"term":"top region","kind":"critical","resolution":"I mean the region with the most individual sales.","aliases":["best region"]}],"interpretation":"by count","reference":{"sql":"SELECT region FROM sales GROUP BY region ORDER BY COUNT(*) DESC LIMIT 1"}}
{"id":"big","split":"dev","db":"mini","request":"List the big sales of the recent year, sorted.","ambiguities":[{"term":"big sales","kind":"critical","resolution":"Sales of 100 dollars or more."},{"term":"recent year","kind":"critical","resolution":"The year 2024."},{"term":"sorted","kind":"non_critical","resolution":"Sort by amount, largest first."}],"reference":{"sql":"SELECT id, amount FROM sales WHERE amount >= 100 AND year = 2024 ORDER BY amount DESC"}}
{"id":"strong","split":"dev","db":"mini","request":"Which regions are a strong market?","ambiguities":[{"term":"strong market","kind":"knowledge","resolution":"A strong market is a region whose 2024 sales total more than 200 dollars.","knowledge_id":"k-strong"}],"reference":{"sql":["SELECT 1","SELECT region FROM sales WHERE year = 2024 GROUP BY region HAVING SUM(amount) > 200"]}}
{"id":"count","split":"dev","db":"mini","request":"How many sales rows are there in total?","ambiguities":[],"reference":{"sql":"SELECT COUNT(*) FROM sales"}}
`

// WriteTiny writes the tiny corpus into a new directory and returns it.
// Edit hooks may change the files' contents before they are written.
func WriteTiny(t testing.TB, edit ...func(files map[string]string)) string {
	t.Helper()
	files := map[string]string{"corpus.json": TinyManifest, "mini.sql": TinyScript, "records.jsonl": TinyRecords}
	for _, e := range edit {
		e(files)
	}
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Server is a running server and a client connected to it.
type Server struct {
	App    *app.App
	Addr   string
	Client *client.Client
	stop   context.CancelFunc
	done   chan error
}

// StartServer starts a complete server through package app on a free
// loopback port, and stops it when the test ends. cfg.Listen is forced to
// 127.0.0.1:0.
func StartServer(t testing.TB, cfg app.Config) *Server {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("app.New: %v", err)
	}
	s := &Server{App: a, stop: cancel, done: make(chan error, 1)}
	ready := make(chan net.Addr, 1)
	go func() { s.done <- a.Serve(ctx, func(addr net.Addr) { ready <- addr }) }()
	select {
	case addr := <-ready:
		s.Addr = addr.String()
	case err := <-s.done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("server did not start in 20s")
	}
	c, err := client.Dial(s.Addr, client.Options{CallTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.Client = c
	t.Cleanup(func() { s.Stop(t) })
	return s
}

// Stop stops the server (idempotent).
func (s *Server) Stop(t testing.TB) {
	if s.stop == nil {
		return
	}
	s.Client.Close()
	s.stop()
	s.stop = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("serve returned %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("server did not stop in 20s")
	}
	s.App.Close()
}

// LeakCheck runs a package's tests and then fails the run if goroutines
// started during the tests are still alive after a grace period (servers
// not stopped, streams not closed). Call it from TestMain.
func LeakCheck(m *testing.M) int {
	before := runtime.NumGoroutine()
	code := m.Run()
	if code != 0 {
		return code
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		fmt.Fprintf(os.Stderr, "goroutine leak: %d goroutines before the tests, %d after\n%s\n", before, n, buf)
		return 1
	}
	return 0
}

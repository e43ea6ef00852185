package viewer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// benchDir holds the benchmarks' file; TestMain removes it.
var benchDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if benchDir != "" {
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

// bench100k is a 100k-episode record file shared by the benchmarks
// (generating it takes longer than loading it).
var bench100k = sync.OnceValue(func() string {
	dir, err := os.MkdirTemp("", "avtgym-viewer-bench-*")
	if err != nil {
		panic(err)
	}
	benchDir = dir
	path := filepath.Join(dir, "episodes.jsonl")
	writeSynthRun(&testing.B{}, path, 0, 100_000, false)
	return path
})

// BenchmarkLoad100k indexes 100k records (validation included), the
// viewer's start-up for a large run; it reports the file size and the
// summaries' heap.
func BenchmarkLoad100k(b *testing.B) {
	path := bench100k()
	st, _ := os.Stat(path)
	b.SetBytes(st.Size())
	b.ResetTimer()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		r, err := LoadRun(context.Background(), path, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Episodes) != 100_000 {
			b.Fatalf("%d episodes", len(r.Episodes))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1e6, "MB-heap-kept")
		runtime.KeepAlive(r)
		r.Close()
	}
}

// BenchmarkListPage100k serves a filtered list page of a 100k run.
func BenchmarkListPage100k(b *testing.B) {
	r, err := LoadRun(context.Background(), bench100k(), nil)
	if err != nil {
		b.Fatal(err)
	}
	v, err := New([]*Run{r}, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer v.Close()
	h := v.Handler()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodGet, "/runs/episodes?status=TERMINATED&tag=trainer/step%3D3&sort=-reward&page=7", nil)
		req.Host = "127.0.0.1:8090"
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	}
}

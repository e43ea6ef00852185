package llm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestMemoryCache(t *testing.T) {
	f := newFake(t, echo)
	cfg := fastConfig(f.url())
	cache := NewMemoryCache()
	cfg.Cache = cache
	cfg.Version = "v1"
	c := newClient(t, cfg, nil)
	ctx := context.Background()
	req := Request{Messages: userMsg("q"), Purpose: "oracle.match", CacheKey: "rec-1"}
	first, err := c.Chat(ctx, req)
	if err != nil || first.Cached {
		t.Fatalf("first: %+v, %v", first, err)
	}
	second, err := c.Chat(ctx, req)
	if err != nil || !second.Cached || second.Content != first.Content || second.PromptTokens != 11 {
		t.Fatalf("second: %+v, %v", second, err)
	}
	if f.calls.Load() != 1 {
		t.Fatalf("calls = %d, want 1", f.calls.Load())
	}
	// Everything in the key makes a different entry.
	variants := []Request{
		{Messages: userMsg("q"), Purpose: "oracle.respond", CacheKey: "rec-1"},
		{Messages: userMsg("q"), Purpose: "oracle.match", CacheKey: "rec-2"},
		{Messages: userMsg("q"), Purpose: "oracle.match", CacheKey: "rec-1", JSON: true},
		{Messages: userMsg("q"), Purpose: "oracle.match", CacheKey: "rec-1", MaxTokens: 7},
		{Messages: userMsg("q2"), Purpose: "oracle.match", CacheKey: "rec-1"},
		{Messages: []Message{{Role: "user", Content: "q"}}, Purpose: "oracle.match", CacheKey: "rec-1"},
	}
	for _, v := range variants {
		if _, err := c.Chat(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := f.calls.Load(), int64(1+len(variants)); got != want {
		t.Errorf("calls = %d, want %d", got, want)
	}
	if cache.Len() != 1+len(variants) {
		t.Errorf("cache holds %d", cache.Len())
	}
	// The key is deterministic and covers the version, model and temperature.
	k := c.cacheKey(req, "oracle.match", 0)
	if k != c.cacheKey(req, "oracle.match", 0) || len(k) != 64 {
		t.Errorf("key %q not deterministic", k)
	}
	for _, mod := range []func(*Config){
		func(c *Config) { c.Version = "v2" },
		func(c *Config) { c.Model = "other" },
		func(c *Config) { c.Temperature = 0.7 },
	} {
		cfg2 := cfg
		mod(&cfg2)
		if newClient(t, cfg2, nil).cacheKey(req, "oracle.match", 0) == k {
			t.Errorf("config change %+v keeps the key", cfg2)
		}
	}
}

func TestMemoryCacheFirstWins(t *testing.T) {
	c := NewMemoryCache()
	c.Put("k", Response{Content: "a"})
	c.Put("k", Response{Content: "b"})
	if r, _ := c.Get("k"); r.Content != "a" {
		t.Errorf("got %q", r.Content)
	}
}

func TestFileCacheReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.jsonl")
	f := newFake(t, echo)
	cache, err := OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig(f.url())
	cfg.Cache = cache
	cfg.Version = "oracle-v3"
	c := newClient(t, cfg, nil)
	var reqs []Request
	for _, q := range []string{"alpha", "béta ✓", "gamma\nwith \"quotes\"", "alpha"} {
		for _, p := range []string{"oracle.match", "oracle.respond"} {
			reqs = append(reqs, Request{Messages: userMsg(q), Purpose: p, CacheKey: "rec-" + q, JSON: p == "oracle.match"})
		}
	}
	live := make([]string, len(reqs))
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			resp, err := c.Chat(context.Background(), r)
			if err != nil {
				t.Error(err)
				return
			}
			live[i] = resp.Content
		})
	}
	wg.Wait()
	if err := cache.Close(); err != nil {
		t.Fatal(err)
	}

	// Replay with the endpoint switched off.
	cache2, err := OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	defer cache2.Close()
	if cache2.Len() != 6 {
		t.Errorf("reopened cache holds %d entries, want 6", cache2.Len())
	}
	off := cfg
	off.BaseURL = closedURL(t)
	off.Cache = cache2
	off.MaxRetries = -1
	c2 := newClient(t, off, nil)
	for i, r := range reqs {
		resp, err := c2.Chat(context.Background(), r)
		if err != nil {
			t.Fatalf("replay %d: %v", i, err)
		}
		if !resp.Cached || resp.Content != live[i] {
			t.Errorf("replay %d: cached %v, %q != %q", i, resp.Cached, resp.Content, live[i])
		}
	}
	// A request not in the cache reaches the (closed) endpoint.
	_, err = c2.Chat(context.Background(), Request{Messages: userMsg("new")})
	if KindOf(err) != KindServer {
		t.Errorf("miss with the endpoint off: %v", err)
	}
}

func TestFileCacheTruncatedLastLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.jsonl")
	good := `{"key":"a","response":{"content":"A","prompt_tokens":1,"completion_tokens":2,"model":"m"}}` + "\n" +
		"\n" +
		`{"key":"b","response":{"content":"B","prompt_tokens":1,"completion_tokens":2,"model":"m"}}` + "\n"
	if err := os.WriteFile(path, []byte(good+`{"key":"c","respo`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Len() != 2 {
		t.Fatalf("len = %d, want 2", c.Len())
	}
	if r, ok := c.Get("b"); !ok || r.Content != "B" || r.PromptTokens != 1 || r.Model != "m" {
		t.Errorf("b = %+v, %v", r, ok)
	}
	if err := c.Put("c", Response{Content: "C"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Put("a", Response{Content: "not A"}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := c.Put("d", Response{}); err != ErrCacheClosed {
		t.Errorf("Put after Close: %v", err)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), good) || strings.Contains(string(data), "respo\n") || strings.Count(string(data), "\n") != 4 {
		t.Errorf("file after the crash and one Put:\n%s", data)
	}
	c, err = OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r, _ := c.Get("c"); c.Len() != 3 || r.Content != "C" {
		t.Errorf("reopened: len %d, c = %+v", c.Len(), r)
	}
	if r, _ := c.Get("a"); r.Content != "A" {
		t.Errorf("first response not kept: %q", r.Content)
	}
}

func TestFileCacheValidLastLineWithoutNewline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.jsonl")
	os.WriteFile(path, []byte(`{"key":"a","response":{"content":"A"}}`), 0o644)
	c, err := OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	c.Put("b", Response{Content: "B"})
	c.Close()
	c, err = OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Len() != 2 {
		t.Errorf("len = %d, want 2", c.Len())
	}
}

func TestFileCacheCorruptLine(t *testing.T) {
	for name, content := range map[string]string{
		"garbage":        "{\"key\":\"a\",\"response\":{}}\nnot json\n{\"key\":\"b\",\"response\":{}}\n",
		"missing key":    "{\"key\":\"a\",\"response\":{}}\n{\"response\":{}}\n",
		"complete, last": "{\"key\":\"a\",\"response\":{}}\n{\"key\":\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache.jsonl")
			os.WriteFile(path, []byte(content), 0o644)
			_, err := OpenFileCache(path)
			if err == nil || !strings.Contains(err.Error(), "line 2") {
				t.Errorf("err = %v, want one naming line 2", err)
			}
		})
	}
}

func TestCacheWriteFailure(t *testing.T) {
	f := newFake(t, echo)
	path := filepath.Join(t.TempDir(), "cache.jsonl")
	cache, err := OpenFileCache(path)
	if err != nil {
		t.Fatal(err)
	}
	cache.Close()
	cfg := fastConfig(f.url())
	cfg.Cache = cache
	c := newClient(t, cfg, nil)
	resp, err := c.Chat(context.Background(), Request{Messages: userMsg("q")})
	if KindOf(err) != KindCache || resp == nil || resp.Content == "" {
		t.Errorf("resp %+v, err %v: want the response and a cache error", resp, err)
	}
}

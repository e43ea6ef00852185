package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestSamplingControls: the sampling controls go out only when set (an
// unset one leaves the field out of the request), the repetition penalty
// under vLLM's and llama.cpp's names, and each is part of the cache key:
// a client with other controls never reads another's replies.
func TestSamplingControls(t *testing.T) {
	var bodies []map[string]any
	f := newFake(t, func(_ int, _ wireRequest, w http.ResponseWriter, r *http.Request) {
		reply(w, "ok", 1, 1)
	})
	// The raw bodies, to tell a field left out from one sent as zero.
	raw := f.Config.Handler
	f.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		var m map[string]any
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil {
			t.Errorf("request body: %v", err)
		}
		f.mu.Lock()
		bodies = append(bodies, m)
		f.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		raw.ServeHTTP(w, r)
	})
	ask := func(cfg Config) map[string]any {
		t.Helper()
		c := newClient(t, cfg, nil)
		if _, err := c.Chat(context.Background(), Request{Messages: userMsg("q")}); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return bodies[len(bodies)-1]
	}
	plain := ask(fastConfig(f.url()))
	for _, k := range []string{"top_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "repeat_penalty", "stop"} {
		if _, ok := plain[k]; ok {
			t.Errorf("unset %s sent: %v", k, plain[k])
		}
	}
	if v, ok := plain["temperature"]; !ok || v != 0.0 {
		t.Errorf("temperature %v (sent: %v), want 0 always sent", v, ok)
	}
	cfg := fastConfig(f.url())
	cfg.Temperature, cfg.TopP, cfg.FrequencyPenalty, cfg.PresencePenalty, cfg.RepetitionPenalty = 0.7, 0.9, 0.5, -0.25, 1.1
	cfg.Stop = []string{"\n\n", "</s>"}
	set := ask(cfg)
	want := map[string]any{"temperature": 0.7, "top_p": 0.9, "frequency_penalty": 0.5, "presence_penalty": -0.25, "repetition_penalty": 1.1, "repeat_penalty": 1.1}
	for k, v := range want {
		if set[k] != v {
			t.Errorf("%s = %v, want %v", k, set[k], v)
		}
	}
	if stop, _ := set["stop"].([]any); len(stop) != 2 || stop[0] != "\n\n" || stop[1] != "</s>" {
		t.Errorf("stop = %v", set["stop"])
	}

	// The cache key: one cache, a request per setting, each a miss.
	cache := NewMemoryCache()
	base := fastConfig(f.url())
	base.Cache = cache
	variants := []func(*Config){
		func(*Config) {},
		func(c *Config) { c.TopP = 0.5 },
		func(c *Config) { c.FrequencyPenalty = 0.5 },
		func(c *Config) { c.PresencePenalty = 0.5 },
		func(c *Config) { c.RepetitionPenalty = 1.2 },
		func(c *Config) { c.Stop = []string{"END"} },
		func(c *Config) { c.Temperature = 0.3 },
	}
	for i, v := range variants {
		cfg := base
		v(&cfg)
		c := newClient(t, cfg, nil)
		r, err := c.Chat(context.Background(), Request{Messages: userMsg("same")})
		if err != nil || r.Cached {
			t.Errorf("variant %d: cached %v, err %v; want a miss", i, r != nil && r.Cached, err)
		}
		if r, err := c.Chat(context.Background(), Request{Messages: userMsg("same")}); err != nil || !r.Cached {
			t.Errorf("variant %d again: want a hit, err %v", i, err)
		}
	}
	if cache.Len() != len(variants) {
		t.Errorf("cache holds %d, want %d", cache.Len(), len(variants))
	}
}

func TestSamplingValidated(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"temperature": func(c *Config) { c.Temperature = -1 },
		"top_p":       func(c *Config) { c.TopP = 1.5 },
		"frequency":   func(c *Config) { c.FrequencyPenalty = 3 },
		"presence":    func(c *Config) { c.PresencePenalty = -3 },
		"repetition":  func(c *Config) { c.RepetitionPenalty = -1 },
		"empty stop":  func(c *Config) { c.Stop = []string{""} },
		"five stops":  func(c *Config) { c.Stop = []string{"a", "b", "c", "d", "e"} },
		"replay":      func(c *Config) { c.Replay = true },
	} {
		cfg := fastConfig("http://127.0.0.1:1/v1")
		mut(&cfg)
		if _, err := New(cfg, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestReplayAndCacheHolds: a warm cache does not make a client that was
// not asked to replay look as if it needed no endpoint (CacheHolds is
// false, Ping asks the endpoint); a replaying client answers from its
// cache, fails a miss without calling the endpoint, and its Ping needs
// none.
func TestReplayAndCacheHolds(t *testing.T) {
	f := newFake(t, echo)
	cache := NewMemoryCache()
	cfg := fastConfig(f.url())
	cfg.Cache = cache
	c := newClient(t, cfg, nil)
	if _, err := c.Chat(context.Background(), Request{Messages: userMsg("recorded")}); err != nil {
		t.Fatal(err)
	}
	if c.CacheHolds() {
		t.Error("CacheHolds for a client that does not replay")
	}
	down := cfg
	down.BaseURL, down.MaxRetries = closedURL(t), -1
	if err := newClient(t, down, nil).Ping(context.Background()); err == nil {
		t.Error("Ping of a down endpoint passed with a warm cache")
	}
	down.Replay = true
	r := newClient(t, down, nil)
	if !r.CacheHolds() || r.Ping(context.Background()) != nil {
		t.Errorf("replay: CacheHolds %v, Ping %v", r.CacheHolds(), r.Ping(context.Background()))
	}
	if resp, err := r.Chat(context.Background(), Request{Messages: userMsg("recorded")}); err != nil || !resp.Cached {
		t.Errorf("replayed call: %v", err)
	}
	calls := f.calls.Load()
	if _, err := r.Chat(context.Background(), Request{Messages: userMsg("never recorded")}); KindOf(err) != KindNotCached {
		t.Errorf("a miss in replay: %v, want %s", err, KindNotCached)
	}
	if f.calls.Load() != calls {
		t.Error("a replaying client called the endpoint")
	}
	empty := down
	empty.Cache = NewMemoryCache()
	if err := newClient(t, empty, nil).Ping(context.Background()); KindOf(err) != KindNotCached {
		t.Errorf("Ping replaying an empty cache: %v", err)
	}
}

// TestCountUnreadable: a caller's unreadable output is counted in the
// metric and in Stats.
func TestCountUnreadable(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newClient(t, fastConfig("http://127.0.0.1:1/v1"), reg)
	c.CountUnreadable("oracle", "match", "unparsed")
	c.CountUnreadable("oracle", "match", "unparsed")
	c.CountUnreadable("solver", "solve", "repeating")
	if got := metricValue(t, reg, "avtgym_llm_unreadable_total", map[string]string{"role": "oracle", "stage": "match", "reason": "unparsed"}); got != 2 {
		t.Errorf("oracle match unparsed = %v, want 2", got)
	}
	if got := metricValue(t, reg, "avtgym_llm_unreadable_total", map[string]string{"role": "solver", "stage": "solve", "reason": "repeating"}); got != 1 {
		t.Errorf("solver = %v, want 1", got)
	}
	if c.Stats().Unreadable != 3 {
		t.Errorf("Stats.Unreadable = %d", c.Stats().Unreadable)
	}
}

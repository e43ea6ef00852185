package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// fakeEndpoint is an in-process OpenAI-compatible chat completions server.
// It parses every request and hands it, numbered from 0, to handle.
type fakeEndpoint struct {
	*httptest.Server
	calls   atomic.Int64
	mu      sync.Mutex
	reqs    []wireRequest
	headers []http.Header
	release chan struct{} // closed at test end: unblocks hanging handlers
	handle  func(n int, req wireRequest, w http.ResponseWriter, r *http.Request)
}

func newFake(t *testing.T, handle func(n int, req wireRequest, w http.ResponseWriter, r *http.Request)) *fakeEndpoint {
	t.Helper()
	f := &fakeEndpoint{release: make(chan struct{}), handle: handle}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		var req wireRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad json: "+err.Error(), http.StatusBadRequest)
			return
		}
		n := int(f.calls.Add(1)) - 1
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		f.headers = append(f.headers, r.Header.Clone())
		f.mu.Unlock()
		f.handle(n, req, w, r)
	}))
	t.Cleanup(func() {
		close(f.release)
		f.Close()
	})
	return f
}

func (f *fakeEndpoint) url() string { return f.URL + "/v1" }

func (f *fakeEndpoint) requests() []wireRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]wireRequest(nil), f.reqs...)
}

// hang blocks until the client gives up or the test ends.
func (f *fakeEndpoint) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-f.release:
	}
}

// reply answers like a model: the content and a usage report.
func reply(w http.ResponseWriter, content string, prompt, completion int) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "model": "fake-model-1",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": content}}},
		"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
	})
}

// echo replies with a content derived from the last message, with bytes
// that must survive a cache round trip.
func echo(n int, req wireRequest, w http.ResponseWriter, r *http.Request) {
	last := req.Messages[len(req.Messages)-1].Content
	reply(w, fmt.Sprintf("reply to %q: é ✓ \"quoted\"\n\ttab \\ end", last), 11, 5)
}

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error"}})
}

// fastConfig is a config for the fake whose backoffs are recorded by a
// fakeClock rather than waited for (clockOf returns it). Its backoffs are
// short all the same, in case a test puts the real clock back.
func fastConfig(baseURL string) Config {
	return Config{BaseURL: baseURL, Model: "fake-model", Timeout: 5 * time.Second, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Clock: newFakeClock()}
}

// clockOf returns the fakeClock of a config made by fastConfig.
func clockOf(t *testing.T, cfg Config) *fakeClock {
	t.Helper()
	c, ok := cfg.Clock.(*fakeClock)
	if !ok {
		t.Fatalf("config clock %T is not a *fakeClock", cfg.Clock)
	}
	return c
}

// fakeEpoch is a fakeClock's first Now: a whole second, as HTTP dates are.
var fakeEpoch = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a Clock for tests: Sleep records the wait, advances Now by
// it and returns at once (ctx.Err() if ctx has ended), so that tests assert
// the backoff schedule and never wait in real time.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
	// onSleep, when set, is called by Sleep after recording the wait, and
	// its result returned (e.g. to cancel the caller during a backoff).
	onSleep func(ctx context.Context, d time.Duration) error
}

func newFakeClock() *fakeClock { return &fakeClock{now: fakeEpoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	hook := c.onSleep
	c.mu.Unlock()
	if hook != nil {
		return hook(ctx, d)
	}
	return ctx.Err()
}

// Waits returns the waits requested so far, in order.
func (c *fakeClock) Waits() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}

func newClient(t *testing.T, cfg Config, reg prometheus.Registerer) *Client {
	t.Helper()
	c, err := New(cfg, reg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// closedURL is a base URL on which nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr + "/v1"
}

func userMsg(s string) []Message {
	return []Message{{Role: "system", Content: "You are a test."}, {Role: "user", Content: s}}
}

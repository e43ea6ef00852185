package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestChatSuccess(t *testing.T) {
	t.Setenv("TEST_LLM_KEY", "sk-test")
	f := newFake(t, echo)
	cfg := fastConfig(f.url())
	cfg.APIKeyEnv = "TEST_LLM_KEY"
	cfg.MaxTokens = 64
	cfg.Temperature = 0.25
	c := newClient(t, cfg, nil)
	resp, err := c.Chat(context.Background(), Request{Messages: userMsg("hello"), Purpose: "solver"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "reply to \"hello\": é ✓ \"quoted\"\n\ttab \\ end"; resp.Content != want {
		t.Errorf("content = %q, want %q", resp.Content, want)
	}
	if resp.PromptTokens != 11 || resp.CompletionTokens != 5 || resp.Model != "fake-model-1" || resp.Cached {
		t.Errorf("response = %+v", resp)
	}
	req := f.requests()[0]
	if req.Model != "fake-model" || req.MaxTokens != 64 || req.Temperature != 0.25 || req.ResponseFormat != nil || len(req.Messages) != 2 || req.Messages[1].Content != "hello" {
		t.Errorf("request = %+v", req)
	}
	if got := f.headers[0].Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization = %q", got)
	}
	// A request's MaxTokens overrides the config's.
	if _, err := c.Chat(context.Background(), Request{Messages: userMsg("x"), MaxTokens: 9}); err != nil {
		t.Fatal(err)
	}
	if got := f.requests()[1].MaxTokens; got != 9 {
		t.Errorf("max_tokens = %d, want 9", got)
	}
}

func TestNoAPIKeyNoHeader(t *testing.T) {
	f := newFake(t, echo)
	cfg := fastConfig(f.url())
	cfg.APIKeyEnv = "TEST_LLM_KEY_UNSET"
	c := newClient(t, cfg, nil)
	if _, err := c.Chat(context.Background(), Request{Messages: userMsg("x")}); err != nil {
		t.Fatal(err)
	}
	if got := f.headers[0].Get("Authorization"); got != "" {
		t.Errorf("Authorization = %q, want none", got)
	}
}

func TestNewValidates(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no base url":  {Model: "m"},
		"bad base url": {BaseURL: "localhost:8000", Model: "m"},
		"no model":     {BaseURL: "http://localhost:8000/v1"},
		"negative":     {BaseURL: "http://localhost:8000/v1", Model: "m", Concurrency: -1},
	} {
		if _, err := New(cfg, nil); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	c := newClient(t, Config{BaseURL: "http://localhost:8000/v1/", Model: "m"}, nil)
	got := c.Config()
	if got.Timeout != DefaultTimeout || got.MaxRetries != DefaultMaxRetries || got.Concurrency != DefaultConcurrency || got.APIKeyEnv != DefaultAPIKeyEnv {
		t.Errorf("defaults not applied: %+v", got)
	}
	if c.url != "http://localhost:8000/v1/chat/completions" {
		t.Errorf("url = %q", c.url)
	}
}

func TestRetries(t *testing.T) {
	tests := []struct {
		name       string
		maxRetries int
		handle     func(n int, w http.ResponseWriter)
		wantKind   ErrorKind
		wantCalls  int64
		wantStatus int
	}{
		{"429 then success", 0, func(n int, w http.ResponseWriter) {
			if n == 0 {
				apiError(w, http.StatusTooManyRequests, "slow down")
				return
			}
			reply(w, "ok", 1, 1)
		}, KindUnknown, 2, 0},
		{"500 twice then success", 0, func(n int, w http.ResponseWriter) {
			if n < 2 {
				apiError(w, http.StatusInternalServerError, "boom")
				return
			}
			reply(w, "ok", 1, 1)
		}, KindUnknown, 3, 0},
		{"429 always", 2, func(n int, w http.ResponseWriter) {
			apiError(w, http.StatusTooManyRequests, "slow down")
		}, KindRateLimited, 3, 429},
		{"503 always", 3, func(n int, w http.ResponseWriter) {
			apiError(w, http.StatusServiceUnavailable, "overloaded")
		}, KindServer, 4, 503},
		{"400 not retried", 0, func(n int, w http.ResponseWriter) {
			apiError(w, http.StatusBadRequest, "unknown field foo")
		}, KindBadRequest, 1, 400},
		{"401 not retried", 0, func(n int, w http.ResponseWriter) {
			apiError(w, http.StatusUnauthorized, "bad key")
		}, KindBadRequest, 1, 401},
		{"malformed body", 0, func(n int, w http.ResponseWriter) {
			w.Write([]byte(`{"choices": [ {"message": `))
		}, KindMalformed, 1, 200},
		{"no choices", 0, func(n int, w http.ResponseWriter) {
			w.Write([]byte(`{"choices": []}`))
		}, KindMalformed, 1, 200},
		{"endpoint context overflow", 0, func(n int, w http.ResponseWriter) {
			apiError(w, http.StatusBadRequest, "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.")
		}, KindContextOverflow, 1, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(n int, _ wireRequest, w http.ResponseWriter, _ *http.Request) { tt.handle(n, w) })
			cfg := fastConfig(f.url())
			cfg.MaxRetries = tt.maxRetries
			c := newClient(t, cfg, nil)
			resp, err := c.Chat(context.Background(), Request{Messages: userMsg("q"), Purpose: "oracle.match", CacheKey: "rec-1"})
			if got := KindOf(err); got != tt.wantKind {
				t.Fatalf("kind = %v, want %v (err %v)", got, tt.wantKind, err)
			}
			if err == nil && resp.Content != "ok" {
				t.Errorf("content = %q", resp.Content)
			}
			var e *Error
			if err != nil {
				if !errors.As(err, &e) || e.Status != tt.wantStatus {
					t.Errorf("error %#v, want status %d", err, tt.wantStatus)
				}
				if !strings.Contains(err.Error(), `"rec-1"`) {
					t.Errorf("error %q does not name the record", err)
				}
			}
			if got := f.calls.Load(); got != tt.wantCalls {
				t.Errorf("endpoint calls = %d, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	f := newFake(t, func(n int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			w.Header().Set("Retry-After", "1")
			apiError(w, http.StatusTooManyRequests, "slow down")
			return
		}
		reply(w, "ok", 1, 1)
	})
	cfg := fastConfig(f.url())
	cfg.BackoffMax = 3 * time.Second // the cap lets Retry-After: 1 through
	c := newClient(t, cfg, nil)
	start := time.Now()
	if _, err := c.Chat(context.Background(), Request{Messages: userMsg("q")}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("retried after %v, want about 1s (Retry-After)", took)
	}
	if f.calls.Load() != 2 {
		t.Errorf("calls = %d, want 2", f.calls.Load())
	}
}

func TestBackoff(t *testing.T) {
	c := newClient(t, Config{BaseURL: "http://x/v1", Model: "m", BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second}, nil)
	for attempt, hi := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		hi *= time.Millisecond
		for range 50 {
			if d := c.backoff(attempt, 0); d < hi/2 || d > hi {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", attempt, d, hi/2, hi)
			}
		}
	}
	if d := c.backoff(0, 500*time.Millisecond); d != 500*time.Millisecond {
		t.Errorf("Retry-After 0.5s: backoff %v", d)
	}
	if d := c.backoff(0, time.Hour); d != time.Second {
		t.Errorf("Retry-After 1h: backoff %v, want the 1s cap", d)
	}
	for h, want := range map[string]time.Duration{"": 0, "2": 2 * time.Second, "0.5": 500 * time.Millisecond, "junk": 0, "-3": 0} {
		if got := retryAfter(h); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", h, got, want)
		}
	}
}

func TestHangPastDeadline(t *testing.T) {
	f := newFake(t, nil)
	f.handle = func(_ int, _ wireRequest, w http.ResponseWriter, r *http.Request) { f.hang(r) }
	cfg := fastConfig(f.url())
	cfg.Timeout = 100 * time.Millisecond
	cfg.MaxRetries = 2
	c := newClient(t, cfg, nil)
	start := time.Now()
	_, err := c.Chat(context.Background(), Request{Messages: userMsg("q"), Purpose: "asker"})
	took := time.Since(start)
	if KindOf(err) != KindTimeout {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if f.calls.Load() != 3 {
		t.Errorf("calls = %d, want 3", f.calls.Load())
	}
	if took < 300*time.Millisecond || took > 3*time.Second {
		t.Errorf("took %v, want about 3 × 100ms", took)
	}
}

func TestCallerContext(t *testing.T) {
	f := newFake(t, nil)
	f.handle = func(_ int, _ wireRequest, w http.ResponseWriter, r *http.Request) { f.hang(r) }
	c := newClient(t, fastConfig(f.url()), nil)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := c.Chat(ctx, Request{Messages: userMsg("q")}); KindOf(err) != KindCanceled || !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: err = %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Chat(ctx, Request{Messages: userMsg("q")}); KindOf(err) != KindTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller deadline: err = %v", err)
	}
	if f.calls.Load() != 2 {
		t.Errorf("calls = %d, want 2 (no retries once the caller is done)", f.calls.Load())
	}
}

func TestContextOverflowBeforeCall(t *testing.T) {
	f := newFake(t, func(int, wireRequest, http.ResponseWriter, *http.Request) {
		t.Error("the endpoint was called")
	})
	cfg := fastConfig(f.url())
	cfg.ContextTokens = 1000
	cfg.MaxTokens = 200
	c := newClient(t, cfg, nil)
	big := strings.Repeat("x", 3500) // ~1000 tokens
	_, err := c.Chat(context.Background(), Request{Messages: userMsg(big), Purpose: "oracle.match", CacheKey: "bird/1234"})
	if KindOf(err) != KindContextOverflow {
		t.Fatalf("err = %v, want a context overflow", err)
	}
	for _, want := range []string{`"oracle.match"`, `"bird/1234"`, "1000 tokens", "200 max tokens", fmt.Sprint(EstimatePromptTokens(userMsg(big)))} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	// A prompt that fits goes through.
	f.handle = echo
	if _, err := c.Chat(context.Background(), Request{Messages: userMsg("small")}); err != nil {
		t.Fatal(err)
	}
}

func TestJSONModeFallback(t *testing.T) {
	f := newFake(t, func(_ int, req wireRequest, w http.ResponseWriter, _ *http.Request) {
		if req.ResponseFormat != nil {
			apiError(w, http.StatusBadRequest, "response_format is not supported by this model")
			return
		}
		reply(w, "Sure! ```json\n{\"a\": 1}\n```", 3, 3)
	})
	cfg := fastConfig(f.url())
	cfg.JSONMode = true
	c := newClient(t, cfg, nil)
	resp, err := c.Chat(context.Background(), Request{Messages: userMsg("q"), JSON: true})
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ A int }
	if err := ParseJSON(resp.Content, &v); err != nil || v.A != 1 {
		t.Fatalf("ParseJSON: %v, %+v", err, v)
	}
	if _, err := c.Chat(context.Background(), Request{Messages: userMsg("q2"), JSON: true}); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 3 || reqs[0].ResponseFormat == nil || reqs[0].ResponseFormat.Type != "json_object" || reqs[1].ResponseFormat != nil || reqs[2].ResponseFormat != nil {
		t.Errorf("requests: %+v", reqs)
	}
}

func TestJSONModeSupported(t *testing.T) {
	f := newFake(t, func(_ int, req wireRequest, w http.ResponseWriter, _ *http.Request) {
		reply(w, `{"a": 1}`, 3, 3)
	})
	cfg := fastConfig(f.url())
	cfg.JSONMode = true
	c := newClient(t, cfg, nil)
	for _, js := range []bool{true, false, true} {
		if _, err := c.Chat(context.Background(), Request{Messages: userMsg("q"), JSON: js}); err != nil {
			t.Fatal(err)
		}
	}
	reqs := f.requests()
	if reqs[0].ResponseFormat == nil || reqs[1].ResponseFormat != nil || reqs[2].ResponseFormat == nil {
		t.Errorf("response_format sent: %v %v %v", reqs[0].ResponseFormat, reqs[1].ResponseFormat, reqs[2].ResponseFormat)
	}
}

func TestConcurrencyLimitExact(t *testing.T) {
	var inFlight, maxSeen atomic.Int64
	f := newFake(t, func(_ int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
		n := inFlight.Add(1)
		for {
			m := maxSeen.Load()
			if n <= m || maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(20 * time.Millisecond)
		inFlight.Add(-1) // before replying: the client may reuse its slot once it has the reply
		reply(w, "ok", 1, 1)
	})
	cfg := fastConfig(f.url())
	cfg.Concurrency = 7
	c := newClient(t, cfg, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Go(func() {
			if _, err := c.Chat(context.Background(), Request{Messages: userMsg(fmt.Sprint(i))}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := maxSeen.Load(); got != 7 {
		t.Errorf("max concurrent requests at the endpoint = %d, want exactly 7", got)
	}
	if f.calls.Load() != 100 {
		t.Errorf("calls = %d", f.calls.Load())
	}
}

// metricValue returns the value of the counter (or the sample count of the
// histogram) name with the given labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	if m.GetHistogram() != nil {
		return float64(m.GetHistogram().GetSampleCount())
	}
	return m.GetCounter().GetValue()
}

func TestMetrics(t *testing.T) {
	f := newFake(t, func(n int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
		if n == 2 {
			apiError(w, http.StatusBadRequest, "nope")
			return
		}
		reply(w, "ok", 11, 5)
	})
	reg := prometheus.NewRegistry()
	cfg := fastConfig(f.url())
	cfg.Cache = NewMemoryCache()
	c := newClient(t, cfg, reg)
	newClient(t, cfg, reg) // a second client on the same registry shares the metrics
	ctx := context.Background()
	for _, q := range []string{"a", "b", "a"} {
		if _, err := c.Chat(ctx, Request{Messages: userMsg(q), Purpose: "solver"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Chat(ctx, Request{Messages: userMsg("c"), Purpose: "asker"}); KindOf(err) != KindBadRequest {
		t.Fatalf("err = %v", err)
	}
	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"avtgym_llm_prompt_tokens_total", map[string]string{"purpose": "solver"}, 22},
		{"avtgym_llm_completion_tokens_total", map[string]string{"purpose": "solver"}, 10},
		{"avtgym_llm_calls_total", map[string]string{"purpose": "solver", "outcome": "ok"}, 2},
		{"avtgym_llm_calls_total", map[string]string{"purpose": "solver", "outcome": "cached"}, 1},
		{"avtgym_llm_calls_total", map[string]string{"purpose": "asker", "outcome": "bad_request"}, 1},
		{"avtgym_llm_cache_hits_total", map[string]string{"purpose": "solver"}, 1},
		{"avtgym_llm_cache_misses_total", map[string]string{"purpose": "solver"}, 2},
		{"avtgym_llm_call_seconds", map[string]string{"purpose": "solver"}, 2},
		{"avtgym_llm_prompt_tokens_total", map[string]string{"purpose": "asker"}, 0},
	} {
		if got := metricValue(t, reg, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

func TestErrorKinds(t *testing.T) {
	base := &Error{Kind: KindServer, Status: 503, Msg: "server error", Err: errors.New("eof")}
	wrapped := fmt.Errorf("oracle: %w", base)
	if KindOf(wrapped) != KindServer || KindOf(nil) != KindUnknown || KindOf(errors.New("x")) != KindUnknown {
		t.Error("KindOf")
	}
	if got, want := base.Error(), "llm: server_error: server error (HTTP 503): eof"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	for k := KindUnknown; k <= KindCache; k++ {
		if strings.HasPrefix(k.String(), "ErrorKind(") {
			t.Errorf("kind %d has no name", k)
		}
	}
}

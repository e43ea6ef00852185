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
		// An HTTP 200 that is not a readable chat completion is the
		// endpoint failing, retried like a 5xx (unreadable_test.go has
		// every shape).
		{"truncated body always", 2, func(n int, w http.ResponseWriter) {
			w.Write([]byte(`{"choices": [ {"message": `))
		}, KindUnreadable, 3, 200},
		{"no choices always", 2, func(n int, w http.ResponseWriter) {
			w.Write([]byte(`{"choices": []}`))
		}, KindUnreadable, 3, 200},
		{"HTML page then success", 0, func(n int, w http.ResponseWriter) {
			if n == 0 {
				w.Header().Set("Content-Type", "text/html")
				w.Write([]byte(`<html><body>Bad gateway</body></html>`))
				return
			}
			reply(w, "ok", 1, 1)
		}, KindUnknown, 2, 0},
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
			if waits := clockOf(t, cfg).Waits(); int64(len(waits)) != tt.wantCalls-1 {
				t.Errorf("backoffs %v, want one before each of the %d retries", waits, tt.wantCalls-1)
			}
		})
	}
}

// TestRetryAfterHonoured: the wait before a retry is the endpoint's
// Retry-After (seconds or an HTTP date, read against the client's clock),
// capped by BackoffMax; without one, or with a date already past, it is the
// jittered backoff. The waits are recorded by the fake clock, not waited.
func TestRetryAfterHonoured(t *testing.T) {
	const base, capd = 100 * time.Millisecond, 3 * time.Second
	tests := []struct {
		name       string
		status     int
		retryAfter string
		lo, hi     time.Duration // the recorded wait must be in [lo, hi]
	}{
		{"seconds", http.StatusTooManyRequests, "1", time.Second, time.Second},
		{"decimal seconds", http.StatusTooManyRequests, "0.5", 500 * time.Millisecond, 500 * time.Millisecond},
		{"on a 503", http.StatusServiceUnavailable, "2", 2 * time.Second, 2 * time.Second},
		{"HTTP date", http.StatusTooManyRequests, fakeEpoch.Add(2 * time.Second).Format(http.TimeFormat), 2 * time.Second, 2 * time.Second},
		{"over the cap", http.StatusTooManyRequests, "7200", capd, capd},
		{"date over the cap", http.StatusTooManyRequests, fakeEpoch.Add(time.Hour).Format(http.TimeFormat), capd, capd},
		{"date in the past", http.StatusTooManyRequests, fakeEpoch.Add(-time.Minute).Format(http.TimeFormat), base / 2, base},
		{"junk", http.StatusTooManyRequests, "soon", base / 2, base},
		{"none", http.StatusTooManyRequests, "", base / 2, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(n int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
				if n == 0 {
					if tt.retryAfter != "" {
						w.Header().Set("Retry-After", tt.retryAfter)
					}
					apiError(w, tt.status, "slow down")
					return
				}
				reply(w, "ok", 1, 1)
			})
			cfg := fastConfig(f.url())
			cfg.BackoffBase = base
			cfg.BackoffMax = capd
			clock := clockOf(t, cfg)
			c := newClient(t, cfg, nil)
			if _, err := c.Chat(context.Background(), Request{Messages: userMsg("q")}); err != nil {
				t.Fatal(err)
			}
			if f.calls.Load() != 2 {
				t.Errorf("calls = %d, want 2", f.calls.Load())
			}
			waits := clock.Waits()
			if len(waits) != 1 || waits[0] < tt.lo || waits[0] > tt.hi {
				t.Errorf("Retry-After %q: waits %v, want one in [%v, %v]", tt.retryAfter, waits, tt.lo, tt.hi)
			}
		})
	}
}

// TestBackoffSchedule: the waits between attempts, as the retry loop asks
// the clock for them: one fewer than the attempts, each in the upper half of
// BackoffBase·2^i (the jitter), growing until they reach BackoffMax, which
// caps them. The defaults give 250ms, 500ms, 1s, 2s (each jittered).
func TestBackoffSchedule(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name      string
		base, max time.Duration
		retries   int
		ceilings  []time.Duration // the i-th wait is in [ceilings[i]/2, ceilings[i]]
	}{
		{"defaults", 0, 0, 0, []time.Duration{250 * ms, 500 * ms, 1000 * ms, 2000 * ms}},
		{"capped", 100 * ms, time.Second, 7, []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1000 * ms, 1000 * ms, 1000 * ms}},
		{"cap below the base", time.Second, 300 * ms, 3, []time.Duration{300 * ms, 300 * ms, 300 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(n int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
				apiError(w, http.StatusServiceUnavailable, "overloaded")
			})
			cfg := fastConfig(f.url())
			cfg.BackoffBase, cfg.BackoffMax, cfg.MaxRetries = tt.base, tt.max, tt.retries
			clock := clockOf(t, cfg)
			c := newClient(t, cfg, nil)
			for round := range 20 { // the jitter is random: check the bounds many times
				_, err := c.Chat(context.Background(), Request{Messages: userMsg(fmt.Sprint(round))})
				if KindOf(err) != KindServer || !strings.Contains(err.Error(), fmt.Sprintf("after %d attempts", len(tt.ceilings)+1)) {
					t.Fatalf("err = %v, want a server error after %d attempts", err, len(tt.ceilings)+1)
				}
			}
			if got, want := f.calls.Load(), int64(20*(len(tt.ceilings)+1)); got != want {
				t.Errorf("calls = %d, want %d", got, want)
			}
			waits := clock.Waits()
			if len(waits) != 20*len(tt.ceilings) {
				t.Fatalf("%d waits, want %d", len(waits), 20*len(tt.ceilings))
			}
			firsts := map[time.Duration]bool{}
			for round := range 20 {
				ws := waits[round*len(tt.ceilings):][:len(tt.ceilings)]
				firsts[ws[0]] = true
				for i, w := range ws {
					if hi := tt.ceilings[i]; w < hi/2 || w > hi {
						t.Fatalf("round %d: wait %d = %v, want in [%v, %v] (waits %v)", round, i, w, hi/2, hi, ws)
					}
					// Below the cap, each ceiling doubles: a wait is at
					// least its ceiling's half, the previous at most its
					// ceiling, so the waits never shrink.
					if i > 0 && tt.ceilings[i] == 2*tt.ceilings[i-1] && w < ws[i-1] {
						t.Errorf("round %d: wait %d = %v is shorter than wait %d = %v", round, i, w, i-1, ws[i-1])
					}
				}
			}
			if len(firsts) < 2 {
				t.Errorf("the first wait was %v in all 20 rounds: no jitter", firsts)
			}
		})
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
	now := fakeEpoch
	for h, want := range map[string]time.Duration{
		"": 0, "2": 2 * time.Second, "0.5": 500 * time.Millisecond, "junk": 0, "-3": 0, "1e7": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Second).Format(http.TimeFormat):     0,
	} {
		if got := retryAfter(h, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", h, got, want)
		}
	}
}

// TestRealClock: a Config without a Clock gets real time, whose Sleep ends
// when the caller's context does.
func TestRealClock(t *testing.T) {
	c := newClient(t, Config{BaseURL: "http://x/v1", Model: "m"}, nil)
	clock, ok := c.Config().Clock.(realClock)
	if !ok {
		t.Fatalf("default clock %T, want realClock", c.Config().Clock)
	}
	if err := clock.Sleep(context.Background(), 0); err != nil {
		t.Errorf("Sleep(0) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := clock.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep(1h) on a canceled context = %v, want context.Canceled", err)
	}
	if now := clock.Now(); now.IsZero() {
		t.Errorf("Now() = %v", now)
	}
}

// TestHangPastDeadline: an endpoint that never answers is given up on by
// each attempt's own Timeout (real time: deadline enforcement), and the
// attempts are retried with backoffs (fake time).
func TestHangPastDeadline(t *testing.T) {
	f := newFake(t, nil)
	var abandoned atomic.Int64 // requests whose context the client ended
	f.handle = func(_ int, _ wireRequest, w http.ResponseWriter, r *http.Request) {
		f.hang(r)
		if r.Context().Err() != nil {
			abandoned.Add(1)
		}
	}
	cfg := fastConfig(f.url())
	cfg.Timeout = 100 * time.Millisecond
	cfg.MaxRetries = 2
	clock := clockOf(t, cfg)
	c := newClient(t, cfg, nil)
	done := make(chan error, 1)
	go func() {
		_, err := c.Chat(context.Background(), Request{Messages: userMsg("q"), Purpose: "asker"})
		done <- err
	}()
	// Deadline enforcement: three attempts of 100ms must end the call; the
	// bound is generous (≥ 10× the 300ms they add up to) so that a busy
	// machine never fails it, while a deadline that is not enforced does.
	const bound = 30 * 3 * 100 * time.Millisecond
	var err error
	select {
	case err = <-done:
	case <-time.After(bound):
		t.Fatalf("Chat did not return within %v with a 100ms per-attempt Timeout", bound)
	}
	if KindOf(err) != KindTimeout || !strings.Contains(err.Error(), "100ms per-call deadline") || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("err = %v, want a timeout of the 100ms per-call deadline after 3 attempts", err)
	}
	if f.calls.Load() != 3 {
		t.Errorf("calls = %d, want 3", f.calls.Load())
	}
	if waits := clock.Waits(); len(waits) != 2 {
		t.Errorf("backoffs %v, want 2", waits)
	}
	// The handlers see the client hang up; wait for the last to notice.
	for deadline := time.Now().Add(bound); abandoned.Load() < 3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if got := abandoned.Load(); got != 3 {
		t.Errorf("%d of 3 hanging requests were abandoned by the client", got)
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

// TestCallerEndsDuringBackoff: a caller whose context ends while the client
// waits to retry gets its own error at once, and no further attempt is made.
func TestCallerEndsDuringBackoff(t *testing.T) {
	for _, tt := range []struct {
		name     string
		end      error
		wantKind ErrorKind
	}{
		{"canceled", context.Canceled, KindCanceled},
		{"deadline", context.DeadlineExceeded, KindTimeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, func(n int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
				apiError(w, http.StatusServiceUnavailable, "overloaded")
			})
			cfg := fastConfig(f.url())
			clock := clockOf(t, cfg)
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			// The caller ends while the client sleeps: the sleep returns
			// what a real one would, the context's error.
			clock.onSleep = func(context.Context, time.Duration) error {
				cancel(tt.end)
				return tt.end
			}
			c := newClient(t, cfg, nil)
			_, err := c.Chat(ctx, Request{Messages: userMsg("q")})
			if KindOf(err) != tt.wantKind || !errors.Is(err, tt.end) {
				t.Errorf("err = %v, want %v wrapping %v", err, tt.wantKind, tt.end)
			}
			if f.calls.Load() != 1 || len(clock.Waits()) != 1 {
				t.Errorf("calls = %d, waits %v: want 1 call and 1 wait", f.calls.Load(), clock.Waits())
			}
		})
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

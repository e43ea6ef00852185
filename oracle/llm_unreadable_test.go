package oracle

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"avtgym/llm"
)

// recordingClock is an llm.Clock that records the backoffs and never
// waits.
type recordingClock struct {
	mu    sync.Mutex
	waits int
}

func (c *recordingClock) Now() time.Time { return time.Unix(1_700_000_000, 0) }

func (c *recordingClock) Sleep(ctx context.Context, _ time.Duration) error {
	c.mu.Lock()
	c.waits++
	c.mu.Unlock()
	return ctx.Err()
}

func (c *recordingClock) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.waits
	c.waits = 0
	return n
}

// TestLLMUnreadableAnswerIsAnError: an endpoint answering HTTP 200 with
// something that is not a chat completion — at stage 1, at stage 2, or to
// the probe that decides who made a prompt overflow — makes Ask fail with
// llm.KindUnreadable after the client's retries (a failure of the
// environment), never answer with the refusal; a readable answer whose
// content is prose is the model's, and is the refusal.
func TestLLMUnreadableAnswerIsAnError(t *testing.T) {
	const retries = 2
	html := []byte(`<html><body><h1>502 Bad Gateway</h1></body></html>`)
	var (
		calls  atomic.Int64
		mu     sync.Mutex
		script func(c fakeCall) (status int, contentType string, body []byte)
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []llm.Message `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) < 2 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		mu.Lock()
		s := script
		mu.Unlock()
		status, ct, body := s(parseCall(req.Messages))
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(status)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	completion := func(content string) (int, string, []byte) {
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": content}, "finish_reason": "stop"}}})
		return 200, "application/json", b
	}
	clock := &recordingClock{}
	client, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "fake-model", MaxRetries: retries, Timeout: 5 * time.Second, Clock: clock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLLM(client, LLMOptions{})
	const q = "What do you mean by top customers?"
	for _, tc := range []struct {
		name      string
		script    func(c fakeCall) (int, string, []byte)
		wantCalls int64
	}{
		{"stage 1", func(fakeCall) (int, string, []byte) { return 200, "text/html", html }, retries + 1},
		{"stage 2", func(c fakeCall) (int, string, []byte) {
			if c.stage == "match" {
				return completion(smartMatch(c))
			}
			return 200, "application/json", []byte(`{"choices":[{"message":null,"finish_reason":"stop"}]}`)
		}, 1 + retries + 1},
		{"overflow probe", func(c fakeCall) (int, string, []byte) {
			if c.question == q {
				b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "This model's maximum context length is 4096 tokens."}})
				return http.StatusBadRequest, "application/json", b
			}
			return 200, "application/json", []byte(`{"choices": [{"message": {"con`)
		}, 1 + retries + 1},
	} {
		mu.Lock()
		script = tc.script
		mu.Unlock()
		calls.Store(0)
		clock.take()
		r, err := l.Oracle().Ask(context.Background(), testRecord(), nil, q)
		var e *llm.Error
		if !errors.As(err, &e) || e.Kind != llm.KindUnreadable || errors.Is(err, ErrRecordTooLong) {
			t.Errorf("%s: Ask = %+v, %v; want an llm.KindUnreadable error", tc.name, r, err)
		}
		if got, waits := calls.Load(), clock.take(); got != tc.wantCalls || waits != retries {
			t.Errorf("%s: %d calls and %d backoffs, want %d and %d", tc.name, got, waits, tc.wantCalls, retries)
		}
	}
	// Prose is the model's answer: asked once more, then the refusal.
	mu.Lock()
	script = func(fakeCall) (int, string, []byte) {
		return completion("I'd rather answer in plain prose: they mean the best customers.")
	}
	mu.Unlock()
	calls.Store(0)
	r, err := l.Oracle().Ask(context.Background(), testRecord(), nil, q+" Answer in plain prose.")
	if err != nil || !r.Refused || r.Text != Refusal || r.Action.String() != "unanswerable()" || len(r.Credits) != 0 {
		t.Fatalf("prose: %+v, %v; want the refusal", r, err)
	}
	if got, waits := calls.Load(), clock.take(); got != 2 || waits != 0 {
		t.Errorf("prose: %d calls and %d backoffs, want 2 (one corrective) and none", got, waits)
	}
	if strings.Contains(r.Text, "prose") {
		t.Errorf("the model's prose was served: %q", r.Text)
	}
}

package llm

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/prometheus/client_golang/prometheus"
)

// okBody is a readable chat completion whose content is "ok".
const okBody = `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`

// utf16Body encodes s as UTF-16LE with a byte order mark: a body that is
// not UTF-8.
func utf16Body(s string) []byte {
	b := []byte{0xff, 0xfe}
	for _, u := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, u)
	}
	return b
}

// unreadableShapes are HTTP answers that are not a readable chat
// completion: the endpoint failing, whatever the model may have written.
var unreadableShapes = []struct {
	name        string
	status      int
	contentType string // "" sets none (the server sniffs one)
	body        []byte
}{
	{"HTML page", 200, "text/html; charset=utf-8", []byte(`<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1></body></html>`)},
	{"HTML page without a content type", 200, "", []byte(`<html><body>Service temporarily unavailable</body></html>`)},
	{"truncated JSON", 200, "application/json", []byte(okBody[:len(okBody)/2])},
	{"empty body", 200, "application/json", nil},
	{"empty object", 200, "application/json", []byte(`{}`)},
	{"null", 200, "application/json", []byte(`null`)},
	{"a JSON string", 200, "application/json", []byte(`"ok"`)},
	{"no choices", 200, "application/json", []byte(`{"model":"m","choices":[]}`)},
	{"choices not a list", 200, "application/json", []byte(`{"choices":{"message":{"content":"ok"}}}`)},
	{"null choice", 200, "application/json", []byte(`{"choices":[null]}`)},
	{"null message", 200, "application/json", []byte(`{"choices":[{"index":0,"message":null,"finish_reason":"stop"}]}`)},
	{"no message", 200, "application/json", []byte(`{"choices":[{"index":0,"finish_reason":"stop"}]}`)},
	{"message without content", 200, "application/json", []byte(`{"choices":[{"index":0,"message":{"role":"assistant"}}]}`)},
	{"null content, stopped", 200, "application/json", []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":null},"finish_reason":"stop"}]}`)},
	{"content not a string", 200, "application/json", []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":42},"finish_reason":"stop"}]}`)},
	{"a completion sent as HTML", 200, "text/html", []byte(okBody)},
	{"an event stream", 200, "text/event-stream", []byte("data: " + okBody + "\n\ndata: [DONE]\n\n")},
	{"trailing garbage", 200, "application/json", []byte(okBody + "<html>")},
	{"UTF-16 body", 200, "application/json", utf16Body(okBody)},
	{"invalid UTF-8 body", 200, "application/json", []byte("\xff\xfe\xfd{\"choices\":[{\"message\":{\"content\":\"ok\"}}]}")},
	{"Latin-1 page", 200, "text/plain; charset=iso-8859-1", []byte("Erreur: d\xe9lai d\xe9pass\xe9")},
	{"204 No Content", http.StatusNoContent, "", nil},
}

// TestUnreadableAnswerIsEndpointFailure: every unreadable shape is retried
// like a 5xx — the backoffs on the injected clock, the retries counted —
// and then fails with KindUnreadable and the last status; it is never
// returned as a reply.
func TestUnreadableAnswerIsEndpointFailure(t *testing.T) {
	for _, tc := range unreadableShapes {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(_ int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.WriteHeader(tc.status)
				w.Write(tc.body)
			})
			reg := prometheus.NewRegistry()
			cfg := fastConfig(f.url())
			cfg.MaxRetries = 3
			c := newClient(t, cfg, reg)
			resp, err := c.Chat(context.Background(), Request{Messages: userMsg("q"), Purpose: "oracle.match", CacheKey: "rec-1"})
			var e *Error
			if resp != nil || !errors.As(err, &e) || e.Kind != KindUnreadable || e.Status != tc.status {
				t.Fatalf("Chat = %+v, %v; want an unreadable answer (HTTP %d)", resp, err, tc.status)
			}
			if !strings.Contains(err.Error(), "after 4 attempts") || !strings.Contains(err.Error(), `"rec-1"`) {
				t.Errorf("error %q does not say the attempts or name the record", err)
			}
			if got := f.calls.Load(); got != 4 {
				t.Errorf("endpoint calls = %d, want 4 (MaxRetries 3)", got)
			}
			if waits := clockOf(t, cfg).Waits(); len(waits) != 3 {
				t.Errorf("backoffs %v, want one before each of the 3 retries", waits)
			}
			if got := metricValue(t, reg, "avtgym_llm_retries_total", map[string]string{"purpose": "oracle.match", "reason": "unreadable_response"}); got != 3 {
				t.Errorf("retries metric = %v, want 3", got)
			}
			if got := metricValue(t, reg, "avtgym_llm_calls_total", map[string]string{"purpose": "oracle.match", "outcome": "unreadable_response"}); got != 1 {
				t.Errorf("calls metric = %v, want 1 unreadable_response", got)
			}
			// Ping sees the endpoint failing too.
			if err := c.Ping(context.Background()); KindOf(err) != KindUnreadable {
				t.Errorf("Ping = %v", err)
			}
		})
	}
}

// TestUnreadableThenReadable: an unreadable answer followed by a readable
// one is a success after one retry, and only the readable one is cached.
func TestUnreadableThenReadable(t *testing.T) {
	f := newFake(t, func(n int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(`<html>upstream connect error</html>`))
			return
		}
		reply(w, "ok", 1, 1)
	})
	cfg := fastConfig(f.url())
	cfg.Cache = NewMemoryCache()
	c := newClient(t, cfg, nil)
	for range 2 {
		resp, err := c.Chat(context.Background(), Request{Messages: userMsg("q")})
		if err != nil || resp.Content != "ok" {
			t.Fatalf("Chat = %+v, %v", resp, err)
		}
	}
	if got, waits := f.calls.Load(), clockOf(t, cfg).Waits(); got != 2 || len(waits) != 1 {
		t.Errorf("%d calls and backoffs %v, want 2 calls (the second cached) and 1 backoff", got, waits)
	}
}

// TestReadableCompletionIsTheModelsAnswer: a readable chat completion is
// returned at once, whatever its content — prose where JSON was asked
// for, nothing, invalid UTF-8, or no content with the model's reason for
// it (thinking, a refusal, tool calls, a limit or a filter that stopped
// it): that is the model's output, which a prompt can steer, never the
// endpoint failing. Sloppy framing a JSON parser may accept (a UTF-8 byte
// order mark, no or a generic media type) is accepted.
func TestReadableCompletionIsTheModelsAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body, want string
	}{
		{"prose", "application/json", `{"choices":[{"message":{"role":"assistant","content":"I would rather answer in plain prose."},"finish_reason":"stop"}]}`, "I would rather answer in plain prose."},
		{"empty content", "application/json", `{"choices":[{"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}`, ""},
		{"invalid UTF-8 in the content", "application/json", "{\"choices\":[{\"message\":{\"content\":\"ok \xff\"},\"finish_reason\":\"stop\"}]}", "ok \uFFFD"},
		{"thinking only", "application/json", `{"choices":[{"message":{"content":null,"reasoning_content":"hmm"},"finish_reason":"stop"}]}`, ""},
		{"vLLM reasoning field", "application/json", `{"choices":[{"message":{"content":null,"reasoning":"hmm"},"finish_reason":"length"}]}`, ""},
		{"refusal", "application/json", `{"choices":[{"message":{"content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}`, ""},
		{"tool calls", "application/json", `{"choices":[{"message":{"content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`, ""},
		{"content filter", "application/json", `{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"content_filter"}]}`, ""},
		{"no message at the limit", "application/json", `{"choices":[{"finish_reason":"length"}]}`, ""},
		{"byte order mark", "application/json", "\xef\xbb\xbf" + okBody, "ok"},
		{"no content type", "", okBody, "ok"},
		{"text/plain", "text/plain; charset=utf-8", okBody, "ok"},
		{"charset", "application/json; charset=utf-8", okBody, "ok"},
		{"a +json type", "application/vnd.api+json", okBody, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(_ int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
				if tc.contentType != "" {
					w.Header().Set("Content-Type", tc.contentType)
				}
				w.Write([]byte(tc.body))
			})
			cfg := fastConfig(f.url())
			c := newClient(t, cfg, nil)
			resp, err := c.Chat(context.Background(), Request{Messages: userMsg("q"), JSON: true})
			if err != nil || resp.Content != tc.want {
				t.Fatalf("Chat = %+v, %v; want the content %q", resp, err, tc.want)
			}
			if f.calls.Load() != 1 || len(clockOf(t, cfg).Waits()) != 0 {
				t.Errorf("%d calls, backoffs %v: a readable answer was retried", f.calls.Load(), clockOf(t, cfg).Waits())
			}
			// The model's unusable content is the caller's to judge: it
			// is not JSON, and ParseJSON says so as KindMalformed.
			if tc.name == "prose" {
				var v map[string]any
				if err := ParseJSON(resp.Content, &v); KindOf(err) != KindMalformed {
					t.Errorf("ParseJSON(prose) = %v, want KindMalformed", err)
				}
			}
		})
	}
}

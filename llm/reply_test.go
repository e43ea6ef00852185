package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// rawReply answers with a prepared body.
func rawReply(body []byte) func(int, wireRequest, http.ResponseWriter, *http.Request) {
	return func(_ int, _ wireRequest, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}
}

// completionBody is a chat completion body around content, which is
// inserted as it is (already JSON-escaped); usage comes after the choices,
// as OpenAI and vLLM send it.
func completionBody(escapedContent string) []byte {
	return []byte(`{"id":"x","object":"chat.completion","model":"fake-model-1","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		escapedContent + `"},"finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":3}}`)
}

// TestHugeReplyTruncated: an endpoint that ignores max_tokens and sends a
// 20 MB content gets its reply cut to MaxReplyBytes, without the client
// reading (or allocating) the whole body.
func TestHugeReplyTruncated(t *testing.T) {
	const size = 20 << 20
	content := strings.Repeat("abcdefghé ", size/11)
	body := completionBody(content)
	f := newFake(t, rawReply(body))
	reg := prometheus.NewRegistry()
	c := newClient(t, fastConfig(f.url()), reg)
	if c.Config().MaxReplyBytes != DefaultMaxReplyBytes {
		t.Fatalf("MaxReplyBytes default = %d", c.Config().MaxReplyBytes)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := c.Chat(context.Background(), Request{Messages: userMsg("talk"), Purpose: "oracle.respond"})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Truncated || len(resp.Content) > DefaultMaxReplyBytes || len(resp.Content) < DefaultMaxReplyBytes-utf8.UTFMax {
		t.Fatalf("content of %d bytes, truncated %v; want about %d bytes, truncated", len(resp.Content), resp.Truncated, DefaultMaxReplyBytes)
	}
	if !utf8.ValidString(resp.Content) || !strings.HasPrefix(content, resp.Content) {
		t.Errorf("the content is not a valid prefix of the reply")
	}
	if resp.Model != "fake-model-1" {
		t.Errorf("model = %q", resp.Model)
	}
	// The client reads about 6×16 KiB + 64 KiB; 32 MiB used to be read.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
		t.Errorf("the call allocated %d bytes for a %d-byte body", alloc, len(body))
	}
	if v := metricValue(t, reg, "avtgym_llm_replies_truncated_total", map[string]string{"purpose": "oracle.respond"}); v != 1 {
		t.Errorf("truncated metric = %v, want 1", v)
	}
}

// TestReplyCutAtUTF8Boundary: content over the limit that fits the body
// limit is cut at a rune boundary; content at the limit is untouched.
func TestReplyCutAtUTF8Boundary(t *testing.T) {
	for _, tc := range []struct {
		content   string
		max       int
		want      string
		truncated bool
	}{
		{strings.Repeat("é", 60), 101, strings.Repeat("é", 50), true},
		{strings.Repeat("é", 60), 120, strings.Repeat("é", 60), false},
		{"日本語のテキスト", 10, "日本語", true},
		{"🙂🙂", 7, "🙂", true},
	} {
		f := newFake(t, func(_ int, _ wireRequest, w http.ResponseWriter, _ *http.Request) { reply(w, tc.content, 1, 1) })
		cfg := fastConfig(f.url())
		cfg.MaxReplyBytes = tc.max
		c := newClient(t, cfg, nil)
		resp, err := c.Chat(context.Background(), Request{Messages: userMsg("x")})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Content != tc.want || resp.Truncated != tc.truncated {
			t.Errorf("max %d: content %q truncated %v, want %q %v", tc.max, resp.Content, resp.Truncated, tc.want, tc.truncated)
		}
	}
}

// TestInvalidUTF8MadeValid: raw invalid bytes and lone surrogates in the
// content, in a body read whole and in one cut short, come out valid.
func TestInvalidUTF8MadeValid(t *testing.T) {
	for name, tc := range map[string]struct {
		escaped string
		max     int
	}{
		"whole body":     {"ok \xff\xfe bad \\ud800 lone", 1000},
		"body cut short": {strings.Repeat("\xff\\ud800é", 40000), 100},
	} {
		f := newFake(t, rawReply(completionBody(tc.escaped)))
		cfg := fastConfig(f.url())
		cfg.MaxReplyBytes = tc.max
		c := newClient(t, cfg, nil)
		resp, err := c.Chat(context.Background(), Request{Messages: userMsg("x")})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !utf8.ValidString(resp.Content) || !strings.Contains(resp.Content, "\uFFFD") || len(resp.Content) > tc.max {
			t.Errorf("%s: content %q", name, resp.Content)
		}
	}
}

// TestSalvageEscapes: a body cut short inside a content of escapes decodes
// them, up to the limit.
func TestSalvageEscapes(t *testing.T) {
	// \u0001 is 6 bytes on the wire for 1 byte of content: the worst case.
	escaped := strings.Repeat(`\u0001\n\"\\\/é\ud83d\ude42`, 50000)
	f := newFake(t, rawReply(completionBody(escaped)))
	cfg := fastConfig(f.url())
	cfg.MaxReplyBytes = 1000
	c := newClient(t, cfg, nil)
	resp, err := c.Chat(context.Background(), Request{Messages: userMsg("x")})
	if err != nil {
		t.Fatal(err)
	}
	unit := "\x01\n\"\\/é🙂"
	full := strings.Repeat(unit, 1000)
	if !resp.Truncated || len(resp.Content) > 1000 || len(resp.Content) < 1000-utf8.UTFMax || !strings.HasPrefix(full, resp.Content) {
		t.Fatalf("content %d bytes %q…, truncated %v", len(resp.Content), resp.Content[:40], resp.Truncated)
	}
	// Content made only of 6-byte escapes still fills the limit: the body
	// limit covers the worst case.
	f2 := newFake(t, rawReply(completionBody(strings.Repeat(`\u0001`, 5000))))
	cfg2 := fastConfig(f2.url())
	cfg2.MaxReplyBytes = 1000
	resp, err = newClient(t, cfg2, nil).Chat(context.Background(), Request{Messages: userMsg("x")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != strings.Repeat("\x01", 1000) || !resp.Truncated {
		t.Errorf("worst-case escapes: %d bytes, truncated %v", len(resp.Content), resp.Truncated)
	}
}

// TestOversizedBodyWithoutContent: a body over the read limit whose
// beginning holds no content is not a hang or a crash. When it ends inside
// the message's thinking it is the model's answer, empty and cut off (the
// endpoint ignored max_tokens while the model thought); otherwise it is no
// chat completion: the endpoint failing, retried, then KindUnreadable.
func TestOversizedBodyWithoutContent(t *testing.T) {
	think := strings.Repeat("think ", 100000)
	for name, body := range map[string]string{
		"reasoning first": `{"model":"m","choices":[{"message":{"reasoning_content":"` + think + `","content":"SELECT 1"}}]}`,
		"reasoning":       `{"model":"m","choices":[{"message":{"role":"assistant","content":null,"reasoning":"` + think + `"}}]}`,
		"not json":        strings.Repeat("<html>", 100000),
		"deep nesting":    `{"a":` + strings.Repeat("[", 200000),
		"null content":    `{"choices":[{"message":{"content":null,"x":"` + strings.Repeat("y", 300000) + `"}}]}`,
		"broken thinking": `{"choices":[{"message":{"reasoning":"` + think[:1000] + `"` + `}` + strings.Repeat("x", 300000),
	} {
		f := newFake(t, rawReply([]byte(body)))
		cfg := fastConfig(f.url())
		cfg.MaxReplyBytes = 1000
		cfg.MaxRetries = 2
		c := newClient(t, cfg, nil)
		resp, err := c.Chat(context.Background(), Request{Messages: userMsg("x")})
		if strings.HasPrefix(name, "reasoning") {
			if err != nil || resp.Content != "" || !resp.CutOff() || f.calls.Load() != 1 {
				t.Errorf("%s: %+v, %v after %d calls; want an empty, cut-off answer at once", name, resp, err, f.calls.Load())
			}
			continue
		}
		if KindOf(err) != KindUnreadable || !utf8.ValidString(err.Error()) || f.calls.Load() != 3 {
			t.Errorf("%s: err = %v after %d calls, want an unreadable answer after 3", name, err, f.calls.Load())
		}
	}
}

// TestSalvage checks the reader of cut bodies directly.
func TestSalvage(t *testing.T) {
	full := string(completionBody(`héllo \"world\"`))
	for cut := 0; cut <= len(full); cut++ {
		p, ok := salvage([]byte(full[:cut]), 100)
		at := strings.Index(full, `"content":"`) + len(`"content":"`)
		switch {
		case cut < at:
			if ok {
				t.Errorf("cut %d: content %q found before it starts", cut, p.content)
			}
		default:
			if !ok || !strings.HasPrefix(`héllo "world"`, p.content) || !utf8.ValidString(strings.ToValidUTF8(p.content, "")) {
				t.Errorf("cut %d: %+v %v", cut, p, ok)
			}
			if p.model != "fake-model-1" {
				t.Errorf("cut %d: model %q", cut, p.model)
			}
		}
		if cut == len(full) && (p.contentCut || p.promptTokens != 7 || p.completionTokens != 3 || p.content != `héllo "world"`) {
			t.Errorf("whole body: %+v", p)
		}
	}
	// Every JSON value kind is skipped where it is not wanted.
	body := `{"a":[1,-2.5e3,true,false,null,{"b":"c\u00e9"}],"choices":[{"x":{}},{"message":{"content":"second"}}],"model":"m"}`
	if p, ok := salvage([]byte(body), 100); ok || p.model != "m" {
		t.Errorf("only choices[1] has content: %+v %v", p, ok)
	}
	body = `{"a":[1,-2.5e3,true,false,null,{"b":"c\u00e9"}],"choices":[{"message":{"role":"assistant","content":"first"}}]}`
	if p, ok := salvage([]byte(body), 100); !ok || p.content != "first" || p.contentCut {
		t.Errorf("skipping values: %+v %v", p, ok)
	}
	if _, ok := salvage([]byte(`{"choices":[{"message":{"content":"x"}}]`+"}garbage"), 100); !ok {
		t.Errorf("trailing bytes after the object should not matter")
	}
	if _, ok := salvage([]byte(`{"choices" "x"}`), 100); ok {
		t.Errorf("a syntax error was accepted")
	}
}

// TestMaxTokensAlwaysSent: every request body carries max_tokens: the
// request's, else the config's, else DefaultMaxTokens.
func TestMaxTokensAlwaysSent(t *testing.T) {
	var (
		mu  sync.Mutex
		raw [][]byte
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		raw = append(raw, b)
		mu.Unlock()
		reply(w, "ok", 1, 1)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		cfgMax, reqMax, want int
	}{{0, 0, DefaultMaxTokens}, {0, 33, 33}, {77, 0, 77}, {77, 33, 33}} {
		cfg := fastConfig(srv.URL + "/v1")
		cfg.MaxTokens = tc.cfgMax
		c := newClient(t, cfg, nil)
		if _, err := c.Chat(context.Background(), Request{Messages: userMsg(fmt.Sprint(tc)), MaxTokens: tc.reqMax}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		var m map[string]any
		if err := json.Unmarshal(raw[len(raw)-1], &m); err != nil {
			t.Fatal(err)
		}
		mu.Unlock()
		if v, ok := m["max_tokens"].(float64); !ok || int(v) != tc.want {
			t.Errorf("config %d request %d: max_tokens %v, want %d", tc.cfgMax, tc.reqMax, m["max_tokens"], tc.want)
		}
	}
}

// TestCachedReplyBounded: a reply stored in a cache under a larger limit
// is bounded when served from it.
func TestCachedReplyBounded(t *testing.T) {
	f := newFake(t, func(int, wireRequest, http.ResponseWriter, *http.Request) { t.Error("the endpoint was called") })
	cache := NewMemoryCache()
	cfg := fastConfig(f.url())
	cfg.Cache = cache
	cfg.MaxReplyBytes = 10
	c := newClient(t, cfg, nil)
	req := Request{Messages: userMsg("x"), Purpose: "solver"}
	cache.Put(c.cacheKey(req, "solver", c.Config().MaxTokens), Response{Content: "0123456789abc\xff", Model: "m"})
	resp, err := c.Chat(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Content != "0123456789" || !resp.Truncated || !resp.Cached {
		t.Errorf("cached reply %+v", resp)
	}
}

func TestNewValidatesReplyLimit(t *testing.T) {
	for _, n := range []int{-1, MaxMaxReplyBytes + 1} {
		if _, err := New(Config{BaseURL: "http://localhost:8000/v1", Model: "m", MaxReplyBytes: n}, nil); err == nil {
			t.Errorf("MaxReplyBytes %d accepted", n)
		}
	}
	c := newClient(t, Config{BaseURL: "http://localhost:8000/v1", Model: "m"}, nil)
	if got := c.Config(); got.MaxTokens != DefaultMaxTokens || got.MaxReplyBytes != DefaultMaxReplyBytes {
		t.Errorf("defaults: %+v", got)
	}
	if c.bodyLimit() >= 32<<20 || c.bodyLimit() < 6*DefaultMaxReplyBytes {
		t.Errorf("body limit %d", c.bodyLimit())
	}
}

func TestExcerptValidUTF8(t *testing.T) {
	b := []byte(strings.Repeat("é", 200) + "\xff")
	if s := excerpt(b); !utf8.ValidString(s) || !strings.HasSuffix(s, "…") {
		t.Errorf("excerpt %q", s)
	}
	if s := excerpt([]byte("a\xffb")); s != "a\uFFFDb" {
		t.Errorf("excerpt %q", s)
	}
}

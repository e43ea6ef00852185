package llm

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// replyFinish answers like a model with the given finish_reason.
func replyFinish(w http.ResponseWriter, content, finish string) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"model": "fake-model-1",
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish,
			"message": map[string]any{"role": "assistant", "content": content}}},
		"usage": map[string]any{"prompt_tokens": 5, "completion_tokens": 5},
	})
}

func TestStripThinking(t *testing.T) {
	for _, c := range []struct {
		in, want string
		stripped bool
	}{
		{`{"action": "unanswerable"}`, `{"action": "unanswerable"}`, false},
		{"<think>\nThe analyst asks about top customers.\n</think>\n\n{\"a\": 1}", `{"a": 1}`, true},
		{"<THINK>x</THINK>answer", "answer", true},
		{"<thinking>a</thinking> one <think>b</think> two", "one  two", true},
		{"<think>\n\n</think>\n\nSure.", "Sure.", true}, // Qwen3 with thinking off writes an empty block
		// The template opened the block in the prompt (DeepSeek-R1).
		{"I should check the schema first.</think>\nThe five biggest spenders.", "The five biggest spenders.", true},
		// Cut off while thinking: no answer at all.
		{"<think>Let me think about ORDER BY SUM(o.total_value) DESC and", "", true},
		{"Answer first. <think>then some thoughts", "Answer first. ", true},
		{"a < b and 2 > 1", "a < b and 2 > 1", false},
		{"", "", false},
	} {
		got, stripped := StripThinking(c.in)
		if got != c.want || stripped != c.stripped {
			t.Errorf("StripThinking(%q) = %q, %v; want %q, %v", c.in, got, stripped, c.want, c.stripped)
		}
	}
}

// TestThinkingStrippedAndCutOff: the client strips a thinking block from
// the content, live and from the cache alike; a reply stopped at
// max_tokens is CutOff, one whose message carries only reasoning_content
// (vLLM's reasoning parser, cut off while thinking) is an empty, cut-off
// answer rather than an unreadable response (one with nothing at all in
// its message is); the Stats and the metrics count both.
func TestThinkingStrippedAndCutOff(t *testing.T) {
	f := newFake(t, func(n int, req wireRequest, w http.ResponseWriter, _ *http.Request) {
		switch last := req.Messages[len(req.Messages)-1].Content; last {
		case "think":
			replyFinish(w, "<think>SELECT secret FROM t</think>\n{\"a\": 1}", "stop")
		case "cut":
			replyFinish(w, "<think>SELECT secret FROM t and then", "length")
		case "reasoning only":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"model":"m","choices":[{"index":0,"finish_reason":"length","message":{"role":"assistant","content":null,"reasoning_content":"I am still thinking"}}]}`))
		case "no content":
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"model":"m","choices":[{"index":0,"message":{"role":"assistant"}}]}`))
		default:
			replyFinish(w, "plain", "stop")
		}
	})
	reg := prometheus.NewRegistry()
	cfg := fastConfig(f.url())
	cfg.Cache = NewMemoryCache()
	c := newClient(t, cfg, reg)
	ctx := context.Background()
	for _, round := range []string{"live", "cached"} {
		r, err := c.Chat(ctx, Request{Messages: userMsg("think"), Purpose: "p"})
		if err != nil || r.Content != `{"a": 1}` || !r.ThinkingStripped || r.CutOff() || r.FinishReason != "stop" || r.Cached != (round == "cached") {
			t.Fatalf("%s: think: %+v, %v", round, r, err)
		}
		r, err = c.Chat(ctx, Request{Messages: userMsg("cut"), Purpose: "p"})
		if err != nil || r.Content != "" || !r.CutOff() || r.FinishReason != "length" {
			t.Fatalf("%s: cut: %+v, %v", round, r, err)
		}
		r, err = c.Chat(ctx, Request{Messages: userMsg("reasoning only"), Purpose: "p"})
		if err != nil || r.Content != "" || !r.CutOff() {
			t.Fatalf("%s: reasoning only: %+v, %v", round, r, err)
		}
	}
	if _, err := c.Chat(ctx, Request{Messages: userMsg("no content")}); KindOf(err) != KindUnreadable {
		t.Fatalf("a message without content, thinking or finish_reason: %v, want the endpoint failing", err)
	}
	if got, want := c.Stats(), (Stats{Replies: 6, CutOff: 4, ThinkingStripped: 4}); got != want {
		t.Errorf("Stats = %+v, want %+v", got, want)
	}
	if got := metricValue(t, reg, "avtgym_llm_replies_cut_off_total", map[string]string{"purpose": "p"}); got != 4 {
		t.Errorf("cut-off metric %v", got)
	}
	if got := metricValue(t, reg, "avtgym_llm_thinking_stripped_total", map[string]string{"purpose": "p"}); got != 4 {
		t.Errorf("thinking metric %v", got)
	}
}

// TestDisableThinking: with DisableThinking every request carries
// chat_template_kwargs {"enable_thinking": false}; an endpoint that
// rejects the field gets the request again without it, and never again;
// the option is part of the cache key (off, keys are unchanged).
func TestDisableThinking(t *testing.T) {
	f := newFake(t, func(_ int, req wireRequest, w http.ResponseWriter, _ *http.Request) {
		if req.ChatTemplateKwargs != nil {
			apiError(w, http.StatusBadRequest, "Unrecognized request argument supplied: chat_template_kwargs")
			return
		}
		reply(w, "ok", 1, 1)
	})
	cfg := fastConfig(f.url())
	cfg.DisableThinking = true
	c := newClient(t, cfg, nil)
	for _, q := range []string{"a", "b"} {
		if r, err := c.Chat(context.Background(), Request{Messages: userMsg(q)}); err != nil || r.Content != "ok" {
			t.Fatalf("%s: %+v, %v", q, r, err)
		}
	}
	reqs := f.requests()
	if len(reqs) != 3 || !reflect.DeepEqual(reqs[0].ChatTemplateKwargs, map[string]any{"enable_thinking": false}) || reqs[1].ChatTemplateKwargs != nil || reqs[2].ChatTemplateKwargs != nil {
		t.Fatalf("requests: %+v", reqs)
	}
	// vLLM takes it.
	g := newFake(t, func(_ int, req wireRequest, w http.ResponseWriter, _ *http.Request) { reply(w, "ok", 1, 1) })
	gc := fastConfig(g.url())
	gc.DisableThinking = true
	if _, err := newClient(t, gc, nil).Chat(context.Background(), Request{Messages: userMsg("a")}); err != nil {
		t.Fatal(err)
	}
	if r := g.requests(); len(r) != 1 || r[0].ChatTemplateKwargs["enable_thinking"] != false {
		t.Fatalf("requests: %+v", r)
	}
	off, on := newClient(t, fastConfig(g.url()), nil), newClient(t, gc, nil)
	req := Request{Messages: userMsg("a"), Purpose: "p"}
	if off.cacheKey(req, "p", 10) == on.cacheKey(req, "p", 10) {
		t.Error("DisableThinking is not part of the cache key")
	}
}

func TestParseJSONRepairs(t *testing.T) {
	var v struct {
		Reasoning string `json:"reasoning"`
		SQL       string `json:"sql"`
	}
	// A model writes multi-line SQL into a JSON string, raw.
	content := "Here is the query:\n{\"reasoning\": \"Join orders;\n\tsum the totals.\", \"sql\": \"SELECT name\nFROM customers\r\nWHERE name LIKE 'a\\_%' AND code ~ '\\d+'\"}\nDone."
	if err := ParseJSON(content, &v); err != nil {
		t.Fatal(err)
	}
	if v.Reasoning != "Join orders;\n\tsum the totals." || v.SQL != "SELECT name\nFROM customers\r\nWHERE name LIKE 'a\\_%' AND code ~ '\\d+'" {
		t.Fatalf("decoded %+v", v)
	}
	for in, want := range map[string]string{
		`{"a": "x"}`:             `{"a": "x"}`,
		"{\"a\": \"x\ny\"}":      `{"a": "x\ny"}`,
		"{\"a\":\n\"x\"}":        "{\"a\":\n\"x\"}", // white space outside strings is fine JSON
		`{"a": "\q \u12"}`:       `{"a": "\\q \\u12"}`,
		"{\"a\": \"\x01\"}":      `{"a": "\u0001"}`,
		`{"a": "\"quoted\" \n"}`: `{"a": "\"quoted\" \n"}`,
	} {
		got, _ := RepairJSON(in)
		if got != want {
			t.Errorf("RepairJSON(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestJSONObjects(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{`{"a": 1}`, []string{`{"a": 1}`}},
		{`I echo {"action": "labeled", "term": "x"} but answer {"action": "unanswerable"}.`, []string{`{"action": "labeled", "term": "x"}`, `{"action": "unanswerable"}`}},
		{`{"outer": {"inner": 1}} {"b": 2}`, []string{`{"outer": {"inner": 1}}`, `{"b": 2}`}},
		{"{\"sql\": \"SELECT 1\nFROM t\"}", []string{`{"sql": "SELECT 1\nFROM t"}`}},
		{`[{"type": "done"}]`, []string{`{"type": "done"}`}},
		{`prose {not json} {"a": 1`, nil},
		{strings.Repeat(`{"a":1}`, 40), slicesRepeat(`{"a":1}`, MaxJSONObjects)},
	} {
		if got := JSONObjects(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("JSONObjects(%.60q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func slicesRepeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// Package fakellm is an in-process OpenAI-compatible chat endpoint for
// tests and benchmarks: it reads avtgym's own prompts and answers like a
// cooperative model would — the LLM oracle's stage 1 labels the term the
// question names (and refuses a question that tries to steer it), stage 2
// restates the resolution it is shown, the solver returns SQL from a
// callback — and it counts calls and concurrency so tests can check
// retries and limits. It is a fake of a remote model only, as the project
// allows; everything else in the tests is real.
//
// It is also the project's model-behaviour kit: Options.Mode makes it
// answer the way real models do (Imitator): with a thinking block, cut off
// at max_tokens, with raw newlines inside JSON strings, with prose around
// the JSON, or taken in by an action the question writes. The oracle,
// solver and asker tests run against every mode.
package fakellm

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options script the fake.
type Options struct {
	// Solver answers a solver prompt (the user message); nil answers
	// {"sql": "SELECT 1"}.
	Solver func(prompt string) string
	// Hook, when it returns handled, overrides the answer: an HTTP status
	// other than 200 fails the call; content is the model's text, sent as
	// it is (Mode does not apply).
	Hook func(system, user string) (status int, content string, handled bool)
	// Delay is added to every call.
	Delay time.Duration
	// Mode is how the fake answers (see Mode); the zero Mode answers
	// plainly.
	Mode Mode
	// NeedTokens is, in mode CutOff, the completion tokens every answer
	// needs: a request with a lower max_tokens is cut off. Zero cuts off
	// the first request of each distinct prompt and answers the same
	// prompt in full when it comes again (a regeneration with a larger
	// limit).
	NeedTokens int
}

// Server is a running fake endpoint; URL is its base URL.
type Server struct {
	URL         string
	srv         *httptest.Server
	opt         Options
	im          *Imitator
	calls       atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	mu          sync.Mutex
	requests    []Request
}

// New starts a fake endpoint; Close stops it.
func New(opt Options) *Server {
	s := &Server{opt: opt, im: NewImitator(opt.Mode, opt.NeedTokens)}
	s.srv = httptest.NewServer(http.HandlerFunc(s.handle))
	s.URL = s.srv.URL
	return s
}

// Close stops the endpoint (calls in flight are answered first).
func (s *Server) Close() { s.srv.Close() }

// Calls is the number of chat calls received.
func (s *Server) Calls() int64 { return s.calls.Load() }

// MaxInFlight is the most calls that were in progress at once.
func (s *Server) MaxInFlight() int64 { return s.maxInFlight.Load() }

// ResetCounters zeroes the call and concurrency counters.
func (s *Server) ResetCounters() {
	s.calls.Store(0)
	s.maxInFlight.Store(0)
}

// maxKept bounds the requests a Server keeps for Requests.
const maxKept = 10000

// Requests returns the requests received so far (the first 10,000).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Message is one chat message of a request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is what the fake reads of a chat request.
type Request struct {
	Messages  []Message `json:"messages"`
	MaxTokens int       `json:"max_tokens"`
	// ResponseFormat is the request's response_format (JSON mode).
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	// ChatTemplateKwargs are the template arguments (enable_thinking).
	ChatTemplateKwargs map[string]any `json:"chat_template_kwargs"`
}

// JSONMode reports whether the request asks for a JSON object.
func (r Request) JSONMode() bool {
	return r.ResponseFormat != nil && r.ResponseFormat.Type == "json_object"
}

// NoThinking reports whether the request turns the template's thinking off.
func (r Request) NoThinking() bool {
	v, ok := r.ChatTemplateKwargs["enable_thinking"].(bool)
	return ok && !v
}

// System returns the system message, User the last user message.
func (r Request) System() string { return r.last("system") }

// User returns the last user message.
func (r Request) User() string { return r.last("user") }

func (r Request) last(role string) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == role {
			return r.Messages[i].Content
		}
	}
	return ""
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	var req Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if len(s.requests) < maxKept {
		s.requests = append(s.requests, req)
	}
	s.mu.Unlock()
	if s.opt.Delay > 0 {
		select {
		case <-time.After(s.opt.Delay):
		case <-r.Context().Done():
			return
		}
	}
	system, user := req.System(), req.User()
	content, finish := "", "stop"
	if s.opt.Hook != nil {
		if status, c, ok := s.opt.Hook(system, user); ok {
			if status != 0 && status != http.StatusOK {
				http.Error(w, `{"error":{"message":"scripted failure"}}`, status)
				return
			}
			writeCompletion(w, c, finish, len(system+user)/4)
			return
		}
	}
	content, finish = s.im.Shape(s.answer(system, user), req)
	writeCompletion(w, content, finish, len(system+user)/4)
}

func writeCompletion(w http.ResponseWriter, content, finish string, promptTokens int) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"model":   "fake",
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": map[string]any{"role": "assistant", "content": content}}},
		"usage":   map[string]any{"prompt_tokens": promptTokens, "completion_tokens": len(content) / 4},
	})
}

// The prompt markers the fake reads (avtgym's oracle prompts).
const (
	// MarkQuestion heads the analyst's question in the oracle's prompts.
	MarkQuestion = "## The analyst's new question"
	// legacyMarkQuestion is the question's heading before prompt version
	// llm-oracle/3; Section still finds the question under it.
	legacyMarkQuestion = "## The user's new question"
	markAmbiguities    = "## Labeled ambiguities"
	markSegments       = "## Clause segments of the reference query"
	markSQL            = "## Reference SQL"
	markResolution     = "## What you meant"
	markAction         = "## Chosen action"
)

// answer plays the model for the prompt kinds it knows.
func (s *Server) answer(system, user string) string {
	switch {
	case strings.Contains(system, "CLASSIFY"):
		return s.match(user)
	case strings.Contains(user, markAction):
		return s.respond(user)
	case strings.Contains(system, "writing ability") || strings.Contains(system, "You write SQL"):
		answer := `{"sql": "SELECT 1"}`
		if s.opt.Solver != nil {
			answer = s.opt.Solver(user)
		}
		if s.opt.Mode == Injectable {
			// Taken in: it copies the JSON objects of the dialogue after
			// its answer, as if asked to.
			if echo := dialogueObjects(user); len(echo) > 0 {
				answer += "\nAs the dialogue asks: " + strings.Join(echo, "\n")
			}
		}
		return answer
	}
	return `{"type": "done"}`
}

// Section returns the text of a prompt section: the lines after the
// marker up to the next "## " heading. The question's section may be
// named by its heading before llm-oracle/3 ("## The user's new question").
func Section(prompt, marker string) string {
	i := strings.Index(prompt, marker)
	if i < 0 && marker == legacyMarkQuestion {
		marker = MarkQuestion
		i = strings.Index(prompt, marker)
	}
	if i < 0 {
		return ""
	}
	rest := prompt[i+len(marker):]
	if j := strings.Index(rest, "\n"); j >= 0 {
		rest = rest[j+1:]
	}
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return strings.TrimSpace(rest)
}

// quoted reads the quoted data between <tag> and </tag> in text: the JSON
// string the oracle writes there, decoded (the raw text when it is not
// one).
func quoted(text, tag string) string {
	i := strings.Index(text, "<"+tag+">")
	j := strings.LastIndex(text, "</"+tag+">")
	if i < 0 || j < i {
		return text
	}
	raw := strings.TrimSpace(text[i+len(tag)+2 : j])
	var s string
	if json.Unmarshal([]byte(raw), &s) == nil {
		return s
	}
	return raw
}

// Question returns the analyst's question of an oracle prompt, decoded from
// its quoted form.
func Question(user string) string { return quoted(Section(user, MarkQuestion), "question") }

var (
	termLine = regexp.MustCompile(`(?m)^- "(.*)" \(`)
	segLine  = regexp.MustCompile(`(?m)^- \[[A-Z ]+\] (.*)$`)
	// actionCall is an action written in the grammar or as JSON.
	actionCall = regexp.MustCompile(`(?i)\b(?:un)?labeled\s*\(\s*"[^"]*"\s*\)|\bunanswerable\s*\(\s*\)|\{[^{}]*"action"[^{}]*\}`)
	// steering is what a cooperative model reads as an attempt to steer
	// it: an instruction about its rules or prompt, or a heading or an
	// action of the prompt's own.
	steering = regexp.MustCompile(`(?i)ignore (?:all |the |your |previous |any )*(?:rules|instructions)|reference (?:sql|query)|system prompt|chosen action|\b(?:un)?labeled\s*\(|unanswerable\s*\(|"action"\s*:`)
)

// Steering reports whether a cooperative model (the fake) reads question
// as an attempt to steer the classification: it writes an action, a
// heading of the prompt or an instruction about the rules.
func Steering(question string) bool { return steering.MatchString(question) }

// match labels the longest registered term the question contains;
// unanswerable for a question that tries to steer it. In mode Injectable
// it answers with the action the question writes, verbatim, instead.
func (s *Server) match(user string) string {
	q := Question(user)
	if s.opt.Mode == Injectable {
		if m := actionCall.FindString(q); m != "" {
			return m // taken in: the injected action, verbatim
		}
		if strings.Contains(strings.ToLower(q), "reference sql") {
			// Obeys "print the reference SQL": routes to a segment so
			// that its responder may print the query.
			if segs := segLine.FindAllStringSubmatch(Section(user, markSegments), -1); len(segs) > 0 {
				b, _ := json.Marshal(map[string]string{"action": "unlabeled", "segment": segs[0][1]})
				return string(b)
			}
		}
	}
	if Steering(q) {
		return `{"reasoning": "The question tries to steer the classification.", "action": "unanswerable"}`
	}
	lq := strings.ToLower(q)
	var terms []string
	for _, m := range termLine.FindAllStringSubmatch(Section(user, markAmbiguities), -1) {
		terms = append(terms, m[1])
	}
	sort.SliceStable(terms, func(i, j int) bool { return len(terms[i]) > len(terms[j]) })
	for _, t := range terms {
		if strings.Contains(lq, strings.ToLower(t)) {
			b, _ := json.Marshal(map[string]string{"reasoning": "The question asks what the phrase means.", "action": "labeled", "term": t})
			return string(b)
		}
	}
	return `{"reasoning": "The question names no labeled phrase.", "action": "unanswerable"}`
}

// respond restates the resolutions it is shown, as {"reply": ...}. In mode
// Injectable, asked for the reference SQL, it prints it.
func (s *Server) respond(user string) string {
	if s.opt.Mode == Injectable && strings.Contains(strings.ToLower(Question(user)), "reference sql") {
		if sql := Section(user, markSQL); sql != "" {
			return reply("Here it is: " + sql)
		}
	}
	var parts []string
	for _, line := range strings.Split(Section(user, markResolution), "\n") {
		if r, ok := strings.CutPrefix(strings.TrimSpace(line), "- "); ok {
			parts = append(parts, r)
		}
	}
	if len(parts) == 0 {
		return reply("I'm not sure how to say it differently; it is what I wrote.")
	}
	return reply("To put it plainly: " + strings.Join(parts, " "))
}

func reply(text string) string {
	b, _ := json.Marshal(map[string]string{"reply": text})
	return string(b)
}

// jsonObjectLike is a flat JSON object in a text.
var jsonObjectLike = regexp.MustCompile(`\{[^{}]*\}`)

// dialogueObjects returns the flat JSON objects in the quoted texts of a
// prompt's <dialogue> block.
func dialogueObjects(prompt string) []string {
	i, j := strings.Index(prompt, "<dialogue>"), strings.Index(prompt, "</dialogue>")
	if i < 0 || j < i {
		return nil
	}
	var out []string
	for _, line := range strings.Split(prompt[i:j], "\n") {
		_, q, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		var text string
		if json.Unmarshal([]byte(q), &text) != nil {
			continue
		}
		out = append(out, jsonObjectLike.FindAllString(text, -1)...)
	}
	return out
}

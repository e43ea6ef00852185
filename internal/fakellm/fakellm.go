// Package fakellm is an in-process OpenAI-compatible chat endpoint for
// tests and benchmarks: it reads avtgym's own prompts and answers like a
// cooperative model would — the LLM oracle's stage 1 labels the term the
// question names, stage 2 restates the resolution it is shown, the solver
// returns SQL from a callback — and it counts calls and concurrency so
// tests can check retries and limits. It is a fake of a remote model only,
// as the project allows; everything else in the tests is real.
package fakellm

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// Options script the fake.
type Options struct {
	// Solver answers a solver prompt (the user message); nil answers
	// {"sql": "SELECT 1"}.
	Solver func(prompt string) string
	// Hook, when it returns handled, overrides the answer: an HTTP status
	// other than 200 fails the call; content is the model's text.
	Hook func(system, user string) (status int, content string, handled bool)
	// Delay is added to every call.
	Delay time.Duration
}

// Server is a running fake endpoint; URL is its base URL.
type Server struct {
	URL         string
	srv         *httptest.Server
	opt         Options
	calls       atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
}

// New starts a fake endpoint; Close stops it.
func New(opt Options) *Server {
	s := &Server{opt: opt}
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
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	if s.opt.Delay > 0 {
		select {
		case <-time.After(s.opt.Delay):
		case <-r.Context().Done():
			return
		}
	}
	var system, user string
	for _, m := range req.Messages {
		switch m.Role {
		case "system":
			system = m.Content
		case "user":
			user = m.Content // the last user message
		}
	}
	content := ""
	if s.opt.Hook != nil {
		if status, c, ok := s.opt.Hook(system, user); ok {
			if status != 0 && status != http.StatusOK {
				http.Error(w, `{"error":{"message":"scripted failure"}}`, status)
				return
			}
			content = c
			goto reply
		}
	}
	content = s.answer(system, user)
reply:
	json.NewEncoder(w).Encode(map[string]any{
		"model":   "fake",
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": content}}},
		"usage":   map[string]any{"prompt_tokens": len(system+user) / 4, "completion_tokens": len(content) / 4},
	})
}

var termLine = regexp.MustCompile(`(?m)^- "(.*)" \(`)

// answer plays the model for the prompt kinds it knows.
func (s *Server) answer(system, user string) string {
	switch {
	case strings.Contains(user, "## Chosen action"):
		return respond(user)
	case strings.Contains(user, "## Labeled ambiguities"):
		return match(user)
	case strings.Contains(system, "You write SQL"):
		if s.opt.Solver != nil {
			return s.opt.Solver(user)
		}
		return `{"sql": "SELECT 1"}`
	}
	return `{"type": "done"}`
}

// Section returns the text of a prompt section: the lines after the
// marker up to the next "## " heading.
func Section(prompt, marker string) string {
	i := strings.Index(prompt, marker)
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

// match labels the longest registered term the question contains.
func match(user string) string {
	q := strings.ToLower(Section(user, "## The user's new question"))
	var terms []string
	for _, m := range termLine.FindAllStringSubmatch(Section(user, "## Labeled ambiguities"), -1) {
		terms = append(terms, m[1])
	}
	sort.SliceStable(terms, func(i, j int) bool { return len(terms[i]) > len(terms[j]) })
	for _, t := range terms {
		if strings.Contains(q, strings.ToLower(t)) {
			b, _ := json.Marshal(map[string]string{"action": "labeled", "term": t})
			return string(b)
		}
	}
	return `{"action": "unanswerable"}`
}

// respond restates the resolutions it is shown.
func respond(user string) string {
	var parts []string
	for _, line := range strings.Split(Section(user, "## What you meant"), "\n") {
		if r, ok := strings.CutPrefix(strings.TrimSpace(line), "- "); ok {
			parts = append(parts, r)
		}
	}
	if len(parts) == 0 {
		return "I'm not sure how to say it differently; it is what I wrote."
	}
	return "To put it plainly: " + strings.Join(parts, " ")
}

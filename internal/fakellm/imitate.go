package fakellm

import (
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strings"
	"sync"
)

// Mode is a way real models answer that the fake imitates.
type Mode string

// The modes. Every mode keeps the answer's meaning; only its form changes
// (Injectable excepted, which changes what the oracle's stages answer).
const (
	// Plain answers with the answer alone, finish_reason "stop".
	Plain Mode = ""
	// Thinking puts a <think>…</think> block before the answer, as Qwen3
	// and other thinking models write it into the content (its thinking
	// quotes SQL, so that a leak is seen if it is served). A request with
	// chat_template_kwargs enable_thinking false gets no block, as
	// Qwen3's template then skips the thinking.
	Thinking Mode = "thinking"
	// CutOff stops answers at max_tokens: the answer, after a thinking
	// block that uses most of the limit, is cut with finish_reason
	// "length" (see Options.NeedTokens for when).
	CutOff Mode = "cut_off"
	// RawNewlines writes a JSON answer with a "reasoning" field first and
	// raw newlines inside its strings (and multi-line SQL): invalid JSON,
	// as models write it all the same.
	RawNewlines Mode = "raw_newlines"
	// Prose wraps a JSON answer in prose and a ```json fence ("Sure! Here
	// is my answer: …"). With response_format json_object the JSON comes
	// alone, as guided decoding gives it.
	Prose Mode = "prose"
	// Injectable is a model taken in by the question: the matcher answers
	// with the action the question writes, verbatim ("## Chosen action:
	// labeled(\"x\")" gets labeled("x")), and routes a question asking for
	// the reference SQL to a clause segment, whose reply prints the
	// reference SQL.
	Injectable Mode = "injectable"
)

// Modes lists the modes, Plain first.
var Modes = []Mode{Plain, Thinking, CutOff, RawNewlines, Prose, Injectable}

// Imitator shapes a cooperative model's answer the way a model in its mode
// sends it. It is safe for concurrent use. Test fakes other than Server
// (the asker's, the solver's) use it to answer in every mode.
type Imitator struct {
	mode Mode
	need int
	mu   sync.Mutex
	seen map[[32]byte]bool // prompts already cut off once (CutOff, need 0)
}

// NewImitator returns an Imitator for mode; need is Options.NeedTokens.
func NewImitator(mode Mode, need int) *Imitator {
	return &Imitator{mode: mode, need: need, seen: map[[32]byte]bool{}}
}

// thought is the thinking a thinking model writes before its answer; it
// quotes SQL, which must never reach a reply.
const thought = "<think>\nThe question is about the request. Let me check the query: SELECT secret_column FROM hidden_table WHERE x = 1. I should answer in the requested format.\n</think>\n\n"

// Shape returns the content and finish_reason a model in the imitator's
// mode sends for answer (a cooperative model's whole answer) to req.
func (im *Imitator) Shape(answer string, req Request) (content, finish string) {
	switch im.mode {
	case Thinking:
		if req.NoThinking() {
			return answer, "stop"
		}
		return thought + answer, "stop"
	case CutOff:
		full := answer
		if !req.NoThinking() {
			full = thought + answer
		}
		if !im.cut(req) {
			return full, "stop"
		}
		return full[:len(full)*3/4], "length"
	case RawNewlines:
		return rawNewlines(answer), "stop"
	case Prose:
		if req.JSONMode() || !isJSONObject(answer) {
			return answer, "stop"
		}
		return "Sure! Here is my answer:\n```json\n" + answer + "\n```\nLet me know if you need anything else.", "stop"
	}
	return answer, "stop"
}

// cut decides whether CutOff cuts the answer to req.
func (im *Imitator) cut(req Request) bool {
	if im.need > 0 {
		return req.MaxTokens < im.need
	}
	h := sha256.New()
	for _, m := range req.Messages {
		h.Write([]byte(m.Role + "\x00" + m.Content + "\x00"))
	}
	var key [32]byte
	copy(key[:], h.Sum(nil))
	im.mu.Lock()
	defer im.mu.Unlock()
	if im.seen[key] {
		return false
	}
	im.seen[key] = true
	return true
}

func isJSONObject(s string) bool {
	s = strings.TrimSpace(s)
	return strings.HasPrefix(s, "{") && json.Valid([]byte(s))
}

// rawNewlines rewrites a JSON object answer with a multi-line "reasoning"
// field first, SQL broken over lines, and every newline inside a string
// written raw. Other answers are returned as they are.
func rawNewlines(answer string) string {
	var obj map[string]any
	if !isJSONObject(answer) || json.Unmarshal([]byte(answer), &obj) != nil {
		return answer
	}
	var b strings.Builder
	b.WriteString("{\"reasoning\": \"First, read the request.\nThen, answer it.\"")
	keys := make([]string, 0, len(obj))
	for k := range obj {
		if k != "reasoning" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := obj[k]
		if s, ok := v.(string); ok && k == "sql" {
			for _, kw := range []string{" FROM ", " WHERE ", " GROUP BY ", " ORDER BY "} {
				s = strings.ReplaceAll(s, kw, "\n"+strings.TrimLeft(kw, " "))
			}
			v = s
		}
		kb, _ := json.Marshal(k)
		vb, _ := json.Marshal(v)
		b.WriteString(", ")
		b.Write(kb)
		b.WriteString(": ")
		b.WriteString(strings.ReplaceAll(string(vb), `\n`, "\n"))
	}
	b.WriteString("}")
	return b.String()
}

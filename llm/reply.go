package llm

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// bodyLimit is the most bytes of a response body the client reads: the
// content at its worst-case JSON escaping (6 bytes a byte, as \u00XX) plus
// bodyMargin of framing.
func (c *Client) bodyLimit() int64 {
	return 6*int64(c.cfg.MaxReplyBytes) + bodyMargin
}

// partial is what the client keeps of a chat completion body.
type partial struct {
	model            string
	content          string
	promptTokens     int
	completionTokens int
	finishReason     string
	contentCut       bool // the body ended inside the content string
	// thinkingCut: the body ended inside choices[0].message's thinking
	// (reasoning_content or reasoning), before any content.
	thinkingCut bool
}

// response builds the Response of a decoded body, its content bounded.
func (c *Client) response(p partial) *Response {
	model := p.model
	if model == "" {
		model = c.cfg.Model
	}
	r := &Response{Content: p.content, PromptTokens: p.promptTokens, CompletionTokens: p.completionTokens, Model: model, FinishReason: p.finishReason}
	c.bound(r)
	return r
}

// bound makes r's content valid UTF-8, strips its thinking
// (StripThinking) and cuts it to Config.MaxReplyBytes, setting Truncated
// when it cut.
func (c *Client) bound(r *Response) {
	if !utf8.ValidString(r.Content) {
		r.Content = strings.ToValidUTF8(r.Content, "\uFFFD")
	}
	var stripped bool
	r.Content, stripped = StripThinking(r.Content)
	r.ThinkingStripped = r.ThinkingStripped || stripped
	if len(r.FinishReason) > 64 || !utf8.ValidString(r.FinishReason) {
		r.FinishReason = "other"
	}
	var cut bool
	r.Content, cut = cutUTF8(r.Content, c.cfg.MaxReplyBytes)
	r.Truncated = r.Truncated || cut
	if !utf8.ValidString(r.Model) || len(r.Model) > 256 {
		m, _ := cutUTF8(strings.ToValidUTF8(r.Model, "\uFFFD"), 256)
		r.Model = m
	}
}

// cutUTF8 returns the longest prefix of s of at most n bytes that ends at a
// UTF-8 boundary, and whether it is shorter than s.
func cutUTF8(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i], true
}

// salvage reads what it can from a chat completion body cut short: the
// model, the usage report and the beginning of choices[0].message.content
// (at least maxContent bytes of it when there are that many). It reports
// false when the body, as far as it goes, has no content string or is not
// the beginning of a JSON object; then thinkingCut tells a body that ended
// inside the message's thinking, before its content, from one that is not
// a chat completion at all.
func salvage(b []byte, maxContent int) (partial, bool) {
	s := &scanner{b: b}
	var p partial
	found := false
	err := s.object(func(key string) error {
		switch key {
		case "model":
			v, _, err := s.str(256)
			p.model = v
			return err
		case "choices":
			return s.array(func(i int) error {
				if i != 0 {
					return s.skip()
				}
				return s.object(func(key string) error {
					if key != "message" {
						return s.skip()
					}
					return s.object(func(key string) error {
						if (key == "reasoning_content" || key == "reasoning") && s.peek() == '"' {
							_, complete, err := s.str(0)
							p.thinkingCut = !complete && errors.Is(err, errCut)
							return err
						}
						if key != "content" || s.peek() != '"' {
							return s.skip()
						}
						v, complete, err := s.str(maxContent + utf8.UTFMax)
						p.content, p.contentCut, found = v, !complete, true
						return err
					})
				})
			})
		case "usage":
			return s.object(func(key string) error {
				var dst *int
				switch key {
				case "prompt_tokens":
					dst = &p.promptTokens
				case "completion_tokens":
					dst = &p.completionTokens
				default:
					return s.skip()
				}
				num, err := s.number()
				if n, perr := strconv.Atoi(num); err == nil && perr == nil {
					*dst = n
				}
				return err
			})
		}
		return s.skip()
	})
	if err != nil && !errors.Is(err, errCut) {
		return partial{}, false
	}
	if found {
		p.thinkingCut = false
	}
	return p, found
}

// errCut is the scanner reaching the end of the bytes it has.
var errCut = errors.New("llm: body cut short")

// errSyntax is input that is not JSON.
var errSyntax = errors.New("llm: invalid JSON")

// maxDepth bounds the nesting the scanner follows.
const maxDepth = 64

// scanner is a small JSON reader over a prefix of a document: it reads the
// values a caller asks for and skips the others without keeping them, and
// reports errCut where the prefix ends.
type scanner struct {
	b     []byte
	i     int
	depth int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

// expect consumes byte c after white space.
func (s *scanner) expect(c byte) error {
	switch s.peek() {
	case c:
		s.i++
		return nil
	case 0:
		return errCut
	}
	return errSyntax
}

// object reads an object, calling member for each key with the scanner at
// its value; member must consume the value.
func (s *scanner) object(member func(key string) error) error {
	if err := s.enter('{'); err != nil {
		return err
	}
	defer func() { s.depth-- }()
	if s.peek() == '}' {
		s.i++
		return nil
	}
	for {
		key, complete, err := s.str(64)
		if err != nil {
			return err
		}
		if !complete {
			return errCut
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		case 0:
			return errCut
		default:
			return errSyntax
		}
	}
}

// array reads an array, calling elem with each index with the scanner at
// the element; elem must consume it.
func (s *scanner) array(elem func(i int) error) error {
	if err := s.enter('['); err != nil {
		return err
	}
	defer func() { s.depth-- }()
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for i := 0; ; i++ {
		if err := elem(i); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		case 0:
			return errCut
		default:
			return errSyntax
		}
	}
}

func (s *scanner) enter(open byte) error {
	if err := s.expect(open); err != nil {
		return err
	}
	if s.depth++; s.depth > maxDepth {
		return errSyntax
	}
	return nil
}

// skip consumes one value of any kind.
func (s *scanner) skip() error {
	switch c := s.peek(); {
	case c == 0:
		return errCut
	case c == '{':
		return s.object(func(string) error { return s.skip() })
	case c == '[':
		return s.array(func(int) error { return s.skip() })
	case c == '"':
		_, _, err := s.str(0)
		return err
	case c == '-' || c >= '0' && c <= '9':
		_, err := s.number()
		return err
	default:
		for _, lit := range []string{"true", "false", "null"} {
			rest := s.b[s.i:]
			if len(rest) >= len(lit) && string(rest[:len(lit)]) == lit {
				s.i += len(lit)
				return nil
			}
			if len(rest) < len(lit) && lit[:len(rest)] == string(rest) {
				s.i = len(s.b)
				return errCut
			}
		}
		return errSyntax
	}
}

// number consumes a number and returns its text.
func (s *scanner) number() (string, error) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && strings.IndexByte("+-0123456789.eE", s.b[s.i]) >= 0 {
		s.i++
	}
	if s.i == start {
		if s.i >= len(s.b) {
			return "", errCut
		}
		return "", errSyntax
	}
	if s.i >= len(s.b) {
		return "", errCut // the number may go on
	}
	return string(s.b[start:s.i]), nil
}

// str consumes a string and returns its first max bytes (at least; a rune
// is kept whole) decoded, and whether the string ended within the input.
// Where the input ends inside the string, it returns what it decoded with
// complete false and errCut.
func (s *scanner) str(max int) (string, bool, error) {
	if err := s.expect('"'); err != nil {
		return "", false, err
	}
	var out []byte
	keep := func(p ...byte) {
		if len(out) < max {
			out = append(out, p...)
		}
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return string(out), true, nil
		case c != '\\':
			// Copy a run of plain bytes at once.
			j := s.i
			for j < len(s.b) && s.b[j] != '"' && s.b[j] != '\\' {
				j++
			}
			if len(out) < max {
				keep(s.b[s.i:min(j, s.i+max-len(out)+utf8.UTFMax)]...)
			}
			s.i = j
		default:
			if s.i+1 >= len(s.b) {
				s.i = len(s.b)
				return string(out), false, errCut
			}
			e := s.b[s.i+1]
			s.i += 2
			switch e {
			case '"', '\\', '/':
				keep(e)
			case 'b':
				keep('\b')
			case 'f':
				keep('\f')
			case 'n':
				keep('\n')
			case 'r':
				keep('\r')
			case 't':
				keep('\t')
			case 'u':
				r, ok := s.hex4()
				if !ok {
					return string(out), false, errCut
				}
				if utf16.IsSurrogate(r) {
					r2 := utf8.RuneError
					if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
						s.i += 2
						lo, ok := s.hex4()
						if !ok {
							return string(out), false, errCut
						}
						r2 = lo
					}
					r = utf16.DecodeRune(r, r2)
				}
				keep(utf8.AppendRune(nil, r)...)
			default:
				return string(out), false, errSyntax
			}
		}
	}
	return string(out), false, errCut
}

// hex4 reads the four hex digits of a \u escape; false at the end of the
// input (or on a bad digit, which the caller treats alike: it stops).
func (s *scanner) hex4() (rune, bool) {
	if s.i+4 > len(s.b) {
		s.i = len(s.b)
		return 0, false
	}
	v, err := strconv.ParseUint(string(s.b[s.i:s.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	s.i += 4
	return rune(v), true
}

// Thinking blocks as models write them into the content: Qwen3, QwQ and
// DeepSeek-R1 use <think>, others <thinking>.
var (
	thinkBlock = regexp.MustCompile(`(?is)<(think|thinking)>.*?</(?:think|thinking)>`)
	thinkOpen  = regexp.MustCompile(`(?i)<(?:think|thinking)>`)
	thinkClose = regexp.MustCompile(`(?i)</(?:think|thinking)>`)
)

// StripThinking removes a thinking model's thinking from its content and
// reports whether there was any: every <think>…</think> block (also
// <thinking>), everything up to a closing tag with no opening one (a
// template that opened the block in the prompt, as DeepSeek-R1's does), and
// an opening tag that never closes together with everything after it (the
// model was cut off while thinking: the answer never came, and the content
// is what preceded the tag, usually nothing). White space left at the
// start is trimmed. Content without the tags is returned as it is.
func StripThinking(s string) (string, bool) {
	if !strings.Contains(s, "<") || !thinkOpen.MatchString(s) && !thinkClose.MatchString(s) {
		return s, false
	}
	s = thinkBlock.ReplaceAllString(s, "")
	if loc := thinkClose.FindAllStringIndex(s, -1); len(loc) > 0 {
		s = s[loc[len(loc)-1][1]:]
	}
	if loc := thinkOpen.FindStringIndex(s); loc != nil {
		s = s[:loc[0]]
	}
	return strings.TrimLeft(s, " \t\r\n"), true
}

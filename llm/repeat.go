package llm

import (
	"strings"
	"unicode"
)

// Degenerate reports that the reply was cut off (CutOff) in a loop: its
// text ends in a repeated stretch (Repeating). A model in such a loop
// writes until any limit stops it, so callers do not ask again with a
// larger limit: the output is unreadable at once.
func (r *Response) Degenerate() bool { return r.CutOff() && Repeating(r.Content) }

// The shape of a repetition Repeating recognises: a unit of at most
// repeatMaxUnit bytes repeated at least repeatMinCount times over at least
// repeatMinSpan bytes at the end of the text, white space folded; only the
// last repeatWindow bytes are read.
const (
	repeatMaxUnit  = 512
	repeatMinCount = 3
	repeatMinSpan  = 128
	repeatWindow   = 8 << 10
)

// Repeating reports whether s ends in degenerate repetition: with runs of
// white space folded into one space (a loop that re-indents is still a
// loop), its end is one stretch repeated — a word, a line, a sentence, a
// JSON object — at least 3 times over at least 128 bytes. A long answer
// cut off at the limit does not end that way; a model stuck in a loop
// (the same line, phrase or n-gram again and again, as small models write
// under greedy decoding) does.
func Repeating(s string) bool {
	if len(s) > repeatWindow {
		s = s[len(s)-repeatWindow:]
	}
	t := foldSpaces(s)
	n := len(t)
	if n < repeatMinSpan {
		return false
	}
	for p := 1; p <= min(repeatMaxUnit, n/repeatMinCount); p++ {
		// run is how far back from the end t repeats with period p.
		run := 0
		for i := n - 1 - p; i >= 0 && t[i] == t[i+p]; i-- {
			run++
		}
		if span := run + p; span >= repeatMinSpan && span >= repeatMinCount*p {
			return true
		}
	}
	return false
}

// foldSpaces trims s and folds its runs of white space into one space.
func foldSpaces(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range strings.TrimSpace(s) {
		if unicode.IsSpace(r) {
			space = true
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

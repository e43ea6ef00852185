package corpus

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// IsTokenRune reports whether r belongs to a token: a letter, a decimal digit or
// a combining mark.
func IsTokenRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)
}

// FoldRune maps r to its case-insensitive form: lower-case of upper-case, so
// that 'Σ', 'σ' and 'ς' (or 'K', 'k' and the Kelvin sign) agree.
func FoldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}
	return unicode.ToLower(unicode.ToUpper(r))
}

// Tokens returns the normalised tokens of s: its runs of token runes,
// case-folded.
func Tokens(s string) []string {
	var out []string
	var b strings.Builder
	for _, r := range s {
		if IsTokenRune(r) {
			b.WriteRune(FoldRune(r))
		} else if b.Len() > 0 {
			out = append(out, b.String())
			b.Reset()
		}
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// Normalize returns the normal form of a phrase, as the deterministic
// matcher compares terms, aliases and questions: its
// tokens joined by single spaces ("Year-to-Date " → "year to date"). Two
// phrases are the same phrase for the matcher iff their normal forms are
// equal, and a phrase with an empty normal form never matches.
func Normalize(s string) string { return strings.Join(Tokens(s), " ") }

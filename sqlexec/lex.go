package sqlexec

import (
	"strings"
)

// tokKind is the lexical class of a token.
type tokKind uint8

const (
	tkSpace   tokKind = iota // whitespace
	tkLineCmt                // -- comment (without the newline)
	tkBlkCmt                 // /* comment */ (possibly unterminated)
	tkString                 // '...' literal
	tkQuoted                 // "...", `...`, [...] identifier
	tkDollar                 // $tag$...$tag$ (PostgreSQL)
	tkWord                   // identifier or keyword
	tkNumber                 // numeric literal
	tkPunct                  // any other single character
)

type token struct {
	kind tokKind
	text string
}

func (t token) trivia() bool { return t.kind == tkSpace || t.kind == tkLineCmt || t.kind == tkBlkCmt }

func (t token) isWord(w string) bool { return t.kind == tkWord && asciiEqualFold(t.text, w) }

// asciiEqualFold reports whether a and b are equal up to the case of ASCII
// letters: SQLite folds only ASCII, so "DIſTINCT" (long s) is no keyword
// and "\u212A" (Kelvin sign) is not the identifier "k".
func asciiEqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if asciiLower(a[i]) != asciiLower(b[i]) {
			return false
		}
	}
	return true
}

func asciiLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// asciiToLower lowercases the ASCII letters of s, as SQLite folds names.
func asciiToLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				b[j] = asciiLower(b[j])
			}
			return string(b)
		}
	}
	return s
}

func (t token) isPunct(c byte) bool { return t.kind == tkPunct && t.text[0] == c }

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentPart(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }

// sqlSpace is the whitespace of isSpace, for strings.Trim.
const sqlSpace = " \t\n\r\f\v"

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// lex splits s into tokens following SQLite's tokenizer rules for strings, quoted
// identifiers and comments (” "" “ escapes, [..] identifiers, non-nesting block
// comments), plus PostgreSQL dollar quoting. Unterminated literals and comments run to
// the end of the text. Concatenating the tokens' text gives s back.
func lex(s string) []token {
	// SQL text has about one token per 2 bytes (words, spaces, punctuation):
	// one allocation, not a dozen.
	toks := make([]token, 0, len(s)/2+4)
	i := 0
	n := len(s)
	for i < n {
		c := s[i]
		start := i
		var k tokKind
		switch {
		case isSpace(c):
			for i < n && isSpace(s[i]) {
				i++
			}
			k = tkSpace
		case c == '-' && i+1 < n && s[i+1] == '-':
			for i < n && s[i] != '\n' {
				i++
			}
			k = tkLineCmt
		case c == '/' && i+1 < n && s[i+1] == '*':
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				i = n
			} else {
				i += 2 + j + 2
			}
			k = tkBlkCmt
		case c == '\'' || c == '"' || c == '`':
			i = quotedEnd(s, i, c)
			k = tkQuoted
			if c == '\'' {
				k = tkString
			}
		case c == '[':
			j := strings.IndexByte(s[i+1:], ']')
			if j < 0 {
				i = n
			} else {
				i += 1 + j + 1
			}
			k = tkQuoted
		case c == '$' && dollarTagLen(s[i:]) > 0:
			tl := dollarTagLen(s[i:])
			tag := s[i : i+tl]
			j := strings.Index(s[i+tl:], tag)
			if j < 0 {
				i = n
			} else {
				i += tl + j + tl
			}
			k = tkDollar
		case isIdentStart(c):
			for i < n && isIdentPart(s[i]) {
				i++
			}
			k = tkWord
		case c >= '0' && c <= '9' || c == '.' && i+1 < n && s[i+1] >= '0' && s[i+1] <= '9':
			for i < n && (isIdentPart(s[i]) || s[i] == '.' ||
				(s[i] == '+' || s[i] == '-') && (s[i-1] == 'e' || s[i-1] == 'E')) {
				i++
			}
			k = tkNumber
		default:
			i++
			k = tkPunct
		}
		toks = append(toks, token{kind: k, text: s[start:i]})
	}
	return toks
}

// quotedEnd returns the index just past the literal opened by q at s[i], where a doubled
// quote is an escaped quote.
func quotedEnd(s string, i int, q byte) int {
	i++
	for i < len(s) {
		if s[i] == q {
			if i+1 < len(s) && s[i+1] == q {
				i += 2
				continue
			}
			return i + 1
		}
		i++
	}
	return len(s)
}

// dollarTagLen returns the length of a dollar-quote opener ($$ or $tag$) at the start of
// s, or 0.
func dollarTagLen(s string) int {
	if len(s) < 2 || s[0] != '$' {
		return 0
	}
	j := 1
	for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' ||
		j > 1 && s[j] >= '0' && s[j] <= '9') {
		j++
	}
	if j < len(s) && s[j] == '$' {
		return j + 1
	}
	return 0
}

// SplitStatements splits sql at the semicolons that end statements (outside strings,
// quoted identifiers and comments; a CREATE TRIGGER body ends at "END;") and returns the
// statements, trimmed, without their semicolons. Statements made only of whitespace and
// comments are dropped.
func SplitStatements(sql string) []string {
	toks := lex(sql)
	var out []string
	for _, r := range splitTokens(toks) {
		// Trim only the lexer's (ASCII) whitespace: strings.TrimSpace also
		// trims Unicode spaces, which SQLite reads as identifier characters,
		// and could leave an empty statement, which crashes the driver.
		out = append(out, strings.Trim(sql[r.start:r.end], sqlSpace))
	}
	return out
}

// stmtRange is one statement of a lexed text: its tokens toks[from:to]
// (without the ending semicolon) and its bytes [start, end).
type stmtRange struct{ from, to, start, end int }

// splitTokens finds the statements of toks as SplitStatements does: they
// end at semicolons (a CREATE TRIGGER body at "END;"), and those made only
// of whitespace and comments are dropped.
func splitTokens(toks []token) []stmtRange {
	var out []stmtRange
	cur := stmtRange{}
	pos := 0         // byte offset of the current token
	var sig []string // first significant words of the statement (up to 3), upper-cased
	lastEnd := false // the last significant token is the word END
	empty := true
	for i, t := range toks {
		tpos := pos
		pos += len(t.text)
		if t.trivia() {
			continue
		}
		if t.isPunct(';') {
			if isTrigger(sig) && !lastEnd {
				lastEnd = false
				continue
			}
			if !empty {
				cur.to, cur.end = i, tpos
				out = append(out, cur)
			}
			cur = stmtRange{from: i + 1, start: pos}
			sig, lastEnd, empty = nil, false, true
			continue
		}
		empty = false
		if len(sig) < 3 {
			w := ""
			if t.kind == tkWord {
				w = strings.ToUpper(t.text)
			}
			sig = append(sig, w)
		}
		lastEnd = t.kind == tkWord && asciiEqualFold(t.text, "END")
	}
	if !empty {
		cur.to, cur.end = len(toks), pos
		out = append(out, cur)
	}
	return out
}

func isTrigger(sig []string) bool {
	if len(sig) < 2 || sig[0] != "CREATE" {
		return false
	}
	if sig[1] == "TRIGGER" {
		return true
	}
	return len(sig) >= 3 && (sig[1] == "TEMP" || sig[1] == "TEMPORARY") && sig[2] == "TRIGGER"
}

// HasOuterOrderBy reports whether the outermost query of sql's last statement has an
// ORDER BY: one outside every parenthesis (so not in a subquery, a CTE body, a window or
// an aggregate's ORDER BY), a string literal, a quoted identifier or a comment.
func HasOuterOrderBy(sql string) bool {
	stmts := SplitStatements(sql)
	if len(stmts) == 0 {
		return false
	}
	toks := significant(lex(stmts[len(stmts)-1]))
	depth := 0
	for i, t := range toks {
		switch {
		case t.isPunct('('):
			depth++
		case t.isPunct(')'):
			if depth > 0 {
				depth--
			}
		case depth == 0 && t.isWord("ORDER") && i+1 < len(toks) && toks[i+1].isWord("BY"):
			return true
		}
	}
	return false
}

// significant returns toks without whitespace and comments.
func significant(toks []token) []token {
	out := make([]token, 0, len(toks))
	for _, t := range toks {
		if !t.trivia() {
			out = append(out, t)
		}
	}
	return out
}

// NormalizeSQL returns a form of sql in which texts that differ only in comments, the
// amount of whitespace, the case of unquoted words and empty statements are equal.
// Two SQL texts with the same normal form have the same meaning.
func NormalizeSQL(sql string) string { return normalizeTokens(lex(sql)) }

// normalizeTokens is NormalizeSQL on a lexed text.
func normalizeTokens(toks []token) string {
	var b strings.Builder
	walkNormal(toks, func(s string, lower bool) bool {
		if lower {
			s = asciiToLower(s)
		}
		b.WriteString(s)
		return true
	})
	return b.String()
}

// normalEquals reports whether normalizeTokens(toks) == norm, stopping at
// the first difference and allocating nothing.
func normalEquals(toks []token, norm string) bool {
	pos := 0
	ok := walkNormal(toks, func(s string, lower bool) bool {
		if len(norm)-pos < len(s) {
			return false
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			if lower {
				c = asciiLower(c)
			}
			if c != norm[pos+i] {
				return false
			}
		}
		pos += len(s)
		return true
	})
	return ok && pos == len(norm)
}

// walkNormal emits the pieces of toks' normal form in order (lower: a word,
// to be ASCII lower-cased), stopping when emit returns false; it reports
// whether it got to the end.
func walkNormal(toks []token, emit func(s string, lower bool) bool) bool {
	wrote := false
	for i, r := range splitTokens(toks) {
		if i > 0 {
			if !emit(";", false) {
				return false
			}
			wrote = true
		}
		// The statement as SplitStatements gives it: without the
		// whitespace around it (comments stay, as trivia).
		st := toks[r.from:r.to]
		for len(st) > 0 && st[0].kind == tkSpace {
			st = st[1:]
		}
		for len(st) > 0 && st[len(st)-1].kind == tkSpace {
			st = st[:len(st)-1]
		}
		space := false
		for j, t := range st {
			if j == len(st)-1 {
				// An unterminated literal or comment runs to the end of the
				// text, trailing whitespace included, which the trim drops.
				t.text = strings.TrimRight(t.text, sqlSpace)
			}
			if t.trivia() {
				space = true
				continue
			}
			if space && wrote && !emit(" ", false) {
				return false
			}
			space = false
			if t.text != "" && !emit(t.text, t.kind == tkWord) {
				return false
			}
			wrote = wrote || t.text != ""
		}
	}
	return true
}

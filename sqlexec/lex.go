package sqlexec

import (
	"strings"
)

// TokenKind is the lexical class of a Token.
type TokenKind uint8

const (
	TokenSpace        TokenKind = iota // whitespace
	TokenLineComment                   // -- comment (without the newline)
	TokenBlockComment                  // /* comment */ (possibly unterminated)
	TokenString                        // '...' literal
	TokenQuoted                        // "...", `...` or [...] identifier (Text[0] tells which)
	TokenDollar                        // $tag$...$tag$ (PostgreSQL)
	TokenWord                          // identifier or keyword
	TokenNumber                        // numeric literal
	TokenPunct                         // an operator or other punctuation (see Lex)
)

// Token is one lexical token of a SQL text, as Lex returns it.
type Token struct {
	Kind TokenKind
	// Text is the token's bytes, quotes and comment markers included.
	Text string
}

// Trivia reports whether t is whitespace or a comment.
func (t Token) Trivia() bool {
	return t.Kind == TokenSpace || t.Kind == TokenLineComment || t.Kind == TokenBlockComment
}

// IsWord reports whether t is the unquoted word w, up to ASCII case.
func (t Token) IsWord(w string) bool { return t.Kind == TokenWord && asciiEqualFold(t.Text, w) }

// IsPunct reports whether t is the one-character punctuation c.
func (t Token) IsPunct(c byte) bool {
	return t.Kind == TokenPunct && len(t.Text) == 1 && t.Text[0] == c
}

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

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentPart(c byte) bool { return isIdentStart(c) || isDigit(c) || c == '$' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// sqlSpace is the whitespace of isSpace, for strings.Trim.
const sqlSpace = " \t\n\r\f\v"

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// Lex splits sql into tokens following SQLite's tokenizer rules for strings, quoted
// identifiers, comments and operators (a doubled quote inside a literal or a quoted
// name escapes the quote, [..] is a name, block comments do not nest, and the
// two-character operators == != <> <= >= || << >> are one token), plus PostgreSQL
// dollar quoting. Unterminated literals and comments run to the end of the text.
// Concatenating the tokens' text gives sql back. Lex never fails.
//
// It is the module's one SQL lexer: the comparison policy's rewrites, statement
// splitting, normal forms and clause segments here, and sqlcommit's SQLite-to-PostgreSQL
// rewrite all read SQL through it.
func Lex(sql string) []Token {
	// SQL text has about one token per 2 bytes (words, spaces, punctuation):
	// one allocation, not a dozen.
	toks := make([]Token, 0, len(sql)/2+4)
	for i := 0; i < len(sql); {
		kind, end := scan(sql, i)
		toks = append(toks, Token{Kind: kind, Text: sql[i:end]})
		i = end
	}
	return toks
}

// scan returns the kind and the end (exclusive) of the token that starts at s[i].
func scan(s string, i int) (TokenKind, int) {
	c := s[i]
	switch {
	case isSpace(c):
		return TokenSpace, spaceEnd(s, i)
	case c == '-' && strings.HasPrefix(s[i+1:], "-"):
		return TokenLineComment, lineEnd(s, i)
	case c == '/' && strings.HasPrefix(s[i+1:], "*"):
		return TokenBlockComment, closerEnd(s, i+2, "*/")
	case c == '\'':
		return TokenString, quotedEnd(s, i, c)
	case c == '"' || c == '`':
		return TokenQuoted, quotedEnd(s, i, c)
	case c == '[':
		return TokenQuoted, closerEnd(s, i+1, "]")
	case c == '$' && dollarTagLen(s[i:]) > 0:
		tag := s[i : i+dollarTagLen(s[i:])]
		return TokenDollar, closerEnd(s, i+len(tag), tag)
	case isIdentStart(c):
		return TokenWord, identEnd(s, i)
	case isDigit(c) || c == '.' && i+1 < len(s) && isDigit(s[i+1]):
		return TokenNumber, numberEnd(s, i)
	default:
		return TokenPunct, punctEnd(s, i)
	}
}

// spaceEnd returns the end of the run of whitespace at s[i].
func spaceEnd(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// lineEnd returns the end of the line comment at s[i]: its newline is not part of it.
func lineEnd(s string, i int) int {
	if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
		return i + j
	}
	return len(s)
}

// closerEnd returns the index just past the first closer at or after s[from], or
// len(s) when there is none (an unterminated comment, [name] or dollar quote).
func closerEnd(s string, from int, closer string) int {
	if j := strings.Index(s[from:], closer); j >= 0 {
		return from + j + len(closer)
	}
	return len(s)
}

// identEnd returns the end of the identifier or keyword at s[i].
func identEnd(s string, i int) int {
	for i < len(s) && isIdentPart(s[i]) {
		i++
	}
	return i
}

// numberEnd returns the end of the numeric literal at s[i]: digits, '.', an exponent
// with its sign, and the identifier characters that follow (SQLite reads "12abc" as one
// bad token). A hexadecimal literal has no exponent, so "0x1E+2" is 0x1E plus 2.
func numberEnd(s string, i int) int {
	hex := strings.HasPrefix(s[i:], "0x") || strings.HasPrefix(s[i:], "0X")
	j := i + 1
	for j < len(s) && (isIdentPart(s[j]) || s[j] == '.' || !hex && isExponentSign(s, j)) {
		j++
	}
	return j
}

// isExponentSign reports whether s[j] is the sign of an exponent (1e+5, 2E-3).
func isExponentSign(s string, j int) bool {
	return (s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E')
}

// punctEnd returns the end of the operator or punctuation at s[i]: SQLite's
// two-character operators are one token, anything else is one byte (the JSON
// operators -> and ->> too: no reader needs them whole).
func punctEnd(s string, i int) int {
	if i+2 <= len(s) {
		switch s[i : i+2] {
		case "==", "!=", "<>", "<=", ">=", "||", "<<", ">>":
			return i + 2
		}
	}
	return i + 1
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
	toks := Lex(sql)
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
func splitTokens(toks []Token) []stmtRange {
	var out []stmtRange
	cur := stmtRange{}
	pos := 0         // byte offset of the current token
	var sig []string // first significant words of the statement (up to 3), upper-cased
	lastEnd := false // the last significant token is the word END
	empty := true
	for i, t := range toks {
		tpos := pos
		pos += len(t.Text)
		if t.Trivia() {
			continue
		}
		if t.IsPunct(';') {
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
			if t.Kind == TokenWord {
				w = strings.ToUpper(t.Text)
			}
			sig = append(sig, w)
		}
		lastEnd = t.Kind == TokenWord && asciiEqualFold(t.Text, "END")
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
	toks := significant(Lex(stmts[len(stmts)-1]))
	depth := 0
	for i, t := range toks {
		switch {
		case t.IsPunct('('):
			depth++
		case t.IsPunct(')'):
			if depth > 0 {
				depth--
			}
		case depth == 0 && t.IsWord("ORDER") && i+1 < len(toks) && toks[i+1].IsWord("BY"):
			return true
		}
	}
	return false
}

// significant returns toks without whitespace and comments.
func significant(toks []Token) []Token {
	out := make([]Token, 0, len(toks))
	for _, t := range toks {
		if !t.Trivia() {
			out = append(out, t)
		}
	}
	return out
}

// NormalizeSQL returns a form of sql in which texts that differ only in comments, the
// amount of whitespace, the case of unquoted words and empty statements are equal.
// Two SQL texts with the same normal form have the same meaning.
func NormalizeSQL(sql string) string { return normalizeTokens(Lex(sql)) }

// normalizeTokens is NormalizeSQL on a lexed text.
func normalizeTokens(toks []Token) string {
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
func normalEquals(toks []Token, norm string) bool {
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
func walkNormal(toks []Token, emit func(s string, lower bool) bool) bool {
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
		for len(st) > 0 && st[0].Kind == TokenSpace {
			st = st[1:]
		}
		for len(st) > 0 && st[len(st)-1].Kind == TokenSpace {
			st = st[:len(st)-1]
		}
		space := false
		for j, t := range st {
			if j == len(st)-1 {
				// An unterminated literal or comment runs to the end of the
				// text, trailing whitespace included, which the trim drops.
				t.Text = strings.TrimRight(t.Text, sqlSpace)
			}
			if t.Trivia() {
				space = true
				continue
			}
			if space && wrote && !emit(" ", false) {
				return false
			}
			space = false
			if t.Text != "" && !emit(t.Text, t.Kind == TokenWord) {
				return false
			}
			wrote = wrote || t.Text != ""
		}
	}
	return true
}

package sqlcommit

import (
	"slices"
	"strings"

	"avtgym/sqlexec"
)

// The query is lexed by sqlexec.Lex, the SQLite tokenizer the verifier's
// comparison policy and statement splitting use too, so that both read a
// query's strings, names and comments the same way.

// unquote returns the name inside a "...", `...` or [...] token.
func unquote(t sqlexec.Token) string {
	s := t.Text
	if len(s) < 2 {
		return strings.TrimLeft(s, "\"`[")
	}
	switch q := s[:1]; q {
	case `"`, "`":
		if s[len(s)-1] != s[0] {
			return s[1:] // unterminated: it runs to the end of the query
		}
		return strings.ReplaceAll(s[1:len(s)-1], q+q, q)
	case "[":
		return strings.TrimSuffix(s[1:], "]")
	}
	return s
}

// rewritten is a query rewritten for the PostgreSQL parser, with the
// original byte offset of every byte of the rewritten text.
type rewritten struct {
	sql    string
	origin []int
	// dq maps the offset in sql of each double-quoted name left as an
	// identifier to the name as written (not truncated to PostgreSQL's 63
	// bytes): the printer reads an unqualified one that names no column in
	// scope as a string literal, as SQLite does.
	dq map[int]string
}

type writer struct {
	b      strings.Builder
	origin []int
}

func (w *writer) emit(s string, pos int) {
	w.b.WriteString(s)
	for range len(s) {
		w.origin = append(w.origin, pos)
	}
}

// toPostgres rewrites SQLite syntax that the PostgreSQL parser reads
// differently or not at all:
//
//   - a double-quoted name stays an identifier, its offset recorded in dq:
//     whether SQLite reads it as a column or as a string literal depends
//     on the columns in scope, which the printer knows (bareColumn); an
//     empty "" is the empty string;
//   - `name` and [name] become "name";
//   - == becomes =;
//   - LIMIT a, b becomes LIMIT b OFFSET a;
//   - x IS y / x IS NOT y (y not NULL, TRUE, FALSE, ...) become
//     IS [NOT] DISTINCT FROM; x NOT NULL becomes x IS NOT NULL;
//   - x [NOT] GLOB y becomes x [NOT] SIMILAR TO y, x [NOT] REGEXP y
//     becomes x [NOT] ILIKE y and x [NOT] MATCH y becomes x @@ y (x !@@
//     y): SQLite has none of SIMILAR TO, ILIKE and @@, so the printer
//     renders them back unambiguously;
//   - time(...), char(...) and the other type keywords SQLite calls as
//     functions become quoted function names ("time"(...)).
func toPostgres(sql string, schema *Schema) rewritten {
	r := newPGRewrite(sql, schema)
	for i := 0; i < len(r.toks); i++ {
		i = r.token(i)
	}
	return rewritten{sql: r.w.b.String(), origin: r.w.origin, dq: r.dq}
}

// pgRewrite is one run of toPostgres over a query's tokens.
type pgRewrite struct {
	toks   []sqlexec.Token
	pos    []int // the byte offset of each token in the query
	schema *Schema
	// declared holds the aliases the query declares (AS name), lower
	// case: double-quoted references to them are identifiers.
	declared map[string]bool
	dq       map[int]string
	w        writer
}

func newPGRewrite(sql string, schema *Schema) *pgRewrite {
	toks := sqlexec.Lex(sql)
	r := &pgRewrite{toks: toks, pos: make([]int, len(toks)), schema: schema, declared: map[string]bool{}, dq: map[int]string{}}
	off := 0
	for i, t := range toks {
		r.pos[i] = off
		off += len(t.Text)
	}
	for i := range toks {
		if !r.isWord(i, "AS") {
			continue
		}
		switch j := r.next(i); {
		case j < 0:
		case toks[j].Kind == sqlexec.TokenWord:
			r.declared[strings.ToLower(toks[j].Text)] = true
		case toks[j].Kind == sqlexec.TokenQuoted:
			r.declared[strings.ToLower(unquote(toks[j]))] = true
		}
	}
	return r
}

// next returns the index of the first token after i that is not
// whitespace or a comment, or -1.
func (r *pgRewrite) next(i int) int {
	if i < 0 {
		return -1
	}
	for j := i + 1; j < len(r.toks); j++ {
		if !r.toks[j].Trivia() {
			return j
		}
	}
	return -1
}

// prev returns the index of the last token before i that is not
// whitespace or a comment, or -1.
func (r *pgRewrite) prev(i int) int {
	for j := i - 1; j >= 0; j-- {
		if !r.toks[j].Trivia() {
			return j
		}
	}
	return -1
}

// isWord reports whether token i (-1: none) is the keyword w; SQLite
// folds only ASCII case.
func (r *pgRewrite) isWord(i int, w string) bool { return i >= 0 && r.toks[i].IsWord(w) }

// isPunct reports whether token i (-1: none) is the punctuation c.
func (r *pgRewrite) isPunct(i int, c byte) bool { return i >= 0 && r.toks[i].IsPunct(c) }

// emit writes s for token i.
func (r *pgRewrite) emit(i int, s string) { r.w.emit(s, r.pos[i]) }

// token writes token i, rewritten, and returns the index of the last
// token it consumed.
func (r *pgRewrite) token(i int) int {
	t := r.toks[i]
	switch {
	case t.Kind == sqlexec.TokenQuoted && t.Text[0] == '"':
		r.doubleQuoted(i)
	case t.Kind == sqlexec.TokenQuoted: // `name` or [name]
		r.emit(i, `"`+strings.ReplaceAll(unquote(t), `"`, `""`)+`"`)
	case t.Kind == sqlexec.TokenPunct && t.Text == "==":
		r.emit(i, "=")
	case t.IsWord("LIMIT"):
		return r.limit(i)
	case t.IsWord("IS"):
		return r.is(i)
	case t.IsWord("NOT"):
		return r.not(i)
	case r.isOperatorWord(i, "GLOB"):
		r.emit(i, "SIMILAR TO")
	case r.isOperatorWord(i, "REGEXP"):
		r.emit(i, "ILIKE")
	case r.isOperatorWord(i, "MATCH"):
		r.emit(i, "@@")
	case t.Kind == sqlexec.TokenWord && slices.ContainsFunc(typeFuncs, t.IsWord) && r.isPunct(r.next(i), '(') && !r.isWord(r.prev(i), "AS") && !r.isPunct(r.prev(i), ':'):
		r.emit(i, `"`+strings.ToLower(t.Text)+`"`)
	default:
		r.emit(i, t.Text)
	}
	return i
}

// typeFuncs are type keywords of PostgreSQL that SQLite queries call as
// functions: time('now'), char(65), ...
var typeFuncs = []string{"TIME", "TIMESTAMP", "CHAR", "CHARACTER", "VARCHAR", "DEC", "NUMERIC", "REAL", "FLOAT"}

// isOperatorWord reports whether the word w at i is used as a binary
// operator (GLOB, REGEXP, MATCH): after an operand, or after the NOT of
// x NOT GLOB y; the glob(...) function stays a function.
func (r *pgRewrite) isOperatorWord(i int, w string) bool {
	if !r.toks[i].IsWord(w) || r.next(i) < 0 {
		return false
	}
	p := r.prev(i)
	if r.isWord(p, "NOT") {
		p = r.prev(p)
	}
	return p >= 0 && r.endsOperand(p)
}

// endsOperand reports whether token i can end an operand (so that a word
// after it is an operator): a value, a name, or a closing parenthesis.
func (r *pgRewrite) endsOperand(i int) bool {
	t := r.toks[i]
	switch t.Kind {
	case sqlexec.TokenNumber, sqlexec.TokenString, sqlexec.TokenQuoted:
		return true
	case sqlexec.TokenPunct:
		return t.IsPunct(')')
	case sqlexec.TokenWord:
		for _, kw := range []string{"SELECT", "WHERE", "AND", "OR", "NOT", "ON", "BY", "FROM", "HAVING", "WHEN", "THEN", "ELSE", "CASE", "DISTINCT", "AS", "IN", "LIKE", "IS"} {
			if t.IsWord(kw) {
				return false
			}
		}
		return true
	}
	return false
}

// not writes the NOT at i: x NOT NULL becomes x IS NOT NULL, NOT MATCH
// becomes !@@. It returns the index of the last token it consumed.
func (r *pgRewrite) not(i int) int {
	p, n := r.prev(i), r.next(i)
	switch {
	case p >= 0 && r.endsOperand(p) && r.isWord(n, "NULL"):
		r.emit(i, "IS NOT")
		return i
	case r.isWord(n, "MATCH") && p >= 0 && r.endsOperand(p):
		r.emit(i, "!@@")
		return n
	}
	r.emit(i, r.toks[i].Text)
	return i
}

// doubleQuoted writes the "name" at i as an identifier, recording where
// (see toPostgres); "" is the empty string.
func (r *pgRewrite) doubleQuoted(i int) {
	t := r.toks[i]
	if t.Text == `""` {
		r.emit(i, "''")
		return
	}
	if strings.HasSuffix(t.Text, `"`) && len(t.Text) >= 2 {
		r.dq[r.w.b.Len()] = unquote(t)
	}
	r.emit(i, t.Text)
}

// limit writes the LIMIT at i: SQLite's LIMIT a, b (offset a, count b)
// becomes LIMIT b OFFSET a. It returns the index of the last token it
// consumed.
func (r *pgRewrite) limit(i int) int {
	a := r.next(i)
	c := r.next(a)
	b := r.next(c)
	if b < 0 || r.toks[a].Kind != sqlexec.TokenNumber || !r.isPunct(c, ',') || r.toks[b].Kind != sqlexec.TokenNumber {
		r.emit(i, r.toks[i].Text)
		return i
	}
	r.emit(i, r.toks[i].Text)
	r.emit(i, " ")
	r.emit(b, r.toks[b].Text)
	r.emit(c, " OFFSET ")
	r.emit(a, r.toks[a].Text)
	return b
}

// isOperands are the words that may follow IS [NOT] in a test that
// PostgreSQL reads as SQLite does (IS NULL, IS TRUE, IS DISTINCT FROM,
// IS JSON, ...), so that the IS stays as it is.
var isOperands = []string{"NULL", "TRUE", "FALSE", "UNKNOWN", "DISTINCT", "DOCUMENT", "NORMALIZED", "NFC", "NFD", "NFKC", "NFKD", "OF", "JSON", "NOT"}

// is writes the IS at i: SQLite's x IS y and x IS NOT y compare like
// IS [NOT] DISTINCT FROM when y is a value. It returns the index of the
// last token it consumed.
func (r *pgRewrite) is(i int) int {
	j := r.next(i)
	negated := r.isWord(j, "NOT")
	y := j
	if negated {
		y = r.next(j)
	}
	if y < 0 || slices.ContainsFunc(isOperands, r.toks[y].IsWord) {
		r.emit(i, r.toks[i].Text)
		return i
	}
	if negated {
		r.emit(i, "IS DISTINCT FROM")
		return j
	}
	r.emit(i, "IS NOT DISTINCT FROM")
	return i
}

// originalOffset maps a 1-based character position of the rewritten text
// (PostgreSQL's cursor position) to a byte offset in the original query.
func (r rewritten) originalOffset(cursor int) int {
	if cursor <= 0 {
		return 0
	}
	n := 0
	for i := range r.sql {
		n++
		if n == cursor {
			return r.origin[i]
		}
	}
	if len(r.origin) == 0 {
		return 0
	}
	return r.origin[len(r.origin)-1] + 1
}

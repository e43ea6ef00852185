package sqlcommit

import (
	"strings"
	"unicode/utf8"
)

// token is one lexical token of a SQLite query, with its byte offset in
// the original text.
type token struct {
	kind tokKind
	text string // the raw text, quotes included
	pos  int    // byte offset in the original query
}

type tokKind int

const (
	tSpace   tokKind = iota // white space and comments
	tWord                   // bare identifier or keyword
	tNumber                 // numeric literal
	tString                 // '...'
	tDouble                 // "..."
	tBack                   // `...`
	tBracket                // [...]
	tPunct                  // operator or punctuation
)

// lex splits a SQLite query into tokens. It never fails: an unterminated
// quote or comment runs to the end of the input (the parser reports it).
func lex(s string) []token {
	var toks []token
	i := 0
	for i < len(s) {
		start := i
		c := s[i]
		kind := tPunct
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			for i < len(s) && strings.IndexByte(" \t\n\r\f\v", s[i]) >= 0 {
				i++
			}
			kind = tSpace
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			kind = tSpace
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			if j := strings.Index(s[i+2:], "*/"); j >= 0 {
				i += j + 4
			} else {
				i = len(s)
			}
			kind = tSpace
		case c == '\'' || c == '"' || c == '`':
			i = quoted(s, i, c)
			kind = map[byte]tokKind{'\'': tString, '"': tDouble, '`': tBack}[c]
		case c == '[':
			if j := strings.IndexByte(s[i+1:], ']'); j >= 0 {
				i += j + 2
			} else {
				i = len(s)
			}
			kind = tBracket
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			for i < len(s) && (isWordByte(s[i]) || s[i] == '.' ||
				(s[i] == '+' || s[i] == '-') && (s[i-1] == 'e' || s[i-1] == 'E') && !strings.HasPrefix(strings.ToLower(s[start:i]), "0x")) {
				i++
			}
			kind = tNumber
		case isWordByte(c) || c >= utf8.RuneSelf:
			for i < len(s) && (isWordByte(s[i]) || s[i] == '$' || s[i] >= utf8.RuneSelf) {
				i++
			}
			kind = tWord
		default:
			i++
			if i < len(s) {
				switch s[start : i+1] {
				case "==", "!=", "<>", "<=", ">=", "||", "<<", ">>":
					i++
				}
			}
		}
		toks = append(toks, token{kind: kind, text: s[start:i], pos: start})
	}
	return toks
}

// quoted returns the end (exclusive) of a token quoted by q starting at
// i; a doubled quote inside is an escaped one.
func quoted(s string, i int, q byte) int {
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

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// unquote returns the name inside a "...", `...` or [...] token.
func unquote(t token) string {
	s := t.text
	if len(s) < 2 {
		return strings.TrimLeft(s, "\"`[")
	}
	switch t.kind {
	case tDouble:
		if s[len(s)-1] != '"' {
			return s[1:]
		}
		return strings.ReplaceAll(s[1:len(s)-1], `""`, `"`)
	case tBack:
		if s[len(s)-1] != '`' {
			return s[1:]
		}
		return strings.ReplaceAll(s[1:len(s)-1], "``", "`")
	case tBracket:
		return strings.TrimSuffix(s[1:], "]")
	}
	return s
}

// rewritten is a query rewritten for the PostgreSQL parser, with the
// original byte offset of every byte of the rewritten text.
type rewritten struct {
	sql    string
	origin []int
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
//   - a double-quoted name is an identifier when it is qualified (next to a
//     '.'), follows AS, names a column of any table of the schema or an
//     alias the query declares (AS name), or names a table right after
//     FROM, JOIN or a comma; otherwise SQLite reads it as a string literal
//     and so does the rewrite. (SQLite looks only at the columns in scope;
//     the whole schema's columns are a close, context-free reading.)
//     Without a schema every double-quoted name stays an identifier;
//   - `name` and [name] become "name";
//   - == becomes =;
//   - LIMIT a, b becomes LIMIT b OFFSET a;
//   - x IS y / x IS NOT y (y not NULL, TRUE, FALSE, ...) become
//     IS [NOT] DISTINCT FROM.
func toPostgres(sql string, schema *Schema) rewritten {
	toks := lex(sql)
	// The aliases the query declares (AS name): double-quoted references
	// to them are identifiers.
	declared := map[string]bool{}
	next := func(i int) int { // index of the next non-space token after i, or -1
		for j := i + 1; j < len(toks); j++ {
			if toks[j].kind != tSpace {
				return j
			}
		}
		return -1
	}
	prev := func(i int) int {
		for j := i - 1; j >= 0; j-- {
			if toks[j].kind != tSpace {
				return j
			}
		}
		return -1
	}
	isWord := func(i int, w string) bool {
		return i >= 0 && toks[i].kind == tWord && strings.EqualFold(toks[i].text, w)
	}
	for i := range toks {
		if isWord(i, "AS") {
			if j := next(i); j >= 0 {
				switch toks[j].kind {
				case tWord:
					declared[strings.ToLower(toks[j].text)] = true
				case tDouble, tBack, tBracket:
					declared[strings.ToLower(unquote(toks[j]))] = true
				}
			}
		}
	}
	var w writer
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.kind {
		case tDouble:
			name := unquote(t)
			p, n := prev(i), next(i)
			ident := schema == nil ||
				p >= 0 && toks[p].text == "." || n >= 0 && toks[n].text == "." ||
				isWord(p, "AS") ||
				schema.HasColumn(name) || declared[strings.ToLower(name)] ||
				schema.HasTable(name) && (isWord(p, "FROM") || isWord(p, "JOIN") || p >= 0 && toks[p].text == ",")
			if ident || !strings.HasSuffix(t.text, `"`) || len(t.text) < 2 {
				w.emit(t.text, t.pos)
			} else {
				w.emit("'"+strings.ReplaceAll(name, "'", "''")+"'", t.pos)
			}
		case tBack, tBracket:
			w.emit(`"`+strings.ReplaceAll(unquote(t), `"`, `""`)+`"`, t.pos)
		case tPunct:
			if t.text == "==" {
				w.emit("=", t.pos)
			} else {
				w.emit(t.text, t.pos)
			}
		case tWord:
			switch {
			case strings.EqualFold(t.text, "LIMIT"):
				// LIMIT a, b (SQLite: offset a, count b).
				a := next(i)
				c := next(a)
				b := next(c)
				if a >= 0 && c >= 0 && b >= 0 && toks[a].kind == tNumber && toks[c].text == "," && toks[b].kind == tNumber {
					w.emit(t.text, t.pos)
					w.emit(" ", t.pos)
					w.emit(toks[b].text, toks[b].pos)
					w.emit(" OFFSET ", toks[c].pos)
					w.emit(toks[a].text, toks[a].pos)
					i = b
					continue
				}
				w.emit(t.text, t.pos)
			case strings.EqualFold(t.text, "IS"):
				// SQLite's x IS y / x IS NOT y compare like
				// IS [NOT] DISTINCT FROM when y is a value.
				j := next(i)
				negated := isWord(j, "NOT")
				y := j
				if negated {
					y = next(j)
				}
				if y < 0 {
					w.emit(t.text, t.pos)
					continue
				}
				switch strings.ToUpper(toks[y].text) {
				case "NULL", "TRUE", "FALSE", "UNKNOWN", "DISTINCT", "DOCUMENT", "NORMALIZED", "NFC", "NFD", "NFKC", "NFKD", "OF", "JSON", "NOT":
					w.emit(t.text, t.pos)
					continue
				}
				if negated {
					w.emit("IS DISTINCT FROM", t.pos)
					i = j
				} else {
					w.emit("IS NOT DISTINCT FROM", t.pos)
				}
			default:
				w.emit(t.text, t.pos)
			}
		default:
			w.emit(t.text, t.pos)
		}
	}
	return rewritten{sql: w.b.String(), origin: w.origin}
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

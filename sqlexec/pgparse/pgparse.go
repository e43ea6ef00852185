// Package pgparse is avtgym's one door to libpg_query's parse trees: it
// measures how deeply a text can nest before the C parser builds a tree of
// it, and refuses past MaxDepth, so that no SQL can crash the process.
//
// # Why
//
// libpg_query (through pg_query_go) parses iteratively, but turns its tree
// into protobuf (or JSON) recursively, on a C stack of fixed size: a left-deep
// chain of 30,000 operators (SELECT 1+1+…+1, 60 KB) overflows it and the
// process dies of SIGSEGV; from about 5,000 levels pg_query_go's protobuf
// decoding refuses the tree ("proto: exceeded maximum recursion depth"). The
// scanner (pg_query.Scan) and the functions that only split or classify
// statements (SplitWithParser, IsUtilityStmt) build no tree and are safe at
// any length; Parse, ParseToJSON, Normalize and Deparse are not. Every caller
// that wants a tree calls Parse here instead (a test in internal/lint
// enforces it).
//
// # The measure
//
// CheckDepth reads the text's tokens with PostgreSQL's own scanner (so that
// strings, dollar quotes and comments are what the parser sees) and keeps a
// stack of levels: "(", "[" and CASE open a level, ")", "]" and CASE's END
// close it. Within a level it counts the tokens that add a node above the
// previous ones when chained: operators (+, ||, ::, =, <, …, and any
// user-defined one), the keyword operators NOT, IS, ISNULL, NOTNULL, LIKE,
// ILIKE, SIMILAR, IN, BETWEEN, COLLATE, AT, OVERLAPS, ESCAPE and OPERATOR(…),
// and the chaining clauses JOIN, UNION, INTERSECT and EXCEPT. A comma, a
// semicolon, AND, OR, WHEN, THEN and ELSE end a chain (the parser keeps what
// they separate in lists, not in a deeper tree). The depth at a token is the
// sum over the open levels of one plus the level's chain; the text's depth is
// the greatest. It bounds the depth of the tree from above (a chain of n
// operators is a tree n deep), and counts generously (x = 1 JOIN … counts
// the = as well as the JOIN), so that real queries stay far below the limit:
// the deepest of the repository's corpora and of the BIRD-Interact and TIDE
// samples measure below 100.
package pgparse

import (
	"errors"
	"fmt"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// MaxDepth is the deepest text (CheckDepth's measure) Parse accepts: far
// above any real query, far below what overflows libpg_query (about 20,000)
// or pg_query_go's protobuf decoding (about 5,000 chained operators). SQLite's
// own parser has the same kind of limit at the same value
// (SQLITE_LIMIT_EXPR_DEPTH, 1000).
const MaxDepth = 1000

// DepthError is a text that nests deeper than the limit.
type DepthError struct {
	// Depth is the depth reached when the scan stopped (the first token
	// past the limit); Limit the limit.
	Depth, Limit int
	// Offset is the byte offset of that token in the text.
	Offset int
}

func (e *DepthError) Error() string {
	return fmt.Sprintf("the SQL nests too deeply to be parsed: it passes depth %d at byte %d "+
		"(each parenthesis, bracket and CASE opens a level; chained operators such as + or ||, "+
		"casts, NOT, IS, LIKE, IN, JOIN and UNION deepen it; the limit is %d)", e.Limit, e.Offset, e.Limit)
}

// ScanError is a text PostgreSQL's scanner refuses (an unterminated string
// or comment, say): the parser would refuse it as well.
type ScanError struct{ Err error }

func (e *ScanError) Error() string { return "the SQL did not scan: " + e.Err.Error() }
func (e *ScanError) Unwrap() error { return e.Err }

// CheckDepth returns a *DepthError when text nests deeper than limit (see
// the package doc), a *ScanError when the scanner refuses it, or nil.
func CheckDepth(text string, limit int) error {
	res, err := pg_query.Scan(text)
	if err != nil {
		return &ScanError{Err: err}
	}
	return depth(res.Tokens, limit)
}

// level is one open bracket (or the top level) during the scan.
type level struct {
	chain int
	// isCase: opened by CASE, closed by END.
	isCase bool
}

func depth(toks []*pg_query.ScanToken, limit int) error {
	stack := []level{{}}
	d := 1 // the sum of 1 + chain over the stack
	for _, t := range toks {
		top := &stack[len(stack)-1]
		switch k := t.Token; {
		case k == pg_query.Token_ASCII_40 || k == pg_query.Token_ASCII_91 || k == pg_query.Token_CASE:
			stack = append(stack, level{isCase: k == pg_query.Token_CASE})
			d++
		case k == pg_query.Token_ASCII_41 || k == pg_query.Token_ASCII_93:
			// Close up to the innermost bracket (a CASE left open inside
			// the brackets closes with them).
			for len(stack) > 1 {
				l := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				d -= 1 + l.chain
				if !l.isCase {
					break
				}
			}
		case k == pg_query.Token_END_P:
			if top.isCase && len(stack) > 1 {
				stack = stack[:len(stack)-1]
				d -= 1 + top.chain
			}
		case chainEnds(k):
			d -= top.chain
			top.chain = 0
		case chains(k):
			top.chain++
			d++
		}
		if d > limit {
			return &DepthError{Depth: d, Limit: limit, Offset: int(t.Start)}
		}
	}
	return nil
}

// chainEnds reports the tokens that end a chain at their level.
func chainEnds(k pg_query.Token) bool {
	switch k {
	case pg_query.Token_ASCII_44, pg_query.Token_ASCII_59, // , ;
		pg_query.Token_AND, pg_query.Token_OR, pg_query.Token_WHEN, pg_query.Token_THEN, pg_query.Token_ELSE:
		return true
	}
	return false
}

// chains reports the tokens that deepen the tree when chained.
func chains(k pg_query.Token) bool {
	switch k {
	case pg_query.Token_ASCII_37, pg_query.Token_ASCII_42, pg_query.Token_ASCII_43, pg_query.Token_ASCII_45, // % * + -
		pg_query.Token_ASCII_47, pg_query.Token_ASCII_58, pg_query.Token_ASCII_60, pg_query.Token_ASCII_61, // / : < =
		pg_query.Token_ASCII_62, pg_query.Token_ASCII_63, pg_query.Token_ASCII_92, pg_query.Token_ASCII_94, // > ? \ ^
		pg_query.Token_Op, pg_query.Token_TYPECAST, pg_query.Token_LESS_EQUALS, pg_query.Token_GREATER_EQUALS,
		pg_query.Token_NOT_EQUALS, pg_query.Token_EQUALS_GREATER, pg_query.Token_COLON_EQUALS, pg_query.Token_DOT_DOT,
		pg_query.Token_NOT, pg_query.Token_NOT_LA, pg_query.Token_IS, pg_query.Token_ISNULL, pg_query.Token_NOTNULL,
		pg_query.Token_LIKE, pg_query.Token_ILIKE, pg_query.Token_SIMILAR, pg_query.Token_IN_P, pg_query.Token_BETWEEN,
		pg_query.Token_COLLATE, pg_query.Token_AT, pg_query.Token_OVERLAPS, pg_query.Token_ESCAPE, pg_query.Token_OPERATOR,
		pg_query.Token_JOIN, pg_query.Token_UNION, pg_query.Token_INTERSECT, pg_query.Token_EXCEPT:
		return true
	}
	return false
}

// Parse parses text into statements, as pg_query.Parse does, after
// CheckDepth(text, MaxDepth): a text nested deeper is a *DepthError and
// never reaches the parser.
//
// A text the scanner refuses goes to the parser, which refuses it at the
// same token, before it builds anything: its error (a *parser.Error with
// the position) is the one callers know.
func Parse(text string) (*pg_query.ParseResult, error) {
	if err := CheckDepth(text, MaxDepth); err != nil {
		var se *ScanError
		if !errors.As(err, &se) {
			return nil, err
		}
	}
	return pg_query.Parse(text)
}

// ParsePlPgSQL parses the PL/pgSQL functions of a CREATE FUNCTION (or DO)
// text to JSON, as pg_query.ParsePlPgSqlToJSON does, after Parse has
// accepted the text and every CREATE FUNCTION and DO in it has a body
// given as text (AS '...'): libpg_query asserts that it has one, and a
// function without (CREATE FUNCTION f() ... LANGUAGE plpgsql, or one with
// BEGIN ATOMIC) aborts the process (SIGABRT; found by FuzzCheckStateful).
// The nesting of PL/pgSQL blocks (BEGIN, IF, LOOP, CASE inside each other)
// is bounded by the PL/pgSQL grammar itself, which refuses ("memory
// exhausted") past about 4,000 levels before any JSON is written
// (TestPlPgSQLNestingIsBoundedByItsGrammar keeps that true); the SQL
// embedded in a body is kept as text, for the caller to Parse.
func ParsePlPgSQL(createText string) (string, error) {
	tree, err := Parse(createText)
	if err != nil {
		return "", err
	}
	var bodyless string
	for _, rs := range tree.Stmts {
		Walk(rs.Stmt.ProtoReflect(), func(m protoreflect.Message) bool {
			switch x := m.Interface().(type) {
			case *pg_query.CreateFunctionStmt:
				if !hasTextBody(x.Options, true) {
					bodyless = "a function"
				}
			case *pg_query.DoStmt:
				if !hasTextBody(x.Args, false) {
					bodyless = "a DO block"
				}
			}
			return bodyless == ""
		})
	}
	if bodyless != "" {
		return "", &NoBodyError{What: bodyless}
	}
	return pg_query.ParsePlPgSqlToJSON(createText)
}

// NoBodyError is a CREATE FUNCTION or DO without a body given as text,
// which ParsePlPgSQL cannot compile.
type NoBodyError struct{ What string }

func (e *NoBodyError) Error() string {
	return e.What + " has no body given as text (AS '...'), so it cannot be compiled as PL/pgSQL"
}

// hasTextBody reports whether options hold an "as" element whose argument
// is text: a list whose items are all strings (CREATE FUNCTION), or a
// string (DO).
func hasTextBody(options []*pg_query.Node, list bool) bool {
	for _, o := range options {
		d := o.GetDefElem()
		if d == nil || d.Defname != "as" || d.Arg == nil {
			continue
		}
		if !list {
			return d.Arg.GetString_() != nil
		}
		l := d.Arg.GetList()
		if l == nil || len(l.Items) == 0 {
			return false
		}
		for _, it := range l.Items {
			if it.GetString_() == nil {
				return false
			}
		}
		return true
	}
	return false
}

// Walk calls fn on m and every message below it (a parse tree's nodes),
// depth first, until fn returns false; it reports whether it went through.
func Walk(m protoreflect.Message, fn func(protoreflect.Message) bool) bool {
	if !m.IsValid() {
		return true
	}
	if !fn(m) {
		return false
	}
	ok := true
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
		case fd.IsList():
			if fd.Message() != nil {
				l := v.List()
				for i := 0; i < l.Len() && ok; i++ {
					ok = Walk(l.Get(i).Message(), fn)
				}
			}
		case fd.Message() != nil:
			ok = Walk(v.Message(), fn)
		}
		return ok
	})
	return ok
}

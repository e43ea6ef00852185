// Package sqlcommit computes the commitment set S(y) of a SQL query and
// classifies intent drift between two queries, as TIDE-Bench defines them
// (PROTOCOL.md §9; the TIDE-Bench paper, §2.2, Algorithm 1, Appendix A).
//
// S(y) is a set of clause-scoped atomic units taken from the query's
// syntax tree (parsed by libpg_query through pg_query_go, after a
// SQLite-to-PostgreSQL rewrite of the lexical differences): each SELECT
// item (DISTINCT is one more SELECT unit, SELECT * one marker), each
// top-level AND conjunct of WHERE and of HAVING (predicates under OR or
// NOT stay whole), each GROUP BY key, each ORDER BY key with its direction,
// LIMIT and OFFSET. Every subquery and every set-operation branch is its
// own scope with its own path; the enclosing unit shows it as
// "(subquery)". A unit has a value form (literals kept) and a structural
// form (literals replaced by ?). The filtering units W are the WHERE
// conjuncts of every scope and every unit of a subquery referenced from a
// WHERE conjunct; the others, HAVING included, are output-side.
//
// Canonicalisation follows the TIDE format's conventions
// (shared/data/tide-format/README.md; docs/tide.md states each rule):
// identifiers are case-insensitive, table aliases are resolved to their
// tables (each instance of a self-joined table kept distinct), column
// aliases dropped from SELECT and replaced by their expressions elsewhere,
// comparisons oriented, window specifications part of their unit, JOIN ...
// ON conditions not units, and a SQLite double-quoted name that names no
// column in scope a string literal.
//
// Drift between y_pre and y_post is S(y_pre) ⊄ S(y_post) on value forms;
// Classify assigns Algorithm 1's subtype (value, constraint, projection or
// rejected) and, for projection drifts, the intent subtype of the paper's
// Figure 7 rule R7 (aspect_change or target_change).
package sqlcommit

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	pg "github.com/pganalyze/pg_query_go/v6"
	"github.com/pganalyze/pg_query_go/v6/parser"

	"avtgym/sqlexec/pgparse"
)

// Clause names the clause a unit comes from.
type Clause string

// The clauses that emit units.
const (
	Select  Clause = "SELECT"
	Where   Clause = "WHERE"
	GroupBy Clause = "GROUP BY"
	Having  Clause = "HAVING"
	OrderBy Clause = "ORDER BY"
	Limit   Clause = "LIMIT"
	Offset  Clause = "OFFSET"
)

// Unit is one commitment: a clause-scoped atomic unit of a query.
type Unit struct {
	// Scope is the unit's query-scope path: "" for the outermost query,
	// then one "/label" per nesting step: "/UNION[1]" for a set-operation
	// branch, "/FROM[1]" for a derived table, "/WITH name" for a CTE, and
	// "/{S}" for a subquery inside the unit whose structural form is S
	// ("#k" added for its k-th subquery when it has more than one).
	Scope string `json:"scope"`
	// Clause is the clause the unit comes from.
	Clause Clause `json:"clause"`
	// Value is the canonical text, clause keyword first, literals kept:
	// "WHERE concert.year = '2014'".
	Value string `json:"value"`
	// Struct is Value with every literal replaced by ?.
	Struct string `json:"structural"`
	// Literals are the literals of Value, in order.
	Literals []string `json:"literals,omitempty"`
	// InFilter marks a unit of a subquery referenced from a WHERE conjunct
	// (at any depth): the subquery is part of that filter, so the unit is
	// in W whatever its clause.
	InFilter bool `json:"in_filter,omitempty"`
}

// Filtering reports whether the unit is a filtering commitment, i.e. in W:
// a WHERE conjunct of any scope, or any unit of a subquery referenced from
// a WHERE conjunct. HAVING is output-side (TIDE §2.2 and Appendix G:
// projection-level changes are "confined to SELECT, GROUP BY, ORDER BY,
// HAVING, LIMIT, or OFFSET").
func (u Unit) Filtering() bool { return u.Clause == Where || u.InFilter }

func (u Unit) key() string { return u.Scope + "\x00" + u.Value }

// String is the unit as "scope: value" (the root scope written "/").
func (u Unit) String() string {
	s := u.Scope
	if s == "" {
		s = "/"
	}
	return s + ": " + u.Value
}

// Set is the commitment set S(y) of one query, with the facts Algorithm 1's
// intent subtype needs.
type Set struct {
	// Units are the commitments, sorted by scope, then clause (SELECT,
	// WHERE, GROUP BY, HAVING, ORDER BY, LIMIT, OFFSET), then position in
	// the query; no two share scope and value. Compare sets as sets:
	// reordered conjuncts give the same units in another order.
	Units []Unit `json:"units"`
	// Tables are the tables (and CTEs) named in FROM clauses of any scope,
	// lower case, sorted.
	Tables []string `json:"tables"`
	// WhereColumns are the columns referenced in WHERE conjuncts of any
	// scope, resolved to table.column where the schema allows, sorted.
	WhereColumns []string `json:"where_columns"`
}

// Filtering returns W: the WHERE units and the units of subqueries
// referenced from WHERE conjuncts.
func (s *Set) Filtering() []Unit {
	var out []Unit
	for _, u := range s.Units {
		if u.Filtering() {
			out = append(out, u)
		}
	}
	return out
}

// Output returns O = S \ W: the output-side units.
func (s *Set) Output() []Unit {
	var out []Unit
	for _, u := range s.Units {
		if !u.Filtering() {
			out = append(out, u)
		}
	}
	return out
}

// ParseError is a query the parser rejects, with the position in the
// query as given (before any dialect rewriting).
type ParseError struct {
	Msg    string // the parser's message
	Offset int    // byte offset in the query
	Line   int    // 1-based
	Column int    // 1-based, in characters
}

func (e *ParseError) Error() string {
	if e.Line == 0 {
		return "parse error: " + e.Msg
	}
	return fmt.Sprintf("parse error at line %d, column %d: %s", e.Line, e.Column, e.Msg)
}

// ErrNotQuery is returned for input that parses but is not one query
// (empty input, several statements, or a statement other than a SELECT).
var ErrNotQuery = errors.New("not a single SELECT query")

// Extract computes the commitment set of one SQLite query. schema (from
// NewSchema, or engines.CommitSchema for a SQLite file; nil when unknown) resolves double-quoted names
// and qualifies unqualified columns with their tables.
func Extract(sql string, schema *Schema) (*Set, error) {
	rw := toPostgres(sql, schema)
	tree, err := pgparse.Parse(rw.sql)
	if err != nil {
		return nil, parseError(sql, rw, err)
	}
	switch n := len(tree.Stmts); {
	case n == 0:
		return nil, fmt.Errorf("%w: the input is empty", ErrNotQuery)
	case n > 1:
		return nil, fmt.Errorf("%w: the input holds %d statements", ErrNotQuery, n)
	}
	sel := tree.Stmts[0].GetStmt().GetSelectStmt()
	if sel == nil {
		return nil, fmt.Errorf("%w: the statement is %s", ErrNotQuery, stmtKind(tree.Stmts[0].GetStmt()))
	}
	x := &extractor{schema: schema, dq: rw.dq, seen: map[string]bool{}, tables: map[string]bool{}, whereCols: map[string]bool{}}
	x.query(sel, "", nil)
	sort.SliceStable(x.units, func(i, j int) bool {
		a, b := x.units[i], x.units[j]
		if a.Scope != b.Scope {
			return a.Scope < b.Scope
		}
		return clauseRank[a.Clause] < clauseRank[b.Clause]
	})
	return &Set{Units: x.units, Tables: sortedKeys(x.tables), WhereColumns: sortedKeys(x.whereCols)}, nil
}

var clauseRank = map[Clause]int{Select: 0, Where: 1, GroupBy: 2, Having: 3, OrderBy: 4, Limit: 5, Offset: 6}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// stmtKind names a statement node's type for errors ("InsertStmt").
func stmtKind(n *pg.Node) string {
	if n == nil || n.Node == nil {
		return "empty"
	}
	s := fmt.Sprintf("%T", n.Node)
	s = strings.TrimPrefix(s, "*pg_query.Node_")
	return "a " + s + ", not a SELECT"
}

// parseError turns a pg_query error into a ParseError on the original text.
func parseError(orig string, rw rewritten, err error) error {
	msg, cursor := err.Error(), 0
	var pe *parser.Error
	var de *pgparse.DepthError
	switch {
	case errors.As(err, &pe):
		msg, cursor = pe.Message, pe.Cursorpos
	case errors.As(err, &de):
		// Refused before the parser: the cursor is the token past the limit.
		cursor = utf8.RuneCountInString(rw.sql[:min(de.Offset, len(rw.sql))]) + 1
	}
	if cursor <= 0 {
		return &ParseError{Msg: msg}
	}
	off := min(rw.originalOffset(cursor), len(orig))
	line, col := 1, 1
	for _, r := range orig[:off] {
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return &ParseError{Msg: msg, Offset: off, Line: line, Column: col}
}

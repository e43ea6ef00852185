package tide

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"avtgym/corpus/corpuswrite"
	"avtgym/sqlexec"
	"avtgym/sqlexec/sqlite"
)

// A reference whose outermost query has ORDER BY … LIMIT n
// must not cut through tied sort keys: when the n-th and (n+1)-th rows
// (or, with OFFSET m, the m-th and (m+1)-th) are equal on every sort key,
// the database may return either, so the reference's result is not
// determined and a correct policy can fail by chance. The TIDE format
// promises it (../shared/data/tide-format/README.md, "What every sample
// satisfies": "a LIMIT never cuts through tied sort keys"); the TIDE
// importer (checkTies) and the audit's chain_drift check (audit/ties.go)
// enforce it.
//
// The check rewrites the query: it adds RANK() OVER (ORDER BY <the sort
// keys>) to the outermost select list and reads one row past the LIMIT.
// A row's rank is 1 + the number of rows sorted strictly before it, so
// row n+1 ties with row n exactly when its rank is at most n (offset
// included). Sort keys that name an output column (an alias or an
// ordinal) are replaced by the column's expression. What the rewrite
// cannot express is left unchecked (LimitTie returns an error and callers
// skip it): compound queries (UNION, …), SELECT DISTINCT, a LIMIT that is
// not an integer literal, a query without FROM.

// LimitTie checks sql (its last statement) on eng. It returns a non-empty
// message when the LIMIT or OFFSET cuts through tied sort keys, "" when
// it does not or the query has no ORDER BY … LIMIT, and an error when the
// check cannot be made (the rewrite does not apply or does not run).
func LimitTie(ctx context.Context, eng sqlexec.Engine, sql string, lim sqlexec.Limits) (string, error) {
	q, ok, err := tieQuery(sql)
	if err != nil || !ok {
		return "", err
	}
	res, err := eng.Query(ctx, q.sql, lim)
	if err != nil {
		return "", fmt.Errorf("the tie check's query does not run: %w", err)
	}
	rank := func(row []any) (int64, bool) {
		if len(row) == 0 {
			return 0, false
		}
		v, ok := row[len(row)-1].(int64)
		return v, ok
	}
	keys := strings.Join(q.keys, ", ")
	if q.offset > 0 && len(res.Rows) > 0 {
		if r, ok := rank(res.Rows[0]); ok && r <= q.offset {
			return fmt.Sprintf("ORDER BY %s … OFFSET %d cuts through tied sort keys: rows %d and %d tie on (%s), so which rows the reference returns is not determined",
				keys, q.offset, q.offset, q.offset+1, keys), nil
		}
	}
	if int64(len(res.Rows)) == q.limit+1 {
		if r, ok := rank(res.Rows[q.limit]); ok && r <= q.offset+q.limit {
			return fmt.Sprintf("ORDER BY %s LIMIT %d cuts through tied sort keys: rows %d and %d tie on (%s), so which rows the reference returns is not determined",
				keys, q.limit, q.offset+q.limit, q.offset+q.limit+1, keys), nil
		}
	}
	return "", nil
}

// tieRewrite is LimitTie's rewritten query and what it reads.
type tieRewrite struct {
	sql           string
	keys          []string // the sort keys as written
	limit, offset int64
}

// tieClauses are the positions (in the significant tokens) of the
// outermost query's clauses.
type tieClauses struct {
	sel, from, order, limit int
}

// findTieClauses locates the outermost SELECT, FROM, ORDER BY and LIMIT;
// ok is false for a compound query or one without those clauses.
func findTieClauses(toks []sqlexec.Token) (tieClauses, bool) {
	c := tieClauses{-1, -1, -1, -1}
	depth := 0
	for i, t := range toks {
		switch {
		case t.IsPunct('('):
			depth++
		case t.IsPunct(')'):
			depth--
		case depth != 0:
		case t.IsWord("UNION") || t.IsWord("INTERSECT") || t.IsWord("EXCEPT"):
			return c, false
		case t.IsWord("SELECT") && c.sel < 0:
			c.sel = i
		case t.IsWord("FROM") && c.sel >= 0 && c.from < 0:
			c.from = i
		case t.IsWord("ORDER") && i+1 < len(toks) && toks[i+1].IsWord("BY"):
			c.order = i
		case t.IsWord("LIMIT"):
			c.limit = i
		}
	}
	ok := c.sel >= 0 && c.from > c.sel && c.order > c.from && c.limit > c.order
	return c, ok
}

// tieQuery rewrites sql for LimitTie; ok is false when sql has no
// outermost ORDER BY … LIMIT (nothing to check).
func tieQuery(sql string) (tieRewrite, bool, error) {
	stmts := sqlexec.SplitStatements(sql)
	if len(stmts) == 0 {
		return tieRewrite{}, false, nil
	}
	var toks []sqlexec.Token
	for _, t := range sqlexec.Lex(stmts[len(stmts)-1]) {
		if !t.Trivia() && !t.IsPunct(';') {
			toks = append(toks, t)
		}
	}
	hasOrder, hasLimit := false, false
	for _, t := range toks {
		hasOrder = hasOrder || t.IsWord("ORDER")
		hasLimit = hasLimit || t.IsWord("LIMIT")
	}
	c, ok := findTieClauses(toks)
	if !ok {
		if hasOrder && hasLimit && sqlexec.HasOuterOrderBy(sql) {
			return tieRewrite{}, false, fmt.Errorf("the tie check does not apply to this query's form (a compound query, or no FROM)")
		}
		return tieRewrite{}, false, nil
	}
	if c.sel+1 < len(toks) && toks[c.sel+1].IsWord("DISTINCT") {
		return tieRewrite{}, false, fmt.Errorf("the tie check does not apply to SELECT DISTINCT")
	}
	limit, offset, ok := limitOffset(toks[c.limit+1:])
	if !ok {
		return tieRewrite{}, false, fmt.Errorf("the tie check needs an integer literal LIMIT and OFFSET")
	}
	items := splitTop(toks[c.sel+1 : c.from])
	if c.sel+1 < c.from && toks[c.sel+1].IsWord("ALL") {
		items = splitTop(toks[c.sel+2 : c.from])
	}
	var keys, exprs []string
	for _, k := range splitTop(toks[c.order+2 : c.limit]) {
		expr, dir := splitDirection(k)
		if len(expr) == 0 {
			continue
		}
		keys = append(keys, join(k))
		exprs = append(exprs, join(append(slices.Clone(resolveKey(expr, items)), dir...)))
	}
	if len(keys) == 0 {
		return tieRewrite{}, false, nil
	}
	var b strings.Builder
	b.WriteString(join(toks[:c.from]))
	b.WriteString(", RANK() OVER (ORDER BY " + strings.Join(exprs, ", ") + ") AS avtgym_tie_rank ")
	b.WriteString(join(toks[c.from:c.limit]))
	fmt.Fprintf(&b, " LIMIT %d OFFSET %d", limit+1, offset)
	return tieRewrite{sql: b.String(), keys: keys, limit: limit, offset: offset}, true, nil
}

// limitOffset reads "n", "n OFFSET m" or SQLite's "m, n" after LIMIT.
func limitOffset(toks []sqlexec.Token) (limit, offset int64, ok bool) {
	num := func(i int) (int64, bool) {
		if i >= len(toks) || toks[i].Kind != sqlexec.TokenNumber {
			return 0, false
		}
		v, err := strconv.ParseInt(toks[i].Text, 10, 64)
		return v, err == nil && v >= 0
	}
	a, ok := num(0)
	if !ok {
		return 0, 0, false
	}
	switch {
	case len(toks) == 1:
		return a, 0, true
	case len(toks) == 3 && toks[1].IsPunct(','):
		n, ok := num(2)
		return n, a, ok
	case len(toks) == 3 && toks[1].IsWord("OFFSET"):
		m, ok := num(2)
		return a, m, ok
	}
	return 0, 0, false
}

// splitTop splits toks at commas outside parentheses.
func splitTop(toks []sqlexec.Token) [][]sqlexec.Token {
	var out [][]sqlexec.Token
	depth, start := 0, 0
	for i, t := range toks {
		switch {
		case t.IsPunct('('):
			depth++
		case t.IsPunct(')'):
			depth--
		case depth == 0 && t.IsPunct(','):
			out = append(out, toks[start:i])
			start = i + 1
		}
	}
	return append(out, toks[start:])
}

// splitDirection splits a sort key into its expression and its ASC/DESC
// and NULLS FIRST/LAST, which the window keeps: a row's rank counts the
// rows before it in the query's own order. COLLATE stays in the
// expression.
func splitDirection(k []sqlexec.Token) (expr, dir []sqlexec.Token) {
	n := len(k)
	if n >= 2 && k[n-2].IsWord("NULLS") && (k[n-1].IsWord("FIRST") || k[n-1].IsWord("LAST")) {
		n -= 2
	}
	if n >= 1 && (k[n-1].IsWord("ASC") || k[n-1].IsWord("DESC")) {
		n--
	}
	return k[:n], k[n:]
}

// resolveKey replaces a sort key that names an output column (an ordinal,
// or a select item's alias) by that item's expression: inside the window
// an ordinal is a constant and an alias may not be in scope.
func resolveKey(k []sqlexec.Token, items [][]sqlexec.Token) []sqlexec.Token {
	if len(k) != 1 {
		return k
	}
	if k[0].Kind == sqlexec.TokenNumber {
		if i, err := strconv.Atoi(k[0].Text); err == nil && i >= 1 && i <= len(items) {
			expr, _ := splitAlias(items[i-1])
			return expr
		}
		return k
	}
	name := identName(k[0])
	for _, it := range items {
		if expr, alias := splitAlias(it); alias != "" && strings.EqualFold(alias, name) {
			return expr
		}
	}
	return k
}

// splitAlias splits a select item "expr [AS] alias" into its expression
// and alias ("" when it has none).
func splitAlias(it []sqlexec.Token) ([]sqlexec.Token, string) {
	n := len(it)
	if n >= 3 && it[n-2].IsWord("AS") {
		return it[:n-2], identName(it[n-1])
	}
	return it, ""
}

// identName is an identifier token's name, without its quotes.
func identName(t sqlexec.Token) string {
	if t.Kind == sqlexec.TokenQuoted && len(t.Text) >= 2 {
		return t.Text[1 : len(t.Text)-1]
	}
	return t.Text
}

// join writes tokens back as SQL, spaced except around '.', inside
// parentheses and before a function call's parenthesis.
func join(toks []sqlexec.Token) string {
	var b strings.Builder
	for i, t := range toks {
		glued := t.IsPunct('.') || t.IsPunct(')') || t.IsPunct(',') || (t.IsPunct('(') && i > 0 && toks[i-1].Kind == sqlexec.TokenWord)
		if i > 0 && !glued && !toks[i-1].IsPunct('.') && !toks[i-1].IsPunct('(') {
			b.WriteByte(' ')
		}
		b.WriteString(t.Text)
	}
	return b.String()
}

// tieFields are the SQL fields of a sample whose LIMIT must not cut
// through ties (the format README's rule covers every SQL of a sample).
var tieFields = []string{"anchor_sql", "post_drift_sql", "l1_alt_sql", "l2_alt_sql"}

// checkTies reports, on the sample's line, each SQL field of a sample
// whose ORDER BY … LIMIT cuts through tied sort keys on its database
// (dbs: checkDatabases' paths under opt.DBs). A query the check cannot
// rewrite is not reported here: the written corpus's checks run it.
func (im *importer) checkTies(ctx context.Context, samples []*sample, dbs map[string]string) {
	open := map[string]*sqlite.DB{}
	defer func() {
		for _, db := range open {
			db.Close()
		}
	}()
	for _, s := range samples {
		rel, ok := dbs[s.str["db_id"]]
		if !ok {
			continue
		}
		db := open[rel]
		if db == nil {
			real, err := corpuswrite.ResolveInput(im.opt.DBs, rel)
			if err != nil {
				continue
			}
			if db, err = sqlite.Open(real, sqlite.Options{MaxOpenConns: 1}); err != nil {
				continue
			}
			open[rel] = db
		}
		for _, f := range tieFields {
			sql := s.str[f]
			if strings.TrimSpace(sql) == "" {
				continue
			}
			if msg, err := LimitTie(ctx, db, sql, im.opt.Limits); err == nil && msg != "" {
				im.report(s.line, s.str["instance_id"], f, "%s", msg)
			}
		}
	}
}

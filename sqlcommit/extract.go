package sqlcommit

import (
	"fmt"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// extractor walks one query's scopes and collects their units.
type extractor struct {
	schema    *Schema
	dq        map[int]string // rewritten offset of a double-quoted name -> the name as written
	inFilter  bool           // walking a subquery referenced from a WHERE conjunct
	units     []Unit
	seen      map[string]bool // unit keys already emitted
	tables    map[string]bool
	whereCols map[string]bool
	ctes      []map[string]*relation // WITH names visible, innermost last
}

// relation is a FROM item as column references see it.
type relation struct {
	canon string   // the name column references resolve to: a table, a CTE name, or a derived table's scope path
	cols  []string // its lower-case columns; nil when unknown
	known bool     // cols is authoritative
}

func (r *relation) has(col string) bool {
	for _, c := range r.cols {
		if c == col {
			return true
		}
	}
	return false
}

// scope is one query block's name resolution context.
type scope struct {
	parent   *scope
	path     string
	rels     []*relation          // FROM items, in order
	aliases  map[string]*relation // the names FROM items are referenced by
	targets  []*pg.ResTarget      // SELECT items, for ordinals and column aliases
	outAlias map[string]*pg.Node  // column alias -> expression
	filter   bool                 // a subquery referenced from a WHERE conjunct: every unit is in W
	windows  map[string]*pg.WindowDef
	// instances counts the FROM items naming each table in this block;
	// a table named twice (a self-join) gets one name per instance.
	instances map[string]int
	seenInst  map[string]int
}

func (x *extractor) emit(u Unit) {
	k := u.key()
	if x.seen[k] {
		return
	}
	x.seen[k] = true
	x.units = append(x.units, u)
}

func childPath(parent, label string) string { return parent + "/" + label }

// query emits the units of a query block (or set operation) at path, with
// parent the enclosing scope for correlated references.
func (x *extractor) query(q *pg.SelectStmt, path string, parent *scope) {
	if q == nil {
		return
	}
	if w := q.GetWithClause(); w != nil {
		names := map[string]*relation{}
		x.ctes = append(x.ctes, names)
		defer func() { x.ctes = x.ctes[:len(x.ctes)-1] }()
		for _, c := range w.GetCtes() {
			cte := c.GetCommonTableExpr()
			if cte == nil {
				continue
			}
			name := strings.ToLower(cte.GetCtename())
			r := &relation{canon: name}
			if sub := cte.GetCtequery().GetSelectStmt(); sub != nil {
				r.cols, r.known = outputNames(sub)
				if cn := cte.GetAliascolnames(); len(cn) > 0 {
					r.cols, r.known = nil, true
					for _, n := range cn {
						r.cols = append(r.cols, strings.ToLower(n.GetString_().GetSval()))
					}
				}
				names[name] = r // visible to itself (WITH RECURSIVE) and later CTEs
				x.query(sub, childPath(path, "WITH "+name), parent)
			}
		}
	}
	sc := &scope{parent: parent, path: path, aliases: map[string]*relation{}, outAlias: map[string]*pg.Node{},
		filter: x.inFilter, windows: map[string]*pg.WindowDef{}, instances: map[string]int{}, seenInst: map[string]int{}}
	if q.GetOp() != pg.SetOperation_SETOP_NONE && q.GetOp() != pg.SetOperation_SET_OPERATION_UNDEFINED {
		op := setOpName(q)
		for j, b := range setBranches(q) {
			x.query(b, childPath(path, fmt.Sprintf("%s[%d]", op, j)), parent)
		}
		// ORDER BY, LIMIT and OFFSET of the whole set operation: keys
		// name output columns.
		if l := setBranches(q); len(l) > 0 {
			sc.targets = leftmostTargets(l[0])
			for _, t := range sc.targets {
				if t.GetName() != "" {
					sc.outAlias[strings.ToLower(t.GetName())] = t.GetVal()
				}
			}
		}
		x.tail(q, sc)
		return
	}
	// FROM first: it defines the names the other clauses use.
	x.fromClause(q, sc)
	for _, n := range q.GetTargetList() {
		if t := n.GetResTarget(); t != nil {
			sc.targets = append(sc.targets, t)
			if t.GetName() != "" {
				sc.outAlias[strings.ToLower(t.GetName())] = t.GetVal()
			}
		}
	}
	if dc := q.GetDistinctClause(); len(dc) > 0 {
		if len(dc) == 1 && (dc[0] == nil || dc[0].GetNode() == nil) {
			x.emit(Unit{Scope: path, Clause: Select, Value: "SELECT DISTINCT", Struct: "SELECT DISTINCT"})
		} else {
			x.unitList(sc, Select, "SELECT DISTINCT ON ", dc)
		}
	}
	for _, t := range sc.targets {
		x.unit(sc, Select, "SELECT ", t.GetVal(), nil)
	}
	for _, row := range q.GetValuesLists() {
		x.unit(sc, Select, "VALUES ", row, nil)
	}
	for _, c := range conjuncts(q.GetWhereClause()) {
		x.unit(sc, Where, "WHERE ", c, nil)
	}
	for _, g := range q.GetGroupClause() {
		x.unit(sc, GroupBy, "GROUP BY ", g, nil)
	}
	for _, c := range conjuncts(q.GetHavingClause()) {
		x.unit(sc, Having, "HAVING ", c, nil)
	}
	x.tail(q, sc)
}

// tail emits ORDER BY, LIMIT and OFFSET.
func (x *extractor) tail(q *pg.SelectStmt, sc *scope) {
	for _, s := range q.GetSortClause() {
		sb := s.GetSortBy()
		if sb == nil {
			x.unit(sc, OrderBy, "ORDER BY ", s, nil)
			continue
		}
		suffix := " ASC"
		switch sb.GetSortbyDir() {
		case pg.SortByDir_SORTBY_DESC:
			suffix = " DESC"
		case pg.SortByDir_SORTBY_USING:
			suffix = " USING " + opName(sb.GetUseOp())
		}
		switch sb.GetSortbyNulls() {
		case pg.SortByNulls_SORTBY_NULLS_FIRST:
			suffix += " NULLS FIRST"
		case pg.SortByNulls_SORTBY_NULLS_LAST:
			suffix += " NULLS LAST"
		}
		x.unit(sc, OrderBy, "ORDER BY ", sb.GetNode(), &suffix)
	}
	if c := q.GetLimitCount(); c != nil && !isNullConst(c) {
		x.unit(sc, Limit, "LIMIT ", c, nil)
	}
	if o := q.GetLimitOffset(); o != nil {
		x.unit(sc, Offset, "OFFSET ", o, nil)
	}
}

func isNullConst(n *pg.Node) bool {
	c := n.GetAConst()
	return c != nil && c.GetIsnull()
}

// unit renders one expression as a unit of clause and emits it, then walks
// the subqueries it contains as child scopes.
func (x *extractor) unit(sc *scope, clause Clause, prefix string, n *pg.Node, suffix *string) {
	p := newPrinter(x, sc, clause)
	p.both(prefix)
	p.key(n)
	if suffix != nil {
		p.both(*suffix)
	}
	u := Unit{Scope: sc.path, Clause: clause, Value: p.val.String(), Struct: p.str.String(), Literals: p.lits, InFilter: sc.filter}
	x.emit(u)
	if clause == Where {
		for _, c := range p.cols {
			x.whereCols[strings.TrimLeft(c, "^")] = true
		}
	}
	// A subquery inside a WHERE predicate belongs to that filter.
	x.subqueries(sc, u.Struct, p.subs, sc.filter || clause == Where)
}

// unitList renders a list of expressions (DISTINCT ON) as one unit.
func (x *extractor) unitList(sc *scope, clause Clause, prefix string, ns []*pg.Node) {
	p := newPrinter(x, sc, clause)
	p.both(prefix)
	p.list(ns)
	u := Unit{Scope: sc.path, Clause: clause, Value: p.val.String(), Struct: p.str.String(), Literals: p.lits, InFilter: sc.filter}
	x.emit(u)
	x.subqueries(sc, u.Struct, p.subs, sc.filter)
}

// subqueries walks the subqueries found in a unit (or an ON condition) as
// child scopes labelled by its structural form; filter marks them part of
// a WHERE filter.
func (x *extractor) subqueries(sc *scope, label string, subs []*pg.SelectStmt, filter bool) {
	was := x.inFilter
	x.inFilter = filter
	defer func() { x.inFilter = was }()
	for k, s := range subs {
		l := "{" + label + "}"
		if len(subs) > 1 {
			l += fmt.Sprintf("#%d", k+1)
		}
		x.query(s, childPath(sc.path, l), sc)
	}
}

// from registers a FROM item's names in sc, walks derived tables as child
// scopes, and records base tables.
func (x *extractor) from(n *pg.Node, sc *scope, nFrom *int) {
	switch {
	case n.GetRangeVar() != nil:
		rv := n.GetRangeVar()
		name := strings.ToLower(rv.GetRelname())
		r := x.cte(name)
		if r == nil {
			r = &relation{canon: name}
			if cols := x.schema.Columns(name); x.schema.HasTable(name) {
				r.cols, r.known = cols, true
			}
		}
		x.tables[r.canon] = true
		if sc.instances[name] > 1 {
			// A self-join: each instance is its own relation, named by
			// its position among the FROM items naming that table (not by
			// its alias, so renaming aliases still changes nothing).
			sc.seenInst[name]++
			r = &relation{canon: fmt.Sprintf("%s#%d", r.canon, sc.seenInst[name]), cols: r.cols, known: r.known}
		}
		sc.rels = append(sc.rels, r)
		ref := name
		if a := rv.GetAlias(); a != nil && a.GetAliasname() != "" {
			ref = strings.ToLower(a.GetAliasname())
		}
		sc.aliases[ref] = r
	case n.GetRangeSubselect() != nil:
		rs := n.GetRangeSubselect()
		*nFrom++
		path := childPath(sc.path, fmt.Sprintf("FROM[%d]", *nFrom))
		sub := rs.GetSubquery().GetSelectStmt()
		r := &relation{canon: path}
		if sub != nil {
			r.cols, r.known = outputNames(sub)
		}
		sc.rels = append(sc.rels, r)
		if a := rs.GetAlias(); a != nil && a.GetAliasname() != "" {
			sc.aliases[strings.ToLower(a.GetAliasname())] = r
		}
		var parent *scope
		if rs.GetLateral() {
			parent = sc
		} else {
			parent = sc.parent
		}
		x.query(sub, path, parent)
	case n.GetJoinExpr() != nil:
		j := n.GetJoinExpr()
		x.from(j.GetLarg(), sc, nFrom)
		x.from(j.GetRarg(), sc, nFrom)
		if q := j.GetQuals(); q != nil {
			// ON is not a unit, but subqueries in it are scopes.
			p := newPrinter(x, sc, "")
			p.both("ON ")
			p.node(q)
			x.subqueries(sc, p.str.String(), p.subs, sc.filter)
		}
	case n.GetRangeFunction() != nil:
		rf := n.GetRangeFunction()
		name := "function"
		for _, f := range rf.GetFunctions() {
			if l := f.GetList(); l != nil && len(l.GetItems()) > 0 {
				if fc := l.GetItems()[0].GetFuncCall(); fc != nil {
					name = funcName(fc.GetFuncname())
				}
			}
		}
		r := &relation{canon: name + "()"}
		x.tables[r.canon] = true
		sc.rels = append(sc.rels, r)
		if a := rf.GetAlias(); a != nil && a.GetAliasname() != "" {
			sc.aliases[strings.ToLower(a.GetAliasname())] = r
		} else {
			sc.aliases[name] = r
		}
	}
}

// fromClause registers a block's FROM items and named windows in sc.
func (x *extractor) fromClause(q *pg.SelectStmt, sc *scope) {
	for _, f := range q.GetFromClause() {
		x.countInstances(f, sc)
	}
	for _, w := range q.GetWindowClause() {
		if wd := w.GetWindowDef(); wd != nil && wd.GetName() != "" {
			sc.windows[strings.ToLower(wd.GetName())] = wd
		}
	}
	nFrom := 0
	for _, f := range q.GetFromClause() {
		x.from(f, sc, &nFrom)
	}
}

// countInstances counts the FROM items of a block naming each table.
func (x *extractor) countInstances(n *pg.Node, sc *scope) {
	switch {
	case n.GetRangeVar() != nil:
		sc.instances[strings.ToLower(n.GetRangeVar().GetRelname())]++
	case n.GetJoinExpr() != nil:
		x.countInstances(n.GetJoinExpr().GetLarg(), sc)
		x.countInstances(n.GetJoinExpr().GetRarg(), sc)
	}
}

// cte returns the visible CTE of that name, or nil.
func (x *extractor) cte(name string) *relation {
	for i := len(x.ctes) - 1; i >= 0; i-- {
		if r, ok := x.ctes[i][name]; ok {
			return r
		}
	}
	return nil
}

// resolveQualifier returns what a qualifier (alias or table name) refers
// to, looking outwards through the enclosing scopes, and how many scopes
// out it was found (0: this one).
func (sc *scope) resolveQualifier(q string) (*relation, int) {
	depth := 0
	for s := sc; s != nil; s = s.parent {
		if r, ok := s.aliases[q]; ok {
			return r, depth
		}
		if n := s.instances[q]; n > 1 {
			// A self-joined table referenced by its bare name: the first
			// instance named so (SQLite would call it ambiguous).
			for _, r := range s.rels {
				if r.canon == q+"#1" {
					return r, depth
				}
			}
		}
		depth++
	}
	return nil, 0
}

// inScope reports whether an unqualified name may be a column SQLite sees
// from this scope: a column of a FROM item here or in an enclosing scope,
// or any name when one of those items' columns are unknown.
func (sc *scope) inScope(col string) bool {
	for s := sc; s != nil; s = s.parent {
		for _, r := range s.rels {
			if !r.known || r.has(col) {
				return true
			}
		}
	}
	return false
}

// resolveColumn returns the relation an unqualified column belongs to and
// how many scopes out, or nil when it cannot tell (unknown tables,
// ambiguity, or no such column).
func (sc *scope) resolveColumn(col string) (*relation, int) {
	depth := -1
	for s := sc; s != nil; s = s.parent {
		depth++
		var match []*relation
		unknown := 0
		for _, r := range s.rels {
			if !r.known {
				unknown++
				continue
			}
			if r.has(col) {
				match = append(match, r)
			}
		}
		switch {
		case len(match) == 1 && unknown == 0:
			return match[0], depth
		case len(match) > 0:
			return nil, 0 // ambiguous, or maybe in an unknown table
		case unknown == 1 && len(s.rels) == 1:
			return s.rels[0], depth // one table the schema does not know: it must be its column
		case unknown > 0:
			return nil, 0
		}
		// Not in this scope: a correlated reference, look outwards.
	}
	return nil, 0
}

// outputNames returns the output column names of a query (the leftmost
// branch of a set operation), and whether all are known.
func outputNames(q *pg.SelectStmt) ([]string, bool) {
	var cols []string
	known := true
	for _, t := range leftmostTargets(q) {
		switch {
		case t.GetName() != "":
			cols = append(cols, strings.ToLower(t.GetName()))
		case len(t.GetVal().GetColumnRef().GetFields()) > 0:
			f := t.GetVal().GetColumnRef().GetFields()
			if s := f[len(f)-1].GetString_(); s != nil {
				cols = append(cols, strings.ToLower(s.GetSval()))
			} else {
				known = false // a star: columns unknown here
			}
		default:
			known = false
		}
	}
	return cols, known
}

func leftmostTargets(q *pg.SelectStmt) []*pg.ResTarget {
	for q != nil && q.GetOp() != pg.SetOperation_SETOP_NONE && q.GetOp() != pg.SetOperation_SET_OPERATION_UNDEFINED {
		q = q.GetLarg()
	}
	var out []*pg.ResTarget
	for _, n := range q.GetTargetList() {
		if t := n.GetResTarget(); t != nil {
			out = append(out, t)
		}
	}
	return out
}

func setOpName(q *pg.SelectStmt) string {
	s := map[pg.SetOperation]string{pg.SetOperation_SETOP_UNION: "UNION", pg.SetOperation_SETOP_INTERSECT: "INTERSECT", pg.SetOperation_SETOP_EXCEPT: "EXCEPT"}[q.GetOp()]
	if q.GetAll() {
		s += " ALL"
	}
	return s
}

// setBranches returns the ordered branches of a set operation, flattening
// a left-deep chain of the same operation (a UNION b UNION c: three
// branches).
func setBranches(q *pg.SelectStmt) []*pg.SelectStmt {
	var rev []*pg.SelectStmt
	cur := q
	for {
		rev = append(rev, cur.GetRarg())
		l := cur.GetLarg()
		if l != nil && l.GetOp() == q.GetOp() && l.GetAll() == q.GetAll() && len(l.GetSortClause()) == 0 &&
			l.GetLimitCount() == nil && l.GetLimitOffset() == nil && l.GetWithClause() == nil {
			cur = l
			continue
		}
		rev = append(rev, l)
		break
	}
	out := make([]*pg.SelectStmt, len(rev))
	for i, b := range rev {
		out[len(rev)-1-i] = b
	}
	return out
}

// conjuncts splits a condition at its top-level ANDs (nested ANDs
// flattened); predicates under OR or NOT stay whole.
func conjuncts(n *pg.Node) []*pg.Node {
	if n == nil || n.GetNode() == nil {
		return nil
	}
	if b := n.GetBoolExpr(); b != nil && b.GetBoolop() == pg.BoolExprType_AND_EXPR {
		var out []*pg.Node
		for _, a := range b.GetArgs() {
			out = append(out, conjuncts(a)...)
		}
		return out
	}
	return []*pg.Node{n}
}

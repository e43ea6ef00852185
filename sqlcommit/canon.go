package sqlcommit

import (
	"sort"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// printer renders an expression canonically, in a value form and a
// structural form at once: keywords upper case, identifiers lower case and
// resolved (aliases to tables, unqualified columns to table.column where
// the schema tells), literals kept (value) or replaced by ? (structural),
// operands of nested operators parenthesised.
type printer struct {
	x       *extractor
	sc      *scope
	clause  Clause
	val     strings.Builder
	str     strings.Builder
	lits    []string
	subs    []*pg.SelectStmt // subqueries met, in order
	cols    []string         // resolved column references met
	noAlias bool             // inside a substituted column alias
}

func newPrinter(x *extractor, sc *scope, clause Clause) *printer {
	return &printer{x: x, sc: sc, clause: clause}
}

// sub returns a printer for rendering an operand on its own (to compare
// operands before writing them), in the same context.
func (p *printer) sub() *printer {
	return &printer{x: p.x, sc: p.sc, clause: p.clause, noAlias: p.noAlias}
}

// merge appends what q rendered.
func (p *printer) merge(q *printer) {
	p.val.WriteString(q.val.String())
	p.str.WriteString(q.str.String())
	p.lits = append(p.lits, q.lits...)
	p.subs = append(p.subs, q.subs...)
	p.cols = append(p.cols, q.cols...)
}

// rank orders a comparison's operands: columns and other expressions
// first (0), then subqueries (1), then literals (2), so that a literal
// or a subquery is always on the right.
func (p *printer) rank() int {
	switch {
	case len(p.subs) > 0:
		return 1
	case len(p.cols) == 0 && len(p.lits) > 0:
		return 2
	}
	return 0
}

// flipped is the comparison read with its operands swapped.
var flipped = map[string]string{"=": "=", "<>": "<>", "<": ">", ">": "<", "<=": ">=", ">=": "<="}

// comparison renders l op r oriented: the operand of lower rank on the
// left (30 < age is age > 30), and two operands of the same rank (not
// both literals) in the order of their texts (a.x = b.y is b.y = a.x),
// the operator flipped when the operands are swapped.
func (p *printer) comparison(l *pg.Node, op string, r *pg.Node) {
	a, b := p.sub(), p.sub()
	a.operand(l)
	b.operand(r)
	ra, rb := a.rank(), b.rank()
	swap := ra > rb ||
		(ra == rb && ra != 2 && (b.str.String() < a.str.String() || (b.str.String() == a.str.String() && b.val.String() < a.val.String())))
	if swap {
		a, b, op = b, a, flipped[op]
	}
	p.merge(a)
	p.both(" " + op + " ")
	p.merge(b)
}

func (p *printer) both(s string) {
	p.val.WriteString(s)
	p.str.WriteString(s)
}

func (p *printer) lit(s string) {
	p.val.WriteString(s)
	p.str.WriteString("?")
	p.lits = append(p.lits, s)
}

// key renders a GROUP BY or ORDER BY key: an integer constant is a SELECT
// item's ordinal and stands for that item.
func (p *printer) key(n *pg.Node) {
	if p.clause == GroupBy || p.clause == OrderBy {
		if c := n.GetAConst(); c != nil && c.GetIval() != nil {
			if i := int(c.GetIval().GetIval()); i >= 1 && i <= len(p.sc.targets) {
				p.substitute(p.sc.targets[i-1].GetVal())
				return
			}
		}
	}
	p.node(n)
}

func (p *printer) substitute(n *pg.Node) {
	was := p.noAlias
	p.noAlias = true
	p.node(n)
	p.noAlias = was
}

func (p *printer) list(ns []*pg.Node) {
	for i, n := range ns {
		if i > 0 {
			p.both(", ")
		}
		p.node(n)
	}
}

// operand renders n, parenthesised when it is itself an operator
// expression.
func (p *printer) operand(n *pg.Node) {
	if e := p.operandAlias(n); e != nil {
		// A column alias standing for an expression: parenthesised as
		// that expression would be.
		was := p.noAlias
		p.noAlias = true
		p.operand(e)
		p.noAlias = was
		return
	}
	paren := false
	switch v := n.GetNode().(type) {
	case *pg.Node_AExpr, *pg.Node_BoolExpr, *pg.Node_NullTest, *pg.Node_BooleanTest, *pg.Node_CollateClause:
		paren = true
	case *pg.Node_SubLink:
		// x IN (subquery), x > ALL (subquery): an operator expression too.
		paren = v.SubLink.GetTestexpr() != nil
	}
	switch {
	case paren:
		p.both("(")
		p.node(n)
		p.both(")")
	default:
		p.node(n)
	}
}

func (p *printer) node(n *pg.Node) {
	if n == nil || n.GetNode() == nil {
		return
	}
	switch v := n.GetNode().(type) {
	case *pg.Node_ColumnRef:
		p.columnRef(v.ColumnRef)
	case *pg.Node_AConst:
		p.aconst(v.AConst)
	case *pg.Node_ParamRef:
		p.lit("$" + strconv.Itoa(int(v.ParamRef.GetNumber())))
	case *pg.Node_AExpr:
		p.aexpr(v.AExpr)
	case *pg.Node_BoolExpr:
		p.boolExpr(v.BoolExpr)
	case *pg.Node_FuncCall:
		p.funcCall(v.FuncCall)
	case *pg.Node_TypeCast:
		p.both("CAST(")
		p.node(v.TypeCast.GetArg())
		p.both(" AS " + typeName(v.TypeCast.GetTypeName()) + ")")
	case *pg.Node_SubLink:
		p.subLink(v.SubLink)
	case *pg.Node_NullTest:
		p.nullTest(v.NullTest)
	case *pg.Node_BooleanTest:
		p.operand(v.BooleanTest.GetArg())
		p.both(boolTests[v.BooleanTest.GetBooltesttype()])
	case *pg.Node_CaseExpr:
		p.caseExpr(v.CaseExpr)
	case *pg.Node_CoalesceExpr:
		p.call("coalesce", v.CoalesceExpr.GetArgs())
	case *pg.Node_MinMaxExpr:
		p.minMax(v.MinMaxExpr)
	case *pg.Node_CollateClause:
		p.operand(v.CollateClause.GetArg())
		p.both(" COLLATE " + strings.ToLower(names(v.CollateClause.GetCollname())))
	case *pg.Node_RowExpr:
		p.call("", v.RowExpr.GetArgs())
	case *pg.Node_List:
		p.call("", v.List.GetItems())
	case *pg.Node_SqlvalueFunction:
		p.both(strings.TrimPrefix(v.SqlvalueFunction.GetOp().String(), "SVFOP_"))
	case *pg.Node_SelectStmt:
		p.subs = append(p.subs, v.SelectStmt)
		p.both("(subquery)")
	case *pg.Node_AStar:
		p.both("*")
	default:
		p.otherNode(n)
	}
}

// call renders name(args...); an empty name renders a parenthesised list.
func (p *printer) call(name string, args []*pg.Node) {
	p.both(name + "(")
	p.list(args)
	p.both(")")
}

// boolExpr renders NOT x, or the AND / OR of its operands.
func (p *printer) boolExpr(b *pg.BoolExpr) {
	if b.GetBoolop() == pg.BoolExprType_NOT_EXPR {
		p.both("NOT ")
		p.operand(b.GetArgs()[0])
		return
	}
	sep := " AND "
	if b.GetBoolop() == pg.BoolExprType_OR_EXPR {
		sep = " OR "
	}
	for i, a := range b.GetArgs() {
		if i > 0 {
			p.both(sep)
		}
		p.operand(a)
	}
}

func (p *printer) nullTest(t *pg.NullTest) {
	p.operand(t.GetArg())
	if t.GetNulltesttype() == pg.NullTestType_IS_NOT_NULL {
		p.both(" IS NOT NULL")
	} else {
		p.both(" IS NULL")
	}
}

// boolTests are the texts of the IS [NOT] TRUE / FALSE / UNKNOWN tests.
var boolTests = map[pg.BoolTestType]string{
	pg.BoolTestType_IS_TRUE: " IS TRUE", pg.BoolTestType_IS_NOT_TRUE: " IS NOT TRUE",
	pg.BoolTestType_IS_FALSE: " IS FALSE", pg.BoolTestType_IS_NOT_FALSE: " IS NOT FALSE",
	pg.BoolTestType_IS_UNKNOWN: " IS UNKNOWN", pg.BoolTestType_IS_NOT_UNKNOWN: " IS NOT UNKNOWN",
}

func (p *printer) caseExpr(c *pg.CaseExpr) {
	p.both("CASE")
	if c.GetArg() != nil {
		p.both(" ")
		p.operand(c.GetArg())
	}
	for _, w := range c.GetArgs() {
		cw := w.GetCaseWhen()
		p.both(" WHEN ")
		p.node(cw.GetExpr())
		p.both(" THEN ")
		p.node(cw.GetResult())
	}
	if c.GetDefresult() != nil {
		p.both(" ELSE ")
		p.node(c.GetDefresult())
	}
	p.both(" END")
}

// minMax renders LEAST(...) and GREATEST(...).
func (p *printer) minMax(m *pg.MinMaxExpr) {
	name := "greatest"
	if m.GetOp() == pg.MinMaxOp_IS_LEAST {
		name = "least"
	}
	p.call(name, m.GetArgs())
}

// otherNode renders a node the printer has no form for, generically.
func (p *printer) otherNode(n *pg.Node) {
	// The oneof's message, not the Node wrapper (which generic would
	// hand back here).
	m := n.ProtoReflect()
	if fd := m.WhichOneof(m.Descriptor().Oneofs().Get(0)); fd != nil && fd.Message() != nil {
		p.generic(m.Get(fd).Message())
	} else {
		p.both("?node")
	}
}

func (p *printer) columnRef(c *pg.ColumnRef) {
	var parts []string
	star := false
	for _, f := range c.GetFields() {
		if s := f.GetString_(); s != nil {
			parts = append(parts, strings.ToLower(s.GetSval()))
		} else if f.GetAStar() != nil {
			star = true
		}
	}
	switch {
	case len(parts) == 0:
		p.both("*")
		return
	case len(parts) == 1 && !star:
		p.bareColumn(parts[0], c.GetLocation())
		return
	}
	// qualifier.column (a schema or catalog in front is dropped).
	q := parts[len(parts)-1]
	if !star {
		q = parts[len(parts)-2]
	}
	depth := 0
	if r, d := p.sc.resolveQualifier(q); r != nil {
		q, depth = r.canon, d
	}
	q = strings.Repeat("^", depth) + q
	if star {
		p.both(q + ".*")
		return
	}
	p.column(q + "." + parts[len(parts)-1])
}

// bareColumn renders an unqualified name: a SQLite double-quoted name that
// names no column (nor column alias) in scope is the string literal SQLite
// reads it as; a column alias is replaced by its expression (aliasFor); a
// column is qualified by its relation, with one ^ per scope out for a
// correlated reference.
func (p *printer) bareColumn(col string, loc int32) {
	if name, ok := p.quotedLiteral(col, loc); ok {
		p.lit("'" + strings.ReplaceAll(name, "'", "''") + "'")
		return
	}
	if e := p.aliasFor(col); e != nil {
		p.substitute(e)
		return
	}
	if r, depth := p.sc.resolveColumn(col); r != nil {
		p.column(strings.Repeat("^", depth) + r.canon + "." + col)
		return
	}
	p.column(col)
}

// quotedLiteral reports whether the name at loc was written double-quoted
// and names neither a column in scope nor a column alias, so that SQLite
// reads it as a string literal; it returns the name as written.
func (p *printer) quotedLiteral(col string, loc int32) (string, bool) {
	name, quoted := p.x.dq[int(loc)]
	if !quoted || p.sc.inScope(col) {
		return "", false
	}
	if _, isAlias := p.sc.outAlias[col]; isAlias && !p.noAlias && p.clause != Select {
		return "", false
	}
	return name, true
}

// operandAlias returns the expression a column alias n stands for, or nil
// when n is not one (see aliasFor).
func (p *printer) operandAlias(n *pg.Node) *pg.Node {
	c := n.GetColumnRef()
	if c == nil || len(c.GetFields()) != 1 || c.GetFields()[0].GetString_() == nil {
		return nil
	}
	col := strings.ToLower(c.GetFields()[0].GetString_().GetSval())
	if _, lit := p.quotedLiteral(col, c.GetLocation()); lit {
		return nil
	}
	return p.aliasFor(col)
}

// aliasFor returns the SELECT expression an unqualified name stands for
// when it is a column alias used outside SELECT, or nil: in ORDER BY the
// alias wins over a column of that name, elsewhere (WHERE, GROUP BY,
// HAVING) a column in scope wins, as SQLite resolves them.
func (p *printer) aliasFor(col string) *pg.Node {
	e, isAlias := p.sc.outAlias[col]
	if !isAlias || p.noAlias || p.clause == Select {
		return nil
	}
	if p.clause == OrderBy {
		return e
	}
	if r, _ := p.sc.resolveColumn(col); r != nil {
		return nil
	}
	return e
}

func (p *printer) column(s string) {
	p.both(s)
	p.cols = append(p.cols, s)
}

func (p *printer) aconst(c *pg.A_Const) {
	switch {
	case c.GetIsnull():
		p.lit("NULL")
	case c.GetIval() != nil:
		p.lit(strconv.FormatInt(int64(c.GetIval().GetIval()), 10))
	case c.GetFval() != nil:
		p.lit(c.GetFval().GetFval())
	case c.GetBoolval() != nil:
		if c.GetBoolval().GetBoolval() {
			p.lit("TRUE")
		} else {
			p.lit("FALSE")
		}
	case c.GetSval() != nil:
		p.lit("'" + strings.ReplaceAll(c.GetSval().GetSval(), "'", "''") + "'")
	case c.GetBsval() != nil:
		p.lit(c.GetBsval().GetBsval())
	default:
		p.lit("0") // an A_Const with no value: the integer 0
	}
}

func opName(ns []*pg.Node) string {
	if len(ns) == 0 {
		return ""
	}
	return ns[len(ns)-1].GetString_().GetSval()
}

func names(ns []*pg.Node) string {
	var out []string
	for _, n := range ns {
		if s := n.GetString_(); s != nil {
			out = append(out, s.GetSval())
		}
	}
	return strings.Join(out, ".")
}

func (p *printer) aexpr(e *pg.A_Expr) {
	op := opName(e.GetName())
	binary := func(kw string) {
		p.operand(e.GetLexpr())
		p.both(" " + kw + " ")
		p.operand(e.GetRexpr())
	}
	switch e.GetKind() {
	case pg.A_Expr_Kind_AEXPR_OP:
		if e.GetLexpr() == nil {
			p.both(op)
			p.operand(e.GetRexpr())
			return
		}
		if e.GetRexpr() == nil {
			p.operand(e.GetLexpr())
			p.both(" " + op)
			return
		}
		if _, ok := flipped[op]; ok {
			p.comparison(e.GetLexpr(), op, e.GetRexpr())
			return
		}
		if kw, ok := sqliteOps[op]; ok {
			op = kw // REGEXP, MATCH as the dialect rewrite spelled them
		}
		binary(op)
	case pg.A_Expr_Kind_AEXPR_OP_ANY, pg.A_Expr_Kind_AEXPR_OP_ALL:
		p.operand(e.GetLexpr())
		kw := " ANY("
		if e.GetKind() == pg.A_Expr_Kind_AEXPR_OP_ALL {
			kw = " ALL("
		}
		p.both(" " + op + kw)
		p.node(e.GetRexpr())
		p.both(")")
	case pg.A_Expr_Kind_AEXPR_DISTINCT:
		p.comparison(e.GetLexpr(), "IS DISTINCT FROM", e.GetRexpr())
	case pg.A_Expr_Kind_AEXPR_NOT_DISTINCT:
		p.comparison(e.GetLexpr(), "IS NOT DISTINCT FROM", e.GetRexpr())
	case pg.A_Expr_Kind_AEXPR_NULLIF:
		p.both("nullif(")
		p.node(e.GetLexpr())
		p.both(", ")
		p.node(e.GetRexpr())
		p.both(")")
	case pg.A_Expr_Kind_AEXPR_IN:
		kw := "IN"
		if op == "<>" {
			kw = "NOT IN"
		}
		binary(kw)
	case pg.A_Expr_Kind_AEXPR_LIKE, pg.A_Expr_Kind_AEXPR_ILIKE, pg.A_Expr_Kind_AEXPR_SIMILAR:
		// SQLite has neither ILIKE nor SIMILAR TO: the dialect rewrite
		// spells REGEXP and GLOB with them (toPostgres).
		kw := map[string]string{"~~": "LIKE", "!~~": "NOT LIKE", "~~*": "REGEXP", "!~~*": "NOT REGEXP", "~": "GLOB", "!~": "NOT GLOB"}[op]
		if kw == "" {
			kw = op
		}
		rx := e.GetRexpr()
		if f := rx.GetFuncCall(); e.GetKind() == pg.A_Expr_Kind_AEXPR_SIMILAR && f != nil && funcName(f.GetFuncname()) == "similar_to_escape" && len(f.GetArgs()) == 1 {
			rx = f.GetArgs()[0] // the parser's wrapper around the pattern
		}
		p.operand(e.GetLexpr())
		p.both(" " + kw + " ")
		p.operand(rx)
	case pg.A_Expr_Kind_AEXPR_BETWEEN, pg.A_Expr_Kind_AEXPR_NOT_BETWEEN, pg.A_Expr_Kind_AEXPR_BETWEEN_SYM, pg.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM:
		kw := map[pg.A_Expr_Kind]string{
			pg.A_Expr_Kind_AEXPR_BETWEEN: "BETWEEN", pg.A_Expr_Kind_AEXPR_NOT_BETWEEN: "NOT BETWEEN",
			pg.A_Expr_Kind_AEXPR_BETWEEN_SYM: "BETWEEN SYMMETRIC", pg.A_Expr_Kind_AEXPR_NOT_BETWEEN_SYM: "NOT BETWEEN SYMMETRIC",
		}[e.GetKind()]
		p.operand(e.GetLexpr())
		p.both(" " + kw + " ")
		if l := e.GetRexpr().GetList(); l != nil && len(l.GetItems()) == 2 {
			p.operand(l.GetItems()[0])
			p.both(" AND ")
			p.operand(l.GetItems()[1])
		} else {
			p.node(e.GetRexpr())
		}
	default:
		p.generic(e.ProtoReflect())
	}
}

// sqliteOps are the PostgreSQL operators the dialect rewrite spells
// SQLite's MATCH with, rendered back.
var sqliteOps = map[string]string{"@@": "MATCH", "!@@": "NOT MATCH"}

func funcName(ns []*pg.Node) string {
	var parts []string
	for _, n := range ns {
		if s := n.GetString_(); s != nil && s.GetSval() != "pg_catalog" {
			parts = append(parts, strings.ToLower(s.GetSval()))
		}
	}
	return strings.Join(parts, ".")
}

func (p *printer) funcCall(f *pg.FuncCall) {
	p.both(funcName(f.GetFuncname()) + "(")
	switch {
	case f.GetAggStar():
		p.both("*")
	default:
		if f.GetAggDistinct() {
			p.both("DISTINCT ")
		}
		p.list(f.GetArgs())
	}
	if o := f.GetAggOrder(); len(o) > 0 && !f.GetAggWithinGroup() {
		p.both(" ORDER BY ")
		p.sortList(o)
	}
	p.both(")")
	if o := f.GetAggOrder(); len(o) > 0 && f.GetAggWithinGroup() {
		p.both(" WITHIN GROUP (ORDER BY ")
		p.sortList(o)
		p.both(")")
	}
	if fl := f.GetAggFilter(); fl != nil {
		p.both(" FILTER (WHERE ")
		p.node(fl)
		p.both(")")
	}
	if w := f.GetOver(); w != nil {
		p.window(w)
	}
}

// window renders an OVER clause in full: a named window (WINDOW w AS ...)
// is replaced by its definition, and the frame is kept, so that changing
// a window's partition, order or frame changes its unit.
func (p *printer) window(w *pg.WindowDef) {
	part, order := w.GetPartitionClause(), w.GetOrderClause()
	opts, start, end := w.GetFrameOptions(), w.GetStartOffset(), w.GetEndOffset()
	ref := w.GetRefname()
	if ref == "" && len(part) == 0 && len(order) == 0 && opts&frameNonDefault == 0 {
		ref = w.GetName() // OVER w
	}
	unresolved := ""
	if ref != "" {
		base := p.lookupWindow(strings.ToLower(ref))
		if base == nil {
			unresolved = strings.ToLower(ref)
		} else {
			if len(part) == 0 {
				part = base.GetPartitionClause()
			}
			if len(order) == 0 {
				order = base.GetOrderClause()
			}
			if opts&frameNonDefault == 0 {
				opts, start, end = base.GetFrameOptions(), base.GetStartOffset(), base.GetEndOffset()
			}
		}
	}
	p.both(" OVER (")
	sep := ""
	if unresolved != "" {
		p.both(unresolved)
		sep = " "
	}
	if len(part) > 0 {
		p.both(sep + "PARTITION BY ")
		p.list(part)
		sep = " "
	}
	if len(order) > 0 {
		p.both(sep + "ORDER BY ")
		p.sortList(order)
		sep = " "
	}
	p.frame(sep, opts, start, end)
	p.both(")")
}

func (p *printer) lookupWindow(name string) *pg.WindowDef {
	for s := p.sc; s != nil; s = s.parent {
		if w, ok := s.windows[name]; ok {
			return w
		}
	}
	return nil
}

// PostgreSQL's FRAMEOPTION_* bits (nodes/parsenodes.h).
const (
	frameNonDefault         = 0x00001
	frameRange              = 0x00002
	frameRows               = 0x00004
	frameGroups             = 0x00008
	frameStartUnbPreceding  = 0x00020
	frameEndUnbPreceding    = 0x00040
	frameStartUnbFollowing  = 0x00080
	frameEndUnbFollowing    = 0x00100
	frameStartCurrentRow    = 0x00200
	frameEndCurrentRow      = 0x00400
	frameStartOffPreceding  = 0x00800
	frameEndOffPreceding    = 0x01000
	frameStartOffFollowing  = 0x02000
	frameEndOffFollowing    = 0x04000
	frameExcludeCurrentRow  = 0x08000
	frameExcludeGroup       = 0x10000
	frameExcludeTies        = 0x20000
	frameDefaultEquivalents = frameRange | frameStartUnbPreceding | frameEndCurrentRow
)

// frame renders a window frame as MODE BETWEEN start AND end [EXCLUDE
// ...]; none for the default frame, written or not (RANGE BETWEEN
// UNBOUNDED PRECEDING AND CURRENT ROW), so that spelling the default out
// is no drift.
func (p *printer) frame(sep string, opts int32, start, end *pg.Node) {
	if opts&frameNonDefault == 0 {
		return
	}
	excl := opts & (frameExcludeCurrentRow | frameExcludeGroup | frameExcludeTies)
	bounds := opts &^ (frameNonDefault | 0x10 | excl) // 0x10: BETWEEN written
	if bounds == frameDefaultEquivalents && excl == 0 {
		return
	}
	mode := "RANGE"
	switch {
	case opts&frameRows != 0:
		mode = "ROWS"
	case opts&frameGroups != 0:
		mode = "GROUPS"
	}
	p.both(sep + mode + " BETWEEN ")
	p.bound(opts, frameStartUnbPreceding, frameStartUnbFollowing, frameStartCurrentRow, frameStartOffPreceding, frameStartOffFollowing, start)
	p.both(" AND ")
	p.bound(opts, frameEndUnbPreceding, frameEndUnbFollowing, frameEndCurrentRow, frameEndOffPreceding, frameEndOffFollowing, end)
	switch {
	case excl&frameExcludeCurrentRow != 0:
		p.both(" EXCLUDE CURRENT ROW")
	case excl&frameExcludeGroup != 0:
		p.both(" EXCLUDE GROUP")
	case excl&frameExcludeTies != 0:
		p.both(" EXCLUDE TIES")
	}
}

func (p *printer) bound(opts, unbPre, unbFol, cur, offPre, offFol int32, off *pg.Node) {
	switch {
	case opts&unbPre != 0:
		p.both("UNBOUNDED PRECEDING")
	case opts&unbFol != 0:
		p.both("UNBOUNDED FOLLOWING")
	case opts&cur != 0:
		p.both("CURRENT ROW")
	case opts&offPre != 0:
		p.operand(off)
		p.both(" PRECEDING")
	case opts&offFol != 0:
		p.operand(off)
		p.both(" FOLLOWING")
	default:
		p.both("CURRENT ROW")
	}
}

func (p *printer) sortList(ns []*pg.Node) {
	for i, n := range ns {
		if i > 0 {
			p.both(", ")
		}
		sb := n.GetSortBy()
		if sb == nil {
			p.node(n)
			continue
		}
		p.node(sb.GetNode())
		if sb.GetSortbyDir() == pg.SortByDir_SORTBY_DESC {
			p.both(" DESC")
		} else {
			p.both(" ASC")
		}
	}
}

func (p *printer) subLink(s *pg.SubLink) {
	sel := s.GetSubselect().GetSelectStmt()
	if sel != nil {
		p.subs = append(p.subs, sel)
	}
	switch s.GetSubLinkType() {
	case pg.SubLinkType_EXISTS_SUBLINK:
		p.both("EXISTS (subquery)")
	case pg.SubLinkType_ANY_SUBLINK:
		p.operand(s.GetTestexpr())
		if op := opName(s.GetOperName()); op == "" || op == "=" {
			p.both(" IN (subquery)")
		} else {
			p.both(" " + op + " ANY (subquery)")
		}
	case pg.SubLinkType_ALL_SUBLINK:
		p.operand(s.GetTestexpr())
		p.both(" " + opName(s.GetOperName()) + " ALL (subquery)")
	case pg.SubLinkType_ARRAY_SUBLINK:
		p.both("ARRAY(subquery)")
	case pg.SubLinkType_ROWCOMPARE_SUBLINK:
		p.operand(s.GetTestexpr())
		p.both(" " + opName(s.GetOperName()) + " (subquery)")
	default:
		p.both("(subquery)")
	}
}

// sqliteTypes maps PostgreSQL's internal names of the type keywords SQLite
// queries use back to those keywords.
var sqliteTypes = map[string]string{
	"float4": "REAL", "float8": "DOUBLE PRECISION", "int4": "INTEGER", "int2": "SMALLINT", "int8": "BIGINT",
	"numeric": "NUMERIC", "bool": "BOOLEAN", "varchar": "VARCHAR", "bpchar": "CHAR", "text": "TEXT",
	"date": "DATE", "timestamp": "TIMESTAMP", "time": "TIME", "interval": "INTERVAL",
}

func typeName(t *pg.TypeName) string {
	var parts []string
	for _, n := range t.GetNames() {
		if s := n.GetString_(); s != nil && s.GetSval() != "pg_catalog" {
			parts = append(parts, strings.ToLower(s.GetSval()))
		}
	}
	name := strings.Join(parts, ".")
	if m, ok := sqliteTypes[name]; ok {
		name = m
	} else {
		name = strings.ToUpper(name)
	}
	if mods := t.GetTypmods(); len(mods) > 0 {
		var ms []string
		for _, m := range mods {
			if c := m.GetAConst(); c != nil && c.GetIval() != nil {
				ms = append(ms, strconv.Itoa(int(c.GetIval().GetIval())))
			} else {
				ms = append(ms, "?")
			}
		}
		name += "(" + strings.Join(ms, ", ") + ")"
	}
	for range t.GetArrayBounds() {
		name += "[]"
	}
	return name
}

// generic renders a node this printer has no rule for: its message name
// and fields (by field number, positions left out), rendering nested
// expression nodes with the printer so that their literals and
// subqueries are seen.
func (p *printer) generic(m protoreflect.Message) {
	if n, ok := m.Interface().(*pg.Node); ok {
		p.node(n)
		return
	}
	p.both(string(m.Descriptor().Name()) + "{")
	fields := m.Descriptor().Fields()
	var set []protoreflect.FieldDescriptor
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.Name() == "location" || !m.Has(fd) {
			continue
		}
		set = append(set, fd)
	}
	sort.Slice(set, func(i, j int) bool { return set[i].Number() < set[j].Number() })
	for i, fd := range set {
		if i > 0 {
			p.both(" ")
		}
		p.both(string(fd.Name()) + ":")
		v := m.Get(fd)
		switch {
		case fd.IsList():
			l := v.List()
			p.both("[")
			for k := 0; k < l.Len(); k++ {
				if k > 0 {
					p.both(", ")
				}
				p.value(fd, l.Get(k))
			}
			p.both("]")
		case fd.IsMap():
			p.both("map")
		default:
			p.value(fd, v)
		}
	}
	p.both("}")
}

func (p *printer) value(fd protoreflect.FieldDescriptor, v protoreflect.Value) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		p.generic(v.Message())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			p.both(string(ev.Name()))
		} else {
			p.both(strconv.Itoa(int(v.Enum())))
		}
	case protoreflect.StringKind:
		p.both(strconv.Quote(v.String()))
	default:
		p.both(v.String())
	}
}

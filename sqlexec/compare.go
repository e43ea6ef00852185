package sqlexec

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Comparison semantics (PROTOCOL §4):
//
//   - NULL equals only NULL; text equals text exactly; blobs compare by bytes; text is
//     never equal to a number or a blob ('10' is not 10).
//   - Numbers compare as numbers (3 equals 3.0). Two integers are equal only when they are
//     the same integer (deviation, stricter than the protocol's tolerance: with the relative
//     tolerance 1000001 would equal 1000002, which would accept a wrong id). When a real is
//     involved they are equal when |a-b| <= 1e-9 + 1e-6*max(|a|,|b|). NaN equals NaN.
//   - With Decimals k >= 0 every real is first rounded half-up (away from zero) to k
//     places, on its shortest decimal representation (so 2.675 rounds to 2.68).
//
// Bag comparison sorts both sides under a canonical total order (NULL < numbers < text <
// blobs; numbers by value, text and blobs by bytes) and compares row i with row i under
// the tolerant equality. Tolerance can break that pairing: rows (1.0,'b') and
// (1.0000001,'a') sort by their first cell, and a side holding (1.0000001,'b') and
// (1.0,'a') pairs them crosswise although each row has a tolerant partner. So when the
// fast pass fails, a slow pass groups rows by their non-numeric cells (exactly) and, in
// each group, pairs rows in order of their numeric cells; if that fails too and the group
// has at most 256 rows, a maximum bipartite matching under the tolerant equality decides.
// Sorted pairing is exact for one numeric column; a group larger than 256 rows with several
// numeric columns can still miss a matching whose pairs cross within 1e-6 relative, which
// needs near-equal values ordered differently in two columns; we accept that. The fast
// pass is O(n log n) and so is the slow pass outside small groups.

// cell is a normalised cell.
type cell struct {
	kind cellKind
	i    int64   // ckInt
	f    float64 // ckReal
	s    string  // ckText, ckBlob
}

type cellKind uint8

const (
	ckNull cellKind = iota
	ckInt
	ckReal
	ckText
	ckBlob
)

func (c cell) isNum() bool { return c.kind == ckInt || c.kind == ckReal }

func (c cell) num() float64 {
	if c.kind == ckInt {
		return float64(c.i)
	}
	return c.f
}

func (c cell) String() string {
	switch c.kind {
	case ckNull:
		return "NULL"
	case ckInt:
		return strconv.FormatInt(c.i, 10)
	case ckReal:
		return strconv.FormatFloat(c.f, 'g', -1, 64)
	case ckText:
		s := c.s
		if len(s) > 60 {
			s = s[:57] + "..."
		}
		return "'" + strings.ReplaceAll(s, "'", "''") + "'"
	default:
		b := []byte(c.s)
		if len(b) > 24 {
			return fmt.Sprintf("X'%X...'", b[:24])
		}
		return fmt.Sprintf("X'%X'", b)
	}
}

// normCell converts a result cell; decimals >= 0 rounds reals.
func normCell(v any, decimals int) cell {
	switch x := v.(type) {
	case nil:
		return cell{kind: ckNull}
	case int64:
		return cell{kind: ckInt, i: x}
	case int:
		return cell{kind: ckInt, i: int64(x)}
	case int32:
		return cell{kind: ckInt, i: int64(x)}
	case int16:
		return cell{kind: ckInt, i: int64(x)}
	case int8:
		return cell{kind: ckInt, i: int64(x)}
	case uint32:
		return cell{kind: ckInt, i: int64(x)}
	case uint16:
		return cell{kind: ckInt, i: int64(x)}
	case uint8:
		return cell{kind: ckInt, i: int64(x)}
	case uint64:
		if x <= math.MaxInt64 {
			return cell{kind: ckInt, i: int64(x)}
		}
		return realCell(float64(x), decimals)
	case uint:
		return normCell(uint64(x), decimals)
	case bool:
		if x {
			return cell{kind: ckInt, i: 1}
		}
		return cell{kind: ckInt}
	case float64:
		return realCell(x, decimals)
	case float32:
		return realCell(float64(x), decimals)
	case string:
		return cell{kind: ckText, s: x}
	case []byte:
		return cell{kind: ckBlob, s: string(x)}
	case time.Time:
		return cell{kind: ckText, s: x.Format("2006-01-02T15:04:05.999999999Z07:00")}
	case fmt.Stringer:
		return cell{kind: ckText, s: x.String()}
	default:
		return cell{kind: ckText, s: fmt.Sprint(x)}
	}
}

func realCell(f float64, decimals int) cell {
	if decimals >= 0 {
		f = RoundHalfUp(f, decimals)
	}
	return cell{kind: ckReal, f: f}
}

// RoundHalfUp rounds f to k >= 0 decimal places, halves away from zero, working on f's
// shortest decimal representation (so RoundHalfUp(2.675, 2) is 2.68 although the binary
// value of 2.675 is slightly below it). NaN and infinities are returned unchanged.
func RoundHalfUp(f float64, k int) float64 {
	if k < 0 || math.IsNaN(f) || math.IsInf(f, 0) || f == 0 {
		return f
	}
	neg := f < 0
	s := strconv.FormatFloat(math.Abs(f), 'f', -1, 64)
	dot := strings.IndexByte(s, '.')
	if dot < 0 || len(s)-dot-1 <= k {
		return f
	}
	up := s[dot+1+k] >= '5'
	digits := []byte(s[:dot] + s[dot+1:dot+1+k]) // integer part and k fraction digits
	if up {
		j := len(digits) - 1
		for ; j >= 0; j-- {
			if digits[j] == '9' {
				digits[j] = '0'
				continue
			}
			digits[j]++
			break
		}
		if j < 0 {
			digits = append([]byte{'1'}, digits...)
		}
	}
	intLen := len(digits) - k
	out := string(digits[:intLen])
	if k > 0 {
		out += "." + string(digits[intLen:])
	}
	r, err := strconv.ParseFloat(out, 64)
	if err != nil {
		return f
	}
	if neg {
		r = -r
	}
	return r
}

// numEqual is the tolerant numeric equality.
func numEqual(a, b cell) bool {
	if a.kind == ckInt && b.kind == ckInt {
		return a.i == b.i
	}
	x, y := a.num(), b.num()
	if x == y {
		return true
	}
	if math.IsNaN(x) || math.IsNaN(y) {
		return math.IsNaN(x) && math.IsNaN(y)
	}
	return math.Abs(x-y) <= 1e-9+1e-6*math.Max(math.Abs(x), math.Abs(y))
}

func cellEqual(a, b cell) bool {
	if a.isNum() && b.isNum() {
		return numEqual(a, b)
	}
	if a.kind != b.kind {
		return false
	}
	return a.kind == ckNull || a.s == b.s
}

func rank(c cell) int {
	switch c.kind {
	case ckNull:
		return 0
	case ckInt, ckReal:
		return 1
	case ckText:
		return 2
	default:
		return 3
	}
}

// cellCmp is the canonical total order (exact, no tolerance).
func cellCmp(a, b cell) int {
	if r := cmp.Compare(rank(a), rank(b)); r != 0 {
		return r
	}
	switch a.kind {
	case ckNull:
		return 0
	case ckInt, ckReal:
		if a.kind == ckInt && b.kind == ckInt {
			return cmp.Compare(a.i, b.i)
		}
		return cmp.Compare(a.num(), b.num()) // NaN sorts first
	default:
		return strings.Compare(a.s, b.s)
	}
}

func rowCmp(a, b []cell) int {
	for i := range min(len(a), len(b)) {
		if r := cellCmp(a[i], b[i]); r != 0 {
			return r
		}
	}
	return cmp.Compare(len(a), len(b))
}

func rowEqual(a, b []cell) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !cellEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

func normRows(r *Result, decimals int) [][]cell {
	if r == nil {
		return nil
	}
	out := make([][]cell, len(r.Rows))
	for i, row := range r.Rows {
		cs := make([]cell, len(row))
		for j, v := range row {
			cs[j] = normCell(v, decimals)
		}
		out[i] = cs
	}
	return out
}

func numCols(r *Result) int {
	if r == nil {
		return 0
	}
	if len(r.Columns) > 0 || len(r.Rows) == 0 {
		return len(r.Columns)
	}
	return len(r.Rows[0])
}

func fmtRow(r []cell) string {
	parts := make([]string, len(r))
	for i, c := range r {
		parts[i] = c.String()
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// Compare compares a predicted result with the reference result under p (whose Order
// must already be resolved; OrderAuto is treated as OrderBag). It returns whether they
// agree and, when they do not, a reason such as "column count 2 != 3", "row count 4 != 5",
// "row 4 differs: ...", "empty result".
func Compare(p Policy, pred, ref *Result) (ok bool, reason string) {
	np, nr := 0, 0
	if pred != nil {
		np = len(pred.Rows)
	}
	if ref != nil {
		nr = len(ref.Rows)
	}
	if p.EmptyFails && (np == 0 || nr == 0) {
		switch {
		case np == 0 && nr == 0:
			return false, "empty result (both the prediction and the reference returned no rows)"
		case np == 0:
			return false, "empty result (the prediction returned no rows)"
		default:
			return false, "empty result (the reference returned no rows)"
		}
	}
	if cp, cr := numCols(pred), numCols(ref); cp != cr {
		return false, fmt.Sprintf("column count %d != %d (prediction vs reference)", cp, cr)
	}
	a, b := normRows(pred, p.Decimals), normRows(ref, p.Decimals)
	switch p.Order {
	case OrderOrdered:
		if len(a) != len(b) {
			return false, fmt.Sprintf("row count %d != %d (prediction vs reference)", len(a), len(b))
		}
		for i := range a {
			if !rowEqual(a[i], b[i]) {
				return false, fmt.Sprintf("row %d differs: prediction %s, reference %s", i+1, fmtRow(a[i]), fmtRow(b[i]))
			}
		}
		return true, ""
	case OrderSet:
		a, b = dedupe(a), dedupe(b)
		if len(a) != len(b) {
			return false, fmt.Sprintf("distinct row count %d != %d (prediction vs reference)", len(a), len(b))
		}
		return bagEqual(a, b, true)
	default:
		if len(a) != len(b) {
			return false, fmt.Sprintf("row count %d != %d (prediction vs reference)", len(a), len(b))
		}
		return bagEqual(a, b, false)
	}
}

// dedupe sorts rows and removes rows equal (with tolerance) to their predecessor.
func dedupe(rows [][]cell) [][]cell {
	slices.SortFunc(rows, rowCmp)
	out := rows[:0]
	for _, r := range rows {
		if len(out) > 0 && rowEqual(out[len(out)-1], r) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// bagEqual compares two equally long row lists as multisets.
func bagEqual(a, b [][]cell, sorted bool) (bool, string) {
	if !sorted {
		slices.SortFunc(a, rowCmp)
		slices.SortFunc(b, rowCmp)
	}
	mismatch := -1
	for i := range a {
		if !rowEqual(a[i], b[i]) {
			mismatch = i
			break
		}
	}
	if mismatch < 0 {
		return true, ""
	}
	if groupedEqual(a, b) {
		return true, ""
	}
	return false, fmt.Sprintf("rows differ as a multiset: prediction has %s where the reference has %s (in canonical order, row %d)",
		fmtRow(a[mismatch]), fmtRow(b[mismatch]), mismatch+1)
}

// groupKey is a row's non-numeric cells, exactly; numeric cells are a marker.
func groupKey(r []cell) string {
	var sb strings.Builder
	for _, c := range r {
		switch c.kind {
		case ckInt, ckReal:
			sb.WriteString("#|")
		case ckNull:
			sb.WriteString("N|")
		default:
			if c.kind == ckText {
				sb.WriteString("T")
			} else {
				sb.WriteString("B")
			}
			sb.WriteString(strconv.Itoa(len(c.s)))
			sb.WriteByte(':')
			sb.WriteString(c.s)
		}
	}
	return sb.String()
}

// maxMatchGroup bounds the group size for which the slow pass searches a full bipartite
// matching (quadratic comparisons, cubic worst case).
const maxMatchGroup = 256

// groupedEqual is the slow pass of the bag comparison (see the comment at the top of
// this file): rows are grouped by their non-numeric cells; within a group, rows (still
// in canonical order, which within a group is the lexicographic order of their numeric
// cells) are paired in order, and when that fails and the group is small, a maximum
// bipartite matching under the tolerant equality decides.
func groupedEqual(a, b [][]cell) bool {
	ga := map[string][][]cell{}
	for _, r := range a {
		k := groupKey(r)
		ga[k] = append(ga[k], r)
	}
	gb := map[string][][]cell{}
	for _, r := range b {
		k := groupKey(r)
		gb[k] = append(gb[k], r)
	}
	if len(ga) != len(gb) {
		return false
	}
	for k, ra := range ga {
		rb := gb[k]
		if len(ra) != len(rb) {
			return false
		}
		paired := true
		for i := range ra {
			if !rowEqual(ra[i], rb[i]) {
				paired = false
				break
			}
		}
		if !paired && (len(ra) > maxMatchGroup || !perfectMatching(ra, rb)) {
			return false
		}
	}
	return true
}

// perfectMatching reports whether every row of a can be paired with a distinct equal
// row of b (Kuhn's augmenting paths).
func perfectMatching(a, b [][]cell) bool {
	n := len(a)
	adj := make([][]int, n)
	for i := range a {
		for j := range b {
			if rowEqual(a[i], b[j]) {
				adj[i] = append(adj[i], j)
			}
		}
		if len(adj[i]) == 0 {
			return false
		}
	}
	matchB := make([]int, n)
	for j := range matchB {
		matchB[j] = -1
	}
	var seen []bool
	var try func(i int) bool
	try = func(i int) bool {
		for _, j := range adj[i] {
			if seen[j] {
				continue
			}
			seen[j] = true
			if matchB[j] < 0 || try(matchB[j]) {
				matchB[j] = i
				return true
			}
		}
		return false
	}
	for i := range n {
		seen = make([]bool, n)
		if !try(i) {
			return false
		}
	}
	return true
}

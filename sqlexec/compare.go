package sqlexec

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
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
//   - With DateOnly, date and timestamp text ("2024-03-01 14:05:00+01") becomes its date
//     ("2024-03-01"); with CanonicalJSON, JSON object and array text becomes its
//     canonical encoding (sorted keys, no whitespace, numbers shortest and rounded as
//     reals are). Both happen before any comparison, so they are text like any other.
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

// norm is the cell normalisation a policy asks for.
type norm struct {
	decimals      int  // >= 0: round reals (and JSON non-integers) to this many places
	dateOnly      bool // date and timestamp text compares as its date
	canonicalJSON bool // JSON object and array text compares as canonical JSON
}

func (p Policy) norm() norm {
	return norm{decimals: p.Decimals, dateOnly: p.DateOnly, canonicalJSON: p.CanonicalJSON}
}

// normCell converts a result cell under n.
func normCell(v any, n norm) cell {
	decimals := n.decimals
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
		return normCell(uint64(x), n)
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
		return textCell(x, n)
	case []byte:
		return cell{kind: ckBlob, s: string(x)}
	case time.Time:
		if n.dateOnly {
			return cell{kind: ckText, s: x.Format("2006-01-02")}
		}
		return cell{kind: ckText, s: x.Format("2006-01-02T15:04:05.999999999Z07:00")}
	case fmt.Stringer:
		return textCell(x.String(), n)
	default:
		return textCell(fmt.Sprint(x), n)
	}
}

// textCell is a text cell under n's DateOnly and CanonicalJSON.
func textCell(s string, n norm) cell {
	if n.dateOnly {
		if d, ok := DateOf(s); ok {
			return cell{kind: ckText, s: d}
		}
	}
	if n.canonicalJSON {
		if j, ok := CanonicalJSON(s, n.decimals); ok {
			return cell{kind: ckText, s: j}
		}
	}
	return cell{kind: ckText, s: s}
}

// DateOf returns the date of a date or timestamp text: s must be YYYY-MM-DD (month
// 01-12, day 01-31), optionally followed by ' ' or 'T', a time HH:MM[:SS[.digits]] and
// a UTC offset (Z, ±HH, ±HH:MM, ±HHMM, ±HH:MM:SS), as PostgreSQL writes date, timestamp
// and timestamptz values; ok is false for any other text (such as a time alone, an
// interval, or a date followed by other words).
func DateOf(s string) (date string, ok bool) {
	if len(s) < 10 || !isDate(s[:10]) {
		return "", false
	}
	rest := s[10:]
	if rest == "" {
		return s, true
	}
	if rest[0] != ' ' && rest[0] != 'T' {
		return "", false
	}
	if rest, ok = skipClock(rest[1:]); !ok || !isUTCOffset(rest) {
		return "", false
	}
	return s[:10], true
}

// skipClock skips a time of day at the start of s, HH:MM[:SS[.digits]],
// and returns what follows it; ok is false when s does not start with one.
func skipClock(s string) (rest string, ok bool) {
	if len(s) < 5 || !digits(s[:2]) || s[2] != ':' || !digits(s[3:5]) {
		return "", false
	}
	s = s[5:]
	if len(s) >= 3 && s[0] == ':' && digits(s[1:3]) {
		s = s[3:]
		if len(s) >= 2 && s[0] == '.' && digits(s[1:2]) {
			i := 2
			for i < len(s) && digits(s[i:i+1]) {
				i++
			}
			s = s[i:]
		}
	}
	return s, true
}

// isUTCOffset reports whether s is nothing, Z, or a UTC offset ±HH, ±HH:MM,
// ±HHMM or ±HH:MM:SS.
func isUTCOffset(s string) bool {
	switch {
	case s == "" || s == "Z":
		return true
	case s[0] != '+' && s[0] != '-':
		return false
	}
	s = s[1:]
	if len(s) < 2 || !digits(s[:2]) {
		return false
	}
	s = s[2:]
	for k := 0; k < 2 && s != ""; k++ { // minutes, then seconds
		if s[0] == ':' {
			s = s[1:]
		}
		if len(s) < 2 || !digits(s[:2]) {
			return false
		}
		s = s[2:]
	}
	return s == ""
}

func isDate(s string) bool {
	if !digits(s[0:4]) || s[4] != '-' || !digits(s[5:7]) || s[7] != '-' || !digits(s[8:10]) {
		return false
	}
	m := (s[5]-'0')*10 + s[6] - '0'
	d := (s[8]-'0')*10 + s[9] - '0'
	return m >= 1 && m <= 12 && d >= 1 && d <= 31
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// CanonicalJSON returns the canonical encoding of s when s (less surrounding JSON
// whitespace) is one valid UTF-8 JSON object or array: object keys sorted, no
// insignificant whitespace, no HTML escaping, integer literals kept as written and
// every other number parsed as a float64, rounded with RoundHalfUp when decimals >= 0,
// and written in its shortest form (so 1.50, 1.5 and 15e-1 are all 1.5, and 1.0 is 1).
// ok is false for any other text, which then compares as it is.
func CanonicalJSON(s string, decimals int) (canonical string, ok bool) {
	t := strings.Trim(s, " \t\n\r")
	if t == "" || (t[0] != '{' && t[0] != '[') || !utf8.ValidString(t) {
		return "", false
	}
	dec := json.NewDecoder(strings.NewReader(t))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", false
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", false // more than one value
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(canonNumbers(v, decimals)); err != nil {
		return "", false
	}
	return strings.TrimSuffix(b.String(), "\n"), true
}

// canonNumbers rewrites the numbers of a decoded JSON value (see CanonicalJSON).
func canonNumbers(v any, decimals int) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = canonNumbers(e, decimals)
		}
	case []any:
		for i, e := range x {
			x[i] = canonNumbers(e, decimals)
		}
	case json.Number:
		s := string(x)
		if !strings.ContainsAny(s, ".eE") {
			if s == "-0" {
				return json.Number("0")
			}
			return x
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil { // out of float64's range: keep it as written
			return x
		}
		if decimals >= 0 {
			f = RoundHalfUp(f, decimals)
		}
		if f == 0 {
			f = 0 // no negative zero
		}
		return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
	}
	return v
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

func normRows(r *Result, n norm) [][]cell {
	if r == nil {
		return nil
	}
	out := make([][]cell, len(r.Rows))
	for i, row := range r.Rows {
		cs := make([]cell, len(row))
		for j, v := range row {
			cs[j] = normCell(v, n)
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
	return compareWith(p, pred, ref, nil)
}

// compareWith is Compare with the reference side prepared (nil: prepare it
// here, when the comparison gets that far).
func compareWith(p Policy, pred, ref *Result, pr *refRows) (ok bool, reason string) {
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
	if pr == nil {
		pr = prepareRef(p, ref)
	}
	return compareRows(p, normRows(pred, p.norm()), pr.rows)
}

// refRows is the reference side of a comparison under one policy: its rows
// normalised and, unless the order matters, sorted (for OrderSet also
// deduplicated). It is never changed once made, so that a verifier can
// keep it beside the reference's cached result (Check does).
type refRows struct{ rows [][]cell }

// prepareRef makes the reference side of Compare(p, …, ref).
func prepareRef(p Policy, ref *Result) *refRows {
	b := normRows(ref, p.norm())
	switch p.Order {
	case OrderOrdered:
	case OrderSet:
		b = dedupe(b)
	default:
		slices.SortFunc(b, rowCmp)
	}
	return &refRows{rows: b}
}

// compareRows compares the normalised prediction a with the prepared
// reference rows b (see refRows); a may be reordered.
func compareRows(p Policy, a, b [][]cell) (ok bool, reason string) {
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
		a = dedupe(a)
		if len(a) != len(b) {
			return false, fmt.Sprintf("distinct row count %d != %d (prediction vs reference)", len(a), len(b))
		}
		return bagEqual(a, b)
	default:
		if len(a) != len(b) {
			return false, fmt.Sprintf("row count %d != %d (prediction vs reference)", len(a), len(b))
		}
		slices.SortFunc(a, rowCmp)
		return bagEqual(a, b)
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

// bagEqual compares two equally long, sorted row lists as multisets.
func bagEqual(a, b [][]cell) (bool, string) {
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

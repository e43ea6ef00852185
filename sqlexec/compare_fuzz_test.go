package sqlexec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// fuzzBytes reads the fuzzer's bytes as a stream of choices; past the end
// every choice is 0.
type fuzzBytes struct{ b []byte }

func (r *fuzzBytes) next() byte {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *fuzzBytes) u64() uint64 {
	var x uint64
	for range 8 {
		x = x<<8 | uint64(r.next())
	}
	return x
}

func pick[T any](r *fuzzBytes, xs []T) T { return xs[int(r.next())%len(xs)] }

// Values around the comparator's edges: tolerance bounds, integers that a
// float64 cannot hold, signed zeros, NaN and infinities, half-way decimals,
// text that looks like numbers.
var (
	fuzzInts   = []int64{0, 1, -1, 2, 3, 10, 1000001, 1000002, 1 << 53, 1<<53 + 1, math.MaxInt64, math.MinInt64}
	fuzzFloats = []float64{0, math.Copysign(0, -1), 0.5, 1, 1.0000001, 1.0000005, 1.000001, 1.0000015, 3, 3.0000000001,
		2.675, 2.68, 2.665, -2.675, 1.005, 9.995, 1e-9, 2e-9, 1000.0009, 1000.0011, 1 << 53, 1e21, 1e300, -1e300,
		math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1), math.NaN()}
	fuzzTexts = []string{"", "a", "b", "A", "10", "3.0", "a ", "NULL", "\x00", "\xff", "é", "'",
		"2024-03-01", "2024-03-01 10:00:00", `{"a": 1.004}`, `{"a":1}`}
)

func (r *fuzzBytes) cell() any {
	switch r.next() % 13 {
	case 0:
		return nil
	case 1, 2:
		return pick(r, fuzzInts)
	case 3:
		return int64(r.u64())
	case 4, 5:
		return pick(r, fuzzFloats)
	case 6:
		return math.Float64frombits(r.u64())
	case 7:
		return pick(r, fuzzTexts)
	case 8:
		n := int(r.next() % 6)
		b := make([]byte, n)
		for i := range b {
			b[i] = r.next()
		}
		return string(b)
	case 9:
		return []byte(pick(r, fuzzTexts))
	case 10:
		return r.next()%2 == 1
	case 11:
		return uint64(r.u64())
	default:
		return float32(pick(r, fuzzFloats))
	}
}

// result reads a rectangular result of at most 3 columns and 9 rows.
func (r *fuzzBytes) result() *Result {
	cols, rows := int(r.next()%4), int(r.next()%10)
	res := &Result{Rows: make([][]any, rows)}
	if r.next()%4 != 0 {
		for i := range cols {
			res.Columns = append(res.Columns, fmt.Sprint("c", i))
		}
	} else if rows == 0 {
		cols = 0 // without columns or rows the result has no columns
	}
	for i := range res.Rows {
		res.Rows[i] = make([]any, cols)
		for j := range res.Rows[i] {
			res.Rows[i][j] = r.cell()
		}
	}
	return res
}

// nearby returns a value equal to v or close to it.
func (r *fuzzBytes) nearby(v any) any {
	switch x := v.(type) {
	case int64:
		switch r.next() % 3 {
		case 0:
			return float64(x)
		case 1:
			return float64(x) * (1 + 1e-7)
		}
		return x + 1
	case float64:
		switch r.next() % 3 {
		case 0:
			return x * (1 + 1e-7)
		case 1:
			return math.Nextafter(x, math.Inf(1))
		}
		return RoundHalfUp(x, int(r.next()%4))
	case string:
		return []byte(x)
	}
	return r.cell()
}

func cloneResult(res *Result) *Result {
	if res == nil {
		return nil
	}
	c := &Result{Columns: append([]string(nil), res.Columns...), Rows: make([][]any, len(res.Rows)), Bytes: res.Bytes}
	for i, row := range res.Rows {
		c.Rows[i] = make([]any, len(row))
		for j, v := range row {
			if b, ok := v.([]byte); ok {
				v = bytes.Clone(b)
			}
			c.Rows[i][j] = v
		}
	}
	return c
}

// sameResult compares results exactly (NaN equals NaN, -0 differs from 0).
func sameResult(a, b *Result) bool {
	return fmt.Sprintf("%#v", a.Columns) == fmt.Sprintf("%#v", b.Columns) && dumpRows(a.Rows) == dumpRows(b.Rows)
}

func dumpRows(rows [][]any) string {
	var sb strings.Builder
	for _, row := range rows {
		for _, v := range row {
			switch x := v.(type) {
			case float64:
				fmt.Fprintf(&sb, "f%x,", math.Float64bits(x))
			case float32:
				fmt.Fprintf(&sb, "g%x,", math.Float32bits(x))
			default:
				fmt.Fprintf(&sb, "%T%#v,", v, v)
			}
		}
		sb.WriteString(";")
	}
	return sb.String()
}

// permuted returns res with its rows in another order.
func permuted(res *Result, r *fuzzBytes) *Result {
	c := cloneResult(res)
	for i := len(c.Rows) - 1; i > 0; i-- {
		j := int(r.next()) % (i + 1)
		c.Rows[i], c.Rows[j] = c.Rows[j], c.Rows[i]
	}
	return c
}

// bagOracle decides the bag comparison by brute force: is there a pairing
// of the rows under the tolerant row equality?
func bagOracle(p Policy, pred, ref *Result) bool {
	if numCols(pred) != numCols(ref) {
		return false
	}
	a, b := normRows(pred, p.norm()), normRows(ref, p.norm())
	if len(a) != len(b) {
		return false
	}
	used := make([]bool, len(b))
	var match func(i int) bool
	match = func(i int) bool {
		if i == len(a) {
			return true
		}
		for j := range b {
			if !used[j] && rowEqual(a[i], b[j]) {
				used[j] = true
				if match(i + 1) {
					return true
				}
				used[j] = false
			}
		}
		return false
	}
	return match(0)
}

// exactSetOracle decides the set comparison when no real number is
// involved (so equality is exact): are the sets of distinct rows equal?
// It reports false for applicable when a side holds a real.
func exactSetOracle(p Policy, pred, ref *Result) (ok, applicable bool) {
	if numCols(pred) != numCols(ref) {
		return false, true
	}
	keys := func(res *Result) (map[string]bool, bool) {
		m := map[string]bool{}
		for _, row := range normRows(res, p.norm()) {
			var sb strings.Builder
			for _, c := range row {
				if c.kind == ckReal {
					return nil, false
				}
				fmt.Fprintf(&sb, "%d:%d:%q|", c.kind, c.i, c.s)
			}
			m[sb.String()] = true
		}
		return m, true
	}
	ka, okA := keys(pred)
	kb, okB := keys(ref)
	if !okA || !okB {
		return false, false
	}
	if len(ka) != len(kb) {
		return false, true
	}
	for k := range ka {
		if !kb[k] {
			return false, true
		}
	}
	return true, true
}

// intsAmongReals reports whether the results hold both integers and reals.
// There the set comparison depends on the order of the rows (a known
// wrinkle, reported with the hardening issue): integers compare exactly
// with each other but with tolerance with reals, so equality is not
// transitive (1000002 = 1000003.0 = 1000003 but 1000002 != 1000003), and
// which of two equal rows dedupe keeps decides; beyond 2^53 the canonical
// order itself is not transitive.
func intsAmongReals(rs ...*Result) bool {
	ints, reals := false, false
	for _, r := range rs {
		for _, row := range normRows(r, DefaultPolicy().norm()) {
			for _, c := range row {
				ints = ints || c.kind == ckInt
				reals = reals || c.kind == ckReal
			}
		}
	}
	return ints && reals
}

// FuzzCompare checks Compare under every order, with and without
// rounding and EmptyFails, on results derived from one another by
// permutations, near values, duplicates and replaced cells:
//   - it never panics and never modifies its inputs; a failure has a
//     reason and a success none;
//   - a result equals itself (unless EmptyFails and empty) and its copy;
//   - the verdict is symmetric; auto is bag; ordered implies bag;
//   - bag and set ignore row order, and set duplicated rows (set: except
//     with integers among reals, a known wrinkle: see intsAmongReals);
//   - bag agrees with a brute-force matching, set with exact sets when no
//     real number is involved;
//   - with Decimals k, a result equals its own values rounded to k places.
func FuzzCompare(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	f.Add([]byte{2, 3, 1, 1, 0, 1, 5, 4, 9, 7, 1, 0, 1}, uint8(0))
	f.Add([]byte{1, 4, 1, 4, 7, 4, 8, 4, 9, 4, 10, 1, 2, 2, 1, 3, 0, 0}, uint8(2))
	f.Add([]byte{3, 9, 1, 6, 255, 248, 0, 0, 0, 0, 0, 1, 4, 28, 4, 27, 5, 26, 2, 1, 3, 1, 4, 4, 13, 4, 14, 1, 7, 7, 9, 0}, uint8(5))
	f.Add([]byte{1, 5, 1, 4, 4, 4, 5, 4, 6, 4, 7, 4, 8, 2, 9, 0, 3, 3, 0, 1, 2}, uint8(9))
	f.Add([]byte{2, 2, 1, 1, 8, 1, 9, 4, 16, 1, 8, 3, 1, 1, 2, 0, 2, 1}, uint8(13))
	f.Add(bytes.Repeat([]byte{1, 9, 2, 4, 28, 12, 0, 3}, 20), uint8(7))
	f.Fuzz(func(t *testing.T, data []byte, pol uint8) {
		r := &fuzzBytes{b: data}
		orders := []Order{OrderBag, OrderOrdered, OrderSet, OrderAuto}
		p := Policy{
			Order:      orders[pol%4],
			Decimals:   []int{-1, -1, 0, 2, 6, 12}[int(pol/4)%6],
			EmptyFails: pol&0x80 != 0,
		}
		ref := r.result()
		// The prediction: the reference permuted, then edited.
		pred := edited(permuted(ref, r), r)
		c := compareCase{t: t, p: p, pred: pred, ref: ref, r: r}
		ok := c.basics()
		c.normalisers(ok)
		c.orders()
		c.rounding()
	})
}

// edited applies up to three edits that r chooses to pred: a near or equal
// value, a new value, a duplicated row, a dropped row.
func edited(pred *Result, r *fuzzBytes) *Result {
	for edits := int(r.next() % 4); edits > 0; edits-- {
		n := len(pred.Rows)
		switch op := r.next() % 4; {
		case n == 0:
		case op == 0: // a near or equal value
			i, j := int(r.next())%n, int(r.next())%max(1, len(pred.Rows[0]))
			if len(pred.Rows[i]) > 0 {
				pred.Rows[i][j] = r.nearby(pred.Rows[i][j])
			}
		case op == 1: // a new value
			i, j := int(r.next())%n, int(r.next())%max(1, len(pred.Rows[0]))
			if len(pred.Rows[i]) > 0 {
				pred.Rows[i][j] = r.cell()
			}
		case op == 2: // a duplicated row
			i := int(r.next()) % n
			pred.Rows = append(pred.Rows, cloneResult(&Result{Rows: pred.Rows[i : i+1]}).Rows[0])
		default: // a dropped row
			i := int(r.next()) % n
			pred.Rows = append(pred.Rows[:i:i], pred.Rows[i+1:]...)
		}
	}
	return pred
}

// compareCase is one FuzzCompare input: the policy, the two results and
// the rest of the fuzzer's bytes; its methods check FuzzCompare's
// properties in turn.
type compareCase struct {
	t         *testing.T
	p         Policy
	pred, ref *Result
	r         *fuzzBytes
}

func (c compareCase) show() string {
	return fmt.Sprintf("policy %+v\npred %#v\nref  %#v", c.p, c.pred.Rows, c.ref.Rows)
}

func (c compareCase) with(o Order) Policy { q := c.p; q.Order = o; return q }

// basics: Compare leaves its inputs alone, gives a reason exactly when it
// fails, finds a result equal to itself and its copy, and is symmetric; it
// returns the verdict.
func (c compareCase) basics() bool {
	t, p, pred, ref := c.t, c.p, c.pred, c.ref
	predCopy, refCopy := cloneResult(pred), cloneResult(ref)
	ok, reason := Compare(p, pred, ref)
	if !sameResult(pred, predCopy) || !sameResult(ref, refCopy) {
		t.Fatalf("Compare modified its inputs")
	}
	if ok != (reason == "") {
		t.Fatalf("Compare(%+v) = %v with reason %q", p, ok, reason)
	}
	for _, res := range []*Result{ref, pred} {
		want := !(p.EmptyFails && len(res.Rows) == 0)
		if got, why := Compare(p, res, res); got != want {
			t.Fatalf("a result compared with itself: %v (%s)\n%s", got, why, c.show())
		}
		if got, why := Compare(p, res, cloneResult(res)); got != want {
			t.Fatalf("a result compared with its copy: %v (%s)\n%s", got, why, c.show())
		}
	}
	if ok2, _ := Compare(p, ref, pred); ok2 != ok {
		t.Fatalf("not symmetric: %v, swapped %v (%s)\n%s", ok, ok2, reason, c.show())
	}
	return ok
}

// normalisers: DateOnly and CanonicalJSON map equal cells to equal cells:
// they keep the verdict symmetric and never turn a success (ok) into a
// failure (set: except with integers among reals, see intsAmongReals).
func (c compareCase) normalisers(ok bool) {
	t, pred, ref := c.t, c.pred, c.ref
	norm := c.p
	norm.DateOnly, norm.CanonicalJSON = true, true
	okNorm, whyNorm := Compare(norm, pred, ref)
	if ok2, _ := Compare(norm, ref, pred); ok2 != okNorm {
		t.Fatalf("DateOnly+CanonicalJSON: not symmetric: %v, swapped %v (%s)\n%s", okNorm, ok2, whyNorm, c.show())
	}
	if ok && !okNorm && !(c.p.Order == OrderSet && intsAmongReals(pred, ref)) {
		t.Fatalf("equal, but not under DateOnly+CanonicalJSON (%s)\n%s", whyNorm, c.show())
	}
}

// orders: auto is bag; lists that are equal are equal bags; bag and set
// agree with brute force where it applies; neither depends on row order,
// and set not on duplicated rows.
func (c compareCase) orders() {
	t, p, pred, ref, r := c.t, c.p, c.pred, c.ref, c.r
	okBag, _ := Compare(c.with(OrderBag), pred, ref)
	if okAuto, _ := Compare(c.with(OrderAuto), pred, ref); okAuto != okBag {
		t.Fatalf("auto %v, bag %v\n%s", okAuto, okBag, c.show())
	}
	if okOrd, _ := Compare(c.with(OrderOrdered), pred, ref); okOrd && !okBag {
		t.Fatalf("equal as lists but not as bags\n%s", c.show())
	}
	if len(pred.Rows) <= 8 {
		want := bagOracle(p, pred, ref) && !(p.EmptyFails && (len(pred.Rows) == 0 || len(ref.Rows) == 0))
		if okBag != want {
			t.Fatalf("bag comparison %v, brute-force matching %v\n%s", okBag, want, c.show())
		}
	}
	okSet, _ := Compare(c.with(OrderSet), pred, ref)
	if want, applicable := exactSetOracle(p, pred, ref); applicable {
		want = want && !(p.EmptyFails && (len(pred.Rows) == 0 || len(ref.Rows) == 0))
		if okSet != want {
			t.Fatalf("set comparison %v, exact sets %v\n%s", okSet, want, c.show())
		}
	}
	for _, o := range []Order{OrderBag, OrderSet} {
		if o == OrderSet && intsAmongReals(pred, ref) {
			continue
		}
		q := c.with(o)
		want, _ := Compare(q, pred, ref)
		if got, _ := Compare(q, permuted(pred, r), permuted(ref, r)); got != want {
			t.Fatalf("%v comparison depends on row order: %v, permuted %v\n%s", o, want, got, c.show())
		}
	}
	if n := len(pred.Rows); n > 0 && !intsAmongReals(pred, ref) {
		dup := cloneResult(pred)
		dup.Rows = append(dup.Rows, cloneResult(pred).Rows[int(r.next())%n])
		if got, _ := Compare(c.with(OrderSet), dup, ref); got != okSet {
			t.Fatalf("set comparison changed by a duplicated row: %v, then %v\n%s", okSet, got, c.show())
		}
	}
}

// rounding: with Decimals k, a result equals its own values rounded to k
// places.
func (c compareCase) rounding() {
	p, ref := c.p, c.ref
	if p.Decimals < 0 {
		return
	}
	rounded := cloneResult(ref)
	for _, row := range rounded.Rows {
		for j, v := range row {
			if x, isFloat := v.(float64); isFloat {
				row[j] = RoundHalfUp(x, p.Decimals)
			}
		}
	}
	want := !(p.EmptyFails && len(ref.Rows) == 0)
	if got, why := Compare(p, rounded, ref); got != want {
		c.t.Fatalf("a result and its rounded values: %v (%s)\n%s", got, why, c.show())
	}
}

// FuzzRoundHalfUp checks RoundHalfUp against exact decimal arithmetic on
// the shortest representation (math/big), and that it is idempotent and
// keeps the sign; NaN, infinities, zeros and k < 0 are returned unchanged.
func FuzzRoundHalfUp(f *testing.F) {
	for _, x := range fuzzFloats {
		for _, k := range []int8{-1, 0, 1, 2, 3, 12, 17, 100} {
			f.Add(x, k)
		}
	}
	f.Add(0.125, int8(2))
	f.Add(99.5, int8(0))
	f.Add(-0.0049999999999999, int8(2))
	f.Add(5e-324, int8(127))
	f.Fuzz(func(t *testing.T, x float64, k8 int8) {
		k := int(k8)
		got := RoundHalfUp(x, k)
		if k < 0 || math.IsNaN(x) || math.IsInf(x, 0) || x == 0 {
			if math.Float64bits(got) != math.Float64bits(x) {
				t.Fatalf("RoundHalfUp(%v, %d) = %v, want it unchanged", x, k, got)
			}
			return
		}
		if again := RoundHalfUp(got, k); again != got {
			t.Fatalf("RoundHalfUp(%v, %d) = %v, but rounding that gives %v", x, k, got, again)
		}
		if got != 0 && math.Signbit(got) != math.Signbit(x) {
			t.Fatalf("RoundHalfUp(%v, %d) = %v changed the sign", x, k, got)
		}
		// Exact: the shortest decimal of |x|, times 10^k, plus 1/2, floored.
		var v big.Rat
		if _, ok := v.SetString(strconv.FormatFloat(math.Abs(x), 'f', -1, 64)); !ok {
			t.Fatal("big.Rat cannot read the shortest decimal")
		}
		scale := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(k)), nil))
		v.Mul(&v, scale)
		v.Add(&v, big.NewRat(1, 2))
		q := new(big.Int).Quo(v.Num(), v.Denom())
		want, _ := new(big.Rat).Quo(new(big.Rat).SetInt(q), scale).Float64()
		if x < 0 {
			want = -want
		}
		if got != want && !(got == 0 && want == 0) {
			t.Fatalf("RoundHalfUp(%v, %d) = %v, want %v", x, k, got, want)
		}
	})
}

// FuzzCanonicalJSON checks CanonicalJSON and DateOf on arbitrary text: they never
// panic; a canonical encoding is valid JSON, is its own canonical encoding, and is
// the canonical encoding of the value re-encoded by encoding/json too (whitespace and
// key order do not matter); a date is ten characters long and its own date.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b": 1, "a": [1.005, {"d": null, "c": "x"}]}`, `[1e400, -0, 0.5]`, `[]`, `{"a":1,"a":2}`,
		`"x"`, `2024-03-01 14:05:00+05:30`, `2024-03-01`, `{1,2}`, "[\"\\ud800\"]"} {
		f.Add(s, int8(2))
		f.Add(s, int8(-1))
	}
	f.Fuzz(func(t *testing.T, s string, k int8) {
		decimals := int(k) % 13
		if d, ok := DateOf(s); ok {
			if len(d) != 10 || d != s[:10] {
				t.Fatalf("DateOf(%q) = %q", s, d)
			}
			if d2, ok2 := DateOf(d); !ok2 || d2 != d {
				t.Fatalf("DateOf(%q) = %q, %v: a date is not its own date", d, d2, ok2)
			}
		}
		c, ok := CanonicalJSON(s, decimals)
		if !ok {
			return
		}
		if !json.Valid([]byte(c)) {
			t.Fatalf("CanonicalJSON(%q) = %q is not valid JSON", s, c)
		}
		if c2, ok2 := CanonicalJSON(c, decimals); !ok2 || c2 != c {
			t.Fatalf("CanonicalJSON not idempotent: %q -> %q -> %q (%v)", s, c, c2, ok2)
		}
		var v any
		dec := json.NewDecoder(strings.NewReader(s))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("CanonicalJSON accepted %q, which does not decode: %v", s, err)
		}
		pretty, err := json.MarshalIndent(v, " ", "\t")
		if err != nil {
			return
		}
		if c3, ok3 := CanonicalJSON(string(pretty), decimals); !ok3 || c3 != c {
			t.Fatalf("re-encoded %q canonicalises to %q, the original to %q", pretty, c3, c)
		}
	})
}

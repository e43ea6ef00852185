package sqlexec

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func res(cols int, rows ...[]any) *Result {
	c := make([]string, cols)
	for i := range c {
		c[i] = fmt.Sprintf("c%d", i)
	}
	if rows == nil {
		rows = [][]any{}
	}
	return &Result{Columns: c, Rows: rows}
}

func row(v ...any) []any { return v }

func TestErrorKinds(t *testing.T) {
	names := map[ErrorKind]string{KindSyntax: "syntax", KindDenied: "denied", KindTimeout: "timeout",
		KindTooManyRows: "too_many_rows", KindTooManyBytes: "too_many_bytes", KindExecution: "execution",
		KindUnavailable: "unavailable"}
	for k, want := range names {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(k), k.String(), want)
		}
	}
	inner := errors.New("boom")
	e := Errorf(KindDenied, inner, "DELETE is not allowed")
	wrapped := fmt.Errorf("outer: %w", e)
	if KindOf(wrapped) != KindDenied || !errors.Is(wrapped, inner) {
		t.Errorf("KindOf/Unwrap broken: %v", wrapped)
	}
	if e.Error() != "denied: DELETE is not allowed" {
		t.Errorf("Error() = %q", e.Error())
	}
	if KindOf(inner) != 0 || KindOf(nil) != 0 {
		t.Error("KindOf of a plain error is not 0")
	}
	if (&Error{Kind: KindExecution, Err: inner}).Error() != "execution: boom" {
		t.Error("Error() without Msg")
	}
	if d := DefaultLimits(); d.Timeout != 5*time.Second || d.MaxRows != 10000 || d.MaxBytes != 8<<20 {
		t.Errorf("DefaultLimits = %+v", d)
	}
}

func TestParseOrder(t *testing.T) {
	cases := []struct {
		in   string
		want Order
		err  bool
	}{
		{"", OrderBag, false}, {"bag", OrderBag, false}, {"ordered", OrderOrdered, false},
		{"set", OrderSet, false}, {"auto", OrderAuto, false}, {" Ordered ", OrderOrdered, false},
		{"list", 0, true},
	}
	for _, tc := range cases {
		got, err := ParseOrder(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseOrder(%q) = %v, %v", tc.in, got, err)
		}
		if err == nil && tc.in != "" {
			if back, _ := ParseOrder(got.String()); back != got {
				t.Errorf("String round trip of %v", got)
			}
		}
	}
	if p := DefaultPolicy(); p.Order != OrderBag || p.Decimals != -1 || p.StripComments || p.StripDistinct || p.StripRound || p.EmptyFails {
		t.Errorf("DefaultPolicy = %+v", p)
	}
}

func TestCompare(t *testing.T) {
	bag := DefaultPolicy()
	ordered := Policy{Order: OrderOrdered, Decimals: -1}
	set := Policy{Order: OrderSet, Decimals: -1}
	dec2 := Policy{Order: OrderBag, Decimals: 2}
	empty := Policy{Order: OrderBag, Decimals: -1, EmptyFails: true}
	cases := []struct {
		name   string
		p      Policy
		pred   *Result
		ref    *Result
		ok     bool
		reason string
	}{
		{"identical", bag, res(2, row(int64(1), "a")), res(2, row(int64(1), "a")), true, ""},
		{"bag ignores order", bag, res(1, row(int64(1)), row(int64(2))), res(1, row(int64(2)), row(int64(1))), true, ""},
		{"ordered sees order", ordered, res(1, row(int64(1)), row(int64(2))), res(1, row(int64(2)), row(int64(1))), false, "row 1 differs"},
		{"ordered same order", ordered, res(1, row(int64(1)), row(3.0)), res(1, row(1.0), row(int64(3))), true, ""},
		{"bag counts duplicates", bag, res(1, row("a"), row("a"), row("b")), res(1, row("a"), row("b"), row("b")), false, "multiset"},
		{"bag duplicate count differs", bag, res(1, row("a"), row("a")), res(1, row("a")), false, "row count 2 != 1"},
		{"set ignores duplicates", set, res(1, row("a"), row("a"), row("b")), res(1, row("b"), row("a")), true, ""},
		{"set sees missing values", set, res(1, row("a"), row("a")), res(1, row("a"), row("b")), false, "distinct row count 1 != 2"},
		{"set same count different values", set, res(1, row("a"), row("c")), res(1, row("a"), row("b")), false, "multiset"},
		{"null equals null", bag, res(2, row(nil, int64(1))), res(2, row(nil, int64(1))), true, ""},
		{"null is not zero", bag, res(1, row(nil)), res(1, row(int64(0))), false, ""},
		{"null is not empty text", bag, res(1, row(nil)), res(1, row("")), false, ""},
		{"3 equals 3.0", bag, res(1, row(int64(3))), res(1, row(3.0)), true, ""},
		{"text 10 is not 10", bag, res(1, row("10")), res(1, row(int64(10))), false, ""},
		{"text 3.0 is not 3", bag, res(1, row("3.0")), res(1, row(3.0)), false, ""},
		{"text is exact", bag, res(1, row("Oslo")), res(1, row("oslo")), false, ""},
		{"text keeps spaces", bag, res(1, row("a ")), res(1, row("a")), false, ""},
		{"blob by bytes", bag, res(1, row([]byte{1, 2})), res(1, row([]byte{1, 2})), true, ""},
		{"blob differs", bag, res(1, row([]byte{1, 2})), res(1, row([]byte{1, 3})), false, ""},
		{"blob is not text", bag, res(1, row([]byte("ab"))), res(1, row("ab")), false, ""},
		{"bool as 0/1", bag, res(1, row(true), row(false)), res(1, row(int64(1)), row(int64(0))), true, ""},
		{"within tolerance", bag, res(1, row(1000.0)), res(1, row(1000.0009)), true, ""},
		{"outside tolerance", bag, res(1, row(1000.0)), res(1, row(1000.0011)), false, ""},
		{"absolute tolerance near zero", bag, res(1, row(0.0)), res(1, row(1e-9)), true, ""},
		{"absolute tolerance near zero exceeded", bag, res(1, row(0.0)), res(1, row(2e-9)), false, ""},
		{"integers are exact", bag, res(1, row(int64(1000001))), res(1, row(int64(1000002))), false, ""},
		{"integer and close real", bag, res(1, row(int64(3))), res(1, row(3.0000000001)), true, ""},
		{"decimals half-up 2.675", dec2, res(1, row(2.675)), res(1, row(2.68)), true, ""},
		{"decimals half-up 2.665", dec2, res(1, row(2.665)), res(1, row(2.67)), true, ""},
		{"decimals negative away from zero", dec2, res(1, row(-2.675)), res(1, row(-2.68)), true, ""},
		{"decimals both sides", dec2, res(1, row(1.004)), res(1, row(0.996)), true, ""},
		{"decimals still differ", dec2, res(1, row(1.004)), res(1, row(1.006)), false, ""},
		{"no decimals 2.675 vs 2.68", bag, res(1, row(2.675)), res(1, row(2.68)), false, ""},
		{"column count", bag, res(2, row(int64(1), int64(2))), res(3, row(int64(1), int64(2), int64(3))), false, "column count 2 != 3"},
		{"column count when empty", bag, res(2), res(3), false, "column count 2 != 3"},
		{"column names ignored", bag, &Result{Columns: []string{"x"}, Rows: [][]any{{int64(1)}}},
			&Result{Columns: []string{"y"}, Rows: [][]any{{int64(1)}}}, true, ""},
		{"both empty", bag, res(1), res(1), true, ""},
		{"empty fails pred", empty, res(1), res(1, row(int64(1))), false, "empty result"},
		{"empty fails ref", empty, res(1, row(int64(1))), res(1), false, "empty result"},
		{"empty fails both", empty, res(1), res(1), false, "empty result"},
		{"empty fails not empty", empty, res(1, row(int64(1))), res(1, row(1.0)), true, ""},
		{"row count", bag, res(1, row(int64(1))), res(1, row(int64(1)), row(int64(1))), false, "row count 1 != 2"},
		{"ordered row 4 differs", ordered, res(1, row(int64(1)), row(int64(2)), row(int64(3)), row(int64(5))),
			res(1, row(int64(1)), row(int64(2)), row(int64(3)), row(int64(4))), false, "row 4 differs"},
		{"tolerance crossing sorted pairing", bag,
			res(2, row(1.0000001, "b"), row(1.0, "a")),
			res(2, row(1.0000001, "a"), row(1.0, "b")), true, ""},
		{"tolerance crossing two numeric columns", bag,
			res(2, row(1.0000001, int64(2)), row(1.0, int64(1))),
			res(2, row(1.0000001, int64(1)), row(1.0, int64(2))), true, ""},
		{"tolerance crossing still checks", bag,
			res(2, row(1.0000001, "b"), row(1.0, "a")),
			res(2, row(1.0000001, "a"), row(1.0, "c")), false, "multiset"},
		{"auto treated as bag", Policy{Order: OrderAuto, Decimals: -1}, res(1, row(int64(1)), row(int64(2))), res(1, row(int64(2)), row(int64(1))), true, ""},
		{"nil results", bag, nil, res(0), true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := Compare(tc.p, tc.pred, tc.ref)
			if ok != tc.ok {
				t.Fatalf("ok = %v (%s), want %v", ok, reason, tc.ok)
			}
			if ok && reason != "" {
				t.Errorf("reason on success: %q", reason)
			}
			if !ok && (reason == "" || !strings.Contains(reason, tc.reason)) {
				t.Errorf("reason %q does not contain %q", reason, tc.reason)
			}
			// Compare is symmetric in its verdict.
			if ok2, _ := Compare(tc.p, tc.ref, tc.pred); ok2 != ok {
				t.Errorf("not symmetric: swapped gives %v", ok2)
			}
		})
	}
}

func TestCompareDoesNotModifyInputs(t *testing.T) {
	pred := res(1, row(int64(2)), row(int64(1)))
	ref := res(1, row(int64(1)), row(int64(2)))
	Compare(DefaultPolicy(), pred, ref)
	if !reflect.DeepEqual(pred.Rows, [][]any{{int64(2)}, {int64(1)}}) {
		t.Errorf("pred modified: %v", pred.Rows)
	}
}

func TestRoundHalfUp(t *testing.T) {
	cases := []struct {
		x    float64
		k    int
		want float64
	}{
		{2.675, 2, 2.68}, {2.665, 2, 2.67}, {1.005, 2, 1.01}, {-2.675, 2, -2.68}, {2.5, 0, 3}, {-2.5, 0, -3},
		{0.125, 2, 0.13}, {9.995, 2, 10}, {99.5, 0, 100}, {1.234, 5, 1.234}, {3, 2, 3}, {0.0001, 2, 0},
		{1e21, 2, 1e21}, {123.456, 1, 123.5},
	}
	for _, tc := range cases {
		if got := RoundHalfUp(tc.x, tc.k); got != tc.want {
			t.Errorf("RoundHalfUp(%v, %d) = %v, want %v", tc.x, tc.k, got, tc.want)
		}
	}
}

func TestRewrite(t *testing.T) {
	all := Policy{StripComments: true, StripDistinct: true, StripRound: true}
	cases := []struct {
		name string
		p    Policy
		in   string
		want string
	}{
		{"nothing on", DefaultPolicy(), "SELECT DISTINCT ROUND(x, 2) -- c\nFROM t", "SELECT DISTINCT ROUND(x, 2) -- c\nFROM t"},
		{"line comment", Policy{StripComments: true}, "SELECT a -- the a\nFROM t -- end", "SELECT a \nFROM t "},
		{"block comment", Policy{StripComments: true}, "SELECT a/*x*/FROM t /* multi\nline */", "SELECT a FROM t  "},
		{"comment markers inside strings stay", Policy{StripComments: true}, "SELECT '-- no', '/* no */' -- yes", "SELECT '-- no', '/* no */' "},
		{"comment markers in identifiers stay", Policy{StripComments: true}, `SELECT "a--b", [c/*d] FROM t`, `SELECT "a--b", [c/*d] FROM t`},
		{"quote inside comment", Policy{StripComments: true}, "SELECT 1 -- it's\n, 2", "SELECT 1 \n, 2"},
		{"distinct", Policy{StripDistinct: true}, "SELECT DISTINCT a FROM t", "SELECT a FROM t"},
		// Only SELECT DISTINCT goes: COUNT(DISTINCT b) counts something else, and
		// DISTINCT ON keeps other rows (the sound variant; the harness strips both).
		{"distinct lower, count's stays", Policy{StripDistinct: true}, "select distinct a, count(distinct b) from t", "select a, count(distinct b) from t"},
		{"distinct after newline and comment", Policy{StripDistinct: true}, "SELECT\n  /* c */ DiStInCt\n a FROM t", "SELECT\n  /* c */ a FROM t"},
		{"distinct on stays", Policy{StripDistinct: true}, "SELECT DISTINCT ON (a) a, b FROM t", "SELECT DISTINCT ON (a) a, b FROM t"},
		{"distinct in a subquery's select goes", Policy{StripDistinct: true}, "SELECT x FROM (SELECT DISTINCT a AS x FROM t) s", "SELECT x FROM (SELECT a AS x FROM t) s"},
		{"distinct in union select goes", Policy{StripDistinct: true}, "SELECT a FROM t UNION SELECT DISTINCT b FROM u", "SELECT a FROM t UNION SELECT b FROM u"},
		{"distinct in array_agg stays", Policy{StripDistinct: true}, "SELECT array_agg(DISTINCT a) FROM t", "SELECT array_agg(DISTINCT a) FROM t"},
		{"distinct in string stays", Policy{StripDistinct: true}, "SELECT 'DISTINCT' FROM t", "SELECT 'DISTINCT' FROM t"},
		{"distinct as part of a word stays", Policy{StripDistinct: true}, "SELECT distinctive FROM t", "SELECT distinctive FROM t"},
		{"distinct in comment stays", Policy{StripDistinct: true}, "SELECT a /* DISTINCT */ FROM t", "SELECT a /* DISTINCT */ FROM t"},
		{"round", Policy{StripRound: true}, "SELECT ROUND(x, 2) FROM t", "SELECT x FROM t"},
		{"round one arg", Policy{StripRound: true}, "SELECT round(x) FROM t", "SELECT x FROM t"},
		{"round nested", Policy{StripRound: true}, "SELECT ROUND(ROUND(x,1),2) FROM t", "SELECT x FROM t"},
		{"round expression keeps parens", Policy{StripRound: true}, "SELECT ROUND(a + b, 2) * 3 FROM t", "SELECT (a + b) * 3 FROM t"},
		{"round of call", Policy{StripRound: true}, "SELECT ROUND(AVG(x), 2) FROM t", "SELECT AVG(x) FROM t"},
		{"round of cast with commas inside", Policy{StripRound: true}, "SELECT ROUND(CAST(SUM(a) AS REAL) / COUNT(b), 2)", "SELECT (CAST(SUM(a) AS REAL) / COUNT(b))"},
		{"round of func with commas", Policy{StripRound: true}, "SELECT ROUND(COALESCE(a, 0), 2)", "SELECT COALESCE(a, 0)"},
		{"round qualified column", Policy{StripRound: true}, "SELECT ROUND(t.x, 2)", "SELECT t.x"},
		{"round with string containing paren", Policy{StripRound: true}, "SELECT ROUND(length(')'), 1)", "SELECT length(')')"},
		{"round space before paren", Policy{StripRound: true}, "SELECT ROUND (x, 2)", "SELECT x"},
		{"round column named round stays", Policy{StripRound: true}, "SELECT round FROM t", "SELECT round FROM t"},
		{"qualified round stays", Policy{StripRound: true}, "SELECT t.round(x) FROM t", "SELECT t.round(x) FROM t"},
		{"round in string stays", Policy{StripRound: true}, "SELECT 'ROUND(x, 2)'", "SELECT 'ROUND(x, 2)'"},
		{"unbalanced round stays", Policy{StripRound: true}, "SELECT ROUND(x, 2", "SELECT ROUND(x, 2"},
		{"round twice", Policy{StripRound: true}, "SELECT ROUND(a,1), ROUND(b*2,1)", "SELECT a, (b*2)"},
		{"all", all, "SELECT DISTINCT ROUND(a, 2) -- x\nFROM t /* y */", "SELECT a \nFROM t  "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.Rewrite(tc.in); got != tc.want {
				t.Errorf("Rewrite(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestHasOuterOrderBy(t *testing.T) {
	cases := []struct {
		name string
		sql  string
		want bool
	}{
		{"outer", "SELECT a FROM t ORDER BY a", true},
		{"lower case and spaces", "select a from t order\n  by a desc limit 3", true},
		{"none", "SELECT a FROM t", false},
		{"subquery only", "SELECT * FROM (SELECT a FROM t ORDER BY a LIMIT 3)", false},
		{"in clause subquery", "SELECT a FROM t WHERE a IN (SELECT b FROM u ORDER BY b LIMIT 1)", false},
		{"CTE only", "WITH x AS (SELECT a FROM t ORDER BY a) SELECT * FROM x", false},
		{"CTE and outer", "WITH x AS (SELECT a FROM t ORDER BY a) SELECT * FROM x ORDER BY 1", true},
		{"window only", "SELECT rank() OVER (ORDER BY a) FROM t", false},
		{"aggregate order", "SELECT group_concat(a ORDER BY a) FROM t", false},
		{"string literal", "SELECT 'order by' FROM t", false},
		{"quoted identifier", `SELECT "order by" FROM t`, false},
		{"comment", "SELECT a FROM t -- ORDER BY a", false},
		{"block comment", "SELECT a FROM t /* ORDER BY a */", false},
		{"compound", "SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", true},
		{"last statement counts", "SELECT a FROM t ORDER BY a; SELECT b FROM u", false},
		{"last statement has it", "SELECT a FROM t; SELECT b FROM u ORDER BY b;", true},
		{"order without by", "SELECT \"order\" FROM t", false},
		{"order comment by", "SELECT a FROM t ORDER /* x */ BY a", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := HasOuterOrderBy(tc.sql); got != tc.want {
				t.Errorf("HasOuterOrderBy(%q) = %v", tc.sql, got)
			}
			p := Policy{Order: OrderAuto, Decimals: -1}.Resolve(tc.sql)
			want := OrderBag
			if tc.want {
				want = OrderOrdered
			}
			if p.Order != want {
				t.Errorf("Resolve gave %v, want %v", p.Order, want)
			}
		})
	}
	if p := (Policy{Order: OrderSet}).Resolve("SELECT a FROM t ORDER BY a"); p.Order != OrderSet {
		t.Error("Resolve changed a non-auto order")
	}
}

func TestSplitStatements(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []string
	}{
		{"one", "SELECT 1", []string{"SELECT 1"}},
		{"two", "SELECT 1; SELECT 2;", []string{"SELECT 1", "SELECT 2"}},
		{"empty pieces", " ; ;SELECT 1;;", []string{"SELECT 1"}},
		{"comment-only piece", "SELECT 1; -- done\n/* x */;", []string{"SELECT 1"}},
		{"semicolon in string", "SELECT ';'; SELECT 'it''s;'", []string{"SELECT ';'", "SELECT 'it''s;'"}},
		{"semicolon in identifiers", "SELECT \"a;b\", `c;d`, [e;f] FROM t", []string{"SELECT \"a;b\", `c;d`, [e;f] FROM t"}},
		{"semicolon in comments", "SELECT 1 -- a;b\n; SELECT /* ; */ 2", []string{"SELECT 1 -- a;b", "SELECT /* ; */ 2"}},
		{"dollar quote", "SELECT $$a;b$$; SELECT $t$;$t$", []string{"SELECT $$a;b$$", "SELECT $t$;$t$"}},
		{"trigger body", "CREATE TRIGGER tr AFTER INSERT ON t BEGIN DELETE FROM u; INSERT INTO v VALUES (1); END; SELECT 1",
			[]string{"CREATE TRIGGER tr AFTER INSERT ON t BEGIN DELETE FROM u; INSERT INTO v VALUES (1); END", "SELECT 1"}},
		{"temp trigger body", "create temp trigger tr after insert on t begin select 1; end",
			[]string{"create temp trigger tr after insert on t begin select 1; end"}},
		{"unterminated string", "SELECT 'a; SELECT 2", []string{"SELECT 'a; SELECT 2"}},
		{"nothing", "  -- x", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := SplitStatements(tc.in); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("SplitStatements(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestLexRoundTrip(t *testing.T) {
	for _, s := range []string{"SELECT 'a''b', \"c\"\"d\", `e`, [f], x'00', 1.5e-3, .5, $1, $$x$$ -- z\n/* w */;", "'unterminated", "/* open", "[open", "\"open"} {
		var b strings.Builder
		for _, tk := range Lex(s) {
			b.WriteString(tk.Text)
		}
		if b.String() != s {
			t.Errorf("lex round trip of %q gave %q", s, b.String())
		}
	}
}

func TestNormalizeSQL(t *testing.T) {
	same := [][2]string{
		{"SELECT a FROM t", "select  a\nFROM t;"},
		{"SELECT a FROM t -- x", "SELECT a /* y */ FROM t"},
		{"SELECT 1; SELECT 2", "SELECT 1;\n;SELECT 2;"},
	}
	for _, p := range same {
		if NormalizeSQL(p[0]) != NormalizeSQL(p[1]) {
			t.Errorf("%q and %q normalise differently: %q vs %q", p[0], p[1], NormalizeSQL(p[0]), NormalizeSQL(p[1]))
		}
	}
	diff := [][2]string{
		{"SELECT 'a'", "SELECT 'A'"},
		{`SELECT "a"`, `SELECT "A"`},
		{"SELECT a<=b", "SELECT a< =b"},
		{"SELECT 1", "SELECT 2"},
	}
	for _, p := range diff {
		if NormalizeSQL(p[0]) == NormalizeSQL(p[1]) {
			t.Errorf("%q and %q normalise the same", p[0], p[1])
		}
	}
}

// TestCacheSingleflight: 64 concurrent callers of one key share one
// computation. In a synctest bubble, so that every caller is known to be
// waiting before the computation ends (no sleep, whatever the load).
func TestCacheSingleflight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := NewCache()
		var calls atomic.Int32
		gate := make(chan struct{})
		want := res(1, row(int64(1)))
		var wg sync.WaitGroup
		const n = 64
		results := make([]*Result, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := c.Get(context.Background(), "k", func(context.Context) (*Result, error) {
					calls.Add(1)
					<-gate
					return want, nil
				})
				if err != nil {
					t.Error(err)
				}
				results[i] = r
			}()
		}
		synctest.Wait() // every caller blocked: one computing, the rest waiting for it
		close(gate)
		wg.Wait()
		if calls.Load() != 1 {
			t.Fatalf("compute called %d times", calls.Load())
		}
		for _, r := range results {
			if r != want {
				t.Fatal("a caller got another result")
			}
		}
		// Later calls hit the cache.
		r, _ := c.Get(context.Background(), "k", func(context.Context) (*Result, error) {
			t.Error("recomputed")
			return nil, nil
		})
		if r != want || c.Len() != 1 {
			t.Error("cache miss")
		}
	})
}

func TestCacheErrors(t *testing.T) {
	c := NewCache()
	ctx := context.Background()
	var calls int
	fail := func(context.Context) (*Result, error) {
		calls++
		return nil, Errorf(KindSyntax, nil, "bad reference")
	}
	for range 3 {
		if _, err := c.Get(ctx, "bad", fail); KindOf(err) != KindSyntax {
			t.Fatalf("got %v", err)
		}
	}
	if calls != 1 {
		t.Errorf("a cached error was recomputed (%d calls)", calls)
	}
	// Unavailable is not kept.
	calls = 0
	unavail := func(context.Context) (*Result, error) {
		calls++
		return nil, Errorf(KindUnavailable, nil, "db gone")
	}
	c.Get(ctx, "u", unavail)
	c.Get(ctx, "u", unavail)
	if calls != 2 {
		t.Errorf("unavailable was cached (%d calls)", calls)
	}
	// A computation whose caller left is not kept; a waiter computes
	// again. A waiter whose own context ends stops waiting. In a synctest
	// bubble, so that the waiters are known to wait (no sleep).
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Get(cctx, "c", func(ctx context.Context) (*Result, error) {
				<-ctx.Done()
				return nil, Errorf(KindUnavailable, ctx.Err(), "canceled")
			})
		}()
		synctest.Wait() // the first caller computes
		recomputed := false
		waited := make(chan *Result)
		go func() {
			r, _ := c.Get(ctx, "c", func(context.Context) (*Result, error) { recomputed = true; return res(1), nil })
			waited <- r
		}()
		synctest.Wait() // the waiter waits for it
		cancel()
		<-done
		if r := <-waited; r == nil || !recomputed {
			t.Errorf("the waiter got %v (recomputed %v), want its own computation after the first caller left", r, recomputed)
		}
		block := make(chan struct{})
		go c.Get(ctx, "slow", func(context.Context) (*Result, error) { <-block; return res(1), nil })
		synctest.Wait() // "slow" is being computed
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer wcancel()
		if _, err := c.Get(wctx, "slow", nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("waiter got %v", err)
		}
		close(block)
		synctest.Wait()
		c.Forget("slow")
	})
}

// fakeEngine answers queries from a table and counts executions.
type fakeEngine struct {
	mu      sync.Mutex
	answers map[string]*Result
	errs    map[string]error
	calls   map[string]int
}

func (f *fakeEngine) Dialect() string { return "fake" }
func (f *fakeEngine) Close() error    { return nil }
func (f *fakeEngine) Schema(context.Context, int) (string, error) {
	return "", nil
}
func (f *fakeEngine) Query(_ context.Context, sql string, _ Limits) (*Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[sql]++
	if err, ok := f.errs[sql]; ok {
		return nil, err
	}
	if r, ok := f.answers[sql]; ok {
		return r, nil
	}
	return nil, Errorf(KindSyntax, nil, "unknown query %q", sql)
}

func TestCheck(t *testing.T) {
	ref := "SELECT name FROM t ORDER BY name"
	eng := &fakeEngine{
		answers: map[string]*Result{
			ref:                             res(1, row("a"), row("b")),
			"SELECT name FROM t":            res(1, row("b"), row("a")),
			"SELECT name FROM t ORDER BY 1": res(1, row("a"), row("b")),
			"SELECT name, 1 FROM t":         res(2, row("a", int64(1)), row("b", int64(1))),
			"SELECT name FROM t WHERE 0":    res(1),
			ref + " ":                       res(1, row("a"), row("b")), // ref rewritten by StripComments
		},
		errs: map[string]error{
			"DELETE FROM t":  Errorf(KindDenied, nil, "DELETE is not allowed"),
			"SELECT sleep()": Errorf(KindTimeout, nil, "too slow"),
			"SELECT broken":  Errorf(KindUnavailable, nil, "db gone"),
		},
	}
	ctx := context.Background()
	cache := NewCache()
	auto := Policy{Order: OrderAuto, Decimals: -1}
	lim := DefaultLimits()
	cases := []struct {
		name    string
		p       Policy
		pred    string
		success bool
		kind    ErrorKind
		reason  string
	}{
		{"verbatim", auto, ref, true, 0, ""},
		{"verbatim up to whitespace and case", auto, "select name  FROM t\n order by name; -- ok", true, 0, ""},
		{"equivalent", auto, "SELECT name FROM t ORDER BY 1", true, 0, ""},
		{"auto is ordered for this reference", auto, "SELECT name FROM t", false, 0, "row 1 differs"},
		{"bag accepts other order", DefaultPolicy(), "SELECT name FROM t", true, 0, ""},
		{"columns", auto, "SELECT name, 1 FROM t", false, 0, "column count 2 != 1"},
		{"empty", auto, "SELECT name FROM t WHERE 0", false, 0, "row count 0 != 2"},
		{"denied", auto, "DELETE FROM t", false, KindDenied, "DELETE is not allowed"},
		{"timeout", auto, "SELECT sleep()", false, KindTimeout, "too slow"},
		{"syntax", auto, "SELEC", false, KindSyntax, "unknown query"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Check(ctx, eng, cache, "rec1", tc.p, tc.pred, ref, lim)
			if err != nil {
				t.Fatalf("error %v", err)
			}
			if v.Success != tc.success || KindOf(v.Err) != tc.kind || !strings.Contains(v.Reason, tc.reason) {
				t.Fatalf("verdict %+v, want success=%v kind=%v reason~%q", v, tc.success, tc.kind, tc.reason)
			}
		})
	}
	if eng.calls[ref] != 1 {
		t.Errorf("reference executed %d times, want once", eng.calls[ref])
	}
	if eng.calls["select name  FROM t\n order by name; -- ok"] != 0 {
		t.Error("a prediction equal to the reference was executed")
	}
	// Environment failures of the prediction are errors, not verdicts.
	if _, err := Check(ctx, eng, cache, "rec1", auto, "SELECT broken", ref, lim); KindOf(err) != KindUnavailable {
		t.Errorf("unavailable prediction: %v", err)
	}
	// A reference that fails is an error.
	if _, err := Check(ctx, eng, cache, "rec2", auto, "SELECT 1", "SELECT nope", lim); err == nil || KindOf(err) != KindSyntax {
		t.Errorf("broken reference: %v", err)
	}
	// Rewrites apply to both sides and use their own cache key.
	strip := Policy{Order: OrderBag, Decimals: -1, StripComments: true}
	v, err := Check(ctx, eng, cache, "rec1", strip, "SELECT name FROM t /* c */ ORDER BY name", ref+" -- note", lim)
	if err != nil || !v.Success {
		t.Errorf("rewrite check: %+v %v", v, err)
	}
	if CacheKey("rec1", strip) == "rec1" || CacheKey("rec1", DefaultPolicy()) != "rec1" {
		t.Error("CacheKey")
	}
}

func BenchmarkCompareBag10k(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 10000
	mk := func() [][]any {
		rows := make([][]any, n)
		for i := range rows {
			rows[i] = []any{int64(i), fmt.Sprintf("name-%d", rng.IntN(500)), rng.Float64() * 1000, nil}
		}
		return rows
	}
	pred := &Result{Columns: []string{"a", "b", "c", "d"}, Rows: mk()}
	ref := &Result{Columns: pred.Columns, Rows: slicesClone(pred.Rows)}
	rng.Shuffle(n, func(i, j int) { ref.Rows[i], ref.Rows[j] = ref.Rows[j], ref.Rows[i] })
	p := DefaultPolicy()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if ok, reason := Compare(p, pred, ref); !ok {
			b.Fatal(reason)
		}
	}
}

func slicesClone(rows [][]any) [][]any { return append([][]any(nil), rows...) }

// TestCompareBag10k checks a large reversed bag and one changed row; its
// speed is measured by BenchmarkCompareBag10k, not here.
func TestCompareBag10k(t *testing.T) {
	rows := make([][]any, 10000)
	for i := range rows {
		rows[i] = []any{float64(i % 100), fmt.Sprint(i % 7), int64(i)}
	}
	ref := &Result{Columns: []string{"a", "b", "c"}, Rows: rows}
	pred := &Result{Columns: ref.Columns, Rows: append([][]any(nil), rows...)}
	for i, j := 0, len(pred.Rows)-1; i < j; i, j = i+1, j-1 {
		pred.Rows[i], pred.Rows[j] = pred.Rows[j], pred.Rows[i]
	}
	ok, reason := Compare(DefaultPolicy(), pred, ref)
	if !ok {
		t.Fatal(reason)
	}
	pred.Rows[5] = []any{1.5, "x", int64(5)}
	if ok, _ := Compare(DefaultPolicy(), pred, ref); ok {
		t.Fatal("a changed row was not seen")
	}
}

// TestNormalizeSQLFoldsASCIIOnly: SQLite folds the case of ASCII letters
// only, so a Unicode look-alike must not normalise to the ASCII name (the
// verifier would then reuse the reference's result without running a
// prediction that fails).
func TestNormalizeSQLFoldsASCIIOnly(t *testing.T) {
	if a, b := NormalizeSQL("SELECT \u212A FROM t"), NormalizeSQL("SELECT k FROM t"); a == b {
		t.Errorf("the Kelvin sign normalises like k: %q", a)
	}
	if NormalizeSQL("SELECT K FROM T") != NormalizeSQL("select k from t") {
		t.Error("ASCII case is not folded")
	}
	p := DefaultPolicy()
	p.StripDistinct = true
	if got := p.Rewrite("SELECT DI\u017fTINCT x FROM t"); !strings.Contains(got, "DI\u017fTINCT") {
		t.Errorf("a long s made DISTINCT: %q", got)
	}
}

// TestCompareDatesAndJSON covers DateOnly and CanonicalJSON, the BIRD-Interact
// PostgreSQL normalisations: dates and timestamps as YYYY-MM-DD, JSON object and
// array text as sorted-key JSON, with numbers inside rounded like reals.
func TestCompareDatesAndJSON(t *testing.T) {
	bird := Policy{Order: OrderSet, Decimals: 2, DateOnly: true, CanonicalJSON: true, EmptyFails: true}
	plain := Policy{Order: OrderSet, Decimals: 2}
	dates := Policy{Order: OrderSet, Decimals: -1, DateOnly: true}
	jsonOnly := Policy{Order: OrderBag, Decimals: -1, CanonicalJSON: true}
	cases := []struct {
		name      string
		p         Policy
		pred, ref *Result
		ok        bool
	}{
		{"timestamp equals its date", bird, res(1, row("2024-03-01 14:05:00")), res(1, row("2024-03-01")), true},
		{"timestamps of one day", bird, res(1, row("2024-03-01 00:00:00")), res(1, row("2024-03-01 23:59:59.999999")), true},
		{"timestamptz", bird, res(1, row("2024-03-01 14:05:00+01")), res(1, row("2024-03-01T09:00:00Z")), true},
		{"timestamptz with minutes", bird, res(1, row("2024-03-01 14:05:00.5+05:30")), res(1, row("2024-03-01")), true},
		{"different days", bird, res(1, row("2024-03-01 14:05:00")), res(1, row("2024-03-02")), false},
		{"time.Time", bird, res(1, row(time.Date(2024, 3, 1, 14, 5, 0, 0, time.UTC))), res(1, row("2024-03-01")), true},
		{"without DateOnly timestamps differ", plain, res(1, row("2024-03-01 14:05:00")), res(1, row("2024-03-01")), false},
		{"a date and words is text", dates, res(1, row("2024-03-01 was a Friday")), res(1, row("2024-03-01")), false},
		{"a month 13 is text", dates, res(1, row("2024-13-01 10:00")), res(1, row("2024-13-01")), false},
		{"a time alone is text", dates, res(1, row("14:05:00")), res(1, row("14:05")), false},
		{"timestamps collapse under set", bird, res(1, row("2024-03-01 10:00"), row("2024-03-01 11:00")), res(1, row("2024-03-01")), true},
		{"JSON key order", bird, res(1, row(`{"b": 1, "a": {"y": [1, 2], "x": null}}`)), res(1, row(`{"a":{"x":null,"y":[1,2]},"b":1}`)), true},
		{"JSON whitespace", bird, res(1, row(" [1,\n 2] ")), res(1, row("[1, 2]")), true},
		{"JSON numbers rounded", bird, res(1, row(`{"v": 1.004}`)), res(1, row(`{"v": 1.0}`)), true},
		{"JSON numbers by value", jsonOnly, res(1, row(`{"v": 1.50}`)), res(1, row(`{"v": 15e-1}`)), true},
		{"JSON values differ", bird, res(1, row(`{"a": 1}`)), res(1, row(`{"a": 2}`)), false},
		{"JSON strings exact", bird, res(1, row(`{"a": "X"}`)), res(1, row(`{"a": "x"}`)), false},
		{"JSON array order matters", bird, res(1, row(`[1, 2]`)), res(1, row(`[2, 1]`)), false},
		{"JSON scalar text stays text", bird, res(1, row(`"a"`)), res(1, row(`"a" `)), false},
		{"invalid JSON stays text", bird, res(1, row(`{a: 1}`)), res(1, row(`{a:1}`)), false},
		{"two JSON values stay text", bird, res(1, row(`[1] [2]`)), res(1, row(`[1][2]`)), false},
		{"PostgreSQL array literal stays text", bird, res(1, row(`{1,2}`)), res(1, row(`{1, 2}`)), false},
		{"without CanonicalJSON key order matters", plain, res(1, row(`{"b":1,"a":2}`)), res(1, row(`{"a":2,"b":1}`)), false},
		{"JSON is not a number", bird, res(1, row(`[1]`)), res(1, row(int64(1))), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := Compare(tc.p, tc.pred, tc.ref)
			if ok != tc.ok {
				t.Fatalf("ok = %v (%s), want %v", ok, reason, tc.ok)
			}
			if ok2, _ := Compare(tc.p, tc.ref, tc.pred); ok2 != ok {
				t.Errorf("not symmetric")
			}
		})
	}
}

func TestDateOf(t *testing.T) {
	for _, s := range []string{"2024-03-01", "2024-03-01 14:05", "2024-03-01T14:05:09", "2024-03-01 14:05:09.123456",
		"2024-03-01 14:05:09-08", "2024-03-01 14:05:09+0530", "2024-03-01 14:05:09+00:53:28", "2024-03-01 14:05:09Z"} {
		if got, ok := DateOf(s); !ok || got != "2024-03-01" {
			t.Errorf("DateOf(%q) = %q, %v; want 2024-03-01", s, got, ok)
		}
	}
	for _, s := range []string{"2024-3-1", "2024-03-01x", "2024-03-01 14", "2024-03-01 14:05:09 BC", "2024-03-01 14:05:09+1",
		"2024-03-00", "2024-03-32", "20240301", "", "abcd-ef-gh", "2024-03-01 14:05:09.", "14:05:09"} {
		if got, ok := DateOf(s); ok {
			t.Errorf("DateOf(%q) = %q, want not a date", s, got)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	cases := []struct {
		in       string
		decimals int
		want     string // "" means not JSON
	}{
		{`{"b": 1, "a": [true, null, "x"]}`, -1, `{"a":[true,null,"x"],"b":1}`},
		{`{"v": 2.675, "w": 10, "x": 1e2, "y": -0.001, "z": -0}`, 2, `{"v":2.68,"w":10,"x":100,"y":0,"z":0}`},
		{`{"v": 2.675}`, -1, `{"v":2.675}`},
		{`[12345678901234567890, 1e999]`, 2, `[12345678901234567890,1e999]`},
		{`{"<a>": "&"}`, -1, `{"<a>":"&"}`},
		{`{"a": 1, "a": 2}`, -1, `{"a":2}`},
		{"\t[ ]\n", -1, `[]`},
		{`{}`, -1, `{}`},
		{`"text"`, -1, ""}, {`12`, -1, ""}, {`null`, -1, ""}, {`{`, -1, ""}, {`[1]x`, -1, ""}, {"[\"\xff\"]", -1, ""}, {``, -1, ""},
	}
	for _, tc := range cases {
		got, ok := CanonicalJSON(tc.in, tc.decimals)
		if ok != (tc.want != "") || got != tc.want {
			t.Errorf("CanonicalJSON(%q, %d) = %q, %v; want %q", tc.in, tc.decimals, got, ok, tc.want)
		}
	}
}

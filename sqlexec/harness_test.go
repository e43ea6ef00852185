package sqlexec

import (
	"strings"
	"testing"
)

// TestHarnessRewrite: the harness's textual rewrites, quirks included
// (eval_bird_interact.py: remove_comments, remove_distinct, remove_round).
func TestHarnessRewrite(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"SELECT 1 -- tail", "SELECT 1 -- tail"},                     // no newline after: survives
		{"-- a\nSELECT 1", "SELECT 1"},                               // removed, then stripped
		{"SELECT '--x' || a\nFROM t", "SELECT '\nFROM t"},            // inside a string too
		{"SELECT /* x */ a", "SELECT  a"},                            // block removed, no space left
		{"SELECT DISTINCT a", "SELECT a"},                            // split on spaces
		{"SELECT DISTINCT\na", "SELECT DISTINCT\na"},                 // newline: kept
		{"SELECT COUNT(DISTINCT a)", "SELECT COUNT(DISTINCT a)"},     // one piece: kept
		{"SELECT COUNT( distinct a)", "SELECT COUNT( a)"},            // its own piece: removed
		{"SELECT ROUND(a - b, 2) * 100", "SELECT a - b * 100"},       // splice, no parentheses
		{"SELECT myround(x, 2)", "SELECT myx"},                       // inside identifiers
		{"SELECT 'ROUND(y)'", "SELECT 'y'"},                          // inside strings
		{"SELECT ROUND(ROUND(a, 1), 2)", "SELECT a"},                 // nested
		{"SELECT ROUND(a, 2), ROUND(", "SELECT a, ROUND("},           // unbalanced: stops
		{"SELECT ROUND(, ROUND(b, 1)", "SELECT ROUND(, ROUND(b, 1)"}, // the first call unmatched: nothing more
		{"SELECT RO ROUND(UND(a))", "SELECT RO UND(a)"},              // a splice can meet text before it
		{"SELECT ROUND ROUND((a), 1)", "SELECT a"},                   // ... and form a new call there
	} {
		got, err := HarnessRewrite(c.in)
		if err != nil || got != c.want {
			t.Errorf("HarnessRewrite(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// TestHarnessRewriteBounded: texts built to make remove_round quadratic
// (10,000 nested calls) or to loop it (unbalanced parentheses) finish
// within the work bound (scan steps, linear in the text), with a result
// or ErrRoundBound, never hanging.
func TestHarnessRewriteBounded(t *testing.T) {
	nested := "SELECT " + strings.Repeat("ROUND(", 10000) + "x" + strings.Repeat(", 2)", 10000)
	unbalanced := "SELECT " + strings.Repeat("ROUND((", 20000)
	many := "SELECT " + strings.Repeat("ROUND(a, 2) + ", 20000) + "1"
	for name, sql := range map[string]string{"nested": nested, "unbalanced": unbalanced, "many": many} {
		out, err := HarnessRewrite(sql)
		// The work, not the time: a busy machine must not fail this.
		_, work, _ := harnessRemoveRoundWork(harnessRemoveDistinct(harnessRemoveComments(sql)))
		if bound := harnessRoundBudget(len(sql)) + 2*len(sql); work > bound {
			t.Errorf("%s: %d scan steps, over the bound %d", name, work, bound)
		}
		if err == nil && len(out) > len(sql) {
			t.Errorf("%s: the rewrite grew the text", name)
		}
		if name == "unbalanced" && (err != nil || out != sql) {
			t.Errorf("unbalanced: %v, changed %v", err, out != sql)
		}
	}
	if out, err := HarnessRewrite("SELECT " + strings.Repeat("ROUND(", 100) + "x" + strings.Repeat(", 2)", 100)); err != nil || out != "SELECT x" {
		t.Errorf("100 nested calls: %q, %v", out, err)
	}
}

// TestPyNumbers: Python's round, Decimal quantize and float repr.
func TestPyNumbers(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want string
	}{{2.675, "2.67"}, {0.125, "0.12"}, {0.375, "0.38"}, {1.005, "1.0"}, {-0.001, "-0.0"}, {123456.0, "123456.0"}} {
		if got := PyFloatRepr(PyRound2(c.in)); got != c.want {
			t.Errorf("repr(round(%v, 2)) = %s, want %s", c.in, got, c.want)
		}
	}
	if PyFloatRepr(1e16) != "1e+16" || PyFloatRepr(1e-5) != "1e-05" || PyFloatRepr(1e15) != "1000000000000000.0" {
		t.Error("float repr's notation differs from Python's")
	}
	if PyDecimal("2.675").Key != PyDecimal("2.68").Key || PyDecimal("7.53").Key == PyFloat(7.53).Key || PyDecimal("7.50").Key != PyFloat(7.5).Key {
		t.Error("Decimal/float keys do not follow Python's equality")
	}
	if PyDecimal("1e30").Err == "" || PyDecimal("Infinity").Err == "" || !PyDecimal("NaN").NaN {
		t.Error("quantize's InvalidOperation or NaN not modelled")
	}
}

// TestCacheKeyHarness: the harness's reference result is kept apart.
func TestCacheKeyHarness(t *testing.T) {
	p := Policy{StripDistinct: true, BirdInteract: true}
	h := p
	h.Harness = true
	if CacheKey("r", p) == CacheKey("r", h) {
		t.Error("Harness does not change the cache key")
	}
}

// TestSoundFloatNumericEqual: the sound variant keeps a float and a numeric
// of the same value after rounding equal (the harness does not).
func TestSoundFloatNumericEqual(t *testing.T) {
	p := Policy{Order: OrderSet, Decimals: 2, EmptyFails: true, BirdInteract: true}
	if ok, why := Compare(p, &Result{Columns: []string{"a"}, Rows: [][]any{{7.531}}}, &Result{Columns: []string{"a"}, Rows: [][]any{{7.53}}}); !ok {
		t.Error(why)
	}
	if ok, _ := compareHarness(false, &Result{Rows: [][]any{{PyFloat(7.53)}}}, &Result{Rows: [][]any{{PyDecimal("7.53")}}}); ok {
		t.Error("the harness's float 7.53 equals Decimal('7.53')")
	}
}

package sqlexec

// This file is Policy.Harness: BIRD-Interact's default test compared
// exactly as its harness does, quirks included (COMPARISON_HARNESS). Every
// rule cites the harness file and function it reimplements, at commit
// 451fe2c of github.com/bird-bench/BIRD-Interact:
//
//   - test_case_default (evaluation/src/eval_bird_interact.py) rewrites
//     both texts with remove_comments, remove_distinct and remove_round
//     (HarnessRewrite), then calls ex_base;
//   - perform_query_on_postgresql_databases
//     (evaluation/src/postgresql_utils.py) runs a text with
//     statement_timeout 60s, or 15s when its upper-cased text contains
//     "WITH RECURSIVE" (HarnessStatementTimeout), and keeps the first
//     10,000 rows only when the stripped, lower-cased text starts with
//     "select" or "with" (HarnessTruncates), else all of them;
//   - psycopg2 2.9 turns each value into a Python object and
//     preprocess_results / process_decimals_recursive (eval_bird_interact.py)
//     normalise it: the engine does both and returns the outcome as a
//     PyValue per cell (sqlexec/postgres/harness.go), whose Key is equal
//     for two values exactly when Python's == (and hash) are;
//   - ex_base (eval_bird_interact.py): an error or a timeout on either
//     side is 0, either side empty (after preprocessing) is 0, and the
//     rows compare as lists of tuples when conditions["order"] is true,
//     else as set(rows) (compareHarness).
//
// Deviations, all towards failing (never a false pass), each bounded by
// what the policy controls: remove_round gives up on a text that would cost
// it more than a work bound (a text built to loop it quadratically; the
// verdict then fails); the server's own limits still apply (its row cap to
// a result the harness would fetch whole, its byte and memory caps); a
// reference and a prediction that are the same text up to whitespace,
// comments and case share one execution, as in the sound variant. SQLite
// records compare under the sound variant: BIRD-Interact's harness is
// PostgreSQL's.

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// PyValue is one result cell as BIRD-Interact's harness holds it after
// preprocess_results: psycopg2's Python object, normalised (Decimal
// quantized, float rounded, date as 'YYYY-MM-DD', list and dict as
// json.dumps text). Engines return it under Limits.Harness.
type PyValue struct {
	// Key is equal for two cells exactly when Python's == is (and so
	// their hashes): a tag and a canonical form, e.g. "#753/100" for any
	// number of that exact value (int, bool, float and Decimal alike),
	// "S..." for a str, "N" for None.
	Key string
	// Err is set when preprocessing the value raises (the harness's test
	// then fails), e.g. "TypeError: Object of type Decimal is not JSON
	// serializable".
	Err string
	// NaN marks a float or Decimal NaN, which equals nothing (not even
	// itself: no two NaN objects of the two results are the same object).
	NaN bool
	// Unhashable marks a value set(rows) cannot hash (TypeError). None
	// of psycopg2's values after preprocessing is: lists and dicts are
	// dumped to str, and a read-only memoryview (bytea) hashes as bytes.
	Unhashable bool
}

// String shows the value as the harness's Python would, roughly.
func (v PyValue) String() string {
	switch {
	case v.Err != "":
		return "<" + v.Err + ">"
	case v.NaN:
		return "nan"
	case v.Key == "N":
		return "None"
	case v.Key == "":
		return "?"
	}
	s := v.Key[1:]
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	switch v.Key[0] {
	case 'S':
		return "'" + s + "'"
	case 'B':
		return fmt.Sprintf("memoryview(%q)", s)
	case 't', 'z':
		return "time(" + s + "us)"
	case 'd':
		return "timedelta(" + s + "us)"
	}
	return s
}

// Key tags of PyValue.Key.
const (
	pyNone  = "N"
	pyNum   = "#" // a number: its exact value as a big.Rat string, or inf / -inf
	pyStr   = "S"
	pyBytes = "B" // a memoryview's bytes
)

// harnessRows is the number of rows perform_query_on_postgresql_databases
// keeps of a select/with text (MAX_ROWS).
const HarnessRows = 10000

// Statement limits of perform_query_on_postgresql_databases.
const (
	// DefaultHarnessTimeout is its SET statement_timeout = '60s'.
	DefaultHarnessTimeout = 60 * time.Second
	// HarnessRecursiveTimeout is its '15s' for a text containing WITH RECURSIVE.
	HarnessRecursiveTimeout = 15 * time.Second
)

// HarnessTruncates reports whether the harness keeps only the first
// HarnessRows rows of sql's result: its stripped, lower-cased text starts
// with "select" or "with" (perform_query_on_postgresql_databases); any
// other text's rows are all fetched (fetchall).
func HarnessTruncates(sql string) bool {
	s := strings.TrimFunc(sql, pyIsSpace)
	return hasFoldPrefix(s, "select") || hasFoldPrefix(s, "with")
}

// hasFoldPrefix reports whether s starts with the lower-case ASCII word w,
// in any case. (Python's lower() also maps 'İ' to "i̇", which is not "i":
// only ASCII letters can spell the word.)
func hasFoldPrefix(s, w string) bool {
	if len(s) < len(w) {
		return false
	}
	for i := 0; i < len(w); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}

// HarnessStatementTimeout is the statement limit the harness sets for sql
// (perform_query_on_postgresql_databases): HarnessRecursiveTimeout when
// its upper-cased text contains "WITH RECURSIVE" (its SET
// max_recursive_iterations fails, is rolled back, and the 15 s are set),
// else lim.HarnessTimeout (0: DefaultHarnessTimeout).
func HarnessStatementTimeout(sql string, lim Limits) time.Duration {
	if strings.Contains(strings.ToUpper(sql), "WITH RECURSIVE") {
		return HarnessRecursiveTimeout
	}
	if lim.HarnessTimeout > 0 {
		return lim.HarnessTimeout
	}
	return DefaultHarnessTimeout
}

// harnessLimits are lim as a harness execution of sql uses them: harness
// cells and truncation (Limits.Harness), the harness's statement limit
// instead of lim.Timeout; the row, byte and memory caps unchanged.
func harnessLimits(sql string, lim Limits) Limits {
	lim.Timeout = HarnessStatementTimeout(sql, lim)
	lim.Harness = true
	return lim
}

// The regular expressions of remove_comments (eval_bird_interact.py). Go's
// RE2 picks the same leftmost-first matches as Python's backtracking for
// these patterns; Python's \s (str.isspace in a str pattern) is spelled out,
// since Go's \s is ASCII only and lacks \v.
const pySpaceClass = `[\t\n\v\f\r \x{1c}-\x{1f}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]`

var (
	reBlockComment = regexp.MustCompile(`(?s)/\*.*?\*/`)
	// '.' matches '\r' but not '\n', in Python as in Go: a "--" with no
	// line end after it survives.
	reLineComment = regexp.MustCompile(`--.*?(\r\n|\r|\n)`)
	reBlankLines  = regexp.MustCompile(`\n` + pySpaceClass + `*\n+`)
)

// pyIsSpace is Python's str.isspace for one character (what str.strip()
// strips and a str pattern's \s matches).
func pyIsSpace(r rune) bool {
	switch {
	case r >= '\t' && r <= '\r', r >= 0x1c && r <= 0x20, r == 0x85, r == 0xa0, r == 0x1680,
		r >= 0x2000 && r <= 0x200a, r == 0x2028, r == 0x2029, r == 0x202f, r == 0x205f, r == 0x3000:
		return true
	}
	return false
}

// harnessRemoveComments is remove_comments (eval_bird_interact.py): block
// comments /* ... */ removed (non-greedy, across lines), then "--" up to a
// line end removed keeping the line end, then runs of blank lines
// collapsed into one "\n", then the text stripped. It is textual: a
// comment marker inside a string literal starts a comment too, and a "--"
// comment on the last line (no line end after it) stays.
func harnessRemoveComments(sql string) string {
	s := reBlockComment.ReplaceAllLiteralString(sql, "")
	s = reLineComment.ReplaceAllString(s, "${1}")
	s = reBlankLines.ReplaceAllLiteralString(s, "\n")
	return strings.TrimFunc(s, pyIsSpace)
}

// harnessRemoveDistinct is remove_distinct (eval_bird_interact.py): the
// text split on single spaces, every piece that is "distinct" in any
// case dropped, the rest joined with single spaces. So "SELECT DISTINCT x"
// and "COUNT( DISTINCT x)" lose it, "SELECT DISTINCT\nx" and
// "COUNT(DISTINCT x)" keep it, and "DISTINCT ON (a)" loses it (the rest is
// a syntax error).
func harnessRemoveDistinct(sql string) string {
	parts := strings.Split(sql, " ")
	out := parts[:0]
	for _, p := range parts {
		if len(p) == len("distinct") && hasFoldPrefix(p, "distinct") {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, " ")
}

// ErrRoundBound reports a text on which the harness's remove_round would
// cost more than avtgym lets it (harnessRoundBudget).
var ErrRoundBound = errors.New("the harness's remove_round would take too long on this text (more than avtgym's work bound); the check fails")

// harnessRoundBudget bounds remove_round's work, in bytes visited: the
// harness's loop rescans the text once per ROUND call it removes, which a
// text of nested calls makes quadratic (25,000 nested calls in 256 KiB of
// SQL: billions of steps). Real SQL has a few calls and costs a few scans.
func harnessRoundBudget(n int) int { return 64*n + 1<<24 }

// harnessRemoveRound is remove_round_functions (eval_bird_interact.py),
// applied by remove_round: while the text has a match of ROUND\s*\( (any
// case; anywhere: "myround(" and string literals included), the first
// match's call is replaced by its first argument, stripped: the text up to
// the first ',' or ')' at the call's own depth (parentheses counted as
// bytes, quoting ignored); the call ends at its matching ')'. The
// parentheses around the call go with it, so that ROUND(a-b, 2)*100
// becomes a-b*100. A call without a matching ')' stops the loop, leaving
// it and any later call as they are. The first match is searched from the
// text's start after every splice, as the harness does; since the text
// before a splice had no match, the search resumes just before it (a match
// can begin at most "ROUND" and its white space before the splice).
func harnessRemoveRound(sql string) (string, error) {
	out, _, err := harnessRemoveRoundWork(sql)
	return out, err
}

// harnessRemoveRoundWork is harnessRemoveRound, also returning the work it
// did in scan steps (at most harnessRoundBudget of the text's length plus
// one scan of it: the bound its tests check, rather than a time).
func harnessRemoveRoundWork(sql string) (string, int, error) {
	b := []byte(sql)
	total := harnessRoundBudget(len(b))
	budget := total
	from := 0
	for {
		start, open := findRound(b, from, &budget)
		if start < 0 {
			return string(b), total - budget, nil
		}
		argEnd, closeAt := -1, -1
		depth := 0
		for i := open; i < len(b); i++ {
			switch b[i] {
			case '(':
				depth++
			case ')':
				depth--
				if depth == 0 && argEnd < 0 {
					argEnd = i
				}
			case ',':
				if depth == 1 && argEnd < 0 {
					argEnd = i
				}
			}
			if depth == 0 {
				closeAt = i
				break
			}
		}
		if closeAt < 0 {
			return string(b), total - budget + (len(b) - open), nil
		}
		budget -= 2 * (len(b) - start) // the scans, and the splice's copy
		if budget < 0 {
			return "", total - budget, ErrRoundBound
		}
		arg := []byte(strings.TrimFunc(string(b[open+1:argEnd]), pyIsSpace))
		n := copy(b[start:], arg)
		n += copy(b[start+n:], b[closeAt+1:])
		b = b[:start+n]
		from = resumeAt(b, start)
	}
}

// findRound returns the start of the first match of ROUND\s*\( at or after
// from, and the index of its '(' (-1, -1: none).
func findRound(b []byte, from int, budget *int) (int, int) {
	for i := from; i+5 < len(b); i++ {
		*budget--
		if b[i]|0x20 != 'r' || !hasFoldPrefix(string(b[i:i+5]), "round") {
			continue
		}
		j := i + 5
		for j < len(b) {
			r, n := utf8.DecodeRune(b[j:])
			if !pyIsSpace(r) {
				break
			}
			j += n
		}
		if j < len(b) && b[j] == '(' {
			return i, j
		}
	}
	return -1, -1
}

// resumeAt is where the search for the next match may start after a
// splice at start: before any white space and up to five bytes ("ROUND")
// before it.
func resumeAt(b []byte, start int) int {
	i := start
	for i > 0 {
		r, n := utf8.DecodeLastRune(b[:i])
		if !pyIsSpace(r) {
			break
		}
		i -= n
	}
	return max(i-5, 0)
}

// HarnessRewrite is test_case_default's rewrite of one SQL text
// (eval_bird_interact.py): remove_comments, then remove_distinct, then
// remove_round. The error is ErrRoundBound.
func HarnessRewrite(sql string) (string, error) {
	return harnessRemoveRound(harnessRemoveDistinct(harnessRemoveComments(sql)))
}

// pyCell is a cell of an engine that does not convert as the harness does
// (Limits.Harness ignored): its Go value read as the Python object
// psycopg2 would give for it (int64: int; float64: float, rounded; string:
// str; []byte: memoryview; nil: None). A PyValue is itself.
func pyCell(v any) PyValue {
	switch x := v.(type) {
	case PyValue:
		return x
	case nil:
		return PyValue{Key: pyNone}
	case float64:
		return PyFloat(x)
	case string:
		return PyValue{Key: pyStr + x}
	case []byte:
		return PyValue{Key: pyBytes + string(x)}
	}
	c := normCell(v, norm{decimals: -1})
	switch c.kind {
	case ckInt:
		return PyValue{Key: fmt.Sprintf("%s%d", pyNum, c.i)}
	case ckReal:
		return PyFloat(c.f)
	case ckText:
		return PyValue{Key: pyStr + c.s}
	case ckBlob:
		return PyValue{Key: pyBytes + c.s}
	}
	return PyValue{Key: pyNone}
}

// harnessSide is one side's rows, preprocessed: each row's key, and whether
// a row holds a NaN (such a row equals no row).
type harnessSide struct {
	keys       []string
	nan        []bool
	unhashable bool
}

// preprocessSide is preprocess_results over r (the engine did the
// per-value work): the first cell whose preprocessing raised fails the
// side.
func preprocessSide(r *Result) (harnessSide, error) {
	var s harnessSide
	if r == nil {
		return s, nil
	}
	var b strings.Builder
	for _, row := range r.Rows {
		b.Reset()
		nan := false
		for _, v := range row {
			c := pyCell(v)
			if c.Err != "" {
				return s, errors.New(c.Err)
			}
			nan = nan || c.NaN
			s.unhashable = s.unhashable || c.Unhashable
			fmt.Fprintf(&b, "%d:", len(c.Key))
			b.WriteString(c.Key)
		}
		fmt.Fprintf(&b, "/%d", len(row))
		s.keys = append(s.keys, b.String())
		s.nan = append(s.nan, nan)
	}
	return s, nil
}

// compareHarness is ex_base's comparison after execution
// (eval_bird_interact.py): preprocess_results on the prediction, then on
// the reference (an exception fails the test); either side empty fails;
// with ordered (conditions["order"]) the lists of row tuples must be equal,
// else set(rows) must be (which raises TypeError on a memoryview).
func compareHarness(ordered bool, pred, ref *Result) (bool, string) {
	ps, err := preprocessSide(pred)
	if err != nil {
		return false, "the harness would raise " + err.Error() + " preprocessing the prediction's result"
	}
	rs, err := preprocessSide(ref)
	if err != nil {
		return false, "the harness would raise " + err.Error() + " preprocessing the reference's result"
	}
	switch {
	case len(ps.keys) == 0 && len(rs.keys) == 0:
		return false, "empty result (both the prediction and the reference returned no rows)"
	case len(ps.keys) == 0:
		return false, "empty result (the prediction returned no rows)"
	case len(rs.keys) == 0:
		return false, "empty result (the reference returned no rows)"
	}
	if ordered {
		if len(ps.keys) != len(rs.keys) {
			return false, fmt.Sprintf("row count %d != %d (prediction vs reference, compared as lists)", len(ps.keys), len(rs.keys))
		}
		for i := range ps.keys {
			if ps.nan[i] || rs.nan[i] || ps.keys[i] != rs.keys[i] {
				return false, fmt.Sprintf("row %d differs (compared as lists): prediction %s, reference %s", i+1, fmtPyRow(pred.Rows[i]), fmtPyRow(ref.Rows[i]))
			}
		}
		return true, ""
	}
	if ps.unhashable || rs.unhashable {
		return false, "the harness would raise TypeError: an unhashable value building set(rows)"
	}
	return setsEqual(ps, rs, pred, ref)
}

// setsEqual is set(pred) == set(ref) over preprocessed rows.
func setsEqual(ps, rs harnessSide, pred, ref *Result) (bool, string) {
	for i, n := range ps.nan {
		if n {
			return false, fmt.Sprintf("the prediction's row %s holds a NaN, which equals nothing", fmtPyRow(pred.Rows[i]))
		}
	}
	for i, n := range rs.nan {
		if n {
			return false, fmt.Sprintf("the reference's row %s holds a NaN, which equals nothing", fmtPyRow(ref.Rows[i]))
		}
	}
	pset := make(map[string]int, len(ps.keys))
	for i, k := range ps.keys {
		if _, ok := pset[k]; !ok {
			pset[k] = i
		}
	}
	rset := make(map[string]int, len(rs.keys))
	for i, k := range rs.keys {
		if _, ok := rset[k]; !ok {
			rset[k] = i
		}
	}
	for k, i := range pset {
		if _, ok := rset[k]; !ok {
			return false, fmt.Sprintf("the prediction's row %s is not in the reference's set of rows", fmtPyRow(pred.Rows[i]))
		}
	}
	for k, i := range rset {
		if _, ok := pset[k]; !ok {
			return false, fmt.Sprintf("the reference's row %s is not in the prediction's set of rows", fmtPyRow(ref.Rows[i]))
		}
	}
	return true, ""
}

func fmtPyRow(row []any) string {
	parts := make([]string, len(row))
	for i, v := range row {
		parts[i] = pyCell(v).String()
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

package pgparse

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pgparser "github.com/pganalyze/pg_query_go/v6/parser"
)

// deep are texts that once crashed the process inside libpg_query (30,000
// chained operators overflow its C stack while it writes the tree out), or
// that pg_query_go's protobuf decoding refuses; each must be refused here,
// before the parser, as a *DepthError.
func deep() map[string]string {
	r := strings.Repeat
	return map[string]string{
		"30,000 additions (issue 25: SIGSEGV)":           "SELECT 1" + r("+1", 30000),
		"30,000 additions beside a string literal":       "SELECT 1" + r("+1", 30000) + ", 'lo_'",
		"20,000 additions (proto recursion limit)":       "SELECT 1" + r("+1", 20000),
		"30,000 concatenations":                          "SELECT 'a'" + r("||'a'", 30000),
		"30,000 casts":                                   "SELECT 1" + r("::int", 30000),
		"30,000 joins":                                   "SELECT 1 FROM a" + r(" JOIN a ON true", 30000),
		"30,000 COLLATE":                                 "SELECT 'a'" + r(` COLLATE "C"`, 30000),
		"30,000 IS TRUE":                                 "SELECT true" + r(" IS TRUE", 30000),
		"30,000 NOT":                                     "SELECT " + r("NOT ", 30000) + "true",
		"30,000 unions":                                  "SELECT 1" + r(" UNION SELECT 1", 30000),
		"5,000 nested subqueries":                        "SELECT " + r("(SELECT ", 5000) + "1" + r(")", 5000),
		"5,000 nested CASE":                              "SELECT " + r("CASE WHEN true THEN ", 5000) + "1" + r(" END", 5000),
		"5,000 nested ARRAY":                             "SELECT " + r("ARRAY[", 5000) + "1" + r("]", 5000),
		"a chain of 600 inside 600 parentheses":          "SELECT " + r("(", 600) + "1" + r("+1", 600) + r(")", 600),
		"additions in a Management statement":            "UPDATE t SET x = 1" + r("+1", 30000),
		"additions after a harmless statement":           "SELECT 1; SELECT 1" + r("+1", 30000),
		"user-defined operators":                         "SELECT 1" + r(" @-@ 1", 30000),
		"a chain behind an unclosed CASE in parentheses": "SELECT (CASE WHEN 1" + r("+1", 2000) + ")",
	}
}

func TestDeepTextsAreRefusedBeforeTheParser(t *testing.T) {
	for name, text := range deep() {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(text)
			var de *DepthError
			if !errors.As(err, &de) {
				t.Fatalf("Parse: %v, want a *DepthError", err)
			}
			if de.Limit != MaxDepth || de.Depth <= MaxDepth || de.Offset <= 0 || de.Offset >= len(text) {
				t.Errorf("DepthError %+v: want the limit %d, a depth past it and an offset inside the text", de, MaxDepth)
			}
			if !strings.Contains(de.Error(), "nests too deeply") {
				t.Errorf("message %q", de.Error())
			}
		})
	}
}

func TestDepthMeasure(t *testing.T) {
	r := strings.Repeat
	for _, tc := range []struct {
		text string
		want int // the depth CheckDepth measures
	}{
		{"SELECT 1", 1},
		{"SELECT a, b, c FROM t", 1},
		{"SELECT a + b", 2},
		{"SELECT a + b + c", 3},
		{"SELECT a + b, c + d", 2},
		{"SELECT (a + b)", 3},
		{"SELECT (a + b) + c", 3},
		{"SELECT 1 WHERE a = 1 AND b = 2 OR c = 3", 2},
		{"SELECT CASE WHEN a = 1 THEN b + c ELSE d END", 3},
		{"SELECT CASE WHEN x THEN CASE WHEN y THEN 1 END END", 3},
		{"SELECT 'a + b + c', $$ ( ( ( $$ -- + + + (", 1},
		{"SELECT x::int::text", 3},
		{"SELECT a IS NOT NULL", 3},
		{"SELECT 1 UNION SELECT 2 UNION SELECT 3", 3},
		{"SELECT ARRAY[ARRAY[1, 2], ARRAY[3, 4]]", 3},
		{"SELECT 1" + r("+1", 999), 1000},
		// A closing bracket ends the chains inside it.
		{"SELECT (1" + r("+1", 500) + ") + (1" + r("+1", 500) + ")", 503},
		// END outside a CASE (END; is COMMIT) and a stray ) do not unbalance it.
		{"END; SELECT ) 1 + 1", 2},
	} {
		err := CheckDepth(tc.text, tc.want)
		if err != nil {
			t.Errorf("%.60q: %v, want depth %d", tc.text, err, tc.want)
			continue
		}
		var de *DepthError
		if err := CheckDepth(tc.text, tc.want-1); !errors.As(err, &de) || de.Depth != tc.want {
			t.Errorf("%.60q at limit %d: %v, want a DepthError at depth %d", tc.text, tc.want-1, err, tc.want)
		}
	}
}

// TestAtTheLimitTheParserIsSafe: a text of depth MaxDepth of each shape
// parses (the limit is far below what overflows the parser).
func TestAtTheLimitTheParserIsSafe(t *testing.T) {
	r := strings.Repeat
	n := MaxDepth - 1
	for _, text := range []string{
		"SELECT 1" + r("+1", n),
		"SELECT 1" + r("::int", n),
		"SELECT " + r("(", n) + "1" + r(")", n),
		"SELECT 1 FROM a" + r(" JOIN a ON true", n/2),
		"SELECT " + r("CASE WHEN true THEN ", n) + "1" + r(" END", n),
	} {
		if _, err := Parse(text); err != nil {
			t.Errorf("%.40q… (%d bytes): %v", text, len(text), err)
		}
	}
}

func TestParseErrorsStayTheParsers(t *testing.T) {
	for _, text := range []string{"SELEC 1", "SELECT 'unterminated", "SELECT /* unterminated"} {
		_, err := Parse(text)
		var pe *pgparser.Error
		if !errors.As(err, &pe) {
			t.Errorf("%q: %v (%T), want the parser's *parser.Error", text, err, err)
		}
	}
}

// TestRealQueriesAreFarBelowTheLimit measures every reference SQL of the
// demo corpus and of the public samples in ../shared/data (when present):
// the limit must never refuse a real query.
func TestRealQueriesAreFarBelowTheLimit(t *testing.T) {
	var sqls []string
	add := func(v any) {
		switch x := v.(type) {
		case string:
			sqls = append(sqls, x)
		case []any:
			for _, e := range x {
				if s, ok := e.(string); ok {
					sqls = append(sqls, s)
				}
			}
		}
	}
	read := func(path string, fields ...string) int {
		f, err := os.Open(path)
		if err != nil {
			return 0
		}
		defer f.Close()
		n := 0
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				continue
			}
			n++
			for _, fl := range fields {
				if ref, ok := m["reference"].(map[string]any); ok && fl == "reference.sql" {
					add(ref["sql"])
					continue
				}
				add(m[fl])
			}
		}
		return n
	}
	if read(filepath.Join("..", "..", "corpus", "demo", "records.jsonl"), "reference.sql") == 0 {
		t.Fatal("the demo corpus's records were not found")
	}
	shared := filepath.Join("..", "..", "..", "shared", "data")
	read(filepath.Join(shared, "ambrosia", "tasks_validation.jsonl"), "gold_queries")
	read(filepath.Join(shared, "birdinteract-format", "lite", "bird_interact_gt.jsonl"), "sol_sql")
	read(filepath.Join(shared, "birdinteract-format", "mini_interact_sample.jsonl"), "sol_sql")
	read(filepath.Join(shared, "tide-format", "samples.jsonl"), "anchor_sql", "post_drift_sql", "l1_alt_sql", "l2_alt_sql")
	deepest, which := 0, ""
	for _, s := range sqls {
		for d := 1; ; d++ {
			err := CheckDepth(s, d)
			var se *ScanError
			if errors.As(err, &se) {
				break
			}
			if err == nil {
				if d > deepest {
					deepest, which = d, s
				}
				break
			}
		}
	}
	t.Logf("%d SQL texts; the deepest measures %d: %.120q", len(sqls), deepest, which)
	if deepest >= 100 {
		t.Errorf("a real query measures %d (the package doc says real queries stay below 100): %.200q", deepest, which)
	}
}

// FuzzParse: no text crashes Parse (the fuzzer would report the process
// dying inside libpg_query). The seeds are the texts that crashed it.
func FuzzParse(f *testing.F) {
	for _, text := range deep() {
		f.Add(text)
	}
	f.Add("SELECT a FROM t WHERE b = 'x' AND c IN (1, 2)")
	f.Fuzz(func(t *testing.T, text string) {
		Parse(text)
		// Doubling a text's operators must not get past the check either.
		Parse(strings.ReplaceAll(text, "+", "+1+"))
	})
}

func TestPlPgSQLNestingIsBoundedByItsGrammar(t *testing.T) {
	r := strings.Repeat
	for name, body := range map[string]string{
		"100,000 nested IF":    "BEGIN " + r("IF true THEN ", 100000) + "RETURN 1;" + r(" END IF;", 100000) + " END",
		"100,000 nested LOOP":  "BEGIN " + r("LOOP ", 100000) + "RETURN 1;" + r(" END LOOP;", 100000) + " END",
		"100,000 nested BEGIN": r("BEGIN ", 100000) + "RETURN 1;" + r(" END;", 100000),
	} {
		_, err := ParsePlPgSQL("CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $x$" + body + "$x$")
		if err == nil || !strings.Contains(err.Error(), "memory exhausted") {
			t.Errorf("%s: %v, want the grammar's refusal (memory exhausted)", name, err)
		}
	}
	// A deep expression inside the body stays text (callers parse it).
	js, err := ParsePlPgSQL("CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $x$BEGIN RETURN 1" + r("+1", 30000) + "; END$x$")
	if err != nil || !strings.Contains(js, "+1+1") {
		t.Errorf("a deep expression in a body: %v, %.80q", err, js)
	}
	// A deep CREATE FUNCTION text outside the body is refused first.
	if _, err := ParsePlPgSQL("CREATE FUNCTION f() RETURNS int DEFAULT 1" + r("+1", 30000) + " LANGUAGE plpgsql AS $x$BEGIN RETURN 1; END$x$"); err == nil {
		t.Error("a deep text outside the body was not refused")
	}
}

// TestFunctionsWithoutABodyAreRefused: libpg_query aborts the process on a
// CREATE FUNCTION without a text body (an assertion; FuzzCheckStateful
// found it), whatever its language.
func TestFunctionsWithoutABodyAreRefused(t *testing.T) {
	for _, text := range []string{
		"CREATE FUNCTION f(a int) RETURNS int LANGUAGE plpgsql",
		"CREATE FUNCTION f() RETURNS int LANGUAGE sql RETURN 1",
		"CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql BEGIN ATOMIC SELECT 1; END",
		"CREATE PROCEDURE p() LANGUAGE plpgsql",
		"SELECT 1; CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql",
	} {
		_, err := ParsePlPgSQL(text)
		var nb *NoBodyError
		if !errors.As(err, &nb) {
			t.Errorf("%q: %v, want a *NoBodyError", text, err)
		}
	}
	if js, err := ParsePlPgSQL("CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$BEGIN RETURN 1; END$$"); err != nil || !strings.Contains(js, "PLpgSQL_function") {
		t.Errorf("a function with a body: %v, %.80q", err, js)
	}
}

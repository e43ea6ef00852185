package postgres

// Tests that need no server.

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"

	"avtgym/sqlexec"
)

// readScript returns a script's statements as "line: text" and each COPY's
// data.
func readScript(t *testing.T, script string) ([]string, error) {
	t.Helper()
	r := newScriptReader("s.sql", strings.NewReader(script))
	var out []string
	for {
		st, err := r.next(context.Background())
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, fmt.Sprintf("%d: %s", st.line, strings.TrimSpace(skipTrivia(st.text))))
		if st.copyIn {
			b, err := io.ReadAll(r.inCopy)
			if err != nil {
				return out, err
			}
			out = append(out, "data: "+string(b))
		}
	}
}

func TestScriptReader(t *testing.T) {
	script := "\\restrict abc\n" +
		"--\n-- PostgreSQL database dump\n--\n\n" +
		"SET statement_timeout = 0;\nSET lock_timeout = 0;\n" +
		"SELECT pg_catalog.set_config('search_path', '', false);\n\n" +
		"CREATE TABLE public.t (\n    a integer NOT NULL,\n    b text\n);\n\n" +
		"COPY public.t (a, b) FROM stdin;\n1\tx;y\n2\t\\N\n3\t\\\\.\n\\.\n\n" +
		"SELECT 1; SELECT 2; -- two on a line\n" +
		"INSERT INTO public.t VALUES (4, 'multi;\nline');\n" +
		"COMMENT ON TABLE public.t IS $$ a; b $$;\n" +
		"\\unrestrict abc\n" +
		"SELECT 3"
	got, err := readScript(t, script)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"6: SET statement_timeout = 0",
		"7: SET lock_timeout = 0",
		"8: SELECT pg_catalog.set_config('search_path', '', false)",
		"10: CREATE TABLE public.t (\n    a integer NOT NULL,\n    b text\n)",
		"15: COPY public.t (a, b) FROM stdin",
		"data: 1\tx;y\n2\t\\N\n3\t\\\\.\n",
		"21: SELECT 1",
		"21: SELECT 2",
		"22: INSERT INTO public.t VALUES (4, 'multi;\nline')",
		"24: COMMENT ON TABLE public.t IS $$ a; b $$",
		"26: SELECT 3",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}

	// An unread COPY block is skipped.
	r := newScriptReader("s.sql", strings.NewReader("COPY t FROM stdin;\n1\n\\.\nSELECT 1;\n"))
	if st, err := r.next(context.Background()); err != nil || !st.copyIn {
		t.Fatalf("%v %v", st, err)
	}
	if st, err := r.next(context.Background()); err != nil || strings.TrimSpace(skipTrivia(st.text)) != "SELECT 1" || st.line != 4 {
		t.Fatalf("after an unread COPY: %+v %v", st, err)
	}

	errs := []struct{ script, want string }{
		{"SELECT 1;\n\\! ls\n", "s.sql:2"},
		{"SELECT 1;\n\\copy t from x\n", `\copy is not supported`},
		{"SELECT 1;\nSELEC 2;\n", "s.sql:2"},
		{"SELECT 1;\n\nSELECT\n  'x;\n", "unterminated quoted string"},
		{"COPY t FROM stdin;\n1\n", `without a \. line`},
		{"COPY t FROM stdin; SELECT 1;\n1\n\\.\n", "must be the last statement"},
		{"\\.\n", `outside COPY`},
		{"\\encoding LATIN1\n", "UTF8"},
	}
	for _, tc := range errs {
		_, err := readScript(t, tc.script)
		var le *LoadError
		if !errors.As(err, &le) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.script, err, tc.want)
		}
	}
}

func TestDatabaseName(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	cases := []struct{ corpus, db, want string }{
		{"bird-lite", "harbor", "avtgym_bird_lite_harbor_abababababab"},
		{"Ünïcode corpus", "DB.1", "avtgym___n__code_corpus_db_1_abababababab"},
		{strings.Repeat("c", 100), strings.Repeat("d", 100), "avtgym_" + strings.Repeat("c", 16) + "_" + strings.Repeat("d", 22) + "_abababababab"},
		{"", "", "avtgym_____abababababab"},
	}
	for _, tc := range cases {
		got := DatabaseName(tc.corpus, tc.db, hash)
		if got != tc.want {
			t.Errorf("DatabaseName(%q, %q) = %q, want %q", tc.corpus, tc.db, got, tc.want)
		}
		if n := len(TemplateName(got)); n > 63 {
			t.Errorf("%q: the template's name has %d bytes", got, n)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"b": 1, "a": {"d": [1, 2.50, null], "c": "x"}}`, `{"a":{"c":"x","d":[1,2.50,null]},"b":1}`},
		{`{"a": 1, "a": 2}`, `{"a":2}`},
		{`"tab\there \u00e9 \u0001 \"q\" \\ \/"`, `"tab\there é \u0001 \"q\" \\ /"`},
		{`[1e400, -0, true, false]`, `[1e400,-0,true,false]`},
		{`{"é": 1, "z": 2, "A": 3}`, `{"A":3,"z":2,"é":1}`},
	}
	for _, tc := range cases {
		got, err := canonicalJSON([]byte(tc.in))
		if err != nil || got != tc.want {
			t.Errorf("%s: got %s, %v; want %s", tc.in, got, err, tc.want)
		}
		if len(got) > len(tc.in) {
			t.Errorf("%s: the canonical form is longer", tc.in)
		}
	}
}

func TestConvNumeric(t *testing.T) {
	cases := []struct {
		in   string
		want any
	}{
		{"1.50", 1.5},
		{"-0.001", -0.001},
		{"123456789012345", 123456789012345.0},
		{"9007199254740993", int64(9007199254740993)},
		{"-9007199254740993.000", int64(-9007199254740993)},
		{"99999999999999999999", 1e20},
		{"0.1234567890123456789", 0.12345678901234568},
		{"Infinity", math.Inf(1)},
		{"-Infinity", math.Inf(-1)},
	}
	for _, tc := range cases {
		if got := convNumeric([]byte(tc.in)); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %#v, want %#v", tc.in, got, tc.want)
		}
	}
	if f := convNumeric([]byte("NaN")).(float64); !math.IsNaN(f) {
		t.Errorf("NaN: %v", f)
	}
}

// TestCheckQuery: what the parser refuses before anything runs, and what the
// quick check leaves to the read-only transaction.
func TestCheckQuery(t *testing.T) {
	cases := []struct {
		sql  string
		kind sqlexec.ErrorKind
		n    int // statements, when accepted
	}{
		{"SELECT 1", 0, 1},
		{"select 1; (SELECT 2) UNION SELECT 3; VALUES (1); TABLE x; WITH a AS (SELECT 1) SELECT * FROM a", 0, 5},
		{"/* c */ -- d\n SELECT 1;;", 0, 1},
		{"EXPLAIN SELECT 1", 0, 1},
		{"SHOW work_mem", 0, 1},
		{"WITH d AS (DELETE FROM t RETURNING 1) SELECT * FROM d", 0, 1}, // the read-only transaction refuses it
		// Accepted by the quick check; the read-only transaction refuses them.
		{"SELECT * INTO x FROM t", 0, 1},
		{"SELECT * FROM t FOR SHARE", 0, 1},
		{"INSERT INTO t VALUES (1)", sqlexec.KindDenied, 0},
		{"MERGE INTO t USING u ON true WHEN MATCHED THEN DELETE", sqlexec.KindDenied, 0},
		{"EXPLAIN ANALYZE UPDATE t SET a = 1", sqlexec.KindDenied, 0},
		{"SELECT 1; BEGIN", sqlexec.KindDenied, 0},
		{"START TRANSACTION", sqlexec.KindDenied, 0},
		{"END", sqlexec.KindDenied, 0},
		{"ABORT", sqlexec.KindDenied, 0},
		{"ROLLBACK TO SAVEPOINT a", sqlexec.KindDenied, 0},
		{"ROLLBACK PREPARED 'x'", sqlexec.KindDenied, 0},
		{"SET TRANSACTION READ WRITE", sqlexec.KindDenied, 0},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE", sqlexec.KindDenied, 0},
		{"SET CONSTRAINTS ALL DEFERRED", sqlexec.KindDenied, 0},
		{"UNLISTEN *", sqlexec.KindDenied, 0},
		{"COPY t FROM STDIN", sqlexec.KindDenied, 0},
		{"EXECUTE p", sqlexec.KindDenied, 0},
		{"DEALLOCATE ALL", sqlexec.KindDenied, 0},
		{"FETCH ALL FROM c", sqlexec.KindDenied, 0},
		{"CLOSE c", sqlexec.KindDenied, 0},
		{"REINDEX TABLE t", sqlexec.KindDenied, 0},
		{"CLUSTER t", sqlexec.KindDenied, 0},
		{"REFRESH MATERIALIZED VIEW m", sqlexec.KindDenied, 0},
		{"CREATE ROLE x SUPERUSER", sqlexec.KindDenied, 0},
		{"DROP DATABASE x", sqlexec.KindDenied, 0},
		{"CREATE TEMP TABLE x (a int)", sqlexec.KindDenied, 0},
		{"SELECT $1", sqlexec.KindSyntax, 0},
		{"SELECT set_config('work_mem', '1GB', false)", sqlexec.KindDenied, 0},
		{"SELECT 1; SELECT x FROM t WHERE y IN (SELECT pg_catalog.SET_CONFIG('a', 'b', true))", sqlexec.KindDenied, 0},
		{`SELECT U&"set\005fconfig"('work_mem', '1GB', false)`, sqlexec.KindDenied, 0},
		{"SELECT * FROM ROWS FROM (pg_advisory_lock(1))", sqlexec.KindDenied, 0},
		{"SELECT pg_terminate_backend(1)", sqlexec.KindDenied, 0},
		{"SELECT lo_from_bytea(0, 'x')", sqlexec.KindDenied, 0},
		{"WITH a AS (SELECT * FROM pg_catalog.pg_stat_activity) SELECT 1", sqlexec.KindDenied, 0},
		{"SELECT pg_advisory_xact_lock(1), reset_config_count, lo_col FROM t", 0, 1},
		{"SELECT '$1', $$ $2 $$, \"a$b\" FROM t", 0, 1},
		{"SELECT 1 FROM", sqlexec.KindSyntax, 0},
		{"  ", sqlexec.KindSyntax, 0},
	}
	checks := newStmtChecks()
	for _, tc := range cases {
		for _, f := range []func(string, bool) ([]string, error){checks.checkQuery, checkQueryUncached, checks.checkQuery} {
			stmts, err := f(tc.sql, true)
			if k := sqlexec.KindOf(err); k != tc.kind || (k == 0 && len(stmts) != tc.n) {
				t.Errorf("%q: got %d statements, %v; want kind %v, %d statements", tc.sql, len(stmts), err, tc.kind, tc.n)
			}
		}
	}
	// The quick check and the full one agree on what they both accept.
	for _, sql := range []string{"SELECT 1; SELECT 2", "/* x; */ SELECT ';' ; WITH a AS (SELECT 1) SELECT * FROM a -- z"} {
		quick, ok := quickCheck(sql)
		if !ok {
			t.Fatalf("%q: not quick", sql)
		}
		full, err := parseStatements(sql)
		if err != nil || len(full) != len(quick) {
			t.Fatalf("%q: %v %v", sql, quick, err)
		}
		for i := range full {
			if strings.TrimSpace(full[i].text) != strings.TrimSpace(quick[i]) {
				t.Errorf("%q: statement %d: %q vs %q", sql, i, full[i].text, quick[i])
			}
		}
	}
}

// TestStmtCache: statements are prepared on first use, the least recently
// used are evicted and deallocated, and the ones a pipeline uses never are.
func TestStmtCache(t *testing.T) {
	c := &connState{names: map[string]*list.Element{}}
	var evicted []string
	run := func(texts ...string) []request {
		var reqs []request
		for i, tx := range texts {
			reqs = append(reqs, request{kind: reqStmt, stmt: i, text: tx})
		}
		out := c.plan(reqs)
		for _, r := range out {
			if r.kind == reqPrepare {
				c.prepared(r.text, r.name)
			}
		}
		for _, n := range append([]string(nil), c.evicted...) {
			evicted = append(evicted, n)
			c.deallocated(n)
		}
		return out
	}
	kinds := func(out []request) string {
		var b strings.Builder
		for _, r := range out {
			switch {
			case r.kind == reqPrepare:
				b.WriteString("P")
			case r.name != "":
				b.WriteString("n")
			default:
				b.WriteString("u")
			}
		}
		return b.String()
	}
	if k := kinds(run("a", "a")); k != "Pnn" {
		t.Errorf("first use: %s", k)
	}
	if k := kinds(run("a")); k != "n" {
		t.Errorf("second use: %s", k)
	}
	for i := range stmtCacheSize + 5 {
		run(fmt.Sprint("s", i))
	}
	if c.lru.Len() != stmtCacheSize || len(evicted) != 6 || len(c.evicted) != 0 {
		t.Errorf("cache %d, evicted %v", c.lru.Len(), evicted)
	}
	if k := kinds(run("a")); k != "Pn" {
		t.Errorf("after eviction: %s", k)
	}
	// More statements than the cache holds: the rest run unnamed, and none in
	// use is evicted.
	var many []string
	for i := range stmtCacheSize + 3 {
		many = append(many, fmt.Sprint("m", i))
	}
	k := kinds(run(many...))
	if strings.Count(k, "P") != stmtCacheSize || strings.Count(k, "u") != 3 {
		t.Errorf("many: %s", k)
	}
	if k := kinds(run(many...)); strings.Count(k, "n") != stmtCacheSize || strings.Count(k, "P") != 0 {
		t.Errorf("many again: %s", k)
	}
	long := strings.Repeat("x", maxCachedStmt+1)
	if k := kinds(run(long)); k != "u" {
		t.Errorf("a long statement: %s", k)
	}
}

// TestRawCost: the byte cap's count from raw values equals what the
// converted cells count, except for JSON, where it is an upper bound.
func TestRawCost(t *testing.T) {
	cases := []struct {
		oid uint32
		raw []byte
	}{
		{oidInt4, []byte("42")}, {oidInt8, nil}, {oidFloat8, []byte("-1.5e-300")}, {oidNumeric, []byte("123.4500")},
		{oidNumeric, []byte("NaN")}, {oidBool, []byte("t")}, {oidBytea, []byte(`\xdeadbeef`)}, {oidBytea, []byte(`\x`)},
		{25, []byte("héllo")}, {oidDate, []byte("2024-01-05")}, {1007, []byte("{1,2}")},
		{oidJSONB, []byte(`{"a": [1, 2], "b": {"c": "d"}}`)}, {oidJSON, []byte(`{ "b" : 1 , "a" : "\u00e9" }`)},
	}
	for _, tc := range cases {
		conv, kind := converterFor(tc.oid)
		raw := rawCost([][]byte{tc.raw}, []costKind{kind})
		exact := sqlexec.CellBytes(conv(tc.raw))
		if kind == costJSON && raw < exact || kind != costJSON && raw != exact {
			t.Errorf("oid %d %q: raw cost %d, cells %d", tc.oid, tc.raw, raw, exact)
		}
	}
}

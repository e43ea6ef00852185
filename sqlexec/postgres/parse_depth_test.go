package postgres

import (
	"strings"
	"testing"

	"avtgym/sqlexec"
)

// deepPolicySQL are policy submissions that crashed the process inside
// libpg_query before the parse was bounded (issue 25), on every path that
// parses policy SQL: a Query task's full check (a string literal such as
// 'lo_' sends it past the quick check), a Management task's statement
// policy, and the bodies it checks.
func deepPolicySQL() map[string]string {
	r := strings.Repeat
	chain := "1" + r("+1", 30000)
	return map[string]string{
		"a chain of 30,000 additions":                    "SELECT " + chain,
		"the chain beside 'lo_' (forces the full parse)": "SELECT " + chain + ", 'lo_'",
		"the chain in an UPDATE":                         "UPDATE t SET x = " + chain,
		"the chain in a SQL function's body":             "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $b$SELECT " + chain + "$b$",
		"the chain in a DO block":                        "DO $b$BEGIN PERFORM " + chain + "; END$b$",
		"the chain in a PL/pgSQL expression":             "DO $b$DECLARE x int; BEGIN x := " + chain + "; END$b$",
		"30,000 joins":                                   "SELECT 1 FROM a" + r(" JOIN a ON true", 30000),
		"30,000 casts":                                   "SELECT 1" + r("::int", 30000),
	}
}

// TestDeepSQLIsThePolicysSyntaxError: every check survives the texts that
// crashed it, and where a text reaches the parser it is refused before it,
// as the policy's KindSyntax naming the limit. (A plain SELECT may pass the
// quick check, which builds no tree: PostgreSQL's own parser then refuses
// it with "stack depth limit exceeded", the policy's failure too; a
// PL/pgSQL assignment is checked by its words.)
func TestDeepSQLIsThePolicysSyntaxError(t *testing.T) {
	refusedBeforeTheParser := map[string]bool{
		"the chain beside 'lo_' (forces the full parse)": true, "the chain in an UPDATE": true,
		"the chain in a SQL function's body": true, "the chain in a DO block": true,
	}
	checks := newStmtChecks()
	for name, sql := range deepPolicySQL() {
		t.Run(name, func(t *testing.T) {
			for mode, check := range map[string]func(string) ([]string, error){
				"query":    func(s string) ([]string, error) { return checks.checkQuery(s, true) },
				"stateful": checks.checkStateful,
			} {
				_, err := check(sql)
				if k := sqlexec.KindOf(err); err != nil && k != sqlexec.KindSyntax && k != sqlexec.KindDenied {
					t.Fatalf("%s: %v (kind %v), want the policy's KindSyntax or KindDenied", mode, err, k)
				}
				if mode == "stateful" && refusedBeforeTheParser[name] && (err == nil || !strings.Contains(err.Error(), "nests too deeply")) {
					t.Errorf("%s: %v, want the depth limit named", mode, err)
				}
			}
		})
	}
}

// FuzzCheckStateful: no text crashes the statement policy of Management
// tasks (the deepest parse path: statements, function and DO bodies,
// PL/pgSQL), and its outcome is a KindSyntax or KindDenied error or a list
// of statements. The seeds are the texts that crashed it.
func FuzzCheckStateful(f *testing.F) {
	for _, sql := range deepPolicySQL() {
		f.Add(sql)
	}
	f.Add("INSERT INTO t VALUES (1); UPDATE t SET x = x + 1 WHERE id IN (SELECT id FROM u)")
	f.Add("CREATE FUNCTION f(a int) RETURNS int LANGUAGE plpgsql AS $$BEGIN IF a > 0 THEN RETURN a; END IF; RETURN 0; END$$")
	f.Fuzz(func(t *testing.T, sql string) {
		stmts, err := checkStatefulUncached(sql)
		if err != nil {
			if k := sqlexec.KindOf(err); k != sqlexec.KindSyntax && k != sqlexec.KindDenied {
				t.Fatalf("%q: %v (kind %v)", sql, err, k)
			}
			return
		}
		if len(stmts) == 0 {
			t.Fatalf("%q: no error and no statement", sql)
		}
	})
}

// FuzzCheckQuery: the same for the read-only queries of Query tasks.
func FuzzCheckQuery(f *testing.F) {
	for _, sql := range deepPolicySQL() {
		f.Add(sql)
	}
	f.Add("SELECT a, count(*) FROM t WHERE b LIKE 'x%' GROUP BY a")
	f.Fuzz(func(t *testing.T, sql string) {
		if _, err := checkQueryUncached(sql, true); err != nil {
			if k := sqlexec.KindOf(err); k != sqlexec.KindSyntax && k != sqlexec.KindDenied {
				t.Fatalf("%q: %v (kind %v)", sql, err, k)
			}
		}
	})
}

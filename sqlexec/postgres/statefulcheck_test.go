package postgres

import (
	"testing"

	"avtgym/sqlexec"
)

// TestCheckStateful: the statement policy of stateful jobs, without a
// server: what Management tasks need passes; what would escape the
// transaction or the private copy is KindDenied; bodies are checked.
func TestCheckStateful(t *testing.T) {
	cases := []struct {
		name string
		sql  string
		kind sqlexec.ErrorKind // 0: allowed
		n    int               // statements, when allowed
	}{
		// What Management tasks do.
		{"update", "UPDATE cranes SET operational_status = 'maintenance' WHERE crane_id = 1", 0, 1},
		{"insert select", "INSERT INTO t (a) SELECT 1; INSERT INTO t VALUES (2)", 0, 2},
		{"delete", "DELETE FROM t WHERE a > 1", 0, 1},
		{"create view", "CREATE OR REPLACE VIEW v AS SELECT 1 AS a", 0, 1},
		{"create index then insert", "CREATE INDEX i ON t (lower(a)); INSERT INTO t VALUES ('x')", 0, 2},
		{"alter table", "ALTER TABLE t ADD COLUMN b int DEFAULT 0, ADD CONSTRAINT c CHECK (b >= 0)", 0, 1},
		{"drop table", "DROP TABLE t CASCADE", 0, 1},
		{"truncate", "TRUNCATE t RESTART IDENTITY CASCADE", 0, 1},
		{"create type", "CREATE TYPE mood AS ENUM ('a', 'b')", 0, 1},
		{"create table as", "CREATE TABLE t2 AS SELECT * FROM t", 0, 1},
		{"select into", "SELECT * INTO t3 FROM t", 0, 1},
		{"sql function", `CREATE OR REPLACE FUNCTION berth_hire_report(p_terminal text, p_month date)
RETURNS TABLE(berth_code varchar, hire numeric) LANGUAGE sql STABLE AS $$
  SELECT b.berth_code, sum(b.daily_rate_usd) FROM berths b WHERE b.terminal = p_terminal GROUP BY 1 ORDER BY 1
$$`, 0, 1},
		{"sql function begin atomic", "CREATE FUNCTION f(a int) RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT a + 1; END", 0, 1},
		{"plpgsql function", `CREATE FUNCTION f(a int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE x int := a + 1; r record;
BEGIN
  UPDATE t SET b = x WHERE id = a;
  FOR r IN SELECT * FROM t LOOP RAISE NOTICE '%', r; END LOOP;
  IF NOT FOUND THEN RAISE EXCEPTION 'missing %', a; END IF;
  RETURN (SELECT count(*) FROM t);
END $$`, 0, 1},
		{"trigger function and trigger", `CREATE FUNCTION trg() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.updated_at := now(); RETURN NEW; END $$;
CREATE TRIGGER t_upd BEFORE UPDATE ON t FOR EACH ROW EXECUTE FUNCTION trg()`, 0, 2},
		{"procedure and call", `CREATE PROCEDURE p(a int) LANGUAGE plpgsql AS $$ BEGIN INSERT INTO t VALUES (a); END $$; CALL p(1)`, 0, 2},
		{"do block", "DO $$ BEGIN UPDATE t SET a = 1; END $$", 0, 1},
		{"lock on the private copy", "LOCK TABLE t IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(0.01)", 0, 2},
		{"set constraints", "SET CONSTRAINTS ALL DEFERRED", 0, 1},
		{"refresh", "REFRESH MATERIALIZED VIEW mv", 0, 1},
		{"nextval", "SELECT nextval('t_id_seq')", 0, 1},
		{"xact advisory lock", "SELECT pg_advisory_xact_lock(1)", 0, 1},
		{"rule", "CREATE RULE r AS ON INSERT TO t DO ALSO INSERT INTO log VALUES (1)", 0, 1},
		{"explain analyze update", "EXPLAIN ANALYZE UPDATE t SET a = 1", 0, 1},
		{"grant on table", "GRANT SELECT ON t TO PUBLIC", 0, 1},
		{"comment on table", "COMMENT ON TABLE t IS 'x'", 0, 1},

		// Transaction control.
		{"commit", "UPDATE t SET a = 1; COMMIT", sqlexec.KindDenied, 0},
		{"rollback", "ROLLBACK", sqlexec.KindDenied, 0},
		{"savepoint", "SAVEPOINT a", sqlexec.KindDenied, 0},
		{"prepare transaction", "PREPARE TRANSACTION 'x'", sqlexec.KindDenied, 0},
		{"begin", "BEGIN; DROP TABLE t", sqlexec.KindDenied, 0},
		// Session state.
		{"set", "SET statement_timeout = 0", sqlexec.KindDenied, 0},
		{"set local", "SET LOCAL work_mem = '10GB'", sqlexec.KindDenied, 0},
		{"reset", "RESET ALL", sqlexec.KindDenied, 0},
		{"set role", "SET ROLE postgres", sqlexec.KindDenied, 0},
		{"discard", "DISCARD ALL", sqlexec.KindDenied, 0},
		{"set_config", "SELECT set_config('statement_timeout', '0', false)", sqlexec.KindDenied, 0},
		{"function set clause", "CREATE FUNCTION f() RETURNS int LANGUAGE sql SET work_mem = '10GB' AS 'SELECT 1'", sqlexec.KindDenied, 0},
		{"alter function set", "ALTER FUNCTION f() SET statement_timeout = 0", sqlexec.KindDenied, 0},
		{"prepare", "PREPARE p AS SELECT 1", sqlexec.KindDenied, 0},
		{"declare cursor with hold", "DECLARE c CURSOR WITH HOLD FOR SELECT 1", sqlexec.KindDenied, 0},
		{"listen", "LISTEN x", sqlexec.KindDenied, 0},
		{"notify", "NOTIFY x", sqlexec.KindDenied, 0},
		{"pg_notify", "SELECT pg_notify('x', 'y')", sqlexec.KindDenied, 0},
		{"session advisory lock", "SELECT pg_advisory_lock(1)", sqlexec.KindDenied, 0},
		// Files, programs, other databases, the server.
		{"copy program", "COPY t TO PROGRAM 'touch /tmp/x'", sqlexec.KindDenied, 0},
		{"copy from stdin", "COPY t FROM STDIN", sqlexec.KindDenied, 0},
		{"lo_import", "SELECT lo_import('/etc/passwd')", sqlexec.KindDenied, 0},
		{"dblink", "SELECT * FROM dblink('dbname=x', 'SELECT 1') AS t(a int)", sqlexec.KindDenied, 0},
		{"create extension", "CREATE EXTENSION dblink", sqlexec.KindDenied, 0},
		{"alter system", "ALTER SYSTEM SET fsync = off", sqlexec.KindDenied, 0},
		{"create role", "CREATE ROLE x", sqlexec.KindDenied, 0},
		{"alter role", "ALTER ROLE CURRENT_USER SET statement_timeout = 0", sqlexec.KindDenied, 0},
		{"create database", "CREATE DATABASE x", sqlexec.KindDenied, 0},
		{"alter database", "ALTER DATABASE x CONNECTION LIMIT 0", sqlexec.KindDenied, 0},
		{"comment on database", "COMMENT ON DATABASE x IS 'y'", sqlexec.KindDenied, 0},
		{"grant on database", "GRANT CONNECT ON DATABASE x TO PUBLIC", sqlexec.KindDenied, 0},
		{"terminate", "SELECT pg_terminate_backend(1)", sqlexec.KindDenied, 0},
		{"pg_stat_activity", "SELECT * FROM pg_stat_activity", sqlexec.KindDenied, 0},
		{"query_to_xml", "SELECT query_to_xml('SELECT 1', true, false, '')", sqlexec.KindDenied, 0},
		// Outside a transaction, or writing outside it.
		{"vacuum", "VACUUM t", sqlexec.KindDenied, 0},
		{"analyze", "ANALYZE t", sqlexec.KindDenied, 0},
		{"create index concurrently", "CREATE INDEX CONCURRENTLY i ON t (a)", sqlexec.KindDenied, 0},
		{"drop index concurrently", "DROP INDEX CONCURRENTLY i", sqlexec.KindDenied, 0},
		{"reindex", "REINDEX TABLE t", sqlexec.KindDenied, 0},
		{"detach concurrently", "ALTER TABLE t DETACH PARTITION p CONCURRENTLY", sqlexec.KindDenied, 0},
		{"load", "LOAD 'auto_explain'", sqlexec.KindDenied, 0},
		// Languages and bodies.
		{"c function", "CREATE FUNCTION f() RETURNS int LANGUAGE c AS 'libc', 'abs'", sqlexec.KindDenied, 0},
		{"plpython", "CREATE FUNCTION f() RETURNS int LANGUAGE plpython3u AS 'return 1'", sqlexec.KindDenied, 0},
		{"do in another language", "DO LANGUAGE plperl $$ 1 $$", sqlexec.KindDenied, 0},
		{"sql body sets", "CREATE FUNCTION f() RETURNS void LANGUAGE sql AS 'SET work_mem = ''1GB'''", sqlexec.KindDenied, 0},
		{"sql body calls set_config", "CREATE FUNCTION f() RETURNS text LANGUAGE sql AS $$ SELECT set_config('work_mem', '1GB', false) $$", sqlexec.KindDenied, 0},
		{"plpgsql dynamic execute", "CREATE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'SET work_mem = ''1GB'''; END $$", sqlexec.KindDenied, 0},
		{"do dynamic execute", "DO $$ BEGIN EXECUTE 'PREPARE x AS SELECT 1'; END $$", sqlexec.KindDenied, 0},
		{"do for in execute", "DO $$ DECLARE r record; BEGIN FOR r IN EXECUTE 'SELECT 1' LOOP END LOOP; END $$", sqlexec.KindDenied, 0},
		{"do return query execute", "CREATE FUNCTION f() RETURNS SETOF int LANGUAGE plpgsql AS $$ BEGIN RETURN QUERY EXECUTE 'SELECT 1'; END $$", sqlexec.KindDenied, 0},
		{"do open for execute", "DO $$ DECLARE c refcursor; BEGIN OPEN c FOR EXECUTE 'SELECT 1'; END $$", sqlexec.KindDenied, 0},
		{"plpgsql commit", "CREATE PROCEDURE p() LANGUAGE plpgsql AS $$ BEGIN COMMIT; END $$", sqlexec.KindDenied, 0},
		{"plpgsql set", "DO $$ BEGIN SET work_mem = '1GB'; END $$", sqlexec.KindDenied, 0},
		{"plpgsql perform set_config", "DO $$ BEGIN PERFORM set_config('work_mem', '1GB', false); END $$", sqlexec.KindDenied, 0},
		{"plpgsql assignment calls set_config", "DO $$ DECLARE x text; BEGIN x := set_config('work_mem', '1GB', false); END $$", sqlexec.KindDenied, 0},
		{"plpgsql copy", "DO $$ BEGIN COPY t TO '/tmp/x'; END $$", sqlexec.KindDenied, 0},
		{"do creating a function that sets", "DO $$ BEGIN CREATE FUNCTION g() RETURNS int LANGUAGE sql SET work_mem = '1GB' AS 'SELECT 1'; END $$", sqlexec.KindDenied, 0},
		{"rule that notifies", "CREATE RULE r AS ON INSERT TO t DO ALSO NOTIFY x", sqlexec.KindDenied, 0},
		{"explain analyze set", "EXPLAIN ANALYZE SELECT set_config('a', 'b', false)", sqlexec.KindDenied, 0},
		{"schema with a view calling a denied function", "CREATE SCHEMA s CREATE VIEW v AS SELECT pg_notify('a', 'b')", sqlexec.KindDenied, 0},
		// Not SQL.
		{"empty", "  ", sqlexec.KindSyntax, 0},
		{"garbage", "UPDATE SET WHERE", sqlexec.KindSyntax, 0},
		{"parameter", "UPDATE t SET a = $1", sqlexec.KindSyntax, 0},
		{"plpgsql that does not parse", "DO $$ BEGIN IF THEN END $$", sqlexec.KindSyntax, 0},
	}
	checks := newStmtChecks()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stmts, err := checkStatefulUncached(tc.sql)
			if k := sqlexec.KindOf(err); k != tc.kind {
				t.Fatalf("got %v (kind %v), want kind %v", err, k, tc.kind)
			}
			if tc.kind == 0 && len(stmts) != tc.n {
				t.Fatalf("got %d statements %q, want %d", len(stmts), stmts, tc.n)
			}
			if err != nil {
				t.Log(err)
			}
			// The cached path agrees, computing and then keeping.
			for range 2 {
				stmts2, err2 := checks.checkStateful(tc.sql)
				if sqlexec.KindOf(err2) != tc.kind || len(stmts2) != len(stmts) {
					t.Fatalf("cached: %v %v", stmts2, err2)
				}
			}
		})
	}
}

// TestSplitCorpus: the corpus's statements are split, and none may end the
// job's transaction.
func TestSplitCorpus(t *testing.T) {
	checks := newStmtChecks()
	stmts, err := checks.splitCorpus("CREATE TEMP TABLE x (a int); INSERT INTO x VALUES (1);")
	if err != nil || len(stmts) != 2 {
		t.Fatalf("%q %v", stmts, err)
	}
	if _, err := checks.splitCorpus("UPDATE t SET a = 1; COMMIT"); sqlexec.KindOf(err) != sqlexec.KindDenied {
		t.Fatalf("COMMIT in a corpus statement: %v", err)
	}
	if _, err := checks.splitCorpus("SELEC 1"); sqlexec.KindOf(err) != sqlexec.KindSyntax {
		t.Fatalf("a corpus statement that does not parse: %v", err)
	}
}

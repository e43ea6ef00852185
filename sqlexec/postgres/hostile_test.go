package postgres

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"avtgym/internal/pgtest"
	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
)

// templateSum dumps a template: templates refuse connections, so they are
// allowed for the dump (as the administrator) and refused again.
func templateSum(t *testing.T, s *Server, tpl string) string {
	t.Helper()
	ctx := context.Background()
	ident := pgx.Identifier{tpl}.Sanitize()
	if _, err := s.admin.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS true"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := s.admin.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS false"); err != nil {
			t.Fatal(err)
		}
	}()
	return pgtest.DumpSum(t, tpl)
}

// TestHostileQueries: every query a policy could send to write, escape the
// transaction, change its limits, reach files, programs or other sessions,
// or exhaust time, memory or the result caps ends with the kind that scores
// it, before the work it would have done; the engine keeps serving; and the
// working database and its template dump exactly as before.
func TestHostileQueries(t *testing.T) {
	s, db := harbor(t)
	workBefore := pgtest.DumpSum(t, db.Name())
	tplBefore := templateSum(t, s, TemplateName(db.Name()))

	short := sqlexec.DefaultLimits()
	short.Timeout = 500 * time.Millisecond
	long := sqlexec.DefaultLimits()
	long.Timeout = time.Minute // time for the server to build a huge value
	cases := []struct {
		name string
		sql  string
		lim  *sqlexec.Limits
		kind sqlexec.ErrorKind
	}{
		// Writes, refused by the parser.
		{"insert", "INSERT INTO berths (berth_code, terminal, length_m, max_draft_m, shore_power, daily_rate_usd) VALUES ('X', 'x', 1, 1, true, 1)", nil, sqlexec.KindDenied},
		{"update", "UPDATE berths SET length_m = 0", nil, sqlexec.KindDenied},
		{"delete", "DELETE FROM berths", nil, sqlexec.KindDenied},
		{"create", "CREATE TABLE x (a int)", nil, sqlexec.KindDenied},
		{"drop", "DROP TABLE berths", nil, sqlexec.KindDenied},
		{"alter", "ALTER TABLE berths ADD COLUMN x int", nil, sqlexec.KindDenied},
		{"truncate", "TRUNCATE berths CASCADE", nil, sqlexec.KindDenied},
		{"select into", "SELECT * INTO berths2 FROM berths", nil, sqlexec.KindDenied},
		{"for update", "SELECT * FROM berths FOR UPDATE", nil, sqlexec.KindDenied},
		{"explain analyze delete", "EXPLAIN ANALYZE DELETE FROM berths", nil, sqlexec.KindDenied},
		// Writes the parser lets through: the read-only transaction refuses them.
		{"delete in a CTE", "WITH d AS (DELETE FROM berths RETURNING 1) SELECT count(*) FROM d", nil, sqlexec.KindDenied},
		{"nextval", "SELECT nextval('berths_berth_id_seq')", nil, sqlexec.KindDenied},
		{"setval", "SELECT setval('berths_berth_id_seq', 1)", nil, sqlexec.KindDenied},
		{"row lock in a subquery", "SELECT * FROM (SELECT * FROM berths FOR UPDATE) b", nil, sqlexec.KindDenied},
		// Files and programs.
		{"copy to program", "COPY berths TO PROGRAM 'touch /tmp/avtgym-pwned'", nil, sqlexec.KindDenied},
		{"copy to file", "COPY berths TO '/tmp/x'", nil, sqlexec.KindDenied},
		{"copy from file", "COPY berths FROM '/etc/passwd'", nil, sqlexec.KindDenied},
		{"copy to stdout", "COPY (SELECT 1) TO STDOUT", nil, sqlexec.KindDenied},
		{"pg_read_file", "SELECT pg_read_file('/etc/passwd')", nil, sqlexec.KindDenied},
		{"pg_ls_dir", "SELECT pg_ls_dir('.')", nil, sqlexec.KindDenied},
		{"lo_import", "SELECT lo_import('/etc/passwd')", nil, sqlexec.KindDenied},
		{"dblink (not installed)", "SELECT * FROM dblink('dbname=postgres', 'SELECT 1') AS t(a int)", nil, sqlexec.KindSyntax},
		{"create extension", "CREATE EXTENSION dblink", nil, sqlexec.KindDenied},
		{"load", "LOAD 'plpgsql'", nil, sqlexec.KindDenied},
		{"alter system", "ALTER SYSTEM SET work_mem = '1GB'", nil, sqlexec.KindDenied},
		// Escaping the transaction or the limits.
		{"commit then drop", "COMMIT; DROP TABLE berths", nil, sqlexec.KindDenied},
		{"rollback then delete", "ROLLBACK; DELETE FROM berths", nil, sqlexec.KindDenied},
		{"begin", "BEGIN", nil, sqlexec.KindDenied},
		{"savepoint", "SAVEPOINT a", nil, sqlexec.KindDenied},
		{"release", "RELEASE a", nil, sqlexec.KindDenied},
		{"prepare transaction", "PREPARE TRANSACTION 'x'", nil, sqlexec.KindDenied},
		{"commit prepared", "COMMIT PREPARED 'x'", nil, sqlexec.KindDenied},
		{"set statement_timeout then sleep", "SET statement_timeout = 0; SELECT pg_sleep(100)", nil, sqlexec.KindDenied},
		{"set local", "SET LOCAL statement_timeout = 0", nil, sqlexec.KindDenied},
		{"reset", "RESET ALL", nil, sqlexec.KindDenied},
		{"set role", "SET ROLE avtgym", nil, sqlexec.KindDenied},
		{"set session authorization", "SET SESSION AUTHORIZATION avtgym", nil, sqlexec.KindDenied},
		{"discard", "DISCARD ALL", nil, sqlexec.KindDenied},
		{"set_config read-write then delete", "SELECT set_config('transaction_read_only', 'off', false); DELETE FROM berths", nil, sqlexec.KindDenied},
		{"set_config read-write then CTE delete", "SELECT set_config('transaction_read_only', 'off', false); WITH d AS (DELETE FROM berths RETURNING 1) SELECT count(*) FROM d", nil, sqlexec.KindDenied},
		{"set_config role", "SELECT set_config('role', 'avtgym', false)", nil, sqlexec.KindDenied},
		{"set_config statement_timeout then sleep", "SELECT set_config('statement_timeout', '0', false); SELECT pg_sleep(100)", &short, sqlexec.KindDenied},
		{"set_config work_mem", "SELECT set_config('work_mem', '100GB', false)", nil, sqlexec.KindDenied},
		{"update pg_settings", "UPDATE pg_settings SET setting = '0' WHERE name = 'statement_timeout'", nil, sqlexec.KindDenied},
		{"do", "DO $$ BEGIN PERFORM pg_sleep(100); END $$", nil, sqlexec.KindDenied},
		{"call", "CALL nothing()", nil, sqlexec.KindDenied},
		{"prepare", "PREPARE p AS SELECT 1", nil, sqlexec.KindDenied},
		{"declare cursor", "DECLARE c CURSOR FOR SELECT 1", nil, sqlexec.KindDenied},
		{"listen", "LISTEN x", nil, sqlexec.KindDenied},
		{"notify", "NOTIFY x", nil, sqlexec.KindDenied},
		{"vacuum", "VACUUM", nil, sqlexec.KindDenied},
		{"analyze", "ANALYZE berths", nil, sqlexec.KindDenied},
		{"checkpoint", "CHECKPOINT", nil, sqlexec.KindDenied},
		{"lock table", "LOCK TABLE berths IN ACCESS EXCLUSIVE MODE", nil, sqlexec.KindDenied},
		{"alter role", "ALTER ROLE CURRENT_USER SET statement_timeout = 0", nil, sqlexec.KindDenied},
		{"alter database", "ALTER DATABASE CURRENT SET default_transaction_read_only = off", nil, sqlexec.KindDenied},
		{"grant", "GRANT SELECT ON berths TO PUBLIC", nil, sqlexec.KindDenied},
		// Other sessions.
		{"terminate other backends", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity", nil, sqlexec.KindDenied},
		{"terminate itself", "SELECT pg_terminate_backend(pg_backend_pid())", nil, sqlexec.KindDenied},
		{"cancel", "SELECT pg_cancel_backend(pg_backend_pid())", nil, sqlexec.KindDenied},
		{"pg_stat_activity", "SELECT query FROM pg_stat_activity", nil, sqlexec.KindDenied},
		{"backend activity", "SELECT pg_stat_get_backend_activity(1)", nil, sqlexec.KindDenied},
		{"session advisory lock", "SELECT pg_advisory_lock(1)", nil, sqlexec.KindDenied},
		// Writes a read-only transaction does not stop.
		{"WAL message", "SELECT pg_logical_emit_message(false, 'x', repeat('x', 1000000))", nil, sqlexec.KindDenied},
		{"large object from bytea", "SELECT lo_from_bytea(0, 'abc')", nil, sqlexec.KindDenied},
		{"large object", "SELECT lo_create(0)", nil, sqlexec.KindDenied},
		// Time.
		{"pg_sleep past the limit", "SELECT pg_sleep(100)", &short, sqlexec.KindTimeout},
		{"runaway generate_series", "SELECT count(*) FROM generate_series(1, 1e12)", &short, sqlexec.KindTimeout},
		{"cross join", "SELECT count(*) FROM cargo_manifests a, cargo_manifests b, cargo_manifests c, cargo_manifests d", &short, sqlexec.KindTimeout},
		{"recursive CTE", "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r", &short, sqlexec.KindTimeout},
		{"second statement sleeps", "SELECT 1; SELECT pg_sleep(100)", &short, sqlexec.KindTimeout},
		// Result caps.
		{"too many rows", "SELECT g FROM generate_series(1, 1000000) g", nil, sqlexec.KindTooManyRows},
		{"too many bytes", "SELECT repeat('x', 1000) FROM generate_series(1, 9000)", nil, sqlexec.KindTooManyBytes},
		// The memory watch cancels it while the backend builds it; without
		// the watch (a remote server) the byte cap refuses the message.
		{"one 500 MB value", "SELECT repeat('x', 500000000)", &long, sqlexec.KindTooMuchMemory},
		{"a value past PostgreSQL's 1 GB", "SELECT repeat('x', 2000000000)", &long, sqlexec.KindTooManyBytes},
		{"many NULL cells", "SELECT " + strings.TrimSuffix(strings.Repeat("NULL,", 1000), ",") + " FROM generate_series(1, 1000)", nil, sqlexec.KindTooManyBytes},
		// Not SQL, or not ours to run.
		{"parameter", "SELECT $1", nil, sqlexec.KindSyntax},
		{"NUL byte", "SELECT 1;\x00 DELETE FROM berths", nil, sqlexec.KindSyntax},
		{"deep nesting", "SELECT " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000), nil, sqlexec.KindSyntax},
		{"too many columns", "SELECT " + strings.TrimSuffix(strings.Repeat("1,", 2000), ","), nil, sqlexec.KindSyntax},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lim := sqlexec.DefaultLimits()
			if tc.lim != nil {
				lim = *tc.lim
			}
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			start := time.Now()
			_, err := db.Query(context.Background(), tc.sql, lim)
			elapsed := time.Since(start)
			runtime.ReadMemStats(&ms1)
			want := tc.kind
			if want == sqlexec.KindTooMuchMemory && s.mw == nil {
				want = sqlexec.KindTooManyBytes
			}
			if k := sqlexec.KindOf(err); k != want {
				t.Fatalf("got %v (kind %v), want kind %v", err, k, want)
			}
			t.Logf("%v", err)
			// Deadline enforcement: a bound of 10x the limit (CONTRIBUTING.md, Tests and time).
			if elapsed > 10*lim.Timeout {
				t.Errorf("the query ran %v, past 10x its limit of %v", elapsed, lim.Timeout)
			}
			// Caps are enforced before the work: nothing near the refused size was allocated.
			if alloc := ms1.TotalAlloc - ms0.TotalAlloc; alloc > 64<<20 {
				t.Errorf("the query allocated %d bytes in this process", alloc)
			}
			res, err := db.Query(context.Background(), "SELECT count(*) FROM berths", sqlexec.DefaultLimits())
			if err != nil || res.Rows[0][0] != int64(30) {
				t.Fatalf("the engine does not serve afterwards: %v, %v", res, err)
			}
		})
	}
	if after := pgtest.DumpSum(t, db.Name()); after != workBefore {
		t.Errorf("the working database changed")
	}
	if after := templateSum(t, s, TemplateName(db.Name())); after != tplBefore {
		t.Errorf("the template changed")
	}
}

// TestLockWait: a query waiting for a lock another session holds ends with
// KindTimeout at its limit.
func TestLockWait(t *testing.T) {
	s, db := harbor(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, pgtest.URLFor(t, db.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE berths IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	lim := sqlexec.DefaultLimits()
	lim.Timeout = 300 * time.Millisecond
	start := time.Now()
	_, err = db.Query(ctx, "SELECT count(*) FROM berths", lim)
	if k := sqlexec.KindOf(err); k != sqlexec.KindTimeout {
		t.Fatalf("got %v, want a timeout", err)
	}
	// Deadline enforcement: a bound of 10x the limit.
	if e := time.Since(start); e > 10*lim.Timeout {
		t.Errorf("the wait lasted %v", e)
	}
	_ = s
}

// TestTempFileLimit: a sort that spills past the role's temp_file_limit
// fails with KindTooMuchMemory. The limit is a role setting, so this test
// uses a role of its own.
func TestTempFileLimit(t *testing.T) {
	url := server(t).cfg.AdminURL
	ctx := context.Background()
	s, err := ConnectConfig(ctx, Config{AdminURL: url, Role: "avtgym_policy_tmp", TempFileLimit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if w := s.Warnings(); len(w) > 0 {
		t.Fatalf("warnings: %v", w)
	}
	corpus := uniqueCorpus(t, s)
	name, err := s.EnsureDatabase(ctx, corpus, "tmp", Script("tmp.sql", "CREATE TABLE t (a int);"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := s.Open(ctx, name, Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lim := sqlexec.DefaultLimits()
	lim.MaxMemory = 256 << 10 // work_mem 64kB
	lim.Timeout = 30 * time.Second
	_, err = db.Query(ctx, "SELECT count(*) FROM (SELECT md5(g::text) m FROM generate_series(1, 300000) g ORDER BY m) s", lim)
	if k := sqlexec.KindOf(err); k != sqlexec.KindTooMuchMemory {
		t.Fatalf("got %v, want KindTooMuchMemory", err)
	}
	t.Log(err)
	res, err := db.Query(ctx, "SELECT count(*) FROM (SELECT md5(g::text) m FROM generate_series(1, 1000) g ORDER BY m) s", lim)
	if err != nil || fmt.Sprint(res.Rows) != "[[1000]]" {
		t.Fatalf("a small sort: %v, %v", res, err)
	}
}

package postgres

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/internal/pgtest"
	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
)

// harborRows are the rows per table of the harbor sample's dumps.
var harborRows = map[string]int64{
	"berths": 30, "cranes": 30, "vessels": 60, "port_calls": 199, "cargo_manifests": 282, "crane_assignments": 266,
}

// copyDumps copies the harbor dumps into a new folder, renaming each file with
// rename (the load order must not depend on names) and editing its text.
func copyDumps(t *testing.T, rename func(string) string, edit func(name, text string) string) string {
	t.Helper()
	src := harborDir(t)
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if edit != nil {
			text = edit(e.Name(), text)
		}
		name := e.Name()
		if rename != nil {
			name = rename(name)
		}
		if err := os.WriteFile(filepath.Join(dst, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// dbInfo is what a test reads about a database.
type dbInfo struct {
	oid                  uint32
	isTemplate, allowCon bool
	comment              string
	owner                string
}

func lookup(t *testing.T, s *Server, name string) (dbInfo, bool) {
	t.Helper()
	var d dbInfo
	var comment *string
	err := s.admin.QueryRow(context.Background(), `SELECT oid, datistemplate, datallowconn, shobj_description(oid, 'pg_database'),
		pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1`, name).Scan(&d.oid, &d.isTemplate, &d.allowCon, &comment, &d.owner)
	if err == pgx.ErrNoRows {
		return d, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if comment != nil {
		d.comment = *comment
	}
	return d, true
}

func checkHarborRows(t *testing.T, s *Server, name string) {
	t.Helper()
	db, err := s.Open(context.Background(), name, Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for table, want := range harborRows {
		res := mustQuery(t, db, "SELECT count(*) FROM "+table)
		if got := res.Rows[0][0]; got != want {
			t.Errorf("%s has %v rows, want %d", table, got, want)
		}
	}
	// Every object is the policy role's (the dumps are --no-owner).
	res := mustQuery(t, db, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND pg_get_userbyid(c.relowner) <> current_user`)
	if res.Rows[0][0] != int64(0) {
		t.Errorf("%v objects are not the policy role's", res.Rows[0][0])
	}
	// The foreign keys were created (and so validated against loaded rows).
	res = mustQuery(t, db, "SELECT count(*) FROM pg_constraint WHERE contype = 'f'")
	if res.Rows[0][0] != int64(6) {
		t.Errorf("%v foreign keys, want 6", res.Rows[0][0])
	}
}

// TestLoadHarbor loads the harbor dumps under shuffled names (so that name
// order is not load order), checks rows, owners and marks, and that a second
// EnsureDatabase reuses both databases without loading.
func TestLoadHarbor(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	for i := range 3 {
		perm := rand.Perm(6)
		n := 0
		prefix := map[string]string{}
		dir := copyDumps(t, func(name string) string {
			if _, ok := prefix[name]; !ok {
				prefix[name] = fmt.Sprintf("%d_", perm[n])
				n++
			}
			return prefix[name] + name
		}, nil)
		corpus := uniqueCorpus(t, s)
		name, err := s.EnsureDatabase(ctx, corpus, "harbor", DumpDir(dir))
		if err != nil {
			t.Fatalf("shuffle %d (%v): %v", i, prefix, err)
		}
		if len(name) > 63 || !strings.HasPrefix(name, "avtgym_"+corpus+"_harbor_") {
			t.Errorf("name %q", name)
		}
		checkHarborRows(t, s, name)
		work, ok := lookup(t, s, name)
		if !ok || work.isTemplate || !work.allowCon || !strings.HasPrefix(work.comment, "avtgym loaded ") || work.owner != s.Role() {
			t.Errorf("working database: %+v", work)
		}
		tpl, ok := lookup(t, s, TemplateName(name))
		if !ok || !tpl.isTemplate || tpl.allowCon || tpl.comment != work.comment || tpl.owner != s.Role() {
			t.Errorf("template: %+v", tpl)
		}
		// Reuse: same name, same databases (a reload would make new ones).
		again, err := s.EnsureDatabase(ctx, corpus, "harbor", DumpDir(dir))
		if err != nil || again != name {
			t.Fatalf("second EnsureDatabase: %q, %v", again, err)
		}
		if w, _ := lookup(t, s, name); w.oid != work.oid {
			t.Errorf("the working database was made again")
		}
		if tp, _ := lookup(t, s, TemplateName(name)); tp.oid != tpl.oid {
			t.Errorf("the template was made again")
		}
	}
}

// TestPlanOrder: the load order follows the foreign keys, whatever the files'
// order.
func TestPlanOrder(t *testing.T) {
	dir := harborDir(t)
	files, _, err := DumpDir(dir).files()
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string][]string{
		"port_calls.sql": {"berths.sql", "vessels.sql"}, "cargo_manifests.sql": {"port_calls.sql"},
		"crane_assignments.sql": {"cranes.sql", "port_calls.sql"},
	}
	for range 20 {
		rand.Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
		order, err := planLoad(context.Background(), files, true)
		if err != nil {
			t.Fatal(err)
		}
		pos := map[string]int{}
		for i, f := range order {
			pos[f.name] = i
		}
		if len(pos) != 6 {
			t.Fatalf("order %v", order)
		}
		for f, deps := range refs {
			for _, d := range deps {
				if pos[d] > pos[f] {
					t.Errorf("%s loads before %s, which it references", f, d)
				}
			}
		}
	}
}

// TestHalfLoaded: a database without its mark (a crash mid-load) is dropped
// and made again; the other one is kept.
func TestHalfLoaded(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	dir := harborDir(t)
	corpus := uniqueCorpus(t, s)
	name, err := s.EnsureDatabase(ctx, corpus, "harbor", DumpDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	work, _ := lookup(t, s, name)
	tpl, _ := lookup(t, s, TemplateName(name))

	// The working database lost its mark: cloned again from the template.
	if _, err := s.admin.Exec(ctx, "COMMENT ON DATABASE "+pgx.Identifier{name}.Sanitize()+" IS NULL"); err != nil {
		t.Fatal(err)
	}
	if again, err := s.EnsureDatabase(ctx, corpus, "harbor", DumpDir(dir)); err != nil || again != name {
		t.Fatalf("%q, %v", again, err)
	}
	w2, _ := lookup(t, s, name)
	t2, _ := lookup(t, s, TemplateName(name))
	if w2.oid == work.oid || t2.oid != tpl.oid || w2.comment != tpl.comment {
		t.Errorf("after a half-made working database: work %+v -> %+v, template %+v -> %+v", work, w2, tpl, t2)
	}

	// A half-loaded template (some tables, no mark): dropped and loaded again.
	if err := s.DropDatabase(ctx, name); err != nil {
		t.Fatal(err)
	}
	ident := pgx.Identifier{TemplateName(name)}.Sanitize()
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident+" OWNER "+s.Role()); err != nil {
		t.Fatal(err)
	}
	half, err := pgx.Connect(ctx, pgtest.URLFor(t, TemplateName(name)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := half.Exec(ctx, "CREATE TABLE public.berths (berth_id int)"); err != nil {
		t.Fatal(err)
	}
	half.Close(ctx)
	if again, err := s.EnsureDatabase(ctx, corpus, "harbor", DumpDir(dir)); err != nil || again != name {
		t.Fatalf("%q, %v", again, err)
	}
	checkHarborRows(t, s, name)
	if t3, _ := lookup(t, s, TemplateName(name)); !t3.isTemplate || t3.comment != tpl.comment {
		t.Errorf("template after the reload: %+v", t3)
	}
}

// TestRestrict: the \restrict and \unrestrict lines of newer pg_dump are
// skipped, and so are other harmless psql meta-commands.
func TestRestrict(t *testing.T) {
	s := server(t)
	dir := copyDumps(t, nil, func(name, text string) string {
		switch name {
		case "berths.sql":
			return "\\restrict 2Kf9abcDEFghiJKLmnoPQRstuVWXyz0123456789abcdEFGH\n" + text + "\\unrestrict 2Kf9abcDEFghiJKLmnoPQRstuVWXyz0123456789abcdEFGH\n"
		case "vessels.sql":
			return "\\set ON_ERROR_STOP on\n\\encoding UTF8\n" + text + "\\echo done\n"
		}
		return text
	})
	name, err := s.EnsureDatabase(context.Background(), uniqueCorpus(t, s), "harbor", DumpDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	checkHarborRows(t, s, name)
}

// TestConcurrentEnsure: processes (here goroutines, each on its own
// administrator connection) asking for the same database at once get one
// load.
func TestConcurrentEnsure(t *testing.T) {
	s := server(t)
	dir := harborDir(t)
	corpus := uniqueCorpus(t, s)
	var wg sync.WaitGroup
	names := make([]string, 3)
	errs := make([]error, 3)
	for i := range names {
		wg.Go(func() {
			names[i], errs[i] = s.EnsureDatabase(context.Background(), corpus, "harbor", DumpDir(dir))
		})
	}
	wg.Wait()
	for i := range names {
		if errs[i] != nil || names[i] != names[0] {
			t.Fatalf("%v %v", names, errs)
		}
	}
	checkHarborRows(t, s, names[0])
}

// TestConnectAgain: connecting again (another process, here another Server)
// re-asserts the same role and password: the first server's new connections
// still work.
func TestConnectAgain(t *testing.T) {
	_, db := harbor(t)
	s2, err := Connect(context.Background(), server(t).cfg.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	db.pool.Reset() // new connections from now on
	mustQuery(t, db, "SELECT 1")
}

// TestRole: the policy role's attributes, memberships and settings.
func TestRole(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	var super, createdb, createrole, repl, login bool
	var limit int
	var settings []string
	err := s.admin.QueryRow(ctx, `SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolcanlogin, rolconnlimit,
		coalesce((SELECT setconfig FROM pg_db_role_setting WHERE setrole = r.oid AND setdatabase = 0), '{}')
		FROM pg_roles r WHERE rolname = $1`, s.Role()).Scan(&super, &createdb, &createrole, &repl, &login, &limit, &settings)
	if err != nil {
		t.Fatal(err)
	}
	if super || createdb || createrole || repl || !login || limit <= 0 {
		t.Errorf("role attributes: super %v createdb %v createrole %v replication %v login %v limit %d", super, createdb, createrole, repl, login, limit)
	}
	want := []string{"statement_timeout=60000ms", "lock_timeout=10000ms", "idle_in_transaction_session_timeout=60000ms",
		"temp_file_limit=1048576kB", "work_mem=32768kB", "default_transaction_read_only=on", "track_activities=off"}
	for _, w := range want {
		if !strings.Contains(strings.Join(settings, " "), w) {
			t.Errorf("role settings %v lack %s", settings, w)
		}
	}
	for _, g := range []string{"pg_read_server_files", "pg_write_server_files", "pg_execute_server_program"} {
		var member bool
		if err := s.admin.QueryRow(ctx, "SELECT pg_has_role($1, $2, 'MEMBER')", s.Role(), g).Scan(&member); err != nil || member {
			t.Errorf("member of %s: %v %v", g, member, err)
		}
	}
	if w := s.Warnings(); len(w) > 0 {
		t.Errorf("warnings: %v", w)
	}
	// Another role name may not be the administrator's.
	if _, err := ConnectConfig(ctx, Config{AdminURL: s.cfg.AdminURL, Role: "avtgym"}); err == nil {
		t.Errorf("the administrator was accepted as the policy role")
	}
	// A wrong password is refused: the role's password is really set.
	cfg := s.policyConfig("postgres")
	cfg.ConnConfig.Password = "wrong"
	if c, err := pgx.ConnectConfig(ctx, cfg.ConnConfig); err == nil {
		c.Close(ctx)
		t.Errorf("a wrong password was accepted")
	}
}

// TestLoadErrors: a load stops at the first statement it may not or cannot
// run, names the file, line and statement, and leaves no database behind.
func TestLoadErrors(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	cases := []struct {
		name   string
		script string
		kind   sqlexec.ErrorKind
		want   string // in the message
	}{
		{"shell meta-command", "CREATE TABLE a (x int);\n\\! rm -rf /\n", sqlexec.KindDenied, `s.sql:2`},
		{"include meta-command", "\\i /etc/passwd\n", sqlexec.KindDenied, `\i`},
		{"connect meta-command", "\\connect postgres\n", sqlexec.KindDenied, `\connect`},
		{"not SQL", "CREATE TABLE a (x int);\nthis is not sql;\n", sqlexec.KindSyntax, `s.sql:2`},
		{"failing statement", "CREATE TABLE a (x int);\n\nINSERT INTO b VALUES (1);\nCREATE TABLE c (x int);\n", sqlexec.KindExecution, `s.sql:3 (INSERT INTO b VALUES`},
		{"bad COPY data", "CREATE TABLE a (x int);\nCOPY a (x) FROM stdin;\n1\nnot a number\n\\.\n", sqlexec.KindExecution, `invalid input syntax`},
		{"COPY data without end", "CREATE TABLE a (x int);\nCOPY a (x) FROM stdin;\n1\n2\n", sqlexec.KindSyntax, `without a \. line`},
		{"COPY from a file", "CREATE TABLE a (x int);\nCOPY a FROM '/etc/passwd';\n", sqlexec.KindDenied, `COPY`},
		{"COPY from a program", "CREATE TABLE a (x int);\nCOPY a FROM PROGRAM 'id';\n", sqlexec.KindDenied, `COPY`},
		{"COPY to stdout", "CREATE TABLE a (x int);\nCOPY a TO STDOUT;\n", sqlexec.KindDenied, `COPY`},
		{"alter role", "ALTER ROLE CURRENT_USER SET statement_timeout = 0;\n", sqlexec.KindDenied, `AlterRoleSetStmt`},
		{"password", "ALTER ROLE CURRENT_USER PASSWORD 'x';\n", sqlexec.KindDenied, `AlterRoleStmt`},
		{"create database", "CREATE DATABASE x;\n", sqlexec.KindDenied, `CreatedbStmt`},
		{"alter database", "ALTER DATABASE postgres SET work_mem = '1GB';\n", sqlexec.KindDenied, `AlterDatabaseSetStmt`},
		{"do", "DO $$ BEGIN END $$;\n", sqlexec.KindDenied, `DoStmt`},
		{"function", "CREATE FUNCTION f() RETURNS int LANGUAGE sql\nBEGIN ATOMIC\n  SELECT 1;\nEND;\n", sqlexec.KindDenied, `s.sql:1 (CREATE FUNCTION f() RETURNS ...): denied: CreateFunctionStmt`},
		{"grant", "CREATE TABLE a (x int);\nGRANT ALL ON a TO PUBLIC;\n", sqlexec.KindDenied, `GrantStmt`},
		{"set role", "SET ROLE avtgym;\n", sqlexec.KindDenied, `SET role`},
		{"read-only off", "SET default_transaction_read_only = off;\n", sqlexec.KindDenied, `SET default_transaction_read_only`},
		{"alter system", "ALTER SYSTEM SET work_mem = '1GB';\n", sqlexec.KindDenied, `AlterSystemStmt`},
		{"read a file", "SELECT pg_read_file('/etc/passwd');\n", sqlexec.KindDenied, `permission denied`},
		{"parameter", "SELECT $1;\n", sqlexec.KindSyntax, `parameter`},
		{"open transaction", "BEGIN;\nCREATE TABLE a (x int);\n", sqlexec.KindExecution, `BEGIN without COMMIT`},
		{"unterminated string", "CREATE TABLE a (x int);\nINSERT INTO a VALUES ('x);\n", sqlexec.KindSyntax, `unterminated`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			corpus := uniqueCorpus(t, s)
			_, err := s.EnsureDatabase(ctx, corpus, "x", Script("s.sql", tc.script))
			if k := sqlexec.KindOf(err); k != tc.kind || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v (kind %v), want kind %v and %q", err, k, tc.kind, tc.want)
			}
			t.Log(err)
			var n int
			if err := s.admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname LIKE $1", "avtgym_"+corpus+"%").Scan(&n); err != nil || n != 0 {
				t.Errorf("%d databases left behind (%v)", n, err)
			}
		})
	}
}

// TestLoadCycle: dumps whose foreign keys form a cycle have no load order.
func TestLoadCycle(t *testing.T) {
	s := server(t)
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.sql", "CREATE TABLE public.a (id int PRIMARY KEY, b_id int);\nALTER TABLE ONLY public.a ADD CONSTRAINT a_b FOREIGN KEY (b_id) REFERENCES public.b(id);\n")
	write("b.sql", "CREATE TABLE public.b (id int PRIMARY KEY, c_id int REFERENCES public.c(id));\n")
	write("c.sql", "CREATE TABLE public.c (id int PRIMARY KEY, a_id int, FOREIGN KEY (a_id) REFERENCES a(id));\n")
	write("d.sql", "CREATE TABLE public.d (id int PRIMARY KEY);\n")
	_, err := s.EnsureDatabase(context.Background(), uniqueCorpus(t, s), "cycle", DumpDir(dir))
	if err == nil || !strings.Contains(err.Error(), "cycle") || !strings.Contains(err.Error(), "a (a.sql) references b (b.sql) references c (c.sql) references a (a.sql)") {
		t.Fatalf("got %v", err)
	}
}

// TestLoadLimits: the size cap and the time limit stop a load.
func TestLoadLimits(t *testing.T) {
	ctx := context.Background()
	url := server(t).cfg.AdminURL
	s, err := ConnectConfig(ctx, Config{AdminURL: url, MaxDatabaseBytes: 12 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	_, err = s.EnsureDatabase(ctx, uniqueCorpus(t, s), "big",
		Script("big.sql", "CREATE TABLE a (x text);\nINSERT INTO a SELECT repeat('x', 1000) FROM generate_series(1, 20000);\n"))
	if k := sqlexec.KindOf(err); k != sqlexec.KindTooManyBytes {
		t.Fatalf("got %v, want KindTooManyBytes", err)
	}
	t.Log(err)
	s, err = ConnectConfig(ctx, Config{AdminURL: url, LoadTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	start := time.Now()
	_, err = s.EnsureDatabase(ctx, uniqueCorpus(t, s), "slow", Script("slow.sql", "SELECT pg_sleep(100);\n"))
	if k := sqlexec.KindOf(err); k != sqlexec.KindTimeout {
		t.Fatalf("got %v, want KindTimeout", err)
	}
	t.Log(err)
	// Deadline enforcement: a bound of 10x the limit (plus the database's creation).
	if e := time.Since(start); e > 10*s.cfg.LoadTimeout+5*time.Second {
		t.Errorf("the load lasted %v", e)
	}
}

// TestScriptSource loads a script with what psql scripts hold: comments,
// several statements on a line, dollar-quoted bodies with semicolons, a
// standard-SQL function body, COPY data with escapes and NULLs.
func TestScriptSource(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	script := `-- a comment; with a semicolon
CREATE TABLE t (id int PRIMARY KEY, name text, note text); CREATE TABLE u (id int);
/* a block comment;
   over lines */
COMMENT ON TABLE t IS $c$a comment;
with semicolons;
$c$;
CREATE VIEW v AS SELECT id * 2 AS twice, 'a;
b' AS text FROM t;
COPY t (id, name, note) FROM stdin;
1	a	\N
2	tab\there	line\nbreak
3	'quoted'	back\\slash
\.
INSERT INTO u VALUES (1), (2);
INSERT INTO u SELECT twice + 3 FROM v; ANALYZE u
`
	name, err := s.EnsureDatabase(ctx, uniqueCorpus(t, s), "script", Script("s.sql", script))
	if err != nil {
		t.Fatal(err)
	}
	db, err := s.Open(ctx, name, Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res := mustQuery(t, db, "SELECT id, name, note FROM t ORDER BY id")
	want := "[[1 a <nil>] [2 tab\there line\nbreak] [3 'quoted' back\\slash]]"
	if got := fmt.Sprint(res.Rows); got != want {
		t.Errorf("rows %q, want %q", got, want)
	}
	res = mustQuery(t, db, "SELECT sum(id) FROM u")
	if res.Rows[0][0] != int64(24) {
		t.Errorf("sum %v", res.Rows[0][0])
	}
}

// TestOpenTemplate: templates are never opened for queries.
func TestOpenTemplate(t *testing.T) {
	s, db := harbor(t)
	if _, err := s.Open(context.Background(), TemplateName(db.Name()), Options{}); sqlexec.KindOf(err) != sqlexec.KindUnavailable {
		t.Errorf("opening the template: %v", err)
	}
	if _, err := s.Open(context.Background(), "avtgym_no_such_db", Options{}); sqlexec.KindOf(err) != sqlexec.KindUnavailable {
		t.Errorf("opening a missing database: %v", err)
	}
	if _, err := s.Open(context.Background(), db.Name(), Options{ReadWrite: true}); err == nil {
		t.Errorf("read-write was accepted")
	}
}

// TestNonSuperuserAdmin: an administrator with only CREATEROLE and CREATEDB
// gets a working role and databases; what it cannot arrange (superuser-only
// role settings, revocations in pg_catalog) is in Warnings.
func TestNonSuperuserAdmin(t *testing.T) {
	s := server(t)
	ctx := context.Background()
	if _, err := s.admin.Exec(ctx, "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'avtgym_admin2') THEN CREATE ROLE avtgym_admin2 LOGIN CREATEDB CREATEROLE PASSWORD 'admin2pw'; END IF; END $$"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(s.cfg.AdminURL)
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("postgres://avtgym_admin2:admin2pw@%s:%d/postgres?sslmode=disable", cfg.Host, cfg.Port)
	s2, err := ConnectConfig(ctx, Config{AdminURL: url, Role: "avtgym_policy_na"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Close)
	corpus := uniqueCorpus(t, s2)
	name, err := s2.EnsureDatabase(ctx, corpus, "na", Script("na.sql", "CREATE TABLE t (a int);\nCOPY t (a) FROM stdin;\n1\n2\n\\.\n"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := s2.Open(ctx, name, Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if res := mustQuery(t, db, "SELECT sum(a) FROM t"); res.Rows[0][0] != int64(3) {
		t.Errorf("sum %v", res.Rows)
	}
	for _, q := range []string{"DELETE FROM t", "SELECT set_config('work_mem', '1GB', false)", "SELECT pg_advisory_lock(1)", "SELECT * FROM pg_stat_activity"} {
		if _, err := db.Query(ctx, q, sqlexec.DefaultLimits()); sqlexec.KindOf(err) != sqlexec.KindDenied {
			t.Errorf("%s: %v", q, err)
		}
	}
	w := strings.Join(s2.Warnings(), "\n")
	for _, want := range []string{"temp_file_limit", "track_activities"} {
		if !strings.Contains(w, want) {
			t.Errorf("no warning about %s in:\n%s", want, w)
		}
	}
	t.Logf("warnings:\n%s", w)
}

// TestHardening: in a working database the policy role may not execute the
// functions the catalog revokes, nor read pg_stat_activity.
func TestHardening(t *testing.T) {
	_, db := harbor(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pgtest.URLFor(t, db.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'pg_catalog' AND p.proname = ANY($1) AND has_function_privilege($2, p.oid, 'EXECUTE')`,
		append(append([]string(nil), hardening...), hardeningAfterLoad...), server(t).Role())
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(left) > 0 {
		t.Errorf("the policy role may still execute %v (%v)", left, err)
	}
	var read bool
	if err := c.QueryRow(ctx, "SELECT has_table_privilege($1, 'pg_catalog.pg_stat_activity', 'SELECT')", server(t).Role()).Scan(&read); err != nil || read {
		t.Errorf("pg_stat_activity readable: %v %v", read, err)
	}
	// The statistics views (which count what the references read).
	rows, err = c.Query(ctx, `SELECT c.relname::text FROM pg_class c WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'v'
		AND (c.relname LIKE 'pg\_stat\_%' OR c.relname LIKE 'pg\_statio\_%') AND has_table_privilege($1, c.oid, 'SELECT')`, server(t).Role())
	if err != nil {
		t.Fatal(err)
	}
	if left, err := pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(left) > 0 {
		t.Errorf("the policy role may still read %v (%v)", left, err)
	}
	for _, v := range []string{"pg_stat_user_tables", "pg_statio_user_tables", "pg_stat_all_indexes", "pg_stat_database"} {
		if err := c.QueryRow(ctx, "SELECT has_table_privilege($1, 'pg_catalog.'||$2, 'SELECT')", server(t).Role(), v).Scan(&read); err != nil || read {
			t.Errorf("%s readable: %v %v", v, read, err)
		}
	}
	// Every function the parser denies is revoked as well, and conversely.
	for _, f := range append(append([]string(nil), hardening...), hardeningAfterLoad...) {
		if deniedFunctions[f] == "" {
			t.Errorf("%s is revoked but not denied by the parser", f)
		}
	}
	for f := range deniedFunctions {
		if !slices.Contains(hardening, f) && !slices.Contains(hardeningAfterLoad, f) {
			t.Errorf("%s is denied by the parser but not revoked", f)
		}
	}
}

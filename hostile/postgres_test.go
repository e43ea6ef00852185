package hostile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"avtgym/internal/pgtest"
	pb "avtgym/proto/avtgym/v1"
)

// The PostgreSQL attacks of issue 25, each against a real `avtgym serve`
// and a real PostgreSQL server, with Python-tested Management tasks run
// by the real test workers. Each must end as the policy's scored failure
// (TERMINATED, outcome 0, never ERROR and never an endless VERIFIER_BUSY),
// and afterwards the server must be healthy and score normal episodes
// right, on SQLite and on PostgreSQL.

// opsScript is each PostgreSQL database of the suite: 300 orders, every
// third one late.
const opsScript = `CREATE TABLE orders (id int PRIMARY KEY, customer varchar(40) NOT NULL, late boolean NOT NULL, status text NOT NULL);
INSERT INTO orders SELECT g, 'c' || (g % 7), g % 3 = 0, 'open' FROM generate_series(1, 300) g;
`

// shipTest is a BIRD-Interact-style Python test of "ship the late
// orders". Its loop binds last only when a shipped order exists, so that
// the policy's data decides whether the name is bound (issue 25: an
// UnboundLocalError was reported as a broken test, ERROR).
const shipTest = `def test_case(pred_sqls, sol_sqls, db_name, conn):
    res, _ = perform_query_on_postgresql_databases("SELECT status FROM orders WHERE status = 'shipped' ORDER BY id", db_name, conn)
    for r in res:
        last = r[0]
    assert last == 'shipped', "nothing was shipped"
    res, _ = perform_query_on_postgresql_databases("SELECT count(*) FROM orders WHERE late AND status <> 'shipped'", db_name, conn)
    assert res[0][0] == 0, "late orders are left"
    res, _ = perform_query_on_postgresql_databases("SELECT count(*) FROM orders WHERE NOT late AND status = 'shipped'", db_name, conn)
    assert res[0][0] == 0, "orders that were not late were shipped"
`

// The Management task verified by checks: harbor_M_4's shape (an index
// that must exist, read from pg_indexes, and a row that must be added).
const (
	indexSQL  = "CREATE INDEX orders_customer_ci ON orders (lower(customer))"
	insertSQL = "INSERT INTO orders VALUES (301, 'Zed', false, 'open')"
	shipSQL   = "UPDATE orders SET status = 'shipped' WHERE late"
	countSQL  = "SELECT count(*) FROM orders WHERE late"
)

// pgRecords returns the records of database i: a Query task with a
// follow-up (so that BIRD_A serves it), a Management task decided by
// checks, and one decided by a Python test.
func pgRecords(i int) string {
	rec := func(m map[string]any) string {
		b, err := json.Marshal(m)
		if err != nil {
			panic(err)
		}
		return string(b) + "\n"
	}
	db := fmt.Sprintf("ops%d", i)
	return rec(map[string]any{
		"id": fmt.Sprintf("q-%d", i), "db": db, "request": "How many orders are late?", "ambiguities": []any{},
		"reference": map[string]any{"sql": countSQL},
		"follow_up": map[string]any{"request": "And how many are not?", "category": "Query",
			"reference": map[string]any{"sql": "SELECT count(*) FROM orders WHERE NOT late"}},
	}) + rec(map[string]any{
		"id": fmt.Sprintf("mc-%d", i), "db": db, "category": "Management", "ambiguities": []any{},
		"request": "Let us look customers up whatever their letter case, and add Zed's order 301.",
		"reference": map[string]any{"sql": indexSQL + "; " + insertSQL, "checks": []string{
			"SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'orders' AND indexdef ILIKE '%lower(%customer%'",
			"SELECT id, customer, late, status FROM orders WHERE id > 295 ORDER BY id",
			"SELECT count(*) FROM orders WHERE lower(customer) = 'zed'",
		}},
	}) + rec(map[string]any{
		"id": fmt.Sprintf("mt-%d", i), "db": db, "category": "Management", "ambiguities": []any{},
		"request":   "Ship the late orders.",
		"reference": map[string]any{"sql": shipSQL, "tests": []string{shipTest}},
	})
}

// writePGCorpus writes a corpus of n PostgreSQL databases into dir.
func writePGCorpus(t testing.TB, dir, name string, n int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var dbs []map[string]any
	var records strings.Builder
	for i := range n {
		dbs = append(dbs, map[string]any{"id": fmt.Sprintf("ops%d", i), "engine": "postgres", "script": "ops.sql"})
		records.WriteString(pgRecords(i))
	}
	manifest, _ := json.Marshal(map[string]any{"name": name, "databases": dbs})
	for f, body := range map[string]string{"corpus.json": string(manifest), "records.jsonl": records.String(), "ops.sql": opsScript} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startPG serves the suite's SQLite corpus, a PostgreSQL corpus of n
// databases and the demo corpus (TIDE's samples), as policy role role
// ("": the default role, for builds older than --postgres-role).
func startPG(t testing.TB, role string, n int, env []string, args ...string) *server {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pg")
	writePGCorpus(t, dir, "pg"+role, n)
	demo, err := filepath.Abs(filepath.Join("..", "corpus", "demo"))
	if err != nil {
		t.Fatal(err)
	}
	full := []string{"--postgres", pgtest.URL(t), "--corpus", dir, "--corpus", demo}
	if role != "" {
		full = append(full, "--postgres-role", role)
	}
	s := startEnv(t, env, append(full, args...)...)
	s.pgCorpus = "pg" + role
	return s
}

// play resets task under protocol (0: AMBITAB) with the outcome reward and
// submits sql; it returns the final step, or the step's error.
func (s *server) play(t testing.TB, task string, protocol pb.Protocol, sqls ...string) (*pb.StepResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	corpus := s.pgCorpus
	if strings.HasPrefix(task, "tide-") {
		corpus = "demo"
	}
	r, err := s.c.Env.Reset(ctx, &pb.ResetRequest{Corpus: corpus, TaskId: task, IncludePrivileged: true,
		Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Protocol: protocol}})
	if err != nil {
		t.Fatalf("reset %s: %v", task, err)
	}
	tok := r.Episodes[0].GetToken()
	var last *pb.StepResponse
	for _, sql := range sqls {
		last, err = s.tryStep(tok, submit(sql))
		if err != nil {
			return nil, err
		}
		tok = last.GetToken()
		if last.GetDone() {
			break
		}
	}
	return last, nil
}

// mentionsAny reports whether text contains one of the "|"-separated
// alternatives of want.
func mentionsAny(text, want string) bool {
	for _, w := range strings.Split(want, "|") {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

// scoredFailure fails the test unless r is a finished, scored failure.
func scoredFailure(t testing.TB, what string, r *pb.StepResponse, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: the step failed: %v (reason %s); want the policy's scored failure", what, err, reason(err))
	}
	if !r.GetDone() || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.GetReward().GetValue() != 0 {
		t.Fatalf("%s: done %v, status %v, reward %v (%s); want TERMINATED with reward 0", what, r.GetDone(), r.GetStatus(), r.GetReward(), r.GetPrivileged().GetVerifierReason())
	}
}

// pgAlive fails the test unless the server is healthy and scores normal
// episodes right: the SQLite ones (alive) and, on PostgreSQL, a Query and
// both kinds of Management task, right and wrong.
func (s *server) pgAlive(t testing.TB, db int) {
	t.Helper()
	s.alive(t)
	for _, tc := range []struct {
		task, sql string
		want      float64
	}{
		{fmt.Sprintf("q-%d", db), "select COUNT(*) from orders where late", 1},
		{fmt.Sprintf("q-%d", db), "SELECT count(*) FROM orders", 0},
		{fmt.Sprintf("mc-%d", db), indexSQL + "; " + insertSQL, 1},
		{fmt.Sprintf("mc-%d", db), insertSQL, 0},
		{fmt.Sprintf("mt-%d", db), shipSQL, 1},
		{fmt.Sprintf("mt-%d", db), "UPDATE orders SET status = 'shipped'", 0},
	} {
		r, err := s.play(t, tc.task, 0, tc.sql)
		if err != nil || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.GetReward().GetValue() != tc.want {
			t.Fatalf("a normal episode after the attack (%s: %s): %v, %v (%s); want reward %v", tc.task, tc.sql, r.GetReward(), err,
				r.GetPrivileged().GetVerifierReason(), tc.want)
		}
	}
}

// pgAttacks are issue 25's attacks on the PostgreSQL paths and more of the
// same classes: SQL that crashed the process, raised SQLSTATEs that chose
// ERROR, data that crashed a test worker, objects that shadow what a check
// reads, and queries without a memory bound. want is a text the feedback
// turn must contain, or "|"-separated alternatives of which it must contain
// one ("" when a failed check's reason stays privileged).
func pgAttacks() []struct{ name, task, sql, want string } {
	r := strings.Repeat
	chain := "1" + r("+1", 30000)
	fakeIndex := `CREATE TEMP VIEW pg_indexes AS SELECT 'public'::name AS schemaname, 'orders'::name AS tablename,
		'fake'::name AS indexname, 'CREATE INDEX fake ON orders (lower(customer))'::text AS indexdef`
	raise := func(code string) string {
		return "DO $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '" + code + "'; END$$"
	}
	a := []struct{ name, task, sql, want string }{
		// One SQL killed the process inside libpg_query.
		{"30,000 chained additions on a Management task", "mc-0", "SELECT " + chain, "nests too deeply"},
		{"30,000 chained additions beside 'lo_' on a Query task", "q-0", "SELECT " + chain + ", 'lo_'", "nests too deeply"},
		{"30,000 chained additions in a function body", "mt-0", "CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $b$SELECT " + chain + "$b$", "nests too deeply"},
		{"a PL/pgSQL function without a body (SIGABRT in libpg_query)", "mc-0", "CREATE FUNCTION f(a int) RETURNS int LANGUAGE plpgsql", "no body"},
		{"5,000 nested subqueries with 'lo_'", "q-0", "SELECT " + r("(SELECT ", 5000) + "1" + r(")", 5000) + ", 'lo_'", "nests too deeply"},
		// The policy chose ERROR with a SQLSTATE.
		{"pg_database_size of a missing database (3D000)", "q-0", "SELECT pg_database_size('nosuchdb')", "3D000"},
		{"has_database_privilege on a missing database (3D000)", "q-0", "SELECT has_database_privilege('nosuchdb', 'CONNECT')", "3D000"},
		{"a trigger the policy made raising 57P01 when the checks' state is made", "mc-0",
			"CREATE FUNCTION zz() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '57P01'; END$$; " +
				"CREATE TRIGGER zz BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION zz(); " + insertSQL, "57P01"},
		// Policy data crashed a test worker, or made a test look broken.
		{"a jsonb nested 5,000 deep (RecursionError in the worker)", "mt-0", "SELECT (repeat('[', 5000) || repeat(']', 5000))::jsonb", ""},
		{"data that leaves a test's name unbound (UnboundLocalError)", "mt-0", "SELECT 1", ""},
		{"deleting every row a test loops over", "mt-0", "DELETE FROM orders", ""},
		// The catalog and the tables were shadowed.
		{"a temporary view named pg_indexes (harbor_M_4)", "mc-0", insertSQL + "; " + fakeIndex, ""},
		{"a temporary copy of the checked table", "mc-0", indexSQL + "; CREATE TEMP TABLE orders AS SELECT * FROM public.orders; " + insertSQL, ""},
		{"a schema named like the role, searched before public", "mc-0", indexSQL + "; CREATE SCHEMA avtgym_hostile; " +
			"CREATE TABLE avtgym_hostile.orders (LIKE public.orders INCLUDING ALL); INSERT INTO avtgym_hostile.orders SELECT * FROM public.orders; " + insertSQL, ""},
		{"lower() overloaded for varchar", "mc-0", indexSQL + "; CREATE FUNCTION public.lower(varchar) RETURNS text LANGUAGE sql AS $$SELECT 'zed'::text$$", "built-in"},
		{"an operator = on varchar", "mc-0", indexSQL + "; CREATE FUNCTION zz_eq(varchar, varchar) RETURNS bool LANGUAGE sql AS 'SELECT true'; " +
			"CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = zz_eq)", "built-in"},
		// What the references read, and other sessions.
		{"the cumulative statistics", "q-0", "SELECT relname, seq_scan, idx_scan FROM pg_stat_user_tables", "statistics"},
		{"a statistics function", "q-0", "SELECT pg_stat_get_numscans('orders'::regclass)", "statistics"},
		{"every session's locks", "q-0", "SELECT count(*) FROM pg_locks", "locks"},
		{"ending its own session", "mt-0", "DO $$BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); END$$", "signalling"},
		// No memory bound off the SQLite path.
		{"three string_agg of repeat over 300 rows", "q-0", "SELECT length(string_agg(repeat('a', 1000000), '')), length(string_agg(repeat('b', 1000000), '')), " +
			"length(string_agg(repeat('c', 1000000), '')) FROM generate_series(1, 300)", "MiB of memory"},
		{"repeat('x', 2e8) four times on the Python path", "mt-0", "SELECT repeat('x', 200000000) FROM generate_series(1, 4)", "memory"},
		// On a starved machine the statement limit may cancel the UPDATE
		// before its backend reaches the memory bound: either bounds it
		// (the peak growth is asserted for the whole suite).
		{"a 900 MB value in a row the checks read", "mc-0", indexSQL + "; " + insertSQL +
			"; ALTER TABLE orders ALTER COLUMN customer TYPE text; UPDATE orders SET customer = repeat('x', 900000000) WHERE id = 300", "memory|time limit"},
		// A check's error is privileged.
		{"a renamed table (the check's error is privileged)", "mc-0", "ALTER TABLE orders RENAME TO o2", ""},
	}
	for _, code := range []string{"57P01", "08006", "3D000", "53300"} {
		a = append(a,
			struct{ name, task, sql, want string }{"RAISE " + code + " on the checks path", "mc-0", raise(code), code},
			struct{ name, task, sql, want string }{"RAISE " + code + " on the Python-test path", "mt-0", raise(code), code})
	}
	return a
}

func TestPostgresAttacks(t *testing.T) {
	s := startPG(t, "avtgym_hostile", 1, nil, "--statement-timeout", "10s")
	s.pgAlive(t, 0)
	// Issue 25's pass condition: no backend grows by 256 MiB, no test
	// worker by 512 MiB, whatever the attack.
	w := watchPeaks(t, s, "avtgym_hostile")
	defer func() {
		backend, worker := w.stop()
		t.Logf("peak growth: a backend %d MiB, a test worker %d MiB", backend>>20, worker>>20)
		if backend > 256<<20 || worker > 512<<20 {
			t.Errorf("a backend grew by %d MiB (bound 256), a test worker by %d MiB (bound 512)", backend>>20, worker>>20)
		}
	}()
	for _, tc := range pgAttacks() {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s.play(t, tc.task, 0, tc.sql)
			scoredFailure(t, tc.name, r, err)
			fb := feedback(r)
			if tc.want != "" && !mentionsAny(fb, tc.want) {
				t.Errorf("feedback %q does not mention %q (reason %q)", fb, tc.want, r.GetPrivileged().GetVerifierReason())
			}
			if tc.want == "" && strings.Contains(fb, "check") {
				t.Errorf("feedback %q quotes a check", fb)
			}
			t.Logf("%s", r.GetPrivileged().GetVerifierReason())
			s.pgAlive(t, 0)
		})
	}
	// The same SQLSTATE through BIRD_A's execute: a tool result, the
	// episode goes on; the statistics are refused there too.
	ctx := context.Background()
	for _, sql := range []string{"SELECT pg_database_size('nosuchdb')", "SELECT relname, seq_scan FROM pg_stat_user_tables"} {
		rr, err := s.c.Env.Reset(ctx, &pb.ResetRequest{Corpus: s.pgCorpus, TaskId: "q-0", Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.tryStep(rr.Episodes[0].GetToken(), &pb.Action{Kind: &pb.Action_Execute_{Execute: &pb.Action_Execute{Sql: sql}}})
		if err != nil || r.GetDone() || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_RUNNING {
			t.Errorf("BIRD_A execute %s: %v, done %v, status %v", sql, err, r.GetDone(), r.GetStatus())
			continue
		}
		turns := r.GetObservation().GetTurns()
		if out := turns[len(turns)-1].GetText(); !strings.HasPrefix(out, "Error") {
			t.Errorf("BIRD_A execute %s: %q, want the database's error as the tool's output", sql, out)
		}
	}
	// TIDE's drift test parsed the policy's SQL: a deep second SQL is
	// scored, and two SQLs that do not run recognise no drift.
	for name, sqls := range map[string][2]string{
		"a deep second SQL":             {"SELECT region FROM customers", "SELECT " + strings.Repeat("+1", 30000)[1:]},
		"two SQLs that do not run":      {"SELECT nothing FROM nowhere", "SELECT other FROM elsewhere WHERE x = 1"},
		"two texts that are not SQL":    {"this is not SQL", "neither is this"},
		"a first SQL that does not run": {"SELECT no_such_column FROM customers", "SELECT region FROM customers WHERE segment = 'consumer'"},
	} {
		r, err := s.play(t, "tide-a1-D", pb.Protocol_PROTOCOL_TIDE_F, sqls[0], sqls[1])
		if err != nil || !r.GetDone() || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
			t.Errorf("TIDE, %s: %v, %v", name, r, err)
			continue
		}
		if got := r.GetReward().GetComponents()["drift_recognized"]; got != 0 {
			t.Errorf("TIDE, %s: drift_recognized %v, want 0", name, got)
		}
	}
	s.pgAlive(t, 0)
	if strings.Contains(s.log.String(), "panic") || strings.Contains(s.log.String(), "SIGSEGV") {
		t.Errorf("the server log shows a crash:\n%s", tail(s.log.String()))
	}
}

// TestPostgresProductionShape: issue 25's shape — GOMAXPROCS=8 and four
// Management databases against a role limit of 50 made serve exit with
// "too many connections for role" (16 copies each). Now the four share
// the connection budget (3 copies each, room for the Python workers'
// sessions), the role never holds more than it, and every database serves
// Python-tested and check-tested episodes.
func TestPostgresProductionShape(t *testing.T) {
	const role = "avtgym_shape"
	s := startPG(t, role, 4, []string{"GOMAXPROCS=8"}, "--postgres-role-connections", "50")
	for db := range 4 {
		s.pgAlive(t, db)
	}
	n := roleConnections(t, role)
	t.Logf("the role holds %d connections", n)
	if n > 32 {
		t.Errorf("the role holds %d connections, more than the default budget of 32", n)
	}
	if !strings.Contains(s.log.String(), `"budget": 32`) {
		t.Errorf("the log does not state the connection budget:\n%s", tail(s.log.String()))
	}
	// A budget the role cannot hold fails at start, naming the flag.
	dir := filepath.Join(t.TempDir(), "pg")
	writePGCorpus(t, dir, "pgshape2", 1)
	out, err := runServe(t, "--postgres", pgtest.URL(t), "--postgres-role", role, "--postgres-role-connections", "50",
		"--postgres-connections", "40", "--corpus", dir)
	if err == nil || !strings.Contains(out, "--postgres-connections") {
		t.Errorf("a second process asking for 40 more connections: %v\n%s", err, tail(out))
	}
}

// TestPostgresReplicasSharePasswordKey: two real replicas on one server,
// with an administrator URL that holds no password (it is in a passfile)
// and a shared token key, from which the policy role's password is
// derived: both serve Python-tested episodes, turn by turn, and neither
// warns of a random password. (The lockout itself, a replica with another
// key resetting the role's password, is TestReplicasSharePasswordKey in
// sqlexec/postgres: an administrator without any password needs trust or
// peer authentication, which the test server does not offer.)
func TestPostgresReplicasSharePasswordKey(t *testing.T) {
	const role = "avtgym_replicas"
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	pw, _ := u.User.Password()
	dir := t.TempDir()
	pass := filepath.Join(dir, "pgpass")
	if err := os.WriteFile(pass, []byte(fmt.Sprintf("%s:%s:*:%s:%s\n", u.Hostname(), u.Port(), u.User.Username(), pw)), 0o600); err != nil {
		t.Fatal(err)
	}
	u.User = url.User(u.User.Username())
	key := filepath.Join(dir, "token.key")
	if out, err := runCommand(t, "keygen", key); err != nil {
		t.Fatalf("keygen: %v\n%s", err, out)
	}
	env := []string{"PGPASSFILE=" + pass, "AVTGYM_TOKEN_KEY_FILE=" + key}
	args := func(corpus string) []string {
		return []string{"--postgres", u.String(), "--postgres-role", role, "--corpus", corpus}
	}
	c1, c2 := filepath.Join(dir, "c1"), filepath.Join(dir, "c2")
	writePGCorpus(t, c1, "pgrep", 1)
	writePGCorpus(t, c2, "pgrep", 1)
	r1 := startEnv(t, env, args(c1)...)
	r2 := startEnv(t, env, args(c2)...)
	r1.pgCorpus, r2.pgCorpus = "pgrep", "pgrep"
	for round := range 3 {
		for i, s := range []*server{r1, r2, r1} {
			r, err := s.play(t, "mt-0", 0, shipSQL)
			if err != nil || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.GetReward().GetValue() != 1 {
				t.Fatalf("round %d, replica %d: %v, %v (%s)", round, i%2+1, r.GetReward(), err, r.GetPrivileged().GetVerifierReason())
			}
		}
	}
	for _, s := range []*server{r1, r2} {
		if strings.Contains(s.log.String(), "password is random") {
			t.Errorf("a replica warns of a random password:\n%s", tail(s.log.String()))
		}
	}
}

// roleConnections counts the connections the role holds now.
func roleConnections(t testing.TB, role string) int {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// runCommand runs the avtgym binary with args to its end (a minute at
// most) and returns its output.
func runCommand(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "AVTGYM_TOKEN_KEY_FILE=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// runServe runs `avtgym serve` with args that should make it fail at
// start, and returns its output.
func runServe(t testing.TB, args ...string) (string, error) {
	t.Helper()
	return runCommand(t, append([]string{"serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""}, args...)...)
}

// peaks follows the growth of the policy role's backends and of the
// server's Python test workers while an attack runs.
type peaks struct {
	done            chan struct{}
	backend, worker atomic.Int64
	wg              sync.WaitGroup
}

// watchPeaks polls, every millisecond, each backend of role (found in
// pg_stat_activity) and each Python child of the server process: its
// VmHWM over its VmRSS when first seen.
func watchPeaks(t testing.TB, s *server, role string) *peaks {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	p := &peaks{done: make(chan struct{})}
	first := map[int]int64{}
	workers := map[int]bool{}
	grow := func(pid int, into *atomic.Int64) {
		rss, hwm := procField(pid, "VmRSS"), procField(pid, "VmHWM")
		if rss < 0 || hwm < 0 {
			return
		}
		base, ok := first[pid]
		if !ok {
			first[pid], base = rss, rss
		}
		if g := hwm - base; g > into.Load() {
			into.Store(g)
		}
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer c.Close(ctx)
		for tick := 0; ; tick++ {
			if tick%20 == 0 {
				rows, err := c.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE usename = $1", role)
				if err == nil {
					for rows.Next() {
						var pid int
						if rows.Scan(&pid) == nil {
							grow(pid, &p.backend)
						}
					}
					rows.Close()
				}
			}
			for pid := range first {
				if !workers[pid] {
					grow(pid, &p.backend)
				}
			}
			if tick%20 == 0 {
				for _, pid := range children(s.cmd.Process.Pid) {
					workers[pid] = true
				}
			}
			for pid := range workers {
				grow(pid, &p.worker)
			}
			select {
			case <-p.done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return p
}

// stop ends the watch and returns the peaks: a backend's and a worker's.
func (p *peaks) stop() (backend, worker int64) {
	close(p.done)
	p.wg.Wait()
	return p.backend.Load(), p.worker.Load()
}

// children are the process ids whose parent is pid (from /proc/*/stat:
// /proc/PID/task/TID/children is not on every kernel).
func children(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ")".
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, n)
		}
	}
	return out
}

// procField reads a field (in kB) of /proc/pid/status, in bytes; -1 when
// the process is gone.
func procField(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10
		}
	}
	return -1
}

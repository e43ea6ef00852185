package postgres

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"avtgym/internal/parallel"
	"avtgym/internal/pgtest"
	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
)

// holdAll checks every copy out (waiting for the jobs in flight), so that
// they are at rest, and returns them; give them back with the function.
func holdAll(t testing.TB, d *StatefulDB) func() {
	t.Helper()
	var cs []*clone
	for range d.clones {
		c, err := d.checkout(context.Background())
		if err != nil {
			t.Fatalf("checking a copy out: %v", err)
		}
		cs = append(cs, c)
	}
	return func() {
		for _, c := range cs {
			d.ready <- c
			d.end()
		}
	}
}

// cloneSums dumps every copy at rest.
func cloneSums(t testing.TB, d *StatefulDB) map[string]string {
	t.Helper()
	give := holdAll(t, d)
	defer give()
	sums := map[string]string{}
	for _, c := range d.clones {
		sums[c.name] = pgtest.DumpSum(t, c.name)
	}
	return sums
}

// hostileJob is a job whose predicted SQL attacks the isolation, with the
// verdict it must get: fail with an error of kind (of the predicted SQL, or
// of a check it broke), or by comparison (0); a few must pass.
type hostileJob struct {
	name  string
	sql   string
	pass  bool
	kind  sqlexec.ErrorKind
	short bool // run with a 300ms statement limit (and only in the first round)
	// deadline, when set, is the job's Deadline (first round only).
	deadline time.Duration
}

// harborCanary are checks that see any change to the harbor data, its
// sequences and its schema.
var harborCanary = []string{
	`SELECT (SELECT count(*) FROM berths), (SELECT sum(daily_rate_usd) FROM berths), (SELECT count(*) FROM cranes WHERE operational_status = 'active'),
		(SELECT count(*) FROM vessels), (SELECT count(*) FROM port_calls), (SELECT count(*) FROM cargo_manifests), (SELECT count(*) FROM crane_assignments)`,
	`SELECT last_value, is_called FROM berths_berth_id_seq UNION ALL SELECT last_value, is_called FROM cargo_manifests_manifest_id_seq
		UNION ALL SELECT last_value, is_called FROM cranes_crane_id_seq`,
	"SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')",
	"SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace",
	"SELECT obj_description('berths'::regclass, 'pg_class')",
}

// insertManifest inserts a manifest and returns its serial id.
const insertManifest = `INSERT INTO cargo_manifests (call_id, bl_number, direction, cargo_category, teu, weight_t, declared_value_usd, consignee, details)
	VALUES (196, 'ZZ-1', 'export', 'containerized', 1, 1, 1, 'x', '{}') RETURNING manifest_id`

var hostileJobs = []hostileJob{
	// Writes everywhere, schema changes, catalogs.
	{name: "writes to every table", sql: `UPDATE berths SET daily_rate_usd = 0; DELETE FROM crane_assignments; UPDATE cranes SET operational_status = 'retired';
		INSERT INTO vessels (imo_number, vessel_name, vessel_type, flag_state, gross_tonnage, deadweight_t, length_overall_m, design_draft_m, build_year)
		VALUES ('IMO0000001', 'Zz', 'bulk', 'ZZ', 1, 1, 1, 1, 2000)`},
	// The checks then fail on the state left: a failed verdict whose check
	// error stays privileged (no Err, no feedback).
	{name: "drop tables", sql: "DROP TABLE crane_assignments; DROP TABLE cargo_manifests CASCADE; DROP TABLE berths CASCADE"},
	{name: "truncate restart identity", sql: "TRUNCATE berths, cranes, vessels, port_calls, cargo_manifests, crane_assignments RESTART IDENTITY"},
	{name: "alter and rename", sql: "ALTER TABLE cranes ADD COLUMN zz int DEFAULT 1; ALTER TABLE berths RENAME TO b2; CREATE TABLE berths (x serial)"},
	{name: "new objects", sql: `CREATE SCHEMA zz; CREATE TABLE zz.t (a serial PRIMARY KEY); INSERT INTO zz.t DEFAULT VALUES;
		CREATE VIEW zv AS SELECT 1 AS a; CREATE MATERIALIZED VIEW zmv AS SELECT * FROM berths; REFRESH MATERIALIZED VIEW zmv;
		CREATE TYPE zmood AS ENUM ('a'); CREATE INDEX ON cargo_manifests (lower(consignee)); CREATE TEMP TABLE ztemp AS SELECT 1`},
	{name: "comment and grant", sql: "COMMENT ON TABLE berths IS 'pwned'; GRANT ALL ON berths TO PUBLIC; REVOKE ALL ON cranes FROM PUBLIC"},
	{name: "functions, triggers, rules, DO, CALL", sql: `CREATE FUNCTION zf() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.daily_rate_usd := 1; RETURN NEW; END $$;
		CREATE TRIGGER zt BEFORE UPDATE ON berths FOR EACH ROW EXECUTE FUNCTION zf(); UPDATE berths SET terminal = terminal;
		CREATE RULE zr AS ON DELETE TO vessels DO INSTEAD NOTHING;
		CREATE PROCEDURE zp() LANGUAGE plpgsql AS $$ BEGIN PERFORM nextval('berths_berth_id_seq'); UPDATE cranes SET crane_code = 'x' || crane_code; END $$; CALL zp();
		DO $$ BEGIN PERFORM nextval('vessels_vessel_id_seq'); DELETE FROM cargo_manifests WHERE manifest_id < 10; END $$`},
	{name: "catalog write", sql: "UPDATE pg_catalog.pg_class SET relname = 'x' WHERE relname = 'berths'", kind: sqlexec.KindDenied},
	{name: "deferred constraint violated", sql: `CREATE TABLE zd (a int REFERENCES berths DEFERRABLE INITIALLY DEFERRED); INSERT INTO zd VALUES (99999)`, kind: sqlexec.KindExecution},
	{name: "division by zero after writes", sql: "UPDATE berths SET daily_rate_usd = 1; SELECT 1/0", kind: sqlexec.KindExecution},
	// Sequences.
	{name: "sequence bumps", sql: "SELECT nextval('cargo_manifests_manifest_id_seq') FROM generate_series(1, 100); SELECT setval('berths_berth_id_seq', 1000, false)"},
	{name: "sequence restart", sql: "ALTER SEQUENCE cranes_crane_id_seq RESTART WITH 5000; SELECT nextval('cranes_crane_id_seq'); ALTER SEQUENCE cargo_manifests_manifest_id_seq INCREMENT BY 7"},
	{name: "serial id", sql: insertManifest},
	// Locks.
	{name: "long locks", sql: "LOCK TABLE cranes, berths, port_calls IN ACCESS EXCLUSIVE MODE; SELECT pg_advisory_xact_lock(42); SELECT pg_sleep(0.01)"},
	// Denied: session state, transaction control, files and programs, the server.
	{name: "copy to program", sql: "COPY berths TO PROGRAM 'touch /tmp/avtgym-pwned'", kind: sqlexec.KindDenied},
	{name: "session set", sql: "SET statement_timeout = 0; SELECT pg_sleep(100)", kind: sqlexec.KindDenied},
	{name: "set_config", sql: "SELECT set_config('work_mem', '10GB', false)", kind: sqlexec.KindDenied},
	{name: "commit", sql: "UPDATE berths SET daily_rate_usd = 0; COMMIT; DROP TABLE berths", kind: sqlexec.KindDenied},
	{name: "savepoint", sql: "SAVEPOINT a; DROP TABLE berths; ROLLBACK TO a", kind: sqlexec.KindDenied},
	{name: "prepare transaction", sql: "UPDATE berths SET daily_rate_usd = 0; PREPARE TRANSACTION 'x'", kind: sqlexec.KindDenied},
	{name: "session advisory lock", sql: "SELECT pg_advisory_lock(7)", kind: sqlexec.KindDenied},
	{name: "prepared statement through DO", sql: "DO $$ BEGIN EXECUTE 'PREPARE zz AS SELECT 1'; END $$", kind: sqlexec.KindDenied},
	{name: "cursor with hold", sql: "DECLARE c CURSOR WITH HOLD FOR SELECT 1", kind: sqlexec.KindDenied},
	{name: "listen", sql: "LISTEN x", kind: sqlexec.KindDenied},
	{name: "large object", sql: "SELECT lo_from_bytea(0, 'x')", kind: sqlexec.KindDenied},
	{name: "vacuum", sql: "VACUUM FULL berths", kind: sqlexec.KindDenied},
	{name: "analyze", sql: "ANALYZE berths", kind: sqlexec.KindDenied},
	{name: "create index concurrently", sql: "CREATE INDEX CONCURRENTLY zi ON berths (terminal)", kind: sqlexec.KindDenied},
	{name: "create database", sql: "CREATE DATABASE zz", kind: sqlexec.KindDenied},
	{name: "alter role", sql: "ALTER ROLE CURRENT_USER SET statement_timeout = 0", kind: sqlexec.KindDenied},
	{name: "terminate", sql: "SELECT pg_terminate_backend(pid) FROM pg_stat_activity", kind: sqlexec.KindDenied},
	// Time.
	{name: "function that sleeps", sql: "CREATE FUNCTION zs() RETURNS void LANGUAGE sql AS 'SELECT pg_sleep(100)'; SELECT zs()", kind: sqlexec.KindTimeout, short: true},
	{name: "lock then sleep", sql: "LOCK TABLE berths IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(100)", kind: sqlexec.KindTimeout, short: true},
	{name: "runaway recursion", sql: "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r", kind: sqlexec.KindTimeout, short: true},
	{name: "job deadline", sql: "SELECT pg_sleep(0.2); UPDATE berths SET daily_rate_usd = 0; SELECT pg_sleep(0.2); SELECT pg_sleep(0.2)", kind: sqlexec.KindTimeout, deadline: 300 * time.Millisecond},
	// Not SQL.
	{name: "syntax", sql: "UPDATE SET", kind: sqlexec.KindSyntax},
	{name: "unknown table", sql: "DELETE FROM nothing", kind: sqlexec.KindSyntax},
}

// job returns the hostile job, decided by the canary checks against a
// reference that changes nothing (the serial-id job: against the same
// insert, whose id must be the same).
func (h hostileJob) job() sqlexec.Job {
	lim := jobLimits()
	if h.short {
		lim.Timeout = 300 * time.Millisecond
	}
	j := sqlexec.Job{Key: "hostile", Predicted: h.sql, Reference: []string{"SELECT 1"}, Checks: harborCanary, Policy: sqlexec.DefaultPolicy(), Limits: lim, Deadline: h.deadline}
	if h.sql == insertManifest {
		j.Key, j.Reference, j.Checks = "serial id", []string{insertManifest}, []string{"SELECT manifest_id, bl_number FROM cargo_manifests WHERE bl_number = 'ZZ-1'"}
	}
	return j
}

// wantPass says whether the job must pass (changing nothing the canary sees,
// or the serial-id job).
func (h hostileJob) wantPass() bool {
	return h.pass || h.sql == insertManifest || h.name == "long locks"
}

// TestStatefulIsolation: more than a thousand verifications, the sample's
// Management tasks (right and wrong) mixed with hostile jobs, on 4 copies
// at once: every verdict is what it must be every time (the serial id of an
// insert included, whatever sequences were bumped before), and afterwards
// the template, the working database and every copy at rest dump exactly
// as the pristine template.
func TestStatefulIsolation(t *testing.T) {
	s, d := openStateful(t, StatefulOptions{Clones: 4})
	tpl := TemplateName(d.Name())
	tplBefore := templateSum(t, s, tpl)
	workBefore := pgtest.DumpSum(t, d.Name())
	if workBefore != tplBefore {
		t.Fatalf("the working database does not dump as its template")
	}
	for n, sum := range cloneSums(t, d) {
		if sum != tplBefore {
			t.Fatalf("the fresh copy %s does not dump as the template", n)
		}
	}

	type item struct {
		name string
		job  sqlexec.Job
		pass bool
		kind sqlexec.ErrorKind
	}
	var round []item
	var slow []item
	for _, h := range hostileJobs {
		it := item{name: h.name, job: h.job(), pass: h.wantPass(), kind: h.kind}
		if h.short || h.deadline > 0 {
			slow = append(slow, it)
		} else {
			round = append(round, it)
		}
	}
	// The serial id of an inserted row is the pristine sequence's next value
	// in every episode, whatever jobs bumped the sequence before.
	// A result past the row cap: the rest is not read, the session is
	// replaced.
	capped := sqlexec.Job{Key: "capped", Predicted: "UPDATE berths SET daily_rate_usd = 0; SELECT g FROM generate_series(1, 100000) g",
		Reference: []string{"SELECT 1"}, Policy: sqlexec.DefaultPolicy(), Limits: jobLimits()}
	slow = append(slow, item{name: "too many rows", job: capped, kind: sqlexec.KindTooManyRows})
	serial := sqlexec.Job{Key: "serial id is 283", Predicted: insertManifest, Reference: []string{"SELECT 283"}, Policy: sqlexec.DefaultPolicy(), Limits: jobLimits()}
	round = append(round, item{name: "serial id is 283", job: serial, pass: true})
	for _, m := range mgmtTasks(t) {
		round = append(round,
			item{name: m.id, job: m.checksJob(strings.Join(m.sol, ";\n")), pass: true},
			item{name: m.id + " wrong", job: m.checksJob(m.wrong)},
			item{name: m.id + " follow-up", job: m.followUpJob(strings.Join(m.fuSol, ";\n")), pass: true},
			item{name: m.id + " follow-up wrong", job: m.followUpJob(m.fuWrong)})
	}
	total := 1200
	if testing.Short() {
		total = 300
	}
	items := append([]item(nil), slow...)
	for len(items) < total {
		items = append(items, round...)
	}
	var failures atomic.Int64
	err := parallel.For(context.Background(), len(items), 4, func(ctx context.Context, i int) error {
		it := items[i]
		v, err := d.Verify(ctx, it.job)
		if err != nil {
			return fmt.Errorf("%s: Verify: %w", it.name, err)
		}
		if v.Success != it.pass || sqlexec.KindOf(v.Err) != it.kind {
			if failures.Add(1) <= 10 {
				t.Errorf("%s: success %v (kind %v), want %v (kind %v): %s", it.name, v.Success, sqlexec.KindOf(v.Err), it.pass, it.kind, v.Reason)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st := d.Stats()
	t.Logf("%d verifications; stats %+v", len(items), st)
	if st.SequenceResets == 0 || st.Escapes != 0 || st.SessionRepairs == 0 {
		t.Errorf("stats %+v: want sequence resets, session repairs (the capped result) and no escapes", st)
	}
	if after := templateSum(t, s, tpl); after != tplBefore {
		t.Errorf("the template changed")
	}
	if after := pgtest.DumpSum(t, d.Name()); after != workBefore {
		t.Errorf("the working database changed")
	}
	for n, sum := range cloneSums(t, d) {
		if sum != tplBefore {
			t.Errorf("the copy %s at rest does not dump as the pristine template", n)
		}
	}
}

// waitsOnPolicy counts the lock waits of policy-role sessions on locks that
// other policy-role sessions hold.
const waitsOnPolicy = `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
	WHERE NOT l.granted AND a.usename = $1 AND EXISTS (
		SELECT 1 FROM unnest(pg_blocking_pids(l.pid)) b JOIN pg_stat_activity ba ON ba.pid = b WHERE ba.usename = $1)`

// poller polls pg_locks until stopped, counting the policy-role sessions
// found waiting on another's locks, and the polls.
type poller struct {
	waits, polls atomic.Int64
	done         chan struct{}
	finished     chan struct{}
}

func lockPoller(t testing.TB, s *Server) *poller {
	conn, err := pgx.ConnectConfig(context.Background(), s.adminCfg.ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	p := &poller{done: make(chan struct{}), finished: make(chan struct{})}
	go func() {
		defer close(p.finished)
		defer conn.Close(context.Background())
		for {
			select {
			case <-p.done:
				return
			default:
			}
			var n int64
			if err := conn.QueryRow(context.Background(), waitsOnPolicy, s.Role()).Scan(&n); err != nil {
				t.Errorf("polling pg_locks: %v", err)
				return
			}
			p.waits.Add(n)
			p.polls.Add(1)
		}
	}()
	return p
}

// stop stops the poller and returns its counts.
func (p *poller) stop() (waits, polls int64) {
	close(p.done)
	<-p.finished
	return p.waits.Load(), p.polls.Load()
}

// TestStatefulConcurrent: 16 verifications at once on one database (16
// copies) give the verdicts the same jobs get one at a time, and no session
// ever waits on a lock another verification holds (pg_locks polled
// throughout, and the poll shown to see such a wait).
func TestStatefulConcurrent(t *testing.T) {
	s, d := openStateful(t, StatefulOptions{Clones: 16})
	tasks := mgmtTasks(t)
	var jobs []sqlexec.Job
	for _, m := range tasks {
		jobs = append(jobs, m.checksJob(strings.Join(m.sol, ";\n")), m.checksJob(m.wrong),
			m.followUpJob(strings.Join(m.fuSol, ";\n")), m.followUpJob(m.fuWrong))
	}
	for _, h := range hostileJobs {
		if !h.short && h.deadline == 0 {
			jobs = append(jobs, h.job())
		}
	}
	// Jobs that hold strong locks on every table for a while.
	for i := range 8 {
		j := hostileJobs[0].job()
		j.Key = fmt.Sprintf("locker %d", i)
		j.Predicted = "LOCK TABLE berths, cranes, vessels, port_calls, cargo_manifests, crane_assignments IN ACCESS EXCLUSIVE MODE; " +
			"UPDATE cranes SET operational_status = 'maintenance'; SELECT pg_sleep(0.02)"
		jobs = append(jobs, j)
	}
	verdict := func(j sqlexec.Job) string {
		v, err := d.Verify(context.Background(), j)
		if err != nil {
			t.Fatalf("%s: %v", j.Key, err)
		}
		return fmt.Sprintf("%v %v %s", v.Success, sqlexec.KindOf(v.Err), v.Reason)
	}
	sequential := make([]string, len(jobs))
	for i, j := range jobs {
		sequential[i] = verdict(j)
	}

	// The poll sees a wait when there is one.
	pl := lockPoller(t, s)
	ctx := context.Background()
	a, err := pgx.ConnectConfig(ctx, s.policyConfig(d.Name()).ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	b, err := pgx.ConnectConfig(ctx, s.policyConfig(d.Name()).ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	if _, err := a.Exec(ctx, "BEGIN READ WRITE; LOCK TABLE berths IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	blocked := make(chan error, 1)
	go func() { _, err := b.Exec(ctx, "SELECT count(*) FROM berths"); blocked <- err }()
	for deadline := time.Now().Add(30 * time.Second); pl.waits.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	a.Exec(ctx, "ROLLBACK")
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	if waits, _ := pl.stop(); waits == 0 {
		t.Fatalf("the poll did not see a session waiting on another's lock")
	}

	pl = lockPoller(t, s)
	const rounds = 4
	concurrent := make([]string, len(jobs)*rounds)
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(concurrent) {
					return
				}
				concurrent[i] = verdict(jobs[i%len(jobs)])
			}
		}()
	}
	wg.Wait()
	waits, polls := pl.stop()
	for i, v := range concurrent {
		if v != sequential[i%len(jobs)] {
			t.Errorf("job %s: concurrently %q, sequentially %q", jobs[i%len(jobs)].Key, v, sequential[i%len(jobs)])
		}
	}
	t.Logf("%d verifications, 16 at a time; %d polls of pg_locks; stats %+v", len(concurrent), polls, d.Stats())
	if waits != 0 {
		t.Errorf("policy sessions waited on each other's locks %d times", waits)
	}
	if polls < 10 {
		t.Errorf("only %d polls", polls)
	}
}

// TestStatefulSweep: a new instance sweeps the copies a dead instance left
// (one whose lock is gone), and leaves the copies of live instances and
// every other database alone.
func TestStatefulSweep(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	_, live := openStateful(t, StatefulOptions{Clones: 1})
	work := live.Name()

	dead, err := Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := dead.OpenStateful(ctx, work, StatefulOptions{Clones: 2})
	if err != nil {
		t.Fatal(err)
	}
	// The instance dies: its sessions and its lock go, its copies stay.
	for _, c := range d2.clones {
		c.closeConn()
	}
	dead.Close()
	deadNames := d2.CloneNames()

	// A database that only looks like a copy of another working database,
	// and one of a dead instance of another working database.
	s := live.s
	other := cloneName("avtgym_other_db_0123456789ab", 0xdeadbeef, 0)
	if _, err := s.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{other}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{other}.Sanitize()) })

	exists := func(name string) bool {
		var ok bool
		if err := s.admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	for _, n := range deadNames {
		if !exists(n) {
			t.Fatalf("%s is gone before the sweep", n)
		}
	}
	fresh, err := Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	d3, err := fresh.OpenStateful(ctx, work, StatefulOptions{Clones: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d3.Close()
	for _, n := range deadNames {
		if exists(n) {
			t.Errorf("the dead instance's copy %s was not swept", n)
		}
	}
	for _, n := range append(live.CloneNames(), d3.CloneNames()...) {
		if !exists(n) {
			t.Errorf("the live copy %s was swept", n)
		}
	}
	if !exists(other) {
		t.Errorf("another working database's look-alike %s was swept", other)
	}
	// The live instance still verifies.
	m := mgmtTasks(t)[0]
	mustVerify(t, live, m.checksJob(strings.Join(m.sol, ";")), true)
}

// TestStatefulBusy: when every copy is in use for longer than the wait
// bound, Verify fails with KindBusy; once one frees, verification goes on.
func TestStatefulBusy(t *testing.T) {
	tasks := mgmtTasks(t)
	r := newGoRunner(tasks)
	r.hold, r.entered = make(chan struct{}), make(chan struct{}, 1)
	_, d := openStateful(t, StatefulOptions{Clones: 1, Wait: 50 * time.Millisecond, Python: r})
	m := tasks[0]
	first := make(chan error, 1)
	go func() {
		v, err := d.Verify(context.Background(), m.pyJob(strings.Join(m.sol, ";")))
		if err == nil && !v.Success {
			err = fmt.Errorf("failed: %s", v.Reason)
		}
		first <- err
	}()
	<-r.entered
	_, err := d.Verify(context.Background(), m.checksJob(strings.Join(m.sol, ";")))
	if k := sqlexec.KindOf(err); k != sqlexec.KindBusy {
		t.Fatalf("got %v, want KindBusy", err)
	}
	t.Log(err)
	close(r.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	r.entered = nil
	mustVerify(t, d, m.checksJob(strings.Join(m.sol, ";")), true)
	if st := d.Stats(); st.Busy != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestStatefulPythonEscapes: what a PyRunner's own session could leave
// behind is repaired: a commit (the copy is cloned again), a sequence bumped
// outside the transaction (reset), a session left connected (terminated);
// a runner's error is an error, a broken test has no verdict; the copies
// then dump as the pristine template.
func TestStatefulPythonEscapes(t *testing.T) {
	tasks := mgmtTasks(t)
	r := newGoRunner(tasks)
	s, d := openStateful(t, StatefulOptions{Clones: 2, Python: r, SessionGrace: 100 * time.Millisecond})
	tplSum := templateSum(t, s, TemplateName(d.Name()))
	m := tasks[0]
	job := m.pyJob(strings.Join(m.sol, ";"))
	ctx := context.Background()
	var mu sync.Mutex
	var stray []*pgx.Conn
	defer func() {
		for _, c := range stray {
			c.Close(ctx)
		}
	}()
	cases := []struct {
		name string
		hook func(ctx context.Context, conn *pgx.Conn) error
		// check compares the stats after the case with those before: each
		// repair is counted where it happened. Counts are compared as
		// increases, not exact values: a copy whose escape the check only
		// sees on a later job (statistics are flushed asynchronously) is
		// still recycled, and a spare re-clone costs time, never isolation.
		check func(before, after StatefulStats) bool
	}{
		{"commit", func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "UPDATE berths SET daily_rate_usd = daily_rate_usd + 1 WHERE berth_id = 1")
			return err
		}, func(b, a StatefulStats) bool { return a.Escapes > b.Escapes && a.Reclones > b.Reclones }},
		{"committed DDL", func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "CREATE VIEW zz AS SELECT 1")
			return err
		}, func(b, a StatefulStats) bool { return a.Escapes > b.Escapes && a.Reclones > b.Reclones }},
		{"sequence bump", func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SELECT nextval('berths_berth_id_seq')")
			return err
		}, func(b, a StatefulStats) bool { return a.SequenceResets > b.SequenceResets }},
		{"session left open", func(ctx context.Context, conn *pgx.Conn) error {
			c, err := pgx.Connect(ctx, conn.Config().ConnString())
			if err != nil {
				return err
			}
			mu.Lock()
			stray = append(stray, c)
			mu.Unlock()
			_, err = c.Exec(ctx, "BEGIN; LOCK TABLE berths IN ACCESS EXCLUSIVE MODE")
			return err
		}, func(b, a StatefulStats) bool { return a.Terminated > b.Terminated }},
	}
	for _, tc := range cases {
		before := d.Stats()
		r.hook = tc.hook
		mustVerify(t, d, job, true)
		r.hook = nil
		// Both copies serve pristine data afterwards.
		for range 4 {
			mustVerify(t, d, job, true)
			mustVerify(t, d, hostileJobs[0].job(), false)
			mustVerify(t, d, hostileJob{sql: insertManifest}.job(), true)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !tc.check(before, d.Stats()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: stats %+v", tc.name, d.Stats())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	r.hook = func(ctx context.Context, conn *pgx.Conn) error { return fmt.Errorf("the worker crashed") }
	if _, err := d.Verify(ctx, job); err == nil || !strings.Contains(err.Error(), "crashed") {
		t.Errorf("a runner's error: %v", err)
	}
	r.hook = nil
	j := job
	j.Tests = []string{"def test_case(): undefined_helper()"}
	_, err := d.Verify(ctx, j)
	if _, ok := err.(*BrokenTestError); !ok {
		t.Errorf("a broken test: %v", err)
	}
	for n, sum := range cloneSums(t, d) {
		if sum != tplSum {
			t.Errorf("the copy %s does not dump as the template", n)
		}
	}
}

// TestStatefulMaxUses: a copy that served MaxUses jobs is replaced by a
// fresh clone in the background, and verification goes on meanwhile and
// after.
func TestStatefulMaxUses(t *testing.T) {
	s, d := openStateful(t, StatefulOptions{Clones: 1, MaxUses: 2})
	m := mgmtTasks(t)[3] // harbor_M_4: CREATE INDEX, then an insert
	for range 3 {
		mustVerify(t, d, m.checksJob(strings.Join(m.sol, ";")), true)
		mustVerify(t, d, m.checksJob(m.wrong), false)
	}
	if st := d.Stats(); st.Reclones < 2 || st.Escapes != 0 {
		t.Errorf("stats %+v", st)
	}
	tplSum := templateSum(t, s, TemplateName(d.Name()))
	for n, sum := range cloneSums(t, d) {
		if sum != tplSum {
			t.Errorf("the copy %s does not dump as the template", n)
		}
	}
}

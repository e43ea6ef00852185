package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"avtgym/app"
	"avtgym/audit"
	"avtgym/corpus"
	"avtgym/corpus/birdinteract"
	"avtgym/driver"
	"avtgym/engines"
	"avtgym/internal/pgtest"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
	"avtgym/sqlexec/pytests"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// liteDir is BIRD-Interact's PostgreSQL (lite) sample.
const liteDir = "../../shared/data/birdinteract-format/lite"

// wrongReadings are, per Query task of the lite sample, SQL that reads one
// critical ambiguity the other way (the task's reference with the
// ambiguity's snippet replaced); each must fail verification.
var wrongReadings = map[string][]struct{ term, snippet, other string }{
	"harbor_1": {
		{"how long did those ships wait", "AVG(EXTRACT(EPOCH FROM (pc.berthed_at - pc.ata)) / 3600)", "AVG(EXTRACT(EPOCH FROM (pc.atd - pc.ata)) / 3600)"},
		{"congested calls", "EXTRACT(EPOCH FROM (pc.berthed_at - pc.ata)) / 3600 > 24", "EXTRACT(EPOCH FROM (pc.berthed_at - pc.ata)) / 3600 > 6"},
	},
	"harbor_2": {
		{"quay cranes", "c.crane_type = 'STS'", "c.crane_type <> 'STS'"},
		{"most productive", "ROUND(SUM(ca.moves) / SUM(ca.hours_worked), 2)", "SUM(ca.moves)"},
	},
	"harbor_3": {
		{"brought in", "cm.direction = 'import'", "cm.direction <> 'import'"},
		{"customs is holding", "cm.details -> 'customs' ->> 'status' = 'hold'", "cm.details -> 'customs' ->> 'status' <> 'hold'"},
	},
	"harbor_4": {
		{"calls we haven't billed", "pc.call_status = 'departed' AND pc.port_dues_usd IS NULL", "pc.port_dues_usd IS NULL"},
	},
	// Management tasks, verified by their Python tests on private copies.
	"harbor_M_1": {
		{"breaking down a lot", "SUM(ca.breakdown_minutes) > 120", "SUM(ca.breakdown_minutes) > 30"},
		{"lately", "ca.shift_start >= '2024-05-01'", "ca.shift_start >= '2024-01-01'"},
	},
	"harbor_M_2": {
		{"how long each ship waited", "EXTRACT(EPOCH FROM (pc.berthed_at - pc.ata)) / 3600 AS waiting_hours", "EXTRACT(EPOCH FROM (pc.atd - pc.berthed_at)) / 3600 AS waiting_hours"},
		{"how long the whole call took", "EXTRACT(EPOCH FROM (pc.atd - pc.ata)) / 3600 AS turnaround_hours", "EXTRACT(EPOCH FROM (pc.atd - pc.berthed_at)) / 3600 AS turnaround_hours"},
	},
	"harbor_M_3": {
		{"calls it handled in that month", "date_trunc('month', pc.atd) = date_trunc('month', p_month)", "date_trunc('month', pc.ata) = date_trunc('month', p_month)"},
		{"berth hire", "b.daily_rate_usd * CEIL(EXTRACT(EPOCH FROM (pc.atd - pc.berthed_at)) / 86400)", "b.daily_rate_usd * CEIL(EXTRACT(EPOCH FROM (pc.atd - pc.ata)) / 86400)"},
	},
	"harbor_M_4": {
		{"regardless of letter case", "ON cargo_manifests (lower(consignee))", "ON cargo_manifests (consignee)"},
		{"the Azura Freya's next call", "v.vessel_name = 'Azura Freya' AND pc.call_status = 'scheduled'", "v.vessel_name = 'Azura Freya' AND pc.call_status = 'departed'"},
	},
}

// importLite imports the lite sample (as corpus name) against the test's
// PostgreSQL server and returns the corpus directory.
func importLite(t testing.TB, name string) string {
	t.Helper()
	if _, err := os.Stat(liteDir); err != nil {
		t.Skipf("the BIRD-Interact lite sample is not at %s (it lives beside the checkout, in ../shared/data): %v", liteDir, err)
	}
	out := filepath.Join(t.TempDir(), "lite")
	check := func(ctx context.Context, c *corpus.Corpus) ([]corpus.Problem, error) {
		fs, err := audit.Probes(ctx, c)
		return audit.Problems(fs), err
	}
	py := pythonPool(t)
	sum, err := birdinteract.Import(context.Background(), birdinteract.Options{
		In: liteDir, Out: out, Name: name, Postgres: pgtest.URL(t), PyRunner: py, Check: check})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	var b strings.Builder
	sum.Write(&b)
	if !strings.Contains(b.String(), "served: harbor_1, harbor_2, harbor_3, harbor_4, harbor_M_1, harbor_M_2, harbor_M_3, harbor_M_4") {
		t.Fatalf("import summary:\n%s", b.String())
	}
	return out
}

// pythonPool is a pool of Python test workers, stopped when the test ends.
func pythonPool(t testing.TB) *pytests.Pool {
	t.Helper()
	py, err := pytests.New(pytests.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { py.Close(context.Background()) })
	return py
}

// play resets task with the outcome reward and the client solver, stops
// and submits sql; it returns the final step.
func play(t *testing.T, env driver.Env, task, sql string) (*driver.Episode, *pb.StepResponse) {
	t.Helper()
	ctx := context.Background()
	seed := uint64(1)
	ep, err := driver.Start(ctx, env, &pb.ResetRequest{TaskId: task, Seed: &seed, IncludePrivileged: true,
		Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
	if err != nil {
		t.Fatalf("%s: reset: %v", task, err)
	}
	if err := ep.Stop(ctx); err != nil {
		t.Fatalf("%s: stop: %v", task, err)
	}
	if err := ep.SubmitSQL(ctx, sql); err != nil {
		t.Fatalf("%s: submit: %v", task, err)
	}
	return ep, ep.Last()
}

func outcome(r *pb.StepResponse) (float64, bool) {
	v, ok := r.GetReward().GetComponents()["outcome"]
	return v, ok
}

// TestLiteServedOnPostgres is issues 13 and 14's end-to-end check: the lite
// sample imported against a real PostgreSQL server and served over gRPC.
// Each task's reference succeeds — the Management tasks' by their Python
// tests on private copies; each wrong reading of each critical ambiguity
// fails with the verifier's reason; corpus check passes (the follow-ups
// verified on the state their phase 1 leaves).
func TestLiteServedOnPostgres(t *testing.T) {
	dir := importLite(t, "pge2e")
	s := testutil.StartServer(t, app.Config{Corpora: []string{dir}, PostgresURL: pgtest.URL(t)})
	env := driver.Remote(s.Client.Env)
	for task, wrongs := range wrongReadings {
		ep, last := play(t, env, task, "SELECT 1")
		ref := strings.Join(ep.Reset().GetPrivileged().GetReferenceSql(), ";\n")
		if ref == "" {
			t.Fatalf("%s: no reference SQL in the privileged field", task)
		}
		if v, ok := outcome(last); !ok || v != 0 {
			t.Errorf("%s: SELECT 1 scored %v (%v)", task, v, ok)
		}
		_, last = play(t, env, task, ref)
		if v, ok := outcome(last); !ok || v != 1 || last.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
			t.Errorf("%s: the reference scored %v (%v), status %s: %s", task, v, ok, last.GetStatus(), last.GetPrivileged().GetVerifierReason())
		}
		for _, w := range wrongs {
			if !strings.Contains(ref, w.snippet) {
				t.Fatalf("%s: the reference lacks the snippet of %q: %s", task, w.term, ref)
			}
			sql := strings.Replace(ref, w.snippet, w.other, 1)
			_, last := play(t, env, task, sql)
			v, ok := outcome(last)
			reason := last.GetPrivileged().GetVerifierReason()
			if !ok || v != 0 || last.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || reason == "" {
				t.Errorf("%s: the other reading of %q scored %v (%v), status %s, reason %q", task, w.term, v, ok, last.GetStatus(), reason)
			}
		}
	}
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{PostgresURL: pgtest.URL(t)}, PyRunner: pythonPool(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := audit.Run(context.Background(), c, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() {
		var b strings.Builder
		r.WriteTable(&b)
		t.Errorf("corpus check fails:\n%s\n%v", b.String(), r.Findings)
	}
}

// TestLiteHostileSQLOverGRPC: hostile SQL submitted as a policy's solution
// to a PostgreSQL Query task is refused or bounded and scored as the
// policy's failure (never ERROR), the server goes on serving, and a
// pg_dump checksum of the working database and its template is unchanged.
func TestLiteHostileSQLOverGRPC(t *testing.T) {
	dir := importLite(t, "pghostile")
	lim := sqlexec.DefaultLimits()
	lim.Timeout = time.Second // the runaway statements run this long
	s := testutil.StartServer(t, app.Config{Corpora: []string{dir}, PostgresURL: pgtest.URL(t), Limits: lim})
	env := driver.Remote(s.Client.Env)
	dbs := corpusDatabases(t, "pghostile")
	before := map[string]string{}
	for _, db := range dbs {
		before[db] = dumpSum(t, db)
	}
	hostile := []string{
		"DELETE FROM port_calls",
		"UPDATE berths SET daily_rate_usd = 0",
		"INSERT INTO berths SELECT * FROM berths",
		"DROP TABLE cargo_manifests",
		"CREATE TABLE x (a int)",
		"COMMIT; DROP TABLE berths",
		"ROLLBACK; DELETE FROM berths",
		"SET statement_timeout = 0; SELECT pg_sleep(60)",
		"SET LOCAL statement_timeout = 0",
		"SELECT set_config('statement_timeout', '0', false)",
		"COPY berths TO PROGRAM 'touch /tmp/avtgym-pwned'",
		"COPY (SELECT 1) TO '/tmp/avtgym-pwned'",
		"SELECT pg_read_file('/etc/passwd')",
		"SELECT lo_import('/etc/passwd')",
		"CREATE EXTENSION dblink",
		"ALTER SYSTEM SET fsync = off",
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
		"SELECT pg_sleep(3600)",
		"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r",
		"SELECT repeat('x', 100000000)",
		"SELECT * FROM generate_series(1, 100000000)",
		"PREPARE TRANSACTION 'x'",
		"LISTEN x",
		"LOCK TABLE berths",
		"DO $$ BEGIN DELETE FROM berths; END $$",
	}
	for _, sql := range hostile {
		start := time.Now()
		_, last := play(t, env, "harbor_1", sql)
		t.Logf("%-70.70q %6.0f ms: %s", sql, time.Since(start).Seconds()*1000, last.GetPrivileged().GetVerifierReason())
		if v, ok := outcome(last); !ok || v != 0 || last.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
			t.Errorf("%q: scored %v (%v), status %s, reason %q", sql, v, ok, last.GetStatus(), last.GetPrivileged().GetVerifierReason())
		}
	}
	if _, err := os.Stat("/tmp/avtgym-pwned"); err == nil {
		t.Error("a policy's SQL wrote /tmp/avtgym-pwned")
	}
	// Still serving, and still right.
	ep, _ := play(t, env, "harbor_4", "SELECT 1")
	if _, last := play(t, env, "harbor_4", strings.Join(ep.Reset().GetPrivileged().GetReferenceSql(), ";\n")); func() bool { v, ok := outcome(last); return !ok || v != 1 }() {
		t.Errorf("after the hostile SQL the reference fails: %s", last.GetPrivileged().GetVerifierReason())
	}
	for _, db := range dbs {
		if got := dumpSum(t, db); got != before[db] {
			t.Errorf("database %s changed (pg_dump checksum)", db)
		}
	}
}

// dumpSum is pgtest.DumpSum, for a template database too (templates take
// no connections: it allows them while pg_dump runs).
func dumpSum(t *testing.T, db string) string {
	t.Helper()
	if !strings.HasSuffix(db, "_t") {
		return pgtest.DumpSum(t, db)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	ident := pgx.Identifier{db}.Sanitize()
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS true"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" ALLOW_CONNECTIONS false"); err != nil {
			t.Error(err)
		}
	}()
	return pgtest.DumpSum(t, db)
}

// corpusDatabases lists the databases (working and template) that corpus
// name's PostgreSQL databases were loaded into.
func corpusDatabases(t testing.TB, name string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1", fmt.Sprintf("avtgym_%s_%%", name))
	if err != nil {
		t.Fatal(err)
	}
	dbs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(dbs)
	if len(dbs) != 2 {
		t.Fatalf("databases of corpus %s: %v, want a working database and its template", name, dbs)
	}
	return dbs
}

// BenchmarkLiteVerifyVsRawPgx is issue 13's speed check: verifying a
// policy's SQL on a PostgreSQL Query task (sqlexec.Check through the
// corpus's scheduled engine: rewrite, run, compare with the cached
// reference) against a raw pgx query of the same SQL on the same database,
// alternated so that a busy machine slows both alike. Goal: verify/raw
// <= 1.3.
func BenchmarkLiteVerifyVsRawPgx(b *testing.B) {
	dir := importLite(b, "pgbench")
	ctx := context.Background()
	c, err := corpus.LoadDir(ctx, dir, corpus.Options{Engines: engines.Opener{PostgresURL: pgtest.URL(b)}, PyRunner: pythonPool(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	task, ok := c.Task("harbor_1")
	if !ok {
		b.Fatal("no task harbor_1")
	}
	// Not the reference's text, so that Check runs it (an identical text
	// reuses the cached reference result).
	pred := strings.Replace(task.ReferenceSQL, "GROUP BY", "AND 1 = 1 GROUP BY", 1)
	var working string
	for _, db := range corpusDatabases(b, "pgbench") {
		if !strings.HasSuffix(db, "_t") {
			working = db
		}
	}
	conn, err := pgx.Connect(ctx, pgtest.URLFor(b, working))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	lim := sqlexec.DefaultLimits()
	check := func() {
		v, err := sqlexec.Check(ctx, task.DB.Engine, c.Cache, task.RefKey, task.Policy, pred, task.ReferenceSQL, lim)
		if err != nil || !v.Success {
			b.Fatal(v, err)
		}
	}
	check() // the reference's result is cached from here on
	var verify, raw time.Duration
	for b.Loop() {
		t0 := time.Now()
		check()
		t1 := time.Now()
		rows, err := conn.Query(ctx, pred)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			if _, err := rows.Values(); err != nil {
				b.Fatal(err)
			}
		}
		if rows.Err() != nil {
			b.Fatal(rows.Err())
		}
		t2 := time.Now()
		verify += t1.Sub(t0)
		raw += t2.Sub(t1)
	}
	b.ReportMetric(float64(verify.Nanoseconds())/float64(b.N), "verify-ns/op")
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/op")
	b.ReportMetric(float64(verify)/float64(raw), "verify/raw")
}

// TestLiteBirdC is issue 15's check on the lite sample (PostgreSQL): under
// BIRD_C, asking each counted ambiguity and submitting the references
// reaches reward 1 on every task — each follow-up verified on the state
// its phase 1 left (the Management tasks' by their Python tests on private
// copies) — while a wrong reading of phase 1 scores 0, twice (the debug
// retry), and never sees the follow-up.
func TestLiteBirdC(t *testing.T) {
	dir := importLite(t, "pgbirdc")
	s := testutil.StartServer(t, app.Config{Corpora: []string{dir}, PostgresURL: pgtest.URL(t)})
	env := s.Client.Env
	ctx := context.Background()
	step := func(tok []byte, a *pb.Action) *pb.StepResponse {
		t.Helper()
		r, err := env.Step(ctx, &pb.StepRequest{Token: tok, Action: a, IncludePrivileged: true})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for task, wrongs := range wrongReadings {
		reset, err := env.Reset(ctx, &pb.ResetRequest{TaskId: task, IncludePrivileged: true,
			Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C}})
		if err != nil {
			t.Fatalf("%s: %v", task, err)
		}
		e := reset.Episodes[0]
		tok := e.Token
		for _, a := range e.Privileged.GetAmbiguities() {
			if a.Counted {
				r := step(tok, ask("What do you mean by '"+a.Term+"'?"))
				if r.Done {
					t.Fatalf("%s: asking %q ended the episode: %v", task, a.Term, r)
				}
				tok = r.Token
			}
		}
		ref := strings.Join(e.Privileged.GetReferenceSql(), ";\n")
		wrongTok := tok
		r := step(tok, submit(ref))
		if r.Done || r.Observation.Subtask != 2 {
			t.Fatalf("%s: the reference did not release the follow-up: %v (%s)", task, r, r.Privileged.GetVerifierReason())
		}
		r = step(r.Token, submit(strings.Join(r.Privileged.GetFollowUpReferenceSql(), ";\n")))
		if !r.Done || r.Reward.GetValue() != 1 {
			t.Errorf("%s: the follow-up's reference: reward %v, done %v: %s", task, r.Reward, r.Done, r.Privileged.GetVerifierReason())
		}
		w := wrongs[0]
		wrong := strings.Replace(ref, w.snippet, w.other, 1)
		r = step(wrongTok, submit(wrong))
		if r.Done || !r.Observation.SqlRequired || r.Observation.Subtask != 1 {
			t.Fatalf("%s: the wrong reading of %q: %v", task, w.term, r)
		}
		r = step(r.Token, submit(wrong))
		if !r.Done || r.Reward.GetValue() != 0 || r.Observation.Subtask != 1 || len(r.Reward.GetComponents()) != 1 {
			t.Errorf("%s: the wrong reading's retry: %v", task, r)
		}
	}
}

// TestLiteBirdA is issue 16's check on the lite sample (PostgreSQL): under
// BIRD_A an explorer that calls each tool once, asks each counted
// ambiguity and submits the references reaches reward 1 on every task,
// within the default coin budget.
func TestLiteBirdA(t *testing.T) {
	dir := importLite(t, "pgbirda")
	s := testutil.StartServer(t, app.Config{Corpora: []string{dir}, PostgresURL: pgtest.URL(t)})
	env := s.Client.Env
	ctx := context.Background()
	step := func(tok []byte, a *pb.Action) *pb.StepResponse {
		t.Helper()
		r, err := env.Step(ctx, &pb.StepRequest{Token: tok, Action: a, IncludePrivileged: true})
		if err != nil {
			t.Fatal(err)
		}
		if r.Done && r.Reward.GetValue() != 1 {
			t.Fatalf("ended early: %v", r)
		}
		return r
	}
	for task := range wrongReadings {
		reset, err := env.Reset(ctx, &pb.ResetRequest{TaskId: task, IncludePrivileged: true,
			Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A}})
		if err != nil {
			t.Fatalf("%s: %v", task, err)
		}
		e := reset.Episodes[0]
		tok := e.Token
		names := e.Observation.Task.GetDatabase().GetKnowledge()
		for _, a := range []*pb.Action{execute("SELECT 1"), getSchema, allMeanings, meaning("vessels", "vessel_name"), knowledgeList, allKnowledge} {
			r := step(tok, a)
			if lastTurn(r).GetKind() != pb.TurnKind_TURN_KIND_TOOL_RESULT || strings.HasPrefix(lastTurn(r).GetText(), "Error") {
				t.Fatalf("%s: %v: %v", task, a, lastTurn(r))
			}
			tok = r.Token
		}
		if len(names) > 0 {
			tok = step(tok, knowledge(names[0].GetName())).Token
		}
		for _, a := range e.Privileged.GetAmbiguities() {
			if a.Counted {
				tok = step(tok, ask("What do you mean by '"+a.Term+"'?")).Token
			}
		}
		r := step(tok, submit(strings.Join(e.Privileged.GetReferenceSql(), ";\n")))
		if r.Observation.Subtask != 2 {
			t.Fatalf("%s: the reference did not release the follow-up: %v (%s)", task, r, r.Privileged.GetVerifierReason())
		}
		r = step(r.Token, submit(strings.Join(r.Privileged.GetFollowUpReferenceSql(), ";\n")))
		if !r.Done || r.Reward.GetValue() != 1 {
			t.Errorf("%s: reward %v: %s", task, r.Reward, r.Privileged.GetVerifierReason())
		}
	}
}

package postgres

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// openStateful opens stateful verification on the harbor sample, closed
// when the test ends.
func openStateful(t testing.TB, opt StatefulOptions) (*Server, *StatefulDB) {
	t.Helper()
	s, db := harbor(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := s.OpenStateful(ctx, db.Name(), opt)
	if err != nil {
		t.Fatalf("OpenStateful: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, d
}

// mgmtTask is a Management task of the lite sample, with SQL checks
// equivalent to its Python test (and its follow-up's).
type mgmtTask struct {
	id            string
	sol, fuSol    []string
	tests, fuTest []string
	fuCategory    string
	fuOrder       bool
	fuDecimals    int
	// checks are SQL equivalents of the Python test; wrong is another
	// reading of the request, which the test (and the checks) fail.
	checks []string
	wrong  string
	// fuChecks and fuWrong: the same for a Management follow-up; a Query
	// follow-up is compared by its last statement, and fuWrong fails it.
	fuChecks []string
	fuWrong  string
}

// mgmtChecks are the SQL equivalents of the sample's Python tests.
var mgmtChecks = map[string]struct {
	checks, fuChecks []string
	wrong, fuWrong   string
}{
	"harbor_M_1": {
		checks: []string{
			"SELECT crane_code FROM cranes WHERE operational_status = 'maintenance'",
			"SELECT crane_code FROM cranes WHERE operational_status = 'retired'",
			"SELECT count(*) FROM cranes WHERE operational_status = 'active'",
		},
		wrong: `UPDATE cranes c SET operational_status = 'maintenance' WHERE c.operational_status = 'active' AND c.crane_id IN
			(SELECT ca.crane_id FROM crane_assignments ca WHERE ca.shift_start >= '2024-05-01' GROUP BY ca.crane_id HAVING SUM(ca.breakdown_minutes) > 60)`,
		fuWrong: `SELECT c.crane_code, c.crane_type, b.berth_code, COALESCE(SUM(ca.moves), 0) FROM cranes c LEFT JOIN berths b ON b.berth_id = c.home_berth_id
			LEFT JOIN crane_assignments ca ON ca.crane_id = c.crane_id WHERE c.operational_status = 'maintenance' GROUP BY 1, 2, 3`,
	},
	"harbor_M_2": {
		checks: []string{
			`SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'call_turnaround'
				AND column_name IN ('call_id', 'vessel_name', 'vessel_type', 'berth_code', 'terminal', 'waiting_hours', 'turnaround_hours')`,
			"SELECT count(*), round(sum(waiting_hours)::numeric, 2), round(sum(turnaround_hours)::numeric, 2) FROM call_turnaround",
			"SELECT call_id, vessel_name, berth_code, round(turnaround_hours::numeric, 2) FROM call_turnaround WHERE call_id IN (1, 91, 185) ORDER BY call_id",
		},
		wrong: `CREATE OR REPLACE VIEW call_turnaround AS SELECT pc.call_id, v.vessel_name, v.vessel_type, b.berth_code, b.terminal,
			EXTRACT(EPOCH FROM (pc.berthed_at - pc.ata)) / 3600 AS waiting_hours, EXTRACT(EPOCH FROM (pc.atd - pc.berthed_at)) / 3600 AS turnaround_hours
			FROM port_calls pc JOIN vessels v ON v.vessel_id = pc.vessel_id JOIN berths b ON b.berth_id = pc.berth_id WHERE pc.call_status = 'departed'`,
		fuWrong: "SELECT vessel_type, COUNT(*) AS calls, ROUND(AVG(waiting_hours), 1) AS avg_h FROM call_turnaround GROUP BY vessel_type ORDER BY avg_h DESC",
	},
	"harbor_M_3": {
		checks: []string{
			"SELECT * FROM berth_hire_report('South Bulk Terminal', DATE '2024-04-10')",
			"SELECT * FROM berth_hire_report('West Liquid Terminal', DATE '2024-02-01')",
		},
		wrong: `CREATE OR REPLACE FUNCTION berth_hire_report(p_terminal text, p_month date)
RETURNS TABLE(berth_code varchar, departed_calls bigint, hire_usd numeric) LANGUAGE sql STABLE AS $$
    SELECT b.berth_code, COUNT(pc.call_id), COALESCE(SUM(b.daily_rate_usd * CEIL(EXTRACT(EPOCH FROM (pc.atd - pc.berthed_at)) / 86400)), 0)
    FROM berths b LEFT JOIN port_calls pc ON pc.berth_id = b.berth_id AND pc.call_status = 'departed'
          AND date_trunc('month', pc.ata) = date_trunc('month', p_month)
    WHERE b.terminal = p_terminal GROUP BY b.berth_code ORDER BY b.berth_code
$$`,
		fuWrong: `SELECT a.berth_code, m.hire_usd, a.hire_usd FROM berth_hire_report('South Bulk Terminal', DATE '2024-04-01') a
			JOIN berth_hire_report('South Bulk Terminal', DATE '2024-03-01') m ON m.berth_code = a.berth_code WHERE a.hire_usd < m.hire_usd`,
	},
	"harbor_M_4": {
		checks: []string{
			"SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'cargo_manifests' AND indexdef ILIKE '%lower(%consignee%'",
			`SELECT manifest_id, call_id, direction, cargo_category, teu, weight_t, declared_value_usd, hazard_class, consignee, details
				FROM cargo_manifests WHERE bl_number = 'HBR24-EXP-0901'`,
			"SELECT count(*) FROM cargo_manifests",
		},
		wrong: `CREATE INDEX idx_manifests_consignee ON cargo_manifests (consignee); INSERT INTO cargo_manifests (call_id, bl_number, direction, cargo_category, teu, weight_t,
			declared_value_usd, hazard_class, consignee, details) SELECT pc.call_id, 'HBR24-EXP-0901', 'export', 'containerized', 40, 520.50, 1250000.00, NULL,
			'Tern Maritime Logistics', '{"hs_code": "847130", "packaging": "container", "reefer": false, "destination_port": "SGSIN", "customs": {"status": "pending", "inspected": false}}'::jsonb
			FROM port_calls pc JOIN vessels v ON v.vessel_id = pc.vessel_id WHERE v.vessel_name = 'Azura Freya' AND pc.call_status = 'scheduled'`,
		fuChecks: []string{
			"SELECT details FROM cargo_manifests WHERE bl_number = 'HBR24-EXP-0901'",
			"SELECT count(*) FROM cargo_manifests WHERE details -> 'customs' ->> 'status' = 'cleared'",
			"SELECT count(*) FROM cargo_manifests",
		},
		fuWrong: `UPDATE cargo_manifests SET details = '{"customs": {"status": "cleared", "inspected": true}}' WHERE bl_number = 'HBR24-EXP-0901'`,
	},
}

// sampleDir is the lite sample's folder.
func sampleDir(t testing.TB) string {
	return filepath.Join(harborDir(t), "..", "..")
}

// mgmtTasks reads the lite sample's Management tasks.
func mgmtTasks(t testing.TB) []mgmtTask {
	t.Helper()
	dir := sampleDir(t)
	type fu struct {
		SolSQL     []string `json:"sol_sql"`
		TestCases  []string `json:"test_cases"`
		Category   string   `json:"category"`
		Conditions struct {
			Decimal int  `json:"decimal"`
			Order   bool `json:"order"`
		} `json:"conditions"`
	}
	type rec struct {
		ID        string   `json:"instance_id"`
		SolSQL    []string `json:"sol_sql"`
		TestCases []string `json:"test_cases"`
		FollowUp  fu       `json:"follow_up"`
	}
	read := func(name string) map[string]rec {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		out := map[string]rec{}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var r rec
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
			out[r.ID] = r
		}
		return out
	}
	pub, gt := read("bird_interact_data.jsonl"), read("bird_interact_gt.jsonl")
	var tasks []mgmtTask
	for id, g := range gt {
		if !strings.Contains(id, "_M_") {
			continue
		}
		c, ok := mgmtChecks[id]
		if !ok {
			t.Fatalf("no checks for %s", id)
		}
		p := pub[id]
		tasks = append(tasks, mgmtTask{
			id: id, sol: g.SolSQL, tests: g.TestCases, fuSol: g.FollowUp.SolSQL, fuTest: g.FollowUp.TestCases,
			fuCategory: p.FollowUp.Category, fuOrder: p.FollowUp.Conditions.Order, fuDecimals: p.FollowUp.Conditions.Decimal,
			checks: c.checks, wrong: c.wrong, fuChecks: c.fuChecks, fuWrong: c.fuWrong,
		})
	}
	slices.SortFunc(tasks, func(a, b mgmtTask) int { return strings.Compare(a.id, b.id) })
	if len(tasks) != 4 {
		t.Fatalf("%d Management tasks, want 4", len(tasks))
	}
	return tasks
}

// jobLimits are the limits of the tests' jobs.
func jobLimits() sqlexec.Limits {
	lim := sqlexec.DefaultLimits()
	lim.Timeout = 5 * time.Second
	return lim
}

// checksJob is a task's phase-1 job decided by its SQL checks.
func (m mgmtTask) checksJob(pred string) sqlexec.Job {
	p := sqlexec.DefaultPolicy()
	p.Decimals = 2
	return sqlexec.Job{Key: m.id, Predicted: pred, Reference: m.sol, Checks: m.checks, Policy: p, Limits: jobLimits()}
}

// followUpJob is a task's phase-2 job, on the state its phase-1 reference
// leaves: by checks for a Management follow-up, else by the last statement.
func (m mgmtTask) followUpJob(pred string) sqlexec.Job {
	p := sqlexec.DefaultPolicy()
	p.Decimals = m.fuDecimals
	if m.fuOrder {
		p.Order = sqlexec.OrderOrdered
	}
	p.DateOnly, p.CanonicalJSON, p.EmptyFails = true, true, true
	j := sqlexec.Job{Key: m.id + "/2", Prior: m.sol, Predicted: pred, Reference: m.fuSol, Policy: p, Limits: jobLimits()}
	if m.fuCategory == "Management" {
		j.Checks = m.fuChecks
		j.Policy.EmptyFails = false
	}
	return j
}

// mustVerify verifies j and fails the test on an error or an unexpected
// verdict.
func mustVerify(t testing.TB, d *StatefulDB, j sqlexec.Job, want bool) sqlexec.Verdict {
	t.Helper()
	v, err := d.Verify(context.Background(), j)
	if err != nil {
		t.Fatalf("%s: Verify: %v", j.Key, err)
	}
	if v.Success != want {
		t.Fatalf("%s: %q: success %v, want %v (%s; %v)", j.Key, firstWords(j.Predicted, 8), v.Success, want, v.Reason, v.Err)
	}
	return v
}

// TestStatefulManagement: each Management reference of the lite sample
// passes its checks (SQL equivalents of its Python test) and a wrong
// reading fails them; each follow-up is verified on the state its phase-1
// reference leaves (Prior), a Query follow-up by its last statement.
func TestStatefulManagement(t *testing.T) {
	_, d := openStateful(t, StatefulOptions{Clones: 2})
	for _, m := range mgmtTasks(t) {
		t.Run(m.id, func(t *testing.T) {
			mustVerify(t, d, m.checksJob(strings.Join(m.sol, ";\n")), true)
			v := mustVerify(t, d, m.checksJob(m.wrong), false)
			t.Logf("wrong reading: %s", v.Reason)
			mustVerify(t, d, m.followUpJob(strings.Join(m.fuSol, ";\n")), true)
			v = mustVerify(t, d, m.followUpJob(m.fuWrong), false)
			t.Logf("wrong follow-up: %s", v.Reason)
		})
	}
}

// pyTest is a Go rendering of one of the sample's Python test_case
// functions: it gets the job's predicted statements and a helper that runs
// statements as BIRD-Interact's execute_queries does (here: each in a
// savepoint, an error rolled back to it and returned).
type pyTest func(pred []string, exec func(sqls ...string) ([][]any, error)) error

// pyTests are the sample's tests, by instance id (follow-ups: "/2").
var pyTests = map[string]pyTest{
	"harbor_M_1": func(pred []string, exec func(...string) ([][]any, error)) error {
		exec(pred...)
		rows, err := exec("SELECT crane_code FROM cranes WHERE operational_status = 'maintenance'")
		if err != nil {
			return fmt.Errorf("verification query failed: %v", err)
		}
		if got := sortedCol(rows); got != "[GC-01 MH-04 MH-10 QC-09]" {
			return fmt.Errorf("cranes in maintenance: %s", got)
		}
		rows, _ = exec("SELECT crane_code FROM cranes WHERE operational_status = 'retired'")
		if got := sortedCol(rows); got != "[MH-09 QC-11]" {
			return errors.New("retired cranes must keep their status")
		}
		rows, _ = exec("SELECT COUNT(*) FROM cranes WHERE operational_status = 'active'")
		if len(rows) != 1 || fmt.Sprint(rows[0][0]) != "24" {
			return fmt.Errorf("active cranes: %v", rows)
		}
		return nil
	},
	"harbor_M_2": func(pred []string, exec func(...string) ([][]any, error)) error {
		exec(pred...)
		rows, err := exec("SELECT COUNT(*), ROUND(SUM(waiting_hours)::numeric, 2)::float8, ROUND(SUM(turnaround_hours)::numeric, 2)::float8 FROM call_turnaround")
		if err != nil || len(rows) != 1 {
			return fmt.Errorf("view call_turnaround: %v", err)
		}
		if fmt.Sprint(rows[0]) != "[176 2587.83 10004.75]" {
			return fmt.Errorf("call_turnaround totals %v", rows[0])
		}
		return nil
	},
	"harbor_M_3": func(pred []string, exec func(...string) ([][]any, error)) error {
		exec(pred...)
		rows, err := exec("SELECT berth_code, departed_calls, round(hire_usd, 2)::float8 FROM berth_hire_report('South Bulk Terminal', DATE '2024-04-10') ORDER BY 1")
		if err != nil {
			return fmt.Errorf("berth_hire_report failed: %v", err)
		}
		want := "[[S01 0 0] [S02 1 21150] [S03 1 15800] [S04 1 14000] [S05 1 25350] [S06 1 43000] [S07 1 22950] [S08 1 13000]]"
		if fmt.Sprint(rows) != want {
			return fmt.Errorf("report %v", rows)
		}
		return nil
	},
	"harbor_M_4": func(pred []string, exec func(...string) ([][]any, error)) error {
		exec(pred...)
		rows, _ := exec("SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND tablename = 'cargo_manifests' AND indexdef ILIKE '%lower(%consignee%'")
		if len(rows) != 1 || fmt.Sprint(rows[0][0]) != "1" {
			return fmt.Errorf("no case-insensitive consignee index")
		}
		rows, err := exec("SELECT call_id, details->'customs'->>'status' FROM cargo_manifests WHERE bl_number = 'HBR24-EXP-0901'")
		if err != nil || fmt.Sprint(rows) != "[[196 pending]]" {
			return fmt.Errorf("expected one manifest HBR24-EXP-0901, got %v %v", rows, err)
		}
		rows, _ = exec("SELECT COUNT(*) FROM cargo_manifests")
		if fmt.Sprint(rows) != "[[283]]" {
			return fmt.Errorf("manifest count %v", rows)
		}
		return nil
	},
	"harbor_M_4/2": func(pred []string, exec func(...string) ([][]any, error)) error {
		exec(pred...)
		rows, err := exec("SELECT details::text FROM cargo_manifests WHERE bl_number = 'HBR24-EXP-0901'")
		want := `{"reefer": false, "customs": {"status": "cleared", "inspected": true}, "hs_code": "847130", "packaging": "container", "destination_port": "SGSIN"}`
		if err != nil || len(rows) != 1 || rows[0][0] != want {
			return fmt.Errorf("details now %v %v", rows, err)
		}
		rows, _ = exec("SELECT COUNT(*) FROM cargo_manifests WHERE details -> 'customs' ->> 'status' = 'cleared'")
		if fmt.Sprint(rows) != "[[242]]" {
			return fmt.Errorf("cleared manifests: %v", rows)
		}
		return nil
	},
}

func sortedCol(rows [][]any) string {
	var s []string
	for _, r := range rows {
		s = append(s, fmt.Sprint(r[0]))
	}
	slices.Sort(s)
	return fmt.Sprint(s)
}

// goRunner is a sqlexec.PyRunner written in Go for this package's tests: it
// does what the Python runner does (one connection to the DSN, one
// transaction rolled back: Setup, Prior, the predicted statements, each
// test, Cleanup), with the tests rendered in Go (pyTests, found by their
// source through sources). hook, when set, runs on the connection after the
// tests (to misbehave).
type goRunner struct {
	sources map[string]string // Python source -> pyTests key
	hook    func(ctx context.Context, conn *pgx.Conn) error
	// hold, when set, is waited on inside Run (to keep a copy checked out),
	// after entered (when set) is sent a value.
	hold, entered chan struct{}
	mu            sync.Mutex
	dsns          map[string]bool
}

func newGoRunner(tasks []mgmtTask) *goRunner {
	r := &goRunner{sources: map[string]string{}, dsns: map[string]bool{}}
	for _, m := range tasks {
		for _, src := range m.tests {
			r.sources[src] = m.id
		}
		for _, src := range m.fuTest {
			r.sources[src] = m.id + "/2"
		}
	}
	return r
}

func (r *goRunner) Run(ctx context.Context, j sqlexec.PyJob) (sqlexec.PyResult, error) {
	r.mu.Lock()
	r.dsns[j.DSN] = true
	r.mu.Unlock()
	if r.entered != nil {
		r.entered <- struct{}{}
	}
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-ctx.Done():
			return sqlexec.PyResult{}, ctx.Err()
		}
	}
	if j.Deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, j.Deadline)
		defer cancel()
	}
	conn, err := pgx.Connect(ctx, j.DSN)
	if err != nil {
		return sqlexec.PyResult{}, err
	}
	defer conn.Close(context.Background())
	if j.StatementTimeout > 0 {
		if _, err := conn.Exec(ctx, fmt.Sprintf("SET statement_timeout = %d", j.StatementTimeout.Milliseconds())); err != nil {
			return sqlexec.PyResult{}, err
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return sqlexec.PyResult{}, err
	}
	defer tx.Rollback(context.Background())
	for _, group := range [][]string{j.Setup, j.Prior} {
		for _, s := range group {
			if _, err := tx.Exec(ctx, s, pgx.QueryExecModeSimpleProtocol); err != nil {
				return sqlexec.PyResult{}, fmt.Errorf("setup or prior: %w", err)
			}
		}
	}
	for _, s := range j.Predicted {
		if _, err := tx.Exec(ctx, s, pgx.QueryExecModeSimpleProtocol); err != nil {
			k := sqlexec.KindExecution
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) {
				k = kindOf(pgErr.Code)
			}
			return sqlexec.PyResult{Reason: err.Error(), Kind: k}, nil
		}
	}
	n := 0
	exec := func(sqls ...string) ([][]any, error) {
		var rows [][]any
		for _, s := range sqls {
			n++
			sp := fmt.Sprintf("avtgym_sp%d", n)
			if _, err := tx.Exec(ctx, "SAVEPOINT "+sp); err != nil {
				return nil, err
			}
			rs, err := tx.Query(ctx, s, pgx.QueryExecModeSimpleProtocol)
			if err == nil {
				rows, err = pgx.CollectRows(rs, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
			}
			if err != nil {
				tx.Exec(ctx, "ROLLBACK TO SAVEPOINT "+sp)
				return nil, err
			}
			tx.Exec(ctx, "RELEASE SAVEPOINT "+sp)
		}
		return rows, nil
	}
	for _, src := range j.Tests {
		key, ok := r.sources[src]
		if !ok {
			return sqlexec.PyResult{Broken: "unknown test"}, nil
		}
		if err := pyTests[key](j.Predicted, exec); err != nil {
			return sqlexec.PyResult{Reason: err.Error()}, nil
		}
	}
	for _, s := range j.Cleanup {
		if _, err := tx.Exec(ctx, s, pgx.QueryExecModeSimpleProtocol); err != nil {
			return sqlexec.PyResult{}, fmt.Errorf("cleanup: %w", err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		return sqlexec.PyResult{}, err
	}
	if r.hook != nil {
		if err := r.hook(ctx, conn); err != nil {
			return sqlexec.PyResult{}, err
		}
	}
	return sqlexec.PyResult{Passed: true}, nil
}

// pyJob is a task's phase-1 job decided by its Python test.
func (m mgmtTask) pyJob(pred string) sqlexec.Job {
	return sqlexec.Job{Key: m.id, Predicted: pred, Reference: m.sol, Tests: m.tests, Policy: sqlexec.DefaultPolicy(), Limits: jobLimits()}
}

// TestStatefulPython: with a PyRunner (a Go rendering of the sample's Python
// tests), each Management reference passes, a wrong reading fails, the M_4
// follow-up passes on the state phase 1 left; the runner got a DSN of a
// private copy (never the working database).
func TestStatefulPython(t *testing.T) {
	tasks := mgmtTasks(t)
	r := newGoRunner(tasks)
	_, d := openStateful(t, StatefulOptions{Clones: 2, Python: r})
	for _, m := range tasks {
		t.Run(m.id, func(t *testing.T) {
			mustVerify(t, d, m.pyJob(strings.Join(m.sol, ";\n")), true)
			v := mustVerify(t, d, m.pyJob(m.wrong), false)
			t.Logf("wrong reading: %s", v.Reason)
			if len(m.fuTest) > 0 {
				j := sqlexec.Job{Key: m.id + "/2", Prior: m.sol, Predicted: strings.Join(m.fuSol, ";"), Reference: m.fuSol, Tests: m.fuTest, Limits: jobLimits()}
				mustVerify(t, d, j, true)
				j.Predicted = m.fuWrong
				mustVerify(t, d, j, false)
			}
		})
	}
	// A denied statement never reaches the runner.
	v := mustVerify(t, d, tasks[0].pyJob("UPDATE cranes SET operational_status = 'x'; COMMIT"), false)
	if sqlexec.KindOf(v.Err) != sqlexec.KindDenied {
		t.Errorf("COMMIT: %v", v.Err)
	}
	// A predicted statement that fails is the policy's.
	v = mustVerify(t, d, tasks[0].pyJob("UPDATE no_such_table SET a = 1"), false)
	if sqlexec.KindOf(v.Err) != sqlexec.KindSyntax {
		t.Errorf("unknown table: %v", v.Err)
	}
	for dsn := range r.dsns {
		if !strings.Contains(dsn, cloneBase(d.Name())) || strings.Contains(dsn, "/"+d.Name()+"?") {
			t.Errorf("the runner got %s", dsn)
		}
	}
	if st := d.Stats(); st.Escapes != 0 || st.Terminated != 0 || st.SessionRepairs != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestStatefulJobErrors: what is not the policy's fault is an error, not a
// verdict: Setup, Prior, Cleanup or the reference failing, Python tests
// without a PyRunner, the caller's context ending; Setup's and Prior's
// effects are seen by the predicted statements.
func TestStatefulJobErrors(t *testing.T) {
	_, d := openStateful(t, StatefulOptions{Clones: 1})
	base := sqlexec.Job{Key: "errors", Predicted: "INSERT INTO zz VALUES (2)", Reference: []string{"INSERT INTO zz VALUES (2)"},
		Setup: []string{"CREATE TABLE zz (a int PRIMARY KEY)"}, Prior: []string{"INSERT INTO zz VALUES (1)"},
		Checks: []string{"SELECT a FROM zz ORDER BY a"}, Cleanup: []string{"DROP TABLE zz"}, Policy: sqlexec.DefaultPolicy(), Limits: jobLimits()}
	mustVerify(t, d, base, true)
	j := base
	j.Predicted = "INSERT INTO zz VALUES (1)" // the row Prior inserted
	v := mustVerify(t, d, j, false)
	if sqlexec.KindOf(v.Err) != sqlexec.KindExecution {
		t.Errorf("a duplicate key: %v", v.Err)
	}
	// Cleanup that fails after the predicted statements fails the verdict.
	j = base
	j.Key, j.Predicted = "cleanup broken by the prediction", "DROP TABLE zz; CREATE TABLE yy (a int)"
	j.Checks = []string{"SELECT 1"}
	v = mustVerify(t, d, j, false)
	if v.Err != nil || !strings.Contains(v.Reason, "cleanup statement failed") {
		t.Errorf("cleanup after the prediction: %v, %q: want a privileged reason and no feedback", v.Err, v.Reason)
	}
	// The rewrites apply to the compared statements only: the DISTINCT of
	// CREATE TABLE AS stays.
	p := sqlexec.DefaultPolicy()
	p.StripDistinct = true
	j = sqlexec.Job{Key: "rewrites", Predicted: "CREATE TABLE zt AS SELECT DISTINCT terminal FROM berths; SELECT DISTINCT count(*) FROM zt",
		Reference: []string{"SELECT count(*) FROM (SELECT terminal FROM berths GROUP BY terminal) g"}, Policy: p, Limits: jobLimits()}
	mustVerify(t, d, j, true)
	for _, tc := range []struct {
		name string
		edit func(j *sqlexec.Job)
	}{
		{"setup fails", func(j *sqlexec.Job) { j.Setup = append(j.Setup, "SELECT 1/0") }},
		{"setup commits", func(j *sqlexec.Job) { j.Setup = append(j.Setup, "COMMIT") }},
		{"prior fails", func(j *sqlexec.Job) { j.Prior = []string{"INSERT INTO nothing VALUES (1)"} }},
		{"prior denied", func(j *sqlexec.Job) { j.Prior = []string{"SET statement_timeout = 0"} }},
		{"cleanup fails", func(j *sqlexec.Job) { j.Cleanup = []string{"DROP TABLE nothing"} }},
		{"reference fails", func(j *sqlexec.Job) { j.Reference = []string{"INSERT INTO nothing VALUES (1)"} }},
		{"a check does not parse", func(j *sqlexec.Job) { j.Checks = []string{"SELEC 1"} }},
		{"no reference", func(j *sqlexec.Job) { j.Checks, j.Reference = nil, nil }},
		{"tests without a runner", func(j *sqlexec.Job) { j.Tests = []string{"def test_case(): pass"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := base
			j.Key = tc.name
			j.Setup = slices.Clone(base.Setup)
			tc.edit(&j)
			v, err := d.Verify(context.Background(), j)
			if err == nil {
				t.Fatalf("got %+v and no error", v)
			}
			t.Log(err)
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	j = base
	j.Key = "canceled"
	if _, err := d.Verify(ctx, j); err == nil {
		t.Errorf("a canceled context: no error")
	}
	mustVerify(t, d, base, true)
}

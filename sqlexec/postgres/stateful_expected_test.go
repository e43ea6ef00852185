package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"avtgym/sqlexec"
	"avtgym/sqlexec/pytests"
)

// This file tests what BIRD-Interact follow-ups need of a stateful job on
// PostgreSQL (corpus.Task.FollowUpJobFor): Job.ExpectedPrior,
// Job.ReferenceFailureFails (the harness's ex_base, in
// evaluation/src/eval_bird_interact.py, scores a failing reference 0) and
// QueryState (BIRD_A's execute on the follow-up's state), on the lite
// sample's harbor_M_1.

// harborM1 is the lite sample's harbor_M_1.
func harborM1(t *testing.T) mgmtTask {
	t.Helper()
	i := slices.IndexFunc(mgmtTasks(t), func(m mgmtTask) bool { return m.id == "harbor_M_1" })
	return mgmtTasks(t)[i]
}

// rigM1 is harbor_M_1's reference followed by what rigs its follow-up:
// no assignments (every crane's moves 0) and no home berths.
func rigM1(m mgmtTask) string {
	return strings.Join(m.sol, ";\n") + ";\nDELETE FROM crane_assignments;\nUPDATE cranes SET home_berth_id = NULL"
}

// wrongM1 is a follow-up that is right only on the rigged state.
const wrongM1 = "SELECT crane_code, crane_type, NULL::varchar AS berth_code, 0::bigint AS moves_since_may FROM cranes WHERE operational_status = 'maintenance'"

// TestStatefulExpectedPrior: with ExpectedPrior the follow-up's expected
// result comes from the reference's phase-1 state: harbor_M_1's phase 1
// plus DELETE FROM crane_assignments and UPDATE cranes SET home_berth_id =
// NULL no longer makes a wrong follow-up pass (it did with the rigged phase
// 1 as Prior on both sides).
func TestStatefulExpectedPrior(t *testing.T) {
	_, d := openStateful(t, StatefulOptions{Clones: 2})
	m := harborM1(t)
	rig := rigM1(m)

	old := m.followUpJob(wrongM1)
	old.Key, old.Prior = "m1-old", []string{rig}
	mustVerify(t, d, old, true) // the attack, without ExpectedPrior

	j := m.followUpJob(wrongM1)
	j.Key, j.Prior, j.ExpectedPrior = "m1-fu", []string{rig}, m.sol
	v := mustVerify(t, d, j, false)
	if v.Err != nil {
		t.Errorf("a wrong result is reported as the SQL's error: %v", v.Err)
	}
	// The correct follow-up on an honest phase 1 passes; on the rigged
	// state it fails (its rows are the rigged ones).
	j = m.followUpJob(strings.Join(m.fuSol, ";\n"))
	j.Key, j.Prior, j.ExpectedPrior = "m1-fu", m.sol, m.sol
	mustVerify(t, d, j, true)
	j.Prior = []string{rig}
	mustVerify(t, d, j, false)
}

// TestStatefulReferenceFailureFails: a reference that fails on the state
// it runs on is an error by default and a failed verdict (never an error,
// Err nil) with ReferenceFailureFails; a failing Setup stays an error.
func TestStatefulReferenceFailureFails(t *testing.T) {
	_, d := openStateful(t, StatefulOptions{Clones: 2})
	m := harborM1(t)
	ctx := context.Background()
	j := m.followUpJob(strings.Join(m.fuSol, ";\n"))
	j.Key, j.Prior, j.ExpectedPrior = "m1-rf", m.sol, []string{"ALTER TABLE cranes RENAME COLUMN crane_type TO kind"}
	if _, err := d.Verify(ctx, j); err == nil {
		t.Error("a failing reference is not an error by default")
	}
	j.ReferenceFailureFails = true
	v, err := d.Verify(ctx, j)
	if err != nil {
		t.Fatalf("with ReferenceFailureFails a failing reference is an error: %v", err)
	}
	if v.Success || v.Err != nil || !strings.Contains(v.Reason, "reference failed") {
		t.Errorf("verdict %+v, want a failure saying the reference failed", v)
	}
	j.Setup = []string{"INSERT INTO nowhere VALUES (1)"}
	if _, err := d.Verify(ctx, j); err == nil {
		t.Error("a failing Setup became a verdict under ReferenceFailureFails")
	}
}

// TestStatefulQueryState: QueryState reads the state Setup and Prior leave
// (harbor_M_1's phase 1: four cranes in maintenance), read-only (a write
// is denied), bounded (MaxRows), and leaves nothing; a failing Prior is an
// error of no kind.
func TestStatefulQueryState(t *testing.T) {
	_, d := openStateful(t, StatefulOptions{Clones: 2})
	_, db := harbor(t)
	m := harborM1(t)
	ctx := context.Background()
	q := sqlexec.StateQuery{Key: "m1-q", Prior: m.sol, SQL: "SELECT crane_code FROM cranes WHERE operational_status = 'maintenance' ORDER BY 1", Limits: jobLimits()}
	r, err := d.QueryState(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, row := range r.Rows {
		got = append(got, row[0].(string))
	}
	if want := []string{"GC-01", "MH-04", "MH-10", "QC-09"}; !slices.Equal(got, want) {
		t.Errorf("cranes in maintenance on phase 1's state: %v, want %v", got, want)
	}
	for sql, kind := range map[string]sqlexec.ErrorKind{
		"UPDATE cranes SET operational_status = 'retired'": sqlexec.KindDenied,
		"SELECT * FROM crane_assignments":                  sqlexec.KindTooManyRows,
		"SELECT nope FROM cranes":                          sqlexec.KindSyntax,
		"SELECT 1 / (count(*) - count(*)) FROM cranes":     sqlexec.KindExecution,
	} {
		q := q
		q.SQL = sql
		q.Limits.MaxRows = 5
		if _, err := d.QueryState(ctx, q); sqlexec.KindOf(err) != kind {
			t.Errorf("%s: %v (kind %v), want kind %v", sql, err, sqlexec.KindOf(err), kind)
		}
	}
	bad := q
	bad.Prior = []string{"DELETE FROM nowhere"}
	if _, err := d.QueryState(ctx, bad); err == nil || sqlexec.KindOf(err) != 0 {
		t.Errorf("a failing Prior gave %v (kind %v), want an error of no kind", err, sqlexec.KindOf(err))
	}
	// Nothing stayed: the working database has no crane in maintenance
	// beyond the pristine ones.
	res, err := db.Query(ctx, "SELECT count(*) FROM cranes WHERE operational_status = 'maintenance'", jobLimits())
	if err != nil {
		t.Fatal(err)
	}
	r2, err := d.QueryState(ctx, sqlexec.StateQuery{Key: "m1-q0", SQL: "SELECT count(*) FROM cranes WHERE operational_status = 'maintenance'", Limits: jobLimits()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows[0][0] != r2.Rows[0][0] {
		t.Errorf("after QueryState a copy has %v cranes in maintenance, the database %v", r2.Rows[0][0], res.Rows[0][0])
	}
}

// gateM1 is SQL that passes until at and raises after it, the clock read
// when it runs: phase-1 SQL that passes its own verification and fails
// when it is run again to rebuild the follow-up's state (as random(), the
// clock, a sequence or pg_backend_pid() can make it).
func gateM1(at time.Time) string {
	return fmt.Sprintf("DO $$BEGIN IF clock_timestamp() > '%s'::timestamptz THEN RAISE EXCEPTION 'replayed too late'; END IF; END$$",
		at.UTC().Format("2006-01-02 15:04:05.000000+00"))
}

// Corpus statements after phase 1 (a cleanup, the follow-up's setup):
// harmless on the reference's state; phase 1's trap is a CHECK constraint,
// NOT VALID so that the pristine rows pass it, which the statement's
// update violates.
const (
	afterM1 = "UPDATE cranes SET crane_type = crane_type || ''"
	trapM1  = "ALTER TABLE cranes ADD CONSTRAINT one_letter CHECK (length(crane_type) < 2) NOT VALID"
)

// TestStatefulPolicyPrior: with Job.PolicyPrior whatever the policy's
// phase 1 causes in Prior is a failed verdict, never an error: its replay
// failing (Err: its own SQL's error), or a corpus statement after it
// failing on the state it left (a privileged Reason, Err nil); without
// PolicyPrior the same jobs are errors, and Setup stays the corpus's.
func TestStatefulPolicyPrior(t *testing.T) {
	_, d := openStateful(t, StatefulOptions{Clones: 2})
	m := harborM1(t)
	ctx := context.Background()
	fu := strings.Join(m.fuSol, ";\n")
	key := "m1\x00policy-state\x00pp"

	// The replay attack played for real: phase 1 passes its own checks,
	// then fails when run again for the follow-up.
	at := time.Now().Add(2 * time.Second)
	phase1 := strings.Join(m.sol, ";\n") + ";\n" + gateM1(at)
	mustVerify(t, d, m.checksJob(phase1), true)
	time.Sleep(time.Until(at) + 100*time.Millisecond)
	j := m.followUpJob(fu)
	j.Key, j.Prior, j.ExpectedPrior = key, []string{phase1}, m.sol
	if _, err := d.Verify(ctx, j); err == nil {
		t.Fatal("without PolicyPrior the failing replay is no error: the test lost its premise")
	}
	j.PolicyPrior = 1
	v := mustVerify(t, d, j, false)
	if v.Err == nil || !strings.Contains(v.Err.Error(), "earlier phase") || !strings.Contains(v.Err.Error(), "replayed too late") {
		t.Errorf("replay failure: verdict %+v, want Err naming the earlier phase's SQL and its error", v)
	}
	if k := sqlexec.KindOf(v.Err); k != sqlexec.KindExecution {
		t.Errorf("replay failure of kind %v, want %v", k, sqlexec.KindExecution)
	}

	// Phase 1's CHECK constraint makes the corpus's statement after it
	// fail.
	j = m.followUpJob(fu)
	j.Key = key
	j.Prior = []string{strings.Join(m.sol, ";\n") + ";\n" + trapM1, afterM1}
	j.ExpectedPrior = append(append([]string(nil), m.sol...), afterM1)
	if _, err := d.Verify(ctx, j); err == nil {
		t.Fatal("without PolicyPrior the failing corpus statement is no error: the test lost its premise")
	}
	j.PolicyPrior = 1
	v = mustVerify(t, d, j, false)
	if v.Err != nil || !strings.Contains(v.Reason, "one_letter") {
		t.Errorf("setup failure: verdict %+v, want a privileged Reason naming the violated constraint, Err nil", v)
	}
	if strings.Contains(v.Reason, "\x00") || strings.Contains(v.Reason, key) {
		t.Errorf("the reason carries the job's key: %q", v.Reason)
	}
	// After an honest phase 1 the same job passes.
	j.Prior[0] = strings.Join(m.sol, ";\n")
	mustVerify(t, d, j, true)

	// A phase 1 the statement checks deny (it cannot have passed them in
	// phase 1, but the replay says so as the policy's).
	j.Prior[0] = "SET search_path = nowhere"
	v = mustVerify(t, d, j, false)
	if v.Err == nil || sqlexec.KindOf(v.Err) != sqlexec.KindDenied {
		t.Errorf("denied phase 1: verdict %+v, want Err of KindDenied", v)
	}

	j.Prior[0] = strings.Join(m.sol, ";\n")
	j.Setup = []string{"INSERT INTO nowhere VALUES (1)"}
	if _, err := d.Verify(ctx, j); err == nil {
		t.Error("a failing Setup became a verdict under PolicyPrior")
	}
}

// TestStatefulPolicyPriorPython: the same through the PyRunner (the
// harness's Python tests, which is how BIRD-Interact's follow-ups are
// decided): the worker reports a Prior statement that failed on its open
// session, which with PolicyPrior is the policy's failed verdict.
func TestStatefulPolicyPriorPython(t *testing.T) {
	py, err := pytests.New(pytests.Config{})
	if err != nil {
		t.Skipf("no Python test worker: %v", err)
	}
	t.Cleanup(func() { py.Close(context.Background()) })
	_, d := openStateful(t, StatefulOptions{Clones: 2, Python: py})
	m := harborM1(t)
	ctx := context.Background()
	// harbor_M_1's Python test decides its reference's statements, run
	// after a Prior whose first text stands for the policy's phase 1.
	sol := strings.Join(m.sol, ";\n")
	job := func(prior ...string) sqlexec.Job {
		return sqlexec.Job{Key: "m1\x00py", Prior: prior, PolicyPrior: 1, Predicted: sol,
			Reference: m.sol, Tests: m.tests, Limits: jobLimits(), Deadline: time.Minute}
	}
	mustVerify(t, d, job("SELECT 1", afterM1), true)

	v := mustVerify(t, d, job("SELECT 1;\n"+gateM1(time.Now().Add(-time.Second)), afterM1), false)
	if v.Err == nil || !strings.Contains(v.Err.Error(), "replayed too late") {
		t.Errorf("replay failure: verdict %+v, want Err with phase 1's error", v)
	}
	v = mustVerify(t, d, job(trapM1, afterM1), false)
	if v.Err != nil || !strings.Contains(v.Reason, "one_letter") || strings.Contains(v.Reason, "\x00") {
		t.Errorf("setup failure: verdict %+v, want a privileged Reason (Err nil, no key)", v)
	}
	bad := job(trapM1, afterM1)
	bad.PolicyPrior = 0
	if _, err := d.Verify(ctx, bad); err == nil {
		t.Error("without PolicyPrior the failing corpus statement is no error")
	}
}

// TestStatefulQueryStatePolicyPrior: QueryState with PolicyPrior reports
// a failure in Prior as the policy's (KindExecution): its own SQL's
// error, or for a corpus statement a message quoting neither it nor its
// error.
func TestStatefulQueryStatePolicyPrior(t *testing.T) {
	_, d := openStateful(t, StatefulOptions{Clones: 1})
	m := harborM1(t)
	ctx := context.Background()
	sol := strings.Join(m.sol, ";\n")
	q := sqlexec.StateQuery{Key: "m1\x00q", Prior: []string{sol + ";\n" + gateM1(time.Now().Add(-time.Second))}, PolicyPrior: 1,
		SQL: "SELECT 1", Limits: jobLimits()}
	if _, err := d.QueryState(ctx, q); sqlexec.KindOf(err) != sqlexec.KindExecution || !strings.Contains(err.Error(), "replayed too late") {
		t.Errorf("the policy's Prior failing: %v (kind %v), want its error as KindExecution", err, sqlexec.KindOf(err))
	}
	q.Prior = []string{sol + ";\n" + trapM1, afterM1}
	_, err := d.QueryState(ctx, q)
	if sqlexec.KindOf(err) != sqlexec.KindExecution || strings.Contains(err.Error(), "one_letter") || strings.Contains(err.Error(), "crane_type") {
		t.Errorf("a corpus statement failing on the policy's state: %v (kind %v), want KindExecution quoting nothing of it", err, sqlexec.KindOf(err))
	}
	q.PolicyPrior = 0
	if _, err := d.QueryState(ctx, q); err == nil || sqlexec.KindOf(err) != 0 {
		t.Errorf("without PolicyPrior: %v (kind %v), want an error of no kind", err, sqlexec.KindOf(err))
	}
}

package sqlite

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"avtgym/sqlexec"
)

// This file tests what BIRD-Interact follow-ups need of a stateful job
// (corpus.Task.FollowUpJobFor): Job.ExpectedPrior (the reference side on
// the reference's phase-1 state, the policy's side on its own),
// Job.ReferenceFailureFails (a failing reference scores 0, as ex_base in
// the harness's evaluation/src/eval_bird_interact.py does), and QueryState
// (BIRD_A's execute on the follow-up's state).

// followJob is a follow-up on statefulScript's orders: phase 1 (prior) is
// the policy's, expected the reference's; the follow-up deletes the small
// orders, checked by the ids left.
func followJob(key, prior, expected, predicted string) sqlexec.Job {
	j := job(key, predicted, []string{"DELETE FROM orders WHERE amount < 100"}, "SELECT id FROM orders")
	j.Prior = []string{prior}
	j.ExpectedPrior = []string{expected}
	return j
}

// TestStatefulExpectedPrior: with ExpectedPrior the checks' expected rows
// come from the reference's phase-1 state, whatever the policy's phase 1
// (Prior) did: a phase 1 that installs a trigger swallowing every DELETE
// cannot make a do-nothing follow-up pass, and the reference side is
// computed once for every policy's phase 1.
func TestStatefulExpectedPrior(t *testing.T) {
	_, path := build(t, statefulScript)
	s := NewStateful(open(t, path, Options{}), StatefulOptions{})
	ref1 := "UPDATE orders SET amount = amount + 1 WHERE id = 1"
	rigged := ref1 + "; CREATE TRIGGER keep BEFORE DELETE ON orders BEGIN SELECT RAISE(IGNORE); END"
	followUp := "DELETE FROM orders WHERE amount < 100"

	// Without ExpectedPrior (the old rule), the rigged phase 1 reaches the
	// reference side too: the reference deletes nothing either, and
	// SELECT 1 passes. This is the attack the field exists for.
	old := followJob("old", rigged, "", "SELECT 1")
	old.ExpectedPrior = nil
	if v := verify(t, s, old); !v.Success {
		t.Fatalf("without ExpectedPrior the rigged phase 1 no longer rigs the reference side (%s): the test lost its premise", v.Reason)
	}

	runs := s.refRuns.Load()
	if v := verify(t, s, followJob("fu", rigged, ref1, "SELECT 1")); v.Success {
		t.Error("SELECT 1 passed after a phase 1 that swallows deletes: the expected side ran on the policy's state")
	}
	// The correct follow-up on the rigged state deletes nothing (the
	// trigger): it fails too, the policy's phase 1 being the policy's.
	if v := verify(t, s, followJob("fu", rigged, ref1, followUp)); v.Success {
		t.Error("the follow-up passed on a state where its DELETE does nothing")
	}
	// On an honest phase 1 the correct follow-up passes, a wrong one fails.
	if v := verify(t, s, followJob("fu", ref1, ref1, followUp)); !v.Success {
		t.Errorf("the correct follow-up failed on the reference's state: %s", v.Reason)
	}
	if v := verify(t, s, followJob("fu", ref1, ref1, "DELETE FROM orders WHERE amount < 50")); v.Success {
		t.Error("a wrong follow-up passed")
	}
	// One reference side for all of them: it does not depend on Prior.
	if n := s.refRuns.Load() - runs; n != 1 {
		t.Errorf("the reference side ran %d times for one ExpectedPrior, want 1", n)
	}
	// A different ExpectedPrior is another reference side.
	other := "UPDATE orders SET amount = 5 WHERE id = 2"
	if v := verify(t, s, followJob("fu", other, other, followUp)); !v.Success {
		t.Errorf("the correct follow-up failed after another phase 1: %s", v.Reason)
	}
	if n := s.refRuns.Load() - runs; n != 2 {
		t.Errorf("the reference side ran %d times for two ExpectedPriors, want 2", n)
	}
}

// TestStatefulReferenceFailureFails: a reference that fails on the state
// it runs on is an error (the corpus's fault) by default, and a failed
// verdict, never an error, with ReferenceFailureFails; Setup failing stays
// the environment's either way.
func TestStatefulReferenceFailureFails(t *testing.T) {
	_, path := build(t, statefulScript)
	s := NewStateful(open(t, path, Options{}), StatefulOptions{})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		edit func(*sqlexec.Job)
	}{
		{"reference statement", func(j *sqlexec.Job) { j.Reference = []string{"SELECT total_moves FROM orders"}; j.Checks = nil }},
		{"check", func(j *sqlexec.Job) {
			j.ExpectedPrior = []string{"DROP VIEW big_orders; DROP TABLE orders"}
			j.Reference = []string{"SELECT 1"}
		}},
		{"cleanup", func(j *sqlexec.Job) { j.Cleanup = []string{"DROP TABLE nowhere"} }},
	} {
		j := followJob("rf\x00"+tc.name, "SELECT 1", "SELECT 1", "DELETE FROM orders WHERE amount < 100")
		tc.edit(&j)
		if _, err := s.Verify(ctx, j); err == nil {
			t.Errorf("%s: a failing reference is not an error by default", tc.name)
		}
		j.ReferenceFailureFails = true
		v, err := s.Verify(ctx, j)
		if err != nil {
			t.Errorf("%s: with ReferenceFailureFails the failing reference is an error: %v", tc.name, err)
			continue
		}
		if v.Success || v.Err != nil || !strings.Contains(v.Reason, "reference side failed") {
			t.Errorf("%s: verdict %+v, want a failure saying the reference failed (Err nil)", tc.name, v)
		}
		// The reason is the verifier's, shown in the privileged part: the
		// job's key (internal, NUL bytes and all) is not in it.
		if strings.Contains(v.Reason, "\x00") || strings.Contains(v.Reason, j.Key) {
			t.Errorf("%s: the reason carries the job's key: %q", tc.name, v.Reason)
		}
	}
	j := followJob("rf-setup", "SELECT 1", "SELECT 1", "SELECT 1")
	j.Setup = []string{"INSERT INTO nowhere VALUES (1)"}
	j.ReferenceFailureFails = true
	if _, err := s.Verify(ctx, j); err == nil {
		t.Error("a failing Setup is a verdict under ReferenceFailureFails: it is the corpus's")
	}
}

// TestStatefulQueryState: QueryState answers on the state Setup and Prior
// leave, read-only, bounded, on a copy of its own; the policy's failures
// carry their kind, Prior's none.
func TestStatefulQueryState(t *testing.T) {
	_, path := build(t, statefulScript)
	db := open(t, path, Options{})
	s := NewStateful(db, StatefulOptions{})
	ctx := context.Background()
	lim := sqlexec.DefaultLimits()
	q := sqlexec.StateQuery{Key: "q", Setup: []string{"UPDATE orders SET amount = 1"}, Prior: []string{"DELETE FROM orders WHERE id = 4"},
		SQL: "SELECT id, amount FROM orders ORDER BY id", Limits: lim}
	r, err := s.QueryState(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != 3 || r.Rows[0][1] != float64(1) {
		t.Errorf("rows %v, want ids 1..3 with amount 1", r.Rows)
	}
	// Nothing stays: the database as loaded still has four orders.
	if r, err := db.Query(ctx, "SELECT count(*) FROM orders", lim); err != nil || r.Rows[0][0] != int64(4) {
		t.Errorf("after QueryState the database has %v orders (%v)", r, err)
	}
	for sql, kind := range map[string]sqlexec.ErrorKind{
		"DELETE FROM orders":               sqlexec.KindDenied,
		"SELECT abs(-9223372036854775808)": sqlexec.KindExecution,
		"SELECT * FROM nowhere":            sqlexec.KindSyntax,
		"SELEC 1":                          sqlexec.KindSyntax,
		"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT i FROM n": sqlexec.KindTooManyRows,
	} {
		q := q
		q.SQL = sql
		q.Limits.MaxRows = 10
		_, err := s.QueryState(ctx, q)
		if got := sqlexec.KindOf(err); got != kind {
			t.Errorf("%s: error %v of kind %v, want %v", sql, err, got, kind)
		}
	}
	bad := q
	bad.Prior = []string{"DELETE FROM nowhere"}
	_, err = s.QueryState(ctx, bad)
	if err == nil || sqlexec.KindOf(err) != 0 || errors.Is(err, context.Canceled) {
		t.Errorf("a failing Prior gave %v (kind %v), want an error of no kind", err, sqlexec.KindOf(err))
	}
}

// gate returns SQL that passes until at and fails after it (an integer
// overflow), the clock read by the statement itself: phase-1 SQL that
// passes its own verification and fails when it is run again to rebuild
// the follow-up's state, as random() or the clock can make it.
func gate(at time.Time) string {
	jd := float64(at.UnixMilli())/86400000 + 2440587.5
	return fmt.Sprintf("SELECT CASE WHEN julianday('now') > %.10f THEN abs(-9223372036854775808) END", jd)
}

// TestStatefulPolicyPrior: with Job.PolicyPrior whatever the policy's
// earlier SQL causes in Prior is a failed verdict, never an error: its
// replay failing (Err set, its own error as feedback), or a corpus
// statement after it failing on the state it left (a Reason only, which
// does not go to the policy as Err). Without PolicyPrior the same jobs
// are errors (the environment's, as before); Setup stays the corpus's;
// ctx ending stays an error; no reason carries the job's key.
func TestStatefulPolicyPrior(t *testing.T) {
	_, path := build(t, statefulScript)
	s := NewStateful(open(t, path, Options{}), StatefulOptions{})
	ctx := context.Background()
	followUp := "DELETE FROM orders WHERE amount < 100"
	key := "fu\x00policy-state\x00k"

	// The replay attack, played for real: phase 1 passes its own
	// verification, then fails when run again.
	at := time.Now().Add(1500 * time.Millisecond)
	phase1 := "UPDATE orders SET amount = amount + 1 WHERE id = 1; " + gate(at)
	p1 := job("p1", phase1, []string{"UPDATE orders SET amount = amount + 1 WHERE id = 1"}, "SELECT id, amount FROM orders")
	if v := verify(t, s, p1); !v.Success {
		t.Fatalf("the gated phase 1 failed its own verification: %s", v.Reason)
	}
	time.Sleep(time.Until(at) + 100*time.Millisecond)
	replay := followJob(key, phase1, "UPDATE orders SET amount = amount + 1 WHERE id = 1", followUp)
	if _, err := s.Verify(ctx, replay); err == nil {
		t.Fatal("without PolicyPrior the failing replay is no error: the test lost its premise")
	}
	replay.PolicyPrior = 1
	v, err := s.Verify(ctx, replay)
	if err != nil {
		t.Fatalf("the policy's phase 1 failing on replay is an error: %v", err)
	}
	if v.Success || v.Err == nil || !strings.Contains(v.Err.Error(), "earlier phase") || !strings.Contains(v.Err.Error(), "integer overflow") {
		t.Errorf("replay failure: verdict %+v, want a failure with Err naming the earlier phase's SQL and its error", v)
	}
	if sqlexec.KindOf(v.Err) != sqlexec.KindExecution {
		t.Errorf("replay failure of kind %v, want %v", sqlexec.KindOf(v.Err), sqlexec.KindExecution)
	}

	// The policy's phase 1 leaves a trigger on which the follow-up's setup
	// (a corpus statement, after it in Prior) fails.
	corpusStmt := "INSERT INTO orders VALUES (9, 1, 5, NULL)"
	trap := "CREATE TRIGGER frozen BEFORE INSERT ON orders BEGIN SELECT RAISE(ABORT, 'frozen'); END"
	for _, p := range []string{trap, "CREATE TEMP TRIGGER frozen BEFORE INSERT ON orders BEGIN SELECT RAISE(ABORT, 'frozen'); END"} {
		j := followJob(key, p, "SELECT 1", followUp)
		j.Prior = append(j.Prior, corpusStmt)
		j.ExpectedPrior = append(j.ExpectedPrior, corpusStmt)
		if _, err := s.Verify(ctx, j); err == nil {
			t.Fatalf("%s: without PolicyPrior the failing setup is no error: the test lost its premise", p)
		}
		j.PolicyPrior = 1
		v, err := s.Verify(ctx, j)
		if err != nil {
			t.Fatalf("%s: the follow-up's setup failing on the policy's state is an error: %v", p, err)
		}
		if v.Success || v.Err != nil || !strings.Contains(v.Reason, "frozen") {
			t.Errorf("%s: verdict %+v, want a failure with a privileged Reason (Err nil)", p, v)
		}
		// The same phase 1 with an honest state passes: the verdict is the
		// trap's, not PolicyPrior's.
		j.Prior = []string{"SELECT 1", corpusStmt}
		if v := verify(t, s, j); !v.Success {
			t.Errorf("the follow-up failed after an honest phase 1: %s", v.Reason)
		}
	}
	for _, r := range []string{v.Reason, v.Err.Error()} {
		if strings.Contains(r, "\x00") || strings.Contains(r, key) {
			t.Errorf("a reason carries the job's key: %q", r)
		}
	}

	// Setup is the corpus's whatever PolicyPrior says.
	j := followJob(key, "SELECT 1", "SELECT 1", followUp)
	j.PolicyPrior = 1
	j.Setup = []string{"INSERT INTO nowhere VALUES (1)"}
	if _, err := s.Verify(ctx, j); err == nil {
		t.Error("a failing Setup became a verdict under PolicyPrior")
	}

	// The caller's context ending during the policy's Prior is the
	// environment's.
	j = followJob(key, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n", "SELECT 1", followUp)
	j.PolicyPrior = 1
	j.Limits.Timeout = time.Minute
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if v, err := s.Verify(cctx, j); err == nil {
		t.Errorf("ctx ended during the policy's Prior: verdict %+v, want an error", v)
	}
}

// TestStatefulQueryStatePolicyPrior: QueryState with PolicyPrior reports
// a failure in Prior as the policy's SQL's (KindExecution): its own
// SQL's error, or, for a corpus statement after it, a message that quotes
// neither the statement nor its error.
func TestStatefulQueryStatePolicyPrior(t *testing.T) {
	_, path := build(t, statefulScript)
	s := NewStateful(open(t, path, Options{}), StatefulOptions{})
	ctx := context.Background()
	q := sqlexec.StateQuery{Key: "q\x00k", Prior: []string{"SELECT abs(-9223372036854775808)"}, PolicyPrior: 1, SQL: "SELECT 1", Limits: sqlexec.DefaultLimits()}
	_, err := s.QueryState(ctx, q)
	if sqlexec.KindOf(err) != sqlexec.KindExecution || !strings.Contains(err.Error(), "integer overflow") {
		t.Errorf("the policy's Prior failing: %v (kind %v), want its error as KindExecution", err, sqlexec.KindOf(err))
	}
	corpusStmt := "INSERT INTO orders VALUES (9, 1, 5, NULL)"
	q.Prior = []string{"CREATE TRIGGER frozen BEFORE INSERT ON orders BEGIN SELECT RAISE(ABORT, 'frozen'); END", corpusStmt}
	_, err = s.QueryState(ctx, q)
	if sqlexec.KindOf(err) != sqlexec.KindExecution || strings.Contains(err.Error(), "frozen") || strings.Contains(err.Error(), "INSERT") || strings.Contains(err.Error(), "\x00") {
		t.Errorf("a corpus statement failing on the policy's state: %v (kind %v), want KindExecution quoting nothing of it", err, sqlexec.KindOf(err))
	}
	q.PolicyPrior = 0
	if _, err := s.QueryState(ctx, q); err == nil || sqlexec.KindOf(err) != 0 {
		t.Errorf("without PolicyPrior: %v (kind %v), want an error of no kind", err, sqlexec.KindOf(err))
	}
}

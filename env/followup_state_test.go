package env_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"avtgym/corpus"
	"avtgym/corpus/birdinteract"
	"avtgym/engines"
	. "avtgym/env"
	"avtgym/internal/pgtest"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
	"avtgym/sqlexec/pytests"
)

// This file plays the attacks on BIRD-Interact follow-ups through BIRD_C
// episodes (issue 27): the state the follow-up is verified on
// (EpisodeOptions.follow_up_state) must not let phase 1 rig phase 2.
// FOLLOW_UP_STATE_REFERENCE (the default) verifies phase 2 on the state the
// reference's phase 1 leaves, as the c-Interact pipeline does
// (bird_interact_conv's eval_bird_interact_batch.py); FOLLOW_UP_STATE_POLICY
// runs the policy's follow-up on its own phase-1 state, as the a-Interact
// harness does, with the expected side from the reference's state.

// followUpModes are the three ways to ask for a follow-up state: unset
// (the default, REFERENCE), REFERENCE and POLICY.
var followUpModes = map[string]pb.FollowUpState{
	"default":   pb.FollowUpState_FOLLOW_UP_STATE_UNSPECIFIED,
	"reference": pb.FollowUpState_FOLLOW_UP_STATE_REFERENCE,
	"policy":    pb.FollowUpState_FOLLOW_UP_STATE_POLICY,
}

// birdCOpts are BIRD_C's options with follow-up state f.
func birdCOpts(f pb.FollowUpState) *pb.EpisodeOptions {
	return &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C, FollowUpState: f}
}

// playFollowUp plays a BIRD_C episode of task: phase1 (which must pass and
// release the follow-up), then phase2 submitted until the episode ends (a
// failure gets the debug retry, so twice). It returns the last step.
func playFollowUp(t *testing.T, e *Env, task string, f pb.FollowUpState, phase1, phase2 string) *pb.StepResponse {
	t.Helper()
	return playFollowUpThen(t, e, task, f, phase1, nil, phase2)
}

// playFollowUpThen is playFollowUp with between (when not nil) called
// after phase 1 has passed and before phase 2 is submitted.
func playFollowUpThen(t *testing.T, e *Env, task string, f pb.FollowUpState, phase1 string, between func(), phase2 string) *pb.StepResponse {
	t.Helper()
	ep := resetOne(t, e, task, birdCOpts(f))
	r := mustStep(t, e, ep.Token, submitAction(phase1), true)
	// A passing phase 1 releases the follow-up (its reference is in the
	// privileged part from then on).
	if r.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || len(r.GetPrivileged().GetFollowUpReferenceSql()) == 0 {
		t.Fatalf("%s: phase 1 did not pass (status %s): %s", task, r.Status, r.GetPrivileged().GetVerifierReason())
	}
	if between != nil {
		between()
	}
	for i := 0; i < 2 && r.Status == pb.EpisodeStatus_EPISODE_STATUS_RUNNING; i++ {
		r = mustStep(t, e, r.Token, submitAction(phase2), true)
	}
	if r.Status == pb.EpisodeStatus_EPISODE_STATUS_ERROR {
		t.Fatalf("%s: phase 2 %q ended the episode in ERROR: %s", task, phase2, r.GetPrivileged().GetVerifierReason())
	}
	if r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
		t.Fatalf("%s: status %s after phase 2", task, r.Status)
	}
	return r
}

func approx(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// wantReward checks the episode's final reward: 1 when phase 2 passed,
// 0.7 when only phase 1 did.
func wantReward(t *testing.T, what string, r *pb.StepResponse, phase2 bool) {
	t.Helper()
	want := 0.7
	if phase2 {
		want = 1
	}
	if got := r.GetReward().GetValue(); !approx(got, want) {
		t.Errorf("%s: reward %v, want %v (%s)", what, got, want, r.GetPrivileged().GetVerifierReason())
	}
}

// TestFollowUpTriggerAttack: on the demo's followup-004 (SQLite), phase 1
// = the reference plus a trigger that swallows every DELETE on
// diabetes_watchlist made phase 2 = SELECT 1 score 1.0 (the follow-up's
// reference, run after the rigged phase 1, deleted nothing either). Under
// every mode SELECT 1 now fails; the correct phase-2 SQL passes under the
// default and REFERENCE modes after the rigged phase 1, and under POLICY
// after an honest one (after the rigged one its DELETE does nothing, which
// is the policy's own doing).
func TestFollowUpTriggerAttack(t *testing.T) {
	c := loadDemo(t)
	task, ok := c.Task("followup-004")
	if !ok {
		t.Fatal("the demo corpus has no followup-004")
	}
	ref1 := strings.Join(task.Reference.SQL, ";\n")
	rigged := ref1 + ";\nCREATE TRIGGER keep BEFORE DELETE ON diabetes_watchlist BEGIN SELECT RAISE(IGNORE); END"
	ref2 := strings.Join(task.FollowUp.Reference.SQL, ";\n")
	e, _ := newEnv(t, c, nil)
	for name, f := range followUpModes {
		wantReward(t, name+": SELECT 1 after the trigger", playFollowUp(t, e, "followup-004", f, rigged, "SELECT 1"), false)
		wantReward(t, name+": the follow-up after an honest phase 1", playFollowUp(t, e, "followup-004", f, ref1, ref2), true)
		wantReward(t, name+": the follow-up after the trigger", playFollowUp(t, e, "followup-004", f, rigged, ref2), f != pb.FollowUpState_FOLLOW_UP_STATE_POLICY)
	}
}

// viewRecords add to the tiny corpus a Management record whose view's
// columns its check does not name (so that a view with its own column name
// passes phase 1), with a Query follow-up that orders by the reference's
// column name; and one whose follow-up reference is broken (no such
// column anywhere), a corpus fault.
const viewRecords = `{"id":"view","split":"dev","db":"mini","category":"Management","request":"Create a view region_totals with each region and its total sales amount.","ambiguities":[],"reference":{"sql":"CREATE VIEW region_totals AS SELECT region, SUM(amount) AS total FROM sales GROUP BY region","checks":["SELECT * FROM region_totals"]},"follow_up":{"request":"Using region_totals, which two regions have the largest totals, largest first?","reference":{"sql":"SELECT region FROM region_totals ORDER BY total DESC LIMIT 2","comparison":{"order":"ordered"}},"category":"Query","type":"state_dependent"}}
{"id":"broken-follow-up","split":"dev","db":"mini","category":"Management","request":"Create a view region_totals with each region and its total sales amount.","ambiguities":[],"reference":{"sql":"CREATE VIEW region_totals AS SELECT region, SUM(amount) AS total FROM sales GROUP BY region","checks":["SELECT * FROM region_totals"]},"follow_up":{"request":"Which region is first?","reference":{"sql":"SELECT region FROM region_totals ORDER BY no_such_column"},"category":"Query","type":"state_dependent"}}
`

// loadViews loads the tiny corpus with viewRecords.
func loadViews(t *testing.T) *corpus.Corpus {
	t.Helper()
	dir := testutil.WriteTiny(t, func(files map[string]string) { files["records.jsonl"] += viewRecords })
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFollowUpRenamedView: a correct phase 1 whose view names its column
// amount_sum instead of the reference's total passes, and the follow-up's
// reference (ordering by total) no longer runs on the state it left, which
// ended the episode in ERROR. Under the default and REFERENCE the
// follow-up is verified on the reference's state: the reference's text
// passes. Under POLICY the policy's follow-up runs on its own state and is
// compared with the reference's result on the reference's state: SQL that
// fits its own view passes, the reference's text fails there (a failed
// verdict, reward 0.7), never ERROR.
func TestFollowUpRenamedView(t *testing.T) {
	c := loadViews(t)
	e, _ := newEnv(t, c, nil)
	renamed := "CREATE VIEW region_totals AS SELECT region, SUM(amount) AS amount_sum FROM sales GROUP BY region"
	ref2 := "SELECT region FROM region_totals ORDER BY total DESC LIMIT 2"
	own := "SELECT region FROM region_totals ORDER BY amount_sum DESC LIMIT 2"
	for name, f := range followUpModes {
		policy := f == pb.FollowUpState_FOLLOW_UP_STATE_POLICY
		wantReward(t, name+": the reference's follow-up", playFollowUp(t, e, "view", f, renamed, ref2), !policy)
		wantReward(t, name+": a wrong follow-up", playFollowUp(t, e, "view", f, renamed, "SELECT region FROM region_totals ORDER BY region LIMIT 2"), false)
		if policy {
			wantReward(t, name+": the follow-up fitting its own view", playFollowUp(t, e, "view", f, renamed, own), true)
		}
	}
}

// TestFollowUpBrokenReference: a follow-up reference that fails on its own
// phase-1 state is a corpus fault: under REFERENCE (the default) the
// episode ends in ERROR with the verifier's failure (corpus audit's
// follow-up check reports such a record; the loader does not verify
// follow-ups), while under POLICY a failing reference scores the follow-up
// 0, as the a-Interact harness's ex_base does, never ERROR.
func TestFollowUpBrokenReference(t *testing.T) {
	c := loadViews(t)
	e, _ := newEnv(t, c, nil)
	phase1 := "CREATE VIEW region_totals AS SELECT region, SUM(amount) AS total FROM sales GROUP BY region"
	wantReward(t, "policy", playFollowUp(t, e, "broken-follow-up", pb.FollowUpState_FOLLOW_UP_STATE_POLICY, phase1, "SELECT region FROM region_totals"), false)

	ep := resetOne(t, e, "broken-follow-up", birdCOpts(pb.FollowUpState_FOLLOW_UP_STATE_UNSPECIFIED))
	r := mustStep(t, e, ep.Token, submitAction(phase1), true)
	r = mustStep(t, e, r.Token, submitAction("SELECT region FROM region_totals"), true)
	if r.Status != pb.EpisodeStatus_EPISODE_STATUS_ERROR || !strings.Contains(r.GetPrivileged().GetVerifierReason(), "verifier failed") {
		t.Errorf("reference: a broken follow-up reference gave status %s (%s), want ERROR", r.Status, r.GetPrivileged().GetVerifierReason())
	}
}

// TestQueryFollowUpState: corpus.Task.QueryFollowUpState (for BIRD_A's
// execute in sub-task 2) reads the state the follow-up is verified on:
// the reference's phase-1 state by default, whatever the policy's phase 1
// did, and the policy's own under POLICY; read-only and bounded.
func TestQueryFollowUpState(t *testing.T) {
	c := loadViews(t)
	task, _ := c.Task("view")
	ctx := context.Background()
	lim := sqlexec.DefaultLimits()
	renamed := []string{"CREATE VIEW region_totals AS SELECT region, SUM(amount) AS amount_sum FROM sales GROUP BY region"}
	cols := func(opt corpus.VerifyOptions) string {
		r, err := task.QueryFollowUpState(ctx, renamed, "SELECT name FROM pragma_table_info('region_totals') ORDER BY cid", lim, opt)
		if err != nil {
			t.Fatalf("%+v: %v", opt, err)
		}
		var names []string
		for _, row := range r.Rows {
			names = append(names, row[0].(string))
		}
		return strings.Join(names, ",")
	}
	if got := cols(corpus.VerifyOptions{}); got != "region,total" {
		t.Errorf("reference state: the view's columns are %s, want region,total (the reference's)", got)
	}
	if got := cols(corpus.VerifyOptions{PolicyPhase1: true}); got != "region,amount_sum" {
		t.Errorf("policy state: the view's columns are %s, want region,amount_sum (the policy's)", got)
	}
	if _, err := task.QueryFollowUpState(ctx, renamed, "DROP VIEW region_totals", lim, corpus.VerifyOptions{}); sqlexec.KindOf(err) != sqlexec.KindDenied {
		t.Errorf("a write on the follow-up's state: %v, want denied", err)
	}
	small := lim
	small.MaxRows = 2
	if _, err := task.QueryFollowUpState(ctx, renamed, "SELECT * FROM sales", small, corpus.VerifyOptions{}); sqlexec.KindOf(err) != sqlexec.KindTooManyRows {
		t.Errorf("13 rows under a cap of 2: %v, want too many rows", err)
	}
	// A task whose phases are both read-only reads the database as loaded.
	q, _ := loadDemo(t).Task("followup-001")
	if r, err := q.QueryFollowUpState(ctx, []string{"SELECT 1"}, "SELECT COUNT(*) FROM products", lim, corpus.VerifyOptions{}); err != nil || len(r.Rows) != 1 {
		t.Errorf("read-only follow-up: %v, %v", r, err)
	}
}

// TestFollowUpJobFor: the follow-up job's form per mode. REFERENCE: the
// whole prefix is the corpus's (Setup: the record's setup, its reference,
// its cleanup, the follow-up's setup), no Prior, so the policy's phase 1
// is not run at all. POLICY: Prior is the policy's phase 1, ExpectedPrior
// the reference's, and a failing reference scores 0. The keys differ
// between the modes and name the reference side's prior only (the
// policy's phase 1 does not change the reference side, so one cached
// outcome serves every episode).
func TestFollowUpJobFor(t *testing.T) {
	c := loadDemo(t)
	task, _ := c.Task("followup-004")
	lim := sqlexec.DefaultLimits()
	mine := []string{"CREATE TABLE diabetes_watchlist (patient_id INTEGER, last_hba1c REAL)"}
	ref := task.FollowUpJobFor(mine, "SELECT 1", lim, corpus.VerifyOptions{})
	pol := task.FollowUpJobFor(mine, "SELECT 1", lim, corpus.VerifyOptions{PolicyPhase1: true})
	if len(ref.Prior) != 0 || ref.ExpectedPrior != nil || ref.ReferenceFailureFails {
		t.Errorf("REFERENCE job: Prior %q, ExpectedPrior %q, ReferenceFailureFails %v", ref.Prior, ref.ExpectedPrior, ref.ReferenceFailureFails)
	}
	if strings.Join(ref.Setup, ";") != strings.Join(task.Reference.SQL, ";") {
		t.Errorf("REFERENCE job: Setup %q, want the reference's phase 1 %q", ref.Setup, task.Reference.SQL)
	}
	if strings.Join(pol.Prior, ";") != mine[0] || strings.Join(pol.ExpectedPrior, ";") != strings.Join(task.Reference.SQL, ";") || !pol.ReferenceFailureFails {
		t.Errorf("POLICY job: Prior %q, ExpectedPrior %q, ReferenceFailureFails %v", pol.Prior, pol.ExpectedPrior, pol.ReferenceFailureFails)
	}
	// Only POLICY's Prior is the policy's doing: its phase 1, one text.
	if ref.PolicyPrior != 0 || pol.PolicyPrior != len(mine) {
		t.Errorf("PolicyPrior: REFERENCE %d, POLICY %d; want 0 and %d", ref.PolicyPrior, pol.PolicyPrior, len(mine))
	}
	if ref.Key == pol.Key {
		t.Errorf("the two modes share the key %q", ref.Key)
	}
	if k := task.FollowUpJobFor([]string{"SELECT 2"}, "SELECT 1", lim, corpus.VerifyOptions{PolicyPhase1: true}).Key; k != pol.Key {
		t.Errorf("POLICY: the key depends on the policy's phase 1 (%q, %q), which the reference side does not", k, pol.Key)
	}
	other, _ := c.Task("followup-003")
	if k := other.FollowUpJobFor(mine, "SELECT 1", lim, corpus.VerifyOptions{}).Key; k == ref.Key {
		t.Error("two records' follow-ups share a key")
	}
}

// guardedRecord adds to the tiny corpus a Management record with a
// cleanup and a follow-up with a setup (BIRD-Interact's clean_up_sqls and
// the follow-up's preprocess_sql): under FOLLOW_UP_STATE_POLICY both run
// on the state the policy's phase 1 left, which can make them fail.
const guardedRecord = `{"id":"guarded","split":"dev","db":"mini","category":"Management","request":"Raise every 2023 sale by 10 dollars.","ambiguities":[],"reference":{"sql":"UPDATE sales SET amount = amount + 10 WHERE year = 2023","checks":["SELECT id, amount FROM sales"],"cleanup":["UPDATE sales SET year = year WHERE id = 1"]},"follow_up":{"request":"How many sales are there per year, by year?","reference":{"setup":["INSERT INTO sales VALUES (14, 'East', 50, 2025)"],"sql":"SELECT year, COUNT(*) FROM sales GROUP BY year ORDER BY year","comparison":{"order":"ordered"}},"category":"Query","type":"state_dependent"}}
`

// sqliteGate is SQLite that passes until at and fails after it (an
// integer overflow), reading the clock when it runs: a phase 1 that
// passes its own verification and fails when it is run again for the
// follow-up, as random() or the clock can make it (deterministic here by
// construction: the test waits past at between the phases).
func sqliteGate(at time.Time) string {
	jd := float64(at.UnixMilli())/86400000 + 2440587.5
	return fmt.Sprintf("SELECT CASE WHEN julianday('now') > %.10f THEN abs(-9223372036854775808) END", jd)
}

// waitPast returns a between for playFollowUpThen: wait until past at.
func waitPast(at time.Time) func() {
	return func() { time.Sleep(time.Until(at) + 100*time.Millisecond) }
}

// noticeLeaks fails when an environment turn of r's transcript quotes
// what the policy may not read (a corpus statement, its error).
func noticeLeaks(t *testing.T, what string, r *pb.StepResponse, secrets ...string) {
	t.Helper()
	for _, tn := range r.GetObservation().GetTurns() {
		for _, s := range secrets {
			if strings.Contains(tn.GetText(), s) {
				t.Errorf("%s: the turn %q shows the policy %q", what, tn.GetText(), s)
			}
		}
	}
}

// TestFollowUpReplayAttack: a phase 1 that passes once and fails when run
// again (on the demo's followup-004, SQLite) turned, under POLICY, every
// phase 2 into an ERROR episode (a failed Prior was the environment's),
// so that a policy could drop the episodes it was about to fail. Now the
// failed replay is its own: phase 2 scores 0 (reward 0.7), TERMINATED.
// REFERENCE and the default never replay the policy's phase 1: the
// follow-up passes there.
func TestFollowUpReplayAttack(t *testing.T) {
	c := loadDemo(t)
	task, _ := c.Task("followup-004")
	ref1 := strings.Join(task.Reference.SQL, ";\n")
	ref2 := strings.Join(task.FollowUp.Reference.SQL, ";\n")
	e, _ := newEnv(t, c, nil)
	for name, f := range followUpModes {
		at := time.Now().Add(1500 * time.Millisecond)
		phase1 := ref1 + ";\n" + sqliteGate(at)
		r := playFollowUpThen(t, e, "followup-004", f, phase1, waitPast(at), ref2)
		wantReward(t, name+": the follow-up after a phase 1 that fails on replay", r, f != pb.FollowUpState_FOLLOW_UP_STATE_POLICY)
	}
}

// TestFollowUpSetupAttack: a phase 1 that passes but leaves a state on
// which the record's cleanup or the follow-up's setup fails (a trigger
// the later corpus statement fires) ended the episode in ERROR under
// POLICY. Now the follow-up scores 0 (reward 0.7), TERMINATED, and
// nothing the policy reads quotes the corpus statement or its error.
// The permanent trigger stops the follow-up's INSERT (its cleanup, an
// UPDATE, passes in phase 1); the temporary one stops the record's
// cleanup UPDATE at replay only (in phase 1 the session's temporary
// objects are dropped before the checks and the cleanup).
func TestFollowUpSetupAttack(t *testing.T) {
	dir := testutil.WriteTiny(t, func(files map[string]string) { files["records.jsonl"] += guardedRecord })
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	e, _ := newEnv(t, c, nil)
	ref1 := "UPDATE sales SET amount = amount + 10 WHERE year = 2023"
	ref2 := "SELECT year, COUNT(*) FROM sales GROUP BY year ORDER BY year"
	traps := map[string]string{
		"the follow-up's setup": ref1 + ";\nCREATE TRIGGER frozen BEFORE INSERT ON sales BEGIN SELECT RAISE(ABORT, 'frozen'); END",
		"the record's cleanup":  ref1 + ";\nCREATE TEMP TRIGGER frozen BEFORE UPDATE ON sales BEGIN SELECT RAISE(ABORT, 'frozen'); END",
	}
	for name, f := range followUpModes {
		policy := f == pb.FollowUpState_FOLLOW_UP_STATE_POLICY
		wantReward(t, name+": the follow-up after an honest phase 1", playFollowUp(t, e, "guarded", f, ref1, ref2), true)
		for what, trap := range traps {
			r := playFollowUp(t, e, "guarded", f, trap, ref2)
			wantReward(t, name+": the follow-up after a phase 1 that breaks "+what, r, !policy)
			noticeLeaks(t, name+": "+what, r, "frozen", "INSERT INTO sales", "year = year")
		}
	}
	// BIRD_A's execute on the same state (QueryFollowUpState) reports it as
	// a failure of the policy's SQL, quoting nothing of the corpus's.
	task, _ := c.Task("guarded")
	for what, trap := range traps {
		_, err := task.QueryFollowUpState(context.Background(), []string{trap}, "SELECT 1", sqlexec.DefaultLimits(), corpus.VerifyOptions{PolicyPhase1: true})
		if sqlexec.KindOf(err) != sqlexec.KindExecution || strings.Contains(err.Error(), "frozen") || strings.Contains(err.Error(), "sales") {
			t.Errorf("execute after a phase 1 that breaks %s: %v (kind %v), want KindExecution quoting nothing of the corpus's", what, err, sqlexec.KindOf(err))
		}
	}
}

// TestFollowUpHarborReplayAttack: the replay attack on PostgreSQL, on the
// lite sample's harbor_M_1, whose phase 1 is decided by its Python test:
// a phase 1 ending in a DO block that raises once the clock has passed a
// point (passing when verified, failing when run again for the follow-up)
// scores phase 2 0 under POLICY, never ERROR; the other modes do not run
// it again.
func TestFollowUpHarborReplayAttack(t *testing.T) {
	c := liteCorpus(t)
	task, ok := c.Task("harbor_M_1")
	if !ok {
		t.Fatal("no harbor_M_1")
	}
	ref1 := strings.Join(task.Reference.SQL, ";\n")
	ref2 := strings.Join(task.FollowUp.Reference.SQL, ";\n")
	e, _ := newEnv(t, c, nil)
	for name, f := range followUpModes {
		at := time.Now().Add(2 * time.Second)
		phase1 := ref1 + ";\n" + fmt.Sprintf("DO $$BEGIN IF clock_timestamp() > '%s'::timestamptz THEN RAISE EXCEPTION 'replayed too late'; END IF; END$$",
			at.UTC().Format("2006-01-02 15:04:05.000000+00"))
		r := playFollowUpThen(t, e, "harbor_M_1", f, phase1, waitPast(at), ref2)
		wantReward(t, name+": the follow-up after a phase 1 that fails on replay", r, f != pb.FollowUpState_FOLLOW_UP_STATE_POLICY)
	}
}

// liteDir is BIRD-Interact's PostgreSQL (lite) sample, beside the checkout.
const liteDir = "../../shared/data/birdinteract-format/lite"

// TestFollowUpHarborDeleteAttack: on the lite sample's harbor_M_1
// (PostgreSQL; phase 1 decided by its Python test, which reads the cranes'
// statuses only), phase 1 = the reference plus DELETE FROM
// crane_assignments and UPDATE cranes SET home_berth_id = NULL made a
// wrong follow-up (no berth, 0 moves) pass. Under every mode it fails now;
// the reference's follow-up passes after an honest phase 1, and after the
// rigged one except under POLICY (where its rows are the rigged state's).
func TestFollowUpHarborDeleteAttack(t *testing.T) {
	c := liteCorpus(t)
	task, ok := c.Task("harbor_M_1")
	if !ok {
		t.Fatal("no harbor_M_1")
	}
	ref1 := strings.Join(task.Reference.SQL, ";\n")
	rigged := ref1 + ";\nDELETE FROM crane_assignments;\nUPDATE cranes SET home_berth_id = NULL"
	ref2 := strings.Join(task.FollowUp.Reference.SQL, ";\n")
	wrong := "SELECT crane_code, crane_type, NULL::varchar AS berth_code, 0::bigint AS moves_since_may FROM cranes WHERE operational_status = 'maintenance'"
	e, _ := newEnv(t, c, nil)
	for name, f := range followUpModes {
		wantReward(t, name+": the wrong follow-up after the rigged phase 1", playFollowUp(t, e, "harbor_M_1", f, rigged, wrong), false)
		wantReward(t, name+": the follow-up after an honest phase 1", playFollowUp(t, e, "harbor_M_1", f, ref1, ref2), true)
		wantReward(t, name+": the follow-up after the rigged phase 1", playFollowUp(t, e, "harbor_M_1", f, rigged, ref2), f != pb.FollowUpState_FOLLOW_UP_STATE_POLICY)
	}
}

// liteCorpus imports the lite sample into a corpus on PostgreSQL, with
// a Python test worker (skipped without the sample).
func liteCorpus(t *testing.T) *corpus.Corpus {
	t.Helper()
	if _, err := os.Stat(liteDir); err != nil {
		t.Skipf("the BIRD-Interact lite sample is not at %s: %v", liteDir, err)
	}
	url := pgtest.URL(t)
	py, err := pytests.New(pytests.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { py.Close(context.Background()) })
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "lite")
	if _, err := birdinteract.Import(ctx, birdinteract.Options{In: liteDir, Out: out, Name: "fustate", Postgres: url, PyRunner: py}); err != nil {
		t.Fatalf("import: %v", err)
	}
	c, err := corpus.LoadDir(ctx, out, corpus.Options{Engines: engines.Opener{PostgresURL: url}, PyRunner: py})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestMain stops the private PostgreSQL cluster pgtest may have started
// (without AVTGYM_POSTGRES_URL) when the package's tests end.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

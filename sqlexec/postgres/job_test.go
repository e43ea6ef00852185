package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"avtgym/sqlexec"
)

// TestJobRequests: a job's pipeline, without a server: the transaction's
// control statements and limits, the phases in order, the results kept,
// the isolation only before checks, and the after-job check (the full one
// every fullCheckEvery jobs).
func TestJobRequests(t *testing.T) {
	iso := isolation{statements: []string{"ISO 1", "ISO 2"}, guard: "GUARD"}
	c := &clone{quick: "QUICK", full: "FULL"}
	type want struct {
		ph   phase
		text string
		keep bool
	}
	reqs := func(tx txn, uses int) []want {
		c.uses = uses
		r := &jobRun{t: tx}
		r.requests(c, iso)
		var out []want
		for _, q := range r.reqs {
			out = append(out, want{q.ph, q.text, q.keep})
		}
		return out
	}
	lim := sqlexec.Limits{Timeout: 2 * time.Second, MaxMemory: 64 << 20}
	head := []want{
		{phControl, "BEGIN READ WRITE", false},
		{phControl, "SET LOCAL statement_timeout = '2000'", false},
		{phControl, "SET LOCAL lock_timeout = '2000'", false},
		{phControl, "SET LOCAL idle_in_transaction_session_timeout = '5000'", false},
		{phControl, "SET LOCAL work_mem = '16384kB'", false},
		{phControl, "DISCARD SEQUENCES", false},
		{phSetup, "SETUP", false},
		{phPrior, "PRIOR", false},
	}
	tail := func(check string) []want {
		return []want{{phCleanup, "CLEANUP", false}, {phSync, "", false}, {phAfter, "ROLLBACK", false}, {phAfter, check, true}, {phSync, "", false}}
	}
	withChecks := txn{setup: []string{"SETUP"}, prior: []string{"PRIOR"}, main: []string{"M1", "M2"},
		checks: [][]string{{"C1"}, {"C2a", "C2b"}}, cleanup: []string{"CLEANUP"}, lim: lim}
	got := reqs(withChecks, 0)
	exp := append(append(append([]want(nil), head...),
		want{phMain, "M1", false}, want{phMain, "M2", false}, want{phConstraints, "SET CONSTRAINTS ALL IMMEDIATE", false},
		want{phIsolate, "ISO 1", false}, want{phIsolate, "ISO 2", false}, want{phGuard, "GUARD", true},
		want{phChecks, "C1", true}, want{phChecks, "C2a", false}, want{phChecks, "C2b", true}), tail("QUICK")...)
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		t.Errorf("a job with checks:\n got %v\nwant %v", got, exp)
	}

	last := txn{setup: []string{"SETUP"}, prior: []string{"PRIOR"}, main: []string{"M1", "M2"}, cleanup: []string{"CLEANUP"}, lim: lim, collectLast: true}
	got = reqs(last, fullCheckEvery-1)
	exp = append(append(append([]want(nil), head...),
		want{phMain, "M1", false}, want{phMain, "M2", true}, want{phConstraints, "SET CONSTRAINTS ALL IMMEDIATE", false}), tail("FULL")...)
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		t.Errorf("a job decided by its last statement, on its full-check turn:\n got %v\nwant %v", got, exp)
	}
	for _, q := range (&jobRun{reqs: []jobReq{{ph: phSync}, {ph: phMain, text: "M"}}}).reqs {
		if w := q.wired(); (q.ph == phSync) != (w.op == opSync) || (q.ph != phSync && (w.op != opQuery || w.text != q.text)) {
			t.Errorf("%v is sent as %+v", q.ph, w)
		}
	}
}

// TestConclude: a run's first failure is the policy's (a verdict) in the
// policy's phases of the policy's run, unless the environment failed;
// otherwise an error naming the phase.
func TestConclude(t *testing.T) {
	syntax := sqlexec.Errorf(sqlexec.KindSyntax, nil, "bad")
	gone := sqlexec.Errorf(sqlexec.KindUnavailable, nil, "gone")
	canceledCtx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		policy  bool
		ph      phase
		failure error
		verdict bool   // the failure is the outcome's
		err     string // else the error says this
	}{
		{"the policy's statement", context.Background(), true, phMain, syntax, true, ""},
		{"a check on the policy's state", context.Background(), true, phChecks, syntax, true, ""},
		{"the cleanup after the policy", context.Background(), true, phCleanup, syntax, true, ""},
		{"the environment, in the policy's phase", context.Background(), true, phMain, gone, false, "unavailable: gone"},
		{"the policy's setup", context.Background(), true, phSetup, syntax, false, "postgres: the setup statement failed: syntax: bad"},
		{"the reference", context.Background(), false, phMain, syntax, false, "postgres: the reference statement failed: syntax: bad"},
		{"the reference's deferred constraint", context.Background(), false, phConstraints, syntax, false, "postgres: the reference statement failed"},
		{"a check after the reference", context.Background(), false, phChecks, syntax, false, "postgres: the check statement failed"},
		{"a control statement", context.Background(), true, phControl, syntax, false, "postgres: running the job: syntax: bad"},
		{"the caller left", canceledCtx, true, phMain, syntax, false, "postgres: the job was interrupted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &jobRun{t: txn{policy: tc.policy}, reqs: []jobReq{{ph: phControl}, {ph: tc.ph, text: "X"}}, failedAt: 1, failure: tc.failure}
			r.out.last = &sqlexec.Result{}
			err := r.conclude(tc.ctx)
			if tc.verdict {
				if err != nil || r.out.failure != tc.failure || r.out.failPhase != tc.ph || r.out.last == nil {
					t.Fatalf("got %v, outcome %+v; want the failure as the outcome's", err, r.out)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || r.out.failure != nil || r.out.last != nil {
				t.Fatalf("got %v, outcome %+v; want an error saying %q and no outcome", err, r.out, tc.err)
			}
			if tc.ctx == context.Background() && !errors.Is(err, tc.failure) {
				t.Errorf("the error does not wrap the failure: %v", err)
			}
		})
	}
	r := &jobRun{failedAt: -1}
	r.out.last = &sqlexec.Result{}
	if err := r.conclude(canceledCtx); err != nil || r.out.last == nil {
		t.Errorf("a run without a failure: %v, %+v", err, r.out)
	}
}

// TestQueryRequestsWire: a query's requests are sent as the connection's
// prepared statements when they have one, and as text otherwise.
func TestQueryRequestsWire(t *testing.T) {
	for _, tc := range []struct {
		r    request
		want wire
	}{
		{request{kind: reqSet, text: "SET a = '1'"}, wire{op: opQuery, text: "SET a = '1'"}},
		{request{kind: reqControl, text: beginSQL}, wire{op: opQuery, text: beginSQL}},
		{request{kind: reqControl, text: beginSQL, name: "avtgym_1"}, wire{op: opPrepared, name: "avtgym_1"}},
		{request{kind: reqStmt, text: "SELECT 1", name: "avtgym_2"}, wire{op: opPrepared, name: "avtgym_2"}},
		{request{kind: reqStmt, text: "SELECT 1"}, wire{op: opQuery, text: "SELECT 1"}},
		{request{kind: reqPrepare, text: "SELECT 1", name: "avtgym_2"}, wire{op: opPrepare, text: "SELECT 1", name: "avtgym_2"}},
		{request{kind: reqDeallocate, name: "avtgym_3"}, wire{op: opDeallocate, name: "avtgym_3"}},
		{request{kind: reqSync}, wire{op: opSync}},
	} {
		if got := tc.r.wired(); got != tc.want {
			t.Errorf("%+v is sent as %+v, want %+v", tc.r, got, tc.want)
		}
	}
}

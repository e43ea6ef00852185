package driver_test

import (
	"context"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// followUpTasks lists the demo corpus's tasks with a follow-up
// (TaskSummary.subtasks = 2).
func followUpTasks(t *testing.T, srv *testutil.Server) []string {
	t.Helper()
	resp, err := srv.Client.Env.ListTasks(context.Background(), &pb.ListTasksRequest{Corpus: "demo", PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, ts := range resp.GetTasks() {
		if ts.GetSubtasks() == 2 {
			ids = append(ids, ts.GetTaskId())
		}
	}
	if len(ids) == 0 {
		t.Fatal("the demo corpus has no task with a follow-up (TaskSummary.subtasks = 2)")
	}
	return ids
}

func birdC(patience *int32) *pb.EpisodeOptions {
	return &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C, Patience: patience}
}

func startBirdC(t *testing.T, env driver.Env, task string, patience *int32) *driver.Episode {
	t.Helper()
	seed := uint64(1)
	ep, err := driver.Start(context.Background(), env, &pb.ResetRequest{Corpus: "demo", TaskId: task, Seed: &seed, IncludePrivileged: true, Options: birdC(patience)})
	if err != nil {
		t.Fatalf("%s: %v", task, err)
	}
	return ep
}

// TestBirdCDriver plays every demo follow-up task under BIRD_C through
// the driver: the protocol, sub-task, turn budget and SQL-only state it
// tracks, the follow-up's release (its request turn, its reference SQL on
// the privileged channel), and the record's phase components.
func TestBirdCDriver(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	env := driver.Remote(srv.Client.Env)
	ctx := context.Background()
	for _, task := range followUpTasks(t, srv) {
		t.Run(task, func(t *testing.T) {
			ep := startBirdC(t, env, task, nil)
			m := ep.Record(nil).Counted
			b := ep.Allowance()
			if ep.Protocol() != pb.Protocol_PROTOCOL_BIRD_C || ep.Subtask() != 1 || !ep.NeedsSQL() || ep.Done() {
				t.Fatalf("after reset: protocol %s subtask %d needs SQL %v done %v", ep.Protocol(), ep.Subtask(), ep.NeedsSQL(), ep.Done())
			}
			if b.GetUnit() != pb.BudgetUnit_BUDGET_UNIT_TURNS || b.GetTotalMilli() != int64(max(1, m+3))*1000 || b.GetUsedMilli() != 0 {
				t.Fatalf("budget %v, want %d turns (m %d + patience 3)", b, m+3, m)
			}
			if ep.SQLRequired() != (m+3 <= 1) || ep.Asking() == ep.SQLRequired() {
				t.Fatalf("sql required %v asking %v with %d turns", ep.SQLRequired(), ep.Asking(), m+3)
			}
			if ep.ReferenceSQL() == "" || ep.FollowUpReferenceSQL() != nil {
				t.Fatalf("reference %q, follow-up reference %q before the release", ep.ReferenceSQL(), ep.FollowUpReferenceSQL())
			}
			for _, q := range probe.Questions(probe.Full, ep.Terms(), ep.Budget()) {
				if !ep.Asking() {
					break
				}
				if err := ep.Ask(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			used := ep.Allowance().GetUsedMilli()
			if err := ep.SubmitSQL(ctx, ep.ReferenceSQL()); err != nil {
				t.Fatal(err)
			}
			if ep.Done() || ep.Subtask() != 2 {
				t.Fatalf("after phase 1's reference: done %v subtask %d (last %v)", ep.Done(), ep.Subtask(), ep.Last())
			}
			if len(ep.FollowUpReferenceSQL()) == 0 || ep.ReferenceSQL() != strings.Join(ep.FollowUpReferenceSQL(), ";\n") {
				t.Fatalf("follow-up reference %q, current reference %q", ep.FollowUpReferenceSQL(), ep.ReferenceSQL())
			}
			last := ep.Turns()[len(ep.Turns())-1]
			if last.GetRole() != pb.Role_ROLE_ENVIRONMENT || last.GetKind() != pb.TurnKind_TURN_KIND_REQUEST || last.GetText() == "" {
				t.Fatalf("the release's last turn is %v, want the follow-up's request", last)
			}
			if got := ep.Allowance(); got.GetUsedMilli() != used+1000 || got.GetTotalMilli() != b.GetTotalMilli()+1000 {
				t.Fatalf("budget after the release %v (before the submission: used %d of %d)", got, used, b.GetTotalMilli())
			}
			if err := ep.SubmitSQL(ctx, ep.ReferenceSQL()); err != nil {
				t.Fatal(err)
			}
			if !ep.Done() || ep.SQLRequired() || ep.Asking() {
				t.Fatalf("after the follow-up's reference: done %v", ep.Done())
			}
			r := ep.Record(nil)
			if r.Protocol != "bird-c" || r.Subtask != 2 || r.Status != "TERMINATED" ||
				r.Phase1 == nil || *r.Phase1 != 0.7 || r.Phase2 == nil || *r.Phase2 != 0.3 || r.Reward == nil || *r.Reward != 1 {
				t.Errorf("record %+v (phase1 %v phase2 %v reward %v)", r, deref(r.Phase1), deref(r.Phase2), deref(r.Reward))
			}
			if r.TurnBudget != int(b.GetTotalMilli()/1000)+1 || r.TurnsUsed == 0 {
				t.Errorf("turns %d of %d", r.TurnsUsed, r.TurnBudget)
			}
		})
	}
}

func deref(x *float64) any {
	if x == nil {
		return nil
	}
	return *x
}

// TestBirdCLastTurnAndRetry: with patience 0 the last turn takes SQL only
// (Asking false, SQLRequired true); a failed submission gets the debug
// retry (SQL only, no turn spent), and the reference then scores 0.5.
func TestBirdCLastTurnAndRetry(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	env := driver.Remote(srv.Client.Env)
	ctx := context.Background()
	zero := int32(0)
	task := followUpTasks(t, srv)[0]
	ep := startBirdC(t, env, task, &zero)
	turns := int(ep.Allowance().GetTotalMilli() / 1000)
	for i := 0; i < turns-1; i++ {
		if !ep.Asking() || ep.SQLRequired() {
			t.Fatalf("turn %d of %d: asking %v, sql required %v", i+1, turns, ep.Asking(), ep.SQLRequired())
		}
		if err := ep.Ask(ctx, probe.Generic1); err != nil {
			t.Fatal(err)
		}
	}
	if ep.Asking() || !ep.SQLRequired() || ep.TurnsLeft() != 1 {
		t.Fatalf("last turn: asking %v, sql required %v, %d turn(s) left", ep.Asking(), ep.SQLRequired(), ep.TurnsLeft())
	}
	if err := ep.SubmitSQL(ctx, "SELECT 1 WHERE 0"); err != nil {
		t.Fatal(err)
	}
	last := ep.Turns()[len(ep.Turns())-1]
	if ep.Done() || !ep.SQLRequired() || ep.Asking() || last.GetKind() != pb.TurnKind_TURN_KIND_FEEDBACK {
		t.Fatalf("after a failed submission: done %v, sql required %v, last turn %v", ep.Done(), ep.SQLRequired(), last)
	}
	if err := ep.SubmitSQL(ctx, ep.ReferenceSQL()); err != nil {
		t.Fatal(err)
	}
	if ep.Subtask() != 2 {
		t.Fatalf("the retry's reference did not release the follow-up (subtask %d, done %v)", ep.Subtask(), ep.Done())
	}
	// The release adds the one turn of the follow-up's SQL: SQL only.
	if !ep.SQLRequired() || ep.Asking() {
		t.Fatalf("sub-task 2 with patience 0: sql required %v asking %v", ep.SQLRequired(), ep.Asking())
	}
	if err := ep.SubmitSQL(ctx, ep.ReferenceSQL()); err != nil {
		t.Fatal(err)
	}
	r := ep.Record(nil)
	if r.Phase1 == nil || *r.Phase1 != 0.5 || r.Phase2 == nil || *r.Phase2 != 0.3 || r.Reward == nil || *r.Reward != 0.8 {
		t.Errorf("phase1 %v phase2 %v reward %v, want 0.5, 0.3, 0.8", deref(r.Phase1), deref(r.Phase2), deref(r.Reward))
	}
}

// TestUnparsed: under AMBITAB the first unparsed output gets a notice and
// the second in a row is taken as STOP; under BIRD_C it spends a turn.
func TestUnparsed(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	env := driver.Remote(srv.Client.Env)
	ctx := context.Background()
	task := followUpTasks(t, srv)[0]
	seed := uint64(0)
	ep, err := driver.Start(ctx, env, &pb.ResetRequest{Corpus: "demo", TaskId: task, Seed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	if ep.Protocol() != pb.Protocol_PROTOCOL_AMBITAB || ep.NeedsSQL() {
		t.Fatalf("default protocol %s, needs SQL %v", ep.Protocol(), ep.NeedsSQL())
	}
	if err := ep.Unparsed(ctx, "I think... hmm"); err != nil {
		t.Fatal(err)
	}
	last := ep.Turns()[len(ep.Turns())-1]
	if !ep.Asking() || last.GetKind() != pb.TurnKind_TURN_KIND_NOTICE {
		t.Fatalf("after one unparsed output: asking %v, last turn %v", ep.Asking(), last)
	}
	if err := ep.Unparsed(ctx, "still nothing"); err != nil {
		t.Fatal(err)
	}
	if !ep.Done() {
		t.Fatalf("the second unparsed output in a row did not end the question-F1 episode (phase %s)", ep.Phase())
	}

	ep = startBirdC(t, env, task, nil)
	before := ep.Allowance().GetUsedMilli()
	if err := ep.Unparsed(ctx, "??"); err != nil {
		t.Fatal(err)
	}
	if ep.Done() || ep.Allowance().GetUsedMilli() != before+1000 {
		t.Fatalf("BIRD_C unparsed: done %v, budget %v", ep.Done(), ep.Allowance())
	}
	kinds := map[pb.TurnKind]bool{}
	for _, tn := range ep.Turns() {
		kinds[tn.GetKind()] = true
	}
	if !kinds[pb.TurnKind_TURN_KIND_UNPARSED] {
		t.Errorf("no UNPARSED turn in %v", ep.Turns())
	}
}

func TestProtocolNames(t *testing.T) {
	for name, p := range map[string]pb.Protocol{
		"ambitab": pb.Protocol_PROTOCOL_AMBITAB, "bird-c": pb.Protocol_PROTOCOL_BIRD_C, "bird-a": pb.Protocol_PROTOCOL_BIRD_A,
		"tide-f": pb.Protocol_PROTOCOL_TIDE_F, "tide-p": pb.Protocol_PROTOCOL_TIDE_P,
	} {
		got, err := driver.ParseProtocol(name)
		if err != nil || got != p || driver.ProtocolName(p) != name {
			t.Errorf("%s: %v %v, name %q", name, got, err, driver.ProtocolName(p))
		}
	}
	if got, err := driver.ParseProtocol("BIRD_C"); err != nil || got != pb.Protocol_PROTOCOL_BIRD_C {
		t.Errorf("BIRD_C: %v %v", got, err)
	}
	for _, bad := range []string{"", "unspecified", "bird", "bird-x"} {
		if _, err := driver.ParseProtocol(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if driver.ProtocolName(pb.Protocol_PROTOCOL_UNSPECIFIED) != "ambitab" {
		t.Error("UNSPECIFIED is not ambitab")
	}
}

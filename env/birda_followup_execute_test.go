package env_test

import (
	"strings"
	"testing"

	pb "avtgym/proto/avtgym/v1"
)

// TestBirdAExecuteReadsTheFollowUpState: in sub-task 2, BIRD_A's execute
// reads the state the follow-up is verified on (issue 27), as the
// a-Interact harness resets and replays the database before every
// execute: by default the state the reference's phase 1 leaves, so that
// nothing the policy's phase 1 made is visible (and the policy's
// exploration agrees with its verification); under
// FOLLOW_UP_STATE_POLICY the policy's own. In sub-task 1 it reads the
// database as loaded.
func TestBirdAExecuteReadsTheFollowUpState(t *testing.T) {
	c := loadDemo(t)
	task, ok := c.Task("followup-004")
	if !ok {
		t.Fatal("the demo corpus has no followup-004")
	}
	ref1 := strings.Join(task.Reference.SQL, ";\n")
	// Phase 1: the reference plus a table of the policy's own, with one
	// row (the checks read only the watchlist, so it passes).
	phase1 := ref1 + ";\nCREATE TABLE zz_mine (x INTEGER);\nINSERT INTO zz_mine VALUES (7)"
	e, _ := newEnv(t, c, nil)
	execute := func(tok []byte, sql string) (string, []byte) {
		t.Helper()
		r := mustStep(t, e, tok, &pb.Action{Kind: &pb.Action_Execute_{Execute: &pb.Action_Execute{Sql: sql}}}, false)
		if r.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING {
			t.Fatalf("execute %q: status %s", sql, r.Status)
		}
		turns := r.GetObservation().GetTurns()
		return turns[len(turns)-1].GetText(), r.Token
	}
	for _, f := range []pb.FollowUpState{pb.FollowUpState_FOLLOW_UP_STATE_UNSPECIFIED, pb.FollowUpState_FOLLOW_UP_STATE_POLICY} {
		ep := resetOne(t, e, "followup-004", &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A, FollowUpState: f})
		// Sub-task 1: the database as loaded has no watchlist yet.
		out, tok := execute(ep.Token, "SELECT count(*) AS n FROM diabetes_watchlist")
		if !strings.HasPrefix(out, "Error") {
			t.Fatalf("%s: sub-task 1 read a watchlist before any phase 1: %q", f, out)
		}
		r := mustStep(t, e, tok, submitAction(phase1), true)
		if r.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || r.GetObservation().GetSubtask() != 2 {
			t.Fatalf("%s: phase 1 did not release the follow-up (status %s): %s", f, r.Status, r.GetPrivileged().GetVerifierReason())
		}
		mine, tok := execute(r.Token, "SELECT count(*) AS n FROM zz_mine")
		n, _ := execute(tok, "SELECT count(*) AS n FROM diabetes_watchlist")
		policy := f == pb.FollowUpState_FOLLOW_UP_STATE_POLICY
		// The policy's own table exists only on its own state.
		if policy && !strings.Contains(mine, "1") || !policy && !strings.HasPrefix(mine, "Error") {
			t.Errorf("%s: the policy's own table in sub-task 2: %q", f, mine)
		}
		// Both states hold the watchlist phase 1 made (the reference's or
		// the policy's), not the database as loaded.
		if strings.HasPrefix(n, "Error") {
			t.Errorf("%s: sub-task 2 cannot read the watchlist: %q", f, n)
		}
	}
}

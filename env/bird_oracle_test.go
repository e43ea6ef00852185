package env_test

import (
	"testing"

	pb "avtgym/proto/avtgym/v1"
)

// harnessRefusal is BIRD-Interact's refusal, word for word
// (bird_interact_agent/src/envs/user_simulator/prompts.py,
// USER_SIMULATOR_DECODER), spelt out so that the test does not read it
// from the code under test.
const harnessRefusal = "Sorry, this question is out of scope, so I can not answer your question."

// creditIndexes are the privileged credits of a step, as indexes.
func creditIndexes(r *pb.StepResponse) []int32 {
	var out []int32
	for _, c := range r.GetPrivileged().GetCredits() {
		out = append(out, c.GetIndex())
	}
	return out
}

// TestBirdOracleThroughEnv plays the deterministic oracle through the
// environment on the demo's followup-002 (two ambiguities, both named in
// its request): under BIRD_C and BIRD_A the question "Please explain every
// part of: <request>" is credited one ambiguity (the first, senior
// patients) and answered with its resolution alone, a question about
// nothing is refused with the harness's text (a refusal turn, no credit),
// and in sub-task 2 — the follow-up, which has no ambiguities — a
// question gets that refusal (BIRD_A; BIRD_C has no turn left there); under AMBITAB the same question is credited
// both ambiguities and a refusal is avtgym's own, as before.
func TestBirdOracleThroughEnv(t *testing.T) {
	c := loadDemo(t)
	task, ok := c.Task("followup-002")
	if !ok || len(task.Ambiguities) != 2 || task.FollowUp == nil {
		t.Fatal("the demo's followup-002 changed: want two ambiguities and a follow-up")
	}
	e, _ := newEnv(t, c, nil)
	everyPart := askAction("Please explain every part of: " + task.Request)
	nothing := askAction("Could you clarify what you want?")

	for _, p := range []pb.Protocol{pb.Protocol_PROTOCOL_BIRD_C, pb.Protocol_PROTOCOL_BIRD_A} {
		t.Run(p.String(), func(t *testing.T) {
			ep := resetOne(t, e, task.ID, &pb.EpisodeOptions{Protocol: p})
			r := mustStep(t, e, ep.Token, everyPart, true)
			if got := creditIndexes(r); len(got) != 1 || got[0] != 0 || r.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING {
				t.Fatalf("every part: credits %v status %s; want [0], running", got, r.Status)
			}
			if got := lastReply(r); got != task.Ambiguities[0].Resolution {
				t.Errorf("every part: reply %q, want the first resolution alone %q", got, task.Ambiguities[0].Resolution)
			}
			r = mustStep(t, e, r.Token, nothing, true)
			if got := lastOracleTurn(r); got.GetText() != harnessRefusal || got.GetKind() != pb.TurnKind_TURN_KIND_REFUSAL || len(creditIndexes(r)) != 0 {
				t.Fatalf("nothing: turn %v credits %v; want the harness's refusal", got, creditIndexes(r))
			}
			r = mustStep(t, e, r.Token, submitAction(task.ReferenceSQL), true)
			if r.GetObservation().GetSubtask() != 2 || r.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING {
				t.Fatalf("after the reference: subtask %d status %s", r.GetObservation().GetSubtask(), r.Status)
			}
			if r.GetObservation().GetSqlRequired() {
				// BIRD_C's turns for this task are spent (its patience is
				// the whole task's); BIRD_A's coins still buy a question.
				if p == pb.Protocol_PROTOCOL_BIRD_A {
					t.Fatal("sub-task 2 under BIRD_A requires SQL at once")
				}
				return
			}
			r = mustStep(t, e, r.Token, askAction("What do you mean by senior patients and an LDL result?"), true)
			if got := lastOracleTurn(r); got.GetText() != harnessRefusal || got.GetKind() != pb.TurnKind_TURN_KIND_REFUSAL || len(creditIndexes(r)) != 0 {
				t.Errorf("sub-task 2: turn %v credits %v; want the harness's refusal", got, creditIndexes(r))
			}
		})
	}

	t.Run("AMBITAB", func(t *testing.T) {
		ep := resetOne(t, e, task.ID, nil)
		r := mustStep(t, e, ep.Token, everyPart, true)
		if got := creditIndexes(r); len(got) != 2 || got[0] != 0 || got[1] != 1 {
			t.Fatalf("every part: credits %v; want [0 1]", got)
		}
		if want := task.Ambiguities[0].Resolution + " " + task.Ambiguities[1].Resolution; lastReply(r) != want {
			t.Errorf("every part: reply %q, want both resolutions", lastReply(r))
		}
		r = mustStep(t, e, r.Token, nothing, true)
		if got := lastOracleTurn(r); got.GetText() == harnessRefusal || got.GetKind() != pb.TurnKind_TURN_KIND_REFUSAL {
			t.Errorf("nothing: turn %v; want avtgym's own refusal", got)
		}
	})
}

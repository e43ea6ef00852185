package env_test

// Issue 29 (real models): an ERROR names its failing part and nothing
// privileged; output the oracle could not read is flagged in the
// privileged channel; the LLM solver's unreadable output is asked for once
// more, then a failed solution with a feedback turn; a reply cut off in a
// loop is not asked for again with a larger limit.

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	. "avtgym/env"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
)

// uCutOff is a readable chat completion stopped at max_tokens.
func uCutOff(content string) uAnswer {
	b, _ := json.Marshal(map[string]any{
		"model":   "fake",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "length", "message": map[string]any{"role": "assistant", "content": content}}},
	})
	return uAnswer{"application/json", b}
}

// notices are the environment's notice turns of a response.
func notices(r *pb.StepResponse) []string {
	var out []string
	for _, t := range r.GetObservation().GetTurns() {
		if t.GetRole() == pb.Role_ROLE_ENVIRONMENT && t.GetKind() == pb.TurnKind_TURN_KIND_NOTICE {
			out = append(out, t.GetText())
		}
	}
	return out
}

// feedback is the response's last environment feedback turn.
func feedback(r *pb.StepResponse) string {
	turns := r.GetObservation().GetTurns()
	for i := len(turns) - 1; i >= 0; i-- {
		if t := turns[i]; t.GetRole() == pb.Role_ROLE_ENVIRONMENT && t.GetKind() == pb.TurnKind_TURN_KIND_FEEDBACK {
			return t.GetText()
		}
	}
	return ""
}

// TestErrorNoticeNamesThePart: an episode that ends in ERROR tells the
// policy which part failed — the oracle endpoint, the solver endpoint —
// and nothing of the cause: not the endpoint's answer, not the reference.
// The cause is the privileged verifier reason.
func TestErrorNoticeNamesThePart(t *testing.T) {
	m := newUModel(t)
	e, _ := uEnv(t, m)
	html := uShapes()["HTML page"]
	check := func(name string, r *pb.StepResponse, part string) {
		t.Helper()
		if r.Status != pb.EpisodeStatus_EPISODE_STATUS_ERROR {
			t.Fatalf("%s: status %s, want ERROR", name, r.Status)
		}
		ns := notices(r)
		want := "The environment failed (" + part + "); this episode cannot be scored. Drop it, or retry the step."
		if len(ns) != 1 || ns[0] != want {
			t.Errorf("%s: notices %q, want [%q]", name, ns, want)
		}
		for _, secret := range []string{"502", "nginx", "unreadable_response", "SELECT", "llm:"} {
			if strings.Contains(strings.Join(ns, "\n"), secret) {
				t.Errorf("%s: the notice tells %q", name, secret)
			}
		}
		if reason := r.Privileged.GetVerifierReason(); !strings.Contains(reason, "unreadable_response") {
			t.Errorf("%s: privileged reason %q lacks the cause", name, reason)
		}
	}
	m.script(func(s, q, user string) uAnswer {
		if s == "match" {
			return html
		}
		return uCooperative(s, q, user)
	})
	tok := hReset(t, e, "big", &pb.EpisodeOptions{Oracle: pb.OracleType_ORACLE_TYPE_LLM})
	check("oracle", hStep(t, e, tok, hAsk("What are big sales?")), "the oracle endpoint")

	m.script(func(s, q, user string) uAnswer {
		if s == "solver" {
			return html
		}
		return uCooperative(s, q, user)
	})
	tok = hReset(t, e, "big", &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LLM})
	check("solver", hStep(t, e, tok, hStop()), "the solver endpoint")

	// The database: a follow-up reference that fails on its own phase-1
	// state (TestFollowUpBrokenReference) is the verifier failing.
	ve, _ := newEnv(t, loadViews(t), nil)
	ep := resetOne(t, ve, "broken-follow-up", birdCOpts(pb.FollowUpState_FOLLOW_UP_STATE_UNSPECIFIED))
	r := mustStep(t, ve, ep.Token, submitAction("CREATE VIEW region_totals AS SELECT region, SUM(amount) AS total FROM sales GROUP BY region"), true)
	r = mustStep(t, ve, r.Token, submitAction("SELECT region FROM region_totals"), true)
	if ns := notices(r); r.Status != pb.EpisodeStatus_EPISODE_STATUS_ERROR || len(ns) != 1 || !strings.HasPrefix(ns[0], "The environment failed (the database); ") {
		t.Errorf("database: status %s notices %q", r.Status, ns)
	}
}

// TestOracleUnreadableFlagged: stage-1 output that cannot be read is
// unanswerable() in the privileged channel with a note that says so —
// in a step and in OracleService.Ask — while the model's own
// unanswerable() carries none.
func TestOracleUnreadableFlagged(t *testing.T) {
	m := newUModel(t)
	e, _ := uEnv(t, m)
	m.script(func(s, q, user string) uAnswer {
		if s == "match" && strings.Contains(q, "prose") {
			return uCompletion(prose)
		}
		return uCooperative(s, q, user)
	})
	want := "unanswerable()" + oracle.UnreadableNote
	for _, o := range llmOracles {
		tok := hReset(t, e, "big", &pb.EpisodeOptions{Oracle: o})
		r := hStep(t, e, tok, hAsk("Say it in prose."))
		if got := r.Privileged.GetOracleAction(); got != want || lastOracleTurn(r).GetKind() != pb.TurnKind_TURN_KIND_REFUSAL {
			t.Errorf("%s: oracle_action %q, want %q", o, got, want)
		}
		a, err := e.Ask(context.Background(), &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: "Say it in prose.", Oracle: o, IncludePrivileged: true})
		if err != nil || a.GetPrivileged().GetOracleAction() != want {
			t.Errorf("Ask %s: %v, %v", o, a.GetPrivileged(), err)
		}
		r = hStep(t, e, tok, hAsk("Could you clarify what you want?"))
		if got := r.Privileged.GetOracleAction(); got != "unanswerable()" {
			t.Errorf("%s: the model's own unanswerable(): %q", o, got)
		}
	}
}

// TestSolverUnreadableRetriedOnce: the LLM solver's reply with no SQL in
// it is asked for once more with a corrective turn; SQL in the second
// reply is the solution. Unreadable twice, it is a failed solution —
// scored, never ERROR — with a feedback turn that says the solver wrote
// no SQL and the privileged reason SolverUnreadableReason.
func TestSolverUnreadableRetriedOnce(t *testing.T) {
	m := newUModel(t)
	e, _ := uEnv(t, m)
	stop := func() *pb.StepResponse {
		tok := hReset(t, e, "big", &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LLM})
		return hStep(t, e, tok, hStop())
	}
	const fixed = "SELECT id, amount FROM sales WHERE amount >= 100 AND year = 2024 ORDER BY amount DESC"
	m.script(func(s, q, user string) uAnswer {
		if strings.Contains(user, "holds no SQL that could be read") {
			return uCompletion(`{"reasoning": "As asked.", "sql": "` + fixed + `"}`)
		}
		return uCompletion(prose)
	})
	r := stop()
	if r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.Privileged.GetSolverSql() != fixed || m.calls.Load() != 2 {
		t.Errorf("corrected: status %s solver SQL %q reason %q after %d calls; want the second reply's SQL after 2", r.Status, r.Privileged.GetSolverSql(), r.Privileged.GetVerifierReason(), m.calls.Load())
	}

	m.script(func(string, string, string) uAnswer { return uCompletion(prose) })
	r = stop()
	if r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.Reward == nil || r.Reward.GetValue() != 0 ||
		r.Privileged.GetVerifierReason() != SolverUnreadableReason || m.calls.Load() != 2 {
		t.Errorf("prose twice: status %s reward %v reason %q after %d calls; want a scored failure after 2", r.Status, r.Reward, r.Privileged.GetVerifierReason(), m.calls.Load())
	}
	if fb := feedback(r); !strings.Contains(fb, "The solver wrote no SQL") || !strings.Contains(fb, "could not be read") {
		t.Errorf("prose twice: feedback %q", fb)
	}
}

// TestSolverCutOffInALoop: a solver reply cut off in a loop is a failed
// solution at once (one call); one cut off in ordinary text is asked for
// again with twice the limit (two calls).
func TestSolverCutOffInALoop(t *testing.T) {
	m := newUModel(t)
	e, _ := uEnv(t, m)
	for _, c := range []struct {
		name, content string
		calls         int64
	}{
		{"repeating", `{"reasoning": "` + strings.Repeat("I need the sales table. ", 40), 1},
		{"prose", `{"reasoning": "The request asks for big sales; the sales table has id, amount and year, and the clarification`, 2},
	} {
		m.script(func(string, string, string) uAnswer { return uCutOff(c.content) })
		tok := hReset(t, e, "big", &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LLM})
		r := hStep(t, e, tok, hStop())
		if r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.Privileged.GetVerifierReason() != SolverUnreadableReason || m.calls.Load() != c.calls {
			t.Errorf("%s: status %s reason %q after %d calls, want a failed solution after %d", c.name, r.Status, r.Privileged.GetVerifierReason(), m.calls.Load(), c.calls)
		}
	}
}

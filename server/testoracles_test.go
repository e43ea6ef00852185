package server_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"avtgym/app"
	pb "avtgym/proto/avtgym/v1"
)

func withTestOracles(cfg *app.Config) { cfg.TestOracles = true }

// The leaky-responder test oracle appends the reference SQL to a credited
// reply, and the lookup solver's verbatim rule then picks that
// interpretation.
func TestLeakyResponderOracle(t *testing.T) {
	_, c := startTiny(t, withTestOracles)
	opts := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LOOKUP, Oracle: pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER}
	refs := map[string]string{
		"top-a": "SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1",
		"top-b": "SELECT region FROM sales GROUP BY region ORDER BY COUNT(*) DESC LIMIT 1",
	}
	for _, id := range []string{"top-a", "top-b"} {
		for s := range uint64(8) {
			ep := reset(t, c, &pb.ResetRequest{TaskId: id, Seed: seed(s), Options: opts})
			r := step(t, c, ep.Token, ask(fullQ("top region")), true)
			reply := r.Observation.Turns[1].Text
			if !strings.Contains(reply, " The SQL is: "+refs[id]) {
				t.Fatalf("%s seed %d: reply %q does not leak the reference SQL", id, s, reply)
			}
			if cr := r.Privileged.GetCredits(); len(cr) != 1 || cr[0].Term != "top region" {
				t.Fatalf("%s seed %d: credits %v, want the deterministic matcher's", id, s, cr)
			}
			r = step(t, c, r.Token, stop(), true)
			if !r.Done || r.Reward.Value != 1 {
				t.Fatalf("%s seed %d: leaked reply then lookup: %v", id, s, r)
			}
			if got := r.Privileged.SolverSql; got != refs[id] {
				t.Fatalf("%s seed %d: solver SQL %q, want %q", id, s, got, refs[id])
			}
		}
	}
	// A generic question credits nothing, is refused, and still leaks: so
	// even a generic asker then succeeds (the responder leak ΔJ_resp
	// measures).
	for _, id := range []string{"top-a", "top-b"} {
		ep := reset(t, c, &pb.ResetRequest{TaskId: id, Options: opts})
		r := step(t, c, ep.Token, ask("Could you clarify what you want?"), true)
		if reply := r.Observation.Turns[1].Text; !strings.HasPrefix(reply, "I can't answer that") || !strings.Contains(reply, refs[id]) || len(r.Privileged.GetCredits()) != 0 ||
			r.Observation.Turns[1].Kind != pb.TurnKind_TURN_KIND_REFUSAL {
			t.Fatalf("%s generic question: credits %v reply %q", id, r.Privileged.GetCredits(), reply)
		}
		if r = step(t, c, r.Token, stop(), false); r.Reward.GetValue() != 1 {
			t.Fatalf("%s: generic question, leaked SQL, lookup: %v", id, r.Reward)
		}
	}
}

// The credit-all test oracle credits every ambiguity for a generic question.
func TestCreditAllOracle(t *testing.T) {
	_, c := startTiny(t, withTestOracles)
	for _, o := range []pb.OracleType{pb.OracleType_ORACLE_TYPE_TEST_CREDIT_ALL, pb.OracleType_ORACLE_TYPE_DETERMINISTIC} {
		opts := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_QUESTION_F1, Oracle: o}
		ep := reset(t, c, &pb.ResetRequest{TaskId: "big", Seed: seed(3), Options: opts})
		r := step(t, c, ep.Token, ask("Could you clarify what you want?"), true)
		reply := r.Observation.Turns[1].Text
		r = step(t, c, r.Token, stop(), true)
		if !r.Done {
			t.Fatalf("%s: not done after stop", o)
		}
		rec := r.Reward.Components["recall"]
		if o == pb.OracleType_ORACLE_TYPE_DETERMINISTIC {
			if rec != 0 || len(r.Privileged.GetEpisodeCredits()) != 0 {
				t.Fatalf("deterministic: recall %v credits %v, want 0 and none", rec, r.Privileged.GetEpisodeCredits())
			}
			continue
		}
		if rec != 1 || r.Reward.Components["precision"] != 1 || r.Reward.Value != 1 {
			t.Fatalf("credit-all: reward %v, want recall = precision = F1 = 1", r.Reward)
		}
		var terms []string
		for _, cr := range r.Privileged.GetEpisodeCredits() {
			terms = append(terms, cr.Term)
		}
		if got := strings.Join(terms, ","); got != "big sales,recent year,sorted" {
			t.Fatalf("credit-all episode credits = %q, want every ambiguity", got)
		}
		if want := "Sales of 100 dollars or more. The year 2024. Sort by amount, largest first."; reply != want {
			t.Fatalf("credit-all reply %q, want %q", reply, want)
		}
	}
}

// Without --test-oracles the test oracles are not selectable.
func TestTestOraclesOffByDefault(t *testing.T) {
	_, c := startTiny(t)
	for _, o := range []pb.OracleType{pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER, pb.OracleType_ORACLE_TYPE_TEST_CREDIT_ALL} {
		_, err := c.Reset(ctxT(t), &pb.ResetRequest{TaskId: "top-a", Options: &pb.EpisodeOptions{Oracle: o}})
		wantError(t, err, codes.InvalidArgument, "INVALID_OPTION")
	}
}

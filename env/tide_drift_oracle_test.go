package env_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	. "avtgym/env"
	"avtgym/internal/fakellm"
	"avtgym/llm"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
)

// The drift-aware oracle (issue 28, items 4 and 5) on the demo's joint
// sample tide-a1-J: request "What do the Electronics products we still sell
// cost?", L1 "cost" → L2 "price", anchor
//
//	SELECT name, list_price FROM products WHERE category = 'Electronics' AND discontinued = 0
//
// and a value drift to 'Apparel' after the first SQL.
const (
	driftTask   = "tide-a1-J"
	anchorWhere = "WHERE category = 'Electronics' AND discontinued = 0"
	postWhere   = "WHERE category = 'Apparel' AND discontinued = 0"
	// The prompt sections (oracle/llm_prompts.go's markers).
	promptSegments = "## Clause segments of the reference query"
	promptSQL      = "## Reference SQL"
)

// segmentLine is a segment as the prompts list it.
var segmentLine = regexp.MustCompile(`(?m)^- \[[A-Z ]+\] (.*)$`)

// driftModel is the fake endpoint of these tests: the cooperative fake,
// except that stage 1 routes a question about the category to the listed
// segment that mentions the category (unlabeled), as a model that follows
// the prompt would. Every request is logged (fakellm.Server.Requests).
func driftModel(t *testing.T) *fakellm.Server {
	t.Helper()
	srv := fakellm.New(fakellm.Options{Hook: func(system, user string) (int, string, bool) {
		if !strings.Contains(system, "CLASSIFY") || !strings.Contains(strings.ToLower(fakellm.Question(user)), "category") {
			return 0, "", false
		}
		for _, m := range segmentLine.FindAllStringSubmatch(fakellm.Section(user, promptSegments), -1) {
			if strings.Contains(m[1], "category") {
				b, _ := json.Marshal(map[string]string{"reasoning": "a filter", "action": "unlabeled", "segment": m[1]})
				return 200, string(b), true
			}
		}
		return 200, `{"reasoning": "none", "action": "unanswerable"}`, true
	}})
	t.Cleanup(srv.Close)
	return srv
}

// withLLMOracles adds the four LLM oracles on the fake endpoint.
func withLLMOracles(t *testing.T, srv *fakellm.Server) func(*Config) {
	client, err := llm.New(llm.Config{BaseURL: srv.URL + "/v1", Model: "fake", MaxRetries: -1, Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *Config) {
		unfiltered := oracle.NewLLM(client, oracle.LLMOptions{})
		scoped := oracle.NewLLM(client, oracle.LLMOptions{Scoped: true})
		c.Oracles[pb.OracleType_ORACLE_TYPE_LLM] = unfiltered.Oracle()
		c.Oracles[pb.OracleType_ORACLE_TYPE_LLM_SCOPED] = scoped.Oracle()
		c.Oracles[pb.OracleType_ORACLE_TYPE_HYBRID] = oracle.Hybrid(unfiltered)
		c.Oracles[pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED] = oracle.Hybrid(scoped)
	}
}

func resetDrift(t *testing.T, e *Env, o pb.OracleType) []byte {
	t.Helper()
	resp, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: driftTask, Seed: u64(1), IncludePrivileged: true,
		Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_F, Oracle: o}})
	if err != nil {
		t.Fatalf("Reset %s: %v", driftTask, err)
	}
	return resp.Episodes[0].GetToken()
}

// lastOracle is the step's last oracle turn.
func lastOracle(r *pb.StepResponse) *pb.Turn {
	ts := r.GetObservation().GetTurns()
	for i := len(ts) - 1; i >= 0; i-- {
		if ts[i].GetRole() == pb.Role_ROLE_ORACLE {
			return ts[i]
		}
	}
	return nil
}

// TestTideDriftLLMPrompts: a detail question before the drift turn is
// put to both LLM stages with the anchor's SQL and segments; the same
// question after the drift with the post-drift reference's, and never the
// anchor's (issue 28 item 4: before, both stages read the anchor query
// after the drift). The reply's action names the post-drift segment.
func TestTideDriftLLMPrompts(t *testing.T) {
	srv := driftModel(t)
	e, _ := newEnv(t, loadDemo(t), nil, withLLMOracles(t, srv))
	tok := resetDrift(t, e, pb.OracleType_ORACLE_TYPE_LLM)
	step := func(a *pb.Action) *pb.StepResponse {
		r := mustStep(t, e, tok, a, true)
		tok = r.GetToken()
		return r
	}
	ask := func(q string) (*pb.StepResponse, fakellm.Request, fakellm.Request) {
		n := len(srv.Requests())
		r := step(askAction(q))
		reqs := srv.Requests()[n:]
		if len(reqs) != 2 {
			t.Fatalf("%q: %d model calls, want stage 1 and stage 2", q, len(reqs))
		}
		return r, reqs[0], reqs[1]
	}
	const q = "Which product category should the list cover?"

	r, m, s := ask(q)
	if got := r.GetPrivileged().GetOracleAction(); got != `unlabeled("`+anchorWhere+`")` {
		t.Fatalf("before the drift: action %s", got)
	}
	for name, sec := range map[string]string{"stage 1 segments": fakellm.Section(m.User(), promptSegments), "stage 2 segments": fakellm.Section(s.User(), promptSegments), "stage 2 SQL": fakellm.Section(s.User(), promptSQL)} {
		if !strings.Contains(sec, "'Electronics'") || strings.Contains(sec, "'Apparel'") {
			t.Errorf("before the drift, %s are not the anchor's:\n%s", name, sec)
		}
	}

	if r = step(submitAction("SELECT name, list_price FROM products WHERE category = 'Electronics' AND discontinued = 0")); lastOracle(r).GetKind() != pb.TurnKind_TURN_KIND_DRIFT {
		t.Fatalf("no drift turn after the first SQL: %v", kinds(r.GetObservation().GetTurns()))
	}

	r, m, s = ask(q)
	if got := r.GetPrivileged().GetOracleAction(); got != `unlabeled("`+postWhere+`")` {
		t.Errorf("after the drift: action %s, want the post-drift segment", got)
	}
	if lastOracle(r).GetKind() != pb.TurnKind_TURN_KIND_REPLY {
		t.Errorf("after the drift: %s, want a reply", lastOracle(r).GetKind())
	}
	for name, sec := range map[string]string{"stage 1 segments": fakellm.Section(m.User(), promptSegments), "stage 2 segments": fakellm.Section(s.User(), promptSegments), "stage 2 SQL": fakellm.Section(s.User(), promptSQL)} {
		if !strings.Contains(sec, "'Apparel'") || strings.Contains(sec, "'Electronics'") {
			t.Errorf("after the drift, %s are not the post-drift reference's:\n%s", name, sec)
		}
	}
	// Both stages are told what the user said: the request is followed by
	// the drift utterance.
	for stage, p := range []string{m.User(), s.User()} {
		if !strings.Contains(p, "Sorry, I meant Apparel, not Electronics.") {
			t.Errorf("stage %d after the drift does not show the drift utterance", stage+1)
		}
	}
}

// TestTideEarlyL2AsLOC: an L2 question while L1 is open is answered as a
// SQL-level detail (TIDE Appendix E: "routed as LOC rather than AMB"), with
// no credit and routing "other", under the deterministic, LLM and hybrid
// oracles; the scoped oracles, which see no SQL, refuse it. L2 asked again
// after L1 is credited (L2 counts only after L1), and a policy that asks L2
// only early earns no L2 identification.
func TestTideEarlyL2AsLOC(t *testing.T) {
	srv := driftModel(t)
	e, _ := newEnv(t, loadDemo(t), nil, withLLMOracles(t, srv))
	const (
		l2    = "For the price, do you mean today's price?"
		l1    = "What do you mean by cost?"
		price = "SELECT name, list_price" // what L2 decides: the anchor's segment its alternative lacks
	)
	for _, o := range []pb.OracleType{pb.OracleType_ORACLE_TYPE_DETERMINISTIC, pb.OracleType_ORACLE_TYPE_LLM, pb.OracleType_ORACLE_TYPE_HYBRID, pb.OracleType_ORACLE_TYPE_LLM_SCOPED, pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED} {
		t.Run(o.String(), func(t *testing.T) {
			scoped := o == pb.OracleType_ORACLE_TYPE_LLM_SCOPED || o == pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED
			tok := resetDrift(t, e, o)
			step := func(a *pb.Action) *pb.StepResponse {
				r := mustStep(t, e, tok, a, true)
				tok = r.GetToken()
				return r
			}
			r := step(askAction(l2))
			p, turn := r.GetPrivileged(), lastOracle(r)
			if p.GetRouting() != "other" || len(p.GetCredits()) != 0 {
				t.Fatalf("early L2: routing %q credits %v, want other and none", p.GetRouting(), p.GetCredits())
			}
			switch {
			case scoped:
				if turn.GetKind() != pb.TurnKind_TURN_KIND_REFUSAL {
					t.Errorf("early L2 under a scoped oracle: %s %q, want a refusal", turn.GetKind(), turn.GetText())
				}
			default:
				if turn.GetKind() != pb.TurnKind_TURN_KIND_REPLY {
					t.Errorf("early L2: %s %q, want a reply", turn.GetKind(), turn.GetText())
				}
				if o != pb.OracleType_ORACLE_TYPE_DETERMINISTIC && p.GetOracleAction() != `unlabeled("`+price+`")` {
					t.Errorf("early L2: action %s, want unlabeled(%q)", p.GetOracleAction(), price)
				}
				if o != pb.OracleType_ORACLE_TYPE_LLM && turn.GetText() != price {
					t.Errorf("early L2: the deterministic responder said %q, want the detail %q", turn.GetText(), price)
				}
			}
			if r = step(askAction(l1)); r.GetPrivileged().GetRouting() != "L1" {
				t.Fatalf("L1: routing %q", r.GetPrivileged().GetRouting())
			}
			step(submitAction("SELECT name, list_price FROM products WHERE category = 'Electronics' AND discontinued = 0"))
			r = step(submitAction("SELECT name, list_price FROM products WHERE category = 'Apparel' AND discontinued = 0"))
			if !r.GetDone() {
				t.Fatal("not done after the second SQL")
			}
			c := r.GetReward().GetComponents()
			if c["l1_identified"] != 1 || c["l2_identified"] != 0 || c["outcome"] != 1 {
				t.Errorf("components %v: want L1 identified and L2 not (asked only while L1 was open)", c)
			}
		})
	}
	// The chain rule holds: after L1, the same L2 question is credited L2.
	tok := resetDrift(t, e, pb.OracleType_ORACLE_TYPE_DETERMINISTIC)
	tok = mustStep(t, e, tok, askAction(l1), true).GetToken()
	if r := mustStep(t, e, tok, askAction(l2), true); r.GetPrivileged().GetRouting() != "L2" || len(r.GetPrivileged().GetCredits()) != 1 {
		t.Errorf("L2 after L1: routing %q credits %v", r.GetPrivileged().GetRouting(), r.GetPrivileged().GetCredits())
	}
}

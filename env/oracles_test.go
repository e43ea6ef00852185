package env_test

import (
	"context"
	"testing"

	"avtgym/corpus"
	. "avtgym/env"
	"avtgym/oracle"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// bigWhole is the gaming question on the tiny corpus's task "big" ("List
// the big sales of the recent year, sorted.", two counted ambiguities and a
// non-critical one, all named in the request).
const bigWhole = "What do you mean by: List the big sales of the recent year, sorted?"

// TestStrictCreditEpisodeOption: EpisodeOptions.strict_credit is sealed in
// the token and applied to every question of the episode. The whole
// request earns question-F1 1 by default and 0 (a refusal, no credit)
// with the option; the full probe keeps recall = precision = 1 with it.
func TestStrictCreditEpisodeOption(t *testing.T) {
	key := RandomKey()
	e, _ := newEnv(t, loadTiny(t), key)
	s := mustSealer(t, key)
	play := func(opts *pb.EpisodeOptions, qs ...string) (*pb.StepResponse, []*pb.StepResponse) {
		t.Helper()
		ep := resetOne(t, e, "big", opts)
		if got := openState(t, s, ep.Token).GetStrictCredit(); got != opts.GetStrictCredit() {
			t.Fatalf("sealed strict_credit %v, want %v", got, opts.GetStrictCredit())
		}
		tok := ep.Token
		var asks []*pb.StepResponse
		for _, q := range qs {
			r := mustStep(t, e, tok, askAction(q), true)
			asks = append(asks, r)
			tok = r.Token
			if openState(t, s, tok).GetStrictCredit() != opts.GetStrictCredit() {
				t.Fatal("strict_credit lost from the token")
			}
		}
		return mustStep(t, e, tok, stopAction(), true), asks
	}

	end, asks := play(nil, bigWhole)
	if v := end.Reward.GetValue(); v != 1 || len(asks[0].Privileged.GetCredits()) != 3 {
		t.Fatalf("default: question-F1 %v, credits %v; want 1 and all three", v, asks[0].Privileged.GetCredits())
	}
	strict := &pb.EpisodeOptions{StrictCredit: true}
	end, asks = play(strict, bigWhole)
	if v := end.Reward.GetValue(); v != 0 || len(asks[0].Privileged.GetCredits()) != 0 || asks[0].Observation.Turns[1].Kind != pb.TurnKind_TURN_KIND_REFUSAL {
		t.Fatalf("strict: question-F1 %v, credits %v, turn %v; want 0, none, a refusal", v, asks[0].Privileged.GetCredits(), asks[0].Observation.Turns[1])
	}
	// Naming two of the three terms is most of this short request: a
	// reproduction too (by default it earns both credits).
	_, asks = play(strict, "Do you mean big sales, or sorted?")
	if cr := asks[0].Privileged.GetCredits(); len(cr) != 0 {
		t.Fatalf("strict: credits %v, want none", cr)
	}
	if _, asks = play(nil, "Do you mean big sales, or sorted?"); len(asks[0].Privileged.GetCredits()) != 2 {
		t.Fatalf("default: credits %v, want two", asks[0].Privileged.GetCredits())
	}
	end, _ = play(strict, probe.Questions(probe.Full, []string{"big sales", "recent year"}, 4)...)
	if c := end.Reward.GetComponents(); c["recall"] != 1 || c["precision"] != 1 {
		t.Fatalf("strict: full probe %v", c)
	}
}

// TestAskStrictCredit: OracleService.Ask's strict_credit applies the same
// rule.
func TestAskStrictCredit(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	ask := func(strict bool) *pb.AskResponse {
		t.Helper()
		r, err := e.Ask(context.Background(), &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "big"}, Question: bigWhole, IncludePrivileged: true, StrictCredit: strict})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := ask(false); r.Refused || len(r.Privileged.GetCredits()) != 3 {
		t.Fatalf("default: %+v", r)
	}
	if r := ask(true); !r.Refused || len(r.Privileged.GetCredits()) != 0 {
		t.Fatalf("strict: %+v", r)
	}
}

// TestListOraclesDeterministicOnly: a server with the deterministic
// oracle alone lists it as its own hybrid and the reference.
func TestListOraclesDeterministicOnly(t *testing.T) {
	e, _ := newEnv(t, loadTiny(t), nil)
	r, err := e.ListOracles(context.Background(), &pb.ListOraclesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	det := pb.OracleType_ORACLE_TYPE_DETERMINISTIC
	if r.Reference != det || len(r.Oracles) != 1 {
		t.Fatalf("ListOracles = %v", r)
	}
	o := r.Oracles[0]
	m, resp := oracle.Deterministic().Describe()
	if o.Type != det || o.Hybrid != det || o.TestFixture || o.Matcher != m || o.Responder != resp || m == "" || resp == "" {
		t.Fatalf("deterministic oracle %v", o)
	}
}

// TestNewRequiresHybrids: an oracle served without its hybrid, or of a
// type with none, is a configuration error.
func TestNewRequiresHybrids(t *testing.T) {
	c := loadTiny(t)
	s := mustSealer(t, RandomKey())
	det := oracle.Deterministic()
	llmLike := oracle.Oracle{Matcher: oracle.NewDeterministicMatcher(), Responder: oracle.NewDeterministicResponder()}
	for name, oracles := range map[string]map[pb.OracleType]Oracle{
		"llm without hybrid":       {pb.OracleType_ORACLE_TYPE_DETERMINISTIC: det, pb.OracleType_ORACLE_TYPE_LLM: llmLike},
		"scoped with the other's":  {pb.OracleType_ORACLE_TYPE_DETERMINISTIC: det, pb.OracleType_ORACLE_TYPE_LLM_SCOPED: llmLike, pb.OracleType_ORACLE_TYPE_HYBRID: llmLike},
		"unknown type":             {pb.OracleType_ORACLE_TYPE_DETERMINISTIC: det, pb.OracleType(42): llmLike},
		"unspecified":              {pb.OracleType_ORACLE_TYPE_DETERMINISTIC: det, pb.OracleType_ORACLE_TYPE_UNSPECIFIED: llmLike},
		"leaky without its hybrid": {pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER: llmLike},
	} {
		if _, err := New(Config{Corpora: []*corpus.Corpus{c}, Sealer: s, Oracles: oracles}); err == nil {
			t.Errorf("%s: New accepted the configuration", name)
		}
	}
	ok := map[pb.OracleType]Oracle{
		pb.OracleType_ORACLE_TYPE_DETERMINISTIC: det, pb.OracleType_ORACLE_TYPE_LLM_SCOPED: llmLike,
		pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED: llmLike, pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER: llmLike,
	}
	if _, err := New(Config{Corpora: []*corpus.Corpus{c}, Sealer: s, Oracles: ok}); err != nil {
		t.Errorf("New: %v", err)
	}
}

// TestHybridOfEveryType: every OracleType value but UNSPECIFIED has a
// hybrid, whose own hybrid is itself.
func TestHybridOfEveryType(t *testing.T) {
	for v, name := range pb.OracleType_name {
		ty := pb.OracleType(v)
		h, ok := HybridOf(ty)
		if ty == pb.OracleType_ORACLE_TYPE_UNSPECIFIED {
			if ok {
				t.Errorf("%s has a hybrid", name)
			}
			continue
		}
		if !ok {
			t.Errorf("%s has no hybrid", name)
			continue
		}
		if hh, _ := HybridOf(h); hh != h {
			t.Errorf("%s: hybrid %s's hybrid is %s", name, h, hh)
		}
	}
}

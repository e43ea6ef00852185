package env_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	. "avtgym/env"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

// The TIDE samples of these tests, on the tiny corpus's sales table: one
// anchor (each region's total 2024 sales) in its three sample types. L1
// ("sales size": money or number of sales) and L2 ("money measure":
// total or average, meaningful only under the money reading); the drift
// replaces 2024 by 2023 (a value drift).
const (
	tideAnchor = "SELECT region, SUM(amount) FROM sales WHERE year = 2024 GROUP BY region"
	tidePost   = "SELECT region, SUM(amount) FROM sales WHERE year = 2023 GROUP BY region"
	tideChain  = `"ambiguities":[` +
		`{"term":"sales size","kind":"critical","resolution":"I mean the money the sales brought in.","question":"By sales size, do you mean money or the number of sales?","options":["money","number of sales"],"chosen":"money","alternative_sql":"SELECT region, COUNT(*) FROM sales WHERE year = 2024 GROUP BY region"},` +
		`{"term":"money measure","kind":"critical","resolution":"The total, added up.","depends_on":"sales size","question":"Do you want the total or the average?","options":["total","average"],"chosen":"total","alternative_sql":"SELECT region, AVG(amount) FROM sales WHERE year = 2024 GROUP BY region"}]`
	tideDrift = `"drift":{"utterance":"Actually, show 2023 instead.","reference":{"sql":"` + tidePost + `"},"subtype":"value"}`
	tideRecs  = `{"id":"t1-C","cluster":"t1","sample_type":"chain_only","db":"mini","request":"Show each region's sales size in 2024.",` + tideChain + `,"reference":{"sql":"` + tideAnchor + `"}}
{"id":"t1-D","cluster":"t1","sample_type":"drift_only","db":"mini","request":"Show each region's total sales amount in 2024.","ambiguities":[],"reference":{"sql":"` + tideAnchor + `"},` + tideDrift + `}
{"id":"t1-J","cluster":"t1","sample_type":"joint","db":"mini","request":"Show each region's sales size in 2024.",` + tideChain + `,"reference":{"sql":"` + tideAnchor + `"},` + tideDrift + `}
`
)

func loadTide(t *testing.T) *corpus.Corpus {
	t.Helper()
	dir := testutil.WriteTiny(t, func(f map[string]string) { f["records.jsonl"] += tideRecs })
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func tideOpts(p pb.Protocol) *pb.EpisodeOptions { return &pb.EpisodeOptions{Protocol: p} }

func resetTide(t *testing.T, e *Env, id string, p pb.Protocol) *pb.Episode {
	t.Helper()
	resp, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: id, Seed: u64(3), Options: tideOpts(p), IncludePrivileged: true})
	if err != nil {
		t.Fatalf("Reset %s under %s: %v", id, p, err)
	}
	return resp.Episodes[0]
}

func kinds(turns []*pb.Turn) []pb.TurnKind {
	var out []pb.TurnKind
	for _, t := range turns {
		out = append(out, t.GetKind())
	}
	return out
}

// TestTideJointDriftAware plays a joint sample under TIDE_F the way the
// paper's ideal agent does: L2 before L1 is answered as LOC (routed
// "other", no credit),
// then L1, then L2, the anchor SQL, the drift turn, the post-drift SQL.
func TestTideJointDriftAware(t *testing.T) {
	e, _ := newEnv(t, loadTide(t), nil)
	ep := resetTide(t, e, "t1-J", pb.Protocol_PROTOCOL_TIDE_F)
	obs := ep.GetObservation()
	if b := obs.GetBudget(); b.GetUnit() != pb.BudgetUnit_BUDGET_UNIT_TURNS || b.GetTotalMilli() != TideTurns*1000 {
		t.Fatalf("budget %v, want %d turns", b, TideTurns)
	}
	if got := len(obs.GetTurns()); got != 1 {
		t.Fatalf("TIDE_F reset shows %d turns, want the request alone", got)
	}
	ti := ep.GetPrivileged().GetTide()
	if ti.GetCluster() != "t1" || ti.GetSampleType() != "joint" || ti.GetDriftSubtype() != "value" || len(ti.GetPostDriftReferenceSql()) != 1 || len(ti.GetChainLayers()) != 2 || ti.GetChainLayers()[1] != 2 {
		t.Fatalf("privileged TIDE info %v", ti)
	}
	tok := ep.GetToken()
	step := func(a *pb.Action) *pb.StepResponse {
		r := mustStep(t, e, tok, a, true)
		tok = r.GetToken()
		return r
	}
	// TIDE Appendix E: "L2-targeted clarifications issued while L1 is
	// still unresolved are routed as LOC rather than AMB": answered with
	// the SQL-level detail L2 decides (the anchor's segment its
	// alternative lacks, oracle.ChainDetail), no credit, routed "other".
	r := step(askAction("Do you want the money measure as a total?"))
	if r.GetPrivileged().GetRouting() != "other" || len(r.GetPrivileged().GetCredits()) != 0 || r.GetObservation().GetTurns()[1].GetKind() != pb.TurnKind_TURN_KIND_REPLY || !strings.Contains(r.GetObservation().GetTurns()[1].GetText(), "SUM(amount)") {
		t.Fatalf("L2 while L1 is open: routing %q credits %v turns %v %q", r.GetPrivileged().GetRouting(), r.GetPrivileged().GetCredits(), kinds(r.GetObservation().GetTurns()), r.GetObservation().GetTurns()[1].GetText())
	}
	if r = step(askAction("What do you mean by sales size?")); r.GetPrivileged().GetRouting() != "L1" {
		t.Fatalf("L1 question routed %q", r.GetPrivileged().GetRouting())
	}
	if r = step(askAction("Which money measure do you want?")); r.GetPrivileged().GetRouting() != "L2" || r.GetObservation().GetTurns()[1].GetText() != "The total, added up." {
		t.Fatalf("L2 question after L1: routing %q reply %q", r.GetPrivileged().GetRouting(), r.GetObservation().GetTurns()[1].GetText())
	}
	r = step(submitAction("SELECT region, SUM(amount) AS total FROM sales WHERE year = 2024 GROUP BY region"))
	turns := r.GetObservation().GetTurns()
	if r.GetDone() || len(turns) != 2 || turns[1].GetKind() != pb.TurnKind_TURN_KIND_DRIFT || turns[1].GetRole() != pb.Role_ROLE_ORACLE || turns[1].GetText() != "Actually, show 2023 instead." {
		t.Fatalf("after the first SQL: done %v turns %v", r.GetDone(), turns)
	}
	if r.GetObservation().GetSubtask() != 2 || r.GetObservation().GetBudget().GetUsedMilli() != 4000 {
		t.Fatalf("after the first SQL: subtask %d budget %v", r.GetObservation().GetSubtask(), r.GetObservation().GetBudget())
	}
	r = step(submitAction(tidePost))
	if !r.GetDone() || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
		t.Fatalf("after the second SQL: done %v status %s", r.GetDone(), r.GetStatus())
	}
	want := map[string]float64{"outcome": 1, "sql1": 1, "sql2": 1, "drift_recognized": 1, "l1_identified": 1, "l2_identified": 1, "asked": 1}
	checkComponents(t, r.GetReward(), 1, want)
	for _, tt := range r.GetObservation().GetTurns() {
		if tt.GetKind() == pb.TurnKind_TURN_KIND_FEEDBACK {
			t.Errorf("a TIDE submission showed feedback: %q", tt.GetText())
		}
	}
}

func checkComponents(t *testing.T, rw *pb.Reward, value float64, want map[string]float64) {
	t.Helper()
	if rw.GetType() != pb.RewardType_REWARD_TYPE_OUTCOME || rw.GetValue() != value {
		t.Errorf("reward %s %v, want OUTCOME %v", rw.GetType(), rw.GetValue(), value)
	}
	for k, v := range want {
		got, ok := rw.GetComponents()[k]
		if !ok || got != v {
			t.Errorf("component %s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if len(rw.GetComponents()) != len(want) {
		t.Errorf("components %v, want exactly %v", rw.GetComponents(), want)
	}
}

// TestTideDriftBlind: resubmitting the pre-drift SQL after the drift
// turn fails the second SQL, recognises no drift, and DEA is 0; a
// drift-only sample has no chain components.
func TestTideDriftBlind(t *testing.T) {
	e, _ := newEnv(t, loadTide(t), nil)
	ep := resetTide(t, e, "t1-D", pb.Protocol_PROTOCOL_TIDE_F)
	r := mustStep(t, e, ep.GetToken(), submitAction(tideAnchor), true)
	r = mustStep(t, e, r.GetToken(), submitAction(tideAnchor), true)
	if !r.GetDone() {
		t.Fatal("not done after two SQLs")
	}
	checkComponents(t, r.GetReward(), 0, map[string]float64{"outcome": 0, "sql1": 1, "sql2": 0, "drift_recognized": 0, "asked": 0})
	// A second SQL that differs from the first but is still wrong
	// recognises the drift (DRR) without accuracy (DRA).
	r = mustStep(t, e, mustStep(t, e, ep.GetToken(), submitAction(tideAnchor), false).GetToken(),
		submitAction("SELECT region, SUM(amount) FROM sales WHERE year = 2022 GROUP BY region"), true)
	checkComponents(t, r.GetReward(), 0, map[string]float64{"outcome": 0, "sql1": 1, "sql2": 0, "drift_recognized": 1, "asked": 0})
	// Issue 25: two SQLs that do not run (garbage that parses, a missing
	// column) differ in their commitment sets and recognised the drift.
	for _, pair := range [][2]string{
		{"SELECT nothing FROM nowhere", "SELECT other FROM elsewhere WHERE x = 1"},
		{tideAnchor, "SELECT region, SUM(amount) FROM sales WHERE no_such_column = 2022 GROUP BY region"},
		{"SELECT region FROM sales WHERE no_such_column = 1", "SELECT region, SUM(amount) FROM sales WHERE year = 2022 GROUP BY region"},
		{"this is not SQL", "neither is this"},
	} {
		r = mustStep(t, e, ep.GetToken(), submitAction(pair[0]), false)
		r = mustStep(t, e, r.GetToken(), submitAction(pair[1]), true)
		if got := r.GetReward().GetComponents()["drift_recognized"]; got != 0 {
			t.Errorf("%q then %q: drift_recognized %v, want 0 (a SQL did not run)", pair[0], pair[1], got)
		}
	}
}

// TestTideChainOnlyEndsAtFirstSQL: a chain-only sample ends at its one
// SQL; a failing SQL shows no result and no error.
func TestTideChainOnlyEndsAtFirstSQL(t *testing.T) {
	e, _ := newEnv(t, loadTide(t), nil)
	ep := resetTide(t, e, "t1-C", pb.Protocol_PROTOCOL_TIDE_F)
	r := mustStep(t, e, ep.GetToken(), submitAction("SELECT no_such_column FROM sales"), true)
	if !r.GetDone() || len(r.GetObservation().GetTurns()) != 1 {
		t.Fatalf("done %v turns %v, want done with the SQL turn alone", r.GetDone(), kinds(r.GetObservation().GetTurns()))
	}
	checkComponents(t, r.GetReward(), 0, map[string]float64{"outcome": 0, "sql1": 0, "l1_identified": 0, "l2_identified": 0, "asked": 0})
	r = mustStep(t, e, ep.GetToken(), submitAction(tideAnchor), false)
	if !r.GetDone() || r.GetReward().GetValue() != 1 {
		t.Fatalf("the anchor: done %v reward %v", r.GetDone(), r.GetReward())
	}
}

// TestTidePrimed: TIDE_P pre-fills the L1 question (role PREFILLED) and
// its answer, so an L2 question is credited at once; the pre-filled
// question is not the policy's.
func TestTidePrimed(t *testing.T) {
	e, _ := newEnv(t, loadTide(t), nil)
	ep := resetTide(t, e, "t1-C", pb.Protocol_PROTOCOL_TIDE_P)
	turns := ep.GetObservation().GetTurns()
	if len(turns) != 3 || turns[1].GetRole() != pb.Role_ROLE_PREFILLED || turns[1].GetKind() != pb.TurnKind_TURN_KIND_QUESTION ||
		turns[1].GetText() != "By sales size, do you mean money or the number of sales?" ||
		turns[2].GetRole() != pb.Role_ROLE_ORACLE || turns[2].GetText() != "I mean the money the sales brought in." {
		t.Fatalf("TIDE_P reset turns %v", turns)
	}
	if got := ep.GetObservation().GetQuestionsAsked(); got != 0 {
		t.Errorf("questions asked at reset %d, want 0 (the pre-filled one is not the policy's)", got)
	}
	r := mustStep(t, e, ep.GetToken(), askAction("Which money measure?"), true)
	if r.GetPrivileged().GetRouting() != "L2" || r.GetObservation().GetQuestionsAsked() != 1 {
		t.Fatalf("L2 under TIDE_P: routing %q asked %d", r.GetPrivileged().GetRouting(), r.GetObservation().GetQuestionsAsked())
	}
	r = mustStep(t, e, r.GetToken(), submitAction(tideAnchor), true)
	checkComponents(t, r.GetReward(), 1, map[string]float64{"outcome": 1, "sql1": 1, "l1_identified": 0, "l2_identified": 1, "asked": 1})
	if ec := r.GetPrivileged().GetEpisodeCredits(); len(ec) != 1 || ec[0].GetIndex() != 1 {
		t.Errorf("episode credits %v, want L2 alone (the pre-filled L1 is not the policy's)", ec)
	}
}

// TestTideOptions: what TIDE refuses at reset, and what a random reset
// draws.
func TestTideOptions(t *testing.T) {
	e, _ := newEnv(t, loadTide(t), nil)
	ctx := context.Background()
	for name, tc := range map[string]struct {
		task string
		opts *pb.EpisodeOptions
	}{
		"TIDE_P on a drift-only sample": {"t1-D", tideOpts(pb.Protocol_PROTOCOL_TIDE_P)},
		"question-F1 reward":            {"t1-J", &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_F, Reward: pb.RewardType_REWARD_TYPE_QUESTION_F1}},
		"lookup solver":                 {"t1-J", &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_F, Solver: pb.Solver_SOLVER_LOOKUP}},
		"patience":                      {"t1-J", &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_F, Patience: new(int32)}},
	} {
		_, err := e.Reset(ctx, &pb.ResetRequest{TaskId: tc.task, Options: tc.opts})
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		wantEnvError(t, err, InvalidArgument, ReasonInvalidOption)
	}
	for seed := range uint64(12) {
		for p, allowed := range map[pb.Protocol]string{pb.Protocol_PROTOCOL_TIDE_F: "t1-C t1-D t1-J", pb.Protocol_PROTOCOL_TIDE_P: "t1-C t1-J"} {
			resp, err := e.Reset(ctx, &pb.ResetRequest{Seed: &seed, Options: tideOpts(p), IncludePrivileged: true})
			if err != nil {
				t.Fatal(err)
			}
			// The public task id is opaque (it must not tell the sample
			// type); the record drawn is in the privileged part.
			if id := resp.GetEpisodes()[0].GetPrivileged().GetRecordId(); id == "" || !strings.Contains(allowed, id) {
				t.Errorf("%s drew %s, want one of %s", p, id, allowed)
			}
		}
	}
	// An AMBITAB task id may be played under TIDE_F (its one SQL).
	ep := resetTide(t, e, "big", pb.Protocol_PROTOCOL_TIDE_F)
	if ep.GetPrivileged().GetTide() != nil {
		t.Errorf("a non-TIDE task has TIDE info %v", ep.GetPrivileged().GetTide())
	}
}

// TestTideUnparsedAndLimits: the first unparsed output gets a notice and
// a turn; the second in a row is an abstention; a stop is one too; the
// twentieth turn without the last SQL truncates the episode; tools are
// refused.
func TestTideUnparsedAndLimits(t *testing.T) {
	e, _ := newEnv(t, loadTide(t), nil)
	ep := resetTide(t, e, "t1-J", pb.Protocol_PROTOCOL_TIDE_F)
	unparsed := &pb.Action{Kind: &pb.Action_Unparsed_{Unparsed: &pb.Action_Unparsed{Text: "{oops"}}}
	r := mustStep(t, e, ep.GetToken(), unparsed, false)
	if r.GetDone() || r.GetObservation().GetBudget().GetUsedMilli() != 1000 || kinds(r.GetObservation().GetTurns())[1] != pb.TurnKind_TURN_KIND_NOTICE {
		t.Fatalf("first unparsed: done %v budget %v", r.GetDone(), r.GetObservation().GetBudget())
	}
	// A valid action in between resets the count.
	r2 := mustStep(t, e, mustStep(t, e, r.GetToken(), askAction("What is the sales size?"), false).GetToken(), unparsed, false)
	if r2.GetDone() {
		t.Fatal("an unparsed output after a valid action ended the episode")
	}
	r = mustStep(t, e, r.GetToken(), unparsed, true)
	if !r.GetDone() || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.GetReward().GetValue() != 0 {
		t.Fatalf("second unparsed: done %v status %s reward %v", r.GetDone(), r.GetStatus(), r.GetReward())
	}
	r = mustStep(t, e, ep.GetToken(), stopAction(), false)
	if !r.GetDone() || r.GetReward().GetValue() != 0 {
		t.Fatalf("stop: done %v reward %v", r.GetDone(), r.GetReward())
	}
	_, err := e.Step(context.Background(), &pb.StepRequest{Token: ep.GetToken(), Action: &pb.Action{Kind: &pb.Action_GetSchema_{GetSchema: &pb.Action_GetSchema{}}}})
	wantEnvError(t, err, InvalidArgument, ReasonInvalidAction)

	tok := ep.GetToken()
	for i := 1; i <= TideTurns; i++ {
		r = mustStep(t, e, tok, askAction("Anything else?"), false)
		tok = r.GetToken()
		if done := r.GetDone(); done != (i == TideTurns) {
			t.Fatalf("turn %d: done %v", i, done)
		}
	}
	if r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED || r.GetReward().GetValue() != 0 {
		t.Fatalf("at the turn limit: status %s reward %v", r.GetStatus(), r.GetReward())
	}
}

// TestTideCountersHideTheDrift: a chain-only and a joint sample (the
// same request and chain; only the joint one has a drift) show the same
// counters and budget until the drift turn: nothing in the observation
// tells whether a drift will come.
func TestTideCountersHideTheDrift(t *testing.T) {
	e, _ := newEnv(t, loadTide(t), nil)
	counters := func(o *pb.Observation) string {
		return strings.Join([]string{o.GetBudget().String(), strconv.Itoa(int(o.GetQuestionBudget())), strconv.Itoa(int(o.GetQuestionsAsked())), strconv.Itoa(int(o.GetQuestionsRemaining())), strconv.Itoa(int(o.GetSubtask())), o.GetPhase().String()}, " ")
	}
	c, j := resetTide(t, e, "t1-C", pb.Protocol_PROTOCOL_TIDE_F), resetTide(t, e, "t1-J", pb.Protocol_PROTOCOL_TIDE_F)
	if a, b := counters(c.GetObservation()), counters(j.GetObservation()); a != b {
		t.Errorf("at reset: chain-only %s, joint %s", a, b)
	}
	rc := mustStep(t, e, c.GetToken(), askAction("What is the sales size?"), false)
	rj := mustStep(t, e, j.GetToken(), askAction("What is the sales size?"), false)
	if a, b := counters(rc.GetObservation()), counters(rj.GetObservation()); a != b {
		t.Errorf("after a question: chain-only %s, joint %s", a, b)
	}
}

// TestTidePrivilegedStaysPrivileged: nothing of the drift (utterance,
// post-drift SQL), the references or the resolutions reaches what the
// policy sees before the drift turn, with or without the privileged
// channel.
func TestTidePrivilegedStaysPrivileged(t *testing.T) {
	e, _ := newEnv(t, loadTide(t), nil)
	for _, p := range []pb.Protocol{pb.Protocol_PROTOCOL_TIDE_F, pb.Protocol_PROTOCOL_TIDE_P} {
		ep := resetTide(t, e, "t1-J", p)
		seen := ep.GetObservation().String()
		r := mustStep(t, e, ep.GetToken(), askAction("Anything about 2024?"), true)
		seen += r.GetObservation().String()
		for _, secret := range []string{"show 2023 instead", "year = 2023", "SUM(amount)", "The total, added up.", "AVG(amount)", "COUNT(*)"} {
			if strings.Contains(seen, secret) {
				t.Errorf("%s: the observation shows %q", p, secret)
			}
		}
	}
}

package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// fakeTide is a small in-memory TIDE environment (driver.Env) for the unit
// tests of the TIDE policies, written from the protocol's rules
// (PROTOCOL.md §9, §11): questions credited by term under the chain rule
// and routed, the drift turn after the first SQL, retry-once-then-
// abstention for unparsed output, 20 turns, DEA with its components.
// Reference SQL is matched as text.
type fakeTide struct {
	mu    sync.Mutex
	tasks map[string]*fakeTideTask
	eps   map[string]*fakeTideEp
	n     int
	// endless makes the episode never end (a broken server).
	endless bool
}

type fakeTideTask struct {
	id, request, evidence, schema string
	// The ambiguities in annotation order: term, chain layer, answer.
	terms   []string
	layers  []int32
	answers []string
	prefill string // TIDE_P's annotated L1 question
	ref     []string
	drift   string
	post    []string
	sample  string
}

type fakeTideEp struct {
	task         *fakeTideTask
	proto        pb.Protocol
	turns        int
	sqls         []string
	credited     map[int]bool // by the policy's questions
	resolved     map[int]bool // credited or pre-filled
	unparsedRows int
	done         bool
}

// fakeTideTasks are three samples of one anchor: chain-only, drift-only
// and joint, with the L2 ambiguity annotated before L1 (the policies
// must order by layer, not by index).
func fakeTideTasks() map[string]*fakeTideTask {
	chain := func(t *fakeTideTask) *fakeTideTask {
		t.request = "How big were the crowds at the stadiums in 2014?"
		t.terms = []string{"attendance", "crowds"}
		t.layers = []int32{2, 1}
		t.answers = []string{"The typical crowd, the average.", "How many people actually came."}
		t.prefill = "By crowd size, do you mean seats or people who came?"
		return t
	}
	drift := func(t *fakeTideTask) *fakeTideTask {
		t.drift = "Actually, make that 2015 instead."
		t.post = []string{"SELECT avg(attendance) FROM concert WHERE year = 2015"}
		return t
	}
	base := func(id, sample string) *fakeTideTask {
		return &fakeTideTask{id: id, sample: sample, request: "What is the average attendance of the concerts in 2014?",
			evidence: "A concert's year is stored as text.", schema: "CREATE TABLE concert (id INTEGER, year TEXT, attendance INTEGER);",
			ref: []string{"SELECT 1", "SELECT avg(attendance) FROM concert WHERE year = 2014"}}
	}
	return map[string]*fakeTideTask{
		"t-C": chain(base("t-C", "chain_only")),
		"t-D": drift(base("t-D", "drift_only")),
		"t-J": drift(chain(base("t-J", "joint"))),
	}
}

func newFakeTide() *fakeTide {
	return &fakeTide{tasks: fakeTideTasks(), eps: map[string]*fakeTideEp{}}
}

func (f *fakeTide) Reset(_ context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tasks[req.GetTaskId()]
	if t == nil {
		return nil, fmt.Errorf("no task %q", req.GetTaskId())
	}
	p := req.GetOptions().GetProtocol()
	if p == pb.Protocol_PROTOCOL_TIDE_P && t.prefill == "" {
		return nil, fmt.Errorf("TIDE_P needs a chain")
	}
	f.n++
	id := fmt.Sprintf("ep-%d", f.n)
	e := &fakeTideEp{task: t, proto: p, credited: map[int]bool{}, resolved: map[int]bool{}}
	f.eps[id] = e
	turns := []*pb.Turn{{Role: pb.Role_ROLE_ENVIRONMENT, Kind: pb.TurnKind_TURN_KIND_REQUEST, Text: t.request}}
	if p == pb.Protocol_PROTOCOL_TIDE_P {
		l1 := slices.Index(t.layers, 1)
		e.resolved[l1] = true
		turns = append(turns, &pb.Turn{Role: pb.Role_ROLE_PREFILLED, Kind: pb.TurnKind_TURN_KIND_QUESTION, Text: t.prefill},
			&pb.Turn{Role: pb.Role_ROLE_ORACLE, Kind: pb.TurnKind_TURN_KIND_REPLY, Text: t.answers[l1]})
	}
	obs := f.observe(e, turns)
	obs.Task = &pb.TaskView{Corpus: "fake", TaskId: t.id, Request: t.request, Evidence: t.evidence,
		Database: &pb.DatabaseView{Id: "concert_singer", Dialect: "sqlite", Schema: t.schema}}
	out := &pb.Episode{Token: []byte(id), Observation: obs, Seed: req.GetSeed(), EpisodeId: id}
	if req.GetIncludePrivileged() {
		priv := &pb.Privileged{AvtId: t.id, ReferenceSql: t.ref,
			Tide: &pb.TideInfo{Cluster: "t", SampleType: t.sample, DriftUtterance: t.drift, PostDriftReferenceSql: t.post, ChainLayers: t.layers}}
		for i, term := range t.terms {
			priv.Ambiguities = append(priv.Ambiguities, &pb.AmbiguityInfo{Index: int32(i), Term: term, Counted: true, Resolution: t.answers[i]})
		}
		out.Privileged = priv
	}
	return &pb.ResetResponse{Episodes: []*pb.Episode{out}}, nil
}

func (f *fakeTide) observe(e *fakeTideEp, turns []*pb.Turn) *pb.Observation {
	phase := pb.Phase_PHASE_ASKING
	if e.done {
		phase = pb.Phase_PHASE_DONE
	}
	sub := int32(1)
	if len(e.sqls) > 0 && e.task.drift != "" {
		sub = 2
	}
	return &pb.Observation{Turns: turns, Phase: phase, Protocol: e.proto, Subtask: sub,
		Budget: &pb.Budget{Unit: pb.BudgetUnit_BUDGET_UNIT_TURNS, TotalMilli: 20000, UsedMilli: int64(e.turns) * 1000, RemainingMilli: int64(20-e.turns) * 1000}}
}

func (f *fakeTide) Step(_ context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.eps[string(req.GetToken())]
	if e == nil || e.done {
		return nil, fmt.Errorf("no live episode %q", req.GetToken())
	}
	t := e.task
	resp := &pb.StepResponse{Token: req.GetToken()}
	priv := &pb.Privileged{}
	var turns []*pb.Turn
	switch a := req.GetAction().GetKind().(type) {
	case *pb.Action_Ask_:
		e.turns++
		e.unparsedRows = 0
		q := a.Ask.GetText()
		turns = append(turns, &pb.Turn{Role: pb.Role_ROLE_POLICY, Kind: pb.TurnKind_TURN_KIND_QUESTION, Text: q})
		hit := -1
		for i, term := range t.terms {
			if !strings.Contains(strings.ToLower(q), term) {
				continue
			}
			if t.layers[i] == 2 && !e.resolved[slices.Index(t.layers, 1)] {
				continue // the chain rule: L2 only once L1 is resolved
			}
			if hit < 0 || t.layers[i] < t.layers[hit] {
				hit = i
			}
		}
		if hit < 0 {
			turns = append(turns, &pb.Turn{Role: pb.Role_ROLE_ORACLE, Kind: pb.TurnKind_TURN_KIND_REFUSAL, Text: "I cannot answer that."})
		} else {
			e.credited[hit], e.resolved[hit] = true, true
			turns = append(turns, &pb.Turn{Role: pb.Role_ROLE_ORACLE, Kind: pb.TurnKind_TURN_KIND_REPLY, Text: t.answers[hit]})
		}
		if len(t.terms) > 0 {
			priv.Routing = "other"
			if hit >= 0 {
				priv.Routing = fmt.Sprintf("L%d", t.layers[hit])
			}
		}
	case *pb.Action_SubmitSql_:
		e.turns++
		e.unparsedRows = 0
		e.sqls = append(e.sqls, a.SubmitSql.GetSql())
		turns = append(turns, &pb.Turn{Role: pb.Role_ROLE_POLICY, Kind: pb.TurnKind_TURN_KIND_SQL, Text: a.SubmitSql.GetSql()})
		switch {
		case f.endless:
		case len(e.sqls) == 1 && t.drift != "":
			turns = append(turns, &pb.Turn{Role: pb.Role_ROLE_ORACLE, Kind: pb.TurnKind_TURN_KIND_DRIFT, Text: t.drift})
		default:
			e.done = true
		}
	case *pb.Action_Unparsed_:
		e.turns++
		e.unparsedRows++
		turns = append(turns, &pb.Turn{Role: pb.Role_ROLE_POLICY, Kind: pb.TurnKind_TURN_KIND_UNPARSED, Text: a.Unparsed.GetText()})
		if e.unparsedRows >= 2 {
			turns = append(turns, &pb.Turn{Role: pb.Role_ROLE_ENVIRONMENT, Kind: pb.TurnKind_TURN_KIND_NOTICE, Text: "Abstention."})
			e.done = true
		} else {
			turns = append(turns, &pb.Turn{Role: pb.Role_ROLE_ENVIRONMENT, Kind: pb.TurnKind_TURN_KIND_NOTICE, Text: "Your output could not be read."})
		}
	case *pb.Action_Stop_:
		turns = append(turns, &pb.Turn{Role: pb.Role_ROLE_POLICY, Kind: pb.TurnKind_TURN_KIND_STOP})
		e.done = true
	default:
		return nil, fmt.Errorf("TIDE takes no %T", a)
	}
	if !e.done && e.turns >= 20 && !f.endless {
		e.done = true
		resp.Status = pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
	}
	resp.Observation = f.observe(e, turns)
	if e.done {
		resp.Done = true
		if resp.Status == pb.EpisodeStatus_EPISODE_STATUS_UNSPECIFIED {
			resp.Status = pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
		}
		resp.Reward = e.reward()
	}
	if req.GetIncludePrivileged() {
		resp.Privileged = priv
	}
	return resp, nil
}

func (e *fakeTideEp) reward() *pb.Reward {
	b := func(x bool) float64 {
		if x {
			return 1
		}
		return 0
	}
	t := e.task
	sql1 := len(e.sqls) >= 1 && e.sqls[0] == strings.Join(t.ref, ";\n")
	c := map[string]float64{"sql1": b(sql1), "asked": b(len(e.credited) > 0 || e.turns > len(e.sqls)+e.unparsedRows)}
	dea := sql1
	if t.drift != "" {
		sql2 := len(e.sqls) >= 2 && e.sqls[1] == strings.Join(t.post, ";\n")
		c["sql2"], c["drift_recognized"] = b(sql2), b(len(e.sqls) >= 2 && e.sqls[1] != e.sqls[0])
		dea = sql1 && sql2
	}
	if len(t.terms) > 0 {
		var l1, l2 bool
		for i := range e.credited {
			l1 = l1 || t.layers[i] == 1
			l2 = l2 || t.layers[i] == 2
		}
		c["l1_identified"], c["l2_identified"] = b(l1), b(l2)
	}
	c["outcome"] = b(dea)
	return &pb.Reward{Type: pb.RewardType_REWARD_TYPE_OUTCOME, Value: b(dea), Components: c}
}

func startFakeTide(t *testing.T, env driver.Env, task string, p pb.Protocol, priv bool) *driver.Episode {
	t.Helper()
	seed := uint64(1)
	ep, err := driver.Start(context.Background(), env, &pb.ResetRequest{Corpus: "fake", TaskId: task, Seed: &seed,
		Options: &pb.EpisodeOptions{Protocol: p}, IncludePrivileged: priv})
	if err != nil {
		t.Fatal(err)
	}
	return ep
}

func TestParseTidePolicy(t *testing.T) {
	for _, name := range TidePolicies {
		p, err := ParseTidePolicy(name)
		if err != nil || p.Name() != name {
			t.Errorf("%s: %v %v", name, p, err)
		}
	}
	if p, err := ParseTidePolicy(" Chain-Aware "); err != nil || p.Name() != "chain-aware" {
		t.Errorf("case and space: %v %v", p, err)
	}
	for _, bad := range []string{"", "chain", "full", "chain-", "-aware", "chain-aware-x", "llm"} {
		if _, err := ParseTidePolicy(bad); err == nil || !strings.Contains(err.Error(), "chain-aware, chain-blind, none-aware, none-blind") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if got := Tide(TideAskChain, TideDriftBlind).Name(); got != "chain-blind" {
		t.Errorf("name %q", got)
	}
	if TideAskNone.Name() != "none" || TideDriftAware.Name() != "aware" {
		t.Error("part names")
	}
}

// TestTideScripted: each scripted baseline on each sample type under both
// protocols, against the fake environment: the questions (L1 then L2;
// under TIDE_P L2 only), the routings, the SQL and the components.
func TestTideScripted(t *testing.T) {
	ref := "SELECT 1;\nSELECT avg(attendance) FROM concert WHERE year = 2014"
	post := "SELECT avg(attendance) FROM concert WHERE year = 2015"
	l1, l2 := probe.FullQuestion("crowds"), probe.FullQuestion("attendance")
	type want struct {
		questions, routings, sqls []string
		reward                    float64
		comps                     map[string]float64
	}
	cases := []struct {
		policy, task string
		p            pb.Protocol
		want         want
	}{
		{"chain-aware", "t-C", pb.Protocol_PROTOCOL_TIDE_F, want{[]string{l1, l2}, []string{"L1", "L2"}, []string{ref}, 1,
			map[string]float64{"sql1": 1, "asked": 1, "l1_identified": 1, "l2_identified": 1, "outcome": 1}}},
		{"chain-aware", "t-C", pb.Protocol_PROTOCOL_TIDE_P, want{[]string{l2}, []string{"L2"}, []string{ref}, 1,
			map[string]float64{"sql1": 1, "asked": 1, "l1_identified": 0, "l2_identified": 1}}},
		{"chain-aware", "t-J", pb.Protocol_PROTOCOL_TIDE_F, want{[]string{l1, l2}, []string{"L1", "L2"}, []string{ref, post}, 1,
			map[string]float64{"sql1": 1, "sql2": 1, "drift_recognized": 1, "l1_identified": 1, "l2_identified": 1}}},
		{"chain-blind", "t-J", pb.Protocol_PROTOCOL_TIDE_P, want{[]string{l2}, []string{"L2"}, []string{ref, ref}, 0,
			map[string]float64{"sql1": 1, "sql2": 0, "drift_recognized": 0, "l2_identified": 1}}},
		{"chain-aware", "t-D", pb.Protocol_PROTOCOL_TIDE_F, want{nil, nil, []string{ref, post}, 1,
			map[string]float64{"sql1": 1, "sql2": 1, "drift_recognized": 1, "asked": 0}}},
		{"none-aware", "t-J", pb.Protocol_PROTOCOL_TIDE_F, want{nil, nil, []string{ref, post}, 1,
			map[string]float64{"asked": 0, "l1_identified": 0, "l2_identified": 0, "drift_recognized": 1}}},
		{"none-blind", "t-D", pb.Protocol_PROTOCOL_TIDE_F, want{nil, nil, []string{ref, ref}, 0,
			map[string]float64{"sql1": 1, "sql2": 0, "drift_recognized": 0, "asked": 0}}},
		{"none-blind", "t-C", pb.Protocol_PROTOCOL_TIDE_F, want{nil, nil, []string{ref}, 1,
			map[string]float64{"sql1": 1, "asked": 0}}},
	}
	for _, c := range cases {
		name := c.policy + "/" + c.task + "/" + driver.ProtocolName(c.p)
		p, err := ParseTidePolicy(c.policy)
		if err != nil {
			t.Fatal(err)
		}
		ep := startFakeTide(t, newFakeTide(), c.task, c.p, true)
		r := Finish(ep, p.Play(context.Background(), ep))
		if r.Status != "TERMINATED" || r.Error != "" {
			t.Errorf("%s: %s %s", name, r.Status, r.Error)
			continue
		}
		if !slices.Equal(r.Questions, c.want.questions) && len(r.Questions)+len(c.want.questions) > 0 {
			t.Errorf("%s: questions %q, want %q", name, r.Questions, c.want.questions)
		}
		if !slices.Equal(ep.Routings(), c.want.routings) {
			t.Errorf("%s: routings %q, want %q", name, ep.Routings(), c.want.routings)
		}
		if !slices.Equal(r.SQLs, c.want.sqls) {
			t.Errorf("%s: SQL %q, want %q", name, r.SQLs, c.want.sqls)
		}
		if val(r.Reward) != c.want.reward {
			t.Errorf("%s: reward %v, want %v", name, val(r.Reward), c.want.reward)
		}
		got := ep.Last().GetReward().GetComponents()
		for k, v := range c.want.comps {
			if x, ok := got[k]; !ok || x != v {
				t.Errorf("%s: component %s = %v (%v), want %v", name, k, x, ok, v)
			}
		}
	}
}

// TestTideScriptedErrors: the scripted baselines need the privileged
// channel and a TIDE episode, and give up on a server that never ends the
// episode.
func TestTideScriptedErrors(t *testing.T) {
	ctx := context.Background()
	p := Tide(TideAskChain, TideDriftAware)
	ep := startFakeTide(t, newFakeTide(), "t-J", pb.Protocol_PROTOCOL_TIDE_F, false)
	if err := p.Play(ctx, ep); err == nil || !strings.Contains(err.Error(), "include_privileged") {
		t.Errorf("without the privileged channel: %v", err)
	}
	if ep.Asked() != 0 || len(ep.Turns()) != 1 {
		t.Errorf("it played anyway: %d turns", len(ep.Turns()))
	}
	ep = startFakeTide(t, newFakeTide(), "t-J", pb.Protocol_PROTOCOL_AMBITAB, true)
	if err := p.Play(ctx, ep); err == nil || !strings.Contains(err.Error(), "tide-f and tide-p") {
		t.Errorf("under ambitab: %v", err)
	}
	f := newFakeTide()
	f.endless = true
	ep = startFakeTide(t, f, "t-J", pb.Protocol_PROTOCOL_TIDE_F, true)
	if err := p.Play(ctx, ep); err == nil || !strings.Contains(err.Error(), "no drift turn came") {
		t.Errorf("no drift turn: %v", err)
	}
	ep = startFakeTide(t, f, "t-J", pb.Protocol_PROTOCOL_TIDE_F, true)
	if err := Tide(TideAskChain, TideDriftBlind).Play(ctx, ep); err == nil || !strings.Contains(err.Error(), "did not end") {
		t.Errorf("endless episode: %v", err)
	} else if n := len(ep.SQLs()); n > 8 {
		t.Errorf("%d SQL submitted before giving up", n)
	}
	if err := Tide(TideAsker{}, TideDriftAware).Play(ctx, startFakeTide(t, newFakeTide(), "t-C", pb.Protocol_PROTOCOL_TIDE_F, true)); err == nil {
		t.Error("a zero asker played")
	}
}

// TestTideChainBudget: the chain asker keeps the turns its SQL needs.
func TestTideChainBudget(t *testing.T) {
	f := newFakeTide()
	task := f.tasks["t-J"]
	for i := range 30 {
		task.terms = append(task.terms, fmt.Sprintf("term%02d", i))
		task.layers = append(task.layers, 1)
		task.answers = append(task.answers, "x")
	}
	ep := startFakeTide(t, f, "t-J", pb.Protocol_PROTOCOL_TIDE_F, true)
	r := Finish(ep, Tide(TideAskChain, TideDriftAware).Play(context.Background(), ep))
	if r.Status != "TERMINATED" || len(r.Questions) != 18 || len(r.SQLs) != 2 || val(r.Reward) != 1 {
		t.Errorf("%s %s: %d questions, SQL %q, reward %v", r.Status, r.Error, len(r.Questions), r.SQLs, val(r.Reward))
	}
	// Layer 1 first (annotation order), then layer 2.
	if r.Questions[0] != probe.FullQuestion("crowds") || r.Questions[1] != probe.FullQuestion("term00") {
		t.Errorf("questions %q", r.Questions[:2])
	}
}

// tideServer starts a server on the embedded demo corpus and skips the
// test when it does not serve TIDE or the demo has no TIDE sample.
func tideServer(t *testing.T) *testutil.Server {
	t.Helper()
	srv := testutil.StartServer(t, app.Config{})
	tasks, err := ListTasks(context.Background(), srv.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	tide, _ := ProtocolTasks(tasks, pb.Protocol_PROTOCOL_TIDE_F)
	if len(tide) == 0 {
		t.Fatal("the demo corpus has no TIDE sample (TaskSummary.sample_type)")
	}
	if err := CheckOptions(context.Background(), driver.Remote(srv.Client.Env), tide[0], &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_F}); err != nil {
		t.Fatalf("the server refuses TIDE: %v", err)
	}
	return srv
}

// TestTideScriptedE2E: the four scripted baselines over the demo's TIDE
// samples through a real server, under TIDE_F and TIDE_P: the chain asker
// routes L1 then L2 (under TIDE_P L2 only) and, drift-aware, reaches
// reward 1; drift-blind scores 0 on DRR and sql2 on drift samples;
// none-aware asks nothing.
func TestTideScriptedE2E(t *testing.T) {
	srv := tideServer(t)
	drift := func(r *driver.Record) bool { return r.SampleType == "drift_only" || r.SampleType == "joint" }
	chain := func(r *driver.Record) bool { return r.SampleType == "chain_only" || r.SampleType == "joint" }
	for _, p := range []pb.Protocol{pb.Protocol_PROTOCOL_TIDE_F, pb.Protocol_PROTOCOL_TIDE_P} {
		for _, name := range TidePolicies {
			pl, _ := ParseTidePolicy(name)
			rs := rollout(t, srv, pl, &pb.EpisodeOptions{Protocol: p})
			what := name + " " + driver.ProtocolName(p)
			types := map[string]int{}
			for _, r := range rs {
				types[r.SampleType]++
				w := what + " " + r.TaskID
				if r.Status != "TERMINATED" || r.Error != "" || r.Protocol != driver.ProtocolName(p) {
					t.Errorf("%s: %s %s (protocol %q)", w, r.Status, r.Error, r.Protocol)
					continue
				}
				aware, chained := strings.HasSuffix(name, "-aware"), strings.HasPrefix(name, "chain-")
				wantRoutes := []string(nil)
				if chained && chain(r) {
					wantRoutes = []string{"L1", "L2"}
					if p == pb.Protocol_PROTOCOL_TIDE_P {
						wantRoutes = []string{"L2"}
					}
				}
				if !slices.Equal(r.Routings, wantRoutes) || len(r.Questions) != len(wantRoutes) {
					t.Errorf("%s: routings %q questions %q, want routings %q", w, r.Routings, r.Questions, wantRoutes)
				}
				wantL1, wantAsked := 0.0, 0.0
				if len(wantRoutes) > 0 {
					wantAsked = 1
				}
				if p == pb.Protocol_PROTOCOL_TIDE_F {
					wantL1 = wantAsked // under TIDE_P, L1 is pre-filled: never the policy's
				}
				if chain(r) && (val(r.L1Identified) != wantL1 || val(r.L2Identified) != wantAsked) {
					t.Errorf("%s: l1 %v l2 %v, want %v %v", w, val(r.L1Identified), val(r.L2Identified), wantL1, wantAsked)
				}
				if val(r.Asked) != wantAsked {
					t.Errorf("%s: asked %v, want %v", w, val(r.Asked), wantAsked)
				}
				if val(r.SQL1) != 1 {
					t.Errorf("%s: sql1 %v", w, val(r.SQL1))
				}
				switch {
				case !drift(r):
					if len(r.SQLs) != 1 || val(r.Reward) != 1 || r.SQL2 != nil || r.DriftRecognized != nil {
						t.Errorf("%s: SQL %q reward %v sql2 %v drr %v", w, r.SQLs, val(r.Reward), val(r.SQL2), val(r.DriftRecognized))
					}
				case aware:
					if len(r.SQLs) != 2 || val(r.Reward) != 1 || val(r.SQL2) != 1 || val(r.DriftRecognized) != 1 || r.Subtask != 2 {
						t.Errorf("%s: SQL %q reward %v sql2 %v drr %v", w, r.SQLs, val(r.Reward), val(r.SQL2), val(r.DriftRecognized))
					}
				default:
					if len(r.SQLs) != 2 || r.SQLs[0] != r.SQLs[1] || val(r.Reward) != 0 || val(r.SQL2) != 0 || val(r.DriftRecognized) != 0 {
						t.Errorf("%s: SQL %q reward %v sql2 %v drr %v", w, r.SQLs, val(r.Reward), val(r.SQL2), val(r.DriftRecognized))
					}
				}
			}
			want := map[string]int{"chain_only": 4, "drift_only": 4, "joint": 4}
			if p == pb.Protocol_PROTOCOL_TIDE_P {
				delete(want, "drift_only")
			}
			if len(types) != len(want) || types["chain_only"] == 0 || types["joint"] == 0 || (p == pb.Protocol_PROTOCOL_TIDE_F) != (types["drift_only"] > 0) {
				t.Errorf("%s: sample types played %v", what, types)
			}
		}
	}
}

func TestProtocolTasksTide(t *testing.T) {
	tasks := []*pb.TaskSummary{{TaskId: "a"}, {TaskId: "c", SampleType: "chain_only"}, {TaskId: "d", SampleType: "drift_only"}, {TaskId: "j", SampleType: "joint"}, {TaskId: "f", Subtasks: 2}}
	ids := func(ts []*pb.TaskSummary) string {
		var s []string
		for _, t := range ts {
			s = append(s, t.GetTaskId())
		}
		return strings.Join(s, ",")
	}
	for p, want := range map[pb.Protocol]string{
		pb.Protocol_PROTOCOL_TIDE_F:  "c,d,j",
		pb.Protocol_PROTOCOL_TIDE_P:  "c,j",
		pb.Protocol_PROTOCOL_BIRD_C:  "f",
		pb.Protocol_PROTOCOL_BIRD_A:  "f",
		pb.Protocol_PROTOCOL_AMBITAB: "a,c,d,j,f",
	} {
		kept, skipped := ProtocolTasks(tasks, p)
		if ids(kept) != want || skipped != len(tasks)-len(kept) {
			t.Errorf("%s: kept %s skipped %d, want %s", p, ids(kept), skipped, want)
		}
	}
}

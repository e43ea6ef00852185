package conformance

// This file plays scripts: every reset and every step is made twice (with
// and without include_privileged) and checked against the step's want and
// against the invariants every protocol shares.

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"avtgym/env"
	pb "avtgym/proto/avtgym/v1"
)

// script is one episode a protocol plays on a task.
type script struct {
	name  string
	check string // checkSteps, checkBudget or checkFaults
	// opts are the reset's options (the protocol is set by the suite for
	// every protocol but AMBITAB, whose scripts set it or leave the default).
	opts  *pb.EpisodeOptions
	moves []move
}

// move is one step of a script.
type move struct {
	name string
	act  func(*play) *pb.Action
	// from names the mark to play the move from ("" the previous move,
	// "reset" the reset): an old token, which forks the episode.
	from string
	// mark saves the episode after this move under a name.
	mark string
	want want
}

// want is what a step must do.
type want struct {
	// code and reason: the step must fail so; the token stays valid (the
	// next move plays from the same state).
	code   codes.Code
	reason string

	// turns are the turns the step adds, in order; their roles follow
	// from their kinds (roleOf). questions_asked grows by the REPLY and
	// REFUSAL turns among them.
	turns []turnWant
	done  bool
	// status is the terminal status when done.
	status pb.EpisodeStatus
	// phase is the phase when not done; unset means PHASE_ASKING.
	phase pb.Phase
	// charge and grow are how much budget.used_milli and
	// budget.total_milli grow.
	charge, grow int64
	// subtask is the sub-task after the step; 0 means unchanged.
	subtask     int32
	sqlRequired bool
	// credit lists terms the step's privileged credits must include;
	// noCredit says it credits nothing.
	credit   []string
	noCredit bool
	// routing is the step's privileged chain routing ("" not checked).
	routing string
	// release: the step releases BIRD's follow-up (its request is the
	// step's last turn, and its reference is in the privileged field).
	release bool
	// solver: a server solver wrote the step's SQL (privileged solver_sql).
	solver bool
	// brokenSQL: the step's SQL does not run, so the database's message
	// about it (the verifier reason) may be shown as feedback.
	brokenSQL bool
	reward    *wantReward
}

// turnWant is one turn a step must add: its kind and, when set, its text
// (exactly, or as a prefix).
type turnWant struct {
	kind   pb.TurnKind
	text   string
	prefix bool
}

// wantReward is the reward a finished episode must have: its type, its
// value, and exactly these components.
type wantReward struct {
	typ        pb.RewardType
	value      float64
	components map[string]float64
}

// state is where an episode stands on the path a script plays.
type state struct {
	tok      []byte
	obs      *pb.Observation // the last observation (the counters)
	done     bool
	subtask  int32
	credited map[int32]bool // ambiguities the policy's questions were credited with
	shownTo  []string       // every text the policy was shown on this path
}

func (s state) clone() state {
	c := s
	c.credited = map[int32]bool{}
	for k, v := range s.credited {
		c.credited[k] = v
	}
	c.shownTo = slices.Clone(s.shownTo)
	return c
}

// record is one step that succeeded, for fork_and_retry.
type record struct {
	before []byte
	act    *pb.Action
	resp   *pb.StepResponse // with include_privileged
}

// play is one episode being played, with what the checks know of it.
type play struct {
	t    *testing.T
	tg   *Target
	p    *protocol
	task *task
	st   *stats

	opts    *pb.EpisodeOptions
	reset   *pb.Episode // with the privileged field
	cur     state
	marks   map[string]state
	history []record
	hyg     hygiene
}

func newPlay(t *testing.T, tg *Target, p *protocol, tk *task, st *stats) *play {
	return &play{t: t, tg: tg, p: p, task: tk, st: st, marks: map[string]state{}}
}

// seedOf is the seed of every reset the suite makes: fixed, so that a
// retry and the unprivileged twin are the same episode.
var seedOf = uint64(20240611)

func playScript(t *testing.T, tg *Target, p *protocol, tk *task, sc script, st *stats) {
	pl := newPlay(t, tg, p, tk, st)
	pl.start(sc.opts)
	for i, m := range sc.moves {
		name := m.name
		if name == "" {
			name = "move " + strconv.Itoa(i+1)
		}
		if m.from != "" {
			s, ok := pl.marks[m.from]
			if !ok {
				t.Fatalf("%s: no mark %q", name, m.from)
			}
			pl.cur = s.clone()
		}
		pl.step(name, m)
		if m.mark != "" {
			pl.marks[m.mark] = pl.cur.clone()
		}
	}
	pl.finish()
}

// resetOnce resets the play's task with opts (the protocol set) and
// returns its one episode.
func (pl *play) resetOnce(opts *pb.EpisodeOptions, priv bool) *pb.Episode {
	pl.t.Helper()
	seed := seedOf
	resp, err := pl.tg.Env.Reset(pl.t.Context(), &pb.ResetRequest{TaskId: pl.task.id, Seed: &seed, Options: cloneOptions(opts, pl.p.proto), IncludePrivileged: priv})
	if err != nil {
		pl.t.Fatalf("reset %s (%v): %v", pl.task.id, opts, err)
	}
	if n := len(resp.GetEpisodes()); n != 1 {
		pl.t.Fatalf("reset returned %d episodes, want 1", n)
	}
	return resp.GetEpisodes()[0]
}

// start resets the episode twice, with and without the privileged field,
// and checks the reset.
func (pl *play) start(opts *pb.EpisodeOptions) {
	t := pl.t
	t.Helper()
	pl.opts = opts
	priv := pl.resetOnce(opts, true)
	public := pl.resetOnce(opts, false)
	pl.st.episodes.Add(1)
	pl.reset = priv
	if public.GetPrivileged() != nil {
		t.Errorf("a reset without include_privileged carries the privileged field: %v", public.GetPrivileged())
	}
	if priv.GetPrivileged() == nil {
		t.Fatalf("a reset with include_privileged carries no privileged field")
	}
	if !proto.Equal(priv.GetObservation(), public.GetObservation()) {
		t.Errorf("include_privileged changed the reset's observation:\n%v\n%v", priv.GetObservation(), public.GetObservation())
	}
	if priv.GetSeed() != seedOf || public.GetSeed() != seedOf || priv.GetEpisodeId() != public.GetEpisodeId() {
		t.Errorf("resets with seed %d: seeds %d and %d, episode ids %q and %q", seedOf, priv.GetSeed(), public.GetSeed(), priv.GetEpisodeId(), public.GetEpisodeId())
	}
	if bytes.Equal(priv.GetToken(), public.GetToken()) {
		t.Errorf("two resets sealed the same token bytes: the nonces must be fresh")
	}
	pl.hyg.learn(priv.GetPrivileged(), pl.st)
	o := public.GetObservation()
	pl.checkReset(o)
	pl.checkToken("reset", priv.GetToken())
	pl.checkToken("reset", public.GetToken())
	// What the policy is shown at reset, and what it may contain: the TIDE_P
	// pre-filled answer is the first layer's resolution.
	var allowed []string
	if pl.p.proto == pb.Protocol_PROTOCOL_TIDE_P {
		allowed = pl.layerOneResolutions()
	}
	pl.cur = state{tok: priv.GetToken(), obs: o, subtask: 1, credited: map[int32]bool{}}
	pl.show("the reset's task view", viewTexts(o.GetTask()), nil)
	for i, turn := range o.GetTurns() {
		var ok []string
		if turn.GetKind() == pb.TurnKind_TURN_KIND_REPLY {
			ok = allowed
		}
		pl.show("reset turn "+strconv.Itoa(i+1)+" ("+turn.GetKind().String()+")", []string{turn.GetText()}, ok)
	}
	pl.marks["reset"] = pl.cur.clone()
}

// checkReset checks a reset's observation: the public task, the turns the
// reset shows and the budget.
func (pl *play) checkReset(o *pb.Observation) {
	t, tk := pl.t, pl.task
	t.Helper()
	view := o.GetTask()
	if view.GetTaskId() != tk.id || view.GetRequest() == "" || view.GetDatabase().GetDialect() == "" {
		t.Errorf("reset's task view: id %q (want %q), request %q, dialect %q", view.GetTaskId(), tk.id, view.GetRequest(), view.GetDatabase().GetDialect())
	}
	want := []turnWant{{kind: pb.TurnKind_TURN_KIND_REQUEST, text: view.GetRequest()}}
	if pl.p.proto == pb.Protocol_PROTOCOL_TIDE_P {
		// TIDE_P: the pre-filled clarification of the chain's first layer
		// (PREFILLED) and its canonical answer, which is that layer's
		// resolution.
		want = append(want, turnWant{kind: pb.TurnKind_TURN_KIND_QUESTION}, turnWant{kind: pb.TurnKind_TURN_KIND_REPLY})
	}
	pl.checkTurns("reset", o.GetTurns(), want, nil, true)
	if pl.p.proto == pb.Protocol_PROTOCOL_TIDE_P && len(o.GetTurns()) == 3 {
		if reply := o.GetTurns()[2].GetText(); !slices.Contains(pl.layerOneResolutions(), reply) {
			t.Errorf("TIDE_P's pre-filled answer %q is not the resolution of a layer-1 ambiguity", reply)
		}
	}
	total := pl.p.budget(tk, pl.opts)
	b := o.GetBudget()
	if b.GetUnit() != pl.p.unit || b.GetTotalMilli() != total || b.GetUsedMilli() != 0 || b.GetRemainingMilli() != total {
		t.Errorf("reset budget %v, want %s total %d used 0 remaining %d", b, pl.p.unit, total, total)
	}
	if o.GetProtocol() != pl.p.proto || o.GetSubtask() != 1 || o.GetQuestionsAsked() != 0 {
		t.Errorf("reset: protocol %s (want %s), sub-task %d (want 1), questions asked %d (want 0)", o.GetProtocol(), pl.p.proto, o.GetSubtask(), o.GetQuestionsAsked())
	}
	// BIRD_C with one turn: that turn is the last, for SQL only.
	last := pl.p.proto == pb.Protocol_PROTOCOL_BIRD_C && total <= 1000
	phase := pb.Phase_PHASE_ASKING
	if last {
		phase = pb.Phase_PHASE_SOLVING
	}
	if o.GetPhase() != phase || o.GetSqlRequired() != last {
		t.Errorf("reset: phase %s, sql_required %v; want %s and %v", o.GetPhase(), o.GetSqlRequired(), phase, last)
	}
	pl.checkCounters(o)
}

// checkCounters checks what every observation's counters must satisfy.
func (pl *play) checkCounters(o *pb.Observation) {
	t := pl.t
	t.Helper()
	b := o.GetBudget()
	if b.GetRemainingMilli() != max(0, b.GetTotalMilli()-b.GetUsedMilli()) {
		t.Errorf("budget %v: remaining is not max(0, total - used)", b)
	}
	if o.GetQuestionsRemaining() < 0 || o.GetQuestionsAsked() < 0 {
		t.Errorf("negative counters: asked %d, remaining %d", o.GetQuestionsAsked(), o.GetQuestionsRemaining())
	}
	if pl.p.proto == pb.Protocol_PROTOCOL_AMBITAB {
		// AMBITAB's budget is the question budget B, in questions; the
		// remaining questions are B − asked.
		if int64(o.GetQuestionBudget())*1000 != b.GetTotalMilli() || int64(o.GetQuestionsAsked())*1000 != b.GetUsedMilli() ||
			o.GetQuestionsRemaining() != max(0, o.GetQuestionBudget()-o.GetQuestionsAsked()) {
			t.Errorf("AMBITAB counters: question budget %d, asked %d, remaining %d, budget %v", o.GetQuestionBudget(), o.GetQuestionsAsked(), o.GetQuestionsRemaining(), b)
		}
	}
}

// layerOneResolutions are the resolutions of the task's layer-1
// ambiguities.
func (pl *play) layerOneResolutions() []string {
	var out []string
	amb := pl.reset.GetPrivileged().GetAmbiguities()
	for i, layer := range pl.reset.GetPrivileged().GetTide().GetChainLayers() {
		if layer == 1 && i < len(amb) {
			out = append(out, amb[i].GetResolution())
		}
	}
	return out
}

// step plays one move: twice from the same token (with and without
// include_privileged), and checks both.
func (pl *play) step(name string, m move) {
	t := pl.t
	t.Helper()
	a := m.act(pl)
	what := name + " (" + describe(a) + ")"
	before := pl.cur
	privResp, err := pl.tg.Env.Step(t.Context(), &pb.StepRequest{Token: before.tok, Action: a, IncludePrivileged: true})
	pl.st.steps.Add(1)
	if m.want.code != codes.OK {
		pl.wantError(err, what, m.want.code, m.want.reason)
		_, err = pl.tg.Env.Step(t.Context(), &pb.StepRequest{Token: before.tok, Action: a})
		pl.wantError(err, what+" without the privileged field", m.want.code, m.want.reason)
		return // the token stays valid: the next move plays from it
	}
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	publicResp, err := pl.tg.Env.Step(t.Context(), &pb.StepRequest{Token: before.tok, Action: a})
	if err != nil {
		t.Fatalf("%s, without the privileged field: %v", what, err)
	}
	pl.history = append(pl.history, record{before: before.tok, act: a, resp: privResp})

	// Retry and privilege independence: the same token and action give
	// the same observation, reward and status; only the privileged field
	// and the token's bytes differ.
	if publicResp.GetPrivileged() != nil {
		t.Errorf("%s: a step without include_privileged carries the privileged field: %v", what, publicResp.GetPrivileged())
	}
	if privResp.GetPrivileged() == nil {
		t.Errorf("%s: a step with include_privileged carries no privileged field", what)
	}
	if !proto.Equal(privResp.GetObservation(), publicResp.GetObservation()) || !proto.Equal(privResp.GetReward(), publicResp.GetReward()) ||
		privResp.GetStatus() != publicResp.GetStatus() || privResp.GetDone() != publicResp.GetDone() {
		t.Errorf("%s: the same token and action gave different results with and without include_privileged:\n%v\n%v", what, privResp, publicResp)
	}
	if bytes.Equal(privResp.GetToken(), publicResp.GetToken()) {
		t.Errorf("%s: two steps sealed the same token bytes: the nonces must be fresh", what)
	}
	pl.checkToken(what, privResp.GetToken())
	pl.checkToken(what, publicResp.GetToken())
	pl.checkResponseSize(what, privResp)
	pl.checkResponseSize(what, publicResp)

	pl.hyg.learn(privResp.GetPrivileged(), pl.st)
	pl.checkStep(what, a, m.want, before, privResp)

	// What the policy was shown, and what each text may contain there:
	// its own words, the resolutions its question earned (in the reply),
	// the drift utterance (in the drift turn), and the database's message
	// about its own SQL (in feedback).
	sent := sentTexts(a)
	for i, turn := range publicResp.GetObservation().GetTurns() {
		ok := slices.Clone(sent)
		switch turn.GetKind() {
		case pb.TurnKind_TURN_KIND_REPLY:
			ok = append(ok, pl.resolutionsOf(privResp.GetPrivileged().GetCredits())...)
		case pb.TurnKind_TURN_KIND_DRIFT:
			ok = append(ok, pl.task.drift)
		case pb.TurnKind_TURN_KIND_FEEDBACK:
			if m.want.brokenSQL {
				ok = append(ok, privResp.GetPrivileged().GetVerifierReason())
			}
		}
		pl.show(what+", turn "+strconv.Itoa(i+1)+" ("+turn.GetKind().String()+")", []string{turn.GetText()}, ok)
	}

	// The path goes on from the new token.
	next := before.clone()
	next.tok, next.obs, next.done = privResp.GetToken(), privResp.GetObservation(), privResp.GetDone()
	next.subtask = privResp.GetObservation().GetSubtask()
	for _, c := range privResp.GetPrivileged().GetCredits() {
		next.credited[c.GetIndex()] = true
	}
	for _, turn := range publicResp.GetObservation().GetTurns() {
		next.shownTo = append(next.shownTo, turn.GetText())
	}
	pl.cur = next
	if privResp.GetDone() {
		pl.checkEpisodeCredits(what, privResp.GetPrivileged(), next.credited)
	}
}

// resolutionsOf are the resolutions of the credited ambiguities (of the
// task's; credits in BIRD's sub-task 2 name the follow-up's, which has
// none).
func (pl *play) resolutionsOf(credits []*pb.Credit) []string {
	var out []string
	amb := pl.reset.GetPrivileged().GetAmbiguities()
	for _, c := range credits {
		if i := int(c.GetIndex()); i >= 0 && i < len(amb) && amb[i].GetTerm() == c.GetTerm() {
			out = append(out, amb[i].GetResolution())
		}
	}
	return out
}

// checkStep checks a step's response against its want and the shared
// invariants.
func (pl *play) checkStep(what string, a *pb.Action, w want, before state, r *pb.StepResponse) {
	pl.t.Helper()
	if before.done {
		pl.t.Errorf("%s: a step after the episode ended succeeded; want FAILED_PRECONDITION / EPISODE_DONE", what)
	}
	pl.checkEnd(what, w, r)
	pl.checkReward(what, r, w)
	pl.checkTurns(what, r.GetObservation().GetTurns(), w.turns, a, false)
	pl.checkMoves(what, w, before, r.GetObservation())
	pl.checkPrivileged(what, w, before, r)
}

// checkEnd checks done, status, phase and sql_required.
func (pl *play) checkEnd(what string, w want, r *pb.StepResponse) {
	t, o := pl.t, r.GetObservation()
	t.Helper()
	wantStatus := pb.EpisodeStatus_EPISODE_STATUS_RUNNING
	if w.done {
		wantStatus = w.status
	}
	if r.GetStatus() == pb.EpisodeStatus_EPISODE_STATUS_ERROR {
		t.Errorf("%s: status ERROR; ERROR is for environment faults, and this environment did not fail (turns %v)", what, o.GetTurns())
	}
	if r.GetDone() != w.done || r.GetStatus() != wantStatus {
		t.Errorf("%s: done %v status %s, want done %v status %s (turns %v)", what, r.GetDone(), r.GetStatus(), w.done, wantStatus, o.GetTurns())
	}
	wantPhase := pb.Phase_PHASE_DONE
	if !w.done {
		wantPhase = w.phase
		if wantPhase == pb.Phase_PHASE_UNSPECIFIED {
			wantPhase = pb.Phase_PHASE_ASKING
		}
	}
	if o.GetPhase() != wantPhase {
		t.Errorf("%s: phase %s, want %s", what, o.GetPhase(), wantPhase)
	}
	if o.GetSqlRequired() != (w.sqlRequired && !w.done) {
		t.Errorf("%s: sql_required %v, want %v", what, o.GetSqlRequired(), w.sqlRequired && !w.done)
	}
}

// checkMoves checks how the step moved the counters: the questions asked
// grow by the answers it gave, the budget by the want's charge and growth,
// the sub-task as wanted.
func (pl *play) checkMoves(what string, w want, before state, o *pb.Observation) {
	t := pl.t
	t.Helper()
	if o.GetProtocol() != pl.p.proto {
		t.Errorf("%s: protocol %s, want %s", what, o.GetProtocol(), pl.p.proto)
	}
	answers := int32(0)
	for _, turn := range o.GetTurns() {
		if k := turn.GetKind(); k == pb.TurnKind_TURN_KIND_REPLY || k == pb.TurnKind_TURN_KIND_REFUSAL {
			answers++
		}
	}
	if got, want := o.GetQuestionsAsked(), before.obs.GetQuestionsAsked()+answers; got != want {
		t.Errorf("%s: questions asked %d, want %d (%d before, %d answered now)", what, got, want, before.obs.GetQuestionsAsked(), answers)
	}
	b, b0 := o.GetBudget(), before.obs.GetBudget()
	if b.GetUnit() != pl.p.unit {
		t.Errorf("%s: budget unit %s, want %s", what, b.GetUnit(), pl.p.unit)
	}
	if got := b.GetUsedMilli() - b0.GetUsedMilli(); got != w.charge {
		t.Errorf("%s: the step used %d thousandths of the budget, want %d (budget %v before, %v after)", what, got, w.charge, b0, b)
	}
	if got := b.GetTotalMilli() - b0.GetTotalMilli(); got != w.grow {
		t.Errorf("%s: the budget grew by %d thousandths, want %d", what, got, w.grow)
	}
	wantSub := before.subtask
	if w.subtask != 0 {
		wantSub = w.subtask
	}
	if o.GetSubtask() != wantSub {
		t.Errorf("%s: sub-task %d, want %d", what, o.GetSubtask(), wantSub)
	}
	pl.checkCounters(o)
}

// checkPrivileged checks the step's privileged field: its credits and
// routing, and the follow-up's reference and the solver's SQL exactly on
// the steps that have them; and that a released follow-up was never shown
// before.
func (pl *play) checkPrivileged(what string, w want, before state, r *pb.StepResponse) {
	t, p := pl.t, r.GetPrivileged()
	t.Helper()
	if p.GetAvtId() != pl.reset.GetPrivileged().GetAvtId() {
		t.Errorf("%s: privileged avt_id %q, the reset's %q", what, p.GetAvtId(), pl.reset.GetPrivileged().GetAvtId())
	}
	for _, term := range w.credit {
		if !slices.ContainsFunc(p.GetCredits(), func(c *pb.Credit) bool { return c.GetTerm() == term }) {
			t.Errorf("%s: credits %v lack %q", what, p.GetCredits(), term)
		}
	}
	if w.noCredit && len(p.GetCredits()) > 0 {
		t.Errorf("%s: credits %v, want none", what, p.GetCredits())
	}
	if w.routing != "" && p.GetRouting() != w.routing {
		t.Errorf("%s: routing %q, want %q", what, p.GetRouting(), w.routing)
	}
	if w.release != (len(p.GetFollowUpReferenceSql()) > 0) {
		t.Errorf("%s: follow-up reference %q in the privileged field, want it iff the follow-up is released now (%v)", what, p.GetFollowUpReferenceSql(), w.release)
	}
	if w.solver != (p.GetSolverSql() != "") {
		t.Errorf("%s: solver SQL %q, want it iff a server solver wrote the SQL (%v)", what, p.GetSolverSql(), w.solver)
	}
	turns := r.GetObservation().GetTurns()
	if !w.release || len(turns) == 0 {
		return
	}
	// The follow-up's request is shown now, never before: not at reset, not
	// in the task view, not in any earlier turn.
	req := turns[len(turns)-1].GetText()
	if req == "" {
		t.Errorf("%s: the follow-up's request turn is empty", what)
		return
	}
	for _, s := range append(slices.Clone(before.shownTo), viewTexts(pl.reset.GetObservation().GetTask())...) {
		if strings.Contains(s, req) {
			t.Errorf("%s: the follow-up's request %q was shown before its release, in %q", what, req, s)
		}
	}
}

// checkReward checks the done / reward rules and the want's reward.
func (pl *play) checkReward(what string, r *pb.StepResponse, w want) {
	t := pl.t
	t.Helper()
	rw := r.GetReward()
	scored := r.GetDone() && r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_ERROR
	if (rw != nil) != scored {
		t.Errorf("%s: reward %v with done %v and status %s: a reward comes exactly when the episode is done and not ERROR", what, rw, r.GetDone(), r.GetStatus())
	}
	if rw == nil {
		return
	}
	for k, v := range rw.GetComponents() {
		if !slices.Contains(pl.p.components, k) {
			t.Errorf("%s: reward component %q is not one of %s's %v", what, k, pl.p.name, pl.p.components)
		}
		if v < 0 || v > 1 || math.IsNaN(v) {
			t.Errorf("%s: reward component %s = %v is outside [0, 1]", what, k, v)
		}
	}
	// The value is what the protocol's reward type says it is.
	c := rw.GetComponents()
	var value float64
	switch rw.GetType() {
	case pb.RewardType_REWARD_TYPE_QUESTION_F1:
		value = c["question_f1"]
	case pb.RewardType_REWARD_TYPE_OUTCOME:
		value = c["outcome"] // 0 when no solution was verified
	case pb.RewardType_REWARD_TYPE_BIRD_INTERACT:
		value = c["phase1"] + c["phase2"]
	default:
		t.Errorf("%s: reward type %s", what, rw.GetType())
	}
	if !near(rw.GetValue(), value) {
		t.Errorf("%s: reward value %v, but its %s components %v make %v", what, rw.GetValue(), rw.GetType(), c, value)
	}
	if w.reward == nil {
		if w.done {
			t.Errorf("%s: (suite) a finished episode's reward is not stated", what)
		}
		return
	}
	if rw.GetType() != w.reward.typ || !near(rw.GetValue(), w.reward.value) || !sameComponents(c, w.reward.components) {
		t.Errorf("%s: reward %s %v %v, want %s %v %v (an undefined component is absent)", what, rw.GetType(), rw.GetValue(), c, w.reward.typ, w.reward.value, w.reward.components)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }

func sameComponents(got, want map[string]float64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || !near(g, v) {
			return false
		}
	}
	return true
}

// roleOf is who produces each turn kind (the TurnKind and Role comments
// of episode.proto; docs/protocols.md "Protocols").
var roleOf = map[pb.TurnKind]pb.Role{
	pb.TurnKind_TURN_KIND_REQUEST:     pb.Role_ROLE_ENVIRONMENT,
	pb.TurnKind_TURN_KIND_QUESTION:    pb.Role_ROLE_POLICY,
	pb.TurnKind_TURN_KIND_REPLY:       pb.Role_ROLE_ORACLE,
	pb.TurnKind_TURN_KIND_STOP:        pb.Role_ROLE_POLICY,
	pb.TurnKind_TURN_KIND_SQL:         pb.Role_ROLE_POLICY,
	pb.TurnKind_TURN_KIND_FEEDBACK:    pb.Role_ROLE_ENVIRONMENT,
	pb.TurnKind_TURN_KIND_NOTICE:      pb.Role_ROLE_ENVIRONMENT,
	pb.TurnKind_TURN_KIND_REFUSAL:     pb.Role_ROLE_ORACLE,
	pb.TurnKind_TURN_KIND_UNPARSED:    pb.Role_ROLE_POLICY,
	pb.TurnKind_TURN_KIND_TOOL_CALL:   pb.Role_ROLE_POLICY,
	pb.TurnKind_TURN_KIND_TOOL_RESULT: pb.Role_ROLE_ENVIRONMENT,
	pb.TurnKind_TURN_KIND_DRIFT:       pb.Role_ROLE_ORACLE,
}

// checkTurns checks turns against want: kinds, roles, texts; every text
// valid UTF-8; an answer right after its question; the policy's own turns
// its bounded words.
func (pl *play) checkTurns(what string, turns []*pb.Turn, want []turnWant, a *pb.Action, reset bool) {
	t := pl.t
	t.Helper()
	kinds := make([]pb.TurnKind, len(turns))
	for i, turn := range turns {
		kinds[i] = turn.GetKind()
	}
	wantKinds := make([]pb.TurnKind, len(want))
	for i, w := range want {
		wantKinds[i] = w.kind
	}
	if !slices.Equal(kinds, wantKinds) {
		t.Errorf("%s: turns %v, want kinds %v", what, turns, wantKinds)
		return
	}
	for i := range turns {
		pl.checkTurn(what, turns, i, want[i], reset)
	}
	if a != nil && len(turns) > 0 {
		pl.checkPolicyWords(what, turns[0], a)
	}
}

// checkTurn checks turn i of a step: its role, its text and its place.
func (pl *play) checkTurn(what string, turns []*pb.Turn, i int, w turnWant, reset bool) {
	t, turn := pl.t, turns[i]
	t.Helper()
	role := roleOf[turn.GetKind()]
	if reset && pl.p.proto == pb.Protocol_PROTOCOL_TIDE_P && turn.GetKind() == pb.TurnKind_TURN_KIND_QUESTION {
		// TIDE_P's pre-filled question is the environment's, written in the
		// policy's place: never trainable.
		role = pb.Role_ROLE_PREFILLED
	}
	if turn.GetRole() != role {
		t.Errorf("%s: turn %d (%s) has role %s, want %s", what, i+1, turn.GetKind(), turn.GetRole(), role)
	}
	if !utf8.ValidString(turn.GetText()) {
		t.Errorf("%s: turn %d (%s) is not valid UTF-8", what, i+1, turn.GetKind())
	}
	if w.text != "" && (w.prefix && !strings.HasPrefix(turn.GetText(), w.text) || !w.prefix && turn.GetText() != w.text) {
		t.Errorf("%s: turn %d (%s) says %q, want %q (prefix %v)", what, i+1, turn.GetKind(), turn.GetText(), w.text, w.prefix)
	}
	if k := turn.GetKind(); (k == pb.TurnKind_TURN_KIND_REPLY || k == pb.TurnKind_TURN_KIND_REFUSAL) && (i == 0 || turns[i-1].GetKind() != pb.TurnKind_TURN_KIND_QUESTION) {
		t.Errorf("%s: turn %d (%s) answers no question", what, i+1, k)
	}
	if turn.GetKind() == pb.TurnKind_TURN_KIND_STOP && turn.GetText() != "" {
		t.Errorf("%s: a stop turn has text %q", what, turn.GetText())
	}
}

// checkPolicyWords checks the policy's own turn (the step's first): its
// words, as the transcript keeps them.
func (pl *play) checkPolicyWords(what string, first *pb.Turn, a *pb.Action) {
	t := pl.t
	t.Helper()
	// Exactly what it sent when that is valid UTF-8 within its limit, else
	// its bounded form.
	var text string
	var limit int
	switch k := a.GetKind().(type) {
	case *pb.Action_Ask_:
		text, limit = k.Ask.GetText(), env.MaxQuestionBytes
	case *pb.Action_SubmitSql_:
		text, limit = k.SubmitSql.GetSql(), env.MaxSQLBytes
	case *pb.Action_Unparsed_:
		text, limit = k.Unparsed.GetText(), env.MaxQuestionBytes
	default:
		return
	}
	if first.GetKind() == pb.TurnKind_TURN_KIND_TOOL_CALL {
		return // BIRD_A renders an action it cannot pay for as a call
	}
	if utf8.ValidString(text) && len(text) <= limit {
		if first.GetText() != text {
			t.Errorf("%s: the policy's turn says %.80q, want its words %.80q", what, first.GetText(), text)
		}
	} else if len(first.GetText()) > limit {
		t.Errorf("%s: the policy's turn holds %d bytes, more than its limit of %d", what, len(first.GetText()), limit)
	}
}

// checkEpisodeCredits checks the episode's credits, set when it is done:
// every ambiguity the policy's questions were credited with.
func (pl *play) checkEpisodeCredits(what string, p *pb.Privileged, credited map[int32]bool) {
	got := map[int32]bool{}
	for _, c := range p.GetEpisodeCredits() {
		got[c.GetIndex()] = true
	}
	for k := range credited {
		if !got[k] {
			pl.t.Errorf("%s: episode credits %v lack ambiguity %d, which a question was credited with", what, p.GetEpisodeCredits(), k)
		}
	}
	for k := range got {
		if !credited[k] {
			pl.t.Errorf("%s: episode credits %v hold ambiguity %d, which no question was credited with", what, p.GetEpisodeCredits(), k)
		}
	}
}

// checkToken checks a token's size: within the bound of its task's
// identifiers and of what the environment accepts, and padded to its
// bucket (docs/limits.md: a 9-byte header, a 12-byte nonce, and the sealed
// part — head and history — a multiple of 64 bytes, at least 128).
func (pl *play) checkToken(what string, tok []byte) {
	t := pl.t
	t.Helper()
	bound := env.TokenBound(len(pl.task.corpus), len(pl.task.id))
	pl.st.raise(&pl.st.maxToken, int64(len(tok)))
	pl.st.raise(&pl.st.tokenBound, int64(bound))
	if len(tok) > bound || len(tok) > pl.tg.Limits.MaxTokenBytes() {
		t.Errorf("%s: a token of %d bytes, over its bound of %d (TokenBound) or the %d the environment accepts", what, len(tok), bound, pl.tg.Limits.MaxTokenBytes())
	}
	if sealed := len(tok) - 21; sealed < 128 || sealed%64 != 0 {
		t.Errorf("%s: a token of %d bytes: its sealed part (%d bytes) is not padded to a 64-byte bucket of at least 128", what, len(tok), sealed)
	}
}

// checkResponseSize checks a step response's size against the task's
// StepResponseBound.
func (pl *play) checkResponseSize(what string, r *pb.StepResponse) {
	t := pl.t
	t.Helper()
	task, err := pl.tg.Limits.Task(pl.task.corpus, pl.task.id)
	if err != nil {
		t.Fatalf("the environment's limits know no task %s/%s: %v", pl.task.corpus, pl.task.id, err)
	}
	bound, n := env.StepResponseBound(task), proto.Size(r)
	pl.st.raise(&pl.st.maxResponse, int64(n))
	pl.st.raise(&pl.st.responseBound, int64(bound))
	if n > bound {
		t.Errorf("%s: a step response of %d bytes, over the task's bound of %d (StepResponseBound)", what, n, bound)
	}
}

// wantError checks an error's code and ErrorInfo reason, and that its
// message holds nothing privileged.
func (pl *play) wantError(err error, what string, code codes.Code, reason string) {
	t := pl.t
	t.Helper()
	pl.st.errors.Add(1)
	if err == nil {
		t.Errorf("%s: succeeded; want %s / %s", what, code, reason)
		return
	}
	gotCode, gotReason := pl.tg.ErrorOf(err)
	if gotCode != code || gotReason != reason {
		t.Errorf("%s: %s / %q (%v); want %s / %s", what, gotCode, gotReason, err, code, reason)
	}
	pl.show("the error of "+what, []string{err.Error()}, nil)
}

// finish checks the episode's hygiene: every text shown against every
// privileged value learnt.
func (pl *play) finish() {
	pl.t.Helper()
	pl.hyg.check(pl.t, pl.st)
}

func (pl *play) show(where string, texts []string, allowed []string) {
	pl.hyg.show(where, texts, allowed)
}

// sameEpisode reports whether two resets are the same episode: the same
// observation, privileged data, seed and id.
func sameEpisode(a, b *pb.Episode) bool {
	return proto.Equal(a.GetObservation(), b.GetObservation()) && proto.Equal(a.GetPrivileged(), b.GetPrivileged()) &&
		a.GetSeed() == b.GetSeed() && a.GetEpisodeId() == b.GetEpisodeId() && a.GetGroupIndex() == b.GetGroupIndex()
}

// sameResult reports whether two steps gave the same result: observation,
// privileged data, reward, status and done.
func sameResult(a, b *pb.StepResponse) bool {
	return proto.Equal(a.GetObservation(), b.GetObservation()) && proto.Equal(a.GetPrivileged(), b.GetPrivileged()) &&
		proto.Equal(a.GetReward(), b.GetReward()) && a.GetStatus() == b.GetStatus() && a.GetDone() == b.GetDone()
}

// sentTexts are the texts a policy sent with an action.
func sentTexts(a *pb.Action) []string {
	var out []string
	add := func(s ...string) {
		for _, x := range s {
			if x != "" {
				out = append(out, x)
			}
		}
	}
	switch k := a.GetKind().(type) {
	case *pb.Action_Ask_:
		add(k.Ask.GetText())
	case *pb.Action_SubmitSql_:
		add(k.SubmitSql.GetSql())
	case *pb.Action_Unparsed_:
		add(k.Unparsed.GetText())
	case *pb.Action_Execute_:
		add(k.Execute.GetSql())
	case *pb.Action_GetColumnMeaning_:
		add(k.GetColumnMeaning.GetTable(), k.GetColumnMeaning.GetColumn())
	case *pb.Action_GetKnowledgeDefinition_:
		add(k.GetKnowledgeDefinition.GetName())
	}
	return out
}

// viewTexts are the texts of a public task view.
func viewTexts(v *pb.TaskView) []string {
	out := []string{v.GetRequest(), v.GetEvidence(), v.GetDatabase().GetSchema()}
	for k, m := range v.GetDatabase().GetColumnMeanings() {
		out = append(out, k+": "+m)
	}
	for _, k := range v.GetDatabase().GetKnowledge() {
		out = append(out, k.GetName()+": "+k.GetDefinition())
	}
	return out
}

func protoClone[M proto.Message](m M) M { return proto.Clone(m).(M) }

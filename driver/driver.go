// Package driver is the one episode loop of avtgym's client side: an
// Episode started on an environment, stepped with Ask, Stop, SubmitSQL,
// Unparsed and BIRD_A's tools (Execute, GetSchema, …; alone or many at once
// with StepAll), and summed up as a Record. It follows the episode's
// protocol (PROTOCOL.md §11): AMBITAB's ask-then-solve, BIRD_C's two
// sub-tasks with their turn budget, BIRD_A's with its coins, or TIDE_F's
// and TIDE_P's agent turns, where the drift turn follows the first SQL and
// the Record keeps each question's chain routing, the SQL submitted and the
// sample's TIDE labels. The environment is a small interface that both the
// gRPC client (Remote) and the in-process env.Env satisfy, so that every
// policy, probe, audit and benchmark plays through this code, over the wire
// or in process, and none writes its own loop.
package driver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	pb "avtgym/proto/avtgym/v1"
	"avtgym/record"
)

// Env is what an episode needs from an environment. *env.Env implements it
// in process; Remote adapts a gRPC client.
type Env interface {
	Reset(ctx context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error)
	Step(ctx context.Context, req *pb.StepRequest) (*pb.StepResponse, error)
}

// BatchEnv is an environment that can also step many episodes in one call.
type BatchEnv interface {
	Env
	StepBatch(ctx context.Context, req *pb.StepBatchRequest) (*pb.StepBatchResponse, error)
}

// Remote adapts a gRPC EnvService client. It is also a RulesSource: it
// asks the server for its protocols' rules once and keeps the answer (the
// server's rules are fixed while it runs), so BIRD_A resets cost no
// extra call after the first.
func Remote(c pb.EnvServiceClient) BatchEnv { return &remote{c: c} }

type remote struct {
	c pb.EnvServiceClient

	mu    sync.Mutex
	rules *pb.ListProtocolsResponse // nil until a call succeeded
}

// ListProtocols implements RulesSource, from the first successful answer
// on (a failed call is retried by the next).
func (r *remote) ListProtocols(ctx context.Context, req *pb.ListProtocolsRequest) (*pb.ListProtocolsResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rules == nil {
		resp, err := r.c.ListProtocols(ctx, req)
		if err != nil {
			return nil, err
		}
		r.rules = resp
	}
	return r.rules, nil
}

func (r *remote) Reset(ctx context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error) {
	return r.c.Reset(ctx, req)
}

func (r *remote) Step(ctx context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	return r.c.Step(ctx, req)
}

func (r *remote) StepBatch(ctx context.Context, req *pb.StepBatchRequest) (*pb.StepBatchResponse, error) {
	return r.c.StepBatch(ctx, req, grpc.WaitForReady(false))
}

// Episode is one episode being played. Its methods are not safe for
// concurrent use; play one episode from one goroutine.
type Episode struct {
	env   Env
	opts  *pb.EpisodeOptions // as the reset asked for them
	reset *pb.Episode
	priv  bool // steps ask for the privileged field
	token []byte
	last  *pb.StepResponse
	turns []*pb.Turn

	// What the policy is shown: the task view and request (replaced for a
	// spec-randomized policy, see Show) and the counted terms a scripted
	// baseline reads.
	view  *pb.TaskView
	terms []string
	shown bool // Show replaced them

	phase               pb.Phase
	budget, asked, left int
	questions, replies  []string

	// The protocol's state, as the last observation gave it: the
	// sub-task (1, or 2 once the follow-up is released), the interaction
	// budget, whether only SQL is accepted now, and the follow-up's
	// reference SQL (privileged, from the step that released it).
	protocol    pb.Protocol
	subtask     int
	allowance   *pb.Budget
	sqlRequired bool
	followUpSQL []string

	// BIRD_A: the coins each action type spent (thousandths, from the
	// budget's used_milli before and after each step) and how many of
	// each were taken, by ActionName.
	coinsSpent map[string]int64
	actions    map[string]int
	// BIRD_A: the published price of each action type, in thousandths of
	// a coin (shared by a group; never written after reset).
	prices map[string]int64

	// TIDE: the chain routing of each question the policy asked (from
	// the privileged channel: "L1", "L2", "other"), the SQL the policy
	// submitted, in order, and the drift utterance once it was injected.
	routings []string
	sqls     []string
	drift    string

	// For the record (record.go): the tags of the reset, the credits the
	// privileged channel gave each oracle turn (by index in turns), the
	// verdict on each submitted SQL, and when the episode started and
	// ended.
	tags              map[string]string
	credits           map[int][]*pb.Credit
	verdicts          []Verdict
	started, finished time.Time

	// FallbackStop and FallbackSQL are set by a policy whose output could
	// not be parsed (PROTOCOL.md §6): the episode ended by a fallback STOP,
	// or a placeholder SQL was submitted. Record reports them.
	FallbackStop, FallbackSQL bool
}

// Start resets one episode with req (its group size forced to 1).
func Start(ctx context.Context, env Env, req *pb.ResetRequest) (*Episode, error) {
	eps, err := Group(ctx, env, req, 1)
	if err != nil {
		return nil, err
	}
	return eps[0], nil
}

// Group resets a GRPO group of n episodes on one task and interpretation
// (seeds seed … seed+n-1).
func Group(ctx context.Context, env Env, req *pb.ResetRequest, n int) ([]*Episode, error) {
	if n < 1 {
		return nil, fmt.Errorf("driver: a group needs at least one episode, not %d", n)
	}
	r := cloneReset(req)
	r.GroupSize = int32(n)
	resp, err := env.Reset(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("reset: %w", err)
	}
	if len(resp.GetEpisodes()) != n {
		return nil, fmt.Errorf("reset: the server returned %d episodes, want %d", len(resp.GetEpisodes()), n)
	}
	eps := make([]*Episode, n)
	for i, e := range resp.GetEpisodes() {
		eps[i] = newEpisode(env, e, req)
	}
	if eps[0].Coins() {
		// One price list for the group: they play one protocol.
		prices, err := pricesOf(ctx, env, eps[0].protocol)
		if err != nil {
			return nil, err
		}
		for _, ep := range eps {
			ep.prices = prices
		}
	}
	return eps, nil
}

func newEpisode(env Env, e *pb.Episode, req *pb.ResetRequest) *Episode {
	obs := e.GetObservation()
	ep := &Episode{
		env: env, opts: req.GetOptions(), reset: e, priv: req.GetIncludePrivileged(), token: e.GetToken(),
		turns:   slices.Clone(obs.GetTurns()),
		view:    obs.GetTask(),
		terms:   CountedTerms(e.GetPrivileged()),
		phase:   obs.GetPhase(),
		tags:    req.GetTags(),
		started: time.Now(),
	}
	ep.observe(obs)
	return ep
}

func cloneReset(r *pb.ResetRequest) *pb.ResetRequest {
	c := &pb.ResetRequest{
		Corpus: r.GetCorpus(), TaskId: r.GetTaskId(), Split: r.GetSplit(),
		Options: r.GetOptions(), GroupSize: r.GetGroupSize(), IncludePrivileged: r.GetIncludePrivileged(),
		SampleTypes: r.GetSampleTypes(), Tags: r.GetTags(),
	}
	if r.Seed != nil {
		s := r.GetSeed()
		c.Seed = &s
	}
	return c
}

// CountedTerms returns the distinct counted terms of a reset's privileged
// data, in annotation order.
func CountedTerms(p *pb.Privileged) []string {
	var terms []string
	for _, a := range p.GetAmbiguities() {
		if a.GetCounted() && !slices.Contains(terms, a.GetTerm()) {
			terms = append(terms, a.GetTerm())
		}
	}
	return terms
}

// Show replaces what the policy is shown with another task's public view
// and counted terms: the spec-randomized condition of PROTOCOL.md §5 (the
// policy asks about a donor record's specification; the oracle still
// answers for the real one). The request turn of the history changes with
// the view.
func (e *Episode) Show(view *pb.TaskView, terms []string) {
	e.view, e.terms, e.shown = view, terms, true
	for i, t := range e.turns {
		if t.GetKind() == pb.TurnKind_TURN_KIND_REQUEST {
			e.turns[i] = &pb.Turn{Role: t.GetRole(), Kind: t.GetKind(), Text: view.GetRequest()}
		}
	}
}

// Shown reports whether Show replaced what the policy is shown.
func (e *Episode) Shown() bool { return e.shown }

// Task is the public task view the policy is shown.
func (e *Episode) Task() *pb.TaskView { return e.view }

// Terms are the counted terms a scripted baseline asks about (read from the
// privileged field at reset: empty unless the reset asked for it).
func (e *Episode) Terms() []string { return e.terms }

// Reset is the episode as the reset returned it (privileged field
// included when asked for).
func (e *Episode) Reset() *pb.Episode { return e.reset }

// Options are the episode options the reset asked for (nil: the server's
// defaults).
func (e *Episode) Options() *pb.EpisodeOptions { return e.opts }

// NeedsSQL reports whether the client writes the episode's SQL: under
// AMBITAB, whether the episode waits for it after STOP (the outcome reward
// with the client as solver, the default solver); under BIRD_C and BIRD_A
// always (each sub-task is solved by the client's submit_sql, and a STOP
// ends it unsolved).
func (e *Episode) NeedsSQL() bool {
	if IsBird(e.Protocol()) || IsTide(e.Protocol()) {
		return true
	}
	return e.opts.GetReward() == pb.RewardType_REWARD_TYPE_OUTCOME &&
		(e.opts.GetSolver() == pb.Solver_SOLVER_UNSPECIFIED || e.opts.GetSolver() == pb.Solver_SOLVER_CLIENT)
}

// Protocol is the episode's protocol: as the server reported it in the
// observation, else as the reset asked for it, else AMBITAB (never
// UNSPECIFIED).
func (e *Episode) Protocol() pb.Protocol {
	if e.protocol != pb.Protocol_PROTOCOL_UNSPECIFIED {
		return e.protocol
	}
	if p := e.opts.GetProtocol(); p != pb.Protocol_PROTOCOL_UNSPECIFIED {
		return p
	}
	return pb.Protocol_PROTOCOL_AMBITAB
}

// Subtask is the sub-task being played: 1, or 2 once the follow-up has
// been released (BIRD_C; its request is then the last REQUEST turn of the
// history). Distinct from Phase, which says whether the policy may ask.
func (e *Episode) Subtask() int { return e.subtask }

// Allowance is the episode's interaction budget in the protocol's unit,
// as the last observation gave it (AMBITAB: questions; BIRD_C: turns); nil
// from a server that does not report it.
func (e *Episode) Allowance() *pb.Budget { return e.allowance }

// TurnsLeft is what remains of the budget in whole units (BIRD_C: turns,
// the one kept for the follow-up's SQL included once it is released);
// for a server that reports no budget, the questions remaining.
func (e *Episode) TurnsLeft() int {
	if e.allowance == nil {
		return e.left
	}
	return int(e.allowance.GetRemainingMilli() / 1000)
}

// SQLRequired reports whether only submit_sql is accepted now (BIRD_C: the
// last turn, or a debug retry after a failed submission): any other action
// ends the sub-task unsolved. False once the episode is done.
func (e *Episode) SQLRequired() bool { return !e.Done() && e.sqlRequired }

// ReferenceSQL is the current sub-task's reference SQL, its statements
// joined as the corpus joins them (";\n"), from the privileged channel:
// the task's reference in sub-task 1 (from the reset), the follow-up's
// in sub-task 2 (from the step that released it). Empty when the reset or
// the steps did not ask for the privileged field.
func (e *Episode) ReferenceSQL() string {
	if e.subtask >= 2 {
		return strings.Join(e.followUpSQL, ";\n")
	}
	return strings.Join(e.reset.GetPrivileged().GetReferenceSql(), ";\n")
}

// IsTide reports whether p is one of TIDE's protocols (TIDE_F, TIDE_P).
func IsTide(p pb.Protocol) bool {
	return p == pb.Protocol_PROTOCOL_TIDE_F || p == pb.Protocol_PROTOCOL_TIDE_P
}

// Tide is the task's TIDE labels from the reset's privileged channel (nil
// when the reset did not ask for it or the task has none).
func (e *Episode) Tide() *pb.TideInfo { return e.reset.GetPrivileged().GetTide() }

// Drift is the drift utterance once it has been injected (TIDE; "" before,
// and on tasks without a drift).
func (e *Episode) Drift() string { return e.drift }

// SQLs are the SQL texts the policy submitted so far, in order.
func (e *Episode) SQLs() []string { return e.sqls }

// Routings are the chain routings of the questions the policy asked, in
// order (privileged; empty on tasks without a chain).
func (e *Episode) Routings() []string { return e.routings }

// FollowUpReferenceSQL is the follow-up's reference statements, as the step
// that released the follow-up gave them (privileged; nil before).
func (e *Episode) FollowUpReferenceSQL() []string { return e.followUpSQL }

// Turns is the history so far: the request, then every turn of every step.
func (e *Episode) Turns() []*pb.Turn { return e.turns }

// Phase is the episode's phase now.
func (e *Episode) Phase() pb.Phase { return e.phase }

// Budget, Asked and Remaining are the question budget and the questions
// answered and still allowed.
func (e *Episode) Budget() int    { return e.budget }
func (e *Episode) Asked() int     { return e.asked }
func (e *Episode) Remaining() int { return e.left }

// Done reports whether the episode has ended.
func (e *Episode) Done() bool { return e.last.GetDone() }

// Asking reports whether the episode still takes questions (and, under
// BIRD_A, tools): not done, in the asking phase, and not waiting for SQL
// only (BIRD_C's last turn or debug retry; BIRD_A's free final submit;
// see SQLRequired).
func (e *Episode) Asking() bool {
	return !e.Done() && e.phase == pb.Phase_PHASE_ASKING && !e.sqlRequired
}

// Last is the last step's response (nil before the first step).
func (e *Episode) Last() *pb.StepResponse { return e.last }

// Token is the episode's current token (to fork it, or step it yourself).
func (e *Episode) Token() []byte { return e.token }

// Ask asks a question.
func (e *Episode) Ask(ctx context.Context, q string) error {
	return e.Do(ctx, &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: q}}})
}

// Stop ends asking.
func (e *Episode) Stop(ctx context.Context) error {
	return e.Do(ctx, &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}})
}

// SubmitSQL submits the solution.
func (e *Episode) SubmitSQL(ctx context.Context, sql string) error {
	return e.Do(ctx, &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: sql}}})
}

// Unparsed reports model output the policy could not parse into an
// action, so that the protocol's own rule applies (PROTOCOL.md §11):
// AMBITAB answers the first with a notice and takes the second in a row
// as STOP; BIRD_C spends a turn on it, and ends the sub-task unsolved when
// only SQL was accepted.
func (e *Episode) Unparsed(ctx context.Context, text string) error {
	return e.Do(ctx, &pb.Action{Kind: &pb.Action_Unparsed_{Unparsed: &pb.Action_Unparsed{Text: text}}})
}

// Do takes one action. An error leaves the episode as it was: the same
// action can be retried.
func (e *Episode) Do(ctx context.Context, a *pb.Action) error {
	resp, err := e.env.Step(ctx, e.request(a))
	if err != nil {
		return fmt.Errorf("%s: %w", actionName(a), err)
	}
	e.apply(a, resp)
	return nil
}

func (e *Episode) request(a *pb.Action) *pb.StepRequest {
	return &pb.StepRequest{Token: e.token, Action: a, IncludePrivileged: e.priv}
}

func actionName(a *pb.Action) string {
	if n := ActionName(a); n != "" {
		return n
	}
	return "step"
}

// apply takes in a step's response.
func (e *Episode) apply(a *pb.Action, resp *pb.StepResponse) {
	e.token, e.last = resp.GetToken(), resp
	obs := resp.GetObservation()
	first := len(e.turns)
	e.turns = append(e.turns, obs.GetTurns()...)
	e.noteForRecord(first, resp)
	before := e.coinsUsedMilli()
	e.observe(obs)
	if e.Protocol() == pb.Protocol_PROTOCOL_BIRD_A {
		e.count(ActionName(a), e.coinsUsedMilli()-before)
	}
	if fu := resp.GetPrivileged().GetFollowUpReferenceSql(); len(fu) > 0 {
		e.followUpSQL = slices.Clone(fu)
	}
	if r := routingLabel(resp.GetPrivileged()); r != "" {
		e.routings = append(e.routings, r)
	}
	for _, t := range obs.GetTurns() {
		switch {
		case t.GetRole() == pb.Role_ROLE_POLICY && t.GetKind() == pb.TurnKind_TURN_KIND_QUESTION:
			e.questions = append(e.questions, t.GetText())
		case t.GetRole() == pb.Role_ROLE_POLICY && t.GetKind() == pb.TurnKind_TURN_KIND_SQL:
			e.sqls = append(e.sqls, t.GetText())
		case t.GetKind() == pb.TurnKind_TURN_KIND_DRIFT:
			e.drift = t.GetText()
		case t.GetRole() == pb.Role_ROLE_ORACLE:
			e.replies = append(e.replies, t.GetText())
		}
	}
}

func (e *Episode) observe(obs *pb.Observation) {
	e.phase = obs.GetPhase()
	if b := obs.GetQuestionBudget(); b > 0 || e.budget == 0 {
		e.budget = int(b)
	}
	e.asked, e.left = int(obs.GetQuestionsAsked()), int(obs.GetQuestionsRemaining())
	if p := obs.GetProtocol(); p != pb.Protocol_PROTOCOL_UNSPECIFIED {
		e.protocol = p
	}
	if st := int(obs.GetSubtask()); st > 0 {
		e.subtask = st
	} else if e.subtask == 0 {
		e.subtask = 1
	}
	if b := obs.GetBudget(); b != nil {
		e.allowance = b
	}
	e.sqlRequired = obs.GetSqlRequired()
}

// StepAll takes one action on each of eps with one StepBatch call (actions
// and eps pair up by index). It returns one error per episode: nil where
// the step succeeded, the item's status where it failed (that episode is
// left as it was, to be retried), or the call's error for every item when
// the batch call itself failed.
func StepAll(ctx context.Context, env BatchEnv, eps []*Episode, actions []*pb.Action) []error {
	errs := make([]error, len(eps))
	if len(eps) != len(actions) {
		err := fmt.Errorf("driver: %d episodes but %d actions", len(eps), len(actions))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	req := &pb.StepBatchRequest{Steps: make([]*pb.StepRequest, len(eps))}
	for i, e := range eps {
		req.Steps[i] = e.request(actions[i])
	}
	resp, err := env.StepBatch(ctx, req)
	if err == nil && len(resp.GetResults()) != len(eps) {
		err = fmt.Errorf("step_batch: %d results for %d steps", len(resp.GetResults()), len(eps))
	}
	for i, e := range eps {
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("step_batch: %w", err)
		case resp.GetResults()[i].GetStatus().GetCode() != 0:
			// The item's status, as a gRPC status error (details kept).
			errs[i] = fmt.Errorf("%s: %w", actionName(actions[i]), status.ErrorProto(resp.GetResults()[i].GetStatus()))
		default:
			e.apply(actions[i], resp.GetResults()[i].GetResponse())
		}
	}
	return errs
}

// Play runs a policy's decisions on e until the episode ends: next is
// called with the episode and returns the next action, or nil to stop
// asking (a STOP, or nothing when asking has ended). It is the loop the
// scripted policies share.
func (e *Episode) Play(ctx context.Context, next func(*Episode) *pb.Action) error {
	for !e.Done() {
		a := next(e)
		if a == nil {
			if !e.Asking() {
				return nil
			}
			a = &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}
		}
		if err := e.Do(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// statusName is the name of a terminal status: TERMINATED, TRUNCATED or
// ERROR (record.StatusName).
func statusName(s pb.EpisodeStatus) string { return record.StatusName(s) }

// routingLabel is a step's chain routing ("L1", "L2", "other"), read from
// Privileged.routing_enum; the deprecated string serves a server that
// predates the enum.
func routingLabel(p *pb.Privileged) string {
	switch p.GetRoutingEnum() {
	case pb.ChainRouting_CHAIN_ROUTING_L1:
		return "L1"
	case pb.ChainRouting_CHAIN_ROUTING_L2:
		return "L2"
	case pb.ChainRouting_CHAIN_ROUTING_OTHER:
		return "other"
	}
	return p.GetRouting()
}

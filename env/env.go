// Package env owns the episode state machine of the ask-then-solve protocol
// (PROTOCOL.md §2): task selection, budgets, phases and terminal statuses,
// the fixed solvers, rewards, and the sealed tokens that carry each
// episode's whole state between calls, so that the server holds none.
package env

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

// Oracle answers a question about a record under the question's options
// (the strict-credit rule; whether the history's credits must be
// recomputed): the matcher's credits and the responder's reply.
// oracle.Oracle implements it.
type Oracle interface {
	AskWith(ctx context.Context, rec *corpus.Record, history []oracle.Turn, question string, opt oracle.AskOptions) (oracle.Reply, error)
}

// Solver writes the SQL of an episode from its task's public specification
// and the dialogue (a fixed solver, PROTOCOL.md §2). An error means the
// solver itself failed (the episode ends in ERROR); SQL that is wrong is
// just a failed solution.
type Solver interface {
	Solve(ctx context.Context, t *corpus.Task, dialogue []oracle.Turn) (string, error)
}

// Defaults of the episode options (PROTOCOL.md §2).
// (The limits are in limits.go.)
const (
	DefaultExtraQuestions      = 2
	DefaultZeroAmbiguityBudget = 0
)

// Config is what an Env needs.
type Config struct {
	// Corpora are the served corpora; the first is the default.
	Corpora []*corpus.Corpus
	// Sealer seals episode tokens.
	Sealer *Sealer
	// Oracles maps each selectable oracle type to its implementation.
	// ORACLE_TYPE_DETERMINISTIC must be present, and so must every served
	// oracle's hybrid (HybridOf).
	Oracles map[pb.OracleType]Oracle
	// Limits bound every submitted statement.
	Limits sqlexec.Limits
	// LLMSolver is the solver behind SOLVER_LLM; nil makes that option
	// unavailable.
	LLMSolver Solver
	// TokenTTL, when positive, rejects tokens of episodes reset longer ago.
	TokenTTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Env runs episodes. It holds no per-episode state and is safe for
// concurrent use.
type Env struct {
	cfg     Config
	corpora map[string]*corpus.Corpus
	views   map[*corpus.Task]*pb.TaskView
	splits  map[*corpus.Corpus]map[string][]*corpus.Task
	// twoPhase holds the tasks with a follow-up by split (the tasks
	// PROTOCOL_BIRD_C and PROTOCOL_BIRD_A draw from).
	twoPhase map[*corpus.Corpus]map[string][]*corpus.Task
	// tide holds, per TIDE protocol, the TIDE samples it serves by split
	// (the tasks a TIDE reset without a task id draws from).
	tide map[pb.Protocol]map[*corpus.Corpus]map[string][]*corpus.Task
	// maxState bounds every state seal writes, and maxToken every token
	// open reads (limits.go); maxStep bounds one StepResponse.
	maxState, maxToken, maxStep int
	// busy counts the steps answered VERIFIER_BUSY.
	busy atomic.Int64
}

// VerifierBusy counts the steps answered RESOURCE_EXHAUSTED /
// VERIFIER_BUSY: the verifier had no slot, copy, worker or connection for
// them within its wait bound (never because of what a policy's SQL said).
func (e *Env) VerifierBusy() int64 { return e.busy.Load() }

// New checks the configuration and prepares the public views of all tasks.
func New(cfg Config) (*Env, error) {
	if len(cfg.Corpora) == 0 {
		return nil, errorf(Internal, ReasonInternal, "", "env: no corpus to serve")
	}
	if cfg.Sealer == nil {
		return nil, errorf(Internal, ReasonInternal, "", "env: no token sealer")
	}
	if cfg.Oracles[pb.OracleType_ORACLE_TYPE_DETERMINISTIC] == nil {
		return nil, errorf(Internal, ReasonInternal, "", "env: the deterministic oracle is required")
	}
	if err := checkHybrids(cfg.Oracles); err != nil {
		return nil, err
	}
	if cfg.Limits == (sqlexec.Limits{}) {
		cfg.Limits = sqlexec.DefaultLimits()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	e := &Env{
		cfg:      cfg,
		corpora:  map[string]*corpus.Corpus{},
		views:    map[*corpus.Task]*pb.TaskView{},
		splits:   map[*corpus.Corpus]map[string][]*corpus.Task{},
		twoPhase: map[*corpus.Corpus]map[string][]*corpus.Task{},
		tide:     map[pb.Protocol]map[*corpus.Corpus]map[string][]*corpus.Task{},
	}
	for _, c := range cfg.Corpora {
		if _, dup := e.corpora[c.Name]; dup {
			return nil, errorf(Internal, ReasonInternal, "", "env: two corpora are named %q", c.Name)
		}
		e.corpora[c.Name] = c
		bySplit := map[string][]*corpus.Task{"": c.Tasks}
		twoPhase := map[string][]*corpus.Task{}
		for _, t := range c.Tasks {
			e.views[t] = PublicView(t)
			if t.Split != "" {
				bySplit[t.Split] = append(bySplit[t.Split], t)
			}
			if t.FollowUp != nil {
				twoPhase[""] = append(twoPhase[""], t)
				if t.Split != "" {
					twoPhase[t.Split] = append(twoPhase[t.Split], t)
				}
			}
			e.maxState = max(e.maxState, StateBound(len(c.Name), len(t.ID)))
			e.maxStep = max(e.maxStep, StepResponseBound(t))
		}
		e.splits[c] = bySplit
		e.twoPhase[c] = twoPhase
		for _, p := range []pb.Protocol{pb.Protocol_PROTOCOL_TIDE_F, pb.Protocol_PROTOCOL_TIDE_P} {
			pools := map[string][]*corpus.Task{}
			for _, t := range c.Tasks {
				if t.SampleType == "" || tideServes(t, p) != "" {
					continue
				}
				pools[""] = append(pools[""], t)
				if t.Split != "" {
					pools[t.Split] = append(pools[t.Split], t)
				}
			}
			if e.tide[p] == nil {
				e.tide[p] = map[*corpus.Corpus]map[string][]*corpus.Task{}
			}
			e.tide[p][c] = pools
		}
	}
	longest := func(f func(*corpus.Task) int) int {
		n := idAllowance
		for _, c := range cfg.Corpora {
			for _, t := range c.Tasks {
				n = max(n, f(t))
			}
		}
		return n
	}
	e.maxToken = TokenBound(longest(func(t *corpus.Task) int { return len(t.Corpus.Name) }), longest(func(t *corpus.Task) int { return len(t.ID) }))
	return e, nil
}

// MaxTokenBytes is the longest episode token this server accepts: the
// token bound (limits.go) of the served corpora's longest identifiers.
func (e *Env) MaxTokenBytes() int { return e.maxToken }

// MaxStepResponseBytes bounds the encoded size of any StepResponse this
// environment builds (limits.go).
func (e *Env) MaxStepResponseBytes() int { return e.maxStep }

// Corpora returns the served corpora, the default first.
func (e *Env) Corpora() []*corpus.Corpus { return e.cfg.Corpora }

// Corpus returns the named corpus; "" names the default.
func (e *Env) Corpus(name string) (*corpus.Corpus, error) {
	if name == "" {
		return e.cfg.Corpora[0], nil
	}
	c, ok := e.corpora[name]
	if !ok {
		return nil, errorf(NotFound, ReasonUnknownCorpus, "corpus", "no corpus named %q is served", name)
	}
	return c, nil
}

// Task returns a task by corpus and id.
func (e *Env) Task(corpusName, id string) (*corpus.Task, error) {
	c, err := e.Corpus(corpusName)
	if err != nil {
		return nil, err
	}
	t, ok := c.Task(id)
	if !ok {
		return nil, errorf(NotFound, ReasonUnknownTask, "task_id", "corpus %q has no task %q", c.Name, id)
	}
	return t, nil
}

// View returns the public view of a task.
func (e *Env) View(t *corpus.Task) *pb.TaskView { return e.views[t] }

// Reset starts one episode or a GRPO group on one task: PlanReset, then
// BuildReset.
func (e *Env) Reset(ctx context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error) {
	p, err := e.PlanReset(req)
	if err != nil {
		return nil, err
	}
	return e.BuildReset(p)
}

// ResetPlan is a validated reset whose episodes are not built yet: it
// knows how large its response will be, so that a server can refuse what
// it could not send before building it.
type ResetPlan struct {
	// Episodes is the number of episodes (the group size).
	Episodes int
	// Size bounds the encoded size of the ResetResponse.
	Size int

	task *corpus.Task
	base *statepb.EpisodeState
	seed uint64
	obs  *pb.Observation // the first observation, shared by the group
	priv *pb.Privileged  // nil unless asked for; shared by the group
}

// PlanReset checks a reset request, picks its task and computes a bound on
// its response's size: every episode of the group is the same but for its
// seed, index, id and token, so one template episode with the widest seed
// and index, and the token of its state, bounds them all.
func (e *Env) PlanReset(req *pb.ResetRequest) (*ResetPlan, error) {
	c, err := e.Corpus(req.GetCorpus())
	if err != nil {
		return nil, err
	}
	seed := rand.Uint64()
	if req.Seed != nil {
		seed = req.GetSeed()
	}
	var task *corpus.Task
	if id := req.GetTaskId(); id != "" {
		if task, err = e.Task(c.Name, id); err != nil {
			return nil, err
		}
	} else {
		pool := e.splits[c][req.GetSplit()]
		if p := req.GetOptions().GetProtocol(); p == pb.Protocol_PROTOCOL_BIRD_C || p == pb.Protocol_PROTOCOL_BIRD_A {
			// BIRD-Interact's protocols play tasks with a follow-up only.
			pool = e.twoPhase[c][req.GetSplit()]
			if len(pool) == 0 {
				return nil, errorf(NotFound, ReasonNoTasks, "split", "corpus %q has no task with a follow-up in split %q (%s needs two sub-tasks)", c.Name, req.GetSplit(), p)
			}
		} else if isTide(p) {
			// TIDE's protocols draw from TIDE's samples (those TIDE_P
			// serves, under TIDE_P); a task id may name any task they serve.
			pool = e.tide[p][c][req.GetSplit()]
			if len(pool) == 0 {
				return nil, errorf(NotFound, ReasonNoTasks, "split", "corpus %q has no TIDE sample that %s serves in split %q", c.Name, p, req.GetSplit())
			}
		}
		if len(pool) == 0 {
			return nil, errorf(NotFound, ReasonNoTasks, "split", "corpus %q has no task in split %q", c.Name, req.GetSplit())
		}
		task = pool[mix(seed)%uint64(len(pool))]
	}
	n := int(req.GetGroupSize())
	if n == 0 {
		n = 1
	}
	if n < 0 || n > MaxGroupSize {
		return nil, errorf(InvalidArgument, ReasonInvalidOption, "group_size", "%d is outside 0..%d", n, MaxGroupSize)
	}
	base, err := e.newState(task, req.GetOptions())
	if err != nil {
		return nil, err
	}
	p := &ResetPlan{Episodes: n, task: task, base: base, seed: seed}
	if sqlRequired(base) {
		base.Phase = pb.Phase_PHASE_SOLVING // BIRD_C with one turn
	}
	p.obs = &pb.Observation{
		Task:  e.views[task],
		Turns: []*pb.Turn{{Role: pb.Role_ROLE_ENVIRONMENT, Kind: pb.TurnKind_TURN_KIND_REQUEST, Text: task.Request}},
	}
	if base.Prefilled > 0 {
		p.obs.Turns = append(p.obs.Turns, tidePrefill(base)...)
	}
	observe(p.obs, base, new(pb.Budget))
	if req.GetIncludePrivileged() {
		p.priv = resetPrivileged(task)
	}
	// The template: the widest seed and group index there are.
	widest := proto.Clone(base).(*statepb.EpisodeState)
	widest.Seed, widest.GroupIndex = math.MaxUint64, int32(n-1)
	tok := e.cfg.Sealer.TokenSize(widest.SizeVT())
	tmpl := &pb.Episode{
		Seed:        math.MaxUint64,
		GroupIndex:  int32(n - 1),
		EpisodeId:   episodeID(task, math.MaxUint64),
		Observation: p.obs,
		Privileged:  p.priv,
	}
	one := tmpl.SizeVT() + protowire.SizeTag(1) + protowire.SizeBytes(tok)
	p.Size = n * (protowire.SizeTag(1) + protowire.SizeBytes(one))
	return p, nil
}

// BuildReset seals and builds the planned episodes.
func (e *Env) BuildReset(p *ResetPlan) (*pb.ResetResponse, error) {
	resp := &pb.ResetResponse{Episodes: make([]*pb.Episode, p.Episodes)}
	for i := range p.Episodes {
		st := proto.Clone(p.base).(*statepb.EpisodeState)
		st.Seed = p.seed + uint64(i)
		st.GroupIndex = int32(i)
		tok, err := e.seal(st)
		if err != nil {
			return nil, err
		}
		resp.Episodes[i] = &pb.Episode{
			Token:       tok,
			Seed:        st.Seed,
			GroupIndex:  int32(i),
			EpisodeId:   episodeID(p.task, st.Seed),
			Observation: p.obs,
			Privileged:  p.priv,
		}
	}
	return resp, nil
}

func (e *Env) newState(t *corpus.Task, o *pb.EpisodeOptions) (*statepb.EpisodeState, error) {
	st := &statepb.EpisodeState{
		Version:    stateVersion,
		Corpus:     t.Corpus.Name,
		RecordId:   t.ID,
		RecordHash: t.Hash[:recordHashSize],
		Reward:     pb.RewardType_REWARD_TYPE_QUESTION_F1,
		Solver:     pb.Solver_SOLVER_CLIENT,
		Oracle:     pb.OracleType_ORACLE_TYPE_DETERMINISTIC,
		Phase:      pb.Phase_PHASE_ASKING,
		Status:     pb.EpisodeStatus_EPISODE_STATUS_RUNNING,
		IssuedUnix: e.cfg.Now().Unix(),
	}
	if r := o.GetReward(); r != pb.RewardType_REWARD_TYPE_UNSPECIFIED {
		if _, ok := pb.RewardType_name[int32(r)]; !ok {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.reward", "unknown reward type %d", r)
		}
		st.Reward = r
	}
	if s := o.GetSolver(); s != pb.Solver_SOLVER_UNSPECIFIED {
		if _, ok := pb.Solver_name[int32(s)]; !ok {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.solver", "unknown solver %d", s)
		}
		if s == pb.Solver_SOLVER_LLM && e.cfg.LLMSolver == nil {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.solver", "no solver model is configured on this server (serve --solver-url)")
		}
		st.Solver = s
	}
	if k := o.GetOracle(); k != pb.OracleType_ORACLE_TYPE_UNSPECIFIED {
		if e.cfg.Oracles[k] == nil {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.oracle", "oracle %s is not available on this server", k)
		}
		st.Oracle = k
	}
	st.StrictCredit = o.GetStrictCredit()
	if err := resolveProtocol(t, o, st); err != nil {
		return nil, err
	}
	if st.Protocol != pb.Protocol_PROTOCOL_AMBITAB {
		return st, nil // its budget is set
	}
	extra, zero := int32(DefaultExtraQuestions), int32(DefaultZeroAmbiguityBudget)
	if o != nil && o.ExtraQuestions != nil {
		extra = o.GetExtraQuestions()
		if extra < 0 || extra > MaxExtraQuestions {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.extra_questions", "%d is outside 0..%d", extra, MaxExtraQuestions)
		}
	}
	if o != nil && o.ZeroAmbiguityBudget != nil {
		zero = o.GetZeroAmbiguityBudget()
		if zero < 0 || zero > MaxExtraQuestions {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.zero_ambiguity_budget", "%d is outside 0..%d", zero, MaxExtraQuestions)
		}
	}
	if m := int32(len(t.Counted())); m > 0 {
		st.Budget = m + extra
	} else {
		st.Budget = zero
	}
	return st, nil
}

// Step applies one action. The old token stays valid: stepping it again
// with the same action gives the same result, and with another action
// forks the episode.
func (e *Env) Step(ctx context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	st, task, err := e.open(req.GetToken())
	if err != nil {
		return nil, err
	}
	// One allocation holds the episode, the response, its observation and
	// the turns a step can add (a step is the hot path; see bench/).
	ep := &episode{env: e, st: st, task: task, priv: req.GetIncludePrivileged()}
	ep.out = &ep.resp
	ep.out.Observation = &ep.obs
	ep.obs.Turns = ep.turnPtrs[:0]
	if ep.priv {
		ep.out.Privileged = &pb.Privileged{AvtId: task.AVTID, Interpretation: task.Interpretation}
	}
	if err := ep.apply(ctx, req.GetAction()); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		// The call's own deadline passed mid-step: what ran may have been
		// cut short, so nothing is scored; the client retries the token.
		return nil, err
	}
	ep.finish()
	if ep.out.Token, err = e.seal(st); err != nil {
		return nil, err
	}
	return ep.out, nil
}

const stateVersion = 1

// buffers recycles the plaintext buffers of opening tokens: every step
// opens one.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// recordHashSize is how much of a task's content hash a token keeps:
// 128 bits tell a changed record apart, and every byte is sent twice per
// step.
const recordHashSize = 16

func (e *Env) seal(st *statepb.EpisodeState) ([]byte, error) {
	n := st.SizeVT()
	if n > e.maxState {
		// Unreachable while limits.go's arithmetic covers every field.
		return nil, errorf(Internal, ReasonInternal, "", "the episode state is %d bytes, more than the bound of %d (env/limits.go)", n, e.maxState)
	}
	// The generated (non-reflective) vtprotobuf codec writes the state
	// straight into the token: reflection-based proto.Marshal was one of
	// the largest costs of a step (bench/RESULTS.md).
	var err error
	tok := e.cfg.Sealer.SealFunc(n, func(buf []byte) {
		_, err = st.MarshalToSizedBufferVT(buf)
	})
	if err != nil {
		return nil, errorf(Internal, ReasonInternal, "", "serialising episode state: %v", err)
	}
	return tok, nil
}

func (e *Env) open(token []byte) (*statepb.EpisodeState, *corpus.Task, error) {
	if len(token) == 0 {
		return nil, nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "the episode token is missing")
	}
	if len(token) > e.maxToken {
		// Checked before decrypting: no token this server seals is longer.
		return nil, nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "episode token is %d bytes, longer than any token this server issues (%d)", len(token), e.maxToken)
	}
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	if cap(*bp) < len(token) {
		// Big enough for any plaintext of this token, so that Open never
		// reallocates and the pooled slice keeps its whole capacity.
		*bp = make([]byte, 0, 2*len(token))
	}
	plain, err := e.cfg.Sealer.OpenAppend(*bp, token)
	if err != nil {
		return nil, nil, err
	}
	st := &statepb.EpisodeState{}
	// UnmarshalVT copies strings and bytes out of plain, so the buffer can
	// go back to the pool.
	if err := st.UnmarshalVT(plain); err != nil {
		return nil, nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "episode state does not decode: %v", err)
	}
	if st.Version != stateVersion {
		return nil, nil, errorf(FailedPrecondition, ReasonTokenMalformed, "token", "episode state version %d is not supported (want %d)", st.Version, stateVersion)
	}
	if e.cfg.Oracles[st.Oracle] == nil || st.Solver == pb.Solver_SOLVER_LLM && e.cfg.LLMSolver == nil {
		// Sealed by a server configured otherwise that shares the key (a
		// replica, or this one before a restart): stepping it would call a
		// nil oracle or solver.
		return nil, nil, errorf(FailedPrecondition, ReasonInvalidOption, "token", "the episode's oracle (%s) or solver (%s) is not available on this server", st.Oracle, st.Solver)
	}
	if ttl := e.cfg.TokenTTL; ttl > 0 && e.cfg.Now().Sub(time.Unix(st.IssuedUnix, 0)) > ttl {
		return nil, nil, errorf(FailedPrecondition, ReasonTokenExpired, "token", "the episode was reset more than %s ago", ttl)
	}
	c, ok := e.corpora[st.Corpus]
	if !ok {
		return nil, nil, errorf(FailedPrecondition, ReasonRecordChanged, "token", "corpus %q is no longer served", st.Corpus)
	}
	t, ok := c.Task(st.RecordId)
	if !ok {
		return nil, nil, errorf(FailedPrecondition, ReasonRecordChanged, "token", "task %q is no longer in corpus %q", st.RecordId, st.Corpus)
	}
	if string(t.Hash[:recordHashSize]) != string(st.RecordHash) {
		return nil, nil, errorf(FailedPrecondition, ReasonRecordChanged, "token", "task %q changed since the episode was reset", st.RecordId)
	}
	return st, t, nil
}

// mix is SplitMix64's finaliser: it spreads consecutive seeds over the
// whole range before they pick a task or break a tie.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func episodeID(t *corpus.Task, seed uint64) string {
	return t.Corpus.Name + "/" + t.ID + "/" + strconv.FormatUint(seed, 10)
}

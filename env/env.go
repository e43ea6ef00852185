// Package env owns avtgym's episodes: the rules of every protocol
// (AMBITAB's ask-then-solve, BIRD-Interact's BIRD_C and BIRD_A, TIDE's
// TIDE_F and TIDE_P; PROTOCOL.md §2, §8, §9, §11), task selection,
// budgets, phases and terminal statuses, the fixed solvers (lookup, LLM),
// BIRD_A's tools, the oracle service's checks, and the sealed tokens that
// carry each episode's whole state between calls, so that the server
// holds none. Each protocol is one rules value (protocol.go) with its own
// state message; the moves they share are in episode.go, and the numbers
// of every reward come from package reward.
//
// env speaks the wire on purpose: Reset, Step, Ask and the listings take
// and return the avtgym.v1 messages themselves (observations, actions,
// rewards), so that the server is a thin adapter and audit can drive
// episodes in process exactly as the server does. What env keeps behind
// interfaces it declares is technology: the oracles (Oracle), the solver
// model (Solver), and the SQL engines (through corpus and sqlexec).
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
	// TaskIDKey keys the opaque public ids of TIDE samples (publicid.go);
	// empty means a key derived from each corpus.
	TaskIDKey []byte
}

// Env runs episodes. It holds no per-episode state and is safe for
// concurrent use.
type Env struct {
	// corpusHashes caches each corpus's content hash, by name
	// (corpus.Corpus.ContentHash): the corpora are fixed for the Env's
	// life.
	corpusHashes sync.Map
	cfg          Config
	corpora      map[string]*corpus.Corpus
	views        map[*corpus.Task]*pb.TaskView
	// public and byPublic map tasks to their public ids and back
	// (publicid.go).
	public   map[*corpus.Task]string
	byPublic map[*corpus.Corpus]map[string]*corpus.Task
	// pools holds, per protocol, corpus and split ("": all), the tasks a
	// reset without a task id draws from (rules.draws).
	pools map[pb.Protocol]map[*corpus.Corpus]map[string][]*corpus.Task
	// commitments caches TIDE's commitment sets (tide.go).
	commitments commitSets
	// maxState bounds every state seal writes, maxHistory every history,
	// and maxToken every token open reads (limits.go); maxStep bounds one
	// StepResponse.
	maxState, maxHistory, maxToken, maxStep int
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
		cfg:         cfg,
		corpora:     map[string]*corpus.Corpus{},
		views:       map[*corpus.Task]*pb.TaskView{},
		public:      map[*corpus.Task]string{},
		byPublic:    map[*corpus.Corpus]map[string]*corpus.Task{},
		pools:       map[pb.Protocol]map[*corpus.Corpus]map[string][]*corpus.Task{},
		commitments: newCommitSets(),
	}
	for _, c := range cfg.Corpora {
		if _, dup := e.corpora[c.Name]; dup {
			return nil, errorf(Internal, ReasonInternal, "", "env: two corpora are named %q", c.Name)
		}
		e.corpora[c.Name] = c
		ids, by, err := publicIDs(cfg, c)
		if err != nil {
			return nil, err
		}
		e.byPublic[c] = by
		for _, t := range c.Tasks {
			e.public[t] = ids[t]
			e.views[t] = PublicView(t)
			e.views[t].TaskId = ids[t]
			e.maxState = max(e.maxState, StateBound(len(c.Name), len(t.ID)))
			e.maxStep = max(e.maxStep, StepResponseBound(t))
		}
		for _, p := range protocols {
			if e.pools[p] == nil {
				e.pools[p] = map[*corpus.Corpus]map[string][]*corpus.Task{}
			}
			e.pools[p][c] = pools(c, rulesOf(p))
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
	e.maxHistory = historyBound
	e.maxToken = TokenBound(longest(func(t *corpus.Task) int { return len(t.Corpus.Name) }), longest(func(t *corpus.Task) int { return len(t.ID) }))
	return e, nil
}

// pools sorts the tasks of c that r draws by split ("": all of them).
func pools(c *corpus.Corpus, r rules) map[string][]*corpus.Task {
	out := map[string][]*corpus.Task{}
	for _, t := range c.Tasks {
		if !r.draws(t) {
			continue
		}
		out[""] = append(out[""], t)
		if t.Split != "" {
			out[t.Split] = append(out[t.Split], t)
		}
	}
	return out
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

// Task returns a task by corpus and id: its public id (PublicID) or its
// record id.
func (e *Env) Task(corpusName, id string) (*corpus.Task, error) {
	c, err := e.Corpus(corpusName)
	if err != nil {
		return nil, err
	}
	if t, ok := e.byPublic[c][id]; ok {
		return t, nil
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
	base *statepb.EpisodeState // every episode's state but for its seed and index
	hist history               // the group's history: the pre-filled questions, sealed once
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
	} else if task, err = e.draw(c, req, seed); err != nil {
		return nil, err
	}
	n := int(req.GetGroupSize())
	if n == 0 {
		n = 1
	}
	if n < 0 || n > MaxGroupSize {
		return nil, errorf(InvalidArgument, ReasonInvalidOption, "group_size", "%d is outside 0..%d", n, MaxGroupSize)
	}
	tags, err := checkTags(req.GetTags())
	if err != nil {
		return nil, err
	}
	p := &ResetPlan{Episodes: n, task: task, seed: seed}
	base, err := e.newState(task, req.GetOptions(), &p.hist)
	if err != nil {
		return nil, err
	}
	base.Tags = tags
	p.base = base
	p.obs = &pb.Observation{Task: e.views[task], Turns: openingTurns(task, base, p.hist.added)}
	// The pre-filled questions are the same for the whole group: their
	// chunks are sealed once, and every episode's token copies them.
	p.hist.sealAdded(e.cfg.Sealer, base)
	observe(p.obs, base, rulesOf(base.Protocol), new(pb.Budget))
	if req.GetIncludePrivileged() {
		p.priv = e.TaskPrivileged(task)
	}
	// The template: the widest seed and group index there are (BuildReset
	// sets each episode's own).
	base.Seed, base.GroupIndex = math.MaxUint64, int32(n-1)
	base.UidHi, base.UidLo = math.MaxUint64, math.MaxUint64 // fixed64: any value is as wide
	tok := e.cfg.Sealer.TokenSize(base.SizeVT(), len(p.hist.sealed))
	tmpl := &pb.Episode{
		Seed:        math.MaxUint64,
		GroupIndex:  int32(n - 1),
		EpisodeId:   e.episodeID(task, math.MaxUint64),
		EpisodeUid:  uidString(base.UidHi, base.UidLo),
		Observation: p.obs,
		Privileged:  p.priv,
	}
	one := tmpl.SizeVT() + protowire.SizeTag(1) + protowire.SizeBytes(tok)
	p.Size = n * (protowire.SizeTag(1) + protowire.SizeBytes(one))
	return p, nil
}

// openingTurns are a reset's turns: the request, then the questions the
// environment pre-filled (ROLE_PREFILLED) with their answers.
func openingTurns(t *corpus.Task, st *statepb.EpisodeState, qs []answered) []*pb.Turn {
	turns := []*pb.Turn{{Role: pb.Role_ROLE_ENVIRONMENT, Kind: pb.TurnKind_TURN_KIND_REQUEST, Text: t.Request}}
	for _, q := range qs[:min(len(qs), max(0, int(st.Prefilled)))] {
		turns = append(turns,
			&pb.Turn{Role: pb.Role_ROLE_PREFILLED, Kind: pb.TurnKind_TURN_KIND_QUESTION, Text: q.question},
			&pb.Turn{Role: pb.Role_ROLE_ORACLE, Kind: pb.TurnKind_TURN_KIND_REPLY, Text: q.reply})
	}
	return turns
}

// BuildReset seals and builds the planned episodes. It seals the plan's
// one state once per episode, setting the episode's seed and index before
// each seal (a group's states differ in nothing else), so a plan is built
// by one goroutine at a time.
func (e *Env) BuildReset(p *ResetPlan) (*pb.ResetResponse, error) {
	resp := &pb.ResetResponse{Episodes: make([]*pb.Episode, p.Episodes)}
	st := p.base
	for i := range p.Episodes {
		st.Seed = p.seed + uint64(i)
		st.GroupIndex = int32(i)
		st.UidHi, st.UidLo = newUID()
		tok, err := e.seal(st, &p.hist)
		if err != nil {
			return nil, err
		}
		resp.Episodes[i] = &pb.Episode{
			Token:       tok,
			Seed:        st.Seed,
			GroupIndex:  int32(i),
			EpisodeId:   e.episodeID(p.task, st.Seed),
			EpisodeUid:  uidString(st.UidHi, st.UidLo),
			Observation: p.obs,
			Privileged:  p.priv,
		}
	}
	return resp, nil
}

// newState resolves a reset's options on task t: the shared ones here
// (reward, solver, oracle, strict credit), the protocol's by its rules.
func (e *Env) newState(t *corpus.Task, o *pb.EpisodeOptions, h *history) (*statepb.EpisodeState, error) {
	st := &statepb.EpisodeState{
		Version:    stateVersion,
		Corpus:     t.Corpus.Name,
		RecordId:   t.ID,
		Reward:     pb.RewardType_REWARD_TYPE_QUESTION_F1,
		Solver:     pb.Solver_SOLVER_CLIENT,
		Oracle:     pb.OracleType_ORACLE_TYPE_DETERMINISTIC,
		Phase:      pb.Phase_PHASE_ASKING,
		Status:     pb.EpisodeStatus_EPISODE_STATUS_RUNNING,
		IssuedUnix: e.cfg.Now().Unix(),
	}
	st.RecordHashHi, st.RecordHashLo = recordHash(t)
	if err := e.resolveShared(o, st); err != nil {
		return nil, err
	}
	p := protocolOf(o)
	r := rulesOf(p)
	if r == nil {
		return nil, errorf(InvalidArgument, ReasonInvalidOption, "options.protocol", "unknown protocol %d", p)
	}
	st.Protocol = p
	if err := r.resolve(t, o, st, h); err != nil {
		return nil, err
	}
	return st, nil
}

// resolveShared checks the options every protocol reads (reward, solver,
// oracle, strict credit) and records them in st.
func (e *Env) resolveShared(o *pb.EpisodeOptions, st *statepb.EpisodeState) error {
	if r := o.GetReward(); r != pb.RewardType_REWARD_TYPE_UNSPECIFIED {
		if _, ok := pb.RewardType_name[int32(r)]; !ok {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.reward", "unknown reward type %d", r)
		}
		st.Reward = r
	}
	if s := o.GetSolver(); s != pb.Solver_SOLVER_UNSPECIFIED {
		if _, ok := pb.Solver_name[int32(s)]; !ok {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.solver", "unknown solver %d", s)
		}
		if s == pb.Solver_SOLVER_LLM && e.cfg.LLMSolver == nil {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.solver", "no solver model is configured on this server (serve --solver-url)")
		}
		st.Solver = s
	}
	if k := o.GetOracle(); k != pb.OracleType_ORACLE_TYPE_UNSPECIFIED {
		if e.cfg.Oracles[k] == nil {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.oracle", "oracle %s is not available on this server", k)
		}
		st.Oracle = k
	}
	st.StrictCredit = o.GetStrictCredit()
	st.Comparison = pb.Comparison_COMPARISON_SOUND
	if c := o.GetComparison(); c != pb.Comparison_COMPARISON_UNSPECIFIED {
		if _, ok := pb.Comparison_name[int32(c)]; !ok {
			return errorf(InvalidArgument, ReasonInvalidOption, "options.comparison", "unknown comparison %d", c)
		}
		st.Comparison = c
	}
	return nil
}

// rejectBirdOptions refuses the options only BIRD_C and BIRD_A read.
func rejectBirdOptions(o *pb.EpisodeOptions, p pb.Protocol) error {
	if o.GetFollowUpState() != pb.FollowUpState_FOLLOW_UP_STATE_UNSPECIFIED {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.follow_up_state", "follow_up_state applies to PROTOCOL_BIRD_C and PROTOCOL_BIRD_A only, not %s", p)
	}
	if o.GetBirdVariant() != pb.BirdVariant_BIRD_VARIANT_UNSPECIFIED {
		return errorf(InvalidArgument, ReasonInvalidOption, "options.bird_variant", "bird_variant applies to PROTOCOL_BIRD_C and PROTOCOL_BIRD_A only, not %s", p)
	}
	return nil
}

// Step applies one action. The old token stays valid: stepping it again
// with the same action gives the same result, and with another action
// forks the episode.
func (e *Env) Step(ctx context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	// One allocation holds the episode, its decoded state, the response,
	// its observation and the turns a step can add (a step is the hot
	// path; see bench/).
	ep := &episode{env: e, priv: req.GetIncludePrivileged()}
	task, err := e.openInto(req.GetToken(), &ep.state)
	if err != nil {
		return nil, err
	}
	ep.st, ep.hist, ep.task, ep.rules = &ep.state.st, &ep.state.hist, task, rulesOf(ep.state.st.Protocol)
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
	if ep.st.Phase == pb.Phase_PHASE_DONE {
		// The step that ends the episode authenticates its whole history
		// (once per episode, not per step): no token whose history was
		// altered is scored, even where no step read the texts.
		if err := ep.hist.verify(e.cfg.Sealer, ep.st); err != nil {
			return nil, err
		}
	}
	ep.finish()
	if ep.out.Token, err = e.seal(ep.st, ep.hist); err != nil {
		return nil, err
	}
	return ep.out, nil
}

// mix is SplitMix64's finaliser: it spreads consecutive seeds over the
// whole range before they pick a task or break a tie.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// episodeID is an episode's id for logs: corpus, public task id, seed
// (Episode.episode_id).
func (e *Env) episodeID(t *corpus.Task, seed uint64) string {
	return t.Corpus.Name + "/" + e.PublicID(t) + "/" + strconv.FormatUint(seed, 10)
}

// EpisodeID is the Episode.episode_id of the episode of t with this seed.
func (e *Env) EpisodeID(t *corpus.Task, seed uint64) string { return e.episodeID(t, seed) }

// CorpusHash is the content hash of the served corpus named name
// (corpus.Corpus.ContentHash, CorpusInfo.content_hash), computed once; ""
// for a corpus not served.
func (e *Env) CorpusHash(name string) string {
	if h, ok := e.corpusHashes.Load(name); ok {
		return h.(string)
	}
	c, ok := e.corpora[name]
	if !ok {
		return ""
	}
	h := c.ContentHash()
	e.corpusHashes.Store(name, h)
	return h
}

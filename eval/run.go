package eval

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"avtgym/driver"
	"avtgym/internal/parallel"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/record"
)

// File names inside a run directory.
const (
	// EpisodesFile holds one JSON Episode per line, appended as episodes
	// finish.
	EpisodesFile = record.EvalFile
	// RunFile records the settings that must not change between reruns
	// into the same directory (corpus, asker, solver, donor seed).
	RunFile = "run.json"
	// DonorsFile maps each evaluated task to its spec-randomization donor
	// (written when the asker_spec condition runs).
	DonorsFile = "donors.json"
)

// AllConditions lists every condition in report order.
var AllConditions = []Condition{None, Asker, AskerStrict, Full, FullAdv, NoneAdv, AskerSpec}

// ParseCondition checks a condition name.
func ParseCondition(s string) (Condition, error) {
	for _, c := range AllConditions {
		if string(c) == s {
			return c, nil
		}
	}
	return "", fmt.Errorf("unknown condition %q (want none, asker, asker_strict, full, full_adv, none_adv or asker_spec)", s)
}

// ParseOracle maps an oracle name (deterministic, llm, llm_scoped, hybrid,
// or any other type the generated enum knows, such as test_credit_all) to
// its type, case-insensitively.
func ParseOracle(s string) (pb.OracleType, error) {
	name := strings.ToLower(strings.TrimSpace(s))
	if name == "" || name == "unspecified" {
		return 0, fmt.Errorf("unknown oracle %q", s)
	}
	v, ok := pb.OracleType_value["ORACLE_TYPE_"+strings.ToUpper(name)]
	if !ok {
		var known []string
		for k, n := range pb.OracleType_value {
			if n != 0 {
				known = append(known, strings.ToLower(strings.TrimPrefix(k, "ORACLE_TYPE_")))
			}
		}
		sort.Strings(known)
		return 0, fmt.Errorf("unknown oracle %q (want one of %s)", s, strings.Join(known, ", "))
	}
	return pb.OracleType(v), nil
}

// OracleName is the lower-case name of an oracle type, as Episode.Oracle
// records it.
func OracleName(o pb.OracleType) string {
	if o == pb.OracleType_ORACLE_TYPE_UNSPECIFIED {
		return "deterministic"
	}
	return strings.ToLower(strings.TrimPrefix(o.String(), "ORACLE_TYPE_"))
}

// Trajectory is one line of a trajectory file (`--asker
// trajectories:FILE`): the questions an external policy asked on one task
// and seed, replayed in order before STOP. Condition is "asker" (the
// default when empty) or "asker_spec" (the policy was shown the donor's
// specification, see DonorsFile). The asker_strict condition replays the
// asker trajectories: the same questions, credited by the strict rule.
type Trajectory struct {
	// TaskID is the task the questions were asked on.
	TaskID string `json:"task_id"`
	// Seed is the evaluation seed of the episode.
	Seed uint64 `json:"seed"`
	// Condition is asker (when empty) or asker_spec.
	Condition Condition `json:"condition,omitempty"`
	// Questions are asked in order; then the runner stops.
	Questions []string `json:"questions"`
}

// Trajectories is an asker that replays a trajectory file: the questions
// an external policy asked on each task and seed, per condition. It is a
// policy.Player; make one with LoadTrajectories.
type Trajectories struct {
	name string
	m    map[trajKey][]string
}

type trajKey struct {
	task string
	seed uint64
	cond Condition
}

// Name implements policy.Player.
func (tr *Trajectories) Name() string { return tr.name }

// Play implements policy.Player: it asks the questions recorded for the
// episode's task and seed, under asker_spec when the episode shows a
// donor's specification (else asker's, which asker_strict replays too),
// then stops.
func (tr *Trajectories) Play(ctx context.Context, ep *driver.Episode) error {
	cond := Asker
	if ep.Shown() {
		cond = AskerSpec
	}
	task, seed := ep.Reset().GetObservation().GetTask().GetTaskId(), ep.Reset().GetSeed()
	qs, ok := tr.m[trajKey{task, seed, cond}]
	if !ok {
		return &policy.AskerError{Err: fmt.Errorf("the trajectory file has no %s trajectory for task %s seed %d", cond, task, seed)}
	}
	return policy.Ask(ctx, ep, qs)
}

// LoadTrajectories reads a trajectory file (JSON lines of Trajectory) into
// an asker that replays it.
func LoadTrajectories(path string) (*Trajectories, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a := &Trajectories{name: "trajectories:" + filepath.Base(path), m: map[trajKey][]string{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var t Trajectory
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if t.Condition == "" {
			t.Condition = Asker
		}
		if t.TaskID == "" || (t.Condition != Asker && t.Condition != AskerSpec) {
			return nil, fmt.Errorf("%s:%d: a trajectory needs a task_id and a condition of asker or asker_spec (asker_strict replays the asker trajectories)", path, line)
		}
		a.m[trajKey{t.TaskID, t.Seed, t.Condition}] = append([]string(nil), t.Questions...)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return a, nil
}

// Config says what to evaluate.
type Config struct {
	// Corpus is the corpus name; empty means the server's first.
	Corpus string
	// Split restricts the evaluated tasks to one split.
	Split string
	// Limit keeps the first Limit tasks (corpus order); 0 means all.
	Limit int
	// Asker plays the asker, asker_strict and asker_spec conditions (a
	// scripted policy, the LLM asker, or Trajectories); nil means
	// policy.Partial, an asker of mixed quality under which a leaky
	// responder shows in ΔJ_resp.
	Asker policy.Player
	// Oracles are the oracle types to run; none means deterministic.
	Oracles []pb.OracleType
	// Seeds are the evaluation seeds; none means {0}.
	Seeds []uint64
	// DonorSeed fixes the spec-randomization donors (PROTOCOL.md §5).
	DonorSeed uint64
	// Conditions to run; none means AllConditions. When the corpus has a
	// single database, asker_spec cannot run and is dropped with a
	// warning.
	Conditions []Condition
	// Solver writes the SQL at STOP: SOLVER_LOOKUP (the default) or
	// SOLVER_LLM. Every episode uses the outcome reward. Under BIRD_C the
	// policy writes the SQL: Solver must be left unset.
	Solver pb.Solver
	// Protocol is the episodes' protocol (PROTOCOL.md §11): AMBITAB (the
	// default; unset means it), BIRD_C or BIRD_A, under which only the tasks with a
	// follow-up are evaluated, the episodes take BIRD-Interact's reward, the
	// conditions are asker (default) and full, no oracle is added for
	// leakage diagnostics, and the report gives phase-1 and phase-2 SR and
	// the mean and normalised reward. Under TIDE_F and TIDE_P only TIDE's
	// samples are evaluated (TaskSummary.sample_type set; under TIDE_P the
	// chain-only and joint ones), the asker condition only (default asker:
	// the scripted chain-aware baseline), and the report gives TIDE-Bench's
	// metrics (TideReport). A server that refuses a protocol stops the run
	// with its reason.
	Protocol pb.Protocol
	// Patience is BIRD_C's patience in turns, or BIRD_A's in coins (nil:
	// the server's default).
	Patience *int32
	// Comparison is how the episodes compare a submission with the
	// reference on records whose comparison is BIRD-Interact's default
	// test (records imported from BIRD-Interact; others ignore it).
	// Unset means COMPARISON_HARNESS, the harness's exact rules, so that an
	// evaluation's numbers are comparable with BIRD-Interact's paper; set
	// COMPARISON_SOUND for avtgym's sound variant (the server's default,
	// which rollouts and training keep). Every protocol sends it.
	Comparison pb.Comparison
	// Dir is the run directory (created when missing).
	Dir string
	// Concurrency bounds the episodes in flight; 0 means 16.
	Concurrency int
	// Retries is how many times an episode that could not be scored (the
	// server's ERROR, a failed call, the asker's endpoint) is played again
	// before it is recorded: 0 means 2, a negative value none. A flaky
	// endpoint must not lower SR; what still fails is recorded, and the
	// report counts it as a failure (AmbiTab §C.2).
	Retries int
	// RetryDelay is the pause before the first retry, doubled before each
	// later one; 0 means 500ms.
	RetryDelay time.Duration
	// Progress, when set, is called once with the number of cells to play
	// (Start) and after each played episode (Done).
	Progress ProgressSink
	// Warn receives warnings; nil discards them.
	Warn io.Writer
	// Replay says that the run replays response caches (the server's
	// --llm-cache, the asker's) with the model endpoints possibly down
	// (eval --llm-replay). Otherwise the pre-flight makes sure that the
	// endpoints answer, whatever the caches hold: its question is one no
	// cache can hold, and the asker's endpoint must answer its Ping.
	Replay bool
	// Tags are sealed into every episode of the run (ResetRequest.tags)
	// and written with its record (eval --tag).
	Tags map[string]string

	// server is the server build and corpus hash the records carry (set
	// by Run).
	server *driver.ServerInfo
}

// ProgressSink follows a run. *Progress implements it.
type ProgressSink interface {
	// Start is called once: total cells to play, skipped ones already in
	// the run directory.
	Start(total, skipped int)
	// Done is called after each finished episode.
	Done()
}

// Result tells what a run did.
type Result struct {
	// Cells is the number of (task, condition, oracle, seed) cells planned.
	Cells int
	// Skipped cells were already in the run directory.
	Skipped int
	// Played episodes were played and appended by this call.
	Played int
	// Failed counts the played episodes that could not be scored
	// (RPC_FAILED, ASKER_FAILED or the server's ERROR) after their retries:
	// the report counts each as a failure.
	Failed int
	// Retried counts the retries played (each a whole episode).
	Retried int
	// Donors maps each evaluated task to its donor (asker_spec only).
	Donors map[string]string
	// SkippedTasks counts the tasks of the corpus (and split) the protocol
	// does not serve: under BIRD_C those without a follow-up.
	SkippedTasks int
}

// Key identifies an episode's cell: results are resumed by it.
func Key(e *Episode) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%d", e.TaskID, e.Condition, e.Oracle, e.Seed)
}

// runSettings are recorded in RunFile and must match on reruns.
type runSettings struct {
	Corpus    string `json:"corpus"`
	Asker     string `json:"asker"`
	Solver    string `json:"solver"`
	DonorSeed uint64 `json:"donor_seed"`
	// Protocol and Patience are left out for ambitab (so that earlier
	// run directories match).
	Protocol string `json:"protocol,omitempty"`
	Patience *int32 `json:"patience,omitempty"`
	// Comparison is the episodes' comparison (driver.ComparisonName). A
	// directory made before the option existed has none: its episodes
	// used the server's default, sound.
	Comparison string `json:"comparison,omitempty"`
}

func (s runSettings) equal(o runSettings) bool {
	a, b := s, o
	a.Patience, b.Patience = nil, nil
	a.Comparison, b.Comparison = a.comparison(), b.comparison()
	if a != b || (s.Patience == nil) != (o.Patience == nil) {
		return false
	}
	return s.Patience == nil || *s.Patience == *o.Patience
}

func (s runSettings) String() string {
	p := "default"
	if s.Patience != nil {
		p = fmt.Sprint(*s.Patience)
	}
	return fmt.Sprintf("{corpus %q, asker %q, solver %q, donor seed %d, protocol %s, patience %s, comparison %s}", s.Corpus, s.Asker, s.Solver, s.DonorSeed, protocolOrDefault(s.Protocol), p, s.comparison())
}

// comparison is the settings' comparison, sound for a directory made
// before the option existed (the server's default then and now).
func (s runSettings) comparison() string {
	if s.Comparison == "" {
		return driver.ComparisonName(pb.Comparison_COMPARISON_SOUND)
	}
	return s.Comparison
}

// cell is one episode to play.
type cell struct {
	task   *pb.TaskSummary
	cond   Condition
	oracle pb.OracleType
	seed   uint64
}

// donorInfo is what a spec-randomized asker is shown.
type donorInfo struct {
	id    string
	view  *pb.TaskView
	terms []string
}

// Run plays every cell of cfg not already in cfg.Dir and appends the
// episodes to Dir/episodes.jsonl as they finish. When ctx ends, the
// episodes in flight are dropped (they are played again on the next run)
// and Run returns ctx's error with the partial result.
func Run(ctx context.Context, c pb.EnvServiceClient, cfg Config) (*Result, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	tasks, err := policy.ListTasks(ctx, c, cfg.Corpus, cfg.Split)
	if err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, fmt.Errorf("eval: no task matches corpus %q split %q", cfg.Corpus, cfg.Split)
	}
	res := &Result{}
	tasks, res.SkippedTasks = policy.ProtocolTasks(tasks, cfg.Protocol)
	if driver.IsTide(cfg.Protocol) {
		if len(tasks) == 0 {
			return nil, fmt.Errorf("eval: no task of corpus %q split %q is one %s serves: %s", cfg.Corpus, cfg.Split, driver.ProtocolName(cfg.Protocol), policy.ServedTasks(cfg.Protocol))
		}
		if res.SkippedTasks > 0 {
			fmt.Fprintf(cfg.Warn, "eval: %s serves only %s: %d task(s) skipped\n", driver.ProtocolName(cfg.Protocol), policy.ServedTasks(cfg.Protocol), res.SkippedTasks)
		}
	} else {
		if len(tasks) == 0 {
			return nil, fmt.Errorf("eval: no task of corpus %q split %q has a follow-up, which %s needs", cfg.Corpus, cfg.Split, driver.ProtocolName(cfg.Protocol))
		}
		if res.SkippedTasks > 0 {
			fmt.Fprintf(cfg.Warn, "eval: %s serves only tasks with a follow-up: %d task(s) without one skipped\n", driver.ProtocolName(cfg.Protocol), res.SkippedTasks)
		}
	}
	if cfg.Limit > 0 && len(tasks) > cfg.Limit {
		tasks = tasks[:cfg.Limit]
	}
	if tc, ok := cfg.Asker.(policy.TaskChecker); ok && (slices.Contains(cfg.Conditions, Asker) || slices.Contains(cfg.Conditions, AskerStrict)) {
		if err := tc.CheckTasks(tasks); err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
	}
	corpus := tasks[0].GetCorpus()
	oracles, err := ListOracleMap(ctx, c)
	if err != nil {
		return nil, err
	}
	all, added, err := oracles.complete(cfg.Oracles)
	if err != nil {
		return nil, err
	}
	if !cfg.ambitab() {
		// No leakage diagnostics: only the requested oracles run.
		all, added = cfg.Oracles, nil
	}
	if len(added) > 0 {
		fmt.Fprintf(cfg.Warn, "eval: also running %s: the oracles the requested ones' leakage diagnostics compare with (hybrid: ΔJ_resp, ΔRec_spec^Q; reference: ΔJ_full, ΔRec_none)\n", strings.Join(added, ", "))
	}
	cfg.Oracles = all
	if err := cfg.preflight(ctx, driver.Remote(c), tasks[0]); err != nil {
		return nil, err
	}
	if err := cfg.checkDir(corpus); err != nil {
		return nil, err
	}
	if err := writeJSONFile(filepath.Join(cfg.Dir, OraclesFile), oracles); err != nil {
		return nil, err
	}
	if !cfg.ambitab() {
		info := RunInfo{Protocol: driver.ProtocolName(cfg.Protocol), Patience: cfg.Patience, Tasks: len(tasks), Skipped: res.SkippedTasks, Asker: cfg.Asker.Name()}
		if err := writeJSONFile(filepath.Join(cfg.Dir, RunInfoFile), info); err != nil {
			return nil, err
		}
	}
	donors, err := cfg.donors(ctx, c, corpus, tasks, res)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(cfg.Dir, EpisodesFile)
	cells, err := cfg.plan(path, tasks, res)
	if err != nil {
		return nil, err
	}
	if cfg.Progress != nil {
		cfg.Progress.Start(len(cells), res.Skipped)
	}
	if len(cells) == 0 {
		return res, nil
	}
	cfg.server = driver.ServerInfoFor(ctx, c, corpus)
	return res, cfg.play(ctx, driver.Remote(c), corpus, cells, donors, path, res)
}

// defaults fills cfg's defaults and checks what needs no server.
func (cfg *Config) defaults() error {
	if cfg.Dir == "" {
		return errors.New("eval: no run directory")
	}
	if len(cfg.Oracles) == 0 {
		cfg.Oracles = []pb.OracleType{pb.OracleType_ORACLE_TYPE_DETERMINISTIC}
	}
	if len(cfg.Seeds) == 0 {
		cfg.Seeds = []uint64{0}
	}
	if cfg.Protocol == pb.Protocol_PROTOCOL_AMBITAB {
		cfg.Protocol = pb.Protocol_PROTOCOL_UNSPECIFIED
	}
	if !cfg.ambitab() {
		if err := cfg.protocolDefaults(); err != nil {
			return err
		}
	} else {
		if cfg.Patience != nil {
			return errors.New("eval: patience applies to the bird-c and bird-a protocols only")
		}
		if len(cfg.Conditions) == 0 {
			cfg.Conditions = AllConditions
		}
		if cfg.Solver == pb.Solver_SOLVER_UNSPECIFIED {
			cfg.Solver = pb.Solver_SOLVER_LOOKUP
		}
		if cfg.Solver != pb.Solver_SOLVER_LOOKUP && cfg.Solver != pb.Solver_SOLVER_LLM {
			return fmt.Errorf("eval: solver %s cannot run unattended (want lookup or llm)", cfg.Solver)
		}
	}
	if cfg.Comparison == pb.Comparison_COMPARISON_UNSPECIFIED {
		cfg.Comparison = pb.Comparison_COMPARISON_HARNESS
	}
	if _, ok := pb.Comparison_name[int32(cfg.Comparison)]; !ok {
		return fmt.Errorf("eval: unknown comparison %d", cfg.Comparison)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 16
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = 2
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 500 * time.Millisecond
	}
	if cfg.Warn == nil {
		cfg.Warn = io.Discard
	}
	if cfg.Asker == nil {
		cfg.Asker = policy.Partial()
	}
	return nil
}

// ambitab reports whether the run plays AMBITAB (the default protocol).
func (cfg *Config) ambitab() bool {
	return cfg.Protocol == pb.Protocol_PROTOCOL_UNSPECIFIED || cfg.Protocol == pb.Protocol_PROTOCOL_AMBITAB
}

// BirdCConditions are the conditions a bird-c run can play: the asker
// (which must write SQL: scripted full or the wrong-reading policy; an
// asker that writes none scores 0) and full, which submits the references.
var BirdCConditions = []Condition{Asker, Full}

// protocolDefaults fills the defaults of a run under another protocol
// than AMBITAB (the rest of defaults is done).
func (cfg *Config) protocolDefaults() error {
	if cfg.Solver != pb.Solver_SOLVER_UNSPECIFIED && cfg.Solver != pb.Solver_SOLVER_CLIENT {
		return fmt.Errorf("eval: under %s the policy writes the SQL: no solver (not %s)", driver.ProtocolName(cfg.Protocol), solverName(cfg.Solver))
	}
	cfg.Solver = pb.Solver_SOLVER_UNSPECIFIED
	if len(cfg.Conditions) == 0 {
		cfg.Conditions = []Condition{Asker}
	}
	if driver.IsTide(cfg.Protocol) {
		return cfg.tideDefaults()
	}
	for _, c := range cfg.Conditions {
		if !slices.Contains(BirdCConditions, c) {
			return fmt.Errorf("eval: the %s condition does not run under %s (want asker or full: the others measure AMBITAB's leakage and credit rules)", c, driver.ProtocolName(cfg.Protocol))
		}
	}
	if cfg.Asker == nil {
		cfg.Asker = policy.Scripted(probe.Full)
	}
	return nil
}

// options are the episode options of a cell under oracle o (for the
// asker_strict condition, cellOptions adds strict credit).
func (cfg *Config) options(o pb.OracleType) *pb.EpisodeOptions {
	if cfg.ambitab() {
		return &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: cfg.Solver, Oracle: o, Comparison: cfg.Comparison}
	}
	return &pb.EpisodeOptions{Protocol: cfg.Protocol, Patience: cfg.Patience, Oracle: o, Comparison: cfg.Comparison}
}

// cellOptions are the episode options of cell cl: its oracle's, with
// strict credit under the asker_strict condition (the only difference
// between the asker and asker_strict cells of a task and seed).
func (cfg *Config) cellOptions(cl cell) *pb.EpisodeOptions {
	opts := cfg.options(cl.oracle)
	opts.StrictCredit = cl.cond == AskerStrict
	return opts
}

// preflight plays one short episode per requested oracle on task (a
// generic question, then STOP, with the run's solver) and checks the
// asker (policy.Preflighter), so that an oracle, solver or asker the run
// cannot use stops it with one message instead of failing every cell. A
// failure is tried again like an episode (Retries).
//
// The check must reach the endpoints: a response cache that holds the
// pre-flight's question (an earlier run's) would answer it with the
// endpoint down and let the run go ahead, every cell the cache lacks then
// failing. So, unless the run replays (Replay), the question carries a
// nonce no cache holds (preflightQuestion); with Replay it is the plain
// generic question, which a recorded run asked, and the asker is not
// pinged.
func (cfg *Config) preflight(ctx context.Context, env driver.Env, task *pb.TaskSummary) error {
	if p, ok := cfg.Asker.(policy.Preflighter); ok && !cfg.Replay {
		if err := p.Preflight(ctx); err != nil {
			return fmt.Errorf("eval: pre-flight: the asker %s is unavailable (its model endpoint does not answer; --llm-replay replays its cache without it): %w", cfg.Asker.Name(), err)
		}
	}
	q := probe.Generic1
	if !cfg.Replay {
		q = preflightQuestion(time.Now())
	}
	var probeQ policy.Player = policy.Replay("preflight", []string{q})
	if driver.IsTide(cfg.Protocol) {
		probeQ = tidePreflight{question: q}
	}
	if !cfg.ambitab() {
		if err := policy.CheckOptions(ctx, env, task, cfg.options(cfg.Oracles[0])); err != nil {
			return fmt.Errorf("eval: pre-flight: %w", err)
		}
	}
	for _, o := range cfg.Oracles {
		seed := uint64(0)
		reset := &pb.ResetRequest{
			Corpus: task.GetCorpus(), TaskId: task.GetTaskId(), Seed: &seed, IncludePrivileged: true,
			Options: cfg.options(o),
		}
		r := policy.PlayOne(ctx, env, probeQ, reset)
		// Only the server's ERROR may be transient; a refused option is not.
		for try := 0; r.Status == "ERROR" && try < cfg.Retries && ctx.Err() == nil; try++ {
			if sleep(ctx, cfg.RetryDelay<<try) != nil {
				break
			}
			r = policy.PlayOne(ctx, env, probeQ, reset)
		}
		if !r.Scored() {
			how := "the " + solverName(cfg.Solver) + " solver"
			if !cfg.ambitab() {
				how = "protocol " + driver.ProtocolName(cfg.Protocol)
			}
			hint := ""
			if r.Status == "ERROR" {
				hint = " — " + failedPart(r) + " failed"
				if !cfg.Replay {
					hint += " (the pre-flight bypasses the response cache; eval --llm-replay replays a recorded run without the endpoints)"
				}
			}
			return fmt.Errorf("eval: pre-flight: the %s oracle with %s cannot play task %s (%s%s): %s",
				OracleName(o), how, task.GetTaskId(), r.Status, hint, r.Error)
		}
	}
	return nil
}

// preflightQuestion is the pre-flight's question outside a replay: the
// generic question with a nonce (the time), so that no response cache
// holds it and the oracle's (and the solver's) endpoint must answer.
func preflightQuestion(now time.Time) string {
	return fmt.Sprintf("%s (pre-flight %d)", probe.Generic1, now.UnixNano())
}

// failedPart names the part of the server whose failure ended an ERROR
// episode, from its privileged reason (the server's verifier reason,
// "the oracle failed: …"), as the server's notice names it.
func failedPart(r *driver.Record) string {
	switch e := r.Error; {
	case strings.HasPrefix(e, "the oracle"):
		return "the oracle endpoint"
	case strings.HasPrefix(e, "the solver"):
		return "the solver endpoint"
	case strings.HasPrefix(e, "the verifier"), strings.HasPrefix(e, "the database"):
		return "the database"
	}
	return "the environment"
}

// solverName is the lower-case name of a solver, as run.json records it.
func solverName(s pb.Solver) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "SOLVER_"))
}

// checkDir creates the run directory and checks that an earlier run in it
// had the same settings.
func (cfg *Config) checkDir(corpus string) error {
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return err
	}
	askerName := ""
	if cfg.Asker != nil {
		askerName = cfg.Asker.Name()
	}
	s := runSettings{Corpus: corpus, Asker: askerName, Solver: solverName(cfg.Solver), DonorSeed: cfg.DonorSeed, Comparison: driver.ComparisonName(cfg.Comparison)}
	if !cfg.ambitab() {
		s.Solver = "client"
		s.Protocol, s.Patience = driver.ProtocolName(cfg.Protocol), cfg.Patience
	}
	return checkSettings(filepath.Join(cfg.Dir, RunFile), s)
}

// donors draws and fetches the spec-randomization donors when asker_spec
// runs (dropping the condition, with a warning, when no donor can exist),
// records them in res and DonorsFile.
func (cfg *Config) donors(ctx context.Context, c pb.EnvServiceClient, corpus string, tasks []*pb.TaskSummary, res *Result) (map[string]*donorInfo, error) {
	if !slices.Contains(cfg.Conditions, AskerSpec) {
		return nil, nil
	}
	all, err := policy.ListTasks(ctx, c, corpus, "")
	if err != nil {
		return nil, err
	}
	assign, err := AssignDonors(ctx, c, corpus, tasks, all, cfg.DonorSeed)
	if errors.Is(err, errNoDonor) {
		fmt.Fprintf(cfg.Warn, "eval: %v: the asker_spec condition is skipped\n", err)
		cfg.Conditions = slices.DeleteFunc(slices.Clone(cfg.Conditions), func(c Condition) bool { return c == AskerSpec })
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	res.Donors = assign
	donors, err := fetchDonors(ctx, c, corpus, assign)
	if err != nil {
		return nil, err
	}
	return donors, writeJSONFile(filepath.Join(cfg.Dir, DonorsFile), assign)
}

// plan lists the cells still to play: every (task, seed, oracle,
// condition) not already scored in the results file at path.
func (cfg *Config) plan(path string, tasks []*pb.TaskSummary, res *Result) ([]cell, error) {
	done, err := finishedKeys(path)
	if err != nil {
		return nil, err
	}
	var cells []cell
	for _, t := range tasks {
		for _, seed := range cfg.Seeds {
			for _, o := range cfg.Oracles {
				for _, cond := range cfg.Conditions {
					res.Cells++
					k := Key(&Episode{Record: driver.Record{TaskID: t.GetTaskId(), Seed: seed}, Condition: cond, Oracle: OracleName(o)})
					if done[k] {
						res.Skipped++
						continue
					}
					cells = append(cells, cell{task: t, cond: cond, oracle: o, seed: seed})
				}
			}
		}
	}
	return cells, nil
}

// play plays the cells, appending each finished episode to the results
// file at path as it finishes. Episodes cut short by ctx are not written
// (they are played again next time); the error is ctx's, or the write's.
func (cfg *Config) play(ctx context.Context, env driver.Env, corpus string, cells []cell, donors map[string]*donorInfo, path string, res *Result) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var mu sync.Mutex
	var retried atomic.Int64
	err = parallel.For(ctx, len(cells), cfg.Concurrency, func(ctx context.Context, i int) error {
		ep := playCell(ctx, env, *cfg, corpus, cells[i], donors)
		for try := 0; !ep.Scored() && try < cfg.Retries && ctx.Err() == nil; try++ {
			if sleep(ctx, cfg.RetryDelay<<try) != nil {
				break
			}
			retried.Add(1)
			ep = playCell(ctx, env, *cfg, corpus, cells[i], donors)
		}
		if ctx.Err() != nil && !ep.Scored() {
			return nil // cut short by the cancellation: played again next time
		}
		ep.Writer, ep.Server = "eval", cfg.server
		line, err := json.Marshal(ep)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if _, err := f.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("eval: writing %s: %w", path, err)
		}
		res.Played++
		if !ep.Scored() {
			res.Failed++
		}
		if cfg.Progress != nil {
			cfg.Progress.Done()
		}
		return nil
	})
	res.Retried += int(retried.Load())
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkSettings writes the run's settings on the first run and checks them
// on later ones.
func checkSettings(path string, s runSettings) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return writeJSONFile(path, s)
	}
	if err != nil {
		return err
	}
	var old runSettings
	if err := json.Unmarshal(b, &old); err != nil {
		return fmt.Errorf("eval: %s: %w", path, err)
	}
	if !old.equal(s) {
		return fmt.Errorf("eval: the run directory was made with other settings (%s: %v, now %v): use another --out", path, old, s)
	}
	return nil
}

func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

var errNoDonor = errors.New("no record on another database to draw a donor from")

// GroupKey is the spec-randomization group of a record: its database and
// its sorted distinct counted terms.
func GroupKey(db string, countedTerms []string) string {
	terms := slices.Clone(countedTerms)
	sort.Strings(terms)
	terms = slices.Compact(terms)
	return db + "\x00" + strings.Join(terms, "\x1f")
}

// DrawDonors assigns one donor per group (PROTOCOL.md §5): groups maps a
// record to its GroupKey, dbOf maps each record to its database, and
// candidates lists the corpus's records in corpus order. Each group draws
// uniformly among the candidates on a different database with a generator
// seeded by the donor seed and the group key alone, so that the draw does
// not depend on which other groups are evaluated or on the evaluation
// seeds.
func DrawDonors(groups map[string]string, dbOf map[string]string, candidates []string, donorSeed uint64) (map[string]string, error) {
	perGroup := map[string]string{}
	out := map[string]string{}
	for task, key := range groups {
		d, ok := perGroup[key]
		if !ok {
			db := dbOf[task]
			var pool []string
			for _, c := range candidates {
				if dbOf[c] != db {
					pool = append(pool, c)
				}
			}
			if len(pool) == 0 {
				return nil, fmt.Errorf("%w (task %s, database %s)", errNoDonor, task, db)
			}
			h := fnv.New64a()
			h.Write([]byte(key))
			r := rand.New(rand.NewPCG(donorSeed, h.Sum64()))
			d = pool[r.IntN(len(pool))]
			perGroup[key] = d
		}
		out[task] = d
	}
	return out, nil
}

// AssignDonors computes the donors of the evaluated tasks: it reads each
// task's counted terms with a privileged reset, groups the tasks, and
// draws donors from all, the corpus's records (DrawDonors).
func AssignDonors(ctx context.Context, c pb.EnvServiceClient, corpus string, tasks, all []*pb.TaskSummary, donorSeed uint64) (map[string]string, error) {
	dbOf := map[string]string{}
	var candidates []string
	for _, t := range all {
		dbOf[t.GetTaskId()] = t.GetDatabase()
		candidates = append(candidates, t.GetTaskId())
	}
	for _, t := range tasks {
		dbOf[t.GetTaskId()] = t.GetDatabase()
	}
	terms := make([][]string, len(tasks))
	err := parallel.For(ctx, len(tasks), 16, func(ctx context.Context, i int) error {
		p, err := privileged(ctx, c, corpus, tasks[i].GetTaskId())
		terms[i] = driver.CountedTerms(p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("eval: reading counted terms: %w", err)
	}
	groups := map[string]string{}
	for i, t := range tasks {
		groups[t.GetTaskId()] = GroupKey(t.GetDatabase(), terms[i])
	}
	return DrawDonors(groups, dbOf, candidates, donorSeed)
}

// privileged resets a task with the privileged channel, for its terms.
func privileged(ctx context.Context, env pb.EnvServiceClient, corpus, task string) (*pb.Privileged, error) {
	seed := uint64(0)
	rr, err := env.Reset(ctx, &pb.ResetRequest{Corpus: corpus, TaskId: task, Seed: &seed, IncludePrivileged: true})
	if err != nil {
		return nil, err
	}
	if len(rr.GetEpisodes()) == 0 {
		return nil, fmt.Errorf("reset %s: no episode", task)
	}
	return rr.GetEpisodes()[0].GetPrivileged(), nil
}

// fetchDonors reads what each donor's spec-randomized asker is shown: its
// public task view, and its counted terms (for the scripted askers).
func fetchDonors(ctx context.Context, c pb.EnvServiceClient, corpus string, assign map[string]string) (map[string]*donorInfo, error) {
	var ids []string
	for _, d := range assign {
		if !slices.Contains(ids, d) {
			ids = append(ids, d)
		}
	}
	sort.Strings(ids)
	infos := make([]*donorInfo, len(ids))
	err := parallel.For(ctx, len(ids), 16, func(ctx context.Context, i int) error {
		gt, err := c.GetTask(ctx, &pb.GetTaskRequest{Corpus: corpus, TaskId: ids[i]})
		if err != nil {
			return err
		}
		p, err := privileged(ctx, c, corpus, ids[i])
		if err != nil {
			return err
		}
		infos[i] = &donorInfo{id: ids[i], view: gt.GetTask(), terms: driver.CountedTerms(p)}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("eval: reading donors: %w", err)
	}
	out := map[string]*donorInfo{}
	for task, d := range assign {
		out[task] = infos[slices.Index(ids, d)]
	}
	return out, nil
}

// playCell plays one cell and returns its episode (failed ones included).
func playCell(ctx context.Context, env driver.Env, cfg Config, corpus string, cl cell, donors map[string]*donorInfo) *Episode {
	seed := cl.seed
	reset := &pb.ResetRequest{
		Corpus: corpus, TaskId: cl.task.GetTaskId(), Seed: &seed, IncludePrivileged: true,
		Options: cfg.cellOptions(cl), Tags: cfg.Tags,
	}
	out := &Episode{Condition: cl.cond, Oracle: OracleName(cl.oracle)}
	// Every record says the comparison it asked for, a failed reset's
	// (policy.Failed) too.
	defer func() { out.Comparison = driver.ComparisonName(cfg.Comparison) }()
	var donor *donorInfo
	if cl.cond == AskerSpec {
		if donor = donors[cl.task.GetTaskId()]; donor == nil {
			out.Record = *policy.Failed(reset, &policy.AskerError{Err: errors.New("no donor assigned")})
			return out.label(cl)
		}
		out.Donor = donor.id
	}
	player := cfg.Asker // asker, asker_strict (the same player), asker_spec
	if cl.cond != Asker && cl.cond != AskerStrict && cl.cond != AskerSpec {
		player = policy.Scripted(probe.Name(cl.cond)) // none, full, full_adv, none_adv
	}
	tally := &unreadableTally{Env: env}
	ep, err := driver.Start(ctx, tally, reset)
	if err != nil {
		out.Record = *policy.Failed(reset, err)
		return out.label(cl)
	}
	if donor != nil {
		ep.Show(donor.view, donor.terms)
	}
	out.Record = *policy.Finish(ep, player.Play(ctx, ep))
	out.UnreadableOracle, out.UnreadableSolver = tally.oracle, tally.solver
	return out.label(cl)
}

// label fills what the cell knows and the record may lack (a failed
// reset's database and split).
func (e *Episode) label(cl cell) *Episode {
	if e.DB == "" {
		e.DB = cl.task.GetDatabase()
	}
	if e.Split == "" {
		e.Split = cl.task.GetSplit()
	}
	if e.SampleType == "" {
		e.SampleType = cl.task.GetSampleType()
	}
	return e
}

// finishedKeys reads the keys of the scored episodes of a results file
// (failed ones are played again). A truncated last line, left by a crash,
// is cut off so that appends start on a fresh line.
func finishedKeys(path string) (map[string]bool, error) {
	eps, err := readEpisodes(path, true)
	if err != nil {
		return nil, err
	}
	done := map[string]bool{}
	for i := range eps {
		if eps[i].Scored() {
			done[Key(&eps[i])] = true
		}
	}
	return done, nil
}

// ReadEpisodes reads a results file (or the EpisodesFile of a run
// directory). Where a cell appears more than once (a failed episode played
// again), the last line wins; the order is that of the cells' first lines.
// A truncated last line is ignored.
func ReadEpisodes(path string) ([]Episode, error) {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		path = filepath.Join(path, EpisodesFile)
	}
	return readEpisodes(path, false)
}

func readEpisodes(path string, repair bool) ([]Episode, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var (
		eps   []Episode
		index = map[string]int{}
		off   int
	)
	for off < len(b) {
		end := bytes.IndexByte(b[off:], '\n')
		complete := end >= 0
		if !complete {
			end = len(b) - off
		}
		line := bytes.TrimSpace(b[off : off+end])
		var e Episode
		if len(line) > 0 {
			if err := json.Unmarshal(line, &e); err != nil {
				if off+end >= len(b)-1 { // the last line: left by a crash
					if repair {
						if err := os.Truncate(path, int64(off)); err != nil {
							return nil, err
						}
					}
					break
				}
				return nil, fmt.Errorf("%s: bad line at byte %d: %w", path, off, err)
			}
			if !complete && repair { // a whole object without its newline
				if err := appendNewline(path); err != nil {
					return nil, err
				}
			}
			k := Key(&e)
			if i, ok := index[k]; ok {
				eps[i] = e
			} else {
				index[k] = len(eps)
				eps = append(eps, e)
			}
		}
		off += end + 1
	}
	return eps, nil
}

func appendNewline(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte{'\n'}); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

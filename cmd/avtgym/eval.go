package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"avtgym/client"
	"avtgym/driver"
	"avtgym/eval"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// evalCallTimeout is the deadline of each of eval's calls to the server.
const evalCallTimeout = 20 * time.Minute

// ambitabConditions are eval's default conditions under --protocol ambitab
// (the other protocols' default is asker alone): every condition, the
// asker_strict one after asker, so that the report gives the asker's
// precision, recall and F1 under both credit rules.
var ambitabConditions = []string{
	string(eval.None), string(eval.Asker), string(eval.AskerStrict), string(eval.Full),
	string(eval.FullAdv), string(eval.NoneAdv), string(eval.AskerSpec),
}

// evalFlags are the flags of `avtgym eval`.
type evalFlags struct {
	addr, asker, oracles, seeds, conds, solver, out, groups, reference, hybrid string
	comparison                                                                 string
	resamples, retries                                                         int
	bootSeed                                                                   uint64
	progress, quiet, compare                                                   bool
	timeout                                                                    time.Duration
	llmAsker                                                                   askerFlags
	proto                                                                      protocolFlags
	cfg                                                                        eval.Config
}

func (f *evalFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.addr, "server", "127.0.0.1:50051", "server address")
	fs.StringVar(&f.cfg.Corpus, "corpus", "", "corpus name (default: the server's first)")
	fs.StringVar(&f.cfg.Split, "split", "", "only tasks of this split")
	fs.IntVar(&f.cfg.Limit, "limit", 0, "at most this many tasks, in corpus order (0: all)")
	fs.StringVar(&f.asker, "asker", "scripted:partial", "the evaluated asker: scripted:partial (a generic question, then each counted term with probability 1/2, seeded; under it the leakage diagnostics can move), scripted:none|full|full_adv|none_adv, scripted:wrong-reading (asks like full, submits another reading's SQL: --wrong-readings; outcome reward with the client's SQL under ambitab needs --protocol bird-c or bird-a), scripted:explorer (bird-a: each tool once, then as full), llm, or trajectories:FILE (JSON lines of {task_id, seed, [condition,] questions}; asker_strict replays the asker trajectories); under --protocol bird-c and bird-a the default is scripted:full; under tide-f and tide-p the TIDE baselines scripted:chain-aware (the default), chain-blind, none-aware, none-blind, or llm (the TIDE LLM agent)")
	fs.StringVar(&f.oracles, "oracles", "deterministic", "comma-separated oracles: deterministic, llm, llm_scoped, hybrid, hybrid_scoped, or a test oracle; each one's hybrid and the reference are added (the diagnostics compare with them)")
	fs.StringVar(&f.seeds, "seeds", "0", "comma-separated evaluation seeds")
	fs.Uint64Var(&f.cfg.DonorSeed, "donor-seed", 0, "seed of the spec-randomization donor draw (independent of --seeds)")
	fs.StringVar(&f.conds, "conditions", strings.Join(ambitabConditions, ","), "comma-separated conditions (asker_strict: the asker with strict_credit, reported beside its AmbiTab credit; --protocol bird-c or bird-a: asker, full; default asker; tide-f and tide-p: asker only)")
	fs.StringVar(&f.comparison, "comparison", "harness", "how a submission is compared with the reference on records imported from BIRD-Interact (their comparison's harness is bird-interact; other records ignore it): harness (BIRD-Interact's ex_base exactly, quirks included: numbers comparable with the paper's) or sound (avtgym's sound variant, the server's default, which rollouts and training use)")
	fs.StringVar(&f.solver, "solver", "lookup", "who writes the SQL at STOP: lookup or llm (the server's --solver-url); not under --protocol bird-c or bird-a, where the policy writes it")
	fs.StringVar(&f.out, "out", "", "run directory: episodes.jsonl, report.json, report.md, report.html (required)")
	fs.IntVar(&f.resamples, "resamples", 2000, "bootstrap resamples")
	fs.StringVar(&f.groups, "groups", "", "a training run's GRPO groups (JSONL of {reward_type, rewards}); the report gives the fraction of groups whose rewards differ")
	fs.Uint64Var(&f.bootSeed, "bootstrap-seed", 0, "bootstrap seed")
	fs.StringVar(&f.reference, "reference", "", "the reference oracle of the diagnostics (default: the server's, as the run recorded it; else deterministic)")
	fs.StringVar(&f.hybrid, "hybrid", "", "one hybrid oracle for the ΔJ_resp and ΔRec_spec^Q of every oracle but the reference (default: each oracle's own hybrid, as the server listed it)")
	fs.IntVar(&f.cfg.Concurrency, "concurrency", 16, "episodes in flight")
	fs.IntVar(&f.retries, "retries", 2, "play an episode that could not be scored (the server's ERROR, a failed call) again up to this many times before recording it; an ERROR that remains counts as a failure")
	fs.BoolVar(&f.progress, "progress", false, "draw the progress bar even when stderr is not a terminal")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress bar and no warnings")
	fs.BoolVar(&f.compare, "compare", false, "eval --compare RUN_A RUN_B [--out DIR]: compare two eval output directories (no server) on the (task, seed, condition, oracle) both played: per condition and oracle, SR, F1, recall, precision and reward of each, the paired difference B − A with a task-level paired bootstrap interval (--resamples, --bootstrap-seed), the tasks that improved and regressed most; prints Markdown, and with --out writes compare.md, compare.json and compare.html there")
	fs.DurationVar(&f.timeout, "timeout", 0, "give up after this long (0: no limit); rerun to resume")
	fs.Var((*tagFlag)(&f.cfg.Tags), "tag", tagUsage)
	fs.BoolVar(&f.cfg.Replay, "llm-replay", false, "replay recorded model calls (the server's --llm-cache, the asker's --llm-cache): the pre-flight does not need the model endpoints to answer; without it the pre-flight reaches every endpoint, whatever the caches hold")
	f.llmAsker.register(fs, "--asker llm")
	f.proto.register(fs)
}

// config checks the flags and fills the run's configuration (all but the
// asker).
func (f *evalFlags) config() error {
	if f.out == "" {
		return errors.New("--out DIR is required")
	}
	f.cfg.Dir = f.out
	var opts pb.EpisodeOptions
	if err := f.proto.options(&opts); err != nil {
		return err
	}
	f.cfg.Protocol, f.cfg.Patience = opts.GetProtocol(), opts.Patience
	ambitab := f.cfg.Protocol == pb.Protocol_PROTOCOL_UNSPECIFIED
	tide := driver.IsTide(f.cfg.Protocol)
	if !ambitab {
		if !f.proto.set["conditions"] {
			f.conds = string(eval.Asker)
		}
		if !f.proto.set["asker"] {
			f.asker = "scripted:" + string(probe.Full)
			if tide {
				f.asker = "scripted:" + eval.DefaultTideAsker
			}
		}
		if f.proto.set["solver"] {
			return fmt.Errorf("--solver does not apply to --protocol %s: the policy writes the SQL", f.proto.protocol)
		}
	}
	if tide {
		if err := f.tideFlags(); err != nil {
			return err
		}
	}
	allowed, want := eval.BirdCConditions, "asker or full"
	if tide {
		allowed, want = eval.TideConditions, "asker only: the evaluated TIDE policy"
	}
	for _, s := range splitList(f.oracles) {
		o, err := eval.ParseOracle(s)
		if err != nil {
			return err
		}
		f.cfg.Oracles = append(f.cfg.Oracles, o)
	}
	for _, s := range splitList(f.seeds) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("bad seed %q", s)
		}
		f.cfg.Seeds = append(f.cfg.Seeds, v)
	}
	for _, s := range splitList(f.conds) {
		c, err := eval.ParseCondition(s)
		if err != nil {
			return err
		}
		if !ambitab && !slices.Contains(allowed, c) {
			return fmt.Errorf("the %s condition does not run under --protocol %s (want %s)", c, f.proto.protocol, want)
		}
		f.cfg.Conditions = append(f.cfg.Conditions, c)
	}
	if len(f.cfg.Oracles) == 0 || len(f.cfg.Seeds) == 0 || len(f.cfg.Conditions) == 0 {
		return errors.New("--oracles, --seeds and --conditions must not be empty")
	}
	switch {
	case !ambitab:
	case f.solver == "lookup":
		f.cfg.Solver = pb.Solver_SOLVER_LOOKUP
	case f.solver == "llm":
		f.cfg.Solver = pb.Solver_SOLVER_LLM
	default:
		return fmt.Errorf("unknown solver %q (want lookup or llm)", f.solver)
	}
	c, err := driver.ParseComparison(f.comparison)
	if err != nil {
		return fmt.Errorf("--comparison: %w", err)
	}
	f.cfg.Comparison = c
	if f.resamples < 1 {
		return errors.New("--resamples must be positive")
	}
	switch {
	case f.retries < 0:
		return errors.New("--retries must not be negative")
	case f.retries == 0:
		f.cfg.Retries = -1 // eval.Config: negative means none
	default:
		f.cfg.Retries = f.retries
	}
	return nil
}

// tideFlagRules says why a flag does not apply under --protocol tide-f
// and tide-p.
var tideFlagRules = []struct{ flag, why string }{
	{"donor-seed", "--donor-seed applies to --protocol ambitab (the asker_spec condition's donors)"},
	{"reference", "--reference applies to --protocol ambitab (the leakage diagnostics)"},
	{"hybrid", "--hybrid applies to --protocol ambitab (the leakage diagnostics)"},
	{"wrong-readings", "--wrong-readings is the wrong-reading policy's, which does not play TIDE (use scripted:chain-blind or none-blind for a policy that misses the drift)"},
	{"asker-style", "--asker-style is the ambitab LLM asker's (the TIDE LLM agent has its own prompt)"},
}

// tideFlags rejects the flags that do not apply under TIDE's protocols.
func (f *evalFlags) tideFlags() error {
	for _, r := range tideFlagRules {
		if f.proto.set[r.flag] {
			return fmt.Errorf("%s, not to --protocol %s", r.why, f.proto.protocol)
		}
	}
	return nil
}

// tidePlayer is the TIDE policy --asker names under tide-f and tide-p.
func (f *evalFlags) tidePlayer() (policy.Player, func(), error) {
	want := "want scripted:" + strings.Join(policy.TidePolicies, ", scripted:") + " or llm (the TIDE LLM agent)"
	switch a := f.asker; {
	case strings.HasPrefix(a, "scripted:"):
		p, err := policy.ParseTidePolicy(strings.TrimPrefix(a, "scripted:"))
		if err != nil {
			return nil, nil, fmt.Errorf("--asker %s does not play --protocol %s (%s)", a, f.proto.protocol, want)
		}
		return p, func() {}, nil
	case a == "llm":
		return f.llmAsker.buildTideAgent("--asker llm")
	case strings.HasPrefix(a, "trajectories:"):
		return nil, nil, fmt.Errorf("--asker %s replays questions only, and a TIDE policy writes its SQL (%s)", a, want)
	}
	return nil, nil, fmt.Errorf("unknown asker %q under --protocol %s (%s)", f.asker, f.proto.protocol, want)
}

// player is the asker --asker names; the function releases what it holds.
func (f *evalFlags) player() (policy.Player, func(), error) {
	if driver.IsTide(f.cfg.Protocol) {
		return f.tidePlayer()
	}
	switch a := f.asker; {
	case strings.HasPrefix(a, "scripted:") && slices.Contains(policy.TidePolicies, strings.TrimPrefix(a, "scripted:")):
		return nil, nil, fmt.Errorf("--asker %s is a TIDE baseline: it plays --protocol tide-f or tide-p", a)
	case a == "scripted:"+policy.PartialName:
		return policy.Partial(), func() {}, nil
	case a == "scripted:"+policy.ExplorerName:
		return policy.Explorer(), func() {}, nil
	case a == "scripted:"+policy.WrongReadingName:
		w, err := f.proto.wrongReading()
		if err != nil {
			return nil, nil, err
		}
		if f.cfg.Protocol == pb.Protocol_PROTOCOL_UNSPECIFIED {
			return nil, nil, fmt.Errorf("--asker scripted:%s writes its own SQL, which eval takes under --protocol bird-c or bird-a only (ambitab's eval uses the lookup or llm solver); use rollout --policy %s for ambitab", policy.WrongReadingName, policy.WrongReadingName)
		}
		return w, func() {}, nil
	case strings.HasPrefix(a, "scripted:"):
		name, err := probe.Parse(strings.TrimPrefix(a, "scripted:"))
		if err != nil {
			return nil, nil, err
		}
		return policy.Scripted(name), func() {}, nil
	case strings.HasPrefix(a, "trajectories:"):
		tr, err := eval.LoadTrajectories(strings.TrimPrefix(a, "trajectories:"))
		if err != nil {
			return nil, nil, err
		}
		return tr, func() {}, nil
	case a == "llm":
		if driver.IsBird(f.cfg.Protocol) {
			return f.llmAsker.buildAgent("--asker llm")
		}
		if f.cfg.Protocol != pb.Protocol_PROTOCOL_UNSPECIFIED {
			return nil, nil, policy.ErrAmbiTabOnly
		}
		asker, closeAsker, err := f.llmAsker.build("--asker llm")
		if err != nil {
			return nil, nil, err
		}
		return asker, closeAsker, nil
	}
	return nil, nil, fmt.Errorf("unknown asker %q (want scripted:NAME, llm or trajectories:FILE)", f.asker)
}

// runEval runs `avtgym eval`: it plays every (task, condition, oracle,
// seed) cell against a server, appending episodes to DIR/episodes.jsonl
// (resumable), then analyzes the run directory and writes DIR/report.json,
// DIR/report.md and DIR/report.html, printing the Markdown to stdout.
// Under AMBITAB the default conditions include asker_strict, whose
// precision, recall and F1 the reports give beside the asker's.
func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f evalFlags
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	f.proto.visited(fs)
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "eval: "+format+"\n", a...)
		return code
	}
	if f.compare {
		return f.runCompare(fs, stdout, stderr)
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected arguments %q", fs.Args())
	}
	if err := f.config(); err != nil {
		return fail(2, "%v", err)
	}
	asker, closeAsker, err := f.player()
	if err != nil {
		return fail(2, "%v", err)
	}
	defer closeAsker()
	f.cfg.Asker = asker
	res, err := f.play(ctx, stderr)
	if err != nil {
		if res != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			return fail(1, "%v after %d new episodes; rerun the same command to resume", err, res.Played)
		}
		return fail(1, "%v", err)
	}
	if !f.quiet {
		fmt.Fprintf(stderr, "eval: %d cells: %d played now (%d retries), %d from earlier runs, %d failed\n", res.Cells, res.Played, res.Retried, res.Skipped, res.Failed)
	}
	md, err := f.report()
	if err != nil {
		return fail(1, "%v", err)
	}
	stdout.Write(md)
	if res.Failed > 0 {
		fmt.Fprintf(stderr, "eval: %d episode(s) did not complete after their retries (see their status and error in %s); the report counts each as a failure and shows them in its denominators; rerun to retry them\n", res.Failed, filepath.Join(f.cfg.Dir, eval.EpisodesFile))
		return 1
	}
	return 0
}

// play runs the cells against the server, with a progress bar when wanted.
func (f *evalFlags) play(ctx context.Context, stderr io.Writer) (*eval.Result, error) {
	if !f.quiet {
		f.cfg.Warn = stderr
	}
	var bar *eval.Progress
	if !f.quiet && (f.progress || eval.IsTerminal(stderr)) {
		bar = eval.NewProgress(stderr)
		f.cfg.Progress = bar
	}
	// A step may wait for several model calls, each queued behind others
	// at a slow endpoint (one request at a time) and retried: the call
	// deadline is generous, a backstop for a server that hangs.
	c, err := client.Dial(f.addr, client.Options{CallTimeout: evalCallTimeout})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if f.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.timeout)
		defer cancel()
	}
	res, err := eval.Run(ctx, c.Env, f.cfg)
	if bar != nil {
		bar.Finish()
	}
	return res, err
}

// report analyzes the run directory, writes the three reports there and
// returns the Markdown.
func (f *evalFlags) report() ([]byte, error) {
	eps, err := eval.ReadEpisodes(f.cfg.Dir)
	if err != nil {
		return nil, err
	}
	opt := eval.AnalyzeOptions{Resamples: f.resamples, BootstrapSeed: f.bootSeed}
	om, err := eval.ReadOracleMap(f.cfg.Dir)
	if err != nil {
		return nil, err
	}
	om.Apply(&opt)
	ri, err := eval.ReadRunInfo(f.cfg.Dir)
	if err != nil {
		return nil, err
	}
	ri.Apply(&opt)
	if f.reference != "" {
		opt.Reference = f.reference
	}
	if f.hybrid != "" {
		opt.Hybrid, opt.HybridOf = f.hybrid, nil
	}
	rep, err := eval.Analyze(eps, opt)
	if err != nil {
		return nil, fmt.Errorf("analyze: %w", err)
	}
	if f.groups != "" {
		groups, err := eval.ReadGroups(f.groups)
		if err != nil {
			return nil, fmt.Errorf("groups: %w", err)
		}
		rep.GroupSignal = eval.GroupSignal(groups)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		return nil, err
	}
	writers := []struct {
		name  string
		write func(io.Writer) error
	}{
		{"report.json", rep.WriteJSON},
		{"report.md", func(w io.Writer) error { _, err := w.Write(md.Bytes()); return err }},
		{"report.html", rep.WriteHTML},
	}
	for _, wr := range writers {
		if err := writeFileWith(filepath.Join(f.cfg.Dir, wr.name), wr.write); err != nil {
			return nil, err
		}
	}
	return md.Bytes(), nil
}

// compareFlags are the flags that apply to eval --compare.
var compareFlags = map[string]bool{"compare": true, "out": true, "resamples": true, "bootstrap-seed": true, "quiet": true}

// runCompare runs `avtgym eval --compare RUN_A RUN_B`: it reads two eval
// output directories, compares them (eval.Compare) and prints the
// Markdown; with --out it writes compare.md, compare.json and
// compare.html there. The two directories may come before or among the
// flags (Go's flag package stops at the first argument, so the rest is
// parsed again).
func (f *evalFlags) runCompare(fs *flag.FlagSet, stdout, stderr io.Writer) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "eval --compare: "+format+"\n", a...)
		return code
	}
	var dirs []string
	for args := fs.Args(); len(args) > 0; {
		if strings.HasPrefix(args[0], "-") && args[0] != "-" {
			if err := fs.Parse(args); err != nil {
				return parseExit(err)
			}
			args = fs.Args()
			continue
		}
		dirs = append(dirs, args[0])
		args = args[1:]
	}
	f.proto.visited(fs)
	for name := range f.proto.set {
		if !compareFlags[name] {
			return fail(2, "--%s does not apply to --compare (which reads two run directories: --out, --resamples and --bootstrap-seed apply)", name)
		}
	}
	if len(dirs) != 2 {
		return fail(2, "want two eval output directories, RUN_A RUN_B; got %d %q", len(dirs), dirs)
	}
	if f.resamples < 1 {
		return fail(2, "--resamples must be positive")
	}
	runs := make([]*eval.CompareRun, 2)
	for i, d := range dirs {
		r, err := eval.ReadCompareRun(d)
		if err != nil {
			return fail(1, "RUN_%c %v", 'A'+i, err)
		}
		runs[i] = r
	}
	c, err := eval.Compare(runs[0], runs[1], eval.CompareOptions{Resamples: f.resamples, Seed: f.bootSeed})
	if err != nil {
		return fail(1, "%v", err)
	}
	var md bytes.Buffer
	if err := c.WriteMarkdown(&md); err != nil {
		return fail(1, "%v", err)
	}
	if f.out != "" {
		if err := os.MkdirAll(f.out, 0o755); err != nil {
			return fail(1, "--out: %v", err)
		}
		for _, wr := range []struct {
			name  string
			write func(io.Writer) error
		}{
			{"compare.md", func(w io.Writer) error { _, err := w.Write(md.Bytes()); return err }},
			{"compare.json", c.WriteJSON},
			{"compare.html", c.WriteHTML},
		} {
			if err := writeFileWith(filepath.Join(f.out, wr.name), wr.write); err != nil {
				return fail(1, "%v", err)
			}
		}
	}
	stdout.Write(md.Bytes())
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// writeFileWith writes a file through a temporary name, so that a reader
// never sees half a report.
func writeFileWith(name string, write func(io.Writer) error) error {
	tmp := name + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, name)
}

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
	"strconv"
	"strings"
	"time"

	"avtgym/client"
	"avtgym/eval"
	"avtgym/llm"
	"avtgym/policy"
	pb "avtgym/proto/avtgym/v1"
)

// runEval runs `avtgym eval`: it plays every (task, condition, oracle,
// seed) cell against a server, appending episodes to DIR/episodes.jsonl
// (resumable), then analyzes the run directory and writes DIR/report.json,
// DIR/report.md and DIR/report.html, printing the Markdown to stdout.
func runEval(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("server", "127.0.0.1:50051", "server address")
	var cfg eval.Config
	fs.StringVar(&cfg.Corpus, "corpus", "", "corpus name (default: the server's first)")
	fs.StringVar(&cfg.Split, "split", "", "only tasks of this split")
	fs.IntVar(&cfg.Limit, "limit", 0, "at most this many tasks, in corpus order (0: all)")
	askerFlag := fs.String("asker", "scripted:full", "the evaluated asker: scripted:none|full|full_adv|none_adv, llm, or trajectories:FILE (JSON lines of {task_id, seed, [condition,] questions})")
	oracles := fs.String("oracles", "deterministic", "comma-separated oracles: deterministic, hybrid, llm, llm_scoped, or a test oracle")
	seeds := fs.String("seeds", "0", "comma-separated evaluation seeds")
	fs.Uint64Var(&cfg.DonorSeed, "donor-seed", 0, "seed of the spec-randomization donor draw (independent of --seeds)")
	conds := fs.String("conditions", "none,asker,full,full_adv,none_adv,asker_spec", "comma-separated conditions")
	solverName := fs.String("solver", "lookup", "who writes the SQL at STOP: lookup or llm (the server's --solver-url)")
	out := fs.String("out", "", "run directory: episodes.jsonl, report.json, report.md, report.html (required)")
	resamples := fs.Int("resamples", 2000, "bootstrap resamples")
	groupsFile := fs.String("groups", "", "a training run's GRPO groups (JSONL of {reward_type, rewards}); the report gives the fraction of groups whose rewards differ")
	bootSeed := fs.Uint64("bootstrap-seed", 0, "bootstrap seed")
	reference := fs.String("reference", "deterministic", "the reference oracle of the diagnostics")
	hybrid := fs.String("hybrid", "hybrid", "the hybrid oracle of ΔJ_resp and ΔRec_spec^Q")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "episodes in flight")
	progress := fs.Bool("progress", false, "draw the progress bar even when stderr is not a terminal")
	quiet := fs.Bool("quiet", false, "no progress bar and no warnings")
	timeout := fs.Duration("timeout", 0, "give up after this long (0: no limit); rerun to resume")
	askerURL := fs.String("asker-url", "", "--asker llm: the asker's OpenAI-compatible API root, e.g. http://localhost:8000/v1 (API key from $"+llm.DefaultAPIKeyEnv+")")
	askerModel := fs.String("asker-model", "", "--asker llm: the asker's model name")
	askerStyle := fs.String("asker-style", string(policy.StyleChecklistLedger), "--asker llm: prompt style: direct, checklist_chat or checklist_ledger")
	askerConcurrency := fs.Int("asker-concurrency", llm.DefaultConcurrency, "--asker llm: model calls in flight")
	askerTimeout := fs.Duration("asker-timeout", llm.DefaultTimeout, "--asker llm: deadline of one model call")
	llmCache := fs.String("llm-cache", "", "--asker llm: persistent response cache file (replays recorded calls without the endpoint)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "eval: "+format+"\n", a...)
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected arguments %q", fs.Args())
	}
	if *out == "" {
		return fail(2, "--out DIR is required")
	}
	cfg.Dir = *out
	for _, s := range splitList(*oracles) {
		o, err := eval.ParseOracle(s)
		if err != nil {
			return fail(2, "%v", err)
		}
		cfg.Oracles = append(cfg.Oracles, o)
	}
	for _, s := range splitList(*seeds) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fail(2, "bad seed %q", s)
		}
		cfg.Seeds = append(cfg.Seeds, v)
	}
	for _, s := range splitList(*conds) {
		c, err := eval.ParseCondition(s)
		if err != nil {
			return fail(2, "%v", err)
		}
		cfg.Conditions = append(cfg.Conditions, c)
	}
	if len(cfg.Oracles) == 0 || len(cfg.Seeds) == 0 || len(cfg.Conditions) == 0 {
		return fail(2, "--oracles, --seeds and --conditions must not be empty")
	}
	switch *solverName {
	case "lookup":
		cfg.Solver = pb.Solver_SOLVER_LOOKUP
	case "llm":
		cfg.Solver = pb.Solver_SOLVER_LLM
	default:
		return fail(2, "unknown solver %q (want lookup or llm)", *solverName)
	}
	if *resamples < 1 {
		return fail(2, "--resamples must be positive")
	}

	switch a := *askerFlag; {
	case strings.HasPrefix(a, "scripted:"):
		name, err := policy.ParseName(strings.TrimPrefix(a, "scripted:"))
		if err != nil {
			return fail(2, "%v", err)
		}
		cfg.Asker = eval.ScriptedAsker(name)
	case strings.HasPrefix(a, "trajectories:"):
		asker, err := eval.LoadTrajectories(strings.TrimPrefix(a, "trajectories:"))
		if err != nil {
			return fail(2, "%v", err)
		}
		cfg.Asker = asker
	case a == "llm":
		style, err := policy.ParseAskerStyle(*askerStyle)
		if err != nil {
			return fail(2, "%v", err)
		}
		if *askerURL == "" || *askerModel == "" {
			return fail(2, "--asker llm needs --asker-url and --asker-model")
		}
		if *askerConcurrency <= 0 || *askerTimeout <= 0 {
			return fail(2, "--asker-concurrency and --asker-timeout must be positive")
		}
		lcfg := llm.Config{BaseURL: *askerURL, Model: *askerModel, Concurrency: *askerConcurrency,
			Timeout: *askerTimeout, JSONMode: true, Version: policy.AskerPromptVersion}
		if *llmCache != "" {
			cache, err := llm.OpenFileCache(*llmCache)
			if err != nil {
				return fail(1, "%v", err)
			}
			defer cache.Close()
			lcfg.Cache = cache
		}
		lc, err := llm.New(lcfg, nil)
		if err != nil {
			return fail(2, "%v", err)
		}
		asker, err := policy.NewLLMAsker(lc, style)
		if err != nil {
			return fail(2, "%v", err)
		}
		cfg.Asker = eval.LLMAsker(asker)
	default:
		return fail(2, "unknown asker %q (want scripted:NAME, llm or trajectories:FILE)", a)
	}

	if !*quiet {
		cfg.Warn = stderr
	}
	var bar *eval.Progress
	if !*quiet && (*progress || eval.IsTerminal(stderr)) {
		bar = eval.NewProgress(stderr)
		cfg.Progress = bar
	}
	c, err := client.Dial(*addr, client.Options{CallTimeout: 5 * time.Minute})
	if err != nil {
		return fail(1, "%v", err)
	}
	defer c.Close()
	if *timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *timeout)
		defer cancel()
	}
	res, err := eval.Run(ctx, c, cfg)
	if bar != nil {
		bar.Finish()
	}
	if err != nil {
		if res != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			return fail(1, "%v after %d new episodes; rerun the same command to resume", err, res.Played)
		}
		return fail(1, "%v", err)
	}
	if !*quiet {
		fmt.Fprintf(stderr, "eval: %d cells: %d played now, %d from earlier runs, %d failed\n", res.Cells, res.Played, res.Skipped, res.Failed)
	}

	eps, err := eval.ReadEpisodes(cfg.Dir)
	if err != nil {
		return fail(1, "%v", err)
	}
	rep, err := eval.Analyze(eps, eval.AnalyzeOptions{Resamples: *resamples, BootstrapSeed: *bootSeed, Reference: *reference, Hybrid: *hybrid})
	if err != nil {
		return fail(1, "analyze: %v", err)
	}
	if *groupsFile != "" {
		groups, err := eval.ReadGroups(*groupsFile)
		if err != nil {
			return fail(1, "groups: %v", err)
		}
		rep.GroupSignal = eval.GroupSignal(groups)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		return fail(1, "%v", err)
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
		if err := writeFileWith(filepath.Join(cfg.Dir, wr.name), wr.write); err != nil {
			return fail(1, "%v", err)
		}
	}
	stdout.Write(md.Bytes())
	if res.Failed > 0 {
		fmt.Fprintf(stderr, "eval: %d episode(s) failed (see their error in %s); rerun to retry them\n", res.Failed, filepath.Join(cfg.Dir, eval.EpisodesFile))
		return 1
	}
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

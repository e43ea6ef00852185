package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"avtgym/client"
	"avtgym/driver"
	"avtgym/eval"
	"avtgym/llm"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// rolloutFlags are the flags of `avtgym rollout`.
type rolloutFlags struct {
	addr, policy, reward, solver, oracle, episodesOut string
	json                                              bool
	timeout                                           time.Duration
	asker                                             askerFlags
	proto                                             protocolFlags
	cfg                                               policy.RolloutConfig
}

// protocolFlags choose the episodes' protocol (rollout and eval):
// --protocol, --patience and the wrong-reading policy's --wrong-readings.
type protocolFlags struct {
	protocol, wrongReadings string
	patience                int
	// set records which flags the command line gave (flag.FlagSet.Visit).
	set map[string]bool
}

func (p *protocolFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&p.protocol, "protocol", "ambitab", "interaction protocol: ambitab, bird-c (BIRD-Interact's c-Interact), bird-a (BIRD-Interact's a-Interact: coins, tools; both play only tasks with a follow-up), or tide-f, tide-p (TIDE-Bench's f- and p-protocols: 20 turns, a drift turn after the first SQL on drift samples; tide-f plays TIDE's samples, tide-p its chain-only and joint ones)")
	fs.IntVar(&p.patience, "patience", 3, "bird-c: turns beyond the m counted ambiguities (BIRD-Interact used 0, 3, 5, 7; default: the server's, 3); bird-a: coins beyond 6 + 2m (0, 6, 10, 14; default 6)")
	fs.StringVar(&p.wrongReadings, "wrong-readings", "", "the wrong-reading policy's file of SQL of another reading per task (fixtures/wrong-readings/*.json); required by that policy")
}

// visited records the flags fs's command line set.
func (p *protocolFlags) visited(fs *flag.FlagSet) {
	p.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { p.set[f.Name] = true })
}

// options checks --protocol and --patience and sets them on opts.
func (p *protocolFlags) options(opts *pb.EpisodeOptions) error {
	proto, err := driver.ParseProtocol(p.protocol)
	if err != nil {
		return err
	}
	if proto != pb.Protocol_PROTOCOL_AMBITAB {
		opts.Protocol = proto
	}
	if p.set["patience"] {
		if !driver.IsBird(proto) {
			return fmt.Errorf("--patience applies to --protocol bird-c and bird-a (ambitab's budget is m + extra questions; tide-f's and tide-p's 20 turns)")
		}
		if p.patience < 0 {
			return fmt.Errorf("--patience must not be negative")
		}
		n := int32(p.patience)
		opts.Patience = &n
	}
	return nil
}

// wrongReading loads the wrong-reading policy's file (--wrong-readings).
func (p *protocolFlags) wrongReading() (*policy.WrongReading, error) {
	if p.wrongReadings == "" {
		return nil, fmt.Errorf("the %s policy needs --wrong-readings FILE (such as fixtures/wrong-readings/demo.json)", policy.WrongReadingName)
	}
	return policy.LoadWrongReadings(p.wrongReadings)
}

// askerFlags configure the LLM asker (--policy llm, eval --asker llm).
type askerFlags struct {
	url, model, style, cache string
	concurrency, maxTokens   int
	timeout                  time.Duration
}

func (a *askerFlags) register(fs *flag.FlagSet, when string) {
	fs.StringVar(&a.url, "asker-url", "", when+": the asker's OpenAI-compatible API root, e.g. http://localhost:8000/v1 (API key from $"+llm.DefaultAPIKeyEnv+")")
	fs.StringVar(&a.model, "asker-model", "", when+": the asker's model name")
	fs.StringVar(&a.style, "asker-style", string(policy.DefaultAskerStyle), when+": prompt style: chat (the trainer adapters' prompt), direct, checklist_chat or checklist_ledger")
	fs.IntVar(&a.concurrency, "asker-concurrency", llm.DefaultConcurrency, when+": model calls in flight")
	fs.DurationVar(&a.timeout, "asker-timeout", llm.DefaultTimeout, when+": deadline of one model call")
	fs.IntVar(&a.maxTokens, "asker-max-tokens", llm.DefaultMaxTokens, when+": completion limit (max_tokens) of each model call (a reply cut off at it is asked for again with twice the limit; part of the cache key)")
	fs.StringVar(&a.cache, "llm-cache", "", when+": persistent response cache file (replays recorded calls without the endpoint)")
}

// buildAgent makes the LLM agent of BIRD-Interact's protocols (bird-c,
// bird-a) from the same flags (--asker-style does not apply: the agent has
// one prompt per mode); the returned function closes its cache.
func (a *askerFlags) buildAgent(when string) (*policy.LLMAgent, func(), error) {
	return buildLLMPolicy(a, when, llmPrompt{version: policy.AgentPromptVersion}, policy.NewLLMAgent)
}

// buildTideAgent makes TIDE-Bench's LLM agent (tide-f, tide-p) from the
// same flags (--asker-style does not apply: the agent has TIDE's one
// prompt); the returned function closes its cache.
func (a *askerFlags) buildTideAgent(when string) (*policy.TideAgent, func(), error) {
	return buildLLMPolicy(a, when, llmPrompt{version: policy.TideAgentPromptVersion, jsonMode: true}, policy.NewTideAgent)
}

// build makes the LLM asker; the returned function closes its cache.
func (a *askerFlags) build(when string) (*policy.LLMAsker, func(), error) {
	style, err := policy.ParseAskerStyle(a.style)
	if err != nil {
		return nil, nil, err
	}
	return buildLLMPolicy(a, when, llmPrompt{version: policy.AskerPromptVersion, jsonMode: true},
		func(c *llm.Client) (*policy.LLMAsker, error) { return policy.NewLLMAsker(c, style) })
}

// llmPrompt is what an LLM policy asks of its model client: the version
// of its prompts (part of the response cache's key) and whether it reads
// JSON replies.
type llmPrompt struct {
	version  string
	jsonMode bool
}

// buildLLMPolicy makes an LLM policy (asker or agent) over a model client
// built from the asker flags (when names the flag that asked for it, for
// errors); the returned function closes the client's response cache, which
// is closed already when the policy cannot be made.
func buildLLMPolicy[P any](a *askerFlags, when string, prompt llmPrompt, newPolicy func(*llm.Client) (P, error)) (P, func(), error) {
	var none P
	c, closeCache, err := a.client(when, prompt)
	if err != nil {
		return none, nil, err
	}
	p, err := newPolicy(c)
	if err != nil {
		closeCache()
		return none, nil, err
	}
	return p, closeCache, nil
}

// client makes the model client the asker flags describe, with the
// response cache of --llm-cache when one is given; the returned function
// closes that cache.
func (a *askerFlags) client(when string, prompt llmPrompt) (*llm.Client, func(), error) {
	if a.url == "" || a.model == "" {
		return nil, nil, fmt.Errorf("%s needs --asker-url and --asker-model", when)
	}
	if a.concurrency <= 0 || a.timeout <= 0 || a.maxTokens <= 0 {
		return nil, nil, fmt.Errorf("--asker-concurrency, --asker-timeout and --asker-max-tokens must be positive")
	}
	cfg := llm.Config{BaseURL: a.url, Model: a.model, Concurrency: a.concurrency, Timeout: a.timeout, MaxTokens: a.maxTokens, JSONMode: prompt.jsonMode, Version: prompt.version}
	closeCache := func() {}
	if a.cache != "" {
		cache, err := llm.OpenFileCache(a.cache)
		if err != nil {
			return nil, nil, err
		}
		cfg.Cache, closeCache = cache, func() { cache.Close() }
	}
	c, err := llm.New(cfg, nil)
	if err != nil {
		closeCache()
		return nil, nil, err
	}
	return c, closeCache, nil
}

func runRollout(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f rolloutFlags
	fs := flag.NewFlagSet("rollout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.addr, "server", "127.0.0.1:50051", "server address")
	fs.StringVar(&f.policy, "policy", "", "policy: none, full, full_adv, none_adv (scripted), wrong-reading (asks like full, then submits another reading's SQL: --wrong-readings), explorer (bird-a: calls each tool once, asks like full, submits the references; elsewhere full) or llm (the LLM asker under ambitab; under bird-c and bird-a the LLM agent, one action per turn in BIRD-Interact's agentic grammar; under tide-f and tide-p TIDE-Bench's agent, one JSON object per turn); under tide-f and tide-p: chain-aware, chain-blind, none-aware, none-blind (scripted: asks about the chain's L1 then L2 term, or nothing; after the drift turn submits the post-drift reference, or its first SQL again) or llm (required)")
	f.asker.register(fs, "--policy llm")
	f.proto.register(fs)
	fs.StringVar(&f.cfg.Corpus, "corpus", "", "corpus name (default: the server's first)")
	fs.StringVar(&f.cfg.Split, "split", "", "only tasks of this split")
	fs.IntVar(&f.cfg.Limit, "limit", 0, "at most this many tasks (0: all)")
	fs.Uint64Var(&f.cfg.Seed, "seed", 0, "seed of the first task; task i gets seed+i")
	fs.IntVar(&f.cfg.Concurrency, "concurrency", 16, "episodes in flight")
	fs.StringVar(&f.reward, "reward", "question_f1", "reward: question_f1 or outcome (ambitab; wrong-reading: outcome), bird_interact (bird-c's own, its default)")
	fs.StringVar(&f.solver, "solver", "", "who writes the SQL: lookup (the server's fixed solver; default for the outcome reward), llm (the server's LLM solver: serve --solver-url; it writes the SQL from the dialogue when asking ends, under any reward) or client (the policy: full and full_adv submit the reference, wrong-reading its wrong SQL; its default)")
	fs.StringVar(&f.oracle, "oracle", "", "the episodes' oracle: deterministic (the server's default), llm, llm-scoped, hybrid or hybrid-scoped (the LLM oracles need serve --oracle-url; llm_scoped and hybrid_scoped are the same names), or a test oracle (serve --test-oracles)")
	fs.BoolVar(&f.json, "json", false, "print one JSON summary object")
	fs.StringVar(&f.episodesOut, "episodes-out", "", "write one JSON line per episode to this file (the episode record: schema/episode.v1.json, docs/records.md)")
	fs.Var((*tagFlag)(&f.cfg.Tags), "tag", tagUsage)
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	f.proto.visited(fs)
	opts, err := f.options()
	if err != nil {
		fmt.Fprintln(stderr, "rollout:", err)
		return 2
	}
	f.cfg.Options = opts
	player, closePlayer, err := rolloutPlayer(&f)
	if err != nil {
		fmt.Fprintln(stderr, "rollout:", err)
		return 2
	}
	defer closePlayer()
	f.cfg.Player = player
	if !f.json {
		f.cfg.Progress = progressLine(stderr, "episodes")
		f.cfg.Notice = func(s string) { fmt.Fprintln(stderr, "rollout:", s) }
	}
	c, err := client.Dial(f.addr, client.Options{CallTimeout: time.Minute})
	if err != nil {
		fmt.Fprintln(stderr, "rollout:", err)
		return 1
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	if err := checkOracleServed(ctx, c.Env, opts.GetOracle()); err != nil {
		fmt.Fprintln(stderr, "rollout:", err)
		return 1
	}
	records, err := policy.Rollout(ctx, c.Env, f.cfg)
	server := driver.ServerInfoFor(ctx, c.Env, f.cfg.Corpus)
	for _, r := range records {
		r.Writer, r.Server = "rollout", server
	}
	if err != nil {
		// Out of --timeout: what was played is written all the same (no
		// silent loss of the episodes finished), then the error.
		if f.episodesOut != "" && len(records) > 0 {
			if werr := writeRecords(f.episodesOut, records); werr != nil {
				fmt.Fprintln(stderr, "rollout:", werr)
			} else {
				fmt.Fprintf(stderr, "rollout: %d episode record(s) written to %s before the error\n", len(records), f.episodesOut)
			}
		}
		fmt.Fprintln(stderr, "rollout:", err)
		return 1
	}
	if f.episodesOut != "" {
		if err := writeRecords(f.episodesOut, records); err != nil {
			fmt.Fprintln(stderr, "rollout:", err)
			return 1
		}
	}
	sum := eval.SummarizeRollout(player.Name(), records)
	if driver.IsTide(opts.GetProtocol()) {
		printTideRollout(stdout, sum, f.json)
	} else {
		printRollout(stdout, sum, f.json)
	}
	if sum.Errors > 0 {
		fmt.Fprintf(stderr, "rollout: %d episode(s) failed or ended in ERROR%s\n", sum.Errors, firstFailure(records, f.episodesOut))
		return 1
	}
	return 0
}

// options turns --protocol, --patience, --reward and --solver into
// episode options. Under ambitab the reward defaults to question_f1 (the
// wrong-reading policy's to outcome with the client solver, since it
// writes its own SQL); under the other protocols reward and solver are
// left to the protocol unless given (the server refuses what the protocol
// does not take).
func (f *rolloutFlags) options() (*pb.EpisodeOptions, error) {
	opts := &pb.EpisodeOptions{}
	if err := f.proto.options(opts); err != nil {
		return nil, err
	}
	if f.oracle != "" {
		o, err := parseOracleFlag(f.oracle)
		if err != nil {
			return nil, err
		}
		opts.Oracle = o
	}
	ambitab := opts.GetProtocol() == pb.Protocol_PROTOCOL_UNSPECIFIED
	reward, solver := f.reward, f.solver
	if !f.proto.set["reward"] {
		switch {
		case !ambitab:
			reward = ""
		case f.policy == policy.WrongReadingName:
			reward = "outcome"
		}
	}
	if solver == "" && f.policy == policy.WrongReadingName && reward == "outcome" {
		solver = "client"
	}
	switch reward {
	case "":
	case "question_f1":
		opts.Reward = pb.RewardType_REWARD_TYPE_QUESTION_F1
	case "outcome":
		opts.Reward = pb.RewardType_REWARD_TYPE_OUTCOME
		if solver == "" {
			opts.Solver = pb.Solver_SOLVER_LOOKUP
		}
	case "bird_interact":
		opts.Reward = pb.RewardType_REWARD_TYPE_BIRD_INTERACT
	default:
		return nil, fmt.Errorf("unknown reward %q (want question_f1, outcome or bird_interact)", reward)
	}
	switch solver {
	case "":
	case "lookup":
		opts.Solver = pb.Solver_SOLVER_LOOKUP
	case "llm":
		opts.Solver = pb.Solver_SOLVER_LLM
	case "client":
		opts.Solver = pb.Solver_SOLVER_CLIENT
	default:
		return nil, fmt.Errorf("unknown solver %q (want lookup, llm or client)", solver)
	}
	return opts, nil
}

// firstFailure says where to read the failed episodes' errors: the
// episodes file when there is one, and the first failure's error.
func firstFailure(records []*driver.Record, episodesOut string) string {
	var b strings.Builder
	for _, r := range records {
		if !r.Scored() && r.Error != "" {
			fmt.Fprintf(&b, "; the first (task %s, %s): %s", r.TaskID, r.Status, r.Error)
			break
		}
	}
	if episodesOut != "" {
		fmt.Fprintf(&b, "; every episode's error is in %s", episodesOut)
	} else {
		b.WriteString("; --episodes-out FILE records every episode's error")
	}
	return b.String()
}

// parseOracleFlag reads --oracle: an oracle's name as eval's --oracles
// writes it (llm_scoped) or with dashes (llm-scoped).
func parseOracleFlag(name string) (pb.OracleType, error) {
	o, err := eval.ParseOracle(strings.ReplaceAll(name, "-", "_"))
	if err != nil {
		return 0, fmt.Errorf("--oracle: %w", err)
	}
	return o, nil
}

// checkOracleServed fails, before any episode, when the server does not
// serve the oracle --oracle asked for (an LLM oracle without serve
// --oracle-url, a test oracle without --test-oracles); the deterministic
// oracle is always served.
func checkOracleServed(ctx context.Context, c pb.EnvServiceClient, o pb.OracleType) error {
	if o == pb.OracleType_ORACLE_TYPE_UNSPECIFIED || o == pb.OracleType_ORACLE_TYPE_DETERMINISTIC {
		return nil
	}
	resp, err := c.ListOracles(ctx, &pb.ListOraclesRequest{})
	if err != nil {
		return fmt.Errorf("listing the server's oracles: %w", err)
	}
	var served []string
	for _, info := range resp.GetOracles() {
		if info.GetType() == o {
			return nil
		}
		served = append(served, eval.OracleName(info.GetType()))
	}
	return fmt.Errorf("the server does not serve the %s oracle (it serves %s; the LLM oracles need serve --oracle-url and --oracle-model, the test oracles serve --test-oracles)", eval.OracleName(o), strings.Join(served, ", "))
}

// rolloutPlayer is the policy --policy names; the function releases what
// it holds.
func rolloutPlayer(f *rolloutFlags) (policy.Player, func(), error) {
	tide := driver.IsTide(f.cfg.Options.GetProtocol())
	isTidePolicy := slices.Contains(policy.TidePolicies, f.policy)
	switch {
	case tide && f.policy == "llm":
		return f.asker.buildTideAgent("--policy llm")
	case tide && isTidePolicy:
		p, err := policy.ParseTidePolicy(f.policy)
		return p, func() {}, err
	case tide:
		return nil, nil, fmt.Errorf("under --protocol %s the policy is one of %s or llm, not %q", f.proto.protocol, strings.Join(policy.TidePolicies, ", "), f.policy)
	case isTidePolicy:
		return nil, nil, fmt.Errorf("the %s policy plays --protocol tide-f and tide-p only", f.policy)
	}
	if f.policy == policy.WrongReadingName {
		w, err := f.proto.wrongReading()
		if err != nil {
			return nil, nil, err
		}
		return w, func() {}, nil
	}
	if f.policy == "llm" {
		switch p := f.cfg.Options.GetProtocol(); {
		case driver.IsBird(p):
			return f.asker.buildAgent("--policy llm")
		case p != pb.Protocol_PROTOCOL_UNSPECIFIED:
			return nil, nil, policy.ErrAmbiTabOnly
		}
		asker, closeAsker, err := f.asker.build("--policy llm")
		if err != nil {
			return nil, nil, err
		}
		return asker, closeAsker, nil
	}
	if f.policy == policy.ExplorerName {
		return policy.Explorer(), func() {}, nil
	}
	name, err := probe.Parse(f.policy)
	if err != nil {
		return nil, nil, fmt.Errorf("unknown policy %q (want none, full, full_adv, none_adv, wrong-reading, explorer or llm; under tide-f and tide-p %s or llm)", f.policy, strings.Join(policy.TidePolicies, ", "))
	}
	return policy.Scripted(name), func() {}, nil
}

// progressLine reports progress every 50 episodes: on a terminal on one
// line rewritten in place (ended by a newline when done), elsewhere (a log
// file, a pipe) one line per report.
func progressLine(w io.Writer, what string) func(done, total int) {
	tty := eval.IsTerminal(w)
	return func(done, total int) {
		if done != total && done%50 != 0 {
			return
		}
		switch {
		case !tty:
			fmt.Fprintf(w, "%d/%d %s\n", done, total, what)
		case done == total:
			fmt.Fprintf(w, "\r%d/%d %s\n", done, total, what)
		default:
			fmt.Fprintf(w, "\r%d/%d %s", done, total, what)
		}
	}
}

func printRollout(w io.Writer, sum *eval.RolloutSummary, asJSON bool) {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(sum)
		return
	}
	f := func(x *float64) string {
		if x == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.3f", *x)
	}
	fmt.Fprintf(w, "policy %s on corpus %s: %d episodes (%d errors, %d truncated, %d fallback stops)\n", sum.Policy, sum.Corpus, sum.Episodes, sum.Errors, sum.Truncated, sum.FallbackStops)
	if b := sum.BirdC; b != nil {
		fmt.Fprintf(w, "protocol %s: phase-1 SR %s  phase-2 SR %s  reward %s  normalised reward %s\n", sum.Protocol, f(b.Phase1SR), f(b.Phase2SR), f(sum.RewardMean), normalised(b.NormalizedReward))
		if b.CoinsUsed != nil {
			fmt.Fprintf(w, "coins spent per episode: %s", f(b.CoinsUsed))
			for _, a := range driver.ActionNames {
				if c, ok := b.CoinsByAction[a]; ok {
					fmt.Fprintf(w, "  %s %s", a, f(&c))
				}
			}
			fmt.Fprintln(w)
		}
		return
	}
	fmt.Fprintf(w, "precision %s  recall %s  F1 %s  reward %s  success %s\n", f(sum.Precision), f(sum.Recall), f(sum.F1), f(sum.RewardMean), f(sum.SuccessRate))
	if m := sum.MultiInterpretation; m.Episodes > 0 {
		fmt.Fprintf(w, "multi-interpretation AVTs: %d episodes, success %s (chance %s)\n", m.Episodes, f(m.SuccessRate), f(m.Chance))
	}
}

// printTideRollout prints a TIDE rollout's summary: with --json the
// rollout summary, whose "tide" object holds TIDE's metrics; else a line
// of them overall, one per sample type, and DRA by drift subtype.
func printTideRollout(w io.Writer, sum *eval.RolloutSummary, asJSON bool) {
	if asJSON {
		printRollout(w, sum, true)
		return
	}
	t := sum.Tide
	f := func(x *float64) string {
		if x == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.3f", *x)
	}
	l2 := "L2-IR"
	if sum.Protocol == eval.TideP {
		l2 = "L2-IRp"
	}
	line := func(label string, r *eval.TideRates) {
		fmt.Fprintf(w, "%s (%d): DEA %s  AR %s  L1-IR %s  %s %s  JIR %s  DRR %s  DRA %s\n", label, r.Episodes, f(r.DEA), f(r.AR), f(r.L1IR), l2, f(r.L2IR), f(r.JIR), f(r.DRR), f(r.DRA))
	}
	fmt.Fprintf(w, "policy %s on corpus %s: %d episodes (%d errors, %d truncated)\n", sum.Policy, sum.Corpus, sum.Episodes, sum.Errors, sum.Truncated)
	line("protocol "+sum.Protocol, &t.TideRates)
	for _, k := range []string{"chain_only", "drift_only", "joint"} {
		if r := t.BySampleType[k]; r != nil {
			line("  "+k, r)
		}
	}
	if len(t.DRAByDriftType) > 0 {
		fmt.Fprint(w, "  DRA by drift subtype:")
		for _, k := range []string{"value", "constraint", "projection"} {
			if x, ok := t.DRAByDriftType[k]; ok {
				fmt.Fprintf(w, "  %s %s", k, f(x))
			}
		}
		fmt.Fprintln(w)
	}
}

// normalised formats BIRD-Interact's normalised reward (mean × 100).
func normalised(x *float64) string {
	if x == nil {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", *x)
}

func writeRecords(name string, rs []*driver.Record) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

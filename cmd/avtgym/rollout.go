package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"avtgym/client"
	"avtgym/llm"
	"avtgym/policy"
	pb "avtgym/proto/avtgym/v1"
)

func runRollout(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rollout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("server", "127.0.0.1:50051", "server address")
	pol := fs.String("policy", "", "policy: none, full, full_adv, none_adv (scripted) or llm (the LLM asker) (required)")
	askerURL := fs.String("asker-url", "", "--policy llm: the asker's OpenAI-compatible API root, e.g. http://localhost:8000/v1 (API key from $"+llm.DefaultAPIKeyEnv+")")
	askerModel := fs.String("asker-model", "", "--policy llm: the asker's model name")
	askerStyle := fs.String("asker-style", string(policy.StyleChecklistLedger), "--policy llm: prompt style: direct, checklist_chat or checklist_ledger")
	askerConcurrency := fs.Int("asker-concurrency", llm.DefaultConcurrency, "--policy llm: model calls in flight")
	askerTimeout := fs.Duration("asker-timeout", llm.DefaultTimeout, "--policy llm: deadline of one model call")
	llmCache := fs.String("llm-cache", "", "--policy llm: persistent response cache file (replays recorded calls without the endpoint)")
	var cfg policy.RolloutConfig
	fs.StringVar(&cfg.Corpus, "corpus", "", "corpus name (default: the server's first)")
	fs.StringVar(&cfg.Split, "split", "", "only tasks of this split")
	fs.IntVar(&cfg.Limit, "limit", 0, "at most this many tasks (0: all)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the first task; task i gets seed+i")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "episodes in flight")
	rewardName := fs.String("reward", "question_f1", "reward: question_f1 or outcome")
	solverName := fs.String("solver", "", "fixed solver: lookup (default: lookup for the outcome reward, none otherwise)")
	asJSON := fs.Bool("json", false, "print one JSON summary object")
	episodesOut := fs.String("episodes-out", "", "write one JSON line per episode to this file")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var askerCfg *llm.Config
	if *pol == "llm" {
		style, err := policy.ParseAskerStyle(*askerStyle)
		if err != nil {
			fmt.Fprintln(stderr, "rollout:", err)
			return 2
		}
		*askerStyle = string(style)
		if *askerURL == "" || *askerModel == "" {
			fmt.Fprintln(stderr, "rollout: --policy llm needs --asker-url and --asker-model")
			return 2
		}
		if *askerConcurrency <= 0 || *askerTimeout <= 0 {
			fmt.Fprintln(stderr, "rollout: --asker-concurrency and --asker-timeout must be positive")
			return 2
		}
		askerCfg = &llm.Config{BaseURL: *askerURL, Model: *askerModel, Concurrency: *askerConcurrency,
			Timeout: *askerTimeout, JSONMode: true, Version: policy.AskerPromptVersion}
	} else {
		name, err := policy.ParseName(*pol)
		if err != nil {
			fmt.Fprintf(stderr, "rollout: unknown policy %q (want none, full, full_adv, none_adv or llm)\n", *pol)
			return 2
		}
		cfg.Policy = name
	}
	opts := &pb.EpisodeOptions{}
	switch *rewardName {
	case "question_f1":
		opts.Reward = pb.RewardType_REWARD_TYPE_QUESTION_F1
	case "outcome":
		opts.Reward = pb.RewardType_REWARD_TYPE_OUTCOME
		opts.Solver = pb.Solver_SOLVER_LOOKUP
	default:
		fmt.Fprintf(stderr, "rollout: unknown reward %q (want question_f1 or outcome)\n", *rewardName)
		return 2
	}
	switch *solverName {
	case "":
	case "lookup":
		opts.Solver = pb.Solver_SOLVER_LOOKUP
	default:
		fmt.Fprintf(stderr, "rollout: unknown solver %q (want lookup)\n", *solverName)
		return 2
	}
	cfg.Options = opts
	if !*asJSON {
		cfg.Progress = func(done, total int) {
			if done == total || done%50 == 0 {
				fmt.Fprintf(stderr, "\r%d/%d episodes", done, total)
				if done == total {
					fmt.Fprintln(stderr)
				}
			}
		}
	}
	if askerCfg != nil {
		if *llmCache != "" {
			cache, err := llm.OpenFileCache(*llmCache)
			if err != nil {
				fmt.Fprintln(stderr, "rollout:", err)
				return 1
			}
			defer cache.Close()
			askerCfg.Cache = cache
		}
		lc, err := llm.New(*askerCfg, nil)
		if err != nil {
			fmt.Fprintln(stderr, "rollout:", err)
			return 2
		}
		asker, err := policy.NewLLMAsker(lc, policy.AskerStyle(*askerStyle))
		if err != nil {
			fmt.Fprintln(stderr, "rollout:", err)
			return 2
		}
		cfg.Player = asker
	}
	c, err := client.Dial(*addr, client.Options{CallTimeout: time.Minute})
	if err != nil {
		fmt.Fprintln(stderr, "rollout:", err)
		return 1
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	sum, eps, err := policy.Rollout(ctx, c, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "rollout:", err)
		return 1
	}
	if *episodesOut != "" {
		if err := writeEpisodes(*episodesOut, eps); err != nil {
			fmt.Fprintln(stderr, "rollout:", err)
			return 1
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(sum)
	} else {
		f := func(x *float64) string {
			if x == nil {
				return "n/a"
			}
			return fmt.Sprintf("%.3f", *x)
		}
		fmt.Fprintf(stdout, "policy %s on corpus %s: %d episodes (%d errors, %d truncated, %d fallback stops)\n", sum.Policy, sum.Corpus, sum.Episodes, sum.Errors, sum.Truncated, sum.FallbackStops)
		fmt.Fprintf(stdout, "precision %s  recall %s  F1 %s  reward %s  success %s\n", f(sum.Precision), f(sum.Recall), f(sum.F1), f(sum.RewardMean), f(sum.SuccessRate))
		if m := sum.MultiInterpretation; m.Episodes > 0 {
			fmt.Fprintf(stdout, "multi-interpretation AVTs: %d episodes, success %s (chance %s)\n", m.Episodes, f(m.SuccessRate), f(m.Chance))
		}
	}
	if sum.Errors > 0 {
		fmt.Fprintf(stderr, "rollout: %d episode(s) failed; see the episodes file for their errors\n", sum.Errors)
		return 1
	}
	return 0
}

func writeEpisodes(name string, eps []*policy.Episode) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, e := range eps {
		if err := enc.Encode(e); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

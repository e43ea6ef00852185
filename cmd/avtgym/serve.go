package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"avtgym/app"
	"avtgym/corpus"
	"avtgym/llm"
	"avtgym/sqlexec"
)

// llmFlags registers --PREFIX-url, -model, -api-key-env, -timeout,
// -concurrency, -context-tokens, -max-reply-bytes and -version for one
// model endpoint.
func llmFlags(fs *flag.FlagSet, prefix, what string, c *llm.Config) {
	fs.StringVar(&c.BaseURL, prefix+"-url", "", "OpenAI-compatible base URL of "+what+", e.g. http://127.0.0.1:8000/v1 (empty: unavailable)")
	fs.StringVar(&c.Model, prefix+"-model", "", "model name of "+what)
	fs.StringVar(&c.APIKeyEnv, prefix+"-api-key-env", "OPENAI_API_KEY", "environment variable holding the API key of "+what)
	fs.DurationVar(&c.Timeout, prefix+"-timeout", llm.DefaultTimeout, "per-call deadline of "+what)
	fs.IntVar(&c.Concurrency, prefix+"-concurrency", llm.DefaultConcurrency, "calls in flight to "+what)
	fs.IntVar(&c.ContextTokens, prefix+"-context-tokens", 0, "context length of "+what+" in tokens (0: unchecked)")
	fs.IntVar(&c.MaxReplyBytes, prefix+"-max-reply-bytes", llm.DefaultMaxReplyBytes, "longest reply kept from "+what+", in bytes (longer replies are cut; the response body is read up to 6× this plus 64 KiB)")
	fs.StringVar(&c.Version, prefix+"-version", "v1", "prompt version of "+what+" (part of cache keys)")
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return fmt.Sprint(*l) }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg app.Config
	var corpora stringList
	lim := sqlexec.DefaultLimits()
	logLevel := zapcore.InfoLevel
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:50051", "gRPC listen address")
	fs.Var(&corpora, "corpus", "corpus directory to serve (repeatable; default: the embedded demo corpus)")
	fs.StringVar(&cfg.PostgresURL, "postgres", os.Getenv(corpus.PostgresEnv), corpus.PostgresFlagHelp)
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "127.0.0.1:9464", "Prometheus metrics address (empty disables)")
	fs.StringVar(&cfg.TokenKeyFile, "token-key-file", "", "file holding the episode-token key (default $"+app.KeyFileEnv+"; else a random key, with a warning)")
	fs.DurationVar(&cfg.TokenTTL, "token-ttl", 0, "reject tokens of episodes reset longer ago than this (0: never)")
	fs.DurationVar(&lim.Timeout, "statement-timeout", lim.Timeout, "time limit of each submitted SQL (SQLite: CPU time of its own thread; a wall-clock backstop of 3× also applies)")
	fs.IntVar(&lim.MaxRows, "max-rows", lim.MaxRows, "row cap of a submitted query's result")
	fs.Int64Var(&lim.MaxBytes, "max-bytes", lim.MaxBytes, "byte cap of a submitted query's result (16 bytes per cell plus its data); also the longest string or blob a query may build")
	fs.Int64Var(&lim.MaxMemory, "max-memory", lim.MaxMemory, "memory a submitted query may make the database engine allocate")
	fs.IntVar(&cfg.Lanes.Fast, "sql-fast-slots", 0, "queries run at once in the fast lane (0: 2×GOMAXPROCS)")
	fs.IntVar(&cfg.Lanes.Slow, "sql-slow-slots", 0, "queries run at once in the slow lane, at low CPU priority (0: 2×GOMAXPROCS)")
	fs.DurationVar(&cfg.Lanes.Slice, "sql-slice", sqlexec.DefaultSlice, "time a query may run in the fast lane before it is rerun in the slow lane")
	fs.DurationVar(&cfg.Lanes.Wait, "sql-wait", sqlexec.DefaultLaneWait, "longest wait for a query slot; past it the step fails with RESOURCE_EXHAUSTED / VERIFIER_BUSY")
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 0, "how long shutdown waits for calls in flight (0: 10s)")
	fs.TextVar(&logLevel, "log-level", zapcore.InfoLevel, "log level: debug, info, warn, error")
	llmFlags(fs, "oracle", "the LLM oracles (llm, llm_scoped, hybrid, hybrid_scoped)", &cfg.OracleLLM)
	fs.BoolVar(&cfg.OracleRejectLeaks, "oracle-reject-leaks", false, "regenerate LLM-oracle replies that quote reference SQL or unmentioned schema identifiers")
	fs.BoolVar(&cfg.TestOracles, "test-oracles", false, "enable the deliberately leaky test oracles (for testing the leakage diagnostics; never for training)")
	llmFlags(fs, "solver", "the fixed solver model (SOLVER_LLM)", &cfg.SolverLLM)
	fs.IntVar(&cfg.SolverLLM.MaxTokens, "solver-max-tokens", llm.DefaultMaxTokens, "completion limit (max_tokens) of the solver model's calls (the oracle's stages use 256 and 400)")
	fs.StringVar(&cfg.LLMCacheFile, "llm-cache", "", "persistent response cache of every model call (JSONL); replays a run without the endpoints")
	fs.BoolVar(&cfg.NoLLMCache, "no-llm-cache", false, "send every model call to its endpoint (no response cache, not even in memory)")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	cfg.Corpora, cfg.Limits = corpora, lim
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	log := zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(zapcore.AddSync(stderr)), logLevel))
	defer log.Sync()
	cfg.Logger = log
	a, err := app.New(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return 1
	}
	defer a.Close()
	if err := a.Serve(ctx, nil); err != nil {
		fmt.Fprintln(stderr, "serve:", err)
		return 1
	}
	return 0
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"avtgym/app"
	"avtgym/llm"
	"avtgym/oracle"
	"avtgym/server"
	"avtgym/sqlexec"
	"avtgym/sqlexec/postgres"
)

// llmFlags registers --PREFIX-url, -model, -api-key-env, -timeout,
// -concurrency, -fixed-concurrency, -context-tokens, -max-reply-bytes,
// -version, -json-mode, -disable-thinking and the sampling controls
// (-temperature, -top-p, -frequency-penalty, -presence-penalty,
// -repetition-penalty, -stop) for one model endpoint.
func llmFlags(fs *flag.FlagSet, prefix, what string, c *llm.Config) {
	fs.StringVar(&c.BaseURL, prefix+"-url", "", "OpenAI-compatible base URL of "+what+", e.g. http://127.0.0.1:8000/v1 (empty: unavailable)")
	fs.StringVar(&c.Model, prefix+"-model", "", "model name of "+what)
	fs.StringVar(&c.APIKeyEnv, prefix+"-api-key-env", "OPENAI_API_KEY", "environment variable holding the API key of "+what)
	fs.DurationVar(&c.Timeout, prefix+"-timeout", llm.DefaultTimeout, "deadline of one call to "+what+", from when it is sent (the wait for a slot in the client is not in it)")
	fs.IntVar(&c.Concurrency, prefix+"-concurrency", llm.DefaultConcurrency, fmt.Sprintf("most calls in flight to %s; the limit adapts below it (starts at %d, grows while replies come well within the deadline and do not slow down as more are sent, shrinks on timeouts, 429s and replies near the deadline) unless --%s-fixed-concurrency", what, llm.DefaultInitialConcurrency, prefix))
	fs.BoolVar(&c.FixedConcurrency, prefix+"-fixed-concurrency", false, "keep exactly --"+prefix+"-concurrency calls in flight to "+what+" (a server that batches: vLLM, SGLang)")
	fs.IntVar(&c.ContextTokens, prefix+"-context-tokens", 0, "context length of "+what+" in tokens (0: unchecked)")
	fs.IntVar(&c.MaxReplyBytes, prefix+"-max-reply-bytes", llm.DefaultMaxReplyBytes, "longest reply kept from "+what+", in bytes (longer replies are cut; the response body is read up to 6× this plus 64 KiB)")
	fs.StringVar(&c.Version, prefix+"-version", "v1", "prompt version of "+what+" (part of cache keys)")
	// Issue 21 (models): JSON mode and the thinking switch, on by default.
	fs.BoolVar(&c.JSONMode, prefix+"-json-mode", true, "ask "+what+" for a JSON object (response_format json_object) where the prompt wants one; dropped by itself when the endpoint refuses it")
	fs.BoolVar(&c.DisableThinking, prefix+"-disable-thinking", true, "turn off the thinking step of "+what+" (chat_template_kwargs enable_thinking=false, read by Qwen3's template on vLLM and SGLang); dropped by itself when the endpoint refuses it; thinking that reaches a reply is stripped either way")
	// Issue 29 (real models): sampling controls, sent only when set, part
	// of the cache key.
	fs.Float64Var(&c.Temperature, prefix+"-temperature", 0, "sampling temperature of "+what+" (always sent)")
	fs.Float64Var(&c.TopP, prefix+"-top-p", 0, "top_p of "+what+", in (0, 1] (0: not sent, the server's default)")
	fs.Float64Var(&c.FrequencyPenalty, prefix+"-frequency-penalty", 0, "frequency_penalty of "+what+", in [-2, 2] (0: not sent)")
	fs.Float64Var(&c.PresencePenalty, prefix+"-presence-penalty", 0, "presence_penalty of "+what+", in [-2, 2] (0: not sent)")
	fs.Float64Var(&c.RepetitionPenalty, prefix+"-repetition-penalty", 0, "repetition penalty of "+what+" (1: neutral; above 1 penalises repeats), sent as vLLM's and SGLang's repetition_penalty and llama.cpp's repeat_penalty; OpenAI's API rejects it (0: not sent)")
	fs.Var((*stopList)(&c.Stop), prefix+"-stop", fmt.Sprintf("a stop sequence of %s (repeatable, at most %d; Go-quoted escapes such as \\n are read)", what, llm.MaxStop))
}

// stopList is a repeatable stop-sequence flag; a value in Go's quoted
// form ("\n\n") is unquoted, so that control characters can be given.
type stopList []string

func (l *stopList) String() string { return fmt.Sprint([]string(*l)) }

func (l *stopList) Set(s string) error {
	if u, err := strconv.Unquote(`"` + s + `"`); err == nil {
		s = u
	}
	if s == "" {
		return errors.New("a stop sequence must not be empty")
	}
	*l = append(*l, s)
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return fmt.Sprint(*l) }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// defaultGCPercent is serve's GOGC when the environment sets none.
const defaultGCPercent = 400

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg app.Config
	var corpora stringList
	lim := sqlexec.DefaultLimits()
	logLevel := zapcore.InfoLevel
	logFormat := "console"
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:50051", "gRPC listen address")
	fs.Var(&corpora, "corpus", "corpus directory to serve (repeatable; default: the embedded demo corpus)")
	postgresFlagVar(fs, &cfg.PostgresURL)
	fs.StringVar(&cfg.PostgresRole, "postgres-role", "", "name of the role policy SQL runs as on PostgreSQL, created and re-asserted at start; replicas share it, separate deployments on one server should not (default "+postgres.DefaultRole+")")
	fs.IntVar(&cfg.PostgresConnections, "postgres-connections", 0, "most connections this process opens to PostgreSQL as the policy role: the private copies of Management databases, the Python test workers' sessions and the query pools share it (0: 32, lowered to what the role and server have free; start-up fails when more is asked than they have)")
	fs.IntVar(&cfg.PostgresRoleConnections, "postgres-role-connections", 0, "the policy role's CONNECTION LIMIT, set at start: every replica's --postgres-connections must fit in it together (0: half the server's max_connections)")
	fs.StringVar(&cfg.PostgresPasswordKeyFile, "postgres-password-key-file", "", "key file (avtgym keygen) the policy role's password is derived from, the same for every replica (default $"+app.PasswordKeyFileEnv+"; else derived from --token-key-file; else from the admin URL's password; else random, and a second replica locks this one out)")
	fs.Int64Var(&cfg.PythonWorkerMemory, "python-worker-memory", 0, "memory each Python test worker (Management tasks' tests) may grow by, in bytes; a job that reaches it is the policy's failure and the worker is replaced (Linux: RLIMIT_DATA; 0: 512 MiB; negative: no limit)")
	fs.Int64Var(&cfg.PostgresMaxBackendMemory, "postgres-max-backend-memory", 0, "memory one policy statement may add to its PostgreSQL backend before it is canceled, in bytes (needs the server's backends on this machine; 0: 128 MiB; negative: off)")
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
	fs.DurationVar(&cfg.ShutdownGrace, "shutdown-grace", 0, "after SIGTERM (and --drain-delay), how long calls in flight may run before they are cut (0: 10s)")
	fs.DurationVar(&cfg.DrainDelay, "drain-delay", 0, "after SIGTERM, how long to keep taking new work with health already NOT_SERVING, for load balancers to notice")
	fs.TextVar(&logLevel, "log-level", zapcore.InfoLevel, "log level: debug, info, warn, error")
	fs.StringVar(&logFormat, "log-format", "console", "log format: console (for people) or json (one object per line, for log pipelines)")
	fs.IntVar(&cfg.AccessLogEvery, "access-log-sample", 1, "access log (an info line per call: method, code, duration, principal): the first call of each method and status code, then every N-th (1: every call; 0: none)")
	// The front door: TLS, principals, listeners.
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", "PEM certificate chain of the server: serve TLS only (with --tls-key; re-read when the file changes)")
	fs.StringVar(&cfg.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&cfg.ClientCA, "client-ca", "", "PEM CA of client certificates: mutual TLS, every client must present a certificate it signed")
	fs.StringVar(&cfg.AuthFile, "auth-file", "", "JSON file of principals (name, role trainer|policy, token_sha256, tls_subject): every call but health's must authenticate")
	fs.BoolVar(&cfg.InsecureListenAny, "insecure-listen-any", false, "let listeners that authenticate nobody (gRPC without --auth-file/--client-ca; metrics; pprof) bind non-loopback addresses")
	fs.StringVar(&cfg.HealthListen, "health-listen", "", "plaintext gRPC health-only port for probes, no credentials (empty disables)")
	fs.StringVar(&cfg.PprofListen, "pprof-listen", "", "net/http/pprof address (empty disables)")
	reflectionOn := fs.Bool("reflection", true, "serve the gRPC reflection service (grpcurl list/describe)")
	// Admission and connections.
	fs.IntVar(&cfg.MaxInFlight, "max-inflight", 0, "work in flight on the server, in items (a call is 1, a batch its items); past it calls are refused at once with RESOURCE_EXHAUSTED / OVERLOADED and a RetryInfo (0: no limit)")
	fs.IntVar(&cfg.MaxInFlightPerPrincipal, "max-inflight-per-principal", 0, "work in flight per principal, in items, refused the same way (0: no limit)")
	maxStreams := fs.Uint("max-streams", server.DefaultMaxConcurrentStreams, "concurrent calls per connection (HTTP/2 MAX_CONCURRENT_STREAMS)")
	fs.DurationVar(&cfg.MaxConnectionAge, "max-connection-age", 30*time.Minute, "close connections this old (±10%, GOAWAY after their calls) so clients rebalance across replicas (0: never)")
	fs.DurationVar(&cfg.MaxConnectionAgeGrace, "max-connection-age-grace", 0, "how long calls on a connection closed for its age may still run (0: until they end; the connection takes no new calls meanwhile)")
	fs.DurationVar(&cfg.KeepaliveMinTime, "keepalive-min-time", server.DefaultKeepaliveMinTime, "shortest keepalive ping interval tolerated from a client (more often: GOAWAY too_many_pings)")
	// Tracing and the episode log.
	fs.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", "", "OTLP/gRPC collector for traces, host:port or URL (empty: no tracing)")
	fs.BoolVar(&cfg.OTLPInsecure, "otlp-insecure", false, "send traces to --otlp-endpoint without TLS")
	fs.Float64Var(&cfg.TraceSample, "trace-sample", 1, "fraction of root calls traced (calls whose client sampled them are always traced)")
	fs.StringVar(&cfg.EpisodeLog, "episode-log", "", "directory of the episode log: every finished episode once, as rotating JSONL with transcript, reward and privileged data")
	fs.Int64Var(&cfg.EpisodeLogMaxBytes, "episode-log-max-bytes", server.DefaultEpisodeLogMaxBytes, "rotate episode log files at this size")
	llmFlags(fs, "oracle", "the LLM oracles (llm, llm_scoped, hybrid, hybrid_scoped)", &cfg.OracleLLM)
	// Issue 21 (models): leak rejection on by default for the unfiltered oracle; stage limits.
	fs.BoolVar(&cfg.OracleRejectLeaks, "oracle-reject-leaks", false, "also regenerate the scoped LLM oracle's replies that quote reference SQL or unmentioned schema identifiers (the unfiltered oracle's always are, unless --oracle-allow-leaks)")
	fs.BoolVar(&cfg.OracleAllowLeaks, "oracle-allow-leaks", false, "serve the LLM oracles' replies without the leak check, the unfiltered oracle's too (to study a raw model's leaks)")
	fs.IntVar(&cfg.OracleMaxTokens, "oracle-max-tokens", oracle.DefaultOracleMaxTokens, "completion limit of each LLM-oracle stage (a reply cut off at it is asked for again with twice the limit, unless it was cut off in a loop)")
	fs.BoolVar(&cfg.TestOracles, "test-oracles", false, "enable the deliberately leaky test oracles (for testing the leakage diagnostics; never for training)")
	llmFlags(fs, "solver", "the fixed solver model (SOLVER_LLM)", &cfg.SolverLLM)
	fs.IntVar(&cfg.SolverLLM.MaxTokens, "solver-max-tokens", llm.DefaultMaxTokens, "completion limit (max_tokens) of the solver model's calls (a reply cut off at it is asked for once more with twice the limit, unless it was cut off in a loop)")
	fs.StringVar(&cfg.LLMCacheFile, "llm-cache", "", "persistent response cache of every model call (JSONL); replays a run without the endpoints")
	fs.BoolVar(&cfg.NoLLMCache, "no-llm-cache", false, "send every model call to its endpoint (no response cache, not even in memory)")
	gcPercent := fs.Int("gc-percent", defaultGCPercent, "the Go garbage collector's target (GOGC): heap growth between collections, in percent of the live heap; the GOGC environment variable, when set, wins")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "serve: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		// The server's live heap is small (tens of MB: corpora, caches) and
		// its garbage is per-call; collecting at 4× the live heap instead of
		// 2× cut a batched episode's server CPU by 15–25% (bench/RESULTS.md).
		// GOMEMLIMIT still bounds the heap when set.
		debug.SetGCPercent(*gcPercent)
	}
	cfg.Corpora, cfg.Limits = corpora, lim
	cfg.NoReflection = !*reflectionOn
	if *maxStreams > math.MaxUint32 {
		fmt.Fprintln(stderr, "serve: --max-streams is too large")
		return 2
	}
	cfg.MaxConcurrentStreams = uint32(*maxStreams)
	switch cfg.AccessLogEvery {
	case 0:
		cfg.AccessLogEvery = -1 // none
	default:
		if cfg.AccessLogEvery < 0 {
			fmt.Fprintln(stderr, "serve: --access-log-sample must not be negative")
			return 2
		}
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	var encoder zapcore.Encoder
	switch logFormat {
	case "console":
		encoder = zapcore.NewConsoleEncoder(enc)
	case "json":
		encoder = zapcore.NewJSONEncoder(enc)
	default:
		fmt.Fprintf(stderr, "serve: --log-format %q: want console or json\n", logFormat)
		return 2
	}
	log := zap.New(zapcore.NewCore(encoder, zapcore.Lock(zapcore.AddSync(stderr)), logLevel))
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

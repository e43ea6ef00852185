// Package app assembles a complete avtgym server from a Config: corpora,
// oracles, the episode environment, the gRPC server and its metrics.
// cmd/avtgym, the benchmarks and the end-to-end tests all start servers
// through it, so that what is tested is what is served.
package app

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/env"
	"avtgym/llm"
	"avtgym/oracle"
	"avtgym/oracle/oracletest"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/server"
	"avtgym/sqlexec"
	"avtgym/sqlexec/postgres"
	"avtgym/sqlexec/pytests"
	"avtgym/sqlexec/sqlite"
)

// KeyFileEnv names the environment variable that may name the token key
// file when no flag does.
const KeyFileEnv = "AVTGYM_TOKEN_KEY_FILE"

// Config is the configuration of one server process.
type Config struct {
	// Listen is the gRPC address; default 127.0.0.1:50051.
	Listen string
	// MetricsListen is the Prometheus HTTP address; empty disables it.
	MetricsListen string
	// Corpora are corpus directories; none means the embedded demo corpus.
	Corpora []string
	// PostgresURL is the admin URL of the PostgreSQL server that corpora
	// with engine "postgres" databases load into (serve --postgres, default
	// $AVTGYM_POSTGRES_URL); empty means none, and such a corpus fails to
	// load with a message naming the flag. The server is connected to once,
	// at start, only when set.
	PostgresURL string
	// PostgresRole is the policy role's name (postgres.Config.Role; serve
	// --postgres-role); empty: postgres.DefaultRole. Replicas share it;
	// separate deployments on one server should not.
	PostgresRole string
	// PostgresConnections is the budget of connections this process opens
	// as the policy role (postgres.Config.Connections; serve
	// --postgres-connections); 0: the default, lowered to what is free.
	PostgresConnections int
	// PostgresRoleConnections is the policy role's CONNECTION LIMIT, set
	// at start (postgres.Config.ConnectionLimit; serve
	// --postgres-role-connections); 0: half the server's max_connections.
	// Every replica's budget must fit in it together.
	PostgresRoleConnections int
	// PostgresPasswordKeyFile names a key file (the format of the token
	// key: avtgym keygen) from which the policy role's password is
	// derived, so that replicas agree on it (serve
	// --postgres-password-key-file, default
	// $AVTGYM_POSTGRES_PASSWORD_KEY_FILE). Empty: derived from the token
	// key when there is a token key file, else from the administrator's
	// password, else random (with a warning: a second replica would lock
	// this one out).
	PostgresPasswordKeyFile string
	// PythonWorkerMemory bounds each Python test worker's growth, in
	// bytes (pytests.Config.MaxWorkerMemory; serve --python-worker-memory);
	// 0: 512 MiB; negative: no limit.
	PythonWorkerMemory int64
	// PostgresMaxBackendMemory bounds how far one policy statement may
	// grow its backend (postgres.Config.MaxBackendMemory; serve
	// --postgres-max-backend-memory); 0: the default; negative: off.
	PostgresMaxBackendMemory int64
	// TokenKeyFile names the token key file (see env.ReadKeyFile); empty
	// means $AVTGYM_TOKEN_KEY_FILE, and failing that a random key with a
	// warning.
	TokenKeyFile string
	// TokenTTL, when positive, expires episodes reset longer ago.
	TokenTTL time.Duration
	// Limits bound every submitted statement.
	Limits sqlexec.Limits
	// Lanes schedule every query of the process (fast and slow lanes, slots
	// and waits; see sqlexec.Lanes). Zero values are the defaults.
	Lanes sqlexec.LaneOptions
	// ShutdownGrace is how long shutdown waits for calls in flight.
	ShutdownGrace time.Duration
	// DrainDelay is how long, after SIGTERM, the server keeps taking work
	// with health already NOT_SERVING (for load balancers to notice).
	DrainDelay time.Duration
	// DrainHookTimeout bounds the drain hooks (OnDrain) together; zero
	// means 10 seconds.
	DrainHookTimeout time.Duration
	// Logger receives logs; nil means none.
	Logger *zap.Logger

	// TLSCert and TLSKey are the server's PEM certificate chain and key;
	// both empty means plaintext.
	TLSCert, TLSKey string
	// ClientCA is the PEM CA of client certificates: every client must
	// present one it signed (mutual TLS). Needs TLSCert.
	ClientCA string
	// AuthFile names the principals file (server.LoadPrincipals): every
	// call but health's must then carry a principal's bearer token (or
	// client certificate).
	AuthFile string
	// InsecureListenAny lets listeners that authenticate nobody (the gRPC
	// listener without AuthFile or ClientCA; the metrics and pprof
	// listeners always) bind a non-loopback address.
	InsecureListenAny bool
	// HealthListen is the address of the plaintext probe port (health
	// only, no credentials); empty disables it.
	HealthListen string
	// PprofListen is the address of the net/http/pprof endpoints; empty
	// disables them.
	PprofListen string
	// NoReflection turns the reflection service off.
	NoReflection bool
	// MaxInFlight and MaxInFlightPerPrincipal bound the work in flight
	// (server.Options); zero means no bound.
	MaxInFlight, MaxInFlightPerPrincipal int
	// MaxConcurrentStreams, MaxConnectionAge, MaxConnectionAgeGrace and
	// KeepaliveMinTime manage connections (server.Options).
	MaxConcurrentStreams  uint32
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	KeepaliveMinTime      time.Duration
	// AccessLogEvery samples the access log (server.Options).
	AccessLogEvery int
	// OTLPEndpoint, when set, sends traces to this OTLP/gRPC collector
	// (host:port); OTLPInsecure sends them without TLS; TraceSample is the
	// fraction of root calls traced (a call whose client sampled it is
	// always traced).
	OTLPEndpoint string
	OTLPInsecure bool
	TraceSample  float64
	// EpisodeLog, when set, is the directory of the episode log
	// (server.EpisodeLog); EpisodeLogMaxBytes rotates its files.
	EpisodeLog         string
	EpisodeLogMaxBytes int64

	// OracleLLM is the endpoint of the LLM oracles (llm, llm_scoped and
	// their hybrids, hybrid and hybrid_scoped); an empty BaseURL leaves
	// them unavailable.
	OracleLLM llm.Config
	// OracleRejectLeaks makes the scoped LLM oracle, too, regenerate
	// replies that quote reference SQL or unmentioned schema identifiers
	// (the unfiltered oracle does by default: oracle.LLMOptions).
	OracleRejectLeaks bool
	// OracleAllowLeaks turns the LLM oracles' leak rejection off, the
	// unfiltered oracle's too (issue 21).
	OracleAllowLeaks bool
	// OracleMaxTokens is the completion limit of each LLM-oracle stage (0:
	// oracle.DefaultOracleMaxTokens).
	OracleMaxTokens int
	// TestOracles serves the deliberately leaky test oracles of package
	// oracletest (ORACLE_TYPE_TEST_LEAKY_RESPONDER and
	// ORACLE_TYPE_TEST_CREDIT_ALL), fixtures for the leakage diagnostics;
	// never for training. This is the only way a server gets them.
	TestOracles bool
	// SolverLLM is the endpoint of the fixed solver model (SOLVER_LLM); an
	// empty BaseURL leaves it unavailable.
	SolverLLM llm.Config
	// LLMCacheFile, when set, is the persistent response cache shared by
	// every model call (an append-only JSONL file): a run can be replayed
	// from it without the endpoints. Without it the cache is in memory.
	LLMCacheFile string
	// NoLLMCache turns the response cache off altogether (no file, no
	// memory): every model call goes to the endpoint. For benchmarks, and
	// for sampling at a temperature above 0.
	NoLLMCache bool
}

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	c.fillDefaults()
	for _, check := range []func() error{c.checkLimits, c.checkLanes, c.checkDurations, c.checkPostgres, c.checkFrontDoor, c.checkTracing} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// fillDefaults sets what a zero field means.
func (c *Config) fillDefaults() {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:50051"
	}
	if c.Limits == (sqlexec.Limits{}) {
		c.Limits = sqlexec.DefaultLimits()
	}
	if c.Limits.MaxMemory == 0 {
		c.Limits.MaxMemory = sqlexec.DefaultLimits().MaxMemory
	}
	if c.Lanes.SlowThread == nil {
		c.Lanes.SlowThread = sqlite.LowerThreadPriority
	}
	if c.TokenKeyFile == "" {
		c.TokenKeyFile = os.Getenv(KeyFileEnv)
	}
	if c.PostgresPasswordKeyFile == "" {
		c.PostgresPasswordKeyFile = os.Getenv(PasswordKeyFileEnv)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.DrainHookTimeout == 0 {
		c.DrainHookTimeout = 10 * time.Second
	}
	if c.OTLPEndpoint != "" && c.TraceSample == 0 {
		c.TraceSample = 1
	}
}

// checkLimits checks the bounds of every submitted statement.
func (c *Config) checkLimits() error {
	if l := c.Limits; l.Timeout <= 0 || l.MaxRows <= 0 || l.MaxBytes <= 0 || l.MaxMemory <= 0 {
		return fmt.Errorf("statement timeout, row cap, byte cap and memory cap must be positive")
	}
	return nil
}

// checkLanes checks the query lanes' slots, slice and wait.
func (c *Config) checkLanes() error {
	if l := c.Lanes; l.Fast < 0 || l.Slow < 0 || l.Slice < 0 || l.Wait < 0 {
		return fmt.Errorf("query lanes: slots, slice and wait must not be negative")
	}
	return nil
}

// checkDurations checks the token TTL and the shutdown and connection
// durations.
func (c *Config) checkDurations() error {
	if c.TokenTTL < 0 {
		return fmt.Errorf("token TTL must not be negative")
	}
	if c.DrainDelay < 0 || c.ShutdownGrace < 0 || c.DrainHookTimeout < 0 || c.MaxConnectionAge < 0 || c.MaxConnectionAgeGrace < 0 || c.KeepaliveMinTime < 0 {
		return fmt.Errorf("durations must not be negative")
	}
	return nil
}

// checkPostgres checks the PostgreSQL connection budgets.
func (c *Config) checkPostgres() error {
	if c.PostgresConnections < 0 || c.PostgresRoleConnections < 0 {
		return fmt.Errorf("--postgres-connections and --postgres-role-connections must not be negative")
	}
	return nil
}

// checkFrontDoor checks TLS and the in-flight limits.
func (c *Config) checkFrontDoor() error {
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return fmt.Errorf("TLS needs both --tls-cert and --tls-key")
	}
	if c.ClientCA != "" && c.TLSCert == "" {
		return fmt.Errorf("--client-ca (mutual TLS) needs --tls-cert and --tls-key")
	}
	if c.MaxInFlight < 0 || c.MaxInFlightPerPrincipal < 0 {
		return fmt.Errorf("in-flight limits must not be negative")
	}
	return nil
}

// checkTracing checks the trace sample.
func (c *Config) checkTracing() error {
	if c.TraceSample < 0 || c.TraceSample > 1 {
		return fmt.Errorf("trace sample must be within 0..1")
	}
	return nil
}

// authenticated reports whether the gRPC listener authenticates callers.
func (c *Config) authenticated() bool { return c.AuthFile != "" || c.ClientCA != "" }

// App is an assembled server, ready to serve.
type App struct {
	// Lanes schedule every query of the process.
	Lanes   *sqlexec.Lanes
	Env     *env.Env
	Server  *server.Server
	Metrics *server.Metrics
	// EpisodeLog is the episode log; nil without Config.EpisodeLog.
	EpisodeLog *server.EpisodeLog
	// Addrs are the bound addresses, set by Serve before it calls ready.
	Addrs   Addrs
	cfg     Config
	corpora []*corpus.Corpus
	cache   *llm.FileCache
	pg      *postgres.Server
	py      *pytests.Pool
	tracing *tracing

	hookMu    sync.Mutex
	hooks     []func(context.Context) error
	hooksOnce sync.Once
}

// Addrs are the addresses an App listens on ("" for a listener that is
// off).
type Addrs struct {
	GRPC, Metrics, Pprof, Health string
}

// OnDrain registers f to run when the server has drained (after the calls
// in flight ended, or were cut at the grace period), before the process
// exits: the place to stop helper processes (test workers) and flush what
// they hold. Hooks run one after another, in the order registered, under
// one context that ends after Config.DrainHookTimeout; an error is logged.
// If Serve is never called, Close runs them.
func (a *App) OnDrain(f func(ctx context.Context) error) {
	a.hookMu.Lock()
	defer a.hookMu.Unlock()
	a.hooks = append(a.hooks, f)
}

// runDrainHooks runs the drain hooks, once.
func (a *App) runDrainHooks() {
	a.hooksOnce.Do(func() {
		a.hookMu.Lock()
		hooks := append([]func(context.Context) error(nil), a.hooks...)
		a.hookMu.Unlock()
		if len(hooks) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.DrainHookTimeout)
		defer cancel()
		for i, f := range hooks {
			if err := f(ctx); err != nil {
				a.cfg.Logger.Error("drain hook failed", zap.Int("hook", i), zap.Error(err))
			}
		}
		a.cfg.Logger.Info("drain hooks done", zap.Int("hooks", len(hooks)))
	})
}

// New loads the corpora and builds the server.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	key, err := loadKey(cfg, log)
	if err != nil {
		return nil, err
	}
	sealer, err := env.NewSealer(key)
	if err != nil {
		return nil, err
	}
	a := &App{cfg: cfg, Lanes: sqlexec.NewLanes(cfg.Lanes)}
	// The Python test workers of Management tasks start on first use (a
	// corpus without Python tests runs no Python) and stop on drain.
	pyWorkers := runtime.GOMAXPROCS(0)
	a.py, err = pytests.New(pytests.Config{Logger: log, Workers: pyWorkers, MaxWorkerMemory: cfg.PythonWorkerMemory})
	if err != nil {
		return nil, err
	}
	a.OnDrain(a.py.Close)
	if cfg.PostgresURL != "" {
		// One connection (and one policy role) for every corpus.
		pkey, err := postgresPasswordKey(cfg, key)
		if err != nil {
			return nil, err
		}
		a.pg, err = postgres.ConnectConfig(ctx, postgres.Config{
			AdminURL: cfg.PostgresURL, Role: cfg.PostgresRole, PasswordKey: pkey,
			Connections: cfg.PostgresConnections, ConnectionLimit: cfg.PostgresRoleConnections,
			PythonConnections: pyWorkers, MaxBackendMemory: cfg.PostgresMaxBackendMemory,
		})
		if err != nil {
			return nil, fmt.Errorf("--postgres: %w", err)
		}
		defer func() {
			// What the server could not arrange, the corpora's loads
			// included (copies cut to the budget).
			for _, w := range a.pg.Warnings() {
				log.Warn("postgres", zap.String("warning", w))
			}
			b := a.pg.Budget()
			log.Info("postgres connections", zap.Int("budget", b.Total), zap.Int("reserved", b.Reserved))
		}()
	}
	// Every corpus loads its PostgreSQL databases into the one server.
	opener := engines.Opener{Postgres: a.pg}
	if len(cfg.Corpora) == 0 {
		c, err := corpus.LoadDemo(ctx, corpus.Options{Engines: opener, Lanes: a.Lanes, PyRunner: a.py})
		if err != nil {
			return nil, fmt.Errorf("demo corpus: %w", err)
		}
		a.corpora = append(a.corpora, c)
	}
	for _, dir := range cfg.Corpora {
		start := time.Now()
		c, err := corpus.LoadDir(ctx, dir, corpus.Options{Engines: opener, Progress: progressLogger(log, dir), Lanes: a.Lanes, PyRunner: a.py})
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("corpus %s: %w", dir, err)
		}
		log.Info("corpus loaded", zap.String("dir", dir), zap.String("name", c.Name), zap.Int("tasks", len(c.Tasks)), zap.Duration("took", time.Since(start)))
		a.corpora = append(a.corpora, c)
	}
	a.Metrics = server.NewMetrics()
	registerLaneMetrics(a.Metrics.Registerer(), a.Lanes)
	ecfg := env.Config{
		Corpora:   a.corpora,
		Sealer:    sealer,
		Oracles:   map[pb.OracleType]env.Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()},
		Limits:    cfg.Limits,
		TokenTTL:  cfg.TokenTTL,
		TaskIDKey: taskIDKey(cfg, key),
	}
	if cfg.TestOracles {
		ecfg.Oracles[pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER] = oracletest.LeakyResponder()
		ecfg.Oracles[pb.OracleType_ORACLE_TYPE_TEST_CREDIT_ALL] = oracletest.CreditAll()
		log.Warn("serving the deliberately leaky test oracles (--test-oracles): for testing the leakage diagnostics, never for training")
	}
	if err := a.wireModels(&ecfg); err != nil {
		a.Close()
		return nil, err
	}
	a.Env, err = env.New(ecfg)
	if err != nil {
		a.Close()
		return nil, err
	}
	sopt := server.Options{Logger: log, Metrics: a.Metrics, ShutdownGrace: cfg.ShutdownGrace, DrainDelay: cfg.DrainDelay,
		MaxInFlight: cfg.MaxInFlight, MaxInFlightPerPrincipal: cfg.MaxInFlightPerPrincipal,
		MaxConcurrentStreams: cfg.MaxConcurrentStreams, MaxConnectionAge: cfg.MaxConnectionAge, MaxConnectionAgeGrace: cfg.MaxConnectionAgeGrace,
		KeepaliveMinTime: cfg.KeepaliveMinTime, NoReflection: cfg.NoReflection, AccessLogEvery: cfg.AccessLogEvery}
	if err := a.frontDoor(ctx, &sopt); err != nil {
		a.Close()
		return nil, err
	}
	if cfg.OracleLLM.BaseURL != "" || cfg.SolverLLM.BaseURL != "" {
		// Model-bound steps wait on the endpoint: let a batch keep enough
		// of them in flight to fill the models' concurrency limits.
		sopt.BatchWorkers = 2 * max(cfg.OracleLLM.Concurrency, cfg.SolverLLM.Concurrency, llm.DefaultConcurrency)
	}
	registerBusyMetric(a.Metrics.Registerer(), a.Env)
	a.Server = server.New(a.Env, sopt)
	return a, nil
}

// registerLaneMetrics exports the query lanes' activity.
func registerLaneMetrics(reg prometheus.Registerer, l *sqlexec.Lanes) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "avtgym_sql_fast_lane_running", Help: "Queries running in the fast lane."},
			func() float64 { return float64(l.Stats().FastRunning) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "avtgym_sql_slow_lane_running", Help: "Queries running in the slow lane (they outlived their first slice)."},
			func() float64 { return float64(l.Stats().SlowRunning) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "avtgym_sql_demoted_total", Help: "Queries moved to the slow lane after their first slice."},
			func() float64 { return float64(l.Stats().Demoted) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "avtgym_sql_lane_busy_total", Help: "Queries refused because no lane slot became free within the wait bound (--sql-wait)."},
			func() float64 { return float64(l.Stats().Busy) }),
	)
}

// registerBusyMetric exports every step answered VERIFIER_BUSY, whatever
// was saturated (a lane slot, a private copy, a Python worker, a
// PostgreSQL connection).
func registerBusyMetric(reg prometheus.Registerer, e *env.Env) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "avtgym_sql_busy_total",
		Help: "Steps answered RESOURCE_EXHAUSTED / VERIFIER_BUSY: no query slot, private copy, Python test worker or database connection became free within its wait bound."},
		func() float64 { return float64(e.VerifierBusy()) }))
}

func progressLogger(log *zap.Logger, dir string) func(done, total int) {
	last := time.Now()
	return func(done, total int) {
		if done == total || time.Since(last) > 2*time.Second {
			last = time.Now()
			log.Info("checking references", zap.String("dir", dir), zap.Int("done", done), zap.Int("total", total))
		}
	}
}

// PasswordKeyFileEnv names the environment variable that may name the
// PostgreSQL password key file when no flag does.
const PasswordKeyFileEnv = "AVTGYM_POSTGRES_PASSWORD_KEY_FILE"

// postgresPasswordKey is the key the policy role's password is derived
// from: the password key file's, else one derived from the token key when
// a token key file is set (replicas share it already), else nil (the
// administrator's password, or random).
func postgresPasswordKey(cfg Config, tokenKey []byte) ([]byte, error) {
	if name := cfg.PostgresPasswordKeyFile; name != "" {
		k, err := env.ReadKeyFile(name)
		if err != nil {
			return nil, fmt.Errorf("--postgres-password-key-file: %w", err)
		}
		return k, nil
	}
	if cfg.TokenKeyFile != "" {
		m := hmac.New(sha256.New, tokenKey)
		m.Write([]byte("avtgym postgres password key v1"))
		return m.Sum(nil), nil
	}
	return nil, nil
}

// taskIDKey keys the opaque public ids of TIDE samples (env.Config's
// TaskIDKey): with a token key file, a key derived from it, so that a
// deployment's ids are secret (not computable from the published data)
// and its replicas agree; without one, nil (the corpus-derived default).
func taskIDKey(cfg Config, tokenKey []byte) []byte {
	if cfg.TokenKeyFile == "" {
		return nil
	}
	m := hmac.New(sha256.New, tokenKey)
	m.Write([]byte("avtgym public task id key v1"))
	return m.Sum(nil)
}

func loadKey(cfg Config, log *zap.Logger) ([]byte, error) {
	if cfg.TokenKeyFile == "" {
		log.Warn("no token key file (--token-key-file or " + KeyFileEnv + "): using a random key; episode tokens die with this process and replicas cannot share episodes")
		return env.RandomKey(), nil
	}
	key, err := env.ReadKeyFile(cfg.TokenKeyFile)
	if err != nil {
		return nil, fmt.Errorf("token key: %w", err)
	}
	return key, nil
}

// Serve listens on cfg.Listen (and the metrics, pprof and probe
// addresses that are set) and serves until ctx ends; then it drains (see
// server.Server.Serve), runs the drain hooks, flushes traces, closes the
// episode log and returns nil. ready, when not nil, receives the bound
// gRPC address once listening (useful with port 0). A listener that
// authenticates nobody must be on a loopback address unless
// cfg.InsecureListenAny.
func (a *App) Serve(ctx context.Context, ready func(addr net.Addr)) error {
	log := a.cfg.Logger
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	lis, err := a.listen(a.cfg.Listen, "--listen", a.cfg.authenticated())
	if err != nil {
		return err
	}
	fail := func(err error) error { lis.Close(); return err }
	if a.cfg.MetricsListen != "" {
		mux := http.NewServeMux()
		mux.Handle("/metrics", a.Metrics.Handler())
		addr, stop, err := a.serveHTTP(a.cfg.MetricsListen, "--metrics-listen", mux)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, stop)
		a.Addrs.Metrics = addr
		log.Info("metrics", zap.String("addr", "http://"+addr+"/metrics"))
	}
	if a.cfg.PprofListen != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		addr, stop, err := a.serveHTTP(a.cfg.PprofListen, "--pprof-listen", mux)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, stop)
		a.Addrs.Pprof = addr
		log.Info("pprof", zap.String("addr", "http://"+addr+"/debug/pprof/"))
	}
	if a.cfg.HealthListen != "" {
		// Health only, no credentials: any address is allowed.
		hlis, err := net.Listen("tcp", a.cfg.HealthListen)
		if err != nil {
			return fail(fmt.Errorf("--health-listen: %w", err))
		}
		probe := a.Server.ProbeServer()
		go func() { _ = probe.Serve(hlis) }()
		closers = append(closers, probe.Stop)
		a.Addrs.Health = hlis.Addr().String()
		log.Info("health probe", zap.String("addr", a.Addrs.Health))
	}
	for _, c := range a.corpora {
		log.Info("serving corpus", zap.String("name", c.Name), zap.Int("tasks", len(c.Tasks)), zap.Int("avts", c.AVTCount()))
	}
	log.Info("front door", zap.Bool("tls", a.cfg.TLSCert != ""), zap.Bool("mutual_tls", a.cfg.ClientCA != ""), zap.Bool("auth_file", a.cfg.AuthFile != ""),
		zap.Int("max_inflight", a.cfg.MaxInFlight), zap.Int("max_inflight_per_principal", a.cfg.MaxInFlightPerPrincipal),
		zap.Bool("tracing", a.tracing != nil), zap.Bool("episode_log", a.EpisodeLog != nil))
	a.Addrs.GRPC = lis.Addr().String()
	log.Info("serving", zap.String("addr", a.Addrs.GRPC))
	if ready != nil {
		ready(lis.Addr())
	}
	err = a.Server.Serve(ctx, lis)
	a.runDrainHooks()
	a.closeOutputs()
	log.Info("stopped")
	return err
}

// closeOutputs flushes the traces and closes the episode log (idempotent).
func (a *App) closeOutputs() {
	if a.tracing != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := a.tracing.shutdown(ctx); err != nil {
			a.cfg.Logger.Warn("flushing traces", zap.Error(err))
		}
		cancel()
	}
	if a.EpisodeLog != nil {
		if err := a.EpisodeLog.Close(); err != nil {
			a.cfg.Logger.Error("closing the episode log", zap.Error(err))
		}
	}
}

// serveHTTP serves h on addr, a listener that authenticates nobody; it
// returns the bound address and the function that stops it.
func (a *App) serveHTTP(addr, flag string, h http.Handler) (string, func(), error) {
	lis, err := a.listen(addr, flag, false)
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.cfg.Logger.Error("http server", zap.String("flag", flag), zap.Error(err))
		}
	}()
	return lis.Addr().String(), func() { hs.Close() }, nil
}

// wireModels adds the LLM oracles and the LLM solver that cfg configures,
// sharing one response cache and the server's metrics registry.
func (a *App) wireModels(ecfg *env.Config) error {
	cfg := a.cfg
	if cfg.OracleLLM.BaseURL == "" && cfg.SolverLLM.BaseURL == "" {
		return nil
	}
	var cache llm.Cache = llm.NewMemoryCache()
	switch {
	case cfg.NoLLMCache && cfg.LLMCacheFile != "":
		return fmt.Errorf("llm cache: a cache file and no cache at all were both asked for")
	case cfg.NoLLMCache:
		cache = nil
	case cfg.LLMCacheFile != "":
		fc, err := llm.OpenFileCache(cfg.LLMCacheFile)
		if err != nil {
			return fmt.Errorf("llm cache: %w", err)
		}
		a.cache, cache = fc, fc
	}
	if cfg.OracleLLM.BaseURL != "" {
		oc := cfg.OracleLLM
		oc.Cache = cache
		client, err := llm.New(oc, a.Metrics.Registerer())
		if err != nil {
			return fmt.Errorf("oracle model: %w", err)
		}
		schemas := map[*corpus.Record]string{}
		for _, c := range a.corpora {
			for _, t := range c.Tasks {
				schemas[t.Record] = t.DB.Schema
				if fu := t.FollowUpRecord(); fu != nil {
					schemas[fu] = t.DB.Schema // the oracle of BIRD_C's sub-task 2
				}
			}
		}
		schema := func(r *corpus.Record) string { return schemas[r] }
		opt := oracle.LLMOptions{Schema: schema, RejectLeaks: cfg.OracleRejectLeaks, AllowLeaks: cfg.OracleAllowLeaks, MaxTokens: cfg.OracleMaxTokens, Version: oc.Version}
		unfiltered := oracle.NewLLM(client, opt)
		opt.Scoped = true
		scoped := oracle.NewLLM(client, opt)
		// Each LLM oracle is the pair Oracle{Matcher: l, Responder: l},
		// and each has its own hybrid: its own matcher (the same *LLM,
		// sharing its client and cache, so both see the same stage-1
		// answers) with the deterministic responder. A responder
		// diagnostic then never also changes the matcher (env.HybridOf
		// names each oracle's hybrid; ListOracles reports it).
		ecfg.Oracles[pb.OracleType_ORACLE_TYPE_LLM] = unfiltered.Oracle()
		ecfg.Oracles[pb.OracleType_ORACLE_TYPE_LLM_SCOPED] = scoped.Oracle()
		ecfg.Oracles[pb.OracleType_ORACLE_TYPE_HYBRID] = oracle.Hybrid(unfiltered)
		ecfg.Oracles[pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED] = oracle.Hybrid(scoped)
		cfg.Logger.Info("LLM oracles", zap.String("url", oc.BaseURL), zap.String("model", oc.Model))
	}
	if cfg.SolverLLM.BaseURL != "" {
		sc := cfg.SolverLLM
		sc.Cache = cache
		client, err := llm.New(sc, a.Metrics.Registerer())
		if err != nil {
			return fmt.Errorf("solver model: %w", err)
		}
		ecfg.LLMSolver = env.NewLLMSolver(client)
		cfg.Logger.Info("LLM solver", zap.String("url", sc.BaseURL), zap.String("model", sc.Model))
	}
	return nil
}

// Close runs the drain hooks if Serve did not, flushes traces, closes the
// episode log, the corpora and the response cache.
func (a *App) Close() error {
	if a.Server != nil {
		a.Server.Close() // its stream workers, when it was never served
	}
	a.runDrainHooks()
	a.closeOutputs()
	var errs []error
	if a.cache != nil {
		errs = append(errs, a.cache.Close())
	}
	for _, c := range a.corpora {
		errs = append(errs, c.Close())
	}
	if a.pg != nil {
		a.pg.Close()
	}
	return errors.Join(errs...)
}

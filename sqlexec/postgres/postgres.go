// Package postgres is the PostgreSQL engine of sqlexec: it administers a PostgreSQL server
// for avtgym (a policy role, databases loaded from BIRD-Interact table dumps or SQL
// scripts) and runs queries on those databases under the sqlexec.Engine contract.
//
// # Roles
//
// Connect takes the URL of an administrator (a role that may create roles and databases,
// usually a superuser). Every policy query, and every load, runs as a separate policy role
// (Config.Role, default "avtgym_policy") that the server creates once and re-asserts on
// every Connect, under a PostgreSQL advisory lock so that several processes may connect at
// once: LOGIN, NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS, a member of
// no role at all (so not of pg_read_server_files, pg_write_server_files or
// pg_execute_server_program), a CONNECTION LIMIT, and role-level settings (a default
// statement_timeout, lock_timeout, idle_in_transaction_session_timeout, temp_file_limit,
// work_mem, default_transaction_read_only = on, jit = off, no parallel workers, and
// track_activities = off so that one policy cannot read another's SQL, the reference SQL
// included, in pg_stat_activity). Policy connections authenticate as that role; nothing
// ever switches role on an administrator connection (which set_config('role', ...) could
// undo).
//
// The role's password is never stored: it is derived with HMAC-SHA-256 from
// Config.PasswordKey, or else from the administrator's password, so that every process
// given the same administrator URL derives the same password and re-asserting it is
// harmless; it changes when the key does. Without either (an administrator authenticated
// without a password) it is random per process, and a later process then locks the
// earlier ones' new connections out: give such deployments a PasswordKey. Only a SCRAM
// verifier of the password is sent to the server.
//
// A superuser administrator is best: only a superuser may set temp_file_limit and
// track_activities on the role and revoke functions in pg_catalog. An administrator
// with just CREATEROLE and CREATEDB works too; what it could not arrange is listed by
// Server.Warnings (the query checks deny those functions by name in any case).
//
// # Databases
//
// EnsureDatabase loads a Source (a folder of per-table dumps, or a script) into a template
// database and clones a working database from it; see its documentation and load.go.
//
// # Queries
//
// (*Server).Open returns a DB, a connection pool on one working database as the policy
// role, which implements sqlexec.Engine; see DB.Query for the defences and caps.
//
// # Stateful verification
//
// (*Server).OpenStateful returns a StatefulDB, which implements sqlexec.Stateful for
// Management tasks (SQL that writes): every verification in flight runs on a private
// copy of the template, in a transaction that is always rolled back, and the copy is
// checked and reset before it serves again; concurrent verifications neither see nor
// wait on each other. The copies are named per Server instance (InstanceID), which
// holds an advisory lock while it lives; a new StatefulDB drops the copies that dead
// instances left. See stateful.go for the design, the statement policy (checkStateful)
// and what a rollback does not undo.
package postgres

import (
	"context"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of Config.
const (
	DefaultRole                           = "avtgym_policy"
	DefaultStatementTimeout               = time.Minute
	DefaultLockTimeout                    = 10 * time.Second
	DefaultIdleInTransactionTimeout       = time.Minute
	DefaultTempFileLimit            int64 = 1 << 30
	DefaultWorkMem                  int64 = 32 << 20
	DefaultMaxDatabaseBytes         int64 = 1 << 30
	DefaultLoadTimeout                    = 5 * time.Minute
)

// Config configures a Server. Zero values mean the defaults.
type Config struct {
	// AdminURL is the URL of a role that may create roles and databases.
	AdminURL string
	// Role is the policy role's name; default DefaultRole. It must not be the
	// administrator.
	Role string
	// PasswordKey, when set, is the key the policy role's password is derived
	// from (otherwise the administrator's password is). Processes sharing a
	// server must derive the same password.
	PasswordKey []byte
	// ConnectionLimit is the policy role's CONNECTION LIMIT; default half the
	// server's max_connections (at least 4).
	ConnectionLimit int
	// StatementTimeout is the role's default statement_timeout (queries set
	// their own per transaction); default DefaultStatementTimeout.
	StatementTimeout time.Duration
	// LockTimeout is the role's default lock_timeout; default DefaultLockTimeout.
	LockTimeout time.Duration
	// IdleInTransactionTimeout is the role's
	// idle_in_transaction_session_timeout; default DefaultIdleInTransactionTimeout.
	IdleInTransactionTimeout time.Duration
	// TempFileLimit is the role's temp_file_limit in bytes (the most temporary
	// file space one session may use: large sorts and hashes spill there);
	// default DefaultTempFileLimit. Setting it needs a superuser administrator
	// (or one granted SET on the parameter); otherwise Warnings says so.
	TempFileLimit int64
	// WorkMem is the role's default work_mem in bytes; default DefaultWorkMem.
	WorkMem int64
	// MaxDatabaseBytes bounds a loaded database: pg_database_size is checked
	// after each file and after the load, and a database past it is dropped;
	// default DefaultMaxDatabaseBytes.
	MaxDatabaseBytes int64
	// LoadTimeout bounds one load; default DefaultLoadTimeout. The caller's
	// context deadline applies as well.
	LoadTimeout time.Duration
	// Connections is the most connections this process opens as the
	// policy role (budget.go): the private copies' sessions, the Python
	// workers', and the query pools, which share the rest. Default
	// DefaultConnections, lowered to what the role and the server have
	// free; more than they have free is an error at Connect.
	Connections int
	// PythonConnections is how many Python test workers may hold a
	// session on a copy at once (the PyRunner's workers); reserved in the
	// budget when a StatefulDB opens with a PyRunner. Default GOMAXPROCS.
	PythonConnections int
	// MaxBackendMemory bounds how far one policy statement may grow its
	// backend's private memory (memwatch.go): past it the statement is
	// canceled and fails with KindTooMuchMemory. Default
	// DefaultMaxBackendMemory; negative turns the watch off. The watch
	// needs the server's backends on this machine; otherwise Warnings
	// says so.
	MaxBackendMemory int64
	// Clock is how the Server waits between the tries of its retry loops
	// (see Clock). Nil means real time. Tests inject a fake that records
	// the waits and returns at once.
	Clock Clock
}

func (c *Config) defaults() {
	if c.Role == "" {
		c.Role = DefaultRole
	}
	if c.StatementTimeout <= 0 {
		c.StatementTimeout = DefaultStatementTimeout
	}
	if c.LockTimeout <= 0 {
		c.LockTimeout = DefaultLockTimeout
	}
	if c.IdleInTransactionTimeout <= 0 {
		c.IdleInTransactionTimeout = DefaultIdleInTransactionTimeout
	}
	if c.TempFileLimit <= 0 {
		c.TempFileLimit = DefaultTempFileLimit
	}
	if c.WorkMem <= 0 {
		c.WorkMem = DefaultWorkMem
	}
	if c.MaxDatabaseBytes <= 0 {
		c.MaxDatabaseBytes = DefaultMaxDatabaseBytes
	}
	if c.LoadTimeout <= 0 {
		c.LoadTimeout = DefaultLoadTimeout
	}
	if c.PythonConnections <= 0 {
		c.PythonConnections = runtime.GOMAXPROCS(0)
	}
	if c.MaxBackendMemory == 0 {
		c.MaxBackendMemory = DefaultMaxBackendMemory
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
}

// Server is a PostgreSQL server administered for avtgym: the policy role exists
// with its settings. It is safe for concurrent use.
type Server struct {
	cfg      Config
	admin    *pgxpool.Pool
	adminCfg *pgxpool.Config // parsed AdminURL, the base of every connection's config
	password string

	mu       sync.Mutex
	warnings []string

	// instMu guards inst, the owner of this Server's clones (clones.go);
	// cloneSeq numbers the clones, so that every clone of an instance has a
	// name of its own.
	instMu   sync.Mutex
	inst     *instance
	cloneSeq atomic.Int64

	// mw watches the memory of backends running policy statements; nil
	// when the backends cannot be read here (memwatch.go).
	mw *memWatch
	// budget counts the policy-role connections (budget.go).
	budget budget
	// checks keeps the outcomes of the statement checks by text
	// (stmts.go), for every DB and StatefulDB of the Server.
	checks *stmtChecks
}

// Connect connects to the server at adminURL with the default Config.
func Connect(ctx context.Context, adminURL string) (*Server, error) {
	return ConnectConfig(ctx, Config{AdminURL: adminURL})
}

// ConnectConfig connects to the server at cfg.AdminURL and creates or
// re-asserts the policy role (attributes, memberships, settings, password). It
// fails when the role cannot be made safe (for example when it is the
// administrator, or a superuser the administrator cannot demote).
func ConnectConfig(ctx context.Context, cfg Config) (*Server, error) {
	cfg.defaults()
	pcfg, err := pgxpool.ParseConfig(cfg.AdminURL)
	if err != nil {
		return nil, fmt.Errorf("postgres: the administrator URL does not parse: %w", err)
	}
	if !validRoleName(cfg.Role) {
		return nil, fmt.Errorf("postgres: the policy role name %q is not a plain identifier (lower-case letters, digits, _)", cfg.Role)
	}
	if strings.EqualFold(cfg.Role, pcfg.ConnConfig.User) {
		return nil, fmt.Errorf("postgres: the policy role %q is the administrator; choose another name", cfg.Role)
	}
	acfg := pcfg.Copy()
	acfg.MaxConns = 4
	acfg.MinConns = 0
	acfg.MaxConnIdleTime = time.Minute
	admin, err := pgxpool.NewWithConfig(ctx, acfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connecting as the administrator: %w", err)
	}
	s := &Server{cfg: cfg, admin: admin, adminCfg: pcfg, checks: newStmtChecks()}
	s.budget = budget{pyWorkers: cfg.PythonConnections, pools: map[*pgxpool.Pool]bool{}, clock: cfg.Clock}
	key := cfg.PasswordKey
	if len(key) == 0 && pcfg.ConnConfig.Password != "" {
		key = []byte(pcfg.ConnConfig.Password)
	}
	if len(key) == 0 {
		key = make([]byte, 32)
		rand.Read(key)
		s.warn("the administrator URL has no password and no password key is set: the policy role's password is random for this process, and another process connecting later (a replica) will lock this one's new connections out; give every replica the same key (serve --postgres-password-key-file, or --token-key-file, from which it is derived)")
	}
	s.password = derivePassword(key, cfg.Role)
	if err := s.ensureRole(ctx); err != nil {
		admin.Close()
		return nil, err
	}
	if cfg.MaxBackendMemory > 0 {
		if err := s.startMemWatch(ctx); err != nil {
			admin.Close()
			return nil, err
		}
	}
	return s, nil
}

// startMemWatch starts the backend memory watch when this process can read
// the server's backends (its own administrator backend is the test), and
// warns otherwise.
func (s *Server) startMemWatch(ctx context.Context) error {
	var pid int
	var user, db string
	if err := s.admin.QueryRow(ctx, "SELECT pg_backend_pid(), current_user::text, current_database()::text").Scan(&pid, &user, &db); err != nil {
		return fmt.Errorf("postgres: reading the administrator's backend: %w", err)
	}
	w := newMemWatch(s.cfg.MaxBackendMemory)
	if _, ok := w.anon(pid); !ok || !w.isBackend(pid, user, db) {
		s.warn("the server's backends are not on this machine (or not readable in /proc): the per-statement memory bound (MaxBackendMemory, serve --postgres-max-backend-memory) is off; bound the backends on the database host instead (docs/limits.md: the postmaster's RLIMIT_AS)")
		return nil
	}
	s.mw = w
	w.start()
	return nil
}

// cancelBackend cancels what backend pid runs, as the administrator.
func (s *Server) cancelBackend(pid int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.admin.Exec(ctx, "SELECT pg_catalog.pg_cancel_backend($1)", int32(pid))
}

// MemoryCancels counts the policy statements canceled because their
// backend passed MaxBackendMemory.
func (s *Server) MemoryCancels() int64 {
	if s.mw == nil {
		return 0
	}
	return s.mw.fired.Load()
}

// Close closes the administrator's connections and releases the instance
// lock (the clones of StatefulDBs still open become another instance's to
// sweep). Open DBs stay usable until they are closed; close StatefulDBs
// first.
func (s *Server) Close() {
	s.mw.stop()
	s.closeInstance()
	s.admin.Close()
}

// Role returns the policy role's name.
func (s *Server) Role() string { return s.cfg.Role }

// Warnings returns what the server could not arrange and went on without
// (a role setting that needs a superuser, a privilege it could not revoke).
func (s *Server) Warnings() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.warnings...)
}

func (s *Server) warn(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.warnings = append(s.warnings, fmt.Sprintf(format, args...))
}

// derivePassword derives the policy role's password from key.
func derivePassword(key []byte, role string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("avtgym policy role password v1\x00" + role))
	return hex.EncodeToString(m.Sum(nil))
}

// scramVerifier returns the SCRAM-SHA-256 verifier PostgreSQL stores for
// password (RFC 5802, 7677; PostgreSQL's format), so that the password itself
// never reaches the server or its logs.
func scramVerifier(password string) (string, error) {
	const iterations = 4096
	salt := make([]byte, 16)
	rand.Read(salt)
	salted, err := pbkdf2.Key(sha256.New, password, salt, iterations, sha256.Size)
	if err != nil {
		return "", err
	}
	mac := func(key []byte, msg string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	serverKey := mac(salted, "Server Key")
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", iterations, b64(salt), b64(stored[:]), b64(serverKey)), nil
}

// Advisory-lock keys (the two-int4 form): lockSpace is avtgym's namespace.
const (
	lockSpace = 0x61767467 // "avtg"
	roleLock  = 1
)

// withAdvisoryLock runs fn on an administrator connection holding the session
// advisory lock (lockSpace, key), so that processes sharing the server take
// turns. The wait is bounded by ctx.
func (s *Server) withAdvisoryLock(ctx context.Context, key int32, fn func(conn *pgxpool.Conn) error) error {
	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: connecting as the administrator: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", int32(lockSpace), key); err != nil {
		return fmt.Errorf("postgres: waiting for the advisory lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1, $2)", int32(lockSpace), key); err != nil {
			conn.Conn().Close(uctx) // closing the session releases the lock
		}
	}()
	return fn(conn)
}

// dangerousRoles are roles the policy role must never be a member of (it is
// made a member of none; these are checked by name for the error message).
var dangerousRoles = []string{"pg_read_server_files", "pg_write_server_files", "pg_execute_server_program",
	"pg_read_all_data", "pg_write_all_data", "pg_signal_backend", "pg_read_all_stats", "pg_monitor"}

// ensureRole creates the policy role if it is missing and re-asserts its
// attributes, memberships, settings and password, under the role lock.
func (s *Server) ensureRole(ctx context.Context) error {
	role := s.cfg.Role
	ident := pgx.Identifier{role}.Sanitize()
	return s.withAdvisoryLock(ctx, roleLock, func(conn *pgxpool.Conn) error {
		var adminSuper bool
		var maxConns int
		if err := conn.QueryRow(ctx, "SELECT rolsuper, current_setting('max_connections')::int FROM pg_roles WHERE rolname = current_user").
			Scan(&adminSuper, &maxConns); err != nil {
			return fmt.Errorf("postgres: reading the administrator's role: %w", err)
		}
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", role).Scan(&exists); err != nil {
			return fmt.Errorf("postgres: looking up the policy role: %w", err)
		}
		if !exists {
			if _, err := conn.Exec(ctx, "CREATE ROLE "+ident+" NOLOGIN"); err != nil {
				return fmt.Errorf("postgres: creating the policy role %s: %w", role, err)
			}
		}
		limit := s.cfg.ConnectionLimit
		if limit <= 0 {
			limit = max(maxConns/2, 4)
		}
		verifier, err := scramVerifier(s.password)
		if err != nil {
			return err
		}
		// Only a superuser may name the superuser, replication and bypassrls
		// attributes (checkRole verifies them in any case).
		super := ""
		if adminSuper {
			super = " NOSUPERUSER NOREPLICATION NOBYPASSRLS"
		}
		attrs := fmt.Sprintf("ALTER ROLE %s LOGIN NOCREATEDB NOCREATEROLE%s INHERIT CONNECTION LIMIT %d PASSWORD '%s' VALID UNTIL 'infinity'",
			ident, super, limit, verifier)
		if _, err := conn.Exec(ctx, attrs); err != nil {
			return fmt.Errorf("postgres: setting the policy role's attributes: %w", err)
		}
		// Memberships: none at all.
		rows, err := conn.Query(ctx, `SELECT r.rolname FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.roleid
			WHERE m.member = (SELECT oid FROM pg_roles WHERE rolname = $1)`, role)
		if err != nil {
			return fmt.Errorf("postgres: reading the policy role's memberships: %w", err)
		}
		groups, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("postgres: reading the policy role's memberships: %w", err)
		}
		for _, g := range groups {
			if _, err := conn.Exec(ctx, "REVOKE "+pgx.Identifier{g}.Sanitize()+" FROM "+ident); err != nil {
				return fmt.Errorf("postgres: the policy role is a member of %s and that could not be revoked: %w", g, err)
			}
		}
		// The administrator must be able to create databases owned by the role
		// (PostgreSQL 15 wants membership for that unless it is a superuser).
		if !adminSuper {
			if _, err := conn.Exec(ctx, "GRANT "+ident+" TO CURRENT_USER"); err != nil {
				return fmt.Errorf("postgres: granting the policy role to the administrator: %w", err)
			}
		}
		for _, st := range s.roleSettings() {
			if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER ROLE %s SET %s = '%s'", ident, st.name, st.value)); err != nil {
				var pgErr *pgconn.PgError
				if errors.As(err, &pgErr) && pgErr.Code == "42501" {
					s.warn("the role setting %s = %s needs a superuser administrator and was not set: %s", st.name, st.value, pgErr.Message)
					continue
				}
				return fmt.Errorf("postgres: setting %s on the policy role: %w", st.name, err)
			}
		}
		if err := s.checkRole(ctx, conn); err != nil {
			return err
		}
		return s.checkBudget(ctx, conn)
	})
}

type setting struct{ name, value string }

// roleSettings are the policy role's settings (ALTER ROLE ... SET).
func (s *Server) roleSettings() []setting {
	ms := func(d time.Duration) string { return fmt.Sprintf("%dms", max(d.Milliseconds(), 1)) }
	kb := func(n int64) string { return fmt.Sprintf("%dkB", max(n/1024, 64)) }
	return []setting{
		{"statement_timeout", ms(s.cfg.StatementTimeout)},
		{"lock_timeout", ms(s.cfg.LockTimeout)},
		{"idle_in_transaction_session_timeout", ms(s.cfg.IdleInTransactionTimeout)},
		{"work_mem", kb(s.cfg.WorkMem)},
		{"default_transaction_read_only", "on"},
		// A backend notices a vanished client during a long query.
		{"client_connection_check_interval", "1s"},
		// JIT compilation and parallel workers would use CPU and memory outside
		// the engine's accounting (sqlexec.Lanes counts one query as one CPU).
		{"jit", "off"},
		{"max_parallel_workers_per_gather", "0"},
		// Superuser-only settings last (a non-superuser administrator gets a warning).
		{"temp_file_limit", kb(s.cfg.TempFileLimit)},
		// Policies share the role: without this, pg_stat_activity would show
		// one policy the SQL (reference SQL included) another is running.
		{"track_activities", "off"},
	}
}

// checkRole verifies that the policy role is what ensureRole made it.
func (s *Server) checkRole(ctx context.Context, conn *pgxpool.Conn) error {
	var super, createdb, createrole, repl, bypass, login bool
	var members int
	err := conn.QueryRow(ctx, `SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls, rolcanlogin,
		(SELECT count(*) FROM pg_auth_members m WHERE m.member = r.oid)
		FROM pg_roles r WHERE rolname = $1`, s.cfg.Role).Scan(&super, &createdb, &createrole, &repl, &bypass, &login, &members)
	if err != nil {
		return fmt.Errorf("postgres: checking the policy role: %w", err)
	}
	if super || createdb || createrole || repl || bypass || !login || members != 0 {
		return fmt.Errorf("postgres: the policy role %s is not safe to run queries as (superuser %v, createdb %v, createrole %v, replication %v, bypassrls %v, login %v, memberships %d)",
			s.cfg.Role, super, createdb, createrole, repl, bypass, login, members)
	}
	for _, g := range dangerousRoles {
		var member bool
		if err := conn.QueryRow(ctx, "SELECT pg_has_role($1, $2, 'USAGE')", s.cfg.Role, g).Scan(&member); err != nil {
			return fmt.Errorf("postgres: checking the policy role's membership of %s: %w", g, err)
		}
		if member {
			return fmt.Errorf("postgres: the policy role %s has the privileges of %s", s.cfg.Role, g)
		}
	}
	return nil
}

// policyConfig returns a connection config for the policy role on database db.
func (s *Server) policyConfig(db string) *pgxpool.Config {
	c := s.adminCfg.Copy()
	c.ConnConfig.User = s.cfg.Role
	c.ConnConfig.Password = s.password
	c.ConnConfig.Database = db
	rp := map[string]string{}
	for k, v := range s.adminCfg.ConnConfig.RuntimeParams {
		rp[k] = v
	}
	// Pinned session settings: text output of dates and numbers, and a UTC
	// time zone (client settings outrank role and database defaults).
	rp["DateStyle"] = "ISO, YMD"
	rp["IntervalStyle"] = "postgres"
	rp["TimeZone"] = "UTC"
	rp["extra_float_digits"] = "1"
	rp["bytea_output"] = "hex"
	rp["client_encoding"] = "UTF8"
	rp["application_name"] = "avtgym"
	c.ConnConfig.RuntimeParams = rp
	return c
}

// validRoleName accepts plain lower-case identifiers.
func validRoleName(s string) bool {
	if s == "" || len(s) > 63 || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

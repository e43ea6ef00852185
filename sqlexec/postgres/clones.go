package postgres

// This file manages the private copies of stateful verification: the server instance
// that owns them (an advisory lock held while it lives), their names, the sweep of a dead
// instance's copies, and each copy's life: clone, connect, record the pristine sequence
// state, check and reset after a job, drop.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"strconv"
	"strings"
	"time"

	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// Clone names: "avtgym_x" + 8 hex digits of the working database's name +
// "_" + the instance id (8 hex digits) + "_" + a number unique in the
// instance; at most 63 bytes whatever the working name.
const (
	clonePrefix = "avtgym_x"
	// instanceLock is the advisory-lock class (the first int4 key) of
	// instance locks; the second key is the instance id.
	instanceLock = 0x61767463 // "avtc"
)

// cloneBase returns the part of the clone names of working database work
// that precedes the instance id: clonePrefix + hash + "_".
func cloneBase(work string) string {
	h := fnv.New32a()
	h.Write([]byte(work))
	return fmt.Sprintf("%s%08x_", clonePrefix, h.Sum32())
}

// cloneName returns the name of clone n of work owned by instance inst.
func cloneName(work string, inst uint32, n int) string {
	return fmt.Sprintf("%s%08x_%d", cloneBase(work), inst, n)
}

// parseCloneName returns the instance id in a clone name of work.
func parseCloneName(work, name string) (uint32, bool) {
	rest, ok := strings.CutPrefix(name, cloneBase(work))
	if !ok {
		return 0, false
	}
	id, slot, ok := strings.Cut(rest, "_")
	if !ok || len(id) != 8 {
		return 0, false
	}
	if _, err := strconv.Atoi(slot); err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(id, 16, 32)
	if err != nil {
		return 0, false
	}
	return uint32(v), true
}

// instance is this process's identity as an owner of clones: a random id,
// and an administrator session holding the advisory lock (instanceLock, id)
// for as long as the Server lives. Another instance's sweep drops only the
// clones whose owner's lock is not held.
type instance struct {
	id   uint32
	conn *pgx.Conn
}

// InstanceID returns the id that names this Server's clones (8 hex
// digits), creating the instance (and taking its lock) on first use.
func (s *Server) InstanceID(ctx context.Context) (string, error) {
	inst, err := s.ensureInstance(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%08x", inst.id), nil
}

// ensureInstance returns the Server's instance, taking its lock on first
// use and again when the session holding it was lost.
func (s *Server) ensureInstance(ctx context.Context) (*instance, error) {
	s.instMu.Lock()
	defer s.instMu.Unlock()
	if s.inst != nil {
		if s.inst.conn != nil && !s.inst.conn.IsClosed() {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := s.inst.conn.Ping(pctx)
			cancel()
			if err == nil {
				return s.inst, nil
			}
			s.inst.conn.Close(context.Background())
		}
		s.warn("the session holding this instance's lock (%08x) was lost; it was taken again", s.inst.id)
	} else {
		var b [4]byte
		rand.Read(b[:])
		s.inst = &instance{id: binary.BigEndian.Uint32(b[:])}
	}
	cfg := s.adminCfg.ConnConfig.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = fmt.Sprintf("avtgym instance %08x", s.inst.id)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connecting as the administrator for the instance lock: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", int32(instanceLock), int32(s.inst.id)); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("postgres: taking the instance lock: %w", err)
	}
	s.inst.conn = conn
	return s.inst, nil
}

// closeInstance releases the instance lock (its clones become sweepable).
func (s *Server) closeInstance() {
	s.instMu.Lock()
	defer s.instMu.Unlock()
	if s.inst != nil && s.inst.conn != nil {
		s.inst.conn.Close(context.Background())
		s.inst.conn = nil
	}
}

// instanceAlive reports whether instance id holds its lock.
func (s *Server) instanceAlive(ctx context.Context, id uint32) (bool, error) {
	var alive bool
	err := s.admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 2)`, int64(uint32(instanceLock)), int64(id)).Scan(&alive)
	if err != nil {
		return false, fmt.Errorf("postgres: looking up instance %08x: %w", id, err)
	}
	return alive, nil
}

// sweepClones drops the clones of working database work whose instance is
// dead (its lock is not held), and returns their names. The clones of live
// instances, this one's included, and every other database are untouched.
func (s *Server) sweepClones(ctx context.Context, work string) ([]string, error) {
	base := cloneBase(work)
	like := strings.ReplaceAll(base, "_", `\_`) + "%"
	rows, err := s.admin.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1 ORDER BY 1", like)
	if err != nil {
		return nil, fmt.Errorf("postgres: listing clones of %s: %w", work, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: listing clones of %s: %w", work, err)
	}
	alive := map[uint32]bool{}
	var swept []string
	for _, n := range names {
		id, ok := parseCloneName(work, n)
		if !ok {
			continue
		}
		a, seen := alive[id]
		if !seen {
			if a, err = s.instanceAlive(ctx, id); err != nil {
				return swept, err
			}
			alive[id] = a
		}
		if a {
			continue
		}
		if err := s.dropClone(ctx, n); err != nil {
			return swept, err
		}
		swept = append(swept, n)
	}
	return swept, nil
}

// dropClone drops a clone, rolling back any prepared transaction left in it
// first (a database with one cannot be dropped).
func (s *Server) dropClone(ctx context.Context, name string) error {
	rows, err := s.admin.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = $1", name)
	if err != nil {
		return fmt.Errorf("postgres: looking for prepared transactions in %s: %w", name, err)
	}
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("postgres: looking for prepared transactions in %s: %w", name, err)
	}
	if len(gids) > 0 {
		cfg := s.adminCfg.ConnConfig.Copy()
		cfg.Database = name
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("postgres: connecting to %s to roll back its prepared transactions: %w", name, err)
		}
		for _, g := range gids {
			if _, err := c.Exec(ctx, "ROLLBACK PREPARED "+quoteLiteral(g)); err != nil {
				c.Close(context.Background())
				return fmt.Errorf("postgres: rolling back prepared transaction %q in %s: %w", g, name, err)
			}
		}
		c.Close(context.Background())
	}
	if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("postgres: dropping clone %s: %w", name, err)
	}
	return nil
}

// createClone creates database name as a clone of template tpl, owned by
// the policy role, with no privileges for PUBLIC. The template accepts no
// connections, so no one is connected to it and the copy is consistent;
// while someone is (an administrator dumping it), CREATE DATABASE fails with
// 55006 and is retried.
func (s *Server) createClone(ctx context.Context, name, tpl, work string, inst uint32) error {
	ident := pgx.Identifier{name}.Sanitize()
	create := fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s OWNER %s", ident, pgx.Identifier{tpl}.Sanitize(), pgx.Identifier{s.cfg.Role}.Sanitize())
	for attempt := 0; ; attempt++ {
		_, err := s.admin.Exec(ctx, create)
		if err == nil {
			break
		}
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55006" && attempt < 100 && s.cfg.Clock.Sleep(ctx, 50*time.Millisecond) == nil {
			continue
		}
		return fmt.Errorf("postgres: cloning %s from %s: %w", name, tpl, err)
	}
	for _, q := range []string{
		"REVOKE ALL ON DATABASE " + ident + " FROM PUBLIC",
		fmt.Sprintf("COMMENT ON DATABASE %s IS %s", ident, quoteLiteral(fmt.Sprintf("avtgym clone of %s, instance %08x", work, inst))),
	} {
		if _, err := s.admin.Exec(ctx, q); err != nil {
			return fmt.Errorf("postgres: preparing clone %s: %w", name, err)
		}
	}
	return nil
}

// quoteLiteral quotes s as a SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// cloneConnConfig returns the policy role's connection config for a clone:
// read-write transactions allowed (every job still opens its own), and a
// canceled context sends a cancel request.
func (s *Server) cloneConnConfig(name string) *pgconn.Config {
	cfg := s.policyConfig(name).ConnConfig
	cfg.RuntimeParams["default_transaction_read_only"] = "off"
	cfg.RuntimeParams["application_name"] = "avtgym stateful"
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: time.Second}
	}
	return &cfg.Config
}

// cloneDSN returns the libpq connection string a PyRunner uses for a clone:
// the administrator URL's host, port and TLS settings, with the policy
// role's name and password, the clone's name, and session options
// (read-write transactions allowed, the session pins of policyConfig).
func (s *Server) cloneDSN(name string) string {
	opts := "-c default_transaction_read_only=off -c TimeZone=UTC -c DateStyle=ISO,YMD -c IntervalStyle=postgres"
	u := s.cfg.AdminURL
	if strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://") {
		if pu, err := url.Parse(u); err == nil {
			pu.User = url.UserPassword(s.cfg.Role, s.password)
			pu.Path = "/" + name
			pu.RawPath = ""
			q := pu.Query()
			q.Del("user")
			q.Del("password")
			q.Del("dbname")
			q.Set("options", opts)
			q.Set("application_name", "avtgym pytest")
			// libpq reads "+" as itself, not as a space.
			pu.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
			return pu.String()
		}
	}
	// A keyword/value string: libpq keeps the last value of a repeated keyword.
	kv := func(k, v string) string {
		return " " + k + "='" + strings.ReplaceAll(strings.ReplaceAll(v, `\`, `\\`), "'", `\'`) + "'"
	}
	return strings.TrimSpace(u) + kv("user", s.cfg.Role) + kv("password", s.password) + kv("dbname", name) +
		kv("options", opts) + kv("application_name", "avtgym pytest")
}

// seqState is a sequence's state as pg_dump reads it.
type seqState struct {
	name     string // quoted, schema-qualified
	last     int64
	isCalled bool
}

// readSequences reads the state of every sequence of the database pc is
// connected to.
func readSequences(ctx context.Context, pc *pgconn.PgConn) ([]seqState, error) {
	res := pc.ExecParams(ctx, `SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind = 'S' ORDER BY 1`, nil, nil, nil, nil).Read()
	if res.Err != nil {
		return nil, res.Err
	}
	if len(res.Rows) == 0 {
		return nil, nil
	}
	seqs := make([]seqState, len(res.Rows))
	parts := make([]string, len(res.Rows))
	for i, r := range res.Rows {
		seqs[i].name = string(r[0])
		parts[i] = fmt.Sprintf("SELECT %d, last_value, is_called FROM %s", i, seqs[i].name)
	}
	res = pc.ExecParams(ctx, strings.Join(parts, " UNION ALL "), nil, nil, nil, nil).Read()
	if res.Err != nil {
		return nil, res.Err
	}
	if len(res.Rows) != len(seqs) {
		return nil, fmt.Errorf("read %d sequence states for %d sequences", len(res.Rows), len(seqs))
	}
	for _, r := range res.Rows {
		i, err1 := strconv.Atoi(string(r[0]))
		v, err2 := strconv.ParseInt(string(r[1]), 10, 64)
		if err1 != nil || err2 != nil || i < 0 || i >= len(seqs) {
			return nil, fmt.Errorf("unexpected sequence state %q", r)
		}
		seqs[i].last, seqs[i].isCalled = v, string(r[2]) == "t"
	}
	return seqs, nil
}

// checkSQL returns the statement run after a job on a clone (in the job's
// own round trip). It resets every sequence that moved (nextval and setval
// are not rolled back) to its pristine state, and returns how many it
// reset. The full check (full) also returns: the session state that
// outlives a transaction (session advisory locks, prepared statements,
// cursors, LISTEN channels: none should exist); the prepared transactions
// in the database; and the committed row changes (n_mod_since_analyze,
// which PostgreSQL counts on commit only, summed over every table of the
// database, the catalogs included, the shared ones and the planner's
// statistics excluded), which stays at its pristine value unless something
// committed. pg_statistic (and pg_statistic_ext_data) are left out because
// autovacuum's own ANALYZE commits into them on a busy server: that changes
// plans, never results, and counting it re-cloned copies for nothing. The quick check
// returns zeros for those: the job's checked statements cannot commit or
// leave session state; it returns -1 for them (not checked). The full check
// runs after a PyRunner's job, on a new session, and every fullCheckEvery
// jobs.
func checkSQL(seqs []seqState, full bool) string {
	reset := "0::bigint"
	if len(seqs) > 0 {
		parts := make([]string, len(seqs))
		for i, q := range seqs {
			parts[i] = fmt.Sprintf("SELECT setval(%s, %d, %t) FROM %s WHERE (last_value, is_called) IS DISTINCT FROM (%d::bigint, %t)",
				quoteLiteral(q.name), q.last, q.isCalled, q.name, q.last, q.isCalled)
		}
		reset = "(SELECT count(*) FROM (" + strings.Join(parts, " UNION ALL ") + ") r)"
	}
	if !full {
		return "SELECT " + reset + ", -1::bigint, -1::bigint, -1::bigint"
	}
	return "SELECT " + reset + `,
	(SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory')
	+ (SELECT count(*) FROM pg_prepared_statements) + (SELECT count(*) FROM pg_cursors WHERE name <> '')
	+ (SELECT count(*) FROM pg_listening_channels()),
	(SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()),
	(SELECT coalesce(sum(pg_stat_get_mod_since_analyze(c.oid)), 0) FROM pg_class c WHERE c.relkind IN ('r', 't', 'm') AND NOT c.relisshared
	  AND c.oid NOT IN ('pg_catalog.pg_statistic'::regclass, 'pg_catalog.pg_statistic_ext_data'::regclass))::bigint`
}

// afterJob is what checkSQL found (-1: not checked).
type afterJob struct {
	reset, session, prepared, mods int64
}

// escaped reports whether the copy changed outside a transaction.
func (a afterJob) escaped(pristineMods int64) bool {
	return a.prepared > 0 || a.mods >= 0 && a.mods != pristineMods
}

// parseAfterJob reads checkSQL's row.
func parseAfterJob(rows [][][]byte) (afterJob, error) {
	if len(rows) != 1 || len(rows[0]) != 4 {
		return afterJob{}, fmt.Errorf("the check after a job returned %d rows", len(rows))
	}
	var a afterJob
	for i, p := range []*int64{&a.reset, &a.session, &a.prepared, &a.mods} {
		v, err := strconv.ParseInt(string(rows[0][i]), 10, 64)
		if err != nil {
			return afterJob{}, fmt.Errorf("the check after a job returned %q", rows[0])
		}
		*p = v
	}
	return a, nil
}

// backendsOn returns the client sessions on database name other than
// except's.
func (s *Server) backendsOn(ctx context.Context, name string, except uint32) ([]uint32, error) {
	rows, err := s.admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> $2
		AND backend_type = 'client backend'`, name, int64(except))
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := make([]uint32, len(pids))
	for i, p := range pids {
		out[i] = uint32(p)
	}
	return out, nil
}

// waitSessionsGone waits until no client session but except's is connected
// to database name: the sessions a PyRunner opened, or a connection this
// package closed, end on their own (a closed client connection ends its
// session, and its transaction rolls back); those still there after grace
// are terminated. It returns how many were terminated.
func (s *Server) waitSessionsGone(ctx context.Context, name string, except uint32, grace time.Duration) (int, error) {
	clock := s.cfg.Clock
	deadline := clock.Now().Add(grace)
	pause := 500 * time.Microsecond
	terminated := 0
	for {
		pids, err := s.backendsOn(ctx, name, except)
		if err != nil {
			return terminated, fmt.Errorf("postgres: listing the sessions on %s: %w", name, err)
		}
		if len(pids) == 0 {
			return terminated, nil
		}
		if clock.Now().After(deadline) {
			for _, p := range pids {
				if _, err := s.admin.Exec(ctx, "SELECT pg_terminate_backend($1, 5000)", int32(p)); err != nil {
					return terminated, fmt.Errorf("postgres: terminating session %d on %s: %w", p, name, err)
				}
				terminated++
			}
			deadline = clock.Now().Add(grace)
			continue
		}
		if err := clock.Sleep(ctx, pause); err != nil {
			return terminated, err
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// errClone wraps a failure of the clone machinery as KindUnavailable.
func errClone(err error, format string, args ...any) error {
	return sqlexec.Errorf(sqlexec.KindUnavailable, err, format+": %v", append(args, err)...)
}

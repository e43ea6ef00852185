package postgres

// This file loads databases: a Source (BIRD-Interact table dumps, or a script) becomes a
// template database, and a working database is cloned from it.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// LoaderVersion is part of every database's content hash: a change to how
// sources are loaded (bump it) makes every database load again.
const LoaderVersion = "2" // 2: the statistics views revoked (issue 25)

// Source is what a database is loaded from: a folder of table dumps, or a
// script.
type Source struct {
	// DumpDir is a folder in BIRD-Interact's postgre_table_dumps/<db>_template
	// layout: one <table>.sql per table, each the plain output of
	// pg_dump --no-owner --no-privileges -t <table>. The files load in the
	// order their FOREIGN KEY ... REFERENCES clauses require.
	DumpDir string
	// Script is the text of a SQL script (psql syntax: COPY ... FROM stdin
	// blocks allowed), used when DumpDir is "".
	Script string
	// ScriptName names the script in messages; default "script".
	ScriptName string
}

// DumpDir returns the Source of a folder of table dumps.
func DumpDir(dir string) Source { return Source{DumpDir: dir} }

// Script returns the Source of a SQL script; name names it in messages.
func Script(name, text string) Source { return Source{Script: text, ScriptName: name} }

// srcFile is one file of a source.
type srcFile struct {
	name string // the file's base name (or the script's name)
	path string // "" for a script given as text
	text string
}

func (f srcFile) open() (io.ReadCloser, error) {
	if f.path == "" {
		return io.NopCloser(strings.NewReader(f.text)), nil
	}
	return os.Open(f.path)
}

// files lists the source's files (dumps sorted by name) and hashes them with
// LoaderVersion.
func (src Source) files() ([]srcFile, string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "avtgym postgres loader %s\x00", LoaderVersion)
	if src.DumpDir == "" {
		name := src.ScriptName
		if name == "" {
			name = "script"
		}
		fmt.Fprintf(h, "script\x00%d\x00", len(src.Script))
		io.WriteString(h, src.Script)
		return []srcFile{{name: name, text: src.Script}}, hex.EncodeToString(h.Sum(nil)), nil
	}
	ents, err := os.ReadDir(src.DumpDir)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: reading the dump folder: %w", err)
	}
	var files []srcFile
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		if !e.Type().IsRegular() {
			return nil, "", fmt.Errorf("postgres: %s in the dump folder %s is not a regular file", e.Name(), src.DumpDir)
		}
		files = append(files, srcFile{name: e.Name(), path: filepath.Join(src.DumpDir, e.Name())})
	}
	if len(files) == 0 {
		return nil, "", fmt.Errorf("postgres: the dump folder %s holds no .sql file", src.DumpDir)
	}
	slices.SortFunc(files, func(a, b srcFile) int { return strings.Compare(a.name, b.name) })
	for _, f := range files {
		r, err := os.Open(f.path)
		if err != nil {
			return nil, "", fmt.Errorf("postgres: %w", err)
		}
		fi, err := r.Stat()
		if err == nil {
			fmt.Fprintf(h, "file\x00%s\x00%d\x00", f.name, fi.Size())
			_, err = io.Copy(h, r)
		}
		r.Close()
		if err != nil {
			return nil, "", fmt.Errorf("postgres: reading %s: %w", f.path, err)
		}
	}
	return files, hex.EncodeToString(h.Sum(nil)), nil
}

// LoadError is a load that failed: where, and why.
type LoadError struct {
	// Source is the dump folder ("" for a script).
	Source string
	// File is the dump file's or the script's name; Line the line the
	// statement starts on (0 when the failure is not tied to one); Stmt the
	// start of the statement.
	File string
	Line int
	Stmt string
	// Err says what failed: KindSyntax for what does not parse (or is not
	// SQL), KindDenied for what a load may not do, KindTimeout for the time
	// limit, KindTooManyBytes for the size cap, KindExecution for a statement
	// PostgreSQL refused, KindUnavailable for the server or the files.
	Err *sqlexec.Error
}

func (e *LoadError) Error() string {
	file := e.File
	if e.Source != "" {
		file = filepath.Join(e.Source, e.File)
	}
	where := fileLine(file, e.Line)
	if e.Stmt != "" {
		where += " (" + e.Stmt + ")"
	}
	if where == "" {
		return "postgres: loading: " + e.Err.Error()
	}
	return "postgres: loading " + where + ": " + e.Err.Error()
}

// Unwrap returns the *sqlexec.Error, so that sqlexec.KindOf sees the kind.
func (e *LoadError) Unwrap() error { return e.Err }

// Database names.
const (
	namePrefix     = "avtgym_"
	templateSuffix = "_t"
	maxCorpusName  = 16
	maxDBName      = 22
	hashChars      = 12
)

// DatabaseName returns the working database's name for a corpus, database id
// and content hash: avtgym_<corpus>_<db>_<hash12>, the parts lower-cased,
// with characters other than [a-z0-9_] replaced by _ and cut to 16 and 22
// bytes, so that the template's name (TemplateName) stays within
// PostgreSQL's 63 bytes. The hash keeps names that the cuts made alike apart.
func DatabaseName(corpus, dbID, hash string) string {
	if len(hash) > hashChars {
		hash = hash[:hashChars]
	}
	return namePrefix + sanitize(corpus, maxCorpusName) + "_" + sanitize(dbID, maxDBName) + "_" + hash
}

// TemplateName returns the name of the template a working database is cloned
// from (and that stateful tasks clone again): the working name plus "_t".
func TemplateName(dbName string) string { return dbName + templateSuffix }

func sanitize(s string, n int) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) > n {
		b = b[:n]
	}
	if len(b) == 0 {
		return "_"
	}
	return string(b)
}

// marker is the COMMENT ON DATABASE that marks a completely loaded database.
func marker(hash string) string { return "avtgym loaded " + LoaderVersion + " " + hash }

// dbLockKey is the advisory-lock key of a database's loads.
func dbLockKey(name string) int32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int32(h.Sum32()&0x7ffffffe) | 2 // never roleLock
}

// EnsureDatabase makes sure a working database holding src exists and returns
// its name (DatabaseName of corpus, dbID and the content hash of src's files
// with LoaderVersion). Two databases are kept per source:
//
//   - the template (TemplateName), loaded from src: created UTF8 from template0,
//     owned by the policy role and loaded as that role (the dumps are
//     --no-owner, so every object is the role's), then analyzed, marked
//     datistemplate with connections disallowed (no query ever connects to it;
//     stateful tasks will clone it), and finally marked complete;
//   - the working database, cloned from the template (CREATE DATABASE ...
//     TEMPLATE), which read-only queries use, marked complete once created.
//
// A complete database is marked by a COMMENT ON DATABASE naming the hash, set
// last: a database that already exists with the mark is reused without
// loading; one without it (a crash mid-load) is dropped and built again.
// Loads of one database are serialized across processes by an advisory lock.
//
// Loading: every file is parsed before anything is created (statements split
// by libpg_query; COPY ... FROM stdin data fed through the COPY protocol;
// \restrict, \unrestrict and a few printing psql meta-commands skipped,
// anything else that is not SQL refused, naming file and line); dumps load in
// the order their FOREIGN KEY ... REFERENCES clauses require (a cycle is an
// error naming the tables). A load may create and fill its own database only:
// functions, DO and CALL (code that would run as the policy role), roles,
// databases, COPY to or from files or programs, GRANT and other server-wide
// statements are refused. The first failing statement stops the
// load (unlike psql without ON_ERROR_STOP) with a *LoadError naming the file,
// line, statement and PostgreSQL's error, and the template is dropped. The
// load is bounded by Config.LoadTimeout (and ctx), and by
// Config.MaxDatabaseBytes: pg_database_size is checked after each file and
// at the end (the role's temp_file_limit bounds temporary files only).
//
// The template's catalog is hardened (as the administrator): before the load,
// EXECUTE on the functions of hardening (signalling backends, session-level
// advisory locks, other sessions' activity, WAL messages, large objects) and
// SELECT on pg_stat_activity are revoked from PUBLIC, and after it EXECUTE on
// set_config (so that queries cannot change their limits); every privilege
// on the databases themselves is revoked from PUBLIC. The clone inherits the
// catalog.
func (s *Server) EnsureDatabase(ctx context.Context, corpus, dbID string, src Source) (string, error) {
	name, err := s.ensureDatabase(ctx, corpus, dbID, src)
	var le *LoadError
	if errors.As(err, &le) && le.Source == "" {
		le.Source = src.DumpDir
	}
	return name, err
}

func (s *Server) ensureDatabase(ctx context.Context, corpus, dbID string, src Source) (string, error) {
	files, hash, err := src.files()
	if err != nil {
		return "", err
	}
	work := DatabaseName(corpus, dbID, hash)
	tpl := TemplateName(work)
	mark := marker(hash)
	if ok, err := s.hasMark(ctx, s.admin, work, mark); err == nil && ok {
		return work, nil
	}
	err = s.withAdvisoryLock(ctx, dbLockKey(work), func(conn *pgxpool.Conn) error {
		if ok, err := s.hasMark(ctx, conn, work, mark); err != nil || ok {
			return err
		}
		ok, err := s.hasMark(ctx, conn, tpl, mark)
		if err != nil {
			return err
		}
		if !ok {
			if err := s.dropDatabase(ctx, conn, tpl); err != nil {
				return err
			}
			if err := s.buildTemplate(ctx, conn, tpl, mark, files, src.DumpDir != ""); err != nil {
				dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if derr := s.dropDatabase(dctx, conn, tpl); derr != nil {
					return fmt.Errorf("%w (and dropping the half-loaded template failed: %v)", err, derr)
				}
				return err
			}
		}
		if err := s.dropDatabase(ctx, conn, work); err != nil {
			return err
		}
		role := pgx.Identifier{s.cfg.Role}.Sanitize()
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s OWNER %s",
			pgx.Identifier{work}.Sanitize(), pgx.Identifier{tpl}.Sanitize(), role)); err != nil {
			return fmt.Errorf("postgres: cloning %s from %s: %w", work, tpl, err)
		}
		if _, err := conn.Exec(ctx, "REVOKE ALL ON DATABASE "+pgx.Identifier{work}.Sanitize()+" FROM PUBLIC"); err != nil {
			return fmt.Errorf("postgres: revoking PUBLIC's privileges on %s: %w", work, err)
		}
		return s.setMark(ctx, conn, work, mark)
	})
	if err != nil {
		return "", err
	}
	return work, nil
}

// querier is what hasMark needs of a pool or a connection.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// hasMark reports whether database name exists with the mark.
func (s *Server) hasMark(ctx context.Context, q querier, name, mark string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1 AND shobj_description(oid, 'pg_database') = $2)",
		name, mark).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("postgres: looking up database %s: %w", name, err)
	}
	return ok, nil
}

func (s *Server) setMark(ctx context.Context, conn *pgxpool.Conn, name, mark string) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS '%s'", pgx.Identifier{name}.Sanitize(), mark)); err != nil {
		return fmt.Errorf("postgres: marking %s as loaded: %w", name, err)
	}
	return nil
}

// DropDatabase drops a working database and its template (for stale
// databases, and tests). Connections to them are terminated.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if err := s.dropDatabase(ctx, conn, name); err != nil {
		return err
	}
	return s.dropDatabase(ctx, conn, TemplateName(name))
}

// dropDatabase drops database name if it exists (a template too).
func (s *Server) dropDatabase(ctx context.Context, conn *pgxpool.Conn, name string) error {
	var isTemplate bool
	err := conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&isTemplate)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("postgres: looking up database %s: %w", name, err)
	}
	ident := pgx.Identifier{name}.Sanitize()
	if isTemplate {
		if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident+" IS_TEMPLATE false"); err != nil {
			return fmt.Errorf("postgres: unmarking template %s: %w", name, err)
		}
	}
	// A non-superuser administrator may not terminate a backend of another
	// role: an autovacuum worker that happens to be processing the database
	// (seen on a loaded machine) fails the drop until it finishes, so such a
	// refusal is retried for a while.
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		_, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "process is being terminated") {
			if err != nil {
				return fmt.Errorf("postgres: dropping database %s: %w", name, err)
			}
			return nil
		}
		if s.cfg.Clock.Sleep(ctx, pause) != nil {
			return fmt.Errorf("postgres: dropping database %s: %w", name, err)
		}
	}
}

// hardening names the pg_catalog functions whose EXECUTE is revoked from
// PUBLIC in a new template before it is loaded (every overload): signalling
// other backends (the policies share a role), session-level advisory locks
// (they outlive the rolled-back transaction), the activity of other sessions
// (their SQL, reference SQL included), WAL messages and large objects (both
// write although the transaction is read-only).
var hardening = []string{
	"pg_terminate_backend", "pg_cancel_backend",
	"pg_advisory_lock", "pg_advisory_lock_shared", "pg_try_advisory_lock", "pg_try_advisory_lock_shared",
	"pg_stat_get_activity", "pg_stat_get_backend_activity",
	"pg_logical_emit_message",
	"lo_creat", "lo_create", "lo_from_bytea", "lo_put", "lo_open", "lowrite", "lo_truncate", "lo_truncate64",
	"lo_unlink", "lo_import", "lo_export",
}

// hardeningAfterLoad are revoked once the template is loaded (pg_dump's
// output calls set_config itself): without set_config a query cannot change
// its limits (SET is refused by the parser).
var hardeningAfterLoad = []string{"set_config"}

// hardeningViews are the pg_catalog views whose SELECT is revoked from
// PUBLIC: the activity of other sessions, and (with every view whose name
// starts with pg_stat_ or pg_statio_, listed from the catalog) the
// cumulative statistics, whose scan counts show what the reference runs
// read. The statistics functions behind them (pg_stat_get_*) stay
// executable: the after-job check reads pg_stat_get_mod_since_analyze as
// the policy role, and the statement checks refuse them by name.
var hardeningViews = []string{"pg_stat_activity"}

// statisticsViewsSQL lists the statistics views of hardeningViews.
const statisticsViewsSQL = `SELECT c.relname::text FROM pg_class c WHERE c.relnamespace = 'pg_catalog'::regnamespace AND c.relkind = 'v'
	AND (c.relname LIKE 'pg\_stat\_%' OR c.relname LIKE 'pg\_statio\_%') ORDER BY 1`

// buildTemplate creates template tpl and loads files into it.
func (s *Server) buildTemplate(ctx context.Context, conn *pgxpool.Conn, tpl, mark string, files []srcFile, dumps bool) error {
	lctx, cancel := context.WithTimeout(ctx, s.cfg.LoadTimeout)
	defer cancel()
	timeUp := func() error {
		if ctx.Err() != nil {
			return &LoadError{Err: sqlexec.Errorf(sqlexec.KindTimeout, ctx.Err(), "the load of %s was stopped: the caller's deadline passed or it was canceled (%v)", tpl, ctx.Err())}
		}
		return &LoadError{Err: sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded, "the load of %s did not finish within its time limit of %v", tpl, s.cfg.LoadTimeout)}
	}

	// Read everything first: every statement must parse and be allowed, and
	// the dumps' order follows from their foreign keys.
	plan, err := planLoad(lctx, files, dumps)
	if err != nil {
		return err
	}

	ident := pgx.Identifier{tpl}.Sanitize()
	role := pgx.Identifier{s.cfg.Role}.Sanitize()
	create := fmt.Sprintf("CREATE DATABASE %s OWNER %s ENCODING 'UTF8' TEMPLATE template0", ident, role)
	if _, err := conn.Exec(lctx, create); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "22023" {
			return fmt.Errorf("postgres: creating database %s: %w", tpl, err)
		}
		// The server's default locale does not suit UTF8: use C.
		if _, err := conn.Exec(lctx, create+" LC_COLLATE 'C' LC_CTYPE 'C'"); err != nil {
			return fmt.Errorf("postgres: creating database %s: %w", tpl, err)
		}
	}
	if _, err := conn.Exec(lctx, "REVOKE ALL ON DATABASE "+ident+" FROM PUBLIC"); err != nil {
		return fmt.Errorf("postgres: revoking PUBLIC's privileges on %s: %w", tpl, err)
	}
	if err := s.harden(lctx, tpl, hardening, hardeningViews); err != nil {
		return err
	}
	if err := s.load(lctx, tpl, plan, timeUp); err != nil {
		return err
	}
	if err := s.harden(lctx, tpl, hardeningAfterLoad, nil); err != nil {
		return err
	}
	var size int64
	if err := conn.QueryRow(lctx, "SELECT pg_database_size($1)", tpl).Scan(&size); err != nil {
		return fmt.Errorf("postgres: measuring %s: %w", tpl, err)
	}
	if size > s.cfg.MaxDatabaseBytes {
		return &LoadError{Err: sqlexec.Errorf(sqlexec.KindTooManyBytes, nil,
			"the loaded database %s takes %d bytes, more than the limit of %d bytes", tpl, size, s.cfg.MaxDatabaseBytes)}
	}
	if _, err := conn.Exec(lctx, "ALTER DATABASE "+ident+" IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("postgres: marking %s as a template: %w", tpl, err)
	}
	return s.setMark(lctx, conn, tpl, mark)
}

// harden revokes from PUBLIC, as the administrator, EXECUTE on the
// pg_catalog functions named (every overload) and SELECT on the views, in
// database db; it checks that the policy role lost them, and warns when not.
func (s *Server) harden(ctx context.Context, db string, funcs, views []string) error {
	cfg := s.adminCfg.ConnConfig.Copy()
	cfg.Database = db
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("postgres: connecting to %s as the administrator: %w", db, err)
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = 'pg_catalog' AND p.proname = ANY($1) ORDER BY 1`, funcs)
	if err != nil {
		return fmt.Errorf("postgres: listing functions in %s: %w", db, err)
	}
	sigs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("postgres: listing functions in %s: %w", db, err)
	}
	if len(views) > 0 {
		rows, err := c.Query(ctx, statisticsViewsSQL)
		if err != nil {
			return fmt.Errorf("postgres: listing the statistics views in %s: %w", db, err)
		}
		stats, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("postgres: listing the statistics views in %s: %w", db, err)
		}
		views = append(slices.Clone(views), stats...)
		slices.Sort(views)
		views = slices.Compact(views)
	}
	var stmts []string
	for _, sig := range sigs {
		stmts = append(stmts, "REVOKE EXECUTE ON FUNCTION pg_catalog."+sig+" FROM PUBLIC")
	}
	for _, v := range views {
		stmts = append(stmts, "REVOKE ALL ON pg_catalog."+pgx.Identifier{v}.Sanitize()+" FROM PUBLIC")
	}
	for _, q := range stmts {
		if _, err := c.Exec(ctx, q); err != nil {
			s.warn("could not run %q in %s: %v", q, db, err)
		}
	}
	for _, sig := range sigs {
		var ok bool
		if err := c.QueryRow(ctx, "SELECT has_function_privilege($1, $2, 'EXECUTE')", s.cfg.Role, "pg_catalog."+sig).Scan(&ok); err != nil {
			return fmt.Errorf("postgres: checking the catalog of %s: %w", db, err)
		}
		if ok {
			s.warn("in %s the policy role can still execute %s (the administrator could not revoke it)", db, sig)
		}
	}
	for _, v := range views {
		var ok bool
		if err := c.QueryRow(ctx, "SELECT has_table_privilege($1, $2, 'SELECT')", s.cfg.Role, "pg_catalog."+v).Scan(&ok); err != nil {
			return fmt.Errorf("postgres: checking the catalog of %s: %w", db, err)
		}
		if ok {
			s.warn("in %s the policy role can still read %s (the administrator could not revoke it)", db, v)
		}
	}
	return nil
}

// planLoad reads every file once: each statement must parse and be allowed;
// for dumps, the files are ordered by their foreign keys.
func planLoad(ctx context.Context, files []srcFile, dumps bool) ([]srcFile, error) {
	creates := map[string]string{} // table -> file
	refs := map[string][]string{}  // file -> referenced tables
	for _, f := range files {
		rc, err := f.open()
		if err != nil {
			return nil, &LoadError{File: f.name, Err: sqlexec.Errorf(sqlexec.KindUnavailable, err, "opening: %v", err)}
		}
		r := newScriptReader(f.name, rc)
		for {
			if ctx.Err() != nil {
				rc.Close()
				return nil, &LoadError{File: f.name, Err: sqlexec.Errorf(sqlexec.KindTimeout, ctx.Err(), "reading the files took too long: %v", ctx.Err())}
			}
			st, err := r.next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				rc.Close()
				return nil, asLoadError(f.name, err)
			}
			if why := loadDenial(st.node); why != "" {
				rc.Close()
				return nil, &LoadError{File: f.name, Line: st.line, Stmt: firstWords(st.text, 4), Err: sqlexec.Errorf(sqlexec.KindDenied, nil, "%s", why)}
			}
			if p, err := hasParam(st.text); err != nil || p {
				rc.Close()
				return nil, &LoadError{File: f.name, Line: st.line, Stmt: firstWords(st.text, 4),
					Err: sqlexec.Errorf(sqlexec.KindSyntax, err, "the statement has a parameter placeholder ($1, ...), and a load has no arguments")}
			}
			if dumps {
				tables, referenced := tableRefs(st.node)
				for _, t := range tables {
					creates[t] = f.name
				}
				refs[f.name] = append(refs[f.name], referenced...)
			}
		}
		rc.Close()
	}
	if !dumps {
		return files, nil
	}
	return orderFiles(files, creates, refs)
}

// asLoadError returns err as a *LoadError of file.
func asLoadError(file string, err error) error {
	var le *LoadError
	if errors.As(err, &le) {
		if le.File == "" {
			le.File = file
		}
		return le
	}
	return &LoadError{File: file, Err: sqlexec.Errorf(sqlexec.KindUnavailable, err, "%v", err)}
}

// tableRefs returns the public tables a statement creates and those its
// foreign keys reference.
func tableRefs(n *pg_query.Node) (created, referenced []string) {
	pub := func(rv *pg_query.RangeVar) bool {
		return rv != nil && (rv.Schemaname == "" || rv.Schemaname == "public")
	}
	fk := func(c *pg_query.Constraint) {
		if c != nil && c.Contype == pg_query.ConstrType_CONSTR_FOREIGN && pub(c.Pktable) {
			referenced = append(referenced, c.Pktable.Relname)
		}
	}
	switch x := n.Node.(type) {
	case *pg_query.Node_CreateStmt:
		if pub(x.CreateStmt.Relation) {
			created = append(created, x.CreateStmt.Relation.Relname)
		}
		for _, e := range x.CreateStmt.TableElts {
			if cd := e.GetColumnDef(); cd != nil {
				for _, c := range cd.Constraints {
					fk(c.GetConstraint())
				}
			}
			fk(e.GetConstraint())
		}
	case *pg_query.Node_AlterTableStmt:
		for _, c := range x.AlterTableStmt.Cmds {
			cmd := c.GetAlterTableCmd()
			if cmd == nil || cmd.Def == nil {
				continue
			}
			fk(cmd.Def.GetConstraint())
			if cd := cmd.Def.GetColumnDef(); cd != nil {
				for _, cc := range cd.Constraints {
					fk(cc.GetConstraint())
				}
			}
		}
	}
	return created, referenced
}

// orderFiles orders dump files so that each loads after the files creating
// the tables its foreign keys reference (ties by name). A cycle is an error.
func orderFiles(files []srcFile, creates map[string]string, refs map[string][]string) ([]srcFile, error) {
	deps := map[string]map[string]bool{} // file -> files it needs first
	for _, f := range files {
		deps[f.name] = map[string]bool{}
		for _, t := range refs[f.name] {
			if g, ok := creates[t]; ok && g != f.name {
				deps[f.name][g] = true
			}
		}
	}
	var order []srcFile
	done := map[string]bool{}
	for len(order) < len(files) {
		progressed := false
		for _, f := range files { // sorted by name
			if done[f.name] {
				continue
			}
			ready := true
			for g := range deps[f.name] {
				if !done[g] {
					ready = false
					break
				}
			}
			if ready {
				order = append(order, f)
				done[f.name] = true
				progressed = true
				break
			}
		}
		if !progressed {
			return nil, &LoadError{Err: sqlexec.Errorf(sqlexec.KindExecution, nil,
				"the dumps' foreign keys form a cycle, so no load order exists: %s", describeCycle(files, done, deps, creates))}
		}
	}
	return order, nil
}

// describeCycle names one cycle among the files not done.
func describeCycle(files []srcFile, done map[string]bool, deps map[string]map[string]bool, creates map[string]string) string {
	tableOf := map[string][]string{}
	for t, f := range creates {
		tableOf[f] = append(tableOf[f], t)
	}
	for f := range tableOf {
		slices.Sort(tableOf[f])
	}
	name := func(f string) string {
		if ts := tableOf[f]; len(ts) > 0 {
			return strings.Join(ts, ",") + " (" + f + ")"
		}
		return f
	}
	var start string
	for _, f := range files {
		if !done[f.name] {
			start = f.name
			break
		}
	}
	// Walk to a file seen twice.
	seen := map[string]int{}
	var path []string
	for cur := start; ; {
		if i, ok := seen[cur]; ok {
			path = append(path[i:], cur)
			break
		}
		seen[cur] = len(path)
		path = append(path, cur)
		var next []string
		for g := range deps[cur] {
			if !done[g] {
				next = append(next, g)
			}
		}
		slices.Sort(next)
		cur = next[0]
	}
	parts := make([]string, len(path))
	for i, f := range path {
		parts[i] = name(f)
	}
	return strings.Join(parts, " references ")
}

// loadDenial returns why a statement may not run in a load, or "".
func loadDenial(n *pg_query.Node) string {
	switch x := n.Node.(type) {
	case *pg_query.Node_CreateStmt, *pg_query.Node_CreateSeqStmt, *pg_query.Node_AlterSeqStmt, *pg_query.Node_AlterTableStmt,
		*pg_query.Node_IndexStmt, *pg_query.Node_SelectStmt, *pg_query.Node_InsertStmt, *pg_query.Node_UpdateStmt,
		*pg_query.Node_DeleteStmt, *pg_query.Node_MergeStmt, *pg_query.Node_VariableShowStmt,
		*pg_query.Node_ViewStmt,
		*pg_query.Node_CreateEnumStmt, *pg_query.Node_AlterEnumStmt, *pg_query.Node_CompositeTypeStmt,
		*pg_query.Node_CreateRangeStmt, *pg_query.Node_CreateDomainStmt, *pg_query.Node_AlterDomainStmt,
		*pg_query.Node_DefineStmt, *pg_query.Node_CommentStmt, *pg_query.Node_CreateTrigStmt, *pg_query.Node_RuleStmt,
		*pg_query.Node_CreateSchemaStmt, *pg_query.Node_CreateTableAsStmt, *pg_query.Node_DropStmt,
		*pg_query.Node_TruncateStmt, *pg_query.Node_RenameStmt, *pg_query.Node_AlterObjectSchemaStmt,
		*pg_query.Node_CreateStatsStmt, *pg_query.Node_AlterStatsStmt, *pg_query.Node_CreateExtensionStmt,
		*pg_query.Node_VacuumStmt, *pg_query.Node_RefreshMatViewStmt, *pg_query.Node_ExplainStmt:
		return ""
	case *pg_query.Node_CopyStmt:
		c := x.CopyStmt
		if c.IsFrom && !c.IsProgram && c.Filename == "" {
			return ""
		}
		return "COPY is allowed in a load only as COPY ... FROM stdin (with its data in the script)"
	case *pg_query.Node_VariableSetStmt:
		switch strings.ToLower(x.VariableSetStmt.Name) {
		case "role", "session_authorization", "default_transaction_read_only", "transaction_read_only":
			return "SET " + x.VariableSetStmt.Name + " is not allowed in a load"
		}
		return ""
	case *pg_query.Node_TransactionStmt:
		switch x.TransactionStmt.Kind {
		case pg_query.TransactionStmtKind_TRANS_STMT_PREPARE, pg_query.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED,
			pg_query.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
			return "two-phase commit (PREPARE TRANSACTION, COMMIT PREPARED) is not allowed in a load"
		}
		return ""
	}
	kind := strings.TrimPrefix(fmt.Sprintf("%T", n.Node), "*pg_query.Node_")
	return kind + " statements are not allowed in a load, which may only create and fill its own database with tables, " +
		"sequences, views, types, indexes, constraints and rows (no functions, DO or CALL, which would run code as the policy role; " +
		"no roles, databases, GRANT, COPY to or from files or programs, LOAD, ALTER SYSTEM, LISTEN/NOTIFY, ...)"
}

// load runs the files, in order, as the policy role in database db.
func (s *Server) load(ctx context.Context, db string, files []srcFile, timeUp func() error) error {
	cfg := s.policyConfig(db).ConnConfig
	rp := cfg.RuntimeParams
	rp["default_transaction_read_only"] = "off"
	rp["statement_timeout"] = "0" // the load's context bounds it
	rp["lock_timeout"] = "0"
	rp["idle_in_transaction_session_timeout"] = "0"
	pc, err := pgconn.ConnectConfig(ctx, &cfg.Config)
	if err != nil {
		if ctx.Err() != nil {
			return timeUp()
		}
		return fmt.Errorf("postgres: connecting to %s as the policy role: %w", db, err)
	}
	defer pc.Close(context.Background())
	for _, f := range files {
		if err := s.loadFile(ctx, pc, f, timeUp); err != nil {
			return err
		}
		if pc.TxStatus() != 'I' {
			return &LoadError{File: f.name, Err: sqlexec.Errorf(sqlexec.KindExecution, nil, "the file ends inside a transaction (a BEGIN without COMMIT)")}
		}
		// Each file starts with a fresh session, as under psql.
		if _, err := pc.Exec(ctx, "DISCARD ALL").ReadAll(); err != nil {
			return s.loadFailure(ctx, f.name, 0, "", err, timeUp)
		}
		if err := checkSize(ctx, pc, f.name, s.cfg.MaxDatabaseBytes, timeUp); err != nil {
			return err
		}
	}
	if _, err := pc.Exec(ctx, "ANALYZE").ReadAll(); err != nil {
		return s.loadFailure(ctx, "", 0, "ANALYZE", err, timeUp)
	}
	return nil
}

// loadFile runs one file's statements, stopping at the first failure.
func (s *Server) loadFile(ctx context.Context, pc *pgconn.PgConn, f srcFile, timeUp func() error) error {
	rc, err := f.open()
	if err != nil {
		return &LoadError{File: f.name, Err: sqlexec.Errorf(sqlexec.KindUnavailable, err, "opening: %v", err)}
	}
	defer rc.Close()
	r := newScriptReader(f.name, rc)
	for {
		if ctx.Err() != nil {
			return timeUp()
		}
		st, err := r.next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return timeUp()
			}
			return asLoadError(f.name, err)
		}
		if why := loadDenial(st.node); why != "" { // checked by planLoad; the file may have changed since
			return &LoadError{File: f.name, Line: st.line, Stmt: firstWords(st.text, 4), Err: sqlexec.Errorf(sqlexec.KindDenied, nil, "%s", why)}
		}
		if st.copyIn {
			cr := r.inCopy
			_, err = pc.CopyFrom(ctx, cr, st.text)
			if err != nil {
				if cerr := cr.failure(); cerr != nil {
					return asLoadError(f.name, cerr)
				}
			}
		} else {
			rr := pc.ExecParams(ctx, st.text, nil, nil, nil, nil)
			for rr.NextRow() {
			}
			_, err = rr.Close()
		}
		if err != nil {
			return s.loadFailure(ctx, f.name, st.line, firstWords(st.text, 4), err, timeUp)
		}
	}
}

// loadFailure classifies a statement's failure in a load.
func (s *Server) loadFailure(ctx context.Context, file string, line int, stmt string, err error, timeUp func() error) error {
	if ctx.Err() != nil {
		return timeUp()
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		k := kindOf(pgErr.Code)
		switch k {
		case sqlexec.KindDenied, sqlexec.KindTooMuchMemory, sqlexec.KindTooManyBytes, sqlexec.KindUnavailable:
		default:
			k = sqlexec.KindExecution // syntax errors too: the parser accepted the statement
		}
		msg := pgMessage(pgErr)
		if pgErr.Where != "" {
			msg += "; context: " + pgErr.Where
		}
		return &LoadError{File: file, Line: line, Stmt: stmt, Err: sqlexec.Errorf(k, err, "%s", msg)}
	}
	return &LoadError{File: file, Line: line, Stmt: stmt, Err: sqlexec.Errorf(sqlexec.KindUnavailable, err, "the connection failed: %v", err)}
}

// checkSize fails when the database passed the size cap.
func checkSize(ctx context.Context, pc *pgconn.PgConn, file string, maxBytes int64, timeUp func() error) error {
	res := pc.ExecParams(ctx, "SELECT pg_database_size(current_database())", nil, nil, nil, nil).Read()
	if res.Err != nil {
		if ctx.Err() != nil {
			return timeUp()
		}
		return &LoadError{File: file, Err: sqlexec.Errorf(sqlexec.KindUnavailable, res.Err, "measuring the database: %v", res.Err)}
	}
	var size int64
	if len(res.Rows) == 1 && len(res.Rows[0]) == 1 {
		fmt.Sscan(string(res.Rows[0][0]), &size)
	}
	if size > maxBytes {
		return &LoadError{File: file, Err: sqlexec.Errorf(sqlexec.KindTooManyBytes, nil,
			"after this file the database takes %d bytes, more than the limit of %d bytes", size, maxBytes)}
	}
	return nil
}

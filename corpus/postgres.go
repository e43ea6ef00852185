package corpus

// This file loads a corpus's PostgreSQL databases: a dump folder or a
// script becomes a template database on the server that Options.Engines
// connects to, and the corpus queries a working clone of it.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// The database engines a manifest may name.
const (
	EngineSQLite   = "sqlite"
	EnginePostgres = "postgres"
)

// PostgresEnv is the environment variable that, like --postgres, names the
// PostgreSQL server's admin URL.
const PostgresEnv = "AVTGYM_POSTGRES_URL"

// PostgresFlagHelp is the help text of the commands' --postgres flag.
const PostgresFlagHelp = "admin URL of a PostgreSQL server where avtgym may create its role and template databases, for corpora with engine \"postgres\" databases (default $" + PostgresEnv + "; make postgres starts a local one)"

// checkSource checks a manifest database's engine and source fields.
func (l *loader) checkSource(file, f string, d Database) {
	switch d.Engine {
	case EngineSQLite:
		if (d.Path == "") == (d.Script == "") {
			l.problem(file, 0, f, "exactly one of path and script must be set for a sqlite database")
		}
		if d.Dumps != "" {
			l.problem(file, 0, f+".dumps", "is for postgres databases (a sqlite database has a path or a script)")
		}
	case EnginePostgres:
		if (d.Dumps == "") == (d.Script == "") {
			l.problem(file, 0, f, "exactly one of dumps and script must be set for a postgres database")
		}
		if d.Path != "" {
			l.problem(file, 0, f+".path", "is for sqlite databases (a postgres database has a dumps folder or a script)")
		}
	default:
		l.problem(file, 0, f+".engine", "%q is not supported (want \"sqlite\" or \"postgres\")", d.Engine)
	}
	if d.Path != "" {
		l.confine(file, f+".path", d.Path)
	}
	if d.Script != "" {
		l.confine(file, f+".script", d.Script)
	}
	if d.Dumps != "" {
		l.confineDir(file, f+".dumps", d.Dumps)
	}
}

// confineDir checks that name, a folder that the manifest's field names, is
// a relative path that resolves (symbolic links included) to a directory
// inside the corpus directory, and records its real path. The dump files in
// it are read by the PostgreSQL loader, which refuses any that is not a
// regular file (a symbolic link included). It reports a problem and returns
// false otherwise.
func (l *loader) confineDir(file, field, name string) bool {
	if !fs.ValidPath(name) || name == "." || filepath.IsAbs(name) {
		l.problem(file, 0, field, "%q must be a relative path inside the corpus directory, with '/' separators and no '.' or '..' elements", name)
		return false
	}
	if l.root == nil {
		l.problem(file, 0, field, "a dump folder needs a corpus directory on disk (an embedded corpus can give a script)")
		return false
	}
	real, err := filepath.EvalSymlinks(filepath.Join(l.realDir, filepath.FromSlash(name)))
	if err != nil {
		l.problem(file, 0, field, "%q: %v", name, err)
		return false
	}
	if !within(l.realDir, real) {
		l.problem(file, 0, field, "%q resolves outside the corpus directory (to %s, through a symbolic link)", name, real)
		return false
	}
	fi, err := l.root.Stat(name)
	switch {
	case err != nil:
		l.problem(file, 0, field, "%q cannot be opened inside the corpus directory: %v", name, err)
		return false
	case !fi.IsDir():
		l.problem(file, 0, field, "%q is not a directory", name)
		return false
	}
	l.resolved[name] = real
	return true
}

// postgres returns the server engine "postgres" databases load into,
// asked of Options.Engines once per load and closed with the corpus. A nil
// server and nil error mean none is configured.
func (l *loader) postgres(ctx context.Context, c *Corpus) (PostgresServer, error) {
	if l.pgAsked {
		return c.pg, nil
	}
	l.pgAsked = true
	s, err := l.opt.Engines.ConnectPostgres(ctx)
	if err != nil {
		return nil, err
	}
	c.pg = s
	return s, nil
}

// openPostgres loads (or reuses) the template database of spec and opens
// its working clone. What the corpus itself gets wrong is a problem of the
// manifest or of the dump file; an unreachable server is an error.
func (l *loader) openPostgres(ctx context.Context, c *Corpus, m *Manifest, field string, spec Database) error {
	file := l.file(ManifestFile)
	srv, err := l.postgres(ctx, c)
	if err != nil {
		return fmt.Errorf("corpus %s: database %q: %w", m.Name, spec.ID, err)
	}
	if srv == nil {
		l.problem(file, 0, field+".engine", "database %q is on PostgreSQL: pass --postgres URL (or set $%s) naming a server where avtgym may create databases; make postgres starts a local one", spec.ID, PostgresEnv)
		return nil
	}
	var src PostgresSource
	switch {
	case spec.Dumps != "":
		real, ok := l.resolved[spec.Dumps]
		if !ok {
			return nil // confineDir reported it
		}
		src = PostgresSource{DumpDir: real}
	default:
		script, err := fs.ReadFile(l.fsys, spec.Script)
		if err != nil {
			l.problem(file, 0, field+".script", "cannot read %s: %v", spec.Script, err)
			return nil
		}
		src = PostgresSource{Script: string(script), ScriptName: l.file(spec.Script)}
	}
	name, err := srv.EnsureDatabase(ctx, m.Name, spec.ID, src)
	var se *SourceError
	switch {
	case errors.As(err, &se):
		l.problem(file, 0, field, "loading database %q: %s", spec.ID, se.Reason)
		return nil
	case err != nil:
		return fmt.Errorf("corpus %s: loading database %q: %w", m.Name, spec.ID, err)
	}
	lanes := l.lanes()
	// The pool holds a connection for every query the lanes let run at once.
	eng, err := srv.Open(ctx, name, lanes.Capacity())
	if err != nil {
		return fmt.Errorf("corpus %s: opening database %q (%s): %w", m.Name, spec.ID, name, err)
	}
	l.addDB(ctx, c, field, spec, eng, lanes)
	if l.pgDBs == nil {
		l.pgDBs = map[string]string{}
	}
	l.pgDBs[spec.ID] = name
	return nil
}

// openStateful opens the stateful verifiers of the PostgreSQL databases
// that stateful records need (a pool of private copies each, so only
// where needed), and checks once that the Python test workers can run
// when a record has Python tests. SQLite databases have theirs already
// (nothing is copied before the first verification).
func (l *loader) openStateful(ctx context.Context, c *Corpus) error {
	need := map[string]bool{}
	tests := false
	for _, t := range c.Tasks {
		if t.Stateful() || t.FollowUpStateful() {
			need[t.Record.DB] = true
		}
		if len(t.Reference.Tests) > 0 || (t.FollowUp != nil && len(t.FollowUp.Reference.Tests) > 0) {
			tests = true
		}
	}
	if tests && l.opt.PyRunner != nil {
		if ch, ok := l.opt.PyRunner.(interface{ Check(context.Context) error }); ok {
			if err := ch.Check(ctx); err != nil {
				l.problem(l.file(ManifestFile), 0, "", "the corpus has Python tests, and the test workers cannot run: %v", err)
				return nil
			}
		}
	}
	// The copies share the server's connection budget fairly among the
	// databases that need them.
	n := 0
	for _, id := range c.dbOrder {
		if _, ok := l.pgDBs[id]; ok && need[id] {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	srv := c.pg // every PostgreSQL database of a load is on it
	clones := srv.ShareClones(n, tests && l.opt.PyRunner != nil)
	for _, id := range c.dbOrder {
		name, ok := l.pgDBs[id]
		if !ok || !need[id] {
			continue
		}
		sdb, err := srv.OpenStateful(ctx, name, StatefulOptions{Python: l.opt.PyRunner, Clones: clones})
		if err != nil {
			return fmt.Errorf("corpus %s: the private copies of database %q: %w", c.Name, id, err)
		}
		c.dbs[id].Stateful = sdb
	}
	return nil
}

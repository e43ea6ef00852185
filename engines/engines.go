// Package engines is where the database engines meet the domain: it
// implements corpus.Opener with SQLite (sqlexec/sqlite) and PostgreSQL
// (sqlexec/postgres), and reads SQLite schemas for package sqlcommit. The
// commands, package app and tests wire it in; the corpus model and the
// episode machine link no engine driver (internal/lint checks that).
package engines

import (
	"context"
	"errors"

	"avtgym/corpus"
	"avtgym/sqlexec"
	"avtgym/sqlexec/postgres"
	"avtgym/sqlexec/sqlite"
)

// Opener opens corpora's databases on SQLite and PostgreSQL. The zero
// Opener opens SQLite databases only: a PostgreSQL database is then a
// problem of the corpus that names the --postgres flag.
type Opener struct {
	// Postgres, when set, is the server every corpus's PostgreSQL
	// databases load into; the corpora share it and never close it.
	Postgres *postgres.Server
	// PostgresURL, when Postgres is nil, is an admin URL (serve
	// --postgres, $AVTGYM_POSTGRES_URL) connected to once for each corpus
	// with a PostgreSQL database; the connection closes with the corpus.
	PostgresURL string
}

var _ corpus.Opener = Opener{}

// BuildSQLite builds a SQLite database from its script (sqlite.Build); a
// script that fails is a *corpus.SourceError.
func (Opener) BuildSQLite(ctx context.Context, script, dest string, opt corpus.BuildOptions) error {
	err := sqlite.Build(ctx, script, dest, sqlite.BuildOptions{Name: opt.Name, Timeout: opt.Timeout, MaxBytes: opt.MaxBytes})
	var be *sqlite.BuildError
	if errors.As(err, &be) {
		return &corpus.SourceError{Reason: be.Reason(), Err: be}
	}
	return err
}

// OpenSQLite opens a SQLite database file read-only, with its stateful
// verifier (private in-memory copies, made on first use).
func (Opener) OpenSQLite(path string, opt corpus.SQLiteOptions) (sqlexec.Engine, sqlexec.Stateful, error) {
	db, err := sqlite.Open(path, sqlite.Options{Immutable: opt.Immutable, MaxOpenConns: opt.MaxConns})
	if err != nil {
		return nil, nil, err
	}
	return db, sqlite.NewStateful(db, sqlite.StatefulOptions{}), nil
}

// ConnectPostgres returns the shared server, or connects to PostgresURL
// for the corpus; nil and no error when neither is set.
func (o Opener) ConnectPostgres(ctx context.Context) (corpus.PostgresServer, error) {
	switch {
	case o.Postgres != nil:
		return &pgServer{srv: o.Postgres}, nil
	case o.PostgresURL == "":
		return nil, nil
	}
	s, err := postgres.Connect(ctx, o.PostgresURL)
	if err != nil {
		return nil, err
	}
	return &pgServer{srv: s, owned: true}, nil
}

// pgServer adapts a *postgres.Server to corpus.PostgresServer.
type pgServer struct {
	srv *postgres.Server
	// owned says that the connection is the corpus's (Close closes it);
	// a shared server outlives every corpus on it.
	owned bool
}

func (p *pgServer) EnsureDatabase(ctx context.Context, corpusName, dbID string, src corpus.PostgresSource) (string, error) {
	s := postgres.DumpDir(src.DumpDir)
	if src.DumpDir == "" {
		s = postgres.Script(src.ScriptName, src.Script)
	}
	name, err := p.srv.EnsureDatabase(ctx, corpusName, dbID, s)
	var le *postgres.LoadError
	if errors.As(err, &le) {
		return "", &corpus.SourceError{Reason: le.Error(), Err: le}
	}
	return name, err
}

func (p *pgServer) Open(ctx context.Context, name string, maxConns int) (sqlexec.Engine, error) {
	db, err := p.srv.Open(ctx, name, postgres.Options{MaxConns: maxConns})
	if err != nil {
		return nil, err // not a nil *postgres.DB inside the interface
	}
	return db, nil
}

func (p *pgServer) ShareClones(n int, python bool) int { return p.srv.ShareClones(n, python) }

func (p *pgServer) OpenStateful(ctx context.Context, name string, opt corpus.StatefulOptions) (sqlexec.Stateful, error) {
	sdb, err := p.srv.OpenStateful(ctx, name, postgres.StatefulOptions{Python: opt.Python, Clones: opt.Clones})
	if err != nil {
		return nil, err
	}
	return sdb, nil
}

func (p *pgServer) Close() {
	if p.owned {
		p.srv.Close()
	}
}

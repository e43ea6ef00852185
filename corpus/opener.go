package corpus

// This file declares what the loader needs of the database engines, and
// nothing more. The corpus model links no engine driver: the command wires
// an Opener in (package engines implements it with sqlexec/sqlite and
// sqlexec/postgres), the way wtf's cmd/wtfd wires its SQLite services into
// the domain. A test may implement it with a fake.

import (
	"context"
	"time"

	"avtgym/sqlexec"
)

// Opener opens the databases a manifest names (Options.Engines).
type Opener interface {
	// BuildSQLite creates a new SQLite database file at dest by running
	// script under opt's bounds. It fails if dest exists and removes dest
	// when the build fails. A fault of the script itself (a statement that
	// fails or is denied, a bound reached) is a *SourceError.
	BuildSQLite(ctx context.Context, script, dest string, opt BuildOptions) error
	// OpenSQLite opens the SQLite database file at path read-only, and the
	// stateful verifier of its Management records (which copies nothing
	// before its first verification).
	OpenSQLite(path string, opt SQLiteOptions) (sqlexec.Engine, sqlexec.Stateful, error)
	// ConnectPostgres returns the PostgreSQL server that one load's engine
	// "postgres" databases load into; nil and no error when none is
	// configured. The loader calls it once per load, at the first such
	// database, and closes what it returned with the corpus (so a server
	// the opener shares among corpora must not close on that Close).
	ConnectPostgres(ctx context.Context) (PostgresServer, error)
}

// BuildOptions bound the build of one SQLite database from its script.
type BuildOptions struct {
	// Name is how errors name the script (its file).
	Name string
	// Timeout bounds the build; 0 means the engine's default.
	Timeout time.Duration
	// MaxBytes bounds the built database's size; 0 means the engine's
	// default.
	MaxBytes int64
}

// SQLiteOptions configure Opener.OpenSQLite.
type SQLiteOptions struct {
	// Immutable says that nobody changes the file while it is open (a
	// database built or copied out by this process), so the engine may
	// take no locks.
	Immutable bool
	// MaxConns bounds the connection pool.
	MaxConns int
}

// PostgresServer is a PostgreSQL server as the loader uses it: it loads
// template databases and opens their working clones.
type PostgresServer interface {
	// EnsureDatabase loads src as the template of the corpus's database
	// dbID, unless the same content is loaded already, and returns the
	// name of its working database. A fault of the source itself (a dump
	// or script that does not load) is a *SourceError; any other error is
	// the server's.
	EnsureDatabase(ctx context.Context, corpus, dbID string, src PostgresSource) (string, error)
	// Open opens a read-only engine on the working database name, with at
	// most maxConns connections.
	Open(ctx context.Context, name string, maxConns int) (sqlexec.Engine, error)
	// ShareClones returns how many private copies each of n databases with
	// Management records should keep so that they share the server's
	// connection budget fairly (python: each copy may also need a Python
	// test worker's session).
	ShareClones(n int, python bool) int
	// OpenStateful opens the stateful verifier of the working database
	// name: private copies that Management records are verified on.
	OpenStateful(ctx context.Context, name string, opt StatefulOptions) (sqlexec.Stateful, error)
	// Close releases what the server holds for this load.
	Close()
}

// PostgresSource is where a PostgreSQL database's content comes from:
// a folder of dump files, or a script.
type PostgresSource struct {
	// DumpDir is the real path of the dump folder; "" for a script.
	DumpDir string
	// Script is the script's text and ScriptName how errors name it.
	Script, ScriptName string
}

// StatefulOptions configure PostgresServer.OpenStateful.
type StatefulOptions struct {
	// Clones is how many private copies to keep (ShareClones's answer).
	Clones int
	// Python runs the Python tests of Management records; nil means none.
	Python sqlexec.PyRunner
}

// SourceError is a database source that does not load: a build script
// or a dump that the engine refused. The loader reports it as a problem of
// the corpus; any other error of an Opener is the environment's.
type SourceError struct {
	// Reason says what is wrong, as the problem shows it.
	Reason string
	// Err is the engine's error.
	Err error
}

func (e *SourceError) Error() string { return e.Reason }

// Unwrap returns the engine's error, so that sqlexec.KindOf sees its kind.
func (e *SourceError) Unwrap() error { return e.Err }

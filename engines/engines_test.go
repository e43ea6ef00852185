package engines_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/internal/pgtest"
	"avtgym/sqlexec"
	"avtgym/sqlexec/postgres"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// TestSQLite: a script builds a database that opens read-only with its
// stateful verifier; a script that fails is a *corpus.SourceError whose
// reason names the statement, and whose chain keeps the engine's kind.
func TestSQLite(t *testing.T) {
	ctx := context.Background()
	var o engines.Opener
	dest := filepath.Join(t.TempDir(), "db.sqlite")
	if err := o.BuildSQLite(ctx, "CREATE TABLE t (x INTEGER);\nINSERT INTO t VALUES (1), (2);", dest, corpus.BuildOptions{Name: "db.sql"}); err != nil {
		t.Fatalf("BuildSQLite: %v", err)
	}
	eng, stateful, err := o.OpenSQLite(dest, corpus.SQLiteOptions{Immutable: true, MaxConns: 2})
	if err != nil {
		t.Fatalf("OpenSQLite: %v", err)
	}
	defer eng.Close()
	res, err := eng.Query(ctx, "SELECT SUM(x) FROM t", sqlexec.DefaultLimits())
	if err != nil || len(res.Rows) != 1 || fmt.Sprint(res.Rows[0][0]) != "3" {
		t.Errorf("Query = %+v, %v; want one row, 3", res, err)
	}
	if _, err := eng.Query(ctx, "DELETE FROM t", sqlexec.DefaultLimits()); err == nil {
		t.Error("the engine ran a DELETE; it must be read-only")
	}
	if stateful == nil {
		t.Error("OpenSQLite gave no stateful verifier")
	}

	bad := filepath.Join(t.TempDir(), "bad.sqlite")
	err = o.BuildSQLite(ctx, "CREATE TABLE t (x INTEGER PRIMARY KEY);\nINSERT INTO t VALUES (1), (1);", bad, corpus.BuildOptions{Name: "bad.sql"})
	var se *corpus.SourceError
	if !errors.As(err, &se) {
		t.Fatalf("BuildSQLite of a failing script: %v (%T), want a *corpus.SourceError", err, err)
	}
	if !strings.HasPrefix(se.Reason, "statement 2 (line 2): ") || strings.Contains(se.Reason, "bad.sql") {
		t.Errorf("Reason = %q, want the statement and line, without the script's name", se.Reason)
	}
	if k := sqlexec.KindOf(err); k != sqlexec.KindExecution {
		t.Errorf("KindOf = %v, want %v (the engine's kind, through Unwrap)", k, sqlexec.KindExecution)
	}
	if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed build left %s behind (%v)", bad, err)
	}

	eng, stateful, err = o.OpenSQLite(filepath.Join(t.TempDir(), "missing.sqlite"), corpus.SQLiteOptions{})
	if err == nil || eng != nil || stateful != nil {
		t.Errorf("OpenSQLite of a missing file = %v, %v, %v; want an error and nothing else", eng, stateful, err)
	}
}

// TestNoPostgres: the zero Opener has no PostgreSQL server, and says so
// with a nil interface (not a nil pointer inside one).
func TestNoPostgres(t *testing.T) {
	srv, err := engines.Opener{}.ConnectPostgres(context.Background())
	if srv != nil || err != nil {
		t.Errorf("ConnectPostgres = %v, %v; want nil, nil", srv, err)
	}
}

// TestPostgres: an Opener with an admin URL connects a server of the
// corpus's own, which Close closes; one with a shared server hands it out
// and never closes it. Sources load and open; one that does not load is a
// *corpus.SourceError, any other failure is not.
func TestPostgres(t *testing.T) {
	url := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := corpus.PostgresSource{Script: "CREATE TABLE t (x integer);\nINSERT INTO t VALUES (1), (2);\n", ScriptName: "db.sql"}
	// Databases are named by corpus, id and content: a rerun reuses them.
	const corpusName = "enginestest"

	owned, err := engines.Opener{PostgresURL: url}.ConnectPostgres(ctx)
	if err != nil {
		t.Fatalf("ConnectPostgres: %v", err)
	}
	name, err := owned.EnsureDatabase(ctx, corpusName, "db", script)
	if err != nil {
		t.Fatalf("EnsureDatabase: %v", err)
	}
	eng, err := owned.Open(ctx, name, 2)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	res, err := eng.Query(ctx, "SELECT SUM(x) FROM t", sqlexec.DefaultLimits())
	if err != nil || len(res.Rows) != 1 || fmt.Sprint(res.Rows[0][0]) != "3" {
		t.Errorf("Query = %+v, %v; want one row, 3", res, err)
	}
	eng.Close()
	_, err = owned.EnsureDatabase(ctx, corpusName, "bad", corpus.PostgresSource{Script: "CREATE TABLE t (x integer);\nINSERT INTO nowhere VALUES (1);\n", ScriptName: "bad.sql"})
	var se *corpus.SourceError
	if !errors.As(err, &se) || !strings.Contains(se.Reason, "bad.sql") {
		t.Errorf("EnsureDatabase of a failing script: %v (%T), want a *corpus.SourceError naming bad.sql", err, err)
	}
	owned.Close()
	if _, err := owned.EnsureDatabase(ctx, corpusName, "db", script); err == nil || errors.As(err, &se) {
		t.Errorf("EnsureDatabase after Close: %v, want the closed server's error (not a SourceError)", err)
	}

	srv, err := postgres.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	shared, err := engines.Opener{Postgres: srv}.ConnectPostgres(ctx)
	if err != nil {
		t.Fatalf("ConnectPostgres (shared): %v", err)
	}
	shared.Close()
	if _, err := srv.EnsureDatabase(ctx, corpusName, "db", postgres.Script(script.ScriptName, script.Script)); err != nil {
		t.Errorf("the shared server after a corpus's Close: %v, want it still open", err)
	}
}

// TestCommitSchema: the tables and columns of a SQLite file, and errors
// that name the file.
func TestCommitSchema(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db := filepath.Join(dir, "db.sqlite")
	if err := (engines.Opener{}).BuildSQLite(ctx, "CREATE TABLE Country (Name TEXT, Region TEXT);\nCREATE VIEW v AS SELECT Name FROM Country;", db, corpus.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := engines.CommitSchema(ctx, db)
	if err != nil {
		t.Fatalf("CommitSchema: %v", err)
	}
	if got := strings.Join(s.Tables(), ","); got != "country,v" {
		t.Errorf("Tables = %s, want country,v", got)
	}
	if got := strings.Join(s.Columns("COUNTRY"), ","); got != "name,region" {
		t.Errorf("Columns(COUNTRY) = %s, want name,region", got)
	}
	empty := filepath.Join(dir, "empty.sqlite")
	if err := (engines.Opener{}).BuildSQLite(ctx, "SELECT 1;", empty, corpus.BuildOptions{}); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.sqlite")
	if err := os.WriteFile(junk, []byte("not a database, not at all, no header here............................................................................"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.sqlite"), "missing.sqlite: no such file"},
		{dir, ": not a regular file"},
		{junk, "junk.sqlite: not a readable SQLite database"},
		{empty, "empty.sqlite: no tables"},
	} {
		if _, err := engines.CommitSchema(ctx, c.path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CommitSchema(%s) = %v, want an error containing %q", c.path, err, c.want)
		}
	}
}

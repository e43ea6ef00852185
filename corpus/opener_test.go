package corpus_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/internal/testutil"
	"avtgym/sqlexec"
)

// TestLoadNeedsEngines: a load without an opener fails at once, with an
// error that says what is missing.
func TestLoadNeedsEngines(t *testing.T) {
	if _, err := corpus.LoadDir(context.Background(), testutil.WriteTiny(t), corpus.Options{}); !errors.Is(err, corpus.ErrNoEngines) {
		t.Errorf("LoadDir without Engines: %v, want ErrNoEngines", err)
	}
	if _, err := corpus.LoadDemo(context.Background(), corpus.Options{}); !errors.Is(err, corpus.ErrNoEngines) {
		t.Errorf("LoadDemo without Engines: %v, want ErrNoEngines", err)
	}
}

// refusingBuilds is an opener whose SQLite builds all fail as a fault of
// the script.
type refusingBuilds struct{ engines.Opener }

func (refusingBuilds) BuildSQLite(context.Context, string, string, corpus.BuildOptions) error {
	return &corpus.SourceError{Reason: "statement 1 (line 2): denied: refused by the test", Err: errors.New("the engine's own words")}
}

// TestSourceErrorIsAProblem: a script the opener refuses is a problem of
// the script's file, in the opener's words (its Reason).
func TestSourceErrorIsAProblem(t *testing.T) {
	dir := testutil.WriteTiny(t)
	_, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: refusingBuilds{}})
	var ve *corpus.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("LoadDir: %v, want a *corpus.ValidationError", err)
	}
	want := filepath.Join(dir, "mini.sql") + `: building database "mini": statement 1 (line 2): denied: refused by the test`
	if len(ve.Problems) == 0 || ve.Problems[0].String() != want {
		t.Errorf("problems = %v, want first %q", ve.Problems, want)
	}
}

// fakePostgres plays a PostgreSQL server with SQLite (the in-process
// variant of the engines as the test fake): a "template" is a SQLite
// database built from the script, its "working database" the same file. It
// records what the loader asked of it.
type fakePostgres struct {
	dir string
	// refuse, when set, is EnsureDatabase's error.
	refuse error

	mu       sync.Mutex
	ensured  []string // "corpus/dbID: script name"
	maxConns []int
	closes   int
}

func (f *fakePostgres) EnsureDatabase(ctx context.Context, corpusName, dbID string, src corpus.PostgresSource) (string, error) {
	f.mu.Lock()
	f.ensured = append(f.ensured, corpusName+"/"+dbID+": "+filepath.Base(src.ScriptName))
	f.mu.Unlock()
	if f.refuse != nil {
		return "", f.refuse
	}
	path := filepath.Join(f.dir, dbID+".sqlite")
	if err := (engines.Opener{}).BuildSQLite(ctx, src.Script, path, corpus.BuildOptions{Name: src.ScriptName}); err != nil {
		return "", err
	}
	return path, nil
}

func (f *fakePostgres) Open(_ context.Context, name string, maxConns int) (sqlexec.Engine, error) {
	f.mu.Lock()
	f.maxConns = append(f.maxConns, maxConns)
	f.mu.Unlock()
	eng, _, err := (engines.Opener{}).OpenSQLite(name, corpus.SQLiteOptions{MaxConns: maxConns})
	return eng, err
}

func (f *fakePostgres) ShareClones(int, bool) int { return 1 }

func (f *fakePostgres) OpenStateful(context.Context, string, corpus.StatefulOptions) (sqlexec.Stateful, error) {
	return nil, errors.New("the fake has no private copies")
}

func (f *fakePostgres) Close() {
	f.mu.Lock()
	f.closes++
	f.mu.Unlock()
}

// fakePostgresOpener opens SQLite databases for real and gives the fake
// server (nil: none configured), counting how often it is asked.
type fakePostgresOpener struct {
	engines.Opener
	srv   *fakePostgres
	asked *int
}

func (o fakePostgresOpener) ConnectPostgres(context.Context) (corpus.PostgresServer, error) {
	*o.asked++
	if o.srv == nil {
		return nil, nil
	}
	return o.srv, nil
}

// onPostgres moves the tiny corpus's database to PostgreSQL and adds a
// second PostgreSQL database, built from the same script.
func onPostgres(files map[string]string) {
	m := strings.Replace(files["corpus.json"], `"engine": "sqlite"`, `"engine": "postgres"`, 1)
	files["corpus.json"] = strings.Replace(m, `"databases": [{`, `"databases": [{"id": "extra", "engine": "postgres", "script": "mini.sql"}, {`, 1)
}

// TestPostgresThroughOpener: the loader asks the opener for the server
// once per load, loads each PostgreSQL database through it with a pool as
// large as the lanes' capacity, and closes it with the corpus; a source the
// server refuses is a problem of the manifest, and the failed load closes
// the server too.
func TestPostgresThroughOpener(t *testing.T) {
	ctx := context.Background()
	lanes := sqlexec.NewLanes(sqlexec.LaneOptions{Fast: 3, Slow: 2})
	t.Run("loads", func(t *testing.T) {
		srv, asked := &fakePostgres{dir: t.TempDir()}, 0
		c, err := corpus.LoadDir(ctx, testutil.WriteTiny(t, onPostgres), corpus.Options{Engines: fakePostgresOpener{srv: srv, asked: &asked}, Lanes: lanes})
		if err != nil {
			t.Fatalf("LoadDir: %v", err)
		}
		if asked != 1 {
			t.Errorf("ConnectPostgres asked %d times for two databases, want once", asked)
		}
		if want := []string{"tiny/extra: mini.sql", "tiny/mini: mini.sql"}; strings.Join(srv.ensured, ",") != strings.Join(want, ",") {
			t.Errorf("EnsureDatabase calls = %q, want %q", srv.ensured, want)
		}
		for _, n := range srv.maxConns {
			if n != lanes.Capacity() {
				t.Errorf("Open asked for %d connections, want the lanes' capacity %d", n, lanes.Capacity())
			}
		}
		task, ok := c.Task("count")
		if !ok {
			t.Fatal("no task count")
		}
		v, err := task.Verify(ctx, "SELECT COUNT(*) FROM sales", sqlexec.DefaultLimits(), corpus.VerifyOptions{})
		if err != nil || !v.Success {
			t.Errorf("Verify on the PostgreSQL database: %+v, %v; want success", v, err)
		}
		if srv.closes != 0 {
			t.Errorf("the server was closed %d times before the corpus", srv.closes)
		}
		c.Close()
		if srv.closes != 1 {
			t.Errorf("Corpus.Close closed the server %d times, want once", srv.closes)
		}
	})
	t.Run("refused", func(t *testing.T) {
		srv, asked := &fakePostgres{refuse: &corpus.SourceError{Reason: "mini.sql:3: syntax error"}}, 0
		_, err := corpus.LoadDir(ctx, testutil.WriteTiny(t, onPostgres), corpus.Options{Engines: fakePostgresOpener{srv: srv, asked: &asked}})
		var ve *corpus.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("LoadDir: %v, want a *corpus.ValidationError", err)
		}
		if !strings.Contains(ve.Error(), `databases[0]: loading database "extra": mini.sql:3: syntax error`) {
			t.Errorf("problems do not report the refused source:\n%v", ve)
		}
		if srv.closes != 1 {
			t.Errorf("the failed load closed the server %d times, want once", srv.closes)
		}
	})
	t.Run("server fault", func(t *testing.T) {
		srv, asked := &fakePostgres{refuse: errors.New("connection reset")}, 0
		_, err := corpus.LoadDir(ctx, testutil.WriteTiny(t, onPostgres), corpus.Options{Engines: fakePostgresOpener{srv: srv, asked: &asked}})
		var ve *corpus.ValidationError
		if err == nil || errors.As(err, &ve) || !strings.Contains(err.Error(), "connection reset") {
			t.Errorf("LoadDir: %v, want the server's error (not a problem of the corpus)", err)
		}
	})
	t.Run("none configured", func(t *testing.T) {
		asked := 0
		_, err := corpus.LoadDir(ctx, testutil.WriteTiny(t, onPostgres), corpus.Options{Engines: fakePostgresOpener{asked: &asked}})
		var ve *corpus.ValidationError
		if !errors.As(err, &ve) {
			t.Fatalf("LoadDir: %v, want a *corpus.ValidationError", err)
		}
		if !strings.Contains(ve.Error(), "pass --postgres URL") || !strings.Contains(ve.Error(), corpus.PostgresEnv) {
			t.Errorf("problems do not name the flag:\n%v", ve)
		}
		if asked != 1 {
			t.Errorf("ConnectPostgres asked %d times, want once", asked)
		}
	})
}

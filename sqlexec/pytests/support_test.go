package pytests

// Test support: a pool whose worker really runs (or a skip, or under CI a
// failure), the harbor sample loaded once into a template on the test
// cluster, private clones of it, and the lite sample's Management tasks.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"avtgym/internal/pgtest"
	"avtgym/sqlexec"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// requireWorker fails under CI, and skips elsewhere, when err says that the
// worker cannot run here (python3 or psycopg missing).
func requireWorker(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if errors.Is(err, ErrNoPython) {
		if os.Getenv("CI") != "" {
			t.Fatalf("the Python test worker is required under CI: %v", err)
		}
		t.Skipf("no Python test worker here (%v)", err)
	}
	t.Fatalf("Check: %v", err)
}

// newPool returns a pool whose worker runs, closed when the test ends.
func newPool(t testing.TB, cfg Config) *Pool {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	requireWorker(t, p.Check(ctx))
	return p
}

// liteDir is the BIRD-Interact lite sample, beside the checkout.
func liteDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join("..", "..", "..", "shared", "data", "birdinteract-format", "lite")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("the BIRD-Interact sample is not at %s (it lives beside the checkout, in ../shared/data)", dir)
	}
	return dir
}

var (
	tplOnce sync.Once
	tplName string
	tplErr  error
)

// harborTemplate loads the harbor dumps, as the release's init script does
// (psql, one file per table in foreign-key order), into a template
// database, once per test binary.
func harborTemplate(t testing.TB) string {
	t.Helper()
	dumps := filepath.Join(liteDir(t), "postgre_table_dumps", "harbor_template")
	admin := pgtest.URL(t)
	tplOnce.Do(func() {
		tplName = "pytests_harbor_tpl_" + randHex(4)
		tplErr = func() error {
			bin, err := pgtest.BinDir()
			if err != nil {
				return err
			}
			if err := adminExec(admin, "CREATE DATABASE "+tplName+" TEMPLATE template0"); err != nil {
				return err
			}
			for _, table := range []string{"berths", "cranes", "vessels", "port_calls", "cargo_manifests", "crane_assignments"} {
				cmd := exec.Command(filepath.Join(bin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pgtest.URLFor(t, tplName),
					"-f", filepath.Join(dumps, table+".sql"))
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("loading %s: %v: %s", table, err, out)
				}
			}
			return nil
		}()
	})
	if tplErr != nil {
		t.Fatalf("loading the harbor sample: %v", tplErr)
	}
	return tplName
}

// clone creates a private copy of the harbor sample, dropped when the test
// ends, and returns its name.
func clone(t testing.TB) string {
	t.Helper()
	tpl := harborTemplate(t)
	name := "pytests_" + randHex(6)
	admin := pgtest.URL(t)
	if err := adminExec(admin, "CREATE DATABASE "+name+" TEMPLATE "+tpl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := adminExec(admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping %s: %v", name, err)
		}
	})
	return name
}

// adminExec runs statements as the administrator on the URL's database.
func adminExec(url string, stmts ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// adminQueryInt scans the one integer query q returns into n.
func adminQueryInt(url, q string, n *int) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.QueryRow(ctx, q).Scan(n)
}

// sequences returns the state of every sequence of database db.
func sequences(t testing.TB, db string) map[string][2]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, pgtest.URLFor(t, db))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	rows, err := c.Query(ctx, "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relkind = 'S'")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]any{}
	for _, n := range names {
		var last int64
		var called bool
		if err := c.QueryRow(ctx, "SELECT last_value, is_called FROM "+n).Scan(&last, &called); err != nil {
			t.Fatal(err)
		}
		out[n] = [2]any{last, called}
	}
	return out
}

// restoreSequences puts database db's sequences back as seqs found them:
// nextval is not transactional, so a job's INSERT advances them whatever
// the rollback (the engine resets its copies; here the test does).
func restoreSequences(t testing.TB, db string, seqs map[string][2]any) {
	t.Helper()
	var stmts []string
	for n, v := range seqs {
		stmts = append(stmts, fmt.Sprintf("SELECT setval('%s', %d, %t)", n, v[0], v[1]))
	}
	if err := adminExec(pgtest.URLFor(t, db), stmts...); err != nil {
		t.Fatal(err)
	}
}

// task is a Management task of the lite sample (one phase).
type task struct {
	id                  string
	prior, sol, tests   []string
	preprocess, cleanup []string
}

// liteTasks returns the lite sample's Management tasks with Python tests:
// every phase 1, and the follow-ups that have tests (on their phase 1).
func liteTasks(t testing.TB) []task {
	t.Helper()
	dir := liteDir(t)
	type phase struct {
		SolSQL    []string `json:"sol_sql"`
		TestCases []string `json:"test_cases"`
	}
	var out []task
	pre := map[string][2][]string{}
	f, err := os.Open(filepath.Join(dir, "bird_interact_data.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r struct {
			ID         string   `json:"instance_id"`
			Preprocess []string `json:"preprocess_sql"`
			CleanUp    []string `json:"clean_up_sqls"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		pre[r.ID] = [2][]string{r.Preprocess, r.CleanUp}
	}
	g, err := os.Open(filepath.Join(dir, "bird_interact_gt.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	sc = bufio.NewScanner(g)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r struct {
			ID string `json:"instance_id"`
			phase
			FollowUp phase `json:"follow_up"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if len(r.TestCases) == 0 {
			continue
		}
		p := pre[r.ID]
		out = append(out, task{id: r.ID, sol: r.SolSQL, tests: r.TestCases, preprocess: p[0], cleanup: p[1]})
		if len(r.FollowUp.TestCases) > 0 {
			out = append(out, task{id: r.ID + "/follow_up", prior: append(append([]string(nil), r.SolSQL...), p[1]...),
				sol: r.FollowUp.SolSQL, tests: r.FollowUp.TestCases, preprocess: p[0], cleanup: p[1]})
		}
	}
	if len(out) < 5 {
		t.Fatalf("found %d Management phases with tests in the lite sample; want the 4 tasks and harbor_M_4's follow-up", len(out))
	}
	return out
}

// job is a PyJob on database db with the test's usual limits.
func job(t testing.TB, db string, predicted []string, tests ...string) sqlexec.PyJob {
	return sqlexec.PyJob{
		DSN:              pgtest.URLFor(t, db),
		DBName:           db,
		Predicted:        predicted,
		Reference:        predicted,
		Tests:            tests,
		StatementTimeout: 10 * time.Second,
		Deadline:         time.Minute,
	}
}

// run runs j and fails the test on an error.
func run(t testing.TB, p *Pool, j sqlexec.PyJob) sqlexec.PyResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := p.Run(ctx, j)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// pyTest builds a test_case source from its body (lines indented here).
func pyTest(body ...string) string {
	return "def test_case(pred_sqls, sol_sqls, db_name, conn):\n    " + strings.Join(body, "\n    ") + "\n"
}

package app_test

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/audit"
	"avtgym/corpus"
	"avtgym/driver"
	"avtgym/engines"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

// managementRecords are two interpretations of one state-changing task on
// the tiny corpus's SQLite database, verified by a check query.
const managementRecords = `{"id":"refund-a","avt_id":"refund","category":"Management","db":"mini","request":"Refund the small North sales.","ambiguities":[{"term":"small","kind":"critical","resolution":"Sales under 50 dollars."}],"interpretation":"under 50","reference":{"sql":"UPDATE sales SET amount = -amount WHERE region = 'North' AND amount < 50","checks":["SELECT id, amount FROM sales ORDER BY id"]}}
{"id":"refund-b","avt_id":"refund","category":"Management","db":"mini","request":"Refund the small North sales.","ambiguities":[{"term":"small","kind":"critical","resolution":"Sales under 120 dollars."}],"interpretation":"under 120","reference":{"sql":"UPDATE sales SET amount = -amount WHERE region = 'North' AND amount < 120","checks":["SELECT id, amount FROM sales ORDER BY id"]}}
`

// TestSQLiteManagementServed: a Management record on SQLite, served over
// gRPC: its reference passes its check, the other reading and hostile SQL
// fail as the policy's outcome (never ERROR), nothing reaches the database
// file, and corpus check passes (the cross check decided by the verifier).
func TestSQLiteManagementServed(t *testing.T) {
	dir := testutil.WriteTiny(t, func(files map[string]string) {
		files["records.jsonl"] += managementRecords
		// A database file rather than a script, so the test can watch it.
		files["corpus.json"] = strings.Replace(files["corpus.json"], `"script": "mini.sql"`, `"path": "mini.sqlite"`, 1)
	})
	buildTinyFile(t, dir)
	before := fileSum(t, filepath.Join(dir, "mini.sqlite"))
	s := testutil.StartServer(t, app.Config{Corpora: []string{dir}})
	env := driver.Remote(s.Client.Env)
	score := func(task, sql string) (float64, *pb.StepResponse) {
		t.Helper()
		_, last := play(t, env, task, sql)
		v, ok := outcome(last)
		if !ok || last.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
			t.Fatalf("%s %q: status %s, outcome %v %v: %s", task, sql, last.GetStatus(), v, ok, last.GetPrivileged().GetVerifierReason())
		}
		return v, last
	}
	a := "UPDATE sales SET amount = -amount WHERE region = 'North' AND amount < 50"
	b := "UPDATE sales SET amount = -amount WHERE region = 'North' AND amount < 120"
	if v, last := score("refund-a", a); v != 1 {
		t.Errorf("refund-a's reference scored 0: %s", last.GetPrivileged().GetVerifierReason())
	}
	if v, last := score("refund-a", b); v != 0 || last.GetPrivileged().GetVerifierReason() == "" {
		t.Errorf("the other reading scored %v (reason %q)", v, last.GetPrivileged().GetVerifierReason())
	}
	// The same rows changed another way: the check sees the same state.
	if v, _ := score("refund-a", "UPDATE sales SET amount = 0 - amount WHERE id IN (13)"); v != 1 {
		t.Error("an equivalent UPDATE failed")
	}
	for _, sql := range []string{
		"DELETE FROM sales",
		"DROP TABLE sales",
		"ATTACH '/tmp/avtgym-x.db' AS x",
		"VACUUM INTO '/tmp/avtgym-y.db'",
		"SELECT load_extension('/lib/x')",
		"PRAGMA writable_schema = 1",
		"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) INSERT INTO sales SELECT n + 100, 'X', 1, 2024 FROM r",
	} {
		if v, _ := score("refund-a", sql); v != 0 {
			t.Errorf("%q scored 1", sql)
		}
	}
	for _, f := range []string{"/tmp/avtgym-x.db", "/tmp/avtgym-y.db"} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s was written", f)
		}
	}
	if after := fileSum(t, filepath.Join(dir, "mini.sqlite")); after != before {
		t.Error("the database file changed")
	}
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := audit.Run(context.Background(), c, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || r.Counts[audit.Cross].Passed != 4 {
		var b strings.Builder
		r.WriteTable(&b)
		t.Errorf("corpus check:\n%s\n%v", b.String(), r.Findings)
	}
}

// buildTinyFile builds the tiny corpus's database into dir/mini.sqlite
// with the corpus loader's own build (the script corpus, loaded once).
func buildTinyFile(t *testing.T, dir string) {
	t.Helper()
	work := t.TempDir()
	src := testutil.WriteTiny(t)
	c, err := corpus.LoadDir(context.Background(), src, corpus.Options{Engines: engines.Opener{}, WorkDir: work})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	b, err := os.ReadFile(filepath.Join(work, "tiny", "mini.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "mini.sqlite"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

package ambrosia

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/internal/filetree"
	"avtgym/sqlexec"
	"avtgym/sqlexec/sqlite"
)

// copyFile copies src to dst, creating dst's directory (a test helper).
func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	s, err := os.Open(src)
	if err != nil {
		return err
	}
	defer s.Close()
	d, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(d, s); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// lakesScript builds a small database of n lakes.
func lakesScript(n int) string {
	return fmt.Sprintf(`CREATE TABLE lakes (name TEXT, area REAL, depth REAL);
WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < %d)
INSERT INTO lakes SELECT 'lake ' || i, i * 10, i %% 7 FROM k;`, n)
}

// lakeTask is an ambiguous AMBROSIA question that imports (vague: "size"
// is area or depth) on the database dbFile.
func lakeTask(id, dbFile string) Task {
	return Task{
		ID: id, Split: "validation", Domain: "Geography", DBFile: dbFile,
		Question: "Show the size of every lake.", IsAmbiguous: true, AmbigType: "vague",
		LinkedInterpretations: []Interpretation{
			{Question: "Show the area of every lake.", SQL: "SELECT name, area FROM lakes"},
			{Question: "Show the depth of every lake.", SQL: "SELECT name, depth FROM lakes"},
		},
	}
}

// lakesInput writes an AMBROSIA folder parent/in with the tasks and the
// database dbs/geo/lakes/lakes.sqlite, and a database outside it,
// parent/outside/lakes.sqlite, that hostile db_files point at.
func lakesInput(t *testing.T, rows int, tasks ...Task) (parent, in string) {
	t.Helper()
	parent = t.TempDir()
	in = filepath.Join(parent, "in")
	ctx := context.Background()
	for _, p := range []string{filepath.Join(in, "dbs", "geo", "lakes", "lakes.sqlite"), filepath.Join(parent, "outside", "lakes.sqlite")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := sqlite.BuildFromScript(ctx, lakesScript(rows), p); err != nil {
			t.Fatal(err)
		}
	}
	var b strings.Builder
	for _, tk := range tasks {
		line, _ := json.Marshal(tk)
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(in, TasksFile), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return parent, in
}

// TestImportConfinedDBFile: a db_file that leaves dbs/ (../, an absolute
// path, a symbolic link leading outside) is a rejection of its question
// naming the file; nothing outside --out is written and no input changes.
func TestImportConfinedDBFile(t *testing.T) {
	good := lakeTask("q-good", "geo/lakes/lakes.sqlite")
	hostile := []Task{
		lakeTask("q-dotdot", "../../outside/lakes.sqlite"),
		lakeTask("q-dotdot-inner", "geo/../../../outside/lakes.sqlite"),
		lakeTask("q-abs", "ABS"),
		lakeTask("q-link", "geo/link/lakes.sqlite"),
		lakeTask("q-noid", "lakes.sqlite"),
	}
	parent, in := lakesInput(t, 20, append([]Task{good}, hostile...)...)
	// q-abs names the outside database by its absolute path.
	raw, _ := os.ReadFile(filepath.Join(in, TasksFile))
	os.WriteFile(filepath.Join(in, TasksFile), []byte(strings.Replace(string(raw), `"ABS"`, `"`+filepath.Join(parent, "outside", "lakes.sqlite")+`"`, 1)), 0o644)
	if err := os.Symlink(filepath.Join(parent, "outside"), filepath.Join(in, "dbs", "geo", "link")); err != nil {
		t.Fatal(err)
	}
	copyFile(filepath.Join(parent, "outside", "lakes.sqlite"), filepath.Join(in, "dbs", "lakes.sqlite"))
	out := filepath.Join(parent, "out")
	beforeIn, beforeOutside := filetree.MustSums(t, in), filetree.MustSums(t, filepath.Join(parent, "outside"))

	sum, err := Import(context.Background(), in, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Imported != 1 || len(sum.Rejected) != len(hostile) {
		t.Fatalf("imported %d, rejected %v; want 1 and %d", sum.Imported, sum.Rejected, len(hostile))
	}
	want := map[string]string{
		"q-dotdot":       "is not a relative path inside dbs/",
		"q-dotdot-inner": "is not a relative path inside dbs/",
		"q-abs":          "is not a relative path inside dbs/",
		"q-link":         "resolves outside the input directory",
		"q-noid":         "gives no valid database id",
	}
	for _, r := range sum.Rejected {
		if r.Category != RejectDatabase || !strings.Contains(r.Reason, want[r.ID]) {
			t.Errorf("rejection %+v: want category %q and %q", r, RejectDatabase, want[r.ID])
		}
	}
	filetree.Same(t, "input", beforeIn, filetree.MustSums(t, in))
	filetree.Same(t, "outside", beforeOutside, filetree.MustSums(t, filepath.Join(parent, "outside")))
	ents, _ := os.ReadDir(parent)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "in,out,outside" {
		t.Errorf("parent holds %v, want in, out, outside", names)
	}
	c, err := corpus.LoadDir(context.Background(), out, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Tasks) != 2 || len(c.DBs()) != 1 || c.DBs()[0] != "geo.lakes" {
		t.Errorf("corpus: %d tasks, databases %v", len(c.Tasks), c.DBs())
	}
	c.Close()
}

// TestImportOutDir: an --out that is, lies inside or contains --in, and an
// import whose corpus fails validation, fail with a reason; --out does not
// exist afterwards, no temporary directory remains and no input changes.
func TestImportOutDir(t *testing.T) {
	cases := []struct {
		name  string
		out   func(parent, in string) string
		force bool
		rows  int
		lim   sqlexec.Limits
		want  string
	}{
		{"out is in", func(parent, in string) string { return in }, true, 20, sqlexec.Limits{}, "is the input directory"},
		{"out is in, unclean", func(parent, in string) string { return in + "/../in/" }, true, 20, sqlexec.Limits{}, "is the input directory"},
		{"out inside in", func(parent, in string) string { return filepath.Join(in, "dbs", "out") }, false, 20, sqlexec.Limits{}, "is inside the input directory"},
		{"in inside out", func(parent, in string) string { return parent }, true, 20, sqlexec.Limits{}, "contains the input directory"},
		{"out is a link to in", func(parent, in string) string {
			os.Symlink(in, filepath.Join(parent, "link"))
			return filepath.Join(parent, "link")
		}, true, 20, sqlexec.Limits{}, "is the input directory"},
		// The importer's own limits let 20,000-row references through; the
		// loader's default row cap (10,000) then fails the written corpus.
		{"validation fails", func(parent, in string) string { return filepath.Join(parent, "new", "out") }, false, 20000,
			sqlexec.Limits{Timeout: 10e9, MaxRows: 100000, MaxBytes: 64 << 20}, "does not validate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent, in := lakesInput(t, tc.rows, lakeTask("q-good", "geo/lakes/lakes.sqlite"))
			out := tc.out(parent, in)
			before := filetree.MustSums(t, parent)
			_, err := Import(context.Background(), in, out, Options{Force: tc.force, Limits: tc.lim})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			filetree.Same(t, "the parent of --in", before, filetree.MustSums(t, parent))
		})
	}
}

package corpus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/internal/filetree"
	"avtgym/internal/testutil"
	"avtgym/sqlexec"
	"avtgym/sqlexec/sqlite"
)

// confineFixture lays out parent/ with the tiny corpus in parent/corpus,
// files outside it that a hostile manifest could name (outside.sqlite,
// outside.sql, outside.jsonl, victim.sqlite, dir/), a work directory
// parent/work and a temporary directory parent/tmp (TMPDIR), so that every
// file the load could touch lies under parent.
func confineFixture(t *testing.T) (parent, dir string) {
	t.Helper()
	parent = t.TempDir()
	dir = filepath.Join(parent, "corpus")
	for _, d := range []string{dir, filepath.Join(parent, "work"), filepath.Join(parent, "tmp"), filepath.Join(parent, "dir")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TMPDIR", filepath.Join(parent, "tmp"))
	files := map[string]string{
		"corpus/corpus.json": testutil.TinyManifest, "corpus/mini.sql": testutil.TinyScript,
		"corpus/records.jsonl": testutil.TinyRecords,
		"outside.sql":          testutil.TinyScript, "outside.jsonl": testutil.TinyRecords,
		"dir/mini.sql": testutil.TinyScript,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(parent, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for _, name := range []string{"outside.sqlite", "victim.sqlite", "dir/mini.sqlite", "corpus/mini.sqlite"} {
		if err := sqlite.BuildFromScript(ctx, testutil.TinyScript, filepath.Join(parent, name)); err != nil {
			t.Fatal(err)
		}
	}
	return parent, dir
}

func TestLoadDirConfined(t *testing.T) {
	setDB := func(old, new string) func(t *testing.T, parent, dir string) {
		return func(t *testing.T, parent, dir string) {
			t.Helper()
			b, err := os.ReadFile(filepath.Join(dir, corpus.ManifestFile))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), old) {
				t.Fatalf("the manifest does not contain %q", old)
			}
			new = strings.ReplaceAll(new, "PARENT", parent)
			if err := os.WriteFile(filepath.Join(dir, corpus.ManifestFile), []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	link := func(target, name string) func(t *testing.T, parent, dir string) {
		return func(t *testing.T, parent, dir string) {
			t.Helper()
			if err := os.Symlink(strings.ReplaceAll(target, "PARENT", parent), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	const script = `"script": "mini.sql"`
	const ids = `"id": "mini"`
	cases := []struct {
		name  string
		setup []func(t *testing.T, parent, dir string)
		want  want
	}{
		{"id with ../ components", []func(*testing.T, string, string){setDB(ids, `"id": "../../victim"`)},
			man("databases[0].id", `"../../victim" must be letters, digits`)},
		{"id with a slash", []func(*testing.T, string, string){setDB(ids, `"id": "mini/x"`)},
			man("databases[0].id", `"mini/x" must be letters`)},
		{"id ..", []func(*testing.T, string, string){setDB(ids, `"id": ".."`)},
			man("databases[0].id", `".." must be letters`)},
		{"absolute id", []func(*testing.T, string, string){setDB(ids, `"id": "PARENT/victim"`)},
			man("databases[0].id", "must be letters")},
		{"path ../x.sqlite", []func(*testing.T, string, string){setDB(script, `"path": "../outside.sqlite"`)},
			man("databases[0].path", `"../outside.sqlite" must be a relative path inside the corpus directory`)},
		{"path a/../../x.sqlite", []func(*testing.T, string, string){setDB(script, `"path": "a/../../outside.sqlite"`)},
			man("databases[0].path", "must be a relative path inside the corpus directory")},
		{"absolute path", []func(*testing.T, string, string){setDB(script, `"path": "PARENT/outside.sqlite"`)},
			man("databases[0].path", "must be a relative path inside the corpus directory")},
		{"path with backslashes", []func(*testing.T, string, string){setDB(script, `"path": "..\\outside.sqlite"`)},
			man("databases[0].path", "must be a relative path inside the corpus directory")},
		{"path symlink to outside", []func(*testing.T, string, string){
			setDB(script, `"path": "link.sqlite"`), link("PARENT/outside.sqlite", "link.sqlite")},
			man("databases[0].path", `"link.sqlite" resolves outside the corpus directory`)},
		{"path relative symlink to outside", []func(*testing.T, string, string){
			setDB(script, `"path": "link.sqlite"`), link("../outside.sqlite", "link.sqlite")},
			man("databases[0].path", `"link.sqlite" resolves outside the corpus directory`)},
		{"path through a directory symlink", []func(*testing.T, string, string){
			setDB(script, `"path": "sub/mini.sqlite"`), link("PARENT/dir", "sub")},
			man("databases[0].path", `"sub/mini.sqlite" resolves outside the corpus directory`)},
		{"path dangling symlink to outside", []func(*testing.T, string, string){
			setDB(script, `"path": "link.sqlite"`), link("PARENT/missing.sqlite", "link.sqlite")},
			man("databases[0].path", `"link.sqlite" cannot be opened inside the corpus directory`)},
		{"path is a directory", []func(*testing.T, string, string){
			setDB(script, `"path": "sub"`), func(t *testing.T, parent, dir string) { os.Mkdir(filepath.Join(dir, "sub"), 0o755) }},
			man("databases[0].path", `"sub" is not a regular file`)},
		{"script outside", []func(*testing.T, string, string){setDB(script, `"script": "../outside.sql"`)},
			man("databases[0].script", `"../outside.sql" must be a relative path inside the corpus directory`)},
		{"absolute script", []func(*testing.T, string, string){setDB(script, `"script": "PARENT/outside.sql"`)},
			man("databases[0].script", "must be a relative path inside the corpus directory")},
		{"script symlink to outside", []func(*testing.T, string, string){
			setDB(script, `"script": "link.sql"`), link("PARENT/outside.sql", "link.sql")},
			man("databases[0].script", `"link.sql" resolves outside the corpus directory`)},
		{"records outside", []func(*testing.T, string, string){setDB(`"name": "tiny",`, `"name": "tiny", "records": ["records.jsonl", "../outside.jsonl"],`)},
			man("records[1]", `"../outside.jsonl" must be a relative path inside the corpus directory`)},
		{"absolute records", []func(*testing.T, string, string){setDB(`"name": "tiny",`, `"name": "tiny", "records": ["PARENT/outside.jsonl"],`)},
			man("records[0]", "must be a relative path inside the corpus directory")},
		{"records symlink to outside", []func(*testing.T, string, string){
			setDB(`"name": "tiny",`, `"name": "tiny", "records": ["link.jsonl"],`), link("PARENT/outside.jsonl", "link.jsonl")},
			man("records[0]", `"link.jsonl" resolves outside the corpus directory`)},
		{"default records file is a symlink to outside", []func(*testing.T, string, string){
			func(t *testing.T, parent, dir string) { os.Remove(filepath.Join(dir, "records.jsonl")) },
			link("PARENT/outside.jsonl", "records.jsonl")},
			man("records", `"records.jsonl" resolves outside the corpus directory`)},
		{"manifest symlink to outside", []func(*testing.T, string, string){
			func(t *testing.T, parent, dir string) {
				os.Rename(filepath.Join(dir, corpus.ManifestFile), filepath.Join(parent, "dir", corpus.ManifestFile))
			},
			link("PARENT/dir/corpus.json", corpus.ManifestFile)},
			man("", "cannot read the corpus manifest")},
	}
	for _, tc := range cases {
		for _, workDir := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/workdir=%v", tc.name, workDir), func(t *testing.T) {
				parent, dir := confineFixture(t)
				for _, f := range tc.setup {
					f(t, parent, dir)
				}
				opt := corpus.Options{Engines: engines.Opener{}}
				if workDir {
					opt.WorkDir = filepath.Join(parent, "work")
				}
				before := filetree.MustSums(t, parent)
				c, err := corpus.LoadDir(context.Background(), dir, opt)
				if err == nil {
					c.Close()
					t.Fatal("LoadDir succeeded")
				}
				var ve *corpus.ValidationError
				if !errors.As(err, &ve) {
					t.Fatalf("LoadDir: %v (%T), want a *corpus.ValidationError", err, err)
				}
				prefix := tc.want.prefix(dir)
				found := false
				var got []string
				for _, p := range ve.Problems {
					got = append(got, p.String())
					if rest, ok := strings.CutPrefix(p.String(), prefix); ok && strings.Contains(rest, tc.want.msg) {
						found = true
					}
				}
				if !found {
					t.Errorf("no problem %q…%q among:\n  %s", prefix, tc.want.msg, strings.Join(got, "\n  "))
				}
				filetree.Same(t, "tree", before, filetree.MustSums(t, parent))
			})
		}
	}
}

// TestLoadDirSymlinkInside: a symbolic link that stays inside the corpus
// directory is fine, and the database is opened at its real path.
func TestLoadDirSymlinkInside(t *testing.T) {
	parent, dir := confineFixture(t)
	b, _ := os.ReadFile(filepath.Join(dir, corpus.ManifestFile))
	m := strings.Replace(string(b), `"script": "mini.sql"`, `"path": "link.sqlite"`, 1)
	m = strings.Replace(m, `"name": "tiny",`, `"name": "tiny", "records": ["./records.jsonl"],`, 1)
	os.WriteFile(filepath.Join(dir, corpus.ManifestFile), []byte(m), 0o644)
	if err := os.Symlink("mini.sqlite", filepath.Join(dir, "link.sqlite")); err != nil {
		t.Fatal(err)
	}
	// "./records.jsonl" has a "." element: refused, like "..".
	_, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err == nil || !strings.Contains(err.Error(), `records[0]: "./records.jsonl" must be a relative path`) {
		t.Fatalf("LoadDir: %v, want the ./ path refused", err)
	}
	os.WriteFile(filepath.Join(dir, corpus.ManifestFile), []byte(strings.Replace(m, "./records.jsonl", "records.jsonl", 1)), 0o644)
	before := filetree.MustSums(t, parent)
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	task, _ := c.Task("count")
	if p := sqlexec.Unscheduled(task.DB.Engine).(*sqlite.DB).Path(); p != filepath.Join(dir, "mini.sqlite") {
		t.Errorf("opened %s, want the link's target %s", p, filepath.Join(dir, "mini.sqlite"))
	}
	filetree.Same(t, "tree", before, filetree.MustSums(t, parent))
}

// TestLoadDirWorkDirConfined: a script database is built only at
// WorkDir/<corpus>/<id>.sqlite; a corpus subdirectory of WorkDir that is a
// symbolic link leading elsewhere is refused before anything is written.
func TestLoadDirWorkDirConfined(t *testing.T) {
	parent, dir := confineFixture(t)
	work := filepath.Join(parent, "work")
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}, WorkDir: work})
	if err != nil {
		t.Fatal(err)
	}
	task, _ := c.Task("count")
	if p := sqlexec.Unscheduled(task.DB.Engine).(*sqlite.DB).Path(); p != filepath.Join(work, "tiny", "mini.sqlite") {
		t.Errorf("built at %s", p)
	}
	c.Close()

	os.RemoveAll(filepath.Join(work, "tiny"))
	if err := os.Symlink(filepath.Join(parent, "dir"), filepath.Join(work, "tiny")); err != nil {
		t.Fatal(err)
	}
	before := filetree.MustSums(t, parent)
	c, err = corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}, WorkDir: work})
	if err == nil {
		c.Close()
		t.Fatal("LoadDir built into a work directory that leads outside WorkDir")
	}
	if !strings.Contains(err.Error(), "work directory") {
		t.Errorf("err = %v, want one naming the work directory", err)
	}
	filetree.Same(t, "tree", before, filetree.MustSums(t, parent))
}

// TestLoadDirBuildLimits: a script that grows past the size limit or runs
// past the time limit is a problem of the script file naming the limit.
func TestLoadDirBuildLimits(t *testing.T) {
	grow := "CREATE TABLE sales (id INTEGER PRIMARY KEY, region TEXT, amount REAL, year INTEGER);\n" +
		"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000) INSERT INTO sales SELECT i, hex(randomblob(50)), i, 2024 FROM n;\n"
	endless := "CREATE TABLE sales (id INTEGER PRIMARY KEY, region TEXT, amount REAL, year INTEGER);\n" +
		"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n;\n"
	vacuum := testutil.TinyScript + "\nVACUUM INTO 'escaped.sqlite';\n"
	cases := []struct {
		name, script string
		opt          corpus.Options
		msg          string
	}{
		{"size", grow, corpus.Options{Engines: engines.Opener{}, MaxBuildBytes: 256 << 10}, `building database "mini": statement 2 (line 2): too_many_bytes: `},
		{"time", endless, corpus.Options{Engines: engines.Opener{}, BuildTimeout: 50e6}, `building database "mini": statement 2 (line 2): timeout: `},
		{"vacuum", vacuum, corpus.Options{Engines: engines.Opener{}}, "VACUUM is not allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent, dir := confineFixture(t)
			os.WriteFile(filepath.Join(dir, "mini.sql"), []byte(tc.script), 0o644)
			tc.opt.WorkDir = filepath.Join(parent, "work")
			c, err := corpus.LoadDir(context.Background(), dir, tc.opt)
			if err == nil {
				c.Close()
				t.Fatal("LoadDir succeeded")
			}
			prefix := filepath.Join(dir, "mini.sql") + ": " + tc.msg
			if !strings.Contains(err.Error(), prefix) && !(tc.name == "vacuum" && strings.Contains(err.Error(), tc.msg)) {
				t.Errorf("err = %v, want %q", err, prefix)
			}
			if ents, _ := os.ReadDir(filepath.Join(parent, "work", "tiny")); len(ents) != 0 {
				t.Errorf("work directory holds %v after a failed build", ents)
			}
			for _, stray := range []string{filepath.Join(dir, "escaped.sqlite"), "escaped.sqlite"} {
				if _, err := os.Stat(stray); err == nil {
					t.Errorf("VACUUM INTO wrote %s", stray)
				}
			}
		})
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"mini": true, "a.b:c-d_e": true, "9": true,
		"": false, ".": false, "..": false, "../x": false, "a/b": false, `a\b`: false, ".hidden": false, "a b": false,
	} {
		if got := corpus.ValidID(id); got != want {
			t.Errorf("ValidID(%q) = %v, want %v", id, got, want)
		}
	}
}

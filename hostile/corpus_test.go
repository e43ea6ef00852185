package hostile

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/corpus/ambrosia"
	"avtgym/internal/filetree"
	"avtgym/sqlexec/sqlite"
)

// runBin runs the avtgym binary in an empty working directory under root,
// with TMPDIR root/tmp, and returns its exit code and output.
func runBin(t *testing.T, root string, args ...string) (int, string) {
	t.Helper()
	cwd, tmp := filepath.Join(root, "cwd"), filepath.Join(root, "tmp")
	for _, d := range []string{cwd, tmp} {
		os.MkdirAll(d, 0o755)
	}
	cmd := exec.Command("prlimit", append([]string{"--as=4294967296", "--", bin}, args...)...)
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "SQLITE_TMPDIR="+tmp, "GOMEMLIMIT="+goMemLimit)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestHostileCorpora: manifests that name files outside their directory,
// ids that are paths, and build scripts that write elsewhere are refused by
// `corpus validate` and `serve` alike, with the field named, and nothing
// outside TMPDIR is created, removed or changed — not even the victim file
// a `../` id once overwrote.
func TestHostileCorpora(t *testing.T) {
	cases := []struct {
		name     string
		manifest string
		script   string
		want     string
	}{
		{"an id that climbs out", `{"name":"h","databases":[{"id":"../victim","engine":"sqlite","script":"db.sql"}]}`, "CREATE TABLE t(x);", `databases[0].id`},
		{"a path that climbs out", `{"name":"h","databases":[{"id":"d","engine":"sqlite","path":"../victim.sqlite"}]}`, "", `databases[0].path`},
		{"an absolute path", `{"name":"h","databases":[{"id":"d","engine":"sqlite","path":"/etc/passwd"}]}`, "", `databases[0].path`},
		{"a symlink out", `{"name":"h","databases":[{"id":"d","engine":"sqlite","path":"link.sqlite"}]}`, "", `databases[0].path`},
		{"records outside", `{"name":"h","records":["../records.jsonl"],"databases":[{"id":"d","engine":"sqlite","script":"db.sql"}]}`, "CREATE TABLE t(x);", `records[0]`},
		{"a script that attaches", `{"name":"h","databases":[{"id":"d","engine":"sqlite","script":"db.sql"}]}`, "ATTACH DATABASE '../../evil.sqlite' AS e; CREATE TABLE e.t(x);", "ATTACH"},
		{"a script with VACUUM INTO", `{"name":"h","databases":[{"id":"d","engine":"sqlite","script":"db.sql"}]}`, "CREATE TABLE t(x); VACUUM INTO '../../evil.sqlite';", "VACUUM"},
		{"a script that loads an extension", `{"name":"h","databases":[{"id":"d","engine":"sqlite","script":"db.sql"}]}`, "SELECT load_extension('/tmp/evil.so');", "load_extension"},
	}
	for _, tc := range cases {
		for _, cmd := range []string{"validate", "serve"} {
			t.Run(tc.name+" ("+cmd+")", func(t *testing.T) {
				root := t.TempDir()
				dir := filepath.Join(root, "corpus")
				os.MkdirAll(dir, 0o755)
				if err := sqlite.BuildFromScript(context.Background(), "CREATE TABLE v(x); INSERT INTO v VALUES (42);", filepath.Join(root, "victim.sqlite")); err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(root, "records.jsonl"), []byte(`{"id":"r","db":"d","request":"x?","reference":{"sql":"SELECT 1"}}`+"\n"), 0o644)
				os.WriteFile(filepath.Join(dir, "corpus.json"), []byte(tc.manifest), 0o644)
				os.WriteFile(filepath.Join(dir, "records.jsonl"), []byte(`{"id":"r","db":"d","request":"x?","reference":{"sql":"SELECT 1"}}`+"\n"), 0o644)
				if tc.script != "" {
					os.WriteFile(filepath.Join(dir, "db.sql"), []byte(tc.script), 0o644)
				}
				os.Symlink(filepath.Join(root, "victim.sqlite"), filepath.Join(dir, "link.sqlite"))
				before := filetree.MustSums(t, root, filepath.Join(root, "tmp"))
				var code int
				var out string
				if cmd == "validate" {
					code, out = runBin(t, root, "corpus", "validate", dir)
				} else {
					code, out = runBin(t, root, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--corpus", dir)
				}
				if code != 1 || !strings.Contains(out, tc.want) {
					t.Fatalf("exit %d, want 1 with %q in:\n%s", code, tc.want, tail(out))
				}
				after := filetree.MustSums(t, root, filepath.Join(root, "tmp"))
				filetree.Same(t, "outside TMPDIR", before, after, "cwd", "tmp")
			})
		}
	}
}

// TestHostileImport: an AMBROSIA input whose db_file climbs out of --in,
// and an --out that is --in itself, touch no input and leave no trace.
func TestHostileImport(t *testing.T) {
	root := t.TempDir()
	in := filepath.Join(root, "in")
	ctx := context.Background()
	for _, p := range []string{filepath.Join(in, "dbs", "geo", "lakes", "lakes.sqlite"), filepath.Join(root, "outside", "lakes.sqlite")} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := sqlite.BuildFromScript(ctx, "CREATE TABLE lakes (name TEXT, area REAL, depth REAL); INSERT INTO lakes VALUES ('a', 1, 5), ('b', 2, 4), ('c', 3, 1);", p); err != nil {
			t.Fatal(err)
		}
	}
	task := func(id, db string) ambrosia.Task {
		return ambrosia.Task{ID: id, Split: "validation", Domain: "Geography", DBFile: db,
			Question: "Show the size of every lake.", IsAmbiguous: true, AmbigType: "vague",
			LinkedInterpretations: []ambrosia.Interpretation{
				{Question: "Show the area of every lake.", SQL: "SELECT name, area FROM lakes"},
				{Question: "Show the depth of every lake.", SQL: "SELECT name, depth FROM lakes"},
			}}
	}
	var lines []string
	for _, tk := range []ambrosia.Task{task("good", "geo/lakes/lakes.sqlite"), task("climber", "../../outside/lakes.sqlite")} {
		b, _ := json.Marshal(tk)
		lines = append(lines, string(b))
	}
	os.WriteFile(filepath.Join(in, ambrosia.TasksFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644)

	t.Run("out is in", func(t *testing.T) {
		before := filetree.MustSums(t, root, filepath.Join(root, "tmp"))
		code, out := runBin(t, root, "corpus", "import", "ambrosia", "--in", in, "--out", in, "--force")
		if code == 0 {
			t.Fatalf("importing into the input succeeded:\n%s", out)
		}
		after := filetree.MustSums(t, root, filepath.Join(root, "tmp"))
		filetree.Same(t, "outside TMPDIR", before, after, "cwd", "tmp")
	})
	t.Run("a db_file that climbs out", func(t *testing.T) {
		outDir := filepath.Join(root, "out")
		before := filetree.MustSums(t, root, filepath.Join(root, "tmp"))
		code, out := runBin(t, root, "corpus", "import", "ambrosia", "--in", in, "--out", outDir)
		if code != 0 || !strings.Contains(out, "climber") {
			t.Fatalf("exit %d; want the import to succeed and reject climber:\n%s", code, tail(out))
		}
		after := filetree.MustSums(t, root, filepath.Join(root, "tmp"))
		var inOut []string
		for p := range after {
			if p == "out" || strings.HasPrefix(p, "out/") {
				inOut = append(inOut, p)
			}
		}
		filetree.Same(t, "outside --out", before, after, append(inOut, "cwd", "tmp")...)
	})
}

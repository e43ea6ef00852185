package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/sqlexec/sqlite"
)

// ambrosiaFixture copies the synthetic AMBROSIA-format fixture of package
// corpus/ambrosia (a tasks_test.jsonl and database dumps) into a temporary
// folder, building each database from its dump.
func ambrosiaFixture(t *testing.T) string {
	t.Helper()
	src := filepath.Join("..", "..", "corpus", "ambrosia", "testdata", "synthetic")
	dir := filepath.Join(t.TempDir(), "in")
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		dest := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		if strings.HasSuffix(rel, "_dump.sql") {
			return sqlite.BuildFromScript(context.Background(), string(b), strings.TrimSuffix(dest, "_dump.sql")+".sqlite")
		}
		return os.WriteFile(dest, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestImportAmbrosiaSplits: without --split every tasks_*.jsonl is
// imported; --split NAME imports tasks_NAME.jsonl alone; a missing split
// exits 1 naming its file; the imported corpus passes corpus check.
func TestImportAmbrosiaSplits(t *testing.T) {
	in := ambrosiaFixture(t)
	raw, err := os.ReadFile(filepath.Join(in, "tasks_test.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	dev := strings.ReplaceAll(strings.ReplaceAll(string(raw), `"ambrosia-test-`, `"ambrosia-dev-`), `"split": "test"`, `"split": "dev"`)
	if err := os.WriteFile(filepath.Join(in, "tasks_dev.jsonl"), []byte(dev), 0o644); err != nil {
		t.Fatal(err)
	}

	out := filepath.Join(t.TempDir(), "all")
	code, stdout, stderr := runCmd(t, "corpus", "import", "ambrosia", "--in", in, "--out", out, "--quiet")
	if code != 0 {
		t.Fatalf("import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"split dev (tasks_dev.jsonl): questions 23, ambiguous 7, AVTs imported 6",
		"split test (tasks_test.jsonl): questions 23, ambiguous 7, AVTs imported 6",
		"AVTs imported: 12",
		"rejected although the benchmark marks them usable: 0",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the summary lacks %q:\n%s", want, stdout)
		}
	}
	if code, stdout, stderr := runCmd(t, "corpus", "check", out); code != 0 || !strings.Contains(stdout, "PASS") {
		t.Errorf("corpus check: exit %d\n%s\n%s", code, stdout, stderr)
	}

	code, stdout, stderr = runCmd(t, "corpus", "import", "ambrosia", "--in", in, "--out", filepath.Join(t.TempDir(), "test"), "--split", "test", "--quiet")
	if code != 0 || !strings.Contains(stdout, "split test (tasks_test.jsonl)") || strings.Contains(stdout, "split dev") || !strings.Contains(stdout, "AVTs imported: 6") {
		t.Errorf("--split test: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, _, stderr = runCmd(t, "corpus", "import", "ambrosia", "--in", in, "--out", filepath.Join(t.TempDir(), "x"), "--split", "nope", "--quiet")
	if code != 1 || !strings.Contains(stderr, "tasks_nope.jsonl") {
		t.Errorf("--split nope: exit %d, stderr %q", code, stderr)
	}
}

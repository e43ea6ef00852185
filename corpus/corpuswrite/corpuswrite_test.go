package corpuswrite

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/internal/filetree"
	"avtgym/sqlexec/sqlite"
)

const manifest = `{"name": "w", "databases": [{"id": "db", "engine": "sqlite", "path": "db.sqlite"}]}` + "\n"

const records = `{"id": "r1", "db": "db", "request": "How many rows?", "ambiguities": [], "reference": {"sql": "SELECT count(*) FROM t"}}` + "\n"

// input lays out parent/in with a database in/src/db.sqlite, a file
// outside it (parent/secret.sqlite) and a symbolic link in/src/link.sqlite
// to that file.
func input(t *testing.T) (parent, in string) {
	t.Helper()
	parent = t.TempDir()
	in = filepath.Join(parent, "in")
	if err := os.MkdirAll(filepath.Join(in, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(in, "src", "db.sqlite"), filepath.Join(parent, "secret.sqlite")} {
		if err := sqlite.BuildFromScript(context.Background(), "CREATE TABLE t(x); INSERT INTO t VALUES (1), (2);", p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(parent, "secret.sqlite"), filepath.Join(in, "src", "link.sqlite")); err != nil {
		t.Fatal(err)
	}
	return parent, in
}

func TestCheckRefuses(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, parent, in string) (in2, out string)
		force bool
		want  string
	}{
		{"out is in", func(t *testing.T, parent, in string) (string, string) { return in, in }, true, "is the input directory"},
		{"out is in, relative", func(t *testing.T, parent, in string) (string, string) {
			t.Chdir(parent)
			return "in", "./in/../in"
		}, true, "is the input directory"},
		{"out inside in", func(t *testing.T, parent, in string) (string, string) { return in, filepath.Join(in, "src", "out") }, true, "is inside the input directory"},
		{"in inside out", func(t *testing.T, parent, in string) (string, string) { return in, parent }, true, "contains the input directory"},
		{"out is a link to in", func(t *testing.T, parent, in string) (string, string) {
			os.Symlink(in, filepath.Join(parent, "link"))
			return in, filepath.Join(parent, "link")
		}, true, "is the input directory"},
		{"out inside a link to in", func(t *testing.T, parent, in string) (string, string) {
			os.Symlink(in, filepath.Join(parent, "link"))
			return in, filepath.Join(parent, "link", "new")
		}, true, "is inside the input directory"},
		{"out is a link", func(t *testing.T, parent, in string) (string, string) {
			os.Mkdir(filepath.Join(parent, "elsewhere"), 0o755)
			os.Symlink(filepath.Join(parent, "elsewhere"), filepath.Join(parent, "link"))
			return in, filepath.Join(parent, "link")
		}, true, "is a symbolic link"},
		{"out is a file", func(t *testing.T, parent, in string) (string, string) {
			return in, filepath.Join(parent, "secret.sqlite")
		}, true, "is not a directory"},
		{"out not empty", func(t *testing.T, parent, in string) (string, string) {
			os.MkdirAll(filepath.Join(parent, "out"), 0o755)
			os.WriteFile(filepath.Join(parent, "out", "keep"), []byte("x"), 0o644)
			return in, filepath.Join(parent, "out")
		}, false, "is not empty (pass --force"},
		{"in missing", func(t *testing.T, parent, in string) (string, string) {
			return filepath.Join(parent, "nope"), filepath.Join(parent, "out")
		}, false, "nope"},
		{"in is a file", func(t *testing.T, parent, in string) (string, string) {
			return filepath.Join(parent, "secret.sqlite"), filepath.Join(parent, "out")
		}, false, "is not a directory"},
		{"no out", func(t *testing.T, parent, in string) (string, string) { return in, "" }, false, "no output directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent, in := input(t)
			in2, out := tc.setup(t, parent, in)
			before := filetree.MustSums(t, parent)
			if err := Check(in2, out, tc.force); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Check: %v, want %q", err, tc.want)
			}
			w, err := New(in2, out, tc.force)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v, want %q", err, tc.want)
			}
			if w != nil {
				w.Discard()
			}
			filetree.Same(t, "tree", before, filetree.MustSums(t, parent))
		})
	}
}

// TestWriterConfined: names that leave the temporary directory, and input
// files that leave the input directory, are refused; after Discard nothing
// is left and no input changed.
func TestWriterConfined(t *testing.T) {
	parent, in := input(t)
	before := filetree.MustSums(t, parent)
	out := filepath.Join(parent, "a", "b", "out")
	w, err := New(in, out, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(w.Dir()), ".out.tmp-") || filepath.Dir(w.Dir()) != filepath.Dir(out) {
		t.Errorf("temporary directory %s is not beside %s", w.Dir(), out)
	}
	for _, name := range []string{"../x", "a/../../x", "/abs", filepath.Join(parent, "x"), "", ".", `..\x`, "a//b"} {
		if err := w.WriteFile(name, []byte("x")); err == nil {
			t.Errorf("WriteFile(%q) succeeded", name)
		}
		if err := w.CopyFromInput("src/db.sqlite", name); err == nil {
			t.Errorf("CopyFromInput to %q succeeded", name)
		}
	}
	// A link inside the temporary directory is not followed out of it.
	if err := os.Symlink(parent, filepath.Join(w.Dir(), "up")); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFile("up/x", []byte("x")); err == nil {
		t.Error("WriteFile through a link leading out succeeded")
	}
	for src, want := range map[string]string{
		"../secret.sqlite":                     "is not a relative path",
		filepath.Join(parent, "secret.sqlite"): "is not a relative path",
		"src/link.sqlite":                      "resolves outside the input directory",
		"src/missing.sqlite":                   "does not exist",
		"src":                                  "is not a regular file",
	} {
		if err := w.CopyFromInput(src, "copy.sqlite"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CopyFromInput(%q): %v, want %q", src, err, want)
		}
	}
	if err := w.WriteFile("x.txt", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteFile("x.txt", []byte("y")); err == nil {
		t.Error("writing a file twice succeeded")
	}
	if err := w.Commit(); err == nil || !strings.Contains(err.Error(), "not validated") {
		t.Errorf("Commit without Validate: %v", err)
	}
	if err := w.Discard(); err != nil {
		t.Fatal(err)
	}
	filetree.Same(t, "tree", before, filetree.MustSums(t, parent))
}

func TestWriterCommit(t *testing.T) {
	parent, in := input(t)
	beforeIn := filetree.MustSums(t, in)
	out := filepath.Join(parent, "out")
	write := func(force bool) error {
		w, err := New(in, out, force)
		if err != nil {
			return err
		}
		defer w.Discard()
		if err := w.CopyFromInput("src/db.sqlite", "db.sqlite"); err != nil {
			return err
		}
		if err := w.WriteFile(corpus.ManifestFile, []byte(manifest)); err != nil {
			return err
		}
		if err := w.WriteFile("records.jsonl", []byte(records)); err != nil {
			return err
		}
		c, err := w.Validate(context.Background(), corpus.Options{Engines: engines.Opener{}})
		if err != nil {
			return err
		}
		c.Close()
		return w.Commit()
	}
	if err := write(false); err != nil {
		t.Fatal(err)
	}
	c, err := corpus.LoadDir(context.Background(), out, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// A second import needs force, and replaces the old content.
	os.WriteFile(filepath.Join(out, "stale.txt"), []byte("x"), 0o644)
	if err := write(false); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("a non-empty out without force: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "stale.txt")); err != nil {
		t.Error("the refused import touched out")
	}
	if err := write(true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "stale.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Error("force did not replace out")
	}
	ents, _ := os.ReadDir(parent)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, ",") != "in,out,secret.sqlite" {
		t.Errorf("parent holds %v (a temporary or old directory left behind?)", names)
	}
	filetree.Same(t, "tree", beforeIn, filetree.MustSums(t, in))
}

// TestWriterValidationFails: a corpus that does not validate is never
// committed, and Discard leaves no trace.
func TestWriterValidationFails(t *testing.T) {
	parent, in := input(t)
	before := filetree.MustSums(t, parent)
	w, err := New(in, filepath.Join(parent, "new", "out"), false)
	if err != nil {
		t.Fatal(err)
	}
	w.CopyFromInput("src/db.sqlite", "db.sqlite")
	w.WriteFile(corpus.ManifestFile, []byte(manifest))
	w.WriteFile("records.jsonl", []byte(strings.Replace(records, "FROM t", "FROM nope", 1)))
	_, err = w.Validate(context.Background(), corpus.Options{Engines: engines.Opener{}})
	var ve *corpus.ValidationError
	if !errors.As(err, &ve) || !strings.Contains(err.Error(), "no such table: nope") {
		t.Fatalf("Validate: %v, want a validation error", err)
	}
	if err := w.Commit(); err == nil {
		t.Error("Commit after a failed validation succeeded")
	}
	w.Discard()
	filetree.Same(t, "tree", before, filetree.MustSums(t, parent))
}

func TestResolveInput(t *testing.T) {
	parent, in := input(t)
	p, err := ResolveInput(in, "src/db.sqlite")
	if err != nil || p != filepath.Join(in, "src", "db.sqlite") {
		t.Errorf("ResolveInput = %q, %v", p, err)
	}
	os.Symlink("db.sqlite", filepath.Join(in, "src", "inner.sqlite"))
	if p, err := ResolveInput(in, "src/inner.sqlite"); err != nil || p != filepath.Join(in, "src", "db.sqlite") {
		t.Errorf("a link inside the input directory: %q, %v", p, err)
	}
	for rel, want := range map[string]string{
		"../secret.sqlite": "is not a relative path", "src/link.sqlite": "resolves outside",
		filepath.Join(parent, "secret.sqlite"): "is not a relative path",
	} {
		if _, err := ResolveInput(in, rel); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ResolveInput(%q): %v, want %q", rel, err, want)
		}
	}
}

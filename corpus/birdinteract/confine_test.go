package birdinteract

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sums returns a checksum of every entry under dir (links by their target).
func sums(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out[rel] = "link " + target
			return err
		case d.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("%x", sha256.Sum256(b))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestImportConfined: a database file that is a symbolic link leading out
// of --in, an --out that is, lies inside or contains --in, and a corpus
// that fails validation all fail the import with a reason; --out does not
// exist afterwards, no temporary directory remains, no input changes.
func TestImportConfined(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, in string) (out string)
		force bool
		want  string
	}{
		{"database links outside --in", func(t *testing.T, in string) string {
			outside := filepath.Join(filepath.Dir(in), "outside.sqlite")
			if err := os.Rename(filepath.Join(in, "depot", "depot.sqlite"), outside); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(in, "depot", "depot.sqlite")); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(filepath.Dir(in), "out")
		}, false, "depot/depot.sqlite resolves outside the input directory"},
		{"out is in", func(t *testing.T, in string) string { return in }, true, "is the input directory"},
		{"out inside in", func(t *testing.T, in string) string { return filepath.Join(in, "depot", "out") }, false, "is inside the input directory"},
		{"in inside out", func(t *testing.T, in string) string { return filepath.Dir(in) }, true, "contains the input directory"},
		{"validation fails", func(t *testing.T, in string) string {
			editLine(t, filepath.Join(in, "depot_tasks_gt.jsonl"), 1, func(m map[string]any) {
				m["sol_sql"] = []string{"SELECT parcel_id FROM parcels WHERE weight_kg > 1000"}
			})
			return filepath.Join(filepath.Dir(in), "new", "out")
		}, false, "returns no rows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := fixture(t)
			parent := filepath.Dir(in)
			out := tc.setup(t, in)
			before := sums(t, parent)
			_, err := Import(context.Background(), Options{In: in, Out: out, Force: tc.force})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			after := sums(t, parent)
			for k, v := range before {
				if after[k] != v {
					t.Errorf("%s changed or was removed", k)
				}
			}
			for k := range after {
				if _, ok := before[k]; !ok {
					t.Errorf("%s was created", k)
				}
			}
		})
	}
}

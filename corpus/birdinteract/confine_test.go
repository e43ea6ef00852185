package birdinteract

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/internal/filetree"
)

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
			before := filetree.MustSums(t, parent)
			_, err := Import(context.Background(), Options{In: in, Out: out, Force: tc.force})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			after := filetree.MustSums(t, parent)
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

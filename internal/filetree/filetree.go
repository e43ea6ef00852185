// Package filetree takes checksums of every entry under a directory and
// compares two of them, for tests that must show a command created,
// removed or changed no file it had no business touching.
package filetree

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Sums returns an entry per file, directory and symbolic link under dir, by
// path relative to dir: "dir", "link <target>", or the file's sha256 and
// mode. Directories listed in skip (absolute or relative to the working
// directory, as given) are left out with all they hold.
func Sums(dir string, skip ...string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		for _, s := range skip {
			if p == s {
				return filepath.SkipDir
			}
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link " + target
		case d.IsDir():
			out[rel] = "dir"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("%x %v", sha256.Sum256(b), fi.Mode())
		}
		return nil
	})
	return out, err
}

// Diff describes how after differs from before, one line per entry that
// changed, vanished or appeared, in path order; nil when they are equal.
// Paths in ignore are not reported.
func Diff(before, after map[string]string, ignore ...string) []string {
	skip := map[string]bool{}
	for _, p := range ignore {
		skip[p] = true
	}
	var out []string
	for p, h := range before {
		switch a, ok := after[p]; {
		case skip[p]:
		case !ok:
			out = append(out, p+" vanished")
		case a != h:
			out = append(out, p+" changed")
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok && !skip[p] {
			out = append(out, p+" appeared")
		}
	}
	sort.Strings(out)
	return out
}

// T is the part of testing.TB the helpers below use.
type T interface {
	Helper()
	Fatal(args ...any)
	Errorf(format string, args ...any)
}

// MustSums is Sums for tests: an error fails the test.
func MustSums(t T, dir string, skip ...string) map[string]string {
	t.Helper()
	s, err := Sums(dir, skip...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Same reports every difference between before and after as a test
// error, naming what was compared.
func Same(t T, what string, before, after map[string]string, ignore ...string) {
	t.Helper()
	for _, d := range Diff(before, after, ignore...) {
		t.Errorf("%s: %s", what, d)
	}
}

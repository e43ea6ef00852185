// Package lint holds repository-wide checks that run as tests.
package lint

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageDocs fails when a Go package of the module has no package doc
// comment ("// Package name ..." or "// Command name ..."), so that every
// folder says in a sentence what it owns.
func TestPackageDocs(t *testing.T) {
	root := filepath.Join("..", "..")
	dirs := map[string]bool{}
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "bin" || d.Name() == "testdata" || d.Name() == "python") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") && !strings.HasSuffix(path, ".pb.go") {
			dirs[filepath.Dir(path)] = true
		}
		return nil
	})
	if len(dirs) < 5 {
		t.Fatalf("found only %d package folders; is the walk rooted at the module?", len(dirs))
	}
	for dir := range dirs {
		documented, err := packageDocs(dir)
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		for name, ok := range documented {
			if !ok {
				t.Errorf("package %s in %s has no doc comment starting \"Package %s \"", name, dir, name)
			}
		}
	}
}

// packageDocs parses the package clauses of dir's non-test .go files and
// says, for each package name found, whether one of its files carries a
// package doc comment. (Like parser.ParseDir, which is deprecated, it
// ignores build tags.)
func packageDocs(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	documented := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			return nil, err
		}
		name := f.Name.Name
		doc := f.Doc != nil && (strings.HasPrefix(f.Doc.Text(), "Package "+name+" ") || strings.HasPrefix(f.Doc.Text(), "Command "))
		documented[name] = documented[name] || doc
	}
	return documented, nil
}

package lint

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// treeFunctions are pg_query_go's functions that build a parse tree and
// write it out recursively in C: a deep enough text crashes the process
// inside them (issue 25). Only package sqlexec/pgparse may call them, after
// bounding the text's depth.
var treeFunctions = map[string]bool{
	"Parse": true, "ParseToJSON": true, "ParsePlPgSqlToJSON": true, "Normalize": true,
	"Deparse": true, "ParseToProtobuf": true, "DeparseFromProtobuf": true,
}

// TestOnlyPgparseBuildsParseTrees fails when a Go file (tests included)
// outside sqlexec/pgparse calls one of treeFunctions.
func TestOnlyPgparseBuildsParseTrees(t *testing.T) {
	root := filepath.Join("..", "..")
	files, calls := 0, 0
	filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != root || d.Name() == "bin" || d.Name() == "testdata" || d.Name() == "third_party") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		local := ""
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); p == "github.com/pganalyze/pg_query_go/v6" {
				local = "pg_query"
				if im.Name != nil {
					local = im.Name.Name
				}
			}
		}
		if local == "" {
			return nil
		}
		files++
		fset := token.NewFileSet()
		full, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		inPgparse := filepath.Base(filepath.Dir(path)) == "pgparse"
		ast.Inspect(full, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && treeFunctions[sel.Sel.Name] {
				calls++
				if !inPgparse {
					t.Errorf("%s: calls %s.%s, which can crash the process on a deep text; call sqlexec/pgparse instead", fset.Position(sel.Pos()), local, sel.Sel.Name)
				}
			}
			return true
		})
		return nil
	})
	if files < 3 || calls == 0 {
		t.Fatalf("found %d files importing pg_query_go and %d tree-building calls: is the walk rooted at the module?", files, calls)
	}
}

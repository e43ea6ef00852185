package lint

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// engineFree are the packages that must link no database engine: the
// corpus model and the episode machine take their databases through
// interfaces (corpus.Opener, sqlexec.Engine) that the commands wire
// (package engines), as STYLE.md's "technology at the edge" asks. The
// importers (corpus/ambrosia, corpus/birdinteract, corpus/tide,
// corpus/ambiqt) load databases and may link engines; SQL analysis
// (sqlcommit, pg_query_go) is not an engine.
var engineFree = []string{"avtgym/corpus", "avtgym/corpus/demo", "avtgym/env"}

// engineDrivers are the packages that are database engines: the drivers
// and avtgym's packages around them.
var engineDrivers = []string{
	"github.com/jackc/pgx/",
	"github.com/mattn/go-sqlite3",
	"avtgym/sqlexec/sqlite",
	"avtgym/sqlexec/postgres",
	"avtgym/engines",
}

// TestNoEngineInTheDomain runs `go list -deps` on each engine-free package
// and fails when one reaches an engine, directly or through another
// package, naming the path that leads there.
func TestNoEngineInTheDomain(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, pkg := range engineFree {
		cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		imports := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 {
				imports[f[0]] = f[1:]
			}
		}
		if _, ok := imports[pkg]; !ok {
			t.Fatalf("go list did not list %s itself: the rule checks nothing", pkg)
		}
		for dep := range imports {
			if isEngine(dep) {
				t.Errorf("%s links the database engine %s (%s): take it through an interface the command wires in (corpus.Opener, package engines)", pkg, dep, strings.Join(importPath(imports, pkg, dep), " → "))
			}
		}
	}
}

func isEngine(pkg string) bool {
	for _, e := range engineDrivers {
		if pkg == e || strings.HasPrefix(pkg, strings.TrimSuffix(e, "/")+"/") {
			return true
		}
	}
	return false
}

// importPath returns a shortest chain of imports from pkg to dep.
func importPath(imports map[string][]string, pkg, dep string) []string {
	prev := map[string]string{pkg: ""}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == dep {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append([]string{p}, path...)
			}
			return path
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{pkg, "…", dep}
}

// TestIsEngine keeps the matcher honest: the drivers and their
// subpackages match, SQL analysis and look-alike names do not.
func TestIsEngine(t *testing.T) {
	for pkg, want := range map[string]bool{
		"github.com/jackc/pgx/v5":             true,
		"github.com/jackc/pgx/v5/pgxpool":     true,
		"github.com/mattn/go-sqlite3":         true,
		"avtgym/sqlexec/sqlite":               true,
		"avtgym/sqlexec/postgres":             true,
		"avtgym/engines":                      true,
		"avtgym/sqlexec":                      false,
		"avtgym/sqlexec/pgparse":              false,
		"avtgym/sqlcommit":                    false,
		"github.com/pganalyze/pg_query_go/v6": false,
		"avtgym/sqlexec/sqlitex":              false,
		"avtgym/enginesque":                   false,
	} {
		if got := isEngine(pkg); got != want {
			t.Errorf("isEngine(%s) = %v, want %v", pkg, got, want)
		}
	}
}

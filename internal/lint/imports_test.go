package lint

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// layers states which avtgym packages a package (and everything it
// imports, transitively) may not reach: calls flow one way (ARCHITECTURE.md
// "Data flow"), the domain never reaches up into the server or the
// clients, and the client side never links the server. A key ending in
// "/..." covers the package and every package below it.
var layers = []struct {
	pkg, why string
	never    []string
}{
	{"avtgym/probe", "the probe texts are a leaf everyone may import", []string{"avtgym/..."}},
	{"avtgym/record", "the episode record is shared by the server and the clients: the wire contract only", []string{"avtgym/corpus/...", "avtgym/env/...", "avtgym/oracle/...", "avtgym/server/...", "avtgym/client/...", "avtgym/driver/...", "avtgym/policy/...", "avtgym/eval/...", "avtgym/audit/...", "avtgym/sqlexec/...", "avtgym/llm/...", "avtgym/app/..."}},
	{"avtgym/driver", "the episode driver speaks only the wire contract", []string{"avtgym/corpus/...", "avtgym/env/...", "avtgym/oracle/...", "avtgym/server/...", "avtgym/client/...", "avtgym/policy/...", "avtgym/eval/...", "avtgym/audit/...", "avtgym/sqlexec/...", "avtgym/llm/..."}},
	{"avtgym/sqlexec/...", "execution knows nothing of episodes", []string{"avtgym/corpus/...", "avtgym/env/...", "avtgym/oracle/...", "avtgym/server/...", "avtgym/client/...", "avtgym/policy/...", "avtgym/eval/...", "avtgym/audit/...", "avtgym/driver/...", "avtgym/llm/..."}},
	{"avtgym/corpus/...", "corpora and importers are the bottom of the domain: no oracle, no policy, no client", []string{"avtgym/oracle/...", "avtgym/policy/...", "avtgym/client/...", "avtgym/eval/...", "avtgym/env/...", "avtgym/server/...", "avtgym/audit/...", "avtgym/driver/...", "avtgym/llm/...", "avtgym/app/..."}},
	{"avtgym/engines", "the engines open databases for the corpus; they know nothing of episodes (engines_test.go keeps them out of the domain)", []string{"avtgym/env/...", "avtgym/oracle/...", "avtgym/server/...", "avtgym/client/...", "avtgym/policy/...", "avtgym/eval/...", "avtgym/audit/...", "avtgym/driver/...", "avtgym/llm/...", "avtgym/app/..."}},
	{"avtgym/llm/...", "the model client is a leaf", []string{"avtgym/corpus/...", "avtgym/env/...", "avtgym/oracle/...", "avtgym/server/...", "avtgym/client/...", "avtgym/policy/...", "avtgym/eval/...", "avtgym/audit/...", "avtgym/sqlexec/..."}},
	{"avtgym/oracle/...", "the oracle answers questions; it never reaches the episode machine or the clients", []string{"avtgym/env/...", "avtgym/server/...", "avtgym/client/...", "avtgym/policy/...", "avtgym/eval/...", "avtgym/audit/...", "avtgym/driver/...", "avtgym/app/..."}},
	{"avtgym/env/...", "the episode machine is below the server and the clients", []string{"avtgym/server/...", "avtgym/client/...", "avtgym/policy/...", "avtgym/eval/...", "avtgym/audit/...", "avtgym/driver/...", "avtgym/app/..."}},
	{"avtgym/server/...", "the gRPC adapter serves the environment; it is not a client", []string{"avtgym/client/...", "avtgym/policy/...", "avtgym/eval/...", "avtgym/audit/...", "avtgym/driver/...", "avtgym/app/..."}},
	{"avtgym/policy/...", "policies are clients: they play through the driver, never in the server's process", []string{"avtgym/env/...", "avtgym/server/...", "avtgym/oracle/...", "avtgym/corpus/...", "avtgym/eval/...", "avtgym/audit/...", "avtgym/app/...", "avtgym/sqlexec/..."}},
	{"avtgym/eval/...", "evaluation is a client of a server", []string{"avtgym/env/...", "avtgym/server/...", "avtgym/oracle/...", "avtgym/corpus/...", "avtgym/audit/...", "avtgym/app/...", "avtgym/sqlexec/..."}},
	{"avtgym/client/...", "the Go client links no server code", []string{"avtgym/env/...", "avtgym/server/...", "avtgym/oracle/...", "avtgym/corpus/...", "avtgym/sqlexec/...", "avtgym/app/..."}},
}

// TestImportDirections runs `go list -deps` on each package of the module
// and fails when a package reaches (directly or through others) a package
// its layer must never import.
func TestImportDirections(t *testing.T) {
	root := filepath.Join("..", "..")
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			deps[f[0]] = f[1:]
		}
	}
	if len(deps) < 20 {
		t.Fatalf("go list found only %d packages", len(deps))
	}
	match := func(pattern, pkg string) bool {
		if p, ok := strings.CutSuffix(pattern, "/..."); ok {
			return pkg == p || strings.HasPrefix(pkg, p+"/")
		}
		return pkg == pattern
	}
	checked := map[string]bool{}
	for _, l := range layers {
		for pkg, ds := range deps {
			if !match(l.pkg, pkg) {
				continue
			}
			checked[l.pkg] = true
			for _, d := range ds {
				for _, never := range l.never {
					if match(never, d) && !match(l.pkg, d) && !strings.HasPrefix(d, "avtgym/proto/") && !strings.HasPrefix(d, "avtgym/internal/") {
						t.Errorf("%s imports %s (directly or not), which %s may never reach: %s", pkg, d, l.pkg, l.why)
					}
				}
			}
		}
	}
	for _, l := range layers {
		if !checked[l.pkg] {
			t.Errorf("no package matches %s: the rule checks nothing", l.pkg)
		}
	}
}

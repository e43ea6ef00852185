package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// bin is the avtgym binary under test, built once by TestMain (without
// -race, as the image ships it), in a directory every user may read.
var bin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	if b := os.Getenv("AVTGYM_BIN"); b != "" {
		bin = b
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "avtgym-deploy-bin-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin = filepath.Join(dir, "avtgym")
	build := exec.Command("go", "build", "-o", bin, "../cmd/avtgym")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building avtgym: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

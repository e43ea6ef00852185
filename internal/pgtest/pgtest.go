// Package pgtest gives tests a real PostgreSQL server: the one named by
// AVTGYM_POSTGRES_URL (make test starts one and sets it), or else a private
// cluster that the first test asking for one starts (scripts/postgres.sh in
// a temporary directory, on a free loopback port) and Main stops when the
// package's tests end. Without PostgreSQL installed the tests that need it
// skip with a message, except under CI (the CI variable set), where they
// fail: CI installs PostgreSQL, so a missing server is a broken run.
package pgtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// URLEnv names the environment variable holding a server's URL.
const URLEnv = "AVTGYM_POSTGRES_URL"

var (
	mu      sync.Mutex
	url     string
	dir     string // the private cluster's directory, when one was started
	startEr error
)

// URL returns the URL of a PostgreSQL server the test may create roles and
// databases on (a superuser), starting a private cluster if needed.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(URLEnv); u != "" {
		return u
	}
	mu.Lock()
	defer mu.Unlock()
	if url == "" && startEr == nil {
		url, startEr = start()
	}
	if startEr != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PostgreSQL is required under CI: %v", startEr)
		}
		t.Skipf("no PostgreSQL server (set %s, or install PostgreSQL): %v", URLEnv, startEr)
	}
	return url
}

func start() (string, error) {
	script, err := scriptPath()
	if err != nil {
		return "", err
	}
	d, err := os.MkdirTemp("", "avtgym-pgtest-*")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(d, 0o755); err != nil {
		return "", err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("bash", script, "start", d)
	cmd.Env = append(os.Environ(), "PGPORT="+strconv.Itoa(port))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		os.RemoveAll(d)
		return "", fmt.Errorf("starting a private cluster: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	dir = d
	return strings.TrimSpace(string(out)), nil
}

// scriptPath finds scripts/postgres.sh from the module root above the
// working directory.
func scriptPath() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "scripts", "postgres.sh"), nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		d = parent
	}
}

// Main runs the tests and then stops the private cluster, if one was
// started. Call it from TestMain: os.Exit(pgtest.Main(m)).
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		if script, err := scriptPath(); err == nil {
			exec.Command("bash", script, "stop", dir).Run()
		}
		os.RemoveAll(dir)
		dir = ""
	}
	return code
}

// URLFor returns URL(t) with database db instead of the URL's own.
func URLFor(t testing.TB, db string) string {
	t.Helper()
	u, err := neturl.Parse(URL(t))
	if err != nil {
		t.Fatalf("%s does not parse: %v", URLEnv, err)
	}
	u.Path = "/" + db
	return u.String()
}

// BinDir finds PostgreSQL's client and server programs as
// scripts/postgres.sh does: pg_config --bindir, else the newest
// /usr/lib/postgresql/*/bin.
func BinDir() (string, error) {
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "pg_dump")); err == nil {
			return d, nil
		}
	}
	ds, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(ds) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(ds[i], "pg_dump")); err == nil {
			return ds[i], nil
		}
	}
	return "", fmt.Errorf("no PostgreSQL programs (pg_config --bindir, /usr/lib/postgresql/*/bin)")
}

// DumpSum runs the real pg_dump on database db (as the URL's user) and
// returns a checksum of its output, without the lines that name versions
// or a random \restrict key: two sums are equal when the database's
// schema, data and privileges are.
func DumpSum(t testing.TB, db string) string {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_dump"), "--no-comments", URLFor(t, db))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pg_dump %s: %v: %s", db, err, stderr.String())
	}
	h := sha256.New()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "-- Dumped ") || strings.HasPrefix(l, `\restrict`) || strings.HasPrefix(l, `\unrestrict`) {
			continue
		}
		h.Write([]byte(l + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

package deploy

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"avtgym/env"
)

// freePort returns a loopback port nothing listens on now.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// keyFile writes a fresh token key, the one every replica shares.
func keyFile(t testing.TB) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "token.key")
	if err := os.WriteFile(f, []byte(hex.EncodeToString(env.RandomKey())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

var serving = regexp.MustCompile(`\bserving\s+\{"addr": "([^"]+)"\}`)

// replica is one `avtgym serve` process on fixed loopback ports, so that a
// proxy's configuration outlives its restarts.
type replica struct {
	addr, health string
	args         []string
	env          []string
	wrap         []string // a command the binary runs under (setpriv, taskset), if any
	dir          string
	cmd          *exec.Cmd
	log          *syncBuffer
	done         chan error
}

func newReplica(t testing.TB, args ...string) *replica {
	return &replica{
		addr:   fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		health: fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		args:   args,
	}
}

// start runs the replica and waits until it serves.
func (r *replica) start(t testing.TB) {
	t.Helper()
	// The log of this run: the reader goroutine of a previous run may still
	// be draining its pipe, so it must not see r.log change under it.
	log := &syncBuffer{}
	r.log = log
	r.done = make(chan error, 1)
	argv := append(append([]string{}, r.wrap...), bin, "serve", "--listen", r.addr, "--health-listen", r.health,
		"--metrics-listen", "", "--access-log-sample", "0")
	argv = append(argv, r.args...)
	r.cmd = exec.Command(argv[0], argv[1:]...)
	r.cmd.Dir = r.dir
	r.cmd.Env = append(append(os.Environ(), "AVTGYM_TOKEN_KEY_FILE=", "AVTGYM_POSTGRES_URL="), r.env...)
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.cmd.Stdout = log
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			log.Write([]byte(sc.Text() + "\n"))
			if serving.MatchString(sc.Text()) {
				select {
				case up <- struct{}{}:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	cmd, done := r.cmd, r.done
	go func() { done <- cmd.Wait() }()
	select {
	case <-up:
	case err := <-r.done:
		t.Fatalf("serve %s exited before serving: %v\n%s", r.addr, err, tail(r.log.String()))
	case <-time.After(60 * time.Second):
		r.cmd.Process.Kill()
		t.Fatalf("serve %s did not serve within 60s\n%s", r.addr, tail(r.log.String()))
	}
}

// stop sends SIGTERM and waits for the drained process to exit 0.
func (r *replica) stop(t testing.TB) {
	t.Helper()
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("serve %s exited with %v after SIGTERM, want 0\n%s", r.addr, err, tail(r.log.String()))
		}
	case <-time.After(30 * time.Second):
		r.cmd.Process.Kill()
		t.Errorf("serve %s did not exit within 30s of SIGTERM", r.addr)
	}
	r.cmd = nil
}

// kill sends SIGKILL and reaps the process.
func (r *replica) kill(t testing.TB) {
	t.Helper()
	r.cmd.Process.Kill()
	<-r.done
	r.cmd = nil
}

// pid is the running process's id.
func (r *replica) pid() int { return r.cmd.Process.Pid }

// nginx is a real nginx in front of the replicas: HTTP/2 in plaintext on
// a loopback port, grpc_pass round-robin to the upstreams.
type nginx struct {
	addr string
	cmd  *exec.Cmd
	log  *syncBuffer
	done chan error
}

// nginxPath finds nginx; without it the test skips, except under CI
// (where .ci/run installs it), where it fails.
func nginxPath(t testing.TB) string {
	t.Helper()
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("nginx is not installed (.ci/run installs it: apt-get install nginx); the load-balancing test must run in CI")
	}
	t.Skip("nginx is not installed (apt-get install nginx): skipping the test behind a real L7 proxy")
	return ""
}

const nginxConf = `
%s
worker_processes 1;
daemon off;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[2]s/body;
  proxy_temp_path %[2]s/proxy;
  fastcgi_temp_path %[2]s/fastcgi;
  uwsgi_temp_path %[2]s/uwsgi;
  scgi_temp_path %[2]s/scgi;
  upstream avtgym {
%[3]s
    keepalive 64;
  }
  server {
    listen %[4]s http2;
    http2_max_concurrent_streams 1024;
    location / {
      # A step is a pure function of its token and action: resending one
      # to another replica is safe (non_idempotent).
      grpc_next_upstream error timeout non_idempotent;
      grpc_read_timeout 120s;
      grpc_send_timeout 120s;
      grpc_pass grpc://avtgym;
    }
  }
}
`

func startNginx(t testing.TB, upstreams []string) *nginx {
	t.Helper()
	path := nginxPath(t)
	dir := t.TempDir()
	n := &nginx{addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), log: &syncBuffer{}, done: make(chan error, 1)}
	var ups []string
	for _, u := range upstreams {
		ups = append(ups, fmt.Sprintf("    server %s max_fails=1 fail_timeout=1s;", u))
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // its workers write only into dir
	}
	conf := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(nginxConf, user, dir, strings.Join(ups, "\n"), n.addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	n.cmd = exec.Command(path, "-p", dir, "-c", conf, "-e", filepath.Join(dir, "error.log"))
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.done <- n.cmd.Wait() }()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", n.addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-n.done:
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited: %v\n%s%s", err, n.log, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("nginx did not listen within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() {
		n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.done:
		case <-time.After(10 * time.Second):
			n.cmd.Process.Kill()
		}
	})
	return n
}

package hostile

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"avtgym/client"
	"avtgym/internal/filetree"
	"avtgym/internal/pgtest"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec/sqlite"
)

// Memory limits of the server process: the Go heap's soft limit and the
// hard limit on its address space (a Go server reserves ~2 GB of address
// space at rest; cgo threads add 8 MB of stack each).
const (
	goMemLimit   = "768MiB"
	addressSpace = 4 << 30
)

// bin is the avtgym binary under test, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if _, err := exec.LookPath("prlimit"); err != nil {
		fmt.Fprintln(os.Stderr, "hostile: prlimit (util-linux) is required to run the server under a memory limit")
		return 1
	}
	if b := os.Getenv("AVTGYM_BIN"); b != "" {
		// Another build (say, an older commit's) to measure the same way.
		bin = b
		return pgtest.Main(m)
	}
	dir, err := os.MkdirTemp("", "avtgym-hostile-bin-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "avtgym")
	// Built without -race, as it is deployed: the race detector's own
	// memory use would hide what the server allocates.
	build := exec.Command("go", "build", "-o", bin, "../cmd/avtgym")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building avtgym: %v\n%s", err, out)
		return 1
	}
	// The PostgreSQL attacks need a server: make test's, or a private one
	// pgtest starts (and Main stops).
	return pgtest.Main(m)
}

// corpusScript builds the suite's database: 50,000 sales rows, enough for
// cross joins that would run for hours.
const corpusScript = `
CREATE TABLE t (id INTEGER PRIMARY KEY, region TEXT NOT NULL, amount REAL NOT NULL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 50000)
INSERT INTO t SELECT x, CASE x % 4 WHEN 0 THEN 'West' WHEN 1 THEN 'East' WHEN 2 THEN 'North' ELSE 'South' END, (x * 7919) % 1000 FROM c;
`

const corpusManifest = `{"name": "hostile", "databases": [{"id": "sales", "engine": "sqlite", "path": "sales.sqlite"}]}`

// The records: "west" has one counted ambiguity; "count" is a control.
const corpusRecords = `{"id":"west","db":"sales","request":"How much did the top region sell?","ambiguities":[{"term":"top region","kind":"critical","resolution":"I mean the West region."}],"reference":{"sql":"SELECT sum(amount) FROM t WHERE region = 'West'"}}
{"id":"count","db":"sales","request":"How many sales are there?","ambiguities":[],"reference":{"sql":"SELECT count(*) FROM t"}}
`

// server is a running `avtgym serve` process.
type server struct {
	root   string // holds everything below; nothing else may change in it
	tmp    string // the process's TMPDIR: the only place it may write
	corpus string // the corpus directory (a shared, file-based database)
	addr   string
	cmd    *exec.Cmd
	log    *syncBuffer
	c      *client.Client
	done   chan error
	// pgCorpus is the PostgreSQL corpus's name, for play (postgres_test.go).
	pgCorpus string
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

// writeCorpus writes the suite's corpus into dir.
func writeCorpus(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sqlite.BuildFromScript(context.Background(), corpusScript, filepath.Join(dir, "sales.sqlite")); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"corpus.json": corpusManifest, "records.jsonl": corpusRecords} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

var listening = regexp.MustCompile(`\bserving\s+\{"addr": "([^"]+)"\}`)

// start runs `avtgym serve` on the suite's corpus with args added, under
// the memory limits, in an empty working directory, with its own TMPDIR.
func start(t testing.TB, args ...string) *server {
	t.Helper()
	return startEnv(t, nil, args...)
}

// startEnv is start with env added to the process's environment.
func startEnv(t testing.TB, env []string, args ...string) *server {
	t.Helper()
	root := t.TempDir()
	s := &server{root: root, tmp: filepath.Join(root, "tmp"), corpus: filepath.Join(root, "corpus"), log: &syncBuffer{}, done: make(chan error, 1)}
	cwd := filepath.Join(root, "cwd")
	for _, d := range []string{s.tmp, cwd} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeCorpus(t, s.corpus)
	full := append([]string{fmt.Sprintf("--as=%d", addressSpace), "--", bin, "serve",
		"--listen", "127.0.0.1:0", "--metrics-listen", "", "--corpus", s.corpus}, args...)
	s.cmd = exec.Command("prlimit", full...)
	s.cmd.Dir = cwd
	s.cmd.Env = append(append(os.Environ(), "TMPDIR="+s.tmp, "SQLITE_TMPDIR="+s.tmp, "GOMEMLIMIT="+goMemLimit, "AVTGYM_TOKEN_KEY_FILE="), env...)
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.cmd.Stdout = s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.log.Write([]byte(line + "\n"))
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() { s.done <- s.cmd.Wait() }()
	select {
	case s.addr = <-addr:
	case err := <-s.done:
		t.Fatalf("serve exited before listening: %v\n%s", err, s.log)
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		t.Fatalf("serve did not listen within 60s\n%s", s.log)
	}
	c, err := client.Dial(s.addr, client.Options{CallTimeout: 2 * time.Minute, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop ends the process with SIGTERM and checks that it exits cleanly.
func (s *server) stop(t testing.TB) {
	if s.cmd == nil {
		return
	}
	s.c.Close()
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("serve exited with %v\n%s", err, tail(s.log.String()))
		}
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		t.Error("serve did not stop within 30s of SIGTERM")
	}
	s.cmd = nil
}

// alive fails the test unless the process still runs, reports SERVING and
// answers a normal episode correctly: the right SQL earns 1 and a wrong
// one 0.
func (s *server) alive(t testing.TB) {
	t.Helper()
	select {
	case err := <-s.done:
		t.Fatalf("the server process died: %v\n%s", err, tail(s.log.String()))
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := s.c.Health.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", h, err)
	}
	for sql, want := range map[string]float64{
		"select SUM(amount) from t where region='West'": 1,
		"SELECT sum(amount) FROM t WHERE region='East'": 0,
	} {
		ep := s.reset(t, "west")
		r := s.step(t, ep, submit(sql))
		if !r.GetDone() || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.GetReward().GetValue() != want {
			t.Fatalf("a normal step (%s) after the attack: %v", sql, r)
		}
	}
}

func (s *server) reset(t testing.TB, task string) *pb.Episode {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := s.c.Env.Reset(ctx, &pb.ResetRequest{TaskId: task, Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
	if err != nil {
		t.Fatalf("reset %s: %v", task, err)
	}
	return r.Episodes[0]
}

func (s *server) step(t testing.TB, ep *pb.Episode, a *pb.Action) *pb.StepResponse {
	t.Helper()
	r, err := s.tryStep(ep.GetToken(), a)
	if err != nil {
		t.Fatalf("step: %v", err)
	}
	return r
}

func (s *server) tryStep(token []byte, a *pb.Action) (*pb.StepResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return s.c.Env.Step(ctx, &pb.StepRequest{Token: token, Action: a, IncludePrivileged: true})
}

func submit(sql string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: sql}}}
}

func ask(q string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: q}}}
}

// feedback returns the step's feedback turn, "" if none.
func feedback(r *pb.StepResponse) string {
	for _, t := range r.GetObservation().GetTurns() {
		if t.GetKind() == pb.TurnKind_TURN_KIND_FEEDBACK {
			return t.GetText()
		}
	}
	return ""
}

// reason returns the ErrorInfo reason of err ("" if none).
func reason(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

func code(err error) codes.Code { return status.Code(err) }

// untouched fails the test unless every file outside the process's TMPDIR
// is as before: the shared database byte-identical, no file created,
// removed or changed anywhere else under the test's root.
func (s *server) untouched(t testing.TB, before map[string]string) {
	t.Helper()
	after := filetree.MustSums(t, s.root, s.tmp)
	for p, h := range before {
		if after[p] != h {
			t.Errorf("%s changed (or vanished)", p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s appeared outside TMPDIR", p)
		}
	}
}

// peakRSS is the process's peak resident set in bytes (VmHWM).
func (s *server) peakRSS(t testing.TB) int64 {
	return procStatus(t, s.cmd.Process.Pid, "VmHWM")
}

// rss is the process's resident set in bytes now.
func (s *server) rss(t testing.TB) int64 {
	return procStatus(t, s.cmd.Process.Pid, "VmRSS")
}

func procStatus(t testing.TB, pid int, field string) int64 {
	// prlimit execs the server in place, so the pid is the server's.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}

package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"avtgym/client"
	"avtgym/internal/filetree"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

// The user the image runs as (Dockerfile's USER, deployment.yaml's
// runAsUser) is 65532; this test uses nobody (65534), which every system
// has, for the same purpose: a user that owns nothing but its temp dir.
const nobody = 65534

// TestRunsAsNonRootReadOnly stands in for the image, which CI cannot
// build: the binary it ships runs as a non-root user (under root, as CI
// runs, through setpriv as nobody; otherwise as the user running the
// test), in a read-only working directory, serving a read-only corpus
// directory and the embedded demo, with only its TMPDIR writable (the
// image's read-only root file system and /tmp emptyDir). It serves an
// episode, answers health on the probe port, changes nothing outside its
// TMPDIR, and drains on SIGTERM to exit 0.
func TestRunsAsNonRootReadOnly(t *testing.T) {
	root, err := os.MkdirTemp("", "avtgym-nonroot-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	tmp, cwd, corpus := filepath.Join(root, "tmp"), filepath.Join(root, "cwd"), filepath.Join(root, "corpus")
	if err := os.CopyFS(corpus, os.DirFS(testutil.WriteTiny(t))); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{tmp, cwd} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var wrap []string
	wantUID := os.Geteuid()
	if os.Geteuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			t.Fatal("setpriv (util-linux) is needed to run the server as a non-root user")
		}
		wantUID = nobody
		wrap = []string{setpriv, "--reuid=" + strconv.Itoa(nobody), "--regid=" + strconv.Itoa(nobody), "--clear-groups", "--"}
		if err := os.Chown(tmp, nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	// Everything but tmp is read-only to the server: owned by another
	// user (under root) and without write permission.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	readOnly(t, corpus)
	readOnly(t, cwd)
	before := filetree.MustSums(t, root, tmp)
	// The image's default (the embedded demo corpus), then a corpus
	// directory whose database is built from its script (into TMPDIR).
	for corpus, args := range map[string][]string{"demo": nil, "tiny": {"--corpus", corpus}} {
		t.Run(corpus, func(t *testing.T) {
			r := newReplica(t, args...)
			r.dir, r.wrap = cwd, wrap
			r.env = []string{"TMPDIR=" + tmp, "SQLITE_TMPDIR=" + tmp, "HOME=/nonexistent"}
			serveAsNonRoot(t, r, wantUID, corpus)
		})
	}
	filetree.Same(t, "the server's read-only tree", before, filetree.MustSums(t, root, tmp))
}

// serveAsNonRoot starts r and plays an episode of corpus.
func serveAsNonRoot(t *testing.T, r *replica, wantUID int, corpus string) {
	r.start(t)
	t.Cleanup(func() { r.stop(t) })
	if uid := procUID(t, r.pid()); uid != wantUID || uid == 0 && os.Geteuid() == 0 {
		t.Fatalf("the server runs as uid %d, want %d", uid, wantUID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	probe, err := client.Dial(r.health, client.Options{NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	for _, svc := range []string{"", "liveness"} {
		h, err := probe.Health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q on the probe port: %v, %v", svc, h, err)
		}
	}
	c, err := client.Dial(r.addr, client.Options{NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	task := map[string]string{"tiny": "count", "demo": "shop-001"}[corpus]
	{
		ep, err := c.Env.Reset(ctx, &pb.ResetRequest{Corpus: corpus, TaskId: task, IncludePrivileged: true, Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
		if err != nil {
			t.Fatalf("reset %s/%s: %v", corpus, task, err)
		}
		e := ep.Episodes[0]
		s, err := c.Env.Step(ctx, &pb.StepRequest{Token: e.GetToken(), Action: &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: e.GetPrivileged().GetReferenceSql()[0]}}}})
		if err != nil || !s.GetDone() || s.GetReward().GetValue() != 1 {
			t.Fatalf("%s/%s: the reference SQL: %v, %v\n%s", corpus, task, s, err, tail(r.log.String()))
		}
	}
	r.stop(t)
	if strings.Contains(r.log.String(), "permission denied") {
		t.Errorf("the server logged a permission error:\n%s", tail(r.log.String()))
	}
}

// readOnly takes write permission away from a tree (and keeps it readable).
func readOnly(t *testing.T, dir string) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return os.Chmod(p, 0o555)
		}
		return os.Chmod(p, 0o444)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
}

// procUID reads a process's effective user id.
func procUID(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "Uid:" {
			uid, _ := strconv.Atoi(f[2])
			return uid
		}
	}
	t.Fatal("no Uid in /proc status")
	return -1
}

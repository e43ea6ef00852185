package hostile

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

	"avtgym/client"
	"avtgym/env"
	pb "avtgym/proto/avtgym/v1"
)

var metricsAddr = regexp.MustCompile(`\bmetrics\s+\{"addr": "http://([^"]+)/metrics"\}`)

// metric reads the sum of the samples of the named metrics from a
// server's Prometheus endpoint.
func metric(t *testing.T, s *server, names ...string) float64 {
	t.Helper()
	m := metricsAddr.FindStringSubmatch(s.log.String())
	if m == nil {
		t.Fatalf("no metrics address in the log\n%s", tail(s.log.String()))
	}
	resp, err := http.Get("http://" + m[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	sum := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		for _, n := range names {
			if v, ok := strings.CutPrefix(line, n+" "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				sum += f
			}
		}
	}
	return sum
}

// episodeKeys reads the keys of every line of the episode logs in dir,
// failing the test on a key written twice by this replica.
func episodeKeys(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "episodes-*.jsonl"))
	keys := map[string]bool{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			var l struct {
				Key    string `json:"key"`
				Status string `json:"status"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if keys[l.Key] {
				t.Errorf("%s: key %s written twice by one replica", dir, l.Key)
			}
			keys[l.Key] = true
		}
		fh.Close()
	}
	return keys
}

// TestSIGTERMDuringRolloutLosesNoEpisode: two replicas sharing a token key
// sit behind a client-side round-robin balancer while a rollout plays
// episodes. One replica gets SIGTERM while a slow call (a runaway query)
// is in flight on it: it drains, the slow call gets its answer, the
// process exits 0, and every episode finishes (its later steps on the
// other replica: the episode lives in the token). The two episode logs
// together hold each finished episode once.
func TestSIGTERMDuringRolloutLosesNoEpisode(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "token.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(env.RandomKey())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logA, logB := t.TempDir(), t.TempDir()
	args := func(dir string) []string {
		return []string{"--token-key-file", keyFile, "--metrics-listen", "127.0.0.1:0", "--episode-log", dir,
			"--statement-timeout", "1s", "--shutdown-grace", "1m", "--access-log-sample", "0"}
	}
	a, b := start(t, args(logA)...), start(t, args(logB)...)

	res := manual.NewBuilderWithScheme("replicas")
	res.InitialState(resolver.State{Addresses: []resolver.Address{{Addr: a.addr}, {Addr: b.addr}}})
	c, err := client.Dial(res.Scheme()+":///avtgym", client.Options{NoEnv: true, Attempts: 50, Backoff: 20 * time.Millisecond, CallTimeout: 2 * time.Minute,
		DialOptions: []grpc.DialOption{grpc.WithResolvers(res), grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"round_robin": {}}]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Slow calls (runaway queries, cut at the statement timeout) on replica
	// A, one after another until SIGTERM: one is in flight when it comes.
	var sigterm atomic.Bool
	slowDone := make(chan int, 1)
	go func() {
		n := 0
		defer func() { slowDone <- n }()
		for !sigterm.Load() {
			ep, err := a.c.Env.Reset(context.Background(), &pb.ResetRequest{TaskId: "count", Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
			if err != nil {
				if !sigterm.Load() {
					t.Errorf("reset on A: %v", err)
				}
				return
			}
			r, err := a.tryStep(ep.Episodes[0].GetToken(), submit("SELECT count(*) FROM t x, t y, t z"))
			if err != nil || !r.GetDone() || !strings.Contains(feedback(r), "time limit") {
				t.Errorf("a slow call (in flight at SIGTERM: %v): %v, %v", sigterm.Load(), r, err)
				return
			}
			n++
		}
	}()

	const episodes, workers = 120, 8
	var started, finished, atSIGTERM atomic.Int64
	errs := make(chan error, episodes)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for started.Add(1) <= episodes {
				r, err := c.Env.Reset(ctx, &pb.ResetRequest{TaskId: "west"})
				if err != nil {
					errs <- fmt.Errorf("reset: %w", err)
					continue
				}
				s1, err := c.Env.Step(ctx, &pb.StepRequest{Token: r.Episodes[0].Token, Action: ask("Could you clarify what exactly you mean by top region?")})
				if err != nil {
					errs <- fmt.Errorf("ask: %w", err)
					continue
				}
				s2, err := c.Env.Step(ctx, &pb.StepRequest{Token: s1.Token, Action: &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}})
				if err != nil {
					errs <- fmt.Errorf("stop: %w", err)
					continue
				}
				if !s2.GetDone() || s2.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || s2.GetReward().GetValue() != 1 {
					errs <- fmt.Errorf("an episode ended %v", s2)
					continue
				}
				finished.Add(1)
			}
		}()
	}
	// SIGTERM once the rollout is under way and the slow query runs on A.
	deadline := time.Now().Add(time.Minute)
	for finished.Load() < episodes/8 || metric(t, a, "avtgym_sql_fast_lane_running", "avtgym_sql_slow_lane_running") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the rollout or the slow call did not get going: %d episodes finished", finished.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	atSIGTERM.Store(finished.Load())
	sigterm.Store(true)
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := finished.Load(); got != episodes || atSIGTERM.Load() >= episodes {
		t.Fatalf("%d of %d episodes finished (%d before SIGTERM)", got, episodes, atSIGTERM.Load())
	}
	select {
	case err := <-a.done:
		if err != nil {
			t.Fatalf("the drained replica exited with %v, want status 0\n%s", err, tail(a.log.String()))
		}
	case <-time.After(time.Minute):
		t.Fatal("the replica did not exit within a minute of SIGTERM")
	}
	a.cmd = nil // exited; nothing for the cleanup to stop
	a.c.Close()
	slowCalls := <-slowDone
	for _, want := range []string{"draining", "drained: every call in flight finished", "stopped"} {
		if !strings.Contains(a.log.String(), want) {
			t.Errorf("the drained replica's log lacks %q\n%s", want, tail(a.log.String()))
		}
	}
	b.alive(t)
	// B is still running: stop it so its episode log is closed.
	b.stop(t)
	ka, kb := episodeKeys(t, logA), episodeKeys(t, logB)
	all := map[string]bool{}
	for k := range ka {
		all[k] = true
	}
	for k := range kb {
		all[k] = true
	}
	// The rollout's episodes, the slow ones, and b.alive's two.
	if want := episodes + slowCalls + 2; len(all) != want {
		t.Errorf("the episode logs hold %d distinct episodes (%d on A, %d on B), want %d", len(all), len(ka), len(kb), want)
	}
	t.Logf("%d episodes, %d finished before SIGTERM; %d slow calls on A; episode log lines: %d on A, %d on B", episodes, atSIGTERM.Load(), slowCalls, len(ka), len(kb))
}

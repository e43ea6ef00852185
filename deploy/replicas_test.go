package deploy

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"avtgym/client"
	"avtgym/driver"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// roundOptions are the episode options of rollout round r: AMBITAB and
// BIRD_C (the demo's follow-up tasks) in turn.
func roundOptions(r int) *pb.EpisodeOptions {
	if r%2 == 1 {
		return &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C}
	}
	return &pb.EpisodeOptions{}
}

// rollout plays round r: every task of the demo corpus under the round's
// protocol, the full scripted policy, task i with seed 1000r+i.
func rollout(ctx context.Context, c *client.Client, r, concurrency int) ([]*driver.Record, error) {
	return rolloutWith(ctx, c, r, concurrency, roundOptions(r))
}

// rolloutWith plays round r with the given options.
func rolloutWith(ctx context.Context, c *client.Client, r, concurrency int, opts *pb.EpisodeOptions) ([]*driver.Record, error) {
	return policy.Rollout(ctx, c.Env, policy.RolloutConfig{
		Player: policy.Scripted(probe.Full), Corpus: "demo", Seed: uint64(1000 * r),
		Options: opts, Concurrency: concurrency,
	})
}

// TestReplicasRollingRestart starts 3 replicas sharing a token key and
// plays rollout rounds through a real L7 proxy (nginx grpc_pass) and
// through client-side round_robin (an address list) while each replica in
// turn gets SIGTERM and is restarted, and then one is SIGKILLed and
// restarted: no episode is lost or played twice, the drained replicas exit
// 0, and every episode's record (transcript, reward) equals a
// single-replica run of the same seeds.
func TestReplicasRollingRestart(t *testing.T) {
	for _, via := range []string{"nginx", "round_robin"} {
		t.Run(via, func(t *testing.T) {
			if via == "nginx" {
				nginxPath(t)
			}
			key := keyFile(t)
			reps := make([]*replica, 3)
			var addrs []string
			for i := range reps {
				reps[i] = newReplica(t, "--token-key-file", key, "--drain-delay", "200ms", "--shutdown-grace", "10s")
				reps[i].start(t)
				addrs = append(addrs, reps[i].addr)
				t.Cleanup(func() { reps[i].stop(t) })
			}
			target := strings.Join(addrs, ",")
			if via == "nginx" {
				target = startNginx(t, addrs).addr
			}
			c, err := client.Dial(target, client.Options{NoEnv: true, Attempts: 400, Backoff: 10 * time.Millisecond, CallTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()

			// Rounds run until the faults are over (two more at least),
			// at most maxRounds.
			const maxRounds = 400
			var (
				faultsDone atomic.Bool
				mu         sync.Mutex
				rounds     [][]*driver.Record
				rolled     = make(chan error, 1)
				underway   = make(chan struct{})
			)
			go func() {
				after := 0
				for r := 0; r < maxRounds && after < 2; r++ {
					recs, err := rollout(ctx, c, r, 16)
					if err != nil {
						rolled <- err
						return
					}
					mu.Lock()
					rounds = append(rounds, recs)
					mu.Unlock()
					if r == 0 {
						close(underway)
					}
					if faultsDone.Load() {
						after++
					}
				}
				rolled <- nil
			}()
			select {
			case <-underway:
			case err := <-rolled:
				t.Fatalf("the first round: %v", err)
			}
			// Rolling restart: one replica at a time, drained by SIGTERM.
			for _, r := range reps {
				r.stop(t)
				time.Sleep(50 * time.Millisecond)
				r.start(t)
			}
			// One crash.
			reps[1].kill(t)
			time.Sleep(100 * time.Millisecond)
			reps[1].start(t)
			faultsDone.Store(true)
			if err := <-rolled; err != nil {
				t.Fatal(err)
			}

			// Every episode once, finished; then the same seeds on one replica.
			direct, err := client.Dial(reps[2].addr, client.Options{NoEnv: true, CallTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			defer direct.Close()
			ids := map[string]bool{}
			total := 0
			for r, recs := range rounds {
				want, err := rollout(ctx, direct, r, 16)
				if err != nil {
					t.Fatal(err)
				}
				if len(recs) != len(want) {
					t.Fatalf("round %d: %d episodes, want %d", r, len(recs), len(want))
				}
				for i, rec := range recs {
					total++
					if rec.Status != "TERMINATED" && rec.Status != "TRUNCATED" {
						t.Errorf("round %d: episode %s lost: %s %s", r, rec.EpisodeID, rec.Status, rec.Error)
					}
					if ids[rec.EpisodeID] {
						t.Errorf("episode %s played twice", rec.EpisodeID)
					}
					ids[rec.EpisodeID] = true
					// Two plays differ by nature in the uid drawn at reset
					// and the clock only.
					got, _ := json.Marshal(rec.Replayable())
					exp, _ := json.Marshal(want[i].Replayable())
					if string(got) != string(exp) {
						t.Errorf("round %d: through the faults\n%s\non one replica\n%s", r, got, exp)
					}
				}
			}
			if len(rounds) < 3 {
				t.Errorf("only %d rounds: the faults did not overlap the rollout", len(rounds))
			}
			t.Logf("%s: %d rounds, %d episodes through a rolling restart of 3 replicas and a SIGKILL; 0 lost, 0 duplicated, all equal to a single-replica run", via, len(rounds), total)
		})
	}
}

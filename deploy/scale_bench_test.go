package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"avtgym/client"
	"avtgym/driver"
	"avtgym/internal/fakellm"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// Knobs of BenchmarkScale (make bench-scale): how long each phase runs,
// the episodes in flight, and the fake model endpoint's latency.
var (
	scaleDuration = envDuration("AVTGYM_SCALE_DURATION", 4*time.Second)
	scaleWorkers  = envInt("AVTGYM_SCALE_CONCURRENCY", 64)
	llmLatency    = envDuration("AVTGYM_SCALE_LLM_LATENCY", 300*time.Millisecond)
)

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

// cpuSeconds is a process's user+system CPU time so far.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// peakRSS is a process's peak resident memory in MiB.
func peakRSS(pid int) float64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// drive plays episodes of the demo corpus (the protocol's tasks in turn,
// the full scripted policy, with oracle) with workers episodes in flight
// for d, and returns the episodes finished per second.
func drive(b *testing.B, c *client.Client, d time.Duration, workers int, protocol pb.Protocol, oracle pb.OracleType) float64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d+2*time.Minute)
	defer cancel()
	tasks, err := policy.ListTasks(ctx, c.Env, "demo", "")
	if err != nil {
		b.Fatal(err)
	}
	tasks, _ = policy.ProtocolTasks(tasks, protocol)
	var (
		next, n, fail atomic.Int64
		wg            sync.WaitGroup
	)
	env, player := driver.Remote(c.Env), policy.Scripted(probe.Full)
	stop := time.Now().Add(d)
	start := time.Now()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				i := next.Add(1)
				t := tasks[int(i)%len(tasks)]
				seed := uint64(i)
				rec := policy.PlayOne(ctx, env, player, &pb.ResetRequest{Corpus: t.GetCorpus(), TaskId: t.GetTaskId(), Seed: &seed,
					Options: &pb.EpisodeOptions{Protocol: protocol, Oracle: oracle}, IncludePrivileged: true})
				if rec.Status == "TERMINATED" || rec.Status == "TRUNCATED" {
					n.Add(1)
				} else if fail.Add(1) == 1 {
					b.Errorf("an episode failed: %s %s", rec.Status, rec.Error)
				}
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

// BenchmarkScale measures (one run; make bench-scale): episodes per
// second per core of one replica for each protocol and oracle type (the
// replica pinned to one CPU, its CPU time measured), its peak memory,
// and the throughput of 1, 2 and 3 replicas behind nginx against direct
// client-side round_robin to the same replicas (the proxy's overhead).
func BenchmarkScale(b *testing.B) {
	fake := fakellm.New(fakellm.Options{Delay: llmLatency})
	defer fake.Close()
	key := keyFile(b)
	llmArgs := []string{"--oracle-url", fake.URL, "--oracle-model", "fake", "--no-llm-cache", "--oracle-concurrency", "1024"}
	pin := []string{}
	if p, err := exec.LookPath("taskset"); err == nil {
		pin = []string{p, "-c", "0"}
	}

	b.Logf("phases of %v, %d episodes in flight, fake model latency %v", scaleDuration, scaleWorkers, llmLatency)
	for _, c := range []struct {
		name     string
		protocol pb.Protocol
		oracle   pb.OracleType
	}{
		{"AMBITAB deterministic", pb.Protocol_PROTOCOL_AMBITAB, pb.OracleType_ORACLE_TYPE_DETERMINISTIC},
		{"BIRD_C deterministic", pb.Protocol_PROTOCOL_BIRD_C, pb.OracleType_ORACLE_TYPE_DETERMINISTIC},
		{"AMBITAB llm", pb.Protocol_PROTOCOL_AMBITAB, pb.OracleType_ORACLE_TYPE_LLM},
		{"BIRD_C llm", pb.Protocol_PROTOCOL_BIRD_C, pb.OracleType_ORACLE_TYPE_LLM},
	} {
		r := newReplica(b, append([]string{"--token-key-file", key}, llmArgs...)...)
		r.wrap = pin
		r.env = []string{"GOMAXPROCS=1"}
		r.start(b)
		cl, err := client.Dial(r.addr, client.Options{NoEnv: true, CallTimeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		drive(b, cl, scaleDuration/4, scaleWorkers, c.protocol, c.oracle) // warm up
		cpu0, calls0 := cpuSeconds(r.pid()), fake.Calls()
		t0 := time.Now()
		eps := drive(b, cl, scaleDuration, scaleWorkers, c.protocol, c.oracle)
		cpu := cpuSeconds(r.pid()) - cpu0
		wall := time.Since(t0).Seconds()
		perCore := eps * wall / cpu
		mcalls := float64(fake.Calls()-calls0) / (eps * wall)
		b.Logf("%-22s one replica on one CPU: %7.0f episodes/s, CPU %.2f of %.2f s -> %7.0f episodes per core-second; model calls per episode %.2f; peak RSS %.0f MiB",
			c.name, eps, cpu, wall, perCore, mcalls, peakRSS(r.pid()))
		b.ReportMetric(perCore, strings.ReplaceAll(c.name, " ", "_")+"_eps/core")
		cl.Close()
		r.stop(b)
	}

	// 1, 2, 3 replicas: behind nginx, and direct.
	var reps []*replica
	defer func() {
		for _, r := range reps {
			r.stop(b)
		}
	}()
	for n := 1; n <= 3; n++ {
		r := newReplica(b, "--token-key-file", key)
		r.start(b)
		reps = append(reps, r)
		var addrs []string
		for _, r := range reps {
			addrs = append(addrs, r.addr)
		}
		px := startNginx(b, addrs)
		via, err := client.Dial(px.addr, client.Options{NoEnv: true, CallTimeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		direct, err := client.Dial(strings.Join(addrs, ","), client.Options{NoEnv: true, CallTimeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		drive(b, via, scaleDuration/4, scaleWorkers, pb.Protocol_PROTOCOL_AMBITAB, 0)
		p := drive(b, via, scaleDuration, scaleWorkers, pb.Protocol_PROTOCOL_AMBITAB, 0)
		drive(b, direct, scaleDuration/4, scaleWorkers, pb.Protocol_PROTOCOL_AMBITAB, 0)
		d := drive(b, direct, scaleDuration, scaleWorkers, pb.Protocol_PROTOCOL_AMBITAB, 0)
		b.Logf("%d replica(s), AMBITAB deterministic: via nginx %7.0f episodes/s, direct round_robin %7.0f episodes/s, proxy/direct %.2f", n, p, d, p/d)
		b.ReportMetric(p, fmt.Sprintf("nginx_%d_eps", n))
		b.ReportMetric(d, fmt.Sprintf("direct_%d_eps", n))
		via.Close()
		direct.Close()
	}
}

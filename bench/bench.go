// Package bench measures an avtgym server over loopback gRPC: the health
// Check rate (the floor of what an RPC costs on this machine), the unary
// Step rate for deterministic asks, and StepBatch throughput per episode,
// all in one run against one server. `avtgym bench` and the Go benchmarks
// use it; results are recorded in bench/RESULTS.md.
package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"avtgym/client"
	"avtgym/driver"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// Config says how long and how hard to measure.
type Config struct {
	// Duration of each phase; 0 means 3 seconds.
	Duration time.Duration
	// Concurrency is the number of calls in flight; 0 means 32.
	Concurrency int
	// BatchSize is the StepBatch size; 0 means 256.
	BatchSize int
	// BatchConcurrency is the number of batches in flight; 0 means
	// 2×GOMAXPROCS (each batch already carries BatchSize episodes, which
	// the server spreads over its cores).
	BatchConcurrency int
	// Corpus is the corpus to draw the task from ("" = the default).
	Corpus string
}

// Result is one run's figures.
type Result struct {
	Concurrency      int     `json:"concurrency"`
	BatchConcurrency int     `json:"batch_concurrency"`
	BatchSize        int     `json:"batch_size"`
	DurationSeconds  float64 `json:"phase_seconds"`
	HealthPerS       float64 `json:"health_per_s"`
	StepPerS         float64 `json:"step_per_s"`
	StepP50Micros    float64 `json:"step_p50_us"`
	StepP99Micros    float64 `json:"step_p99_us"`
	StepRatio        float64 `json:"step_ratio"`
	BatchPerS        float64 `json:"batch_per_s"`
	BatchEpisodePerS float64 `json:"batch_episode_per_s"`
	BatchRatio       float64 `json:"batch_ratio"`
	// CPU microseconds of this process per call (health, step) and per
	// batched episode: meaningful when the server runs in process, where
	// they count client and server together. They vary less than rates on
	// a shared machine.
	HealthCPUMicros       float64 `json:"health_cpu_us"`
	StepCPUMicros         float64 `json:"step_cpu_us"`
	BatchEpisodeCPUMicros float64 `json:"batch_episode_cpu_us"`
	TaskID                string  `json:"task_id"`
	Question              string  `json:"question"`
}

// Run measures the server behind c.
func Run(ctx context.Context, c *client.Client, cfg Config) (*Result, error) {
	if cfg.Duration == 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 32
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 256
	}
	if cfg.BatchConcurrency == 0 {
		cfg.BatchConcurrency = 2 * runtime.GOMAXPROCS(0)
	}
	step, taskID, question, err := AskStep(ctx, c, cfg.Corpus)
	if err != nil {
		return nil, err
	}
	r := &Result{Concurrency: cfg.Concurrency, BatchConcurrency: cfg.BatchConcurrency, BatchSize: cfg.BatchSize, DurationSeconds: cfg.Duration.Seconds(), TaskID: taskID, Question: question}

	health := &healthpb.HealthCheckRequest{}
	cpu0 := cpuTime()
	n, _, err := measure(ctx, cfg, func(ctx context.Context) error {
		_, err := c.Health.Check(ctx, health)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("health: %w", err)
	}
	r.HealthPerS = n
	r.HealthCPUMicros = perCall(cpu0, n*cfg.Duration.Seconds())

	cpu0 = cpuTime()
	n, lat, err := measure(ctx, cfg, func(ctx context.Context) error {
		_, err := c.Env.Step(ctx, step)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("step: %w", err)
	}
	r.StepPerS = n
	r.StepCPUMicros = perCall(cpu0, n*cfg.Duration.Seconds())
	r.StepP50Micros, r.StepP99Micros = percentile(lat, 0.50), percentile(lat, 0.99)

	batch := &pb.StepBatchRequest{Steps: make([]*pb.StepRequest, cfg.BatchSize)}
	for i := range batch.Steps {
		batch.Steps[i] = step
	}
	cpu0 = cpuTime()
	batchCfg := cfg
	batchCfg.Concurrency = cfg.BatchConcurrency
	n, _, err = measure(ctx, batchCfg, func(ctx context.Context) error {
		resp, err := c.Env.StepBatch(ctx, batch)
		if err == nil && resp.GetResults()[0].GetStatus().GetCode() != 0 {
			err = fmt.Errorf("batch item failed: %s", resp.GetResults()[0].GetStatus().GetMessage())
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("step batch: %w", err)
	}
	r.BatchPerS = n
	r.BatchEpisodePerS = n * float64(cfg.BatchSize)
	r.BatchEpisodeCPUMicros = perCall(cpu0, r.BatchEpisodePerS*cfg.Duration.Seconds())
	if r.HealthPerS > 0 {
		r.StepRatio = r.StepPerS / r.HealthPerS
	}
	if r.StepPerS > 0 {
		r.BatchRatio = r.BatchEpisodePerS / r.StepPerS
	}
	return r, nil
}

// AskStep prepares the measured step: a fresh episode on the first task
// with a counted ambiguity, and a full-policy question naming its first
// term, so that every step runs the matcher and the responder and earns a
// credit. Stepping one token again and again is legitimate (forks) and
// keeps the work per step constant.
func AskStep(ctx context.Context, c *client.Client, corpusName string) (*pb.StepRequest, string, string, error) {
	tasks, err := policy.ListTasks(ctx, c.Env, corpusName, "")
	if err != nil {
		return nil, "", "", err
	}
	for _, t := range tasks {
		ep, err := driver.Start(ctx, driver.Remote(c.Env), &pb.ResetRequest{Corpus: t.GetCorpus(), TaskId: t.GetTaskId(), IncludePrivileged: true})
		if err != nil {
			return nil, "", "", err
		}
		if terms := ep.Terms(); len(terms) > 0 {
			q := probe.FullQuestion(terms[0])
			return &pb.StepRequest{Token: ep.Token(), Action: &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: q}}}}, t.GetTaskId(), q, nil
		}
	}
	return nil, "", "", fmt.Errorf("no task with a counted ambiguity to benchmark")
}

// measure runs call on cfg.Concurrency goroutines for cfg.Duration and
// returns calls per second and the latencies. The loop is bounded by the
// duration and stops at the first error.
func measure(ctx context.Context, cfg Config, call func(context.Context) error) (float64, []time.Duration, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		count    atomic.Int64
		mu       sync.Mutex
		lat      []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(cfg.Duration)
	start := time.Now()
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1024)
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t0 := time.Now()
				if err := call(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				local = append(local, time.Since(t0))
				count.Add(1)
			}
			mu.Lock()
			lat = append(lat, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, nil, firstErr
	}
	return float64(count.Load()) / time.Since(start).Seconds(), lat, nil
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perCall spreads the CPU time used since start over about calls calls.
func perCall(start time.Duration, calls float64) float64 {
	if calls <= 0 {
		return 0
	}
	return float64((cpuTime() - start).Microseconds()) / calls
}

func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[int(p*float64(len(d)-1))].Microseconds())
}

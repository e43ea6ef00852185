// Package main is the servercpu command: it measures the server's own CPU per unary Step and per
// StepBatch episode against a running `avtgym serve` (issue 20), reading the
// server's CPU time from /proc/PID/stat around each phase, so that the load
// generator's cost (this process, on the same machine) is not counted.
//
//	go run ./bench/servercpu --binary bin/avtgym [--rounds 4] [--duration 3s] [-- serve flags]
//	go run ./bench/servercpu --server 127.0.0.1:50051 --pid PID
//
// With --binary it starts `BINARY serve` itself on a free loopback port
// (demo corpus, access log off, a fresh token key; the arguments after the
// flags are added to serve's).
//
// Phases alternate (health, step, batch, health, step, batch, ...) so that a
// busy machine slows them alike; the step is the one `avtgym bench`
// measures (a full-policy question stepped again and again on one reset
// token). Two more phases measure verification through a step (--phases
// step,submit,raw): submit is a submit_sql step of SQL equivalent to
// shop-001's reference but not the same text (so neither the result cache
// nor the text match skips the query), on an outcome-reward reset token;
// raw is the same SQL through the corpus's engine in this process (CPU
// time of this process per query, --raw-concurrency at a time: by default
// as many as the unary phases keep in flight, so that both pay the same
// contention). The verification overhead reported is (submit − step) /
// raw: what a submit_sql step costs beyond an ask step, in raw queries.
//
// With --corpus DIR (an imported corpus, such as AMBROSIA's) and --task ID
// the server serves DIR instead of the demo, the ask step is on DIR's
// first task with a counted ambiguity, and the verified SQL is the task's
// reference wrapped as SELECT * FROM (reference) AS avtgym_q: equivalent,
// not the same text.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"avtgym/bench"
	"avtgym/client"
	"avtgym/corpus"
	"avtgym/engines"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

// flags are the command's flags.
type flags struct {
	addr               string
	pid, rounds        int
	dur                time.Duration
	conc, batch, bconc int
	phases             string
	asJSON             bool
	binary             string
	rawConc            int
	corpusDir, taskID  string
}

func parseFlags() *flags {
	var f flags
	flag.StringVar(&f.addr, "server", "127.0.0.1:50051", "the server")
	flag.IntVar(&f.pid, "pid", 0, "the server's process id (its CPU time is read from /proc/PID/stat)")
	flag.IntVar(&f.rounds, "rounds", 4, "alternated rounds")
	flag.DurationVar(&f.dur, "duration", 3*time.Second, "length of each phase")
	flag.IntVar(&f.conc, "concurrency", 16, "unary calls in flight")
	flag.IntVar(&f.batch, "batch", 256, "StepBatch size")
	flag.IntVar(&f.bconc, "batch-concurrency", 2, "batches in flight")
	flag.StringVar(&f.phases, "phases", "health,step,batch", "phases, in order: health, step, batch, submit, raw")
	flag.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	flag.StringVar(&f.binary, "binary", "", "start this avtgym binary's serve and measure it (instead of --server and --pid)")
	flag.IntVar(&f.rawConc, "raw-concurrency", 0, "raw queries in flight (default: --concurrency)")
	flag.StringVar(&f.corpusDir, "corpus", "", "serve and load this corpus directory instead of the demo (with --binary; needs --task)")
	flag.StringVar(&f.taskID, "task", "", "the task whose reference, wrapped, is verified (with --corpus)")
	flag.Parse()
	if f.rawConc <= 0 {
		f.rawConc = f.conc
	}
	if (f.corpusDir == "") != (f.taskID == "") {
		exit(2, "--corpus and --task go together")
	}
	return &f
}

// atExit holds what must run however the process ends (stopping the
// server it started): os.Exit skips deferred calls.
var atExit []func()

// exit prints the command's error, runs atExit (last first) and ends the
// process with code.
func exit(code int, args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"servercpu:"}, args...)...)
	for i := len(atExit) - 1; i >= 0; i-- {
		atExit[i]()
	}
	os.Exit(code)
}

func main() {
	f := parseFlags()
	target := verifyTarget{task: verifyTask, sql: verifySQL, dir: f.corpusDir}
	if f.taskID != "" {
		target.task = f.taskID
	}
	if f.binary != "" {
		extra := flag.Args()
		if f.corpusDir != "" {
			extra = append(extra, "--corpus", f.corpusDir)
		}
		a, p, stop, err := startServer(f.binary, extra)
		if err != nil {
			exit(1, err)
		}
		defer stop()
		atExit = append(atExit, stop)
		f.addr, f.pid = a, p
	}
	if f.pid == 0 {
		exit(2, "--pid is required")
	}
	ctx := context.Background()
	c, err := client.Dial(f.addr, client.Options{})
	if err != nil {
		exit(1, err)
	}
	defer c.Close()
	calls, err := phaseCalls(ctx, c, f, &target)
	if err != nil {
		exit(1, err)
	}
	names := strings.Split(f.phases, ",")
	got := measure(ctx, f, names, calls)
	med, out := summarize(got)
	if f.asJSON {
		json.NewEncoder(os.Stdout).Encode(out)
		return
	}
	printSummary(names, got, med, out)
}

// phase is one measured call: conc of them in flight, per items each.
type phase struct {
	conc, per int
	call      func(context.Context) error
}

// phaseCalls prepares the call of every phase: the ask step, the batch of
// them, the submit_sql step and the raw query.
func phaseCalls(ctx context.Context, c *client.Client, f *flags, target *verifyTarget) (map[string]phase, error) {
	step, _, _, err := bench.AskStep(ctx, c, "")
	if err != nil {
		return nil, err
	}
	breq := &pb.StepBatchRequest{Steps: make([]*pb.StepRequest, f.batch)}
	for i := range breq.Steps {
		breq.Steps[i] = step
	}
	sub, err := submitStep(ctx, c, target)
	if err != nil {
		return nil, err
	}
	raw, err := rawQuery(ctx, *target)
	if err != nil {
		return nil, err
	}
	hreq := &healthpb.HealthCheckRequest{}
	return map[string]phase{
		"health": {f.conc, 1, func(ctx context.Context) error { _, err := c.Health.Check(ctx, hreq); return err }},
		"step":   {f.conc, 1, func(ctx context.Context) error { _, err := c.Env.Step(ctx, step); return err }},
		"submit": {f.conc, 1, func(ctx context.Context) error {
			r, err := c.Env.Step(ctx, sub)
			if err == nil && r.GetReward().GetValue() != 1 {
				err = fmt.Errorf("the equivalent SQL did not pass: %v", r.GetReward())
			}
			return err
		}},
		"raw": {f.rawConc, 1, raw},
		"batch": {f.bconc, f.batch, func(ctx context.Context) error {
			r, err := c.Env.StepBatch(ctx, breq)
			if err == nil && r.GetResults()[0].GetStatus().GetCode() != 0 {
				err = fmt.Errorf("batch item: %s", r.GetResults()[0].GetStatus().GetMessage())
			}
			return err
		}},
	}, nil
}

// measure runs the named phases, alternated, for the flags' rounds and
// returns each phase's rounds: the server's CPU per item (server_us) and
// the items per second (per_s).
func measure(ctx context.Context, f *flags, names []string, calls map[string]phase) map[string][]map[string]float64 {
	got := map[string][]map[string]float64{}
	for range f.rounds {
		for _, n := range names {
			p, ok := calls[n]
			if !ok {
				exit(2, "unknown phase", n)
			}
			who := f.pid
			if n == "raw" {
				who = os.Getpid() // the query runs here
			}
			s0 := procCPU(who)
			t0 := time.Now()
			k, err := run(ctx, p.conc, f.dur, p.call)
			wall := time.Since(t0).Seconds()
			s1 := procCPU(who)
			if err != nil {
				exit(1, n, err)
			}
			items := float64(k * p.per)
			got[n] = append(got[n], map[string]float64{"server_us": (s1 - s0) / items * 1e6, "per_s": items / wall})
		}
	}
	return got
}

// summarize returns the phases' medians and the report: the rounds, the
// medians, and the ratios of the phases measured (step over batched
// episode, verification over raw query), overall and per round.
func summarize(got map[string][]map[string]float64) (map[string]map[string]float64, map[string]any) {
	med := map[string]map[string]float64{}
	for n, rs := range got {
		med[n] = map[string]float64{"server_us": median(rs, "server_us"), "per_s": median(rs, "per_s")}
	}
	out := map[string]any{"rounds": got, "median": med}
	if med["batch"] != nil && med["step"] != nil {
		var per []float64
		for i := range got["step"] {
			per = append(per, got["step"][i]["server_us"]/got["batch"][i]["server_us"])
		}
		out["ratio_step_over_batch_episode"] = med["step"]["server_us"] / med["batch"]["server_us"]
		out["ratio_per_round"] = per
	}
	if med["submit"] != nil && med["step"] != nil && med["raw"] != nil {
		out["verify_over_raw"] = (med["submit"]["server_us"] - med["step"]["server_us"]) / med["raw"]["server_us"]
		var per []float64
		for i := range got["submit"] {
			per = append(per, (got["submit"][i]["server_us"]-got["step"][i]["server_us"])/got["raw"][i]["server_us"])
		}
		out["verify_over_raw_per_round"] = per
	}
	return med, out
}

// printSummary prints summarize's report as text.
func printSummary(names []string, got map[string][]map[string]float64, med map[string]map[string]float64, out map[string]any) {
	for _, n := range names {
		fmt.Printf("%-7s server %7.2f µs per item   %9.0f items/s   rounds:", n, med[n]["server_us"], med[n]["per_s"])
		for _, r := range got[n] {
			fmt.Printf(" %.2f", r["server_us"])
		}
		fmt.Println()
	}
	if r, ok := out["ratio_step_over_batch_episode"]; ok {
		fmt.Printf("server CPU, unary step / batched episode: %.2f  per round %.2f\n", r, out["ratio_per_round"])
	}
	if r, ok := out["verify_over_raw"]; ok {
		fmt.Printf("a submit_sql step's server CPU beyond an ask step, in raw queries: %.2f  per round %.2f\n", r, out["verify_over_raw_per_round"])
	}
}

// The verified SQL: equivalent to shop-001's reference (the same rows in
// the same order), written differently (join order, operand order), so
// that the verifier runs it.
const (
	verifyTask = "shop-001"
	verifySQL  = "SELECT c.name FROM orders o JOIN customers c ON c.customer_id = o.customer_id JOIN order_items oi ON o.order_id = oi.order_id WHERE 'completed' = o.status GROUP BY c.customer_id ORDER BY SUM(oi.unit_price * oi.quantity * (1 - oi.discount)) DESC LIMIT 5"
)

// verifyTarget is what the submit and raw phases verify: a task, the SQL
// submitted, and the corpus directory ("" for the demo).
type verifyTarget struct {
	task, sql, dir string
}

// submitStep is a submit_sql of the target's SQL on a fresh outcome-reward
// episode of its task (submitted while asking: STOP, then the SQL). On a
// --corpus task the SQL is the task's reference, wrapped.
func submitStep(ctx context.Context, c *client.Client, tg *verifyTarget) (*pb.StepRequest, error) {
	r, err := c.Env.Reset(ctx, &pb.ResetRequest{TaskId: tg.task, Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}, IncludePrivileged: true})
	if err != nil {
		return nil, err
	}
	if tg.dir != "" {
		ref := strings.TrimRight(strings.TrimSpace(strings.Join(r.GetEpisodes()[0].GetPrivileged().GetReferenceSql(), ";\n")), ";")
		if strings.Contains(ref, ";") {
			return nil, fmt.Errorf("task %s has several reference statements: pick a single-statement task", tg.task)
		}
		tg.sql = "SELECT * FROM (" + ref + ") AS avtgym_q"
	}
	return &pb.StepRequest{Token: r.GetEpisodes()[0].GetToken(), Action: &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: tg.sql}}}}, nil
}

// rawQuery runs the target's SQL through its corpus's own engine, in this
// process.
func rawQuery(ctx context.Context, tg verifyTarget) (func(context.Context) error, error) {
	var (
		c   *corpus.Corpus
		err error
	)
	if tg.dir != "" {
		c, err = corpus.LoadDir(ctx, tg.dir, corpus.Options{Engines: engines.Opener{}})
	} else {
		c, err = corpus.LoadDemo(ctx, corpus.Options{Engines: engines.Opener{}})
	}
	if err != nil {
		return nil, err
	}
	t, ok := c.Task(tg.task)
	if !ok {
		return nil, fmt.Errorf("no task %s in the corpus", tg.task)
	}
	lim := sqlexec.DefaultLimits()
	return func(ctx context.Context) error {
		_, err := t.DB.Engine.Query(ctx, tg.sql, lim)
		return err
	}, nil
}

// startServer starts `binary serve` on a free loopback port and waits
// until it is serving.
func startServer(binary string, extra []string) (string, int, func(), error) {
	dir, err := os.MkdirTemp("", "servercpu")
	if err != nil {
		return "", 0, nil, err
	}
	key := filepath.Join(dir, "key")
	if out, err := exec.Command(binary, "keygen", key).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", 0, nil, fmt.Errorf("keygen: %v: %s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return "", 0, nil, err
	}
	addr := l.Addr().String()
	l.Close()
	args := append([]string{"serve", "--listen", addr, "--metrics-listen", "", "--token-key-file", key, "--access-log-sample", "0"}, extra...)
	cmd := exec.Command(binary, args...)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", 0, nil, err
	}
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		os.RemoveAll(dir)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, cmd.Process.Pid, stop, nil
		}
	}
	stop()
	return "", 0, nil, fmt.Errorf("%s serve did not start on %s", binary, addr)
}

func run(ctx context.Context, conc int, d time.Duration, call func(context.Context) error) (int, error) {
	var (
		n     atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	deadline := time.Now().Add(d)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if err := call(ctx); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(n.Load()), first
}

// procCPU is utime+stime of a process, in seconds.
func procCPU(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		fmt.Fprintln(os.Stderr, "servercpu:", err)
		os.Exit(1)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ is 100 on Linux
}

func median(rs []map[string]float64, k string) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = r[k]
	}
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

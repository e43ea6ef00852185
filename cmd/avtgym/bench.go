package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"avtgym/app"
	"avtgym/bench"
	"avtgym/client"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("server", "", "server to measure (default: start one in process on a free loopback port, with the demo corpus)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	var cfg bench.Config
	fs.DurationVar(&cfg.Duration, "duration", 3*time.Second, "length of each measured phase")
	fs.IntVar(&cfg.Concurrency, "concurrency", 32, "calls in flight")
	fs.IntVar(&cfg.BatchSize, "batch", 256, "StepBatch size")
	fs.IntVar(&cfg.BatchConcurrency, "batch-concurrency", 0, "batches in flight (0: 2×GOMAXPROCS)")
	fs.StringVar(&cfg.Corpus, "corpus", "", "corpus to draw the task from")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	target := *addr
	if target == "" {
		a, err := app.New(ctx, app.Config{Listen: "127.0.0.1:0"})
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
		defer a.Close()
		sctx, stop := context.WithCancel(ctx)
		defer stop()
		ready := make(chan net.Addr, 1)
		go a.Serve(sctx, func(addr net.Addr) { ready <- addr })
		select {
		case la := <-ready:
			target = la.String()
		case <-time.After(30 * time.Second):
			fmt.Fprintln(stderr, "bench: in-process server did not start")
			return 1
		}
	}
	c, err := client.Dial(target, client.Options{})
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	defer c.Close()
	if !*asJSON {
		fmt.Fprintf(stderr, "measuring %s: health, Step, StepBatch(%d); %s each at concurrency %d\n", target, cfg.BatchSize, cfg.Duration, cfg.Concurrency)
	}
	r, err := bench.Run(ctx, c, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if *asJSON {
		json.NewEncoder(stdout).Encode(r)
		return 0
	}
	fmt.Fprintf(stdout, "health Check      %10.0f calls/s\n", r.HealthPerS)
	fmt.Fprintf(stdout, "Step (ask)        %10.0f calls/s   p50 %.0f µs  p99 %.0f µs   ratio to health %.2f (target ≥ 0.5)\n", r.StepPerS, r.StepP50Micros, r.StepP99Micros, r.StepRatio)
	fmt.Fprintf(stdout, "StepBatch(%d)    %10.0f episodes/s  (%.0f batches/s)   ratio to Step %.1f (target ≥ 10)\n", r.BatchSize, r.BatchEpisodePerS, r.BatchPerS, r.BatchRatio)
	return 0
}

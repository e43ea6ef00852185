package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"avtgym/viewer"
)

const viewUsage = "usage: avtgym view [--listen ADDR] [--insecure-listen-any] PATH...\n" +
	"PATH: a record file (rollout --episodes-out), an eval run directory (its episodes.jsonl) or a serve --episode-log directory; each is one run, named by its base name"

// runView is `avtgym view`: index episode records and serve the web UI
// over them until ctx is done.
func runView(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("view", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8090", "address of the web UI (loopback only, unless --insecure-listen-any)")
	anyAddr := fs.Bool("insecure-listen-any", false, "let --listen bind a non-loopback address and answer to any Host: the pages show privileged data (reference SQL, resolutions) to anyone who reaches the port, and the viewer authenticates nobody")
	fs.Usage = func() {
		fmt.Fprintln(stderr, viewUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	// Refuse the address before spending the time to load.
	if err := viewer.CheckListen(*listen, *anyAddr); err != nil {
		fmt.Fprintf(stderr, "avtgym view: %v\n", err)
		return 2
	}
	var runs []*viewer.Run
	closeRuns := func() {
		for _, r := range runs {
			r.Close()
		}
	}
	for _, path := range fs.Args() {
		r, err := viewer.LoadRun(ctx, path, stderr)
		if err != nil {
			closeRuns()
			fmt.Fprintf(stderr, "avtgym view: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "avtgym view: run %s (%s): %d episodes, %.1f MB, indexed in %s\n", r.Name, r.Kind, len(r.Episodes), float64(r.Bytes)/1e6, r.LoadTime)
		runs = append(runs, r)
	}
	v, err := viewer.New(runs, viewer.Config{AnyHost: *anyAddr})
	if err != nil {
		closeRuns()
		fmt.Fprintf(stderr, "avtgym view: %v\n", err)
		return 1
	}
	defer v.Close()
	lis, err := viewer.Listen(*listen, *anyAddr)
	if err != nil {
		fmt.Fprintf(stderr, "avtgym view: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "avtgym view: serving %d run(s) at http://%s/ (interrupt to stop)\n", len(runs), lis.Addr())
	start := time.Now()
	if err := viewer.Serve(ctx, lis, v.Handler()); err != nil {
		fmt.Fprintf(stderr, "avtgym view: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "avtgym view: stopped after %s\n", time.Since(start).Round(time.Second))
	return 0
}

// Package main is the avtgym command: `serve` runs the environment server,
// `rollout` plays scripted policies or the LLM asker against a server,
// `eval` runs an evaluation with leakage diagnostics and reports, `corpus`
// validates, audits and imports corpora, `bench` measures the server, and
// `keygen` writes a token key. Each subcommand only parses flags and wires
// packages together.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `avtgym: an environment server for training and evaluating asking policies.

Usage:
  avtgym serve    [--listen ADDR] [--corpus DIR]... [--metrics-listen ADDR] [--token-key-file F]
  avtgym rollout  --server ADDR --policy none|full|full_adv|none_adv [flags]
  avtgym corpus validate DIR...
  avtgym corpus check DIR...
  avtgym corpus import ambrosia|birdinteract --in DIR --out DIR
  avtgym eval     --server ADDR --out DIR [--asker scripted:full|llm|trajectories:FILE] [--oracles ...] [--seeds 0,1,2] [flags]
  avtgym bench    [--server ADDR] [--json]
  avtgym keygen   FILE

Run 'avtgym COMMAND -h' for a command's flags.
`

// run is main without the process: tests call it with their own
// arguments and writers. It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmds := map[string]func(context.Context, []string, io.Writer, io.Writer) int{
		"serve":   runServe,
		"rollout": runRollout,
		"corpus":  runCorpus,
		"bench":   runBench,
		"keygen":  runKeygen,
		"eval":    runEval,
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "avtgym: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	return cmd(ctx, args[1:], stdout, stderr)
}

// Package main is the avtgym command: `serve` runs the environment server,
// `rollout` plays scripted policies or the LLM asker against a server,
// `eval` runs an evaluation with leakage diagnostics and reports, `view`
// serves a web UI over episode records, `reverify` re-scores saved
// episodes against the current corpus, `corpus`
// validates, audits and imports corpora, `probe` checks a model as the LLM
// oracle, `bench` measures the server, `sql` computes TIDE's commitment
// sets and drift test, and `keygen` writes a key. Each subcommand only
// parses flags and wires packages together.
package main

import (
	"avtgym/internal/buildinfo"
	"context"
	"errors"
	"flag"
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
  avtgym serve    [--listen ADDR] [--corpus DIR]... [--postgres URL] [--postgres-role NAME] [--postgres-connections N] [--postgres-role-connections N]
                  [--postgres-password-key-file F] [--postgres-max-backend-memory BYTES] [--python-worker-memory BYTES] [--metrics-listen ADDR] [--token-key-file F] [--token-ttl D]
                  [--statement-timeout D] [--max-rows N] [--max-bytes N] [--max-memory N]
                  [--sql-fast-slots N] [--sql-slow-slots N] [--sql-slice D] [--sql-wait D]
                  [--oracle-url URL --oracle-model M [--oracle-...]] [--oracle-reject-leaks] [--test-oracles]
                  [--solver-url URL --solver-model M [--solver-...]] [--llm-cache FILE | --no-llm-cache]
                  [--log-level L] [--log-format console|json] [--access-log-sample N]
                  [--tls-cert F --tls-key F [--client-ca F]] [--auth-file F] [--insecure-listen-any]
                  [--health-listen ADDR] [--pprof-listen ADDR] [--reflection=false] [--gc-percent N]
                  [--max-inflight N] [--max-inflight-per-principal N] [--max-streams N]
                  [--max-connection-age D] [--max-connection-age-grace D] [--keepalive-min-time D]
                  [--drain-delay D] [--shutdown-grace D]
                  [--otlp-endpoint ADDR [--otlp-insecure] [--trace-sample F]] [--episode-log DIR [--episode-log-max-bytes N]]
  avtgym rollout  [--server ADDR] --policy none|full|full_adv|none_adv|llm|wrong-reading|explorer|chain-aware|chain-blind|none-aware|none-blind [--corpus NAME] [--split S]
                  [--protocol ambitab|bird-c|bird-a|tide-f|tide-p [--patience N]] [--wrong-readings FILE]
                  [--limit N] [--seed N] [--reward question_f1|outcome] [--solver lookup|client] [--json]
                  [--episodes-out FILE] [--asker-url URL --asker-model M [--asker-style S] [--llm-cache FILE]]
  avtgym eval     [--server ADDR] --out DIR [--asker scripted:NAME|llm|trajectories:FILE]
                  [--protocol ambitab|bird-c|bird-a|tide-f|tide-p [--patience N]] [--wrong-readings FILE]
                  [--oracles deterministic,llm,llm_scoped,...] [--seeds 0,1,2] [--conditions ...]
                  [--solver lookup|llm] [--retries 2] [--groups FILE] [flags]
  avtgym view     [--listen ADDR] [--insecure-listen-any] PATH...
  avtgym reverify [--server ADDR] [--corpus NAME] [--json] [--out FILE] RECORDS...
  avtgym corpus validate [--postgres URL] DIR...
  avtgym corpus check [--workers N] [--progress] [--oracle-context-tokens N] [--solver-context-tokens N] [--postgres URL] DIR...
  avtgym corpus import ambrosia --in DIR --out DIR [--split NAME] [--force] [--list-rejected=false] [--quiet]
  avtgym corpus import birdinteract --in DIR --out DIR [--responses FILE] [--postgres URL] [--force] [--name NAME]
  avtgym corpus import tide --in DIR --dbs DIR --out DIR [--force] [--name NAME] [--quiet]
  avtgym probe    --oracle-url URL --oracle-model M [--oracle-...] [--corpus DIR]... [--postgres URL]
                  [--variants unfiltered,scoped] [--limit N] [--workers N] [--allow-leaks] [--json]
                  [--min-accuracy F] [--timeout D]
  avtgym bench    [--server ADDR] [--json] [--duration D] [--concurrency N] [--batch N]
  avtgym sql commitments --db FILE [--json] SQL
  avtgym sql drift --db FILE --pre SQL --post SQL [--json]
  avtgym keygen   FILE

Run 'avtgym COMMAND -h' for all of a command's flags; 'avtgym --version' prints the build.
`

// run is main without the process: tests call it with their own
// arguments and writers. It returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmds := map[string]func(context.Context, []string, io.Writer, io.Writer) int{
		"serve":    runServe,
		"rollout":  runRollout,
		"corpus":   runCorpus,
		"bench":    runBench,
		"keygen":   runKeygen,
		"eval":     runEval,
		"probe":    runProbe,
		"sql":      runSQL,
		"reverify": runReverify,
		"view":     runView,
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "-version", "--version", "version":
		// The build recorded in records and ListCorpora (internal/buildinfo).
		fmt.Fprintln(stdout, "avtgym", buildinfo.Version())
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "avtgym: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	return cmd(ctx, args[1:], stdout, stderr)
}

// parseExit is the exit code of a flag set that failed to parse: 0 for -h
// (the usage was asked for and printed), 2 for a usage error.
func parseExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 2
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/llm"
	"avtgym/oracle"
)

// probeFlags are the flags of `avtgym probe`.
type probeFlags struct {
	model       llm.Config
	corpora     stringList
	pgURL       string
	variants    string
	limit       int
	workers     int
	maxTokens   int
	allowLeaks  bool
	json        bool
	minAccuracy float64
	timeout     time.Duration
}

// runProbe is `avtgym probe`: the quick check of a model as the LLM oracle
// (docs/models.md). It runs the oracle probes — full, full_adv, none_adv
// and the injected questions (oracle.CheckModel) — with both LLM oracles
// against the endpoint, in process (no server), and prints each probe's
// routing accuracy, wrong credits, leaks and regenerations.
func runProbe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f probeFlags
	fs := flag.NewFlagSet("probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	llmFlags(fs, "oracle", "the model under test", &f.model)
	// The flags serve may not have (yet): registered here when llmFlags
	// does not.
	if fs.Lookup("oracle-json-mode") == nil {
		fs.BoolVar(&f.model.JSONMode, "oracle-json-mode", true, "ask the model for a JSON object (response_format json_object); dropped by itself when the endpoint refuses it")
	}
	if fs.Lookup("oracle-disable-thinking") == nil {
		fs.BoolVar(&f.model.DisableThinking, "oracle-disable-thinking", true, "turn the model's thinking off (chat_template_kwargs enable_thinking=false; Qwen3 on vLLM or SGLang); dropped by itself when the endpoint refuses it")
	}
	fs.IntVar(&f.maxTokens, "oracle-max-tokens", oracle.DefaultOracleMaxTokens, "completion limit of each oracle stage (a cut-off reply is asked for again with twice the limit, unless it was cut off in a loop)")
	fs.Var(&f.corpora, "corpus", "corpus directory to take records from (repeatable; default: the embedded demo corpus)")
	postgresFlagVar(fs, &f.pgURL)
	fs.StringVar(&f.variants, "variants", "unfiltered,scoped", "LLM oracles to check: unfiltered, scoped or both")
	fs.IntVar(&f.limit, "limit", 20, "records to check (those with a counted ambiguity, in corpus order; 0: all)")
	fs.IntVar(&f.workers, "workers", 4, "records checked at once")
	fs.BoolVar(&f.allowLeaks, "allow-leaks", false, "serve leaking replies instead of regenerating them (to see the raw model's leaks)")
	fs.BoolVar(&f.json, "json", false, "print the reports as one JSON object")
	fs.Float64Var(&f.minAccuracy, "min-accuracy", 0, "exit 1 when a probe's routing accuracy (over the outputs that could be read) or the share of its outputs that could be read is below this, or a question was wrongly credited or answered with a leak (0: report only)")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "probe: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if f.model.BaseURL == "" || f.model.Model == "" {
		fmt.Fprintln(stderr, "probe: --oracle-url and --oracle-model are required")
		return 2
	}
	var scoped []bool
	for _, v := range strings.Split(f.variants, ",") {
		switch strings.TrimSpace(v) {
		case "unfiltered":
			scoped = append(scoped, false)
		case "scoped":
			scoped = append(scoped, true)
		default:
			fmt.Fprintf(stderr, "probe: unknown variant %q (want unfiltered or scoped)\n", v)
			return 2
		}
	}
	if f.limit < 0 || f.workers <= 0 || f.maxTokens < 0 {
		fmt.Fprintln(stderr, "probe: --limit must not be negative, --workers must be positive")
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()

	recs, schemas, closeAll, ok := probeRecords(ctx, f, stderr)
	if !ok {
		return 1
	}
	defer closeAll()
	client, err := llm.New(f.model, nil)
	if err != nil {
		fmt.Fprintln(stderr, "probe:", err)
		return 2
	}
	if err := client.Ping(ctx); err != nil {
		fmt.Fprintln(stderr, "probe: the endpoint does not answer:", err)
		return 1
	}
	var reports []*oracle.CheckReport
	for _, sc := range scoped {
		l := oracle.NewLLM(client, oracle.LLMOptions{
			Scoped: sc, Schema: func(r *corpus.Record) string { return schemas[r] },
			AllowLeaks: f.allowLeaks, MaxTokens: f.maxTokens, Version: f.model.Version,
		})
		rep, err := oracle.CheckModel(ctx, l, recs, oracle.CheckOptions{Workers: f.workers})
		if err != nil {
			fmt.Fprintln(stderr, "probe:", err)
			return 1
		}
		reports = append(reports, rep)
	}
	stats := client.Stats()
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			Reports []*oracle.CheckReport `json:"reports"`
			Replies llm.Stats             `json:"replies"`
		}{reports, stats})
	} else {
		printProbeReports(stdout, f, reports, stats)
	}
	if f.minAccuracy > 0 {
		for _, rep := range reports {
			for _, p := range rep.Probes {
				if p.Accuracy() < f.minAccuracy || p.ReadableShare() < f.minAccuracy || p.WrongCredits > 0 || p.Leaks > 0 {
					fmt.Fprintf(stderr, "probe: %s %s: routing accuracy %.3f, %d of %d outputs readable (want at least %.3f of each), %d wrong credits, %d leaks\n",
						rep.Variant, p.Probe, p.Accuracy(), p.Readable(), p.Questions, f.minAccuracy, p.WrongCredits, p.Leaks)
					return 1
				}
			}
		}
	}
	return 0
}

// probeRecords loads the corpora (the demo corpus without --corpus) and
// returns up to --limit records with a counted ambiguity, their schemas and
// a function closing the corpora.
func probeRecords(ctx context.Context, f probeFlags, stderr io.Writer) ([]*corpus.Record, map[*corpus.Record]string, func(), bool) {
	var cs []*corpus.Corpus
	py, stopPy := pythonTests() // a corpus with Python tests loads only with them
	closeAll := func() {
		for _, c := range cs {
			c.Close()
		}
		stopPy()
	}
	if len(f.corpora) == 0 {
		c, err := corpus.LoadDemo(ctx, corpus.Options{Engines: engines.Opener{}})
		if err != nil {
			fmt.Fprintln(stderr, "probe:", err)
			closeAll()
			return nil, nil, nil, false
		}
		cs = append(cs, c)
	}
	for _, dir := range f.corpora {
		c, ok := loadOrReport(ctx, dir, f.pgURL, py, stderr)
		if !ok {
			closeAll()
			return nil, nil, nil, false
		}
		cs = append(cs, c)
	}
	var recs []*corpus.Record
	schemas := map[*corpus.Record]string{}
	for _, c := range cs {
		for _, t := range c.Tasks {
			if len(t.Counted()) == 0 || f.limit > 0 && len(recs) >= f.limit {
				continue
			}
			recs = append(recs, t.Record)
			schemas[t.Record] = t.DB.Schema
		}
	}
	if len(recs) == 0 {
		fmt.Fprintln(stderr, "probe: no record with a counted ambiguity")
		closeAll()
		return nil, nil, nil, false
	}
	return recs, schemas, closeAll, true
}

func printProbeReports(w io.Writer, f probeFlags, reports []*oracle.CheckReport, stats llm.Stats) {
	if len(reports) > 0 {
		fmt.Fprintf(w, "model %q at %s, prompts %s, %d records\n\n", reports[0].Model, f.model.BaseURL, reports[0].Prompts, reports[0].Records)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "variant\tprobe\tquestions\tunreadable\trouted\twrong credits\trefused\tleaks\tregenerated\tfell back\trecall\tprecision\t")
	for _, rep := range reports {
		for _, p := range rep.Probes {
			// Routed is over the readable outputs: an unreadable one is
			// unanswerable(), which would pass for a correct routing of
			// none_adv and the injected questions.
			routed := "-"
			if p.Readable() > 0 || p.Questions == 0 {
				routed = fmt.Sprintf("%.1f%%", 100*p.Accuracy())
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", rep.Variant, p.Probe, p.Questions, p.Unreadable, routed,
				p.WrongCredits, p.Refused, p.Leaks, p.Regenerated, p.FellBack, fmtRate(p.Recall), fmtRate(p.Precision))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "\nmodel replies: %d, cut off at the limit: %d (%d of them in a loop), thinking stripped: %d, outputs unreadable: %d\n",
		stats.Replies, stats.CutOff, stats.CutOffRepeating, stats.ThinkingStripped, stats.Unreadable)
	if hint := cutOffHint(stats); hint != "" {
		fmt.Fprintln(w, hint)
	}
	for _, rep := range reports {
		for _, p := range rep.Probes {
			for _, x := range p.Failures {
				fmt.Fprintf(w, "%s %s: %s %q: want %s, got %s", rep.Variant, p.Probe, x.Record, x.Question, x.Want, x.Got)
				if len(x.Credits) > 0 {
					fmt.Fprintf(w, ", credits %v", x.Credits)
				}
				if x.Leak {
					fmt.Fprintf(w, ", leaking reply %q", x.Reply)
				}
				fmt.Fprintln(w)
			}
		}
	}
}

// cutOffHint says what to do about cut-off replies: a larger limit for
// replies cut off in ordinary text, never for replies cut off in a loop,
// which a larger limit only lets run longer.
func cutOffHint(s llm.Stats) string {
	switch plain := s.CutOff - s.CutOffRepeating; {
	case plain > 0 && s.CutOffRepeating > 0:
		return fmt.Sprintf("(%d replies cut off: turn thinking off, or raise --oracle-max-tokens; %d more were cut off in a loop, which a larger limit does not help: try --oracle-repetition-penalty 1.1 (or --oracle-frequency-penalty), or a larger model; see docs/models.md)", plain, s.CutOffRepeating)
	case plain > 0:
		return "(replies cut off: turn thinking off, or raise --oracle-max-tokens; see docs/models.md)"
	case s.CutOffRepeating > 0:
		return "(replies cut off in a loop: the model repeats itself until the limit, and a larger limit does not help: try --oracle-repetition-penalty 1.1 (or --oracle-frequency-penalty), or a larger model; see docs/models.md)"
	}
	return ""
}

func fmtRate(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.3f", *v)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"text/tabwriter"

	"avtgym/client"
	"avtgym/driver"
	"avtgym/record"
	"avtgym/reverify"
	"avtgym/schema"
)

// runReverify is `avtgym reverify`: replay saved episode records against a
// server and report how their scores changed.
func runReverify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("reverify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("server", "127.0.0.1:50051", "server address (serving the corpus the records were played on, as it is now)")
	corpus := fs.String("corpus", "", "replay on this corpus instead of each record's own")
	asJSON := fs.Bool("json", false, "print the summary and every changed record as JSON")
	out := fs.String("out", "", "write the replayed records to this file (episode records, writer reverify)")
	show := fs.Int("show", 20, "list at most this many changed records (0: all)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: avtgym reverify [--server ADDR] [--corpus NAME] [--json] [--out FILE] RECORDS...")
		fmt.Fprintln(stderr, "RECORDS: record files (rollout --episodes-out), eval run directories or serve --episode-log directories")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return parseExit(err)
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	records, err := readRecordInputs(fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "avtgym reverify: %v\n", err)
		return 1
	}
	c, err := client.Dial(*addr, client.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "avtgym reverify: %v\n", err)
		return 1
	}
	defer c.Close()
	plain := make([]*driver.Record, len(records))
	for i := range records {
		plain[i] = &records[i].Record
	}
	results, sum, err := reverify.Replay(ctx, c.Env, plain, reverify.Options{Corpus: *corpus})
	if err != nil {
		fmt.Fprintf(stderr, "avtgym reverify: %v\n", err)
		return 1
	}
	if *out != "" {
		if err := writeReplayed(*out, results); err != nil {
			fmt.Fprintf(stderr, "avtgym reverify: %v\n", err)
			return 1
		}
	}
	changed := changedResults(results)
	if *asJSON {
		type row struct {
			Index     int              `json:"index"`
			TaskID    string           `json:"task_id"`
			Seed      uint64           `json:"seed"`
			Condition string           `json:"condition,omitempty"`
			Outcome   reverify.Outcome `json:"outcome"`
			OldStatus string           `json:"old_status"`
			NewStatus string           `json:"new_status,omitempty"`
			OldReward *float64         `json:"old_reward"`
			NewReward *float64         `json:"new_reward"`
			Delta     *float64         `json:"delta"`
			Why       string           `json:"why,omitempty"`
		}
		doc := struct {
			*reverify.Summary
			MeanOld *float64 `json:"mean_old"`
			MeanNew *float64 `json:"mean_new"`
			Changed []row    `json:"changed"`
		}{Summary: sum, Changed: []row{}}
		if sum.Paired > 0 {
			doc.MeanOld, doc.MeanNew = &sum.MeanOld, &sum.MeanNew
		}
		for _, r := range changed {
			x := row{Index: r.Index, TaskID: r.Old.TaskID, Seed: r.Old.Seed, Condition: records[r.Index].Condition, Outcome: r.Outcome,
				OldStatus: r.Old.Status, OldReward: r.Old.Reward, Delta: r.Delta, Why: r.Why}
			if r.New != nil {
				x.NewStatus, x.NewReward = r.New.Status, r.New.Reward
			}
			doc.Changed = append(doc.Changed, x)
		}
		b, _ := json.MarshalIndent(doc, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	fmt.Fprintf(stdout, "replayed %d records: %d same, %d up, %d down, %d status changed, %d diverged, %d not replayable\n",
		sum.Records, sum.Outcomes[reverify.Same], sum.Outcomes[reverify.Up], sum.Outcomes[reverify.Down],
		sum.Outcomes[reverify.StatusChanged], sum.Outcomes[reverify.Diverged], sum.Outcomes[reverify.NotReplayable])
	if sum.Paired > 0 {
		fmt.Fprintf(stdout, "mean reward over the %d scored both times: %.4f → %.4f (%+.4f)\n", sum.Paired, sum.MeanOld, sum.MeanNew, sum.MeanNew-sum.MeanOld)
	}
	if sum.CorpusChanged > 0 {
		fmt.Fprintf(stdout, "%d records were played on another version of the corpus (their corpus hash differs from the server's)\n", sum.CorpusChanged)
	}
	if len(changed) == 0 {
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\n#\ttask\tseed\tcondition\toutcome\tstatus\treward\twhy")
	for i, r := range changed {
		if *show > 0 && i >= *show {
			fmt.Fprintf(tw, "… %d more (--show 0 lists all, --json prints all)\n", len(changed)-i)
			break
		}
		status, reward := r.Old.Status, fmtReward(r.Old.Reward)
		if r.New != nil {
			status += " → " + r.New.Status
			reward += " → " + fmtReward(r.New.Reward)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Index+1, r.Old.TaskID, r.Old.Seed, records[r.Index].Condition, r.Outcome, status, reward, r.Why)
	}
	tw.Flush()
	return 0
}

func fmtReward(x *float64) string {
	if x == nil {
		return "null"
	}
	return fmt.Sprintf("%.3f", *x)
}

// changedResults are the results whose outcome is not Same, largest
// |delta| first (the rest after, in input order).
func changedResults(rs []reverify.Result) []reverify.Result {
	var out []reverify.Result
	for _, r := range rs {
		if r.Outcome != reverify.Same {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		di, dj := 0.0, 0.0
		if out[i].Delta != nil {
			di = math.Abs(*out[i].Delta)
		}
		if out[j].Delta != nil {
			dj = math.Abs(*out[j].Delta)
		}
		return di > dj
	})
	return out
}

// savedRecord is a record as read back, with eval's labels.
type savedRecord struct {
	driver.Record
	Condition string `json:"condition,omitempty"`
	Oracle    string `json:"oracle,omitempty"`
}

// readRecordInputs reads every record of the inputs: files, eval run
// directories (episodes.jsonl) and episode-log directories (episodes-*.jsonl,
// one record per key). Each line must match the record schema.
func readRecordInputs(paths []string) ([]savedRecord, error) {
	var out []savedRecord
	for _, p := range paths {
		files, _, err := record.Files(p)
		if err != nil {
			return nil, err
		}
		seen := map[string]int{}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			if _, err := schema.ValidateLines(f, bytes.NewReader(b)); err != nil {
				return nil, err
			}
			for n, line := range bytes.Split(b, []byte("\n")) {
				if len(bytes.TrimSpace(line)) == 0 {
					continue
				}
				var r savedRecord
				var key struct {
					Key string `json:"key"`
				}
				if err := json.Unmarshal(line, &r); err != nil {
					return nil, fmt.Errorf("%s:%d: %w", f, n+1, err)
				}
				_ = json.Unmarshal(line, &key)
				if key.Key != "" {
					if i, dup := seen[key.Key]; dup {
						out[i] = r
						continue
					}
					seen[key.Key] = len(out)
				}
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no record in %v", paths)
	}
	return out, nil
}

func writeReplayed(name string, rs []reverify.Result) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range rs {
		if r.New == nil {
			continue
		}
		if err := enc.Encode(r.New); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

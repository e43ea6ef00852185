package ambrosia

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/audit"
	"avtgym/corpus"
	"avtgym/driver"
	"avtgym/engines"
	"avtgym/env"
	"avtgym/oracle"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec/sqlite"
)

// The synthetic fixture testdata/synthetic is written for these tests in
// AMBROSIA's format (tasks_test.jsonl, and each database as the
// <name>_dump.sql script AMBROSIA ships beside <name>.sqlite). It
// reproduces the shapes by which the project's own rules lost questions of
// AMBROSIA's test split that the benchmark considers valid: questions the
// term rules of the time found no span in (attachment: a determiner after
// the coordinator, the serial comma before it; vague: the question word
// "When", qualifiers appended after the last word), and interpretations
// whose question contains another's ("… by month" and "… by month and
// year"), which the importer rejected. One question is marked unusable by
// the benchmark (gold_results_pairwise_distinct = false) and must be the
// only rejection.
const synthDir = "testdata/synthetic"

// synthInput copies the fixture into a temporary AMBROSIA folder and
// builds its databases from their dump scripts.
func synthInput(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "in")
	if err := copyFile(filepath.Join(synthDir, "tasks_test.jsonl"), filepath.Join(dir, "tasks_test.jsonl")); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(filepath.Join(synthDir, "dbs"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, "_dump.sql") {
			return err
		}
		script, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(synthDir, p)
		if err != nil {
			return err
		}
		dest := filepath.Join(dir, strings.TrimSuffix(rel, "_dump.sql")+".sqlite")
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		return sqlite.BuildFromScript(context.Background(), string(script), dest)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// synthTerms are the terms the rules derive for the fixture's ambiguous
// questions.
var synthTerms = map[string]string{
	"ambrosia-test-9002": "cardiologist and a nurse who work at St Mary Hospital", // no span before: "and a"
	"ambrosia-test-9005": "surgeons, or the nurses at City Clinic",                // no span before: serial comma
	"ambrosia-test-9008": "When",                                                  // no span before: "When" replaced
	"ambrosia-test-9012": "rooms",                                                 // no span before: appended qualifiers
	"ambrosia-test-9016": "period",
	"ambrosia-test-9019": "contact details",
	"ambrosia-test-9022": "all sales",
}

// TestSyntheticTerms: every ambiguous question of the fixture gets its
// term, and the term satisfies the matcher properties.
func TestSyntheticTerms(t *testing.T) {
	tasks, err := ReadTasks(filepath.Join(synthDir, "tasks_test.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tk := range tasks {
		if !tk.IsAmbiguous {
			continue
		}
		n++
		var qs []string
		for _, in := range tk.LinkedInterpretations {
			qs = append(qs, in.Question)
		}
		got, _, err := DeriveTerm(tk.Question, tk.AmbigType, qs)
		if err != nil || got != synthTerms[tk.ID] {
			t.Errorf("%s (%s) %q: term %q, %v; want %q", tk.ID, tk.AmbigType, tk.Question, got, err, synthTerms[tk.ID])
		}
	}
	if n != len(synthTerms) {
		t.Errorf("the fixture has %d ambiguous questions, want %d", n, len(synthTerms))
	}
}

// TestImportSynthetic imports the fixture: every question the benchmark
// considers valid becomes an AVT (the containment pairs included), the
// one it marks unusable is the only rejection, and on the imported corpus
// the audit passes and the full probe with the lookup solver succeeds on
// every episode, the contained interpretations included.
func TestImportSynthetic(t *testing.T) {
	ctx := context.Background()
	in := synthInput(t)
	out := filepath.Join(t.TempDir(), "out")
	sum, err := Import(ctx, in, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	sum.WriteText(&b, true)
	t.Logf("summary:\n%s", b.String())
	if sum.Questions != 23 || sum.Ambiguous != 7 || sum.Imported != 6 || sum.Records != 14 {
		t.Errorf("questions %d, ambiguous %d, imported %d, records %d; want 23, 7, 6, 14", sum.Questions, sum.Ambiguous, sum.Imported, sum.Records)
	}
	if len(sum.Splits) != 1 || sum.Splits[0] != (SplitCount{Split: "test", File: "tasks_test.jsonl", Questions: 23, Ambiguous: 7, Imported: 6}) {
		t.Errorf("splits %+v", sum.Splits)
	}
	if len(sum.Rejected) != 1 {
		t.Fatalf("rejected %+v, want only ambrosia-test-9022", sum.Rejected)
	}
	r := sum.Rejected[0]
	if r.ID != "ambrosia-test-9022" || r.Category != RejectSameResults || !r.MarkedUnusable || r.Split != "test" ||
		!strings.Contains(r.Flags, "gold_results_pairwise_distinct=false") {
		t.Errorf("rejection %+v, want 9022 for the same results, marked unusable by the benchmark", r)
	}
	if !strings.Contains(b.String(), "rejected although the benchmark marks them usable: 0") {
		t.Errorf("the summary does not say that no usable question was rejected:\n%s", b.String())
	}

	c, err := corpus.LoadDir(ctx, out, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tk := range c.Tasks {
		if tk.Split != "test" {
			t.Errorf("%s: split %q, want test", tk.ID, tk.Split)
		}
		if want := synthTerms[tk.AVTID]; tk.Ambiguities[0].Term != want {
			t.Errorf("%s: term %q, want %q", tk.ID, tk.Ambiguities[0].Term, want)
		}
	}
	rep, err := audit.Run(ctx, c, audit.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		t.Error(f)
	}
	if !rep.OK() {
		var tb strings.Builder
		rep.WriteTable(&tb)
		t.Errorf("corpus check fails:\n%s", tb.String())
	}

	// The full probe with the lookup solver: the oracle answers each
	// record's resolution, and the solver must pick that record's
	// interpretation, also when its question is contained in another's.
	sealer, err := env.NewSealer(env.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	e, err := env.New(env.Config{
		Corpora: []*corpus.Corpus{c},
		Sealer:  sealer,
		Oracles: map[pb.OracleType]env.Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range c.Tasks {
		for seed := range uint64(8) {
			ep, err := driver.Start(ctx, e, &pb.ResetRequest{Corpus: c.Name, TaskId: tk.ID, Seed: &seed, IncludePrivileged: true,
				Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LOOKUP}})
			if err != nil {
				t.Fatal(err)
			}
			if err := policy.Scripted(probe.Full).Play(ctx, ep); err != nil {
				t.Fatal(err)
			}
			if got := ep.Last().GetReward().GetComponents()["outcome"]; got != 1 {
				t.Errorf("%s seed %d: the full probe with the lookup solver scores outcome %v, want 1", tk.ID, seed, got)
			}
		}
	}
}

// TestImportSplits: by default every tasks_NAME.jsonl is imported, each
// record keeping its split; --split NAME imports tasks_NAME.jsonl alone;
// an id used in two splits, a missing split and a bad split name are
// errors.
func TestImportSplits(t *testing.T) {
	ctx := context.Background()
	in := synthInput(t)
	// A second split, in the same format, on the same databases: its
	// records carry no split field, so they take the file's.
	raw, err := os.ReadFile(filepath.Join(in, "tasks_test.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	dev := strings.ReplaceAll(strings.ReplaceAll(string(raw), `"ambrosia-test-`, `"ambrosia-dev-`), `"split": "test", `, "")
	if err := os.WriteFile(filepath.Join(in, "tasks_dev.jsonl"), []byte(dev), 0o644); err != nil {
		t.Fatal(err)
	}
	// Files that are not tasks files are ignored.
	for _, name := range []string{"tasks_.jsonl", "tasks_test.jsonl.bak", "notes.jsonl"} {
		if err := os.WriteFile(filepath.Join(in, name), []byte("not json\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	out := filepath.Join(t.TempDir(), "all")
	sum, err := Import(ctx, in, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := []SplitCount{{"dev", "tasks_dev.jsonl", 23, 7, 6}, {"test", "tasks_test.jsonl", 23, 7, 6}}
	if len(sum.Splits) != 2 || sum.Splits[0] != want[0] || sum.Splits[1] != want[1] || sum.Imported != 12 || sum.Records != 28 {
		t.Errorf("all splits: %+v, imported %d, records %d; want %+v, 12, 28", sum.Splits, sum.Imported, sum.Records, want)
	}
	c, err := corpus.LoadDir(ctx, out, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	splits := map[string]int{}
	for _, tk := range c.Tasks {
		splits[tk.Split]++
		if wantSplit := strings.Split(tk.AVTID, "-")[1]; tk.Split != wantSplit {
			t.Errorf("%s: split %q, want %q", tk.ID, tk.Split, wantSplit)
		}
	}
	c.Close()
	if splits["dev"] != 14 || splits["test"] != 14 {
		t.Errorf("records per split %v, want 14 and 14", splits)
	}

	sum, err = Import(ctx, in, filepath.Join(t.TempDir(), "test"), Options{Split: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Splits) != 1 || sum.Splits[0].Split != "test" || sum.Imported != 6 {
		t.Errorf("--split test: %+v, imported %d", sum.Splits, sum.Imported)
	}

	for split, msg := range map[string]string{"nope": "tasks_nope.jsonl", "../test": "bad split name"} {
		_, err := Import(ctx, in, filepath.Join(t.TempDir(), "x"), Options{Split: split})
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("--split %q: got %v, want an error containing %q", split, err, msg)
		}
	}

	// An id used in two splits is an error naming both files.
	if err := os.WriteFile(filepath.Join(in, "tasks_dev.jsonl"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out = filepath.Join(t.TempDir(), "dup")
	_, err = Import(ctx, in, out, Options{})
	if err == nil || !strings.Contains(err.Error(), "tasks_dev.jsonl:1") || !strings.Contains(err.Error(), "tasks_test.jsonl:1") || !strings.Contains(err.Error(), "ambrosia-test-9000") {
		t.Errorf("an id in two splits: got %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed import left %s behind", out)
	}
}

// Two interpretations with the same question (up to case, white space and
// final punctuation) are rejected: no answer could tell them apart. A
// question that merely contains another's is imported.
func TestIdenticalInterpretationQuestions(t *testing.T) {
	same := lakeTask("ambrosia-validation-same", "geo/lakes/lakes.sqlite")
	same.LinkedInterpretations[1].Question = "  show the AREA of every lake "
	contained := lakeTask("ambrosia-validation-contained", "geo/lakes/lakes.sqlite")
	contained.LinkedInterpretations[1].Question = "Show the area of every lake. Show the depth too."
	_, in := lakesInput(t, 5, same, contained)
	sum, err := Import(context.Background(), in, filepath.Join(t.TempDir(), "out"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Imported != 1 || len(sum.Rejected) != 1 {
		t.Fatalf("imported %d, rejected %+v; want 1 and the identical pair", sum.Imported, sum.Rejected)
	}
	r := sum.Rejected[0]
	if r.ID != "ambrosia-validation-same" || r.Category != RejectResolutions || !strings.Contains(r.Reason, "interpretations 1 and 2 have the same question") || r.MarkedUnusable {
		t.Errorf("rejection %+v", r)
	}
}

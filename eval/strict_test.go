package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"avtgym/app"
	"avtgym/internal/testutil"
	"avtgym/policy"
	pb "avtgym/proto/avtgym/v1"
)

// echoQuestion is the gaming question: one question that repeats the
// request verbatim (AmbiTab's rule credits it with every term it names).
func echoQuestion(request string) string { return "What do you mean by: " + request + "?" }

// resetRecorder is an EnvService client that records the strict_credit
// option of every reset, per task and seed.
type resetRecorder struct {
	pb.EnvServiceClient
	mu     sync.Mutex
	strict map[string][]bool // task \x00 seed → the resets' strict_credit
}

func (r *resetRecorder) Reset(ctx context.Context, in *pb.ResetRequest, opts ...grpc.CallOption) (*pb.ResetResponse, error) {
	r.mu.Lock()
	k := fmt.Sprintf("%s\x00%d", in.GetTaskId(), in.GetSeed())
	r.strict[k] = append(r.strict[k], in.GetOptions().GetStrictCredit())
	r.mu.Unlock()
	return r.EnvServiceClient.Reset(ctx, in, opts...)
}

// writeEchoTrajectories writes a trajectory file whose asker trajectories
// echo each task's request, for the first n demo tasks and the seeds.
func writeEchoTrajectories(t *testing.T, s *testutil.Server, n int, seeds []uint64) string {
	t.Helper()
	ctx := context.Background()
	tasks, err := policy.ListTasks(ctx, s.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, tk := range tasks[:n] {
		gt, err := s.Client.Env.GetTask(ctx, &pb.GetTaskRequest{Corpus: "demo", TaskId: tk.GetTaskId()})
		if err != nil {
			t.Fatal(err)
		}
		for _, seed := range seeds {
			line, _ := json.Marshal(Trajectory{TaskID: tk.GetTaskId(), Seed: seed, Questions: []string{echoQuestion(gt.GetTask().GetRequest())}})
			b.Write(append(line, '\n'))
		}
	}
	path := filepath.Join(t.TempDir(), "echo.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAskerStrict: the asker_strict condition replays the asker's
// trajectories (the same questions), in episodes reset with strict_credit
// (the asker's without); its cells are apart from the asker's (added to a
// run directory, only they are played; a rerun plays none); and the
// echoing question that AmbiTab's rule credits earns nothing under the
// strict rule, which the report's strict metrics show.
func TestAskerStrict(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	const n = 10
	seeds := []uint64{0, 1}
	tr, err := LoadTrajectories(writeEchoTrajectories(t, s, n, seeds))
	if err != nil {
		t.Fatal(err)
	}
	rec := &resetRecorder{EnvServiceClient: s.Client.Env, strict: map[string][]bool{}}
	dir := t.TempDir()
	// A run of the asker alone: its report's strict metrics are absent
	// and say why.
	cfg := Config{Asker: tr, Oracles: det, Seeds: seeds, Limit: n, Conditions: []Condition{Asker}, Dir: dir}
	res, err := Run(context.Background(), rec, cfg)
	if err != nil || res.Failed != 0 || res.Played != n*2 {
		t.Fatalf("Run (asker): %+v, %v", res, err)
	}
	rep, err := Analyze(readAll(t, dir), AnalyzeOptions{Resamples: 20})
	if err != nil {
		t.Fatal(err)
	}
	if s := rep.Rows[0].RecallStrict; s.Mean != nil || !strings.Contains(s.Reason, "the asker_strict condition did not run") {
		t.Errorf("recall_strict without asker_strict: %+v", s)
	}
	// The same directory with asker_strict added plays only its cells.
	cfg.Conditions = []Condition{Asker, AskerStrict}
	res, err = Run(context.Background(), rec, cfg)
	if err != nil || res.Failed != 0 {
		t.Fatalf("Run: %+v, %v", res, err)
	}
	if res.Cells != n*2*2 || res.Skipped != n*2 || res.Played != n*2 {
		t.Fatalf("%+v: want %d cells, the %d asker_strict ones played", res, n*2*2, n*2)
	}
	eps := readAll(t, dir)
	type pair struct{ asker, strict *Episode }
	pairs := map[string]*pair{}
	for i := range eps {
		e := &eps[i]
		k := fmt.Sprintf("%s\x00%d", e.TaskID, e.Seed)
		if pairs[k] == nil {
			pairs[k] = &pair{}
		}
		switch e.Condition {
		case Asker:
			pairs[k].asker = e
		case AskerStrict:
			pairs[k].strict = e
		default:
			t.Fatalf("episode of condition %s", e.Condition)
		}
		// Every cell's reset: one with strict_credit for asker_strict,
		// one without for asker (and the pre-flight's, without).
		resets := rec.strict[k]
		if got := slices.Index(resets, true); got < 0 || slices.Index(resets[got+1:], true) >= 0 || !slices.Contains(resets, false) {
			t.Errorf("%s seed %d: resets with strict_credit %v, want one with and one without", e.TaskID, e.Seed, resets)
		}
	}
	if len(pairs) != n*len(seeds) {
		t.Fatalf("%d (task, seed) pairs, want %d", len(pairs), n*len(seeds))
	}
	credited := 0
	for k, p := range pairs {
		if p.asker == nil || p.strict == nil {
			t.Fatalf("%q: asker %v, asker_strict %v", k, p.asker != nil, p.strict != nil)
		}
		if !slices.Equal(p.asker.Questions, p.strict.Questions) || len(p.asker.Questions) != 1 {
			t.Errorf("%q: asker asked %q, asker_strict %q; want the same echo", k, p.asker.Questions, p.strict.Questions)
		}
		if len(p.strict.CreditedTerms) != 0 || (p.strict.Recall != nil && *p.strict.Recall != 0) {
			t.Errorf("%q: the echo earned %q (recall %v) under strict credit", k, p.strict.CreditedTerms, *p.strict.Recall)
		}
		if p.asker.Recall != nil && *p.asker.Recall > 0 {
			credited++
			if len(p.asker.CreditedTerms) == 0 {
				t.Errorf("%q: recall %v without credited terms", k, *p.asker.Recall)
			}
		}
	}
	if credited == 0 {
		t.Fatal("AmbiTab's rule credited the echo on no task")
	}

	rep, err = Analyze(eps, AnalyzeOptions{Resamples: 50})
	if err != nil {
		t.Fatal(err)
	}
	row := rep.Rows[0]
	for name, s := range map[string][2]Summary{"precision": {row.Precision, row.PrecisionStrict}, "recall": {row.Recall, row.RecallStrict}, "F1": {row.F1, row.F1Strict}} {
		if s[0].Mean == nil || s[1].Mean == nil || *s[1].Mean != 0 || *s[0].Mean <= 0 {
			t.Errorf("%s: AmbiTab %v, strict %v; want > 0 and 0", name, s[0].Mean, s[1].Mean)
		}
	}

	// A rerun plays nothing: the two conditions' cells do not collide.
	res, err = Run(context.Background(), s.Client.Env, cfg)
	if err != nil || res.Played != 0 || res.Skipped != n*2*2 {
		t.Errorf("rerun: %+v, %v", res, err)
	}
}

func TestParseConditionStrict(t *testing.T) {
	if c, err := ParseCondition("asker_strict"); err != nil || c != AskerStrict {
		t.Errorf("ParseCondition(asker_strict) = %q, %v", c, err)
	}
	if i, j := slices.Index(AllConditions, Asker), slices.Index(AllConditions, AskerStrict); j != i+1 {
		t.Errorf("AllConditions = %v: asker_strict must follow asker", AllConditions)
	}
	if _, err := ParseCondition("strict"); err == nil || !strings.Contains(err.Error(), "asker_strict") {
		t.Errorf("ParseCondition(strict): %v", err)
	}
	// A trajectory file has asker and asker_spec trajectories only:
	// asker_strict replays the asker's.
	bad := filepath.Join(t.TempDir(), "strict.jsonl")
	os.WriteFile(bad, []byte(`{"task_id":"x","seed":0,"condition":"asker_strict","questions":["q?"]}`+"\n"), 0o644)
	if _, err := LoadTrajectories(bad); err == nil || !strings.Contains(err.Error(), "asker_strict replays the asker trajectories") {
		t.Errorf("an asker_strict trajectory: %v", err)
	}
	// The cell options differ by strict credit alone.
	cfg := Config{Dir: t.TempDir()}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	a := cfg.cellOptions(cell{cond: Asker, oracle: det[0]})
	st := cfg.cellOptions(cell{cond: AskerStrict, oracle: det[0]})
	if a.GetStrictCredit() || !st.GetStrictCredit() {
		t.Errorf("strict_credit: asker %v, asker_strict %v", a.GetStrictCredit(), st.GetStrictCredit())
	}
	st.StrictCredit = false
	if a.String() != st.String() {
		t.Errorf("asker %v and asker_strict %v differ beyond strict_credit", a, st)
	}
}

package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/llm"
	"avtgym/policy"
	pb "avtgym/proto/avtgym/v1"
)

// requestMarker precedes the task's request in the LLM agent's prompt: the
// last line of the shared prompt's task message (policy.ChatMessages).
const requestMarker = "\nRequest: "

// agentModel is an OpenAI-compatible endpoint for the BIRD-Interact LLM
// agent: it answers the pre-flight, then, per task (found by the request in
// the prompt), submits the task's reference SQL as its first action and
// stops after it. For the requests in garbage it answers a body that is not
// JSON, so that the agent fails (ASKER_FAILED).
func agentModel(t *testing.T, refs map[string]string, garbage map[string]bool) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []llm.Message `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		answer := "OK"
		if len(req.Messages) > 1 {
			request, assistant := "", 0
			for _, m := range req.Messages {
				if m.Role == "assistant" {
					assistant++
				}
				if i := strings.Index(m.Content, requestMarker); i >= 0 && request == "" {
					request, _, _ = strings.Cut(m.Content[i+len(requestMarker):], "\n\n")
				}
			}
			mu.Lock()
			bad, ref := garbage[request], refs[request]
			mu.Unlock()
			switch {
			case bad:
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, "}garbage{")
				return
			case ref == "":
				http.Error(w, "unknown request "+request, http.StatusBadRequest)
				return
			case assistant == 0:
				answer = "<action>submit(\"\"\"" + ref + "\"\"\")</action>"
			default:
				answer = "<action>stop()</action>"
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"choices": []any{map[string]any{"message": map[string]any{"role": "assistant", "content": answer}, "finish_reason": "stop"}},
		})
	}))
	t.Cleanup(srv.Close)
	return srv
}

// followUpRefs reads, with privileged resets, the request and reference
// SQL of each demo task with a follow-up.
func followUpRefs(t *testing.T, s *testutil.Server) (ids []string, refs map[string]string, request map[string]string) {
	t.Helper()
	ctx := context.Background()
	tasks, err := policy.ListTasks(ctx, s.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	tasks, _ = policy.ProtocolTasks(tasks, pb.Protocol_PROTOCOL_BIRD_C)
	refs, request = map[string]string{}, map[string]string{}
	for _, tk := range tasks {
		seed := uint64(0)
		ep, err := driver.Start(ctx, driver.Remote(s.Client.Env), &pb.ResetRequest{Corpus: "demo", TaskId: tk.GetTaskId(), Seed: &seed, IncludePrivileged: true,
			Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C}})
		if err != nil {
			t.Fatal(err)
		}
		req := ep.Task().GetRequest()
		if _, dup := refs[req]; dup || strings.Contains(req, "\n\n") || ep.ReferenceSQL() == "" {
			t.Fatalf("task %s: request %q cannot identify it in the prompt", tk.GetTaskId(), req)
		}
		refs[req], request[tk.GetTaskId()] = ep.ReferenceSQL(), req
		ids = append(ids, tk.GetTaskId())
	}
	if len(ids) < 2 {
		t.Fatalf("the demo corpus has %d task(s) with a follow-up; the test needs two", len(ids))
	}
	return ids, refs, request
}

// TestBirdCAskerFailedCounted: under bird-c, episodes whose LLM agent
// failed (its endpoint answered garbage: ASKER_FAILED) stay in the
// report's denominators: the asker row counts every episode, the ones that
// completed and the asker failures, and its phase-1 SR is over all the
// episodes (BIRD-Interact's SR is over all tasks), not over the completed
// ones, which the completed column gives beside it. Before, the table said
// 2n episodes while SR was over the 2n − 2 completed.
func TestBirdCAskerFailedCounted(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	ids, refs, request := followUpRefs(t, s)
	failing := ids[0]
	model := agentModel(t, refs, map[string]bool{request[failing]: true})
	c, err := llm.New(llm.Config{BaseURL: model.URL + "/v1", Model: "fake", MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := policy.NewLLMAgent(c)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	seeds := []uint64{0, 1}
	res, err := Run(context.Background(), s.Client.Env, Config{Asker: agent, Oracles: det, Seeds: seeds, Dir: dir,
		Protocol: pb.Protocol_PROTOCOL_BIRD_C, Conditions: []Condition{Asker}, Retries: -1, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	n := len(ids) * len(seeds)
	if res.Failed != len(seeds) || res.Played != n {
		t.Fatalf("played %d, failed %d; want %d and %d", res.Played, res.Failed, n, len(seeds))
	}
	eps := readAll(t, dir)
	for _, e := range eps {
		want := "TERMINATED"
		if e.TaskID == failing {
			want = "ASKER_FAILED"
		}
		if e.Status != want && !(want == "TERMINATED" && e.Status == "TRUNCATED") {
			t.Errorf("%s seed %d: %s (%s), want %s", e.TaskID, e.Seed, e.Status, e.Error, want)
		}
	}
	opt := AnalyzeOptions{Resamples: 100}
	ri, err := ReadRunInfo(dir)
	if err != nil {
		t.Fatal(err)
	}
	ri.Apply(&opt)
	rep, err := Analyze(eps, opt)
	if err != nil {
		t.Fatal(err)
	}
	row := birdCRow(t, rep, Asker)
	want := Counts{Episodes: n, Completed: n - len(seeds), AskerFailed: len(seeds)}
	if row.Counts != want {
		t.Errorf("counts %+v, want %+v", row.Counts, want)
	}
	// The agent submitted every other task's reference: phase 1 solved on
	// each completed episode, failed on each asker failure.
	wantSR := float64(n-len(seeds)) / float64(n)
	if v := mean(t, "phase-1 SR", row.Phase1SR); math.Abs(v-wantSR) > 1e-9 {
		t.Errorf("phase-1 SR %v, want %v (over all %d episodes)", v, wantSR, n)
	}
	if v := mean(t, "phase-1 SR, completed", row.Phase1Completed); v != 1 {
		t.Errorf("phase-1 SR over the completed pairs %v, want 1", v)
	}
	if v := mean(t, "reward", row.Reward); v >= 0.7 || v <= 0 {
		t.Errorf("mean reward %v: the asker failures must count as 0 (want (n−2)/n × 0.7)", v)
	}
	var cells Counts
	for _, c := range rep.BirdC.Cells {
		cells.Episodes += c.Episodes
		cells.AskerFailed += c.AskerFailed
	}
	if cells.Episodes != n || cells.AskerFailed != len(seeds) {
		t.Errorf("per-seed cells count %d episodes, %d asker failures", cells.Episodes, cells.AskerFailed)
	}

	var md, page bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	wantRow := fmt.Sprintf("| demo | deterministic | asker (%s) | %d | %d | 0 | %d | 0 | ", policy.AgentName, n, n-len(seeds), len(seeds))
	for _, want := range []string{
		"| Corpus | Oracle | Condition | Episodes | Completed | ERROR | Asker failed | Call failed | Phase-1 SR, completed |",
		wantRow,
		fmt.Sprintf("| demo | deterministic | asker (%s) | %d | %s", policy.AgentName, n, pct(wantSR)),
		"BIRD-Interact's SR is over all tasks",
		"comparison harness",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	for _, want := range []string{"Asker failed", "Episodes that did not complete", "Comparison harness"} {
		if !strings.Contains(page.String(), want) && !strings.Contains(page.String(), strings.ToLower(want[:1])+want[1:]) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}

// TestAmbiTabAskerFailedCounted: under ambitab an asker failure (a
// trajectory file without the episode) is an SR failure and, with counted
// ambiguities, a recall failure, and the episodes table counts it; the
// SR over the completed pairs leaves it out.
func TestAmbiTabAskerFailedCounted(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	dir := t.TempDir()
	// The trajectory file covers the first task only: every other asker
	// episode fails.
	tasks, err := policy.ListTasks(context.Background(), s.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "traj.jsonl")
	line, _ := json.Marshal(Trajectory{TaskID: tasks[0].GetTaskId(), Seed: 0, Questions: []string{}})
	if err := os.WriteFile(path, append(line, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, err := LoadTrajectories(path)
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if _, err := Run(context.Background(), s.Client.Env, Config{Asker: tr, Oracles: det, Dir: run, Limit: 3,
		Conditions: []Condition{None, Asker}, Retries: -1}); err != nil {
		t.Fatal(err)
	}
	eps := readAll(t, run)
	rep, err := Analyze(eps, AnalyzeOptions{Resamples: 50})
	if err != nil {
		t.Fatal(err)
	}
	row := rep.Rows[0]
	if got := row.Counts[Asker]; got != (Counts{Episodes: 3, Completed: 1, AskerFailed: 2}) {
		t.Errorf("asker counts %+v", got)
	}
	if got := row.Counts[None]; got != (Counts{Episodes: 3, Completed: 3}) {
		t.Errorf("none counts %+v", got)
	}
	var success float64
	for _, e := range eps {
		if e.Condition == Asker && e.Scored() && e.Success != nil {
			success += *e.Success
		}
	}
	if v := mean(t, "SR asker", row.SRAsker); math.Abs(v-success/3) > 1e-9 {
		t.Errorf("SR asker %v, want %v over all 3 episodes", v, success/3)
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| demo | deterministic | asker | 3 | 1 | 0 | 2 | 0 |", "| demo | deterministic | asker 2 |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
}

// TestFailedResetKeepsItsAVT: a record of a reset that failed names its
// task as its AVT and has no counted ambiguities (policy.Failed); the
// analysis takes both from the task's completed episodes, so the failure
// neither stops the analysis ("task in two AVTs") nor leaves the recall
// denominator.
func TestFailedResetKeepsItsAVT(t *testing.T) {
	one, zero := 1.0, 0.0
	done := func(task string, seed uint64, s *float64) Episode {
		return Episode{Condition: Asker, Oracle: "deterministic", Record: driver.Record{Corpus: "c", TaskID: task, AVTID: "avt-" + task, Seed: seed,
			Status: "TERMINATED", Counted: 2, Success: s, Recall: s, F1: s, Comparison: "harness"}}
	}
	failed := Episode{Condition: Asker, Oracle: "deterministic", Record: driver.Record{Corpus: "c", TaskID: "t1", AVTID: "t1", Seed: 1,
		Status: "RPC_FAILED", Error: "connection reset", Comparison: "harness"}}
	eps := []Episode{done("t1", 0, &one), failed, done("t2", 0, &zero), done("t2", 1, &one)}
	rep, err := Analyze(eps, AnalyzeOptions{Resamples: 20})
	if err != nil {
		t.Fatal(err)
	}
	row := rep.Rows[0]
	if got := row.Counts[Asker]; got != (Counts{Episodes: 4, Completed: 3, CallFailed: 1}) {
		t.Errorf("counts %+v", got)
	}
	// Seed 0: (1 + 0)/2; seed 1: (0 + 1)/2 with the failure as 0.
	if v := mean(t, "SR asker", row.SRAsker); math.Abs(v-0.5) > 1e-9 {
		t.Errorf("SR asker %v, want 0.5", v)
	}
	if v := mean(t, "recall", row.Recall); math.Abs(v-0.5) > 1e-9 {
		t.Errorf("recall %v, want 0.5: the failed reset counts with its task's ambiguities", v)
	}
	if row.SRAsker.Clusters != 2 {
		t.Errorf("%d clusters, want the two tasks' AVTs", row.SRAsker.Clusters)
	}
	if eps[1].AVTID != "t1" || eps[1].Counted != 0 {
		t.Error("Analyze changed the caller's episodes")
	}
}

// TestReportComparison: the report says which comparison its episodes
// used, counts those that do not say, and refuses to pool two
// comparisons (their numbers are not comparable).
func TestReportComparison(t *testing.T) {
	one := 1.0
	ep := func(task, comparison string) Episode {
		return Episode{Condition: Asker, Oracle: "deterministic", Record: driver.Record{Corpus: "c", TaskID: task, AVTID: task,
			Status: "TERMINATED", Success: &one, Comparison: comparison}}
	}
	rep, err := Analyze([]Episode{ep("a", "harness"), ep("b", "harness"), ep("c", "")}, AnalyzeOptions{Resamples: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Comparison != "harness" || rep.ComparisonUnrecorded != 1 {
		t.Errorf("comparison %q, %d unrecorded", rep.Comparison, rep.ComparisonUnrecorded)
	}
	var md, page bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "comparison harness (BIRD-Interact's ex_base exactly") || !strings.Contains(md.String(), "1 episode(s) do not record theirs") {
		t.Errorf("Markdown does not say the comparison:\n%s", md.String())
	}
	if !strings.Contains(page.String(), "Comparison harness (BIRD-Interact") {
		t.Error("HTML does not say the comparison")
	}
	if rep, err := Analyze([]Episode{ep("a", "sound")}, AnalyzeOptions{Resamples: 10}); err != nil || rep.Comparison != "sound" {
		t.Errorf("sound: %v, %v", rep, err)
	}
	if _, err := Analyze([]Episode{ep("a", "harness"), ep("b", "sound")}, AnalyzeOptions{Resamples: 10}); err == nil || !strings.Contains(err.Error(), "two comparisons") {
		t.Errorf("mixed comparisons: %v, want a refusal", err)
	}
}

// TestRunComparison: eval sends COMPARISON_HARNESS unless told otherwise,
// and every episode records it; run.json records it, so that a rerun into
// the directory with the other comparison is refused (its episodes would
// mix); and a directory made before the option (no comparison in run.json)
// is sound's. The options of every cell carry it under every protocol.
func TestRunComparison(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	dir := t.TempDir()
	res := runOK(t, s, Config{Oracles: det, Conditions: []Condition{None}, Limit: 2, Dir: dir})
	if res.Played != 2 {
		t.Fatalf("played %d", res.Played)
	}
	for _, e := range readAll(t, dir) {
		if e.Comparison != "harness" {
			t.Errorf("%s: comparison %q, want harness (eval's default)", e.TaskID, e.Comparison)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, RunFile))
	if err != nil || !strings.Contains(string(b), `"comparison": "harness"`) {
		t.Errorf("run.json: %s, %v", b, err)
	}
	_, err = Run(context.Background(), s.Client.Env, Config{Oracles: det, Conditions: []Condition{None}, Limit: 2, Dir: dir, Comparison: pb.Comparison_COMPARISON_SOUND})
	if err == nil || !strings.Contains(err.Error(), "comparison sound") || !strings.Contains(err.Error(), "comparison harness") {
		t.Errorf("rerun with the sound comparison: %v, want a refusal naming both", err)
	}

	// A run directory of before the option: its run.json has no
	// comparison, which reads as sound.
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, RunFile), []byte(`{"corpus": "demo", "asker": "partial", "solver": "lookup", "donor_seed": 0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), s.Client.Env, Config{Oracles: det, Conditions: []Condition{None}, Limit: 1, Dir: old}); err == nil ||
		!strings.Contains(err.Error(), "comparison sound}, now") {
		t.Errorf("an old (sound) directory resumed with harness episodes: %v", err)
	}
	runOK(t, s, Config{Oracles: det, Conditions: []Condition{None}, Limit: 1, Dir: old, Comparison: pb.Comparison_COMPARISON_SOUND})
	for _, e := range readAll(t, old) {
		if e.Comparison != "sound" {
			t.Errorf("old directory: comparison %q", e.Comparison)
		}
	}

	for _, p := range []pb.Protocol{pb.Protocol_PROTOCOL_UNSPECIFIED, pb.Protocol_PROTOCOL_BIRD_C, pb.Protocol_PROTOCOL_TIDE_F} {
		cfg := Config{Dir: "x", Protocol: p}
		if err := cfg.defaults(); err != nil {
			t.Fatal(err)
		}
		if got := cfg.options(pb.OracleType_ORACLE_TYPE_DETERMINISTIC).GetComparison(); got != pb.Comparison_COMPARISON_HARNESS {
			t.Errorf("%s: options carry %s, want HARNESS", p, got)
		}
		cfg = Config{Dir: "x", Protocol: p, Comparison: pb.Comparison_COMPARISON_SOUND}
		if err := cfg.defaults(); err != nil {
			t.Fatal(err)
		}
		if got := cfg.options(pb.OracleType_ORACLE_TYPE_DETERMINISTIC).GetComparison(); got != pb.Comparison_COMPARISON_SOUND {
			t.Errorf("%s: options carry %s, want SOUND", p, got)
		}
	}
}

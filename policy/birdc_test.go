package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/llm"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// demoReadings is the demo corpus's wrong-readings fixture.
const demoReadings = "../fixtures/wrong-readings/demo.json"

func birdCOptions(patience *int32) *pb.EpisodeOptions {
	return &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C, Patience: patience}
}

func rollout(t *testing.T, srv *testutil.Server, p Player, opts *pb.EpisodeOptions) []*driver.Record {
	t.Helper()
	var notices []string
	rs, err := Rollout(context.Background(), srv.Client.Env, RolloutConfig{Player: p, Corpus: "demo", Options: opts, Concurrency: 4,
		Notice: func(s string) { notices = append(notices, s) }})
	if err != nil {
		t.Fatalf("rollout of %s: %v", p.Name(), err)
	}
	if opts.GetProtocol() == pb.Protocol_PROTOCOL_BIRD_C && (len(notices) != 1 || !strings.Contains(notices[0], "skipped")) {
		t.Errorf("notices %q: want one about the skipped tasks", notices)
	}
	return rs
}

func val(x *float64) float64 {
	if x == nil {
		return -1
	}
	return *x
}

// TestFullUnderBirdC: the scripted full policy asks each counted term
// canonically and submits the references: reward 1.0 (phase1 0.7 +
// phase2 0.3) on every demo task with a follow-up, at every patience
// BIRD-Interact used; it never asks where only SQL is accepted.
func TestFullUnderBirdC(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	for _, patience := range []int32{0, 3, 5, 7} {
		rs := rollout(t, srv, Scripted(probe.Full), birdCOptions(&patience))
		if len(rs) == 0 {
			t.Fatal("no episode")
		}
		for _, r := range rs {
			if !strings.HasPrefix(r.TaskID, "followup-") {
				t.Errorf("patience %d: task %s has no follow-up but was played", patience, r.TaskID)
			}
			if r.Status != "TERMINATED" || val(r.Reward) != 1 || val(r.Phase1) != 0.7 || val(r.Phase2) != 0.3 || r.Subtask != 2 || r.Protocol != "bird-c" {
				t.Errorf("patience %d, %s: %s %s reward %v phase1 %v phase2 %v subtask %d", patience, r.TaskID, r.Status, r.Error, val(r.Reward), val(r.Phase1), val(r.Phase2), r.Subtask)
			}
			// It asks each counted term while a question turn remains
			// (T − 1 questions at most: the last turn is the SQL's).
			want := min(r.Counted, r.TurnBudget-2) // the release added one turn
			if patience > 0 {
				want = r.Counted
			}
			if len(r.Questions) != want {
				t.Errorf("patience %d, %s: %d questions (|Amb| %d, %d turns), want %d", patience, r.TaskID, len(r.Questions), r.Counted, r.TurnBudget, want)
			}
			for _, q := range r.Questions {
				if !strings.HasPrefix(q, "Could you clarify what exactly you mean by ") {
					t.Errorf("%s: question %q is not the full policy's", r.TaskID, q)
				}
			}
		}
	}
}

// TestWrongReadingUnderBirdC: the wrong-reading policy asks like full, then
// submits another reading's SQL (again on the debug retry): phase 1 scores
// 0 and the follow-up is never released.
func TestWrongReadingUnderBirdC(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	w, err := LoadWrongReadings(demoReadings)
	if err != nil {
		t.Fatal(err)
	}
	rs := rollout(t, srv, w, birdCOptions(nil))
	full := rollout(t, srv, Scripted(probe.Full), birdCOptions(nil))
	for i, r := range rs {
		if r.Status != "TERMINATED" || val(r.Reward) != 0 || val(r.Phase1) != 0 || r.Phase2 != nil || r.Subtask != 1 {
			t.Errorf("%s: %s %s reward %v phase1 %v phase2 %v subtask %d", r.TaskID, r.Status, r.Error, val(r.Reward), val(r.Phase1), val(r.Phase2), r.Subtask)
		}
		if strings.Join(r.Questions, "|") != strings.Join(full[i].Questions, "|") {
			t.Errorf("%s: asked %q, full asked %q", r.TaskID, r.Questions, full[i].Questions)
		}
	}
	if w.Name() != WrongReadingName {
		t.Errorf("name %q", w.Name())
	}
}

// TestWrongReadingAndFullUnderAmbiTab: with the outcome reward and the
// client as solver, full submits the reference (success 1) and
// wrong-reading the wrong SQL (success 0); with the lookup solver
// wrong-reading cannot play.
func TestWrongReadingAndFullUnderAmbiTab(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	ctx := context.Background()
	env := driver.Remote(srv.Client.Env)
	w, err := LoadWrongReadings(demoReadings)
	if err != nil {
		t.Fatal(err)
	}
	client := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_CLIENT}
	for task := range w.Readings() {
		seed := uint64(0)
		reset := &pb.ResetRequest{Corpus: "demo", TaskId: task, Seed: &seed, Options: client, IncludePrivileged: true}
		if r := PlayOne(ctx, env, w, reset); r.Status != "TERMINATED" || val(r.Success) != 0 || r.Protocol != "" {
			t.Errorf("wrong-reading on %s: %s %s success %v", task, r.Status, r.Error, val(r.Success))
		}
		if r := PlayOne(ctx, env, Scripted(probe.Full), reset); r.Status != "TERMINATED" || val(r.Success) != 1 || len(r.Questions) != r.Counted {
			t.Errorf("full on %s: %s %s success %v questions %q", task, r.Status, r.Error, val(r.Success), r.Questions)
		}
		lookup := &pb.ResetRequest{Corpus: "demo", TaskId: task, Seed: &seed, IncludePrivileged: true,
			Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LOOKUP}}
		if r := PlayOne(ctx, env, w, lookup); r.Status != "ASKER_FAILED" || !strings.Contains(r.Error, "writes its own SQL") {
			t.Errorf("wrong-reading with the lookup solver: %s %s", r.Status, r.Error)
		}
	}
}

// TestWrongReadingsFile: a task missing from the file stops the rollout
// with an error naming the task and the file; a file of another corpus,
// or without SQL, is refused.
func TestWrongReadingsFile(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	b, err := os.ReadFile(demoReadings)
	if err != nil {
		t.Fatal(err)
	}
	var f ReadingsFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	var dropped string
	for id := range f.Readings {
		if dropped == "" || id < dropped {
			dropped = id
		}
	}
	delete(f.Readings, dropped)
	dir := t.TempDir()
	write := func(name string, v any) string {
		p := filepath.Join(dir, name)
		b, _ := json.Marshal(v)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	short := write("short.json", f)
	w, err := LoadWrongReadings(short)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Rollout(context.Background(), srv.Client.Env, RolloutConfig{Player: w, Corpus: "demo", Options: birdCOptions(nil)})
	if err == nil || !strings.Contains(err.Error(), dropped) || !strings.Contains(err.Error(), short) {
		t.Errorf("rollout with %s missing: %v", dropped, err)
	}
	f.Corpus = "other"
	f.Readings[dropped] = Reading{SQL: "SELECT 1"}
	other, err := LoadWrongReadings(write("other.json", f))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Rollout(context.Background(), srv.Client.Env, RolloutConfig{Player: other, Corpus: "demo", Options: birdCOptions(nil)}); err == nil || !strings.Contains(err.Error(), `"other"`) {
		t.Errorf("a file of another corpus: %v", err)
	}
	f.Readings[dropped] = Reading{}
	if _, err := LoadWrongReadings(write("empty.json", f)); err == nil || !strings.Contains(err.Error(), dropped) {
		t.Errorf("a reading without SQL: %v", err)
	}
	if _, err := LoadWrongReadings(filepath.Join(dir, "nosuch.json")); err == nil {
		t.Error("a missing file loaded")
	}
}

// TestRolloutKeepsProtocolTasks: under the TIDE protocols a rollout plays
// TIDE's samples only (under TIDE_P not the drift-only ones), and its
// notice says so.
func TestRolloutKeepsProtocolTasks(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	for p, prefix := range map[pb.Protocol]string{pb.Protocol_PROTOCOL_TIDE_F: "tide-", pb.Protocol_PROTOCOL_TIDE_P: "tide-"} {
		var notices []string
		recs, err := Rollout(context.Background(), srv.Client.Env, RolloutConfig{Player: Tide(TideAskChain, TideDriftAware), Corpus: "demo", Options: &pb.EpisodeOptions{Protocol: p}, Notice: func(s string) { notices = append(notices, s) }})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for _, r := range recs {
			if !strings.HasPrefix(r.TaskID, prefix) || (p == pb.Protocol_PROTOCOL_TIDE_P && strings.HasSuffix(r.TaskID, "-D")) {
				t.Errorf("%s played %s", p, r.TaskID)
			}
		}
		if len(notices) != 1 || !strings.Contains(notices[0], "TIDE") || strings.Contains(notices[0], "follow-up") {
			t.Errorf("%s: notices %q", p, notices)
		}
	}
}

// TestAskersUnderBirdC: an asker that writes no SQL stops, which ends the
// BIRD_C sub-task unsolved (reward 0, scored), where only SQL is accepted
// too; the LLM asker refuses BIRD_C.
func TestAskersUnderBirdC(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	for _, p := range []Player{Scripted(probe.None), Scripted(probe.NoneAdv), Partial()} {
		for _, r := range rollout(t, srv, p, birdCOptions(nil)) {
			if r.Status == "RPC_FAILED" || r.Status == "ASKER_FAILED" || val(r.Reward) != 0 || r.Subtask != 1 {
				t.Errorf("%s on %s: %s %s reward %v", p.Name(), r.TaskID, r.Status, r.Error, val(r.Reward))
			}
		}
	}
	model := newFakeModel(t, func(int, []llm.Message) (string, int) { return `{"type": "done"}`, 0 })
	a := newAsker(t, newAskerClient(t, model.URL+"/v1", nil), "")
	for _, r := range rollout(t, srv, a, birdCOptions(nil)) {
		if r.Status != "ASKER_FAILED" || !strings.Contains(r.Error, "ambitab protocol only") {
			t.Errorf("the LLM asker on %s: %s %s", r.TaskID, r.Status, r.Error)
		}
	}
}

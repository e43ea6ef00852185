package policy

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"avtgym/app"
	"avtgym/corpus/birdinteract"
	"avtgym/internal/pgtest"
	"avtgym/internal/testutil"
	"avtgym/probe"
	"avtgym/sqlexec/pytests"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// liteDir is BIRD-Interact's PostgreSQL (lite) sample, outside the
// repository.
const liteDir = "../../shared/data/birdinteract-format/lite"

// TestLitePoliciesUnderBirdC is issue 15's baseline check on the lite
// sample (PostgreSQL): under BIRD_C the scripted full policy reaches reward
// 1 on every task (each follow-up verified on the state its phase 1 left),
// and the wrong-reading policy with fixtures/wrong-readings/
// birdinteract-lite.json gets 0 for phase 1 and never sees phase 2; under
// BIRD_A (issue 16) the explorer reaches reward 1 on every task.
func TestLitePoliciesUnderBirdC(t *testing.T) {
	if _, err := os.Stat(liteDir); err != nil {
		t.Skipf("the BIRD-Interact lite sample is not at %s (it lives outside the repository): %v", liteDir, err)
	}
	url := pgtest.URL(t) // skips when no PostgreSQL server can be had
	py, err := pytests.New(pytests.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer py.Close(context.Background())
	const name = "policylite"
	out := filepath.Join(t.TempDir(), "lite")
	if _, err := birdinteract.Import(context.Background(), birdinteract.Options{In: liteDir, Out: out, Name: name, Postgres: url, PyRunner: py}); err != nil {
		t.Fatalf("import: %v", err)
	}
	srv := testutil.StartServer(t, app.Config{Corpora: []string{out}, PostgresURL: url})

	// The fixture names the importer's default corpus; this import has
	// its own name (tests share the PostgreSQL server).
	b, err := os.ReadFile("../fixtures/wrong-readings/birdinteract-lite.json")
	if err != nil {
		t.Fatal(err)
	}
	var f ReadingsFile
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	f.Corpus = name
	b, _ = json.Marshal(f)
	file := filepath.Join(t.TempDir(), "lite.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := LoadWrongReadings(file)
	if err != nil {
		t.Fatal(err)
	}

	run := func(p Player) map[string]bool {
		rs, err := Rollout(context.Background(), srv.Client.Env, RolloutConfig{Player: p, Corpus: name, Options: birdCOptions(nil), Concurrency: 4})
		if err != nil {
			t.Fatalf("%s: %v", p.Name(), err)
		}
		played := map[string]bool{}
		for _, r := range rs {
			played[r.TaskID] = true
			switch p.Name() {
			case WrongReadingName:
				if r.Status != "TERMINATED" || val(r.Reward) != 0 || val(r.Phase1) != 0 || r.Phase2 != nil || r.Subtask != 1 {
					t.Errorf("wrong-reading on %s: %s %s reward %v phase1 %v phase2 %v subtask %d", r.TaskID, r.Status, r.Error, val(r.Reward), val(r.Phase1), val(r.Phase2), r.Subtask)
				}
			default:
				if r.Status != "TERMINATED" || val(r.Reward) != 1 || val(r.Phase1) != 0.7 || val(r.Phase2) != 0.3 || r.Subtask != 2 {
					t.Errorf("full on %s: %s %s reward %v phase1 %v phase2 %v", r.TaskID, r.Status, r.Error, val(r.Reward), val(r.Phase1), val(r.Phase2))
				}
			}
		}
		return played
	}
	full := run(Scripted(probe.Full))
	wrong := run(w)
	if len(full) == 0 || len(full) != len(wrong) || len(full) != len(f.Readings) {
		t.Errorf("full played %d tasks, wrong-reading %d; the fixture has %d readings", len(full), len(wrong), len(f.Readings))
	}

	// Issue 16: under BIRD_A the explorer (each tool once, the canonical
	// questions, the references) reaches 1.0 on every task too.
	rs, err := Rollout(context.Background(), srv.Client.Env, RolloutConfig{Player: Explorer(), Corpus: name, Options: birdAOptions(nil), Concurrency: 4})
	if err != nil {
		t.Fatalf("explorer: %v", err)
	}
	for _, r := range rs {
		if r.Status != "TERMINATED" || val(r.Reward) != 1 || val(r.Phase1) != 0.7 || val(r.Phase2) != 0.3 || r.Actions["execute"] != 1 || r.Actions["get_all_knowledge_definitions"] != 1 {
			t.Errorf("explorer on %s under bird-a: %s %s reward %v phase1 %v phase2 %v actions %v", r.TaskID, r.Status, r.Error, val(r.Reward), val(r.Phase1), val(r.Phase2), r.Actions)
		}
	}
	if len(rs) != len(full) {
		t.Errorf("the explorer played %d tasks, full %d", len(rs), len(full))
	}
}

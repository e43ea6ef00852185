package birdinteract

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/pgtest"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

// harnessCase is one row of testdata/harness/cases.json: a prediction, a
// reference and conditions["order"], with BIRD-Interact's harness's
// verdict (obtained by running it: see the file's "about") and the sound
// variant's ("error": the reference fails a server limit).
type harnessCase struct {
	ID         string `json:"id"`
	Prediction string `json:"prediction"`
	Reference  string `json:"reference"`
	Order      bool   `json:"order"`
	Harness    bool   `json:"harness"`
	Sound      any    `json:"sound"`
	Note       string `json:"note"`
}

// TestHarnessCaseTable serves one PostgreSQL task per case, its comparison
// the importer's for the case's conditions (defaultComparison and
// comparison: "harness": "bird-interact"), and plays each over gRPC under
// COMPARISON_HARNESS and COMPARISON_SOUND: the episode's outcome must be
// the recorded verdict of that mode.
func TestHarnessCaseTable(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "harness", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var table struct {
		Cases []harnessCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Cases) < 60 {
		t.Fatalf("%d cases, want at least 60", len(table.Cases))
	}
	fixture, err := os.ReadFile(filepath.Join("testdata", "harness", "fixture.sql"))
	if err != nil {
		t.Fatal(err)
	}
	url := pgtest.URL(t)
	dir := t.TempDir()
	var records strings.Builder
	for _, c := range table.Cases {
		order := c.Order
		cmp := defaultComparison()
		if extra := comparison(&conditions{Order: &order}, enginePostgres); extra != nil {
			if extra.Order != "" {
				cmp.Order = extra.Order
			}
			cmp.DateOnly, cmp.CanonicalJSON = extra.DateOnly, extra.CanonicalJSON
		}
		rec := map[string]any{"id": c.ID, "db": "cranes", "request": "case " + c.ID, "ambiguities": []any{},
			"reference": map[string]any{"sql": c.Reference, "comparison": cmp}}
		b, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		records.Write(b)
		records.WriteByte('\n')
	}
	manifest := `{"name": "harnesscases", "databases": [{"id": "cranes", "engine": "postgres", "script": "cranes.sql"}]}`
	for name, body := range map[string]string{"corpus.json": manifest, "records.jsonl": records.String(), "cranes.sql": string(fixture)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := testutil.StartServer(t, app.Config{Corpora: []string{dir}, PostgresURL: url})
	env := driver.Remote(s.Client.Env)
	modes := []struct {
		name string
		cmp  pb.Comparison
		want func(harnessCase) any
	}{
		{"harness", pb.Comparison_COMPARISON_HARNESS, func(c harnessCase) any { return c.Harness }},
		{"sound", pb.Comparison_COMPARISON_SOUND, func(c harnessCase) any { return c.Sound }},
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, c := range table.Cases {
		for _, m := range modes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				got, reason := playCase(env, c.ID, m.cmp, c.Prediction)
				if want := m.want(c); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("%s under %s: got %v, want %v (%s): %s\nprediction: %q\nreference: %q", c.ID, m.name, got, want, c.Note, reason, c.Prediction, c.Reference)
				}
			}()
		}
	}
	wg.Wait()
}

// playCase resets task under comparison, stops and submits sql; it returns
// true or false (the outcome) or "error" (the step failed, or ended with
// the ERROR status), and the verifier's reason.
func playCase(env driver.Env, task string, comparison pb.Comparison, sql string) (any, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seed := uint64(1)
	ep, err := driver.Start(ctx, env, &pb.ResetRequest{TaskId: task, Seed: &seed, IncludePrivileged: true,
		Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Comparison: comparison}})
	if err != nil {
		return "error", "reset: " + err.Error()
	}
	if err := ep.Stop(ctx); err != nil {
		return "error", "stop: " + err.Error()
	}
	if err := ep.SubmitSQL(ctx, sql); err != nil {
		return "error", "submit: " + err.Error()
	}
	last := ep.Last()
	reason := last.GetPrivileged().GetVerifierReason()
	if last.GetStatus() == pb.EpisodeStatus_EPISODE_STATUS_ERROR {
		return "error", reason
	}
	v, ok := last.GetReward().GetComponents()["outcome"]
	if !ok {
		return "error", "no outcome: " + reason
	}
	return v == 1, reason
}

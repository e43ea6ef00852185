package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/internal/testutil"
)

// TestReverify: records replayed on the server that played them come out
// the same; replayed on a corpus whose reference changed, the affected
// task's reward drops and the corpus change is reported; a record whose
// saved reward was forged is re-scored from its actions, not believed.
func TestReverify(t *testing.T) {
	srvA := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}})
	dir := t.TempDir()
	recs := filepath.Join(dir, "full.jsonl")
	if code, _, stderr := runCmd(t, "rollout", "--server", srvA.Addr, "--policy", "full", "--reward", "outcome", "--solver", "client", "--episodes-out", recs); code != 0 {
		t.Fatalf("rollout: exit %d: %s", code, stderr)
	}
	reverifyJSON := func(addr string, paths ...string) map[string]any {
		t.Helper()
		code, stdout, stderr := runCmd(t, append([]string{"reverify", "--server", addr, "--json"}, paths...)...)
		if code != 0 {
			t.Fatalf("reverify: exit %d: %s", code, stderr)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("reverify --json: %v\n%s", err, stdout)
		}
		return doc
	}
	same := reverifyJSON(srvA.Addr, recs)
	if n := same["records"].(float64); n != 5 || same["outcomes"].(map[string]any)["same"].(float64) != 5 || len(same["changed"].([]any)) != 0 || same["corpus_changed"].(float64) != 0 {
		t.Fatalf("on the same server: %v", same)
	}

	// The reference of "count" is wrong now (or was wrong then).
	srvB := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t, func(f map[string]string) {
		f["records.jsonl"] = strings.Replace(f["records.jsonl"], `"sql":"SELECT COUNT(*) FROM sales"`, `"sql":"SELECT COUNT(*) + 1 FROM sales"`, 1)
	})}})
	moved := reverifyJSON(srvB.Addr, recs)
	changed := moved["changed"].([]any)
	if len(changed) != 1 || moved["corpus_changed"].(float64) != 5 {
		t.Fatalf("on the changed corpus: %v", moved)
	}
	c := changed[0].(map[string]any)
	if c["task_id"] != "count" || c["outcome"] != "down" || c["old_reward"].(float64) != 1 || c["new_reward"].(float64) != 0 {
		t.Fatalf("the changed record: %v", c)
	}
	_, text, _ := runCmd(t, "reverify", "--server", srvB.Addr, recs)
	if !strings.Contains(text, "4 same, 0 up, 1 down") || !strings.Contains(text, "another version of the corpus") {
		t.Errorf("the text summary:\n%s", text)
	}

	// A forged record: the saved reward says 1, the SQL it holds is wrong.
	b, _ := os.ReadFile(recs)
	var forged []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if strings.Contains(line, `"task_id":"count"`) {
			line = strings.Replace(line, `"text":"SELECT COUNT(*) FROM sales"`, `"text":"SELECT 1"`, 1)
			if !strings.Contains(line, `"text":"SELECT 1"`) || !strings.Contains(line, `"reward":1`) {
				t.Fatalf("the record to forge: %s", line)
			}
			forged = append(forged, line)
		}
	}
	bad := filepath.Join(dir, "forged.jsonl")
	if err := os.WriteFile(bad, []byte(strings.Join(forged, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := reverifyJSON(srvA.Addr, bad)
	if ch := got["changed"].([]any); len(ch) != 1 || ch[0].(map[string]any)["new_reward"].(float64) != 0 {
		t.Fatalf("the forged record was believed: %v", got)
	}

	// Input errors name the file and line.
	torn := filepath.Join(dir, "torn.jsonl")
	os.WriteFile(torn, []byte(`{"schema":"avtgym.episode/1"`+"\n"), 0o644)
	if code, _, stderr := runCmd(t, "reverify", "--server", srvA.Addr, torn); code != 1 || !strings.Contains(stderr, "torn.jsonl:1") {
		t.Errorf("a torn record: exit %d, %q", code, stderr)
	}
	if code, _, _ := runCmd(t, "reverify"); code != 2 {
		t.Errorf("no records: exit %d, want 2", code)
	}
}

// TestReverifyEveryProtocol: a client-side record of every protocol replays
// to the same score on the server that played it (BIRD_A's tool calls read
// back from their text).
func TestReverifyEveryProtocol(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	dir := t.TempDir()
	for _, tc := range []struct{ protocol, policy string }{
		{"bird-c", "full"}, {"bird-a", "explorer"}, {"tide-f", "chain-aware"}, {"tide-p", "chain-blind"},
	} {
		out := filepath.Join(dir, tc.protocol+".jsonl")
		if code, _, stderr := runCmd(t, "rollout", "--server", srv.Addr, "--protocol", tc.protocol, "--policy", tc.policy, "--limit", "3", "--episodes-out", out); code != 0 {
			t.Fatalf("%s rollout: exit %d: %s", tc.protocol, code, stderr)
		}
		code, stdout, stderr := runCmd(t, "reverify", "--server", srv.Addr, out)
		if code != 0 || !strings.Contains(stdout, "replayed 3 records: 3 same") {
			t.Errorf("%s: exit %d\n%s%s", tc.protocol, code, stdout, stderr)
		}
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/eval"
	"avtgym/internal/buildinfo"
	"avtgym/internal/testutil"
	"avtgym/schema"
)

// validateFile checks every line of a record file against
// schema/episode.v1.json and returns the records as maps.
func validateFile(t *testing.T, name string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schema.ValidateLines(filepath.Base(name), bytes.NewReader(b)); err != nil {
		t.Fatalf("a record outside the schema: %v", err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// TestEveryWriterWritesTheOneSchema: rollout --episodes-out (under every
// protocol), eval's episodes.jsonl and serve --episode-log write records
// that the one schema accepts, with the status spelled one way, the
// trainer's tags, and the episode uid; and the server's line of an
// episode is the same episode as the client's record of it (uid, tags,
// status, reward).
func TestEveryWriterWritesTheOneSchema(t *testing.T) {
	logDir := t.TempDir()
	srv := testutil.StartServer(t, app.Config{EpisodeLog: logDir})
	dir := t.TempDir()
	clientSide := map[string]map[string]any{} // by uid
	for _, tc := range []struct{ protocol, policy string }{
		{"ambitab", "full"}, {"bird-c", "full"}, {"bird-a", "explorer"}, {"tide-f", "chain-aware"}, {"tide-p", "chain-aware"},
	} {
		out := filepath.Join(dir, tc.protocol+".jsonl")
		code, _, stderr := runCmd(t, "rollout", "--server", srv.Addr, "--protocol", tc.protocol, "--policy", tc.policy, "--limit", "2",
			"--tag", "run=r-1", "--tag", "trainer/step=3", "--episodes-out", out)
		if code != 0 {
			t.Fatalf("%s rollout: exit %d: %s", tc.protocol, code, stderr)
		}
		recs := validateFile(t, out)
		if len(recs) != 2 {
			t.Fatalf("%s: %d records, want 2", tc.protocol, len(recs))
		}
		for _, r := range recs {
			tags, _ := r["tags"].(map[string]any)
			if r["writer"] != "rollout" || r["status"] != "TERMINATED" || tags["run"] != "r-1" || tags["trainer/step"] != "3" {
				t.Errorf("%s: record %v: writer %v status %v tags %v", tc.protocol, r["episode_id"], r["writer"], r["status"], r["tags"])
			}
			if srvInfo, _ := r["server"].(map[string]any); srvInfo["corpus_hash"] == nil || srvInfo["version"] == nil {
				t.Errorf("%s: record %v names no server or corpus hash: %v", tc.protocol, r["episode_id"], r["server"])
			}
			if turns := r["turns"].([]any); len(turns) < 2 {
				t.Errorf("%s: record %v has %d turns", tc.protocol, r["episode_id"], len(turns))
			}
			clientSide[r["episode_uid"].(string)] = r
		}
	}
	evalDir := filepath.Join(dir, "eval")
	if code, _, stderr := runCmd(t, "eval", "--server", srv.Addr, "--out", evalDir, "--limit", "2", "--seeds", "0", "--tag", "run=e-1", "--resamples", "20", "--quiet"); code != 0 {
		t.Fatalf("eval: exit %d: %s", code, stderr)
	}
	evalRecs := validateFile(t, filepath.Join(evalDir, eval.EpisodesFile))
	for _, r := range evalRecs {
		if r["writer"] != "eval" || r["condition"] == nil || r["tags"].(map[string]any)["run"] != "e-1" {
			t.Errorf("eval record %v: writer %v condition %v tags %v", r["episode_id"], r["writer"], r["condition"], r["tags"])
		}
		clientSide[r["episode_uid"].(string)] = r
	}

	files, _ := filepath.Glob(filepath.Join(logDir, "episodes-*.jsonl"))
	var served []map[string]any
	for _, f := range files {
		served = append(served, validateFile(t, f)...)
	}
	// Eval's pre-flight plays episodes of its own, without the run's tags.
	if len(served) < len(clientSide) {
		t.Fatalf("the episode log holds %d lines, the clients recorded %d episodes", len(served), len(clientSide))
	}
	matched := 0
	for _, l := range served {
		if l["writer"] != "serve" {
			t.Fatalf("a log line written by %v", l["writer"])
		}
		c, ok := clientSide[l["episode_uid"].(string)]
		if !ok {
			continue
		}
		matched++
		if l["episode_id"] != c["episode_id"] || l["status"] != c["status"] || l["reward"] != c["reward"] || !sameTags(l["tags"], c["tags"]) {
			t.Errorf("episode %v: the log says id %v status %v reward %v tags %v; the %v record id %v status %v reward %v tags %v",
				l["episode_uid"], l["episode_id"], l["status"], l["reward"], l["tags"], c["writer"], c["episode_id"], c["status"], c["reward"], c["tags"])
		}
	}
	if matched != len(clientSide) {
		t.Fatalf("%d of the %d recorded episodes are in the episode log", matched, len(clientSide))
	}
}

func sameTags(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// replayableLines is a record file's lines without what differs between a
// run and its replay by nature (driver.Record.Replayable: the uid drawn at
// each reset, the clock, the server build), sorted: records are appended as
// episodes finish.
func replayableLines(t *testing.T, b []byte) []byte {
	t.Helper()
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a line that is not JSON: %v: %.200s", err, line)
		}
		for _, k := range []string{"episode_uid", "started_at", "finished_at", "duration_ms", "server"} {
			delete(m, k)
		}
		out, err := json.Marshal(m) // maps marshal with sorted keys
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(out))
	}
	sort.Strings(lines)
	return []byte(strings.Join(lines, "\n"))
}

// TestTagFlag: --tag takes KEY=VALUE once per key; the server's bounds
// are its to check, and a tag outside them fails the run naming the field.
func TestTagFlag(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	for _, bad := range []string{"novalue", "=v", "k=1 --tag k=2"} {
		args := []string{"rollout", "--server", srv.Addr, "--policy", "none", "--limit", "1"}
		for _, a := range strings.Split(bad, " --tag ") {
			args = append(args, "--tag", a)
		}
		if code, _, stderr := runCmd(t, args...); code != 2 || !strings.Contains(stderr, "-tag") {
			t.Errorf("--tag %s: exit %d, stderr %q; want a usage error", bad, code, stderr)
		}
	}
	code, _, stderr := runCmd(t, "rollout", "--server", srv.Addr, "--policy", "none", "--limit", "1", "--tag", "run id=x")
	if code == 0 || !strings.Contains(stderr, "tags") {
		t.Errorf("a key with a space: exit %d, stderr %q; want the server's refusal naming tags", code, stderr)
	}
}

// TestPostgresPasswordNeverInUsage: -h and a mistyped flag print the
// usage, and a pod's log keeps it; the --postgres default from
// $AVTGYM_POSTGRES_URL shows there with its password masked.
func TestPostgresPasswordNeverInUsage(t *testing.T) {
	t.Setenv("AVTGYM_POSTGRES_URL", "postgres://admin:TOPSECRET@db.internal:5432/postgres")
	for _, args := range [][]string{
		{"serve", "-h"}, {"serve", "--no-such-flag"}, {"probe", "-h"},
		{"corpus", "check", "-h"}, {"corpus", "validate", "--bogus"}, {"corpus", "import", "birdinteract", "-h"},
	} {
		_, stdout, stderr := runCmd(t, args...)
		if strings.Contains(stdout+stderr, "TOPSECRET") {
			t.Errorf("%v prints the password", args)
		}
		if !strings.Contains(stdout+stderr, "postgres://admin:xxxxx@db.internal:5432/postgres") {
			t.Errorf("%v: the masked default is not shown:\n%s", args, stderr)
		}
	}
}

// TestVersion: --version prints the build the records and ListCorpora
// name.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "version"} {
		code, stdout, _ := runCmd(t, arg)
		if code != 0 || strings.TrimSpace(stdout) != "avtgym "+buildinfo.Version() || buildinfo.Version() == "" {
			t.Errorf("%s: exit %d, %q", arg, code, stdout)
		}
	}
}

package viewer

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/schema"
)

func TestSynthRecordsAreSchemaValid(t *testing.T) {
	for variant := range 2 {
		for _, i := range []int{0, 1, 7, 23, 101, 999, 4321} {
			e := synthEpisode(variant, i)
			b, err := json.Marshal(&e)
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.ValidateRecord(b); err != nil {
				t.Fatalf("variant %d episode %d: %v\n%s", variant, i, err, b)
			}
		}
	}
}

func TestLoadRunKinds(t *testing.T) {
	dir := t.TempDir()
	eps := writeSynthRun(t, filepath.Join(dir, "evalrun", "episodes.jsonl"), 0, 40, true)
	writeSynthRun(t, filepath.Join(dir, "rollout.jsonl"), 0, 15, false)
	for _, tc := range []struct {
		path, name, kind string
		n                int
	}{
		{filepath.Join(dir, "evalrun"), "evalrun", KindEvalRun, 40},
		{filepath.Join(dir, "evalrun") + "/", "evalrun", KindEvalRun, 40},
		{filepath.Join(dir, "rollout.jsonl"), "rollout", KindRecordFile, 15},
	} {
		r, err := LoadRun(context.Background(), tc.path, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if r.Name != tc.name || r.Kind != tc.kind || len(r.Episodes) != tc.n {
			t.Errorf("%s: got name %q kind %q %d episodes, want %q %q %d", tc.path, r.Name, r.Kind, len(r.Episodes), tc.name, tc.kind, tc.n)
		}
		r.Close()
	}
	r, err := LoadRun(context.Background(), filepath.Join(dir, "evalrun"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i, s := range r.Episodes {
		e := eps[i]
		if s.TaskID != e.TaskID || s.Seed != e.Seed || s.Condition != string(e.Condition) || int(s.Questions) != len(e.Questions) || s.Status != e.Status || !s.Privileged {
			t.Fatalf("episode %d summary %+v does not match its record", i, s)
		}
		if v, _ := s.Tag(synthStepTagKey); v != e.Tags[synthStepTagKey] {
			t.Fatalf("episode %d: tag %q, want %q", i, v, e.Tags[synthStepTagKey])
		}
		full, _, err := r.Record(i)
		if err != nil {
			t.Fatal(err)
		}
		if full.EpisodeUID != e.EpisodeUID || len(full.Turns) != len(e.Turns) {
			t.Fatalf("episode %d read back differs", i)
		}
	}
}

func TestLoadRunNamesTheBadLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.jsonl")
	writeSynthRun(t, path, 0, 30, false)
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	for _, tc := range []struct {
		name, line, want string
	}{
		{"not JSON", "{\"schema\": \n", "bad.jsonl:13:"},
		{"schema", `{"schema":"avtgym.episode/1","task_id":"x"}` + "\n", "bad.jsonl:13: not an episode record"},
	} {
		mod := append(append(append([]string{}, lines[:12]...), tc.line), lines[12:]...)
		if err := os.WriteFile(path, []byte(strings.Join(mod, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadRun(context.Background(), path, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	// Two bad lines several batches in: the first is named, whichever
	// worker finds its batch's error first.
	big := filepath.Join(dir, "big.jsonl")
	writeSynthRun(t, big, 0, 3000, false)
	b, _ = os.ReadFile(big)
	lines = strings.SplitAfter(string(b), "\n")
	lines[2499], lines[2899] = "{}\n", "nope\n"
	os.WriteFile(big, []byte(strings.Join(lines, "")), 0o644)
	if _, err := LoadRun(context.Background(), big, nil); err == nil || !strings.Contains(err.Error(), "big.jsonl:2500:") {
		t.Errorf("two bad lines: %v, want big.jsonl:2500", err)
	}
	if _, err := LoadRun(context.Background(), dir+"/nothing", nil); err == nil {
		t.Error("a missing path loaded")
	}
	empty := t.TempDir()
	if _, err := LoadRun(context.Background(), empty, nil); err == nil || !strings.Contains(err.Error(), "episodes-*.jsonl") {
		t.Errorf("an empty directory: %v", err)
	}
}

// An episode log keeps one record per key: the last line of each key.
func TestLoadRunEpisodeLogKeepsLastLinePerKey(t *testing.T) {
	dir := t.TempDir()
	var first, second []string
	for i := range 6 {
		e := synthEpisode(0, i)
		line := struct {
			*FullRecord
		}{&FullRecord{Record: e.Record, Key: e.EpisodeUID + "#" + strings.Repeat("a", 32), Replica: "r1", Principal: "trainer"}}
		b, _ := json.Marshal(line)
		first = append(first, string(b))
		if i%2 == 0 { // the same key again, with another status, in a later file
			line.Status, line.Reward, line.F1, line.Success, line.Precision, line.Recall = "ERROR", nil, nil, nil, nil, nil
			b, _ = json.Marshal(line)
			second = append(second, string(b))
		}
	}
	os.WriteFile(filepath.Join(dir, "episodes-r1-20260101T000000Z-0001.jsonl"), []byte(strings.Join(first, "\n")+"\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "episodes-r1-20260101T000000Z-0002.jsonl"), []byte(strings.Join(second, "\n")+"\n"), 0o644)
	r, err := LoadRun(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Kind != KindEpisodeLog || len(r.Episodes) != 6 || r.Superseded != 3 || len(r.Files) != 2 {
		t.Fatalf("kind %q, %d episodes, %d superseded, %d files", r.Kind, len(r.Episodes), r.Superseded, len(r.Files))
	}
	for i, s := range r.Episodes {
		want := "TERMINATED"
		if i%2 == 0 {
			want = "ERROR"
		}
		if e := synthEpisode(0, i); e.Status != "TERMINATED" && e.Status != "TRUNCATED" {
			want = e.Status
		}
		if (s.Status == "ERROR") != (want == "ERROR") {
			t.Errorf("episode %d: status %s, want %s", i, s.Status, want)
		}
		rec, _, err := r.Record(i)
		if err != nil || rec.Principal != "trainer" || rec.Key == "" {
			t.Errorf("episode %d read back: %+v %v", i, rec, err)
		}
	}
}

func TestArrayLen(t *testing.T) {
	for in, want := range map[string]int{`[]`: 0, ` [ ] `: 0, `["a"]`: 1, `["a,b", "c\"]", ""]`: 3, `["\\", ","]`: 2, `null`: 0} {
		var n arrayLen
		if err := n.UnmarshalJSON([]byte(in)); err != nil || int(n) != want {
			t.Errorf("%s: %d, %v; want %d", in, n, err, want)
		}
	}
}

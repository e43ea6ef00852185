package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"avtgym/sqlexec/sqlite"
)

// tideFixture copies the synthetic TIDE samples of package corpus/tide
// (one anchor, three samples) into a temporary input folder, each line
// passed through edit when given, and builds their databases into a
// temporary databases folder (<id>/<id>.sqlite).
func tideFixture(t *testing.T, edit func(line map[string]any)) (in, dbs string) {
	t.Helper()
	src := filepath.Join("..", "..", "corpus", "tide", "testdata", "synthetic")
	root := t.TempDir()
	in, dbs = filepath.Join(root, "in"), filepath.Join(root, "dbs")
	b, err := os.ReadFile(filepath.Join(src, "samples.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			edit(m)
			nl, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(nl))
		}
		b = []byte(strings.Join(out, "\n") + "\n")
	}
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, "samples.jsonl"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"venue", "spare"} {
		script, err := os.ReadFile(filepath.Join(src, "dbs", id, id+".sql"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dbs, id), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := sqlite.BuildFromScript(context.Background(), string(script), filepath.Join(dbs, id, id+".sqlite")); err != nil {
			t.Fatal(err)
		}
	}
	return in, dbs
}

// TestImportTide: `corpus import tide` writes the synthetic samples as a
// corpus that `corpus check` passes, chain_drift included, with progress
// on stderr; --quiet silences it.
func TestImportTide(t *testing.T) {
	in, dbs := tideFixture(t, nil)
	out := filepath.Join(t.TempDir(), "tide")
	code, stdout, stderr := runCmd(t, "corpus", "import", "tide", "--in", in, "--dbs", dbs, "--out", out)
	if code != 0 {
		t.Fatalf("import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"samples: 3 (chain_only 1, drift_only 1, joint 1) from 1 anchor(s); one record each",
		"drift subtypes: value 2",
		"databases: venue\n",
		`comparison: order "set"`,
		"the corpus loads: 3 record(s), every reference and post-drift reference runs, and it passes its checks",
		`wrote corpus "tide" to ` + out,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the summary lacks %q:\n%s", want, stdout)
		}
	}
	for _, want := range []string{"tide: 3/3 samples read", "tide: 3/3 records loaded (references run)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks the progress line %q:\n%s", want, stderr)
		}
	}
	code, stdout, stderr = runCmd(t, "corpus", "check", out)
	if code != 0 || !strings.Contains(stdout, "PASS") || !regexp.MustCompile(`(?m)^chain_drift\s+3\s+3\s+0\s+0$`).MatchString(stdout) {
		t.Errorf("corpus check: exit %d\n%s\n%s", code, stdout, stderr)
	}
	out2 := filepath.Join(t.TempDir(), "quiet")
	if code, _, stderr := runCmd(t, "corpus", "import", "tide", "--in", in, "--dbs", dbs, "--out", out2, "--quiet"); code != 0 || stderr != "" {
		t.Errorf("--quiet: exit %d, stderr %q", code, stderr)
	}
}

// TestImportTideShared imports ../shared/data/tide-format on AmbiQT's
// Spider databases and audits it with `corpus check`.
func TestImportTideShared(t *testing.T) {
	in := filepath.Join("..", "..", "..", "shared", "data", "tide-format")
	dbs := filepath.Join("..", "..", "..", "shared", "data", "ambiqt", "spider_dbs")
	for _, p := range []string{filepath.Join(in, "samples.jsonl"), filepath.Join(dbs, "car_1", "car_1.sqlite")} {
		if _, err := os.Stat(p); err != nil {
			msg := "the TIDE samples or the Spider databases are missing (%v): this test needs ../shared/data next to the repository"
			if os.Getenv("CI") != "" {
				t.Fatalf(msg, err)
			}
			t.Skipf(msg, err)
		}
	}
	out := filepath.Join(t.TempDir(), "tide")
	code, stdout, stderr := runCmd(t, "corpus", "import", "tide", "--in", in, "--dbs", dbs, "--out", out, "--quiet")
	if code != 0 || !strings.Contains(stdout, "samples: 18 (chain_only 6, drift_only 6, joint 6) from 6 anchor(s)") ||
		!strings.Contains(stdout, "databases: car_1, concert_singer, pets_1, world_1\n") {
		t.Fatalf("import: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, stderr = runCmd(t, "corpus", "check", out)
	if code != 0 || !strings.Contains(stdout, `corpus "tide": 18 records, 18 AVTs: PASS`) || !regexp.MustCompile(`(?m)^chain_drift\s+18\s+18\s+0\s+0$`).MatchString(stdout) {
		t.Errorf("corpus check: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// TestImportTideFails: malformed samples, and samples whose assets fail
// the chain_drift check, exit 1 with file:line: instance_id: field:
// problems, and nothing is written; a usage error exits 2.
func TestImportTideFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		want []string
	}{
		{"a chain_only sample with a drift", func(m map[string]any) {
			if m["sample_type"] == "chain_only" {
				m["drift_utterance"] = "Actually, 2015."
			}
		}, []string{"samples.jsonl:1: instance_id a01-C: drift_utterance: must be null in a chain_only sample"}},
		{"an unknown field", func(m map[string]any) { m["L1_alt_sql"] = m["l1_alt_sql"] },
			[]string{"samples.jsonl:1: instance_id a01-C: L1_alt_sql: unknown field", "samples.jsonl:3: instance_id a01-J: L1_alt_sql: unknown field"}},
		{"an alternative SQL equal to the anchor", func(m map[string]any) {
			if m["l1_alt_sql"] != nil {
				m["l1_alt_sql"] = m["anchor_sql"]
			}
		}, []string{
			`samples.jsonl:1: instance_id a01-C: l1_alt_sql: chain_drift: the SQL under the other reading of "crowds" gives the reference's result`,
			`samples.jsonl:3: instance_id a01-J: l1_alt_sql: chain_drift: the SQL under the other reading of "crowds" gives the reference's result`,
		}},
		{"a wrong drift subtype", func(m map[string]any) {
			if m["drift_subtype"] != nil {
				m["drift_subtype"] = "constraint"
			}
		}, []string{`samples.jsonl:2: instance_id a01-D: drift_subtype: chain_drift: declares "constraint", but Algorithm 1 computes "value"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, dbs := tideFixture(t, tc.edit)
			out := filepath.Join(t.TempDir(), "tide")
			code, stdout, stderr := runCmd(t, "corpus", "import", "tide", "--in", in, "--dbs", dbs, "--out", out, "--quiet")
			if code != 1 || !strings.Contains(stderr, "nothing was written to "+out) {
				t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, filepath.Join(in, w)) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("--out was written: %v", err)
			}
		})
	}
	if code, _, stderr := runCmd(t, "corpus", "import", "tide", "--in", "x", "--out", "y"); code != 2 || !strings.Contains(stderr, "--dbs DIR") {
		t.Errorf("no --dbs: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd(t, "corpus", "import", "tide", "-h"); code != 0 || !strings.Contains(stderr, "-dbs") {
		t.Errorf("-h: exit %d, stderr %q", code, stderr)
	}
	if code, stdout, _ := runCmd(t, "corpus", "-h"); code != 0 || !strings.Contains(stdout, "avtgym corpus import tide --in DIR --dbs DIR --out DIR") {
		t.Errorf("corpus -h: exit %d, stdout %q", code, stdout)
	}
}

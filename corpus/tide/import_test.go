package tide

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/sqlexec/sqlite"
)

// The TIDE format folder of ../shared/data and the Spider databases its
// samples use, seen from this package.
const (
	sharedTide   = "../../../shared/data/tide-format"
	sharedSpider = "../../../shared/data/ambiqt/spider_dbs"
)

// fixture writes the synthetic samples (testdata/synthetic: one anchor,
// three samples, on the venue database) to a temporary input folder, with
// each line passed through edit when given, and builds the databases of
// testdata/synthetic/dbs into a temporary databases folder
// (<id>/<id>.sqlite).
func fixture(t *testing.T, edit func(lines []map[string]any) []map[string]any) (in, dbs string) {
	t.Helper()
	src := filepath.Join("testdata", "synthetic")
	root := t.TempDir()
	in, dbs = filepath.Join(root, "in"), filepath.Join(root, "dbs")
	b, err := os.ReadFile(filepath.Join(src, SamplesFile))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		var lines []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, m)
		}
		var out []string
		for _, m := range edit(lines) {
			l, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, string(l))
		}
		b = []byte(strings.Join(out, "\n") + "\n")
	}
	writeSamples(t, in, string(b))
	ents, err := os.ReadDir(filepath.Join(src, "dbs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		script, err := os.ReadFile(filepath.Join(src, "dbs", e.Name(), e.Name()+".sql"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dbs, e.Name()), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := sqlite.BuildFromScript(context.Background(), string(script), filepath.Join(dbs, e.Name(), e.Name()+".sqlite")); err != nil {
			t.Fatal(err)
		}
	}
	return in, dbs
}

func writeSamples(t *testing.T, in, text string) {
	t.Helper()
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(in, SamplesFile), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readRecords(t *testing.T, dir string) []corpus.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	var out []corpus.Record
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		dec := json.NewDecoder(strings.NewReader(l))
		dec.DisallowUnknownFields()
		var r corpus.Record
		if err := dec.Decode(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestTideImportSynthetic: the three samples of one anchor become three
// records with the documented mapping (L1 before L2, L2 depending on L1,
// the anchor as cluster, the meta fields verbatim), the manifest compares
// as sets and lists only the database the samples use, and the corpus
// loads.
func TestTideImportSynthetic(t *testing.T) {
	in, dbs := fixture(t, nil)
	out := filepath.Join(t.TempDir(), "out")
	var stages []string
	sum, err := Import(context.Background(), Options{In: in, DBs: dbs, Out: out, Progress: func(stage string, done, total int) {
		if done == total {
			stages = append(stages, stage)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Samples != 3 || sum.Anchors != 1 || !slices.Equal(sum.Databases, []string{"venue"}) || sum.BySubtype["value"] != 2 ||
		sum.ByType[corpus.SampleChainOnly] != 1 || sum.ByType[corpus.SampleDriftOnly] != 1 || sum.ByType[corpus.SampleJoint] != 1 {
		t.Errorf("summary %+v", sum)
	}
	if !slices.Equal(stages, []string{"samples", "records"}) {
		t.Errorf("progress stages %q", stages)
	}
	var m corpus.Manifest
	b, err := os.ReadFile(filepath.Join(out, corpus.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Name != "tide" || m.Defaults.Comparison == nil || m.Defaults.Comparison.Order != "set" || len(m.Databases) != 1 ||
		m.Databases[0].ID != "venue" || m.Databases[0].Engine != "sqlite" || m.Databases[0].Path != "dbs/venue/venue.sqlite" {
		t.Errorf("manifest %s", b)
	}
	if _, err := os.Stat(filepath.Join(out, "dbs", "spare")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unused database was copied: %v", err)
	}

	recs := readRecords(t, out)
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	c, j, d := recs[0], recs[2], recs[1]
	for i, r := range recs {
		id := []string{"a01-C", "a01-D", "a01-J"}[i]
		if r.ID != id || r.AVTID != id || r.Cluster != "a01" || r.DB != "venue" || r.Source == nil || r.Source.Dataset != "tide" || r.Source.ID != id ||
			!strings.HasPrefix(r.Evidence, "Each concert") || len(r.Reference.SQL) != 1 || !strings.Contains(r.Reference.SQL[0], "'2014'") {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	if c.SampleType != "chain_only" || c.Drift != nil || len(c.Ambiguities) != 2 || c.Interpretation != "how many people actually came / the typical crowd (average attendance)" {
		t.Errorf("chain_only: %+v", c)
	}
	l1, l2 := j.Ambiguities[0], j.Ambiguities[1]
	if l1.Term != "crowds" || l1.Kind != corpus.Critical || l1.DependsOn != "" || !strings.HasPrefix(l1.Resolution, "I mean how many people") ||
		!strings.HasPrefix(l1.Question, "By crowd size") || len(l1.Options) != 2 || l1.Chosen != "how many people actually came" || !strings.Contains(l1.AlternativeSQL, "s.capacity") {
		t.Errorf("L1: %+v", l1)
	}
	if l2.Term != "attendance" || l2.DependsOn != "crowds" || l2.Resolution != "The typical crowd, so the average attendance." ||
		!strings.HasPrefix(l2.Question, "For attendance") || l2.Chosen != "the typical crowd (average attendance)" || !strings.Contains(l2.AlternativeSQL, "s.highest") {
		t.Errorf("L2: %+v", l2)
	}
	if d.SampleType != "drift_only" || len(d.Ambiguities) != 0 || d.Interpretation != "original question" || d.Request != "What is the average attendance of each stadium that hosted a concert in 2014?" {
		t.Errorf("drift_only: %+v", d)
	}
	for _, r := range []corpus.Record{d, j} {
		if r.Drift == nil || !strings.HasPrefix(r.Drift.Utterance, "Wait, I got the year wrong") || r.Drift.Subtype != "value" || r.Drift.IntentSubtype != "" ||
			len(r.Drift.Reference.SQL) != 1 || !strings.Contains(r.Drift.Reference.SQL[0], "'2015'") {
			t.Errorf("%s drift: %+v", r.ID, r.Drift)
		}
	}
	metaKeys := func(r corpus.Record) []string {
		var ks []string
		for k := range r.Source.Meta {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	chainMeta := []string{"L1_alternative_sql_impact", "L2_alternative_sql_impact", "chain_rationale", "counterfactual_verdict"}
	driftMeta := []string{"drift_rationale", "post_commitments_narrative", "pre_commitments_narrative"}
	common := []string{"complexity_tier", "original_question", "target_sqls"}
	sorted := func(ss ...[]string) []string {
		out := slices.Concat(ss...)
		slices.Sort(out)
		return out
	}
	for _, w := range []struct {
		r    corpus.Record
		want []string
	}{{c, sorted(common, chainMeta)}, {d, sorted(common, driftMeta)}, {j, sorted(common, chainMeta, driftMeta)}} {
		if got := metaKeys(w.r); !slices.Equal(got, w.want) {
			t.Errorf("%s: meta keys %q, want %q", w.r.ID, got, w.want)
		}
	}
	var targets []string
	if err := json.Unmarshal(j.Source.Meta["target_sqls"], &targets); err != nil || len(targets) != 2 || targets[0] != j.Reference.SQL[0] || targets[1] != j.Drift.Reference.SQL[0] {
		t.Errorf("joint target_sqls meta %s: %v", j.Source.Meta["target_sqls"], err)
	}

	co, err := corpus.LoadDir(context.Background(), out, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if len(co.Tasks) != 3 || co.AVTCount() != 3 {
		t.Errorf("loaded %d tasks, %d AVTs", len(co.Tasks), co.AVTCount())
	}
	for _, tk := range co.Tasks {
		if tk.ClusterID() != "a01" {
			t.Errorf("%s: cluster %q", tk.ID, tk.ClusterID())
		}
	}
}

// TestTideImportShared: the 18 samples of ../shared/data/tide-format on the
// Spider databases import as 18 records of 6 clusters that load; only the
// four databases they use are copied.
func TestTideImportShared(t *testing.T) {
	in, dbs := sharedData(t)
	out := filepath.Join(t.TempDir(), "tide")
	sum, err := Import(context.Background(), Options{In: in, DBs: dbs, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Samples != 18 || sum.Anchors != 6 || !slices.Equal(sum.Databases, []string{"car_1", "concert_singer", "pets_1", "world_1"}) {
		t.Errorf("summary %+v", sum)
	}
	ents, err := os.ReadDir(filepath.Join(out, DBsDir))
	if err != nil || len(ents) != 4 {
		t.Errorf("%d databases copied (%v), want 4", len(ents), err)
	}
	c, err := corpus.LoadDir(context.Background(), out, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	clusters := map[string]int{}
	for _, tk := range c.Tasks {
		clusters[tk.ClusterID()]++
	}
	if len(c.Tasks) != 18 || c.AVTCount() != 18 || len(clusters) != 6 {
		t.Errorf("%d tasks, %d AVTs, clusters %v", len(c.Tasks), c.AVTCount(), clusters)
	}
}

// sharedData returns the shared TIDE folder and the Spider databases, or
// skips the test with a message when they are absent (CI has them).
func sharedData(t *testing.T) (in, dbs string) {
	t.Helper()
	for _, p := range []string{filepath.Join(sharedTide, SamplesFile), filepath.Join(sharedSpider, "car_1", "car_1.sqlite")} {
		if _, err := os.Stat(p); err != nil {
			msg := "the TIDE samples or the Spider databases are missing (%v): this test needs ../shared/data next to the repository"
			if os.Getenv("CI") != "" {
				t.Fatalf(msg, err)
			}
			t.Skipf(msg, err)
		}
	}
	return sharedTide, sharedSpider
}

// line returns the sample of the fixture of the given type.
func byType(lines []map[string]any, st string) map[string]any {
	for _, l := range lines {
		if l["sample_type"] == st {
			return l
		}
	}
	panic("no " + st)
}

// TestTideImportRejects: every class of malformed input is a problem naming
// the file, the line and the field, and nothing is written.
func TestTideImportRejects(t *testing.T) {
	set := func(st, field string, v any) func([]map[string]any) []map[string]any {
		return func(ls []map[string]any) []map[string]any { byType(ls, st)[field] = v; return ls }
	}
	del := func(st, field string) func([]map[string]any) []map[string]any {
		return func(ls []map[string]any) []map[string]any { delete(byType(ls, st), field); return ls }
	}
	all := func(field string, v any) func([]map[string]any) []map[string]any {
		return func(ls []map[string]any) []map[string]any {
			for _, l := range ls {
				l[field] = v
			}
			return ls
		}
	}
	const (
		c = "samples.jsonl:1: instance_id a01-C: "
		d = "samples.jsonl:2: instance_id a01-D: "
		j = "samples.jsonl:3: instance_id a01-J: "
	)
	anchor := "SELECT DISTINCT s.name, s.average FROM concert AS c JOIN stadium AS s ON c.stadium_id = s.stadium_id WHERE c.year = '2014'"
	for _, tc := range []struct {
		name string
		edit func([]map[string]any) []map[string]any
		raw  func(string) string
		want []string
	}{
		{name: "unknown field", edit: set("joint", "L3_term", "x"), want: []string{j + "L3_term: unknown field"}},
		{name: "missing field", edit: del("drift_only", "anchor_sql"), want: []string{d + "anchor_sql: is required"}},
		{name: "null field", edit: set("chain_only", "db_id", nil), want: []string{c + "db_id: is required"}},
		{name: "missing chain field", edit: del("joint", "L2_question"), want: []string{j + "L2_question: is required in a joint sample"}},
		{name: "missing drift field", edit: set("drift_only", "post_drift_sql", nil), want: []string{d + "post_drift_sql: is required in a drift_only sample"}},
		{name: "empty field", edit: set("joint", "drift_utterance", "  "), want: []string{j + "drift_utterance: is empty"}},
		{name: "wrong type: string", edit: set("joint", "evidence", 3), want: []string{j + "evidence: want a string, got a number"}},
		{name: "wrong type: options", edit: set("chain_only", "L1_options", "a or b"), want: []string{c + "L1_options: want an array of strings, got a string"}},
		{name: "wrong type: list item", edit: set("chain_only", "target_sqls", []any{1}), want: []string{c + "target_sqls: want an array of strings, got an array with an element that is not a string"}},
		{name: "unknown sample type", edit: set("joint", "sample_type", "both"), want: []string{j + `sample_type: "both" is not one of chain_only, drift_only, joint`}},
		{name: "unknown enum", edit: set("joint", "drift_subtype", "topic"), want: []string{j + `drift_subtype: "topic" is not one of value, constraint, projection`}},
		{name: "chain_only with a drift", edit: set("chain_only", "drift_utterance", "Actually, 2015."), want: []string{c + "drift_utterance: must be null in a chain_only sample"}},
		{name: "drift_only with a chain", edit: set("drift_only", "l1_alt_sql", anchor), want: []string{d + "l1_alt_sql: must be null in a drift_only sample"}},
		{name: "intent subtype of a value drift", edit: set("joint", "intent_subtype", "aspect_change"), want: []string{j + `intent_subtype: is only given for projection drifts (drift_subtype "value")`}},
		{name: "projection without intent subtype", edit: func(ls []map[string]any) []map[string]any {
			byType(ls, "drift_only")["drift_subtype"], byType(ls, "joint")["drift_subtype"] = "projection", "projection"
			return ls
		}, want: []string{d + "intent_subtype: is required in a drift_only sample with a projection drift"}},
		{name: "target_sqls of a chain_only", edit: set("chain_only", "target_sqls", []any{anchor, anchor}), want: []string{c + "target_sqls: want [anchor_sql] for a chain_only sample"}},
		{name: "target_sqls of a joint", edit: set("joint", "target_sqls", []any{anchor}), want: []string{j + "target_sqls: want [anchor_sql, post_drift_sql] for a joint sample"}},
		{name: "three options", edit: set("joint", "L2_options", []any{"a", "b", "c"}), want: []string{j + "L2_options: has 3 option(s), want exactly two"}},
		{name: "same options", edit: set("chain_only", "L1_options", []any{"a", "a"}), want: []string{c + `L1_options: the two options are the same ("a")`}},
		{name: "chosen not an option", edit: set("chain_only", "L1_chosen", "the seats"), want: []string{c + `L1_chosen: "the seats" is not one of L1_options`}},
		{name: "database missing", edit: all("db_id", "nodb"), want: []string{c + `db_id: database "nodb": want the SQLite file nodb/nodb.sqlite under --dbs`}},
		{name: "database id", edit: all("db_id", "../venue"), want: []string{c + `db_id: "../venue" must be letters`}},
		{name: "instance id of another type", edit: set("joint", "instance_id", "a01-X"), want: []string{`samples.jsonl:3: instance_id a01-X: instance_id: "a01-X" is not "a01-J"`}},
		{name: "duplicate instance id", edit: func(ls []map[string]any) []map[string]any {
			ls[2]["sample_type"], ls[2]["instance_id"], ls[2]["target_sqls"] = "chain_only", "a01-C", []any{anchor}
			for _, f := range []string{"drift_utterance", "drift_subtype", "pre_commitments_narrative", "post_commitments_narrative", "drift_rationale", "post_drift_sql"} {
				ls[2][f] = nil
			}
			return ls
		}, want: []string{`samples.jsonl:3: instance_id a01-C: instance_id: "a01-C" is already used on line 1`}},
		{name: "triplet differs", edit: set("joint", "evidence", "Other notes."), want: []string{j + "evidence: differs from the"}},
		{name: "drift_only question", edit: set("drift_only", "initial_question", "How big were the crowds?"), want: []string{d + "initial_question: differs from original_question"}},
		{name: "invalid JSON", raw: func(s string) string { return strings.Replace(s, `"anchor_id": "a01"`, `"anchor_id": a01`, 1) }, want: []string{"samples.jsonl:1: anchor_id: invalid JSON: invalid character"}},
		{name: "not an object", raw: func(s string) string { return s + "[1, 2]\n" }, want: []string{"samples.jsonl:4: want a JSON object"}},
		{name: "two values", raw: func(s string) string { return strings.Replace(s, "}\n", "} {}\n", 1) }, want: []string{"samples.jsonl:1: more than one JSON value"}},
		{name: "duplicate field", raw: func(s string) string {
			return strings.Replace(s, `"anchor_id": "a01",`, `"anchor_id": "a01", "anchor_id": "a02",`, 1)
		}, want: []string{"samples.jsonl:1: anchor_id: the field occurs twice"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in, dbs := fixture(t, tc.edit)
			if tc.raw != nil {
				b, err := os.ReadFile(filepath.Join(in, SamplesFile))
				if err != nil {
					t.Fatal(err)
				}
				writeSamples(t, in, tc.raw(string(b)))
			}
			parent := t.TempDir()
			out := filepath.Join(parent, "out")
			_, err := Import(context.Background(), Options{In: in, DBs: dbs, Out: out})
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("want an *Error, got %v", err)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("the error lacks %q:\n%s", w, msg)
				}
			}
			for _, p := range ie.Problems {
				if p.Line == 0 && p.File != "imported corpus" || p.Field == "" && !strings.Contains(p.Msg, "JSON") {
					t.Errorf("problem without line or field: %s", p)
				}
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 0 {
				t.Errorf("something was written beside --out: %v", ents)
			}
		})
	}
}

// TestTideImportMapsCorpusProblems: a problem the corpus loader finds in a
// written record (here the anchor SQL fails) is reported on the sample's
// line, under the sample's field.
func TestTideImportMapsCorpusProblems(t *testing.T) {
	in, dbs := fixture(t, func(ls []map[string]any) []map[string]any {
		for _, l := range ls {
			l["anchor_sql"] = "SELECT nope FROM stadium"
			ts := l["target_sqls"].([]any)
			ts[0] = l["anchor_sql"]
		}
		return ls
	})
	out := filepath.Join(t.TempDir(), "out")
	_, err := Import(context.Background(), Options{In: in, DBs: dbs, Out: out})
	var ie *Error
	if !errors.As(err, &ie) || len(ie.Problems) != 3 {
		t.Fatalf("want three problems, got %v", err)
	}
	for i, p := range ie.Problems {
		if p.Line != i+1 || p.Field != "anchor_sql" || !strings.Contains(p.Msg, "nope") || p.File != filepath.Join(in, SamplesFile) {
			t.Errorf("problem %d: %s", i, p)
		}
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--out was written: %v", err)
	}
	// A failing check (the command's probes and chain_drift) fails the
	// import the same way.
	in, dbs = fixture(t, nil)
	_, err = Import(context.Background(), Options{In: in, DBs: dbs, Out: out, Check: func(_ context.Context, c *corpus.Corpus) ([]corpus.Problem, error) {
		t2 := c.Tasks[1]
		return []corpus.Problem{{File: t2.File, Line: t2.Line, Field: "chain_drift", Msg: "drift.subtype: declares \"value\""}}, nil
	}})
	if !errors.As(err, &ie) || len(ie.Problems) != 1 || ie.Problems[0].Line != 2 || ie.Problems[0].InstanceID != "a01-D" ||
		ie.Problems[0].Field != "drift_subtype" || ie.Problems[0].Msg != `chain_drift: declares "value"` {
		t.Fatalf("a failing check: %v", err)
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--out was written: %v", err)
	}
}

// TestTideImportRefusesOut: --out may not be or lie inside --in or --dbs.
func TestTideImportRefusesOut(t *testing.T) {
	in, dbs := fixture(t, nil)
	for _, out := range []string{in, filepath.Join(in, "x"), filepath.Join(dbs, "x"), filepath.Dir(dbs)} {
		if _, err := Import(context.Background(), Options{In: in, DBs: dbs, Out: out}); err == nil {
			t.Errorf("--out %s: no error", out)
		}
	}
	if _, err := Import(context.Background(), Options{In: t.TempDir(), DBs: dbs, Out: filepath.Join(t.TempDir(), "o")}); err == nil || !strings.Contains(err.Error(), "samples.jsonl") {
		t.Errorf("no samples file: %v", err)
	}
}

package birdinteract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/sqlexec/sqlite"
)

// sharedSample is the BIRD-Interact format sample of the shared data folder.
const sharedSample = "../../../shared/data/birdinteract-format"

// fixture assembles an input directory from testdata: the split task files
// (public depot_tasks.jsonl plus depot_tasks_gt.jsonl) and the depot
// database folder, with depot.sqlite built from testdata/depot/depot.sql.
func fixture(t *testing.T) string {
	t.Helper()
	in := filepath.Join(t.TempDir(), "in")
	if err := os.MkdirAll(filepath.Join(in, "depot"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"depot_tasks.jsonl", "depot_tasks_gt.jsonl"} {
		copyT(t, filepath.Join("testdata", "split", f), filepath.Join(in, f))
	}
	for _, f := range []string{"depot_kb.jsonl", "depot_column_meaning_base.json", "depot_schema.txt"} {
		copyT(t, filepath.Join("testdata", "depot", f), filepath.Join(in, "depot", f))
	}
	script, err := os.ReadFile(filepath.Join("testdata", "depot", "depot.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlite.BuildFromScript(context.Background(), string(script), filepath.Join(in, "depot", "depot.sqlite")); err != nil {
		t.Fatal(err)
	}
	return in
}

func copyT(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editLine applies f to the 1-based line n of file (its JSON object).
func editLine(t *testing.T, file string, n int, f func(m map[string]any)) {
	t.Helper()
	rewriteLine(t, file, n, func(line []byte) []byte {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	})
}

func rewriteLine(t *testing.T, file string, n int, f func([]byte) []byte) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if f == nil {
		lines = append(lines[:n-1], lines[n:]...)
	} else {
		lines[n-1] = f(lines[n-1])
	}
	if err := os.WriteFile(file, append(bytes.Join(lines, []byte("\n")), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readRecords(t *testing.T, dir string) map[string]corpus.Record {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, RecordsFile))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corpus.Record{}
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var r corpus.Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		out[r.ID] = r
	}
	return out
}

func readManifest(t *testing.T, dir string) corpus.Manifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, corpus.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m corpus.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSharedSample is the acceptance check: the shared sample gives
// 2 servable Query tasks and 1 reported Management task.
func TestSharedSample(t *testing.T) {
	if _, err := os.Stat(sharedSample); err != nil {
		t.Skipf("shared BIRD-Interact sample not found at %s (it lives outside the repository): %v", sharedSample, err)
	}
	out := filepath.Join(t.TempDir(), "bi")
	sum, err := Import(context.Background(), Options{In: sharedSample, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sum.Served, ","); got != "fleet_1,fleet_2" {
		t.Errorf("served = %s, want fleet_1,fleet_2", got)
	}
	if len(sum.Unserved) != 1 || sum.Unserved[0].InstanceID != "fleet_M_1" || sum.Unserved[0].Category != "Management" {
		t.Errorf("unserved = %+v, want fleet_M_1 (Management)", sum.Unserved)
	}
	if sum.Critical != 3 || sum.Knowledge != 1 || sum.NonCritical != 1 || sum.FollowUps != 2 {
		t.Errorf("counts = %d critical, %d knowledge, %d non-critical, %d follow-ups; want 3, 1, 1, 2", sum.Critical, sum.Knowledge, sum.NonCritical, sum.FollowUps)
	}
	if len(sum.SQLResolutions) != 2 {
		t.Errorf("SQLResolutions = %v, want both records", sum.SQLResolutions)
	}
	var text strings.Builder
	sum.Write(&text)
	for _, want := range []string{"served: 2 (Query 2, Management 0)", "fleet_M_1 (Management)", "WARNING: no response catalog", "resolution_format \"sql\""} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, text.String())
		}
	}

	recs := readRecords(t, out)
	r1 := recs["fleet_1"]
	if r1.Request != "Which of our vehicles are problem vehicles? Give me their plates." || r1.ResolutionFormat != "sql" {
		t.Errorf("fleet_1 request/format = %q/%q", r1.Request, r1.ResolutionFormat)
	}
	if len(r1.Ambiguities) != 3 || r1.Ambiguities[0].Kind != corpus.Critical || r1.Ambiguities[1].Kind != corpus.Knowledge ||
		r1.Ambiguities[1].KnowledgeID != "1" || r1.Ambiguities[2].Kind != corpus.NonCritical ||
		r1.Ambiguities[0].Resolution != "WHERE fi > 30 AND rb > 1000" {
		t.Errorf("fleet_1 ambiguities = %+v", r1.Ambiguities)
	}
	m := readManifest(t, out)
	// conditions {decimal: -1, distinct: false, order: true}: the harness's
	// default test, ordered; SQLite returns dates and JSON as text, which it
	// compares verbatim.
	want := harness()
	want.Order = "ordered"
	if got := effective(m.Defaults.Comparison, r1.Reference.Comparison); got != want {
		t.Errorf("fleet_1 comparison = %s, want %s", got, want)
	}
	if c := r1.Reference.Comparison; c == nil || *c != (corpus.Comparison{Order: "ordered"}) {
		t.Errorf("fleet_1 reference.comparison = %+v, want only the order over the defaults", c)
	}
	if got := effective(m.Defaults.Comparison, recs["fleet_2"].Reference.Comparison); got != harness() {
		t.Errorf("fleet_2 comparison = %s, want the defaults %s", got, harness())
	}
	fu := r1.FollowUp
	if fu == nil || fu.Type != "attribute_change" || fu.Category != "Query" || !strings.HasPrefix(fu.Request, "For those same vehicles") ||
		len(fu.Reference.SQL) != 1 || strings.Join(fu.Knowledge, ",") != "3" || len(fu.Reference.Tests) != 0 {
		t.Fatalf("fleet_1 follow-up = %+v", fu)
	}
	if got := effective(m.Defaults.Comparison, fu.Reference.Comparison); got != want {
		t.Errorf("fleet_1 follow-up comparison = %s, want %s", got, want)
	}
	if len(r1.FollowUps) != 0 {
		t.Errorf("fleet_1 still has the legacy follow_ups: %s", r1.FollowUps)
	}
	if _, ok := recs["fleet_M_1"]; ok {
		t.Error("the Management task was written to the served records")
	}
	un, err := os.ReadFile(filepath.Join(out, UnservedFile))
	if err != nil || !bytes.Contains(un, []byte(`"fleet_M_1"`)) {
		t.Errorf("unserved.jsonl = %s, %v", un, err)
	}
	if len(m.Databases) != 1 || m.Databases[0].Engine != "sqlite" || m.Databases[0].Path != "fleet.sqlite" || m.Databases[0].Dumps != "" ||
		len(m.Databases[0].Knowledge) != 4 || m.Databases[0].Knowledge[1].ID != "1" ||
		m.Databases[0].ColumnMeanings["vehicles.plate"] != "Registration plate." || !strings.HasPrefix(m.Databases[0].Schema, "CREATE TABLE vehicles") {
		t.Errorf("manifest database = %+v", m.Databases)
	}
	if len(m.Records) != 1 || m.Records[0] != RecordsFile {
		t.Errorf("manifest records = %v (unserved.jsonl must not be listed)", m.Records)
	}
	c, err := corpus.LoadDir(context.Background(), out, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Tasks) != 2 {
		t.Errorf("loaded %d tasks, want 2", len(c.Tasks))
	}
}

// comparisonText is a comparison policy resolved field by field, written
// out for comparing and printing ("" for an unset field).
type comparisonText struct {
	Order, Decimals, StripComments, StripDistinct, StripRound, EmptyFails, DateOnly, CanonicalJSON string
}

// effective resolves a record's comparison over the manifest defaults as
// the loader does, field by field.
func effective(defaults, own *corpus.Comparison) comparisonText {
	var out comparisonText
	b := func(dst *string, v *bool) {
		if v != nil {
			*dst = strconv.FormatBool(*v)
		}
	}
	for _, c := range []*corpus.Comparison{defaults, own} {
		if c == nil {
			continue
		}
		if c.Order != "" {
			out.Order = c.Order
		}
		if c.Decimals != nil {
			out.Decimals = strconv.Itoa(*c.Decimals)
		}
		b(&out.StripComments, c.StripComments)
		b(&out.StripDistinct, c.StripDistinct)
		b(&out.StripRound, c.StripRound)
		b(&out.EmptyFails, c.EmptyFails)
		b(&out.DateOnly, c.DateOnly)
		b(&out.CanonicalJSON, c.CanonicalJSON)
	}
	return out
}

// harness is BIRD-Interact's default test: set comparison, 2 decimals,
// comments, DISTINCT and ROUND stripped, empty results fail.
func harness() comparisonText {
	return comparisonText{Order: "set", Decimals: "2", StripComments: "true", StripDistinct: "true", StripRound: "true", EmptyFails: "true"}
}

// TestSplitWithCatalog covers a public file plus ground truth, a response
// catalog, a knowledge and a non-critical ambiguity, multi-statement
// sol_sql, the conditions variants, a follow-up completed by the ground
// truth, Python test_cases, structured column meanings and a Management task.
func TestSplitWithCatalog(t *testing.T) {
	in := fixture(t)
	out := filepath.Join(t.TempDir(), "out")
	sum, err := Import(context.Background(), Options{In: in, Out: out, Responses: filepath.Join("testdata", "responses.jsonl"), Name: "depot-bi"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(sum.GroundTruthFile, "depot_tasks_gt.jsonl") || !strings.HasSuffix(sum.TaskFile, "depot_tasks.jsonl") {
		t.Errorf("files = %s, %s", sum.TaskFile, sum.GroundTruthFile)
	}
	if strings.Join(sum.Served, ",") != "depot_1,depot_2" || len(sum.Unserved) != 1 || sum.Unserved[0].InstanceID != "depot_M_1" {
		t.Errorf("served %v, unserved %+v", sum.Served, sum.Unserved)
	}
	if len(sum.SQLResolutions) != 0 || strings.Join(sum.UnusedGroundTruth, ",") != "depot_9" || strings.Join(sum.OpaqueTests, ",") != "depot_2" {
		t.Errorf("sql %v, unused gt %v, opaque tests %v", sum.SQLResolutions, sum.UnusedGroundTruth, sum.OpaqueTests)
	}
	recs := readRecords(t, out)
	r1, r2 := recs["depot_1"], recs["depot_2"]
	if r1.ResolutionFormat != "" || r1.Ambiguities[0].Resolution != "I mean parcels that weigh more than 20 kilograms." || r1.Ambiguities[0].SQLSnippet != "p.weight_kg > 20" {
		t.Errorf("depot_1 = %+v", r1)
	}
	if len(r1.Reference.SQL) != 2 || r1.Reference.SQL[0] != "SELECT 1" {
		t.Errorf("depot_1 sql = %q, want the two statements", r1.Reference.SQL)
	}
	if fu := r1.FollowUp; fu == nil || len(fu.Reference.SQL) != 1 || !strings.Contains(fu.Reference.SQL[0], "p.returned = 1") ||
		fu.Type != "constraint_change" || fu.Request != "And how many of those were returned?" || fu.Reference.Comparison != nil || len(fu.Knowledge) != 0 {
		t.Errorf("depot_1 follow-up = %+v, want public fields plus ground-truth sol_sql", fu)
	}
	if len(r2.Ambiguities) != 2 || r2.Ambiguities[0].Kind != corpus.Knowledge || r2.Ambiguities[0].KnowledgeID != "0" ||
		r2.Ambiguities[1].Kind != corpus.NonCritical || r2.Ambiguities[1].Term != "average weight" {
		t.Errorf("depot_2 ambiguities = %+v", r2.Ambiguities)
	}
	m := readManifest(t, out)
	// depot_2: {decimal: 2, distinct: true, order: true}: ordered, DISTINCT kept.
	want := harness()
	want.Order, want.StripDistinct = "ordered", "false"
	if got := effective(m.Defaults.Comparison, r2.Reference.Comparison); got != want {
		t.Errorf("depot_2 comparison = %s, want %s", got, want)
	}
	// depot_1: {decimal: -1, distinct: false, order: false}: the defaults.
	if c := r1.Reference.Comparison; c != nil {
		t.Errorf("depot_1 comparison = %+v, want none over the defaults", c)
	}
	// A SQLite record's Python tests cannot run: kept in its source notes,
	// and the default comparison decides.
	if len(r2.Reference.Tests) != 0 || r2.Stateful() || r2.Source == nil || !strings.Contains(r2.Source.Notes, `test_cases=["def test_case(`) {
		t.Errorf("depot_2 tests = %q, source %+v", r2.Reference.Tests, r2.Source)
	}
	if r2.Source == nil || r2.Source.Dataset != "birdinteract" || !strings.Contains(r2.Source.Notes, "external_knowledge=[0]") {
		t.Errorf("depot_2 source = %+v", r2.Source)
	}
	if m.Name != "depot-bi" || effective(m.Defaults.Comparison, nil) != harness() {
		t.Errorf("manifest = %+v, defaults %s", m, effective(m.Defaults.Comparison, nil))
	}
	if got := m.Databases[0].ColumnMeanings["parcels.returned"]; !strings.HasPrefix(got, `{"meaning":`) {
		t.Errorf("structured column meaning = %q, want compact JSON text", got)
	}
	if k := m.Databases[0].Knowledge[0]; k.ID != "0" || k.Name != "Late Parcel" || k.Definition != "A parcel that arrived after its promised day. A parcel with late_days of at least 3." {
		t.Errorf("knowledge[0] = %+v", k)
	}
}

// TestWithoutCatalog marks the records as answering with SQL.
func TestWithoutCatalog(t *testing.T) {
	in := fixture(t)
	out := filepath.Join(t.TempDir(), "out")
	sum, err := Import(context.Background(), Options{In: in, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(sum.SQLResolutions, ",") != "depot_1,depot_2" {
		t.Errorf("SQLResolutions = %v", sum.SQLResolutions)
	}
	r := readRecords(t, out)["depot_2"]
	if r.ResolutionFormat != "sql" || r.Ambiguities[0].Resolution != "p.late_days >= 3" {
		t.Errorf("depot_2 = %+v", r)
	}
}

// TestHostileInput checks that each kind of bad input fails with a message
// naming the file, line and instance_id, and that nothing is written.
func TestHostileInput(t *testing.T) {
	const tasks, gt = "depot_tasks.jsonl", "depot_tasks_gt.jsonl"
	cases := []struct {
		name      string
		edit      func(t *testing.T, in string)
		responses bool
		want      []string
	}{
		{"no task file", func(t *testing.T, in string) {
			os.Remove(filepath.Join(in, tasks))
			os.Remove(filepath.Join(in, gt))
		}, false, []string{"no task file"}},
		{"two task files", func(t *testing.T, in string) {
			copyT(t, filepath.Join(in, tasks), filepath.Join(in, "other.jsonl"))
		}, false, []string{"several task files"}},
		{"missing database folder", func(t *testing.T, in string) {
			os.RemoveAll(filepath.Join(in, "depot"))
		}, false, []string{"missing database folder", `database "depot" of instance_id depot_1`, tasks + ":1"}},
		{"neither SQLite file nor table dumps", func(t *testing.T, in string) {
			os.Remove(filepath.Join(in, "depot", "depot.sqlite"))
		}, false, []string{"depot.sqlite: missing SQLite database file", "postgre_table_dumps/depot_template", `database "depot" of instance_id depot_1`, tasks + ":1"}},
		{"SQLite file and table dumps", func(t *testing.T, in string) {
			os.MkdirAll(filepath.Join(in, "postgre_table_dumps", "depot_template"), 0o755)
		}, false, []string{"depot.sqlite: and the PostgreSQL table dump folder", "both exist", `instance_id depot_1`}},
		{"not a SQLite file", func(t *testing.T, in string) {
			os.WriteFile(filepath.Join(in, "depot", "depot.sqlite"), []byte("PGDMP custom dump"), 0o644)
		}, false, []string{"depot.sqlite", "is not a SQLite database file"}},
		{"missing knowledge base", func(t *testing.T, in string) {
			os.Remove(filepath.Join(in, "depot", "depot_kb.jsonl"))
		}, false, []string{"depot_kb.jsonl", "cannot read"}},
		{"missing column meanings", func(t *testing.T, in string) {
			os.Remove(filepath.Join(in, "depot", "depot_column_meaning_base.json"))
		}, false, []string{"depot_column_meaning_base.json", "missing column meanings file"}},
		{"missing schema", func(t *testing.T, in string) {
			os.Remove(filepath.Join(in, "depot", "depot_schema.txt"))
		}, false, []string{"depot_schema.txt", "missing schema file"}},
		{"malformed JSON line", func(t *testing.T, in string) {
			rewriteLine(t, filepath.Join(in, tasks), 2, func(b []byte) []byte { return b[:len(b)/2] })
		}, false, []string{tasks + ":2: instance_id depot_2: malformed JSON"}},
		{"unknown field", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, tasks), 1, func(m map[string]any) { m["difficulty_tier"] = "hard" })
		}, false, []string{tasks + ":1: instance_id depot_1: difficulty_tier: unknown field"}},
		{"unknown nested field", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, tasks), 2, func(m map[string]any) { m["conditions"].(map[string]any)["rounding"] = 2 })
		}, false, []string{tasks + ":2: instance_id depot_2: ", "rounding", "unknown field"}},
		{"unknown ground-truth field", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, gt), 1, func(m map[string]any) { m["solution"] = "x" })
		}, false, []string{gt + ":1: instance_id depot_1: solution: unknown field"}},
		{"unknown catalog field", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, "responses.jsonl"), 3, func(m map[string]any) { m["answer"] = "x" })
		}, true, []string{"responses.jsonl:3: instance_id depot_2: answer: unknown field"}},
		{"reference does not parse", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, gt), 1, func(m map[string]any) { m["sol_sql"] = []string{"SELECT 1", "SELEC COUNT(*) FROM parcels"} })
		}, false, []string{tasks + ":1: instance_id depot_1: sol_sql: the reference does not run", "syntax error"}},
		{"Management SQL does not parse", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, gt), 3, func(m map[string]any) { m["sol_sql"] = []string{"UPDAT parcels SET returned = 1"} })
		}, false, []string{tasks + ":3: instance_id depot_M_1: sol_sql[0]: SQL does not parse"}},
		{"follow-up SQL does not parse", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, gt), 1, func(m map[string]any) {
				m["follow_up"].(map[string]any)["sol_sql"] = []string{"SELECT COUNT(* FROM parcels"}
			})
		}, false, []string{tasks + ":1: instance_id depot_1: follow_up.sol_sql[0]: SQL does not parse"}},
		{"non-UTF-8 text", func(t *testing.T, in string) {
			rewriteLine(t, filepath.Join(in, tasks), 2, func(b []byte) []byte {
				return bytes.Replace(b, []byte("late parcels per"), []byte("late parc\xffels per"), 1)
			})
		}, false, []string{tasks + ":2: instance_id depot_2: not valid UTF-8"}},
		{"non-UTF-8 knowledge base", func(t *testing.T, in string) {
			rewriteLine(t, filepath.Join(in, "depot", "depot_kb.jsonl"), 1, func(b []byte) []byte {
				return bytes.Replace(b, []byte("Late"), []byte("L\xe9te"), 1)
			})
		}, false, []string{"depot_kb.jsonl:1: not valid UTF-8"}},
		{"ground truth missing an id", func(t *testing.T, in string) {
			rewriteLine(t, filepath.Join(in, gt), 2, nil)
		}, false, []string{tasks + ":2: instance_id depot_2: the ground-truth file", "has no line for this instance_id"}},
		{"public file without ground truth", func(t *testing.T, in string) {
			os.Remove(filepath.Join(in, gt))
		}, false, []string{tasks + ":1: instance_id depot_1: sol_sql: missing: this looks like the public release"}},
		{"duplicate instance_id", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, tasks), 2, func(m map[string]any) { m["instance_id"] = "depot_1" })
		}, false, []string{tasks + ":2: instance_id depot_1: instance_id used twice (first on line 1)"}},
		{"catalog missing an entry", func(t *testing.T, in string) {
			rewriteLine(t, filepath.Join(in, "responses.jsonl"), 3, nil)
		}, true, []string{tasks + ":2: instance_id depot_2: knowledge_ambiguity[0]: the response catalog", `no resolution for term "late parcels"`}},
		{"catalog term not in the task", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, "responses.jsonl"), 1, func(m map[string]any) { m["term"] = "bulky parcel" })
		}, true, []string{"responses.jsonl:1: instance_id depot_1: term: \"bulky parcel\" is not an ambiguity term"}},
		{"unknown deleted_knowledge", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, tasks), 2, func(m map[string]any) {
				m["knowledge_ambiguity"].([]any)[0].(map[string]any)["deleted_knowledge"] = 7
			})
		}, false, []string{tasks + ":2: instance_id depot_2: knowledge_ambiguity[0].deleted_knowledge: 7 is not an id of"}},
		{"bad category", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, tasks), 1, func(m map[string]any) { m["category"] = "Analysis" })
		}, false, []string{tasks + ":1: instance_id depot_1: category: \"Analysis\""}},
		{"empty reference result", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, gt), 1, func(m map[string]any) {
				m["sol_sql"] = []string{"SELECT parcel_id FROM parcels WHERE weight_kg > 1000"}
			})
		}, false, []string{tasks + ":1: instance_id depot_1: record reference.sql: returns no rows"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := fixture(t)
			opt := Options{In: in, Out: filepath.Join(t.TempDir(), "out")}
			if tc.responses {
				opt.Responses = filepath.Join(in, "responses.jsonl")
				copyT(t, filepath.Join("testdata", "responses.jsonl"), opt.Responses)
			}
			tc.edit(t, in)
			_, err := Import(context.Background(), opt)
			if err == nil {
				t.Fatal("import succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if _, serr := os.Stat(opt.Out); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("the output directory was created after a failure")
			}
			ents, _ := os.ReadDir(filepath.Dir(opt.Out))
			if len(ents) != 0 {
				t.Errorf("left behind in the output's parent: %v", ents)
			}
		})
	}
}

// TestOutDirProtection: a non-empty --out is kept unless --force, and the
// input directory can never be the output.
func TestOutDirProtection(t *testing.T) {
	in := fixture(t)
	out := t.TempDir()
	keep := filepath.Join(out, "keep.txt")
	os.WriteFile(keep, []byte("x"), 0o644)
	if _, err := Import(context.Background(), Options{In: in, Out: out}); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("err = %v, want a refusal naming --force", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatal("the non-empty output was touched")
	}
	// A failing import with --force leaves the old content alone.
	editLine(t, filepath.Join(in, "depot_tasks.jsonl"), 1, func(m map[string]any) { m["bogus"] = 1 })
	if _, err := Import(context.Background(), Options{In: in, Out: out, Force: true}); err == nil {
		t.Fatal("import succeeded")
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatal("a failed --force import removed the old output")
	}
	in = fixture(t)
	if _, err := Import(context.Background(), Options{In: in, Out: out, Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(keep); !errors.Is(err, os.ErrNotExist) {
		t.Error("--force did not replace the output")
	}
	if _, err := os.Stat(filepath.Join(out, corpus.ManifestFile)); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{in, filepath.Dir(in)} {
		if _, err := Import(context.Background(), Options{In: in, Out: bad, Force: true}); err == nil || !strings.Contains(err.Error(), "input directory") {
			t.Errorf("out=%s: err = %v, want a refusal", bad, err)
		}
	}
}

func TestGroundTruthNames(t *testing.T) {
	for name, want := range map[string]bool{
		"mini_interact_gt.jsonl": true, "gt.jsonl": true, "bird-interact-GT.jsonl": true,
		"ground_truth.jsonl": true, "tasks_groundtruth.jsonl": true,
		"mini_interact.jsonl": false, "weighted_tasks.jsonl": false, "gtx.jsonl": false,
	} {
		if got := isGroundTruthName(name); got != want {
			t.Errorf("isGroundTruthName(%q) = %v, want %v", name, got, want)
		}
	}
}

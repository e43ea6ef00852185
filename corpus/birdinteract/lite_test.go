package birdinteract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/corpus/corpuswrite"
	"avtgym/internal/filetree"
	"avtgym/sqlexec"
)

// liteSample is the PostgreSQL (bird-interact-lite layout) sample of the
// shared data folder: database harbor, 4 Query and 4 Management tasks.
const liteSample = sharedSample + "/lite"

// liteTables are the sample's table dumps.
var liteTables = []string{"berths.sql", "cargo_manifests.sql", "crane_assignments.sql", "cranes.sql", "port_calls.sql", "vessels.sql"}

// liteFixture copies the lite sample into a writable temporary input
// directory.
func liteFixture(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(liteSample); err != nil {
		t.Skipf("shared BIRD-Interact lite sample not found at %s (it lives outside the repository): %v", liteSample, err)
	}
	in := filepath.Join(t.TempDir(), "in")
	err := filepath.WalkDir(liteSample, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(liteSample, p)
		if e.IsDir() {
			return os.MkdirAll(filepath.Join(in, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(in, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// writeLite runs the import up to the written, not yet validated, corpus
// (validating a PostgreSQL corpus needs a server) and returns the summary
// and a copy of the written directory.
func writeLite(t *testing.T, in string) (*Summary, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out")
	im, p, err := prepare(context.Background(), Options{In: in, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	w, err := corpuswrite.New(in, out, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Discard()
	if err := im.writeFiles(w, p); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(t.TempDir(), "written")
	if err := os.CopyFS(kept, os.DirFS(w.Dir())); err != nil {
		t.Fatal(err)
	}
	return &im.sum, kept
}

// TestLiteLayout imports the lite sample: 4 Query records and 4 unserved
// Management tasks, the PostgreSQL database with its 6 table dumps copied,
// schema, flattened column meanings and the knowledge base in the
// manifest, a follow-up in every record, and every comparison as
// BIRD-Interact's harness compares (harbor_3 pinned: DISTINCT kept,
// ordered).
func TestLiteLayout(t *testing.T) {
	in := liteFixture(t)
	sum, dir := writeLite(t, in)

	if got := strings.Join(sum.Served, ","); got != "harbor_1,harbor_2,harbor_3,harbor_4,harbor_M_1,harbor_M_2,harbor_M_3,harbor_M_4" {
		t.Errorf("served = %s", got)
	}
	if len(sum.Unserved) != 0 {
		t.Errorf("unserved = %+v", sum.Unserved)
	}
	mgmt := "harbor_M_1,harbor_M_2,harbor_M_3,harbor_M_4"
	if got := strings.Join(sum.Management, ","); got != mgmt {
		t.Errorf("management = %s, want %s", got, mgmt)
	}
	if got := strings.Join(sum.PythonTests, ","); got != mgmt {
		t.Errorf("verified by Python tests = %s, want %s", got, mgmt)
	}
	if !strings.HasSuffix(sum.TaskFile, "bird_interact_data.jsonl") || !strings.HasSuffix(sum.GroundTruthFile, "bird_interact_gt.jsonl") {
		t.Errorf("files = %s, %s", sum.TaskFile, sum.GroundTruthFile)
	}
	if sum.FollowUps != 8 || sum.Knowledge != 2 || sum.Critical != 13 || sum.NonCritical != 3 || len(sum.UnusedGroundTruth) != 0 {
		t.Errorf("summary = %+v", sum)
	}
	var text strings.Builder
	sum.Write(&text)
	if !strings.Contains(text.String(), "databases: harbor (postgres)") {
		t.Errorf("summary:\n%s", text.String())
	}

	// The manifest: engine postgres, the dumps copied, the public context.
	m := readManifest(t, dir)
	if len(m.Databases) != 1 {
		t.Fatalf("databases = %+v", m.Databases)
	}
	db := m.Databases[0]
	if db.ID != "harbor" || db.Engine != "postgres" || db.Dumps != "dbs/harbor" || db.Path != "" || db.Script != "" {
		t.Errorf("database = id %q engine %q dumps %q path %q script %q", db.ID, db.Engine, db.Dumps, db.Path, db.Script)
	}
	ents, err := os.ReadDir(filepath.Join(dir, filepath.FromSlash(db.Dumps)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		want, _ := os.ReadFile(filepath.Join(liteSample, "postgre_table_dumps", "harbor_template", e.Name()))
		if got, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(db.Dumps), e.Name())); len(want) == 0 || !bytes.Equal(got, want) {
			t.Errorf("%s: not copied verbatim", e.Name())
		}
	}
	if !slices.Equal(names, liteTables) {
		t.Errorf("dumps = %v, want %v", names, liteTables)
	}
	schema, _ := os.ReadFile(filepath.Join(liteSample, "harbor", "harbor_schema.txt"))
	if db.Schema != strings.TrimSpace(string(schema)) || !strings.HasPrefix(db.Schema, `CREATE TABLE "berths" (`) {
		t.Errorf("schema = %.80q…", db.Schema)
	}
	for k, want := range map[string]string{
		"berths.berth_id":                           "A SERIAL primary key identifying each berth.",
		"cargo_manifests.details":                   "JSONB document with commodity, handling and customs details of the manifest line.",
		"cargo_manifests.details.hs_code":           "Harmonized System commodity code (6 digits, as a string).",
		"cargo_manifests.details.customs.status":    "Customs status of the consignment: 'pending', 'hold' or 'cleared'.",
		"cargo_manifests.details.customs.inspected": "Boolean: TRUE if customs physically inspected the consignment.",
	} {
		if got := db.ColumnMeanings[k]; got != want {
			t.Errorf("column_meanings[%q] = %q, want %q", k, got, want)
		}
	}
	if _, ok := db.ColumnMeanings["cargo_manifests.details.customs"]; ok {
		t.Error("a nested field object got a meaning of its own")
	}
	if len(db.Knowledge) != 14 || db.Knowledge[1].ID != "1" || db.Knowledge[1].Name != "Congested Call" ||
		db.Knowledge[1].Definition != "A port call that was delayed by berth congestion. A port call whose Anchorage Waiting Time (AWT) exceeds 24 hours." {
		t.Errorf("knowledge = %d entries, [1] = %+v", len(db.Knowledge), db.Knowledge)
	}
	if len(m.Records) != 1 || m.Records[0] != RecordsFile {
		t.Errorf("records files = %v", m.Records)
	}

	// The records.
	recs := readRecords(t, dir)
	if len(recs) != 8 {
		t.Fatalf("%d records", len(recs))
	}
	gt := map[string]map[string]json.RawMessage{}
	glines, _ := readJSONL(filepath.Join(liteSample, "bird_interact_gt.jsonl"), nil, func(p Problem) { t.Fatal(p) })
	for _, l := range glines {
		var id string
		json.Unmarshal(l.obj["instance_id"], &id)
		gt[id] = l.obj
	}
	for id, r := range recs {
		if r.DB != "harbor" || r.ResolutionFormat != "sql" || r.Source == nil || r.Source.Dataset != "birdinteract" {
			t.Errorf("%s = %+v", id, r)
		}
		var sol []string
		json.Unmarshal(gt[id]["sol_sql"], &sol)
		if !slices.Equal(r.Reference.SQL, sol) {
			t.Errorf("%s reference = %q, want the ground truth's sol_sql", id, r.Reference.SQL)
		}
		for _, a := range r.Ambiguities {
			if a.Resolution != a.SQLSnippet || !strings.Contains(strings.Join(sol, "\n"), a.SQLSnippet) {
				t.Errorf("%s: ambiguity %q resolution %q", id, a.Term, a.Resolution)
			}
		}
		var tests []string
		json.Unmarshal(gt[id]["test_cases"], &tests)
		management := strings.Contains(id, "_M_")
		if r.Management() != management || !slices.Equal(r.Reference.Tests, tests) || (management && len(tests) == 0) {
			t.Errorf("%s: category %q, tests %d (the ground truth has %d)", id, r.Category, len(r.Reference.Tests), len(tests))
		}
		fu := r.FollowUp
		var gfu struct {
			SolSQL    []string `json:"sol_sql"`
			TestCases []string `json:"test_cases"`
		}
		json.Unmarshal(gt[id]["follow_up"], &gfu)
		if fu == nil || fu.Request == "" || fu.Type == "" || !slices.Equal(fu.Reference.SQL, gfu.SolSQL) || !slices.Equal(fu.Reference.Tests, gfu.TestCases) {
			t.Errorf("%s follow-up = %+v", id, fu)
		}
		if !management && (fu.Category != "Query" || len(fu.Knowledge) == 0) {
			t.Errorf("%s follow-up = %+v", id, fu)
		}
	}
	if r := recs["harbor_1"]; len(r.Ambiguities) != 2 || r.Ambiguities[1].Kind != corpus.Knowledge || r.Ambiguities[1].KnowledgeID != "1" ||
		r.Ambiguities[1].Term != "congested calls" || r.Ambiguities[0].Kind != corpus.Critical {
		t.Errorf("harbor_1 ambiguities = %+v", r.Ambiguities)
	}
	if fu := recs["harbor_1"].FollowUp; fu.Type != "result_based" || strings.Join(fu.Knowledge, ",") != "0,1" {
		t.Errorf("harbor_1 follow-up = %+v", fu)
	}
	if r := recs["harbor_2"]; len(r.Ambiguities) != 4 || r.Ambiguities[2].Kind != corpus.NonCritical || r.Ambiguities[3].Term != "most productive" {
		t.Errorf("harbor_2 ambiguities = %+v", r.Ambiguities)
	}

	// The comparisons: the harness's default test, plus dates and JSON as
	// the PostgreSQL driver hands them to it; ordered where conditions.order.
	pg := harness()
	pg.DateOnly, pg.CanonicalJSON = "true", "true"
	ordered := pg
	ordered.Order = "ordered"
	pinned := ordered
	pinned.StripDistinct = "false"
	for id, want := range map[string]comparisonText{"harbor_1": pg, "harbor_2": ordered, "harbor_3": pinned, "harbor_4": pg} {
		if got := effective(m.Defaults.Comparison, recs[id].Reference.Comparison); got != want {
			t.Errorf("%s comparison = %+v, want %+v", id, got, want)
		}
	}
	for id, want := range map[string]comparisonText{"harbor_1": ordered, "harbor_2": ordered, "harbor_3": ordered, "harbor_4": pg} {
		if got := effective(m.Defaults.Comparison, recs[id].FollowUp.Reference.Comparison); got != want {
			t.Errorf("%s follow-up comparison = %+v, want %+v", id, got, want)
		}
	}

	// harbor_3 (distinct: true, order: true): DISTINCT stays in both SQL
	// texts and rows compare as a list; harbor_1 (distinct: false) strips it.
	p3 := policyOf(t, m.Defaults.Comparison, recs["harbor_3"].Reference.Comparison)
	ref3 := strings.Join(recs["harbor_3"].Reference.SQL, ";\n")
	if rw := p3.Rewrite(ref3); !strings.HasPrefix(rw, "SELECT DISTINCT v.imo_number") {
		t.Errorf("harbor_3 reference after the policy's rewrite = %q, want DISTINCT kept", rw)
	}
	if p3.Order != sqlexec.OrderOrdered || !p3.DateOnly || !p3.CanonicalJSON || p3.Decimals != 2 || !p3.StripRound || !p3.EmptyFails {
		t.Errorf("harbor_3 policy = %+v", p3)
	}
	a := &sqlexec.Result{Columns: []string{"imo_number", "vessel_name"}, Rows: [][]any{{"IMO9000001", "A"}, {"IMO9000002", "B"}}}
	b := &sqlexec.Result{Columns: a.Columns, Rows: [][]any{a.Rows[1], a.Rows[0]}}
	if ok, _ := sqlexec.Compare(p3, b, a); ok {
		t.Error("harbor_3: rows in another order compare equal")
	}
	p1 := policyOf(t, m.Defaults.Comparison, recs["harbor_1"].Reference.Comparison)
	if rw := p1.Rewrite("SELECT DISTINCT ROUND(x, 1) FROM t -- c"); rw != "SELECT x FROM t " {
		t.Errorf("harbor_1 rewrite = %q, want DISTINCT, ROUND and the comment stripped", rw)
	}
	if ok, why := sqlexec.Compare(p1, b, a); !ok {
		t.Errorf("harbor_1: rows in another order differ: %s", why)
	}
	ts := &sqlexec.Result{Rows: [][]any{{"2024-03-01 10:15:00", `{"b": 1.004, "a": null}`, 3.14159}}}
	day := &sqlexec.Result{Rows: [][]any{{"2024-03-01", `{"a":null,"b":1}`, 3.14}}}
	if ok, why := sqlexec.Compare(p1, ts, day); !ok {
		t.Errorf("harbor_1: a timestamp, JSON and a number differ from their date, canonical JSON and 2 places: %s", why)
	}

	if _, err := os.Stat(filepath.Join(dir, UnservedFile)); !os.IsNotExist(err) {
		t.Errorf("unserved.jsonl written although every task is served: %v", err)
	}
}

// policyOf resolves a record's comparison over the defaults into the
// sqlexec policy the loader gives it.
func policyOf(t *testing.T, defaults, own *corpus.Comparison) sqlexec.Policy {
	t.Helper()
	p := sqlexec.DefaultPolicy()
	for _, c := range []*corpus.Comparison{defaults, own} {
		if c == nil {
			continue
		}
		if c.Order != "" {
			o, err := sqlexec.ParseOrder(c.Order)
			if err != nil {
				t.Fatal(err)
			}
			p.Order = o
		}
		if c.Decimals != nil {
			p.Decimals = *c.Decimals
		}
		for _, f := range []struct {
			dst *bool
			src *bool
		}{{&p.StripComments, c.StripComments}, {&p.StripDistinct, c.StripDistinct}, {&p.StripRound, c.StripRound},
			{&p.EmptyFails, c.EmptyFails}, {&p.DateOnly, c.DateOnly}, {&p.CanonicalJSON, c.CanonicalJSON}} {
			if f.src != nil {
				*f.dst = *f.src
			}
		}
	}
	return p
}

// TestLiteNeedsPostgres: a PostgreSQL input fails without a server URL,
// with a message naming --postgres, and writes nothing; with one it goes
// on to the final check.
func TestLiteNeedsPostgres(t *testing.T) {
	in := liteFixture(t)
	parent := filepath.Dir(in)
	before := filetree.MustSums(t, parent)
	out := filepath.Join(parent, "out")
	_, err := Import(context.Background(), Options{In: in, Out: out})
	if err == nil || !strings.Contains(err.Error(), "pass --postgres URL") || !strings.Contains(err.Error(), "harbor") {
		t.Fatalf("err = %v, want a message naming --postgres and the database", err)
	}
	if after := filetree.MustSums(t, parent); len(after) != len(before) {
		t.Errorf("files created or removed: %d before, %d after", len(before), len(after))
	}
	_, err = Import(context.Background(), Options{In: in, Out: out, Postgres: "postgres://127.0.0.1:1/postgres"})
	if err != nil && strings.Contains(err.Error(), "--postgres") {
		t.Errorf("with a URL: %v", err)
	}
}

// TestLiteHostile: each bad lite input fails with problems naming the file,
// the line and the instance, and writes nothing.
func TestLiteHostile(t *testing.T) {
	const tasks, gt = "bird_interact_data.jsonl", "bird_interact_gt.jsonl"
	dumps := filepath.Join("postgre_table_dumps", "harbor_template")
	cases := []struct {
		name string
		edit func(t *testing.T, in string)
		want []string
	}{
		{"ground truth missing for an instance", func(t *testing.T, in string) {
			rewriteLine(t, filepath.Join(in, gt), 3, nil)
		}, []string{tasks + ":3: instance_id harbor_3: the ground-truth file", gt, "has no line for this instance_id"}},
		{"dump folder escapes --in through a symbolic link", func(t *testing.T, in string) {
			outside := filepath.Join(filepath.Dir(in), "elsewhere")
			if err := os.Rename(filepath.Join(in, dumps), outside); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(in, dumps)); err != nil {
				t.Fatal(err)
			}
		}, []string{filepath.Join(dumps) + ": the table dump folder resolves outside the input directory", `database "harbor" of instance_id harbor_1`, tasks + ":1)"}},
		{"dump file escapes --in through a symbolic link", func(t *testing.T, in string) {
			outside := filepath.Join(filepath.Dir(in), "vessels.sql")
			if err := os.Rename(filepath.Join(in, dumps, "vessels.sql"), outside); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(in, dumps, "vessels.sql")); err != nil {
				t.Fatal(err)
			}
		}, []string{filepath.Join(dumps, "vessels.sql") + ": input file postgre_table_dumps/harbor_template/vessels.sql resolves outside the input directory", "instance_id harbor_1"}},
		{"missing dump folder", func(t *testing.T, in string) {
			os.RemoveAll(filepath.Join(in, dumps))
		}, []string{dumps + ": missing table dump folder", `database "harbor" of instance_id harbor_1`, tasks + ":1)"}},
		{"empty dump folder", func(t *testing.T, in string) {
			os.RemoveAll(filepath.Join(in, dumps))
			os.MkdirAll(filepath.Join(in, dumps), 0o755)
		}, []string{dumps + ": holds no table dump", "instance_id harbor_1"}},
		{"empty dump file", func(t *testing.T, in string) {
			os.WriteFile(filepath.Join(in, dumps, "cranes.sql"), nil, 0o644)
		}, []string{filepath.Join(dumps, "cranes.sql") + ": is empty"}},
		{"bad dump name", func(t *testing.T, in string) {
			os.WriteFile(filepath.Join(in, dumps, "two words.sql"), []byte("--"), 0o644)
		}, []string{filepath.Join(dumps, "two words.sql") + ": a table dump must be named <table>.sql"}},
		{"schema escapes --in through a symbolic link", func(t *testing.T, in string) {
			outside := filepath.Join(filepath.Dir(in), "schema.txt")
			os.Rename(filepath.Join(in, "harbor", "harbor_schema.txt"), outside)
			os.Symlink(outside, filepath.Join(in, "harbor", "harbor_schema.txt"))
		}, []string{"harbor_schema.txt: input file harbor/harbor_schema.txt resolves outside the input directory"}},
		{"unknown field in the ground truth's follow_up", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, gt), 2, func(m map[string]any) { m["follow_up"].(map[string]any)["answer"] = 1 })
		}, []string{tasks + ":2: instance_id harbor_2: follow_up: answer: unknown field"}},
		{"follow-up without sol_sql", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, gt), 4, func(m map[string]any) { delete(m["follow_up"].(map[string]any), "sol_sql") })
		}, []string{tasks + ":4: instance_id harbor_4: follow_up.sol_sql: missing"}},
		{"unknown field in the ground truth", func(t *testing.T, in string) {
			editLine(t, filepath.Join(in, gt), 1, func(m map[string]any) { m["gold"] = 1 })
		}, []string{gt + ":1: instance_id harbor_1: gold: unknown field"}},
		{"structured column meaning without its text", func(t *testing.T, in string) {
			b, _ := os.ReadFile(filepath.Join(in, "harbor", "harbor_column_meaning_base.json"))
			b = bytes.Replace(b, []byte(`"harbor|berths|berth_id"`), []byte(`"harbor|berths"`), 1)
			os.WriteFile(filepath.Join(in, "harbor", "harbor_column_meaning_base.json"), b, 0o644)
		}, []string{"harbor_column_meaning_base.json: key \"harbor|berths\": want \"harbor|table|column\""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := liteFixture(t)
			tc.edit(t, in)
			parent := filepath.Dir(in)
			before := filetree.MustSums(t, parent)
			out := filepath.Join(parent, "out")
			_, err := Import(context.Background(), Options{In: in, Out: out})
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("err = %v, want problems", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			after := filetree.MustSums(t, parent)
			for k, v := range before {
				if after[k] != v {
					t.Errorf("%s changed or was removed", k)
				}
			}
			for k := range after {
				if _, ok := before[k]; !ok {
					t.Errorf("%s was created", k)
				}
			}
		})
	}
}

// TestLiteUnknownGroundTruth: a ground-truth line whose instance_id no
// task has is ignored, as the release's merge script ignores it, and the
// summary names its file, line and instance_id.
func TestLiteUnknownGroundTruth(t *testing.T) {
	in := liteFixture(t)
	f, err := os.OpenFile(filepath.Join(in, "bird_interact_gt.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"instance_id": "harbor_99", "sol_sql": ["SELECT 1"], "test_cases": [], "external_knowledge": []}` + "\n")
	f.Close()
	sum, _ := writeLite(t, in)
	if strings.Join(sum.UnusedGroundTruth, ",") != "harbor_99" || len(sum.Ignored) != 1 {
		t.Fatalf("unused = %v, ignored = %v", sum.UnusedGroundTruth, sum.Ignored)
	}
	var text strings.Builder
	sum.Write(&text)
	want := "bird_interact_gt.jsonl:9: instance_id harbor_99: no task in "
	if !strings.Contains(text.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, text.String())
	}
}

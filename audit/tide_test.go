package audit

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/corpus/tide"
	"avtgym/engines"
	"avtgym/sqlexec/sqlite"
)

// The TIDE format folder of ../shared/data and the Spider databases its
// samples use, seen from this package; and the TIDE importer's synthetic
// samples (one anchor, three samples, on the venue database).
const (
	sharedTide    = "../../shared/data/tide-format"
	sharedSpider  = "../../shared/data/ambiqt/spider_dbs"
	syntheticTide = "../corpus/tide/testdata/synthetic"
)

// importTide imports the samples of in on the databases of dbs with the
// TIDE importer and returns the corpus directory.
func importTide(t *testing.T, in, dbs string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "tide")
	if _, err := tide.Import(context.Background(), tide.Options{In: in, DBs: dbs, Out: out}); err != nil {
		t.Fatal(err)
	}
	return out
}

// syntheticTideDir imports the synthetic samples (building their
// databases from the scripts of the testdata) and returns the corpus
// directory.
func syntheticTideDir(t *testing.T) string {
	t.Helper()
	dbs := filepath.Join(t.TempDir(), "dbs")
	for _, id := range []string{"venue", "spare"} {
		script, err := os.ReadFile(filepath.Join(syntheticTide, "dbs", id, id+".sql"))
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
	return importTide(t, syntheticTide, dbs)
}

// editRecords rewrites the records file of dir through edit (records
// decoded as JSON objects, in file order).
func editRecords(t *testing.T, dir string, edit func(recs []map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, tide.RecordsFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, m)
	}
	edit(recs)
	var out []string
	for _, m := range recs {
		l, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(l))
	}
	if err := os.WriteFile(p, []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func loadDir(t *testing.T, dir string) *corpus.Corpus {
	t.Helper()
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantClean asserts that every check passed on every unit and that the
// samples of one anchor (one cluster, distinct AVTs, the same anchor SQL)
// were never compared as interpretations of one AVT.
func wantClean(t *testing.T, c *corpus.Corpus, r *Report) {
	t.Helper()
	for _, f := range r.Findings {
		t.Errorf("finding: %s", f)
	}
	if !r.OK() {
		t.Errorf("the corpus fails the audit")
	}
	byCluster := map[string][]*corpus.Task{}
	for _, tk := range c.Tasks {
		byCluster[tk.ClusterID()] = append(byCluster[tk.ClusterID()], tk)
	}
	for cl, ts := range byCluster {
		if len(ts) != 3 {
			t.Errorf("cluster %s has %d records, want 3", cl, len(ts))
			continue
		}
		for _, tk := range ts[1:] {
			if tk.AVTID == ts[0].AVTID || tk.ReferenceSQL != ts[0].ReferenceSQL {
				t.Errorf("cluster %s: %s (AVT %s) and %s (AVT %s) should be distinct AVTs sharing the anchor SQL", cl, tk.ID, tk.AVTID, ts[0].ID, ts[0].AVTID)
			}
		}
	}
	if n := r.Counts[Cross]; n.Checked != 0 {
		t.Errorf("cross_interpretation compared %d pairs; the samples of one anchor are different AVTs", n.Checked)
	}
	if n := r.Counts[ChainDrift]; n.Checked != len(c.Tasks) || n.Passed != len(c.Tasks) {
		t.Errorf("chain_drift counts %+v, want every record passed", n)
	}
}

// TestSharedTidePasses: the 18 samples of ../shared/data/tide-format,
// imported, pass every check of the audit, chain_drift included; the three
// samples of one anchor are not reported as indistinguishable by any
// check.
func TestSharedTidePasses(t *testing.T) {
	for _, p := range []string{filepath.Join(sharedTide, tide.SamplesFile), filepath.Join(sharedSpider, "car_1", "car_1.sqlite")} {
		if _, err := os.Stat(p); err != nil {
			msg := "the TIDE samples or the Spider databases are missing (%v): this test needs ../shared/data next to the repository"
			if os.Getenv("CI") != "" {
				t.Fatalf(msg, err)
			}
			t.Skipf(msg, err)
		}
	}
	c := loadDir(t, importTide(t, sharedTide, sharedSpider))
	if len(c.Tasks) != 18 {
		t.Fatalf("%d records, want 18", len(c.Tasks))
	}
	r := run(t, c)
	wantClean(t, c, r)
	if n := r.Counts[Oracle]; n.Passed != 12 || n.Skipped != 6 {
		t.Errorf("oracle_probes counts %+v: want the 12 chain records passed, the 6 drift-only skipped", n)
	}
	fs, err := ChainDriftFindings(context.Background(), c)
	if err != nil || len(fs) != 0 {
		t.Errorf("ChainDriftFindings: %v %v", fs, err)
	}
}

// TestSyntheticTidePasses: the importer's synthetic samples pass every
// check, without ../shared/data.
func TestSyntheticTidePasses(t *testing.T) {
	c := loadDir(t, syntheticTideDir(t))
	wantClean(t, c, run(t, c))
}

// TestTideChainDriftSkipsOtherRecords: records without a sample type, a drift
// or an alternative SQL are skipped, and run no unit (the tiny corpus's
// progress count is unchanged).
func TestTideChainDriftSkipsOtherRecords(t *testing.T) {
	r := run(t, load(t, nil))
	wantCounts(t, r, map[Check]Count{ChainDrift: {Checked: 5, Skipped: 5}})
}

// TestTideChainDriftMutations: each broken TIDE asset fails the chain_drift
// check with a finding on its record that names the field.
func TestTideChainDriftMutations(t *testing.T) {
	const (
		anchor = "SELECT DISTINCT s.name, s.average FROM concert AS c JOIN stadium AS s ON c.stadium_id = s.stadium_id WHERE c.year = '2014'"
		// Line 2 is the drift_only record a01-D, line 3 the joint a01-J.
		joint = 3
		drift = 2
	)
	amb := func(r map[string]any, i int) map[string]any { return r["ambiguities"].([]any)[i].(map[string]any) }
	dr := func(r map[string]any) map[string]any { return r["drift"].(map[string]any) }
	for _, tc := range []struct {
		name string
		line int
		edit func(recs []map[string]any)
		want string
	}{
		{"alternative equal to the anchor", joint, func(recs []map[string]any) { amb(recs[2], 0)["alternative_sql"] = anchor },
			`ambiguities[0].alternative_sql: the SQL under the other reading of "crowds" gives the reference's result under the record's comparison policy (order set)`},
		{"alternative with the anchor's result", joint, func(recs []map[string]any) {
			amb(recs[2], 1)["alternative_sql"] = "SELECT s.name, s.average FROM stadium AS s WHERE s.stadium_id IN (SELECT stadium_id FROM concert WHERE year = '2014') ORDER BY s.name"
		}, `ambiguities[1].alternative_sql: the SQL under the other reading of "attendance" gives the reference's result`},
		{"alternative that does not run", joint, func(recs []map[string]any) { amb(recs[2], 1)["alternative_sql"] = "SELECT nope FROM stadium" },
			`ambiguities[1].alternative_sql: the SQL under the other reading of "attendance" does not run`},
		{"alternatives alike", joint, func(recs []map[string]any) { amb(recs[2], 1)["alternative_sql"] = amb(recs[2], 0)["alternative_sql"] },
			"ambiguities[1].alternative_sql: gives the same result as ambiguities[0].alternative_sql"},
		{"post-drift SQL with the same result", drift, func(recs []map[string]any) {
			dr(recs[1])["reference"] = map[string]any{"sql": strings.Replace(anchor, "'2014'", "'2013'", 1)}
		}, "drift.reference.sql: gives the pre-drift reference's result under the post-drift comparison policy"},
		{"wrong declared subtype", drift, func(recs []map[string]any) { dr(recs[1])["subtype"] = "constraint" },
			`drift.subtype: declares "constraint", but Algorithm 1 computes "value"`},
		{"wrong declared intent subtype", joint, func(recs []map[string]any) {
			d := dr(recs[2])
			d["reference"] = map[string]any{"sql": strings.Replace(anchor, "s.average", "s.highest", 1)}
			d["subtype"], d["intent_subtype"] = "projection", "target_change"
		}, `drift.intent_subtype: declares "target_change", but rule R7 computes "aspect_change"`},
		{"a pure addition", drift, func(recs []map[string]any) {
			dr(recs[1])["reference"] = map[string]any{"sql": anchor + " AND s.capacity > 40000"}
		}, "drift.reference.sql: S(reference) ⊆ S(post-drift reference): the post-drift reference withdraws no commitment"},
		{"a drift Algorithm 1 rejects", joint, func(recs []map[string]any) {
			dr(recs[2])["reference"] = map[string]any{"sql": strings.Replace(strings.Replace(anchor, "'2014'", "'2015'", 1), "s.average", "s.highest", 1)}
		}, "drift.reference.sql: Algorithm 1 rejects the pair"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := syntheticTideDir(t)
			editRecords(t, dir, tc.edit)
			c := loadDir(t, dir)
			r := run(t, c)
			wantCounts(t, r, map[Check]Count{ChainDrift: {Checked: 3, Passed: 2, Failed: 1}})
			wantFindings(t, r, ChainDrift, []int{tc.line}, []string{tc.want})
			for _, f := range r.Findings {
				if f.Check == ChainDrift && f.TaskID != map[int]string{2: "a01-D", 3: "a01-J"}[tc.line] {
					t.Errorf("finding on record %s: %s", f.TaskID, f)
				}
			}
			fs, err := ChainDriftFindings(context.Background(), c)
			if err != nil || len(fs) != 1 || !strings.Contains(fs[0].Msg, tc.want) {
				t.Errorf("ChainDriftFindings: %v %v", fs, err)
			}
		})
	}
}

package sqlcommit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tideDir is the TIDE format folder of ../shared/data, seen from this
// package; its databases are AmbiQT's Spider copies.
const (
	tideDir   = "../../shared/data/tide-format"
	spiderDir = "../../shared/data/ambiqt/spider_dbs"
)

type tideSample struct {
	InstanceID    string   `json:"instance_id"`
	DBID          string   `json:"db_id"`
	AnchorSQL     string   `json:"anchor_sql"`
	PostDriftSQL  *string  `json:"post_drift_sql"`
	L1AltSQL      *string  `json:"l1_alt_sql"`
	L2AltSQL      *string  `json:"l2_alt_sql"`
	TargetSQLs    []string `json:"target_sqls"`
	DriftSubtype  *string  `json:"drift_subtype"`
	IntentSubtype *string  `json:"intent_subtype"`
}

// readSamples reads the 18 TIDE samples and loads their schemas. Without
// the shared data beside the checkout the tests skip with a message, as
// every test of ../shared/data does, except under CI, which has it.
func readSamples(tb testing.TB) ([]tideSample, map[string]*Schema) {
	tb.Helper()
	path := filepath.Join(tideDir, "samples.jsonl")
	f, err := os.Open(path)
	if err != nil {
		msg := "the TIDE samples are missing (%v): these tests need ../shared/data/tide-format/samples.jsonl next to the repository"
		if os.Getenv("CI") != "" {
			tb.Fatalf(msg, err)
		}
		tb.Skipf(msg, err)
	}
	defer f.Close()
	var out []tideSample
	schemas := map[string]*Schema{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s tideSample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		if schemas[s.DBID] == nil {
			db := filepath.Join(spiderDir, s.DBID, s.DBID+".sqlite")
			if schemas[s.DBID], err = loadSchema(db); err != nil {
				tb.Fatalf("the Spider database of %s is missing (%v): these tests need ../shared/data/ambiqt/spider_dbs", s.InstanceID, err)
			}
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	if len(out) != 18 {
		tb.Fatalf("%s holds %d samples, want 18", path, len(out))
	}
	return out, schemas
}

func (s tideSample) sqls() []string {
	out := append([]string{s.AnchorSQL}, s.TargetSQLs...)
	for _, p := range []*string{s.PostDriftSQL, s.L1AltSQL, s.L2AltSQL} {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out
}

// TestSamples: every SQL of the 18 samples parses, and for each sample
// with a declared drift subtype the computed drift, subtype and intent
// subtype equal the declared ones.
func TestSamples(t *testing.T) {
	samples, schemas := readSamples(t)
	checked := 0
	for _, s := range samples {
		for _, q := range s.sqls() {
			if set, err := Extract(q, schemas[s.DBID]); err != nil || len(set.Units) == 0 {
				t.Errorf("%s: Extract(%s): %v, %d units", s.InstanceID, q, err, len(set.Units))
			}
		}
		if s.DriftSubtype == nil {
			if s.PostDriftSQL != nil {
				t.Errorf("%s: a post-drift SQL without a drift subtype", s.InstanceID)
			}
			continue
		}
		if s.PostDriftSQL == nil {
			t.Fatalf("%s: drift subtype %q without a post-drift SQL", s.InstanceID, *s.DriftSubtype)
		}
		r, err := DriftSQL(s.AnchorSQL, *s.PostDriftSQL, schemas[s.DBID])
		if err != nil {
			t.Fatalf("%s: %v", s.InstanceID, err)
		}
		wantIntent := Intent("")
		if s.IntentSubtype != nil {
			wantIntent = Intent(*s.IntentSubtype)
		}
		if !r.Drift || r.Subtype != Subtype(*s.DriftSubtype) || r.Intent != wantIntent {
			t.Errorf("%s: got drift=%v %q %q, declared %q %q\n removed %v\n added %v",
				s.InstanceID, r.Drift, r.Subtype, r.Intent, *s.DriftSubtype, wantIntent, r.Removed, r.Added)
		}
		checked++
	}
	if checked != 12 {
		t.Errorf("checked %d samples with a declared drift subtype, want 12 (6 drift-only, 6 joint)", checked)
	}
}

// FuzzExtract: the parser path never panics, is deterministic, and a
// query never drifts from itself.
func FuzzExtract(f *testing.F) {
	samples, _ := readSamples(f)
	for _, s := range samples {
		for _, q := range s.sqls() {
			f.Add(q)
		}
	}
	for _, q := range []string{
		`SELECT "a" FROM t WHERE "b" = "c"`, "SELECT `x` FROM [y]", `SELECT * FROM t LIMIT 1, 2`,
		`SELECT a FROM t WHERE a IS NOT 'x' AND b IS 3`, `SELECT 'unterminated`, `SELECT "unterminated`,
		`WITH c AS (SELECT 1 AS x) SELECT x FROM c UNION ALL SELECT 2 ORDER BY 1`, "/* c */ SELECT -- d\n 1",
		`SELECT a FROM (SELECT b AS a FROM t) s WHERE EXISTS (SELECT 1 FROM u WHERE u.k = s.a)`,
		// Issue 25: these crashed the process inside libpg_query (SIGSEGV).
		"SELECT 1" + strings.Repeat("+1", 30000),
		"SELECT a FROM t WHERE b = 1" + strings.Repeat(" || 'x'", 30000),
		"SELECT `a`" + strings.Repeat("::int", 30000) + " FROM t LIMIT 1, 2",
	} {
		f.Add(q)
	}
	schema := testSchema
	f.Fuzz(func(t *testing.T, q string) {
		a, err := Extract(q, schema)
		if err != nil {
			return
		}
		b, err := Extract(q, schema)
		if err != nil {
			t.Fatalf("second Extract failed: %v", err)
		}
		if r := Classify(a, b); r.Drift {
			t.Fatalf("%q drifts from itself: %+v", q, r)
		}
	})
}

// BenchmarkDriftSQL measures one drift classification (two extractions
// and Algorithm 1) per iteration over the samples' anchor / post-drift
// pairs.
func BenchmarkDriftSQL(b *testing.B) {
	samples, schemas := readSamples(b)
	type pair struct {
		pre, post string
		schema    *Schema
	}
	var pairs []pair
	for _, s := range samples {
		if s.PostDriftSQL != nil {
			pairs = append(pairs, pair{s.AnchorSQL, *s.PostDriftSQL, schemas[s.DBID]})
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := pairs[i%len(pairs)]
		if _, err := DriftSQL(p.pre, p.post, p.schema); err != nil {
			b.Fatal(err)
		}
	}
}

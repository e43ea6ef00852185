package corpus

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"avtgym/corpus/demo"
	"avtgym/sqlexec"
)

// fuzzLabel is the corpus directory as problems name it.
const fuzzLabel = "fuzzdir"

// fuzzManifest is the demo corpus's manifest plus a database "mini" with
// knowledge entries (the tiny corpus's) and a database "broken" that failed
// to open. Databases are specs only: the record checks never run SQL.
func fuzzManifest(t testing.TB) *Manifest {
	t.Helper()
	b, err := fs.ReadFile(demo.FS, ManifestFile)
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m.Databases = append(m.Databases, Database{ID: "mini", Engine: "sqlite", Script: "mini.sql", Knowledge: []KnowledgeEntry{
		{ID: "k-strong", Name: "strong market", Definition: "a region whose 2024 sales total more than 200 dollars"},
		{ID: "k-fiscal", Name: "fiscal year", Definition: "the calendar year"},
	}})
	return &m
}

// loadRecords runs the loader's record parsing on a records file holding
// data, against the databases of m, and returns the corpus (its tasks) and
// the problems.
func loadRecords(m *Manifest, data []byte) (*Corpus, []Problem) {
	l := &loader{
		fsys:      fstest.MapFS{"records.jsonl": &fstest.MapFile{Data: data}},
		label:     fuzzLabel,
		failedDBs: map[string]bool{"broken": true},
	}
	c := &Corpus{Name: m.Name, byID: map[string]*Task{}, avts: map[string][]*Task{}, dbs: map[string]*DB{}}
	for _, d := range m.Databases {
		c.dbs[d.ID] = &DB{Spec: d}
		c.dbOrder = append(c.dbOrder, d.ID)
	}
	defaultsJSON, _ := json.Marshal(m.Defaults.Comparison)
	l.records(c, m, "records.jsonl", defaultsJSON)
	return c, l.problems
}

// fuzzRecordLines are record lines for the seeds: the demo corpus's, the
// tiny corpus's, and broken ones.
func fuzzRecordLines(t testing.TB) []string {
	b, err := fs.ReadFile(demo.FS, "records.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return append(lines,
		`{"id":"top-a","avt_id":"top","split":"train","db":"mini","request":"Which is the top region?","ambiguities":[{"term":"top region","kind":"critical","resolution":"I mean the region with the largest total sales amount.","aliases":["best region"]}],"interpretation":"by amount","reference":{"sql":"SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1"}}`,
		`{"id":"strong","split":"dev","db":"mini","request":"Which regions are a strong market?","ambiguities":[{"term":"strong market","kind":"knowledge","resolution":"A strong market is a region whose 2024 sales total more than 200 dollars.","knowledge_id":"k-strong"}],"reference":{"sql":["SELECT 1","SELECT region FROM sales WHERE year = 2024 GROUP BY region HAVING SUM(amount) > 200"],"comparison":{"order":"auto","decimals":2,"strip_comments":true,"strip_distinct":true,"strip_round":true,"empty_fails":true}}}`,
		`{"id":"count","db":"mini","request":"How many sales rows?","ambiguities":[],"reference":{"sql":"SELECT COUNT(*) FROM sales","tests":[],"comparison":{}},"follow_ups":[ {"a" : 1} ],"source":{"dataset":"bird","id":"7","notes":"x"},"resolution_format":"sql"}`,
		`{"id":"u","db":"mini","request":"\u00e9\ud800 <b>&amp;</b> \u2028","ambiguities":[{"term":"x\u00e9","kind":"critical","resolution":"r"},{"term":"\u00e9t\u00e9","kind":"non_critical","resolution":"r","aliases":["a\u0000b"],"depends_on":"x\u00e9","sql_snippet":"x"}],"reference":{"sql":"SELECT '\u0000'"}}`,
		`{"id": "big", "db": "mini"`,
		`{"id": "big" "db": "mini"}`,
		`{"id": 3, "db": "mini"}`,
		`{"id": "a", "db": "mini", "request": "r", "reference": {"sql": 3}}`,
		`{"id": "a", "db": "mini", "request": "r", "reference": {"sql": [""]}, "bogus": 1}`,
		`{"id": "a", "db": "mini", "request": "r", "reference": {"sql": "SELECT 1", "comparison": {"order": "sideways", "decimals": 13}}}`,
		`{"id": "a", "db": "mini", "request": "r", "ambiguities": [{"term": "--", "kind": "knowledge", "resolution": " ", "knowledge_id": "nope", "aliases": ["!"]}], "reference": {"sql": "SELECT 1"}}`,
		`{"id": "a", "db": "broken", "request": "r", "reference": {"sql": "SELECT 1"}}`,
		`{"id": "-bad id", "db": "nope", "request": " ", "reference": {}, "source": {}}`,
		`{} {}`,
		`{}`,
		`[]`,
		`null`,
		`"x"`,
		"\xff\xfe",
		`{"id":"a","db":"mini","request":"r","reference":{"sql":"SELECT 1"}}`+"\n"+`{"id":"a","db":"mini","request":"r","reference":{"sql":"SELECT 1"}}`,
		"\n\n  \r\n"+`{"id": 1}`+"\r\n",
		`{"id":"deep","db":"mini","request":"r","reference":{"sql":"SELECT 1"},"follow_ups":[`+strings.Repeat("[", 5000)+strings.Repeat("]", 5000)+`]}`,
		`{"id":"many","db":"mini","request":"r","ambiguities":[`+strings.TrimSuffix(strings.Repeat(`{"term":"t","kind":"critical","resolution":"r"},`, 65), ",")+`],"reference":{"sql":"SELECT 1"}}`,
	)
}

// FuzzRecordLine checks the parsing and validation of records files
// (loader.records and loader.record) on arbitrary content:
//   - it never panics, and every problem names the records file and a line
//     of it, with a message;
//   - each non-blank line gives a task or at least one problem, never
//     both (records on the database that failed to open are skipped
//     silently: that database has its own problem);
//   - every task is valid: an id of the id pattern, a request, a database
//     of the manifest, at most MaxAmbiguities ambiguities, a resolved
//     policy (never auto) with valid decimals, the reference joined, the
//     content hash of its line, the masked knowledge left out;
//   - a task's record, written back as JSON, is a valid line that loads to
//     the same record (JSON fixpoint), policy and reference.
func FuzzRecordLine(f *testing.F) {
	for _, line := range fuzzRecordLines(f) {
		f.Add([]byte(line))
	}
	m := fuzzManifest(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		c, problems := loadRecords(m, data)
		lines := bytes.Split(data, []byte("\n"))
		if len(lines) > 1 && len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1] // a final newline ends the last line
		}
		byLine := map[int]int{}
		for _, p := range problems {
			if p.File != fuzzLabel+"/records.jsonl" || p.Line < 1 || p.Line > len(lines) || p.Msg == "" {
				t.Fatalf("problem %q: want records file %s/records.jsonl, a line in 1..%d and a message", p, fuzzLabel, len(lines))
			}
			byLine[p.Line]++
		}
		tasks := map[int]*Task{}
		for _, task := range c.Tasks {
			if tasks[task.Line] != nil {
				t.Fatalf("two tasks from line %d", task.Line)
			}
			tasks[task.Line] = task
		}
		for i, line := range lines {
			n := i + 1
			switch task := tasks[n]; {
			case task != nil && byLine[n] > 0:
				t.Fatalf("line %d gave task %q and problems %q", n, task.ID, problems)
			case task == nil && byLine[n] == 0 && len(bytes.TrimSpace(line)) > 0:
				var rec struct{ DB any }
				if json.Unmarshal(line, &rec) != nil || rec.DB != "broken" {
					t.Fatalf("line %d (%q) gave neither a task nor a problem", n, line)
				}
			}
		}
		for _, task := range c.Tasks {
			checkTask(t, m, c, task, lines[task.Line-1])
			// Round trip through JSON.
			js, err := json.Marshal(task.Record)
			if err != nil {
				t.Fatalf("task %q does not marshal: %v", task.ID, err)
			}
			c2, problems2 := loadRecords(m, js)
			if len(problems2) > 0 || len(c2.Tasks) != 1 {
				t.Fatalf("record %q written back as %s: %d tasks, problems %q", task.ID, js, len(c2.Tasks), problems2)
			}
			t2 := c2.Tasks[0]
			js2, _ := json.Marshal(t2.Record)
			if !bytes.Equal(js, js2) {
				t.Fatalf("record written back as\n%s\nloads and writes back as\n%s", js, js2)
			}
			if t2.Policy != task.Policy || t2.ReferenceSQL != task.ReferenceSQL || t2.RefKey != task.RefKey {
				t.Fatalf("record %q written back: policy %+v, reference %q; want %+v, %q", task.ID, t2.Policy, t2.ReferenceSQL, task.Policy, task.ReferenceSQL)
			}
		}
	})
}

func checkTask(t *testing.T, m *Manifest, c *Corpus, task *Task, line []byte) {
	t.Helper()
	switch {
	case !idPattern.MatchString(task.ID), task.AVTID == "", strings.TrimSpace(task.Request) == "":
		t.Fatalf("task %q: bad id, avt id %q or request %q", task.ID, task.AVTID, task.Request)
	case c.byID[task.ID] != task:
		t.Fatalf("task %q is not indexed by its id", task.ID)
	case task.DB == nil || task.DB != c.dbs[task.Record.DB] || task.Record.DB == "broken":
		t.Fatalf("task %q: database %q", task.ID, task.Record.DB)
	case len(task.Ambiguities) > MaxAmbiguities:
		t.Fatalf("task %q: %d ambiguities", task.ID, len(task.Ambiguities))
	case len(task.Reference.SQL) == 0 || task.ReferenceSQL != strings.Join(task.Reference.SQL, ";\n"):
		t.Fatalf("task %q: reference %q from %q", task.ID, task.ReferenceSQL, task.Reference.SQL)
	case task.RefKey != c.Name+"\x00"+task.ID || task.File != fuzzLabel+"/records.jsonl":
		t.Fatalf("task %q: key %q, file %q", task.ID, task.RefKey, task.File)
	}
	p := task.Policy
	if p.Order != sqlexec.OrderBag && p.Order != sqlexec.OrderOrdered && p.Order != sqlexec.OrderSet || p.Decimals < -1 || p.Decimals > 12 {
		t.Fatalf("task %q: policy %+v", task.ID, p)
	}
	if p.Resolve(task.ReferenceSQL) != p {
		t.Fatalf("task %q: policy %+v is not resolved", task.ID, p)
	}
	defaultsJSON, _ := json.Marshal(m.Defaults.Comparison)
	if want := sha256.Sum256(append(bytes.Clone(bytes.TrimSpace(line)), defaultsJSON...)); task.Hash != want {
		t.Fatalf("task %q: hash %x, want %x", task.ID, task.Hash, want)
	}
	masked := map[string]bool{}
	for i, a := range task.Ambiguities {
		if !a.Kind.valid() || strings.TrimSpace(a.Term) == "" || strings.TrimSpace(a.Resolution) == "" {
			t.Fatalf("task %q: ambiguity %d %+v", task.ID, i, a)
		}
		if a.KnowledgeID != "" {
			masked[a.KnowledgeID] = true
		}
	}
	want := 0
	for _, k := range task.DB.Spec.Knowledge {
		if !masked[k.ID] {
			want++
		}
	}
	for _, k := range task.PublicKnowledge {
		if masked[k.ID] {
			t.Fatalf("task %q: masked knowledge %q is public", task.ID, k.ID)
		}
	}
	if len(task.PublicKnowledge) != want {
		t.Fatalf("task %q: %d public knowledge entries, want %d", task.ID, len(task.PublicKnowledge), want)
	}
}

// TestFuzzRecordHarness checks that the harness of FuzzRecordLine accepts
// valid records (every demo record and the tiny ones become tasks), so
// that the fuzz target's task properties are exercised.
func TestFuzzRecordHarness(t *testing.T) {
	m := fuzzManifest(t)
	lines := fuzzRecordLines(t)
	valid := 0
	for _, line := range lines {
		if c, problems := loadRecords(m, []byte(line)); len(problems) == 0 && len(c.Tasks) == 1 {
			valid++
		}
	}
	b, _ := fs.ReadFile(demo.FS, "records.jsonl")
	if want := strings.Count(strings.TrimSpace(string(b)), "\n") + 1 + 5; valid != want {
		t.Errorf("%d seed lines load as tasks, want %d (the demo records and five others)", valid, want)
	}
	c, problems := loadRecords(m, b)
	if len(problems) > 0 || len(c.Tasks) != strings.Count(strings.TrimSpace(string(b)), "\n")+1 {
		t.Errorf("the demo records: %d tasks, problems %q", len(c.Tasks), problems)
	}
}

package corpus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/internal/testutil"
	"avtgym/sqlexec"
	"avtgym/sqlexec/sqlite"
)

// Lines of testutil.TinyRecords (1-based).
const (
	lineTopA   = 1
	lineTopB   = 2
	lineBig    = 3
	lineStrong = 4
	lineCount  = 5
)

// editLine returns an edit hook that replaces old by new (exactly once) in
// line n of records.jsonl.
func editLine(t *testing.T, n int, old, new string) func(map[string]string) {
	t.Helper()
	return func(files map[string]string) {
		t.Helper()
		lines := strings.Split(files["records.jsonl"], "\n")
		if !strings.Contains(lines[n-1], old) {
			t.Fatalf("line %d of the tiny records does not contain %q", n, old)
		}
		lines[n-1] = strings.Replace(lines[n-1], old, new, 1)
		files["records.jsonl"] = strings.Join(lines, "\n")
	}
}

// setLine returns an edit hook that replaces the whole line n of records.jsonl.
func setLine(n int, text string) func(map[string]string) {
	return func(files map[string]string) {
		lines := strings.Split(files["records.jsonl"], "\n")
		lines[n-1] = text
		files["records.jsonl"] = strings.Join(lines, "\n")
	}
}

// editFile returns an edit hook that replaces old by new (exactly once) in
// the named file.
func editFile(t *testing.T, name, old, new string) func(map[string]string) {
	t.Helper()
	return func(files map[string]string) {
		t.Helper()
		if !strings.Contains(files[name], old) {
			t.Fatalf("%s does not contain %q", name, old)
		}
		files[name] = strings.Replace(files[name], old, new, 1)
	}
}

// want is one expected problem: the file (relative to the corpus
// directory), the line (0: none), the field ("" : none) and a substring of
// the message. The message substring may contain %[1]s, replaced by the
// corpus directory.
type want struct {
	file  string
	line  int
	field string
	msg   string
}

func (w want) prefix(dir string) string {
	var b strings.Builder
	b.WriteString(filepath.Join(dir, w.file))
	if w.line > 0 {
		fmt.Fprintf(&b, ":%d", w.line)
	}
	b.WriteString(": ")
	if w.field != "" {
		b.WriteString(w.field)
		b.WriteString(": ")
	}
	return b.String()
}

func recs(line int, field, msg string) want {
	return want{file: "records.jsonl", line: line, field: field, msg: msg}
}

func man(field, msg string) want {
	return want{file: corpus.ManifestFile, field: field, msg: msg}
}

func TestLoadDirRejects(t *testing.T) {
	rowCap := corpus.Options{Engines: engines.Opener{}, Limits: sqlexec.Limits{Timeout: 5 * time.Second, MaxRows: 2, MaxBytes: 1 << 20}}
	cases := []struct {
		name string
		edit func(t *testing.T) []func(map[string]string)
		opt  corpus.Options
		want []want
		// more allows further problems besides want (a database that
		// does not open also makes each of its records name an unknown
		// database).
		more bool
	}{
		{
			name: "malformed JSON line, other lines still checked",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){
					setLine(lineBig, `{"id": "big" "db": "mini"}`),
					editLine(t, lineCount, `"db":"mini"`, `"db":"nope"`),
					editLine(t, lineStrong, `"request":"Which regions are a strong market?",`, ``),
				}
			},
			want: []want{
				recs(lineBig, "", "invalid JSON"),
				recs(lineStrong, "request", "is required"),
				recs(lineCount, "db", `"nope" is not a database of the manifest`),
			},
		},
		{
			name: "truncated JSON line",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){setLine(lineTopB, `{"id": "top-b",`)}
			},
			want: []want{recs(lineTopB, "", "invalid JSON")},
		},
		{
			name: "two JSON values on a line",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"SELECT COUNT(*) FROM sales"}}`, `"SELECT COUNT(*) FROM sales"}} {}`)}
			},
			want: []want{recs(lineCount, "", "more than one JSON value")},
		},
		{
			name: "unknown field",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"request":`, `"requst":`)}
			},
			want: []want{recs(lineCount, "requst", "unknown field")},
		},
		{
			name: "wrong type",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"ambiguities":[]`, `"ambiguities":"none"`)}
			},
			want: []want{recs(lineCount, "ambiguities", "got JSON string")},
		},
		{
			name: "missing id",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"id":"count",`, ``)}
			},
			want: []want{recs(lineCount, "id", "is required")},
		},
		{
			name: "malformed id",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"id":"count"`, `"id":"count me"`)}
			},
			want: []want{recs(lineCount, "id", `"count me" must be`)},
		},
		{
			name: "missing request",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"request":"How many sales rows are there in total?",`, ``)}
			},
			want: []want{recs(lineCount, "request", "is required")},
		},
		{
			name: "missing db",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"db":"mini",`, ``)}
			},
			want: []want{recs(lineCount, "db", `"" is not a database of the manifest`)},
		},
		{
			name: "missing reference.sql",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"reference":{"sql":"SELECT COUNT(*) FROM sales"}`, `"reference":{}`)}
			},
			want: []want{recs(lineCount, "reference.sql", "is required")},
		},
		{
			name: "empty statement in reference.sql",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"sql":"SELECT COUNT(*) FROM sales"`, `"sql":["SELECT 1"," "]`)}
			},
			want: []want{recs(lineCount, "reference.sql[1]", "is empty")},
		},
		{
			name: "duplicate id names the first line",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"id":"count"`, `"id":"big"`)}
			},
			want: []want{recs(lineCount, "id", `"big" is already used at %[1]s:3`)},
		},
		{
			name: "unknown db",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"db":"mini"`, `"db":"maxi"`)}
			},
			want: []want{recs(lineCount, "db", `"maxi" is not a database of the manifest`)},
		},
		{
			name: "bad ambiguity kind",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineBig, `"kind":"non_critical"`, `"kind":"minor"`)}
			},
			want: []want{recs(lineBig, "ambiguities[2].kind", `"minor" is not one of critical, knowledge, non_critical`)},
		},
		{
			name: "empty term",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineBig, `"term":"recent year"`, `"term":"  "`)}
			},
			want: []want{recs(lineBig, "ambiguities[1].term", "is required")},
		},
		{
			name: "term with no letters",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineBig, `"term":"recent year"`, `"term":"?!"`)}
			},
			want: []want{recs(lineBig, "ambiguities[1].term", `"?!" has no letter or digit`)},
		},
		{
			name: "alias with no letters",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineTopA, `"aliases":["best region"]`, `"aliases":["best region","--"]`)}
			},
			want: []want{recs(lineTopA, "ambiguities[0].aliases[1]", `"--" has no letter or digit`)},
		},
		{
			name: "empty resolution",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineBig, `"resolution":"The year 2024."`, `"resolution":""`)}
			},
			want: []want{recs(lineBig, "ambiguities[1].resolution", "is required")},
		},
		{
			name: "knowledge_id on a critical ambiguity",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineBig, `"resolution":"The year 2024."`, `"resolution":"The year 2024.","knowledge_id":"k-fiscal"`)}
			},
			want: []want{recs(lineBig, "ambiguities[1].knowledge_id", "is only allowed on knowledge ambiguities")},
		},
		{
			name: "knowledge_id naming a missing entry",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineStrong, `"knowledge_id":"k-strong"`, `"knowledge_id":"k-weak"`)}
			},
			want: []want{recs(lineStrong, "ambiguities[0].knowledge_id", `"k-weak" is not a knowledge entry of database "mini"`)},
		},
		{
			name: "depends_on naming a missing term",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineBig, `"resolution":"The year 2024."`, `"resolution":"The year 2024.","depends_on":"fiscal year"`)}
			},
			want: []want{recs(lineBig, "ambiguities[1].depends_on", `"fiscal year" is not the term of another ambiguity`)},
		},
		{
			name: "comparison order random",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"sql":"SELECT COUNT(*) FROM sales"`, `"sql":"SELECT COUNT(*) FROM sales","comparison":{"order":"random"}`)}
			},
			want: []want{recs(lineCount, "reference.comparison", `order: sqlexec: unknown order "random"`)},
		},
		{
			name: "comparison decimals 99",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"sql":"SELECT COUNT(*) FROM sales"`, `"sql":"SELECT COUNT(*) FROM sales","comparison":{"decimals":99}`)}
			},
			want: []want{recs(lineCount, "reference.comparison", "decimals: 99 is outside 0..12")},
		},
		{
			name: "reference does not parse",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"SELECT COUNT(*) FROM sales"`, `"SELEC COUNT(*) FROM sales"`)}
			},
			want: []want{recs(lineCount, "reference.sql", `near "SELEC": syntax error`)},
		},
		{
			name: "reference names a missing table",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"SELECT COUNT(*) FROM sales"`, `"SELECT COUNT(*) FROM sale"`)}
			},
			want: []want{recs(lineCount, "reference.sql", `no such table: sale`)},
		},
		{
			name: "reference writes",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"SELECT COUNT(*) FROM sales"`, `"DELETE FROM sales"`)}
			},
			want: []want{recs(lineCount, "reference.sql", `denied`)},
		},
		{
			name: "reference writes in an earlier statement",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"SELECT COUNT(*) FROM sales"`, `["DELETE FROM sales","SELECT COUNT(*) FROM sales"]`)}
			},
			want: []want{recs(lineCount, "reference.sql", `denied`)},
		},
		{
			name: "reference exceeds the row cap",
			opt:  rowCap,
			edit: func(t *testing.T) []func(map[string]string) { return nil },
			want: []want{recs(lineBig, "reference.sql", `too_many_rows`)},
		},
		{
			name: "empty reference under empty_fails",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineCount, `"sql":"SELECT COUNT(*) FROM sales"`, `"sql":"SELECT id FROM sales WHERE year = 1999","comparison":{"empty_fails":true}`)}
			},
			want: []want{recs(lineCount, "reference.sql", `returns no rows`)},
		},
		{
			name: "AVT interpretations with different requests",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineTopB, `"request":"Which is the top region?"`, `"request":"Which is the top region now?"`)}
			},
			want: []want{recs(lineTopB, "request", `differs from the request of top-a (%[1]s:1), which shares avt_id "top"`)},
		},
		{
			name: "AVT interpretations with different terms",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineTopB, `"term":"top region"`, `"term":"region"`)}
			},
			want: []want{recs(lineTopB, "ambiguities", `terms and kinds differ from those of top-a, which shares avt_id "top"`)},
		},
		{
			name: "AVT interpretations with different kinds",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editLine(t, lineTopB, `"kind":"critical"`, `"kind":"non_critical"`)}
			},
			want: []want{recs(lineTopB, "ambiguities", `terms and kinds differ from those of top-a`)},
		},
		{
			name: "manifest without a name",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `"name": "tiny",`, ``)}
			},
			want: []want{man("name", "is required")},
		},
		{
			name: "manifest with a malformed name",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `"name": "tiny",`, `"name": "tiny corpus",`)}
			},
			want: []want{man("name", `"tiny corpus" must be`)},
		},
		{
			name: "manifest with an unknown engine",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `"engine": "sqlite"`, `"engine": "oracle"`)}
			},
			want: []want{man("databases[0].engine", `"oracle" is not supported`)},
		},
		{
			name: "manifest with both path and script",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `"script": "mini.sql",`, `"script": "mini.sql", "path": "mini.sqlite",`)}
			},
			want: []want{man("databases[0]", "exactly one of path and script must be set")},
		},
		{
			name: "manifest with neither path nor script",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `"script": "mini.sql",`, ``)}
			},
			want: []want{man("databases[0]", "exactly one of path and script must be set")},
		},
		{
			name: "manifest with a duplicate database id",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `"databases": [{`, `"databases": [{"id": "mini", "engine": "sqlite", "script": "mini.sql"}, {`)}
			},
			want: []want{man("databases[1].id", `"mini" is used twice`)},
		},
		{
			name: "manifest without databases",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){func(f map[string]string) {
					f["corpus.json"] = `{"name": "tiny", "databases": []}`
				}}
			},
			want: []want{man("databases", "at least one database is required")},
		},
		{
			name: "manifest with a duplicate knowledge id",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `{"id": "k-fiscal"`, `{"id": "k-strong"`)}
			},
			want: []want{man("databases[0].knowledge[1].id", `is missing or used twice ("k-strong")`)},
		},
		{
			name: "manifest with an unknown field",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `"description":`, `"descripton":`)}
			},
			want: []want{man("descripton", "unknown field")},
		},
		{
			name: "manifest with a bad default comparison",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `"name": "tiny",`, `"name": "tiny", "defaults": {"comparison": {"order": "random"}},`)}
			},
			want: []want{man("defaults.comparison", `unknown order "random"`)},
		},
		{
			name: "missing manifest",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){func(f map[string]string) { delete(f, "corpus.json") }}
			},
			want: []want{man("", "cannot read the corpus manifest")},
		},
		{
			name: "manifest invalid JSON",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `"name": "tiny",`, `"name" "tiny",`)}
			},
			want: []want{{file: corpus.ManifestFile, line: 2, msg: "invalid JSON"}},
		},
		{
			name: "manifest wrong type",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){editFile(t, "corpus.json", `"name": "tiny",`, `"name": 7,`)}
			},
			want: []want{{file: corpus.ManifestFile, line: 2, field: "name", msg: "got JSON number"}},
		},
		{
			name: "missing script",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){func(f map[string]string) { delete(f, "mini.sql") }}
			},
			want: []want{man("databases[0].script", "cannot read mini.sql")},
			more: true,
		},
		{
			name: "script that fails",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){func(f map[string]string) { f["mini.sql"] = "CREATE TABLE sales (;" }}
			},
			want: []want{{file: "mini.sql", msg: `building database "mini"`}},
			more: true,
		},
		{
			name: "missing records file",
			edit: func(t *testing.T) []func(map[string]string) {
				return []func(map[string]string){func(f map[string]string) { delete(f, "records.jsonl") }}
			},
			want: []want{{file: "records.jsonl", msg: "cannot open records file"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := testutil.WriteTiny(t, tc.edit(t)...)
			tc.opt.Engines = engines.Opener{}
			c, err := corpus.LoadDir(context.Background(), dir, tc.opt)
			if err == nil {
				c.Close()
				t.Fatal("LoadDir succeeded, want a *corpus.ValidationError")
			}
			var ve *corpus.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("LoadDir: %v (%T), want a *corpus.ValidationError", err, err)
			}
			got := make([]string, len(ve.Problems))
			for i, p := range ve.Problems {
				got[i] = p.String()
			}
			for _, w := range tc.want {
				prefix := w.prefix(dir)
				msg := strings.ReplaceAll(w.msg, "%[1]s", filepath.Join(dir, "records.jsonl"))
				found := false
				for _, g := range got {
					if rest, ok := strings.CutPrefix(g, prefix); ok && strings.Contains(rest, msg) {
						found = true
						break
					}
				}
				if !found {
					t.Errorf("no problem %q…%q among:\n  %s", prefix, msg, strings.Join(got, "\n  "))
				}
			}
			if len(got) != len(tc.want) && !tc.more {
				t.Errorf("got %d problems, want %d:\n  %s", len(got), len(tc.want), strings.Join(got, "\n  "))
			}
			if !strings.Contains(err.Error(), got[0]) {
				t.Errorf("Error() = %q does not list %q", err.Error(), got[0])
			}
		})
	}
}

func loadTiny(t *testing.T, opt corpus.Options, edit ...func(map[string]string)) (*corpus.Corpus, string) {
	t.Helper()
	dir := testutil.WriteTiny(t, edit...)
	c, err := corpus.LoadDir(context.Background(), dir, opt)
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, dir
}

func TestLoadTiny(t *testing.T) {
	c, dir := loadTiny(t, corpus.Options{Engines: engines.Opener{}})
	if c.Name != "tiny" || c.Description != "a tiny corpus for tests" {
		t.Errorf("name %q description %q", c.Name, c.Description)
	}
	if len(c.Tasks) != 5 {
		t.Fatalf("%d tasks, want 5", len(c.Tasks))
	}
	if n := c.AVTCount(); n != 4 {
		t.Errorf("%d AVTs, want 4", n)
	}
	if got := c.DBs(); len(got) != 1 || got[0] != "mini" {
		t.Errorf("DBs() = %v", got)
	}
	if got := c.Splits(); strings.Join(got, ",") != "dev,train" {
		t.Errorf("Splits() = %v", got)
	}
	top := c.Interpretations("top")
	if len(top) != 2 || top[0].ID != "top-a" || top[1].ID != "top-b" {
		t.Errorf("Interpretations(top) = %v", top)
	}
	if got := c.Interpretations("nothing"); len(got) != 0 {
		t.Errorf("Interpretations(nothing) = %v", got)
	}
	wantIDs := []string{"top-a", "top-b", "big", "strong", "count"}
	for i, task := range c.Tasks {
		if task.ID != wantIDs[i] {
			t.Errorf("task %d is %s, want %s", i, task.ID, wantIDs[i])
		}
		if task.Line != i+1 || task.File != filepath.Join(dir, "records.jsonl") {
			t.Errorf("task %s at %s:%d", task.ID, task.File, task.Line)
		}
		if got, ok := c.Task(task.ID); !ok || got != task {
			t.Errorf("Task(%s) = %v, %v", task.ID, got, ok)
		}
		if task.DB == nil || task.DB.Spec.ID != "mini" || task.Corpus != c {
			t.Errorf("task %s: DB or Corpus not set", task.ID)
		}
	}
	if _, ok := c.Task("nope"); ok {
		t.Error("Task(nope) found")
	}
	// An AVT id defaults to the record id.
	if big, _ := c.Task("big"); big.AVTID != "big" || len(c.Interpretations("big")) != 1 {
		t.Errorf("big: avt %q", big.AVTID)
	}
	strong, _ := c.Task("strong")
	var ks []string
	for _, k := range strong.PublicKnowledge {
		ks = append(ks, k.ID)
	}
	if strings.Join(ks, ",") != "k-fiscal" {
		t.Errorf("strong's public knowledge = %v, want [k-fiscal]", ks)
	}
	count, _ := c.Task("count")
	if len(count.PublicKnowledge) != 2 {
		t.Errorf("count's public knowledge = %v, want both entries", count.PublicKnowledge)
	}
	if !strings.Contains(count.DB.Schema, "CREATE TABLE sales") {
		t.Errorf("derived schema = %q", count.DB.Schema)
	}
	// References were run at load time and cached.
	if n := c.Cache.Len(); n != 5 {
		t.Errorf("cache holds %d results, want 5", n)
	}
}

func TestLoadMultiStatementReference(t *testing.T) {
	c, _ := loadTiny(t, corpus.Options{Engines: engines.Opener{}}, editLine(t, lineCount, `"sql":"SELECT COUNT(*) FROM sales"`,
		`"sql":["SELECT 1","SELECT region FROM sales","SELECT COUNT(*) FROM sales"]`))
	task, _ := c.Task("count")
	if len(task.Reference.SQL) != 3 {
		t.Fatalf("reference has %d statements", len(task.Reference.SQL))
	}
	res, err := task.DB.Engine.Query(context.Background(), task.ReferenceSQL, sqlexec.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 1 || res.Rows[0][0] != int64(13) {
		t.Errorf("result = %v, want the last statement's [[13]]", res.Rows)
	}
	strong, _ := c.Task("strong")
	if len(strong.Reference.SQL) != 2 || !strings.HasPrefix(strong.ReferenceSQL, "SELECT 1;") {
		t.Errorf("strong reference = %q", strong.ReferenceSQL)
	}
}

func TestLoadBlankLines(t *testing.T) {
	c, _ := loadTiny(t, corpus.Options{Engines: engines.Opener{}}, func(f map[string]string) {
		f["records.jsonl"] = "\n" + strings.Replace(f["records.jsonl"], "\n", "\n  \t\n", 1) + "\n\n"
	})
	if len(c.Tasks) != 5 {
		t.Fatalf("%d tasks, want 5", len(c.Tasks))
	}
	// Blank lines count: top-a is on line 2, top-b on line 4.
	for id, line := range map[string]int{"top-a": 2, "top-b": 4, "count": 7} {
		if task, _ := c.Task(id); task.Line != line {
			t.Errorf("%s on line %d, want %d", id, task.Line, line)
		}
	}
}

func TestLoadCRLF(t *testing.T) {
	lf, _ := loadTiny(t, corpus.Options{Engines: engines.Opener{}})
	c, _ := loadTiny(t, corpus.Options{Engines: engines.Opener{}}, func(f map[string]string) {
		f["records.jsonl"] = strings.ReplaceAll(f["records.jsonl"], "\n", "\r\n")
	})
	if len(c.Tasks) != 5 {
		t.Fatalf("%d tasks, want 5", len(c.Tasks))
	}
	for i, task := range c.Tasks {
		if task.Line != i+1 {
			t.Errorf("%s on line %d", task.ID, task.Line)
		}
		if strings.ContainsAny(task.Request, "\r\n") {
			t.Errorf("%s request %q carries the line ending", task.ID, task.Request)
		}
		if task.Hash != lf.Tasks[i].Hash {
			t.Errorf("%s: hash depends on the line ending", task.ID)
		}
	}
}

func TestLoadPathDatabase(t *testing.T) {
	ctx := context.Background()
	dir := testutil.WriteTiny(t, editFile(t, "corpus.json", `"script": "mini.sql"`, `"path": "data/mini.sqlite"`))
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	dbFile := filepath.Join(dir, "data", "mini.sqlite")
	if err := sqlite.BuildFromScript(ctx, testutil.TinyScript, dbFile); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(dbFile)
	if err != nil {
		t.Fatal(err)
	}
	listing := func() []string {
		es, err := os.ReadDir(filepath.Join(dir, "data"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name())
		}
		return names
	}
	c, err := corpus.LoadDir(ctx, dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	if len(c.Tasks) != 5 {
		t.Errorf("%d tasks", len(c.Tasks))
	}
	count, _ := c.Task("count")
	if p := sqlexec.Unscheduled(count.DB.Engine).(*sqlite.DB).Path(); p != dbFile {
		t.Errorf("engine path %s, want %s", p, dbFile)
	}
	check := func(when string) {
		t.Helper()
		after, err := os.ReadFile(dbFile)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before, after) {
			t.Errorf("database file changed %s", when)
		}
		if got := listing(); len(got) != 1 {
			t.Errorf("data directory %s: %v, want only mini.sqlite", when, got)
		}
	}
	check("after loading")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	check("after Close")
}

func TestLoadMissingPathDatabase(t *testing.T) {
	dir := testutil.WriteTiny(t, editFile(t, "corpus.json", `"script": "mini.sql"`, `"path": "mini.sqlite"`))
	_, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	var ve *corpus.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("LoadDir: %v", err)
	}
	prefix := filepath.Join(dir, corpus.ManifestFile) + ": databases[0].path: "
	if len(ve.Problems) == 0 || !strings.HasPrefix(ve.Problems[0].String(), prefix) {
		t.Errorf("problems %v, want one starting %q", ve.Problems, prefix)
	}
}

func TestCloseRemovesBuiltDatabases(t *testing.T) {
	dir := testutil.WriteTiny(t)
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	task, _ := c.Task("count")
	dbFile := sqlexec.Unscheduled(task.DB.Engine).(*sqlite.DB).Path()
	work := filepath.Dir(dbFile)
	if strings.HasPrefix(dbFile, dir) {
		t.Fatalf("built database %s lies in the corpus directory", dbFile)
	}
	if _, err := os.Stat(dbFile); err != nil {
		t.Fatalf("built database: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(work); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("work directory %s still there after Close (%v)", work, err)
	}
}

func TestLoadWorkDirKept(t *testing.T) {
	work := t.TempDir()
	dir := testutil.WriteTiny(t)
	for range 2 { // the second load replaces the first build
		c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}, WorkDir: work})
		if err != nil {
			t.Fatal(err)
		}
		task, _ := c.Task("count")
		if p := sqlexec.Unscheduled(task.DB.Engine).(*sqlite.DB).Path(); p != filepath.Join(work, "tiny", "mini.sqlite") {
			t.Errorf("built at %s", p)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(work, "tiny", "mini.sqlite")); err != nil {
			t.Errorf("a WorkDir build should survive Close: %v", err)
		}
	}
}

func TestLoadProgress(t *testing.T) {
	var calls, last, total int
	c, _ := loadTiny(t, corpus.Options{Engines: engines.Opener{}, Progress: func(done, n int) { calls++; last, total = done, n }})
	if calls != len(c.Tasks) || last != 5 || total != 5 {
		t.Errorf("progress called %d times, last %d/%d", calls, last, total)
	}
}

func TestHash(t *testing.T) {
	base, _ := loadTiny(t, corpus.Options{Engines: engines.Opener{}})
	again, _ := loadTiny(t, corpus.Options{Engines: engines.Opener{}})
	changed, _ := loadTiny(t, corpus.Options{Engines: engines.Opener{}}, editLine(t, lineBig, `"resolution":"The year 2024."`, `"resolution":"The calendar year 2024."`))
	defaults, _ := loadTiny(t, corpus.Options{Engines: engines.Opener{}}, editFile(t, "corpus.json", `"name": "tiny",`, `"name": "tiny", "defaults": {"comparison": {"decimals": 2}},`))
	seen := map[[32]byte]string{}
	for i, task := range base.Tasks {
		if task.Hash == ([32]byte{}) {
			t.Errorf("%s: zero hash", task.ID)
		}
		if prev, dup := seen[task.Hash]; dup {
			t.Errorf("%s and %s share a hash", prev, task.ID)
		}
		seen[task.Hash] = task.ID
		if again.Tasks[i].Hash != task.Hash {
			t.Errorf("%s: hash differs between two loads of the same corpus", task.ID)
		}
		if task.ID == "big" {
			if changed.Tasks[i].Hash == task.Hash {
				t.Errorf("big: hash did not change with its line")
			}
		} else if changed.Tasks[i].Hash != task.Hash {
			t.Errorf("%s: hash changed when only big's line changed", task.ID)
		}
		if defaults.Tasks[i].Hash == task.Hash {
			t.Errorf("%s: hash did not change with the corpus defaults it inherits", task.ID)
		}
	}
}

func TestLoadDemo(t *testing.T) {
	ctx := context.Background()
	c, err := corpus.LoadDemo(ctx, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatalf("LoadDemo: %v", err)
	}
	defer c.Close()
	if c.Name != "demo" {
		t.Errorf("name %q", c.Name)
	}
	var withAmb, zero int
	kinds := map[corpus.Kind]int{}
	for _, task := range c.Tasks {
		n := len(task.Counted())
		switch {
		case n == 0:
			zero++
		case n <= 4:
			withAmb++
		}
		for _, a := range task.Ambiguities {
			kinds[a.Kind]++
		}
		if !strings.HasPrefix(task.File, "demo/") {
			t.Errorf("%s: file %q", task.ID, task.File)
		}
	}
	multi := 0
	seen := map[string]bool{}
	for _, task := range c.Tasks {
		if seen[task.AVTID] {
			continue
		}
		seen[task.AVTID] = true
		if len(c.Interpretations(task.AVTID)) >= 2 {
			multi++
		}
	}
	t.Logf("demo: %d records, %d with 1-4 counted ambiguities, %d with none, %d multi-interpretation AVTs, %d databases, kinds %v",
		len(c.Tasks), withAmb, zero, multi, len(c.DBs()), kinds)
	if len(c.Tasks) < 40 {
		t.Errorf("%d records, want at least 40", len(c.Tasks))
	}
	if withAmb < 30 {
		t.Errorf("%d records with 1-4 counted ambiguities, want at least 30", withAmb)
	}
	if zero < 8 {
		t.Errorf("%d records with no counted ambiguity, want at least 8", zero)
	}
	if multi < 6 {
		t.Errorf("%d AVTs with 2+ interpretations, want at least 6", multi)
	}
	if len(c.DBs()) < 2 {
		t.Errorf("%d databases, want at least 2", len(c.DBs()))
	}
	for _, k := range []corpus.Kind{corpus.Critical, corpus.Knowledge, corpus.NonCritical} {
		if kinds[k] == 0 {
			t.Errorf("no %s ambiguity in the demo corpus", k)
		}
	}

	// The interpretations of each AVT have pairwise different reference
	// results as multisets of rows.
	bag := sqlexec.DefaultPolicy()
	for avt := range seen {
		ts := c.Interpretations(avt)
		if len(ts) < 2 {
			continue
		}
		results := make([]*sqlexec.Result, len(ts))
		for i, task := range ts {
			res, err := task.DB.Engine.Query(ctx, task.ReferenceSQL, sqlexec.DefaultLimits())
			if err != nil {
				t.Fatalf("%s: %v", task.ID, err)
			}
			results[i] = res
		}
		for i := range ts {
			for j := i + 1; j < len(ts); j++ {
				pi, pj := bag, bag
				pi.Decimals, pj.Decimals = ts[i].Policy.Decimals, ts[j].Policy.Decimals
				for _, p := range []sqlexec.Policy{pi, pj} {
					if same, _ := sqlexec.Compare(p, results[i], results[j]); same {
						t.Errorf("AVT %s: %s and %s have the same reference result under %+v", avt, ts[i].ID, ts[j].ID, p)
					}
				}
			}
		}
	}
}

// TestReferenceCacheKeyMatchesCheck checks that loading caches each
// reference under the key sqlexec.Check looks up, also for a record whose
// policy rewrites SQL, so that verifying never runs a reference again.
func TestReferenceCacheKeyMatchesCheck(t *testing.T) {
	dir := testutil.WriteTiny(t, func(f map[string]string) {
		f["records.jsonl"] = strings.Replace(f["records.jsonl"],
			`"reference":{"sql":"SELECT COUNT(*) FROM sales"}`,
			`"reference":{"sql":"SELECT COUNT(DISTINCT id) FROM sales","comparison":{"strip_distinct":true}}`, 1)
	})
	c, err := corpus.LoadDir(context.Background(), dir, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := c.Cache.Len()
	if before != len(c.Tasks) {
		t.Fatalf("cache holds %d results for %d tasks", before, len(c.Tasks))
	}
	for _, task := range c.Tasks {
		v, err := sqlexec.Check(context.Background(), task.DB.Engine, c.Cache, task.RefKey, task.Policy, task.ReferenceSQL, task.ReferenceSQL, sqlexec.DefaultLimits())
		if err != nil || !v.Success {
			t.Fatalf("%s: reference does not verify against itself: %v %v", task.ID, v, err)
		}
	}
	if after := c.Cache.Len(); after != before {
		t.Fatalf("verifying added %d cache entries: a reference was run again", after-before)
	}
}

package ambiqt_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"avtgym/corpus/ambiqt"
	"avtgym/sqlexec"
	"avtgym/sqlexec/sqlite"
)

const tinyScript = `
CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);
INSERT INTO singer VALUES (1, 'Ann', 'France', 40), (2, 'Bo', 'Japan', 29), (3, 'Cy', 'France', 52);
CREATE TABLE "odd ""t""" (k INTEGER PRIMARY KEY, "v x" TEXT);
INSERT INTO "odd ""t""" VALUES (1, 'a'), (2, 'b');
CREATE TABLE singer_name (x INTEGER);
`

// tinyDB builds the hand-made database in a temporary directory and returns its path.
func tinyDB(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tiny.sqlite")
	if err := sqlite.BuildFromScript(context.Background(), tinyScript, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func fileBytes(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func query(t *testing.T, e sqlexec.Engine, q string) *sqlexec.Result {
	t.Helper()
	r, err := e.Query(context.Background(), q, sqlexec.DefaultLimits())
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return r
}

func TestSplitViewSQL(t *testing.T) {
	s := ambiqt.Split{Table: "singer", Column: "country", Key: "singer_id"}
	if s.View() != "singer_country" {
		t.Errorf("View = %q", s.View())
	}
	if got, want := s.CreateSQL(), `CREATE VIEW "singer_country" AS SELECT "singer_id", "country" FROM "singer"`; got != want {
		t.Errorf("CreateSQL = %s, want %s", got, want)
	}
	q := ambiqt.Split{Table: `odd "t"`, Column: "v x", Key: "k"}
	if got, want := q.CreateSQL(), `CREATE VIEW "odd ""t""_v x" AS SELECT "k", "v x" FROM "odd ""t"""`; got != want {
		t.Errorf("CreateSQL = %s, want %s", got, want)
	}
}

func TestRecordSplits(t *testing.T) {
	r := ambiqt.Record{ID: "j", Ambiguity: ambiqt.KindJoin, Change: ambiqt.SchemaChange{
		SplitMap:   map[string]string{"b": "y", "a": "x"},
		PrimaryKey: map[string]string{"a": "id", "b": "bid"},
	}}
	got, err := r.Splits()
	want := []ambiqt.Split{{"a", "x", "id"}, {"b", "y", "bid"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Splits = %v, %v; want %v", got, err, want)
	}
	r.Change.PrimaryKey = map[string]string{"a": "id"}
	if _, err := r.Splits(); err == nil || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("missing primary key: err = %v", err)
	}
	r.Change.SplitMap = nil
	if _, err := r.Splits(); err == nil {
		t.Error("empty split_map: no error")
	}
	p := ambiqt.Record{ID: "p", Ambiguity: ambiqt.KindAggregate}
	if _, err := p.Splits(); err == nil {
		t.Error("P record: no error")
	}
}

// TestPrepareDBTiny materialises splits in a copy of a hand-made database and runs
// an AmbiQT-style pair through the read-only engine; it needs no shared data.
func TestPrepareDBTiny(t *testing.T) {
	ctx := context.Background()
	src := tinyDB(t)
	orig := fileBytes(t, src)
	dest := filepath.Join(t.TempDir(), "copy.sqlite")
	splits := []ambiqt.Split{
		{"singer", "country", "singer_id"},
		{"singer", "country", "singer_id"}, // duplicates are created once
		{`odd "t"`, "v x", "k"},
	}
	if err := ambiqt.PrepareDB(ctx, src, dest, splits); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(orig, fileBytes(t, src)) {
		t.Fatal("PrepareDB changed the source database")
	}
	e, err := sqlite.Open(dest, sqlite.Options{Immutable: false})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	q1 := query(t, e, "select name, country, age from singer order by age desc")
	q2 := query(t, e, "select t1.name, t2.country, t1.age from singer as t1 join singer_country as t2 on t1.singer_id = t2.singer_id order by t1.age desc")
	if ok, why := sqlexec.Compare(sqlexec.Policy{Order: sqlexec.OrderOrdered, Decimals: -1}, q2, q1); !ok {
		t.Errorf("query1/query2 differ: %s", why)
	}
	if len(q1.Rows) != 3 {
		t.Errorf("query1 returned %d rows", len(q1.Rows))
	}
	v := query(t, e, `select * from "odd ""t""_v x" order by k`)
	if !reflect.DeepEqual(v.Columns, []string{"k", "v x"}) || len(v.Rows) != 2 {
		t.Errorf("quoted view: %v %v", v.Columns, v.Rows)
	}
	// The source has no views.
	s, err := sqlite.Open(src, sqlite.Options{Immutable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := query(t, s, "select count(*) from sqlite_schema where type = 'view'").Rows[0][0]; n != int64(0) {
		t.Errorf("source has %v views", n)
	}
}

func TestPrepareDBErrors(t *testing.T) {
	ctx := context.Background()
	src := tinyDB(t)
	dir := t.TempDir()

	// dest exists: error, and dest is left alone.
	existing := filepath.Join(dir, "exists.sqlite")
	if err := os.WriteFile(existing, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ambiqt.PrepareDB(ctx, src, existing, nil); err == nil {
		t.Error("existing dest: no error")
	}
	if string(fileBytes(t, existing)) != "keep" {
		t.Error("existing dest was overwritten")
	}

	for name, sp := range map[string][]ambiqt.Split{
		"missing column":             {{"singer", "nope", "singer_id"}},
		"missing key":                {{"singer", "age", "nope"}},
		"missing table":              {{"nope", "name", "id"}},
		"view collides with a table": {{"singer", "name", "singer_id"}},
		"conflicting duplicate":      {{"singer", "age", "singer_id"}, {"singer", "age", "name"}},
	} {
		dest := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".sqlite")
		err := ambiqt.PrepareDB(ctx, src, dest, sp)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		t.Logf("%s: %v", name, err)
		if _, serr := os.Stat(dest); !os.IsNotExist(serr) {
			t.Errorf("%s: dest not removed after failure (%v)", name, serr)
		}
	}
	if err := ambiqt.PrepareDB(ctx, filepath.Join(dir, "absent.sqlite"), filepath.Join(dir, "x.sqlite"), nil); err == nil {
		t.Error("missing source: no error")
	}
}

func writeTasks(t *testing.T, dir, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, ambiqt.TasksFile), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

const (
	jLine = `{"id": "J-0", "ambiguity": "J_join_ambiguity", "db_id": "tiny", "db_path": "dbs/tiny.sqlite", "db_available": true, "question": "Ages?", "query1": "select name, age from singer", "query2": "select t1.name, t2.age from singer as t1 join singer_age as t2 on t1.singer_id = t2.singer_id", "orig_query": "", "virtual_schema_change": {"split_map": {"singer": "age"}, "primary_key": {"singer": "singer_id"}}, "schema_without_content": ""}`
	pLine = `{"id": "P-0", "ambiguity": "P_precomputed_aggregate", "db_id": "tiny", "db_path": "dbs/tiny.sqlite", "db_available": true, "question": "Avg?", "query1": "select avg(age) from singer", "query2": "select avg_age from singer_age", "virtual_schema_change": {"new_table_name": "singer_age", "all_cols": ["avg_age"], "all_raw_cols": ["age"], "tables_with_pkeys": [["singer", "singer_id"]]}}`
	gone  = `{"id": "J-1", "ambiguity": "J_join_ambiguity", "db_id": "gone", "db_path": "dbs/gone.sqlite", "db_available": false, "question": "?", "query1": "select 1", "query2": "select 1", "virtual_schema_change": {"split_map": {"a": "b"}, "primary_key": {"a": "c"}}}`
	lost  = `{"id": "J-2", "ambiguity": "J_join_ambiguity", "db_id": "lost", "db_path": "dbs/lost.sqlite", "db_available": true, "question": "?", "query1": "select 1", "query2": "select 1", "virtual_schema_change": {"split_map": {"a": "b"}, "primary_key": {"a": "c"}}}`
)

func TestLoadErrors(t *testing.T) {
	for name, tc := range map[string]struct{ text, want string }{
		"malformed":         {jLine + "\n{\"id\": \n", ":2:"},
		"unknown field":     {strings.Replace(jLine, `"question"`, `"questoin"`, 1), `:1: json: unknown field "questoin"`},
		"missing query2":    {pLine + "\n" + strings.Replace(jLine, `"query2"`, `"orig_query2"`, 1), ":2:"},
		"unknown ambiguity": {strings.Replace(jLine, "J_join_ambiguity", "X", 1), `unknown ambiguity "X"`},
		"trailing data":     {jLine + " {}", ":1: trailing data"},
		"no query1":         {strings.Replace(jLine, `"query1": "select name, age from singer"`, `"query1": " "`, 1), "has no query1"},
	} {
		dir := t.TempDir()
		writeTasks(t, dir, tc.text)
		_, err := ambiqt.Load(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), ambiqt.TasksFile) {
			t.Errorf("%s: err = %v, want it to name %s and contain %q", name, err, ambiqt.TasksFile, tc.want)
		}
	}
	if _, err := ambiqt.Load(t.TempDir()); err == nil {
		t.Error("missing file: no error")
	}
}

// TestPrepareJoinDBsTiny runs the whole pipeline on a hand-made data directory: P
// records are ignored, a J record whose database is unavailable or missing is skipped
// with its reason, and the prepared copy answers both readings.
func TestPrepareJoinDBsTiny(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	if err := os.Mkdir(filepath.Join(data, "dbs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := sqlite.BuildFromScript(ctx, tinyScript, filepath.Join(data, "dbs", "tiny.sqlite")); err != nil {
		t.Fatal(err)
	}
	writeTasks(t, data, jLine+"\n\n"+pLine+"\n"+gone+"\n"+lost+"\n")
	recs, err := ambiqt.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 || recs[1].Line != 3 {
		t.Fatalf("loaded %d records, second on line %d", len(recs), recs[1].Line)
	}
	out := t.TempDir()
	paths, skipped, err := ambiqt.PrepareJoinDBs(ctx, data, out, recs)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"tiny": filepath.Join(out, "tiny.sqlite")}; !reflect.DeepEqual(paths, want) {
		t.Errorf("paths = %v, want %v", paths, want)
	}
	if len(skipped) != 2 || skipped[0].Index != 2 || skipped[0].ID != "J-1" || !strings.Contains(skipped[0].Reason, "not available") ||
		skipped[1].Index != 3 || skipped[1].DBID != "lost" || !strings.Contains(skipped[1].Reason, "missing") {
		t.Errorf("skipped = %+v", skipped)
	}
	e, err := sqlite.Open(paths["tiny"], sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r1, r2 := query(t, e, recs[0].Query1), query(t, e, recs[0].Query2)
	if ok, why := sqlexec.Compare(sqlexec.DefaultPolicy(), r2, r1); !ok {
		t.Errorf("tiny pair differs: %s", why)
	}
}

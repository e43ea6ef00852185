package env

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec/sqlite"
)

// TestDDLOnlyDerivedSchema: the derived schema with example rows, reduced
// to its DDL, is exactly the schema derived without rows, even when a
// cell holds "*/", a CREATE statement or a newline-free fake "example
// rows" header, and a table has no rows.
func TestDDLOnlyDerivedSchema(t *testing.T) {
	script := `CREATE TABLE stadium (id INTEGER PRIMARY KEY, name TEXT, note TEXT);
INSERT INTO stadium VALUES (1, 'North */ Park', 'CREATE TABLE secret (x)'), (2, '3 example rows from "x":', 'Ana'), (3, 'Hill', NULL), (4, 'Extra', 'fourth');
CREATE TABLE empty (k INTEGER);
CREATE VIEW big AS SELECT name FROM stadium WHERE id > 1;`
	p := filepath.Join(t.TempDir(), "v.sqlite")
	if err := sqlite.BuildFromScript(context.Background(), script, p); err != nil {
		t.Fatal(err)
	}
	db, err := sqlite.Open(p, sqlite.Options{MaxOpenConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	full, err := db.Schema(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	ddl, err := db.Schema(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(full, "example rows from") || !strings.Contains(full, "has no rows") || !strings.Contains(full, "North * / Park") {
		t.Fatalf("the derived schema lacks the example rows this test strips:\n%s", full)
	}
	if got := DDLOnly(full); got != ddl {
		t.Errorf("DDLOnly(schema with rows) =\n%s\nwant the schema without rows:\n%s", got, ddl)
	}
	if got := DDLOnly(ddl); got != ddl {
		t.Errorf("DDLOnly changed a DDL-only schema:\n%s", got)
	}
}

// TestDDLOnlyFirstRows: BIRD-Interact's "First 3 rows:" sections go, the
// CREATE statements stay.
func TestDDLOnlyFirstRows(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "corpus", "birdinteract", "testdata", "depot", "depot_schema.txt"))
	if err != nil {
		t.Fatal(err)
	}
	in := string(b)
	got := DDLOnly(in)
	for _, gone := range []string{"First 3 rows", "Ana", "route_id  region  driver", "25.0"} {
		if strings.Contains(got, gone) {
			t.Errorf("DDL-only schema still holds %q:\n%s", gone, got)
		}
	}
	if n, m := strings.Count(got, "CREATE TABLE"), strings.Count(in, "CREATE TABLE"); n != m || n == 0 {
		t.Errorf("%d CREATE TABLE statements kept of %d:\n%s", n, m, got)
	}
	if !strings.Contains(got, "returned INTEGER NOT NULL\n);") {
		t.Errorf("a CREATE statement lost its text:\n%s", got)
	}
}

// TestTideView: the TIDE reset's view has the DDL-only schema and every
// other field of the public view; the public view (GetTask's, shared by
// the other protocols) keeps its rows.
func TestTideView(t *testing.T) {
	schema := "CREATE TABLE t (a INTEGER);\n/*\n1 example row from \"t\":\na\n7\n*/\n"
	v := &pb.TaskView{Corpus: "c", TaskId: "x1", Split: "dev", Request: "r", Evidence: "e",
		Database: &pb.DatabaseView{Id: "db", Dialect: "sqlite", Schema: schema, ColumnMeanings: map[string]string{"t.a": "an a"},
			Knowledge: []*pb.KnowledgeEntry{{Id: "1", Name: "k", Definition: "d"}}}}
	got := tideView(v)
	if got.GetDatabase().GetSchema() != "CREATE TABLE t (a INTEGER);\n" {
		t.Errorf("TIDE view schema %q", got.GetDatabase().GetSchema())
	}
	if v.GetDatabase().GetSchema() != schema {
		t.Error("tideView changed the shared public view")
	}
	if got.TaskId != "x1" || got.Request != "r" || got.Evidence != "e" || got.Split != "dev" || got.Corpus != "c" ||
		got.GetDatabase().GetId() != "db" || got.GetDatabase().GetDialect() != "sqlite" ||
		got.GetDatabase().GetColumnMeanings()["t.a"] != "an a" || len(got.GetDatabase().GetKnowledge()) != 1 {
		t.Errorf("TIDE view lost a field: %v", got)
	}
	if tideView(nil) != nil {
		t.Error("tideView(nil) is not nil")
	}
}

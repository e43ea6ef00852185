package birdinteract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"

	"avtgym/corpus"
	"avtgym/corpus/corpuswrite"
	"avtgym/sqlexec/sqlite"
)

// DumpsDir is the folder of the PostgreSQL releases (lite, full) that
// holds the table dumps, one folder <db>_template per database.
const DumpsDir = "postgre_table_dumps"

// CorpusDumpsDir is the folder of the written corpus that holds the table
// dumps, one folder <db> per database (the manifest's dumps field).
const CorpusDumpsDir = "dbs"

// MaxDumpFiles bounds the table dumps of one database.
const MaxDumpFiles = 10000

// dumpName is the name of a table dump: <table>.sql.
var dumpName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.$-]*\.sql$`)

// database is one input database folder, read and checked.
type database struct {
	id         string
	engine     string // engineSQLite or enginePostgres
	sqliteFile string
	sqliteRel  string // sqliteFile relative to the input directory, '/'-separated
	dumpsDir   string // PostgreSQL: the input's table dump folder
	dumpsRel   string // dumpsDir relative to the input directory, '/'-separated
	dumps      []string
	kbFile     string
	eng        *sqlite.DB // SQLite only: nil for PostgreSQL
	schema     string
	columns    map[string]string
	knowledge  []corpus.KnowledgeEntry
}

func (d *database) hasKnowledge(id string) bool {
	for _, k := range d.knowledge {
		if k.ID == id {
			return true
		}
	}
	return false
}

// readDatabases reads the folder of every database the tasks name.
func (im *importer) readDatabases(ctx context.Context, tasks []*task) map[string]*database {
	dbs := map[string]*database{}
	firstUse := map[string]*task{}
	var order []string
	for _, t := range tasks {
		if _, ok := firstUse[t.SelectedDatabase]; !ok {
			firstUse[t.SelectedDatabase] = t
			order = append(order, t.SelectedDatabase)
		}
	}
	for _, id := range order {
		t := firstUse[id]
		if d := im.readDatabase(id, t); d != nil {
			dbs[id] = d
		}
	}
	// Tasks whose database failed are not checked further.
	return dbs
}

// readDatabase reads the database folder <id>/ (schema, column meanings,
// knowledge base) and the database itself: <id>/<id>.sqlite, or the table
// dumps DumpsDir/<id>_template/*.sql. Every file read must lie inside the
// input directory, symbolic links included.
func (im *importer) readDatabase(id string, t *task) *database {
	dir := filepath.Join(im.opt.In, id)
	n := len(im.problems)
	bad := func(file, format string, args ...any) {
		im.report(Problem{File: file, Msg: fmt.Sprintf(format, args...) + fmt.Sprintf(" (database %q of instance_id %s, %s:%d)", id, t.InstanceID, t.file, t.line)})
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		bad(dir, "missing database folder")
		return nil
	}
	d := &database{
		id: id, sqliteFile: filepath.Join(dir, id+".sqlite"), sqliteRel: id + "/" + id + ".sqlite",
		dumpsRel: DumpsDir + "/" + id + "_template", kbFile: filepath.Join(dir, id+"_kb.jsonl"),
	}
	d.dumpsDir = filepath.Join(im.opt.In, filepath.FromSlash(d.dumpsRel))
	_, serr := os.Lstat(d.sqliteFile)
	_, derr := os.Lstat(d.dumpsDir)
	switch {
	case serr == nil && derr == nil:
		bad(d.sqliteFile, "and the PostgreSQL table dump folder %s both exist: keep one (mini-interact's SQLite file, or the lite/full release's table dumps)", d.dumpsDir)
	case serr == nil:
		d.engine = engineSQLite
		im.openSQLite(d, bad)
	case derr == nil:
		d.engine = enginePostgres
		im.readDumps(d, bad)
	default:
		if _, err := os.Stat(filepath.Join(im.opt.In, DumpsDir)); err == nil {
			bad(d.dumpsDir, "missing table dump folder (the PostgreSQL layout of BIRD-Interact lite/full: %s/<db>_template/<table>.sql), and there is no SQLite file %s either", DumpsDir, d.sqliteFile)
		} else {
			bad(d.sqliteFile, "missing SQLite database file (mini-interact), and there is no table dump folder %s either (the PostgreSQL layout of BIRD-Interact lite/full)", d.dumpsDir)
		}
	}

	// Schema text.
	schemaFile := filepath.Join(dir, id+"_schema.txt")
	if b, err := im.readInput(schemaFile); errors.Is(err, fs.ErrNotExist) {
		bad(schemaFile, "missing schema file")
	} else if err != nil {
		bad(schemaFile, "%v", err)
	} else if !utf8.Valid(b) {
		bad(schemaFile, "not valid UTF-8 text")
	} else {
		d.schema = strings.TrimSpace(string(b))
	}

	// Column meanings.
	colFile := filepath.Join(dir, id+"_column_meaning_base.json")
	if b, err := im.readInput(colFile); errors.Is(err, fs.ErrNotExist) {
		bad(colFile, "missing column meanings file")
	} else if err != nil {
		bad(colFile, "%v", err)
	} else if !utf8.Valid(b) {
		bad(colFile, "not valid UTF-8 text")
	} else {
		d.columns = columnMeanings(id, b, func(format string, args ...any) { bad(colFile, format, args...) })
	}

	// Knowledge base.
	lines, _ := im.readInputJSONL(d.kbFile, set("id", "knowledge", "description", "definition", "type", "children_knowledge"))
	seen := map[string]bool{}
	for _, l := range lines {
		b, _ := json.Marshal(l.obj)
		var e kbEntry
		if err := strictDecode(b, &e); err != nil {
			im.report(Problem{File: d.kbFile, Line: l.no, Msg: err.Error()})
			continue
		}
		kid := e.ID.String()
		text := strings.TrimSpace(strings.Join(nonEmpty(e.Description, e.Definition), " "))
		switch {
		case kid == "":
			im.report(Problem{File: d.kbFile, Line: l.no, Field: "id", Msg: "is required"})
		case seen[kid]:
			im.report(Problem{File: d.kbFile, Line: l.no, Field: "id", Msg: fmt.Sprintf("%s is used twice", kid)})
		case strings.TrimSpace(e.Knowledge) == "" || text == "":
			im.report(Problem{File: d.kbFile, Line: l.no, Msg: "knowledge and one of description/definition are required"})
		default:
			seen[kid] = true
			d.knowledge = append(d.knowledge, corpus.KnowledgeEntry{ID: kid, Name: e.Knowledge, Definition: text})
		}
	}
	if len(im.problems) > n {
		if d.eng != nil {
			d.eng.Close()
		}
		return nil
	}
	return d
}

// readInput reads a file of the input directory (opt.In joined with a
// relative name) after checking that it lies inside it, symbolic links
// included; a missing file is an error wrapping fs.ErrNotExist.
func (im *importer) readInput(file string) ([]byte, error) {
	if _, err := os.Lstat(file); err != nil {
		return nil, err
	}
	real, err := im.resolve(file)
	if err != nil {
		return nil, err
	}
	return os.ReadFile(real)
}

// openSQLite opens d's SQLite file (read-only), reporting problems.
func (im *importer) openSQLite(d *database, bad func(file, format string, args ...any)) {
	if real, err := corpuswrite.ResolveInput(im.opt.In, d.sqliteRel); err != nil {
		bad(d.sqliteFile, "%v", err)
	} else if !isSQLite(real) {
		bad(d.sqliteFile, "is not a SQLite database file (mini-interact ships <db>.sqlite; the PostgreSQL releases ship %s/<db>_template/<table>.sql dumps instead)", DumpsDir)
	} else if eng, err := sqlite.Open(real, sqlite.Options{}); err != nil {
		bad(d.sqliteFile, "cannot open: %v", err)
	} else {
		d.eng = eng
	}
}

// readDumps lists d's table dump folder: every <table>.sql file in it
// (other entries are ignored), each a regular file inside the input
// directory, symbolic links included, and not empty. The files are not
// parsed: the loader builds the database from them.
func (im *importer) readDumps(d *database, bad func(file, format string, args ...any)) {
	n := len(im.problems)
	in, err := filepath.Abs(im.opt.In)
	if err == nil {
		in, err = filepath.EvalSymlinks(in)
	}
	if err != nil {
		bad(d.dumpsDir, "cannot resolve the input directory: %v", err)
		return
	}
	real, err := filepath.EvalSymlinks(filepath.Join(in, filepath.FromSlash(d.dumpsRel)))
	if err != nil {
		bad(d.dumpsDir, "cannot read the table dump folder: %v", err)
		return
	}
	if real != in && !strings.HasPrefix(real, in+string(filepath.Separator)) {
		bad(d.dumpsDir, "the table dump folder resolves outside the input directory (to %s, through a symbolic link)", real)
		return
	}
	root, err := os.OpenRoot(in)
	if err != nil {
		bad(d.dumpsDir, "cannot read the table dump folder: %v", err)
		return
	}
	defer root.Close()
	f, err := root.Open(d.dumpsRel)
	if err != nil {
		bad(d.dumpsDir, "cannot read the table dump folder inside the input directory: %v", err)
		return
	}
	ents, err := f.ReadDir(MaxDumpFiles + 1)
	f.Close()
	if err != nil && err != io.EOF {
		bad(d.dumpsDir, "cannot list the table dump folder: %v", err)
		return
	}
	if len(ents) > MaxDumpFiles {
		bad(d.dumpsDir, "holds more than %d entries", MaxDumpFiles)
		return
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") || e.IsDir() {
			continue
		}
		file := filepath.Join(d.dumpsDir, name)
		if !dumpName.MatchString(name) {
			bad(file, "a table dump must be named <table>.sql with letters, digits, '_', '.', '$' or '-'")
			continue
		}
		path, err := corpuswrite.ResolveInput(im.opt.In, d.dumpsRel+"/"+name)
		if err != nil {
			bad(file, "%v", err)
			continue
		}
		if fi, err := os.Stat(path); err != nil {
			bad(file, "%v", err)
			continue
		} else if fi.Size() == 0 {
			bad(file, "is empty: want the table's pg_dump output")
			continue
		}
		d.dumps = append(d.dumps, name)
	}
	if len(d.dumps) == 0 && len(im.problems) == n {
		bad(d.dumpsDir, "holds no table dump (<table>.sql)")
	}
}

// columnMeanings flattens a <db>_column_meaning_base.json file: a key
// "db|table|column" becomes "table.column". A structured meaning
// {"column_meaning": text, "fields_meaning": {...}} (a JSON or JSONB column)
// becomes "table.column" → text and, for each field, "table.column.field" →
// its meaning, nested objects giving "table.column.field.sub"; any other
// non-string meaning is kept as compact JSON text.
func columnMeanings(id string, b []byte, bad func(format string, args ...any)) map[string]string {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		bad("malformed JSON: %v", err)
		return nil
	}
	out := map[string]string{}
	put := func(key, k, v string) {
		if _, dup := out[k]; dup {
			bad("key %q: its meaning %q is named twice", key, k)
			return
		}
		out[k] = v
	}
	var fields func(key, prefix string, m map[string]json.RawMessage)
	fields = func(key, prefix string, m map[string]json.RawMessage) {
		for _, f := range sortedKeys(m) {
			var s string
			var sub map[string]json.RawMessage
			switch {
			case json.Unmarshal(m[f], &s) == nil:
				put(key, prefix+"."+f, s)
			case json.Unmarshal(m[f], &sub) == nil && sub != nil:
				fields(key, prefix+"."+f, sub)
			default:
				put(key, prefix+"."+f, compact(m[f]))
			}
		}
	}
	for _, k := range sortedKeys(raw) {
		parts := strings.Split(k, "|")
		if len(parts) != 3 || parts[0] != id || parts[1] == "" || parts[2] == "" {
			bad("key %q: want \"%s|table|column\"", k, id)
			continue
		}
		col := parts[1] + "." + parts[2]
		var s string
		if json.Unmarshal(raw[k], &s) == nil {
			put(k, col, s)
			continue
		}
		var st struct {
			ColumnMeaning *string                    `json:"column_meaning"`
			FieldsMeaning map[string]json.RawMessage `json:"fields_meaning"`
		}
		if strictDecode(raw[k], &st) == nil && st.ColumnMeaning != nil {
			put(k, col, *st.ColumnMeaning)
			fields(k, col, st.FieldsMeaning)
			continue
		}
		put(k, col, compact(raw[k])) // other structured meanings are kept as JSON text
	}
	return out
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			out = append(out, strings.TrimSpace(s))
		}
	}
	return out
}

func isSQLite(file string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 16)
	if _, err := io.ReadFull(f, head); err != nil {
		return false
	}
	return string(head) == "SQLite format 3\x00"
}

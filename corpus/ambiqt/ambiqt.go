// Package ambiqt reads the AmbiQT join (J, "tbl-split") and precomputed-aggregate
// (P, "tbl-agg") records of ../shared/data/ambiqt and prepares private copies of
// their Spider databases in which the J records' split tables exist as views, so that
// both readings of a J question (query1 on the original table, query2 on the split
// table) can be executed and their results compared.
//
// AmbiQT's J type splits a column <col> of <table> into a new table <table>_<col>
// holding (<pk>, <col>); the table exists only in the modified schema text. PrepareDB
// materialises it as
//
//	CREATE VIEW <table>_<col> AS SELECT <pk>, <col> FROM <table>
//
// in a copy of the database; the source file is only read. See docs/ambiqt.md.
package ambiqt

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	// The writable "sqlite3" driver, used only on the private copy.
	_ "github.com/mattn/go-sqlite3"
)

// TasksFile is the name of the slimmed AmbiQT record file inside the data directory.
const TasksFile = "tasks_validation_JP.jsonl"

// Ambiguity types as they appear in a record's "ambiguity" field.
const (
	// KindJoin marks a J record: query2 reads a column from a split table.
	KindJoin = "J_join_ambiguity"
	// KindAggregate marks a P record: query2 reads a precomputed aggregate table.
	KindAggregate = "P_precomputed_aggregate"
)

// Record is one line of TasksFile.
type Record struct {
	// ID is the record id, e.g. "ambiqt-J-0000".
	ID string `json:"id"`
	// Ambiguity is KindJoin or KindAggregate.
	Ambiguity string `json:"ambiguity"`
	// DBID is the Spider database id, e.g. "concert_singer".
	DBID string `json:"db_id"`
	// DBPath is the database file's path relative to the data directory.
	DBPath string `json:"db_path"`
	// DBAvailable says whether the data directory ships the database.
	DBAvailable bool `json:"db_available"`
	// Question is the natural-language question.
	Question string `json:"question"`
	// Query1 is Spider's gold SQL on the original database.
	Query1 string `json:"query1"`
	// Query2 is the other reading, written against the modified schema.
	Query2 string `json:"query2"`
	// OrigQuery is Spider's original gold SQL.
	OrigQuery string `json:"orig_query"`
	// Change describes the modified schema.
	Change SchemaChange `json:"virtual_schema_change"`
	// SchemaWithoutContent is the modified schema as AmbiQT's compact text.
	SchemaWithoutContent string `json:"schema_without_content"`
	// Line is the record's 1-based line number in TasksFile (not part of the JSON).
	Line int `json:"-"`
}

// SchemaChange is a record's "virtual_schema_change": split_map and primary_key for
// J records, the remaining fields for P records.
type SchemaChange struct {
	// SplitMap maps a table to the column split out of it (J).
	SplitMap map[string]string `json:"split_map,omitempty"`
	// PrimaryKey maps a table of SplitMap to the key column copied into the split table (J).
	PrimaryKey map[string]string `json:"primary_key,omitempty"`
	// NewTableName is the aggregate table's name (P).
	NewTableName string `json:"new_table_name,omitempty"`
	// AllCols lists the aggregate table's columns (P).
	AllCols []string `json:"all_cols,omitempty"`
	// AllRawCols lists the aggregated source columns (P).
	AllRawCols []string `json:"all_raw_cols,omitempty"`
	// TablesWithPkeys lists [table, primary key] pairs (P).
	TablesWithPkeys [][]string `json:"tables_with_pkeys,omitempty"`
}

// IsJoin reports whether r is a J record.
func (r Record) IsJoin() bool { return r.Ambiguity == KindJoin }

// Split is one split table of a J record.
type Split struct {
	// Table is the original table.
	Table string
	// Column is the column split out of Table.
	Column string
	// Key is Table's key column, copied into the split table.
	Key string
}

// View returns the split table's name, <table>_<col>.
func (s Split) View() string { return s.Table + "_" + s.Column }

// CreateSQL returns the statement that materialises the split table as a view.
func (s Split) CreateSQL() string {
	return fmt.Sprintf("CREATE VIEW %s AS SELECT %s, %s FROM %s",
		quoteIdent(s.View()), quoteIdent(s.Key), quoteIdent(s.Column), quoteIdent(s.Table))
}

// Splits returns a J record's split tables, sorted by view name. It fails when the
// record is not a J record, has no split, or lacks the primary key of a split table.
func (r Record) Splits() ([]Split, error) {
	if !r.IsJoin() {
		return nil, fmt.Errorf("ambiqt: record %s is %q, not a join (J) record", r.ID, r.Ambiguity)
	}
	if len(r.Change.SplitMap) == 0 {
		return nil, fmt.Errorf("ambiqt: record %s has an empty split_map", r.ID)
	}
	out := make([]Split, 0, len(r.Change.SplitMap))
	for t, c := range r.Change.SplitMap {
		k, ok := r.Change.PrimaryKey[t]
		if !ok || k == "" || t == "" || c == "" {
			return nil, fmt.Errorf("ambiqt: record %s: split of table %q (column %q) has no primary_key", r.ID, t, c)
		}
		out = append(out, Split{Table: t, Column: c, Key: k})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].View() < out[j].View() })
	return out, nil
}

// Load reads dir/TasksFile strictly: unknown fields, malformed lines, and records
// without id, ambiguity, db_id, db_path, query1 or query2 are errors naming the file
// and line.
func Load(dir string) ([]Record, error) {
	path := filepath.Join(dir, TasksFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ambiqt: %w", err)
	}
	defer f.Close()
	return read(path, f)
}

func read(path string, rd io.Reader) ([]Record, error) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var out []Record
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		var r Record
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("ambiqt: %s:%d: %w", path, n, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("ambiqt: %s:%d: trailing data after the record", path, n)
		}
		for _, f := range []struct{ name, v string }{
			{"id", r.ID}, {"ambiguity", r.Ambiguity}, {"db_id", r.DBID},
			{"db_path", r.DBPath}, {"query1", r.Query1}, {"query2", r.Query2},
		} {
			if strings.TrimSpace(f.v) == "" {
				return nil, fmt.Errorf("ambiqt: %s:%d: record %q has no %s", path, n, r.ID, f.name)
			}
		}
		if r.Ambiguity != KindJoin && r.Ambiguity != KindAggregate {
			return nil, fmt.Errorf("ambiqt: %s:%d: record %s has unknown ambiguity %q", path, n, r.ID, r.Ambiguity)
		}
		r.Line = n
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ambiqt: %s: %w", path, err)
	}
	return out, nil
}

// PrepareDB copies the SQLite database src to dest (which must not exist) and creates
// one view per distinct split (see Split.CreateSQL) in the copy, in one transaction.
// A split naming a missing table, key or column fails here (checked against the table's
// columns, since SQLite would otherwise read an unknown "column" as a string literal),
// as does a view whose name is taken. src is only read. On failure dest is removed.
func PrepareDB(ctx context.Context, src, dest string, splits []Split) (err error) {
	if err := copyFile(src, dest); err != nil {
		return fmt.Errorf("ambiqt: prepare %s: %w", dest, err)
	}
	defer func() {
		if err != nil {
			os.Remove(dest)
			os.Remove(dest + "-journal")
		}
	}()
	abs, err := filepath.Abs(dest)
	if err != nil {
		return fmt.Errorf("ambiqt: prepare %s: %w", dest, err)
	}
	db, err := sql.Open("sqlite3", "file:"+(&url.URL{Path: abs}).EscapedPath()+"?mode=rw")
	if err != nil {
		return fmt.Errorf("ambiqt: prepare %s: %w", dest, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("ambiqt: prepare %s: %w", dest, err)
	}
	defer tx.Rollback()
	seen := map[string]Split{}
	for _, s := range splits {
		key := strings.ToLower(s.View())
		if prev, ok := seen[key]; ok {
			if !strings.EqualFold(prev.Key, s.Key) || !strings.EqualFold(prev.Table, s.Table) || !strings.EqualFold(prev.Column, s.Column) {
				return fmt.Errorf("ambiqt: prepare %s: view %s defined twice differently (%+v, %+v)", dest, s.View(), prev, s)
			}
			continue
		}
		seen[key] = s
		if err := checkColumns(ctx, tx, s); err != nil {
			return fmt.Errorf("ambiqt: prepare %s: view %s: %w", dest, s.View(), err)
		}
		if _, err := tx.ExecContext(ctx, s.CreateSQL()); err != nil {
			return fmt.Errorf("ambiqt: prepare %s: %s: %w", dest, s.CreateSQL(), err)
		}
		rows, err := tx.QueryContext(ctx, "SELECT * FROM "+quoteIdent(s.View())+" LIMIT 1")
		if err == nil {
			err = rows.Close()
		}
		if err != nil {
			return fmt.Errorf("ambiqt: prepare %s: view %s: %w", dest, s.View(), err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("ambiqt: prepare %s: %w", dest, err)
	}
	return db.Close()
}

// Skipped is a record that PrepareJoinDBs could not give a database.
type Skipped struct {
	// Index is the record's index in the slice passed to PrepareJoinDBs.
	Index int
	// ID is the record's id.
	ID string
	// DBID is the record's database id.
	DBID string
	// Reason says why the record was skipped.
	Reason string
}

// PrepareJoinDBs prepares, under destDir, one private copy per database used by the J
// records among recs (other records are ignored), with the views of all those
// records' splits, and returns the copies' paths by db_id. A J record whose database
// is marked unavailable or is missing from dataDir is returned in skipped with its
// reason (AmbiQT's wta_1 is not shipped); any other problem is an error.
func PrepareJoinDBs(ctx context.Context, dataDir, destDir string, recs []Record) (paths map[string]string, skipped []Skipped, err error) {
	byDB := map[string][]Split{}
	src := map[string]string{}
	var order []string
	for i, r := range recs {
		if !r.IsJoin() {
			continue
		}
		p := filepath.Join(dataDir, filepath.FromSlash(r.DBPath))
		if !r.DBAvailable {
			skipped = append(skipped, Skipped{i, r.ID, r.DBID, fmt.Sprintf("database %s is not available (db_available is false)", r.DBID)})
			continue
		}
		if _, err := os.Stat(p); err != nil {
			skipped = append(skipped, Skipped{i, r.ID, r.DBID, fmt.Sprintf("database %s is missing: %v", r.DBID, err)})
			continue
		}
		sp, err := r.Splits()
		if err != nil {
			return nil, nil, err
		}
		if prev, ok := src[r.DBID]; ok && prev != p {
			return nil, nil, fmt.Errorf("ambiqt: record %s: database %s at %s, earlier at %s", r.ID, r.DBID, p, prev)
		}
		if _, ok := src[r.DBID]; !ok {
			order = append(order, r.DBID)
		}
		src[r.DBID] = p
		byDB[r.DBID] = append(byDB[r.DBID], sp...)
	}
	paths = map[string]string{}
	for _, id := range order {
		if strings.ContainsAny(id, `/\`) || id == "." || id == ".." {
			return nil, nil, fmt.Errorf("ambiqt: unsafe db_id %q", id)
		}
		dest := filepath.Join(destDir, id+".sqlite")
		if err := PrepareDB(ctx, src[id], dest, byDB[id]); err != nil {
			return nil, nil, err
		}
		paths[id] = dest
	}
	return paths, skipped, nil
}

// checkColumns fails unless s.Table exists with columns s.Key and s.Column
// (case-insensitively, as SQLite resolves names).
func checkColumns(ctx context.Context, tx *sql.Tx, s Split) error {
	rows, err := tx.QueryContext(ctx, "SELECT name FROM pragma_table_info(?)", s.Table)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols := map[string]bool{}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return err
		}
		cols[strings.ToLower(c)] = true
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(cols) == 0 {
		return fmt.Errorf("no such table %q", s.Table)
	}
	for _, c := range []string{s.Key, s.Column} {
		if !cols[strings.ToLower(c)] {
			return fmt.Errorf("table %q has no column %q", s.Table, c)
		}
	}
	return nil
}

func copyFile(src, dest string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil {
		return err
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	out, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dest)
		}
	}()
	_, err = io.Copy(out, in)
	return err
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

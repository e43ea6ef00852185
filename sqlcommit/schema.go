package sqlcommit

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver
)

// Schema is a database's tables and their columns, compared
// case-insensitively. A nil *Schema is valid and knows nothing.
type Schema struct {
	tables  map[string][]string // lower-case table -> lower-case columns
	columns map[string]bool     // every lower-case column of any table
}

// NewSchema builds a Schema from table names to column names.
func NewSchema(tables map[string][]string) *Schema {
	s := &Schema{tables: map[string][]string{}, columns: map[string]bool{}}
	for t, cols := range tables {
		lt := strings.ToLower(t)
		for _, c := range cols {
			lc := strings.ToLower(c)
			s.tables[lt] = append(s.tables[lt], lc)
			s.columns[lc] = true
		}
		if _, ok := s.tables[lt]; !ok {
			s.tables[lt] = nil
		}
	}
	return s
}

// LoadSchema reads the tables (and views) and their columns of a SQLite
// database file, opened read-only.
func LoadSchema(path string) (*Schema, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("database %s: no such file", path)
		}
		return nil, fmt.Errorf("database %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("database %s: not a regular file", path)
	}
	db, err := sql.Open("sqlite3", "file:"+(&url.URL{Path: abs}).EscapedPath()+"?mode=ro")
	if err != nil {
		return nil, fmt.Errorf("database %s: %w", path, err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("database %s: not a readable SQLite database: %w", path, err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("database %s: %w", path, err)
		}
		names = append(names, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("database %s: %w", path, err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("database %s: no tables (not a SQLite database, or an empty one)", path)
	}
	tables := map[string][]string{}
	for _, n := range names {
		cr, err := db.Query(`SELECT name FROM pragma_table_info(?)`, n)
		if err != nil {
			return nil, fmt.Errorf("database %s: columns of %s: %w", path, n, err)
		}
		cols := []string{}
		for cr.Next() {
			var c string
			if err := cr.Scan(&c); err != nil {
				cr.Close()
				return nil, fmt.Errorf("database %s: columns of %s: %w", path, n, err)
			}
			cols = append(cols, c)
		}
		cr.Close()
		if err := cr.Err(); err != nil {
			return nil, fmt.Errorf("database %s: columns of %s: %w", path, n, err)
		}
		tables[n] = cols
	}
	return NewSchema(tables), nil
}

// HasTable reports whether the schema has a table (or view) of that name.
func (s *Schema) HasTable(name string) bool {
	if s == nil {
		return false
	}
	_, ok := s.tables[strings.ToLower(name)]
	return ok
}

// HasColumn reports whether any table of the schema has a column of that
// name.
func (s *Schema) HasColumn(name string) bool {
	return s != nil && s.columns[strings.ToLower(name)]
}

// Columns returns the lower-case columns of a table, nil when the schema
// does not know it.
func (s *Schema) Columns(table string) []string {
	if s == nil {
		return nil
	}
	return s.tables[strings.ToLower(table)]
}

// Tables returns the lower-case table names, sorted.
func (s *Schema) Tables() []string {
	if s == nil {
		return nil
	}
	out := make([]string, 0, len(s.tables))
	for t := range s.tables {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

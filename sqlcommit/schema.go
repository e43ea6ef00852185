package sqlcommit

import (
	"sort"
	"strings"
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

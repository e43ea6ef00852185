package sqlcommit

// The tests read their SQLite schemas directly; serving reads them through
// an engine (engines.CommitSchema), so that this package links no driver.

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	_ "github.com/mattn/go-sqlite3" // the "sqlite3" driver
)

// loadSchema reads the tables (and views) and their columns of a SQLite
// database file, opened read-only.
func loadSchema(path string) (*Schema, error) {
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

package engines

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"avtgym/sqlcommit"
	"avtgym/sqlexec"
	"avtgym/sqlexec/sqlite"
)

// CommitSchema reads the tables (and views) and their columns of the
// SQLite database file at path, opened read-only, as package sqlcommit
// needs them to resolve SQLite's double-quoted names (avtgym sql).
func CommitSchema(ctx context.Context, path string) (*sqlcommit.Schema, error) {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("database %s: no such file", path)
	case err != nil:
		return nil, fmt.Errorf("database %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("database %s: not a regular file", path)
	}
	db, err := sqlite.Open(path, sqlite.Options{MaxOpenConns: 1})
	if err != nil {
		return nil, fmt.Errorf("database %s: not a readable SQLite database: %w", path, err)
	}
	defer db.Close()
	const q = `SELECT m.name, p.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p WHERE m.type IN ('table', 'view') ORDER BY m.name, p.cid`
	res, err := db.Query(ctx, q, sqlexec.DefaultLimits())
	if err != nil {
		return nil, fmt.Errorf("database %s: reading its tables and columns: %w", path, err)
	}
	tables := map[string][]string{}
	for _, row := range res.Rows {
		if len(row) == 2 {
			t, c := fmt.Sprint(row[0]), fmt.Sprint(row[1])
			tables[t] = append(tables[t], c)
		}
	}
	if len(tables) == 0 {
		return nil, fmt.Errorf("database %s: no tables (not a SQLite database, or an empty one)", path)
	}
	return sqlcommit.NewSchema(tables), nil
}

package corpus

import (
	"context"
	"fmt"
	"sync"

	"avtgym/internal/cache"
	"avtgym/sqlcommit"
	"avtgym/sqlexec"
)

// CommitSchema is the database's tables and columns as package sqlcommit
// needs them to resolve SQLite's double-quoted names (PROTOCOL.md §9):
// read on first use, from the database itself, and kept. A database whose
// schema cannot be read (or a PostgreSQL one: commitment sets are taken
// of SQLite queries) gets a nil schema, which sqlcommit treats as knowing
// nothing; the error says why. Such a failure is kept too, unless the
// environment caused it (the database unavailable, or busy: see
// sqlexec.Lasting) or ctx ended: the next call then reads again.
// Concurrent first calls read once.
func (db *DB) CommitSchema(ctx context.Context) (*sqlcommit.Schema, error) {
	return db.commitSchema().Get(ctx, struct{}{}, func(ctx context.Context) (*sqlcommit.Schema, error) {
		return readCommitSchema(ctx, db)
	})
}

// commitSchemaCache holds one database's CommitSchema (an internal/cache
// of one entry: single flight, and the environment's failures not kept).
type commitSchemaCache = cache.Cache[struct{}, *sqlcommit.Schema]

// commitSchemaCell is a DB's commitSchemaCache, made on first use (so that
// a DB built as a literal needs none).
type commitSchemaCell struct {
	once sync.Once
	c    *commitSchemaCache
}

func (cell *commitSchemaCell) get() *commitSchemaCache {
	if cell == nil {
		return newCommitSchemaCache()
	}
	cell.once.Do(func() {
		cell.c = newCommitSchemaCache()
	})
	return cell.c
}

func newCommitSchemaCache() *commitSchemaCache {
	return cache.New(cache.Options[struct{}, *sqlcommit.Schema]{MaxEntries: 1, KeepError: sqlexec.Lasting})
}

// commitSchema returns db's commitSchemaCache.
func (db *DB) commitSchema() *commitSchemaCache { return db.commit.get() }

func readCommitSchema(ctx context.Context, db *DB) (*sqlcommit.Schema, error) {
	if db.Spec.Engine == EnginePostgres {
		return nil, fmt.Errorf("database %q is PostgreSQL: commitment sets are taken of SQLite queries", db.Spec.ID)
	}
	const q = `SELECT m.name, p.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p WHERE m.type IN ('table', 'view') ORDER BY m.name, p.cid`
	res, err := db.Engine.Query(ctx, q, sqlexec.DefaultLimits())
	if err != nil {
		return nil, fmt.Errorf("database %q: reading its tables and columns: %w", db.Spec.ID, err)
	}
	tables := map[string][]string{}
	for _, row := range res.Rows {
		if len(row) != 2 {
			continue
		}
		t, c := fmt.Sprint(row[0]), fmt.Sprint(row[1])
		tables[t] = append(tables[t], c)
	}
	return sqlcommit.NewSchema(tables), nil
}

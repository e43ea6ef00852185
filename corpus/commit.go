package corpus

import (
	"context"
	"fmt"
	"sync"

	"avtgym/sqlcommit"
	"avtgym/sqlexec"
)

// CommitSchema is the database's tables and columns as package sqlcommit
// needs them to resolve SQLite's double-quoted names (PROTOCOL.md §9):
// read once, on first use, from the database itself. A database whose
// schema cannot be read (or a PostgreSQL one: commitment sets are taken
// of SQLite queries) gets a nil schema, which sqlcommit treats as knowing
// nothing; the error says why.
func (db *DB) CommitSchema(ctx context.Context) (*sqlcommit.Schema, error) {
	v, _ := commitSchemas.LoadOrStore(db, new(commitSchema))
	c := v.(*commitSchema)
	c.once.Do(func() { c.schema, c.err = readCommitSchema(context.WithoutCancel(ctx), db) })
	return c.schema, c.err
}

// commitSchemas holds each database's CommitSchema, read once (a DB is a
// plain value that tests build and copy, so the cache lives beside it).
var commitSchemas sync.Map // *DB → *commitSchema

type commitSchema struct {
	once   sync.Once
	schema *sqlcommit.Schema
	err    error
}

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

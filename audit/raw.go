package audit

import (
	"context"
	"encoding/hex"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"avtgym/corpus"
	"avtgym/sqlexec"
)

// rawResult is a query result in the audit's own canonical form,
// independent of the verifier's comparator: the column count and each
// row rendered as text, rows sorted, and the rows in the order returned.
type rawResult struct {
	cols    int
	rows    []string
	ordered []string
}

// canonical renders a result: NULL as NULL; integers, and reals with an
// integral value, as n:<integer>; other reals as n:<shortest decimal>;
// text quoted as t:"..."; blobs as b:<hex>. Cells are joined by ","
// (unambiguous, since text is quoted) and the rows sorted. Column names
// are ignored.
func canonical(res *sqlexec.Result) rawResult {
	rows := make([]string, len(res.Rows))
	var b strings.Builder
	for i, row := range res.Rows {
		b.Reset()
		for k, v := range row {
			if k > 0 {
				b.WriteByte(',')
			}
			b.WriteString(cell(v))
		}
		rows[i] = b.String()
	}
	ordered := append([]string(nil), rows...)
	sort.Strings(rows)
	return rawResult{cols: len(res.Columns), rows: rows, ordered: ordered}
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case int64:
		return "n:" + strconv.FormatInt(x, 10)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return "n:" + strconv.FormatInt(int64(x), 10)
		}
		return "n:" + strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return "t:" + strconv.Quote(x)
	case []byte:
		return "b:" + hex.EncodeToString(x)
	default:
		return "?:" + strconv.Quote(stringOf(v))
	}
}

func stringOf(v any) string {
	if s, ok := v.(interface{ String() string }); ok {
		return s.String()
	}
	return "unsupported cell type"
}

// equalRaw reports whether two canonical results are equal: same column
// count and the same sorted rows.
func equalRaw(a, b rawResult) bool {
	if a.cols != b.cols || len(a.rows) != len(b.rows) {
		return false
	}
	for i := range a.rows {
		if a.rows[i] != b.rows[i] {
			return false
		}
	}
	return true
}

// equalOrdered reports whether two canonical results have the same column
// count and the same rows in the same order.
func equalOrdered(a, b rawResult) bool {
	if a.cols != b.cols || len(a.ordered) != len(b.ordered) {
		return false
	}
	for i := range a.ordered {
		if a.ordered[i] != b.ordered[i] {
			return false
		}
	}
	return true
}

// rawKey names one reference run on one database.
type rawKey struct {
	db   *corpus.DB
	task *corpus.Task
}

type rawEntry struct {
	once sync.Once
	res  rawResult
	err  error
}

// rawCache runs each reference once per database.
type rawCache struct {
	mu sync.Mutex
	m  map[rawKey]*rawEntry
}

// get returns the canonical result of t's reference run on db.
func (c *rawCache) get(ctx context.Context, db *corpus.DB, t *corpus.Task, lim sqlexec.Limits) (rawResult, error) {
	c.mu.Lock()
	e, ok := c.m[rawKey{db, t}]
	if !ok {
		e = &rawEntry{}
		c.m[rawKey{db, t}] = e
	}
	c.mu.Unlock()
	e.once.Do(func() {
		res, err := db.Engine.Query(ctx, t.ReferenceSQL, lim)
		if err != nil {
			e.err = err
			return
		}
		e.res = canonical(res)
	})
	return e.res, e.err
}

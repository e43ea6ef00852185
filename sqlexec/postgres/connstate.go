package postgres

import (
	"container/list"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// Each connection keeps state of its own (in pgconn's CustomData): the values
// of the limit settings it has (see Query), and its prepared statements: a
// statement is prepared (parsed, analyzed and, on first execution, planned;
// PostgreSQL keeps the generic plan of a statement without parameters) the
// first time the connection runs it, and later only bound and executed, as
// pgx's default statement cache does. The cache holds at most stmtCacheSize statements per
// connection; the least recently used is deallocated when a new one needs
// its place. Queries cannot touch these statements (PREPARE, EXECUTE and
// DEALLOCATE are refused).
const (
	stmtCacheSize = 32
	// maxCachedStmt is the longest statement that is cached.
	maxCachedStmt = 16 << 10
	connStateKey  = "avtgym.conn"
)

type cached struct{ text, name string }

// connState is the state of one connection. It is used by one query at a
// time, as the connection is.
type connState struct {
	names   map[string]*list.Element // text -> element of lru holding *cached
	lru     list.List                // most recently used first
	next    int
	evicted []string // names to deallocate
	// settings are the connection's values of limitSettings ("" or absent:
	// the role's default).
	settings map[string]string
	// local is whether the connection's backend can be watched here (1),
	// cannot (-1), or is not known yet (0): memwatch.go.
	local int8
}

func connStateOf(pc *pgconn.PgConn) *connState {
	if c, ok := pc.CustomData()[connStateKey].(*connState); ok {
		return c
	}
	c := &connState{names: map[string]*list.Element{}, settings: map[string]string{}}
	pc.CustomData()[connStateKey] = c
	return c
}

// plan returns reqs with a reqPrepare before each statement to prepare, and
// the prepared statement's name on every request that can use one; it marks
// the cached statements used and evicts others to make room.
func (c *connState) plan(reqs []request) []request {
	out := make([]request, 0, len(reqs)+4)
	using := map[string]string{} // text -> name, of the statements this pipeline uses
	for _, r := range reqs {
		if e, ok := c.names[r.text]; ok {
			c.lru.MoveToFront(e)
			using[r.text] = e.Value.(*cached).name
		}
	}
	for _, r := range reqs {
		if name, ok := using[r.text]; ok {
			r.name = name
		} else if len(r.text) <= maxCachedStmt && c.makeRoom(using) {
			c.next++
			r.name = "avtgym_" + strconv.Itoa(c.next)
			using[r.text] = r.name
			out = append(out, request{kind: reqPrepare, stmt: r.stmt, text: r.text, name: r.name})
		}
		out = append(out, r)
	}
	return out
}

// makeRoom evicts the least recently used statement not in use when the cache
// is full (counting statements being prepared); false when it cannot.
func (c *connState) makeRoom(using map[string]string) bool {
	inUse := 0
	for t := range using {
		if _, ok := c.names[t]; !ok {
			inUse++ // being prepared
		}
	}
	for c.lru.Len()+inUse >= stmtCacheSize {
		e := c.lru.Back()
		if e == nil {
			return false
		}
		if _, ok := using[e.Value.(*cached).text]; ok {
			return false
		}
		v := e.Value.(*cached)
		c.lru.Remove(e)
		delete(c.names, v.text)
		c.evicted = append(c.evicted, v.name)
	}
	return true
}

// prepared records a statement the server prepared.
func (c *connState) prepared(text, name string) {
	c.names[text] = c.lru.PushFront(&cached{text: text, name: name})
}

// deallocated records an evicted statement the server deallocated.
func (c *connState) deallocated(name string) {
	for i, n := range c.evicted {
		if n == name {
			c.evicted = append(c.evicted[:i], c.evicted[i+1:]...)
			break
		}
	}
}

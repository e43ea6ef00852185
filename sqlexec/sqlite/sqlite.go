// Package sqlite is the SQLite engine of sqlexec: it opens database files read-only behind
// an authorizer that denies anything but reading, runs queries under deadlines and caps,
// verifies tasks that change the database on private in-memory copies (Stateful, see
// stateful.go and copy.go), and builds new database files from SQL scripts.
//
// Defences, each enough on its own against writes to the file: the file is opened with
// mode=ro (and immutable=1 when asked); every connection carries an authorizer that denies
// writes, schema changes, ATTACH/DETACH, transactions, REINDEX/ANALYZE, load_extension and
// every pragma but a read-only allow-list; and every statement must be read-only by
// sqlite3_stmt_readonly, which is what stops VACUUM and VACUUM INTO (they never reach the
// authorizer, and VACUUM INTO writes a new file even on a read-only connection).
//
// Error kinds: a statement that does not compile (syntax errors, but also unknown tables,
// columns and functions, which SQLite reports while preparing) is KindSyntax; an error
// while running is KindExecution; a denial by the authorizer or the read-only check is
// KindDenied.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"avtgym/sqlexec"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// DriverName is the database/sql driver name of the read-only driver: connections come
// up with the authorizer installed (through the ConnectHook) and the C-level accounting
// of capi.go attached.
const DriverName = "avtgym-sqlite-readonly"

func init() { sql.Register(DriverName, roDriver{}) }

// roDriver opens mattn connections whose ConnectHook installs a fresh authorizer, and
// wraps them so that DB can reach the authorizer's state and the connection's C-level
// state through sql.Conn.Raw.
type roDriver struct{}

func (roDriver) Open(dsn string) (driver.Conn, error) {
	if accountingErr != nil {
		return nil, accountingErr
	}
	st := &authState{}
	var cc *cconn
	d := &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		c.RegisterAuthorizer(st.authorize)
		var err error
		cc, err = newCConn(c)
		return err
	}}
	c, err := d.Open(dsn)
	if err != nil {
		return nil, err
	}
	return &roConn{c: c.(*sqlite3.SQLiteConn), engineConn: engineConn{auth: st, cc: cc}}, nil
}

// engineConn is what running statements needs of a connection: its C-level
// state and its authorizer's record of denials. The read-only connections
// and the private copies of stateful verification (stateful.go) share it,
// and with it the classification of errors and the capped row reader.
type engineConn struct {
	auth *authState
	cc   *cconn
	// sizeLimit, on a private copy, is the size its database may grow to:
	// a write past it (SQLITE_FULL) is reported as KindTooMuchMemory. 0 on
	// read-only connections.
	sizeLimit int64
}

// roConn is a connection of the read-only driver.
type roConn struct {
	c *sqlite3.SQLiteConn
	engineConn

	// mu guards gen, which numbers the connection's queries so that a
	// cancellation arriving after its query ended cannot stop the next one.
	mu  sync.Mutex
	gen uint64
}

func (r *roConn) Prepare(query string) (driver.Stmt, error) { return r.c.Prepare(query) }
func (r *roConn) Close() error {
	err := r.c.Close()
	r.cc.free()
	return err
}
func (r *roConn) Begin() (driver.Tx, error) {
	return nil, errors.New("sqlite: transactions are not allowed on a read-only engine")
}
func (r *roConn) Ping(ctx context.Context) error { return r.c.Ping(ctx) }

// Options configures Open.
type Options struct {
	// Immutable opens the file with immutable=1: SQLite then assumes nobody changes it
	// and takes no locks. Use it for corpus files that never change.
	Immutable bool
	// MaxOpenConns bounds the connection pool; 0 means 4*GOMAXPROCS, as many
	// queries as the default sqlexec.Lanes let run at once, so that scheduled
	// queries never wait for a connection.
	MaxOpenConns int
}

// DB is a read-only SQLite database; it implements sqlexec.Engine and is safe for
// concurrent use.
type DB struct {
	db   *sql.DB
	path string
}

var _ sqlexec.Engine = (*DB)(nil)

// Open opens the database file at path read-only and checks that it is a database.
func Open(path string, opt Options) (*DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, &sqlexec.Error{Kind: sqlexec.KindUnavailable, Msg: "cannot open database: " + err.Error(), Err: err}
	}
	if !fi.Mode().IsRegular() {
		return nil, sqlexec.Errorf(sqlexec.KindUnavailable, nil, "cannot open database: %s is not a regular file", abs)
	}
	dsn := "file:" + escapePath(abs) + "?mode=ro"
	if opt.Immutable {
		dsn += "&immutable=1"
	}
	db, err := sql.Open(DriverName, dsn)
	if err != nil {
		return nil, err
	}
	n := opt.MaxOpenConns
	if n <= 0 {
		n = 4 * runtime.GOMAXPROCS(0)
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	// An idle connection keeps its page cache; give the memory back after a while.
	db.SetConnMaxIdleTime(time.Minute)
	d := &DB{db: db, path: abs}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := d.Query(ctx, "SELECT count(*) FROM sqlite_schema", sqlexec.Limits{}); err != nil {
		db.Close()
		return nil, sqlexec.Errorf(sqlexec.KindUnavailable, err, "cannot open database %s: %v", abs, err)
	}
	return d, nil
}

// escapePath escapes a file path for a SQLite URI.
func escapePath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	return (&url.URL{Path: p}).EscapedPath()
}

// Path returns the absolute path of the database file.
func (d *DB) Path() string { return d.path }

// Dialect returns "sqlite".
func (d *DB) Dialect() string { return "sqlite" }

// Close closes the connection pool.
func (d *DB) Close() error { return d.db.Close() }

// Query runs sqlText (statements separated by ';') and returns the last statement's
// result. Every statement is prepared first, which runs the authorizer on it, and must
// pass the read-only check, before any runs; then the statements run in order (earlier
// ones are stepped to the end and their rows dropped). Limits, each enforced before the
// work it bounds (see capi.go):
//
//   - lim.Timeout is the CPU time the whole call may use on its own thread; a wall-clock
//     backstop of wallFactor times it also applies, and so does ctx's deadline;
//   - lim.MaxRows and lim.MaxBytes stop the reading before the row past the cap is
//     copied out of SQLite (a row's size is read before its values);
//   - lim.MaxBytes also bounds the longest string or blob SQLite may build (at least
//     minLengthLimit), so oversized values are refused before they are allocated;
//   - lim.MaxMemory bounds the memory SQLite allocates for the call.
//
// Values come out as SQLite stores them (declared types such as DATE or BOOLEAN are
// not converted). Failures are *sqlexec.Error values.
func (d *DB) Query(ctx context.Context, sqlText string, lim sqlexec.Limits) (*sqlexec.Result, error) {
	if strings.TrimSpace(sqlText) == "" {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "no SQL statement to run")
	}
	if strings.IndexByte(sqlText, 0) >= 0 {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "the SQL contains a NUL byte")
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	defer conn.Close()
	var res *sqlexec.Result
	var qerr error
	err = conn.Raw(func(dc any) error {
		rc, ok := dc.(*roConn)
		if !ok {
			return fmt.Errorf("sqlite: unexpected driver connection %T", dc)
		}
		res, qerr = rc.query(ctx, sqlText, lim)
		return nil
	})
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	return res, qerr
}

func unavailable(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return sqlexec.Errorf(sqlexec.KindUnavailable, ctx.Err(), "the call was canceled or timed out before the query could run: %v", ctx.Err())
	}
	return sqlexec.Errorf(sqlexec.KindUnavailable, err, "database unavailable: %v", err)
}

const (
	// wallFactor times lim.Timeout is the wall-clock backstop of a call: it stops a
	// query that waits (on I/O, or on a CPU it cannot get) far longer than it computes.
	wallFactor = 3
	// minLengthLimit is the least SQLITE_LIMIT_LENGTH is set to, however small the
	// byte cap: SQLite also applies that limit to the rows it sorts, so a tiny cap
	// must not break sorting.
	minLengthLimit = 1 << 20
	// maxColumns is SQLITE_LIMIT_COLUMN: the most columns a result (or table, index,
	// ORDER BY) may have. It is SQLite's default, pinned here.
	maxColumns = 2000
)

// query runs text on this connection. The calling goroutine is locked to its thread for
// the call, so that the thread's CPU clock measures this query.
func (r *roConn) query(ctx context.Context, text string, lim sqlexec.Limits) (*sqlexec.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, r.canceled(ctx)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cc := r.cc
	length := int64(1_000_000_000) // SQLite's own default
	if lim.MaxBytes > 0 {
		length = min(max(lim.MaxBytes, minLengthLimit), length)
	}
	cc.setLimit(limitLength, int(length))
	cc.setLimit(limitColumn, maxColumns)
	cc.setLimit(limitExprDepth, maxExprDepth)
	var wall time.Duration
	if lim.Timeout > 0 {
		wall = wallFactor * lim.Timeout
	}
	cc.begin(lim.MaxMemory, lim.Timeout, wall)
	defer cc.end()

	r.mu.Lock()
	gen := r.gen
	r.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		r.mu.Lock()
		if r.gen == gen {
			cc.cancel()
		}
		r.mu.Unlock()
	})
	defer func() {
		stop()
		r.mu.Lock()
		r.gen++ // a cancellation still on its way now finds another number
		r.mu.Unlock()
	}()
	return r.run(ctx, text, lim)
}

// run prepares every statement of text, checks each is read-only, then runs them.
func (r *roConn) run(ctx context.Context, text string, lim sqlexec.Limits) (*sqlexec.Result, error) {
	cc := r.cc
	var stmts []cstmt
	defer func() {
		for _, s := range stmts {
			cc.finalize(s)
		}
	}()
	// The statement count is for messages only: lexing the text again on
	// every query cost a verifying step 3% of its CPU.
	count := func() int { return len(sqlexec.SplitStatements(text)) }
	for rest := text; strings.TrimSpace(rest) != ""; {
		r.auth.reset()
		s, tail, rc := cc.prepare(rest)
		if rc != rcOK {
			return nil, r.prepareError(ctx, rc, rest, len(stmts), count())
		}
		if s != nil {
			stmts = append(stmts, s)
			if !stmtReadonly(s) {
				return nil, notReadOnly(rest[:tail], len(stmts)-1, count())
			}
		}
		if tail <= 0 {
			break
		}
		rest = rest[tail:]
	}
	if len(stmts) == 0 {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "no SQL statement to run (only comments)")
	}
	for _, s := range stmts[:len(stmts)-1] {
		for {
			rc, _ := r.cc.step(s, false, nil, 0)
			if rc == rcDone {
				break
			}
			if rc != rcRow {
				return nil, r.runError(ctx, rc, lim)
			}
		}
	}
	return r.collect(ctx, stmts[len(stmts)-1], lim)
}

// collect runs the last statement and keeps its rows under the caps. A row's cost (16
// bytes per cell plus 8 per number and the bytes of a text or blob: about what the row
// takes in Go memory) is known before its values are copied, so a cap stops the
// reading before the row that would pass it is copied.
func (r *engineConn) collect(ctx context.Context, s cstmt, lim sqlexec.Limits) (*sqlexec.Result, error) {
	names := columnNames(s)
	res := &sqlexec.Result{Columns: names, Rows: [][]any{}}
	cols := make([]ccol, len(names))
	for {
		budget := int64(math.MaxInt64)
		if lim.MaxBytes > 0 {
			budget = lim.MaxBytes - res.Bytes
		}
		rc, cost := r.cc.step(s, true, cols, budget)
		if rc == rcDone {
			return res, nil
		}
		if rc != rcRow {
			return nil, r.runError(ctx, rc, lim)
		}
		if lim.MaxRows > 0 && len(res.Rows) >= lim.MaxRows {
			return nil, sqlexec.Errorf(sqlexec.KindTooManyRows, nil,
				"the result has more than %d rows (the row cap); add a LIMIT or aggregate", lim.MaxRows)
		}
		if cost > budget {
			return nil, sqlexec.Errorf(sqlexec.KindTooManyBytes, nil,
				"the result is larger than %d bytes (the byte cap) after %d rows", lim.MaxBytes, len(res.Rows))
		}
		row := make([]any, len(cols))
		for i := range cols {
			row[i] = cell(&cols[i])
		}
		res.Rows = append(res.Rows, row)
		res.Bytes += cost
	}
}

func notReadOnly(text string, i, n int) error {
	if f := strings.Fields(text); len(f) > 0 && strings.EqualFold(strings.TrimRight(f[0], ";"), "VACUUM") {
		return sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: VACUUM is not allowed (it rewrites the database or writes a new file)",
			stmtLabel(i, n))
	}
	return sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: it is not read-only (%s); only queries that read are allowed",
		stmtLabel(i, n), firstWords(text, 3))
}

func stmtLabel(i, n int) string {
	if n <= 1 && i == 0 {
		return "the statement"
	}
	if i >= n {
		return fmt.Sprintf("statement %d", i+1)
	}
	return fmt.Sprintf("statement %d of %d", i+1, n)
}

// firstWords returns the start of a statement for messages: its first n words, at most
// 60 characters.
func firstWords(text string, n int) string {
	f := strings.Fields(text)
	more := len(f) > n
	if more {
		f = f[:n]
	}
	s := strings.Join(f, " ")
	if r := []rune(s); len(r) > 60 {
		s, more = string(r[:60]), true
	}
	if more {
		s += " ..."
	}
	return s
}

// SQLite primary result codes that mean the database, not the query, failed.
var unavailableCodes = map[int]bool{5: true, 6: true, 10: true, 11: true, 14: true, 26: true} // BUSY LOCKED IOERR CORRUPT CANTOPEN NOTADB

func (r *engineConn) prepareError(ctx context.Context, rc int, text string, i, n int) error {
	rc &= 0xff
	msg := r.cc.errmsg()
	label := stmtLabel(i, n)
	switch {
	case r.auth.schema:
		return sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: schema changes (%s) are not allowed: the database is read-only",
			label, firstWords(text, 3))
	case r.auth.denied != "":
		return sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: %s", label, r.auth.denied)
	case rc == rcAuth:
		return sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: not authorized", label)
	case rc == rcReadonly:
		return sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: %s", label, msg)
	case rc == rcInterrupt:
		return r.runError(ctx, rc, sqlexec.Limits{})
	case rc == rcNoMem:
		return r.runError(ctx, rc, sqlexec.Limits{})
	case unavailableCodes[rc]:
		return sqlexec.Errorf(sqlexec.KindUnavailable, nil, "database unavailable: %s", msg)
	case rc == rcTooBig:
		return sqlexec.Errorf(sqlexec.KindSyntax, nil, "%s is too big: %s", label, msg)
	}
	return sqlexec.Errorf(sqlexec.KindSyntax, nil, "%s did not compile: %s", label, msg)
}

// canceled classifies a call whose context ended: its deadline is a timeout (like the
// statement limit), a cancellation by the caller is not the query's fault.
func (r *engineConn) canceled(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded, "the query did not finish before the deadline and was interrupted")
	}
	return sqlexec.Errorf(sqlexec.KindUnavailable, ctx.Err(), "the query was canceled by the caller")
}

// runError classifies an error raised while a statement runs.
func (r *engineConn) runError(ctx context.Context, rc int, lim sqlexec.Limits) error {
	cc := r.cc
	msg := cc.errmsg()
	switch rc {
	case rcInterrupt:
		switch cc.stopReason() {
		case stopCPU:
			return sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded,
				"the query did not finish within the time limit of %v and was interrupted", lim.Timeout)
		case stopWall:
			return sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded,
				"the query ran for %v of wall-clock time (%d times its time limit of %v) and was interrupted", wallFactor*lim.Timeout, wallFactor, lim.Timeout)
		}
		if ctx.Err() != nil {
			return r.canceled(ctx)
		}
		return sqlexec.Errorf(sqlexec.KindUnavailable, nil, "the query was interrupted")
	case rcNoMem:
		if cc.memExceeded() {
			return sqlexec.Errorf(sqlexec.KindTooMuchMemory, nil,
				"the query needed more than %s of memory (the memory limit) and was stopped", formatBytes(lim.MaxMemory))
		}
		return sqlexec.Errorf(sqlexec.KindUnavailable, nil, "database unavailable: out of memory")
	case rcTooBig:
		return sqlexec.Errorf(sqlexec.KindTooManyBytes, nil,
			"the query built a string or blob larger than the byte cap (%s): %s", formatBytes(lengthOf(lim)), msg)
	case rcAuth:
		why := r.auth.denied
		if why == "" {
			why = "not authorized"
		}
		return sqlexec.Errorf(sqlexec.KindDenied, nil, "the query was denied: %s", why)
	case rcReadonly:
		return sqlexec.Errorf(sqlexec.KindDenied, nil, "the query was denied: %s", msg)
	case rcFull:
		if r.sizeLimit > 0 {
			return sqlexec.Errorf(sqlexec.KindTooMuchMemory, nil,
				"the statement would grow the database copy past its size limit of %s and was stopped", formatBytes(r.sizeLimit))
		}
	}
	if unavailableCodes[rc] {
		return sqlexec.Errorf(sqlexec.KindUnavailable, nil, "database unavailable: %s", msg)
	}
	return sqlexec.Errorf(sqlexec.KindExecution, nil, "the query failed while running: %s", msg)
}

func lengthOf(lim sqlexec.Limits) int64 {
	if lim.MaxBytes <= 0 {
		return 1_000_000_000
	}
	return max(lim.MaxBytes, minLengthLimit)
}

// formatBytes renders a size for messages: "32 MiB", "1500 bytes".
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

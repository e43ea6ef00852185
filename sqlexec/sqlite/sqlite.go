// Package sqlite is the SQLite engine of sqlexec: it opens database files read-only behind
// an authorizer that denies anything but reading, runs queries under deadlines and caps,
// and builds new database files from SQL scripts.
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
	"io"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"avtgym/sqlexec"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// DriverName is the database/sql driver name of the read-only driver: connections come
// up with the authorizer installed (through the ConnectHook).
const DriverName = "avtgym-sqlite-readonly"

func init() { sql.Register(DriverName, roDriver{}) }

// roDriver opens mattn connections whose ConnectHook installs a fresh authorizer, and
// wraps them so that DB can reach the authorizer's state through sql.Conn.Raw.
type roDriver struct{}

func (roDriver) Open(dsn string) (driver.Conn, error) {
	st := &authState{}
	d := &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		c.RegisterAuthorizer(st.authorize)
		return nil
	}}
	c, err := d.Open(dsn)
	if err != nil {
		return nil, err
	}
	return &roConn{c: c.(*sqlite3.SQLiteConn), auth: st}, nil
}

// roConn is a connection of the read-only driver.
type roConn struct {
	c    *sqlite3.SQLiteConn
	auth *authState
}

func (r *roConn) Prepare(query string) (driver.Stmt, error) { return r.c.Prepare(query) }
func (r *roConn) Close() error                              { return r.c.Close() }
func (r *roConn) Begin() (driver.Tx, error) {
	return nil, errors.New("sqlite: transactions are not allowed on a read-only engine")
}
func (r *roConn) Ping(ctx context.Context) error { return r.c.Ping(ctx) }

// Options configures Open.
type Options struct {
	// Immutable opens the file with immutable=1: SQLite then assumes nobody changes it
	// and takes no locks. Use it for corpus files that never change.
	Immutable bool
	// MaxOpenConns bounds the connection pool; 0 means 2*GOMAXPROCS.
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
		n = 2 * runtime.GOMAXPROCS(0)
	}
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
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
// ones are stepped to the end and their rows dropped) under one deadline, lim.Timeout,
// which interrupts a running statement. Rows past lim.MaxRows or bytes past
// lim.MaxBytes stop the reading at once. Failures are *sqlexec.Error values.
func (d *DB) Query(ctx context.Context, sqlText string, lim sqlexec.Limits) (*sqlexec.Result, error) {
	stmts := sqlexec.SplitStatements(sqlText)
	if len(stmts) == 0 {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "no SQL statement to run")
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, unavailable(ctx, err)
	}
	defer conn.Close()
	qctx, cancel := ctx, context.CancelFunc(func() {})
	if lim.Timeout > 0 {
		qctx, cancel = context.WithTimeout(ctx, lim.Timeout)
	}
	defer cancel()
	var res *sqlexec.Result
	var qerr error
	err = conn.Raw(func(dc any) error {
		rc, ok := dc.(*roConn)
		if !ok {
			return fmt.Errorf("sqlite: unexpected driver connection %T", dc)
		}
		res, qerr = rc.run(qctx, ctx, stmts, lim)
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

// run prepares and runs stmts on one connection; qctx carries the query deadline and
// parent is the caller's context.
func (r *roConn) run(qctx, parent context.Context, stmts []string, lim sqlexec.Limits) (*sqlexec.Result, error) {
	prepared := make([]*sqlite3.SQLiteStmt, 0, len(stmts))
	defer func() {
		for _, s := range prepared {
			s.Close()
		}
	}()
	for i, text := range stmts {
		s, err := r.prepare(text, i, len(stmts))
		if err != nil {
			return nil, err
		}
		prepared = append(prepared, s)
	}
	for i, s := range prepared[:len(prepared)-1] {
		if _, err := r.step(qctx, parent, s, stmts[i], lim, false); err != nil {
			return nil, err
		}
	}
	last := len(prepared) - 1
	res, err := r.step(qctx, parent, prepared[last], stmts[last], lim, true)
	var dt *declTypesError
	if errors.As(err, &dt) {
		prepared[last].Close()
		res, err = r.runWrapped(qctx, parent, stmts[last], dt.cols, lim)
	}
	return res, err
}

// prepare compiles one statement, running the authorizer, and applies the read-only check.
func (r *roConn) prepare(text string, i, n int) (*sqlite3.SQLiteStmt, error) {
	r.auth.reset()
	ds, err := r.c.Prepare(text)
	if err != nil {
		return nil, r.prepareError(err, text, i, n)
	}
	s := ds.(*sqlite3.SQLiteStmt)
	if !s.Readonly() {
		s.Close()
		if f := strings.Fields(text); len(f) > 0 && strings.EqualFold(f[0], "VACUUM") {
			return nil, sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: VACUUM is not allowed (it rewrites the database or writes a new file)",
				stmtLabel(i, n))
		}
		return nil, sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: it is not read-only (%s); only queries that read are allowed",
			stmtLabel(i, n), firstWords(text))
	}
	return s, nil
}

func stmtLabel(i, n int) string {
	if n == 1 {
		return "the statement"
	}
	return fmt.Sprintf("statement %d of %d", i+1, n)
}

// firstWords returns the start of a statement for messages.
func firstWords(text string) string {
	f := strings.Fields(text)
	more := len(f) > 3
	if more {
		f = f[:3]
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

func (r *roConn) prepareError(err error, text string, i, n int) error {
	if r.auth.schema {
		return sqlexec.Errorf(sqlexec.KindDenied, err, "%s was denied: schema changes (%s) are not allowed: the database is read-only",
			stmtLabel(i, n), firstWords(text))
	}
	if r.auth.denied != "" {
		return sqlexec.Errorf(sqlexec.KindDenied, err, "%s was denied: %s", stmtLabel(i, n), r.auth.denied)
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrAuth:
			return sqlexec.Errorf(sqlexec.KindDenied, err, "%s was denied: not authorized", stmtLabel(i, n))
		case sqlite3.ErrReadonly:
			return sqlexec.Errorf(sqlexec.KindDenied, err, "%s was denied: %v", stmtLabel(i, n), err)
		case sqlite3.ErrError:
			return sqlexec.Errorf(sqlexec.KindSyntax, err, "%s did not compile: %v", stmtLabel(i, n), err)
		case sqlite3.ErrInterrupt:
			return sqlexec.Errorf(sqlexec.KindTimeout, err, "%s was interrupted while compiling", stmtLabel(i, n))
		case sqlite3.ErrCantOpen, sqlite3.ErrNotADB, sqlite3.ErrCorrupt, sqlite3.ErrIoErr,
			sqlite3.ErrBusy, sqlite3.ErrLocked, sqlite3.ErrNomem:
			return sqlexec.Errorf(sqlexec.KindUnavailable, err, "database unavailable: %v", err)
		case sqlite3.ErrTooBig:
			return sqlexec.Errorf(sqlexec.KindSyntax, err, "%s is too big: %v", stmtLabel(i, n), err)
		}
	}
	return sqlexec.Errorf(sqlexec.KindSyntax, err, "%s did not compile: %v", stmtLabel(i, n), err)
}

// declTypesError says that the last statement's columns carry a declared type that
// makes mattn's driver convert values (date, datetime, timestamp, boolean).
type declTypesError struct{ cols []string }

func (e *declTypesError) Error() string {
	return "sqlite: result columns with converting declared types"
}

// convertingDeclTypes are the declared types for which mattn converts values.
var convertingDeclTypes = map[string]bool{"date": true, "datetime": true, "timestamp": true, "boolean": true}

// step runs a prepared statement. With keep it collects the rows under the caps; without,
// it steps to the end and drops them. With keep it returns a *declTypesError (and nothing
// else) when a column's declared type would make the driver convert its values.
func (r *roConn) step(qctx, parent context.Context, s *sqlite3.SQLiteStmt, text string, lim sqlexec.Limits, keep bool) (*sqlexec.Result, error) {
	dr, err := s.QueryContext(qctx, nil)
	if err != nil {
		return nil, r.runError(qctx, parent, err, lim)
	}
	rows := dr.(*sqlite3.SQLiteRows)
	defer rows.Close()
	cols := rows.Columns()
	if keep {
		for _, t := range rows.DeclTypes() {
			if convertingDeclTypes[t] {
				return nil, &declTypesError{cols: append([]string(nil), cols...)}
			}
		}
	}
	return collect(qctx, parent, rows, cols, lim, keep, r)
}

// runWrapped reruns text so that no result column has a declared type, which makes the
// driver return values as SQLite stores them (dates stay text, booleans stay integers):
//
//	WITH q(c1, ..., cn) AS (text) SELECT +c1, ..., +cn FROM q
//
// A unary plus is the identity on every value but is no column reference, so it has no
// declared type. The rows keep the statement's order (the CTE is flattened or run as a
// co-routine). If the wrapped text does not compile, the statement runs as it is, with
// the driver's converted values turned back into text and integers.
func (r *roConn) runWrapped(qctx, parent context.Context, text string, cols []string, lim sqlexec.Limits) (*sqlexec.Result, error) {
	var b strings.Builder
	b.WriteString(`WITH "avtgym_q"(`)
	for i := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `"c%d"`, i)
	}
	b.WriteString(") AS (\n")
	b.WriteString(text)
	b.WriteString("\n) SELECT ")
	for i := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, `+"c%d"`, i)
	}
	b.WriteString(` FROM "avtgym_q"`)

	ws, err := r.prepare(b.String(), 0, 1)
	if err != nil {
		if ws, err = r.prepare(text, 0, 1); err != nil {
			return nil, err
		}
	}
	defer ws.Close()
	dr, err := ws.QueryContext(qctx, nil)
	if err != nil {
		return nil, r.runError(qctx, parent, err, lim)
	}
	rows := dr.(*sqlite3.SQLiteRows)
	defer rows.Close()
	return collect(qctx, parent, rows, cols, lim, true, r)
}

func collect(qctx, parent context.Context, rows *sqlite3.SQLiteRows, cols []string, lim sqlexec.Limits, keep bool, r *roConn) (*sqlexec.Result, error) {
	res := &sqlexec.Result{Columns: append([]string(nil), cols...), Rows: [][]any{}}
	dest := make([]driver.Value, len(cols))
	for {
		err := rows.Next(dest)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, r.runError(qctx, parent, err, lim)
		}
		if !keep {
			continue
		}
		row := make([]any, len(dest))
		for i, v := range dest {
			row[i] = convert(v)
			res.Bytes += sqlexec.CellBytes(row[i])
		}
		res.Rows = append(res.Rows, row)
		if lim.MaxRows > 0 && len(res.Rows) > lim.MaxRows {
			return nil, sqlexec.Errorf(sqlexec.KindTooManyRows, nil,
				"the result has more than %d rows (the row cap); add a LIMIT or aggregate", lim.MaxRows)
		}
		if lim.MaxBytes > 0 && res.Bytes > lim.MaxBytes {
			return nil, sqlexec.Errorf(sqlexec.KindTooManyBytes, nil,
				"the result is larger than %d bytes (the byte cap) after %d rows", lim.MaxBytes, len(res.Rows))
		}
	}
	return res, nil
}

// convert maps a driver value to a Result cell.
func convert(v driver.Value) any {
	switch x := v.(type) {
	case bool:
		if x {
			return int64(1)
		}
		return int64(0)
	case time.Time:
		return formatTime(x)
	case []byte:
		if x == nil {
			return []byte{}
		}
		return x
	}
	return v
}

// formatTime renders a time the driver parsed back as SQLite-style text (only reached
// when the wrapping in runWrapped could not be used).
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	t = t.UTC()
	switch {
	case t.Hour() == 0 && t.Minute() == 0 && t.Second() == 0 && t.Nanosecond() == 0:
		return t.Format("2006-01-02")
	case t.Nanosecond() == 0:
		return t.Format("2006-01-02 15:04:05")
	default:
		return t.Format("2006-01-02 15:04:05.999999999")
	}
}

// runError classifies an error raised while a statement runs.
func (r *roConn) runError(qctx, parent context.Context, err error, lim sqlexec.Limits) error {
	if perr := parent.Err(); perr != nil && !errors.Is(perr, context.DeadlineExceeded) {
		return sqlexec.Errorf(sqlexec.KindUnavailable, perr, "the query was canceled by the caller")
	}
	var se sqlite3.Error
	isSE := errors.As(err, &se)
	if qctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || isSE && se.Code == sqlite3.ErrInterrupt {
		if lim.Timeout > 0 {
			return sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded,
				"the query did not finish within the time limit of %v and was interrupted", lim.Timeout)
		}
		return sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded, "the query did not finish before the deadline and was interrupted")
	}
	if isSE {
		switch se.Code {
		case sqlite3.ErrAuth:
			why := r.auth.denied
			if why == "" {
				why = "not authorized"
			}
			return sqlexec.Errorf(sqlexec.KindDenied, err, "the query was denied: %s", why)
		case sqlite3.ErrReadonly:
			return sqlexec.Errorf(sqlexec.KindDenied, err, "the query was denied: %v", err)
		case sqlite3.ErrCantOpen, sqlite3.ErrNotADB, sqlite3.ErrCorrupt, sqlite3.ErrIoErr,
			sqlite3.ErrBusy, sqlite3.ErrLocked, sqlite3.ErrNomem:
			return sqlexec.Errorf(sqlexec.KindUnavailable, err, "database unavailable: %v", err)
		}
	}
	return sqlexec.Errorf(sqlexec.KindExecution, err, "the query failed while running: %v", err)
}

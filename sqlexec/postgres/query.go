package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Options configures Open.
type Options struct {
	// MaxConns bounds the database's connection pool; 0 means the capacity of
	// sqlexec.DefaultLanes() (as many queries as may run at once), so that
	// scheduled queries never wait for a connection. Connections open on
	// demand and close after a minute idle.
	MaxConns int
	// ReadWrite is refused: every DB is read-only. Stateful tasks, whose
	// SQL writes, are verified through OpenStateful, on private copies.
	ReadWrite bool
}

// DB is one working database, queried as the policy role. It implements
// sqlexec.Engine and is safe for concurrent use.
type DB struct {
	pool     *pgxpool.Pool
	name     string
	readOnly bool
	// mw watches the backends' memory (nil: off); role names their user.
	mw   *memWatch
	role string
	srv  *Server
}

var _ sqlexec.Engine = (*DB)(nil)

// Open opens a connection pool on the working database dbName (a name
// EnsureDatabase returned) as the policy role and checks that it answers.
// Templates cannot be opened: they accept no connections.
func (s *Server) Open(ctx context.Context, dbName string, opt Options) (*DB, error) {
	if opt.ReadWrite {
		return nil, errors.New("postgres: a DB is read-only; stateful tasks are verified through OpenStateful")
	}
	cfg := s.policyConfig(dbName)
	n := opt.MaxConns
	if n <= 0 {
		n = sqlexec.DefaultLanes().Capacity()
	}
	cfg.MaxConns = int32(n)
	cfg.MinConns = 0
	cfg.MaxConnIdleTime = time.Minute
	cfg.MaxConnLifetime = 30 * time.Minute
	if cfg.ConnConfig.ConnectTimeout <= 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	// A canceled context sends a cancel request and keeps the connection
	// (which Query then discards anyway); the socket is closed only if the
	// server does not answer within a second.
	cfg.ConnConfig.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: time.Second}
	}
	register := s.budgetPool(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, sqlexec.Errorf(sqlexec.KindUnavailable, err, "cannot open database %s: %v", dbName, err)
	}
	register(pool)
	d := &DB{pool: pool, name: dbName, readOnly: true, mw: s.mw, role: s.cfg.Role, srv: s}
	if _, err := d.Query(ctx, "SELECT 1", sqlexec.Limits{Timeout: 10 * time.Second}); err != nil {
		d.Close()
		return nil, sqlexec.Errorf(sqlexec.KindUnavailable, err, "cannot open database %s: %v", dbName, err)
	}
	return d, nil
}

// Name returns the database's name.
func (d *DB) Name() string { return d.name }

// Dialect returns "postgres".
func (d *DB) Dialect() string { return "postgres" }

// Close closes the connection pool.
func (d *DB) Close() error {
	d.pool.Close()
	d.srv.budget.removePool(d.pool)
	return nil
}

// Query overheads.
const (
	// minMessageCap is the least a protocol message may be (row descriptions
	// and error messages need room, whatever the byte cap).
	minMessageCap = 1 << 20
	// backstopGrace is added (with half the time limit) to lim.Timeout for the
	// client-side deadline, which only fires when the server did not enforce
	// its statement_timeout (a stalled network, a stuck server).
	backstopGrace = 250 * time.Millisecond
	// multiGrace is added to lim.Timeout for the deadline of a query of
	// several statements.
	multiGrace = 20 * time.Millisecond
	// minIdleInTransaction bounds a transaction the client stopped driving.
	minIdleInTransaction = 5 * time.Second
)

const (
	beginSQL    = "BEGIN READ ONLY"
	rollbackSQL = "ROLLBACK"
)

// limitSettings are the session settings that carry a query's limits, in the
// order they are sent.
var limitSettings = []string{"statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout", "work_mem"}

// settingsFor returns the values of limitSettings for lim; "" means the
// role's default.
func settingsFor(lim sqlexec.Limits) map[string]string {
	m := map[string]string{}
	if lim.Timeout > 0 {
		ms := strconv.FormatInt(min(max(lim.Timeout.Milliseconds(), 1), math.MaxInt32), 10)
		m["statement_timeout"] = ms
		m["lock_timeout"] = ms
		m["idle_in_transaction_session_timeout"] = strconv.FormatInt(min(max(2*lim.Timeout, minIdleInTransaction).Milliseconds(), math.MaxInt32), 10)
	}
	if lim.MaxMemory > 0 {
		m["work_mem"] = strconv.FormatInt(min(max(lim.MaxMemory/4/1024, 64), math.MaxInt32), 10) + "kB"
	}
	return m
}

// settingsSQL returns the statements that give the connection the settings
// of lim (those that differ from what it has, per state), and the new state.
func settingsSQL(state map[string]string, lim sqlexec.Limits) ([]string, map[string]string) {
	want := settingsFor(lim)
	var out []string
	for _, name := range limitSettings {
		if want[name] == state[name] {
			continue
		}
		if want[name] == "" {
			out = append(out, "RESET "+name)
		} else {
			out = append(out, fmt.Sprintf("SET %s = '%s'", name, want[name]))
		}
	}
	return out, want
}

// Query runs sqlText (one or more statements separated by ';') and returns the
// last statement's result. Defences and limits:
//
//   - Every statement is parsed (libpg_query) before any runs; transaction
//     control, session settings, COPY, DO, CALL, LOCK, cursors and prepared
//     statements, maintenance and server-wide commands are KindDenied, and so
//     is anything but SELECT, VALUES, TABLE, EXPLAIN and SHOW on a read-only
//     DB, and calls of set_config, session advisory locks, backend signals,
//     WAL messages, large-object writes, and reading pg_stat_activity (which
//     the database's catalog also revokes, when the administrator is a
//     superuser); a statement that does not parse, or has a $n parameter, is
//     KindSyntax. Checks are cached by text (stmts.go).
//   - The statements run, each sent alone (the extended protocol refuses a
//     second statement in one message), inside BEGIN READ ONLY, and the
//     transaction is always rolled back; the role is read-only by default too
//     (default_transaction_read_only). The limits are the connection's
//     statement_timeout and lock_timeout (lim.Timeout, for each statement),
//     idle_in_transaction_session_timeout (2 × lim.Timeout, at least 5s) and
//     work_mem (lim.MaxMemory / 4; a sort or hash may use that much, a hash
//     twice). They are session settings, sent (SET, or RESET to the role's
//     default for a zero limit) before BEGIN, in the same round trip, only
//     when they differ from the connection's: the same as SET LOCAL in every
//     transaction, since nothing a query runs can change them (SET, RESET and
//     set_config are refused, and whatever happens in the transaction is
//     rolled back), without its cost. All of it is one
//     round trip, with the statements prepared once per connection
//     (connstate.go).
//   - Several statements share lim.Timeout through a client-side deadline
//     (lim.Timeout + 20ms); a single statement has a client-side deadline of
//     lim.Timeout × 1.5 + 250ms as a backstop of the server's timeout.
//   - lim.MaxBytes bounds each protocol message before it is read (a row, or
//     a value, larger than the cap is refused from its length, never
//     buffered), and the result's rows and bytes (sqlexec.CellBytes of the
//     converted cells) are counted as they arrive: at a cap the reading stops
//     and the connection is closed, so the rest is never read.
//   - ctx's deadline or cancellation cancels the running statement (a cancel
//     request), and so does the client-side deadline, which also backs up
//     the server's statement_timeout. A connection whose state is then
//     unknown is closed.
//   - temp_file_limit (a role setting: only a superuser may change it) bounds
//     the temporary files of spilled sorts and hashes.
//
// Cells are converted as documented in convert.go. Failures are
// *sqlexec.Error values (see classify for the kinds).
func (d *DB) Query(ctx context.Context, sqlText string, lim sqlexec.Limits) (*sqlexec.Result, error) {
	stmts, err := d.srv.checks.checkQuery(sqlText, d.readOnly)
	if err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, canceled(ctx)
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, connectError(ctx, d.name, err)
	}
	qctx := ctx // ctx with the client-side backstop deadline
	if lim.Timeout > 0 {
		// One statement: the server's statement_timeout stops it at the limit,
		// and this deadline is only a backstop. Several: they share the limit
		// through this deadline (a cancel request when it passes).
		backstop := lim.Timeout + lim.Timeout/2 + backstopGrace
		if len(stmts) > 1 {
			backstop = lim.Timeout + multiGrace
		}
		var cancel context.CancelFunc
		qctx, cancel = context.WithTimeout(ctx, backstop)
		defer cancel()
	}
	pc := conn.Conn().PgConn()
	x := d.watch(pc)
	q := &queryRun{classifier: classifier{pc: pc, lim: lim}, cs: connStateOf(pc), stmts: stmts,
		truncate: lim.Harness && sqlexec.HarnessTruncates(sqlText)}
	res, err := q.run(ctx, qctx)
	if d.mw.done(x) {
		// Past the memory bound: the statement was canceled (or finished
		// while the cancel was on its way, which must not reach the
		// connection's next query: it is closed).
		q.discard = true
		res, err = nil, sqlexec.Errorf(sqlexec.KindTooMuchMemory, err, "%s", d.mw.memoryMessage("the query"))
	}
	if q.discard {
		discard(conn)
	} else {
		conn.Release()
	}
	return res, err
}

// watch starts the memory watch of the connection's backend for one query
// (nil when the watch is off or the backend is not on this machine).
func (d *DB) watch(pc *pgconn.PgConn) *watched {
	if d.mw == nil {
		return nil
	}
	cs := connStateOf(pc)
	if cs.local == 0 {
		cs.local = -1
		if d.mw.isBackend(int(pc.PID()), d.role, d.name) {
			cs.local = 1
		}
	}
	if cs.local < 0 {
		return nil
	}
	return d.mw.watch(int(pc.PID()), func() { cancelRequest(pc) })
}

// cancelRequest asks the server to cancel what pc's backend runs.
func cancelRequest(pc *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pc.CancelRequest(ctx)
}

// queryRun is one Query call's pipeline on one connection: its requests,
// and what reading their results found. Its steps: plan the requests, send
// them in one round trip, read the results in order (collecting the last
// statement's rows under the caps), then settle the connection and classify
// the first failure.
type queryRun struct {
	classifier // the connection and the query's limits
	cs         *connState
	stmts      []string
	reqs       []request
	// settings are the connection's limit settings once the pipeline's
	// first sync point is read (nil: they do not change).
	settings map[string]string
	res      *sqlexec.Result
	capped   bool // the last statement's result passed a cap
	// truncate keeps the last statement's first sqlexec.HarnessRows rows
	// and drops the rest (sqlexec.Limits.Harness, for a text that
	// sqlexec.HarnessTruncates).
	truncate bool
	discard  bool // the connection must be closed, not returned
}

// Request kinds of a query's pipeline.
const (
	reqSet        = iota // SET or RESET of a limit
	reqControl           // BEGIN, ROLLBACK
	reqPrepare           // a statement prepared for the connection's cache
	reqStmt              // a statement of the query
	reqDeallocate        // an evicted prepared statement
	reqSync
)

type request struct {
	kind int
	stmt int    // reqStmt, reqPrepare: the statement's index
	text string // reqControl, reqPrepare, reqStmt: the SQL
	name string // reqPrepare, reqDeallocate: the prepared statement
}

// wired is how the request is sent: statements (BEGIN and ROLLBACK too) as
// the connection's prepared statement when they have one.
func (r request) wired() wire {
	switch r.kind {
	case reqPrepare:
		return wire{op: opPrepare, text: r.text, name: r.name}
	case reqDeallocate:
		return wire{op: opDeallocate, name: r.name}
	case reqSync:
		return wire{op: opSync}
	case reqControl, reqStmt:
		if r.name != "" {
			return wire{op: opPrepared, name: r.name}
		}
	}
	return wire{op: opQuery, text: r.text}
}

// run runs the query: ctx is the caller's, qctx ctx with the client-side
// backstop deadline, which bounds the pipeline.
func (q *queryRun) run(ctx, qctx context.Context) (*sqlexec.Result, error) {
	setMessageCap(q.pc, q.lim)
	q.plan()
	p, err := send(qctx, q.pc, q.reqs)
	if err != nil {
		q.discard = true
		return nil, q.classify(ctx, qctx, err, "the query")
	}
	failedAt, failed := q.read(p)
	if q.capped {
		return nil, failed
	}
	if failed != nil && q.reqs[failedAt].kind == reqSet {
		// The limits could not be set: the rest must not be read.
		q.discard = true
		return nil, q.classify(ctx, qctx, failed, "setting the query's limits")
	}
	if failed != nil {
		q.skipToEnd(p, failedAt, failed)
	}
	if !q.discard {
		if err := p.Close(); err != nil && failed == nil {
			failed, failedAt = err, len(q.reqs)-1
			q.discard = true
		}
	}
	if failed != nil {
		return nil, q.fail(ctx, qctx, failedAt, failed)
	}
	if q.pc.TxStatus() != 'I' {
		q.discard = true
	}
	return q.res, nil
}

// plan makes the pipeline, one round trip: the settings that change,
// committed on their own (a sync point); then BEGIN READ ONLY, the
// statements, ROLLBACK, and the deallocation of prepared statements the
// connection's cache evicted. Statements (BEGIN and ROLLBACK too) run as
// prepared statements of the connection's cache: prepared (parsed and
// analyzed, and planned on first execution) on first use, then only bound
// and executed.
func (q *queryRun) plan() {
	sets, want := settingsSQL(q.cs.settings, q.lim)
	for _, text := range sets {
		q.reqs = append(q.reqs, request{kind: reqSet, stmt: -1, text: text})
	}
	if len(sets) > 0 {
		q.settings = want
		q.reqs = append(q.reqs, request{kind: reqSync, stmt: -1})
	}
	main := []request{{kind: reqControl, stmt: -1, text: beginSQL}}
	for i, text := range q.stmts {
		main = append(main, request{kind: reqStmt, stmt: i, text: text})
	}
	main = append(main, request{kind: reqControl, stmt: -1, text: rollbackSQL})
	q.reqs = append(q.reqs, q.cs.plan(main)...)
	for _, name := range q.cs.evicted {
		q.reqs = append(q.reqs, request{kind: reqDeallocate, stmt: -1, name: name})
	}
	q.reqs = append(q.reqs, request{kind: reqSync, stmt: -1})
}

// read reads the results in order up to the first failure, and returns
// its request's index and error (-1 and nil when there is none).
func (q *queryRun) read(p *pgconn.Pipeline) (int, error) {
	for i, r := range q.reqs {
		if err := q.readOne(p, i, r); err != nil {
			return i, err
		}
	}
	return -1, nil
}

// readOne reads request i's result and records what it changed: the
// connection's settings and prepared statements, the last statement's rows.
func (q *queryRun) readOne(p *pgconn.Pipeline, i int, r request) error {
	rr, err := nextResult(p, r.wired())
	if err != nil {
		return err
	}
	switch r.kind {
	case reqSync:
		if q.settings != nil && i < len(q.reqs)-1 {
			q.cs.settings = q.settings
		}
	case reqPrepare:
		q.cs.prepared(r.text, r.name)
	case reqDeallocate:
		q.cs.deallocated(r.name)
	case reqStmt:
		if r.stmt == len(q.stmts)-1 {
			res, capErr := collectRows(rr, q.lim, q.truncate)
			if capErr != nil {
				// The rest of the result is not read: the connection goes.
				q.capped, q.discard = true, true
				return capErr
			}
			q.res = res
			_, err := rr.Close()
			return err
		}
		return drain(rr)
	default:
		return drain(rr)
	}
	return nil
}

// skipToEnd reads past a failure: after a statement's error the server
// skips to the end of the pipeline, whose sync point must come next; any
// other failure leaves the connection in an unknown state.
func (q *queryRun) skipToEnd(p *pgconn.Pipeline, failedAt int, failed error) {
	var pgErr *pgconn.PgError
	if !errors.As(failed, &pgErr) || q.reqs[failedAt].kind == reqSync {
		q.discard = true
		return
	}
	if _, err := nextResult(p, wire{op: opSync}); err != nil {
		q.discard = true
	}
}

// fail classifies the failure of request failedAt (a statement's is the
// policy's, see classifyPolicy) and decides what happens to the
// connection: one that answered with an error is rolled back and kept; one
// whose state is unknown (a canceled context, a broken connection, a
// message over the cap) is closed.
func (q *queryRun) fail(ctx, qctx context.Context, failedAt int, err error) error {
	label, policy := "the query", false
	if r := q.reqs[failedAt]; r.stmt >= 0 && (r.kind == reqStmt || r.kind == reqPrepare) {
		label, policy = stmtLabel(r.stmt, len(q.stmts), q.stmts[r.stmt]), true
	}
	// Whose fault it is depends on the session as the error left it, before
	// the rollback below.
	var classified error
	if policy {
		classified = q.classifyPolicy(ctx, qctx, err, label)
	} else {
		classified = q.classify(ctx, qctx, err, label)
	}
	var pgErr *pgconn.PgError
	if ctx.Err() != nil || qctx.Err() != nil || !errors.As(err, &pgErr) || q.pc.IsClosed() {
		q.discard = true
	} else if !q.discard && q.pc.TxStatus() != 'I' {
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, rerr := q.pc.Exec(rctx, rollbackSQL).ReadAll()
		cancel()
		if rerr != nil || q.pc.TxStatus() != 'I' {
			q.discard = true
		}
	}
	return classified
}

// discard closes a connection whose state is unknown: its socket first, so that
// nothing more is read, then a cancel request so that the server stops too.
func discard(conn *pgxpool.Conn) {
	c := conn.Hijack()
	pc := c.PgConn()
	if !pc.IsClosed() {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			pc.CancelRequest(ctx)
		}()
	}
	pc.Conn().Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c.Close(ctx)
}

// collect reads the last statement's rows under the caps. A row is counted
// before its values are converted: the row cap first, then the byte cap from
// the raw values (rawCost: exact for every type but JSON, whose canonical
// text is at most its raw length), so that a row past a cap is never
// converted. The bytes charged are sqlexec.CellBytes of the converted cells.
func collect(rr *pgconn.ResultReader, lim sqlexec.Limits) (*sqlexec.Result, error) {
	return collectRows(rr, lim, false)
}

// collectRows is collect; with truncate, the rows past
// sqlexec.HarnessRows are read and dropped (BIRD-Interact's harness keeps
// the first 10,000 of a select/with text: sqlexec.HarnessTruncates), not
// counted against the caps. Under lim.Harness the cells are
// sqlexec.PyValue (harness.go), whose cost is known only once converted
// (the byte cap is then checked after conversion).
func collectRows(rr *pgconn.ResultReader, lim sqlexec.Limits, truncate bool) (*sqlexec.Result, error) {
	fds := rr.FieldDescriptions()
	res := &sqlexec.Result{Columns: make([]string, len(fds)), Rows: [][]any{}}
	convs := make([]converter, len(fds))
	kinds := make([]costKind, len(fds))
	approx := lim.Harness // a JSON column or harness cells: the raw cost is no exact bound
	for i, fd := range fds {
		res.Columns[i] = fd.Name
		convs[i], kinds[i] = converterFor(fd.DataTypeOID)
		if lim.Harness {
			convs[i] = harnessConverterFor(fd.DataTypeOID)
		}
		approx = approx || kinds[i] == costJSON
	}
	tooBig := func() error {
		return sqlexec.Errorf(sqlexec.KindTooManyBytes, nil,
			"the result is larger than %d bytes (the byte cap) after %d rows", lim.MaxBytes, len(res.Rows))
	}
	for rr.NextRow() {
		if truncate && len(res.Rows) >= sqlexec.HarnessRows {
			continue
		}
		if lim.MaxRows > 0 && len(res.Rows) >= lim.MaxRows {
			return nil, sqlexec.Errorf(sqlexec.KindTooManyRows, nil,
				"the result has more than %d rows (the row cap); add a LIMIT or aggregate", lim.MaxRows)
		}
		vals := rr.Values()
		if lim.MaxBytes > 0 && !approx && res.Bytes+rawCost(vals, kinds) > lim.MaxBytes {
			return nil, tooBig()
		}
		row := make([]any, len(vals))
		var cost int64
		for i, v := range vals {
			c := convs[i](v)
			row[i] = c
			cost += sqlexec.CellBytes(c)
		}
		if lim.MaxBytes > 0 && res.Bytes+cost > lim.MaxBytes {
			return nil, tooBig()
		}
		res.Rows = append(res.Rows, row)
		res.Bytes += cost
	}
	return res, nil
}

// isMessageTooBig reports a protocol message refused by the frontend's cap.
func isMessageTooBig(err error) (*pgproto3.ExceededMaxBodyLenErr, bool) {
	var e *pgproto3.ExceededMaxBodyLenErr
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

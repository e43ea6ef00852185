package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5/pgconn"
)

// classifier classifies the failures of one run of statements on a
// session (pc) under one set of limits (lim): a Query's, or a stateful
// job's.
type classifier struct {
	pc  *pgconn.PgConn
	lim sqlexec.Limits
}

// classify turns a failure of a query into an *sqlexec.Error. A failure of
// the policy's own statement goes through classifyPolicy, which decides
// whose fault it is. By SQLSTATE:
//
//   - 57014 (statement timeout, or a cancel the caller asked for), 55P03
//     (lock_not_available): KindTimeout; KindUnavailable when the caller
//     canceled its context;
//   - 25006 (read-only transaction), 42501 (insufficient privilege),
//     25001/25P0x (transaction state): KindDenied;
//   - class 42 (syntax, undefined table, column or function), 54011 (too
//     many columns): KindSyntax;
//   - 53200 (out of memory), 53400 (configuration limit: temp_file_limit),
//     54001 (stack depth): KindTooMuchMemory;
//   - 54000 (program limit: a value past PostgreSQL's 1 GB): KindTooManyBytes;
//   - classes 08 (connection), 57P (shutdown), 53100 (disk full), 3D
//     (no such database), 28 (authentication), 58 (system), XX001/XX002
//     (corruption): KindUnavailable; 53300 (too many connections): KindBusy;
//   - the rest: KindExecution.
//
// A protocol message past the byte cap is KindTooManyBytes; a broken
// connection is KindUnavailable; the caller's deadline (ctx) is KindTimeout
// and its cancellation KindUnavailable; the run's client-side backstop
// (qctx, derived from ctx) is KindTimeout.
func (c classifier) classify(ctx, qctx context.Context, err error, label string) error {
	if e, ok := isMessageTooBig(err); ok {
		return sqlexec.Errorf(sqlexec.KindTooManyBytes, err,
			"%s sent a message of %d bytes, larger than the byte cap (%d bytes) allows; it was not read", label, e.ActualBodyLen, c.lim.MaxBytes)
	}
	if ctx.Err() != nil {
		return canceled(ctx)
	}
	if qctx.Err() != nil {
		return sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded,
			"%s did not finish within the time limit of %v and was interrupted (the server did not stop it in time)", label, c.lim.Timeout)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return sqlexec.Errorf(sqlexec.KindUnavailable, err, "database unavailable while running %s: %v", label, err)
	}
	msg := pgMessage(pgErr)
	switch k := kindOf(pgErr.Code); k {
	case sqlexec.KindTimeout:
		if pgErr.Code == "55P03" {
			return sqlexec.Errorf(k, err, "%s waited too long for a lock and was canceled: %s", label, msg)
		}
		if c.lim.Timeout > 0 {
			return sqlexec.Errorf(k, err, "%s did not finish within the time limit of %v and was canceled: %s", label, c.lim.Timeout, msg)
		}
		return sqlexec.Errorf(k, err, "%s did not finish within the time limit and was canceled: %s", label, msg)
	case sqlexec.KindDenied:
		return sqlexec.Errorf(k, err, "%s was denied: %s", label, msg)
	case sqlexec.KindSyntax:
		return sqlexec.Errorf(k, err, "%s did not compile: %s", label, msg)
	case sqlexec.KindTooMuchMemory:
		return sqlexec.Errorf(k, err, "%s needed more memory or temporary file space than allowed and was stopped: %s", label, msg)
	case sqlexec.KindTooManyBytes:
		return sqlexec.Errorf(k, err, "%s built a value larger than PostgreSQL allows: %s", label, msg)
	case sqlexec.KindBusy:
		return sqlexec.Errorf(k, err, "the database has no free connection: %s; retry later", msg)
	case sqlexec.KindUnavailable:
		return sqlexec.Errorf(k, err, "database unavailable while running %s: %s", label, msg)
	default:
		return sqlexec.Errorf(sqlexec.KindExecution, err, "%s failed while running: %s", label, msg)
	}
}

// classifyPolicy classifies a failure of a statement the policy wrote (or
// of a check run on the state its statements left). Whose fault a failure
// is, is decided only by what avtgym observed, never by the SQLSTATE: a
// policy raises any SQLSTATE it likes (RAISE ... USING ERRCODE = '57P01',
// pg_database_size('nosuchdb') for 3D000, '53300' for "too many
// connections"). So an error the server answered on a session that lives
// on (severity ERROR; the connection still open) is the policy's failure,
// whatever its code: classify's kind where that is one of the policy's
// kinds, else KindExecution. Only what the policy cannot forge is the
// environment's: the connection broke (a network error, the session ended
// with FATAL or PANIC: a server shutting down, crashing or in recovery
// ends every session; pg_terminate_backend and every other way a policy
// could end its own session are refused by the statement checks and
// revoked in the catalog), the caller's context was canceled, or no
// connection could be had (connectError).
func (c classifier) classifyPolicy(ctx, qctx context.Context, err error, label string) error {
	e := c.classify(ctx, qctx, err, label)
	switch sqlexec.KindOf(e) {
	case sqlexec.KindUnavailable, sqlexec.KindBusy:
	default:
		return e
	}
	var pgErr *pgconn.PgError
	if ctx.Err() == nil && errors.As(err, &pgErr) && sessionLives(c.pc, pgErr) {
		return sqlexec.Errorf(sqlexec.KindExecution, err, "%s failed while running: %s", label, pgMessage(pgErr))
	}
	return e
}

// sessionLives reports whether the server answered e on a session that
// goes on: the connection is open and the error ended only the statement.
func sessionLives(pc *pgconn.PgConn, e *pgconn.PgError) bool {
	if pc == nil || pc.IsClosed() {
		return false
	}
	switch e.SeverityUnlocalized {
	case "FATAL", "PANIC":
		return false
	case "":
		return e.Severity != "FATAL" && e.Severity != "PANIC"
	}
	return true
}

// kindOf maps a SQLSTATE to an error kind (see classify).
func kindOf(code string) sqlexec.ErrorKind {
	switch code {
	case "57014", "55P03":
		return sqlexec.KindTimeout
	case "25006", "42501", "25001", "25P01", "25P02", "25P03", "0B000", "2D000":
		return sqlexec.KindDenied
	case "54011":
		return sqlexec.KindSyntax
	case "53200", "53400", "54001":
		return sqlexec.KindTooMuchMemory
	case "54000":
		return sqlexec.KindTooManyBytes
	case "53300":
		return sqlexec.KindBusy
	case "53100", "XX001", "XX002":
		return sqlexec.KindUnavailable
	}
	switch {
	case strings.HasPrefix(code, "42"):
		return sqlexec.KindSyntax
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "57P"), strings.HasPrefix(code, "3D"),
		strings.HasPrefix(code, "28"), strings.HasPrefix(code, "58"):
		return sqlexec.KindUnavailable
	}
	return sqlexec.KindExecution
}

// pgMessage quotes PostgreSQL's error: "ERROR: message (SQLSTATE code)",
// with its detail and hint.
func pgMessage(e *pgconn.PgError) string {
	var b strings.Builder
	sev := e.Severity
	if sev == "" {
		sev = "ERROR"
	}
	fmt.Fprintf(&b, "%s: %s (SQLSTATE %s)", sev, e.Message, e.Code)
	if e.Detail != "" {
		fmt.Fprintf(&b, "; detail: %s", e.Detail)
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, "; hint: %s", e.Hint)
	}
	return b.String()
}

// canceled classifies a call whose context ended: its deadline is a timeout
// (like the statement limit); a cancellation by the caller is not the query's
// fault.
func canceled(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return sqlexec.Errorf(sqlexec.KindTimeout, context.DeadlineExceeded, "the query did not finish before the deadline and was interrupted")
	}
	return sqlexec.Errorf(sqlexec.KindUnavailable, ctx.Err(), "the query was canceled by the caller")
}

// connectError classifies a failure to get a connection.
func connectError(ctx context.Context, db string, err error) error {
	if ctx.Err() != nil {
		return canceled(ctx)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "53300" {
		return sqlexec.Errorf(sqlexec.KindBusy, err, "no connection to database %s: %s; retry later", db, pgMessage(pgErr))
	}
	if errors.Is(err, ErrBudget) {
		return sqlexec.Errorf(sqlexec.KindBusy, err, "no connection to database %s within the connection budget: %v; retry later", db, err)
	}
	return sqlexec.Errorf(sqlexec.KindUnavailable, err, "no connection to database %s: %v", db, err)
}

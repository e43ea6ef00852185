// Package sqlexec owns SQL execution for the verifier: the Engine interface that database
// engines implement, execution limits and typed errors, the fast and slow query lanes that
// schedule every query (lanes.go), the result comparator of PROTOCOL §4 and its rewrites, the
// reference-result cache, the Check that turns a predicted SQL into a verdict, the contract of
// stateful verification (Job, Stateful, PyRunner: stateful.go), and the lexical SQL analysis
// the rest of avtgym shares (the lexer, statement splitting, clause segments).
package sqlexec

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Result is the materialised result of the last statement of a query.
type Result struct {
	// Columns holds the result's column names, in order.
	Columns []string
	// Rows holds the rows; cells are nil, int64, float64, string or []byte
	// (booleans are reported as int64 0/1).
	Rows [][]any
	// Bytes is the size of the result counted against Limits.MaxBytes
	// (see CellBytes).
	Bytes int64
}

// CellBytes is the size a cell counts against the byte cap, about what it
// takes in memory: 16 bytes for the cell itself, plus 8 for a number or the
// length of a text or blob. A million NULLs therefore cost 16 MB, as they do
// in Go, not 1 MB.
func CellBytes(v any) int64 {
	switch x := v.(type) {
	case int64, float64:
		return 16 + 8
	case string:
		return 16 + int64(len(x))
	case []byte:
		return 16 + int64(len(x))
	case PyValue:
		return 16 + int64(len(x.Key)+len(x.Err))
	default:
		return 16
	}
}

// Limits bounds one Engine.Query call.
type Limits struct {
	// Timeout is the deadline of the whole call (all its statements); 0 means none
	// besides ctx's own deadline.
	Timeout time.Duration
	// MaxRows is the most rows the result may have; 0 means unlimited.
	MaxRows int
	// MaxBytes is the most bytes (CellBytes summed) the result may have; 0 means unlimited.
	MaxBytes int64
	// MaxMemory is the most memory the engine may allocate for the call
	// (sorters, temporary values, caches it grows meanwhile); 0 means
	// unlimited.
	MaxMemory int64
	// Harness asks the engine for BIRD-Interact's harness's execution
	// (Policy.Harness; see harness.go): cells as PyValue, and a text that
	// HarnessTruncates keeps its first HarnessRows rows (the rest is read
	// and dropped, not counted against MaxRows). Check sets it; engines
	// that cannot (SQLite) ignore it, and Check compares their records
	// under the sound variant.
	Harness bool
	// HarnessTimeout is the statement limit of a check under
	// Policy.Harness, which replaces Timeout there (the harness's
	// statement_timeout; a text containing WITH RECURSIVE gets 15 s); 0
	// means DefaultHarnessTimeout, 60 s.
	HarnessTimeout time.Duration
}

// DefaultLimits returns the default limits: 5s per call, 10000 rows, 8 MiB
// of result, 32 MiB of engine memory.
func DefaultLimits() Limits {
	return Limits{Timeout: 5 * time.Second, MaxRows: 10000, MaxBytes: 8 << 20, MaxMemory: 32 << 20}
}

// Engine is one database.
//
// Implementations are safe for concurrent use by many goroutines.
type Engine interface {
	// Dialect names the SQL dialect, e.g. "sqlite".
	Dialect() string
	// Query runs sql (one or more statements separated by ';') and returns the last
	// statement's result. Every statement must be read-only. lim.Timeout (and ctx's
	// deadline) interrupts the running statement. Failures are *Error values.
	Query(ctx context.Context, sql string, lim Limits) (*Result, error)
	// Schema returns public schema text: each table's CREATE statement followed by
	// its first sampleRows rows as a comment block.
	Schema(ctx context.Context, sampleRows int) (string, error)
	// Close releases the database.
	Close() error
}

// ErrorKind classifies an execution failure.
type ErrorKind int

// Error kinds. The zero ErrorKind means "not an *Error".
const (
	// KindSyntax: the SQL did not compile (parse errors, unknown tables, columns or functions).
	KindSyntax ErrorKind = iota + 1
	// KindDenied: a statement tried something other than reading (writes, schema changes,
	// ATTACH, VACUUM, transactions, writing pragmas, load_extension).
	KindDenied
	// KindTimeout: the deadline interrupted the query.
	KindTimeout
	// KindTooManyRows: the result passed Limits.MaxRows.
	KindTooManyRows
	// KindTooManyBytes: the result passed Limits.MaxBytes.
	KindTooManyBytes
	// KindExecution: the SQL compiled but failed while running.
	KindExecution
	// KindUnavailable: the database could not serve the call (closed, missing, corrupt,
	// busy, or the caller's context was canceled). The environment's fault, not the query's.
	KindUnavailable
	// KindTooMuchMemory: the query needed more engine memory than Limits.MaxMemory.
	KindTooMuchMemory
	// KindBusy: the verifier was saturated: no slot to run the query became free
	// within the wait bound (see Lanes). The environment's condition, not the query's
	// fault: retry later.
	KindBusy
)

var kindNames = [...]string{"", "syntax", "denied", "timeout", "too_many_rows", "too_many_bytes", "execution", "unavailable", "too_much_memory", "busy"}

// String returns the kind's stable name ("syntax", "denied", ...).
func (k ErrorKind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// Error is an execution failure of a given kind.
type Error struct {
	// Kind classifies the failure.
	Kind ErrorKind
	// Msg explains the failure for a human (or a model): what failed and why.
	Msg string
	// Err is the underlying error (a driver error, a context error), if any.
	Err error
}

// Error returns "<kind>: <message>".
func (e *Error) Error() string {
	msg := e.Msg
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	return e.Kind.String() + ": " + msg
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error of kind k with a formatted message and underlying error err (may be nil).
func Errorf(k ErrorKind, err error, format string, args ...any) *Error {
	return &Error{Kind: k, Msg: fmt.Sprintf(format, args...), Err: err}
}

// KindOf returns the kind of the first *Error in err's chain, or 0 when there is none.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

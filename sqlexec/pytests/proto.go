package pytests

// This file holds the protocol's messages and what a response means.

import (
	"fmt"
	"strings"

	"avtgym/sqlexec"
)

// request is one job, as the worker reads it.
type request struct {
	// ID is echoed in the response.
	ID int64 `json:"id"`
	// DSN, DBName, Setup, Prior, Predicted, Reference, Tests and Cleanup
	// are the PyJob's.
	DSN       string   `json:"dsn"`
	DBName    string   `json:"db_name"`
	Setup     []string `json:"setup"`
	Prior     []string `json:"prior"`
	Predicted []string `json:"predicted"`
	Reference []string `json:"reference"`
	Tests     []string `json:"tests"`
	Cleanup   []string `json:"cleanup"`
	// StatementTimeoutMS bounds each statement (0: the role's default).
	StatementTimeoutMS int64 `json:"statement_timeout_ms"`
	// DeadlineMS is the time left for the whole job; the worker stops SQL
	// when it has passed (0: no bound).
	DeadlineMS int64 `json:"deadline_ms"`
	// MaxRows bounds the rows of a statement.
	MaxRows int `json:"max_rows"`
	// MaxBytes bounds the bytes of a statement's result (0: no cap).
	MaxBytes int64 `json:"max_bytes"`
	// Isolate and Guard are the PyJob's.
	Isolate []string `json:"isolate"`
	Guard   string   `json:"guard"`
}

// lintRequest asks a worker for the static check of test sources (no
// database, no job).
type lintRequest struct {
	// ID is echoed in the response.
	ID int64 `json:"id"`
	// Lint are the test sources.
	Lint []string `json:"lint"`
}

// response is the worker's answer to a request.
type response struct {
	// ID is the request's.
	ID int64 `json:"id"`
	// Outcome is "passed", "failed" (the policy's failure), "broken" (a
	// test is broken), "lost" (the connection broke after the policy's
	// statements began), "error" (the environment failed), or "linted"
	// (the answer to a lintRequest).
	Outcome string `json:"outcome"`
	// Reason explains a failure, a broken test or an error.
	Reason string `json:"reason"`
	// Step is where it happened: "predicted", "isolate", "guard", "test",
	// "cleanup" (failures), and "connect", "transaction", "setup", "prior",
	// "worker" too (errors).
	Step string `json:"step"`
	// Index is the statement's index in its step.
	Index int `json:"index"`
	// SQLState is the database's error code, if any.
	SQLState string `json:"sqlstate"`
	// Kind names a failure that has no SQLSTATE, or whose SQLSTATE does
	// not say it: "timeout", "too_many_rows", "too_many_bytes",
	// "too_much_memory", "denied", "execution".
	Kind string `json:"kind"`
	// Dirty says that the transaction ended early (Outcome is "error").
	Dirty bool `json:"dirty"`
	// Retire asks the pool to replace the worker after this job (it hit
	// its memory limit, or keeps too much of it).
	Retire bool `json:"retire"`
	// Problems answers a lintRequest: one per test, "" when it is fine.
	Problems []string `json:"problems"`
}

// JobError is a job that the worker ran but could not complete, for a
// reason of the environment: the database unreachable or lost, a statement
// of Setup or Prior failing, the job's transaction ended early. It
// matches ErrDirty (errors.Is) when Dirty is set.
type JobError struct {
	// Step is where it failed: "connect", "transaction", "setup", "prior"
	// (the connection was lost, or a statement failed), "predicted",
	// "isolate", "guard", "test", "cleanup" (the job's own bookkeeping
	// failed there: a savepoint, the transaction ended early), or "worker".
	Step string
	// Index is the failing statement's index in Setup or Prior.
	Index int
	// SQLState is the database's error code, if any.
	SQLState string
	// Msg is the worker's explanation.
	Msg string
	// Dirty says that the database may hold the job's changes.
	Dirty bool
}

// Error returns "pytests: <step>: <message>".
func (e *JobError) Error() string {
	return "pytests: " + e.Step + ": " + e.Msg
}

// Is matches ErrDirty when the job left the database dirty.
func (e *JobError) Is(target error) bool { return target == ErrDirty && e.Dirty }

// result turns a response into Run's results.
func (r response) result() (sqlexec.PyResult, error) {
	switch r.Outcome {
	case "passed":
		return sqlexec.PyResult{Passed: true}, nil
	case "failed":
		res := sqlexec.PyResult{Reason: r.Reason}
		if r.Step == "predicted" || r.Kind != "" || r.SQLState != "" {
			res.Kind = kindOf(r.Kind, r.SQLState)
		}
		return res, nil
	case "broken":
		return sqlexec.PyResult{Broken: r.Reason}, nil
	case "lost":
		return sqlexec.PyResult{Lost: true, Reason: r.Reason}, nil
	case "error":
		return sqlexec.PyResult{}, &JobError{Step: r.Step, Index: r.Index, SQLState: r.SQLState, Msg: r.Reason, Dirty: r.Dirty}
	}
	return sqlexec.PyResult{}, fmt.Errorf("%w: it answered with the unknown outcome %q", ErrWorker, r.Outcome)
}

// kindOf classifies a failure: by the worker's own kind when it has one,
// else by SQLSTATE as sqlexec's engines do. Whatever the SQLSTATE, it is
// never KindUnavailable or KindBusy: an error the server returned on an
// open connection is the policy's (a policy can raise any SQLSTATE).
func kindOf(kind, sqlstate string) sqlexec.ErrorKind {
	switch kind {
	case "timeout":
		return sqlexec.KindTimeout
	case "too_many_rows":
		return sqlexec.KindTooManyRows
	case "too_many_bytes":
		return sqlexec.KindTooManyBytes
	case "too_much_memory":
		return sqlexec.KindTooMuchMemory
	case "denied":
		return sqlexec.KindDenied
	case "execution":
		return sqlexec.KindExecution
	}
	switch sqlstate {
	case "57014", "55P03":
		return sqlexec.KindTimeout
	case "42501", "25006":
		return sqlexec.KindDenied
	case "53200", "53400", "54001":
		return sqlexec.KindTooMuchMemory
	}
	if strings.HasPrefix(sqlstate, "42") {
		return sqlexec.KindSyntax
	}
	return sqlexec.KindExecution
}

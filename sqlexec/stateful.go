package sqlexec

import (
	"context"
	"errors"
	"time"
)

// ErrBrokenTest is wrapped by the error a Stateful engine returns for a
// job whose test is broken whatever the policy did (PyResult.Broken): a
// corpus problem, never the policy's outcome.
var ErrBrokenTest = errors.New("a test of the task is broken")

// This file is the contract of stateful verification (PROTOCOL.md §4, the
// last paragraph): tasks whose SQL changes the database (BIRD-Interact's
// "Management" tasks) are verified on a private copy of the pristine
// database, never on the shared one. The engines implement it
// (sqlexec/postgres, sqlexec/sqlite); BIRD-Interact's Python tests run in a
// PyRunner (sqlexec/pytests).

// Job is one stateful verification. On a private copy of the pristine
// database it runs Setup, then Prior, then Predicted; then it decides by
// Tests (Python, through a PyRunner) when there are any, else by Checks,
// else by the last statement's result as Check does; then it runs Cleanup;
// and it leaves nothing behind: the next Job on the same database sees the
// pristine database again, whatever this one did.
type Job struct {
	// Key identifies the reference side of the job (the record and the
	// prior statements): results computed from the reference, such as the
	// expected rows of Checks, may be cached under it.
	Key string
	// Setup are statements the environment runs first (BIRD-Interact's
	// preprocess_sql). They belong to the corpus: if one fails the job
	// fails with an error, not a verdict.
	Setup []string
	// Prior are statements accepted in an earlier phase of the same
	// episode (a follow-up is verified on the state its phase 1 left).
	// They succeeded when they were accepted, on the same pristine state,
	// so a failure here is the environment's (an error), unless
	// PolicyPrior says they are the policy's doing.
	Prior []string
	// PolicyPrior, when positive, says that Prior is the policy's doing:
	// its first PolicyPrior texts are the policy's own SQL, accepted in an
	// earlier phase of the episode (FOLLOW_UP_STATE_POLICY's phase 1), and
	// the rest are the corpus's statements run on the state that SQL left
	// (the record's cleanup, the follow-up's setup). Replaying the policy's
	// SQL need not succeed again (random(), the clock, a backend's pid),
	// and the state it leaves can make the corpus's statements fail (a
	// trigger, a CHECK constraint it added): either is the policy's
	// outcome, a failed verdict, never an error, since ERROR is decided
	// only by facts the policy cannot forge. A failure of the policy's own
	// text carries Err (feedback on its own SQL); one of a corpus
	// statement has a Reason only (privileged, as a failing check's), so
	// that the corpus's texts do not reach the policy. The environment's
	// failures stay errors, as the engines classify the policy's
	// statements: the connection broke, the server shut down or is in
	// recovery, no copy or connection in time, ctx ended. 0: a failure in
	// Prior is the environment's. It concerns the predicted side: Setup
	// and ExpectedPrior stay the corpus's, and a job with PolicyPrior
	// needs ExpectedPrior (else the reference side runs Prior too, and a
	// failure there is an error).
	PolicyPrior int
	// ExpectedPrior, when not nil, replaces Prior on the reference side:
	// the reference's statements, its checks and its cleanup run after
	// Setup and ExpectedPrior, while Predicted runs after Setup and Prior.
	// It serves BIRD-Interact follow-ups verified on the policy's phase-1
	// state (FOLLOW_UP_STATE_POLICY): Prior is the policy's accepted phase
	// 1, ExpectedPrior the reference's, so that what the policy's phase 1
	// did cannot change what the follow-up is expected to produce. They are
	// the corpus's statements: their failure is an error. Python tests
	// ignore it: they run on the policy's state, with the reference's
	// statements run there by the test itself, as the a-Interact harness
	// runs them.
	ExpectedPrior []string
	// ReferenceFailureFails makes a failure of the reference side's SQL
	// (its statements, a check or its cleanup; not the environment: a
	// busy or unavailable database, ctx ending) a failed verdict rather
	// than an error: the a-Interact harness scores a task whose reference
	// fails 0 (ex_base, evaluation/src/eval_bird_interact.py), never an
	// error. The verdict's Reason says that the reference failed; Err is
	// nil (nothing the policy's SQL did).
	ReferenceFailureFails bool
	// Predicted is the policy's SQL: one or more statements, run in order.
	// Any failure is the policy's (a failed verdict with Err set).
	Predicted string
	// Reference are the reference statements: Python tests receive them as
	// sol_sqls; Checks compare with the state they leave.
	Reference []string
	// Checks are test queries (read-only): after Predicted, each one's rows
	// must equal, under Policy, its rows after Reference (computed on
	// another private copy, and cacheable under Key).
	Checks []string
	// Tests are BIRD-Interact test_case(pred_sqls, sol_sqls, db_name, conn)
	// functions, Python source; a job with Tests needs a PyRunner.
	Tests []string
	// Cleanup are statements the environment runs last (BIRD-Interact's
	// clean_up_sqls). On the reference's side their failure is an error;
	// after Predicted it is the policy's failure (a prediction may break
	// them, and must not turn its failure into an environment error).
	Cleanup []string
	// Policy compares results (Checks', or the last statements').
	Policy Policy
	// Limits bound each statement (time, rows, bytes, memory; engines may
	// apply the time per statement group and the memory per job); the
	// whole job is bounded by Deadline too. The policy's rewrite switches
	// (StripDistinct, ...) apply only to SQL whose result is compared.
	Limits Limits
	// Deadline bounds the whole job, tests included (0: no bound beyond
	// ctx and the per-statement limits).
	Deadline time.Duration
}

// Stateful is an engine that can verify Jobs. Verify returns a Verdict for
// whatever the policy's SQL did (wrong state, failed statement, a failed
// test) and an error only when the environment failed: the database or a
// test worker unavailable, Setup, Prior (unless Job.PolicyPrior makes it
// the policy's) or Cleanup failing, a test worker
// that crashed or hung outside SQL, no private copy within the wait bound
// (KindBusy), ctx ended. Concurrent Verify calls never see each other's
// changes and never wait on each other's locks.
type Stateful interface {
	Verify(ctx context.Context, j Job) (Verdict, error)
}

// StateQuery is a read-only query on the state statements leave on a
// private copy of the pristine database: Setup (the corpus's), then Prior,
// then SQL, whose last statement's result is returned; nothing is kept.
// It serves BIRD_A's execute tool in a follow-up, which explores the state
// the follow-up is verified on.
type StateQuery struct {
	// Key names the query in messages.
	Key string
	// Setup are the corpus's statements (their failure is an error).
	Setup []string
	// Prior are the statements of an earlier phase (the policy's accepted
	// SQL, checked as the policy's); their failure is an error, unless
	// PolicyPrior says they are the policy's doing.
	Prior []string
	// PolicyPrior is as Job.PolicyPrior: when positive, a failure in Prior
	// is the policy's, an *Error of KindExecution (its own text's error
	// for the first PolicyPrior texts; for the corpus's statements after
	// them a message that does not quote them), as a failure of SQL is.
	PolicyPrior int
	// SQL is the policy's read-only SQL, checked and bounded as a query's.
	SQL string
	// Limits bound each statement; Deadline the whole run (0: none beyond
	// ctx and the limits).
	Limits   Limits
	Deadline time.Duration
}

// StateQuerier is a Stateful engine that also runs StateQuery. QueryState
// returns the result, or an *Error (Kind set) for SQL of the policy's that
// is denied or fails, as Engine.Query does; any other error is the
// environment's (Setup or Prior failing, no copy in time: KindBusy, the
// database unavailable, ctx ended).
type StateQuerier interface {
	QueryState(ctx context.Context, q StateQuery) (*Result, error)
}

// PyJob is a Job's Python part, as a PyRunner gets it: the whole
// verification runs in the worker on one connection, as BIRD-Interact's
// harness runs it (Setup, Prior, then the predicted statements, then each
// test, then Cleanup), inside one transaction the worker always rolls back.
type PyJob struct {
	// DSN connects to the private copy (a libpq connection string or URL).
	DSN string
	// DBName is the database's name as the tests see it (db_name).
	DBName string
	// Setup, Prior and Cleanup are as in Job (their failure is an error;
	// the engine decides whether a Prior statement that failed on the
	// worker's open session is the policy's, Job.PolicyPrior).
	Setup, Prior, Cleanup []string
	// Predicted are the policy's statements (pred_sqls); Reference the
	// reference statements (sol_sqls).
	Predicted, Reference []string
	// Tests are the test_case functions' source.
	Tests []string
	// StatementTimeout bounds each statement the job runs (the tests'
	// included); Deadline the whole job.
	StatementTimeout, Deadline time.Duration
	// MaxRows bounds the rows a test's query may return.
	MaxRows int
	// MaxBytes bounds the result of every statement the job runs for the
	// policy or its tests (the predicted statements' and the tests'), as
	// Limits.MaxBytes bounds a query's: cells counted as CellBytes counts
	// them, as the rows arrive; past it the statement fails with
	// KindTooManyBytes (the policy's failure). 0 means no cap.
	MaxBytes int64
	// Isolate are the environment's statements run after the predicted
	// statements and before the tests, inside the job's transaction, so
	// that the tests read the database and not what the policy's session
	// made to shadow it (the engine's: drop the session's temporary
	// objects, pin the search path). They run on the state the policy
	// left, which can make them fail (DISCARD TEMP refuses while a temp
	// table has pending trigger events): their failure is the policy's.
	Isolate []string
	// Guard, when set, is a query run after Isolate: each row it returns
	// names an object the policy's statements made to shadow a built-in
	// one (its first column, text); any row fails the verdict with that
	// text as the reason, and the tests do not run.
	Guard string
}

// PyResult is what a PyRunner reports for a job that ran.
type PyResult struct {
	// Passed is true when the predicted statements ran and every test
	// passed.
	Passed bool
	// Reason explains a failure: the predicted statement's error, or the
	// failing test's assertion message or exception, as feedback.
	Reason string
	// Kind classifies a failure of the predicted statements (KindSyntax,
	// KindTimeout, KindExecution, ...), or a failed test's when a limit
	// caused it (KindTimeout, KindTooManyRows, KindTooManyBytes,
	// KindTooMuchMemory); 0 for a failed assertion or exception.
	Kind ErrorKind
	// Broken, when set, says that a test itself is broken, whatever the
	// policy did (its source does not compile, it uses a name that is
	// neither a helper nor a builtin): a corpus problem, which corpus check
	// reports; the verification has no verdict (an ERROR when serving).
	// Only what the test's source shows is broken; an exception the test
	// raises at run time (the policy's data provoked it) is a failed test.
	Broken string
	// Lost, when set, says that the worker's connection to the database
	// broke once the policy's statements had begun (Reason says how): the
	// environment's failure, since every way a policy could end its own
	// session is refused before its SQL runs (the engine's statement
	// checks) and revoked in the catalog.
	Lost bool
}

// PyRunner runs BIRD-Interact's Python tests. Run returns an error only
// when the environment failed (no worker, a worker that crashed or hung
// outside SQL and was replaced, the database unreachable, Setup, Prior or
// Cleanup failing); what the policy's SQL did is in the PyResult.
type PyRunner interface {
	Run(ctx context.Context, j PyJob) (PyResult, error)
}

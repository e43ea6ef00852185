package sqlite

// This file builds new database files from SQL scripts (a corpus manifest's "script"). A
// script is data, not code we trust: it may only create and fill the one database being
// built. Defences, each enforced before the work it bounds:
//
//   - Statements run one at a time (split by sqlexec.SplitStatements, each prepared and
//     executed on its own, never SQLite's multi-statement exec), and each must begin with
//     a keyword of an allow-list. That is what stops VACUUM, which never reaches the
//     authorizer and which, as VACUUM INTO, writes a new file anywhere.
//   - A build authorizer allows only schema changes and writes (main and temp), reading,
//     transactions, savepoints, ANALYZE, REINDEX, virtual tables, functions other than
//     load_extension, and a short allow-list of pragmas; it denies ATTACH and DETACH.
//   - PRAGMA max_page_count caps the database's size (main and temp), set before the
//     script runs; the script cannot change it (the pragma is denied).
//   - A time limit (BuildOptions.Timeout, on top of the caller's deadline) interrupts a
//     running statement.
//   - Statements with bound parameters are refused: a script has no arguments, and it
//     keeps the splitter and SQLite from disagreeing silently about where a statement
//     ends (the splitter knows PostgreSQL's $tag$ quotes, which SQLite reads as
//     parameters).

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"avtgym/sqlexec"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Build limits.
const (
	// DefaultBuildTimeout bounds one build when BuildOptions.Timeout is zero.
	DefaultBuildTimeout = 5 * time.Minute
	// DefaultMaxBuildBytes bounds the size of a built database (and of its temporary
	// database) when BuildOptions.MaxBytes is zero.
	DefaultMaxBuildBytes int64 = 1 << 30
)

// BuildOptions bound a build.
type BuildOptions struct {
	// Name is how errors name the script, usually its file; "" means "script".
	Name string
	// Timeout bounds the whole build; 0 means DefaultBuildTimeout. The caller's context
	// deadline applies as well.
	Timeout time.Duration
	// MaxBytes bounds the database file (and the connection's temporary database), in
	// bytes, rounded down to whole pages; 0 means DefaultMaxBuildBytes.
	MaxBytes int64
}

// BuildError is a build that failed: where in the script, and why.
type BuildError struct {
	// Script is BuildOptions.Name.
	Script string
	// Stmt is the 1-based number of the statement that failed; 0 when the failure is
	// not tied to one statement.
	Stmt int
	// Line is the script line on which the statement starts; 0 when Stmt is 0.
	Line int
	// Err says what failed; its kind is KindDenied for what a build script may not do,
	// KindTimeout for the time limit, KindTooManyBytes for the size limit, KindSyntax
	// for a statement that does not compile, KindExecution for one that fails while
	// running and KindUnavailable for I/O failures.
	Err *sqlexec.Error
}

// Reason returns the failure without the script's name: "statement 3 (line 7, ATTACH
// 'x' AS ...): denied: ...".
func (e *BuildError) Reason() string {
	if e.Stmt == 0 {
		return e.Err.Error()
	}
	return fmt.Sprintf("statement %d (line %d): %v", e.Stmt, e.Line, e.Err)
}

func (e *BuildError) Error() string { return "sqlite: building from " + e.Script + ": " + e.Reason() }

// Unwrap returns the *sqlexec.Error, so that sqlexec.KindOf sees the kind.
func (e *BuildError) Unwrap() error { return e.Err }

// BuildFromScript creates a new database file at dest by running the SQL script under
// the default build limits (Build with zero BuildOptions).
func BuildFromScript(ctx context.Context, script string, dest string) error {
	return Build(ctx, script, dest, BuildOptions{})
}

// Build creates a new database file at dest by running the SQL script, one statement
// at a time, behind the build authorizer and under the time and size limits of opt. It
// fails if dest exists; when the build fails, dest is removed. Failures are
// *BuildError values. It is meant only for building corpora from SQL scripts, never
// for submitted SQL.
func Build(ctx context.Context, script, dest string, opt BuildOptions) (err error) {
	if opt.Name == "" {
		opt.Name = "script"
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultBuildTimeout
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBuildBytes
	}
	b := &builder{opt: opt}
	f, err := os.OpenFile(dest, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return b.fail(0, 0, sqlexec.KindUnavailable, err, "creating the database file: %v", err)
	}
	f.Close()
	defer func() {
		if err != nil {
			for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
				os.Remove(dest + suffix)
			}
		}
	}()
	if err := b.open(dest); err != nil {
		return err
	}
	defer func() {
		if cerr := b.conn.Close(); cerr != nil && err == nil {
			err = b.fail(0, 0, sqlexec.KindUnavailable, cerr, "closing the new database: %v", cerr)
		}
	}()
	bctx, cancel := context.WithTimeout(ctx, opt.Timeout)
	defer cancel()
	if err := b.run(ctx, bctx, script); err != nil {
		return err
	}
	if !b.conn.AutoCommit() {
		return b.fail(0, 0, sqlexec.KindExecution, nil, "the script ends inside a transaction (a BEGIN without COMMIT): its changes would be lost")
	}
	return nil
}

// builder is one Build: the new database's connection, behind its
// authorizer and under its size cap.
type builder struct {
	opt                BuildOptions
	conn               *sqlite3.SQLiteConn
	auth               *buildAuth
	pageSize, maxPages int64
}

// fail is a BuildError of statement stmt (0: none) starting on line.
func (b *builder) fail(stmt, line int, k sqlexec.ErrorKind, cause error, format string, args ...any) error {
	return &BuildError{Script: b.opt.Name, Stmt: stmt, Line: line, Err: sqlexec.Errorf(k, cause, format, args...)}
}

// timeUp is the failure of statement stmt when the build's time ran out
// (ctx is the caller's: its deadline or cancellation, else the limit's).
func (b *builder) timeUp(ctx context.Context, stmt, line int) error {
	if err := ctx.Err(); err != nil {
		return b.fail(stmt, line, sqlexec.KindTimeout, err, "the build was stopped: the caller's deadline passed or it was canceled (%v)", err)
	}
	return b.fail(stmt, line, sqlexec.KindTimeout, context.DeadlineExceeded,
		"the build did not finish within its time limit of %v and was interrupted", b.opt.Timeout)
}

// open opens the new database at dest, caps its size (before the
// authorizer, which denies the pragma, is installed) and installs the
// authorizer.
func (b *builder) open(dest string) error {
	dc, err := (&sqlite3.SQLiteDriver{}).Open("file:" + escapePath(dest) + "?mode=rw&_sync=OFF&_journal=MEMORY")
	if err != nil {
		return b.fail(0, 0, sqlexec.KindUnavailable, err, "opening the new database: %v", err)
	}
	b.conn = dc.(*sqlite3.SQLiteConn)
	b.pageSize, err = buildPragmaInt(b.conn, "PRAGMA page_size")
	if err != nil || b.pageSize <= 0 {
		b.conn.Close()
		return b.fail(0, 0, sqlexec.KindUnavailable, err, "reading the page size: %v", err)
	}
	b.maxPages = max(b.opt.MaxBytes/b.pageSize, 1)
	for _, schema := range []string{"main", "temp"} {
		if _, err := b.conn.Exec(fmt.Sprintf("PRAGMA %s.max_page_count = %d", schema, b.maxPages), nil); err != nil {
			b.conn.Close()
			return b.fail(0, 0, sqlexec.KindUnavailable, err, "setting the size limit: %v", err)
		}
	}
	b.auth = &buildAuth{}
	b.conn.RegisterAuthorizer(b.auth.authorize)
	return nil
}

// run runs the script's statements one at a time, within bctx (ctx with
// the time limit).
func (b *builder) run(ctx, bctx context.Context, script string) error {
	stmts := sqlexec.SplitStatements(script)
	lines := buildLines(script, stmts)
	nums := make([]int, len(stmts)) // statement numbers, for messages
	for i := range nums {
		nums[i] = i + 1
	}
	for i := 0; i < len(stmts); i++ {
		text, n, line := stmts[i], nums[i], lines[i]
		if bctx.Err() != nil {
			return b.timeUp(ctx, n, line)
		}
		if why := buildDenial(text); why != "" {
			return b.fail(n, line, sqlexec.KindDenied, nil, "%s: %s", firstWords(text, 4), why)
		}
		incomplete, err := b.exec(ctx, bctx, text, n, line, i+1 < len(stmts))
		if incomplete {
			// The splitter ended the statement early (a CASE ... END; inside a
			// trigger body): join it with the next one and prepare again. The
			// first keyword, checked above, stays the same.
			stmts[i+1] = text + ";\n" + stmts[i+1]
			lines[i+1], nums[i+1] = line, n
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// buildDenial returns why a build script may not run a statement, by its
// first keyword, or "".
func buildDenial(text string) string {
	kw := buildFirstKeyword(text)
	why, ok := buildStatements[kw]
	switch {
	case ok:
		return why
	case kw == "":
		return "the statement does not begin with a keyword"
	}
	return kw + " statements are not allowed in a build script, which may only create and fill its database " +
		"(CREATE, DROP, ALTER, INSERT, UPDATE, DELETE, SELECT, transactions, ANALYZE, REINDEX, some pragmas)"
}

// exec prepares and runs statement n (text, starting on line); incomplete
// reports a statement SQLite finds unfinished while more follow (hasNext),
// to be joined with the next one.
func (b *builder) exec(ctx, bctx context.Context, text string, n, line int, hasNext bool) (incomplete bool, err error) {
	b.auth.reset()
	ds, err := b.conn.Prepare(text)
	if err != nil {
		var se sqlite3.Error
		if hasNext && errors.As(err, &se) && se.Code == sqlite3.ErrError && strings.Contains(se.Error(), "incomplete input") {
			return true, nil
		}
		return false, b.stmtError(ctx, bctx, n, line, text, err)
	}
	s := ds.(*sqlite3.SQLiteStmt)
	if s.NumInput() > 0 {
		s.Close()
		return false, b.fail(n, line, sqlexec.KindDenied, nil, "%s: the statement has a bound parameter (?, :name, @name or $name), and a build script has no arguments", firstWords(text, 4))
	}
	_, err = s.ExecContext(bctx, nil)
	s.Close()
	if err == nil {
		return false, nil
	}
	if se := (sqlite3.Error{}); errors.As(err, &se) && se.Code == sqlite3.ErrFull {
		return false, b.fail(n, line, sqlexec.KindTooManyBytes, err,
			"%s: the database reached the build size limit of %d bytes (%d pages of %d bytes) or the disk is full",
			firstWords(text, 4), b.maxPages*b.pageSize, b.maxPages, b.pageSize)
	}
	return false, b.stmtError(ctx, bctx, n, line, text, err)
}

// stmtError classifies the failure of statement n.
func (b *builder) stmtError(ctx, bctx context.Context, n, line int, text string, err error) error {
	fail := func(k sqlexec.ErrorKind, format string, args ...any) error {
		return b.fail(n, line, k, err, format, args...)
	}
	if bctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return b.timeUp(ctx, n, line)
	}
	if b.auth.denied != "" {
		return fail(sqlexec.KindDenied, "%s: %s", firstWords(text, 4), b.auth.denied)
	}
	var se sqlite3.Error
	if errors.As(err, &se) {
		switch se.Code {
		case sqlite3.ErrInterrupt:
			return b.timeUp(ctx, n, line)
		case sqlite3.ErrAuth:
			return fail(sqlexec.KindDenied, "%s: not authorized", firstWords(text, 4))
		case sqlite3.ErrFull:
			return fail(sqlexec.KindTooManyBytes, "%s: the database reached the build size limit or the disk is full", firstWords(text, 4))
		case sqlite3.ErrIoErr, sqlite3.ErrCantOpen, sqlite3.ErrNomem, sqlite3.ErrCorrupt, sqlite3.ErrNotADB:
			return fail(sqlexec.KindUnavailable, "%s: %v", firstWords(text, 4), err)
		case sqlite3.ErrError:
			// A statement that does not compile (prepare), or a generic failure.
			return fail(sqlexec.KindSyntax, "%s: %v", firstWords(text, 4), err)
		}
	}
	return fail(sqlexec.KindExecution, "%s: %v", firstWords(text, 4), err)
}

// buildStatements are the first keywords of the statements a build script may run
// (value ""), and a few it may not, with the reason (any other keyword is refused too).
var buildStatements = map[string]string{
	"CREATE": "", "DROP": "", "ALTER": "", "INSERT": "", "REPLACE": "", "UPDATE": "", "DELETE": "",
	"SELECT": "", "VALUES": "", "WITH": "", "BEGIN": "", "COMMIT": "", "END": "", "ROLLBACK": "",
	"SAVEPOINT": "", "RELEASE": "", "ANALYZE": "", "REINDEX": "", "PRAGMA": "",
	"VACUUM":  "VACUUM is not allowed in a build script (it rewrites the database, and VACUUM INTO writes a new file)",
	"ATTACH":  "ATTACH is not allowed in a build script: it may only create and fill its own database",
	"DETACH":  "DETACH is not allowed in a build script",
	"EXPLAIN": "EXPLAIN is not allowed in a build script",
}

// buildPragmas are the pragmas a build script may run, with or without an argument.
// Each changes only how this connection fills the database, or a header field, never
// files, sizes or the database's storage layout:
//   - foreign_keys, defer_foreign_keys: whether (and when) foreign keys are checked
//     while the script fills the tables;
//   - recursive_triggers: how the script's triggers fire;
//   - user_version, application_id: integers in the file header, for stamping a corpus
//     version;
//   - encoding: the new database's text encoding (effective before the first table);
//   - table_info, table_xinfo, table_list, index_list, index_info, index_xinfo,
//     foreign_key_list, foreign_key_check, integrity_check, quick_check: reading only.
//
// Denied, among others: max_page_count and page_size (they would lift the size limit),
// journal_mode, locking_mode, synchronous, mmap_size, temp_store, temp_store_directory and
// data_store_directory (files and process-wide settings), writable_schema and
// schema_version (they corrupt the schema), auto_vacuum and incremental_vacuum.
var buildPragmas = map[string]bool{
	"foreign_keys": true, "defer_foreign_keys": true, "recursive_triggers": true,
	"user_version": true, "application_id": true, "encoding": true,
	"table_info": true, "table_xinfo": true, "table_list": true, "index_list": true,
	"index_info": true, "index_xinfo": true, "foreign_key_list": true, "foreign_key_check": true,
	"integrity_check": true, "quick_check": true,
}

// buildDeniedFunctions are functions a build script may not call.
var buildDeniedFunctions = map[string]bool{"load_extension": true, "fts3_tokenizer": true}

// buildAuth is the authorizer of a build connection; it records its denials as
// authState does.
type buildAuth struct{ authState }

// authorize allows creating and filling the database being built and denies the rest.
func (a *buildAuth) authorize(op int, arg1, arg2, dbName string) int {
	switch op {
	case opCreateIndex, opCreateTable, opCreateTempIndex, opCreateTempTable, opCreateTempTrig,
		opCreateTempView, opCreateTrigger, opCreateView,
		opDropIndex, opDropTable, opDropTempIndex, opDropTempTable, opDropTempTrigger,
		opDropTempView, opDropTrigger, opDropView, opAlterTable,
		opInsert, opUpdate, opDelete, opSelect, opRead, opRecursive,
		opTransaction, opSavepoint, opAnalyze, opReindex, opCreateVtable, opDropVtable:
		return authOK
	case opFunction:
		if name := strings.ToLower(arg2); buildDeniedFunctions[name] {
			return a.deny("the function %s() is not allowed in a build script", name)
		}
		return authOK
	case opPragma:
		name := strings.ToLower(arg1)
		if buildPragmas[name] {
			return authOK
		}
		return a.deny("PRAGMA %s is not allowed in a build script (allowed: foreign_keys, defer_foreign_keys, recursive_triggers, user_version, application_id, encoding and read-only schema pragmas)", name)
	case opAttach:
		return a.deny("ATTACH is not allowed in a build script: it may only create and fill its own database")
	case opDetach:
		return a.deny("DETACH is not allowed in a build script")
	}
	return a.deny("action %d (%s %s) is not allowed in a build script", op, arg1, arg2)
}

// buildFirstKeyword returns the first word of a statement, upper-cased, skipping white
// space and comments as SQLite's tokenizer does; "" when the statement does not begin
// with a word.
func buildFirstKeyword(s string) string {
	i := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(s[i:], "--"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return ""
			}
			i += j + 1
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return ""
			}
			i += 2 + j + 2
		default:
			j := i
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' ||
				j > i && (s[j] >= '0' && s[j] <= '9' || s[j] == '$') || s[j] >= 0x80) {
				j++
			}
			return strings.ToUpper(s[i:j])
		}
	}
	return ""
}

// buildLines returns the script line on which each statement starts (the statements
// are trimmed substrings of the script, in order).
func buildLines(script string, stmts []string) []int {
	lines := make([]int, len(stmts))
	pos, line := 0, 1
	for i, st := range stmts {
		off := strings.Index(script[pos:], st)
		if off < 0 {
			lines[i] = line
			continue
		}
		line += strings.Count(script[pos:pos+off], "\n")
		lines[i] = line
		line += strings.Count(st, "\n")
		pos += off + len(st)
	}
	return lines
}

// buildPragmaInt runs a pragma that returns one integer.
func buildPragmaInt(conn *sqlite3.SQLiteConn, q string) (int64, error) {
	rows, err := conn.Query(q, nil)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	dest := make([]driver.Value, len(rows.Columns()))
	if err := rows.Next(dest); err != nil {
		if err == io.EOF {
			return 0, errors.New("no result")
		}
		return 0, err
	}
	v, ok := dest[0].(int64)
	if !ok {
		return 0, fmt.Errorf("unexpected result %v", dest[0])
	}
	return v, nil
}

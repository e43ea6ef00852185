package sqlite

// This file is the private writable copy that stateful verification
// (stateful.go) runs a job on: one SQLite connection of its own whose main
// database is an in-memory database made from an image of the pristine
// database (sqlite3_deserialize), so the shared file is never opened for
// writing and nothing a job does reaches another job, the read-only engine
// or its schema cache. On Linux the image lives once in a sealed memory file
// that each copy maps copy-on-write (image_linux.go): a copy costs a mapping
// (about 0.1 ms, whatever the database's size) and memory only for the pages
// it writes. Elsewhere each copy duplicates the image into memory SQLite
// allocates (about 40 ms for 50 MB). Defences, each enforced before the work
// it bounds:
//
//   - Every statement must begin with a keyword of an allow-list
//     (copyStatements), checked on the text SQLite compiled. That is what
//     stops VACUUM and VACUUM INTO, which never reach the authorizer.
//   - SQLITE_LIMIT_ATTACHED is 0, so no database can be attached, not even
//     by VACUUM (which attaches its target); ATTACH never gets that far.
//   - The copy authorizer (copyAuth) allows reading and writing the copy
//     (main and temp) and denies ATTACH/DETACH, virtual tables,
//     load_extension and fts3_tokenizer, writes to sqlite_dbpage, and every
//     pragma outside an allow-list of per-connection ones.
//   - Defensive mode, an untrusted schema and no extension loading
//     (avt_harden in capi.go).
//   - Size: the copy may grow to a fixed size, its room (the image plus
//     StatefulOptions.MaxGrowth): a mapped copy's buffer is that large and
//     never reallocated, a duplicated one may be reallocated up to it
//     (SQLITE_FCNTL_SIZE_LIMIT); SQL can change neither. Its temporary
//     database may grow as far (max_page_count, set before the authorizer,
//     which denies the pragma). Past that, writes fail with SQLITE_FULL,
//     reported as KindTooMuchMemory.
//   - Memory: the copy's own pages are charged to no query (they are bounded
//     by the size above, and StatefulOptions.MaxCopyBytes bounds the copies
//     together); everything else SQLite allocates for the connection (page
//     cache, schema, the in-memory rollback journal, sorters, temporary
//     values) is charged to the connection, and the connection may never
//     hold more than Limits.MaxMemory beyond what it held as a fresh copy:
//     the cap bounds the whole job, not each statement on its own. (So a
//     transaction that changes more than MaxMemory of pages fails: the
//     journal keeps their old contents.)
//   - Time: each unit of SQL (one string of the job: a Setup entry, the
//     predicted SQL, a check...) has Limits.Timeout of its thread's CPU
//     time and a wall-clock backstop, as one Engine.Query call has; the
//     job's context (and its deadline) interrupts it too.
//   - Rows and bytes: a result that is kept (a check's, or the last
//     statement's when there are no checks) is read under Limits.MaxRows
//     and MaxBytes, as Query reads one; the rows of other statements are
//     dropped unread.

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"avtgym/sqlexec"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// copyStatements are the first keywords of the statements a job may run on its
// copy (value ""), and a few it may not, with the reason (any other keyword is
// refused too).
var copyStatements = map[string]string{
	"SELECT": "", "VALUES": "", "WITH": "", "INSERT": "", "REPLACE": "", "UPDATE": "", "DELETE": "",
	"CREATE": "", "DROP": "", "ALTER": "", "BEGIN": "", "COMMIT": "", "END": "", "ROLLBACK": "",
	"SAVEPOINT": "", "RELEASE": "", "ANALYZE": "", "REINDEX": "", "PRAGMA": "",
	"VACUUM":  "VACUUM is not allowed (it rewrites the database, and VACUUM INTO writes a new file)",
	"ATTACH":  "ATTACH is not allowed: a job may use only its own copy of the task's database",
	"DETACH":  "DETACH is not allowed",
	"EXPLAIN": "EXPLAIN is not allowed in a job that changes the database",
}

// copyPragmas are the pragmas a job may run with or without an argument. Each
// changes only how this connection treats its own copy, or a header field of the
// copy, never files, sizes, memory or process-wide settings:
//   - foreign_keys, defer_foreign_keys: whether (and when) foreign keys are
//     enforced;
//   - recursive_triggers: how triggers fire;
//   - user_version, application_id: integers in the copy's header;
//   - integrity_check, quick_check, foreign_key_check: reading only.
//
// The read-only pragmas the query engine allows (queryPragmas without an
// argument, objectPragmas) are allowed too. Denied, among others: writable_schema
// and schema_version (they corrupt the schema), journal_mode, synchronous,
// locking_mode, mmap_size, cache_size, cache_spill, temp_store,
// temp_store_directory, data_store_directory, max_page_count, page_size,
// auto_vacuum, incremental_vacuum, soft_heap_limit, hard_heap_limit, threads,
// shrink_memory, busy_timeout, query_only, ignore_check_constraints,
// reverse_unordered_selects, legacy_alter_table, trusted_schema, optimize.
var copyPragmas = map[string]bool{
	"foreign_keys": true, "defer_foreign_keys": true, "recursive_triggers": true,
	"user_version": true, "application_id": true,
	"integrity_check": true, "quick_check": true, "foreign_key_check": true,
}

// copyDeniedFunctions are functions a job may not call.
var copyDeniedFunctions = map[string]bool{"load_extension": true, "fts3_tokenizer": true}

// copyAuth is the authorizer of a private copy; it records its denials as
// authState does.
type copyAuth struct{ *authState }

// authorize allows reading and changing the copy and denies what could reach
// outside it.
func (a copyAuth) authorize(op int, arg1, arg2, dbName string) int {
	switch op {
	case opSelect, opRead, opRecursive, opTransaction, opSavepoint, opAnalyze, opReindex,
		opCreateIndex, opCreateTable, opCreateTempIndex, opCreateTempTable, opCreateTempTrig,
		opCreateTempView, opCreateTrigger, opCreateView,
		opDropIndex, opDropTable, opDropTempIndex, opDropTempTable, opDropTempTrigger,
		opDropTempView, opDropTrigger, opDropView, opAlterTable:
		return authOK
	case opInsert, opUpdate, opDelete:
		if strings.EqualFold(arg1, "sqlite_dbpage") {
			return a.deny("%s on sqlite_dbpage is not allowed: pages are written only through SQL", opNames[op])
		}
		return authOK
	case opFunction:
		if name := strings.ToLower(arg2); copyDeniedFunctions[name] {
			return a.deny("the function %s() is not allowed", name)
		}
		return authOK
	case opPragma:
		name := strings.ToLower(arg1)
		if copyPragmas[name] || objectPragmas[name] || (arg2 == "" && queryPragmas[name]) {
			return authOK
		}
		return a.deny("PRAGMA %s is not allowed here (allowed: foreign_keys, defer_foreign_keys, recursive_triggers, "+
			"user_version, application_id, integrity checks and read-only pragmas)", name)
	case opAttach:
		return a.deny("ATTACH is not allowed: a job may use only its own copy of the task's database")
	case opDetach:
		return a.deny("DETACH is not allowed")
	case opCreateVtable, opDropVtable:
		return a.deny("%s is not allowed: virtual tables are not supported in jobs that change the database", opNames[op])
	}
	name, ok := opNames[op]
	if !ok {
		name = fmt.Sprintf("action %d", op)
	}
	return a.deny("%s is not allowed", name)
}

// pristine is the image of the pristine database that copies are made from.
type pristine struct {
	// size is the image's size in bytes.
	size int64
	// room is how large a copy may grow: the image plus the growth allowed.
	room int64
	// cow, where not nil, holds the image in a memory file that copies map
	// copy-on-write (Linux; see image_linux.go).
	cow *cowFile
	// data is the image (sqlite3_serialize's bytes) when cow is nil: each
	// copy duplicates it into memory SQLite allocates (and may grow up to
	// room).
	data []byte
}

// dbCopy is one private copy: a connection of its own on an in-memory image of
// the pristine database. It serves one job, on one goroutine, and is closed
// when the job ends.
type dbCopy struct {
	c *sqlite3.SQLiteConn
	engineConn
	// base is the memory the connection held as a fresh copy; the job's
	// memory cap counts from it.
	base int64
	// mapping is the copy's copy-on-write mapping of the image, unmapped
	// when the copy closes (nil when the copy duplicates the image).
	mapping []byte
	// keywords is the statement allow-list (copyStatements; nil only in the
	// tests that show the other defences hold on their own).
	keywords map[string]string

	// mu guards closed, so that a cancellation arriving as the job ends
	// never touches a closed connection.
	mu     sync.Mutex
	closed bool
}

// openCopy opens a private copy of img that may grow to img.room bytes.
func openCopy(img *pristine) (*dbCopy, error) {
	if accountingErr != nil {
		return nil, accountingErr
	}
	dc, err := (&sqlite3.SQLiteDriver{}).Open(":memory:")
	if err != nil {
		return nil, err
	}
	c := dc.(*sqlite3.SQLiteConn)
	fail := func(err error) (*dbCopy, error) {
		c.Close()
		return nil, err
	}
	cc, err := newCConn(c)
	if err != nil {
		return fail(err)
	}
	maxBytes := img.room
	cp := &dbCopy{c: c, engineConn: engineConn{auth: &authState{}, cc: cc, sizeLimit: maxBytes}, keywords: copyStatements}
	var rc int
	if img.cow != nil {
		if cp.mapping, err = img.cow.mapCopy(); err != nil {
			cp.Close()
			return nil, fmt.Errorf("sqlite: mapping a private copy of the database failed: %w", err)
		}
		rc = cc.deserializeFixed(cp.mapping, img.size, maxBytes)
	} else {
		rc = cc.deserialize(img.data, maxBytes)
	}
	if rc != rcOK {
		cp.Close()
		return nil, fmt.Errorf("sqlite: making a private copy of the database failed (code %d): %s", rc, cc.errmsg())
	}
	if rc := cc.harden(); rc != rcOK {
		cp.Close()
		return nil, fmt.Errorf("sqlite: hardening the private copy failed (code %d)", rc)
	}
	cc.setLimit(limitAttached, 0)
	cc.setLimit(limitColumn, maxColumns)
	cc.setLimit(limitExprDepth, maxExprDepth)
	cc.setLimit(limitTrigger, maxTriggerDepth)
	// The temporary database (CREATE TEMP TABLE) lives in a file of
	// SQLite's temporary directory, deleted when the copy closes; it may
	// grow as far as the copy.
	pageSize, err := buildPragmaInt(c, "PRAGMA temp.page_size")
	if err != nil || pageSize <= 0 {
		cp.Close()
		return nil, fmt.Errorf("sqlite: reading the private copy's page size failed: %v", err)
	}
	if _, err := c.Exec(fmt.Sprintf("PRAGMA temp.max_page_count = %d", max(maxBytes/pageSize, 1)), nil); err != nil {
		cp.Close()
		return nil, fmt.Errorf("sqlite: setting the private copy's limits failed: %w", err)
	}
	c.RegisterAuthorizer(copyAuth{cp.auth}.authorize)
	cp.base = cc.memUsed()
	return cp, nil
}

// Close closes the copy and frees it, image included.
func (cp *dbCopy) Close() error {
	cp.mu.Lock()
	cp.closed = true
	cp.mu.Unlock()
	err := cp.c.Close()
	cp.cc.free()
	if cp.mapping != nil {
		if uerr := unmapCopy(cp.mapping); uerr != nil && err == nil {
			err = uerr
		}
		cp.mapping = nil
	}
	return err
}

func (cp *dbCopy) cancel() {
	cp.mu.Lock()
	if !cp.closed {
		cp.cc.cancel()
	}
	cp.mu.Unlock()
}

// unitOptions say how exec runs one unit of SQL.
type unitOptions struct {
	// keep: read the last statement's rows under the caps and return them.
	keep bool
	// readOnly: every statement must be read-only (checks).
	readOnly bool
	// empty: text without a statement is no error (nil result).
	empty bool
}

// dropTemp drops the temporary tables, views and triggers of the copy's
// session before the checks run: SQLite resolves an unqualified name in
// temp before main, so a temporary view or table named like a checked one
// would answer the check, and a temporary trigger on a main table would
// fire during it. The checks read the database, not the session (the
// trust model: sqlexec/postgres's isolation.go). Triggers and views go
// first, then tables (their indexes and triggers with them).
func (cp *dbCopy) dropTemp(ctx context.Context, lim sqlexec.Limits) error {
	r, err := cp.exec(ctx, `SELECT type, name FROM temp.sqlite_schema
		WHERE type IN ('table', 'view', 'trigger') AND name NOT LIKE 'sqlite\_%' ESCAPE '\'
		ORDER BY type = 'table', name`, lim, unitOptions{keep: true, readOnly: true})
	if err != nil {
		return err
	}
	for _, row := range r.Rows {
		kind, _ := row[0].(string)
		name, _ := row[1].(string)
		drop := fmt.Sprintf("DROP %s IF EXISTS temp.\"%s\"", strings.ToUpper(kind), strings.ReplaceAll(name, `"`, `""`))
		if _, err := cp.exec(ctx, drop, lim, unitOptions{empty: true}); err != nil {
			return err
		}
	}
	return nil
}

// exec runs text (one or more statements) on the copy: each statement is
// prepared, checked and run to its end before the next is prepared, since an
// earlier one may create what a later one uses. With o.keep the last
// statement's rows are returned (an empty result for a statement without
// rows). Failures are *sqlexec.Error values classified as Query classifies
// them, and a copy grown past its size limit is KindTooMuchMemory.
func (cp *dbCopy) exec(ctx context.Context, text string, lim sqlexec.Limits, o unitOptions) (*sqlexec.Result, error) {
	if strings.IndexByte(text, 0) >= 0 {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "the SQL contains a NUL byte")
	}
	if err := ctx.Err(); err != nil {
		return nil, cp.canceled(ctx)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cc := cp.cc
	length := int64(1_000_000_000)
	if lim.MaxBytes > 0 {
		length = min(max(lim.MaxBytes, minLengthLimit), length)
	}
	cc.setLimit(limitLength, int(length))
	var memCap int64
	if lim.MaxMemory > 0 {
		memCap = max(cp.base+lim.MaxMemory-cc.memUsed(), 1)
	}
	var wall time.Duration
	if lim.Timeout > 0 {
		wall = wallFactor * lim.Timeout
	}
	cc.begin(memCap, lim.Timeout, wall)
	defer cc.end()
	stop := context.AfterFunc(ctx, cp.cancel)
	defer stop()
	if ctx.Err() != nil { // ended before begin could see it
		cp.cancel()
	}

	n := len(sqlexec.SplitStatements(text)) // for messages only
	var res *sqlexec.Result
	for i, rest := 0, text; ; i++ { // i numbers the statements that are not empty
		cp.auth.reset()
		s, tail, rc := cc.prepare(rest)
		if rc != rcOK {
			return nil, cp.prepareError(ctx, rc, rest, i, n)
		}
		if s == nil { // an empty statement (";") or only comments
			if tail <= 0 || onlyTrivia(rest[tail:]) {
				break
			}
			rest = rest[tail:]
			i--
			continue
		}
		stmt, after := rest[:tail], rest[tail:]
		last := onlyTrivia(after)
		r, err := cp.run(ctx, s, stmt, i, n, lim, o.keep && last, o.readOnly)
		cc.finalize(s)
		if err != nil {
			return nil, err
		}
		res = r
		if last {
			break
		}
		rest = after
	}
	if res == nil && !o.empty {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "no SQL statement to run (only comments)")
	}
	return res, nil
}

// run checks one prepared statement and runs it to its end; with keep its
// rows are read under the caps and returned, else they are dropped unread.
func (cp *dbCopy) run(ctx context.Context, s cstmt, text string, i, n int, lim sqlexec.Limits, keep, readOnly bool) (*sqlexec.Result, error) {
	if cp.keywords != nil {
		kw := stmtKeyword(text)
		if why, ok := cp.keywords[kw]; !ok || why != "" {
			if why == "" {
				why = fmt.Sprintf("%s statements are not allowed in a job (%s)", kw, firstWords(text[skipTrivia(text):], 3))
			}
			return nil, sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: %s", stmtLabel(i, n), why)
		}
	}
	if readOnly && !stmtReadonly(s) {
		return nil, sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: it is not read-only (%s), and a check may only read",
			stmtLabel(i, n), firstWords(text[skipTrivia(text):], 3))
	}
	if keep {
		return cp.collect(ctx, s, lim)
	}
	for {
		switch rc, _ := cp.cc.step(s, false, nil, 0); rc {
		case rcDone:
			return &sqlexec.Result{Columns: columnNames(s), Rows: [][]any{}}, nil
		case rcRow:
		default:
			return nil, cp.runError(ctx, rc, lim)
		}
	}
}

// onlyTrivia reports whether s holds nothing but white space, comments and
// semicolons: no statement follows.
func onlyTrivia(s string) bool { return skipTrivia(s) == len(s) }

// stmtKeyword returns the first keyword of a statement as SQLite compiled it:
// the text from where the last one ended, which may begin with white space,
// comments and the semicolons of empty statements.
func stmtKeyword(s string) string { return buildFirstKeyword(s[skipTrivia(s):]) }

// skipTrivia returns the offset of the first byte of s that is not white
// space, a comment or a semicolon (len(s) when there is none).
func skipTrivia(s string) int {
	i := 0
	for i < len(s) {
		switch c := s[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == ';':
			i++
		case strings.HasPrefix(s[i:], "--"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return len(s)
			}
			i += j + 1
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return len(s) // an unterminated comment runs to the end
			}
			i += 2 + j + 2
		default:
			return i
		}
	}
	return i
}

package postgres

// This file splits SQL into statements with PostgreSQL's own parser (libpg_query, through
// pg_query_go) and decides which statements a query, or a load, may run.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"avtgym/internal/cache"
	"avtgym/sqlexec"
	"avtgym/sqlexec/pgparse"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	pgparser "github.com/pganalyze/pg_query_go/v6/parser"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// statement is one parsed statement of a text.
type statement struct {
	text string // the statement's text, without its terminating semicolon
	off  int    // its byte offset in the whole text
	node *pg_query.Node
}

// parseStatements splits text into statements with the parser. A parse error
// is returned as the parser's *pgparser.Error; a text that nests too deeply
// to be parsed safely is a *pgparse.DepthError and never reaches the parser.
func parseStatements(text string) ([]statement, error) {
	tree, err := pgparse.Parse(text)
	if err != nil {
		return nil, err
	}
	out := make([]statement, 0, len(tree.Stmts))
	for _, rs := range tree.Stmts {
		off := int(rs.StmtLocation)
		end := len(text)
		if rs.StmtLen > 0 {
			end = off + int(rs.StmtLen)
		}
		if off < 0 || off > end || end > len(text) {
			return nil, fmt.Errorf("the parser returned a statement outside the text (%d..%d of %d bytes)", off, end, len(text))
		}
		out = append(out, statement{text: text[off:end], off: off, node: rs.Stmt})
	}
	return out, nil
}

// hasParam reports whether text has a $n parameter outside quotes and comments.
func hasParam(text string) (bool, error) {
	if !strings.Contains(text, "$") {
		return false, nil
	}
	res, err := pg_query.Scan(text)
	if err != nil {
		return false, err
	}
	for _, t := range res.Tokens {
		if t.Token == pg_query.Token_PARAM {
			return true, nil
		}
	}
	return false, nil
}

// syntaxError turns a parser error into KindSyntax.
func syntaxError(err error) error {
	var de *pgparse.DepthError
	if errors.As(err, &de) {
		return sqlexec.Errorf(sqlexec.KindSyntax, err, "the SQL was not run: %v", de)
	}
	var pe *pgparser.Error
	if errors.As(err, &pe) {
		if pe.Cursorpos > 0 {
			return sqlexec.Errorf(sqlexec.KindSyntax, err, "the SQL did not parse: %s (at character %d)", pe.Message, pe.Cursorpos)
		}
		return sqlexec.Errorf(sqlexec.KindSyntax, err, "the SQL did not parse: %s", pe.Message)
	}
	return sqlexec.Errorf(sqlexec.KindSyntax, err, "the SQL did not parse: %v", err)
}

// checkQuery parses a submitted query and checks every statement before any
// runs; it returns the statements' texts. Outcomes are kept by text.
func (c *stmtChecks) checkQuery(text string, readOnly bool) ([]string, error) {
	if !readOnly {
		return checkQueryUncached(text, readOnly)
	}
	return c.query.get(text, func() ([]string, error) { return checkQueryUncached(text, readOnly) })
}

// checkQueryUncached is checkQuery without the cache.
func checkQueryUncached(text string, readOnly bool) ([]string, error) {
	if strings.TrimSpace(text) == "" {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "no SQL statement to run")
	}
	if strings.IndexByte(text, 0) >= 0 {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "the SQL contains a NUL byte")
	}
	if !utf8.ValidString(text) {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "the SQL is not valid UTF-8")
	}
	if readOnly && !strings.Contains(text, "$") && !mayCallDenied(text) {
		if texts, ok := quickCheck(text); ok {
			return texts, nil
		}
	}
	stmts, err := parseStatements(text)
	if err != nil {
		return nil, syntaxError(err)
	}
	if len(stmts) == 0 {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "no SQL statement to run (only comments)")
	}
	texts := make([]string, len(stmts))
	for i, st := range stmts {
		if why := queryDenial(st.node, readOnly); why != "" {
			return nil, sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: %s", stmtLabel(i, len(stmts), st.text), why)
		}
		if why := deniedUse(st.node); why != "" {
			return nil, sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: %s", stmtLabel(i, len(stmts), st.text), why)
		}
		p, err := hasParam(st.text)
		if err != nil {
			return nil, syntaxError(err)
		}
		if p {
			return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "%s has a parameter placeholder ($1, $2, ...); submitted SQL takes no parameters",
				stmtLabel(i, len(stmts), st.text))
		}
		texts[i] = st.text
	}
	return texts, nil
}

// quickCheck accepts, without building a parse tree (which costs ten times
// the parse), the common case of queries that only read: every statement is
// a plain query by the parser (not a utility statement) and begins with
// SELECT, WITH, VALUES or TABLE (after comments and parentheses). Such a
// statement may still write through a data-modifying WITH, SELECT INTO or
// FOR UPDATE: the read-only transaction refuses those (KindDenied). Anything
// else goes to the full check, which reports it precisely.
func quickCheck(text string) ([]string, bool) {
	utility, err := pg_query.IsUtilityStmt(text)
	if err != nil || len(utility) == 0 {
		return nil, false
	}
	for _, u := range utility {
		if u {
			return nil, false
		}
	}
	texts, err := pg_query.SplitWithParser(text, false)
	if err != nil || len(texts) != len(utility) {
		return nil, false
	}
	for _, t := range texts {
		switch firstKeyword(t) {
		case "SELECT", "WITH", "VALUES", "TABLE":
		default:
			return nil, false
		}
	}
	return texts, true
}

// firstKeyword returns the first word of a statement, upper-cased, after
// comments, white space and opening parentheses.
func firstKeyword(s string) string {
	for {
		s = skipTrivia(s)
		if !strings.HasPrefix(s, "(") {
			break
		}
		s = s[1:]
	}
	i := 0
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || s[i] == '_') {
		i++
	}
	return strings.ToUpper(s[:i])
}

// stmtChecks keeps the outcomes of the statement checks (checkQuery on a
// read-only database, checkStateful, splitCorpus) by text, each in a
// bounded cache of its own (internal/cache), the least recently used first
// out: parsing costs more than the lookup, and a GRPO group's episodes
// submit the same texts again and again. A check is a pure function of the
// text, so its errors are kept too. A Server owns one, shared by its DBs and
// StatefulDBs.
type stmtChecks struct {
	query, stateful, corpus checkCache
}

// Bounds of each check cache: texts longer than maxCheckCached are checked
// every time; at most checkCacheLen outcomes and checkCacheBytes of text
// are kept.
const (
	maxCheckCached  = 16 << 10
	checkCacheBytes = 8 << 20
	checkCacheLen   = 4096
)

func newStmtChecks() *stmtChecks {
	return &stmtChecks{query: newCheckCache(), stateful: newCheckCache(), corpus: newCheckCache()}
}

// checkCache keeps one check's outcomes by text.
type checkCache struct {
	c *cache.Cache[string, []string]
}

func newCheckCache() checkCache {
	return checkCache{cache.New(cache.Options[string, []string]{
		MaxEntries: checkCacheLen,
		MaxBytes:   checkCacheBytes,
		Size:       func(text string, _ []string, _ error) int64 { return int64(len(text)) },
		KeepError:  func(error) bool { return true },
	})}
}

// get returns check's outcome for text, kept unless text is too long.
func (c checkCache) get(text string, check func() ([]string, error)) ([]string, error) {
	if len(text) > maxCheckCached {
		return check()
	}
	return c.c.Get(context.Background(), text, func(context.Context) ([]string, error) { return check() })
}

// deniedFunctions are the functions a query may not call, whatever the
// catalog says: the database's catalog revokes them from PUBLIC too (see
// EnsureDatabase), but only a superuser administrator can; this check holds
// without one.
var deniedFunctions = map[string]string{
	"set_config":                   "set_config() changes settings, which queries may not do",
	"pg_terminate_backend":         "signalling other sessions is not allowed",
	"pg_cancel_backend":            "signalling other sessions is not allowed",
	"pg_advisory_lock":             "session-level advisory locks are not allowed (they outlive the query)",
	"pg_advisory_lock_shared":      "session-level advisory locks are not allowed (they outlive the query)",
	"pg_try_advisory_lock":         "session-level advisory locks are not allowed (they outlive the query)",
	"pg_try_advisory_lock_shared":  "session-level advisory locks are not allowed (they outlive the query)",
	"pg_stat_get_activity":         "other sessions' activity may not be read",
	"pg_stat_get_backend_activity": "other sessions' activity may not be read",
	"pg_logical_emit_message":      "writing WAL messages is not allowed",
	"lo_creat":                     "large objects may not be written", "lo_create": "large objects may not be written",
	"lo_from_bytea": "large objects may not be written", "lo_put": "large objects may not be written",
	"lo_open": "large objects may not be written", "lowrite": "large objects may not be written",
	"lo_truncate": "large objects may not be written", "lo_truncate64": "large objects may not be written",
	"lo_unlink": "large objects may not be written", "lo_import": "large objects may not be written",
	"lo_export": "large objects may not be written",
}

// deniedRelations are the relations a query may not read.
var deniedRelations = map[string]string{
	"pg_stat_activity": "other sessions' activity may not be read",
	// Every backend's locks: which tables a reference run holds.
	"pg_locks": "other sessions' locks may not be read",
}

// whyStatistics is why the cumulative statistics may not be read: their
// scan and tuple counts show which tables and indexes the reference runs
// (on the same database, as the same role) read (issue 25).
const whyStatistics = "the cumulative statistics views and functions (pg_stat_*, pg_statio_*, pg_stat_get_*) may not be read: they count what other queries, the references' among them, read"

// relationDenial returns why a query may not read the relation name, or "".
func relationDenial(name string) string {
	if why := deniedRelations[name]; why != "" {
		return why
	}
	if strings.HasPrefix(name, "pg_stat_") || strings.HasPrefix(name, "pg_statio_") {
		return whyStatistics
	}
	return ""
}

// functionCallDenial returns why a query may not call the function name, or "".
func functionCallDenial(name string) string {
	if why := deniedFunctions[name]; why != "" {
		return why
	}
	if strings.HasPrefix(name, "pg_stat_get_") {
		return whyStatistics
	}
	return ""
}

// mayCallDenied reports whether text may name a denied function or relation
// (a cheap over-approximation that sends the text to the full check; U& is
// an identifier with Unicode escapes, which could spell any name).
func mayCallDenied(text string) bool {
	l := strings.ToLower(text)
	for _, w := range []string{"set_config", "_backend", "advisory", "pg_stat", "pg_locks", "emit_message", "lo_", "lowrite", "u&"} {
		if strings.Contains(l, w) {
			return true
		}
	}
	return false
}

// deniedUse returns why a statement may not run because of a function it
// calls or a relation it reads, or "".
func deniedUse(n *pg_query.Node) string {
	var why string
	pgparse.Walk(n.ProtoReflect(), func(m protoreflect.Message) bool {
		switch x := m.Interface().(type) {
		case *pg_query.FuncCall:
			if k := len(x.Funcname); k > 0 {
				if s := x.Funcname[k-1].GetString_(); s != nil {
					why = functionCallDenial(s.Sval)
				}
			}
		case *pg_query.RangeVar:
			why = relationDenial(x.Relname)
		}
		return why == ""
	})
	return why
}

// Reasons for denials.
const (
	whyTransaction = "transaction control (BEGIN, COMMIT, ROLLBACK, SAVEPOINT, PREPARE TRANSACTION, ...) is not allowed: every query runs in a transaction the verifier opens and rolls back"
	whySession     = "session settings (SET, RESET, SET ROLE, SET SESSION AUTHORIZATION, DISCARD) may not be changed"
	whyNotify      = "LISTEN, UNLISTEN and NOTIFY are not allowed"
	whyLoad        = "LOAD (loading a shared library) is not allowed"
	whyCopy        = "COPY is not allowed (it reads or writes files, programs or the client's streams)"
	whyCode        = "DO blocks and CALL run procedural code and are not allowed"
	whyMaintenance = "maintenance commands (CHECKPOINT, VACUUM, ANALYZE, CLUSTER, REINDEX, REFRESH MATERIALIZED VIEW) are not allowed"
	whySystem      = "ALTER SYSTEM is not allowed"
	whyExtension   = "extensions may not be created or changed"
	whyCursor      = "prepared statements and cursors (PREPARE, EXECUTE, DEALLOCATE, DECLARE, FETCH, CLOSE) are not allowed"
	whyLock        = "LOCK is not allowed (an explicit table lock would block other queries)"
	whyCluster     = "roles, databases, tablespaces, subscriptions and other server-wide objects may not be changed"
	whyReadOnly    = "the database is read-only: only statements that read (SELECT, WITH, VALUES, TABLE, EXPLAIN, SHOW) are allowed"
	whySelectInto  = "SELECT ... INTO creates a table, and the database is read-only"
	whyRowLock     = "SELECT ... FOR UPDATE/SHARE locks rows, and the database is read-only"
)

// sessionDenial returns why a statement may never run in a query, in any
// mode, or "" when it may. These are the statements a read-only transaction
// would not stop (or that would end it): transaction control, session state,
// files and programs, procedural code, maintenance, server-wide objects.
func sessionDenial(n *pg_query.Node) string {
	switch n.Node.(type) {
	case *pg_query.Node_TransactionStmt:
		return whyTransaction
	case *pg_query.Node_VariableSetStmt, *pg_query.Node_DiscardStmt, *pg_query.Node_ConstraintsSetStmt:
		return whySession
	case *pg_query.Node_ListenStmt, *pg_query.Node_UnlistenStmt, *pg_query.Node_NotifyStmt:
		return whyNotify
	case *pg_query.Node_LoadStmt:
		return whyLoad
	case *pg_query.Node_CopyStmt:
		return whyCopy
	case *pg_query.Node_DoStmt, *pg_query.Node_CallStmt:
		return whyCode
	case *pg_query.Node_CheckPointStmt, *pg_query.Node_VacuumStmt, *pg_query.Node_ClusterStmt,
		*pg_query.Node_ReindexStmt, *pg_query.Node_RefreshMatViewStmt:
		return whyMaintenance
	case *pg_query.Node_AlterSystemStmt:
		return whySystem
	case *pg_query.Node_CreateExtensionStmt, *pg_query.Node_AlterExtensionStmt, *pg_query.Node_AlterExtensionContentsStmt:
		return whyExtension
	case *pg_query.Node_PrepareStmt, *pg_query.Node_ExecuteStmt, *pg_query.Node_DeallocateStmt,
		*pg_query.Node_DeclareCursorStmt, *pg_query.Node_FetchStmt, *pg_query.Node_ClosePortalStmt:
		return whyCursor
	case *pg_query.Node_LockStmt:
		return whyLock
	case *pg_query.Node_CreateRoleStmt, *pg_query.Node_AlterRoleStmt, *pg_query.Node_AlterRoleSetStmt,
		*pg_query.Node_DropRoleStmt, *pg_query.Node_GrantRoleStmt, *pg_query.Node_CreatedbStmt,
		*pg_query.Node_AlterDatabaseStmt, *pg_query.Node_AlterDatabaseSetStmt, *pg_query.Node_AlterDatabaseRefreshCollStmt,
		*pg_query.Node_DropdbStmt, *pg_query.Node_CreateTableSpaceStmt, *pg_query.Node_DropTableSpaceStmt,
		*pg_query.Node_AlterTableSpaceOptionsStmt, *pg_query.Node_AlterTableMoveAllStmt,
		*pg_query.Node_CreateSubscriptionStmt, *pg_query.Node_AlterSubscriptionStmt, *pg_query.Node_DropSubscriptionStmt,
		*pg_query.Node_CreatePublicationStmt, *pg_query.Node_AlterPublicationStmt,
		*pg_query.Node_CreateFdwStmt, *pg_query.Node_AlterFdwStmt, *pg_query.Node_CreateForeignServerStmt,
		*pg_query.Node_AlterForeignServerStmt, *pg_query.Node_CreateUserMappingStmt, *pg_query.Node_AlterUserMappingStmt,
		*pg_query.Node_DropUserMappingStmt, *pg_query.Node_ImportForeignSchemaStmt, *pg_query.Node_CreateForeignTableStmt,
		*pg_query.Node_CreateEventTrigStmt, *pg_query.Node_AlterEventTrigStmt, *pg_query.Node_CreatePlangStmt,
		*pg_query.Node_DropOwnedStmt, *pg_query.Node_ReassignOwnedStmt, *pg_query.Node_AlterDefaultPrivilegesStmt,
		*pg_query.Node_SecLabelStmt, *pg_query.Node_CreateAmStmt:
		return whyCluster
	}
	return ""
}

// queryDenial returns why a statement may not run in a query, or "".
func queryDenial(n *pg_query.Node, readOnly bool) string {
	if why := sessionDenial(n); why != "" {
		return why
	}
	if !readOnly {
		return ""
	}
	switch x := n.Node.(type) {
	case *pg_query.Node_SelectStmt:
		if x.SelectStmt.IntoClause != nil {
			return whySelectInto
		}
		if len(x.SelectStmt.LockingClause) > 0 {
			return whyRowLock
		}
		return ""
	case *pg_query.Node_VariableShowStmt:
		return ""
	case *pg_query.Node_ExplainStmt:
		if x.ExplainStmt.Query == nil {
			return whyReadOnly
		}
		return queryDenial(x.ExplainStmt.Query, readOnly)
	}
	return whyReadOnly
}

// stmtLabel names statement i of n for messages: "the statement (SELECT ...)"
// or "statement 2 of 3 (SET ...)".
func stmtLabel(i, n int, text string) string {
	if n <= 1 {
		return fmt.Sprintf("the statement (%s)", firstWords(text, 4))
	}
	return fmt.Sprintf("statement %d of %d (%s)", i+1, n, firstWords(text, 4))
}

// firstWords returns the start of a statement for messages, after its leading
// comments: its first n words, at most 60 characters.
func firstWords(text string, n int) string {
	text = skipTrivia(text)
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

// skipTrivia drops leading white space and comments.
func skipTrivia(s string) string {
	for {
		s = strings.TrimLeft(s, " \t\r\n\f\v")
		switch {
		case strings.HasPrefix(s, "--"):
			i := strings.IndexByte(s, '\n')
			if i < 0 {
				return ""
			}
			s = s[i+1:]
		case strings.HasPrefix(s, "/*"):
			// Nested comments, as PostgreSQL reads them.
			depth, i := 0, 0
			for i < len(s) {
				if strings.HasPrefix(s[i:], "/*") {
					depth++
					i += 2
				} else if strings.HasPrefix(s[i:], "*/") {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
			if depth != 0 {
				return ""
			}
			s = s[i:]
		default:
			return s
		}
	}
}

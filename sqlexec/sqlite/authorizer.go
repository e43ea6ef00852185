package sqlite

import (
	"fmt"
	"strings"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Authorizer action codes (https://www.sqlite.org/c3ref/c_alter_table.html).
const (
	opCreateIndex      = 1
	opCreateTable      = 2
	opCreateTempIndex  = 3
	opCreateTempTable  = 4
	opCreateTempTrig   = 5
	opCreateTempView   = 6
	opCreateTrigger    = 7
	opCreateView       = 8
	opDelete           = 9
	opDropIndex        = 10
	opDropTable        = 11
	opDropTempIndex    = 12
	opDropTempTable    = 13
	opDropTempTrigger  = 14
	opDropTempView     = 15
	opDropTrigger      = 16
	opDropView         = 17
	opInsert           = 18
	opPragma           = 19
	opRead             = 20
	opSelect           = 21
	opTransaction      = 22
	opUpdate           = 23
	opAttach           = 24
	opDetach           = 25
	opAlterTable       = 26
	opReindex          = 27
	opAnalyze          = 28
	opCreateVtable     = 29
	opDropVtable       = 30
	opFunction         = 31
	opSavepoint        = 32
	opRecursive        = 33
	authOK             = sqlite3.SQLITE_OK
	authDeny           = sqlite3.SQLITE_DENY
	maxDenialMsgLength = 200
)

var opNames = map[int]string{
	0: "COPY", opCreateIndex: "CREATE INDEX", opCreateTable: "CREATE TABLE",
	opCreateTempIndex: "CREATE TEMP INDEX", opCreateTempTable: "CREATE TEMP TABLE",
	opCreateTempTrig: "CREATE TEMP TRIGGER", opCreateTempView: "CREATE TEMP VIEW",
	opCreateTrigger: "CREATE TRIGGER", opCreateView: "CREATE VIEW", opDelete: "DELETE",
	opDropIndex: "DROP INDEX", opDropTable: "DROP TABLE", opDropTempIndex: "DROP TEMP INDEX",
	opDropTempTable: "DROP TEMP TABLE", opDropTempTrigger: "DROP TEMP TRIGGER",
	opDropTempView: "DROP TEMP VIEW", opDropTrigger: "DROP TRIGGER", opDropView: "DROP VIEW",
	opInsert: "INSERT", opPragma: "PRAGMA", opRead: "READ", opSelect: "SELECT",
	opTransaction: "transaction control", opUpdate: "UPDATE", opAttach: "ATTACH",
	opDetach: "DETACH", opAlterTable: "ALTER TABLE", opReindex: "REINDEX", opAnalyze: "ANALYZE",
	opCreateVtable: "CREATE VIRTUAL TABLE", opDropVtable: "DROP VIRTUAL TABLE",
	opFunction: "function", opSavepoint: "SAVEPOINT", opRecursive: "recursive CTE",
}

// queryPragmas are read-only pragmas allowed without an argument. (The authorizer
// cannot tell "PRAGMA x" from "PRAGMA x=”"; a write through an empty argument is still
// stopped by the read-only check and by mode=ro.)
var queryPragmas = map[string]bool{
	"application_id": true, "collation_list": true, "compile_options": true,
	"data_version": true, "database_list": true, "encoding": true, "freelist_count": true,
	"function_list": true, "module_list": true, "page_count": true, "pragma_list": true,
	"schema_version": true, "table_list": true, "user_version": true,
}

// objectPragmas are read-only pragmas whose argument names a table or an index.
var objectPragmas = map[string]bool{
	"table_info": true, "table_xinfo": true, "table_list": true, "index_list": true,
	"index_info": true, "index_xinfo": true, "foreign_key_list": true, "foreign_key_check": true,
}

// deniedFunctions are functions a query may not call.
var deniedFunctions = map[string]bool{"load_extension": true}

// authState is one connection's authorizer and its record of the last denial.
// A connection is used by one goroutine at a time, so no lock is needed.
type authState struct {
	denied string // why the last prepare was denied ("" if it was not)
	schema bool   // the denial was a write to the schema table (a schema change)
}

func (a *authState) reset() { a.denied, a.schema = "", false }

// isSchemaTable reports whether name is SQLite's schema table, which CREATE, DROP,
// ALTER and ANALYZE write first.
func isSchemaTable(name string) bool {
	switch strings.ToLower(name) {
	case "sqlite_master", "sqlite_schema", "sqlite_temp_master", "sqlite_temp_schema":
		return true
	}
	return false
}

func (a *authState) deny(format string, args ...any) int {
	if a.denied == "" {
		msg := fmt.Sprintf(format, args...)
		if len(msg) > maxDenialMsgLength {
			msg = msg[:maxDenialMsgLength] + "..."
		}
		a.denied = msg
	}
	return authDeny
}

// authorize is the SQLite authorizer: it allows reading (SELECT, column reads, functions
// other than load_extension, recursive CTEs) and the allow-listed read-only pragmas, and
// denies everything else.
func (a *authState) authorize(op int, arg1, arg2, dbName string) int {
	switch op {
	case opSelect, opRead, opRecursive:
		return authOK
	case opFunction:
		if deniedFunctions[strings.ToLower(arg2)] {
			return a.deny("the function %s() is not allowed", strings.ToLower(arg2))
		}
		return authOK
	case opPragma:
		name := strings.ToLower(arg1)
		if objectPragmas[name] || (arg2 == "" && queryPragmas[name]) {
			return authOK
		}
		if arg2 != "" {
			return a.deny("PRAGMA %s with an argument (%s) is not allowed: only read-only pragmas may run", name, arg2)
		}
		return a.deny("PRAGMA %s is not allowed: only read-only pragmas may run", name)
	case opInsert, opUpdate, opDelete:
		if isSchemaTable(arg1) && a.denied == "" {
			a.schema = true
		}
		return a.deny("%s on table %q is not allowed: the database is read-only", opNames[op], arg1)
	case opAttach:
		return a.deny("ATTACH is not allowed: queries may read only the task's database")
	case opDetach:
		return a.deny("DETACH is not allowed")
	case opTransaction, opSavepoint:
		return a.deny("%s (%s) is not allowed: each query runs on its own", opNames[op], strings.ToUpper(arg1))
	}
	name, ok := opNames[op]
	if !ok {
		name = fmt.Sprintf("action %d", op)
	}
	if arg1 != "" {
		return a.deny("%s %q is not allowed: the database is read-only", name, arg1)
	}
	return a.deny("%s is not allowed: the database is read-only", name)
}

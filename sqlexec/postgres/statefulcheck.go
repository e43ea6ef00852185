package postgres

// This file decides which statements a stateful job may run (the policy's SQL of a
// Management task, which writes), and splits the corpus's own statements.

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"avtgym/sqlexec"
	"avtgym/sqlexec/pgparse"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Reasons for denials in stateful jobs, beyond those of queries (stmts.go).
const (
	whyConcurrently = "CONCURRENTLY (CREATE/DROP/REINDEX INDEX CONCURRENTLY, DETACH PARTITION CONCURRENTLY) runs outside a transaction, " +
		"and every job runs in a transaction the verifier opens and rolls back"
	whyStatefulMaintenance = "maintenance commands (VACUUM, ANALYZE, CLUSTER, REINDEX, CHECKPOINT) are not allowed: they run outside a " +
		"transaction or write planner statistics that a rollback does not undo"
	whyShared = "statements on databases, roles, tablespaces, large objects and other server-wide objects " +
		"(COMMENT ON DATABASE, GRANT ON DATABASE, ALTER DATABASE ... OWNER, ...) are not allowed"
	whyLanguage   = "only LANGUAGE sql and LANGUAGE plpgsql functions, procedures and DO blocks are allowed"
	whyFuncSet    = "a function's SET clause (CREATE FUNCTION ... SET, ALTER FUNCTION ... SET/RESET) changes session settings, which jobs may not do"
	whyDynamicSQL = "dynamic SQL in PL/pgSQL (EXECUTE, FOR ... IN EXECUTE, OPEN ... FOR EXECUTE, RETURN QUERY EXECUTE) is not allowed: " +
		"the statements it would run cannot be checked before they run"
	whyTooDeep = "functions, DO blocks and rules are nested too deeply to be checked"
)

// statefulDeniedFunctions are the functions a stateful job may not call,
// beyond deniedFunctions: NOTIFY by another name, and the functions that
// run a query given as text (which no check could see).
var statefulDeniedFunctions = map[string]string{
	"pg_notify":                           "pg_notify() sends notifications, like NOTIFY, which jobs may not do",
	"query_to_xml":                        "functions that run SQL given as text are not allowed (the SQL cannot be checked)",
	"query_to_xmlschema":                  "functions that run SQL given as text are not allowed (the SQL cannot be checked)",
	"query_to_xml_and_xmlschema":          "functions that run SQL given as text are not allowed (the SQL cannot be checked)",
	"ts_stat":                             "functions that run SQL given as text are not allowed (the SQL cannot be checked)",
	"ts_rewrite":                          "functions that run SQL given as text are not allowed (the SQL cannot be checked)",
	"pg_advisory_unlock_all":              "session-level advisory locks are not allowed",
	"pg_advisory_unlock":                  "session-level advisory locks are not allowed",
	"pg_advisory_unlock_shared":           "session-level advisory locks are not allowed",
	"dblink":                              "connections to other databases are not allowed",
	"dblink_exec":                         "connections to other databases are not allowed",
	"dblink_connect":                      "connections to other databases are not allowed",
	"pg_stat_reset":                       "statistics may not be reset",
	"pg_stat_reset_single_table_counters": "statistics may not be reset",
}

// maxCheckDepth bounds the nesting of bodies checked inside bodies (a DO
// block that creates a function whose body creates a rule, ...).
const maxCheckDepth = 8

// checkStateful parses the policy's SQL for a stateful job and checks every
// statement before any runs; it returns the statements' texts. Reads and
// writes are allowed (DML, DDL, functions in SQL and PL/pgSQL, DO, CALL,
// LOCK, SET CONSTRAINTS, REFRESH MATERIALIZED VIEW) inside the job's
// transaction; denied (KindDenied) is what would escape the transaction or
// reach past the private copy: transaction control, session settings (SET,
// RESET, DISCARD, set_config, a function's SET clause), COPY, LISTEN and
// NOTIFY, prepared statements and cursors, maintenance commands,
// CONCURRENTLY, ALTER SYSTEM, extensions, roles, databases and other
// server-wide objects, languages other than sql and plpgsql, dynamic SQL in
// PL/pgSQL, and the functions of deniedFunctions and statefulDeniedFunctions.
// Function and DO bodies are checked like top-level statements. Outcomes are
// kept by text.
func (c *stmtChecks) checkStateful(text string) ([]string, error) {
	return c.stateful.get(text, func() ([]string, error) { return checkStatefulUncached(text) })
}

func checkStatefulUncached(text string) ([]string, error) {
	if strings.TrimSpace(text) == "" {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "no SQL statement to run")
	}
	if strings.IndexByte(text, 0) >= 0 {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "the SQL contains a NUL byte")
	}
	if !utf8.ValidString(text) {
		return nil, sqlexec.Errorf(sqlexec.KindSyntax, nil, "the SQL is not valid UTF-8")
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
		why, err := statefulStmtDenial(st, 0)
		if err != nil {
			return nil, sqlexec.Errorf(sqlexec.KindSyntax, err, "%s did not parse: %v", stmtLabel(i, len(stmts), st.text), err)
		}
		if why != "" {
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

// statefulStmtDenial returns why a statement may not run in a stateful job,
// or ""; err is a body that does not parse.
func statefulStmtDenial(st statement, depth int) (string, error) {
	if depth > maxCheckDepth {
		return whyTooDeep, nil
	}
	if why, err := statefulDenial(st, depth); why != "" || err != nil {
		return why, err
	}
	return statefulUse(st.node), nil
}

// statefulUse returns why a statement may not run because of a function it
// calls or a relation it reads, or "".
func statefulUse(n *pg_query.Node) string {
	if why := deniedUse(n); why != "" {
		return why
	}
	var why string
	pgparse.Walk(n.ProtoReflect(), func(m protoreflect.Message) bool {
		if x, ok := m.Interface().(*pg_query.FuncCall); ok {
			if k := len(x.Funcname); k > 0 {
				if s := x.Funcname[k-1].GetString_(); s != nil {
					why = statefulDeniedFunctions[s.Sval]
				}
			}
		}
		return why == ""
	})
	return why
}

// statefulDenial returns why one statement may not run in a stateful job, or
// "", looking into the bodies of functions, DO blocks, rules, EXPLAIN and
// CREATE SCHEMA. Three rules come before the session rules of queries
// (sessionDenial): what bodies run (bodyDenial), what a job may do that a
// query may not (jobRule), and what would reach past the transaction or
// the private copy (escapeDenial).
func statefulDenial(st statement, depth int) (string, error) {
	if decided, why, err := bodyDenial(st, depth); decided {
		return why, err
	}
	if decided, why := jobRule(st.node); decided {
		return why, nil
	}
	if why := escapeDenial(st.node); why != "" {
		return why, nil
	}
	return sessionDenial(st.node), nil
}

// bodyDenial checks the statements a statement runs or defines: a DO
// block's and a function's body (which decide), and EXPLAIN's statement, a
// rule's actions and CREATE SCHEMA's elements (which decide when one is
// denied; the statement itself is then checked on).
func bodyDenial(st statement, depth int) (decided bool, why string, err error) {
	var nested []*pg_query.Node
	switch x := st.node.Node.(type) {
	case *pg_query.Node_DoStmt:
		why, err := doDenial(x.DoStmt, depth)
		return true, why, err
	case *pg_query.Node_CreateFunctionStmt:
		why, err := functionDenial(x.CreateFunctionStmt, st.text, depth)
		return true, why, err
	case *pg_query.Node_ExplainStmt:
		if q := x.ExplainStmt.Query; q != nil {
			why, err := statefulStmtDenial(statement{text: st.text, node: q}, depth+1)
			return true, why, err
		}
	case *pg_query.Node_RuleStmt:
		nested = x.RuleStmt.Actions
	case *pg_query.Node_CreateSchemaStmt:
		nested = x.CreateSchemaStmt.SchemaElts
	}
	for _, n := range nested {
		if why, err := statefulStmtDenial(statement{text: st.text, node: n}, depth+1); why != "" || err != nil {
			return true, why, err
		}
	}
	return false, "", nil
}

// jobRule decides the statements a job may run although a query may not
// (CALL, LOCK, SET CONSTRAINTS, REFRESH MATERIALIZED VIEW, ALTER FUNCTION
// without SET), and the maintenance commands it may not.
func jobRule(n *pg_query.Node) (decided bool, why string) {
	switch x := n.Node.(type) {
	case *pg_query.Node_AlterFunctionStmt:
		for _, a := range x.AlterFunctionStmt.Actions {
			if d := a.GetDefElem(); d != nil && (d.Defname == "set" || d.Defname == "reset") {
				return true, whyFuncSet
			}
		}
		return true, ""
	case *pg_query.Node_CallStmt, *pg_query.Node_LockStmt, *pg_query.Node_ConstraintsSetStmt:
		// CALL runs inside the transaction block, where a procedure cannot
		// COMMIT; LOCK and SET CONSTRAINTS last until the rollback, on a
		// database no one else uses.
		return true, ""
	case *pg_query.Node_RefreshMatViewStmt:
		return true, ""
	case *pg_query.Node_CheckPointStmt, *pg_query.Node_VacuumStmt, *pg_query.Node_ClusterStmt, *pg_query.Node_ReindexStmt:
		return true, whyStatefulMaintenance
	}
	return false, ""
}

// escapeDenial returns why a statement would reach past the job's
// transaction (CONCURRENTLY) or its private copy (a shared object), or "".
func escapeDenial(n *pg_query.Node) string {
	switch x := n.Node.(type) {
	case *pg_query.Node_IndexStmt:
		if x.IndexStmt.Concurrent {
			return whyConcurrently
		}
	case *pg_query.Node_DropStmt:
		if x.DropStmt.Concurrent {
			return whyConcurrently
		}
	case *pg_query.Node_AlterTableStmt:
		for _, c := range x.AlterTableStmt.Cmds {
			if cmd := c.GetAlterTableCmd(); cmd != nil && cmd.Def != nil {
				if pc := cmd.Def.GetPartitionCmd(); pc != nil && pc.Concurrent {
					return whyConcurrently
				}
			}
		}
	case *pg_query.Node_CommentStmt:
		return sharedDenial(x.CommentStmt.Objtype)
	case *pg_query.Node_GrantStmt:
		return sharedDenial(x.GrantStmt.Objtype)
	case *pg_query.Node_AlterOwnerStmt:
		return sharedDenial(x.AlterOwnerStmt.ObjectType)
	case *pg_query.Node_RenameStmt:
		return sharedDenial(x.RenameStmt.RenameType)
	}
	return ""
}

// sharedDenial is whyShared for an object type that lives outside the
// database, else "".
func sharedDenial(t pg_query.ObjectType) string {
	if sharedObject(t) {
		return whyShared
	}
	return ""
}

// sharedObject reports the object types that live outside the database.
func sharedObject(t pg_query.ObjectType) bool {
	switch t {
	case pg_query.ObjectType_OBJECT_DATABASE, pg_query.ObjectType_OBJECT_ROLE, pg_query.ObjectType_OBJECT_TABLESPACE,
		pg_query.ObjectType_OBJECT_LARGEOBJECT, pg_query.ObjectType_OBJECT_PARAMETER_ACL, pg_query.ObjectType_OBJECT_FDW,
		pg_query.ObjectType_OBJECT_FOREIGN_SERVER, pg_query.ObjectType_OBJECT_SUBSCRIPTION, pg_query.ObjectType_OBJECT_PUBLICATION,
		pg_query.ObjectType_OBJECT_EVENT_TRIGGER:
		return true
	}
	return false
}

// functionDenial checks CREATE FUNCTION / PROCEDURE: no SET clause, a body
// in SQL or PL/pgSQL, and the body's statements allowed. text is the whole
// statement (PL/pgSQL bodies are parsed from it).
func functionDenial(f *pg_query.CreateFunctionStmt, text string, depth int) (string, error) {
	lang := ""
	var body []string
	for _, o := range f.Options {
		d := o.GetDefElem()
		if d == nil {
			continue
		}
		switch d.Defname {
		case "set":
			return whyFuncSet, nil
		case "language":
			if s := d.Arg.GetString_(); s != nil {
				lang = strings.ToLower(s.Sval)
			}
		case "as":
			if l := d.Arg.GetList(); l != nil {
				for _, it := range l.Items {
					if s := it.GetString_(); s != nil {
						body = append(body, s.Sval)
					}
				}
			}
		}
	}
	if f.SqlBody != nil { // BEGIN ATOMIC ... END, or RETURN expr: parsed in place
		var why string
		var err error
		pgparse.Walk(f.SqlBody.ProtoReflect(), func(m protoreflect.Message) bool {
			if n, ok := m.Interface().(*pg_query.Node); ok && isStatementNode(n) {
				why, err = statefulStmtDenial(statement{text: text, node: n}, depth+1)
			}
			return why == "" && err == nil
		})
		return why, err
	}
	switch lang {
	case "", "sql":
		if len(body) != 1 {
			return whyLanguage, nil
		}
		return sqlBodyDenial(body[0], depth)
	case "plpgsql":
		return plpgsqlDenial(text, depth)
	}
	return whyLanguage, nil
}

// isStatementNode reports whether n is a statement (not an expression).
func isStatementNode(n *pg_query.Node) bool {
	name := string(n.ProtoReflect().WhichOneof(n.ProtoReflect().Descriptor().Oneofs().ByName("node")).Name())
	return strings.HasSuffix(name, "_stmt")
}

// sqlBodyDenial checks the statements of a LANGUAGE sql body.
func sqlBodyDenial(body string, depth int) (string, error) {
	stmts, err := parseStatements(body)
	if err != nil {
		return "", err
	}
	for _, st := range stmts {
		if why, err := statefulStmtDenial(st, depth+1); why != "" || err != nil {
			return why, err
		}
	}
	return "", nil
}

// doDenial checks a DO block: PL/pgSQL only, its body checked like a
// function's.
func doDenial(d *pg_query.DoStmt, depth int) (string, error) {
	lang, body := "plpgsql", ""
	for _, a := range d.Args {
		e := a.GetDefElem()
		if e == nil {
			continue
		}
		if s := e.Arg.GetString_(); s != nil {
			switch e.Defname {
			case "language":
				lang = strings.ToLower(s.Sval)
			case "as":
				body = s.Sval
			}
		}
	}
	if lang != "plpgsql" {
		return whyLanguage, nil
	}
	return plpgsqlDenial("CREATE FUNCTION avtgym_do() RETURNS void LANGUAGE plpgsql AS "+dollarQuote(body), depth)
}

// dollarQuote quotes s with a dollar tag that s does not contain.
func dollarQuote(s string) string {
	tag := "$avtgym$"
	for i := 0; strings.Contains(s, tag); i++ {
		tag = "$avtgym" + strings.Repeat("x", i+1) + "$"
	}
	return tag + s + tag
}

// plpgsqlDenial checks the PL/pgSQL functions of a CREATE FUNCTION
// statement's text: no dynamic SQL, no COMMIT or ROLLBACK, and every
// embedded statement allowed (expressions: no denied function).
func plpgsqlDenial(createText string, depth int) (string, error) {
	js, err := pgparse.ParsePlPgSQL(createText)
	if err != nil {
		return "", err
	}
	var tree any
	if err := json.Unmarshal([]byte(js), &tree); err != nil {
		return "", err
	}
	var why string
	var walkErr error
	var walk func(v any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				if !walk(e) {
					return false
				}
			}
		case map[string]any:
			for k, e := range x {
				switch k {
				case "PLpgSQL_stmt_dynexecute", "PLpgSQL_stmt_dynfors", "dynquery":
					why = whyDynamicSQL
					return false
				case "PLpgSQL_stmt_commit", "PLpgSQL_stmt_rollback":
					why = whyTransaction
					return false
				case "PLpgSQL_expr":
					if m, ok := e.(map[string]any); ok {
						q, _ := m["query"].(string)
						mode, _ := m["parseMode"].(float64)
						why, walkErr = plpgsqlExprDenial(q, int(mode), depth)
						if why != "" || walkErr != nil {
							return false
						}
					}
					continue
				}
				if !walk(e) {
					return false
				}
			}
		}
		return true
	}
	walk(tree)
	return why, walkErr
}

// plpgsqlExprDenial checks one SQL text embedded in PL/pgSQL: a statement
// (parse mode 0) is checked as a statement; an expression or assignment by
// its words, for a denied function's name.
func plpgsqlExprDenial(q string, mode, depth int) (string, error) {
	if mode == 0 {
		stmts, err := parseStatements(q)
		if err != nil {
			return "", err
		}
		for _, st := range stmts {
			if why, err := statefulStmtDenial(st, depth+1); why != "" || err != nil {
				return why, err
			}
		}
		return "", nil
	}
	sc, err := pg_query.Scan(q)
	if err != nil {
		return "", err
	}
	for _, t := range sc.Tokens {
		if t.Start < 0 || t.End > int32(len(q)) || t.Start >= t.End {
			continue
		}
		w := strings.ToLower(q[t.Start:t.End])
		if why := functionCallDenial(w); why != "" {
			return why, nil
		}
		if why := statefulDeniedFunctions[w]; why != "" {
			return why, nil
		}
		if why := relationDenial(w); why != "" {
			return why, nil
		}
	}
	return "", nil
}

// splitCorpus splits one of the corpus's own SQL texts (a Setup, Prior,
// Reference, Check or Cleanup entry) into statements. The corpus is trusted,
// but no statement may end the job's transaction. Outcomes are kept by text.
func (c *stmtChecks) splitCorpus(text string) ([]string, error) {
	return c.corpus.get(text, func() ([]string, error) { return splitCorpusUncached(text) })
}

func splitCorpusUncached(text string) ([]string, error) {
	stmts, err := parseStatements(text)
	if err != nil {
		return nil, syntaxError(err)
	}
	texts := make([]string, 0, len(stmts))
	for i, st := range stmts {
		switch st.node.Node.(type) {
		case *pg_query.Node_TransactionStmt:
			return nil, sqlexec.Errorf(sqlexec.KindDenied, nil, "%s was denied: %s", stmtLabel(i, len(stmts), st.text), whyTransaction)
		}
		texts = append(texts, st.text)
	}
	return texts, nil
}

package postgres

// This file keeps the checks and Python tests of a Management task reading
// the database, not what the policy's session made to shadow it.
//
// # The trust model of Management SQL
//
// A Management task asks the policy to change the database, so its SQL may
// create, alter and drop the database's own objects in its schemas
// (tables, views, indexes, sequences, constraints, triggers, rules,
// functions and procedures in SQL and PL/pgSQL, types and domains), inside
// the job's transaction on a private copy; what it leaves is the state the
// checks and tests judge. It may not reach past that state (checkStateful
// refuses transaction control, session settings, COPY, other languages,
// dynamic SQL, server-wide objects, ...), and two kinds of objects it may
// make are kept from the checks:
//
//   - Temporary objects (CREATE TEMP TABLE / VIEW / SEQUENCE, and anything
//     in pg_temp) are the session's scratch space, not the database's
//     state: PostgreSQL searches pg_temp before everything else, so a
//     temporary view named pg_indexes would answer a check that reads the
//     catalog (issue 25: harbor_M_4 scored 1.0 that way). The checks and
//     tests run after DISCARD TEMP, which drops them inside the job's
//     transaction, and with the search path pinned to pg_catalog first,
//     then the database's own schemas as they were when the copy was made
//     (a schema the policy creates, named like its role, is not searched),
//     then pg_temp.
//   - Functions, aggregates and operators named like PostgreSQL's own
//     (public.lower(varchar), an operator = on two varchars): an exact
//     match on the argument types beats pg_catalog's function even with
//     pg_catalog first in the path, so such an object would change what a
//     check computes. The guard query lists those the copy did not have
//     when it was made; any makes the verdict a failure (KindDenied, with
//     the object named as feedback) and the checks do not run.
//
// What stays the policy's to do, and the checks' to judge: replacing a
// table by a view of the same name, changing rows, dropping what the task
// did not mention. A check or test that cannot tell the intended state
// from such a change is a weakness of the task, as in BIRD-Interact; the
// checks themselves are corpus content and trusted.

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// isolation is what runs after the policy's statements and before the
// checks: statements (DISCARD TEMP, the pinned search path), then the
// guard query, whose rows name objects that shadow built-in ones.
type isolation struct {
	statements []string
	guard      string
}

// readIsolation builds a database's isolation on pc, a policy-role session
// on a fresh copy: its search path as the role sees it now, and the
// built-in-named objects the pristine database already has (left out of
// the guard).
func readIsolation(ctx context.Context, pc *pgconn.PgConn) (isolation, error) {
	res := pc.ExecParams(ctx, "SELECT pg_catalog.array_to_string(pg_catalog.current_schemas(false), ',')", nil, nil, nil, nil).Read()
	if res.Err != nil {
		return isolation{}, fmt.Errorf("postgres: reading the search path: %w", res.Err)
	}
	path := []string{"pg_catalog"}
	if len(res.Rows) == 1 && len(res.Rows[0]) == 1 {
		for _, s := range strings.Split(string(res.Rows[0][0]), ",") {
			if s != "" && s != "pg_catalog" && !strings.HasPrefix(s, "pg_temp") {
				path = append(path, pgx.Identifier{s}.Sanitize())
			}
		}
	}
	path = append(path, "pg_temp")
	iso := isolation{statements: []string{
		"DISCARD TEMP",
		"SET LOCAL search_path = " + strings.Join(path, ", "),
	}}
	res = pc.ExecParams(ctx, guardSQL(nil), nil, nil, nil, nil).Read()
	if res.Err != nil {
		return isolation{}, fmt.Errorf("postgres: reading the objects named like built-in ones: %w", res.Err)
	}
	var pristine []string
	for _, row := range res.Rows {
		pristine = append(pristine, string(row[1]))
	}
	iso.guard = guardSQL(pristine)
	return iso, nil
}

// guardSQL is the guard query: one row (message, oid) per function,
// aggregate or operator outside pg_catalog and information_schema that has
// the name of one in pg_catalog, except the pristine oids. Every name in it
// is qualified and every operator spelled OPERATOR(pg_catalog.…), so that
// nothing the policy made can change what it computes.
func guardSQL(pristine []string) string {
	exclude := ""
	if len(pristine) > 0 {
		exclude = fmt.Sprintf(" AND NOT x.oid OPERATOR(pg_catalog.=) ANY ('{%s}'::pg_catalog.oid[])", strings.Join(pristine, ","))
	}
	return `SELECT x.msg, x.oid::pg_catalog.text FROM (
  SELECT p.oid, pg_catalog.format('the function %s.%s(%s) has the name of a PostgreSQL built-in function: functions, aggregates and operators named like built-in ones would change what the checks compute, and may not be created',
      n.nspname, p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid)) AS msg
    FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
   WHERE n.nspname OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,information_schema}'::pg_catalog.name[])
     AND EXISTS (SELECT 1 FROM pg_catalog.pg_proc b
                  WHERE b.pronamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
                    AND b.proname OPERATOR(pg_catalog.=) p.proname)
  UNION ALL
  SELECT o.oid, pg_catalog.format('the operator %s.%s has the name of a PostgreSQL built-in operator: functions, aggregates and operators named like built-in ones would change what the checks compute, and may not be created',
      n.nspname, o.oprname) AS msg
    FROM pg_catalog.pg_operator o JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) o.oprnamespace
   WHERE n.nspname OPERATOR(pg_catalog.<>) ALL ('{pg_catalog,information_schema}'::pg_catalog.name[])
     AND EXISTS (SELECT 1 FROM pg_catalog.pg_operator b
                  WHERE b.oprnamespace OPERATOR(pg_catalog.=) 'pg_catalog'::pg_catalog.regnamespace
                    AND b.oprname OPERATOR(pg_catalog.=) o.oprname)
) x WHERE true` + exclude
}

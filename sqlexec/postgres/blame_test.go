package postgres

import (
	"context"
	"strings"
	"testing"

	"avtgym/sqlexec"
)

// raisedSQLSTATEs are the codes that once decided ERROR (the
// environment's) by themselves, which a policy raises at will (issue 25).
var raisedSQLSTATEs = []string{"57P01", "57P03", "08006", "08001", "3D000", "53300", "28P01", "58030", "XX001", "53100"}

// TestThePolicyCannotChooseERRORWithASQLSTATE: on a Query task, SQL that
// makes the server report "no such database" or raises a connection,
// shutdown or resource code is the policy's failure (KindExecution, or
// classify's policy kind), and the connection serves the next query.
func TestThePolicyCannotChooseERRORWithASQLSTATE(t *testing.T) {
	_, db := harbor(t)
	ctx := context.Background()
	for _, sql := range []string{
		"SELECT pg_database_size('nosuchdb')",
		"SELECT pg_database_size(oid) FROM pg_database WHERE datname = 'nosuchdb' UNION ALL SELECT pg_database_size('nosuchdb')",
		"SELECT has_database_privilege('nosuchdb', 'CONNECT')",
	} {
		_, err := db.Query(ctx, sql, sqlexec.DefaultLimits())
		if k := sqlexec.KindOf(err); k == sqlexec.KindUnavailable || k == sqlexec.KindBusy || k == 0 {
			t.Errorf("%s: %v (kind %v), want the policy's failure", sql, err, k)
		}
		if res, err := db.Query(ctx, "SELECT count(*) FROM berths", sqlexec.DefaultLimits()); err != nil || len(res.Rows) != 1 {
			t.Fatalf("the next query: %v", err)
		}
	}
}

func TestRaisedSQLSTATEsAreThePolicysFailure(t *testing.T) {
	_, d := openStateful(t, StatefulOptions{Clones: 1})
	ctx := context.Background()
	for _, code := range raisedSQLSTATEs {
		for name, sql := range map[string]string{
			"a DO block":         "DO $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '" + code + "'; END$$",
			"a function it made": "CREATE FUNCTION zz_raise() RETURNS int LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '" + code + "'; END$$; SELECT zz_raise()",
			"a trigger it made on the checked table": "CREATE FUNCTION zz_t() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '" + code + "'; END$$; " +
				"CREATE TRIGGER zz BEFORE UPDATE ON cranes FOR EACH ROW EXECUTE FUNCTION zz_t(); UPDATE cranes SET operational_status = operational_status",
		} {
			for _, withChecks := range []bool{true, false} {
				j := sqlexec.Job{Key: "raise", Predicted: sql, Reference: []string{"UPDATE cranes SET operational_status = 'active' WHERE crane_id = 1"},
					Policy: sqlexec.DefaultPolicy(), Limits: jobLimits()}
				if withChecks {
					j.Checks = []string{"SELECT count(*) FROM cranes WHERE operational_status = 'active'"}
				} else {
					j.Reference = append(j.Reference, "SELECT 1")
				}
				v, err := d.Verify(ctx, j)
				if err != nil {
					t.Fatalf("%s raising %s: the environment's error %v; want the policy's failure", name, code, err)
				}
				if v.Success || sqlexec.KindOf(v.Err) != sqlexec.KindExecution || !strings.Contains(v.Reason, code) {
					t.Errorf("%s raising %s: %+v, want a failed verdict of kind execution naming the code", name, code, v)
				}
			}
		}
	}
	if st := d.Stats(); st.Busy != 0 {
		t.Errorf("Busy %d: a raised 53300 counted as a busy verifier", st.Busy)
	}
}

// TestChecksReadTheDatabaseNotTheSession: issue 25's harbor_M_4 attack (a
// temporary view shadowing pg_indexes) and the other ways a session can
// shadow what the checks read fail the task; the real index passes.
func TestChecksReadTheDatabaseNotTheSession(t *testing.T) {
	_, d := openStateful(t, StatefulOptions{Clones: 1})
	var m4 mgmtTask
	for _, m := range mgmtTasks(t) {
		if m.id == "harbor_M_4" {
			m4 = m
		}
	}
	if m4.id == "" {
		t.Fatal("harbor_M_4 is not in the sample")
	}
	insert := m4.sol[len(m4.sol)-1]
	if !strings.HasPrefix(strings.TrimSpace(strings.ToUpper(insert)), "INSERT") {
		t.Fatalf("the last reference statement of harbor_M_4 is not its INSERT: %.60q", insert)
	}
	fakeIndex := `CREATE TEMP VIEW pg_indexes AS SELECT 'public'::name AS schemaname, 'cargo_manifests'::name AS tablename,
		'fake'::name AS indexname, 'CREATE INDEX fake ON cargo_manifests (lower(consignee))'::text AS indexdef`
	mustVerify(t, d, m4.checksJob(strings.Join(m4.sol, ";\n")), true)
	mustVerify(t, d, m4.checksJob(insert), false)
	for name, sql := range map[string]string{
		"a temporary view shadowing pg_indexes (issue 25)": insert + ";\n" + fakeIndex,
		"the same in pg_temp, spelled out":                 insert + ";\n" + strings.Replace(fakeIndex, "VIEW pg_indexes", "VIEW pg_temp.pg_indexes", 1),
		// The real index, and the INSERT into a copy that shadows the table
		// (unqualified, the INSERT goes to the shadow): without isolation
		// every check would pass.
		"a temporary table shadowing the checked table": "CREATE INDEX ON public.cargo_manifests (lower(consignee)); " +
			"CREATE TEMP TABLE cargo_manifests AS SELECT * FROM public.cargo_manifests;\n" + insert,
		"a schema named like the role, searched before public": "CREATE INDEX ON public.cargo_manifests (lower(consignee)); CREATE SCHEMA avtgym_policy; " +
			"CREATE TABLE avtgym_policy.cargo_manifests (LIKE public.cargo_manifests INCLUDING ALL); " +
			"INSERT INTO avtgym_policy.cargo_manifests SELECT * FROM public.cargo_manifests;\n" + insert,
		"a function shadowing ILIKE's lower-level operator": insert + ";\n" + "CREATE FUNCTION zz_true(text, text) RETURNS bool LANGUAGE sql AS 'SELECT true'; " +
			"CREATE OPERATOR public.~~* (LEFTARG = text, RIGHTARG = text, FUNCTION = zz_true)",
		"a built-in name overloaded for varchar": insert + ";\n" + "CREATE FUNCTION public.lower(varchar) RETURNS text LANGUAGE sql AS 'SELECT ''x'''",
	} {
		v := mustVerify(t, d, m4.checksJob(sql), false)
		t.Logf("%s: %s", name, v.Reason)
	}
	v := mustVerify(t, d, m4.checksJob(insert+";\nCREATE FUNCTION public.lower(varchar) RETURNS text LANGUAGE sql AS 'SELECT ''x'''"), false)
	if sqlexec.KindOf(v.Err) != sqlexec.KindDenied || !strings.Contains(v.Reason, "public.lower(character varying)") {
		t.Errorf("a built-in name: %+v, want KindDenied naming the function", v)
	}
	// Temporary objects stay usable as the policy's scratch space.
	mustVerify(t, d, m4.checksJob("CREATE TEMP TABLE zz_scratch AS SELECT 1 AS x; "+strings.Join(m4.sol, ";\n")), true)
}

// TestCheckErrorsStayPrivileged: a check that fails on the state the
// policy left gives a failed verdict with the reason privileged (no Err,
// so no feedback quoting the check), as on SQLite.
func TestCheckErrorsStayPrivileged(t *testing.T) {
	_, d := openStateful(t, StatefulOptions{Clones: 1})
	j := sqlexec.Job{Key: "private check", Predicted: "ALTER TABLE berths RENAME TO zz_b",
		Reference: []string{"UPDATE berths SET daily_rate_usd = daily_rate_usd"},
		Checks:    []string{"SELECT count(*) FROM berths WHERE terminal = 'secret terminal name'"},
		Policy:    sqlexec.DefaultPolicy(), Limits: jobLimits()}
	v := mustVerify(t, d, j, false)
	if v.Err != nil || !strings.Contains(v.Reason, "a check failed") || !strings.Contains(v.Reason, "berths") {
		t.Errorf("%+v: want a privileged reason and no Err", v)
	}
}

package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/internal/pgtest"
	"avtgym/sqlexec"

	"github.com/jackc/pgx/v5"
)

// TestCells: each PostgreSQL type becomes the cell convert.go documents.
func TestCells(t *testing.T) {
	_, db := harbor(t)
	cases := []struct {
		sql  string
		want any
	}{
		{"SELECT NULL", nil},
		{"SELECT NULL::int", nil},
		{"SELECT 1::smallint", int64(1)},
		{"SELECT 2::int", int64(2)},
		{"SELECT 9223372036854775807::bigint", int64(math.MaxInt64)},
		{"SELECT 1.5::real", 1.5},
		{"SELECT 0.1::double precision", 0.1},
		{"SELECT 'Infinity'::float8", math.Inf(1)},
		{"SELECT 1.50::numeric(10,2)", 1.5},
		{"SELECT 11950.00::numeric(10,2)", 11950.0},
		{"SELECT -0.125::numeric", -0.125},
		{"SELECT 123456789012345::numeric", 123456789012345.0},
		{"SELECT 9007199254740993::numeric", int64(9007199254740993)},
		{"SELECT 12345678901234567890123::numeric", 12345678901234567890123.0},
		{"SELECT 1.23456789012345678901::numeric", 1.2345678901234568},
		{"SELECT 'Infinity'::numeric", math.Inf(1)},
		{"SELECT sum(length_m) FROM berths", int64(7985)},
		{"SELECT avg(max_draft_m) FROM berths", 14.033333333333333},
		{"SELECT true", int64(1)},
		{"SELECT false", int64(0)},
		{"SELECT DATE '2024-01-05'", "2024-01-05"},
		{"SELECT DATE '0044-03-15 BC'", "0044-03-15 BC"},
		{"SELECT 'infinity'::date", "infinity"},
		{"SELECT TIMESTAMP '2024-01-05 10:11:12'", "2024-01-05 10:11:12"},
		{"SELECT TIMESTAMP '2024-01-05 10:11:12.250'", "2024-01-05 10:11:12.25"},
		{"SELECT TIMESTAMPTZ '2024-01-05 10:11:12+02'", "2024-01-05 08:11:12+00"},
		{"SELECT TIME '10:11:12'", "10:11:12"},
		{"SELECT INTERVAL '1 day 2 hours'", "1 day 02:00:00"},
		{"SELECT '{\"b\": 1, \"a\": [1, 2.50, \"x\\ty\"], \"c\": {\"z\": null, \"y\": true}}'::jsonb", `{"a":[1,2.50,"x\ty"],"b":1,"c":{"y":true,"z":null}}`},
		{"SELECT '{\"b\":1,  \"a\":\"é\\u00e9\"}'::json", `{"a":"éé","b":1}`},
		{"SELECT details FROM cargo_manifests WHERE manifest_id = 282", `{"customs":{"inspected":false,"status":"pending"},"destination_port":"CNSHA","hs_code":"847130","packaging":"container","reefer":false}`},
		{"SELECT ARRAY[1, 2, 3]", "{1,2,3}"},
		{"SELECT ARRAY['a b', NULL]", `{"a b",NULL}`},
		{"SELECT '\\xdeadbeef'::bytea", []byte{0xde, 0xad, 0xbe, 0xef}},
		{"SELECT 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"},
		{"SELECT 'héllo'::text", "héllo"},
		{"SELECT 'ab'::char(4)", "ab  "},
		{"SELECT berth_code FROM berths WHERE berth_id = 1", "N01"},
		{"SELECT commissioned_on FROM berths WHERE berth_id = 1", "2006-05-05"},
		{"SELECT shore_power FROM berths WHERE berth_id = 1", int64(1)},
		{"SELECT daily_rate_usd FROM berths WHERE berth_id = 1", 11950.0},
		{"SELECT '(1,2)'::point", "(1,2)"},
		{"SELECT 12.5::money", "$12.50"},
	}
	for _, tc := range cases {
		res := mustQuery(t, db, tc.sql)
		if len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
			t.Errorf("%s: %v", tc.sql, res.Rows)
			continue
		}
		if got := res.Rows[0][0]; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %#v, want %#v", tc.sql, got, tc.want)
		}
		var want int64
		for _, row := range res.Rows {
			for _, c := range row {
				want += sqlexec.CellBytes(c)
			}
		}
		if res.Bytes != want {
			t.Errorf("%s: Bytes %d, want %d", tc.sql, res.Bytes, want)
		}
	}
	res := mustQuery(t, db, "SELECT 'NaN'::numeric, 'NaN'::float8")
	for _, c := range res.Rows[0] {
		if f, ok := c.(float64); !ok || !math.IsNaN(f) {
			t.Errorf("NaN: %#v", c)
		}
	}
}

// TestResults: columns, several statements (the last counts), empty results
// and the caps' edges.
func TestResults(t *testing.T) {
	_, db := harbor(t)
	ctx := context.Background()
	res := mustQuery(t, db, "SELECT 1 AS a; SELECT berth_code AS code, length_m FROM berths WHERE berth_id <= 2 ORDER BY berth_id;")
	if !reflect.DeepEqual(res.Columns, []string{"code", "length_m"}) || !reflect.DeepEqual(res.Rows, [][]any{{"N01", int64(370)}, {"N02", int64(350)}}) {
		t.Errorf("got %v %v", res.Columns, res.Rows)
	}
	res = mustQuery(t, db, "SELECT * FROM berths WHERE false")
	if len(res.Columns) != 8 || res.Rows == nil || len(res.Rows) != 0 {
		t.Errorf("empty result: %v %#v", res.Columns, res.Rows)
	}
	res = mustQuery(t, db, "-- leading comment\nSHOW TimeZone")
	if res.Rows[0][0] != "UTC" {
		t.Errorf("time zone %v", res.Rows)
	}
	res = mustQuery(t, db, "EXPLAIN SELECT * FROM berths")
	if len(res.Rows) == 0 {
		t.Errorf("EXPLAIN: %v", res.Rows)
	}
	// Exactly at the caps is allowed, one past is not.
	lim := sqlexec.Limits{MaxRows: 30}
	if _, err := db.Query(ctx, "SELECT * FROM berths", lim); err != nil {
		t.Errorf("30 rows under a cap of 30: %v", err)
	}
	lim.MaxRows = 29
	if _, err := db.Query(ctx, "SELECT * FROM berths", lim); sqlexec.KindOf(err) != sqlexec.KindTooManyRows {
		t.Errorf("30 rows under a cap of 29: %v", err)
	}
	full := mustQuery(t, db, "SELECT * FROM berths")
	lim = sqlexec.Limits{MaxBytes: full.Bytes}
	if _, err := db.Query(ctx, "SELECT * FROM berths", lim); err != nil {
		t.Errorf("%d bytes under a cap of %d: %v", full.Bytes, lim.MaxBytes, err)
	}
	lim.MaxBytes--
	if _, err := db.Query(ctx, "SELECT * FROM berths", lim); sqlexec.KindOf(err) != sqlexec.KindTooManyBytes {
		t.Errorf("%d bytes under a cap of %d: %v", full.Bytes, lim.MaxBytes, err)
	}
}

// TestErrorKinds: errors by kind, with messages that name the statement and
// quote PostgreSQL.
func TestErrorKinds(t *testing.T) {
	_, db := harbor(t)
	cases := []struct {
		sql  string
		kind sqlexec.ErrorKind
		want string
	}{
		{"", sqlexec.KindSyntax, "no SQL statement"},
		{"-- only a comment", sqlexec.KindSyntax, "only comments"},
		{"SELEC 1", sqlexec.KindSyntax, `syntax error at or near "SELEC"`},
		{"SELECT 1; SELEC 2", sqlexec.KindSyntax, `at character 11`},
		{"SELECT nosuch FROM berths", sqlexec.KindSyntax, `column "nosuch" does not exist (SQLSTATE 42703)`},
		{"SELECT * FROM nosuch", sqlexec.KindSyntax, `relation "nosuch" does not exist`},
		{"SELECT nosuch(1)", sqlexec.KindSyntax, `function nosuch(integer) does not exist`},
		{"SELECT 1; SELECT 1/0", sqlexec.KindExecution, `statement 2 of 2 (SELECT 1/0) failed while running: ERROR: division by zero (SQLSTATE 22012)`},
		{"SELECT 'x'::int", sqlexec.KindExecution, `invalid input syntax for type integer`},
		{"SELECT 1; DELETE FROM berths; SELECT 2", sqlexec.KindDenied, `statement 2 of 3 (DELETE FROM berths)`},
		{"SELECT '\xff'", sqlexec.KindSyntax, "UTF-8"},
	}
	for _, tc := range cases {
		_, err := db.Query(context.Background(), tc.sql, sqlexec.DefaultLimits())
		var e *sqlexec.Error
		if !errors.As(err, &e) || e.Kind != tc.kind || !strings.Contains(e.Msg, tc.want) {
			t.Errorf("%q: got %v, want kind %v and %q", tc.sql, err, tc.kind, tc.want)
		}
	}
}

// TestCanceled: the caller's cancellation is KindUnavailable, its deadline
// KindTimeout; the statement stops, and the engine serves afterwards.
func TestCanceled(t *testing.T) {
	_, db := harbor(t)
	lim := sqlexec.Limits{Timeout: time.Minute}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := db.Query(ctx, "SELECT pg_sleep(60)", lim)
	if sqlexec.KindOf(err) != sqlexec.KindUnavailable {
		t.Errorf("canceled: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = db.Query(ctx, "SELECT pg_sleep(60)", lim)
	if sqlexec.KindOf(err) != sqlexec.KindTimeout {
		t.Errorf("deadline: %v", err)
	}
	// A pg_sleep(60) that ended with these kinds was interrupted: had it
	// run on, it would have returned its row and no error.
	mustQuery(t, db, "SELECT 1")
	// The canceled statements do not run on in the server: no transaction of
	// the policy role stays open (polled, with a bound of 10 seconds).
	admin, err := pgx.Connect(context.Background(), pgtest.URLFor(t, db.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE l.locktype = 'virtualxid' AND a.usename = $1 AND a.datname = current_database()`, server(t).Role()).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d transactions of the policy role still open", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConcurrentQueries: many goroutines share the pool, with failures mixed
// in (which roll back or close their connections).
func TestConcurrentQueries(t *testing.T) {
	_, db := harbor(t)
	lim := sqlexec.DefaultLimits()
	lim.MaxRows = 100
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				var sql string
				var kind sqlexec.ErrorKind
				switch (g + i) % 4 {
				case 0:
					sql = "SELECT count(*) FROM port_calls"
				case 1:
					sql, kind = "SELECT 1/0", sqlexec.KindExecution
				case 2:
					sql, kind = "SELECT * FROM generate_series(1, 1000)", sqlexec.KindTooManyRows
				case 3:
					sql, kind = "SELECT nosuch", sqlexec.KindSyntax
				}
				res, err := db.Query(context.Background(), sql, lim)
				if sqlexec.KindOf(err) != kind {
					errs <- err
					return
				}
				if kind == 0 && res.Rows[0][0] != int64(199) {
					errs <- errors.New("wrong count")
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestScheduled: the engine under sqlexec.Lanes: a slow query outlives its
// fast-lane slice, is run again in the slow lane and finishes.
func TestScheduled(t *testing.T) {
	_, db := harbor(t)
	lanes := sqlexec.NewLanes(sqlexec.LaneOptions{Fast: 2, Slow: 2, Slice: 20 * time.Millisecond})
	eng := sqlexec.Scheduled(db, lanes)
	res, err := eng.Query(context.Background(), "SELECT pg_sleep(0.1), 1", sqlexec.Limits{Timeout: 5 * time.Second})
	if err != nil || res.Rows[0][1] != int64(1) {
		t.Fatalf("%v %v", res, err)
	}
	if lanes.Stats().Demoted != 1 {
		t.Errorf("stats %+v", lanes.Stats())
	}
}

// TestSchema: the schema text holds each table's CREATE TABLE with its keys,
// and sample rows.
func TestSchema(t *testing.T) {
	_, db := harbor(t)
	sch, err := db.Schema(context.Background(), 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CREATE TABLE berths (\n    berth_id integer NOT NULL DEFAULT nextval('berths_berth_id_seq'::regclass),",
		"    max_draft_m numeric(4,1) NOT NULL,",
		"    PRIMARY KEY (berth_id),\n    UNIQUE (berth_code)\n);",
		"FOREIGN KEY (call_id) REFERENCES port_calls(call_id)",
		"3 example rows from berths:\nberth_id | berth_code | terminal |",
		"1 | 'N01' | 'North Container Terminal' | 370 | 14.2 | 1 | 11950 | '2006-05-05'",
		"CREATE TABLE crane_assignments (",
	} {
		if !strings.Contains(sch, want) {
			t.Errorf("the schema lacks %q:\n%s", want, sch)
		}
	}
	if i, j := strings.Index(sch, "CREATE TABLE berths"), strings.Index(sch, "CREATE TABLE port_calls"); i < 0 || j < i {
		t.Errorf("tables out of load order")
	}
}

// TestLimitSettings: each query runs under its own limits, whatever the
// connection ran before (the pool has one connection here, so every query
// reuses it).
func TestLimitSettings(t *testing.T) {
	s, _ := harbor(t)
	ctx := context.Background()
	name := harborName
	db, err := s.Open(ctx, name, Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	show := "SELECT current_setting('statement_timeout'), current_setting('lock_timeout'), " +
		"current_setting('idle_in_transaction_session_timeout'), current_setting('work_mem'), current_setting('transaction_read_only')"
	cases := []struct {
		lim  sqlexec.Limits
		want string
	}{
		{sqlexec.Limits{Timeout: 1234 * time.Millisecond, MaxMemory: 4 << 20}, "[[1234ms 1234ms 5s 1MB on]]"},
		{sqlexec.Limits{}, "[[1min 10s 1min 32MB on]]"},
		{sqlexec.Limits{Timeout: 50 * time.Millisecond}, "[[50ms 50ms 5s 32MB on]]"},
		{sqlexec.Limits{Timeout: 10 * time.Second, MaxMemory: 1 << 30}, "[[10s 10s 20s 256MB on]]"},
		{sqlexec.Limits{Timeout: 10 * time.Second, MaxMemory: 1 << 30}, "[[10s 10s 20s 256MB on]]"},
		{sqlexec.Limits{}, "[[1min 10s 1min 32MB on]]"},
	}
	for _, tc := range cases {
		// A failing query first: the settings survive its rollback.
		if _, err := db.Query(ctx, "SELECT 1/0", tc.lim); sqlexec.KindOf(err) != sqlexec.KindExecution {
			t.Fatal(err)
		}
		res, err := db.Query(ctx, show, tc.lim)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(res.Rows); got != tc.want {
			t.Errorf("%+v: got %s, want %s", tc.lim, got, tc.want)
		}
	}
}

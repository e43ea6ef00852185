package env_test

import (
	"context"
	"strings"
	"testing"

	pb "avtgym/proto/avtgym/v1"
)

// TestTideResetSchemaIsDDL: under TIDE_F and TIDE_P the reset's task view
// has the database's DDL only (TIDE Appendix D: the agent "receives the
// database DDL"); the same task under AMBITAB, and GetTask's view (a
// task's, not a protocol's), keep the example rows.
func TestTideResetSchemaIsDDL(t *testing.T) {
	c := loadTide(t)
	e, _ := newEnv(t, c, nil)
	task, ok := c.Task("t1-J")
	if !ok {
		t.Fatal("no task t1-J")
	}
	full := e.View(task).GetDatabase().GetSchema()
	if !strings.Contains(full, "example row") {
		t.Fatalf("the tiny corpus's schema has no example rows to strip:\n%s", full)
	}
	for _, p := range []pb.Protocol{pb.Protocol_PROTOCOL_TIDE_F, pb.Protocol_PROTOCOL_TIDE_P} {
		s := resetTide(t, e, "t1-J", p).GetObservation().GetTask().GetDatabase().GetSchema()
		if strings.Contains(s, "example row") || !strings.Contains(s, "CREATE TABLE") {
			t.Errorf("%s reset schema is not the DDL only:\n%s", p, s)
		}
	}
	resp, err := e.Reset(context.Background(), &pb.ResetRequest{TaskId: "t1-C", Seed: u64(3)})
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.Episodes[0].GetObservation().GetTask().GetDatabase().GetSchema(); s != full {
		t.Errorf("AMBITAB reset schema changed:\n%s", s)
	}
	if s := e.View(task).GetDatabase().GetSchema(); s != full {
		t.Error("a TIDE reset changed the shared view")
	}
}

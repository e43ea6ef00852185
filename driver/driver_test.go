package driver_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"avtgym/app"
	"avtgym/corpus"
	"avtgym/driver"
	"avtgym/engines"
	"avtgym/env"
	"avtgym/internal/testutil"
	"avtgym/oracle"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// inProcess is the tiny corpus's environment in this process.
func inProcess(t *testing.T) *env.Env {
	t.Helper()
	c, err := corpus.LoadDir(context.Background(), testutil.WriteTiny(t), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := env.NewSealer(env.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	e, err := env.New(env.Config{Corpora: []*corpus.Corpus{c}, Sealer: s,
		Oracles: map[pb.OracleType]env.Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()}})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// playFull plays the full probe on task big through env.
func playFull(t *testing.T, e driver.Env) *driver.Record {
	t.Helper()
	ctx := context.Background()
	seed := uint64(3)
	ep, err := driver.Start(ctx, e, &pb.ResetRequest{Corpus: "tiny", TaskId: "big", Seed: &seed, IncludePrivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	if ep.Budget() != 4 || ep.Remaining() != 4 || !ep.Asking() || ep.Done() {
		t.Fatalf("after reset: budget %d remaining %d asking %v done %v", ep.Budget(), ep.Remaining(), ep.Asking(), ep.Done())
	}
	for _, q := range probe.Questions(probe.Full, ep.Terms(), ep.Budget()) {
		if err := ep.Ask(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if ep.Asked() != 2 || ep.Remaining() != 2 {
		t.Fatalf("asked %d remaining %d", ep.Asked(), ep.Remaining())
	}
	if err := ep.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if !ep.Done() || ep.Asking() {
		t.Fatal("not done after STOP with the question-F1 reward")
	}
	if n := len(ep.Turns()); n != 6 { // request, 2 × (question, reply), stop
		t.Fatalf("%d turns", n)
	}
	return ep.Record(nil)
}

// TestSameRecordInProcessAndRemote: the in-process environment and a real
// server over gRPC give the driver the same episode.
func TestSameRecordInProcessAndRemote(t *testing.T) {
	local := playFull(t, inProcess(t))
	srv := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}})
	remote := playFull(t, driver.Remote(srv.Client.Env))
	for _, r := range []*driver.Record{local, remote} {
		if len(r.EpisodeUID) != 32 || r.StartedAt == "" || r.FinishedAt == "" {
			t.Fatalf("record without its uid or times: %+v", r)
		}
	}
	if local.EpisodeUID == remote.EpisodeUID {
		t.Fatalf("two resets share the uid %s", local.EpisodeUID)
	}
	// What differs by nature: the uid drawn at reset and the clock.
	for _, r := range []*driver.Record{local, remote} {
		r.EpisodeUID, r.StartedAt, r.FinishedAt, r.DurationMS = "", "", "", 0
	}
	if !reflect.DeepEqual(local, remote) {
		t.Fatalf("records differ:\nin process %+v\nremote     %+v", local, remote)
	}
	want := driver.Record{Corpus: "tiny", TaskID: "big", AVTID: "big", DB: "mini", Split: "dev", EpisodeID: "tiny/big/3", Seed: 3,
		Status: "TERMINATED", Counted: 2, CreditedTerms: []string{"big sales", "recent year"}}
	if local.Corpus != want.Corpus || local.TaskID != want.TaskID || local.AVTID != want.AVTID || local.DB != want.DB ||
		local.Split != want.Split || local.EpisodeID != want.EpisodeID || local.Status != want.Status || local.Counted != want.Counted ||
		!reflect.DeepEqual(local.CreditedTerms, want.CreditedTerms) {
		t.Errorf("record %+v", local)
	}
	if len(local.Questions) != 2 || len(local.Replies) != 2 || !strings.Contains(local.Replies[0], "100 dollars") {
		t.Errorf("questions %q replies %q", local.Questions, local.Replies)
	}
	if local.Reward == nil || *local.Reward != 1 || local.Recall == nil || *local.Recall != 1 || local.F1 == nil || *local.F1 != 1 {
		t.Errorf("reward %v recall %v f1 %v", local.Reward, local.Recall, local.F1)
	}
}

// TestStepAll: a GRPO group stepped with one StepBatch; a failed item
// leaves its episode as it was and the others go on.
func TestStepAll(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}})
	env := driver.Remote(srv.Client.Env)
	ctx := context.Background()
	eps, err := driver.Group(ctx, env, &pb.ResetRequest{Corpus: "tiny", TaskId: "top-a", IncludePrivileged: true}, 4)
	if err != nil {
		t.Fatal(err)
	}
	ask := &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: "What do you mean by top region?"}}}
	stop := &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}
	for _, err := range driver.StepAll(ctx, env, eps, []*pb.Action{stop, ask, ask, ask}) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !eps[0].Done() || eps[1].Done() || eps[1].Asked() != 1 {
		t.Fatalf("after one batch: %v %v %d", eps[0].Done(), eps[1].Done(), eps[1].Asked())
	}
	// The done episode cannot take another step; the others stop.
	tok := eps[0].Token()
	errs := driver.StepAll(ctx, env, eps, []*pb.Action{ask, stop, stop, stop})
	if status.Code(errs[0]) != codes.FailedPrecondition || errs[1] != nil || errs[2] != nil || errs[3] != nil {
		t.Fatalf("errors %v", errs)
	}
	if string(eps[0].Token()) != string(tok) {
		t.Error("a failed item changed its episode")
	}
	seeds := map[uint64]bool{}
	for i, ep := range eps {
		r := ep.Record(nil)
		seeds[r.Seed] = true
		wantReward := 1.0
		if i == 0 {
			wantReward = 0 // stopped without asking
		}
		if r.Status != "TERMINATED" || r.Reward == nil || *r.Reward != wantReward {
			t.Errorf("episode %d: %+v", i, r)
		}
	}
	if len(seeds) != 4 {
		t.Errorf("the group's seeds are not distinct: %v", seeds)
	}
	if errs := driver.StepAll(ctx, env, eps[:2], []*pb.Action{ask}); errs[0] == nil || errs[1] == nil {
		t.Error("mismatched episodes and actions were stepped")
	}
}

// TestShow: a spec-randomized policy sees the donor's view, request and
// terms; the record is the real task's.
func TestShow(t *testing.T) {
	e := inProcess(t)
	ctx := context.Background()
	ep, err := driver.Start(ctx, e, &pb.ResetRequest{Corpus: "tiny", TaskId: "big", IncludePrivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	donor, err := driver.Start(ctx, e, &pb.ResetRequest{Corpus: "tiny", TaskId: "strong", IncludePrivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	ep.Show(donor.Task(), donor.Terms())
	if !ep.Shown() || ep.Task().GetTaskId() != "strong" || ep.Turns()[0].GetText() != donor.Task().GetRequest() ||
		!reflect.DeepEqual(ep.Terms(), []string{"strong market"}) {
		t.Fatalf("shown %v task %s request %q terms %q", ep.Shown(), ep.Task().GetTaskId(), ep.Turns()[0].GetText(), ep.Terms())
	}
	if err := ep.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r := ep.Record(nil); r.TaskID != "big" || r.Counted != 2 {
		t.Errorf("record %+v", r)
	}
}

// TestRecordOfAnUnfinishedEpisode: an episode that did not end, or whose
// play failed, is recorded as RPC_FAILED with the reason.
func TestRecordOfAnUnfinishedEpisode(t *testing.T) {
	e := inProcess(t)
	ctx := context.Background()
	ep, err := driver.Start(ctx, e, &pb.ResetRequest{Corpus: "tiny", TaskId: "count", Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
	if err != nil {
		t.Fatal(err)
	}
	if !ep.NeedsSQL() {
		t.Error("the outcome reward with the client solver needs SQL")
	}
	if err := ep.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if ep.Done() || ep.Phase() != pb.Phase_PHASE_SOLVING {
		t.Fatalf("after STOP: done %v phase %s", ep.Done(), ep.Phase())
	}
	if r := ep.Record(nil); r.Status != "RPC_FAILED" || !strings.Contains(r.Error, "did not end") {
		t.Errorf("record %+v", r)
	}
	// In process, errors are env's own (the server maps them to statuses).
	var ee *env.Error
	if err := ep.Ask(ctx, "too late?"); !errors.As(err, &ee) || ee.Reason != env.ReasonWrongPhase {
		t.Errorf("ask after STOP: %v", err)
	}
	if err := ep.SubmitSQL(ctx, "SELECT COUNT(*) FROM sales"); err != nil {
		t.Fatal(err)
	}
	if r := ep.Record(nil); r.Status != "TERMINATED" || r.Success == nil || *r.Success != 1 {
		t.Errorf("record %+v", r)
	}
}

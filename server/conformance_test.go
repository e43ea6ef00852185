package server_test

// TestConformance runs the conformance suite (package internal/conformance)
// over gRPC: a complete server on a real TCP socket, serving the embedded
// demo corpus, played through driver.Env for every protocol (subtests
// PROTOCOL/grpc); env's TestConformance runs the same suite in process.
// The other tests of this file are the server's own end-to-end checks on
// the tiny corpus (exact budgets, rewards and listings, batches, replicas
// sharing a key), and the helpers the package's tests share.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/conformance"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

func TestConformance(t *testing.T) {
	s := testutil.StartServer(t, app.Config{}) // no corpus: the embedded demo
	foreign := testutil.StartServer(t, app.Config{})
	conformance.Run(t, conformance.Target{
		Name:    "grpc",
		Env:     driver.Remote(s.Client.Env),
		Foreign: driver.Remote(foreign.Client.Env), // another random key
		Limits:  s.App.Env,
		ErrorOf: conformance.GRPCError,
		Protocols: func(ctx context.Context, req *pb.ListProtocolsRequest) (*pb.ListProtocolsResponse, error) {
			return s.Client.Env.ListProtocols(ctx, req)
		},
	})
}

func startTiny(t *testing.T, edit ...func(cfg *app.Config)) (*testutil.Server, pb.EnvServiceClient) {
	t.Helper()
	cfg := app.Config{Corpora: []string{testutil.WriteTiny(t)}}
	for _, e := range edit {
		e(&cfg)
	}
	s := testutil.StartServer(t, cfg)
	return s, s.Client.Env
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ask(text string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: text}}}
}

func stop() *pb.Action { return &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}} }

func submit(sql string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: sql}}}
}

func fullQ(term string) string { return "Could you clarify what exactly you mean by " + term + "?" }

func seed(n uint64) *uint64 { return &n }

func reset(t *testing.T, c pb.EnvServiceClient, req *pb.ResetRequest) *pb.Episode {
	t.Helper()
	resp, err := c.Reset(ctxT(t), req)
	if err != nil {
		t.Fatalf("Reset(%v): %v", req, err)
	}
	if len(resp.Episodes) != 1 {
		t.Fatalf("Reset returned %d episodes, want 1", len(resp.Episodes))
	}
	return resp.Episodes[0]
}

func step(t *testing.T, c pb.EnvServiceClient, token []byte, a *pb.Action, priv bool) *pb.StepResponse {
	t.Helper()
	resp, err := c.Step(ctxT(t), &pb.StepRequest{Token: token, Action: a, IncludePrivileged: priv})
	if err != nil {
		t.Fatalf("Step(%v): %v", a, err)
	}
	return resp
}

// wantError checks a status code and its ErrorInfo reason.
func wantError(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	st := status.Convert(err)
	if err == nil || st.Code() != code {
		t.Fatalf("got error %v, want code %s", err, code)
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			if ei.Reason != reason || ei.Domain != "avtgym" {
				t.Fatalf("ErrorInfo = %s/%s, want avtgym/%s (message %q)", ei.Domain, ei.Reason, reason, st.Message())
			}
			return
		}
	}
	t.Fatalf("status %v carries no ErrorInfo", st)
}

func TestResetInvariants(t *testing.T) {
	_, c := startTiny(t)
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big", Seed: seed(7)})
	o := ep.Observation
	if o.Task.GetRequest() != "List the big sales of the recent year, sorted." || o.Task.GetDatabase().GetDialect() != "sqlite" {
		t.Errorf("task view = %v", o.Task)
	}
	if !strings.Contains(o.Task.GetDatabase().GetSchema(), "CREATE TABLE sales") {
		t.Errorf("schema text lacks the DDL: %q", o.Task.GetDatabase().GetSchema())
	}
	if len(o.Turns) != 1 || o.Turns[0].Role != pb.Role_ROLE_ENVIRONMENT || o.Turns[0].Kind != pb.TurnKind_TURN_KIND_REQUEST {
		t.Errorf("reset turns = %v, want one environment request turn", o.Turns)
	}
	// m = 2 counted ambiguities (the non-critical one does not count), C = 2.
	if o.QuestionBudget != 4 || o.QuestionsRemaining != 4 || o.Phase != pb.Phase_PHASE_ASKING {
		t.Errorf("budget %d remaining %d phase %s, want 4 4 ASKING", o.QuestionBudget, o.QuestionsRemaining, o.Phase)
	}
	if ep.Seed != 7 || ep.Privileged != nil || len(ep.Token) == 0 {
		t.Errorf("seed %d privileged %v token %d bytes", ep.Seed, ep.Privileged, len(ep.Token))
	}

	// Options change the budget; the control has budget 0 by default.
	ep = reset(t, c, &pb.ResetRequest{TaskId: "big", Options: &pb.EpisodeOptions{ExtraQuestions: proto.Int32(0)}})
	if ep.Observation.QuestionBudget != 2 {
		t.Errorf("budget with C=0 is %d, want 2", ep.Observation.QuestionBudget)
	}
	ep = reset(t, c, &pb.ResetRequest{TaskId: "count"})
	if ep.Observation.QuestionBudget != 0 {
		t.Errorf("control budget is %d, want 0", ep.Observation.QuestionBudget)
	}

	// A seeded draw is reproducible and respects the split.
	for i := range 10 {
		a := reset(t, c, &pb.ResetRequest{Split: "dev", Seed: seed(uint64(i))})
		b := reset(t, c, &pb.ResetRequest{Split: "dev", Seed: seed(uint64(i))})
		if a.Observation.Task.TaskId != b.Observation.Task.TaskId || a.Observation.Task.Split != "dev" {
			t.Fatalf("seed %d drew %s then %s (split %s)", i, a.Observation.Task.TaskId, b.Observation.Task.TaskId, a.Observation.Task.Split)
		}
	}
}

func TestGroupReset(t *testing.T) {
	_, c := startTiny(t)
	resp, err := c.Reset(ctxT(t), &pb.ResetRequest{Split: "train", Seed: seed(100), GroupSize: 16, IncludePrivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Episodes) != 16 {
		t.Fatalf("%d episodes, want 16", len(resp.Episodes))
	}
	task := resp.Episodes[0].Observation.Task.TaskId
	interp := resp.Episodes[0].Privileged.Interpretation
	for i, ep := range resp.Episodes {
		if ep.Observation.Task.TaskId != task || ep.Privileged.Interpretation != interp {
			t.Errorf("episode %d is on %s/%s, want the group's %s/%s", i, ep.Observation.Task.TaskId, ep.Privileged.Interpretation, task, interp)
		}
		if ep.Seed != 100+uint64(i) || ep.GroupIndex != int32(i) {
			t.Errorf("episode %d: seed %d index %d", i, ep.Seed, ep.GroupIndex)
		}
	}
	_, err = c.Reset(ctxT(t), &pb.ResetRequest{GroupSize: 5000})
	wantError(t, err, codes.InvalidArgument, "INVALID_OPTION")
}

func TestAskCreditsAndReward(t *testing.T) {
	_, c := startTiny(t)
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big"})
	r1 := step(t, c, ep.Token, ask(fullQ("big sales")), true)
	if got := r1.Observation.Turns; len(got) != 2 || got[0].Role != pb.Role_ROLE_POLICY || got[1].Role != pb.Role_ROLE_ORACLE || got[1].Kind != pb.TurnKind_TURN_KIND_REPLY || got[1].Text != "Sales of 100 dollars or more." {
		t.Fatalf("turns = %v", got)
	}
	if cr := r1.Privileged.GetCredits(); len(cr) != 1 || cr[0].Term != "big sales" || !cr[0].Counted {
		t.Fatalf("credits = %v", cr)
	}
	if r1.Done || r1.Reward != nil || r1.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || r1.Observation.QuestionsRemaining != 3 {
		t.Fatalf("after one ask: done %v reward %v status %s remaining %d", r1.Done, r1.Reward, r1.Status, r1.Observation.QuestionsRemaining)
	}
	// A generic question is refused and credits nothing.
	r2 := step(t, c, r1.Token, ask("Could you clarify what you want?"), true)
	if got := r2.Observation.Turns; len(r2.Privileged.GetCredits()) != 0 || len(got) != 2 || got[1].Role != pb.Role_ROLE_ORACLE || got[1].Kind != pb.TurnKind_TURN_KIND_REFUSAL || got[1].Text == "" {
		t.Fatalf("generic question: credits %v turns %v, want a REFUSAL turn", r2.Privileged.GetCredits(), got)
	}
	r3 := step(t, c, r2.Token, stop(), true)
	if !r3.Done || r3.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
		t.Fatalf("stop: done %v status %s", r3.Done, r3.Status)
	}
	// Precision 1/2, recall 1/2, F1 1/2.
	want := map[string]float64{"question_f1": 0.5, "precision": 0.5, "recall": 0.5}
	if r3.Reward.Value != 0.5 || !equalMaps(r3.Reward.Components, want) {
		t.Fatalf("reward = %v, want 0.5 with %v", r3.Reward, want)
	}
	if ec := r3.Privileged.GetEpisodeCredits(); len(ec) != 1 || ec[0].Term != "big sales" {
		t.Fatalf("episode credits = %v", ec)
	}
}

func equalMaps(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestZeroAmbiguityControl(t *testing.T) {
	_, c := startTiny(t)
	ep := reset(t, c, &pb.ResetRequest{TaskId: "count"})
	r := step(t, c, ep.Token, stop(), false)
	if !r.Done || r.Reward.Value != 1 {
		t.Fatalf("stop on a control: %v", r)
	}
	if _, has := r.Reward.Components["recall"]; has {
		t.Errorf("recall is defined on a control: %v", r.Reward.Components)
	}
	if _, has := r.Reward.Components["precision"]; has {
		t.Errorf("precision is defined without questions: %v", r.Reward.Components)
	}
	r = step(t, c, ep.Token, ask("How many rows?"), false)
	if !r.Done || r.Status != pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED || r.Reward.Value != 0 {
		t.Fatalf("ask on a control with budget 0: done %v status %s reward %v", r.Done, r.Status, r.Reward)
	}
	// With a budget of 1 the question is answered (with the refusal) and the reward is still 0.
	ep = reset(t, c, &pb.ResetRequest{TaskId: "count", Options: &pb.EpisodeOptions{ZeroAmbiguityBudget: proto.Int32(1)}})
	r = step(t, c, ep.Token, ask("How many rows?"), false)
	if r.Done || len(r.Observation.Turns) != 2 {
		t.Fatalf("ask within a budget of 1: %v", r)
	}
	r = step(t, c, r.Token, stop(), false)
	if r.Reward.Value != 0 || r.Reward.Components["precision"] != 0 {
		t.Fatalf("control with one question: reward %v", r.Reward)
	}
}

func TestPhaseOrder(t *testing.T) {
	_, c := startTiny(t)
	outcome := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}
	ep := reset(t, c, &pb.ResetRequest{TaskId: "top-a", Options: outcome})
	r := step(t, c, ep.Token, stop(), false)
	if r.Done || r.Observation.Phase != pb.Phase_PHASE_SOLVING {
		t.Fatalf("stop with the outcome reward and the client solver: done %v phase %s", r.Done, r.Observation.Phase)
	}
	solving := r.Token
	_, err := c.Step(ctxT(t), &pb.StepRequest{Token: solving, Action: ask("more?")})
	wantError(t, err, codes.FailedPrecondition, "WRONG_PHASE")
	_, err = c.Step(ctxT(t), &pb.StepRequest{Token: solving, Action: stop()})
	wantError(t, err, codes.FailedPrecondition, "WRONG_PHASE")
	// The token stays valid after a wrong-phase error.
	r = step(t, c, solving, submit("SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1"), true)
	if !r.Done || r.Reward.Value != 1 || r.Reward.Components["outcome"] != 1 || r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
		t.Fatalf("correct submission: %v", r)
	}
	_, err = c.Step(ctxT(t), &pb.StepRequest{Token: r.Token, Action: submit("SELECT 1")})
	wantError(t, err, codes.FailedPrecondition, "EPISODE_DONE")

	// submit_sql while asking is STOP followed by the submission.
	r = step(t, c, ep.Token, submit("SELECT 'East'"), false)
	if !r.Done || r.Reward.Value != 1 {
		t.Fatalf("submit while asking: %v", r)
	}
	// With the question-F1 reward, a submission still reports its outcome as a component.
	ep = reset(t, c, &pb.ResetRequest{TaskId: "top-a"})
	r = step(t, c, ep.Token, submit("SELECT 'West'"), false)
	if !r.Done || r.Reward.Type != pb.RewardType_REWARD_TYPE_QUESTION_F1 || r.Reward.Components["outcome"] != 0 || r.Reward.Value != 0 {
		t.Fatalf("question-F1 episode with a wrong submission: %v", r.Reward)
	}
	_, err = c.Step(ctxT(t), &pb.StepRequest{Token: ep.Token})
	wantError(t, err, codes.InvalidArgument, "INVALID_ACTION")
	// A blank question is the policy's fault, scored: refused, and counted.
	r = step(t, c, ep.Token, ask("  "), false)
	if r.Done || r.Observation.QuestionsAsked != 1 || len(r.Observation.Turns) != 2 || r.Observation.Turns[1].Kind != pb.TurnKind_TURN_KIND_REFUSAL || !strings.HasPrefix(r.Observation.Turns[1].Text, "I can't answer that") {
		t.Fatalf("a blank question: %v", r)
	}
}

func TestBadSQLIsAFailedSolution(t *testing.T) {
	_, c := startTiny(t, func(cfg *app.Config) {
		cfg.Limits = sqlexec.Limits{Timeout: 300 * time.Millisecond, MaxRows: 5, MaxBytes: 1 << 20}
	})
	outcome := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}
	cases := []struct {
		name, sql, feedback string
	}{
		{"unparsable", "SELEC region FROM sales", "syntax"},
		{"unknown column", "SELECT nope FROM sales", "nope"},
		{"delete", "DELETE FROM sales", "denied"},
		{"update", "UPDATE sales SET amount = 0", "denied"},
		{"create", "CREATE TABLE x (a)", "denied"},
		{"attach", "ATTACH DATABASE 'file:/tmp/avtgym-attach-test.db' AS x", "denied"},
		{"runaway", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c", "time"},
		{"too many rows", "SELECT * FROM sales", "rows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ep := reset(t, c, &pb.ResetRequest{TaskId: "count", Options: outcome})
			r := step(t, c, ep.Token, submit(tc.sql), false)
			if !r.Done || r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.Reward.Value != 0 {
				t.Fatalf("done %v status %s reward %v", r.Done, r.Status, r.Reward)
			}
			var fb string
			for _, turn := range r.Observation.Turns {
				if turn.Kind == pb.TurnKind_TURN_KIND_FEEDBACK {
					fb = turn.Text
				}
			}
			if !strings.Contains(strings.ToLower(fb), tc.feedback) {
				t.Fatalf("feedback %q does not mention %q", fb, tc.feedback)
			}
		})
	}
	// The server still serves, and the database is unchanged.
	ep := reset(t, c, &pb.ResetRequest{TaskId: "count", Options: outcome})
	r := step(t, c, ep.Token, submit("SELECT COUNT(*) FROM sales"), false)
	if r.Reward.Value != 1 {
		t.Fatalf("after the bad submissions the reference no longer matches: %v", r)
	}
	if _, err := os.Stat("/tmp/avtgym-attach-test.db"); err == nil {
		t.Error("ATTACH created a file")
	}
}

func TestLookupSolver(t *testing.T) {
	_, c := startTiny(t)
	lookup := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LOOKUP}
	for _, id := range []string{"top-a", "top-b"} {
		for s := range uint64(8) {
			ep := reset(t, c, &pb.ResetRequest{TaskId: id, Seed: seed(s), Options: lookup})
			r := step(t, c, ep.Token, ask(fullQ("top region")), false)
			r = step(t, c, r.Token, stop(), true)
			if !r.Done || r.Reward.Value != 1 {
				t.Fatalf("%s seed %d: full disambiguation then lookup failed: %v", id, s, r)
			}
			if r.Privileged.SolverSql == "" {
				t.Fatalf("privileged solver SQL missing")
			}
			for _, turn := range r.Observation.Turns {
				if strings.Contains(turn.Text, "GROUP BY") {
					t.Fatalf("the solver's SQL leaked into the observation: %v", turn)
				}
			}
		}
	}
	// Without asking, the lookup solver guesses: over seeds both outcomes occur.
	seen := map[float64]int{}
	for s := range uint64(40) {
		ep := reset(t, c, &pb.ResetRequest{TaskId: "top-a", Seed: seed(s), Options: lookup})
		r := step(t, c, ep.Token, stop(), false)
		seen[r.Reward.Value]++
	}
	if seen[0] < 8 || seen[1] < 8 {
		t.Fatalf("no-question lookup outcomes over 40 seeds = %v, want a mix near 20/20", seen)
	}
}

func TestTokens(t *testing.T) {
	s, c := startTiny(t)
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big"})
	tamper := func(f func([]byte) []byte) []byte { return f(bytes.Clone(ep.Token)) }
	cases := []struct {
		name   string
		token  []byte
		reason string
	}{
		{"flipped ciphertext byte", tamper(func(b []byte) []byte { b[len(b)/2] ^= 1; return b }), "TOKEN_TAMPERED"},
		{"flipped last byte", tamper(func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }), "TOKEN_TAMPERED"},
		{"truncated", tamper(func(b []byte) []byte { return b[:len(b)-10] }), "TOKEN_TAMPERED"},
		{"too short", tamper(func(b []byte) []byte { return b[:8] }), "TOKEN_MALFORMED"},
		{"wrong version", tamper(func(b []byte) []byte { b[0] = 9; return b }), "TOKEN_MALFORMED"},
		{"foreign key id", tamper(func(b []byte) []byte { b[1] ^= 0xff; return b }), "TOKEN_FOREIGN"},
		{"empty", nil, "TOKEN_MALFORMED"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Step(ctxT(t), &pb.StepRequest{Token: tc.token, Action: stop()})
			wantError(t, err, codes.InvalidArgument, tc.reason)
		})
	}
	// A token of another server (another key) is foreign.
	other, oc := startTiny(t)
	_ = other
	oep := reset(t, oc, &pb.ResetRequest{TaskId: "big"})
	_, err := c.Step(ctxT(t), &pb.StepRequest{Token: oep.Token, Action: stop()})
	wantError(t, err, codes.InvalidArgument, "TOKEN_FOREIGN")
	// Tokens are padded to size buckets (a 9-byte header and a 12-byte
	// nonce before the sealed part).
	if n := len(ep.Token) - 21; n%64 != 0 {
		t.Errorf("sealed part of the token is %d bytes, not a multiple of 64", n)
	}
	// The server still serves after all of that.
	if _, err := s.Client.Health.Check(ctxT(t), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
}

func TestSharedKeyAndRecordChange(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := testutil.WriteTiny(t)
	a := testutil.StartServer(t, app.Config{Corpora: []string{dir}, TokenKeyFile: keyFile})
	b := testutil.StartServer(t, app.Config{Corpora: []string{dir}, TokenKeyFile: keyFile})
	ep := reset(t, a.Client.Env, &pb.ResetRequest{TaskId: "big"})
	// A replica with the same key and corpus continues the episode.
	ra := step(t, a.Client.Env, ep.Token, ask(fullQ("big sales")), false)
	rb := step(t, b.Client.Env, ep.Token, ask(fullQ("big sales")), false)
	if !proto.Equal(ra.Observation, rb.Observation) {
		t.Fatalf("replicas disagree: %v vs %v", ra.Observation, rb.Observation)
	}
	// A server whose record changed rejects the old token.
	changed := testutil.WriteTiny(t, func(f map[string]string) {
		f["records.jsonl"] = strings.Replace(f["records.jsonl"], "Sales of 100 dollars or more.", "Sales of 150 dollars or more.", 1)
	})
	cs := testutil.StartServer(t, app.Config{Corpora: []string{changed}, TokenKeyFile: keyFile})
	_, err := cs.Client.Env.Step(ctxT(t), &pb.StepRequest{Token: ep.Token, Action: stop()})
	wantError(t, err, codes.FailedPrecondition, "RECORD_CHANGED")
	// The unchanged records of that corpus still accept their tokens.
	ep2 := reset(t, a.Client.Env, &pb.ResetRequest{TaskId: "count"})
	step(t, cs.Client.Env, ep2.Token, stop(), false)
}

func TestForkAndIdempotentRetry(t *testing.T) {
	_, c := startTiny(t)
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big", IncludePrivileged: true})
	a1 := step(t, c, ep.Token, ask(fullQ("big sales")), true)
	a2 := step(t, c, ep.Token, ask(fullQ("big sales")), true)
	if !proto.Equal(a1.Observation, a2.Observation) || !proto.Equal(a1.Privileged, a2.Privileged) || a1.Status != a2.Status {
		t.Fatalf("retry differs:\n%v\n%v", a1, a2)
	}
	if bytes.Equal(a1.Token, a2.Token) {
		t.Error("two seals gave the same bytes; nonces must be fresh")
	}
	// Both tokens continue identically.
	e1 := step(t, c, a1.Token, stop(), false)
	e2 := step(t, c, a2.Token, stop(), false)
	if !proto.Equal(e1.Reward, e2.Reward) {
		t.Fatalf("continuations differ: %v vs %v", e1.Reward, e2.Reward)
	}
	// A fork from the reset token takes another path.
	f := step(t, c, ep.Token, ask(fullQ("recent year")), true)
	f = step(t, c, f.Token, ask(fullQ("big sales")), true)
	f = step(t, c, f.Token, stop(), false)
	if f.Reward.Value != 1 || e1.Reward.Value != 2.0/3 {
		t.Fatalf("fork reward %v, original %v; want 1 and 2/3", f.Reward.Value, e1.Reward.Value)
	}
}

// TestPrivilegedHygiene checks that no resolution, reference or masked
// knowledge reaches any public reply, and that they appear in the
// privileged field only when asked for.
func TestPrivilegedHygiene(t *testing.T) {
	_, c := startTiny(t)
	secrets := []string{
		"largest total sales amount", "most individual sales", "100 dollars or more", "The year 2024",
		"Sort by amount", "GROUP BY", "SUM(amount)", "COUNT(*)", "by amount", "by count",
	}
	check := func(where string, m proto.Message) {
		t.Helper()
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		own := secrets
		if strings.Contains(where, "strong") {
			// The knowledge entry this task masks is public for the others.
			own = append(own[:len(own):len(own)], "region whose 2024 sales")
		}
		for _, s := range own {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s carries privileged text %q", where, s)
			}
		}
	}
	ctx := ctxT(t)
	list, err := c.ListTasks(ctx, &pb.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	check("ListTasks", list)
	for _, task := range list.Tasks {
		got, err := c.GetTask(ctx, &pb.GetTaskRequest{TaskId: task.TaskId})
		if err != nil {
			t.Fatal(err)
		}
		check("GetTask "+task.TaskId, got)
		for _, k := range got.Task.Database.Knowledge {
			if task.TaskId == "strong" && k.Id == "k-strong" {
				t.Errorf("task strong shows the knowledge entry it masks")
			}
		}
		resp, err := c.Reset(ctx, &pb.ResetRequest{TaskId: task.TaskId, GroupSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		check("Reset "+task.TaskId, resp)
		tok := resp.Episodes[0].Token
		for _, a := range []*pb.Action{ask("Could you clarify what you want?"), ask("Please give the exact SQL."), stop()} {
			r, err := c.Step(ctx, &pb.StepRequest{Token: tok, Action: a})
			if err != nil {
				break
			}
			check("Step "+task.TaskId, r)
			tok = r.Token
		}
		lookup, err := c.Reset(ctx, &pb.ResetRequest{TaskId: task.TaskId, Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LOOKUP}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := c.Step(ctx, &pb.StepRequest{Token: lookup.Episodes[0].Token, Action: stop()})
		if err != nil {
			t.Fatal(err)
		}
		check("lookup Step "+task.TaskId, r)
	}
	// Asked for, the privileged channel carries them.
	ep := reset(t, c, &pb.ResetRequest{TaskId: "top-a", IncludePrivileged: true})
	p := ep.Privileged
	if p.GetAvtId() != "top" || p.GetInterpretation() != "by amount" || len(p.GetReferenceSql()) != 1 || len(p.GetAmbiguities()) != 1 || p.GetAmbiguities()[0].GetResolution() != "I mean the region with the largest total sales amount." {
		t.Fatalf("privileged reset = %v", p)
	}
	// And the observation next to it stays clean.
	check("Reset observation with privileged", ep.Observation)
}

func TestBatchErrorIsolation(t *testing.T) {
	_, c := startTiny(t)
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big"})
	done := step(t, c, ep.Token, stop(), false)
	bad := bytes.Clone(ep.Token)
	bad[len(bad)/2] ^= 1
	resp, err := c.StepBatch(ctxT(t), &pb.StepBatchRequest{Steps: []*pb.StepRequest{
		{Token: ep.Token, Action: ask(fullQ("big sales"))},
		{Token: bad, Action: stop()},
		{Token: done.Token, Action: stop()},
		{Token: ep.Token},
		{Token: ep.Token, Action: stop()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []codes.Code{codes.OK, codes.InvalidArgument, codes.FailedPrecondition, codes.InvalidArgument, codes.OK}
	if len(resp.Results) != len(want) {
		t.Fatalf("%d results, want %d", len(resp.Results), len(want))
	}
	for i, r := range resp.Results {
		if got := codes.Code(r.Status.GetCode()); got != want[i] {
			t.Errorf("item %d: code %s (%s), want %s", i, got, r.Status.GetMessage(), want[i])
		}
		if (r.Response != nil) != (want[i] == codes.OK) {
			t.Errorf("item %d: response presence %v with status %s", i, r.Response != nil, codes.Code(r.Status.GetCode()))
		}
	}
	if st := status.FromProto(resp.Results[1].Status); len(st.Details()) == 0 {
		t.Errorf("batch item status carries no details")
	}
	if !resp.Results[4].Response.Done {
		t.Errorf("item 4 (stop) not done")
	}
	rb, err := c.ResetBatch(ctxT(t), &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{
		{TaskId: "big"}, {TaskId: "no-such-task"}, {Corpus: "nope"}, {TaskId: "count", GroupSize: 3},
	}})
	if err != nil {
		t.Fatal(err)
	}
	wantR := []codes.Code{codes.OK, codes.NotFound, codes.NotFound, codes.OK}
	for i, r := range rb.Results {
		if got := codes.Code(r.Status.GetCode()); got != wantR[i] {
			t.Errorf("reset item %d: %s (%s), want %s", i, got, r.Status.GetMessage(), wantR[i])
		}
	}
	if n := len(rb.Results[3].Response.GetEpisodes()); n != 3 {
		t.Errorf("group reset in a batch gave %d episodes", n)
	}
}

func TestUnknownNames(t *testing.T) {
	_, c := startTiny(t)
	_, err := c.Reset(ctxT(t), &pb.ResetRequest{TaskId: "no-such-task"})
	wantError(t, err, codes.NotFound, "UNKNOWN_TASK")
	_, err = c.Reset(ctxT(t), &pb.ResetRequest{Corpus: "nope"})
	wantError(t, err, codes.NotFound, "UNKNOWN_CORPUS")
	_, err = c.Reset(ctxT(t), &pb.ResetRequest{Split: "nope"})
	wantError(t, err, codes.NotFound, "NO_TASKS")
	_, err = c.GetTask(ctxT(t), &pb.GetTaskRequest{TaskId: "nope"})
	wantError(t, err, codes.NotFound, "UNKNOWN_TASK")
	_, err = c.Reset(ctxT(t), &pb.ResetRequest{Options: &pb.EpisodeOptions{ExtraQuestions: proto.Int32(-1)}})
	wantError(t, err, codes.InvalidArgument, "INVALID_OPTION")
	_, err = c.Reset(ctxT(t), &pb.ResetRequest{Options: &pb.EpisodeOptions{Oracle: pb.OracleType(99)}})
	wantError(t, err, codes.InvalidArgument, "INVALID_OPTION")
	_, err = c.ListTasks(ctxT(t), &pb.ListTasksRequest{PageToken: "garbage"})
	wantError(t, err, codes.InvalidArgument, "INVALID_PAGE_TOKEN")
}

func TestListingAndHealth(t *testing.T) {
	s, c := startTiny(t)
	ctx := ctxT(t)
	var ids []string
	page := ""
	for {
		r, err := c.ListTasks(ctx, &pb.ListTasksRequest{PageSize: 2, PageToken: page})
		if err != nil {
			t.Fatal(err)
		}
		if r.TotalSize != 5 {
			t.Fatalf("total %d, want 5", r.TotalSize)
		}
		for _, task := range r.Tasks {
			ids = append(ids, task.TaskId)
		}
		if page = r.NextPageToken; page == "" {
			break
		}
	}
	if strings.Join(ids, ",") != "top-a,top-b,big,strong,count" {
		t.Fatalf("paged ids = %v", ids)
	}
	r, err := c.ListTasks(ctx, &pb.ListTasksRequest{Split: "dev"})
	if err != nil || len(r.Tasks) != 3 {
		t.Fatalf("dev split: %v %v", r, err)
	}
	cs, err := c.ListCorpora(ctx, &pb.ListCorporaRequest{})
	if err != nil || len(cs.Corpora) != 1 || cs.Corpora[0].Name != "tiny" || cs.Corpora[0].AvtCount != 4 || cs.Corpora[0].TaskCount != 5 {
		t.Fatalf("corpora = %v, %v", cs, err)
	}
	if h := cs.Corpora[0].ContentHash; len(h) != 64 || h != s.App.Env.CorpusHash("tiny") || cs.ServerVersion == "" {
		t.Fatalf("content hash %q (env says %q), server version %q", h, s.App.Env.CorpusHash("tiny"), cs.ServerVersion)
	}
	for _, svc := range []string{"", "avtgym.v1.EnvService"} {
		h, err := s.Client.Health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health(%q) = %v, %v", svc, h, err)
		}
	}
}

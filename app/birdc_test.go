package app_test

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"avtgym/app"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

// followUpRecords are two-sub-task records on the tiny corpus (PROTOCOL.md
// §8): a Query task with a read-only follow-up, and a Management task whose
// follow-up reads the view phase 1 creates.
const followUpRecords = `{"id":"fu-query","db":"mini","request":"List the big sales of the recent year.","ambiguities":[{"term":"big sales","kind":"critical","resolution":"Sales of 100 dollars or more."},{"term":"recent year","kind":"critical","resolution":"The year 2024."}],"reference":{"sql":"SELECT id FROM sales WHERE amount >= 100 AND year = 2024 ORDER BY id"},"follow_up":{"request":"Now give the total amount of those sales.","reference":{"sql":"SELECT SUM(amount) FROM sales WHERE amount >= 100 AND year = 2024"}}}
{"id":"fu-view","category":"Management","db":"mini","request":"Make a view north_big of the big North sales.","ambiguities":[{"term":"big","kind":"critical","resolution":"110 dollars or more."}],"reference":{"sql":"CREATE VIEW north_big AS SELECT id, amount FROM sales WHERE region = 'North' AND amount >= 110","checks":["SELECT id, amount FROM north_big ORDER BY id"]},"follow_up":{"request":"How many sales does north_big hold?","reference":{"sql":"SELECT COUNT(*) FROM north_big"}}}
{"id":"fu-strong","db":"mini","request":"Which regions are a strong market?","ambiguities":[{"term":"strong market","kind":"knowledge","resolution":"A strong market is a region whose 2024 sales total more than 200 dollars.","knowledge_id":"k-strong"}],"reference":{"sql":"SELECT region FROM sales WHERE year = 2024 GROUP BY region HAVING SUM(amount) > 200 ORDER BY region"},"follow_up":{"request":"And how many 2024 sales did those regions have?","reference":{"sql":"SELECT COUNT(*) FROM sales WHERE year = 2024 AND region IN (SELECT region FROM sales WHERE year = 2024 GROUP BY region HAVING SUM(amount) > 200)"}}}
`

const (
	fuQueryRef   = "SELECT id FROM sales WHERE amount >= 100 AND year = 2024 ORDER BY id"
	fuQueryOther = "SELECT id FROM sales WHERE amount >= 20 AND year = 2024 ORDER BY id"
	fuQueryFU    = "SELECT SUM(amount) FROM sales WHERE amount >= 100 AND year = 2024"
	fuFollowUp   = "Now give the total amount of those sales."
)

// birdC is a BIRD_C test harness on the tiny corpus with follow-ups.
type birdC struct {
	t   *testing.T
	env pb.EnvServiceClient
}

func startBirdC(t *testing.T) *birdC {
	t.Helper()
	dir := testutil.WriteTiny(t, func(files map[string]string) { files["records.jsonl"] += followUpRecords })
	s := testutil.StartServer(t, app.Config{Corpora: []string{dir}})
	return &birdC{t: t, env: s.Client.Env}
}

// resetWith starts a BIRD_C episode on task with the given patience (-1:
// the default), privileged data included, with opts (BirdVariant, FollowUpState) as the base of
// the episode's options; protocol and patience are set over them.
func (b *birdC) resetWith(task string, patience int32, opts *pb.EpisodeOptions) (*pb.Episode, error) {
	opts = proto.Clone(opts).(*pb.EpisodeOptions)
	opts.Protocol = pb.Protocol_PROTOCOL_BIRD_C
	if patience >= 0 {
		opts.Patience = proto.Int32(patience)
	}
	r, err := b.env.Reset(context.Background(), &pb.ResetRequest{TaskId: task, Options: opts, IncludePrivileged: true})
	if err != nil {
		return nil, err
	}
	return r.Episodes[0], nil
}

func (b *birdC) mustReset(task string, patience int32) *pb.Episode {
	b.t.Helper()
	return b.mustResetWith(task, patience, &pb.EpisodeOptions{})
}

func (b *birdC) mustResetWith(task string, patience int32, opts *pb.EpisodeOptions) *pb.Episode {
	b.t.Helper()
	e, err := b.resetWith(task, patience, opts)
	if err != nil {
		b.t.Fatalf("reset %s (%v): %v", task, opts, err)
	}
	return e
}

// The BIRD_C variants' options and debug-retry texts (env/birdc.go; the
// ORIGINAL texts are bird_interact_conv's infer_api_system.py "debug"
// phase with eval_bird_interact_batch.py's error_msg, the ADK's are
// BIRD-Interact-ADK's orchestrator/cinteract.py).
var (
	adkOpts = &pb.EpisodeOptions{BirdVariant: pb.BirdVariant_BIRD_VARIANT_ADK}
)

const (
	retryUnsure       = "Are you sure about your SQL? You have one more chance to update your SQL now."
	retryExecErr      = "Your SQL is not executable and raises the following error: [exec_err_flg] - Execution_Error: True"
	adkRetryUnsure    = "Your SQL is not correct. You have one more chance. Please fix and call submit_sql."
	adkRetryErrPrefix = "Your SQL is not executable: Error executing submitted SQL: "
	adkRetryErrSuffix = "\nPlease fix and call submit_sql."
)

// hasOracleTurn reports whether a response holds an oracle's answer.
func hasOracleTurn(r *pb.StepResponse) bool {
	for _, t := range r.GetObservation().GetTurns() {
		if t.GetRole() == pb.Role_ROLE_ORACLE {
			return true
		}
	}
	return false
}

func (b *birdC) step(tok []byte, a *pb.Action) *pb.StepResponse {
	b.t.Helper()
	r, err := b.env.Step(context.Background(), &pb.StepRequest{Token: tok, Action: a, IncludePrivileged: true})
	if err != nil {
		b.t.Fatalf("step %v: %v", a, err)
	}
	return r
}

func ask(q string) *pb.Action { return &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: q}}} }
func submit(sql string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: sql}}}
}
func unparsed(text string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Unparsed_{Unparsed: &pb.Action_Unparsed{Text: text}}}
}

// turnsOf returns the kinds and texts of a response's turns.
func lastTurn(r *pb.StepResponse) *pb.Turn {
	ts := r.GetObservation().GetTurns()
	if len(ts) == 0 {
		return nil
	}
	return ts[len(ts)-1]
}

// TestBirdCTurnLimits: m + patience turns for each patience level; each
// question is a turn; on the last turn only SQL is accepted. A question
// there is a failed submission (the BIRD_VARIANT_ORIGINAL rule, the
// default: bird_interact_conv's infer_api_system.py pre-fills "<t>" on the
// final turn, and wrap_up_sql.py's extract_system_response turns output
// without a ```postgresql block into "ERROR!", which fails to run): the
// turn is spent, no oracle answers, and the debug retry follows with the
// [exec_err_flg] message. A stop there still ends the sub-task unsolved
// (TRUNCATED, reward 0).
func TestBirdCTurnLimits(t *testing.T) {
	b := startBirdC(t)
	for _, patience := range []int32{0, 3, 5, 7} {
		e := b.mustReset("fu-query", patience)
		turns := int64(2 + patience) // m = 2 counted ambiguities
		o := e.Observation
		if o.Protocol != pb.Protocol_PROTOCOL_BIRD_C || o.Subtask != 1 || o.Budget.GetUnit() != pb.BudgetUnit_BUDGET_UNIT_TURNS ||
			o.Budget.GetTotalMilli() != turns*1000 || o.Budget.GetRemainingMilli() != turns*1000 || o.SqlRequired {
			t.Fatalf("patience %d: reset observation %v", patience, o)
		}
		tok := e.Token
		for i := range turns - 1 {
			r := b.step(tok, ask("What do you mean by big sales?"))
			if r.Done || r.Observation.Budget.GetUsedMilli() != (i+1)*1000 || lastTurn(r).GetRole() != pb.Role_ROLE_ORACLE {
				t.Fatalf("patience %d, question %d: %v", patience, i+1, r)
			}
			tok = r.Token
			if want := i+2 == turns; r.Observation.SqlRequired != want || (r.Observation.Phase == pb.Phase_PHASE_SOLVING) != want {
				t.Fatalf("patience %d after %d questions: sql_required %v, phase %s", patience, i+1, r.Observation.SqlRequired, r.Observation.Phase)
			}
		}
		b.playLastTurn(patience, tok, turns)
	}
}

// playLastTurn plays the last turn of TestBirdCTurnLimits' episode at token
// tok (turns turns, all but one spent on questions): a question, a stop
// and the reference, each from tok.
func (b *birdC) playLastTurn(patience int32, tok []byte, turns int64) {
	t := b.t
	t.Helper()
	// ORIGINAL: a question on the last turn is SQL that did not run.
	r := b.step(tok, ask("And the recent year?"))
	o := r.Observation
	if r.Done || r.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || hasOracleTurn(r) ||
		lastTurn(r).GetKind() != pb.TurnKind_TURN_KIND_FEEDBACK || lastTurn(r).GetText() != retryExecErr {
		t.Fatalf("patience %d: a question on the last turn: %v", patience, r)
	}
	if o.Budget.GetUsedMilli() != turns*1000 || !o.SqlRequired || o.QuestionsAsked != int32(turns-1) || o.Subtask != 1 {
		t.Fatalf("patience %d: after a question on the last turn (the turn spent, the question not counted): %v", patience, o)
	}
	// Its debug retry passes with the reference and releases the
	// follow-up; phase 1 scores as a retry (0.5 + 0.3).
	rr := b.step(r.Token, submit(fuQueryRef))
	if rr.Done || rr.Observation.Subtask != 2 || lastTurn(rr).GetText() != fuFollowUp {
		t.Fatalf("patience %d: the reference on the retry after a last-turn question: %v", patience, rr)
	}
	if f := b.step(rr.Token, submit(fuQueryFU)); !f.Done || f.Reward.GetValue() != 0.8 || f.Reward.GetComponents()["phase1"] != 0.5 {
		t.Errorf("patience %d: after a last-turn question, retry and follow-up: %v", patience, f.Reward)
	}
	// A stop on the last turn still ends the sub-task, truncated.
	s := b.step(tok, &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}})
	if !s.Done || s.Status != pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED || s.Reward.GetValue() != 0 {
		t.Fatalf("patience %d: a stop on the last turn: %v", patience, s)
	}
	if c := s.Reward.GetComponents(); len(c) != 1 || c["phase1"] != 0 {
		t.Errorf("patience %d: components %v, want phase1 = 0 only (the follow-up was never released)", patience, c)
	}
	// The same last turn with SQL is accepted.
	if r := b.step(tok, submit(fuQueryRef)); r.Done || r.Observation.Subtask != 2 {
		t.Errorf("patience %d: the reference on the last turn: %v", patience, r)
	}
}

// TestBirdCLastTurnQuestionADK: under BIRD_VARIANT_ADK a question on the
// last turn is a phase ended without a submission: no answer, the turn
// spent, and the ADK's orchestrator sends its "not correct" debug message
// (orchestrator/cinteract.py; its last submit message holds no
// [exec_err_flg]).
func TestBirdCLastTurnQuestionADK(t *testing.T) {
	b := startBirdC(t)
	e := b.mustResetWith("fu-query", 0, adkOpts)
	r := b.step(e.Token, ask("What do you mean by big sales?"))
	r = b.step(r.Token, ask("And the recent year?"))
	if r.Done || hasOracleTurn(r) || lastTurn(r).GetText() != adkRetryUnsure || !r.Observation.SqlRequired || r.Observation.Budget.GetUsedMilli() != 2000 {
		t.Errorf("ADK: a question on the last turn: %v", r)
	}
}

// birdVariant is one BIRD_C variant as TestBirdCRewards plays it.
type birdVariant struct {
	name   string
	opts   *pb.EpisodeOptions
	unsure string // the debug retry's message for SQL that ran but failed
	sqlFU  bool   // sql_required after the release
}

// rewardPath is one path through both sub-tasks: each first try or after
// the debug retry, and the exact reward it earns.
type rewardPath struct {
	retry1, retry2 bool
	want, p1, p2   float64
}

// TestBirdCRewards plays each path through both sub-tasks: first try or
// after the debug retry, for each, under both variants; the rewards are
// exact and the same under both. A wrong (but executable) SQL gets the
// variant's "unsure" retry message: ORIGINAL's is bird_interact_conv's
// infer_api_system.py "debug" phase text, ADK's orchestrator/cinteract.py's.
// Under ORIGINAL the follow-up's release leaves only SQL (its one SQL turn:
// sql_required, no questions); under ADK questions stay allowed.
func TestBirdCRewards(t *testing.T) {
	b := startBirdC(t)
	for _, v := range []birdVariant{
		{"default", &pb.EpisodeOptions{}, retryUnsure, true},
		{"ORIGINAL", &pb.EpisodeOptions{BirdVariant: pb.BirdVariant_BIRD_VARIANT_ORIGINAL}, retryUnsure, true},
		{"ADK", adkOpts, adkRetryUnsure, false},
	} {
		for _, c := range []rewardPath{
			{false, false, 1.0, 0.7, 0.3},
			{true, false, 0.8, 0.5, 0.3},
			{false, true, 0.9, 0.7, 0.2},
			{true, true, 0.7, 0.5, 0.2},
		} {
			b.playRewardPath(v, c)
		}
		b.followUpQuestion(v)
	}
}

// playRewardPath plays path c under variant v and checks its reward.
func (b *birdC) playRewardPath(v birdVariant, c rewardPath) {
	t := b.t
	t.Helper()
	e := b.mustResetWith("fu-query", -1, v.opts)
	tok := e.Token
	if c.retry1 {
		r := b.step(tok, submit(fuQueryOther))
		if r.Done || !r.Observation.SqlRequired || lastTurn(r).GetText() != v.unsure {
			t.Fatalf("%s: a wrong phase-1 SQL: %v", v.name, r)
		}
		tok = r.Token
	}
	r := b.step(tok, submit(fuQueryRef))
	if r.Done || r.Observation.Subtask != 2 || lastTurn(r).GetKind() != pb.TurnKind_TURN_KIND_REQUEST ||
		lastTurn(r).GetRole() != pb.Role_ROLE_ENVIRONMENT || lastTurn(r).GetText() != fuFollowUp {
		t.Fatalf("%s: phase 1 passed: %v", v.name, r)
	}
	if r.Observation.SqlRequired != v.sqlFU || (r.Observation.QuestionsRemaining == 0) != v.sqlFU {
		t.Errorf("%s: after the release sql_required %v, questions_remaining %d", v.name, r.Observation.SqlRequired, r.Observation.QuestionsRemaining)
	}
	if got := r.Privileged.GetFollowUpReferenceSql(); len(got) != 1 || got[0] != fuQueryFU {
		t.Errorf("%s: the release's privileged follow-up reference: %q", v.name, got)
	}
	tok = r.Token
	if c.retry2 {
		r = b.step(tok, submit("SELECT COUNT(*) FROM sales"))
		if r.Done || !r.Observation.SqlRequired || r.Observation.Subtask != 2 || lastTurn(r).GetText() != v.unsure {
			t.Fatalf("%s: a wrong phase-2 SQL: %v", v.name, r)
		}
		tok = r.Token
	}
	r = b.step(tok, submit(fuQueryFU))
	if !r.Done || r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.Reward.GetType() != pb.RewardType_REWARD_TYPE_BIRD_INTERACT {
		t.Fatalf("%s: phase 2 passed: %v", v.name, r)
	}
	comp := r.Reward.GetComponents()
	if r.Reward.GetValue() != c.want || comp["phase1"] != c.p1 || comp["phase2"] != c.p2 {
		t.Errorf("%s, retries %v/%v: reward %v %v, want %v (%v + %v)", v.name, c.retry1, c.retry2, r.Reward.GetValue(), comp, c.want, c.p1, c.p2)
	}
}

// followUpQuestion asks a question on the follow-up under variant v: under
// ORIGINAL it is a failed submission of the follow-up's one SQL turn (no
// answer, the [exec_err_flg] retry); under ADK the oracle answers. Either
// way a turn is spent.
func (b *birdC) followUpQuestion(v birdVariant) {
	t := b.t
	t.Helper()
	e := b.mustResetWith("fu-query", -1, v.opts)
	r := b.step(e.Token, submit(fuQueryRef))
	q := b.step(r.Token, ask("Do you mean the sum of the amounts?"))
	used := q.Observation.Budget.GetUsedMilli()
	if v.sqlFU {
		if q.Done || hasOracleTurn(q) || lastTurn(q).GetText() != retryExecErr || !q.Observation.SqlRequired || used != 2000 {
			t.Errorf("%s: a question on the follow-up's SQL turn: %v", v.name, q)
		}
	} else if q.Done || !hasOracleTurn(q) || q.Observation.SqlRequired || used != 2000 {
		t.Errorf("%s: a question on the follow-up: %v", v.name, q)
	}
}

// TestBirdCDebugRetry: for SQL that does not run, the retry's message is
// the variant's. ORIGINAL (the default) says only that it failed — the
// batch evaluation's error_msg, "[exec_err_flg] - Execution_Error: True"
// (bird_interact_conv's eval_bird_interact_batch.py: pred_err is a bool) —
// and never the database's error (ADK carries it: TestBirdCDebugRetryADK).
// The retry must be SQL (anything else ends the sub-task unsolved); it
// comes once per sub-task; it uses no turn.
func TestBirdCDebugRetry(t *testing.T) {
	b := startBirdC(t)
	e := b.mustReset("fu-query", 0) // 2 turns
	r := b.step(e.Token, submit("SELECT nope FROM sales"))
	msg := lastTurn(r).GetText()
	if r.Done || lastTurn(r).GetKind() != pb.TurnKind_TURN_KIND_FEEDBACK || lastTurn(r).GetRole() != pb.Role_ROLE_ENVIRONMENT || msg != retryExecErr {
		t.Fatalf("an execution error: %v", r)
	}
	// No environment turn names the database's error (column "nope").
	for _, tu := range r.Observation.GetTurns() {
		if tu.GetRole() != pb.Role_ROLE_POLICY && strings.Contains(tu.GetText(), "nope") {
			t.Errorf("ORIGINAL: a turn shows the database's error: %v", tu)
		}
	}
	if r.Observation.Budget.GetUsedMilli() != 1000 || !r.Observation.SqlRequired {
		t.Fatalf("after the first submission: %v", r.Observation)
	}
	retryTok := r.Token
	// The retry uses no turn: passing it leaves one turn of phase 1's two,
	// plus the follow-up's.
	r = b.step(retryTok, submit(fuQueryRef))
	if r.Observation.Subtask != 2 || r.Observation.Budget.GetUsedMilli() != 1000 || r.Observation.Budget.GetTotalMilli() != 3000 {
		t.Fatalf("the retry passed: %v", r.Observation)
	}
	// Anything but SQL during the retry ends the sub-task.
	for _, a := range []*pb.Action{ask("What do you mean by big sales?"), unparsed("hmm"), {Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}} {
		r := b.step(retryTok, a)
		if !r.Done || r.Reward.GetValue() != 0 || r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
			t.Errorf("%v during the retry: %v", a, r)
		}
	}
	// Once per sub-task: a second failure ends it.
	r = b.step(retryTok, submit(fuQueryOther))
	if !r.Done || r.Reward.GetValue() != 0 || len(r.Reward.GetComponents()) != 1 {
		t.Errorf("the retry failed too: %v", r)
	}
	// ORIGINAL shows no database error at any point: not when the retry
	// fails to run either.
	if r := b.step(retryTok, submit("SELECT nope2 FROM sales")); !r.Done || strings.Contains(lastTurn(r).GetText(), "nope2") {
		t.Errorf("ORIGINAL: the retry failed to run: %v", r)
	}
}

// TestBirdCDebugRetryADK: under BIRD_VARIANT_ADK the retry's message for
// SQL that does not run carries the database's error between the ADK's
// prefix and suffix (orchestrator/cinteract.py, from db_environment's
// submit message), and so does the message of a retry that fails to run.
func TestBirdCDebugRetryADK(t *testing.T) {
	b := startBirdC(t)
	a := b.mustResetWith("fu-query", 0, adkOpts)
	r := b.step(a.Token, submit("SELECT nope FROM sales"))
	msg := lastTurn(r).GetText()
	if r.Done || lastTurn(r).GetKind() != pb.TurnKind_TURN_KIND_FEEDBACK || !r.Observation.SqlRequired ||
		!strings.HasPrefix(msg, adkRetryErrPrefix) || !strings.HasSuffix(msg, adkRetryErrSuffix) || !strings.Contains(msg, "nope") {
		t.Errorf("ADK: an execution error: %v", r)
	}
	// ADK: a second failure that does not run names the error too.
	if f := b.step(r.Token, submit("SELECT nope2 FROM sales")); !f.Done || lastTurn(f).GetRole() != pb.Role_ROLE_ENVIRONMENT || !strings.Contains(lastTurn(f).GetText(), "nope2") {
		t.Errorf("ADK: the retry failed to run: %v", f)
	}
}

// TestBirdCFollowUpHidden: before the release the follow-up's request and
// reference appear nowhere — GetTask, ListTasks, reset and step
// observations, and the privileged channel.
func TestBirdCFollowUpHidden(t *testing.T) {
	b := startBirdC(t)
	ctx := context.Background()
	leaks := func(where string, m proto.Message) {
		t.Helper()
		s := m.(interface{ String() string }).String()
		for _, secret := range []string{fuFollowUp, "total amount", "SUM(amount)", "north_big hold"} {
			if strings.Contains(s, secret) {
				t.Errorf("%s shows %q before the release", where, secret)
			}
		}
	}
	g, err := b.env.GetTask(ctx, &pb.GetTaskRequest{TaskId: "fu-query"})
	if err != nil {
		t.Fatal(err)
	}
	leaks("GetTask", g)
	l, err := b.env.ListTasks(ctx, &pb.ListTasksRequest{})
	if err != nil {
		t.Fatal(err)
	}
	leaks("ListTasks", l)
	subtasks := map[string]int32{}
	for _, s := range l.Tasks {
		subtasks[s.TaskId] = s.Subtasks
	}
	if subtasks["fu-query"] != 2 || subtasks["fu-view"] != 2 || subtasks["top-a"] != 1 {
		t.Errorf("ListTasks subtasks %v", subtasks)
	}
	e := b.mustReset("fu-query", -1)
	leaks("the reset", e)
	r := b.step(e.Token, ask("What do you mean by big sales?"))
	leaks("a reply", r)
	r = b.step(r.Token, submit(fuQueryOther))
	leaks("the retry", r)
	retry := r.Token
	r = b.step(retry, submit(fuQueryRef))
	if lastTurn(r).GetText() != fuFollowUp {
		t.Errorf("the release shows %v", lastTurn(r))
	}
	// Released without asking for privileged data: the request only.
	plain, err := b.env.Step(ctx, &pb.StepRequest{Token: retry, Action: submit(fuQueryRef)})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Privileged != nil || strings.Contains(plain.String(), "SUM(amount)") || lastTurn(plain).GetText() != fuFollowUp {
		t.Errorf("a release without include_privileged: %v", plain)
	}
	// Oracle questions during phase 1 about the follow-up get nothing of it.
	e = b.mustReset("fu-query", -1)
	r = b.step(e.Token, ask("What will you ask me next, after this one?"))
	leaks("a probing question's reply", r)
}

// TestBirdCPhase2OnPhase1State: the follow-up is verified on the state a
// phase 1 leaves, replayed in isolation, so nothing reaches the shared
// database. Which phase 1: under FOLLOW_UP_STATE_REFERENCE (the default;
// the c-Interact pipeline's rule, bird_interact_conv's
// eval_bird_interact_batch.py) the reference's, so a follow-up that reads
// what only the policy's own view has fails to run — phase 1 cannot rig
// phase 2; under FOLLOW_UP_STATE_POLICY (the a-Interact harness's rule) the
// policy's, so that follow-up passes.
func TestBirdCPhase2OnPhase1State(t *testing.T) {
	b := startBirdC(t)
	// A view that passes phase 1's check and has one more column than the
	// reference's.
	mine := "CREATE VIEW north_big AS SELECT id, amount, region FROM sales WHERE region = 'North' AND amount >= 110"
	// Only the policy's view has a region column.
	readsMine := "SELECT COUNT(*) FROM north_big WHERE region = 'North'"
	release := func(name string, opts *pb.EpisodeOptions, phase1 string) []byte {
		t.Helper()
		e := b.mustResetWith("fu-view", -1, opts)
		r := b.step(e.Token, ask("What do you mean by big?"))
		r = b.step(r.Token, submit(phase1))
		if r.Done || r.Observation.Subtask != 2 {
			t.Fatalf("%s: phase 1 with %q: %v", name, phase1, r)
		}
		return r.Token
	}
	policy := &pb.EpisodeOptions{FollowUpState: pb.FollowUpState_FOLLOW_UP_STATE_POLICY}
	r := b.step(release("POLICY", policy, mine), submit(readsMine))
	if !r.Done || r.Reward.GetValue() != 1 {
		t.Fatalf("POLICY: a follow-up reading the policy's view: %v (%s)", r.Reward, r.Privileged.GetVerifierReason())
	}
	for name, opts := range map[string]*pb.EpisodeOptions{
		"default":   {},
		"REFERENCE": {FollowUpState: pb.FollowUpState_FOLLOW_UP_STATE_REFERENCE},
	} {
		// The policy's view is not what the follow-up sees: region does not
		// exist there, so the SQL does not run and gets the retry.
		tok := release(name, opts, mine)
		r := b.step(tok, submit(readsMine))
		if r.Done || lastTurn(r).GetText() != retryExecErr {
			t.Fatalf("%s: a follow-up reading the policy's view: %v (%s)", name, r, r.Privileged.GetVerifierReason())
		}
		// A follow-up on the reference's view passes on its retry: 0.7 + 0.2.
		if f := b.step(r.Token, submit("SELECT COUNT(*) FROM north_big")); !f.Done || f.Reward.GetValue() != 0.9 {
			t.Errorf("%s: the follow-up's reference on its retry: %v (%s)", name, f.Reward, f.Privileged.GetVerifierReason())
		}
	}
	// The reference's own view has no region: the same follow-up after the
	// reference fails to run (and gets its retry), under either state.
	for name, opts := range map[string]*pb.EpisodeOptions{"default": {}, "POLICY": policy} {
		e := b.mustResetWith("fu-view", -1, opts)
		r = b.step(e.Token, submit("CREATE VIEW north_big AS SELECT id, amount FROM sales WHERE region = 'North' AND amount >= 110"))
		r = b.step(r.Token, submit(readsMine))
		if r.Done || lastTurn(r).GetText() != retryExecErr {
			t.Fatalf("%s: the follow-up on the reference's view: %v", name, r)
		}
	}
	// The shared database never got the view: a plain Query episode on it
	// cannot read north_big.
	ctx := context.Background()
	q, err := b.env.Reset(ctx, &pb.ResetRequest{TaskId: "count", Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
	if err != nil {
		t.Fatal(err)
	}
	r = b.step(q.Episodes[0].Token, submit("SELECT COUNT(*) FROM north_big"))
	if !strings.Contains(lastTurn(r).GetText(), "north_big") {
		t.Errorf("the shared database has north_big: %v", r)
	}
}

// TestBirdCUnparsed: under BIRD_C an unparsed output spends a turn; on the
// last turn it is a failed submission (the BIRD_VARIANT_ORIGINAL rule:
// wrap_up_sql.py's extract_system_response gives "ERROR!" for output
// without a ```postgresql block), so the turn is spent and the debug retry
// follows. Under AMBITAB the first gets a notice and the second in a row is
// a STOP.
func TestBirdCUnparsed(t *testing.T) {
	b := startBirdC(t)
	e := b.mustReset("fu-query", 0) // 2 turns
	r := b.step(e.Token, unparsed("<s>half a question"))
	if r.Done || r.Observation.Budget.GetUsedMilli() != 1000 || !r.Observation.SqlRequired ||
		r.Observation.Turns[0].GetKind() != pb.TurnKind_TURN_KIND_UNPARSED || r.Observation.Turns[0].GetRole() != pb.Role_ROLE_POLICY ||
		lastTurn(r).GetKind() != pb.TurnKind_TURN_KIND_NOTICE {
		t.Fatalf("BIRD_C unparsed: %v", r)
	}
	last := b.step(r.Token, unparsed("again"))
	if last.Done || last.Status != pb.EpisodeStatus_EPISODE_STATUS_RUNNING || lastTurn(last).GetKind() != pb.TurnKind_TURN_KIND_FEEDBACK ||
		lastTurn(last).GetText() != retryExecErr || !last.Observation.SqlRequired || last.Observation.Budget.GetUsedMilli() != 2000 {
		t.Fatalf("BIRD_C unparsed on the last turn: %v", last)
	}
	// The retry: the reference passes and releases the follow-up; anything
	// else ends the sub-task (no second retry).
	if p := b.step(last.Token, submit(fuQueryRef)); p.Done || p.Observation.Subtask != 2 {
		t.Errorf("the reference on the retry after a last-turn unparsed output: %v", p)
	}
	if x := b.step(last.Token, unparsed("still")); !x.Done || x.Reward.GetValue() != 0 || x.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
		t.Errorf("an unparsed output during that retry: %v", x)
	}

	ctx := context.Background()
	a, err := b.env.Reset(ctx, &pb.ResetRequest{TaskId: "big"})
	if err != nil {
		t.Fatal(err)
	}
	r = b.step(a.Episodes[0].Token, unparsed("???"))
	if r.Done || lastTurn(r).GetKind() != pb.TurnKind_TURN_KIND_NOTICE || r.Observation.QuestionsAsked != 0 {
		t.Fatalf("AMBITAB's first unparsed: %v", r)
	}
	// Another action in between resets the count.
	r2 := b.step(r.Token, ask("What do you mean by big sales?"))
	if r2 := b.step(r2.Token, unparsed("???")); r2.Done {
		t.Errorf("an unparsed output after a question ended the episode: %v", r2)
	}
	r = b.step(r.Token, unparsed("still ???"))
	if !r.Done || r.Observation.Phase != pb.Phase_PHASE_DONE || r.Reward.GetType() != pb.RewardType_REWARD_TYPE_QUESTION_F1 {
		t.Errorf("AMBITAB's second unparsed in a row: %v", r)
	}
}

// TestBirdCOptions: what BIRD_C refuses at reset, and that drawing a task
// draws only among tasks with a follow-up.
func TestBirdCOptions(t *testing.T) {
	b := startBirdC(t)
	ctx := context.Background()
	bad := []*pb.ResetRequest{
		{TaskId: "top-a", Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C}},
		{TaskId: "fu-query", Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_P}},
		{TaskId: "top-a", Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_A}},
		{TaskId: "fu-query", Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_TIDE_F}},
		{TaskId: "fu-query", Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C, Patience: proto.Int32(33)}},
		{TaskId: "fu-query", Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C, Reward: pb.RewardType_REWARD_TYPE_OUTCOME}},
		{TaskId: "fu-query", Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C, Solver: pb.Solver_SOLVER_LOOKUP}},
		{TaskId: "fu-query", Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C, ExtraQuestions: proto.Int32(2)}},
		{TaskId: "fu-query", Options: &pb.EpisodeOptions{Patience: proto.Int32(3)}},
		{TaskId: "fu-query", Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_BIRD_INTERACT}},
	}
	for _, req := range bad {
		if _, err := b.env.Reset(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v, want InvalidArgument", req, err)
		}
	}
	for seed := range uint64(20) {
		r, err := b.env.Reset(ctx, &pb.ResetRequest{Seed: proto.Uint64(seed), Options: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C}})
		if err != nil {
			t.Fatal(err)
		}
		if id := r.Episodes[0].Observation.Task.TaskId; !strings.HasPrefix(id, "fu-") {
			t.Fatalf("seed %d drew %s, which has no follow-up", seed, id)
		}
	}
}

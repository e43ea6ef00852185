package env_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"avtgym/corpus"
	. "avtgym/env"
	pb "avtgym/proto/avtgym/v1"
)

// The rules of BIRD_C and BIRD_A at their edges, as BIRD-Interact's
// harnesses play them (env/birdc.go and env/birda.go cite the harness
// files). Every test plays the demo's followup-001 (one counted ambiguity:
// BIRD_A has 8 + patience coins, BIRD_C 1 + patience turns) in process.

const edgeTask = "followup-001"

// edgeRefs are followup-001's phase-1 and follow-up references.
func edgeRefs(t *testing.T, c *corpus.Corpus) (phase1, phase2 string) {
	t.Helper()
	tk, ok := c.Task(edgeTask)
	if !ok || tk.FollowUp == nil {
		t.Fatalf("the demo corpus has no %s with a follow-up", edgeTask)
	}
	return strings.Join(tk.Reference.SQL, ";\n"), strings.Join(tk.FollowUp.Reference.SQL, ";\n")
}

func edgeOpts(p pb.Protocol, v pb.BirdVariant, patience int32) *pb.EpisodeOptions {
	return &pb.EpisodeOptions{Protocol: p, BirdVariant: v, Patience: &patience}
}

func execAction(sql string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Execute_{Execute: &pb.Action_Execute{Sql: sql}}}
}

func meaningAction(table, column string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_GetColumnMeaning_{GetColumnMeaning: &pb.Action_GetColumnMeaning{Table: table, Column: column}}}
}

func schemaAction() *pb.Action {
	return &pb.Action{Kind: &pb.Action_GetSchema_{GetSchema: &pb.Action_GetSchema{}}}
}

func unparsedAction(text string) *pb.Action {
	return &pb.Action{Kind: &pb.Action_Unparsed_{Unparsed: &pb.Action_Unparsed{Text: text}}}
}

// edgeLast is the step's last turn.
func edgeLast(r *pb.StepResponse) *pb.Turn {
	ts := r.GetObservation().GetTurns()
	if len(ts) == 0 {
		return nil
	}
	return ts[len(ts)-1]
}

// playSteps plays the actions from tok, failing if any ends the episode.
func playSteps(t *testing.T, e *Env, tok []byte, as ...*pb.Action) *pb.StepResponse {
	t.Helper()
	var r *pb.StepResponse
	for i, a := range as {
		r = mustStep(t, e, tok, a, false)
		if r.GetDone() {
			t.Fatalf("action %d (%v) ended the episode: %v", i, a, r)
		}
		tok = r.GetToken()
	}
	return r
}

// hasOracleTurn reports whether the step holds an oracle reply.
func hasOracleTurn(r *pb.StepResponse) bool {
	for _, tn := range r.GetObservation().GetTurns() {
		if tn.GetRole() == pb.Role_ROLE_ORACLE {
			return true
		}
	}
	return false
}

// TestBirdAOriginalUnaffordableActionRuns (rule 1, ORIGINAL): an action
// other than a submit with 0 < coins left < its price still runs and is
// charged in full (batch_run_bird_interact/main.py deducts, then sets
// force_submit once the budget is ≤ 0); the next action must be
// submit_sql, free and the last; anything else ends the episode unsolved.
func TestBirdAOriginalUnaffordableActionRuns(t *testing.T) {
	c := loadDemo(t)
	e, _ := newEnv(t, c, nil)
	ref, _ := edgeRefs(t, c)
	ep := resetOne(t, e, edgeTask, edgeOpts(pb.Protocol_PROTOCOL_BIRD_A, pb.BirdVariant_BIRD_VARIANT_UNSPECIFIED, 0)) // 8 coins
	// 2 + 2 + 2 + 1 + 0.5: 0.5 coins left.
	r := playSteps(t, e, ep.Token, askAction("What do you mean by poor reviews?"), askAction("Which reviews count?"),
		askAction("Any period?"), execAction("SELECT 1"), meaningAction("reviews", "rating"))
	if b := r.GetObservation().GetBudget(); b.GetRemainingMilli() != 500 || r.GetObservation().GetSqlRequired() {
		t.Fatalf("with 0.5 coins left: budget %v, sql_required %v", b, r.GetObservation().GetSqlRequired())
	}
	before := r.GetToken()

	// A question the coins cannot pay for is asked and answered.
	q := mustStep(t, e, before, askAction("Do ties count?"), false)
	if q.GetDone() || !hasOracleTurn(q) || q.GetObservation().GetBudget().GetUsedMilli() != 9500 ||
		q.GetObservation().GetBudget().GetRemainingMilli() != 0 || !q.GetObservation().GetSqlRequired() || q.GetObservation().GetQuestionsRemaining() != 0 {
		t.Fatalf("an ask with 0.5 coins left under ORIGINAL: %v", q)
	}
	// A tool the coins cannot pay for runs too, and says a submit must follow.
	s := mustStep(t, e, before, schemaAction(), false)
	out := edgeLast(s).GetText()
	if s.GetDone() || edgeLast(s).GetKind() != pb.TurnKind_TURN_KIND_TOOL_RESULT || !strings.Contains(out, "CREATE TABLE") ||
		!strings.Contains(out, "must be submit_sql") || s.GetObservation().GetBudget().GetUsedMilli() != 8500 {
		t.Fatalf("get_schema with 0.5 coins left under ORIGINAL: %v", s)
	}
	// Then anything but a submit ends the episode unsolved: no second
	// action on credit.
	for _, a := range []*pb.Action{askAction("One more?"), execAction("SELECT 1"), unparsedAction("hmm")} {
		x := mustStep(t, e, q.GetToken(), a, false)
		if !x.GetDone() || x.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED || x.GetReward().GetValue() != 0 || hasOracleTurn(x) {
			t.Errorf("%v after the coins ran out: %v", a, x)
		}
	}
	// The forced submit is free, scored, and the end (no follow-up).
	f := mustStep(t, e, q.GetToken(), submitAction(ref), false)
	if !f.GetDone() || f.GetReward().GetValue() != 0.7 || f.GetObservation().GetSubtask() != 1 || f.GetObservation().GetBudget().GetUsedMilli() != 9500 {
		t.Errorf("the forced submit: %v", f)
	}
	if _, ok := f.GetReward().GetComponents()["phase2"]; ok {
		t.Errorf("the forced submit scored phase 2: %v", f.GetReward())
	}
}

// TestBirdAOriginalUnparsedForcesSubmit (rule 1, ORIGINAL, a deliberate
// deviation): an unparsed output that spends the last coins forces the
// submit as any action does; the runner's update_budget would not set
// force_submit for it, giving the next action on credit.
func TestBirdAOriginalUnparsedForcesSubmit(t *testing.T) {
	e, _ := newEnv(t, loadDemo(t), nil)
	ep := resetOne(t, e, edgeTask, edgeOpts(pb.Protocol_PROTOCOL_BIRD_A, pb.BirdVariant_BIRD_VARIANT_ORIGINAL, 0)) // 8 coins
	r := playSteps(t, e, ep.Token, askAction("What do you mean by poor reviews?"), askAction("Which reviews count?"),
		askAction("Any period?"), execAction("SELECT 1"), meaningAction("reviews", "rating"), unparsedAction("<garbled"),
		unparsedAction("<garbled"))
	// 0.1 coins left: the next unparsed output spends them.
	r = mustStep(t, e, r.GetToken(), unparsedAction("<garbled"), false)
	if r.GetDone() || !r.GetObservation().GetSqlRequired() || !strings.Contains(edgeLast(r).GetText(), "must be submit_sql") {
		t.Fatalf("an unparsed output that spends the coins: %v", r)
	}
	x := mustStep(t, e, r.GetToken(), askAction("A free question?"), false)
	if !x.GetDone() || hasOracleTurn(x) || x.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED {
		t.Errorf("a question after the unparsed output spent the coins: %v", x)
	}
}

// TestBirdAADKRefusesUnaffordableAction (rule 1, ADK): an action other
// than a submit that the coins cannot pay for is refused with a notice and
// costs nothing (BIRD-Interact-ADK/system_agent/callbacks.py,
// before_tool_callback); a refused tool shows nothing of its output; the
// free submit stays allowed and ends the task.
func TestBirdAADKRefusesUnaffordableAction(t *testing.T) {
	c := loadDemo(t)
	e, _ := newEnv(t, c, nil)
	ref, _ := edgeRefs(t, c)
	ep := resetOne(t, e, edgeTask, edgeOpts(pb.Protocol_PROTOCOL_BIRD_A, pb.BirdVariant_BIRD_VARIANT_ADK, 0)) // 8 coins
	r := playSteps(t, e, ep.Token, askAction("What do you mean by poor reviews?"), askAction("Which reviews count?"),
		askAction("Any period?"), execAction("SELECT 1"), meaningAction("reviews", "rating"))
	for _, a := range []*pb.Action{askAction("Do ties count?"), schemaAction(), execAction("SELECT 1")} {
		x := mustStep(t, e, r.GetToken(), a, false)
		last := edgeLast(x)
		if x.GetDone() || hasOracleTurn(x) || last.GetKind() != pb.TurnKind_TURN_KIND_NOTICE || !strings.Contains(last.GetText(), "Budget exhausted") ||
			strings.Contains(last.GetText(), "CREATE TABLE") || x.GetObservation().GetBudget().GetUsedMilli() != 7500 || x.GetObservation().GetSqlRequired() {
			t.Errorf("%v with 0.5 coins left under ADK: %v", a, x)
		}
	}
	// What the coins pay for still runs; at 0 only the submit is left.
	r = mustStep(t, e, r.GetToken(), meaningAction("reviews", "rating"), false)
	if r.GetDone() || !r.GetObservation().GetSqlRequired() {
		t.Fatalf("the last 0.5 coins: %v", r)
	}
	x := mustStep(t, e, r.GetToken(), execAction("SELECT 1"), false)
	if x.GetDone() || x.GetObservation().GetBudget().GetUsedMilli() != 8000 {
		t.Errorf("a tool at 0 coins under ADK: %v", x)
	}
	f := mustStep(t, e, x.GetToken(), submitAction(ref), false)
	if !f.GetDone() || f.GetReward().GetValue() != 0.7 || f.GetObservation().GetSubtask() != 1 || f.GetObservation().GetBudget().GetUsedMilli() != 8000 {
		t.Errorf("the free submit under ADK: %v", f)
	}
}

// TestBirdASubmitSpendingLastCoinsEnds (rule 2, both harnesses): a paid
// submit that passes phase 1 and leaves exactly 0 coins ends the task with
// phase 1's 0.7; one coin more left, the same submit releases the
// follow-up. A submit with 0 < coins < 3 is free and the last too.
func TestBirdASubmitSpendingLastCoinsEnds(t *testing.T) {
	c := loadDemo(t)
	e, _ := newEnv(t, c, nil)
	ref, _ := edgeRefs(t, c)
	for _, v := range []pb.BirdVariant{pb.BirdVariant_BIRD_VARIANT_ORIGINAL, pb.BirdVariant_BIRD_VARIANT_ADK} {
		ep := resetOne(t, e, edgeTask, edgeOpts(pb.Protocol_PROTOCOL_BIRD_A, v, 0)) // 8 coins
		four := playSteps(t, e, ep.Token, askAction("What do you mean by poor reviews?"), execAction("SELECT 1"), execAction("SELECT 2"))
		five := playSteps(t, e, four.GetToken(), execAction("SELECT 3"))
		r := mustStep(t, e, five.GetToken(), submitAction(ref), false)
		if !r.GetDone() || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.GetReward().GetValue() != 0.7 ||
			r.GetObservation().GetSubtask() != 1 || r.GetObservation().GetBudget().GetUsedMilli() != 8000 {
			t.Errorf("%s: a passing submit that leaves 0 coins: %v", v, r)
		}
		if _, ok := r.GetReward().GetComponents()["phase2"]; ok {
			t.Errorf("%s: phase 2 was scored: %v", v, r.GetReward())
		}
		if r := mustStep(t, e, four.GetToken(), submitAction(ref), false); r.GetDone() || r.GetObservation().GetSubtask() != 2 {
			t.Errorf("%s: a passing submit that leaves 1 coin: %v", v, r)
		}
	}
	for _, v := range []pb.BirdVariant{pb.BirdVariant_BIRD_VARIANT_ORIGINAL, pb.BirdVariant_BIRD_VARIANT_ADK} {
		ep := resetOne(t, e, edgeTask, edgeOpts(pb.Protocol_PROTOCOL_BIRD_A, v, 0))
		six := playSteps(t, e, ep.Token, askAction("What do you mean by poor reviews?"), askAction("Which?"), execAction("SELECT 1"), execAction("SELECT 2"))
		r := mustStep(t, e, six.GetToken(), submitAction(ref), false)
		if !r.GetDone() || r.GetReward().GetValue() != 0.7 || r.GetObservation().GetSubtask() != 1 || r.GetObservation().GetBudget().GetUsedMilli() != 6000 {
			t.Errorf("%s: a submit with 2 coins left: %v", v, r)
		}
	}
}

// TestBirdAQuestionBudgetAfterRelease: the question budget (the asks the
// coins buy) is the same after the follow-up's release as before; it used
// to read 0.
func TestBirdAQuestionBudgetAfterRelease(t *testing.T) {
	c := loadDemo(t)
	e, _ := newEnv(t, c, nil)
	ref, _ := edgeRefs(t, c)
	ep := resetOne(t, e, edgeTask, birdA) // 14 coins: 7 asks
	if got := ep.GetObservation().GetQuestionBudget(); got != 7 {
		t.Fatalf("the reset's question budget is %d, want 7", got)
	}
	r := playSteps(t, e, ep.Token, askAction("What do you mean by poor reviews?"), submitAction(ref))
	o := r.GetObservation()
	if o.GetSubtask() != 2 || o.GetQuestionBudget() != 7 || o.GetQuestionsAsked() != 1 || o.GetQuestionsRemaining() != 4 {
		t.Errorf("after the release: sub-task %d, question budget %d, asked %d, remaining %d; want 2, 7, 1, 4 (9 coins left)",
			o.GetSubtask(), o.GetQuestionBudget(), o.GetQuestionsAsked(), o.GetQuestionsRemaining())
	}
}

// TestBirdAResetViewIsTheRequest (rule 3): BIRD_A's first observation
// holds what the harnesses' first prompt holds — the request, the
// database's name and dialect — and no schema, column meanings or
// knowledge, which the tools sell; get_schema still returns the schema.
// BIRD_C's and AMBITAB's views are the whole public view, unchanged, and
// the shared view is not touched by a BIRD_A reset.
func TestBirdAResetViewIsTheRequest(t *testing.T) {
	c := loadDemo(t)
	e, _ := newEnv(t, c, nil)
	tk, _ := c.Task(edgeTask)
	full := proto.Clone(e.View(tk)).(*pb.TaskView)
	if full.GetDatabase().GetSchema() == "" || len(full.GetDatabase().GetColumnMeanings()) == 0 || len(full.GetDatabase().GetKnowledge()) == 0 {
		t.Fatalf("the demo's public view lacks what this test needs: %v", full)
	}
	ep := resetOne(t, e, edgeTask, birdA)
	v := ep.GetObservation().GetTask()
	db := v.GetDatabase()
	if v.GetRequest() != full.GetRequest() || v.GetTaskId() != edgeTask || db.GetId() != full.GetDatabase().GetId() || db.GetDialect() == "" {
		t.Errorf("BIRD_A's reset view lacks the request or the database: %v", v)
	}
	if db.GetSchema() != "" || len(db.GetColumnMeanings()) != 0 || len(db.GetKnowledge()) != 0 {
		t.Errorf("BIRD_A's reset view gives away what the tools sell: %v", db)
	}
	r := mustStep(t, e, ep.Token, schemaAction(), false)
	if edgeLast(r).GetText() != full.GetDatabase().GetSchema() {
		t.Errorf("get_schema after the reset: %q", edgeLast(r).GetText())
	}
	for _, o := range []*pb.EpisodeOptions{{Protocol: pb.Protocol_PROTOCOL_BIRD_C}, nil} {
		got := resetOne(t, e, edgeTask, o).GetObservation().GetTask()
		if !proto.Equal(got, full) {
			t.Errorf("%v: the reset view changed:\n%v\nwant\n%v", o, got, full)
		}
	}
	if !proto.Equal(e.View(tk), full) {
		t.Errorf("a BIRD_A reset changed the shared view")
	}
}

// TestBirdAColumnMeaningFields (rule 4): get_column_meaning on a JSON
// column returns its fields' meanings too — the harness returns the
// file's whole {column_meaning, fields_meaning} value — which the corpus
// keeps as "table.column.field" entries; a column whose name only starts
// like it is not mixed in.
func TestBirdAColumnMeaningFields(t *testing.T) {
	c := loadDemo(t)
	tk, _ := c.Task(edgeTask)
	m := map[string]string{}
	for k, v := range tk.DB.Spec.ColumnMeanings {
		m[k] = v
	}
	m["reviews.meta"] = "Review metadata as JSONB."
	m["reviews.meta.source"] = "Where the review came from."
	m["reviews.meta.device.os"] = "The reviewer's operating system."
	m["reviews.metadata_note"] = "Another column."
	tk.DB.Spec.ColumnMeanings = m // this test's own corpus
	e, _ := newEnv(t, c, nil)
	ep := resetOne(t, e, edgeTask, birdA)
	out := edgeLast(mustStep(t, e, ep.Token, meaningAction("REVIEWS", "meta"), false)).GetText()
	want := "reviews.meta: Review metadata as JSONB.\nFields:\nreviews.meta.device.os: The reviewer's operating system.\nreviews.meta.source: Where the review came from.\n"
	if out != want {
		t.Errorf("get_column_meaning(reviews, meta) = %q, want %q", out, want)
	}
	plain := edgeLast(mustStep(t, e, ep.Token, meaningAction("reviews", "rating"), false)).GetText()
	if strings.Contains(plain, "Fields:") || !strings.HasPrefix(plain, "reviews.rating: ") {
		t.Errorf("get_column_meaning(reviews, rating) = %q", plain)
	}
}

// TestBirdCOriginalFollowUpIsOneSQLTurn (rule 5): under ORIGINAL, after
// phase 1 passes, the follow-up gets one SQL turn plus its debug retry
// (infer_api_system.py's "follow" phase pre-fills "<t>"): a question there
// gets no answer and is taken as failed SQL. Under ADK the policy may ask
// while turns last.
func TestBirdCOriginalFollowUpIsOneSQLTurn(t *testing.T) {
	c := loadDemo(t)
	e, _ := newEnv(t, c, nil)
	ref, fu := edgeRefs(t, c)
	ep := resetOne(t, e, edgeTask, &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C}) // 4 turns
	r := playSteps(t, e, ep.Token, submitAction(ref))
	o := r.GetObservation()
	if o.GetSubtask() != 2 || !o.GetSqlRequired() || o.GetQuestionsRemaining() != 0 || o.GetPhase() != pb.Phase_PHASE_SOLVING ||
		o.GetBudget().GetTotalMilli() != 5000 || o.GetBudget().GetUsedMilli() != 1000 {
		t.Fatalf("ORIGINAL after the release: %v", o)
	}
	q := mustStep(t, e, r.GetToken(), askAction("Which order do you want?"), false)
	if q.GetDone() || hasOracleTurn(q) || edgeLast(q).GetKind() != pb.TurnKind_TURN_KIND_FEEDBACK || q.GetObservation().GetQuestionsAsked() != 0 {
		t.Fatalf("ORIGINAL: a question on the follow-up's turn: %v", q)
	}
	f := mustStep(t, e, q.GetToken(), submitAction(fu), false)
	if !f.GetDone() || f.GetReward().GetValue() != 0.9 || f.GetReward().GetComponents()["phase2"] != 0.2 {
		t.Errorf("ORIGINAL: the follow-up's reference on its debug retry: %v", f.GetReward())
	}

	ep = resetOne(t, e, edgeTask, &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C, BirdVariant: pb.BirdVariant_BIRD_VARIANT_ADK})
	r = playSteps(t, e, ep.Token, submitAction(ref))
	if o := r.GetObservation(); o.GetSqlRequired() || o.GetQuestionsRemaining() != 3 {
		t.Fatalf("ADK after the release: %v", o)
	}
	q = mustStep(t, e, r.GetToken(), askAction("Which order do you want?"), false)
	if q.GetDone() || !hasOracleTurn(q) || q.GetObservation().GetQuestionsAsked() != 1 {
		t.Fatalf("ADK: a question in sub-task 2: %v", q)
	}
	if f := mustStep(t, e, q.GetToken(), submitAction(fu), false); !f.GetDone() || f.GetReward().GetValue() != 1 {
		t.Errorf("ADK: the follow-up's reference after a question: %v", f.GetReward())
	}
}

// TestBirdCRetryMessages (rule 6): the debug retry's message as each
// harness sends it. ORIGINAL (infer_api_system.py, "debug" phase, with
// eval_bird_interact_batch.py's error_msg): SQL that does not run gets
// only "[exec_err_flg] - Execution_Error: True", never the database's
// error; SQL that runs gets "Are you sure about your SQL? You have one
// more chance to update your SQL now." ADK (orchestrator/cinteract.py):
// the database's error, or "Your SQL is not correct. …".
func TestBirdCRetryMessages(t *testing.T) {
	e, _ := newEnv(t, loadDemo(t), nil)
	for _, c := range []struct {
		v          pb.BirdVariant
		sql        string
		want       string
		prefix     bool
		leaksError bool
	}{
		{pb.BirdVariant_BIRD_VARIANT_UNSPECIFIED, "SELECT nope FROM products", "Your SQL is not executable and raises the following error: [exec_err_flg] - Execution_Error: True", false, false},
		{pb.BirdVariant_BIRD_VARIANT_ORIGINAL, "SELECT name FROM products", "Are you sure about your SQL? You have one more chance to update your SQL now.", false, false},
		{pb.BirdVariant_BIRD_VARIANT_ADK, "SELECT nope FROM products", "Your SQL is not executable: Error executing submitted SQL: ", true, true},
		{pb.BirdVariant_BIRD_VARIANT_ADK, "SELECT name FROM products", "Your SQL is not correct. You have one more chance. Please fix and call submit_sql.", false, false},
	} {
		ep := resetOne(t, e, edgeTask, &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_BIRD_C, BirdVariant: c.v})
		r := mustStep(t, e, ep.Token, submitAction(c.sql), false)
		msg := edgeLast(r).GetText()
		if r.GetDone() || edgeLast(r).GetKind() != pb.TurnKind_TURN_KIND_FEEDBACK || !r.GetObservation().GetSqlRequired() {
			t.Errorf("%s %q: %v", c.v, c.sql, r)
		}
		if ok := msg == c.want || (c.prefix && strings.HasPrefix(msg, c.want)); !ok {
			t.Errorf("%s %q: retry message %q, want %q", c.v, c.sql, msg, c.want)
		}
		if got := strings.Contains(msg, "nope"); got != c.leaksError {
			t.Errorf("%s %q: the message names the database's error: %v, want %v (%q)", c.v, c.sql, got, c.leaksError, msg)
		}
		if c.leaksError && !strings.HasSuffix(msg, "\nPlease fix and call submit_sql.") {
			t.Errorf("%s: the ADK's message ends %q", c.v, msg)
		}
	}
}

// TestBirdCLastTurnNonSQLGetsRetry (rule 7): on the last turn the
// pipeline pre-fills "<t>" (infer_api_system.py, the final-turn branch),
// and output without a ```postgresql block becomes the SQL "ERROR!"
// (wrap_up_sql.py, extract_system_response), which fails to run: a
// question or an unparsed output there spends the turn, gets no answer,
// and the debug retry follows; a stop still ends the sub-task; anything
// but SQL during the retry ends it.
func TestBirdCLastTurnNonSQLGetsRetry(t *testing.T) {
	c := loadDemo(t)
	e, _ := newEnv(t, c, nil)
	ref, _ := edgeRefs(t, c)
	for _, v := range []pb.BirdVariant{pb.BirdVariant_BIRD_VARIANT_ORIGINAL, pb.BirdVariant_BIRD_VARIANT_ADK} {
		ep := resetOne(t, e, edgeTask, edgeOpts(pb.Protocol_PROTOCOL_BIRD_C, v, 0)) // 1 turn: SQL only
		if !ep.GetObservation().GetSqlRequired() {
			t.Fatalf("%s: one turn, and sql_required is false", v)
		}
		want := "Your SQL is not executable and raises the following error: [exec_err_flg] - Execution_Error: True"
		if v == pb.BirdVariant_BIRD_VARIANT_ADK {
			want = "Your SQL is not correct. You have one more chance. Please fix and call submit_sql."
		}
		for _, a := range []*pb.Action{askAction("What do you mean by poor reviews?"), unparsedAction("<s>half")} {
			r := mustStep(t, e, ep.Token, a, false)
			o := r.GetObservation()
			if r.GetDone() || hasOracleTurn(r) || edgeLast(r).GetText() != want || o.GetBudget().GetUsedMilli() != 1000 ||
				!o.GetSqlRequired() || o.GetQuestionsAsked() != 0 {
				t.Fatalf("%s: %v on the last turn: %v", v, a, r)
			}
			// The retry: the reference passes at 0.5 and releases the follow-up.
			p := mustStep(t, e, r.GetToken(), submitAction(ref), false)
			if p.GetDone() || p.GetObservation().GetSubtask() != 2 {
				t.Fatalf("%s: the reference on the retry: %v", v, p)
			}
			// Anything but SQL during the retry ends the sub-task.
			x := mustStep(t, e, r.GetToken(), askAction("And now?"), false)
			if !x.GetDone() || x.GetReward().GetValue() != 0 || x.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || hasOracleTurn(x) {
				t.Errorf("%s: a question during the retry: %v", v, x)
			}
		}
		s := mustStep(t, e, ep.Token, stopAction(), false)
		if !s.GetDone() || s.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED || s.GetReward().GetValue() != 0 {
			t.Errorf("%s: a stop on the last turn: %v", v, s)
		}
	}
	// The retry after a last-turn question scores as a retry: 0.5 + 0.3.
	ep := resetOne(t, e, edgeTask, edgeOpts(pb.Protocol_PROTOCOL_BIRD_C, pb.BirdVariant_BIRD_VARIANT_ORIGINAL, 0))
	_, fu := edgeRefs(t, c)
	r := playSteps(t, e, ep.Token, askAction("What do you mean?"), submitAction(ref))
	if f := mustStep(t, e, r.GetToken(), submitAction(fu), false); !f.GetDone() || f.GetReward().GetValue() != 0.8 {
		t.Errorf("0.5 + 0.3 after a last-turn question: %v", f.GetReward())
	}
}

// TestBirdAADKTurnLimit: under ADK a refused action costs nothing, so
// without a bound a policy could keep an episode running for ever; the
// ADK's own MAX_MODEL_TURNS (60 agent turns, paid or refused) ends it
// TRUNCATED, and the free submit is allowed until then.
func TestBirdAADKTurnLimit(t *testing.T) {
	c := loadDemo(t)
	e, _ := newEnv(t, c, nil)
	ep := resetOne(t, e, edgeTask, edgeOpts(pb.Protocol_PROTOCOL_BIRD_A, pb.BirdVariant_BIRD_VARIANT_ADK, 0)) // 8 coins
	tok := ep.GetToken()
	var r *pb.StepResponse
	for i := 1; ; i++ {
		r = mustStep(t, e, tok, schemaAction(), false) // 1 coin: 8 run, the rest are refused
		tok = r.GetToken()
		if r.GetDone() {
			if i != 61 || r.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED || !strings.Contains(edgeLast(r).GetText(), "limit of 60 actions") {
				t.Fatalf("the episode ended at action %d: %v", i, r)
			}
			break
		}
		if i > 61 {
			t.Fatal("refused actions went on past the ADK's 60 turns")
		}
	}
	if got := r.GetObservation().GetBudget().GetUsedMilli(); got != 8000 {
		t.Errorf("coins used %d, want 8000 (refusals are free)", got)
	}
	// Before the limit, the free submit still ends the task as usual.
	ref, _ := edgeRefs(t, c)
	tok = ep.GetToken()
	for range 59 {
		tok = mustStep(t, e, tok, schemaAction(), false).GetToken()
	}
	if f := mustStep(t, e, tok, submitAction(ref), false); !f.GetDone() || f.GetReward().GetValue() != 0.7 {
		t.Errorf("the free submit as the 60th action: %v", f)
	}
}

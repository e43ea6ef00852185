package conformance

// BIRD_C and BIRD_A (PROTOCOL.md §8, §11; docs/protocols.md "Protocols"): two
// sub-tasks, the follow-up released when sub-task 1's SQL passes; BIRD_C
// counts turns (m + patience, the last for SQL only, one debug retry per
// sub-task), BIRD_A charges coins (6 + 2m + patience, a price per action,
// the free final submit).

import (
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// birdClasses are the follow-up tasks: Query tasks and Management tasks
// (whose reference changes the database).
var birdClasses = []class{
	{name: "Query task with a follow-up", match: func(t *task) bool { return isQuery(t.reference) }, count: 2},
	{name: "Management task with a follow-up", match: func(t *task) bool { return !isQuery(t.reference) }, count: 2},
}

func isQuery(sql string) bool {
	s := strings.ToUpper(strings.TrimSpace(sql))
	return strings.HasPrefix(s, "SELECT") || strings.HasPrefix(s, "WITH")
}

// birdBadOptions are the options BIRD's protocols refuse: another reward
// or solver (the client writes the SQL), AMBITAB's budget options, a
// patience outside 0..32.
var birdBadOptions = []badOption{
	{"the outcome reward", &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}},
	{"the question-F1 reward", &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_QUESTION_F1}},
	{"the lookup solver", &pb.EpisodeOptions{Solver: pb.Solver_SOLVER_LOOKUP}},
	{"extra_questions (AMBITAB's)", &pb.EpisodeOptions{ExtraQuestions: proto.Int32(1)}},
	{"patience -1", &pb.EpisodeOptions{Patience: proto.Int32(-1)}},
	{"patience past 32", &pb.EpisodeOptions{Patience: proto.Int32(33)}},
	{"an unknown oracle", &pb.EpisodeOptions{Oracle: pb.OracleType(99)}},
}

var birdComponents = []string{"phase1", "phase2"}

// birdReward is REWARD_TYPE_BIRD_INTERACT: phase1 always, phase2 iff the
// follow-up was released (phase2 < 0: not).
func birdReward(phase1, phase2 float64) *wantReward {
	c := map[string]float64{"phase1": phase1}
	value := phase1
	if phase2 >= 0 {
		c["phase2"] = phase2
		value += phase2
	}
	return &wantReward{typ: pb.RewardType_REWARD_TYPE_BIRD_INTERACT, value: value, components: c}
}

// The debug retry's messages under BIRD_VARIANT_ORIGINAL, the default
// (env/birdc.go; bird_interact_conv/code/infer_api_system.py's "debug"
// phase): SQL that did not run gets retryError followed by the batch
// evaluation's "[exec_err_flg] - Execution_Error: True", never the
// database's error.
const (
	retryUnsure = "Are you sure about your SQL? You have one more chance to update your SQL now."
	retryError  = "Your SQL is not executable and raises the following error: "
	retryExec   = retryError + "[exec_err_flg] - Execution_Error: True"
)

func patienceOf(o *pb.EpisodeOptions, def int) int {
	if o != nil && o.Patience != nil {
		return int(o.GetPatience())
	}
	return def
}

var birdC = &protocol{
	name:  "BIRD_C",
	proto: pb.Protocol_PROTOCOL_BIRD_C,
	unit:  pb.BudgetUnit_BUDGET_UNIT_TURNS,
	budget: func(t *task, o *pb.EpisodeOptions) int64 {
		return int64(birdCTurns(t, o)) * 1000
	},
	components: birdComponents,
	classes:    birdClasses,
	scripts:    birdCScripts,
	badOptions: birdBadOptions,
}

// birdCTurns is T = m + patience (patience 3 by default), at least 1.
func birdCTurns(t *task, o *pb.EpisodeOptions) int {
	return max(1, t.m+patienceOf(o, 3))
}

func birdCScripts(tk *task) []script {
	done := pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	solving := pb.Phase_PHASE_SOLVING
	var scripts []script

	// Both sub-tasks solved at the first try: 0.7 + 0.3. Each question and
	// each submission is a turn; the release adds one, for the follow-up's
	// SQL, and shows the follow-up's request. Under the default variant
	// (ORIGINAL) that turn is the follow-up's only one: SQL only.
	moves := askTerms(tk, 1000)
	moves = append(moves,
		move{name: "submit the reference", act: submit(tk.reference), mark: "released",
			want: want{turns: turns(sqlTurn, request), charge: 1000, grow: 1000, subtask: 2, release: true, phase: solving, sqlRequired: true}},
		move{name: "submit the follow-up's reference", act: submitFollowUp(),
			want: want{turns: turns(sqlTurn), charge: 1000, done: true, status: done, reward: birdReward(0.7, 0.3)}})
	moves = append(moves, afterDone()...)
	moves = append(moves,
		// A stop in sub-task 2 ends it unsolved.
		move{name: "stop in sub-task 2", from: "released", act: stop(),
			want: want{turns: turns(stopTurn, notice), done: true, status: done, reward: birdReward(0.7, 0)}},
		// A failed sub-task 2 (after its retry) ends the episode.
		move{name: "a wrong follow-up answer", from: "released", act: submit(wrongSQL),
			want: want{turns: turns(sqlTurn, turnSaying(pb.TurnKind_TURN_KIND_FEEDBACK, retryUnsure)), charge: 1000, phase: solving, sqlRequired: true}},
		move{name: "wrong again", act: submit(wrongSQL),
			want: want{turns: turns(sqlTurn, feedback), done: true, status: done, reward: birdReward(0.7, 0)}})
	scripts = append(scripts, script{name: "full policy, both sub-tasks", check: checkSteps, moves: moves})

	// The debug retry, once per sub-task, uses no turn and costs the
	// sub-task's reward: 0.5 + 0.2.
	scripts = append(scripts, script{name: "debug retries", check: checkSteps, moves: []move{
		{name: "a wrong answer", act: submit(wrongSQL), want: want{turns: turns(sqlTurn, turnSaying(pb.TurnKind_TURN_KIND_FEEDBACK, retryUnsure)), charge: 1000, phase: solving, sqlRequired: true}, mark: "retry"},
		{name: "the reference, in the retry", act: submit(tk.reference), want: want{turns: turns(sqlTurn, request), grow: 1000, subtask: 2, release: true, phase: solving, sqlRequired: true}},
		{name: "a wrong follow-up answer", act: submit(wrongSQL), want: want{turns: turns(sqlTurn, turnSaying(pb.TurnKind_TURN_KIND_FEEDBACK, retryUnsure)), charge: 1000, phase: solving, sqlRequired: true}},
		{name: "the follow-up's reference, in the retry", act: submitFollowUp(), want: want{turns: turns(sqlTurn), done: true, status: done, reward: birdReward(0.5, 0.2)}},
		// In the retry only SQL is accepted; anything else ends the sub-task.
		{name: "a question in the retry", from: "retry", act: ask(genericQuestions[0]), want: want{turns: turns(question, notice), done: true, status: done, reward: birdReward(0, -1)}},
		{name: "a failed retry", from: "retry", act: submit(failingSQL[1].sql), want: want{turns: turns(sqlTurn, feedback), done: true, status: done, brokenSQL: true, reward: birdReward(0, -1)}},
	}})

	// Stop and unparsed output.
	scripts = append(scripts, script{name: "stop and unparsed output", check: checkSteps, moves: []move{
		{name: "unparsed: a turn", act: unparsed("<garbled"), want: want{turns: turns(unparsedTurn, notice), charge: 1000}},
		{name: "stop", act: stop(), want: want{turns: turns(stopTurn, notice), done: true, status: done, reward: birdReward(0, -1)}},
	}})

	// The turn limit: T − 1 questions, then only SQL. A question or an
	// unparsed output on the last turn is taken as SQL that did not run
	// (the pipeline pre-fills "<t>" there): the turn is spent, unanswered,
	// and the debug retry follows; a stop ends the sub-task, TRUNCATED.
	for _, b := range []struct {
		name string
		opts *pb.EpisodeOptions
	}{
		{"the default patience", nil},
		{"patience 0", &pb.EpisodeOptions{Patience: proto.Int32(0)}},
	} {
		turnsTotal := birdCTurns(tk, b.opts)
		moves := genericAsks(turnsTotal-1, 1000, func(i int) bool { return turnsTotal-i <= 1 })
		from := "reset" // T = 1: the reset's turn is the last
		if len(moves) > 0 {
			moves[len(moves)-1].mark, from = "last turn", "last turn"
		}
		truncated := pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
		moves = append(moves,
			move{name: "a question on the last turn", from: from, act: ask(fullQuestion("everything")), want: want{turns: turns(question, turnSaying(pb.TurnKind_TURN_KIND_FEEDBACK, retryExec)), charge: 1000, phase: solving, sqlRequired: true, noCredit: true}},
			move{name: "unparsed on the last turn", from: from, act: unparsed("<garbled"), want: want{turns: turns(unparsedTurn, turnSaying(pb.TurnKind_TURN_KIND_FEEDBACK, retryExec)), charge: 1000, phase: solving, sqlRequired: true}},
			move{name: "stop on the last turn", from: from, act: stop(), want: want{turns: turns(stopTurn, notice), done: true, status: truncated, reward: birdReward(0, -1)}},
			move{name: "the reference on the last turn", from: from, act: submit(tk.reference), want: want{turns: turns(sqlTurn, request), charge: 1000, grow: 1000, subtask: 2, release: true, phase: solving, sqlRequired: true}},
			move{name: "the follow-up's reference on its turn", act: submitFollowUp(), want: want{turns: turns(sqlTurn), charge: 1000, done: true, status: done, reward: birdReward(0.7, 0.3)}})
		scripts = append(scripts, script{name: "exhaust the turns with " + b.name, check: checkBudget, opts: b.opts, moves: moves})
	}

	// The policy's faults: a refused question is a turn; SQL that is not
	// run or fails gets the debug retry with the reason.
	var faults []move
	for _, q := range faultyQuestions {
		faults = append(faults, move{name: q.name, from: "reset", act: ask(q.text), want: want{turns: turns(question, turnStarting(pb.TurnKind_TURN_KIND_REFUSAL, refusalPrefix)), charge: 1000, noCredit: true}})
	}
	for _, s := range badSQL() {
		faults = append(faults, move{name: s.name, from: "reset", act: submit(s.sql), want: want{turns: turns(sqlTurn, turnStarting(pb.TurnKind_TURN_KIND_FEEDBACK, retryError)), charge: 1000, phase: solving, sqlRequired: true, brokenSQL: true}})
	}
	faults = append(faults, move{name: "empty SQL again: the sub-task fails", act: submit(""), want: want{turns: turns(sqlTurn, feedback), done: true, status: done, brokenSQL: true, reward: birdReward(0, -1)}})
	faults = append(faults, badRequests(false)...)
	scripts = append(scripts, script{name: "faults", check: checkFaults, moves: faults})
	return scripts
}

// birdAPrices are the documented costs, in thousandths of a coin
// (PROTOCOL.md §8; docs/protocols.md "Protocols"). The suite states them on its own:
// it checks the server against the specification, not against a client's
// copy.
var birdAPrices = map[string]int64{
	driver.ActAsk: 2000, driver.ActSubmitSQL: 3000, driver.ActExecute: 1000,
	driver.ActGetSchema: 1000, driver.ActGetAllColumnMeanings: 1000, driver.ActGetColumnMeaning: 500,
	driver.ActGetAllExternalKnowledgeNames: 500, driver.ActGetKnowledgeDefinition: 500,
	driver.ActGetAllKnowledgeDefinitions: 1000, driver.ActUnparsed: 200, driver.ActStop: 0,
}

var birdA = &protocol{
	name:       "BIRD_A",
	proto:      pb.Protocol_PROTOCOL_BIRD_A,
	unit:       pb.BudgetUnit_BUDGET_UNIT_COINS,
	budget:     birdACoins,
	components: birdComponents,
	classes:    birdClasses,
	scripts:    birdAScripts,
	badOptions: birdBadOptions,
}

// birdACoins is 6 + 2m + patience coins (patience 6 by default), in
// thousandths.
func birdACoins(t *task, o *pb.EpisodeOptions) int64 {
	return int64(6+2*t.m+patienceOf(o, 6)) * 1000
}

// coins follows a BIRD_A episode's coins as a script is written.
type coins struct{ left int64 }

// pay is what an action of the named type is charged now: its price if
// the coins pay for it, else nothing (the free final submit, or the end).
func (c *coins) pay(name string) int64 {
	price := birdAPrices[name]
	if price > c.left {
		return 0
	}
	c.left -= price
	return price
}

// spent reports whether nothing but the free final submit is affordable
// (sql_required).
func (c *coins) spent() bool { return c.left < birdAPrices[driver.ActUnparsed] }

func birdAScripts(tk *task) []script {
	done := pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	total := birdACoins(tk, nil)
	var scripts []script

	// The full policy, every tool, and both sub-tasks: every action is
	// charged its price; tools answer from the public view.
	c := &coins{left: total}
	var moves []move
	for _, term := range tk.terms {
		moves = append(moves, move{name: "ask about " + term, act: ask(fullQuestion(term)),
			want: want{turns: turns(question, reply), charge: c.pay(driver.ActAsk), credit: []string{term}}})
	}
	tool := func(name string, a *pb.Action, result turnWant) move {
		return move{name: name, act: act(a), want: want{turns: turns(toolCall, result), charge: c.pay(driver.ActionName(a))}}
	}
	// BIRD_A's reset view holds no schema (the tools sell it: env/view.go,
	// agentView), so its text is checked only where a view carries it.
	schema := toolResult
	if s := tk.view.GetDatabase().GetSchema(); s != "" && len(s) <= 64<<10 {
		schema = turnSaying(pb.TurnKind_TURN_KIND_TOOL_RESULT, s) // the public schema, as it is
	}
	moves = append(moves,
		tool("get_schema", driver.GetSchemaAction(), schema),
		tool("get_all_column_meanings", driver.GetAllColumnMeaningsAction(), toolResult),
		tool("get_column_meaning", driver.GetColumnMeaningAction("no_such_table", "no_such_column"), toolResult),
		tool("get_all_external_knowledge_names", driver.GetAllExternalKnowledgeNamesAction(), toolResult),
		tool("get_knowledge_definition", driver.GetKnowledgeDefinitionAction("no such entry"), toolResult),
		tool("get_all_knowledge_definitions", driver.GetAllKnowledgeDefinitionsAction(), toolResult),
		tool("execute", driver.ExecuteAction("SELECT 1 AS one"), toolResult),
		move{name: "unparsed", act: unparsed("<garbled"), want: want{turns: turns(unparsedTurn, notice), charge: c.pay(driver.ActUnparsed)}},
		move{name: "submit the reference", act: submit(tk.reference), mark: "released",
			want: want{turns: turns(sqlTurn, request), charge: c.pay(driver.ActSubmitSQL), subtask: 2, release: true}},
		move{name: "submit the follow-up's reference", act: submitFollowUp(),
			want: want{turns: turns(sqlTurn), charge: c.pay(driver.ActSubmitSQL), done: true, status: done, reward: birdReward(0.7, 0.3)}})
	moves = append(moves, afterDone()...)
	moves = append(moves, move{name: "stop in sub-task 2", from: "released", act: stop(),
		want: want{turns: turns(stopTurn, notice), done: true, status: done, reward: birdReward(0.7, 0)}})
	scripts = append(scripts, script{name: "full policy, tools, both sub-tasks", check: checkSteps, moves: moves})

	// Several submits while coins last, with feedback and no retry
	// penalty: 0.7 + 0.3.
	c = &coins{left: total}
	scripts = append(scripts, script{name: "several submits", check: checkSteps, moves: []move{
		{name: "a wrong answer", act: submit(wrongSQL), want: want{turns: turns(sqlTurn, feedback), charge: c.pay(driver.ActSubmitSQL)}},
		{name: "the reference", act: submit(tk.reference), want: want{turns: turns(sqlTurn, request), charge: c.pay(driver.ActSubmitSQL), subtask: 2, release: true}},
		{name: "a wrong follow-up answer", act: submit(wrongSQL), want: want{turns: turns(sqlTurn, feedback), charge: c.pay(driver.ActSubmitSQL)}},
		{name: "the follow-up's reference", act: submitFollowUp(), want: want{turns: turns(sqlTurn), charge: c.pay(driver.ActSubmitSQL), done: true, status: done, reward: birdReward(0.7, 0.3)}},
	}})
	scripts = append(scripts, script{name: "stop", check: checkSteps, moves: []move{
		{name: "stop", act: stop(), want: want{turns: turns(stopTurn, notice), done: true, status: done, reward: birdReward(0, -1)}},
	}})

	// Spend the coins on questions: then only the free final submit is
	// accepted (sql_required); it is scored for its sub-task and ends the
	// episode; any other action the coins cannot pay for ends it TRUNCATED.
	c = &coins{left: total}
	moves = nil
	for i := 0; c.left >= birdAPrices[driver.ActAsk]; i++ {
		w := want{turns: turns(question, refusal), charge: c.pay(driver.ActAsk), noCredit: true}
		if c.spent() {
			w.sqlRequired, w.phase = true, pb.Phase_PHASE_SOLVING
		}
		moves = append(moves, move{name: "generic question " + strconv.Itoa(i+1), act: ask(genericQuestions[i%2]), want: w, mark: "spent"})
	}
	if !c.spent() {
		panic("conformance: (suite) BIRD_A budgets are whole pairs of coins; the questions should spend them")
	}
	truncated := pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
	moves = append(moves,
		move{name: "a question the coins cannot pay for", from: "spent", act: ask(fullQuestion("everything")), want: want{turns: turns(toolCall, notice), done: true, status: truncated, reward: birdReward(0, -1)}},
		move{name: "a tool the coins cannot pay for", from: "spent", act: act(driver.GetSchemaAction()), want: want{turns: turns(toolCall, notice), done: true, status: truncated, reward: birdReward(0, -1)}},
		move{name: "unparsed output the coins cannot pay for", from: "spent", act: unparsed("<garbled"), want: want{turns: turns(toolCall, notice), done: true, status: truncated, reward: birdReward(0, -1)}},
		move{name: "stop", from: "spent", act: stop(), want: want{turns: turns(stopTurn, notice), done: true, status: done, reward: birdReward(0, -1)}},
		move{name: "the free final submit, wrong", from: "spent", act: submit(wrongSQL), want: want{turns: turns(sqlTurn, feedback), done: true, status: done, reward: birdReward(0, -1)}},
		move{name: "the free final submit, right", from: "spent", act: submit(tk.reference), want: want{turns: turns(sqlTurn), done: true, status: done, reward: birdReward(0.7, -1)}})
	scripts = append(scripts, script{name: "spend the coins", check: checkBudget, moves: moves})

	// The policy's faults: a refused question and failed SQL cost their
	// price and the episode goes on; execute's errors are its output.
	var faults []move
	for _, q := range faultyQuestions {
		faults = append(faults, move{name: q.name, from: "reset", act: ask(q.text), want: want{turns: turns(question, turnStarting(pb.TurnKind_TURN_KIND_REFUSAL, refusalPrefix)), charge: birdAPrices[driver.ActAsk], noCredit: true}})
	}
	for _, s := range badSQL() {
		faults = append(faults,
			move{name: s.name, from: "reset", act: submit(s.sql), want: want{turns: turns(sqlTurn, feedback), charge: birdAPrices[driver.ActSubmitSQL], brokenSQL: true}},
			move{name: "execute " + s.name, from: "reset", act: act(driver.ExecuteAction(s.sql)), want: want{turns: turns(toolCall, toolResult), charge: birdAPrices[driver.ActExecute]}})
	}
	faults = append(faults, move{name: "execute SQL that writes", from: "reset", act: act(driver.ExecuteAction("DELETE FROM no_such_table")),
		want: want{turns: turns(toolCall, toolResult), charge: birdAPrices[driver.ActExecute]}})
	faults = append(faults, badRequests(true)...)
	scripts = append(scripts, script{name: "faults", check: checkFaults, moves: faults})
	return scripts
}

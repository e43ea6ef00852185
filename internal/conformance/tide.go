package conformance

// TIDE_F and TIDE_P (PROTOCOL.md §9, §11; docs/protocols.md "Protocols"): 20 agent
// turns (each question, SQL or unparsed output), no result shown, the drift
// turn after the first SQL, abstention on a stop or a second unparsed
// output in a row, the chain rule (L2 credited only after L1), TIDE_P's
// pre-filled first layer; the outcome reward (DEA) with TIDE's components.

import (
	"slices"

	pb "avtgym/proto/avtgym/v1"
)

func sampleIs(kind string) func(*task) bool {
	return func(t *task) bool { return t.sampleType == kind }
}

var tideComponents = []string{"outcome", "sql1", "sql2", "drift_recognized", "l1_identified", "l2_identified", "asked"}

var tideBadOptions = []badOption{
	{"the question-F1 reward", &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_QUESTION_F1}},
	{"the lookup solver", &pb.EpisodeOptions{Solver: pb.Solver_SOLVER_LOOKUP}},
	{"an unknown oracle", &pb.EpisodeOptions{Oracle: pb.OracleType(99)}},
}

// tideTurns is TIDE's agent-turn limit.
const tideTurns = 20

var tideF = &protocol{
	name:       "TIDE_F",
	proto:      pb.Protocol_PROTOCOL_TIDE_F,
	unit:       pb.BudgetUnit_BUDGET_UNIT_TURNS,
	budget:     func(*task, *pb.EpisodeOptions) int64 { return tideTurns * 1000 },
	components: tideComponents,
	classes: []class{
		{name: "chain only", match: sampleIs("chain_only"), count: 1},
		{name: "drift only", match: sampleIs("drift_only"), count: 1},
		{name: "chain and drift", match: sampleIs("joint"), count: 1},
	},
	scripts:       func(t *task) []script { return tideScripts(t, false) },
	badOptions:    tideBadOptions,
	blindCounters: true,
}

var tideP = &protocol{
	name:       "TIDE_P",
	proto:      pb.Protocol_PROTOCOL_TIDE_P,
	unit:       pb.BudgetUnit_BUDGET_UNIT_TURNS,
	budget:     func(*task, *pb.EpisodeOptions) int64 { return tideTurns * 1000 },
	components: tideComponents,
	classes: []class{
		{name: "chain only", match: sampleIs("chain_only"), count: 1},
		{name: "chain and drift", match: sampleIs("joint"), count: 1},
	},
	scripts:       func(t *task) []script { return tideScripts(t, true) },
	badOptions:    tideBadOptions,
	blindCounters: true,
}

// tideResult is what a TIDE episode achieved, for its reward.
type tideResult struct {
	sql1, sql2, recognized, l1, l2, asked bool
}

// tideReward is TIDE's outcome reward: 1 when every SQL matched (DEA),
// with sql1 and asked always, sql2 and drift_recognized on a task with a
// drift, l1_identified and l2_identified on a task with a chain.
func tideReward(tk *task, r tideResult) *wantReward {
	b := func(x bool) float64 {
		if x {
			return 1
		}
		return 0
	}
	dea := r.sql1 && (tk.drift == "" || r.sql2)
	c := map[string]float64{"outcome": b(dea), "sql1": b(r.sql1), "asked": b(r.asked)}
	if tk.drift != "" {
		c["sql2"], c["drift_recognized"] = b(r.sql2), b(r.recognized)
	}
	if tk.chain {
		c["l1_identified"], c["l2_identified"] = b(r.l1), b(r.l2)
	}
	return &wantReward{typ: pb.RewardType_REWARD_TYPE_OUTCOME, value: b(dea), components: c}
}

func tideScripts(tk *task, prefilled bool) []script {
	done := pb.EpisodeStatus_EPISODE_STATUS_TERMINATED
	truncated := pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED
	drift := turnSaying(pb.TurnKind_TURN_KIND_DRIFT, tk.drift) // injected verbatim
	var scripts []script

	// submitFirst is the first SQL: with a drift, the drift turn follows
	// and sub-task 2 begins; without, the episode ends and r is its result.
	submitFirst := func(name, sql string, r tideResult, broken bool) move {
		if tk.drift != "" {
			return move{name: name, act: submit(sql), want: want{turns: turns(sqlTurn, drift), charge: 1000, subtask: 2, brokenSQL: broken}}
		}
		return move{name: name, act: submit(sql), want: want{turns: turns(sqlTurn), charge: 1000, done: true, status: done, brokenSQL: broken, reward: tideReward(tk, r)}}
	}

	// The chain-aware policy: L1 (pre-filled under TIDE_P), then L2, each
	// routed to its layer; then the reference, and after a drift the
	// post-drift reference: DEA 1.
	var moves []move
	layers := [][]string{tk.l1, tk.l2}
	if prefilled {
		layers = layers[1:]
	}
	askedAny := false
	for _, terms := range layers {
		for _, term := range dedupe(terms) {
			routing := "L1"
			if slices.Contains(tk.l2, term) {
				routing = "L2"
			}
			askedAny = true
			moves = append(moves, move{name: "ask about " + term, act: ask(fullQuestion(term)),
				want: want{turns: turns(question, reply), charge: 1000, credit: []string{term}, routing: routing}})
		}
	}
	right := tideResult{sql1: true, sql2: true, recognized: true, l1: tk.chain && !prefilled, l2: tk.chain, asked: askedAny}
	moves = append(moves, submitFirst("submit the reference", tk.reference, right, false))
	if tk.drift != "" {
		moves = append(moves, move{name: "submit the post-drift reference", act: submit(tk.postDrift),
			want: want{turns: turns(sqlTurn), charge: 1000, done: true, status: done, reward: tideReward(tk, right)}})
	}
	moves = append(moves, afterDone()...)
	scripts = append(scripts, script{name: "chain-aware policy", check: checkSteps, moves: moves})

	// Drift-blind: the first reference again after the drift.
	if tk.drift != "" {
		scripts = append(scripts, script{name: "drift-blind policy", check: checkSteps, moves: []move{
			submitFirst("submit the reference", tk.reference, tideResult{}, false),
			{name: "submit it again", act: submit(tk.reference), want: want{turns: turns(sqlTurn), charge: 1000, done: true, status: done,
				reward: tideReward(tk, tideResult{sql1: true})}},
		}})
	}

	// The chain rule: a question aimed at L2 while L1 is open credits
	// nothing and is routed "other": TIDE Appendix E routes it "as LOC
	// rather than AMB", answered with the SQL-level detail L2 decides
	// (the demo's samples localise it by their alternative SQL:
	// oracle.ChainDetail), so the oracle replies.
	if tk.chain && !prefilled {
		moves := []move{{name: "ask about " + tk.l2[0] + " first", act: ask(fullQuestion(tk.l2[0])), want: want{turns: turns(question, reply), charge: 1000, noCredit: true, routing: "other"}}}
		moves = append(moves, move{name: "ask about " + tk.l1[0], act: ask(fullQuestion(tk.l1[0])), want: want{turns: turns(question, reply), charge: 1000, credit: []string{tk.l1[0]}, routing: "L1"}})
		moves = append(moves, move{name: "ask about " + tk.l2[0] + " again", act: ask(fullQuestion(tk.l2[0])), want: want{turns: turns(question, reply), charge: 1000, credit: []string{tk.l2[0]}, routing: "L2"}})
		moves = append(moves, move{name: "stop: an abstention", act: stop(), want: want{turns: turns(stopTurn, notice), done: true, status: done,
			reward: tideReward(tk, tideResult{asked: true, l1: true, l2: true})}})
		scripts = append(scripts, script{name: "the chain rule", check: checkSteps, moves: moves})
	}

	// Abstention: a stop, or a second unparsed output in a row (another
	// action between two resets the row).
	scripts = append(scripts, script{name: "abstentions", check: checkSteps, moves: []move{
		{name: "unparsed", act: unparsed("<garbled"), want: want{turns: turns(unparsedTurn, notice), charge: 1000}},
		{name: "a generic question", act: ask(genericQuestions[0]), want: want{turns: turns(question, refusal), charge: 1000, noCredit: true}},
		{name: "unparsed after a question", act: unparsed("<garbled"), want: want{turns: turns(unparsedTurn, notice), charge: 1000}},
		{name: "unparsed twice in a row", act: unparsed("<garbled again"), want: want{turns: turns(unparsedTurn, notice), charge: 1000, done: true, status: done,
			reward: tideReward(tk, tideResult{asked: true})}},
		{name: "stop at once", from: "reset", act: stop(), want: want{turns: turns(stopTurn, notice), done: true, status: done, reward: tideReward(tk, tideResult{})}},
	}})

	// The turn limit: the 20th turn ends the episode TRUNCATED unless it is
	// the episode's last SQL.
	moves = genericAsks(tideTurns-1, 1000, nil)
	moves[len(moves)-1].mark = "one turn left"
	spent := tideResult{asked: true}
	moves = append(moves,
		move{name: "a question on the last turn", act: ask(genericQuestions[1]), want: want{turns: turns(question, refusal, notice), charge: 1000, noCredit: true, done: true, status: truncated, reward: tideReward(tk, spent)}},
		move{name: "unparsed on the last turn", from: "one turn left", act: unparsed("<garbled"), want: want{turns: turns(unparsedTurn, notice, notice), charge: 1000, done: true, status: truncated, reward: tideReward(tk, spent)}},
		move{name: "stop on the last turn", from: "one turn left", act: stop(), want: want{turns: turns(stopTurn, notice), done: true, status: done, reward: tideReward(tk, spent)}})
	if tk.drift == "" {
		moves = append(moves, move{name: "the reference on the last turn", from: "one turn left", act: submit(tk.reference),
			want: want{turns: turns(sqlTurn), charge: 1000, done: true, status: done, reward: tideReward(tk, tideResult{sql1: true, asked: true})}})
	} else {
		moves = append(moves, move{name: "the reference on the last turn, before the drift", from: "one turn left", act: submit(tk.reference),
			want: want{turns: turns(sqlTurn, drift, notice), charge: 1000, subtask: 2, done: true, status: truncated, reward: tideReward(tk, tideResult{sql1: true, asked: true})}})
	}
	scripts = append(scripts, script{name: "exhaust the turns", check: checkBudget, moves: moves})

	// The policy's faults: a refused question is a turn; SQL that is not
	// run or fails is a failed SQL (no result is shown).
	var faults []move
	for _, q := range faultyQuestions {
		faults = append(faults, move{name: q.name, from: "reset", act: ask(q.text), want: want{turns: turns(question, turnStarting(pb.TurnKind_TURN_KIND_REFUSAL, refusalPrefix)), charge: 1000, noCredit: true}})
	}
	for _, s := range badSQL() {
		m := submitFirst(s.name, s.sql, tideResult{}, true)
		m.from = "reset"
		faults = append(faults, m)
	}
	faults = append(faults, badRequests(false)...)
	scripts = append(scripts, script{name: "faults", check: checkFaults, moves: faults})
	return scripts
}

func dedupe(s []string) []string {
	var out []string
	for _, x := range s {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

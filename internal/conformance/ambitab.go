package conformance

// AMBITAB (PROTOCOL.md §2; docs/protocols.md "Episodes"): questions within B = m + C
// (C = 2 by default; 0 questions on a zero-ambiguity control), stop, then
// the policy's or a server solver's SQL; question-F1 or outcome reward.

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"avtgym/env"
	pb "avtgym/proto/avtgym/v1"
)

var ambitab = &protocol{
	name:  "AMBITAB",
	proto: pb.Protocol_PROTOCOL_AMBITAB,
	unit:  pb.BudgetUnit_BUDGET_UNIT_QUESTIONS,
	budget: func(t *task, o *pb.EpisodeOptions) int64 {
		return int64(ambitabBudget(t, o)) * 1000
	},
	components: []string{"question_f1", "precision", "recall", "outcome"},
	classes: []class{
		{name: "with counted ambiguities", match: func(t *task) bool { return t.m > 0 }, count: 2},
		{name: "zero-ambiguity control", match: func(t *task) bool { return t.m == 0 }, count: 1},
	},
	scripts: ambitabScripts,
	badOptions: []badOption{
		{"extra_questions -1", &pb.EpisodeOptions{ExtraQuestions: proto.Int32(-1)}},
		{"extra_questions past the limit", &pb.EpisodeOptions{ExtraQuestions: proto.Int32(env.MaxExtraQuestions + 1)}},
		{"zero_ambiguity_budget past the limit", &pb.EpisodeOptions{ZeroAmbiguityBudget: proto.Int32(env.MaxExtraQuestions + 1)}},
		{"patience (BIRD's)", &pb.EpisodeOptions{Patience: proto.Int32(3)}},
		{"BIRD-Interact's reward", &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_BIRD_INTERACT}},
		{"an unknown oracle", &pb.EpisodeOptions{Oracle: pb.OracleType(99)}},
	},
}

// ambitabBudget is B: m + C for a task with m ≥ 1 counted ambiguities,
// else the zero-ambiguity budget (defaults 2 and 0).
func ambitabBudget(t *task, o *pb.EpisodeOptions) int {
	if t.m > 0 {
		extra := 2
		if o != nil && o.ExtraQuestions != nil {
			extra = int(o.GetExtraQuestions())
		}
		return t.m + extra
	}
	if o != nil && o.ZeroAmbiguityBudget != nil {
		return int(o.GetZeroAmbiguityBudget())
	}
	return 0
}

// ambitabReward is AMBITAB's reward: the value of its type, question_f1
// always, precision iff a question was answered, recall iff the task has
// counted ambiguities, outcome iff a solution was verified (outcome < 0:
// none).
func ambitabReward(tk *task, typ pb.RewardType, answered int, qf1, precision, recall, outcome float64) *wantReward {
	c := map[string]float64{"question_f1": qf1}
	if answered > 0 {
		c["precision"] = precision
	}
	if tk.m > 0 {
		c["recall"] = recall
	}
	value := qf1
	if outcome >= 0 {
		c["outcome"] = outcome
	}
	if typ == pb.RewardType_REWARD_TYPE_OUTCOME {
		value = max(0, outcome)
	}
	return &wantReward{typ: typ, value: value, components: c}
}

// noQuestionF1 is the question-F1 reward of an episode without questions:
// 0 with counted ambiguities, 1 on a control (PROTOCOL.md §6).
func noQuestionF1(tk *task) float64 {
	if tk.m > 0 {
		return 0
	}
	return 1
}

func ambitabScripts(tk *task) []script {
	qf1 := pb.RewardType_REWARD_TYPE_QUESTION_F1
	outcome := pb.RewardType_REWARD_TYPE_OUTCOME
	explicit := &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_AMBITAB}
	withOutcome := &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_AMBITAB, Reward: outcome}
	full := 0.0 // precision, recall and question-F1 of the full policy: 1 (PROTOCOL.md §3)
	if tk.m > 0 {
		full = 1
	}
	asked := len(tk.terms)
	var scripts []script

	// The full policy, then stop: question-F1 needs no SQL (the protocol
	// left unset: AMBITAB is the default).
	moves := askTerms(tk, 1000)
	moves = append(moves, move{name: "stop", act: stop(), want: want{turns: turns(stopTurn), done: true, status: pb.EpisodeStatus_EPISODE_STATUS_TERMINATED,
		reward: ambitabReward(tk, qf1, asked, max(full, noQuestionF1(tk)), full, full, -1)}})
	moves = append(moves, afterDone()...)
	scripts = append(scripts, script{name: "full policy, question-F1", check: checkSteps, moves: moves})

	// The outcome reward with the client's SQL: stop moves to solving, where
	// asking and stopping are wrong-phase errors; the reference passes.
	moves = askTerms(tk, 1000)
	moves = append(moves,
		move{name: "stop", act: stop(), want: want{turns: turns(stopTurn), phase: pb.Phase_PHASE_SOLVING}},
		move{name: "ask while solving", act: ask(genericQuestions[0]), want: want{code: codes.FailedPrecondition, reason: "WRONG_PHASE"}},
		move{name: "stop while solving", act: stop(), want: want{code: codes.FailedPrecondition, reason: "WRONG_PHASE"}},
		move{name: "submit the reference", act: submit(tk.reference), want: want{turns: turns(sqlTurn), done: true, status: pb.EpisodeStatus_EPISODE_STATUS_TERMINATED,
			reward: ambitabReward(tk, outcome, asked, max(full, noQuestionF1(tk)), full, full, 1)}})
	moves = append(moves, afterDone()...)
	scripts = append(scripts, script{name: "outcome reward, the client's SQL", check: checkSteps, opts: withOutcome, moves: moves})

	// submit_sql while asking is stop + submit; with question-F1 the
	// outcome is still a component.
	scripts = append(scripts, script{name: "submit while asking", check: checkSteps, opts: explicit, moves: []move{
		{name: "submit a wrong answer", act: submit(wrongSQL), want: want{turns: turns(sqlTurn), done: true, status: pb.EpisodeStatus_EPISODE_STATUS_TERMINATED,
			reward: ambitabReward(tk, qf1, 0, noQuestionF1(tk), 0, 0, 0)}},
	}})

	// The lookup solver writes the SQL at stop, from what the dialogue
	// revealed: after the full policy, the right interpretation's.
	moves = askTerms(tk, 1000)
	moves = append(moves, move{name: "stop", act: stop(), want: want{turns: turns(stopTurn), done: true, status: pb.EpisodeStatus_EPISODE_STATUS_TERMINATED, solver: true,
		reward: ambitabReward(tk, outcome, asked, max(full, noQuestionF1(tk)), full, full, 1)}})
	scripts = append(scripts, script{name: "lookup solver", check: checkSteps,
		opts: &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_AMBITAB, Reward: outcome, Solver: pb.Solver_SOLVER_LOOKUP}, moves: moves})

	// Unparsed output: the first gets a notice, the second in a row is a
	// stop (asking) or a failed solution (solving).
	scripts = append(scripts, script{name: "unparsed output", check: checkSteps, opts: explicit, moves: []move{
		{name: "unparsed", act: unparsed("<garbled"), want: want{turns: turns(unparsedTurn, notice)}},
		{name: "unparsed again: a stop", act: unparsed("<garbled again"), want: want{turns: turns(unparsedTurn), done: true, status: pb.EpisodeStatus_EPISODE_STATUS_TERMINATED,
			reward: ambitabReward(tk, qf1, 0, noQuestionF1(tk), 0, 0, -1)}},
	}})
	scripts = append(scripts, script{name: "unparsed output while solving", check: checkSteps, opts: withOutcome, moves: []move{
		{name: "stop", act: stop(), want: want{turns: turns(stopTurn), phase: pb.Phase_PHASE_SOLVING}},
		{name: "unparsed", act: unparsed("<garbled"), want: want{turns: turns(unparsedTurn, notice), phase: pb.Phase_PHASE_SOLVING}},
		{name: "unparsed again: a failed solution", act: unparsed("<garbled again"), want: want{turns: turns(unparsedTurn, feedback), done: true, status: pb.EpisodeStatus_EPISODE_STATUS_TERMINATED,
			reward: ambitabReward(tk, outcome, 0, noQuestionF1(tk), 0, 0, 0)}},
	}})

	// Budget exhaustion: B questions are answered; the next is not
	// (no oracle turn, not counted), asking ends and the status is
	// TRUNCATED — at once with question-F1, after the SQL with outcome.
	for _, b := range []struct {
		name string
		opts *pb.EpisodeOptions
	}{
		{"the default budget", explicit},
		{"the budget of the options", &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_AMBITAB, ExtraQuestions: proto.Int32(0), ZeroAmbiguityBudget: proto.Int32(1)}},
	} {
		n := ambitabBudget(tk, b.opts)
		moves := genericAsks(n, 1000, nil)
		over := fullQuestion("everything")
		if len(tk.terms) > 0 {
			over = fullQuestion(tk.terms[0]) // it would be credited within the budget
		}
		moves = append(moves, move{name: "a question over the budget", act: ask(over), want: want{turns: turns(question, notice), noCredit: true,
			done: true, status: pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED, reward: ambitabReward(tk, qf1, n, 0, 0, 0, -1)}})
		moves = append(moves, afterDone()...)
		scripts = append(scripts, script{name: "exhaust " + b.name, check: checkBudget, opts: b.opts, moves: moves})
	}
	moves = genericAsks(ambitabBudget(tk, withOutcome), 1000, nil)
	moves = append(moves,
		move{name: "a question over the budget", act: ask(genericQuestions[0]), want: want{turns: turns(question, notice), noCredit: true, phase: pb.Phase_PHASE_SOLVING}},
		move{name: "submit the reference", act: submit(tk.reference), want: want{turns: turns(sqlTurn), done: true, status: pb.EpisodeStatus_EPISODE_STATUS_TRUNCATED,
			reward: ambitabReward(tk, outcome, ambitabBudget(tk, withOutcome), 0, 0, 0, 1)}})
	scripts = append(scripts, script{name: "exhaust the budget under the outcome reward", check: checkBudget, opts: withOutcome, moves: moves})

	// The policy's faults are scored: a refused question that counts, a
	// failed solution; never ERROR.
	faultOpts := &pb.EpisodeOptions{Protocol: pb.Protocol_PROTOCOL_AMBITAB, ZeroAmbiguityBudget: proto.Int32(1)}
	moves = nil
	for _, q := range faultyQuestions {
		moves = append(moves, move{name: q.name, from: "reset", act: ask(q.text), want: want{turns: turns(question, turnStarting(pb.TurnKind_TURN_KIND_REFUSAL, refusalPrefix)), charge: 1000, noCredit: true}})
	}
	moves = append(moves, badRequests(false)...)
	scripts = append(scripts, script{name: "faulty questions", check: checkFaults, opts: faultOpts, moves: moves})
	moves = nil
	for _, s := range unrunSQL {
		moves = append(moves, move{name: s.name, from: "reset", act: submit(s.sql), want: want{turns: turns(sqlTurn, turnStarting(pb.TurnKind_TURN_KIND_FEEDBACK, "Your SQL was not run: it ")),
			done: true, status: pb.EpisodeStatus_EPISODE_STATUS_TERMINATED, brokenSQL: true, reward: ambitabReward(tk, outcome, 0, noQuestionF1(tk), 0, 0, 0)}})
	}
	for _, s := range failingSQL {
		moves = append(moves, move{name: s.name, from: "reset", act: submit(s.sql), want: want{turns: turns(sqlTurn, feedback),
			done: true, status: pb.EpisodeStatus_EPISODE_STATUS_TERMINATED, brokenSQL: true, reward: ambitabReward(tk, outcome, 0, noQuestionF1(tk), 0, 0, 0)}})
	}
	scripts = append(scripts, script{name: "faulty SQL", check: checkFaults, opts: withOutcome, moves: moves})
	return scripts
}

// Package reward turns a finished episode into its quantities (precision,
// recall, F1, success) and into every reward the environment returns:
// question-F1 and outcome (AMBITAB, PROTOCOL.md §6), BIRD-Interact's
// sub-task reward (BIRD_C and BIRD_A, §8) and TIDE's (TIDE_F and TIDE_P,
// §9), each with its named components (Component).
//
// The package reads only what env records of an episode: the credit
// bookkeeping (which ambiguities each answered question earned), the
// verifier's results and how each sub-task ended. It knows nothing about
// records, oracles, databases or the wire; env asks it for the numbers.
package reward

import (
	"fmt"
)

// Kind names a reward.
type Kind string

// The rewards the environment can return.
const (
	// QuestionF1 is the question-F1 reward (AmbiTab §4.4, §D.1): the
	// episode F1 when at least one question was productive, else 0; for a
	// record with no counted ambiguity, 1 when no question was attempted,
	// else 0. It needs no SQL.
	QuestionF1 Kind = "question_f1"
	// Outcome is the verifier's result V(θ, ŝ) ∈ {0, 1}; 0 when no
	// solution was verified.
	Outcome Kind = "outcome"
)

// Component names one part of a reward (a key of Reward.Components, and
// of avtgym.v1.Reward.components on the wire).
type Component string

// String returns the component's name.
func (c Component) String() string { return string(c) }

// The components of the question-F1 and outcome rewards (Score).
const (
	// ComponentQuestionF1 is the question-F1 reward; always present.
	ComponentQuestionF1 Component = "question_f1"
	// ComponentPrecision is the episode precision; present iff at least
	// one question was answered.
	ComponentPrecision Component = "precision"
	// ComponentRecall is the episode recall; present iff the record has at
	// least one counted ambiguity.
	ComponentRecall Component = "recall"
	// ComponentOutcome is the verifier's result as 0 or 1; present iff a
	// solution was verified. TIDE's reward has it too: 1 when every SQL
	// matched (Tide).
	ComponentOutcome Component = "outcome"
)

// The components of BIRD-Interact's reward (BirdInteract).
const (
	// ComponentPhase1 is BIRD-Interact's sub-task 1 reward (0.7, 0.5
	// after the debug retry, or 0); always present in its reward.
	ComponentPhase1 Component = "phase1"
	// ComponentPhase2 is BIRD-Interact's sub-task 2 reward (0.3, 0.2 or
	// 0); present iff the follow-up was released.
	ComponentPhase2 Component = "phase2"
)

// The components of TIDE's reward (Tide), besides ComponentOutcome.
const (
	// ComponentSQL1 is 1 when the first SQL matched the reference; always
	// present.
	ComponentSQL1 Component = "sql1"
	// ComponentSQL2 is 1 when the second SQL matched the post-drift
	// reference; present iff the task has a drift.
	ComponentSQL2 Component = "sql2"
	// ComponentDriftRecognized is 1 when the policy's two SQLs satisfy
	// S(y1) ⊄ S(y2) (TIDE's DRR); present iff the task has a drift.
	ComponentDriftRecognized Component = "drift_recognized"
	// ComponentL1Identified is 1 when a question of the policy was
	// credited with a layer-1 ambiguity of the chain; present iff the
	// task has a chain.
	ComponentL1Identified Component = "l1_identified"
	// ComponentL2Identified is 1 when a question of the policy was
	// credited with a layer-2 ambiguity; present iff the task has a chain.
	ComponentL2Identified Component = "l2_identified"
	// ComponentAsked is 1 when the policy asked at least one question;
	// always present.
	ComponentAsked Component = "asked"
)

// Components lists every component a reward of this package may carry,
// for those that bound a reward's size (env's limits).
func Components() []Component {
	return []Component{
		ComponentQuestionF1, ComponentPrecision, ComponentRecall, ComponentOutcome,
		ComponentPhase1, ComponentPhase2,
		ComponentSQL1, ComponentSQL2, ComponentDriftRecognized, ComponentL1Identified, ComponentL2Identified, ComponentAsked,
	}
}

// ParseKind parses a reward name ("question_f1" or "outcome").
func ParseKind(s string) (Kind, error) {
	switch k := Kind(s); k {
	case QuestionF1, Outcome:
		return k, nil
	}
	return "", fmt.Errorf("reward: unknown kind %q (want %q or %q)", s, QuestionF1, Outcome)
}

// String returns the reward's name.
func (k Kind) String() string { return string(k) }

// Episode is what the rewards read from an episode.
type Episode struct {
	// Counted holds the indexes (into the record's ambiguities) of the
	// counted ambiguities (critical and knowledge); |Amb| is the number of
	// distinct indexes in it.
	Counted []int
	// Credits has one entry per answered question, in order: the
	// ambiguity indexes the matcher credited. Indexes that are not in
	// Counted (non-critical ambiguities) are ignored. n = len(Credits).
	Credits [][]int
	// Attempted is the number of questions the policy attempted,
	// including an over-budget ask that was not answered.
	Attempted int
	// Outcome is the verifier's result when a solution was verified, nil
	// otherwise.
	Outcome *bool
	// FallbackStop reports that the episode ended by a fallback stop (the
	// asker's output could not be parsed): recall and F1 are omitted from
	// Quantities, success is kept (PROTOCOL.md §6).
	FallbackStop bool
}

// Quantities are the per-episode metrics of PROTOCOL.md §6. A nil pointer
// means the quantity is undefined for the episode (or omitted, for a
// fallback stop) and must be left out of the macro-average.
type Quantities struct {
	// Precision is the fraction of answered questions that were
	// productive; defined iff at least one question was answered.
	Precision *float64
	// Recall is the fraction of counted ambiguities credited at least
	// once; defined iff |Amb| ≥ 1 and the episode did not end by a
	// fallback stop.
	Recall *float64
	// F1 is the harmonic mean of Precision and Recall, 0 when no question
	// was answered or none was productive; defined iff |Amb| ≥ 1 and the
	// episode did not end by a fallback stop.
	F1 *float64
	// Success is the verifier's result; nil when no solution was verified.
	Success *bool
	// Productive is the number of productive questions: those that earned
	// a counted credit no earlier question had earned.
	Productive int
	// Questions is n, the number of answered questions (len(Credits)); an
	// over-budget ask that was not answered is not included.
	Questions int
}

// counts is the integer bookkeeping every quantity derives from.
type counts struct {
	m          int // |Amb|: distinct counted ambiguities
	n          int // answered questions
	productive int // productive questions
	covered    int // distinct counted ambiguities credited
}

func tally(e Episode) counts {
	counted := make(map[int]bool, len(e.Counted))
	for _, i := range e.Counted {
		counted[i] = false // false: counted, not yet credited
	}
	c := counts{m: len(counted), n: len(e.Credits)}
	for _, cred := range e.Credits {
		productive := false
		for _, i := range cred {
			if earned, ok := counted[i]; ok && !earned {
				counted[i] = true
				c.covered++
				productive = true
			}
		}
		if productive {
			c.productive++
		}
	}
	return c
}

// precision, recall and f1 are computed from integers with a single
// rounding each, so that equal ratios give bit-identical floats.
func (c counts) precision() float64 { return float64(c.productive) / float64(c.n) }
func (c counts) recall() float64    { return float64(c.covered) / float64(c.m) }

// f1 is 2PR/(P+R) = 2·p·k / (p·m + k·n) with P = p/n and R = k/m, and 0
// when no question was asked or none was productive.
func (c counts) f1() float64 {
	if c.n == 0 || c.productive == 0 {
		return 0
	}
	return float64(2*c.productive*c.covered) / float64(c.productive*c.m+c.covered*c.n)
}

// questionF1 is the question-F1 reward, which is always defined.
func (c counts) questionF1(e Episode) float64 {
	if c.m > 0 {
		return c.f1()
	}
	if e.Attempted == 0 && c.n == 0 {
		return 1
	}
	return 0
}

// Compute returns the episode's quantities (PROTOCOL.md §6).
func Compute(e Episode) Quantities {
	c := tally(e)
	q := Quantities{Productive: c.productive, Questions: c.n}
	if c.n >= 1 {
		q.Precision = ptr(c.precision())
	}
	if c.m >= 1 && !e.FallbackStop {
		q.Recall = ptr(c.recall())
		q.F1 = ptr(c.f1())
	}
	if e.Outcome != nil {
		q.Success = ptr(*e.Outcome)
	}
	return q
}

// Reward is a scalar reward with its named components.
type Reward struct {
	// Value is the reward of the requested kind.
	Value float64
	// Components maps each defined component's name (a Component, as a
	// string: the wire's shape, so that env hands the map over without
	// copying it) to its value. Score's reward holds "question_f1"
	// (always), "precision" (iff a question was answered), "recall" (iff
	// |Amb| ≥ 1) and "outcome" (iff a solution was verified). An undefined
	// component is absent, never 0.
	Components map[string]float64
}

// set records component c.
func (r Reward) set(c Component, v float64) { r.Components[string(c)] = v }

// unit is a condition as a reward: 1 or 0.
func unit(ok bool) float64 {
	if ok {
		return 1
	}
	return 0
}

// Score returns the reward of kind k for the episode, with all components
// defined for it. Unlike Compute, the recall component is reported for a
// fallback stop too: the omission of PROTOCOL.md §6 applies to evaluation
// averages, while a trainer still needs a reward for every episode. An
// unknown kind scores 0 with the components filled in.
func Score(k Kind, e Episode) Reward {
	c := tally(e)
	r := Reward{Components: make(map[string]float64, 4)}
	qf1 := c.questionF1(e)
	r.set(ComponentQuestionF1, qf1)
	if c.n >= 1 {
		r.set(ComponentPrecision, c.precision())
	}
	if c.m >= 1 {
		r.set(ComponentRecall, c.recall())
	}
	var outcome float64
	if e.Outcome != nil {
		outcome = unit(*e.Outcome)
		r.set(ComponentOutcome, outcome)
	}
	switch k {
	case QuestionF1:
		r.Value = qf1
	case Outcome:
		r.Value = outcome
	}
	return r
}

func ptr[T any](v T) *T { return &v }

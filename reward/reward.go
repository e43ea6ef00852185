// Package reward turns a finished episode into its quantities (precision,
// recall, F1, success) and into the rewards the environment returns
// (question-F1 and outcome), exactly as PROTOCOL.md §6 defines them.
//
// The package reads only the credit bookkeeping of an episode (which
// counted ambiguities each answered question earned) and the verifier's
// result; it knows nothing about records, oracles or databases.
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

// Component names used in Reward.Components.
const (
	// ComponentQuestionF1 is the question-F1 reward; always present.
	ComponentQuestionF1 = "question_f1"
	// ComponentPrecision is the episode precision; present iff at least
	// one question was answered.
	ComponentPrecision = "precision"
	// ComponentRecall is the episode recall; present iff the record has at
	// least one counted ambiguity.
	ComponentRecall = "recall"
	// ComponentOutcome is the verifier's result as 0 or 1; present iff a
	// solution was verified.
	ComponentOutcome = "outcome"
	// ComponentPhase1 is BIRD-Interact's sub-task 1 reward (0.7, 0.5
	// after the debug retry, or 0); always present in its reward.
	ComponentPhase1 = "phase1"
	// ComponentPhase2 is BIRD-Interact's sub-task 2 reward (0.3, 0.2 or
	// 0); present iff the follow-up was released.
	ComponentPhase2 = "phase2"
)

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
	// Components holds "question_f1" (always), "precision" (iff a question
	// was answered), "recall" (iff |Amb| ≥ 1) and "outcome" (iff a
	// solution was verified). An undefined component is absent, never 0.
	Components map[string]float64
}

// Score returns the reward of kind k for the episode, with all components
// defined for it. Unlike Compute, the recall component is reported for a
// fallback stop too: the omission of PROTOCOL.md §6 applies to evaluation
// averages, while a trainer still needs a reward for every episode. An
// unknown kind scores 0 with the components filled in.
func Score(k Kind, e Episode) Reward {
	c := tally(e)
	comp := make(map[string]float64, 4)
	qf1 := c.questionF1(e)
	comp[ComponentQuestionF1] = qf1
	if c.n >= 1 {
		comp[ComponentPrecision] = c.precision()
	}
	if c.m >= 1 {
		comp[ComponentRecall] = c.recall()
	}
	var outcome float64
	if e.Outcome != nil {
		if *e.Outcome {
			outcome = 1
		}
		comp[ComponentOutcome] = outcome
	}
	r := Reward{Components: comp}
	switch k {
	case QuestionF1:
		r.Value = qf1
	case Outcome:
		r.Value = outcome
	}
	return r
}

func ptr[T any](v T) *T { return &v }

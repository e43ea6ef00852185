package eval

import (
	"testing"

	"avtgym/driver"
)

func f(x float64) *float64 { return &x }

// TestSummarizeRolloutEligibility checks that each mean is over the
// episodes where its quantity is defined (PROTOCOL.md §6), with
// hand-computed values.
func TestSummarizeRolloutEligibility(t *testing.T) {
	rs := []*driver.Record{
		// An ambiguous episode with questions: every quantity defined.
		{AVTID: "a", Status: "TERMINATED", Precision: f(0.5), Recall: f(1), F1: f(2.0 / 3), Reward: f(2.0 / 3), Success: f(1)},
		// An ambiguous episode without questions: precision undefined.
		{AVTID: "a", Status: "TERMINATED", Recall: f(0), F1: f(0), Reward: f(0), Success: f(0)},
		// A control: recall and F1 undefined.
		{AVTID: "c", Status: "TRUNCATED", Precision: f(0), Reward: f(0), Success: f(1)},
		// A failed RPC and an environment ERROR: counted as errors only.
		{AVTID: "x", Status: "RPC_FAILED", Error: "boom"},
		{AVTID: "y", Status: "ERROR"},
	}
	s := SummarizeRollout("full", rs)
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if s.Episodes != 3 || s.Errors != 2 || s.Truncated != 1 || s.Policy != "full" {
		t.Errorf("episodes %d errors %d truncated %d policy %q", s.Episodes, s.Errors, s.Truncated, s.Policy)
	}
	check("precision", s.Precision, 0.25)  // (0.5 + 0) / 2
	check("recall", s.Recall, 0.5)         // (1 + 0) / 2
	check("f1", s.F1, 1.0/3)               // (2/3 + 0) / 2
	check("reward", s.RewardMean, 2.0/9)   // (2/3 + 0 + 0) / 3
	check("success", s.SuccessRate, 2.0/3) // (1 + 0 + 1) / 3
	check("multi success", s.MultiInterpretation.SuccessRate, 0.5)
	check("multi chance", s.MultiInterpretation.Chance, 0.5)
	if s.MultiInterpretation.Episodes != 2 {
		t.Errorf("multi episodes = %d", s.MultiInterpretation.Episodes)
	}
	empty := SummarizeRollout("none", []*driver.Record{{Status: "TERMINATED", Reward: f(1)}})
	if empty.Precision != nil || empty.Recall != nil || empty.F1 != nil || empty.SuccessRate != nil {
		t.Errorf("undefined means are not null: %+v", empty)
	}
}

// TestSummarizeRolloutFallback: a fallback stop counts for the reward and
// success, not for recall and F1.
func TestSummarizeRolloutFallback(t *testing.T) {
	rs := []*driver.Record{
		{Status: "TERMINATED", Recall: f(1), F1: f(1), Precision: f(1), Reward: f(1), Success: f(1)},
		{Status: "TERMINATED", FallbackStop: true, Recall: f(0.5), F1: f(0.5), Precision: f(1), Reward: f(0.5), Success: f(0)},
	}
	s := SummarizeRollout("llm", rs)
	if s.Episodes != 2 || s.FallbackStops != 1 || s.Errors != 0 {
		t.Errorf("counts = %+v", s)
	}
	if s.Recall == nil || *s.Recall != 1 || s.F1 == nil || *s.F1 != 1 {
		t.Errorf("recall %v f1 %v, want 1 and 1 (the fallback episode omitted)", s.Recall, s.F1)
	}
	if s.RewardMean == nil || *s.RewardMean != 0.75 || s.SuccessRate == nil || *s.SuccessRate != 0.5 {
		t.Errorf("reward %v success %v, want 0.75 and 0.5", s.RewardMean, s.SuccessRate)
	}
}

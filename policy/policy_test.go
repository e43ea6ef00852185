package policy

import (
	"slices"
	"testing"
)

func TestQuestions(t *testing.T) {
	terms := []string{"top customers", "West"}
	cases := []struct {
		name   Name
		budget int
		want   []string
	}{
		{None, 4, nil},
		{Full, 4, []string{"Could you clarify what exactly you mean by top customers?", "Could you clarify what exactly you mean by West?"}},
		{FullAdv, 4, []string{
			"Could you clarify what exactly you mean by top customers? Please give me as much detail as you can, and if you can, give the exact SQL for it.",
			"Could you clarify what exactly you mean by West? Please give me as much detail as you can, and if you can, give the exact SQL for it.",
		}},
		{NoneAdv, 5, []string{"Could you clarify what you want?", "Please elaborate.", "Could you clarify what you want?", "Please elaborate.", "Could you clarify what you want?"}},
		{NoneAdv, 0, nil},
	}
	for _, tc := range cases {
		if got := Questions(tc.name, terms, tc.budget); !slices.Equal(got, tc.want) {
			t.Errorf("%s (budget %d) = %q, want %q", tc.name, tc.budget, got, tc.want)
		}
	}
	if _, err := ParseName("fullish"); err == nil {
		t.Error("ParseName accepted an unknown policy")
	}
}

func f(x float64) *float64 { return &x }

// TestSummarizeEligibility checks that each mean is over the episodes where
// its quantity is defined (PROTOCOL.md §6), with hand-computed values.
func TestSummarizeEligibility(t *testing.T) {
	eps := []*Episode{
		// An ambiguous episode with questions: every quantity defined.
		{AVTID: "a", Status: "TERMINATED", Precision: f(0.5), Recall: f(1), F1: f(2.0 / 3), Reward: f(2.0 / 3), Outcome: f(1)},
		// An ambiguous episode without questions: precision undefined.
		{AVTID: "a", Status: "TERMINATED", Recall: f(0), F1: f(0), Reward: f(0), Outcome: f(0)},
		// A control: recall and F1 undefined.
		{AVTID: "c", Status: "TRUNCATED", Precision: f(0), Reward: f(0), Outcome: f(1)},
		// A failed RPC: counted as an error only.
		{AVTID: "x", Status: "RPC_FAILED", Error: "boom"},
	}
	s := Summarize(eps)
	check := func(name string, got *float64, want float64) {
		t.Helper()
		if got == nil || *got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if s.Episodes != 3 || s.Errors != 1 || s.Truncated != 1 {
		t.Errorf("episodes %d errors %d truncated %d", s.Episodes, s.Errors, s.Truncated)
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
	empty := Summarize([]*Episode{{Status: "TERMINATED", Reward: f(1)}})
	if empty.Precision != nil || empty.Recall != nil || empty.F1 != nil || empty.SuccessRate != nil {
		t.Errorf("undefined means are not null: %+v", empty)
	}
}

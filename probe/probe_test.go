package probe

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
	if _, err := Parse("fullish"); err == nil {
		t.Error("Parse accepted an unknown policy")
	}
	if n, err := Parse("full_adv"); err != nil || n != FullAdv {
		t.Errorf("Parse(full_adv) = %v, %v", n, err)
	}
}

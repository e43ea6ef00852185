package reward

import (
	"maps"
	"testing"
)

func f(v float64) *float64 { return &v }
func b(v bool) *bool       { return &v }

func eqF(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b // exact: the package rounds each ratio once
}

func eqB(a, b *bool) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func show(p *float64) any {
	if p == nil {
		return "nil"
	}
	return *p
}

func TestParseKind(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Kind
		wantErr bool
	}{
		{"question_f1", QuestionF1, false},
		{"outcome", Outcome, false},
		{"", "", true},
		{"Outcome", "", true},
		{"f1", "", true},
		{" outcome", "", true},
	} {
		got, err := ParseKind(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseKind(%q) = %q, %v; want %q, err=%v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// tests covers every edge case of PROTOCOL.md §6. want is the quantities,
// qf1 the question-F1 reward value and comp the full component map.
var tests = []struct {
	name string
	ep   Episode
	want Quantities
	comp map[string]float64
}{
	{
		name: "no question, two ambiguities",
		ep:   Episode{Counted: []int{0, 1}},
		want: Quantities{Recall: f(0), F1: f(0)},
		comp: map[string]float64{"question_f1": 0, "recall": 0},
	},
	{
		name: "one productive question of one, one ambiguity",
		ep:   Episode{Counted: []int{0}, Credits: [][]int{{0}}, Attempted: 1},
		want: Quantities{Precision: f(1), Recall: f(1), F1: f(1), Productive: 1, Questions: 1},
		comp: map[string]float64{"question_f1": 1, "precision": 1, "recall": 1},
	},
	{
		name: "unproductive questions only",
		ep:   Episode{Counted: []int{0, 1}, Credits: [][]int{{}, nil, {}}, Attempted: 3},
		want: Quantities{Precision: f(0), Recall: f(0), F1: f(0), Questions: 3},
		comp: map[string]float64{"question_f1": 0, "precision": 0, "recall": 0},
	},
	{
		name: "repeated credit is unproductive",
		// P = 2/3, R = 1, F1 = 2·(2/3)·1 / (2/3 + 1) = 4/5.
		ep:   Episode{Counted: []int{0, 1}, Credits: [][]int{{0}, {0}, {1}}, Attempted: 3},
		want: Quantities{Precision: f(2.0 / 3), Recall: f(1), F1: f(4.0 / 5), Productive: 2, Questions: 3},
		comp: map[string]float64{"question_f1": 4.0 / 5, "precision": 2.0 / 3, "recall": 1},
	},
	{
		name: "question crediting two terms at once",
		// One question, both credited: P = 1, R = 1.
		ep:   Episode{Counted: []int{0, 1}, Credits: [][]int{{0, 1}}, Attempted: 1},
		want: Quantities{Precision: f(1), Recall: f(1), F1: f(1), Productive: 1, Questions: 1},
		comp: map[string]float64{"question_f1": 1, "precision": 1, "recall": 1},
	},
	{
		name: "two-term question then a question repeating one of them",
		// P = 1/2, R = 1, F1 = 2/3.
		ep:   Episode{Counted: []int{0, 1}, Credits: [][]int{{0, 1}, {1}}, Attempted: 2},
		want: Quantities{Precision: f(1.0 / 2), Recall: f(1), F1: f(2.0 / 3), Productive: 1, Questions: 2},
		comp: map[string]float64{"question_f1": 2.0 / 3, "precision": 0.5, "recall": 1},
	},
	{
		name: "question adding one new credit to an old one is productive",
		ep:   Episode{Counted: []int{0, 1, 2}, Credits: [][]int{{0}, {0, 1}}, Attempted: 2},
		// P = 1, R = 2/3, F1 = 2·1·(2/3)/(5/3) = 4/5.
		want: Quantities{Precision: f(1), Recall: f(2.0 / 3), F1: f(4.0 / 5), Productive: 2, Questions: 2},
		comp: map[string]float64{"question_f1": 4.0 / 5, "precision": 1, "recall": 2.0 / 3},
	},
	{
		name: "partial recall with a wasted question",
		// P = 1/2, R = 1/3, F1 = 2·(1/6)/(5/6) = 2/5.
		ep:   Episode{Counted: []int{0, 1, 2}, Credits: [][]int{{}, {2}}, Attempted: 2},
		want: Quantities{Precision: f(1.0 / 2), Recall: f(1.0 / 3), F1: f(2.0 / 5), Productive: 1, Questions: 2},
		comp: map[string]float64{"question_f1": 2.0 / 5, "precision": 0.5, "recall": 1.0 / 3},
	},
	{
		name: "non-critical credits are ignored",
		// Ambiguities 0..3; 1 and 3 are non-critical. Crediting only 1
		// is unproductive; crediting 3 alongside 2 is productive for 2.
		ep:   Episode{Counted: []int{0, 2}, Credits: [][]int{{1}, {2, 3}, {3}}, Attempted: 3},
		want: Quantities{Precision: f(1.0 / 3), Recall: f(1.0 / 2), F1: f(2.0 / 5), Productive: 1, Questions: 3},
		comp: map[string]float64{"question_f1": 2.0 / 5, "precision": 1.0 / 3, "recall": 0.5},
	},
	{
		name: "only non-critical credits earn nothing",
		ep:   Episode{Counted: []int{0}, Credits: [][]int{{1}}, Attempted: 1},
		want: Quantities{Precision: f(0), Recall: f(0), F1: f(0), Questions: 1},
		comp: map[string]float64{"question_f1": 0, "precision": 0, "recall": 0},
	},
	{
		name: "duplicate index in Counted counts once",
		ep:   Episode{Counted: []int{0, 0}, Credits: [][]int{{0}}, Attempted: 1},
		want: Quantities{Precision: f(1), Recall: f(1), F1: f(1), Productive: 1, Questions: 1},
		comp: map[string]float64{"question_f1": 1, "precision": 1, "recall": 1},
	},
	{
		name: "duplicate index within one credit set counts once",
		ep:   Episode{Counted: []int{0, 1}, Credits: [][]int{{0, 0}}, Attempted: 1},
		want: Quantities{Precision: f(1), Recall: f(1.0 / 2), F1: f(2.0 / 3), Productive: 1, Questions: 1},
		comp: map[string]float64{"question_f1": 2.0 / 3, "precision": 1, "recall": 0.5},
	},
	{
		name: "zero ambiguities, no ask",
		ep:   Episode{},
		want: Quantities{},
		comp: map[string]float64{"question_f1": 1},
	},
	{
		name: "zero ambiguities, answered ask",
		ep:   Episode{Credits: [][]int{{}}, Attempted: 1},
		want: Quantities{Precision: f(0), Questions: 1},
		comp: map[string]float64{"question_f1": 0, "precision": 0},
	},
	{
		name: "zero ambiguities, answered ask crediting a non-critical one",
		ep:   Episode{Credits: [][]int{{0}}, Attempted: 1},
		want: Quantities{Precision: f(0), Questions: 1},
		comp: map[string]float64{"question_f1": 0, "precision": 0},
	},
	{
		name: "zero ambiguities, over-budget attempt not answered",
		ep:   Episode{Attempted: 1},
		want: Quantities{},
		comp: map[string]float64{"question_f1": 0},
	},
	{
		name: "over-budget attempt after productive questions",
		ep:   Episode{Counted: []int{0}, Credits: [][]int{{0}}, Attempted: 2},
		want: Quantities{Precision: f(1), Recall: f(1), F1: f(1), Productive: 1, Questions: 1},
		comp: map[string]float64{"question_f1": 1, "precision": 1, "recall": 1},
	},
	{
		name: "fallback stop omits recall and F1, keeps precision",
		ep:   Episode{Counted: []int{0, 1}, Credits: [][]int{{0}}, Attempted: 1, FallbackStop: true},
		want: Quantities{Precision: f(1), Productive: 1, Questions: 1},
		comp: map[string]float64{"question_f1": 2.0 / 3, "precision": 1, "recall": 0.5},
	},
	{
		name: "fallback stop keeps success",
		ep:   Episode{Counted: []int{0}, FallbackStop: true, Outcome: b(true)},
		want: Quantities{Success: b(true)},
		comp: map[string]float64{"question_f1": 0, "recall": 0, "outcome": 1},
	},
	{
		name: "outcome true",
		ep:   Episode{Counted: []int{0}, Credits: [][]int{{0}}, Attempted: 1, Outcome: b(true)},
		want: Quantities{Precision: f(1), Recall: f(1), F1: f(1), Success: b(true), Productive: 1, Questions: 1},
		comp: map[string]float64{"question_f1": 1, "precision": 1, "recall": 1, "outcome": 1},
	},
	{
		name: "outcome false",
		ep:   Episode{Outcome: b(false)},
		want: Quantities{Success: b(false)},
		comp: map[string]float64{"question_f1": 1, "outcome": 0},
	},
	{
		name: "outcome absent",
		ep:   Episode{Counted: []int{0}, Credits: [][]int{{0}}, Attempted: 1},
		want: Quantities{Precision: f(1), Recall: f(1), F1: f(1), Productive: 1, Questions: 1},
		comp: map[string]float64{"question_f1": 1, "precision": 1, "recall": 1},
	},
}

func TestCompute(t *testing.T) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Compute(tc.ep)
			if !eqF(got.Precision, tc.want.Precision) || !eqF(got.Recall, tc.want.Recall) ||
				!eqF(got.F1, tc.want.F1) || !eqB(got.Success, tc.want.Success) ||
				got.Productive != tc.want.Productive || got.Questions != tc.want.Questions {
				t.Errorf("Compute = P %v R %v F1 %v S %v prod %d n %d; want P %v R %v F1 %v S %v prod %d n %d",
					show(got.Precision), show(got.Recall), show(got.F1), got.Success, got.Productive, got.Questions,
					show(tc.want.Precision), show(tc.want.Recall), show(tc.want.F1), tc.want.Success, tc.want.Productive, tc.want.Questions)
			}
		})
	}
}

func TestScore(t *testing.T) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			qf := Score(QuestionF1, tc.ep)
			if !maps.Equal(qf.Components, tc.comp) {
				t.Errorf("components = %v, want %v", qf.Components, tc.comp)
			}
			if qf.Value != tc.comp["question_f1"] {
				t.Errorf("question_f1 value = %v, want %v", qf.Value, tc.comp["question_f1"])
			}
			out := Score(Outcome, tc.ep)
			if !maps.Equal(out.Components, tc.comp) {
				t.Errorf("outcome components = %v, want %v", out.Components, tc.comp)
			}
			if out.Value != tc.comp["outcome"] { // absent reads as 0
				t.Errorf("outcome value = %v, want %v", out.Value, tc.comp["outcome"])
			}
		})
	}
}

// The question-F1 reward equals the episode F1 whenever F1 is defined and
// reported (PROTOCOL.md §6).
func TestQuestionF1EqualsF1(t *testing.T) {
	for _, tc := range tests {
		q := Compute(tc.ep)
		if q.F1 == nil {
			continue
		}
		if r := Score(QuestionF1, tc.ep).Value; r != *q.F1 {
			t.Errorf("%s: question_f1 = %v, F1 = %v", tc.name, r, *q.F1)
		}
	}
}

func TestScoreUnknownKind(t *testing.T) {
	r := Score(Kind("bogus"), Episode{Outcome: b(true)})
	if r.Value != 0 || r.Components["outcome"] != 1 {
		t.Errorf("Score(bogus) = %+v", r)
	}
}

// F1 is the harmonic mean and is bit-identical for equal ratios.
func TestF1Exact(t *testing.T) {
	for _, tc := range []struct {
		c    counts
		want float64
	}{
		{counts{m: 4, n: 2, productive: 2, covered: 2}, 2.0 / 3},   // P 1, R 1/2
		{counts{m: 8, n: 4, productive: 4, covered: 4}, 2.0 / 3},   // same ratios
		{counts{m: 3, n: 5, productive: 3, covered: 3}, 3.0 / 4},   // P 3/5, R 1
		{counts{m: 7, n: 3, productive: 1, covered: 1}, 1.0 / 5},   // P 1/3, R 1/7
		{counts{m: 2, n: 0}, 0},                                    // no question
		{counts{m: 2, n: 3}, 0},                                    // none productive
		{counts{m: 10, n: 10, productive: 10, covered: 10}, 1},     // perfect
		{counts{m: 5, n: 6, productive: 3, covered: 4}, 48.0 / 78}, // P 1/2, R 4/5
	} {
		if got := tc.c.f1(); got != tc.want {
			t.Errorf("f1(%+v) = %v, want %v", tc.c, got, tc.want)
		}
	}
}

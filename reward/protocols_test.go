package reward

import (
	"maps"
	"slices"
	"testing"
)

// TestBirdInteract covers every ending of BIRD-Interact's two sub-tasks:
// the value is the sum of the sub-tasks' rewards, phase2 is present iff
// the follow-up was released, and sums are exact (0.7 + 0.3 is 1).
func TestBirdInteract(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ep    BirdEpisode
		value float64
		comp  map[string]float64
	}{
		{"sub-task 1 unsolved", BirdEpisode{}, 0, map[string]float64{"phase1": 0}},
		{"sub-task 1 solved, not released (BIRD_A's free submit)", BirdEpisode{Subtask1: BirdSolved}, 0.7, map[string]float64{"phase1": 0.7}},
		{"released, sub-task 2 unsolved", BirdEpisode{Subtask1: BirdSolved, Released: true}, 0.7, map[string]float64{"phase1": 0.7, "phase2": 0}},
		{"both solved first", BirdEpisode{Subtask1: BirdSolved, Subtask2: BirdSolved, Released: true}, 1, map[string]float64{"phase1": 0.7, "phase2": 0.3}},
		{"both after the retry", BirdEpisode{Subtask1: BirdSolvedAfterRetry, Subtask2: BirdSolvedAfterRetry, Released: true}, 0.7, map[string]float64{"phase1": 0.5, "phase2": 0.2}},
		{"retry, then first", BirdEpisode{Subtask1: BirdSolvedAfterRetry, Subtask2: BirdSolved, Released: true}, 0.8, map[string]float64{"phase1": 0.5, "phase2": 0.3}},
		{"first, then retry", BirdEpisode{Subtask1: BirdSolved, Subtask2: BirdSolvedAfterRetry, Released: true}, 0.9, map[string]float64{"phase1": 0.7, "phase2": 0.2}},
		{"sub-task 2 not released earns nothing", BirdEpisode{Subtask1: BirdSolved, Subtask2: BirdSolved}, 0.7, map[string]float64{"phase1": 0.7}},
		{"an unknown ending earns nothing", BirdEpisode{Subtask1: BirdSubtask(9), Subtask2: BirdSubtask(-1), Released: true}, 0, map[string]float64{"phase1": 0, "phase2": 0}},
	} {
		r := BirdInteract(tc.ep)
		if r.Value != tc.value || !maps.Equal(r.Components, tc.comp) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, r.Value, r.Components, tc.value, tc.comp)
		}
	}
}

// TestTide covers TIDE's reward: DEA needs every SQL the task asks for,
// and each component is present exactly when the task has what it
// measures (a drift, a chain).
func TestTide(t *testing.T) {
	chain := []int{1, 2, 1}
	for _, tc := range []struct {
		name  string
		ep    TideEpisode
		value float64
		comp  map[string]float64
	}{
		{"no drift, no chain, unsolved", TideEpisode{}, 0, map[string]float64{"outcome": 0, "sql1": 0, "asked": 0}},
		{"no drift, solved after asking", TideEpisode{SQL1: true, Asked: true}, 1, map[string]float64{"outcome": 1, "sql1": 1, "asked": 1}},
		{"drift, only the first SQL", TideEpisode{SQL1: true, Drift: true}, 0, map[string]float64{"outcome": 0, "sql1": 1, "asked": 0, "sql2": 0, "drift_recognized": 0}},
		{"drift, only the second SQL", TideEpisode{SQL2: true, Drift: true, DriftRecognized: true}, 0, map[string]float64{"outcome": 0, "sql1": 0, "asked": 0, "sql2": 1, "drift_recognized": 1}},
		{"drift, both", TideEpisode{SQL1: true, SQL2: true, Drift: true, DriftRecognized: true}, 1, map[string]float64{"outcome": 1, "sql1": 1, "asked": 0, "sql2": 1, "drift_recognized": 1}},
		{"SQL2 without a drift is not read", TideEpisode{SQL1: true, SQL2: true, DriftRecognized: true}, 1, map[string]float64{"outcome": 1, "sql1": 1, "asked": 0}},
		{"chain, nothing identified", TideEpisode{Layers: chain, Credits: [][]int{{}, nil}}, 0, map[string]float64{"outcome": 0, "sql1": 0, "asked": 0, "l1_identified": 0, "l2_identified": 0}},
		{"chain, L1 only", TideEpisode{Layers: chain, Credits: [][]int{{2}}, Asked: true}, 0, map[string]float64{"outcome": 0, "sql1": 0, "asked": 1, "l1_identified": 1, "l2_identified": 0}},
		{"chain, L2 only", TideEpisode{Layers: chain, Credits: [][]int{{1}}, Asked: true}, 0, map[string]float64{"outcome": 0, "sql1": 0, "asked": 1, "l1_identified": 0, "l2_identified": 1}},
		{"chain, both, credits out of range ignored", TideEpisode{Layers: chain, Credits: [][]int{{0, 7}, {-1, 1}}, SQL1: true}, 1, map[string]float64{"outcome": 1, "sql1": 1, "asked": 0, "l1_identified": 1, "l2_identified": 1}},
		{"credits without a chain are not read", TideEpisode{Credits: [][]int{{0}}}, 0, map[string]float64{"outcome": 0, "sql1": 0, "asked": 0}},
	} {
		r := Tide(tc.ep)
		if r.Value != tc.value || !maps.Equal(r.Components, tc.comp) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, r.Value, r.Components, tc.value, tc.comp)
		}
	}
}

// TestComponentsListsEveryName: every component a reward of this package
// sets is in Components (env bounds a reward's size by that list), once.
func TestComponentsListsEveryName(t *testing.T) {
	all := Components()
	seen := map[string]bool{}
	for _, c := range all {
		if seen[c.String()] {
			t.Errorf("%s is listed twice", c)
		}
		seen[c.String()] = true
	}
	rewards := []Reward{
		Score(QuestionF1, Episode{Counted: []int{0}, Credits: [][]int{{0}}, Attempted: 1, Outcome: b(true)}),
		BirdInteract(BirdEpisode{Subtask1: BirdSolved, Subtask2: BirdSolved, Released: true}),
		Tide(TideEpisode{SQL1: true, Drift: true, Layers: []int{1, 2}}),
	}
	set := map[string]bool{}
	for _, r := range rewards {
		for name := range r.Components {
			set[name] = true
			if !seen[name] {
				t.Errorf("component %q is not in Components()", name)
			}
		}
	}
	names := slices.Sorted(maps.Keys(seen))
	for _, name := range names {
		if !set[name] {
			t.Errorf("Components() lists %q, which no reward sets", name)
		}
	}
}

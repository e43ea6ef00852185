package reward

// BirdSubtask is how one of BIRD-Interact's sub-tasks ended (PROTOCOL.md
// §8).
type BirdSubtask int

// How a sub-task ends.
const (
	// BirdUnsolved: no SQL of the sub-task passed (or it was never
	// reached).
	BirdUnsolved BirdSubtask = iota
	// BirdSolved: an SQL passed without the debug retry (under BIRD_A,
	// which has no retry, any passing SQL).
	BirdSolved
	// BirdSolvedAfterRetry: the debug retry's SQL passed (BIRD_C).
	BirdSolvedAfterRetry
)

// BirdEpisode is what BIRD-Interact's reward reads from an episode.
type BirdEpisode struct {
	// Subtask1 and Subtask2 are how the record's sub-task and its
	// follow-up ended.
	Subtask1, Subtask2 BirdSubtask
	// Released reports that the follow-up was released (sub-task 1 passed
	// and the episode went on to sub-task 2).
	Released bool
}

// BIRD-Interact's c-Interact rewards, in thousandths, by how the sub-task
// ended: sub-task 1 0.7 (0.5 after the debug retry), sub-task 2 0.3 (0.2).
// Thousandths keep every sum exact: the value is one division of an
// integer.
var (
	birdSubtask1Milli = [...]int{BirdUnsolved: 0, BirdSolved: 700, BirdSolvedAfterRetry: 500}
	birdSubtask2Milli = [...]int{BirdUnsolved: 0, BirdSolved: 300, BirdSolvedAfterRetry: 200}
)

// milli is a sub-task's reward in thousandths from its table; an unknown
// ending earns nothing.
func milli(table []int, s BirdSubtask) int {
	if s < 0 || int(s) >= len(table) {
		return 0
	}
	return table[s]
}

// BirdInteract is BIRD-Interact's reward (REWARD_TYPE_BIRD_INTERACT): the
// sum of the sub-tasks' rewards, with components "phase1" (always) and
// "phase2" (iff the follow-up was released).
func BirdInteract(e BirdEpisode) Reward {
	r := Reward{Components: make(map[string]float64, 2)}
	p1 := milli(birdSubtask1Milli[:], e.Subtask1)
	r.set(ComponentPhase1, float64(p1)/1000)
	total := p1
	if e.Released {
		p2 := milli(birdSubtask2Milli[:], e.Subtask2)
		r.set(ComponentPhase2, float64(p2)/1000)
		total += p2
	}
	r.Value = float64(total) / 1000
	return r
}

package reward

// TideEpisode is what TIDE's reward reads from an episode (PROTOCOL.md
// §9).
type TideEpisode struct {
	// SQL1 reports that the first SQL was submitted and matched the
	// reference.
	SQL1 bool
	// Drift reports that the task has a drift: a second SQL is due after
	// the drift turn.
	Drift bool
	// SQL2 reports that the second SQL was submitted and matched the
	// post-drift reference (only with a drift).
	SQL2 bool
	// DriftRecognized reports that the policy's two SQLs were both
	// submitted, both ran, and satisfy S(y1) ⊄ S(y2) (only with a drift).
	DriftRecognized bool
	// Layers is the chain layer of each of the task's ambiguities (1 for
	// an ambiguity that depends on none, 2 for one that depends on a
	// layer-1 one, …); nil when the task has no chain.
	Layers []int
	// Credits has one entry per question of the policy (not the
	// environment's pre-filled ones): the ambiguity indexes it was
	// credited with.
	Credits [][]int
	// Asked reports that the policy asked at least one question.
	Asked bool
}

// Tide is TIDE's reward (REWARD_TYPE_OUTCOME, TIDE's DEA): 1 when every
// SQL the task asks for matched, else 0. Its components are "outcome" (the
// value), "sql1" and "asked" (always), "sql2" and "drift_recognized" (iff
// the task has a drift), "l1_identified" and "l2_identified" (iff it has a
// chain).
func Tide(e TideEpisode) Reward {
	r := Reward{Components: make(map[string]float64, 7)}
	dea := e.SQL1
	r.set(ComponentSQL1, unit(e.SQL1))
	r.set(ComponentAsked, unit(e.Asked))
	if e.Drift {
		dea = e.SQL1 && e.SQL2
		r.set(ComponentSQL2, unit(e.SQL2))
		r.set(ComponentDriftRecognized, unit(e.DriftRecognized))
	}
	if e.Layers != nil {
		var l1, l2 bool
		for _, credits := range e.Credits {
			for _, k := range credits {
				if k >= 0 && k < len(e.Layers) {
					l1 = l1 || e.Layers[k] == 1
					l2 = l2 || e.Layers[k] == 2
				}
			}
		}
		r.set(ComponentL1Identified, unit(l1))
		r.set(ComponentL2Identified, unit(l2))
	}
	r.Value = unit(dea)
	r.set(ComponentOutcome, r.Value)
	return r
}

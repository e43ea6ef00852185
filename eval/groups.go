package eval

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
)

// Group is one GRPO group of a training run: the rewards of its
// trajectories (which share a request and an interpretation) under one
// reward type. A groups file holds one JSON object per line:
//
//	{"reward_type": "question_f1", "rewards": [0.5, 1, 0.5, 0.5]}
type Group struct {
	RewardType string    `json:"reward_type"`
	Rewards    []float64 `json:"rewards"`
}

// GroupSignal is, per reward type, the fraction of groups whose rewards are
// not all equal: the groups that carry a learning signal, since a trainer
// drops zero-advantage groups (PROTOCOL.md §10). Groups with fewer than
// two rewards count as carrying none.
func GroupSignal(groups []Group) map[string]float64 {
	total, differing := map[string]int{}, map[string]int{}
	for _, g := range groups {
		total[g.RewardType]++
		for _, r := range g.Rewards[min(1, len(g.Rewards)):] {
			if r != g.Rewards[0] {
				differing[g.RewardType]++
				break
			}
		}
	}
	out := map[string]float64{}
	for k, n := range total {
		out[k] = float64(differing[k]) / float64(n)
	}
	return out
}

// ReadGroups reads a groups file; a malformed line is an error naming it.
func ReadGroups(name string) ([]Group, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var groups []Group
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var g Group
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", name, line, err)
		}
		if g.RewardType == "" {
			return nil, fmt.Errorf("%s:%d: reward_type: is required", name, line)
		}
		groups = append(groups, g)
	}
	return groups, sc.Err()
}

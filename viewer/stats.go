package viewer

import (
	"cmp"
	"math"
	"slices"
	"strconv"
)

// acc accumulates one group's metrics the way the eval report counts
// them: reward and SR over scored episodes (TERMINATED, TRUNCATED) with a
// value; F1 over those with one, fallback STOPs omitted (PROTOCOL.md §6).
type acc struct {
	N, Scored, Errors int
	rewardSum, f1Sum  float64
	srSum             float64
	rewardN, f1N, srN int
	questions         int64
	statuses          map[string]int
}

func (a *acc) add(s *Summary) {
	a.N++
	a.questions += int64(s.Questions)
	if s.Status == "ERROR" {
		a.Errors++
	}
	if a.statuses == nil {
		a.statuses = map[string]int{}
	}
	a.statuses[s.Status]++
	if !s.Scored() {
		return
	}
	a.Scored++
	if !math.IsNaN(s.Reward) {
		a.rewardSum += s.Reward
		a.rewardN++
	}
	if !math.IsNaN(s.F1) && !s.FallbackStop {
		a.f1Sum += s.F1
		a.f1N++
	}
	if !math.IsNaN(s.Success) {
		a.srSum += s.Success
		a.srN++
	}
}

func mean(sum float64, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

func (a acc) Reward() float64    { return mean(a.rewardSum, a.rewardN) }
func (a acc) F1() float64        { return mean(a.f1Sum, a.f1N) }
func (a acc) SR() float64        { return mean(a.srSum, a.srN) }
func (a acc) Questions() float64 { return mean(float64(a.questions), a.N) }

// Status is how many of the group's episodes ended with status s.
func (a acc) Status(s string) int { return a.statuses[s] }

// group is one row of a breakdown.
type group struct {
	Label string
	acc
}

// groupBy accumulates the selected episodes by key, in first-seen order.
func groupBy(eps []Summary, sel []int, key func(*Summary) string) []*group {
	idx := map[string]*group{}
	var out []*group
	for _, i := range sel {
		s := &eps[i]
		k := key(s)
		g := idx[k]
		if g == nil {
			g = &group{Label: k}
			idx[k] = g
			out = append(out, g)
		}
		g.add(s)
	}
	return out
}

// noTag labels the episodes without the chosen tag.
const noTag = "(no tag)"

// sortLabels orders groups by label, numerically when every label but
// noTag is a number (trainer/step 2 before 10), noTag last.
func sortLabels(gs []*group) {
	numeric := true
	for _, g := range gs {
		if g.Label == noTag {
			continue
		}
		if _, err := strconv.ParseFloat(g.Label, 64); err != nil {
			numeric = false
			break
		}
	}
	slices.SortFunc(gs, func(a, b *group) int {
		if a.Label == noTag || b.Label == noTag {
			return cmp.Compare(b2i(a.Label == noTag), b2i(b.Label == noTag))
		}
		if numeric {
			x, _ := strconv.ParseFloat(a.Label, 64)
			y, _ := strconv.ParseFloat(b.Label, 64)
			if c := cmp.Compare(x, y); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.Label, b.Label)
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// histBin is one row of the questions-asked histogram.
type histBin struct {
	Label   string
	Count   int
	Share   float64 // of the selected episodes, 0–1
	Percent float64 // Share×100, for the meter
	Reward  float64
	SR      float64
}

// maxHistBins caps the histogram's rows: counts past it share one row.
const maxHistBins = 30

func questionHistogram(eps []Summary, sel []int) []histBin {
	var accs [maxHistBins + 1]acc
	top := 0
	for _, i := range sel {
		q := int(eps[i].Questions)
		if q > maxHistBins {
			q = maxHistBins
		}
		top = max(top, q)
		accs[q].add(&eps[i])
	}
	if len(sel) == 0 {
		return nil
	}
	out := make([]histBin, 0, top+1)
	for q := 0; q <= top; q++ {
		label := strconv.Itoa(q)
		if q == maxHistBins {
			label += "+"
		}
		share := float64(accs[q].N) / float64(len(sel))
		out = append(out, histBin{Label: label, Count: accs[q].N, Share: share, Percent: 100 * share, Reward: accs[q].Reward(), SR: accs[q].SR()})
	}
	return out
}

// sortByReward orders groups worst mean reward first (unscored last),
// then by label, so that the tasks that fail lead the per-task table.
func sortByReward(gs []*group) {
	slices.SortFunc(gs, func(a, b *group) int {
		ra, rb := a.Reward(), b.Reward()
		switch {
		case math.IsNaN(ra) != math.IsNaN(rb):
			return cmp.Compare(b2i(math.IsNaN(ra)), b2i(math.IsNaN(rb)))
		case !math.IsNaN(ra) && ra != rb:
			return cmp.Compare(ra, rb)
		}
		return cmp.Compare(a.Label, b.Label)
	})
}

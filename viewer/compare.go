package viewer

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
)

// pairKey is what makes two episodes of two runs the same play: the task
// and seed, and eval's condition and oracle where the records have them
// (empty otherwise, so that rollout records pair on task and seed).
type pairKey struct {
	task      string
	seed      uint64
	condition string
	oracle    string
}

func keyOf(s *Summary, labels bool) pairKey {
	if !labels {
		return pairKey{task: s.TaskID, seed: s.Seed}
	}
	return pairKey{s.TaskID, s.Seed, s.Condition, s.Oracle}
}

// hasEvalLabels reports whether any of the run's records has eval's condition
// or oracle.
func hasEvalLabels(r *Run) bool {
	for i := range r.Episodes {
		if r.Episodes[i].Condition != "" || r.Episodes[i].Oracle != "" {
			return true
		}
	}
	return false
}

// Bootstrap settings of the paired difference: resamples of tasks, from a
// fixed seed so that the page shows the same interval every time.
const (
	bootstrapResamples = 2000
	bootstrapSeed      = 20240601
)

// pair is one matched play: episode indices (from 0) in A and B.
type pair struct{ A, B int }

// taskDelta is one task's paired comparison.
type taskDelta struct {
	Task         string
	Pairs        []pair
	MeanA, MeanB float64
	Delta        float64
	Verdict      string // improved, regressed or unchanged
}

// comparison is the compare page's numbers.
type comparison struct {
	A, B *Run
	// PairedOn names the key: condition and oracle join task and seed
	// only when both runs have them (an eval run against a rollout file
	// or an episode log pairs on task and seed).
	PairedOn string
	// Pairs counts keys present in both runs; Scored the pairs whose two
	// episodes both have a reward (the ones compared).
	Pairs, Scored       int
	OnlyA, OnlyB        int
	DupA, DupB          int // episodes sharing a key with an earlier one (the last is used)
	MeanA, MeanB, Diff  float64
	CILow, CIHigh       float64
	Tasks               []taskDelta
	Improved, Regressed int
	Unchanged           int
}

// deltaTolerance is the paired delta below which a task counts unchanged
// (float noise from summing rewards).
const deltaTolerance = 1e-9

func compareRuns(a, b *Run) *comparison {
	c := &comparison{A: a, B: b, PairedOn: "task, seed"}
	labels := hasEvalLabels(a) && hasEvalLabels(b)
	if labels {
		c.PairedOn = "task, seed, condition, oracle"
	}
	index := func(r *Run, dup *int) map[pairKey]int {
		m := make(map[pairKey]int, len(r.Episodes))
		for i := range r.Episodes {
			k := keyOf(&r.Episodes[i], labels)
			if _, ok := m[k]; ok {
				*dup++
			}
			m[k] = i
		}
		return m
	}
	ia, ib := index(a, &c.DupA), index(b, &c.DupB)
	byTask := map[string]*taskDelta{}
	type sums struct{ a, b float64 }
	taskSums := map[string]*sums{}
	// In A's file order, so that the sums (and the interval) come out
	// the same on every request, not in map order.
	for i := range a.Episodes {
		k := keyOf(&a.Episodes[i], labels)
		if ia[k] != i {
			continue // a later episode of A has this key
		}
		j, ok := ib[k]
		if !ok {
			c.OnlyA++
			continue
		}
		c.Pairs++
		ea, eb := &a.Episodes[i], &b.Episodes[j]
		if math.IsNaN(ea.Reward) || math.IsNaN(eb.Reward) {
			continue
		}
		c.Scored++
		td := byTask[k.task]
		if td == nil {
			td = &taskDelta{Task: k.task}
			byTask[k.task] = td
			taskSums[k.task] = &sums{}
		}
		td.Pairs = append(td.Pairs, pair{i, j})
		taskSums[k.task].a += ea.Reward
		taskSums[k.task].b += eb.Reward
	}
	c.OnlyB = len(ib) - c.Pairs
	if c.Scored == 0 {
		c.MeanA, c.MeanB, c.Diff, c.CILow, c.CIHigh = math.NaN(), math.NaN(), math.NaN(), math.NaN(), math.NaN()
		return c
	}
	tasks := make([]string, 0, len(byTask))
	for t := range byTask {
		tasks = append(tasks, t)
	}
	sort.Strings(tasks) // a fixed unit order, so that the fixed seed gives a fixed interval
	var sumA, sumB float64
	diffs := make([]float64, len(tasks)) // per task: sum of B−A over its pairs
	counts := make([]float64, len(tasks))
	for i, t := range tasks {
		td, s := byTask[t], taskSums[t]
		n := float64(len(td.Pairs))
		td.MeanA, td.MeanB = s.a/n, s.b/n
		td.Delta = td.MeanB - td.MeanA
		switch {
		case td.Delta > deltaTolerance:
			td.Verdict = "improved"
			c.Improved++
		case td.Delta < -deltaTolerance:
			td.Verdict = "regressed"
			c.Regressed++
		default:
			td.Verdict = "unchanged"
			c.Unchanged++
		}
		sumA += s.a
		sumB += s.b
		diffs[i], counts[i] = s.b-s.a, n
		c.Tasks = append(c.Tasks, *td)
	}
	n := float64(c.Scored)
	c.MeanA, c.MeanB = sumA/n, sumB/n
	c.Diff = c.MeanB - c.MeanA
	c.CILow, c.CIHigh = bootstrapCI(diffs, counts)
	slices.SortStableFunc(c.Tasks, func(x, y taskDelta) int {
		if d := cmp.Compare(x.Delta, y.Delta); d != 0 {
			return d
		}
		return cmp.Compare(x.Task, y.Task)
	})
	return c
}

// bootstrapCI is the 95% percentile interval of the pair-weighted mean
// difference when tasks are resampled with replacement: a task's pairs
// (its seeds, conditions) move together, as they are not independent.
func bootstrapCI(diffs, counts []float64) (float64, float64) {
	rng := rand.New(rand.NewPCG(bootstrapSeed, uint64(len(diffs))))
	means := make([]float64, bootstrapResamples)
	t := len(diffs)
	for r := range means {
		var d, n float64
		for range t {
			k := rng.IntN(t)
			d += diffs[k]
			n += counts[k]
		}
		means[r] = d / n
	}
	slices.Sort(means)
	lo := means[int(math.Floor(0.025*float64(len(means)-1)))]
	hi := means[int(math.Ceil(0.975*float64(len(means)-1)))]
	return lo, hi
}

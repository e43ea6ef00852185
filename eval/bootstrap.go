package eval

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// donorStream offsets the PCG stream of the donor-component resamples
// from the AVT resamples.
const donorStream = 0x9e3779b97f4a7c15

// resampleWeights draws n units with replacement from the PCG generator
// seeded by (seed, stream) and returns each unit's multiplicity.
func resampleWeights(rng *rand.Rand, n int, w []float64) []float64 {
	w = w[:n]
	for i := range w {
		w[i] = 0
	}
	for range n {
		w[rng.IntN(n)]++
	}
	return w
}

// summarize computes, for each metric, the across-seed mean and sample SD
// and the 95% percentile interval of the across-seed mean over resamples
// of the units (AVTs, or donor components for donor metrics). Resample r
// draws its units from PCG(seed, r) (AVTs) or PCG(seed, r^donorStream)
// (components), so every metric sees the same resampled AVTs and the
// result does not depend on the order of the metrics.
func summarize(ms []*metric, d *dataset, resamples int, seed uint64) []Summary {
	out := make([]Summary, len(ms))
	buf := make([]float64, 0, len(d.seeds))
	boot := make([][]float64, len(ms))
	for i, m := range ms {
		out[i].Donor = m.donor
		out[i].Clusters = m.clusters()
		if m.missing != "" {
			out[i].Reason = m.missing
			continue
		}
		mean, vals := m.perSeed(nil, buf)
		out[i].Seeds = len(vals)
		if len(vals) == 0 {
			out[i].Reason = m.empty
			continue
		}
		out[i].Mean = ptr(mean)
		if len(vals) > 1 {
			var ss float64
			for _, v := range vals {
				ss += (v - mean) * (v - mean)
			}
			out[i].SD = ptr(math.Sqrt(ss / float64(len(vals)-1)))
		}
		boot[i] = make([]float64, 0, resamples)
	}
	wAVT := make([]float64, len(d.avts))
	wComp := make([]float64, d.nComp)
	for r := range resamples {
		wa := resampleWeights(rand.New(rand.NewPCG(seed, uint64(r))), len(d.avts), wAVT)
		wc := resampleWeights(rand.New(rand.NewPCG(seed, uint64(r)^donorStream)), d.nComp, wComp)
		for i, m := range ms {
			if boot[i] == nil {
				continue
			}
			w := wa
			if m.donor {
				w = wc
			}
			if mean, vals := m.perSeed(w, buf); len(vals) > 0 {
				boot[i] = append(boot[i], mean)
			}
		}
	}
	for i := range ms {
		if len(boot[i]) == 0 {
			continue
		}
		sort.Float64s(boot[i])
		out[i].Lo = ptr(quantile(boot[i], 0.025))
		out[i].Hi = ptr(quantile(boot[i], 0.975))
		out[i].Warning = intervalWarning(out[i])
	}
	return out
}

// intervalWarning says why an interval is not to be trusted, "" when it
// may be: it needs at least two clusters to vary at all, and a zero-width
// interval means every resample gave the same value (a degenerate
// interval, not certainty).
func intervalWarning(s Summary) string {
	unit := "AVT cluster"
	if s.Donor {
		unit = "donor component"
	}
	if s.Clusters != 1 {
		unit += "s"
	}
	switch {
	case s.Clusters < 2:
		return fmt.Sprintf("degenerate interval: only %d %s to resample", s.Clusters, unit)
	case *s.Lo == *s.Hi:
		return fmt.Sprintf("zero-width interval over %d %s: every resample gave the same value", s.Clusters, unit)
	}
	return ""
}

// clusters counts the resampling units that hold data for m in any seed.
func (m *metric) clusters() int {
	if len(m.terms) == 0 {
		return 0
	}
	n := 0
	units := len(m.terms[0].stat.den[0:1])
	if units > 0 {
		units = len(m.terms[0].stat.den[0])
	}
	for u := range units {
		for _, t := range m.terms {
			found := false
			for si := range t.stat.den {
				if t.stat.den[si][u] > 0 {
					found = true
					break
				}
			}
			if found {
				n++
				break
			}
		}
	}
	return n
}

// quantile is the linearly interpolated q-quantile of sorted xs (type 7).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 1 {
		return xs[0]
	}
	h := q * float64(len(xs)-1)
	lo := int(math.Floor(h))
	if lo >= len(xs)-1 {
		return xs[len(xs)-1]
	}
	return xs[lo] + (h-float64(lo))*(xs[lo+1]-xs[lo])
}

func ptr(v float64) *float64 { return &v }

package eval

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"avtgym/driver"
)

// TestBootstrapCoverage draws 200 samples from a clustered population
// with a known mean and checks that the 95% AVT-cluster bootstrap
// interval of SR(asker) covers it between 180 and 197 times. Each sample
// has 60 AVTs; AVT i has a cluster effect b_i ~ U[−0.3, 0.3] and 1–4
// records; each record succeeds with probability 0.5 + b_i, independently
// in each of 3 seeds. Success and failure are exchangeable under b → −b,
// so the estimator is symmetric about the true mean 0.5. Resamples is 1000
// (not the default 2000) to keep the test fast; the draws are seeded.
func TestBootstrapCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("coverage study")
	}
	const (
		reps, avts, seeds = 200, 60, 3
		trueMean          = 0.5
	)
	covered := 0
	for rep := range reps {
		rng := rand.New(rand.NewPCG(2024, uint64(rep)))
		var eps []Episode
		for a := range avts {
			b := 0.6*rng.Float64() - 0.3
			k := 1 + rng.IntN(4)
			for rec := range k {
				for s := range seeds {
					v := 0.0
					if rng.Float64() < 0.5+b {
						v = 1
					}
					eps = append(eps, Episode{Record: driver.Record{Corpus: "synthetic", TaskID: fmt.Sprintf("a%d-r%d", a, rec), AVTID: fmt.Sprintf("a%d", a), Seed: uint64(s + 1), Status: "TERMINATED", Success: &v}, Condition: Asker, Oracle: "deterministic"})
				}
			}
		}
		r, err := Analyze(eps, AnalyzeOptions{Resamples: 1000, BootstrapSeed: uint64(rep)})
		if err != nil {
			t.Fatal(err)
		}
		s := r.Rows[0].SRAsker
		if *s.Lo <= trueMean && trueMean <= *s.Hi {
			covered++
		}
	}
	t.Logf("coverage %d/%d", covered, reps)
	if covered < 180 || covered > 197 {
		t.Errorf("95%% intervals covered the true mean %d times of %d, want 180–197", covered, reps)
	}
}

// TestDonorComponents checks the resampling units of ΔRec_spec^Q: AVTs
// joined to their donor's AVT, a donor that never ran being a node of its
// own, and AVTs sharing a donor joined through it.
func TestDonorComponents(t *testing.T) {
	ep := func(task, avt string, cond Condition, donor string) Episode {
		return Episode{Record: driver.Record{Corpus: "c", TaskID: task, AVTID: avt, Seed: 1, Status: "TERMINATED"}, Condition: cond, Oracle: "hybrid", Donor: donor}
	}
	eps := []Episode{
		ep("t1", "A", AskerSpec, "t3"), // A — C (t3's AVT)
		ep("t2", "B", AskerSpec, "t3"), // B shares the replacement spec t3: B — C
		ep("t3", "C", Asker, ""),
		ep("t4", "D", AskerSpec, "x9"), // donor never ran: D — task:x9
		ep("t5", "E", AskerSpec, "x9"), // shares x9: E — D
		ep("t6", "F", Asker, ""),       // alone
	}
	d, err := index(eps)
	if err != nil {
		t.Fatal(err)
	}
	// AVTs sorted: A B C D E F → components {A,B,C}=0, {D,E}=1, {F}=2.
	want := []int{0, 0, 0, 1, 1, 2}
	if d.nComp != 3 || fmt.Sprint(d.comp) != fmt.Sprint(want) {
		t.Errorf("components = %v (%d), want %v (3)", d.comp, d.nComp, want)
	}
}

// TestQuantile checks the interpolated percentile.
func TestQuantile(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4}
	for _, c := range []struct{ q, want float64 }{{0, 0}, {0.5, 2}, {0.025, 0.1}, {0.975, 3.9}, {1, 4}} {
		if got := quantile(xs, c.q); got < c.want-1e-12 || got > c.want+1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if quantile([]float64{7}, 0.975) != 7 {
		t.Error("quantile of one value")
	}
}

package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/driver"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// loadEpisodes reads a JSON-lines results file.
func loadEpisodes(t *testing.T, path string) []Episode {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var eps []Episode
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var e Episode
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		eps = append(eps, e)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return eps
}

func selectEps(eps []Episode, cond Condition, oracle string, seed uint64) []Episode {
	var out []Episode
	for _, e := range eps {
		if e.Condition == cond && e.Oracle == oracle && e.Seed == seed {
			out = append(out, e)
		}
	}
	return out
}

func eqPtr(t *testing.T, name string, got *float64, want float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s = nil, want %v", name, want)
	} else if *got != want {
		t.Errorf("%s = %v, want %v (exactly)", name, *got, want)
	}
}

func nearPtr(t *testing.T, name string, got *float64, want float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s = nil, want %v", name, want)
	} else if math.Abs(*got-want) > 1e-12 {
		t.Errorf("%s = %v, want %v", name, *got, want)
	}
}

// rt returns x as a run-time value, so that expected values are computed
// in float64 arithmetic step by step as the code under test does (Go
// evaluates constant expressions exactly).
func rt(x float64) float64 { return x }

func nilPtr(t *testing.T, name string, got *float64) {
	t.Helper()
	if got != nil {
		t.Errorf("%s = %v, want undefined", name, *got)
	}
}

// TestCellGolden checks Cell against hand-computed values on the fixed
// episodes of testdata/episodes.jsonl (asker, deterministic, seed 1):
//
//	t1 TERMINATED  |Amb|=2 n=2 P=.5  R=.5 F1=.5 S=1  all eligible
//	t2 TERMINATED  |Amb|=1 n=0 P=–   R=0  F1=0  S=0  no question: no precision
//	t3 TERMINATED  |Amb|=0 n=1 P=0   R=–  F1=–  S=1  control: no recall, F1
//	t4 TERMINATED  fallback stop   P=–  R=0 F1=0 S=0  SR only
//	t5 ERROR       |Amb|=1 (P=R=F1=S=1 ignored)        a failure: S=0, R=0, F1=0; no P
//	t6 TRUNCATED   |Amb|=1 n=3 P=1/3 R=1 F1=.5 S=–   missing success: no SR
//
// (An episode the environment could not complete counts as a failure with
// zero recall, AmbiTab §C.2.)
// SR        = (1+0+1+0+0)/5      = 0.4   (t1,t2,t3,t4,t5)
// Precision = (0.5+0+1/3)/3      = 5/18  (t1,t3,t6)
// Recall    = (0.5+0+0+1)/4      = 3/8   (t1,t2,t5,t6)
// F1        = (0.5+0+0+0.5)/4    = 1/4   (t1,t2,t5,t6)
func TestCellGolden(t *testing.T) {
	eps := loadEpisodes(t, "testdata/episodes.jsonl")
	m := Cell(selectEps(eps, Asker, "deterministic", 1))
	if m.Episodes != 6 || m.Scored != 5 {
		t.Errorf("episodes, scored = %d, %d; want 6, 5", m.Episodes, m.Scored)
	}
	if m.NSR != 5 || m.NPrecision != 3 || m.NRecall != 4 || m.NF1 != 4 {
		t.Errorf("denominators = %d %d %d %d; want 5 3 4 4", m.NSR, m.NPrecision, m.NRecall, m.NF1)
	}
	eqPtr(t, "SR", m.SR, (1.0+0+1+0+0)/5)
	eqPtr(t, "Precision", m.Precision, (0.5+0+rt(1)/3)/3)
	eqPtr(t, "Recall", m.Recall, (0.5+0+0+1.0)/4)
	eqPtr(t, "F1", m.F1, (0.5+0+0+rt(0.5))/4)

	// Seed 2: t1 (P=R=F1=1, S=1), t2 (no question, R=F1=0, S=1),
	// t3 (|Amb|=0, no question, S=0):
	// SR = 2/3; Precision = 1/1; Recall = (1+0)/2; F1 = (1+0)/2.
	m = Cell(selectEps(eps, Asker, "deterministic", 2))
	eqPtr(t, "SR seed 2", m.SR, (rt(1)+1+0)/3)
	eqPtr(t, "Precision seed 2", m.Precision, 1)
	eqPtr(t, "Recall seed 2", m.Recall, 0.5)
	eqPtr(t, "F1 seed 2", m.F1, 0.5)

	// An episode that did not complete (ERROR, RPC_FAILED, ASKER_FAILED)
	// on a control is an SR failure and nothing else: it stays in the
	// denominator, counted by status.
	m = Cell([]Episode{{Record: driver.Record{Status: "ERROR"}}, {Record: driver.Record{Status: "RPC_FAILED"}}})
	if m.Scored != 0 || m.NSR != 2 || m.Errors != 1 || m.CallFailed != 1 || m.Precision != nil || m.Recall != nil || m.F1 != nil {
		t.Errorf("failed cell = %+v, want SR only, over both", m)
	}
	eqPtr(t, "SR of an ERROR and a failed call", m.SR, 0)
	// With counted ambiguities, an asker failure is also a recall and F1
	// failure; a completed success beside it gives SR 1/2, not 1/1.
	one := 1.0
	m = Cell([]Episode{{Record: driver.Record{Status: "ASKER_FAILED", Counted: 2}},
		{Record: driver.Record{Status: "TERMINATED", Counted: 2, Success: &one, Recall: &one, F1: &one, Precision: &one}}})
	if m.Episodes != 2 || m.Scored != 1 || m.AskerFailed != 1 || m.NSR != 2 || m.NRecall != 2 || m.NF1 != 2 || m.NPrecision != 1 {
		t.Errorf("asker-failed cell = %+v", m)
	}
	eqPtr(t, "SR with an asker failure", m.SR, 0.5)
	eqPtr(t, "Recall with an asker failure", m.Recall, 0.5)
	eqPtr(t, "Precision with an asker failure", m.Precision, 1)
	m = Cell(nil)
	if m.Episodes != 0 || m.SR != nil {
		t.Errorf("empty cell = %+v", m)
	}
}

// TestAnalyzeGolden checks the rows of the golden report against hand
// computation and the JSON and Markdown outputs against testdata (run
// `go test ./eval -run Golden -update` to rewrite them).
func TestAnalyzeGolden(t *testing.T) {
	eps := loadEpisodes(t, "testdata/episodes.jsonl")
	r, err := Analyze(eps, AnalyzeOptions{Resamples: 200, BootstrapSeed: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Rows) != 2 || r.Rows[0].Oracle != "deterministic" || r.Rows[1].Oracle != "hybrid" {
		t.Fatalf("rows = %+v", r.Rows)
	}
	det, hyb := r.Rows[0], r.Rows[1]
	sqrt2 := math.Sqrt2
	// SR none: seed 1 (0+0+1+0)/4 = 1/4, seed 2 (0+1+1)/3 = 2/3;
	// mean 11/24, SD (2/3−1/4)/√2.
	nearPtr(t, "SRNone", det.SRNone.Mean, 11.0/24)
	nearPtr(t, "SRNone SD", det.SRNone.SD, (2.0/3-0.25)/sqrt2)
	// SR asker: 2/5 and 2/3 (TestCellGolden): mean 8/15, SD (4/15)/√2.
	nearPtr(t, "SRAsker", det.SRAsker.Mean, 8.0/15)
	nearPtr(t, "SRAsker SD", det.SRAsker.SD, (4.0/15)/sqrt2)
	// SR full: 1 and 1.
	nearPtr(t, "SRFull", det.SRFull.Mean, 1)
	nearPtr(t, "SRFull SD", det.SRFull.SD, 0)
	// Precision 5/18 and 1: 23/36. Recall 3/8 and 1/2: 7/16. F1 1/4 and
	// 1/2: 3/8.
	nearPtr(t, "Precision", det.Precision.Mean, 23.0/36)
	nearPtr(t, "Recall", det.Recall.Mean, 7.0/16)
	nearPtr(t, "F1", det.F1.Mean, 3.0/8)
	// asker_strict, the same asker's questions with strict credit
	// (precision, recall, F1): seed 1 t1 (0, 0, 0), t2 without questions
	// (–, 0, 0), t4 a fallback stop (left out), t6 (1/3, 1, 1/2); seed 2
	// t1 (1/2, 1/2, 1/2), t2 (–, 0, 0). Precision 1/6 and 1/2: 1/3; recall
	// 1/3 and 1/4: 7/24; F1 1/6 and 1/4: 5/24 — each below the asker's.
	nearPtr(t, "PrecisionStrict", det.PrecisionStrict.Mean, 1.0/3)
	nearPtr(t, "RecallStrict", det.RecallStrict.Mean, 7.0/24)
	nearPtr(t, "RecallStrict SD", det.RecallStrict.SD, (1.0/3-0.25)/sqrt2)
	nearPtr(t, "F1Strict", det.F1Strict.Mean, 5.0/24)
	if det.RecallStrict.Seeds != 2 || det.RecallStrict.Clusters != 2 || det.Counts[AskerStrict].Episodes != 6 {
		t.Errorf("RecallStrict seeds %d, clusters %d, asker_strict episodes %d; want 2, 2, 6",
			det.RecallStrict.Seeds, det.RecallStrict.Clusters, det.Counts[AskerStrict].Episodes)
	}
	// Gain: 2/5−1/4 and 2/3−2/3: 3/40. Gap: 1−2/5 and 1−2/3: 7/15.
	nearPtr(t, "Gain", det.Gain.Mean, 3.0/40)
	nearPtr(t, "Gap", det.Gap.Mean, 7.0/15)
	// One ERROR in the asker condition (t5, seed 1).
	if det.Errors[Asker] != 1 || len(det.Errors) != 1 {
		t.Errorf("errors = %v, want asker: 1", det.Errors)
	}
	// SR on the pairs every oracle completed: the hybrid ran asker on seed
	// 1 only, on t1 and t2, so the completed asker pairs are (t1,1) and
	// (t2,1): det 1 and 0 → 1/2 in seed 1, none in seed 2.
	nearPtr(t, "SRAskerCompleted", det.SRAskerCompleted.Mean, 0.5)
	if det.SRAskerCompleted.Seeds != 1 {
		t.Errorf("SRAskerCompleted seeds = %d", det.SRAskerCompleted.Seeds)
	}
	// The none condition ran under the deterministic oracle only, with no
	// ERROR: its completed SR is its SR.
	nearPtr(t, "SRNoneCompleted", det.SRNoneCompleted.Mean, 11.0/24)
	// The deterministic oracle is its own hybrid and reference: the paired
	// differences are computed and come out exactly 0.
	eqPtr(t, "DJResp", det.DJResp.Mean, 0)
	if det.DJResp.Seeds != 2 {
		t.Errorf("DJResp seeds = %d, want 2", det.DJResp.Seeds)
	}
	eqPtr(t, "DJFull", det.DJFull.Mean, 0)
	eqPtr(t, "DRecNone", det.DRecNone.Mean, 0)
	// ΔRec_spec^Q: raw recall of asker_spec under the deterministic oracle:
	// seed 1 only, t1 0.5 (t3 has |Amb|=0): 0.5, one seed, no SD.
	eqPtr(t, "DRecSpec", det.DRecSpec.Mean, 0.5)
	nilPtr(t, "DRecSpec SD", det.DRecSpec.SD)
	if det.DRecSpec.Seeds != 1 {
		t.Errorf("DRecSpec seeds = %d", det.DRecSpec.Seeds)
	}
	// Hybrid: asker seed 1 only: SR (1+1)/2, P=R=F1 (0.5+1)/2; no none,
	// full or probe runs, so those (and gain, gap, ΔJ_full, ΔRec_none,
	// ΔRec_spec^Q) are undefined; ΔJ_resp pairs the hybrid with itself.
	eqPtr(t, "hybrid SRAsker", hyb.SRAsker.Mean, 1)
	eqPtr(t, "hybrid Precision", hyb.Precision.Mean, 0.75)
	nilPtr(t, "hybrid SRNone", hyb.SRNone.Mean)
	nilPtr(t, "hybrid Gain", hyb.Gain.Mean)
	nilPtr(t, "hybrid DJFull", hyb.DJFull.Mean)
	nilPtr(t, "hybrid DRecNone", hyb.DRecNone.Mean)
	nilPtr(t, "hybrid DRecSpec", hyb.DRecSpec.Mean)
	// asker_strict did not run under the hybrid: its metrics are absent
	// (not 0) and say why.
	for name, s := range map[string]Summary{"PrecisionStrict": hyb.PrecisionStrict, "RecallStrict": hyb.RecallStrict, "F1Strict": hyb.F1Strict} {
		if s.Mean != nil || !strings.Contains(s.Reason, "the asker_strict condition did not run under the hybrid oracle (add asker_strict to --conditions)") {
			t.Errorf("hybrid %s = %+v, want undefined with the reason", name, s)
		}
	}
	eqPtr(t, "hybrid DJResp", hyb.DJResp.Mean, 0)
	// Intervals bracket the mean.
	for _, s := range []Summary{det.SRNone, det.SRAsker, det.Precision, det.F1, det.Gap} {
		if s.Lo == nil || s.Hi == nil || *s.Lo > *s.Mean || *s.Hi < *s.Mean {
			t.Errorf("interval %+v does not bracket the mean", s)
		}
	}

	var js, md bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.json", js.Bytes())
	golden(t, "report.md", md.Bytes())

	// Reproducible: the same input and seed give the same report.
	r2, err := Analyze(eps, AnalyzeOptions{Resamples: 200, BootstrapSeed: 7})
	if err != nil {
		t.Fatal(err)
	}
	var js2 bytes.Buffer
	if err := r2.WriteJSON(&js2); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(js.Bytes(), js2.Bytes()) {
		t.Error("two analyses of the same episodes differ")
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update after checking):\n%s", name, got)
	}
}

// TestAnalyzeDedupAndErrors checks that a rerun episode replaces the
// earlier one and that bad input is refused.
func TestAnalyzeDedupAndErrors(t *testing.T) {
	one, zero := 1.0, 0.0
	eps := []Episode{
		{Record: driver.Record{Corpus: "c", TaskID: "t", AVTID: "a", Seed: 1, Status: "ERROR"}, Condition: Asker, Oracle: "deterministic"},
		{Record: driver.Record{Corpus: "c", TaskID: "t", AVTID: "a", Seed: 1, Status: "TERMINATED", Success: &one}, Condition: Asker, Oracle: "deterministic"},
		{Record: driver.Record{Corpus: "c", TaskID: "u", AVTID: "b", Seed: 1, Status: "TERMINATED", Success: &zero}, Condition: Asker, Oracle: "deterministic"},
	}
	r, err := Analyze(eps, AnalyzeOptions{Resamples: 10})
	if err != nil {
		t.Fatal(err)
	}
	eqPtr(t, "SR", r.Rows[0].SRAsker.Mean, 0.5)
	if r.Resamples != 10 || r.Reference != "deterministic" || r.Hybrid != "hybrid" {
		t.Errorf("options = %d %q %q", r.Resamples, r.Reference, r.Hybrid)
	}
	if _, err := Analyze(nil, AnalyzeOptions{}); err == nil {
		t.Error("no episodes: want an error")
	}
	bad := append([]Episode{}, eps...)
	bad[2].Corpus = "other"
	if _, err := Analyze(bad, AnalyzeOptions{}); err == nil {
		t.Error("two corpora: want an error")
	}
	bad = append([]Episode{}, eps...)
	bad[2].TaskID = "t"
	if _, err := Analyze(bad, AnalyzeOptions{}); err == nil {
		t.Error("task in two AVTs: want an error")
	}
	if _, err := Analyze(eps, AnalyzeOptions{Resamples: -1}); err == nil {
		t.Error("negative resamples: want an error")
	}
}

// fixture builds a scored episode of AVT avt (task ids t<avt><n>).
func fixture(task, avt string, cond Condition, oracle string, seed uint64, success, recall float64) Episode {
	s, r := success, recall
	return Episode{Record: driver.Record{Corpus: "demo", TaskID: task, AVTID: avt, Seed: seed, Status: "TERMINATED", Counted: 1, Questions: []string{"q?"}, Success: &s, Recall: &r, Precision: &r, F1: &r}, Condition: cond, Oracle: oracle}
}

// TestDiagnosticsIdenticalPairs: when the paired runs are identical, the
// differenced diagnostics are computed (not special-cased) and come out
// exactly 0, for the reference row and for an oracle whose runs equal the
// reference's and the hybrid's.
func TestDiagnosticsIdenticalPairs(t *testing.T) {
	var eps []Episode
	tasks := []struct {
		task, avt string
		s, r      float64
	}{{"t1", "A", 1, 1.0 / 3}, {"t2", "A", 0, 0.7}, {"t3", "B", 1, 0.1}, {"t4", "C", 0, 0.9}, {"t5", "C", 1, 2.0 / 7}}
	for seed := uint64(1); seed <= 3; seed++ {
		for _, o := range []string{"deterministic", "hybrid", "mirror"} {
			for _, c := range []Condition{None, Asker, Full, FullAdv, NoneAdv} {
				for i, x := range tasks {
					// Vary the values by seed so the per-seed means differ.
					r := x.r * float64(seed) / 3
					s := x.s
					if (i+int(seed))%4 == 0 {
						s = 1 - s
					}
					eps = append(eps, fixture(x.task, x.avt, c, o, seed, s, r))
				}
			}
		}
	}
	r, err := Analyze(eps, AnalyzeOptions{Resamples: 300, BootstrapSeed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range r.Rows {
		for name, s := range map[string]Summary{"DJResp": row.DJResp, "DJFull": row.DJFull, "DRecNone": row.DRecNone} {
			if s.Seeds != 3 {
				t.Errorf("%s %s: %d seeds, want 3", row.Oracle, name, s.Seeds)
			}
			for _, p := range []*float64{s.Mean, s.SD, s.Lo, s.Hi} {
				if p == nil || *p != 0 {
					t.Errorf("%s %s = %+v, want exactly 0", row.Oracle, name, s)
					break
				}
			}
		}
	}
}

// TestDiagnosticsLeaky: a leaky oracle fixture. Asker success, oracle
// "leaky" vs hybrid, per task (leaky, hybrid):
//
//	AVT A1: t11 (1,0) t12 (1,0)          diff 2
//	AVT A2: t21 (1,1) t22 (1,0)          diff 1
//	AVT A3: t31 (1,0) t32 (0,0) t33 (1,1) diff 1
//	AVT A4: t41 (0,0) in seed 1, (1,0) in seed 2
//
// ΔJ_resp: seed 1 4/8, seed 2 5/8: mean 0.5625, SD (1/8)/√2. Every
// resample has a positive seed-2 value, so the interval excludes 0.
// full_adv: leaky succeeds everywhere; deterministic fails on t12, t21,
// t33: ΔJ_full 3/8 in both seeds (A4 alone gives 0, with chance 4^−4 per
// resample, far below 2.5%). none_adv recall: leaky 1 everywhere,
// deterministic 1 only on t41: ΔRec_none 7/8 in both seeds.
// asker_spec under the hybrid (seed 1): t11 recall 0.5, t31 recall 1:
// ΔRec_spec^Q of the leaky row = 0.75.
func TestDiagnosticsLeaky(t *testing.T) {
	type task struct{ id, avt string }
	tasks := []task{{"t11", "A1"}, {"t12", "A1"}, {"t21", "A2"}, {"t22", "A2"}, {"t31", "A3"}, {"t32", "A3"}, {"t33", "A3"}, {"t41", "A4"}}
	leakyAsk := []float64{1, 1, 1, 1, 1, 0, 1, 0}
	hybridAsk := []float64{0, 0, 1, 0, 0, 0, 1, 0}
	detFullAdv := []float64{1, 0, 0, 1, 1, 1, 0, 1}
	detNoneAdvRec := []float64{0, 0, 0, 0, 0, 0, 0, 1}
	var eps []Episode
	for seed := uint64(1); seed <= 2; seed++ {
		for i, x := range tasks {
			la := leakyAsk[i]
			if seed == 2 && x.id == "t41" {
				la = 1
			}
			eps = append(eps,
				fixture(x.id, x.avt, Asker, "leaky", seed, la, 1),
				fixture(x.id, x.avt, Asker, "hybrid", seed, hybridAsk[i], 1),
				fixture(x.id, x.avt, FullAdv, "leaky", seed, 1, 1),
				fixture(x.id, x.avt, FullAdv, "deterministic", seed, detFullAdv[i], 1),
				fixture(x.id, x.avt, NoneAdv, "leaky", seed, 0, 1),
				fixture(x.id, x.avt, NoneAdv, "deterministic", seed, 0, detNoneAdvRec[i]),
			)
		}
	}
	spec1 := fixture("t11", "A1", AskerSpec, "hybrid", 1, 0, 0.5)
	spec1.Donor = "t21"
	spec2 := fixture("t31", "A3", AskerSpec, "hybrid", 1, 0, 1)
	spec2.Donor = "t21"
	eps = append(eps, spec1, spec2)

	r, err := Analyze(eps, AnalyzeOptions{BootstrapSeed: 42})
	if err != nil {
		t.Fatal(err)
	}
	var row *Row
	for i := range r.Rows {
		if r.Rows[i].Oracle == "leaky" {
			row = &r.Rows[i]
		}
	}
	if row == nil {
		t.Fatal("no leaky row")
	}
	nearPtr(t, "DJResp", row.DJResp.Mean, (4.0/8+5.0/8)/2)
	nearPtr(t, "DJResp SD", row.DJResp.SD, (1.0/8)/math.Sqrt2)
	nearPtr(t, "DJFull", row.DJFull.Mean, 3.0/8)
	nearPtr(t, "DRecNone", row.DRecNone.Mean, 7.0/8)
	nearPtr(t, "DRecSpec", row.DRecSpec.Mean, 0.75)
	for name, s := range map[string]Summary{"DJResp": row.DJResp, "DJFull": row.DJFull, "DRecNone": row.DRecNone} {
		if s.Lo == nil || *s.Lo <= 0 {
			t.Errorf("%s interval %+v does not exclude 0", name, s)
		}
	}
	if r.Resamples != 2000 {
		t.Errorf("resamples = %d, want the default 2000", r.Resamples)
	}
	// With HybridOf mapping the leaky oracle to the deterministic one
	// (which has no asker runs here), ΔJ_resp is undefined.
	r, err = Analyze(eps, AnalyzeOptions{Resamples: 50, HybridOf: map[string]string{"leaky": "deterministic"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range r.Rows {
		if row.Oracle == "leaky" {
			nilPtr(t, "DJResp (no paired runs)", row.DJResp.Mean)
		}
	}
}

// TestDiagnosticsDifferenceOfMeans: AmbiTab §A.3–A.4 define the
// differenced diagnostics as the difference between the means of two
// runs, each over its own eligible episodes, not as a mean over the pairs
// where both are eligible. Hand-computed, one seed, AVTs A (t1, t2), B (t3):
//
//	none_adv recall   o: t1 1, t2 fallback stop, t3 0    mean 1/2
//	         deterministic: t1 0, t2 1, t3 fallback stop mean 1/2
//	ΔRec_none = 1/2 − 1/2 = 0 (the paired mean would be 1 − 0 = 1)
//
//	asker success     o: t1 1, t2 1, t3 0                 mean 2/3
//	                  hybrid: t1 0, t2 1, t3 unverified   mean 1/2
//	ΔJ_resp = 2/3 − 1/2 = 1/6 (the paired mean would be 1/2)
func TestDiagnosticsDifferenceOfMeans(t *testing.T) {
	fallback := func(e Episode) Episode { e.FallbackStop = true; return e }
	unverified := func(e Episode) Episode { e.Success = nil; return e }
	eps := []Episode{
		fixture("t1", "A", NoneAdv, "o", 1, 0, 1),
		fallback(fixture("t2", "A", NoneAdv, "o", 1, 0, 1)),
		fixture("t3", "B", NoneAdv, "o", 1, 0, 0),
		fixture("t1", "A", NoneAdv, "deterministic", 1, 0, 0),
		fixture("t2", "A", NoneAdv, "deterministic", 1, 0, 1),
		fallback(fixture("t3", "B", NoneAdv, "deterministic", 1, 0, 1)),
		fixture("t1", "A", Asker, "o", 1, 1, 1),
		fixture("t2", "A", Asker, "o", 1, 1, 1),
		fixture("t3", "B", Asker, "o", 1, 0, 1),
		fixture("t1", "A", Asker, "hybrid", 1, 0, 1),
		fixture("t2", "A", Asker, "hybrid", 1, 1, 1),
		unverified(fixture("t3", "B", Asker, "hybrid", 1, 0, 1)),
	}
	r, err := Analyze(eps, AnalyzeOptions{Resamples: 20, BootstrapSeed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range r.Rows {
		if row.Oracle != "o" {
			continue
		}
		nearPtr(t, "ΔRec_none", row.DRecNone.Mean, 0)
		nearPtr(t, "ΔJ_resp", row.DJResp.Mean, rt(2.0/3)-rt(1.0/2))
		return
	}
	t.Fatal("no row for oracle o")
}

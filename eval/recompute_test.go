package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"avtgym/driver"
)

// rcSeeds are the evaluation seeds of the synthetic run (one above 2⁶³, so
// that both sides read seeds as unsigned 64-bit integers).
var rcSeeds = []uint64{3, 17, 0xFFFFFFFF00000001}

// rcRuns lists the conditions each oracle ran: some (condition, oracle)
// cells are missing, so that some metrics are undefined.
var rcRuns = map[string][]Condition{
	"deterministic": {None, Asker, AskerStrict, Full, FullAdv, NoneAdv, AskerSpec},
	"hybrid":        {None, Asker, Full, AskerSpec},
	"llm":           {None, Asker, AskerStrict, Full, FullAdv, NoneAdv},
	"llm_scoped":    {None, Asker, Full},
	"hybrid_scoped": {Asker, AskerSpec},
	"test_echo":     {Asker, FullAdv, NoneAdv},
}

// rcDonors maps each AVT to the task whose specification its
// spec-randomized asker saw: a task of another AVT (joining the two) or a
// task that never ran (joining the AVTs that share it). The donor
// components are {a01 a02 a03} {a04 a05} {a06 a07} {a08} … {a12}: 8.
var rcDonors = map[string]string{
	"a01": "a02_t1", "a02": "ext_x1", "a03": "a02_t1", "a04": "ext_x2",
	"a05": "ext_x2", "a06": "a07_t1", "a07": "a06_t1", "a08": "ext_x3",
	"a09": "ext_x4", "a10": "ext_x5", "a11": "ext_x6", "a12": "ext_x7",
}

type rcTask struct {
	id, avt, split string
	counted        int
}

func rcFloat(x float64) *float64 { return &x }

// rcEpisodes builds a seeded, mixed-quality episodes file's lines, in file
// order: ERROR episodes (no scores), fallback stops, an RPC_FAILED
// episode, truncations, a scored episode without an outcome, tasks without
// counted ambiguities, missing cells and seeds, and two repeated cells
// whose later line must win.
func rcEpisodes() []Episode {
	rng := rand.New(rand.NewPCG(0x5eed, 2026))
	var tasks []rcTask
	for a := 1; a <= 12; a++ {
		avt := fmt.Sprintf("a%02d", a)
		for k := 1; k <= 1+rng.IntN(3); k++ {
			c := 1 + rng.IntN(3)
			if rng.IntN(5) == 0 {
				c = 0
			}
			tasks = append(tasks, rcTask{fmt.Sprintf("%s_t%d", avt, k), avt, []string{"dev", "train"}[k%2], c})
		}
	}
	// Per-oracle quality: the chance of a success and of a productive
	// question, and of an ERROR.
	quality := map[string][3]int{
		"deterministic": {70, 80, 3}, "hybrid": {65, 70, 4}, "llm": {55, 60, 14},
		"llm_scoped": {50, 55, 12}, "hybrid_scoped": {60, 65, 5}, "test_echo": {90, 95, 0},
	}
	var out []Episode
	for _, o := range []string{"deterministic", "hybrid", "llm", "llm_scoped", "hybrid_scoped", "test_echo"} {
		q := quality[o]
		for _, cond := range rcRuns[o] {
			for si, seed := range rcSeeds {
				if o == "llm" && cond == FullAdv && si == 2 {
					continue // a seed that did not run
				}
				if o == "test_echo" && cond == NoneAdv && si > 0 {
					continue // a one-seed diagnostic: no SD
				}
				for _, tk := range tasks {
					if rng.IntN(100) < 5 {
						continue // a cell left out
					}
					e := Episode{Condition: cond, Oracle: o}
					e.Record = driver.Record{
						Corpus: "synthetic", TaskID: tk.id, AVTID: tk.avt, DB: "db_" + tk.avt, Split: tk.split,
						Seed: seed, Counted: tk.counted, Questions: []string{}, Replies: []string{}, CreditedTerms: []string{},
					}
					if cond == AskerSpec {
						e.Donor = rcDonors[tk.avt]
					}
					roll := rng.IntN(100)
					switch {
					case roll < q[2]:
						e.Status, e.Error = "ERROR", "the oracle's context overflowed"
						out = append(out, e)
						continue
					case roll < q[2]+2:
						e.Status, e.Error = "RPC_FAILED", "connection reset"
						out = append(out, e)
						continue
					case roll < q[2]+10:
						e.Status = "TRUNCATED"
					default:
						e.Status = "TERMINATED"
					}
					// Questions asked and how many were productive.
					var n, prod int
					switch cond {
					case None:
					case Full, FullAdv:
						n = tk.counted
						for range n {
							if rng.IntN(100) < q[1]+15 {
								prod++
							}
						}
					case NoneAdv:
						n = tk.counted + 2
						if o != "deterministic" {
							for range tk.counted {
								if rng.IntN(100) < 100-q[1] {
									prod++
								}
							}
						}
					default: // the askers
						n = rng.IntN(5)
						if o == "test_echo" {
							n = 0 // never asks: precision undefined
						}
						p := q[1]
						if cond == AskerStrict {
							p -= 30 // the strict rule credits less
						}
						for range n {
							if prod < tk.counted && rng.IntN(100) < p {
								prod++
							}
						}
					}
					for i := range n {
						e.Questions = append(e.Questions, fmt.Sprintf("question %d?", i+1))
						e.Replies = append(e.Replies, fmt.Sprintf("reply %d.", i+1))
					}
					var prec, rec float64
					if n > 0 {
						prec = float64(prod) / float64(n)
						e.Precision = rcFloat(prec)
					}
					if tk.counted > 0 {
						rec = float64(prod) / float64(tk.counted)
						e.Recall = rcFloat(rec)
						f1 := 0.0
						if prod > 0 {
							f1 = 2 * prec * rec / (prec + rec)
						}
						e.F1 = rcFloat(f1)
					}
					if (cond == Asker || cond == AskerStrict || cond == AskerSpec) && rng.IntN(100) < 10 {
						e.FallbackStop = true // its recall and F1 must be left out
					}
					p := q[0] + 5*prod
					if cond == None || cond == NoneAdv {
						p -= 25
					}
					if rng.IntN(100) < 3 {
						e.Reward = rcFloat(0) // scored without a verified outcome
					} else {
						s := 0.0
						if rng.IntN(100) < p {
							s = 1
						}
						e.Success, e.Reward = rcFloat(s), rcFloat(s)
					}
					out = append(out, e)
				}
			}
		}
	}
	// Two repeated cells: a stale success replaced by an ERROR, and an
	// ERROR played again; the later line wins.
	for i := range out {
		e := out[i]
		if e.Oracle == "deterministic" && e.Condition == Asker && e.Status == "TERMINATED" && e.Counted > 0 {
			stale := e
			stale.Success, stale.Recall, stale.F1 = rcFloat(1), rcFloat(1), rcFloat(1)
			out[i].Status, out[i].Error = "ERROR", "the verifier failed"
			out[i].Precision, out[i].Recall, out[i].F1, out[i].Success, out[i].Reward = nil, nil, nil, nil, nil
			out = append([]Episode{stale}, out...)
			break
		}
	}
	for i := range out {
		e := out[i]
		if e.Oracle == "llm" && e.Condition == Full && e.Status == "ERROR" {
			rerun := e
			rerun.Status, rerun.Error = "TERMINATED", ""
			rerun.Success, rerun.Reward, rerun.Precision = rcFloat(1), rcFloat(1), rcFloat(1)
			if e.Counted > 0 {
				rerun.Recall, rerun.F1 = rcFloat(1), rcFloat(1)
			}
			out = append(out, rerun)
			break
		}
	}
	return out
}

// rcSummary is the part of a Summary both sides report.
type rcSummary struct {
	Mean     *float64 `json:"mean"`
	SD       *float64 `json:"sd"`
	Lo       *float64 `json:"lo"`
	Hi       *float64 `json:"hi"`
	Seeds    int      `json:"seeds"`
	Clusters int      `json:"clusters"`
}

type rcReport struct {
	Seeds []uint64                     `json:"seeds"`
	Rows  []map[string]json.RawMessage `json:"rows"`
}

// TestIndependentRecompute checks report.json against testdata/recompute.py,
// an implementation of PROTOCOL.md §6–7 that shares no code with this
// package, on a seeded mixed-quality episodes file: every summary of every
// row (mean, SD, interval, seeds, clusters) and the ERROR counts.
func TestIndependentRecompute(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("python3 is not on PATH")
		}
		t.Fatalf("python3 is required under CI: %v", err)
	}
	lines := rcEpisodes()
	rcCoverage(t, lines)

	dir := t.TempDir()
	path := filepath.Join(dir, "episodes.jsonl")
	var buf bytes.Buffer
	for i := range lines {
		b, err := json.Marshal(&lines[i])
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(append(b, '\n'))
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	const resamples = 300
	const bootSeed uint64 = 0xC0FFEE0123456789
	// The scoped LLM oracle's hybrid is hybrid_scoped, as ListOracles
	// says; the test oracle has the deterministic matcher; llm uses the
	// default hybrid.
	hybridOf := map[string]string{"llm_scoped": "hybrid_scoped", "test_echo": "deterministic"}
	opt := AnalyzeOptions{Resamples: resamples, BootstrapSeed: bootSeed, HybridOf: hybridOf}
	eps, err := ReadEpisodes(path)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Analyze(eps, opt)
	if err != nil {
		t.Fatal(err)
	}
	var goJSON bytes.Buffer
	if err := rep.WriteJSON(&goJSON); err != nil {
		t.Fatal(err)
	}
	// Analyze deduplicates the raw lines the same way ReadEpisodes does.
	rep2, err := Analyze(lines, opt)
	if err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	if err := rep2.WriteJSON(&raw); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(goJSON.Bytes(), raw.Bytes()) {
		t.Error("Analyze of the raw lines (with the repeated cells) differs from Analyze of ReadEpisodes")
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), goJSON.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}

	// Reading the script here makes the test cache notice its changes.
	script := filepath.Join("testdata", "recompute.py")
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(py, script, "--self-test").CombinedOutput(); err != nil {
		t.Fatalf("recompute.py --self-test (its PCG against Go's math/rand/v2): %v\n%s", err, out)
	}
	hj, err := json.Marshal(hybridOf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, script, path,
		"--resamples", strconv.Itoa(resamples), "--bootstrap-seed", strconv.FormatUint(bootSeed, 10),
		"--reference", "deterministic", "--hybrid", "hybrid", "--hybrid-of", string(hj))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pyOut, err := cmd.Output()
	if err != nil {
		t.Fatalf("recompute.py: %v\n%s", err, stderr.String())
	}

	var g, p rcReport
	if err := json.Unmarshal(goJSON.Bytes(), &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(pyOut, &p); err != nil {
		t.Fatalf("recompute.py output: %v\n%s", err, pyOut)
	}
	if !slices.Equal(g.Seeds, p.Seeds) {
		t.Errorf("seeds: Go %v, Python %v", g.Seeds, p.Seeds)
	}
	oracleOf := func(row map[string]json.RawMessage) string {
		var o string
		_ = json.Unmarshal(row["oracle"], &o)
		return o
	}
	var gOrder, pOrder []string
	for _, r := range g.Rows {
		gOrder = append(gOrder, oracleOf(r))
	}
	for _, r := range p.Rows {
		pOrder = append(pOrder, oracleOf(r))
	}
	if !slices.Equal(gOrder, pOrder) {
		t.Fatalf("row order: Go %v, Python %v", gOrder, pOrder)
	}

	var numbers, summaries, undefined, oneSeed, intervals int
	// The strict-credit metrics, defined under some oracles (asker_strict
	// ran) and undefined under the others.
	strictDefined, strictUndefined := map[string]int{}, map[string]int{}
	strictFields := []string{"precision_strict", "recall_strict", "f1_strict"}
	for i, gr := range g.Rows {
		pr, o := p.Rows[i], gOrder[i]
		if !bytes.Equal(gr["hybrid"], pr["hybrid"]) {
			t.Errorf("oracle %s, hybrid: Go %s, Python %s", o, gr["hybrid"], pr["hybrid"])
		}
		for field, msg := range gr {
			var probe map[string]json.RawMessage
			if json.Unmarshal(msg, &probe) != nil {
				continue
			}
			if _, ok := probe["mean"]; !ok {
				continue // not a summary
			}
			summaries++
			var gs, ps rcSummary
			if err := json.Unmarshal(msg, &gs); err != nil {
				t.Fatal(err)
			}
			pm, ok := pr[field]
			if !ok {
				t.Errorf("oracle %s, %s: report.json has it, recompute.py does not", o, field)
				continue
			}
			if err := json.Unmarshal(pm, &ps); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				name string
				a, b *float64
			}{{"mean", gs.Mean, ps.Mean}, {"sd", gs.SD, ps.SD}, {"lo", gs.Lo, ps.Lo}, {"hi", gs.Hi, ps.Hi}} {
				numbers++
				if !rcSame(c.a, c.b) {
					t.Errorf("oracle %s, %s.%s: Go %s, Python %s", o, field, c.name, rcFmt(c.a), rcFmt(c.b))
				}
			}
			numbers += 2
			if gs.Seeds != ps.Seeds {
				t.Errorf("oracle %s, %s.seeds: Go %d, Python %d", o, field, gs.Seeds, ps.Seeds)
			}
			if gs.Clusters != ps.Clusters {
				t.Errorf("oracle %s, %s.clusters: Go %d, Python %d", o, field, gs.Clusters, ps.Clusters)
			}
			switch {
			case gs.Mean == nil:
				undefined++
			case gs.SD == nil:
				oneSeed++
			}
			if slices.Contains(strictFields, field) {
				if gs.Mean == nil {
					strictUndefined[field]++
				} else {
					strictDefined[field]++
				}
			}
			if gs.Lo != nil && *gs.Lo != *gs.Hi {
				intervals++
			}
		}
		var ge, pe map[string]int
		if m, ok := gr["errors"]; ok {
			if err := json.Unmarshal(m, &ge); err != nil {
				t.Fatal(err)
			}
		}
		if err := json.Unmarshal(pr["errors"], &pe); err != nil {
			t.Fatal(err)
		}
		for _, cond := range []Condition{None, Asker, AskerStrict, Full, FullAdv, NoneAdv, AskerSpec} {
			numbers++
			if ge[string(cond)] != pe[string(cond)] {
				t.Errorf("oracle %s, errors[%s]: Go %d, Python %d", o, cond, ge[string(cond)], pe[string(cond)])
			}
		}
		for cond := range pe {
			if _, err := ParseCondition(cond); err != nil {
				t.Errorf("oracle %s: Python counts errors of an unknown condition %q", o, cond)
			}
		}
	}
	for _, f := range strictFields {
		if strictDefined[f] == 0 || strictUndefined[f] == 0 {
			t.Errorf("%s: compared %d defined and %d undefined, want some of each", f, strictDefined[f], strictUndefined[f])
		}
	}
	if summaries != len(g.Rows)*metricsPerRow {
		t.Errorf("compared %d summaries, want %d per row", summaries, metricsPerRow)
	}
	// The data must exercise undefined metrics, one-seed metrics (no SD)
	// and non-degenerate intervals, or the comparison proves little.
	if undefined == 0 || oneSeed == 0 || intervals < 20 {
		t.Errorf("the synthetic run covers too little: %d undefined, %d one-seed, %d non-degenerate intervals", undefined, oneSeed, intervals)
	}
	t.Logf("%d episodes lines, %d oracles: compared %d numbers in %d summaries (%d undefined, %d one-seed, %d intervals)",
		len(lines), len(g.Rows), numbers, summaries, undefined, oneSeed, intervals)
}

// rcCoverage fails when the generator no longer produces the cases the
// comparison is meant to cover.
func rcCoverage(t *testing.T, lines []Episode) {
	t.Helper()
	var errCounted, errZero, fallback, rpc, trunc, noOutcome, zeroCounted int
	for i := range lines {
		e := &lines[i]
		switch {
		case e.Status == "ERROR" && e.Counted > 0:
			errCounted++
		case e.Status == "ERROR":
			errZero++
		case e.Status == "RPC_FAILED":
			rpc++
		case e.Status == "TRUNCATED":
			trunc++
		}
		if e.FallbackStop {
			fallback++
		}
		if e.Scored() && e.Success == nil {
			noOutcome++
		}
		if e.Counted == 0 {
			zeroCounted++
		}
	}
	for name, n := range map[string]int{
		"ERROR with counted ambiguities": errCounted, "ERROR without": errZero, "fallback stops": fallback,
		"RPC_FAILED": rpc, "TRUNCATED": trunc, "scored without an outcome": noOutcome, "counted 0": zeroCounted,
	} {
		if n == 0 {
			t.Errorf("the synthetic run has no %s", name)
		}
	}
}

func rcSame(a, b *float64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return math.Abs(*a-*b) <= 1e-9
}

func rcFmt(x *float64) string {
	if x == nil {
		return "undefined"
	}
	return strconv.FormatFloat(*x, 'g', -1, 64)
}

package eval

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestFormatSummary checks the "mean ± SD [lo, hi]" cells.
func TestFormatSummary(t *testing.T) {
	p := func(v float64) *float64 { return &v }
	for _, c := range []struct {
		s    Summary
		want string
	}{
		{Summary{}, Dash},
		{Summary{Mean: p(0.5833333), SD: p(0.117851), Lo: p(0.25), Hi: p(0.75), Clusters: 4}, "58.3 ± 11.8 [25.0, 75.0; 4 AVTs]"},
		{Summary{Mean: p(0.5), Lo: p(0.5), Hi: p(0.5), Clusters: 1}, "50.0 [50.0, 50.0; 1 AVT]"},
		{Summary{Mean: p(0.5), Lo: p(0.25), Hi: p(0.5), Clusters: 3, Donor: true}, "50.0 [25.0, 50.0; 3 components]"},
		{Summary{Mean: p(-0.0000001), SD: p(0)}, "0.0 ± 0.0"},
		{Summary{Mean: p(-0.125), SD: p(0.1), Lo: p(-0.5), Hi: p(0.25), Clusters: 2}, "-12.5 ± 10.0 [-50.0, 25.0; 2 AVTs]"},
	} {
		if got := FormatSummary(c.s); got != c.want {
			t.Errorf("FormatSummary(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}

// TestReportOutputs checks the group signal and the multi-corpus table,
// and that the JSON decodes back.
func TestReportOutputs(t *testing.T) {
	eps := loadEpisodes(t, "testdata/episodes.jsonl")
	r, err := Analyze(eps, AnalyzeOptions{Resamples: 50, BootstrapSeed: 3})
	if err != nil {
		t.Fatal(err)
	}
	r.GroupSignal = map[string]float64{"question_f1": 0.625, "outcome": 0.25}
	r2 := *r
	r2.Corpus = "other"
	var md bytes.Buffer
	if err := WriteMarkdownReports(&md, []*Report{r, &r2}); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"| Corpus | Oracle | SR none | SR asker | SR full | Precision | Recall | F1 | ΔJ_resp | ΔRec_spec^Q | ΔJ_full | ΔRec_none |",
		"| demo | deterministic | 45.8 ± 29.5 [",
		"| other | hybrid | – (f) |",
		"### Credit rules\n\n| Corpus | Oracle | Precision | Recall | F1 | Prec (strict) | Rec (strict) | F1 (strict) |",
		// The hybrid row is defined in one of the two seeds: its cells say
		// why they have no ± SD (b) beside the weak-interval warning (a).
		"| other | hybrid | 75.0 [75.0, 75.0; 1 AVT] ⚠ (a) (b) | 75.0 [75.0, 75.0; 1 AVT] ⚠ (a) (b) | 75.0 [75.0, 75.0; 1 AVT] ⚠ (a) (b) | – (c) | – (c) | – (c) |",
		"- (b) no ± SD: defined in only one of the run's 2 seeds (no eligible episode in the others), and an SD across seeds needs two",
		"- (c) the asker_strict condition did not run under the hybrid oracle (add asker_strict to --conditions)",
		"strict: the same asker with strict_credit — a question earns only the ambiguities it names; a gap between the two rules means credit earned by echoing the request.",
		"- (f) the none condition did not run under the hybrid oracle",
		"### How each figure is counted",
		"| other | deterministic | asker | 2 | 6/3 | 5/3 | 3/1 | 4/2 | 4/2 |",
		"### Per database (other)",
		"### Per task (demo)",
		"### Questions asked (other)",
		"| asker | 8 | 4 | 1 | 2 | 1 | 0 | 0 | 1.00 |",
		"| question_f1 | 62.5% |",
		"| outcome | 25.0% |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Corpus != "demo" || len(back.Rows) != 2 || back.GroupSignal["outcome"] != 0.25 || len(back.Cells) == 0 {
		t.Errorf("decoded report = %+v", back)
	}
}

// TestSingleSeedSaysSo: a run of one seed has no SD across seeds, and the
// report says so (report.json's sd_note and each summary's sd_reason, a
// line in the Markdown header, a paragraph in the HTML) instead of
// dropping "± SD" silently; its cells do not repeat it.
func TestSingleSeedSaysSo(t *testing.T) {
	var eps []Episode
	for _, e := range loadEpisodes(t, "testdata/episodes.jsonl") {
		if e.Seed == 1 {
			eps = append(eps, e)
		}
	}
	r, err := Analyze(eps, AnalyzeOptions{Resamples: 20})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.SDNote, "one seed (1): no cell has an SD across seeds") {
		t.Errorf("sd_note = %q", r.SDNote)
	}
	defined := 0
	for i := range r.Rows {
		for _, s := range r.Rows[i].summaries() {
			if s.Mean != nil {
				defined++
				if s.SD != nil || s.SDReason != "no ± SD: the run has one seed, and an SD across seeds needs two" {
					t.Errorf("%s: SD %v, sd_reason %q", r.Rows[i].Oracle, s.SD, s.SDReason)
				}
			}
		}
	}
	if defined == 0 {
		t.Fatal("no defined summary")
	}
	var md, h, js bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHTML(&h); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "- demo: One seed (1): no cell has an SD across seeds, which needs two;") || strings.Contains(md.String(), "- (b) no ± SD") {
		t.Errorf("markdown does not say it once in its header:\n%s", md.String())
	}
	if !strings.Contains(h.String(), `<p class="meta" id="sd-note">One seed (1): no cell has an SD across seeds`) {
		t.Error("HTML does not say that the run has one seed")
	}
	if !strings.Contains(js.String(), `"sd_note": "one seed (1)`) || !strings.Contains(js.String(), `"sd_reason": "no ± SD: the run has one seed`) {
		t.Error("report.json has no sd_note or sd_reason")
	}
}

// TestStatedDenominatorsAreReal: the "How each figure is counted" table
// states, per oracle, condition and seed, the episodes each rate is over;
// counted here from the raw episodes with PROTOCOL.md §6's rules, they
// are the same, and each SR of Table 8 is the mean over seeds of the
// successes over exactly those episodes.
func TestStatedDenominatorsAreReal(t *testing.T) {
	raw := loadEpisodes(t, "testdata/episodes.jsonl")
	r, err := Analyze(raw, AnalyzeOptions{Resamples: 20})
	if err != nil {
		t.Fatal(err)
	}
	// Deduplicate as a rerun would: the last record of a cell wins.
	type key struct {
		task, oracle string
		cond         Condition
		seed         uint64
	}
	last := map[key]Episode{}
	for _, e := range raw {
		last[key{e.TaskID, e.Oracle, e.Condition, e.Seed}] = e
	}
	type cell struct {
		oracle string
		cond   Condition
	}
	type counts struct{ episodes, sr, precision, recall, f1 int }
	want := map[cell]map[uint64]*counts{}
	successes := map[cell]map[uint64]float64{}
	for _, e := range last {
		c := cell{e.Oracle, e.Condition}
		if want[c] == nil {
			want[c], successes[c] = map[uint64]*counts{}, map[uint64]float64{}
		}
		if want[c][e.Seed] == nil {
			want[c][e.Seed] = &counts{}
		}
		n := want[c][e.Seed]
		n.episodes++
		done := e.Status == "TERMINATED" || e.Status == "TRUNCATED"
		switch {
		case !done:
			n.sr++
		case e.Success != nil:
			n.sr++
			successes[c][e.Seed] += *e.Success
		}
		if done && e.Precision != nil {
			n.precision++
		}
		if !done && e.Counted > 0 || done && e.Recall != nil && !e.FallbackStop {
			n.recall++
		}
		if !done && e.Counted > 0 || done && e.F1 != nil && !e.FallbackStop {
			n.f1++
		}
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	section := md.String()[strings.Index(md.String(), "### How each figure is counted"):]
	section = section[:strings.Index(section, "\n### ")]
	stated := 0
	for _, line := range strings.Split(section, "\n") {
		f := strings.Split(strings.Trim(line, "| "), " | ")
		if len(f) != len(denominatorsHeader) || f[0] != "demo" {
			continue
		}
		stated++
		c := cell{f[1], Condition(f[2])}
		bySeed := want[c]
		seeds := slices.Sorted(maps.Keys(bySeed))
		join := func(get func(*counts) int) string {
			var vals []string
			for _, s := range seeds {
				vals = append(vals, strconv.Itoa(get(bySeed[s])))
			}
			if len(slices.Compact(slices.Clone(vals))) == 1 {
				return vals[0]
			}
			return strings.Join(vals, "/")
		}
		got := strings.Join(f[3:], " | ")
		exp := strings.Join([]string{strconv.Itoa(len(seeds)), join(func(n *counts) int { return n.episodes }), join(func(n *counts) int { return n.sr }),
			join(func(n *counts) int { return n.precision }), join(func(n *counts) int { return n.recall }), join(func(n *counts) int { return n.f1 })}, " | ")
		if got != exp {
			t.Errorf("%s, %s: stated %s; the episodes give %s", c.oracle, c.cond, got, exp)
		}
	}
	if stated != len(want) {
		t.Errorf("the table states %d cells, the episodes have %d", stated, len(want))
	}
	// SR none, asker and full of each row: the mean over the seeds of
	// successes / SR denominator.
	for _, row := range r.Rows {
		for cond, s := range map[Condition]Summary{None: row.SRNone, Asker: row.SRAsker, Full: row.SRFull} {
			c := cell{row.Oracle, cond}
			if want[c] == nil {
				if s.Mean != nil {
					t.Errorf("%s, %s: SR %v without episodes", c.oracle, c.cond, *s.Mean)
				}
				continue
			}
			var sum float64
			n := 0
			for seed, k := range want[c] {
				if k.sr > 0 {
					sum += successes[c][seed] / float64(k.sr)
					n++
				}
			}
			if s.Mean == nil || math.Abs(*s.Mean-sum/float64(n)) > 1e-12 || s.Seeds != n {
				t.Errorf("%s, %s: SR %+v, want the mean over %d seeds %v", c.oracle, c.cond, s, n, sum/float64(n))
			}
		}
	}
}

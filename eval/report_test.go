package eval

import (
	"bytes"
	"encoding/json"
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
		"| other | hybrid | – (e) |",
		"### Credit rules\n\n| Corpus | Oracle | Precision | Recall | F1 | Prec (strict) | Rec (strict) | F1 (strict) |",
		"| other | hybrid | 75.0 [75.0, 75.0; 1 AVT] ⚠ (a) | 75.0 [75.0, 75.0; 1 AVT] ⚠ (a) | 75.0 [75.0, 75.0; 1 AVT] ⚠ (a) | – (b) | – (b) | – (b) |",
		"- (b) the asker_strict condition did not run under the hybrid oracle (add asker_strict to --conditions)",
		"strict: the same asker with strict_credit — a question earns only the ambiguities it names; a gap between the two rules means credit earned by echoing the request.",
		"- (e) the none condition did not run under the hybrid oracle",
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

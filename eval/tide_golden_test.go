package eval

import (
	"bytes"
	"testing"
)

// TestTideGolden pins the TIDE report's layout (Tables 3, 13 and 14 as the
// paper lays them out; the tide-p caveat and (p) marks) on the hand-built
// runs of twoAnchors, one per protocol: testdata/tide_report.md (both) and
// tide_report.json (tide-f). The figures are checked by hand in
// TestTideMetricsF/P and independently in TestIndependentRecomputeTide;
// this file shows a reviewer what the reports print (run `go test ./eval
// -run TideGolden -update` to rewrite it after checking).
func TestTideGolden(t *testing.T) {
	f := analyzeTideOK(t, tideEpisodes(TideF, twoAnchors...), 200)
	f.Tide.Asker = "chain-aware"
	var xs []tideEp
	for _, x := range twoAnchors {
		if x.st != DriftOnly {
			xs = append(xs, x)
		}
	}
	p := analyzeTideOK(t, tideEpisodes(TideP, xs...), 200)
	p.Tide.Asker = "chain-aware"
	var md, js bytes.Buffer
	if err := WriteMarkdownReports(&md, []*Report{p, f}); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden(t, "tide_report.md", md.Bytes())
	golden(t, "tide_report.json", js.Bytes())
}

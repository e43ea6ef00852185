package eval

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestWriteHTML parses the HTML report as XML (it is written well-formed)
// and checks that it has the three SVG charts, bars and whiskers, the
// tables, inline CSS, and no external URL.
func TestWriteHTML(t *testing.T) {
	eps := loadEpisodes(t, "testdata/episodes.jsonl")
	r, err := Analyze(eps, AnalyzeOptions{Resamples: 100, BootstrapSeed: 5})
	if err != nil {
		t.Fatal(err)
	}
	r.GroupSignal = map[string]float64{"question_f1": 0.5}
	var buf bytes.Buffer
	if err := r.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("AVTGYM_HTML_OUT"); dir != "" {
		_ = os.WriteFile(dir+"/report.html", buf.Bytes(), 0o644)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	dec.Strict = true
	count := map[string]int{}
	ids := map[string]bool{}
	var stack []string
	var inSVG int
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			name := el.Name.Local
			stack = append(stack, name)
			count[name]++
			if name == "svg" {
				inSVG++
			}
			for _, a := range el.Attr {
				if a.Name.Local == "id" {
					ids[a.Value] = true
				}
				if a.Name.Local == "class" && a.Value == "whisker" {
					count["whisker"]++
				}
				if a.Name.Local == "class" && a.Value == "gap" {
					count["gap"]++
				}
				if a.Name.Local == "src" || a.Name.Local == "href" {
					t.Errorf("<%s> has %s=%q: the report must need no external asset", name, a.Name.Local, a.Value)
				}
			}
			if name == "rect" && inSVG > 0 {
				count["svgrect"]++
			}
		case xml.EndElement:
			if len(stack) == 0 || stack[len(stack)-1] != el.Name.Local {
				t.Fatalf("unbalanced </%s>", el.Name.Local)
			}
			stack = stack[:len(stack)-1]
			if el.Name.Local == "svg" {
				inSVG--
			}
		}
	}
	if len(stack) != 0 {
		t.Fatalf("unclosed elements %v", stack)
	}
	s := buf.String()
	if strings.Contains(s, "http://") || strings.Contains(s, "https://") || strings.Contains(s, "<link") || strings.Contains(s, "<script") {
		t.Error("report refers to an external resource")
	}
	// Tables: Table 8 in two (inference, diagnostics), credit, gain,
	// counts, denominators, errors, per database, per task, questions
	// asked, group signal.
	if count["svg"] != 3 || count["style"] != 1 || count["table"] != 11 {
		t.Errorf("svg %d, style %d, table %d; want 3, 1, 11", count["svg"], count["style"], count["table"])
	}
	for _, id := range []string{"chart-sr", "chart-pr", "chart-diag", "table8", "table8-diag", "credit", "credit-legend", "gain", "counts",
		"denominators", "errors", "by-database", "by-task", "questions", "group-signal"} {
		if !ids[id] {
			t.Errorf("no element with id %q", id)
		}
	}
	// Bars: at least the deterministic row's 3 SR + 3 asking + 4
	// diagnostic bars (plus legend swatches); whiskers for the defined
	// intervals; the gap bracket on the deterministic row.
	if count["svgrect"] < 10 || count["whisker"] < 10 || count["gap"] != 1 {
		t.Errorf("rects %d, whiskers %d, gap brackets %d", count["svgrect"], count["whisker"], count["gap"])
	}
	for _, want := range []string{"SR asker", "ΔRec_spec^Q", "45.8 ± 29.5", "<th>Prec (strict)</th><th>Rec (strict)</th><th>F1 (strict)</th>",
		"strict: the same asker with strict_credit — a question earns only the ambiguities it names; a gap between the two rules means credit earned by echoing the request"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestWriteHTMLHeaderNamesOraclesOnce: the header names the reference and
// hybrid oracles without repeating a word ("hybrid hybrid" when the hybrid
// oracle is the one called hybrid), and names a hybrid oracle called
// otherwise.
func TestWriteHTMLHeaderNamesOraclesOnce(t *testing.T) {
	eps := loadEpisodes(t, "testdata/episodes.jsonl")
	for _, tc := range []struct{ reference, hybrid string }{
		{"", ""}, // Analyze's defaults: deterministic, hybrid
		{"deterministic", "hybrid"},
		{"reference", "hybrid"},
		{"deterministic", "hybrid_v2"},
	} {
		r, err := Analyze(eps, AnalyzeOptions{Resamples: 20, BootstrapSeed: 5, Reference: tc.reference, Hybrid: tc.hybrid})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := r.WriteHTML(&buf); err != nil {
			t.Fatal(err)
		}
		s := buf.String()
		i := strings.Index(s, `<p class="meta">`)
		if i < 0 {
			t.Fatal("no header paragraph")
		}
		meta := s[i:]
		meta = meta[:strings.Index(meta, "</p>")]
		text := regexp.MustCompile(`<[^>]*>`).ReplaceAllString(meta, " ")
		words := regexp.MustCompile(`[\pL\pN_^]+`).FindAllString(text, -1)
		for k := 1; k < len(words); k++ {
			if strings.EqualFold(words[k], words[k-1]) {
				t.Errorf("%+v: header repeats %q: %s", tc, words[k], text)
			}
		}
		names := []string{r.Reference}
		for _, row := range r.Rows {
			names = append(names, row.Hybrid)
		}
		for _, name := range names {
			if !strings.Contains(text, name) {
				t.Errorf("%+v: header does not name oracle %q: %s", tc, name, text)
			}
		}
	}
}

// TestWriteHTMLTableFits: the wide tables sit in a horizontal scroll
// container (so that a narrow window scrolls the table, not the page) and
// every cell with an interval puts it on a line of its own, which keeps
// the tables within a 1280 px window (measured in a browser by
// TestReportFitsBrowserWindow).
func TestWriteHTMLTableFits(t *testing.T) {
	eps := loadEpisodes(t, "testdata/episodes.jsonl")
	r, err := Analyze(eps, AnalyzeOptions{Resamples: 20, BootstrapSeed: 5})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := r.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	for _, id := range []string{"table8", "table8-diag", "credit", "gain", "denominators", "by-database", "by-task", "questions"} {
		if !strings.Contains(s, "<div class=\"scroll\">\n<table id=\""+id+"\">") {
			t.Errorf("table %s is not in a scroll container", id)
		}
	}
	if strings.Contains(s, "white-space: nowrap; }\nth") || !strings.Contains(s, ".scroll { max-width: 100%; overflow-x: auto; }") {
		t.Error("CSS: cells must be allowed to wrap, and .scroll must scroll")
	}
	cell := regexp.MustCompile(`<td><span>([^<]*)</span><span class="ci">\[([^<]*)\]</span>(<span class="note">[^<]*</span>)?</td>`)
	if n := len(cell.FindAllString(s, -1)); n < 10 {
		t.Errorf("%d cells with the interval on its own line, want at least 10", n)
	}
	if regexp.MustCompile(`<td>[^<]*\[`).MatchString(s) {
		t.Error("a cell has its interval on the same line as its mean")
	}
	// The strict-credit columns are a table of their own, and the HTML
	// splits Table 8 in two, the name columns repeated: inference (eight
	// columns) and the leakage diagnostics (six), so that each fits a
	// 1280 px window (TestReportFitsBrowserWindow measures it); the
	// Markdown keeps AmbiTab's twelve columns.
	for id, want := range map[string]int{"table8": 8, "table8-diag": 6, "credit": 8} {
		i := strings.Index(s, `<table id="`+id+`">`)
		if i < 0 {
			t.Fatalf("no table %s", id)
		}
		head := s[i:]
		head = head[:strings.Index(head, "</tr>")]
		if n := strings.Count(head, "<th"); n != want {
			t.Errorf("table %s has %d columns, want %d", id, n, want)
		}
	}
	if len(table8Header) != 12 {
		t.Errorf("Table 8 has %d columns, want AmbiTab's 12", len(table8Header))
	}
}

// TestChartRange: a chart's axis runs from min(0, data) to a nice value
// above the data, so that diagnostics of a few points are not flattened
// against a 0–100 axis, and 0 is always in range.
func TestChartRange(t *testing.T) {
	p := func(v float64) *float64 { return &v }
	one := func(mean float64, lohi ...float64) [][]Summary {
		s := Summary{Mean: p(mean)}
		if len(lohi) == 2 {
			s.Lo, s.Hi = p(lohi[0]), p(lohi[1])
		}
		return [][]Summary{{s}}
	}
	for _, c := range []struct {
		name           string
		vals           [][]Summary
		lo, hi, step   float64
		dataLo, dataHi float64
	}{
		{"all zero", one(0, 0, 0), 0, 1, 0.2, 0, 0},
		{"no data", [][]Summary{{{}}}, 0, 1, 0.2, 0, 0},
		{"a few tenths of a point", one(0.002, 0.001, 0.003), 0, 0.4, 0.1, 0, 0.3},
		{"leaky responder", one(0.276, 0.179, 0.36), 0, 40, 10, 0, 36},
		{"negative", one(-0.125, -0.5, 0.25), -60, 40, 20, -50, 25},
		{"rates up to 100", one(1, 1, 1), 0, 100, 20, 0, 100},
	} {
		lo, hi, step := chartRange(c.vals)
		if math.Abs(lo-c.lo) > 1e-9 || math.Abs(hi-c.hi) > 1e-9 || math.Abs(step-c.step) > 1e-9 {
			t.Errorf("%s: axis %g–%g step %g, want %g–%g step %g", c.name, lo, hi, step, c.lo, c.hi, c.step)
		}
		if lo > 0 || hi < 0 || lo > c.dataLo || hi < c.dataHi || (c.dataHi > 0 && c.dataHi < 100 && hi <= c.dataHi) {
			t.Errorf("%s: axis %g–%g does not hold 0 and the data (%g–%g) with room above", c.name, lo, hi, c.dataLo, c.dataHi)
		}
	}
	// The chart draws the zero line and labels it.
	var b strings.Builder
	writeChart(&b, "diag", "caption", []string{"o"}, []string{"ΔJ_resp"}, one(0.004, 0.001, 0.006), nil, false)
	svg := b.String()
	if !strings.Contains(svg, `<line class="zero"`) || !regexp.MustCompile(`<text class="zero"[^>]*>0</text>`).MatchString(svg) {
		t.Errorf("no labelled zero line:\n%s", svg)
	}
	if strings.Contains(svg, ">100</text>") || !strings.Contains(svg, ">0.6</text>") && !strings.Contains(svg, ">0.8</text>") {
		t.Errorf("the axis does not fit 0.4 points (0.1–0.6):\n%s", svg)
	}
}

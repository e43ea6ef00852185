package eval

import (
	"bytes"
	"encoding/xml"
	"io"
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
	if count["svg"] != 3 || count["style"] != 1 || count["table"] != 6 {
		t.Errorf("svg %d, style %d, table %d; want 3, 1, 6", count["svg"], count["style"], count["table"])
	}
	for _, id := range []string{"chart-sr", "chart-pr", "chart-diag", "table8", "credit", "credit-legend", "gain", "counts", "errors", "group-signal"} {
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
// Table 8 within a 1280 px window (checked by eye with make
// report-screenshot).
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
	for _, id := range []string{"table8", "credit", "gain"} {
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
	// The strict-credit columns are a table of their own: Table 8 keeps
	// AmbiTab's twelve columns (its width), and the credit table has eight.
	for id, want := range map[string]int{"table8": len(table8Header), "credit": 8} {
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

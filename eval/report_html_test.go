package eval

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
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
	if count["svg"] != 3 || count["style"] != 1 || count["table"] != 3 {
		t.Errorf("svg %d, style %d, table %d; want 3, 1, 3", count["svg"], count["style"], count["table"])
	}
	for _, id := range []string{"chart-sr", "chart-pr", "chart-diag", "table8", "gain", "group-signal"} {
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
	for _, want := range []string{"SR asker", "ΔRec_spec^Q", "45.8 ± 29.5"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

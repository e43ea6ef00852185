package eval

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// htmlCSS styles the report; it is inlined so the page needs no assets.
const htmlCSS = `
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 80em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; }
.scroll { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.8em; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.45em; text-align: right; vertical-align: top; }
th { background: #f3f3f3; font-weight: 600; } td.l, th.l { text-align: left; }
td span { display: block; white-space: nowrap; } td .ci { color: #666; font-size: 0.88em; } td .note { color: #a15c00; font-size: 0.8em; }
.charts { display: flex; flex-wrap: wrap; gap: 1.5em; }
figure { margin: 0; max-width: 100%; } figcaption { font-size: 0.85em; color: #555; max-width: 40em; }
svg.chart { max-width: 100%; height: auto; }
svg text { font-family: system-ui, sans-serif; font-size: 11px; fill: #333; }
.meta { color: #555; font-size: 0.9em; }
ul.notes { font-size: 0.8em; color: #555; margin-top: -0.5em; }
@media (max-width: 1100px) { body { margin: 1em; } table { font-size: 0.72em; } }
`

// seriesColors colours the bars of a chart's series in order.
var seriesColors = []string{"#9aa5b1", "#2f6fb0", "#3b9a57", "#c27c2c"}

// WriteHTML writes a self-contained HTML report (inline CSS, hand-written
// SVG, no external assets): grouped bars of SR under the none, asker and
// full conditions per oracle with the gap to full marked; precision,
// recall and F1 bars; the four leakage diagnostics as bars with their
// bootstrap whiskers; then the Table 8, credit-rules (the asker's
// precision, recall and F1 under AmbiTab's and the strict rule, a small
// table of its own so that Table 8 keeps its width) and gain tables. The
// output is also well-formed XML.
func (r *Report) WriteHTML(w io.Writer) error {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n")
	fmt.Fprintf(&b, "<title>avtgym evaluation: %s</title>\n<style>%s</style>\n</head>\n<body>\n", esc(r.Corpus), htmlCSS)
	fmt.Fprintf(&b, "<h1>avtgym evaluation: %s</h1>\n", esc(r.Corpus))
	if r.bird() != nil || r.Tide != nil {
		if r.Tide != nil {
			writeTideHTML(&b, r)
		} else {
			writeBirdCHTML(&b, r)
		}
		writeHTMLGroupSignal(&b, r)
		b.WriteString("</body>\n</html>\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "<p class=\"meta\">Seeds %s. Bars: mean across seeds; whiskers: 95%% AVT-cluster bootstrap interval (%d resamples, seed %d). %s %s.</p>\n",
		esc(seedList(r.Seeds)), r.Resamples, r.BootstrapSeed, esc(oracleRoles(r)), esc(upperFirst(comparisonText(r))))
	if r.SDNote != "" {
		fmt.Fprintf(&b, "<p class=\"meta\" id=\"sd-note\">%s</p>\n", esc(upperFirst(r.SDNote)))
	}

	groups := make([]string, len(r.Rows))
	sr := make([][]Summary, len(r.Rows))
	pr := make([][]Summary, len(r.Rows))
	dg := make([][]Summary, len(r.Rows))
	notes := make([]string, len(r.Rows))
	for i, row := range r.Rows {
		groups[i] = row.Oracle
		sr[i] = []Summary{row.SRNone, row.SRAsker, row.SRFull}
		pr[i] = []Summary{row.Precision, row.Recall, row.F1}
		dg[i] = []Summary{row.DJResp, row.DRecSpec, row.DJFull, row.DRecNone}
		if row.Gap.Mean != nil {
			notes[i] = fmt.Sprintf("gap %+.1f", 100**row.Gap.Mean)
		}
	}
	b.WriteString("<h2>Charts</h2>\n<div class=\"charts\">\n")
	writeChart(&b, "sr", "Success rate (%) without disambiguation, with the evaluated asker and with full disambiguation; the bracket marks the signed gap J(full) − J(asker).",
		groups, []string{"SR none", "SR asker", "SR full"}, sr, notes, true)
	writeChart(&b, "pr", "Asking precision, recall and F1 of the evaluated asker (%), credited by AmbiTab's rule; the Credit rules table gives them under strict credit too.",
		groups, []string{"Precision", "Recall", "F1"}, pr, nil, false)
	writeChart(&b, "diag", "Leakage diagnostics (percentage points; ΔRec_spec^Q is a raw recall); the axis fits the data, its zero line marked 0.",
		groups, []string{"ΔJ_resp", "ΔRec_spec^Q", "ΔJ_full", "ΔRec_none"}, dg, nil, false)
	b.WriteString("</div>\n")

	b.WriteString("<h2>Inference and leakage across oracles</h2>\n")
	b.WriteString("<p class=\"meta\">" + esc(cellsLegend) + "</p>\n")
	b.WriteString("<h3>Inference</h3>\n")
	writeHTMLTable(&b, "table8", inferenceHeader, r, inferenceCells)
	b.WriteString("<h3>Leakage diagnostics</h3>\n")
	writeHTMLTable(&b, "table8-diag", diagnosticsHeader, r, diagnosticsCells)
	b.WriteString("<h2>Credit rules</h2>\n")
	writeHTMLTableFoot(&b, "credit", creditHeader, r, creditCells, creditLegend)
	b.WriteString("<h2>Asking gain and gap to full</h2>\n")
	writeHTMLTable(&b, "gain", gainHeader, r, gainCells)
	b.WriteString("<h2>Episodes</h2>\n<p class=\"meta\">" + esc(countsLegend) + "</p>\n")
	writeHTMLCounts(&b, "counts", countsHeader, countsRows(r))
	b.WriteString("<h2>How each figure is counted</h2>\n<p class=\"meta\">" + esc(figuresLegend) + "</p>\n")
	writeHTMLPlain(&b, "denominators", denominatorsHeader, denominatorRows(r), 3)
	b.WriteString("<h2>Episodes that did not complete</h2>\n<p class=\"meta\">" + esc(errorsLegend) + "</p>\n")
	writeHTMLTable(&b, "errors", errorsHeader, r, errorsCells)
	b.WriteString("<h2>Unreadable model output</h2>\n<p class=\"meta\">" + esc(unreadableLegend) + "</p>\n<ul id=\"unreadable\">\n")
	for i := range r.Rows {
		b.WriteString("<li>" + esc(unreadableLine(r, &r.Rows[i])) + "</li>\n")
	}
	b.WriteString("</ul>\n")
	writeBreakdownHTML(&b, r)
	writeHTMLGroupSignal(&b, r)
	b.WriteString("</body>\n</html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeUnreadableHTML is writeUnreadableMarkdown's HTML.
func writeUnreadableHTML(b *strings.Builder, lines []string) {
	b.WriteString("<h2>Unreadable model output</h2>\n<p class=\"meta\">" + html.EscapeString(unreadableLegend) + "</p>\n<ul id=\"unreadable\">\n")
	for _, l := range lines {
		b.WriteString("<li>" + html.EscapeString(l) + "</li>\n")
	}
	b.WriteString("</ul>\n")
}

// writeHTMLCounts writes a table of plain cells, the first three names.
func writeHTMLCounts(b *strings.Builder, id string, header []string, rows [][]string) {
	esc := html.EscapeString
	fmt.Fprintf(b, "<div class=\"scroll\">\n<table id=\"%s\">\n<tr>", id)
	for i, h := range header {
		cls := ""
		if i < 3 {
			cls = " class=\"l\""
		}
		fmt.Fprintf(b, "<th%s>%s</th>", cls, esc(h))
	}
	b.WriteString("</tr>\n")
	for _, row := range rows {
		b.WriteString("<tr>")
		for j, c := range row {
			if j < 3 {
				fmt.Fprintf(b, "<td class=\"l\">%s</td>", strings.ReplaceAll(esc(c), "_", "_<wbr/>"))
			} else {
				fmt.Fprintf(b, "<td>%s</td>", esc(c))
			}
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n</div>\n")
}

// upperFirst capitalises the first letter of an ASCII sentence.
func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// writeHTMLGroupSignal writes a report's GRPO group signal, when set.
func writeHTMLGroupSignal(b *strings.Builder, r *Report) {
	if len(r.GroupSignal) == 0 {
		return
	}
	esc := html.EscapeString
	b.WriteString("<h2>GRPO groups with a training signal</h2>\n<table id=\"group-signal\">\n<tr><th class=\"l\">Reward</th><th>Groups with unequal rewards</th></tr>\n")
	for _, k := range sortedKeys(r.GroupSignal) {
		fmt.Fprintf(b, "<tr><td class=\"l\">%s</td><td>%s%%</td></tr>\n", esc(k), pct(r.GroupSignal[k]))
	}
	b.WriteString("</table>\n")
}

func writeHTMLTable(b *strings.Builder, id string, header []string, r *Report, cells func(*Report, *Row, *notes) []string) {
	writeHTMLTableFoot(b, id, header, r, cells, "")
}

// writeHTMLTableFoot is writeHTMLTable with a paragraph (foot, unless
// empty) between the table and its notes.
func writeHTMLTableFoot(b *strings.Builder, id string, header []string, r *Report, cells func(*Report, *Row, *notes) []string, foot string) {
	n := notes{sd: len(r.Seeds) > 1}
	fmt.Fprintf(b, "<div class=\"scroll\">\n<table id=\"%s\">\n<tr>", id)
	for i, h := range header {
		cls := ""
		if i < 2 {
			cls = " class=\"l\""
		}
		fmt.Fprintf(b, "<th%s>%s</th>", cls, html.EscapeString(h))
	}
	b.WriteString("</tr>\n")
	for i := range r.Rows {
		b.WriteString("<tr>")
		for j, c := range cells(r, &r.Rows[i], &n) {
			if j < 2 {
				// Names may wrap after an underscore (test_leaky_<wbr/>responder).
				fmt.Fprintf(b, "<td class=\"l\">%s</td>", strings.ReplaceAll(html.EscapeString(c), "_", "_<wbr/>"))
				continue
			}
			b.WriteString("<td>")
			writeSummaryCell(b, c)
			b.WriteString("</td>")
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n</div>\n")
	if foot != "" {
		fmt.Fprintf(b, "<p class=\"meta\" id=\"%s-legend\">%s</p>\n", id, html.EscapeString(foot))
	}
	if len(n.texts) > 0 {
		fmt.Fprintf(b, "<ul class=\"notes\" id=\"%s-notes\">\n", id)
		for i, t := range n.texts {
			fmt.Fprintf(b, "<li>(%s) %s</li>\n", noteLabel(i), html.EscapeString(t))
		}
		b.WriteString("</ul>\n")
	}
}

// writeSummaryCell writes a FormatSummary cell on two lines, "mean ± SD"
// above the bootstrap interval "[lo, hi]", so that a column is about half
// as wide as the one-line text. A warning mark ("⚠ (a)") after the
// interval, or a note reference after a dash, gets a span of its own.
func writeSummaryCell(b *strings.Builder, c string) {
	head, ci, ok := strings.Cut(c, " [")
	if !ok {
		head, note, _ := strings.Cut(c, " ")
		fmt.Fprintf(b, "<span>%s</span>", html.EscapeString(head))
		if note != "" {
			fmt.Fprintf(b, " <span class=\"note\">%s</span>", html.EscapeString(note))
		}
		return
	}
	fmt.Fprintf(b, "<span>%s</span>", html.EscapeString(head))
	ci, warn, _ := strings.Cut(ci, "]")
	fmt.Fprintf(b, "<span class=\"ci\">[%s]</span>", html.EscapeString(ci))
	if warn = strings.TrimSpace(warn); warn != "" {
		fmt.Fprintf(b, "<span class=\"note\">%s</span>", html.EscapeString(warn))
	}
}

// oracleRoles names the reference oracle and each row's hybrid for the
// report's header, without repeating a word ("hybrid hybrid" when the
// hybrid is the oracle called hybrid).
func oracleRoles(r *Report) string {
	var pairs []string
	for _, row := range r.Rows {
		if row.Hybrid != "" && row.Hybrid != row.Oracle {
			pairs = append(pairs, row.Oracle+" with "+row.Hybrid)
		}
	}
	hybrids := "every oracle here is its own hybrid"
	if len(pairs) > 0 {
		hybrids = strings.Join(pairs, ", ")
	}
	return "ΔJ_full and ΔRec_none compare with the reference oracle (" + r.Reference +
		"); ΔJ_resp and ΔRec_spec^Q compare an oracle with its hybrid (same matcher, reference responder): " + hybrids + "."
}

// writeChart draws a grouped bar chart in SVG: one group per oracle, one
// bar per series at the mean (in percent), a whisker for the bootstrap
// interval, a zero line, and (when gapBracket) a bracket from the second
// to the third bar labelled with notes[group].
func writeChart(b *strings.Builder, id, caption string, groups, series []string, vals [][]Summary, notes []string, gapBracket bool) {
	const (
		barW, barGap, groupGap = 22.0, 4.0, 28.0
		left, right, top       = 48.0, 12.0, 46.0
		plotH, bottom          = 200.0, 40.0
	)
	groupW := float64(len(series))*(barW+barGap) - barGap
	// A group's slot is wide enough for its bars and for the longest
	// group label (about 6.5 px a character at 11 px), so that labels
	// such as "test_leaky_responder" never run into their neighbours.
	slotW := groupW + groupGap
	for _, g := range groups {
		slotW = math.Max(slotW, 6.5*float64(len([]rune(g)))+12)
	}
	width := left + right + float64(len(groups))*slotW
	legendW := 0.0
	for _, s := range series {
		legendW += legendItemWidth(s)
	}
	width = math.Max(width, math.Max(320, left+legendW+right))
	height := top + plotH + bottom
	lo, hi, step := chartRange(vals)
	y := func(v float64) float64 { return top + plotH*(hi-v)/(hi-lo) }

	fmt.Fprintf(b, "<figure id=\"chart-%s\">\n<svg class=\"chart\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" role=\"img\">\n", id, width, height, width, height)
	// Legend.
	lx := left
	for k, s := range series {
		fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"8\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.1f\" y=\"17\">%s</text>\n",
			lx, seriesColors[k%len(seriesColors)], lx+14, html.EscapeString(s))
		lx += legendItemWidth(s)
	}
	// Grid and axis: the labels are multiples of step (computed from the
	// index, so that no rounding drift skips or doubles a line), and the
	// zero line, always in range, is drawn darker and labelled 0 in bold
	// so that a reader sees where the sign of a diagnostic changes.
	for k := 0; ; k++ {
		v := lo + float64(k)*step
		if v > hi+step/2 {
			break
		}
		if math.Abs(v) < step/2 {
			continue
		}
		fmt.Fprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
			left, y(v), width-right, y(v), left-6, y(v)+4, trimNum(v))
	}
	fmt.Fprintf(b, "<line class=\"zero\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\"/><text class=\"zero\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-weight=\"bold\">0</text>\n",
		left, y(0), width-right, y(0), left-6, y(0)+4)
	for g, name := range groups {
		gx := left + float64(g)*slotW + (slotW-groupW)/2
		tops := make([]float64, len(series))
		for k := range series {
			s := vals[g][k]
			x := gx + float64(k)*(barW+barGap)
			tops[k] = math.NaN()
			if s.Mean == nil {
				fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x+barW/2, y(0)-4, Dash)
				continue
			}
			m := 100 * *s.Mean
			y0, y1 := y(0), y(m)
			if y1 > y0 {
				y0, y1 = y1, y0
			}
			tops[k] = y(m)
			fmt.Fprintf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>%s %s: %s</title></rect>\n",
				x, y1, barW, y0-y1, seriesColors[k%len(seriesColors)], html.EscapeString(name), html.EscapeString(series[k]), html.EscapeString(FormatSummary(s)))
			if s.Lo != nil && s.Hi != nil {
				cx := x + barW/2
				fmt.Fprintf(b, "<path class=\"whisker\" d=\"M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f\" stroke=\"#111\" fill=\"none\"/>\n",
					cx, y(100**s.Lo), y(100**s.Hi), cx-4, y(100**s.Lo), cx+4, cx-4, y(100**s.Hi), cx+4)
			}
		}
		if gapBracket && len(tops) >= 3 && !math.IsNaN(tops[1]) && !math.IsNaN(tops[2]) && notes != nil && notes[g] != "" {
			x1 := gx + 1*(barW+barGap) + barW/2
			x2 := gx + 2*(barW+barGap) + barW/2
			yt := math.Min(tops[1], tops[2]) - 12
			fmt.Fprintf(b, "<path class=\"gap\" d=\"M%.1f %.1fV%.1fH%.1fV%.1f\" stroke=\"#b03030\" fill=\"none\"/><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#b03030\">%s</text>\n",
				x1, tops[1]-2, yt, x2, tops[2]-2, (x1+x2)/2, yt-3, html.EscapeString(notes[g]))
		}
		fmt.Fprintf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", gx+groupW/2, top+plotH+18, html.EscapeString(name))
	}
	fmt.Fprintf(b, "</svg>\n<figcaption>%s</figcaption>\n</figure>\n", html.EscapeString(caption))
}

// chartRange is a chart's y axis in percent: from min(0, data) to a nice
// value above the data (every mean and whisker), in steps of 1, 2 or 5
// times a power of ten, about five of them. The data decide the range, so
// that diagnostics of a few points are not flattened against a 0–100
// axis; 0 is always in range. With no data, or all of it at 0, the axis
// spans 0–1, so that it still reads as "all zero" instead of hiding
// values under 1.
func chartRange(vals [][]Summary) (lo, hi, step float64) {
	var dataLo, dataHi float64
	for _, g := range vals {
		for _, s := range g {
			for _, p := range []*float64{s.Mean, s.Lo, s.Hi} {
				if p != nil {
					dataLo = math.Min(dataLo, 100**p)
					dataHi = math.Max(dataHi, 100**p)
				}
			}
		}
	}
	lo, hi = dataLo, dataHi
	if hi-lo < 1e-9 {
		hi = lo + 1
	}
	step = niceStep((hi - lo) / 5)
	lo = math.Floor(lo/step+1e-9) * step
	hi = math.Ceil(hi/step-1e-9) * step
	// Above the data: a largest value on a grid line gets one more step,
	// so that its bar and whisker do not touch the frame, up to 100 (no
	// rate or difference in points exceeds it); a smallest below 0
	// likewise, down to −100.
	if dataHi > 0 && hi-dataHi < step*1e-6 && hi < 100 {
		hi += step
	}
	if dataLo < 0 && dataLo-lo < step*1e-6 && lo > -100 {
		lo -= step
	}
	return lo, hi, step
}

// legendItemWidth estimates the width of a legend entry: swatch, label
// (about 7 px a character at 11 px) and spacing.
func legendItemWidth(label string) float64 { return 14 + 7*float64(len([]rune(label))) + 16 }

// niceStep rounds a raw axis step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimNum(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0"
	}
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

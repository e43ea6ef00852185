package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteJSON writes the report as indented JSON (rates as fractions).
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Dash marks an undefined value in the Markdown and HTML tables.
const Dash = "–"

// FormatSummary formats a summary in percent (or percentage points) as
// "mean ± SD [lo, hi]" with one decimal; the "± SD" part is left out when
// SD is undefined (one seed), the interval when it is undefined, and the
// whole cell is Dash when the mean is undefined.
func FormatSummary(s Summary) string {
	if s.Mean == nil {
		return Dash
	}
	var b strings.Builder
	b.WriteString(pct(*s.Mean))
	if s.SD != nil {
		b.WriteString(" ± " + pct(*s.SD))
	}
	if s.Lo != nil && s.Hi != nil {
		fmt.Fprintf(&b, " [%s, %s]", pct(*s.Lo), pct(*s.Hi))
	}
	return b.String()
}

// pct formats a fraction as a percentage with one decimal, avoiding "-0.0".
func pct(v float64) string {
	s := fmt.Sprintf("%.1f", 100*v)
	if s == "-0.0" {
		s = "0.0"
	}
	return s
}

// table8Header is the column layout of AmbiTab's Table 8.
var table8Header = []string{"Corpus", "Oracle", "SR none", "SR asker", "SR full", "Precision", "Recall", "F1",
	"ΔJ_resp", "ΔRec_spec^Q", "ΔJ_full", "ΔRec_none"}

func table8Cells(r *Report, row *Row) []string {
	return []string{r.Corpus, row.Oracle,
		FormatSummary(row.SRNone), FormatSummary(row.SRAsker), FormatSummary(row.SRFull),
		FormatSummary(row.Precision), FormatSummary(row.Recall), FormatSummary(row.F1),
		FormatSummary(row.DJResp), FormatSummary(row.DRecSpec), FormatSummary(row.DJFull), FormatSummary(row.DRecNone)}
}

var gainHeader = []string{"Corpus", "Oracle", "Asking gain J(asker) − J(none)", "Gap J(full) − J(asker)"}

func gainCells(r *Report, row *Row) []string {
	return []string{r.Corpus, row.Oracle, FormatSummary(row.Gain), FormatSummary(row.Gap)}
}

func mdRow(cells []string) string {
	esc := make([]string, len(cells))
	for i, c := range cells {
		esc[i] = strings.ReplaceAll(c, "|", `\|`)
	}
	return "| " + strings.Join(esc, " | ") + " |\n"
}

func mdSep(n int) string {
	return "|" + strings.Repeat(" --- |", n) + "\n"
}

// WriteMarkdown writes the report as Markdown: the Table 8 layout of
// AmbiTab (rows = corpus × oracle; SR none / asker / full, precision,
// recall, F1 and the four leakage diagnostics; cells "mean ± SD [lo, hi]"
// in percent or percentage points, Dash where undefined), then asking gain
// and gap, then the GRPO group signal when set.
func (r *Report) WriteMarkdown(w io.Writer) error {
	return WriteMarkdownReports(w, []*Report{r})
}

// WriteMarkdownReports writes several corpora's reports as one Markdown
// document with one Table 8 (rows = corpus × oracle).
func WriteMarkdownReports(w io.Writer, rs []*Report) error {
	var b strings.Builder
	b.WriteString("## Inference and leakage across oracles\n\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "- %s: seeds %s; %d AVT-cluster bootstrap resamples (seed %d); %s\n",
			r.Corpus, seedList(r.Seeds), r.Resamples, r.BootstrapSeed, oracleRoles(r.Reference, r.Hybrid))
	}
	b.WriteString("\nCells: mean ± sample SD across seeds [95% bootstrap interval], in % (diagnostics in percentage points); " + Dash + " where undefined.\n\n")
	b.WriteString(mdRow(table8Header))
	b.WriteString(mdSep(len(table8Header)))
	for _, r := range rs {
		for i := range r.Rows {
			b.WriteString(mdRow(table8Cells(r, &r.Rows[i])))
		}
	}
	b.WriteString("\n### Asking gain and gap to full\n\n")
	b.WriteString(mdRow(gainHeader))
	b.WriteString(mdSep(len(gainHeader)))
	for _, r := range rs {
		for i := range r.Rows {
			b.WriteString(mdRow(gainCells(r, &r.Rows[i])))
		}
	}
	for _, r := range rs {
		if len(r.GroupSignal) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### GRPO groups with a training signal (%s)\n\n", r.Corpus)
		b.WriteString(mdRow([]string{"Reward", "Groups with unequal rewards"}))
		b.WriteString(mdSep(2))
		for _, k := range sortedKeys(r.GroupSignal) {
			b.WriteString(mdRow([]string{k, pct(r.GroupSignal[k]) + "%"}))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func seedList(seeds []uint64) string {
	s := make([]string, len(seeds))
	for i, v := range seeds {
		s[i] = fmt.Sprint(v)
	}
	return strings.Join(s, ", ")
}

func sortedKeys(m map[string]float64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

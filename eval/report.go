package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
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
// "mean ± SD [lo, hi; K AVTs]" with one decimal, K the bootstrap clusters
// (donor components for ΔRec_spec^Q); the "± SD" part is left out when SD
// is undefined (one seed), the interval when it is undefined, and the
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
		fmt.Fprintf(&b, " [%s, %s; %s]", pct(*s.Lo), pct(*s.Hi), clusterText(s))
	}
	return b.String()
}

func clusterText(s Summary) string {
	switch {
	case s.Donor && s.Clusters == 1:
		return "1 component"
	case s.Donor:
		return fmt.Sprintf("%d components", s.Clusters)
	case s.Clusters == 1:
		return "1 AVT"
	}
	return fmt.Sprintf("%d AVTs", s.Clusters)
}

// notes numbers the reasons of undefined cells and the warnings of weak
// intervals, so that a table's cells can refer to them ("– (a)",
// "… ⚠ (b)") and the notes follow the table.
type notes struct {
	texts []string
	idx   map[string]int
	// sd, when set, has a cell defined in one seed refer to its SDReason
	// (set for the rows of a report with two or more seeds; a one-seed
	// report says it once, in its header).
	sd bool
}

func (n *notes) ref(text string) string {
	if n.idx == nil {
		n.idx = map[string]int{}
	}
	i, ok := n.idx[text]
	if !ok {
		i = len(n.texts)
		n.idx[text] = i
		n.texts = append(n.texts, text)
	}
	return "(" + noteLabel(i) + ")"
}

func noteLabel(i int) string {
	s := ""
	for i++; i > 0; i = (i - 1) / 26 {
		s = string(rune('a'+(i-1)%26)) + s
	}
	return s
}

// cell formats a summary with its note: the reason of a Dash, the warning
// of a weak interval.
func (n *notes) cell(s Summary) string {
	c := FormatSummary(s)
	switch {
	case s.Mean == nil && s.Reason != "":
		c += " " + n.ref(s.Reason)
	case s.Warning != "":
		c += " ⚠ " + n.ref(s.Warning)
	}
	if n.sd && s.Mean != nil && s.SDReason != "" {
		c += " " + n.ref(s.SDReason)
	}
	return c
}

func (n *notes) markdown(b *strings.Builder) {
	if len(n.texts) == 0 {
		return
	}
	b.WriteString("\n")
	for i, t := range n.texts {
		fmt.Fprintf(b, "- (%s) %s\n", noteLabel(i), t)
	}
}

// pct formats a fraction as a percentage with one decimal, avoiding "-0.0".
func pct(v float64) string {
	s := fmt.Sprintf("%.1f", 100*v)
	if s == "-0.0" {
		s = "0.0"
	}
	return s
}

// comparisonText says which comparison the report's episodes used.
func comparisonText(r *Report) string {
	var t string
	switch r.Comparison {
	case "harness":
		t = "comparison harness (BIRD-Interact's ex_base exactly, quirks included, on records imported from BIRD-Interact: numbers comparable with the paper's; other records compare by their own rules)"
	case "sound":
		t = "comparison sound (avtgym's sound variant of BIRD-Interact's test on records imported from BIRD-Interact, not the paper's exact rules; other records compare by their own rules)"
	case "":
		return "comparison not recorded (episodes written before the option existed)"
	default:
		t = "comparison " + r.Comparison
	}
	if r.ComparisonUnrecorded > 0 {
		t += fmt.Sprintf("; %d episode(s) do not record theirs", r.ComparisonUnrecorded)
	}
	return t
}

// table8Header is the column layout of AmbiTab's Table 8.
var table8Header = []string{"Corpus", "Oracle", "SR none", "SR asker", "SR full", "Precision", "Recall", "F1",
	"ΔJ_resp", "ΔRec_spec^Q", "ΔJ_full", "ΔRec_none"}

func table8Cells(r *Report, row *Row, n *notes) []string {
	return append(inferenceCells(r, row, n), diagnosticsCells(r, row, n)[2:]...)
}

// The HTML report splits Table 8 in two, its name columns repeated, so
// that each half fits a 1280 px window (the twelve columns of two-line
// cells do not, even at 1700 px): inference (SR, precision, recall, F1)
// and the leakage diagnostics. The Markdown keeps AmbiTab's one table.
var (
	inferenceHeader   = table8Header[:8]
	diagnosticsHeader = append([]string{"Corpus", "Oracle"}, table8Header[8:]...)
)

func inferenceCells(r *Report, row *Row, n *notes) []string {
	return []string{r.Corpus, row.Oracle,
		n.cell(row.SRNone), n.cell(row.SRAsker), n.cell(row.SRFull),
		n.cell(row.Precision), n.cell(row.Recall), n.cell(row.F1)}
}

func diagnosticsCells(r *Report, row *Row, n *notes) []string {
	return []string{r.Corpus, row.Oracle,
		n.cell(row.DJResp), n.cell(row.DRecSpec), n.cell(row.DJFull), n.cell(row.DRecNone)}
}

// creditHeader is the layout of the credit-rules table: the asker's
// precision, recall and F1 under AmbiTab's rule (Table 8's) beside the
// asker_strict condition's, credited by the strict rule. It is a table of
// its own so that Table 8 keeps AmbiTab's layout and its width.
var creditHeader = []string{"Corpus", "Oracle", "Precision", "Recall", "F1", "Prec (strict)", "Rec (strict)", "F1 (strict)"}

func creditCells(r *Report, row *Row, n *notes) []string {
	return []string{r.Corpus, row.Oracle,
		n.cell(row.Precision), n.cell(row.Recall), n.cell(row.F1),
		n.cell(row.PrecisionStrict), n.cell(row.RecallStrict), n.cell(row.F1Strict)}
}

// creditLegend is the sentence under the credit-rules table.
const creditLegend = "Precision, recall and F1 credit by AmbiTab's rule (as in the table above); " +
	"strict: the same asker with strict_credit — a question earns only the ambiguities it names; " +
	"a gap between the two rules means credit earned by echoing the request."

var gainHeader = []string{"Corpus", "Oracle", "Asking gain J(asker) − J(none)", "Gap J(full) − J(asker)"}

func gainCells(r *Report, row *Row, n *notes) []string {
	return []string{r.Corpus, row.Oracle, n.cell(row.Gain), n.cell(row.Gap)}
}

var errorsHeader = []string{"Corpus", "Oracle", "Not completed", "SR none, completed", "SR asker, completed", "SR full, completed"}

// errorsCells is one row of the table of incomplete episodes: the episodes
// that did not complete per condition (counted as failures above) and the
// SR on the pairs every oracle completed.
func errorsCells(r *Report, row *Row, n *notes) []string {
	var parts []string
	for _, c := range AllConditions {
		if k := row.Counts[c].NotCompleted(); k > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", c, k))
		}
	}
	bad := "0"
	if len(parts) > 0 {
		bad = strings.Join(parts, ", ")
	}
	return []string{r.Corpus, row.Oracle, bad, n.cell(row.SRNoneCompleted), n.cell(row.SRAskerCompleted), n.cell(row.SRFullCompleted)}
}

// countsHeader is the layout of the episodes table: one row per oracle
// and condition that ran.
var countsHeader = []string{"Corpus", "Oracle", "Condition", "Episodes", "Completed", "ERROR", "Asker failed", "Call failed"}

// countsRows are the cells of the episodes table's rows of one report.
func countsRows(r *Report) [][]string {
	var out [][]string
	for i := range r.Rows {
		row := &r.Rows[i]
		for _, c := range AllConditions {
			if k, ok := row.Counts[c]; ok {
				out = append(out, append([]string{r.Corpus, row.Oracle, string(c)}, countCells(k)...))
			}
		}
	}
	return out
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
// in percent or percentage points, Dash where undefined), then the asker's
// precision, recall and F1 under both credit rules (AmbiTab's and
// asker_strict's), asking gain and gap, then the GRPO group signal when
// set.
func (r *Report) WriteMarkdown(w io.Writer) error {
	return WriteMarkdownReports(w, []*Report{r})
}

// WriteMarkdownReports writes several corpora's reports as one Markdown
// document with one Table 8 (rows = corpus × oracle).
func WriteMarkdownReports(w io.Writer, rs []*Report) error {
	var b strings.Builder
	var bird, tide []*Report
	rs = slices.DeleteFunc(slices.Clone(rs), func(r *Report) bool {
		switch {
		case r.bird() != nil:
			bird = append(bird, r)
		case r.Tide != nil:
			tide = append(tide, r)
		default:
			return false
		}
		return true
	})
	if len(bird) > 0 {
		writeBirdCMarkdown(&b, bird)
		if len(rs)+len(tide) == 0 {
			_, err := io.WriteString(w, b.String())
			return err
		}
		b.WriteString("\n")
	}
	if len(tide) > 0 {
		writeTideMarkdown(&b, tide)
		if len(rs) == 0 {
			_, err := io.WriteString(w, b.String())
			return err
		}
		b.WriteString("\n")
	}
	b.WriteString("## Inference and leakage across oracles\n\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "- %s: seeds %s; %d AVT-cluster bootstrap resamples (seed %d); %s; %s\n",
			r.Corpus, seedList(r.Seeds), r.Resamples, r.BootstrapSeed, comparisonText(r), oracleRoles(r))
		if r.SDNote != "" {
			fmt.Fprintf(&b, "- %s: %s\n", r.Corpus, upperFirst(r.SDNote))
		}
	}
	b.WriteString("\n" + cellsLegend + "\n\n")
	mdTable(&b, rs, table8Header, table8Cells)
	b.WriteString("\n### Credit rules\n\n")
	mdTableFoot(&b, rs, creditHeader, creditCells, creditLegend)
	b.WriteString("\n### Asking gain and gap to full\n\n")
	mdTable(&b, rs, gainHeader, gainCells)
	b.WriteString("\n### Episodes\n\n" + countsLegend + "\n\n")
	b.WriteString(mdRow(countsHeader))
	b.WriteString(mdSep(len(countsHeader)))
	for _, r := range rs {
		for _, cells := range countsRows(r) {
			b.WriteString(mdRow(cells))
		}
	}
	b.WriteString("\n### How each figure is counted\n\n" + figuresLegend + "\n\n")
	b.WriteString(mdRow(denominatorsHeader))
	b.WriteString(mdSep(len(denominatorsHeader)))
	for _, r := range rs {
		for _, cells := range denominatorRows(r) {
			b.WriteString(mdRow(cells))
		}
	}
	b.WriteString("\n### Episodes that did not complete\n\n" + errorsLegend + "\n\n")
	mdTable(&b, rs, errorsHeader, errorsCells)
	b.WriteString("\n### Unreadable model output\n\n" + unreadableLegend + "\n\n")
	for _, r := range rs {
		for i := range r.Rows {
			b.WriteString("- " + unreadableLine(r, &r.Rows[i]) + "\n")
		}
	}
	writeBreakdownMarkdown(&b, rs)
	for _, r := range rs {
		writeGroupSignal(&b, r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// figuresLegend says how each figure is counted: over which episodes,
// with which seeds, and why `avtgym rollout`'s summary of the same tasks
// differs (issue 30: rollout's success 0.750 beside SR none 72.4 on the
// demo corpus, with nothing saying why).
const figuresLegend = "Every task is played once per seed, all of them with that seed; the lookup solver's uniform guess among the interpretations the dialogue left open depends on the seed alone, " +
	"so within a seed it is the same for every task of an AVT. " +
	"Per seed and cell, SR is the mean success over the episodes in “SR over” (every episode of the condition in that seed, one that did not complete counting as a failure), " +
	"precision over those in “Precision over” (completed episodes that asked), recall and F1 over those in “Recall over” and “F1 over” (tasks with counted ambiguities, fallback stops left out; one that did not complete scores 0). " +
	"A cell of the tables above is the mean of these per-seed rates over the seeds where the rate is defined (not one mean over all seeds' episodes), its ± the sample SD across those seeds, its interval a bootstrap over AVTs. " +
	"A number per seed is shown once when every seed has it, else one per seed (seeds in order, separated by /). " +
	"avtgym rollout counts differently: one episode per task, task i with seed --seed + i (seeds that differ between the tasks of an AVT), " +
	"its success_rate over its scored episodes only (n_success; one that did not complete counts in errors, not as a failure), and its reward is the --reward it asked for. " +
	"Its success_rate on the same tasks therefore differs from SR here: with π_none and the lookup solver, SR none is, in every seed, one success per AVT whose interpretations all ran (the guess is shared by its tasks and right for one of them), " +
	"while rollout's per-task seeds make independent guesses that only average to that (docs/cli.md, rollout)."

// denominatorsHeader is the layout of the denominators table: per oracle
// and condition, the per-seed denominators of each rate (Cells).
var denominatorsHeader = []string{"Corpus", "Oracle", "Condition", "Seeds", "Episodes", "SR over", "Precision over", "Recall over", "F1 over"}

// denominatorRows are the denominators table's rows of one report, from
// its per-seed cells: each count once when every seed has it, else one per
// seed.
func denominatorRows(r *Report) [][]string {
	type key struct {
		oracle string
		cond   Condition
	}
	by := map[key][]CellEntry{}
	var keys []key
	for _, c := range r.Cells {
		k := key{c.Oracle, c.Condition}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], c)
	}
	slices.SortStableFunc(keys, func(a, b key) int {
		if a.oracle != b.oracle {
			if oracleLess(a.oracle, b.oracle) {
				return -1
			}
			return 1
		}
		return slices.Index(AllConditions, a.cond) - slices.Index(AllConditions, b.cond)
	})
	var out [][]string
	for _, k := range keys {
		cs := by[k]
		sort.Slice(cs, func(i, j int) bool { return cs[i].Seed < cs[j].Seed })
		col := func(f func(CellMetrics) int) string {
			vals := make([]string, len(cs))
			same := true
			for i, c := range cs {
				vals[i] = fmt.Sprint(f(c.CellMetrics))
				same = same && vals[i] == vals[0]
			}
			if same {
				return vals[0]
			}
			return strings.Join(vals, "/")
		}
		out = append(out, []string{r.Corpus, k.oracle, string(k.cond), fmt.Sprint(len(cs)),
			col(func(m CellMetrics) int { return m.Episodes }), col(func(m CellMetrics) int { return m.NSR }),
			col(func(m CellMetrics) int { return m.NPrecision }), col(func(m CellMetrics) int { return m.NRecall }),
			col(func(m CellMetrics) int { return m.NF1 })})
	}
	return out
}

// writeGroupSignal writes a report's GRPO group signal, when set.
func writeGroupSignal(b *strings.Builder, r *Report) {
	if len(r.GroupSignal) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### GRPO groups with a training signal (%s)\n\n", r.Corpus)
	b.WriteString(mdRow([]string{"Reward", "Groups with unequal rewards"}))
	b.WriteString(mdSep(2))
	for _, k := range sortedKeys(r.GroupSignal) {
		b.WriteString(mdRow([]string{k, pct(r.GroupSignal[k]) + "%"}))
	}
}

// cellsLegend explains the cells of the tables.
const cellsLegend = "Cells: mean ± sample SD across seeds [95% bootstrap interval; the clusters it resamples], in % (diagnostics in percentage points); " +
	"SR over every episode of the condition (the Episodes table's count), recall and F1 over those of tasks with counted ambiguities: an episode that did not complete (ERROR, asker failed, call failed) counts as a failure with zero recall; precision over the completed episodes that asked; " +
	Dash + " where undefined, with the reason in the notes below the table; ⚠ marks an interval that cannot be trusted (fewer than two clusters, or zero width)."

// countsLegend explains the episodes table.
const countsLegend = "The denominators: each oracle and condition's episodes (all seeds), those that completed (TERMINATED or TRUNCATED), and those that did not, after the run's retries, by status: " +
	"ERROR (the environment could not complete the episode), asker failed (ASKER_FAILED: the asker itself failed, such as the LLM asker's endpoint, or a trajectory file without the episode), call failed (RPC_FAILED: a call to the server failed). " +
	"Every episode that did not complete counts in the tables above as a failure with zero recall (AmbiTab §C.2)."

// errorsLegend explains the incomplete-episodes table.
const errorsLegend = "Episodes that did not complete (ERROR, asker failed, call failed; the Episodes table splits them) count above as failures with zero recall (AmbiTab §C.2). " +
	"Beside them, each condition's SR on the (task, seed) pairs that every oracle that ran the condition completed (over those pairs, not all episodes)."

// unreadableLegend explains the unreadable-output lines.
const unreadableLegend = "Model outputs the server could not read, after its own retries (a corrective turn, a larger limit; none for a reply cut off in a loop), per condition: " +
	"the oracle's (questions answered unanswerable() because stage 1's output could not be read, not because the question was unanswerable) and the LLM solver's (episodes whose solver wrote no SQL that could be read). " +
	"They are scored above as the model's answers would be (a refusal, a failed solution); many of them mean the model, its limits or its server settings do not suit the role (docs/models.md)."

// unreadableLine is an oracle row's unreadable outputs, per condition
// that ran: "demo, llm: oracle none 0, asker 3; solver none 0, asker 1".
func unreadableLine(r *Report, row *Row) string {
	var oracle, solver []string
	for _, c := range AllConditions {
		u, ok := row.Unreadable[c]
		if !ok {
			continue
		}
		oracle = append(oracle, fmt.Sprintf("%s %d", c, u.Oracle))
		solver = append(solver, fmt.Sprintf("%s %d", c, u.Solver))
	}
	if len(oracle) == 0 {
		return fmt.Sprintf("%s, %s: no episodes", r.Corpus, row.Oracle)
	}
	return fmt.Sprintf("%s, %s: unreadable oracle outputs: %s; unreadable solver outputs: %s", r.Corpus, row.Oracle, strings.Join(oracle, ", "), strings.Join(solver, ", "))
}

// unreadableRowLine is the unreadable outputs of a row of a BIRD-Interact
// or TIDE report (one condition), the row named by its name cells:
// "demo, llm, asker: unreadable oracle outputs: 3; unreadable solver
// outputs: 0".
func unreadableRowLine(names []string, u UnreadableCounts) string {
	return fmt.Sprintf("%s: unreadable oracle outputs: %d; unreadable solver outputs: %d", strings.Join(names, ", "), u.Oracle, u.Solver)
}

// writeUnreadableMarkdown writes the unreadable-output section of a
// BIRD-Interact or TIDE report: the legend, then a line per row.
func writeUnreadableMarkdown(b *strings.Builder, lines []string) {
	b.WriteString("\n### Unreadable model output\n\n" + unreadableLegend + "\n\n")
	for _, l := range lines {
		b.WriteString("- " + l + "\n")
	}
}

// mdTable writes one Markdown table, its rows from every report, and the
// notes its cells refer to.
func mdTable(b *strings.Builder, rs []*Report, header []string, cells func(*Report, *Row, *notes) []string) {
	mdTableFoot(b, rs, header, cells, "")
}

// mdTableFoot is mdTable with a paragraph (foot, unless empty) between the
// table and its notes.
func mdTableFoot(b *strings.Builder, rs []*Report, header []string, cells func(*Report, *Row, *notes) []string, foot string) {
	var n notes
	b.WriteString(mdRow(header))
	b.WriteString(mdSep(len(header)))
	for _, r := range rs {
		n.sd = len(r.Seeds) > 1
		for i := range r.Rows {
			b.WriteString(mdRow(cells(r, &r.Rows[i], &n)))
		}
	}
	if foot != "" {
		b.WriteString("\n" + foot + "\n")
	}
	n.markdown(b)
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

package eval

import (
	"cmp"
	"fmt"
	"html"
	"maps"
	"slices"
	"strings"
)

// Breakdown is one oracle's episodes per database and per task, and the
// number of questions they asked, per condition. The report's tables give
// the mean over seeds of each seed's rate; a breakdown pools the seeds
// instead (a task's SR is the fraction of its seeds it solved), since a
// database or a task is too small a unit for an across-seed SD.
type Breakdown struct {
	Oracle string `json:"oracle"`
	// ByDatabase has one row per database (Episode.DB, "–" when the
	// records name none), sorted by name; ByTask one row per task, sorted
	// by task id.
	ByDatabase []GroupRow `json:"by_database"`
	ByTask     []GroupRow `json:"by_task"`
	// Questions is, per condition that ran, the distribution of the
	// number of questions its completed episodes asked.
	Questions []QuestionCounts `json:"questions_asked"`
}

// GroupRow is a database's or a task's episodes under each condition
// that ran.
type GroupRow struct {
	Database   string                   `json:"database"`
	Task       string                   `json:"task,omitempty"`
	Conditions map[Condition]GroupStats `json:"conditions"`
}

// GroupStats are the pooled figures of some episodes of one condition,
// with the eligibility rules of the report's tables: SR and reward over
// every episode (one that did not complete is a failure with reward 0, as
// in SR), F1 over those of tasks with counted ambiguities, fallback stops
// left out (one that did not complete scores 0). The N fields are the
// denominators; a mean is null when its denominator is 0.
type GroupStats struct {
	Episodes int      `json:"episodes"`
	Reward   *float64 `json:"reward"`
	SR       *float64 `json:"sr"`
	F1       *float64 `json:"f1"`
	NReward  int      `json:"n_reward"`
	NSR      int      `json:"n_sr"`
	NF1      int      `json:"n_f1"`
}

// QuestionCounts is the distribution of the number of questions asked by
// one condition's completed episodes (all seeds): Counts[i] episodes asked
// i questions, up to the most any asked. Episodes that did not complete
// are left out: their dialogue was cut short.
type QuestionCounts struct {
	Condition Condition `json:"condition"`
	Episodes  int       `json:"episodes"`
	Counts    []int     `json:"counts"`
	Mean      *float64  `json:"mean"`
}

// rewardOf returns an episode's reward and whether it counts: an episode
// that did not complete scores 0, as it does in SR.
func rewardOf(e *Episode) (float64, bool) {
	if incomplete(e) {
		return 0, true
	}
	if e.Reward == nil {
		return 0, false
	}
	return *e.Reward, true
}

// groupAcc accumulates GroupStats.
type groupAcc struct {
	n                 int
	reward, sr, f1    float64
	nReward, nSR, nF1 int
}

func (a *groupAcc) add(e *Episode) {
	a.n++
	if v, ok := rewardOf(e); ok {
		a.reward += v
		a.nReward++
	}
	if v, ok := successOf(e); ok {
		a.sr += v
		a.nSR++
	}
	if v, ok := f1Of(e); ok {
		a.f1 += v
		a.nF1++
	}
}

func (a *groupAcc) stats() GroupStats {
	return GroupStats{Episodes: a.n, Reward: ratio(a.reward, a.nReward), SR: ratio(a.sr, a.nSR), F1: ratio(a.f1, a.nF1),
		NReward: a.nReward, NSR: a.nSR, NF1: a.nF1}
}

// breakdowns computes every oracle's Breakdown from the deduplicated
// episodes, oracles in report order.
func (d *dataset) breakdowns() []Breakdown {
	out := make([]Breakdown, 0, len(d.oracles))
	for _, o := range d.oracles {
		dbs := map[string]map[Condition]*groupAcc{}
		tasks := map[string]map[Condition]*groupAcc{}
		taskDB := map[string]string{}
		questions := map[Condition][]int{}
		// In a fixed order (conditions, seeds, tasks), so that the sums,
		// and the last digits of the means, do not depend on map order.
		for _, cond := range slices.Sorted(maps.Keys(d.cells)) {
			for _, seed := range d.seeds {
				for _, e := range d.cells[cond][o][seed] {
					db := e.DB
					if db == "" {
						db = Dash
					}
					if taskDB[e.TaskID] == "" || taskDB[e.TaskID] == Dash {
						taskDB[e.TaskID] = db
					}
					accOf(dbs, db, cond).add(e)
					accOf(tasks, e.TaskID, cond).add(e)
					if e.Scored() {
						q := questions[cond]
						for len(q) <= len(e.Questions) {
							q = append(q, 0)
						}
						q[len(e.Questions)]++
						questions[cond] = q
					}
				}
			}
		}
		b := Breakdown{Oracle: o, ByDatabase: groupRows(dbs, nil), ByTask: groupRows(tasks, taskDB), Questions: []QuestionCounts{}}
		for _, c := range AllConditions {
			if !d.ran(c, o) {
				continue
			}
			qc := QuestionCounts{Condition: c, Counts: questions[c]}
			if qc.Counts == nil {
				qc.Counts = []int{}
			}
			var total float64
			for k, n := range qc.Counts {
				qc.Episodes += n
				total += float64(k * n)
			}
			qc.Mean = ratio(total, qc.Episodes)
			b.Questions = append(b.Questions, qc)
		}
		out = append(out, b)
	}
	return out
}

func accOf(m map[string]map[Condition]*groupAcc, key string, c Condition) *groupAcc {
	if m[key] == nil {
		m[key] = map[Condition]*groupAcc{}
	}
	if m[key][c] == nil {
		m[key][c] = &groupAcc{}
	}
	return m[key][c]
}

// groupRows turns accumulators into rows sorted by key: databases when
// taskDB is nil, else tasks with their database.
func groupRows(m map[string]map[Condition]*groupAcc, taskDB map[string]string) []GroupRow {
	rows := make([]GroupRow, 0, len(m))
	for key, byCond := range m {
		r := GroupRow{Database: key, Conditions: map[Condition]GroupStats{}}
		if taskDB != nil {
			r.Database, r.Task = taskDB[key], key
		}
		for c, a := range byCond {
			r.Conditions[c] = a.stats()
		}
		rows = append(rows, r)
	}
	slices.SortFunc(rows, func(a, b GroupRow) int {
		return cmp.Or(cmp.Compare(a.Task, b.Task), cmp.Compare(a.Database, b.Database))
	})
	return rows
}

// shownBreakdown is the breakdown the Markdown and HTML reports show: the
// reference oracle's when it ran, else the first row's (report.json has
// every oracle's).
func (r *Report) shownBreakdown() *Breakdown {
	for i := range r.Breakdowns {
		if r.Breakdowns[i].Oracle == r.Reference {
			return &r.Breakdowns[i]
		}
	}
	if len(r.Breakdowns) > 0 {
		return &r.Breakdowns[0]
	}
	return nil
}

// breakdownOracleText names the oracle a breakdown shows and why.
func breakdownOracleText(r *Report, b *Breakdown) string {
	why := "the first oracle"
	if b.Oracle == r.Reference {
		why = "the reference oracle"
	}
	return fmt.Sprintf("Under the %s oracle (%s); report.json's breakdown gives every oracle's. ", b.Oracle, why)
}

// databaseLegend explains the per-database table.
const databaseLegend = "Per database and condition: the episodes (all seeds pooled), the mean reward and SR over all of them (an episode that did not complete counts as a failure with reward 0), " +
	"F1 over those of tasks with counted ambiguities (fallback stops left out). Pooled over seeds, so no SD or interval; " + Dash + " where no episode is eligible."

// maxTaskRows is the most task rows the Markdown report lists (the
// hardest tasks first); report.json lists every task and the HTML report
// every task in a collapsed section.
const maxTaskRows = 20

// taskLegend explains the per-task table.
const taskLegend = "Per task: SR under each condition that ran of none, asker and full, and the asker's F1 and mean reward, each pooled over the task's seeds (the fraction of its seeds it solved; the same eligibility as per database)."

// questionsCap is the last column of the questions-asked table: "≥ cap".
const questionsCap = 5

// questionsLegend explains the questions-asked table.
const questionsLegend = "The number of questions each condition's completed episodes asked (all seeds; episodes that did not complete are left out, their dialogue cut short): episodes that asked 0, 1, 2, … questions, and the mean."

// conditionsOf lists the conditions a row has, in report order.
func conditionsOf(row GroupRow) []Condition {
	var out []Condition
	for _, c := range AllConditions {
		if _, ok := row.Conditions[c]; ok {
			out = append(out, c)
		}
	}
	return out
}

func ratePct(v *float64) string {
	if v == nil {
		return Dash
	}
	return pct(*v)
}

func rewardText(v *float64) string {
	if v == nil {
		return Dash
	}
	return fmt.Sprintf("%.3f", *v)
}

var databaseHeader = []string{"Database", "Condition", "Episodes", "Reward", "SR", "F1"}

func databaseRows(b *Breakdown) [][]string {
	var out [][]string
	for _, row := range b.ByDatabase {
		for _, c := range conditionsOf(row) {
			s := row.Conditions[c]
			out = append(out, []string{row.Database, string(c), fmt.Sprint(s.Episodes), rewardText(s.Reward), ratePct(s.SR), ratePct(s.F1)})
		}
	}
	return out
}

// taskConditions are the conditions whose SR the task table gives.
var taskConditions = []Condition{None, Asker, Full}

// taskTable returns the task table's header and rows, tasks in the order
// given.
func taskTable(b *Breakdown, rows []GroupRow) ([]string, [][]string) {
	ran := map[Condition]bool{}
	for _, row := range b.ByTask {
		for c := range row.Conditions {
			ran[c] = true
		}
	}
	header := []string{"Task", "Database", "Seeds"}
	for _, c := range taskConditions {
		if ran[c] {
			header = append(header, "SR "+string(c))
		}
	}
	if ran[Asker] {
		header = append(header, "F1 asker", "Reward asker")
	}
	var out [][]string
	for _, row := range rows {
		seeds := 0
		for _, s := range row.Conditions {
			seeds = max(seeds, s.Episodes)
		}
		cells := []string{row.Task, row.Database, fmt.Sprint(seeds)}
		for _, c := range taskConditions {
			if ran[c] {
				s, ok := row.Conditions[c]
				cells = append(cells, map[bool]string{true: ratePct(s.SR), false: Dash}[ok])
			}
		}
		if ran[Asker] {
			s, ok := row.Conditions[Asker]
			if ok {
				cells = append(cells, ratePct(s.F1), rewardText(s.Reward))
			} else {
				cells = append(cells, Dash, Dash)
			}
		}
		out = append(out, cells)
	}
	return header, out
}

// hardestTasks orders tasks by the asker's SR (else the first condition
// that ran), lowest first, then by id: the tasks a reader looks at first.
func hardestTasks(b *Breakdown) []GroupRow {
	rows := slices.Clone(b.ByTask)
	key := func(r GroupRow) float64 {
		for _, c := range append([]Condition{Asker}, AllConditions...) {
			if s, ok := r.Conditions[c]; ok && s.SR != nil {
				return *s.SR
			}
		}
		return 2
	}
	slices.SortStableFunc(rows, func(a, b GroupRow) int { return cmp.Compare(key(a), key(b)) })
	return rows
}

func questionsHeader() []string {
	h := []string{"Condition", "Episodes"}
	for k := range questionsCap {
		h = append(h, fmt.Sprint(k))
	}
	return append(h, fmt.Sprintf("≥%d", questionsCap), "Mean")
}

func questionsRows(b *Breakdown) [][]string {
	var out [][]string
	for _, q := range b.Questions {
		cells := []string{string(q.Condition), fmt.Sprint(q.Episodes)}
		over := 0
		for k, n := range q.Counts {
			if k >= questionsCap {
				over += n
			}
		}
		for k := range questionsCap {
			n := 0
			if k < len(q.Counts) {
				n = q.Counts[k]
			}
			cells = append(cells, fmt.Sprint(n))
		}
		mean := Dash
		if q.Mean != nil {
			mean = fmt.Sprintf("%.2f", *q.Mean)
		}
		out = append(out, append(cells, fmt.Sprint(over), mean))
	}
	return out
}

// writeBreakdownMarkdown writes the per-database, per-task and
// questions-asked sections of the reports' shown breakdowns.
func writeBreakdownMarkdown(b *strings.Builder, rs []*Report) {
	for _, r := range rs {
		bd := r.shownBreakdown()
		if bd == nil {
			continue
		}
		corpus := ""
		if len(rs) > 1 {
			corpus = " (" + r.Corpus + ")"
		}
		fmt.Fprintf(b, "\n### Per database%s\n\n%s%s\n\n", corpus, breakdownOracleText(r, bd), databaseLegend)
		plainMarkdownTable(b, databaseHeader, databaseRows(bd))
		rows := hardestTasks(bd)
		shown := rows
		more := ""
		if len(rows) > maxTaskRows {
			shown = rows[:maxTaskRows]
			more = fmt.Sprintf(" The %d tasks with the lowest SR asker of %d; report.json's breakdown (by_task) lists them all.", maxTaskRows, len(rows))
		}
		fmt.Fprintf(b, "\n### Per task%s\n\n%s%s%s\n\n", corpus, breakdownOracleText(r, bd), taskLegend, more)
		h, cells := taskTable(bd, shown)
		plainMarkdownTable(b, h, cells)
		fmt.Fprintf(b, "\n### Questions asked%s\n\n%s%s\n\n", corpus, breakdownOracleText(r, bd), questionsLegend)
		plainMarkdownTable(b, questionsHeader(), questionsRows(bd))
	}
}

func plainMarkdownTable(b *strings.Builder, header []string, rows [][]string) {
	b.WriteString(mdRow(header))
	b.WriteString(mdSep(len(header)))
	for _, r := range rows {
		b.WriteString(mdRow(r))
	}
}

// writeBreakdownHTML is writeBreakdownMarkdown's HTML; the task table
// lists every task, in a collapsed section when there are more than
// maxTaskRows.
func writeBreakdownHTML(b *strings.Builder, r *Report) {
	bd := r.shownBreakdown()
	if bd == nil {
		return
	}
	esc := html.EscapeString
	b.WriteString("<h2>Per database</h2>\n<p class=\"meta\">" + esc(breakdownOracleText(r, bd)+databaseLegend) + "</p>\n")
	writeHTMLPlain(b, "by-database", databaseHeader, databaseRows(bd), 2)
	b.WriteString("<h2>Per task</h2>\n<p class=\"meta\">" + esc(breakdownOracleText(r, bd)+taskLegend) + " Hardest first (lowest SR asker).</p>\n")
	rows := hardestTasks(bd)
	h, cells := taskTable(bd, rows)
	if len(rows) > maxTaskRows {
		fmt.Fprintf(b, "<details id=\"by-task-details\">\n<summary>All %d tasks</summary>\n", len(rows))
		writeHTMLPlain(b, "by-task", h, cells, 2)
		b.WriteString("</details>\n")
	} else {
		writeHTMLPlain(b, "by-task", h, cells, 2)
	}
	b.WriteString("<h2>Questions asked</h2>\n<p class=\"meta\">" + esc(breakdownOracleText(r, bd)+questionsLegend) + "</p>\n")
	writeHTMLPlain(b, "questions", questionsHeader(), questionsRows(bd), 1)
}

// writeHTMLPlain writes a table of plain cells, the first names ones
// left-aligned (and breakable after an underscore).
func writeHTMLPlain(b *strings.Builder, id string, header []string, rows [][]string, names int) {
	esc := html.EscapeString
	fmt.Fprintf(b, "<div class=\"scroll\">\n<table id=\"%s\">\n<tr>", id)
	for i, h := range header {
		cls := ""
		if i < names {
			cls = " class=\"l\""
		}
		fmt.Fprintf(b, "<th%s>%s</th>", cls, esc(h))
	}
	b.WriteString("</tr>\n")
	for _, row := range rows {
		b.WriteString("<tr>")
		for j, c := range row {
			if j < names {
				fmt.Fprintf(b, "<td class=\"l\">%s</td>", strings.ReplaceAll(esc(c), "_", "_<wbr/>"))
			} else {
				fmt.Fprintf(b, "<td>%s</td>", esc(c))
			}
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n</div>\n")
}

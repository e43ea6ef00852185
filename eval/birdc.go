package eval

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"avtgym/driver"
)

// BirdC and BirdA are the names of BIRD-Interact's conversational
// protocol, c-Interact, and its agentic protocol, a-Interact (PROTOCOL.md
// §8), as `--protocol` and the episodes spell them.
const (
	BirdC = "bird-c"
	BirdA = "bird-a"
)

// isBird reports whether a protocol name is one of BIRD-Interact's, whose
// runs this file analyses (the same figures; bird-a adds the coins).
func isBird(protocol string) bool { return protocol == BirdC || protocol == BirdA }

// RunInfoFile records, in a run directory, the protocol of the run and
// the tasks it left out, for the report (under bird-c, the tasks without
// a follow-up). It is rewritten by every run into the directory.
const RunInfoFile = "protocol.json"

// RunInfo is what RunInfoFile holds.
type RunInfo struct {
	// Protocol is the run's protocol as --protocol names it.
	Protocol string `json:"protocol"`
	// Patience is the bird-c or bird-a patience the run asked for (null:
	// the server's default: 3 turns, 6 coins).
	Patience *int32 `json:"patience"`
	// Tasks counts the tasks the run evaluates (after --limit), and
	// Skipped the tasks of the corpus (and split) that the protocol does
	// not serve: under bird-c and bird-a those without a follow-up; under
	// tide-f those without a TIDE sample type, under tide-p also the
	// drift-only samples.
	Tasks   int `json:"tasks"`
	Skipped int `json:"skipped_tasks"`
	// Asker names the policy of the asker condition.
	Asker string `json:"asker,omitempty"`
}

// ReadRunInfo reads the RunInfoFile of a run directory (or of the
// directory of a results file); nil, nil when there is none (a run made
// before the file existed).
func ReadRunInfo(path string) (*RunInfo, error) {
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		path = filepath.Dir(path)
	}
	b, err := os.ReadFile(filepath.Join(path, RunInfoFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ri RunInfo
	if err := json.Unmarshal(b, &ri); err != nil {
		return nil, fmt.Errorf("eval: %s: %w", filepath.Join(path, RunInfoFile), err)
	}
	return &ri, nil
}

// Apply gives the analysis what the run knew (ri may be nil).
func (ri *RunInfo) Apply(opt *AnalyzeOptions) {
	if ri != nil {
		opt.Run = ri
	}
}

// phase1Of returns whether an episode solved BIRD-Interact's phase 1 (its
// reward's phase1 component is positive: 0.7, or 0.5 after the debug
// retry) and whether it is eligible: scored with a reward, or an episode
// that did not complete (ERROR, ASKER_FAILED, RPC_FAILED), a failure with
// zero credit: BIRD-Interact's SR is over all tasks (its harness scores a
// task whose interaction failed 0; evaluation/src/eval_bird_interact.py
// divides by the number of instances).
func phase1Of(e *Episode) (float64, bool) {
	if incomplete(e) {
		return 0, true
	}
	if e.Reward == nil {
		return 0, false
	}
	if e.Phase1 != nil && *e.Phase1 > 0 {
		return 1, true
	}
	return 0, true
}

// phase2Of returns whether an episode solved phase 2, over the same
// episodes as phase 1: an episode whose follow-up was never released
// (phase 1 failed) is a phase-2 failure, as BIRD-Interact counts it.
func phase2Of(e *Episode) (float64, bool) {
	if incomplete(e) {
		return 0, true
	}
	if e.Reward == nil {
		return 0, false
	}
	if e.Phase2 != nil && *e.Phase2 > 0 {
		return 1, true
	}
	return 0, true
}

// birdRewardOf returns an episode's BIRD-Interact reward (phase1 +
// phase2, at most 1); an episode that did not complete is 0.
func birdRewardOf(e *Episode) (float64, bool) {
	if incomplete(e) {
		return 0, true
	}
	if e.Reward == nil {
		return 0, false
	}
	return *e.Reward, true
}

// BirdCReport is a bird-c or bird-a run's analysis: BIRD-Interact's
// metrics per oracle and condition, with the same AVT-cluster bootstrap
// intervals as the AMBITAB metrics; under bird-a also the coins spent,
// in all and per action type.
type BirdCReport struct {
	// Protocol is the run's protocol, bird-c or bird-a.
	Protocol string `json:"protocol"`
	// Patience is the patience the run asked for (null: the server's
	// default, 3 turns under bird-c and 6 coins under bird-a, or unknown).
	Patience *int32 `json:"patience"`
	// Tasks counts the tasks evaluated (those with episodes); Skipped the
	// corpus's tasks left out for having no follow-up (null: unknown, the
	// run directory has no RunInfoFile).
	Tasks   int  `json:"tasks"`
	Skipped *int `json:"skipped_tasks"`
	// Asker names the policy of the asker condition (empty: unknown).
	Asker string `json:"asker,omitempty"`
	// Actions lists, under bird-a, the action types the run's episodes
	// took, in driver.ActionNames order: the keys of each row's
	// CoinsByAction.
	Actions []string `json:"actions,omitempty"`
	// Rows has one row per oracle and condition that ran.
	Rows []BirdCRow `json:"rows"`
	// Cells lists the per-seed numbers behind the rows.
	Cells []BirdCCell `json:"cells"`
}

// BirdCRow is one (oracle, condition) row of a bird-c report. Phase1SR
// and Phase2SR are fractions over every evaluated episode, Counts.Episodes
// (phase 2 counts an episode whose phase 1 failed as a failure, as
// BIRD-Interact does); Reward is the mean reward in [0, 1] and
// NormalizedReward BIRD-Interact's normalised reward, the mean × 100 (its
// interval scaled alike). Episodes that did not complete (ERROR,
// ASKER_FAILED, RPC_FAILED: Counts) count as failures with zero reward;
// the Completed summaries keep only the (task, seed) pairs every oracle
// that ran the condition completed.
type BirdCRow struct {
	Oracle    string    `json:"oracle"`
	Condition Condition `json:"condition"`
	// Counts are the row's denominators (all seeds): its episodes, those
	// that completed, and the others by status. Released counts those
	// whose follow-up was released.
	Counts
	Released         int     `json:"released"`
	Phase1SR         Summary `json:"phase1_sr"`
	Phase2SR         Summary `json:"phase2_sr"`
	Reward           Summary `json:"reward"`
	NormalizedReward Summary `json:"normalized_reward"`
	Phase1Completed  Summary `json:"phase1_sr_completed"`
	Phase2Completed  Summary `json:"phase2_sr_completed"`
	RewardCompleted  Summary `json:"reward_completed"`
	// Under bird-a: Coins is the mean coins an episode spent, and
	// CoinsByAction the mean coins an episode spent on each action type
	// (0 for an episode that took none of it), over the scored episodes
	// (ERROR episodes, which hold no budget, are left out).
	Coins         *Summary           `json:"coins_used,omitempty"`
	CoinsByAction map[string]Summary `json:"coins_by_action,omitempty"`
	// Unreadable counts the model outputs of the row's episodes (all
	// seeds) the server could not read (Episode.UnreadableOracle and
	// UnreadableSolver, summed), as the AMBITAB rows' Unreadable does per
	// condition.
	Unreadable UnreadableCounts `json:"unreadable"`
}

// BirdCCell is one (oracle, condition, seed) cell of a bird-c report.
type BirdCCell struct {
	Oracle    string    `json:"oracle"`
	Condition Condition `json:"condition"`
	Seed      uint64    `json:"seed"`
	// Counts are the cell's denominators (Completed: the scored ones).
	Counts
	Phase1SR *float64 `json:"phase1_sr"`
	Phase2SR *float64 `json:"phase2_sr"`
	Reward   *float64 `json:"reward"`
}

// birdCMetrics is the number of metrics of a BirdCRow.
const birdCMetrics = 7

// coinsOf returns the coins a bird-a episode spent on the named action
// type ("" for all), over the scored episodes.
func coinsOf(action string) episodeValue {
	return func(e *Episode) (float64, bool) {
		if !e.Scored() || e.CoinsUsed == nil {
			return 0, false
		}
		if action == "" {
			return *e.CoinsUsed, true
		}
		return e.CoinsSpent[action], true
	}
}

// analyzeBirdC builds the bird-c or bird-a section of a report.
func analyzeBirdC(d *dataset, opt *AnalyzeOptions, protocol string) *BirdCReport {
	b := &BirdCReport{Protocol: protocol}
	if ri := opt.Run; ri != nil {
		b.Patience, b.Asker = ri.Patience, ri.Asker
		if ri.Protocol == protocol {
			b.Skipped = &ri.Skipped
		}
	}
	coins := protocol == BirdA
	if coins {
		b.Actions = spentActions(d)
	}
	perRow := birdCMetrics
	if coins {
		perRow += 1 + len(b.Actions)
	}
	tasks := map[string]bool{}
	for k := range d.byKey {
		tasks[k.task] = true
	}
	b.Tasks = len(tasks)
	rows := d.rowKeys()
	var ms []*metric
	for _, r := range rows {
		ms = append(ms, d.birdCRowMetrics(r, coins, b.Actions)...)
	}
	s := summarize(ms, d, opt.Resamples, opt.BootstrapSeed)
	for i, r := range rows {
		row := newBirdCRow(r, s[i*perRow:(i+1)*perRow], coins, b.Actions)
		row.countEpisodes(d.cells[r.cond][r.o])
		b.Rows = append(b.Rows, row)
	}
	b.Cells = d.birdCCells(rows)
	return b
}

// spentActions returns the BIRD_A actions the episodes spent coins on:
// the driver's actions in their order, then any other, sorted.
func spentActions(d *dataset) []string {
	seen := map[string]bool{}
	for _, e := range d.byKey {
		for a := range e.CoinsSpent {
			seen[a] = true
		}
	}
	var actions []string
	for _, a := range driver.ActionNames {
		if seen[a] {
			actions = append(actions, a)
			delete(seen, a)
		}
	}
	return append(actions, slices.Sorted(maps.Keys(seen))...)
}

// birdCRowMetrics returns the metrics of one row, in newBirdCRow's order: the
// birdCMetrics success rates and rewards, then (coins) the coins spent in
// all and on each action.
func (d *dataset) birdCRowMetrics(r rowKey, coins bool, actions []string) []*metric {
	reward := d.cellStat(r.cond, r.o, birdRewardOf, false)
	noEp := "no scored episode"
	noPair := "no (task, seed) pair that every oracle completed"
	ms := []*metric{
		{terms: []term{{d.cellStat(r.cond, r.o, phase1Of, false), 1}}, empty: noEp},
		{terms: []term{{d.cellStat(r.cond, r.o, phase2Of, false), 1}}, empty: noEp},
		{terms: []term{{reward, 1}}, empty: noEp},
		{terms: []term{{reward, 100}}, empty: noEp},
		{terms: []term{{d.completedStat(r.cond, r.o, phase1Of), 1}}, empty: noPair},
		{terms: []term{{d.completedStat(r.cond, r.o, phase2Of), 1}}, empty: noPair},
		{terms: []term{{d.completedStat(r.cond, r.o, birdRewardOf), 1}}, empty: noPair},
	}
	if coins {
		ms = append(ms, &metric{terms: []term{{d.cellStat(r.cond, r.o, coinsOf(""), false), 1}}, empty: noEp})
		for _, a := range actions {
			ms = append(ms, &metric{terms: []term{{d.cellStat(r.cond, r.o, coinsOf(a), false), 1}}, empty: noEp})
		}
	}
	return ms
}

// newBirdCRow is the row of r from its summaries x, in birdCRowMetrics' order.
func newBirdCRow(r rowKey, x []Summary, coins bool, actions []string) BirdCRow {
	row := BirdCRow{Oracle: r.o, Condition: r.cond,
		Phase1SR: x[0], Phase2SR: x[1], Reward: x[2], NormalizedReward: x[3],
		Phase1Completed: x[4], Phase2Completed: x[5], RewardCompleted: x[6]}
	if coins {
		c := x[birdCMetrics]
		row.Coins, row.CoinsByAction = &c, map[string]Summary{}
		for j, a := range actions {
			row.CoinsByAction[a] = x[birdCMetrics+1+j]
		}
	}
	return row
}

// countEpisodes counts the row's episodes, by status, phase-2 releases
// and unreadable model outputs.
func (row *BirdCRow) countEpisodes(cell map[uint64][]*Episode) {
	for _, es := range cell {
		for _, e := range es {
			row.Counts.add(e)
			row.Unreadable.add(e)
			if e.Phase2 != nil {
				row.Released++
			}
		}
	}
}

// birdCCells returns the per-seed cells of the rows (the plain means of
// the success rates and the reward), by oracle, condition and seed.
func (d *dataset) birdCCells(rows []rowKey) []BirdCCell {
	var cells []BirdCCell
	for _, r := range rows {
		for seed, es := range d.cells[r.cond][r.o] {
			c := BirdCCell{Oracle: r.o, Condition: r.cond, Seed: seed}
			var p1, p2, rw sum
			for _, e := range es {
				c.Counts.add(e)
				if v, ok := phase1Of(e); ok {
					p1.add(&v)
				}
				if v, ok := phase2Of(e); ok {
					p2.add(&v)
				}
				if v, ok := birdRewardOf(e); ok {
					rw.add(&v)
				}
			}
			c.Phase1SR, c.Phase2SR, c.Reward = p1.mean(), p2.mean(), rw.mean()
			cells = append(cells, c)
		}
	}
	sort.Slice(cells, func(i, j int) bool {
		x, y := cells[i], cells[j]
		if x.Oracle != y.Oracle {
			return oracleLess(x.Oracle, y.Oracle)
		}
		if x.Condition != y.Condition {
			return slices.Index(AllConditions, x.Condition) < slices.Index(AllConditions, y.Condition)
		}
		return x.Seed < y.Seed
	})
	return cells
}

// formatScaled formats a summary as FormatSummary does, its values
// multiplied by scale and written with prec decimals.
func formatScaled(s Summary, scale float64, prec int) string {
	if s.Mean == nil {
		return Dash
	}
	num := func(v float64) string {
		t := fmt.Sprintf("%.*f", prec, scale*v)
		if strings.TrimLeft(t, "-0.") == "" {
			t = strings.TrimPrefix(t, "-")
		}
		return t
	}
	var b strings.Builder
	b.WriteString(num(*s.Mean))
	if s.SD != nil {
		b.WriteString(" ± " + num(*s.SD))
	}
	if s.Lo != nil && s.Hi != nil {
		fmt.Fprintf(&b, " [%s, %s; %s]", num(*s.Lo), num(*s.Hi), clusterText(s))
	}
	return b.String()
}

// cellWith is notes.cell with another formatter.
func (n *notes) cellWith(s Summary, format func(Summary) string) string {
	c := format(s)
	switch {
	case s.Mean == nil && s.Reason != "":
		c += " " + n.ref(s.Reason)
	case s.Warning != "":
		c += " ⚠ " + n.ref(s.Warning)
	}
	return c
}

// formatReward formats a mean reward in [0, 1] with three decimals;
// formatNormalized a normalised reward (already × 100) with one.
func formatReward(s Summary) string     { return formatScaled(s, 1, 3) }
func formatNormalized(s Summary) string { return formatScaled(s, 1, 1) }

// birdCHeader is the column layout of the bird-c table.
var birdCHeader = []string{"Corpus", "Oracle", "Condition", "Episodes", "Phase-1 SR", "Phase-2 SR", "Mean reward", "Normalised reward"}

// conditionLabel names a row's condition, with the asker's policy.
func (b *BirdCReport) conditionLabel(c Condition) string {
	if c == Asker && b.Asker != "" {
		return string(c) + " (" + b.Asker + ")"
	}
	return string(c)
}

func birdCCells(r *Report, row *BirdCRow, n *notes) []string {
	return []string{r.Corpus, row.Oracle, r.bird().conditionLabel(row.Condition), fmt.Sprint(row.Episodes),
		n.cell(row.Phase1SR), n.cell(row.Phase2SR), n.cellWith(row.Reward, formatReward), n.cellWith(row.NormalizedReward, formatNormalized)}
}

var birdCErrorsHeader = []string{"Corpus", "Oracle", "Condition", "Episodes", "Completed", "ERROR", "Asker failed", "Call failed",
	"Phase-1 SR, completed", "Phase-2 SR, completed", "Mean reward, completed"}

func birdCErrorsCells(r *Report, row *BirdCRow, n *notes) []string {
	return append([]string{r.Corpus, row.Oracle, r.bird().conditionLabel(row.Condition)}, append(countCells(row.Counts),
		n.cell(row.Phase1Completed), n.cell(row.Phase2Completed), n.cellWith(row.RewardCompleted, formatReward))...)
}

// countCells are the Episodes, Completed, ERROR, Asker failed and Call
// failed cells of a row's counts (another status, which no current
// record has, is added to the last as "+N other").
func countCells(c Counts) []string {
	call := fmt.Sprint(c.CallFailed)
	if c.OtherFailed > 0 {
		call += fmt.Sprintf(" (+%d other)", c.OtherFailed)
	}
	return []string{fmt.Sprint(c.Episodes), fmt.Sprint(c.Completed), fmt.Sprint(c.Errors), fmt.Sprint(c.AskerFailed), call}
}

// birdDenominator states the denominator of the BIRD-Interact rates.
const birdDenominator = "Every rate and reward is over the row's Episodes, all of them: an episode that did not complete (ERROR, asker failed, call failed; the last table counts them and the completed ones) counts as a failure with reward 0, as BIRD-Interact's SR is over all tasks. "

// birdCLegend explains the bird-c table's cells.
const birdCLegend = "Cells: mean ± sample SD across seeds [95% AVT-cluster bootstrap interval; the clusters it resamples]. " +
	birdDenominator +
	"Phase-1 and phase-2 SR in %, over every evaluated episode (an episode whose phase 1 failed never sees its follow-up and counts as a phase-2 failure, as BIRD-Interact counts it); " +
	"mean reward in [0, 1] (phase 1: 0.7, 0.5 after the debug retry; phase 2: 0.3, 0.2 after the retry); normalised reward = mean reward × 100, BIRD-Interact's headline number; " +
	Dash + " where undefined, with the reason in the notes below the table; ⚠ marks an interval that cannot be trusted (fewer than two clusters, or zero width)."

// birdALegend explains the bird-a table's cells.
const birdALegend = "Cells: mean ± sample SD across seeds [95% AVT-cluster bootstrap interval; the clusters it resamples]. " +
	birdDenominator +
	"Phase-1 and phase-2 SR in %, over every evaluated episode (an episode whose phase 1 failed never sees its follow-up and counts as a phase-2 failure, as BIRD-Interact counts it); " +
	"mean reward in [0, 1] (phase 1: 0.7; phase 2: 0.3; no retry penalty); normalised reward = mean reward × 100, BIRD-Interact's headline number; " +
	Dash + " where undefined, with the reason in the notes below the table; ⚠ marks an interval that cannot be trusted (fewer than two clusters, or zero width)."

// birdACoinsLegend explains the bird-a coins table.
const birdACoinsLegend = "Coins an episode spent, mean ± sample SD across seeds [95% AVT-cluster bootstrap interval], over the scored episodes: in all, then per action type " +
	"(ask 2, submit_sql 3, execute 1, get_schema 1, get_all_column_meanings 1, get_column_meaning 0.5, get_all_external_knowledge_names 0.5, get_knowledge_definition 0.5, " +
	"get_all_knowledge_definitions 1, unparsed 0.2; a final submit the budget cannot pay for is free). An episode that took no action of a type counts 0 for it."

// legend is the main table's legend for the report's protocol.
func (b *BirdCReport) legend() string {
	if b.Protocol == BirdA {
		return birdALegend
	}
	return birdCLegend
}

// title is the heading of the report's section.
func (b *BirdCReport) title() string {
	if b.Protocol == BirdA {
		return "BIRD-Interact a-Interact: phase-1 and phase-2 success, reward, coins"
	}
	return "BIRD-Interact c-Interact: phase-1 and phase-2 success, reward"
}

// coinsHeader is the column layout of the bird-a coins table.
func (b *BirdCReport) coinsHeader() []string {
	return append([]string{"Corpus", "Oracle", "Condition", "Coins spent"}, b.Actions...)
}

func birdACoinsCells(r *Report, row *BirdCRow, n *notes) []string {
	cells := []string{r.Corpus, row.Oracle, r.bird().conditionLabel(row.Condition)}
	format := func(s Summary) string { return formatScaled(s, 1, 2) }
	if row.Coins == nil {
		cells = append(cells, Dash)
	} else {
		cells = append(cells, n.cellWith(*row.Coins, format))
	}
	for _, a := range r.bird().Actions {
		if s, ok := row.CoinsByAction[a]; ok {
			cells = append(cells, n.cellWith(s, format))
		} else {
			cells = append(cells, Dash)
		}
	}
	return cells
}

// birdCErrorsLegend explains the bird-c failures table.
const birdCErrorsLegend = "Episodes that did not complete, after the run's retries, by status: ERROR (the environment could not complete the episode), asker failed (ASKER_FAILED: the policy failed, such as the LLM agent's endpoint), call failed (RPC_FAILED: a call to the server failed). " +
	"Each counts above as a failure with zero reward (BIRD-Interact's SR is over all tasks; AmbiTab §C.2). " +
	"Beside them, each row's rates on the (task, seed) pairs that every oracle that ran the condition completed (the denominator is then the completed pairs, not Episodes)."

// birdCMeta is a report's one-line description of a bird-c or bird-a run.
func birdCMeta(r *Report) string {
	b := r.bird()
	patience, mode := "the server's default patience (3 turns)", "bird-c (BIRD-Interact c-Interact)"
	if b.Protocol == BirdA {
		patience, mode = "the server's default patience (6 coins)", "bird-a (BIRD-Interact a-Interact)"
	}
	if b.Patience != nil {
		patience = fmt.Sprintf("patience %d", *b.Patience)
	}
	skipped := "the number of tasks without a follow-up left out is unknown"
	if b.Skipped != nil {
		skipped = fmt.Sprintf("%d task(s) without a follow-up skipped", *b.Skipped)
	}
	return fmt.Sprintf("%s: protocol %s, %s; %s; %d task(s) with a follow-up evaluated, %s; seeds %s; %d AVT-cluster bootstrap resamples (seed %d)",
		r.Corpus, mode, patience, comparisonText(r), b.Tasks, skipped, seedList(r.Seeds), r.Resamples, r.BootstrapSeed)
}

// writeBirdCMarkdown writes the bird-c and bird-a reports' tables: one
// section per protocol (bird-c first).
func writeBirdCMarkdown(b *strings.Builder, all []*Report) {
	for i, protocol := range []string{BirdC, BirdA} {
		rs := slices.DeleteFunc(slices.Clone(all), func(r *Report) bool {
			return r.bird().Protocol != protocol && !(protocol == BirdC && r.bird().Protocol == "")
		})
		if len(rs) == 0 {
			continue
		}
		if i > 0 && len(rs) < len(all) {
			b.WriteString("\n")
		}
		first := rs[0].bird()
		b.WriteString("## " + first.title() + "\n\n")
		for _, r := range rs {
			b.WriteString("- " + birdCMeta(r) + "\n")
		}
		b.WriteString("\n" + first.legend() + "\n\n")
		birdCTable(b, rs, birdCHeader, birdCCells)
		if protocol == BirdA {
			for _, r := range rs {
				b.WriteString("\n### Coins spent per episode (" + r.Corpus + ")\n\n" + birdACoinsLegend + "\n\n")
				birdCTable(b, []*Report{r}, r.bird().coinsHeader(), birdACoinsCells)
			}
		}
		b.WriteString("\n### Episodes that did not complete\n\n" + birdCErrorsLegend + "\n\n")
		birdCTable(b, rs, birdCErrorsHeader, birdCErrorsCells)
		var lines []string
		for _, r := range rs {
			lines = append(lines, birdCUnreadableLines(r)...)
		}
		writeUnreadableMarkdown(b, lines)
		for _, r := range rs {
			writeGroupSignal(b, r)
		}
	}
}

func birdCTable(b *strings.Builder, rs []*Report, header []string, cells func(*Report, *BirdCRow, *notes) []string) {
	var n notes
	b.WriteString(mdRow(header))
	b.WriteString(mdSep(len(header)))
	for _, r := range rs {
		for i := range r.bird().Rows {
			b.WriteString(mdRow(cells(r, &r.bird().Rows[i], &n)))
		}
	}
	n.markdown(b)
}

// writeBirdCHTML writes the body of a bird-c report: a chart of the
// phase SRs and the normalised reward per oracle and condition, then the
// tables.
func writeBirdCHTML(b *strings.Builder, r *Report) {
	esc := html.EscapeString
	fmt.Fprintf(b, "<p class=\"meta\">%s. Bars: mean across seeds; whiskers: 95%% AVT-cluster bootstrap interval.</p>\n", esc(birdCMeta(r)))
	groups := make([]string, len(r.bird().Rows))
	vals := make([][]Summary, len(r.bird().Rows))
	oracles := map[string]bool{}
	for _, row := range r.bird().Rows {
		oracles[row.Oracle] = true
	}
	for i, row := range r.bird().Rows {
		groups[i] = r.bird().conditionLabel(row.Condition)
		if len(oracles) > 1 {
			groups[i] = row.Oracle + " " + groups[i]
		}
		// The reward's fraction, drawn × 100: the normalised reward.
		vals[i] = []Summary{row.Phase1SR, row.Phase2SR, row.Reward}
	}
	b.WriteString("<h2>Charts</h2>\n<div class=\"charts\">\n")
	writeChart(b, "birdc", "Phase-1 and phase-2 success rate (%) and BIRD-Interact's normalised reward (mean reward × 100) per condition; an episode whose phase 1 failed counts as a phase-2 failure.",
		groups, []string{"Phase-1 SR", "Phase-2 SR", "Normalised reward"}, vals, nil, false)
	b.WriteString("</div>\n")
	b.WriteString("<h2>" + esc(r.bird().title()) + "</h2>\n")
	b.WriteString("<p class=\"meta\">" + esc(r.bird().legend()) + "</p>\n")
	writeBirdCHTMLTable(b, "birdc-table", birdCHeader, r, birdCCells)
	if r.bird().Protocol == BirdA {
		b.WriteString("<h2>Coins spent per episode</h2>\n<p class=\"meta\">" + esc(birdACoinsLegend) + "</p>\n")
		writeBirdCHTMLTable(b, "birda-coins", r.bird().coinsHeader(), r, birdACoinsCells)
	}
	b.WriteString("<h2>Episodes that did not complete</h2>\n<p class=\"meta\">" + esc(birdCErrorsLegend) + "</p>\n")
	writeBirdCHTMLTable(b, "birdc-errors", birdCErrorsHeader, r, birdCErrorsCells)
	writeUnreadableHTML(b, birdCUnreadableLines(r))
}

// birdCUnreadableLines are the unreadable-output lines of a bird-c or
// bird-a report, one per row: "demo, llm, asker: unreadable oracle
// outputs: 3; unreadable solver outputs: 0".
func birdCUnreadableLines(r *Report) []string {
	var lines []string
	for _, row := range r.bird().Rows {
		lines = append(lines, unreadableRowLine([]string{r.Corpus, row.Oracle, r.bird().conditionLabel(row.Condition)}, row.Unreadable))
	}
	return lines
}

func writeBirdCHTMLTable(b *strings.Builder, id string, header []string, r *Report, cells func(*Report, *BirdCRow, *notes) []string) {
	var n notes
	const names = 3 // corpus, oracle, condition
	fmt.Fprintf(b, "<div class=\"scroll\">\n<table id=\"%s\">\n<tr>", id)
	for i, h := range header {
		cls := ""
		if i < names {
			cls = " class=\"l\""
		}
		fmt.Fprintf(b, "<th%s>%s</th>", cls, html.EscapeString(h))
	}
	b.WriteString("</tr>\n")
	for i := range r.bird().Rows {
		b.WriteString("<tr>")
		for j, c := range cells(r, &r.bird().Rows[i], &n) {
			if j < names {
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
	if len(n.texts) > 0 {
		fmt.Fprintf(b, "<ul class=\"notes\" id=\"%s-notes\">\n", id)
		for i, t := range n.texts {
			fmt.Fprintf(b, "<li>(%s) %s</li>\n", noteLabel(i), html.EscapeString(t))
		}
		b.WriteString("</ul>\n")
	}
}

package eval

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// CompareRun is one side of a comparison: an evaluation's output
// directory (`avtgym eval --out`) and what it played.
type CompareRun struct {
	Dir      string `json:"dir"`
	Corpus   string `json:"corpus"`
	Protocol string `json:"protocol,omitempty"`
	// Asker names the run's asker as its run.json records it ("" when the
	// directory has none).
	Asker string `json:"asker,omitempty"`
	// Episodes counts its episodes, a rerun cell once.
	Episodes int       `json:"episodes"`
	eps      []Episode // deduplicated
}

// ReadCompareRun reads an evaluation's output directory for Compare. Its
// errors name the directory and what is missing from it.
func ReadCompareRun(dir string) (*CompareRun, error) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("%s: no such directory (want an eval output directory, eval --out)", dir)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", dir, err)
	case !fi.IsDir():
		return nil, fmt.Errorf("%s: not a directory (want an eval output directory, eval --out, holding %s)", dir, EpisodesFile)
	}
	path := filepath.Join(dir, EpisodesFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: no %s: not an eval output directory (eval --out), or a run that played nothing yet", dir, EpisodesFile)
	}
	eps, err := ReadEpisodes(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("%s: %s holds no episodes", dir, EpisodesFile)
	}
	r := &CompareRun{Dir: dir, Corpus: eps[0].Corpus, Protocol: eps[0].Protocol}
	for i := range eps {
		if eps[i].Corpus != r.Corpus {
			return nil, fmt.Errorf("%s: episodes of two corpora (%q and %q)", dir, r.Corpus, eps[i].Corpus)
		}
		if eps[i].Protocol != r.Protocol {
			return nil, fmt.Errorf("%s: episodes of two protocols (%s and %s)", dir, protocolOrDefault(r.Protocol), protocolOrDefault(eps[i].Protocol))
		}
	}
	// The last record of a cell wins, as in Analyze (a rerun episode).
	byKey := map[episodeKey]int{}
	for i := range eps {
		e := &eps[i]
		k := episodeKey{e.TaskID, e.Condition, e.Oracle, e.Seed}
		if j, ok := byKey[k]; ok {
			r.eps[j] = *e
			continue
		}
		byKey[k] = len(r.eps)
		r.eps = append(r.eps, *e)
	}
	r.Episodes = len(r.eps)
	if b, err := os.ReadFile(filepath.Join(dir, RunFile)); err == nil {
		var s struct {
			Asker string `json:"asker"`
		}
		if json.Unmarshal(b, &s) == nil {
			r.Asker = s.Asker
		}
	}
	return r, nil
}

// CompareOptions configures Compare.
type CompareOptions struct {
	// Resamples is the number of bootstrap resamples (default 2000), Seed
	// the bootstrap's PCG seed: the same runs and options give the same
	// intervals.
	Resamples int
	Seed      uint64
	// Top is how many tasks each cell lists as improved and as regressed
	// (default 5).
	Top int
}

// Comparison puts two evaluation runs side by side on the episodes both
// played, paired by (task, seed, condition, oracle): per condition and
// oracle, each metric of both on the pairs where both are eligible, the
// paired difference B − A with a 95% interval from a task-level paired
// bootstrap, and the tasks that changed most.
type Comparison struct {
	A             CompareRun `json:"a"`
	B             CompareRun `json:"b"`
	Resamples     int        `json:"resamples"`
	BootstrapSeed uint64     `json:"bootstrap_seed"`
	// Pairs counts the (task, seed, condition, oracle) both played, Tasks
	// their tasks; OnlyA and OnlyB the episodes of one run only, left
	// out.
	Pairs int           `json:"pairs"`
	Tasks int           `json:"tasks"`
	OnlyA int           `json:"only_a"`
	OnlyB int           `json:"only_b"`
	Cells []CompareCell `json:"cells"`
}

// CompareCell is one (condition, oracle) of a comparison.
type CompareCell struct {
	Condition Condition      `json:"condition"`
	Oracle    string         `json:"oracle"`
	Pairs     int            `json:"pairs"`
	Tasks     int            `json:"tasks"`
	Metrics   []PairedMetric `json:"metrics"`
	// Improved lists the tasks whose mean paired difference is largest
	// (SR first, then F1, then reward), Regressed those where it is most
	// negative; tasks that did not change are in neither.
	Improved  []TaskChange `json:"improved"`
	Regressed []TaskChange `json:"regressed"`
}

// PairedMetric is one metric of a cell over the pairs where both runs'
// episodes are eligible for it (PROTOCOL.md §6's rules, as in the
// report: an episode that did not complete is a failure with zero recall
// and reward, never eligible for precision). A, B and Diff are rates
// (fractions) but for reward, in its own units; nil without a pair.
type PairedMetric struct {
	Metric string   `json:"metric"`
	Pairs  int      `json:"pairs"`
	Tasks  int      `json:"tasks"`
	A      *float64 `json:"a"`
	B      *float64 `json:"b"`
	Diff   *float64 `json:"diff"`
	Lo     *float64 `json:"lo"`
	Hi     *float64 `json:"hi"`
	// Warning says why the interval is not to be trusted (fewer than two
	// tasks, or every resample gave the same value).
	Warning string `json:"warning,omitempty"`
}

// TaskChange is one task's mean paired difference B − A over its seeds,
// per metric (nil where no pair is eligible).
type TaskChange struct {
	Task   string   `json:"task"`
	Pairs  int      `json:"pairs"`
	SR     *float64 `json:"d_sr"`
	F1     *float64 `json:"d_f1"`
	Reward *float64 `json:"d_reward"`
}

// compareMetrics are the compared metrics in display order.
var compareMetrics = []struct {
	name  string
	value episodeValue
}{
	{"SR", successOf}, {"F1", f1Of}, {"Recall", recallOf}, {"Precision", precisionOf}, {"Reward", rewardOf},
}

// Compare pairs two runs' episodes and compares them.
func Compare(a, b *CompareRun, opt CompareOptions) (*Comparison, error) {
	if opt.Resamples == 0 {
		opt.Resamples = 2000
	}
	if opt.Resamples < 0 {
		return nil, fmt.Errorf("compare: negative resamples %d", opt.Resamples)
	}
	if opt.Top == 0 {
		opt.Top = 5
	}
	if a.Corpus != b.Corpus {
		return nil, fmt.Errorf("compare: %s is of corpus %q, %s of %q: runs of two corpora share no task", a.Dir, a.Corpus, b.Dir, b.Corpus)
	}
	if a.Protocol != b.Protocol {
		return nil, fmt.Errorf("compare: %s ran --protocol %s, %s --protocol %s: their figures are not comparable", a.Dir, protocolOrDefault(a.Protocol), b.Dir, protocolOrDefault(b.Protocol))
	}
	c := &Comparison{A: *a, B: *b, Resamples: opt.Resamples, BootstrapSeed: opt.Seed, Cells: []CompareCell{}}
	inA := map[episodeKey]*Episode{}
	for i := range a.eps {
		e := &a.eps[i]
		inA[episodeKey{e.TaskID, e.Condition, e.Oracle, e.Seed}] = e
	}
	type cellKey struct {
		cond   Condition
		oracle string
	}
	pairs := map[cellKey][][2]*Episode{}
	tasks := map[string]bool{}
	matched := 0
	for i := range b.eps {
		e := &b.eps[i]
		ea, ok := inA[episodeKey{e.TaskID, e.Condition, e.Oracle, e.Seed}]
		if !ok {
			c.OnlyB++
			continue
		}
		matched++
		tasks[e.TaskID] = true
		k := cellKey{e.Condition, e.Oracle}
		pairs[k] = append(pairs[k], [2]*Episode{ea, e})
	}
	c.Pairs, c.Tasks, c.OnlyA = matched, len(tasks), len(a.eps)-matched
	if matched == 0 {
		return nil, fmt.Errorf("compare: %s and %s played no (task, seed, condition, oracle) in common: %s has %s; %s has %s",
			a.Dir, b.Dir, a.Dir, playedText(a.eps), b.Dir, playedText(b.eps))
	}
	keys := slices.Collect(maps.Keys(pairs))
	slices.SortFunc(keys, func(x, y cellKey) int {
		if x.oracle != y.oracle {
			if oracleLess(x.oracle, y.oracle) {
				return -1
			}
			return 1
		}
		return slices.Index(AllConditions, x.cond) - slices.Index(AllConditions, y.cond)
	})
	for _, k := range keys {
		c.Cells = append(c.Cells, compareCell(k.cond, k.oracle, pairs[k], opt))
	}
	return c, nil
}

// playedText summarizes what some episodes played, for an error.
func playedText(eps []Episode) string {
	tasks, seeds, conds, oracles := map[string]bool{}, map[uint64]bool{}, map[string]bool{}, map[string]bool{}
	for i := range eps {
		tasks[eps[i].TaskID] = true
		seeds[eps[i].Seed] = true
		conds[string(eps[i].Condition)] = true
		oracles[eps[i].Oracle] = true
	}
	var ss []string
	for _, s := range slices.Sorted(maps.Keys(seeds)) {
		ss = append(ss, fmt.Sprint(s))
	}
	return fmt.Sprintf("%d tasks (such as %s), seeds %s, conditions %s, oracles %s", len(tasks), slices.Sorted(maps.Keys(tasks))[0],
		strings.Join(ss, ","), strings.Join(slices.Sorted(maps.Keys(conds)), ","), strings.Join(slices.Sorted(maps.Keys(oracles)), ","))
}

// compareCell compares one (condition, oracle) cell's pairs. The
// bootstrap resamples the cell's tasks with replacement (a task's pairs,
// all its seeds, stay together, as the report's resamples keep an AVT's
// episodes together); resample r draws from PCG(seed, r), so every metric
// sees the same resampled tasks.
func compareCell(cond Condition, oracle string, ps [][2]*Episode, opt CompareOptions) CompareCell {
	taskIdx := map[string]int{}
	var taskIDs []string
	for _, p := range ps {
		if _, ok := taskIdx[p[0].TaskID]; !ok {
			taskIdx[p[0].TaskID] = 0
			taskIDs = append(taskIDs, p[0].TaskID)
		}
	}
	sort.Strings(taskIDs)
	for i, t := range taskIDs {
		taskIdx[t] = i
	}
	cell := CompareCell{Condition: cond, Oracle: oracle, Pairs: len(ps), Tasks: len(taskIDs)}
	type perTask struct{ sumA, sumB, n []float64 }
	stats := make([]perTask, len(compareMetrics))
	for m, cm := range compareMetrics {
		st := perTask{make([]float64, len(taskIDs)), make([]float64, len(taskIDs)), make([]float64, len(taskIDs))}
		for _, p := range ps {
			va, oka := cm.value(p[0])
			vb, okb := cm.value(p[1])
			if !oka || !okb {
				continue
			}
			t := taskIdx[p[0].TaskID]
			st.sumA[t] += va
			st.sumB[t] += vb
			st.n[t]++
		}
		stats[m] = st
	}
	boot := make([][]float64, len(compareMetrics))
	w := make([]float64, len(taskIDs))
	for r := range opt.Resamples {
		w = resampleWeights(rand.New(rand.NewPCG(opt.Seed, uint64(r))), len(taskIDs), w)
		for m := range compareMetrics {
			var num, den float64
			for t, wt := range w {
				if wt != 0 {
					num += wt * (stats[m].sumB[t] - stats[m].sumA[t])
					den += wt * stats[m].n[t]
				}
			}
			if den > 0 {
				boot[m] = append(boot[m], num/den)
			}
		}
	}
	for m, cm := range compareMetrics {
		st := stats[m]
		pm := PairedMetric{Metric: cm.name}
		var sa, sb float64
		for t := range taskIDs {
			if st.n[t] > 0 {
				pm.Tasks++
				pm.Pairs += int(st.n[t])
				sa += st.sumA[t]
				sb += st.sumB[t]
			}
		}
		if pm.Pairs > 0 {
			n := float64(pm.Pairs)
			pm.A, pm.B, pm.Diff = ptr(sa/n), ptr(sb/n), ptr((sb-sa)/n)
		}
		if len(boot[m]) > 0 {
			sort.Float64s(boot[m])
			pm.Lo, pm.Hi = ptr(quantile(boot[m], 0.025)), ptr(quantile(boot[m], 0.975))
			switch {
			case pm.Tasks < 2:
				pm.Warning = fmt.Sprintf("degenerate interval: only %d task to resample", pm.Tasks)
			case *pm.Lo == *pm.Hi:
				pm.Warning = fmt.Sprintf("zero-width interval over %d tasks: every resample gave the same difference", pm.Tasks)
			}
		}
		cell.Metrics = append(cell.Metrics, pm)
	}
	// Per task: the mean paired difference of SR, F1 and reward.
	var changes []TaskChange
	for t, id := range taskIDs {
		tc := TaskChange{Task: id}
		for m, cm := range compareMetrics {
			st := stats[m]
			if st.n[t] == 0 {
				continue
			}
			d := ptr((st.sumB[t] - st.sumA[t]) / st.n[t])
			switch cm.name {
			case "SR":
				tc.SR, tc.Pairs = d, int(st.n[t])
			case "F1":
				tc.F1 = d
			case "Reward":
				tc.Reward = d
			}
		}
		changes = append(changes, tc)
	}
	score := func(tc TaskChange) [3]float64 {
		v := func(p *float64) float64 {
			if p == nil {
				return 0
			}
			return *p
		}
		return [3]float64{v(tc.SR), v(tc.F1), v(tc.Reward)}
	}
	sign := func(tc TaskChange) int {
		s := score(tc)
		for _, x := range s {
			if math.Abs(x) > 1e-12 {
				if x > 0 {
					return 1
				}
				return -1
			}
		}
		return 0
	}
	byScore := func(x, y TaskChange) int {
		sx, sy := score(x), score(y)
		return cmp.Or(cmp.Compare(sy[0], sx[0]), cmp.Compare(sy[1], sx[1]), cmp.Compare(sy[2], sx[2]), cmp.Compare(x.Task, y.Task))
	}
	slices.SortFunc(changes, byScore)
	cell.Improved, cell.Regressed = []TaskChange{}, []TaskChange{}
	for _, tc := range changes {
		if sign(tc) > 0 && len(cell.Improved) < opt.Top {
			cell.Improved = append(cell.Improved, tc)
		}
	}
	for i := len(changes) - 1; i >= 0; i-- {
		if sign(changes[i]) < 0 && len(cell.Regressed) < opt.Top {
			cell.Regressed = append(cell.Regressed, changes[i])
		}
	}
	return cell
}

// WriteJSON writes the comparison as indented JSON (rates as fractions).
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// compareValue formats a metric's value: a rate in percent, a reward in
// its own units.
func compareValue(metric string, v *float64) string {
	if v == nil {
		return Dash
	}
	if metric == "Reward" {
		return fmt.Sprintf("%.3f", *v)
	}
	return pct(*v)
}

// compareDiff formats a difference with its interval and warning mark.
func compareDiff(m PairedMetric) string {
	if m.Diff == nil {
		return Dash
	}
	f := func(v float64) string {
		s := compareValue(m.Metric, &v)
		if !strings.HasPrefix(s, "-") {
			s = "+" + s
		}
		return s
	}
	s := f(*m.Diff)
	if m.Lo != nil && m.Hi != nil {
		s += fmt.Sprintf(" [%s, %s]", f(*m.Lo), f(*m.Hi))
	}
	if m.Warning != "" {
		s += " ⚠"
	}
	return s
}

func runText(r CompareRun) string {
	asker := ""
	if r.Asker != "" {
		asker = "asker " + r.Asker + "; "
	}
	return fmt.Sprintf("%s (%s%d episodes)", r.Dir, asker, r.Episodes)
}

// compareLegend explains the comparison's table.
const compareLegend = "Each row is one condition and oracle, one metric, over the pairs where both runs' episodes are eligible for it (the report's rules: an episode that did not complete is a failure with zero recall, F1 and reward, never eligible for precision): " +
	"A and B are the two runs' means over those pairs, Δ the mean paired difference B − A (rates in % and percentage points, reward in its own units) " +
	"with its 95% interval from a paired bootstrap that resamples tasks (all seeds of a task together); ⚠ marks an interval over fewer than two tasks, or of zero width."

var compareHeader = []string{"Condition", "Oracle", "Metric", "Pairs", "Tasks", "A", "B", "Δ B − A [95%]"}

func compareRows(c *Comparison) [][]string {
	var out [][]string
	for _, cell := range c.Cells {
		for _, m := range cell.Metrics {
			out = append(out, []string{string(cell.Condition), cell.Oracle, m.Metric, fmt.Sprint(m.Pairs), fmt.Sprint(m.Tasks),
				compareValue(m.Metric, m.A), compareValue(m.Metric, m.B), compareDiff(m)})
		}
	}
	return out
}

// changeText is "t1 (SR +100.0, F1 +50.0)".
func changeText(tc TaskChange) string {
	var parts []string
	for _, p := range []struct {
		name string
		v    *float64
	}{{"SR", tc.SR}, {"F1", tc.F1}, {"Reward", tc.Reward}} {
		if p.v != nil && math.Abs(*p.v) > 1e-12 {
			parts = append(parts, p.name+" "+compareDiff(PairedMetric{Metric: p.name, Diff: p.v}))
		}
	}
	return fmt.Sprintf("%s (%s)", tc.Task, strings.Join(parts, ", "))
}

func changesText(tcs []TaskChange) string {
	if len(tcs) == 0 {
		return "none"
	}
	s := make([]string, len(tcs))
	for i, tc := range tcs {
		s[i] = changeText(tc)
	}
	return strings.Join(s, "; ")
}

// header lines of a comparison, shared by the Markdown and the HTML.
func (c *Comparison) headerLines() []string {
	return []string{
		"A: " + runText(c.A) + "; B: " + runText(c.B) + "; corpus " + c.A.Corpus + ", protocol " + protocolOrDefault(c.A.Protocol) + ".",
		fmt.Sprintf("Paired by (task, seed, condition, oracle): %d pairs over %d tasks; left out, played by one run only: %d episodes of A, %d of B.", c.Pairs, c.Tasks, c.OnlyA, c.OnlyB),
		fmt.Sprintf("Intervals: %d task-level paired bootstrap resamples (seed %d).", c.Resamples, c.BootstrapSeed),
	}
}

// WriteMarkdown writes the comparison as Markdown: its header, the table
// of metrics and the tasks that changed most per cell.
func (c *Comparison) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("## Comparison of two evaluation runs\n\n")
	for _, l := range c.headerLines() {
		b.WriteString("- " + l + "\n")
	}
	b.WriteString("\n" + compareLegend + "\n\n")
	plainMarkdownTable(&b, compareHeader, compareRows(c))
	b.WriteString("\n### Tasks that changed most\n\n" + changesLegend + "\n\n")
	for _, cell := range c.Cells {
		if len(cell.Improved)+len(cell.Regressed) == 0 {
			fmt.Fprintf(&b, "- %s, %s: no task changed\n", cell.Condition, cell.Oracle)
			continue
		}
		fmt.Fprintf(&b, "- %s, %s: improved %s; regressed %s\n", cell.Condition, cell.Oracle, changesText(cell.Improved), changesText(cell.Regressed))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// changesLegend explains the changed-tasks lists.
var changesLegend = "Per condition and oracle, the tasks whose mean paired difference B − A over their seeds is largest (improved) and most negative (regressed), ranked by SR, then F1, then reward; at most five each, unchanged tasks in neither."

// WriteHTML writes the comparison as a self-contained HTML page (the
// report's inline CSS, no script or external asset).
func (c *Comparison) WriteHTML(w io.Writer) error {
	var b strings.Builder
	esc := html.EscapeString
	b.WriteString("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n")
	fmt.Fprintf(&b, "<title>avtgym comparison: %s</title>\n<style>%s</style>\n</head>\n<body>\n<h1>Comparison of two evaluation runs</h1>\n", esc(c.A.Corpus), htmlCSS)
	b.WriteString("<ul class=\"meta\">\n")
	for _, l := range c.headerLines() {
		b.WriteString("<li>" + esc(l) + "</li>\n")
	}
	b.WriteString("</ul>\n<p class=\"meta\">" + esc(compareLegend) + "</p>\n")
	writeHTMLPlain(&b, "compare", compareHeader, compareRows(c), 3)
	b.WriteString("<h2>Tasks that changed most</h2>\n<p class=\"meta\">" + esc(changesLegend) + "</p>\n<ul id=\"changes\">\n")
	for _, cell := range c.Cells {
		fmt.Fprintf(&b, "<li>%s, %s: improved %s; regressed %s</li>\n", esc(string(cell.Condition)), esc(cell.Oracle), esc(changesText(cell.Improved)), esc(changesText(cell.Regressed)))
	}
	b.WriteString("</ul>\n</body>\n</html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

package eval

import (
	"context"
	"fmt"
	"html"
	"slices"
	"strings"

	"avtgym/driver"
	"avtgym/policy"
	"avtgym/probe"
)

// TideF and TideP are the names of TIDE-Bench's protocols (PROTOCOL.md
// §9), as `--protocol` and the episodes spell them: the f-protocol (the
// dialogue starts from the request) and the p-protocol (L1-primed: the
// history holds the L1 question and its answer).
const (
	TideF = "tide-f"
	TideP = "tide-p"
)

// isTide reports whether a protocol name is one of TIDE's.
func isTide(protocol string) bool { return protocol == TideF || protocol == TideP }

// The TIDE sample types (Episode.SampleType; corpus.Record.SampleType).
const (
	ChainOnly = "chain_only"
	DriftOnly = "drift_only"
	Joint     = "joint"
)

// TideSampleTypes lists the sample types in report order.
var TideSampleTypes = []string{ChainOnly, DriftOnly, Joint}

// TideDriftSubtypes lists the drift subtypes in report order (TIDE
// Algorithm 1; Table 14's columns).
var TideDriftSubtypes = []string{"value", "constraint", "projection"}

// TideConditions are the conditions a TIDE run plays: the asker only (a
// scripted TIDE baseline or the TIDE LLM agent).
var TideConditions = []Condition{Asker}

// DefaultTideAsker is the scripted TIDE baseline a TIDE run evaluates by
// default (policy.ParseTidePolicy's name).
const DefaultTideAsker = "chain-aware"

// tideDefaults fills the defaults of a tide-f or tide-p run and checks
// its settings (the solver is checked).
func (cfg *Config) tideDefaults() error {
	name := driver.ProtocolName(cfg.Protocol)
	if cfg.Patience != nil {
		return fmt.Errorf("eval: patience applies to the bird-c and bird-a protocols only (%s allows %d agent turns)", name, tideTurns)
	}
	for _, c := range cfg.Conditions {
		if !slices.Contains(TideConditions, c) {
			return fmt.Errorf("eval: the %s condition does not run under %s (only asker: the evaluated policy, a TIDE baseline or the TIDE LLM agent)", c, name)
		}
	}
	if cfg.Asker == nil {
		p, err := policy.ParseTidePolicy(DefaultTideAsker)
		if err != nil {
			return fmt.Errorf("eval: %w", err)
		}
		cfg.Asker = p
	}
	return nil
}

// tideTurns is TIDE's limit of agent turns (PROTOCOL.md §9), for messages.
const tideTurns = 20

// tidePreflight is the probe a TIDE run's pre-flight plays: its question
// (the generic one, or the pre-flight's with a nonce: Config.preflight),
// then SQL until the episode ends (a TIDE episode ends at its n-th SQL,
// not at a STOP).
type tidePreflight struct{ question string }

func (tidePreflight) Name() string { return "preflight" }

func (p tidePreflight) Play(ctx context.Context, ep *driver.Episode) error {
	q := p.question
	if q == "" {
		q = probe.Generic1
	}
	asked := false
	for steps := 0; !ep.Done(); steps++ {
		if steps > 8 {
			return fmt.Errorf("the pre-flight episode did not end after %d steps", steps)
		}
		var err error
		if !asked && ep.Asking() {
			asked = true
			err = ep.Ask(ctx, q)
		} else {
			err = ep.SubmitSQL(ctx, "SELECT 1")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// TideReport is a tide-f or tide-p run's analysis: TIDE-Bench's metrics
// (Table 2) per oracle and condition, overall, per sample type and, for
// drift handling, per drift subtype; each a proportion with a 95%
// percentile bootstrap interval over resamples of anchor clusters
// (Episode.Cluster, TIDE's anchor: its three samples are resampled
// together; a task without one is its own cluster).
type TideReport struct {
	// Protocol is the run's protocol, tide-f or tide-p.
	Protocol string `json:"protocol"`
	// Tasks counts the tasks evaluated (those with episodes), SampleTasks
	// them per sample type, and Clusters the anchor clusters they form.
	Tasks       int            `json:"tasks"`
	SampleTasks map[string]int `json:"sample_tasks"`
	Clusters    int            `json:"clusters"`
	// Skipped counts the corpus's tasks the protocol does not serve:
	// those without a TIDE sample type, and under tide-p the drift-only
	// samples (null: unknown, the run directory has no RunInfoFile).
	Skipped *int `json:"skipped_tasks"`
	// Asker names the policy of the asker condition (empty: unknown).
	Asker string `json:"asker,omitempty"`
	// Rows has one row per oracle and condition that ran.
	Rows []TideRow `json:"rows"`
}

// TideRow is one (oracle, condition) row of a TIDE report: Table 2's
// metrics over every sample they are defined on (Overall), then per
// sample type, then drift handling per drift subtype.
type TideRow struct {
	Oracle    string    `json:"oracle"`
	Condition Condition `json:"condition"`
	// Counts are the row's denominators (all seeds): its episodes, those
	// that completed, and the others by status (ERROR, ASKER_FAILED,
	// RPC_FAILED), each a failure in every metric whose sample set holds
	// its sample. Unplayed counts those that could not be played
	// (ASKER_FAILED, RPC_FAILED and any other status but ERROR).
	Counts
	Unplayed int `json:"unplayed"`
	// Unreadable counts the model outputs of the row's episodes (all
	// seeds) the server could not read (Episode.UnreadableOracle and
	// UnreadableSolver, summed), as the AMBITAB rows' Unreadable does per
	// condition.
	Unreadable UnreadableCounts `json:"unreadable"`
	// Overall pools the sample types each metric is defined on: all for
	// DEA and AR, chain-only and joint for the identification rates,
	// drift-only and joint for DRR and DRA. The paper reports every metric
	// per sample type (Tables 3, 13, 14): Overall is this report's pooled
	// summary, labelled so in the reports.
	Overall   TideGroup `json:"overall"`
	ChainOnly TideGroup `json:"chain_only"`
	DriftOnly TideGroup `json:"drift_only"`
	Joint     TideGroup `json:"joint"`
	// Subtypes splits drift handling by drift subtype (value, constraint,
	// projection; then any other subtype the episodes name).
	Subtypes []TideSubtype `json:"drift_subtypes"`
}

// TideGroup is Table 2's metrics over one set of samples. A metric whose
// definition excludes the set's samples, or that belongs to the other
// protocol, is undefined (Mean null, with the reason).
type TideGroup struct {
	// SampleType is "all", or the sample type of the group.
	SampleType string `json:"sample_type"`
	// Episodes counts the group's episodes (all seeds; unplayed ones
	// included), Errors those that ended in ERROR, NotCompleted those that
	// did not complete (ERROR included).
	Episodes     int `json:"episodes"`
	Errors       int `json:"errors"`
	NotCompleted int `json:"not_completed"`
	// DEA: every SQL of the trajectory matched its reference (all types).
	DEA TideSummary `json:"dea"`
	// AR: the policy asked at least once (all types).
	AR TideSummary `json:"ar"`
	// L1IR and JIR: a question of the policy was routed to L1 / to both
	// L1 and L2 (chain-only and joint; tide-f).
	L1IR TideSummary `json:"l1_ir"`
	JIR  TideSummary `json:"jir"`
	// L2IRp: a question was routed to L2 under tide-p (chain-only, joint).
	L2IRp TideSummary `json:"l2_ir_p"`
	// L2IRf: a question was routed to L2 under tide-f (chain-only,
	// joint). Not one of TIDE's Table 2 metrics: an extra of this report.
	L2IRf TideSummary `json:"l2_ir_f"`
	// DRR: the policy's own two SQLs satisfy S(y1) ⊄ S(y2) (drift-only,
	// joint). DRA: DRR and the second SQL matched the post-drift
	// reference.
	DRR TideSummary `json:"drr"`
	DRA TideSummary `json:"dra"`
}

// TideSubtype is DEA and drift handling on the samples of one drift
// subtype: per sample type, as TIDE's Tables 3 and 14 report them, and
// All, drift-only and joint samples pooled (in the JSON only: no paper
// table pools the two sample types, and the reports do not print it).
type TideSubtype struct {
	Subtype   string    `json:"subtype"`
	DriftOnly TideDrift `json:"drift_only"`
	Joint     TideDrift `json:"joint"`
	All       TideDrift `json:"all"`
}

// TideDrift is DEA, DRR and DRA over one set of drift samples.
type TideDrift struct {
	DEA TideSummary `json:"dea"`
	DRR TideSummary `json:"drr"`
	DRA TideSummary `json:"dra"`
}

// TideSummary is one TIDE metric: the Summary of a proportion (its
// Clusters are anchor clusters) and N, the episodes it is over (all
// seeds; ERROR episodes included as failures).
type TideSummary struct {
	Summary
	N int `json:"n"`
}

// tideMetric names a TIDE metric: its eligible sample types, the
// protocol it belongs to ("" for both), and its per-episode value on a
// scored episode of an eligible sample (false: the server gave no such
// component).
type tideMetric struct {
	name     string
	types    []string
	protocol string
	value    func(e *Episode) (float64, bool)
}

func indicator(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	if *p > 0 {
		return 1, true
	}
	return 0, true
}

var (
	tideDEA = tideMetric{"DEA", TideSampleTypes, "", func(e *Episode) (float64, bool) {
		if e.Reward == nil {
			return 0, false
		}
		return *e.Reward, true
	}}
	tideAR   = tideMetric{"AR", TideSampleTypes, "", func(e *Episode) (float64, bool) { return indicator(e.Asked) }}
	tideL1IR = tideMetric{"L1-IR", []string{ChainOnly, Joint}, TideF, func(e *Episode) (float64, bool) { return indicator(e.L1Identified) }}
	tideJIR  = tideMetric{"JIR", []string{ChainOnly, Joint}, TideF, func(e *Episode) (float64, bool) {
		l1, ok1 := indicator(e.L1Identified)
		l2, ok2 := indicator(e.L2Identified)
		return l1 * l2, ok1 && ok2
	}}
	tideL2IRp = tideMetric{"L2-IRp", []string{ChainOnly, Joint}, TideP, func(e *Episode) (float64, bool) { return indicator(e.L2Identified) }}
	tideL2IRf = tideMetric{"L2-IR (f)", []string{ChainOnly, Joint}, TideF, func(e *Episode) (float64, bool) { return indicator(e.L2Identified) }}
	tideDRR   = tideMetric{"DRR", []string{DriftOnly, Joint}, "", func(e *Episode) (float64, bool) { return indicator(e.DriftRecognized) }}
	tideDRA   = tideMetric{"DRA", []string{DriftOnly, Joint}, "", func(e *Episode) (float64, bool) {
		rec, ok1 := indicator(e.DriftRecognized)
		post, ok2 := indicator(e.SQL2)
		return rec * post, ok1 && ok2
	}}
)

// groupMetrics are a TideGroup's metrics in field order.
var groupMetrics = []tideMetric{tideDEA, tideAR, tideL1IR, tideJIR, tideL2IRp, tideL2IRf, tideDRR, tideDRA}

// tideOf returns an episode's value of metric m on the samples of the
// given types (and drift subtype, when set) and whether it is eligible:
// an episode of such a sample that did not complete (ERROR, ASKER_FAILED,
// RPC_FAILED) is a failure (0), as the BIRD analysis counts it: TIDE's
// rates are over the samples evaluated.
func tideOf(m tideMetric, types []string, subtype string) episodeValue {
	return func(e *Episode) (float64, bool) {
		if !slices.Contains(types, e.SampleType) || (subtype != "" && e.DriftSubtype != subtype) {
			return 0, false
		}
		if incomplete(e) {
			return 0, true
		}
		return m.value(e)
	}
}

// sampleName is a sample type as the report writes it.
func sampleName(t string) string {
	switch t {
	case ChainOnly:
		return "chain-only"
	case DriftOnly:
		return "drift-only"
	case Joint:
		return "joint"
	}
	return t
}

func sampleList(types []string) string {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = sampleName(t)
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// tideSpec builds the metric of m over the samples of types (a subset of
// m's; all of them for the overall group) and subtype; it reports its
// ratio so that the eligible episodes can be counted.
func (d *dataset) tideSpec(protocol string, cond Condition, o string, m tideMetric, types []string, subtype string) (*metric, *ratioStat) {
	eligible := slices.DeleteFunc(slices.Clone(types), func(t string) bool { return !slices.Contains(m.types, t) })
	stat := d.cellStat(cond, o, tideOf(m, eligible, subtype), false)
	out := &metric{terms: []term{{stat, 1}}}
	where := strings.Replace(sampleList(eligible), " and ", " or ", 1) + " sample"
	if subtype != "" {
		where += " with a " + subtype + " drift"
	}
	switch {
	case len(eligible) == 0:
		out.missing = fmt.Sprintf("%s is defined on %s samples only", m.name, sampleList(m.types))
	case m.protocol == TideF && protocol != TideF:
		out.missing = fmt.Sprintf("%s is a tide-f metric (under tide-p the history pre-fills L1): run eval --protocol tide-f", m.name)
	case m.protocol == TideP && protocol != TideP:
		out.missing = fmt.Sprintf("%s is measured under tide-p (L1 pre-filled): run eval --protocol tide-p", m.name)
	case protocol == TideP && !slices.Contains(eligible, ChainOnly) && !slices.Contains(eligible, Joint):
		out.missing = "tide-p serves chain-only and joint samples only"
	default:
		out.empty = fmt.Sprintf("no episode on a %s was evaluated (or the server gave none the %s component)", where, m.name)
	}
	return out, stat
}

// analyzeTide builds the tide-f or tide-p section of a report. The
// bootstrap resamples anchor clusters: the AVT units of a dataset in
// which each episode's AVT is its cluster.
func analyzeTide(d *dataset, opt *AnalyzeOptions, protocol string) (*TideReport, error) {
	tr := &TideReport{Protocol: protocol, SampleTasks: map[string]int{}, Rows: []TideRow{}}
	if ri := opt.Run; ri != nil {
		tr.Asker = ri.Asker
		if ri.Protocol == protocol {
			tr.Skipped = &ri.Skipped
		}
	}
	eps := clusterEpisodes(d)
	dc, err := index(eps)
	if err != nil {
		return nil, fmt.Errorf("eval: TIDE clusters: %w", err)
	}
	tr.Clusters = len(dc.avts)
	subtypes := tr.countTasks(eps)
	rows := dc.rowKeys()
	ms, stats := dc.tideMetrics(protocol, rows, subtypes)
	take := &summaryTaker{sums: summarize(ms, dc, opt.Resamples, opt.BootstrapSeed), stats: stats}
	for _, r := range rows {
		row := TideRow{Oracle: r.o, Condition: r.cond}
		row.fillSummaries(take, subtypes)
		row.countEpisodes(dc.cells[r.cond][r.o])
		tr.Rows = append(tr.Rows, row)
	}
	return tr, nil
}

// clusterEpisodes returns d's episodes in key order, each one's AVT set to
// its anchor cluster (when it has one): the unit the bootstrap resamples.
func clusterEpisodes(d *dataset) []Episode {
	eps := make([]Episode, 0, len(d.byKey))
	for _, e := range d.byKey {
		c := *e
		if c.Cluster != "" {
			c.AVTID = c.Cluster
		}
		eps = append(eps, c)
	}
	slices.SortFunc(eps, func(a, b Episode) int { return strings.Compare(Key(&a), Key(&b)) })
	return eps
}

// countTasks fills the report's task counts (all, and by sample type) and
// returns the drift subtypes to report: the known ones, then any other the
// episodes name.
func (tr *TideReport) countTasks(eps []Episode) []string {
	typeOf := map[string]string{}
	subtypes := slices.Clone(TideDriftSubtypes)
	for i := range eps {
		e := &eps[i]
		typeOf[e.TaskID] = e.SampleType
		if e.DriftSubtype != "" && !slices.Contains(subtypes, e.DriftSubtype) {
			subtypes = append(subtypes, e.DriftSubtype)
		}
	}
	tr.Tasks = len(typeOf)
	for _, t := range typeOf {
		if t == "" {
			t = "unknown"
		}
		tr.SampleTasks[t]++
	}
	return subtypes
}

// rowKey names one row of a report table: an oracle under a condition.
type rowKey struct {
	o    string
	cond Condition
}

// rowKeys returns the (oracle, condition) pairs that ran, in report order.
func (d *dataset) rowKeys() []rowKey {
	var rows []rowKey
	for _, o := range d.oracles {
		for _, cond := range AllConditions {
			if d.ran(cond, o) {
				rows = append(rows, rowKey{o, cond})
			}
		}
	}
	return rows
}

// tideGroups are the sample types of a TideRow's groups, in field order:
// all, chain-only, drift-only, joint.
var tideGroups = [][]string{TideSampleTypes, {ChainOnly}, {DriftOnly}, {Joint}}

// tideScopes are the sample types of a TideSubtype's drifts, in field
// order: drift-only, joint, both.
var tideScopes = [][]string{{DriftOnly}, {Joint}, {DriftOnly, Joint}}

// tideMetrics returns every metric of the rows, in the order fillSummaries
// takes them, with the ratio of each (to count its eligible episodes).
func (d *dataset) tideMetrics(protocol string, rows []rowKey, subtypes []string) ([]*metric, []*ratioStat) {
	var ms []*metric
	var stats []*ratioStat
	add := func(m *metric, s *ratioStat) {
		ms = append(ms, m)
		stats = append(stats, s)
	}
	for _, r := range rows {
		for _, g := range tideGroups {
			for _, m := range groupMetrics {
				add(d.tideSpec(protocol, r.cond, r.o, m, g, ""))
			}
		}
		for _, st := range subtypes {
			for _, sc := range tideScopes {
				add(d.tideSpec(protocol, r.cond, r.o, tideDEA, sc, st))
				add(d.tideSpec(protocol, r.cond, r.o, tideDRR, sc, st))
				add(d.tideSpec(protocol, r.cond, r.o, tideDRA, sc, st))
			}
		}
	}
	return ms, stats
}

// summaryTaker hands out the bootstrap summaries of tideMetrics in order,
// each with its count of eligible episodes.
type summaryTaker struct {
	sums  []Summary
	stats []*ratioStat
	next  int
}

func (t *summaryTaker) take() TideSummary {
	s := TideSummary{Summary: t.sums[t.next]}
	for _, den := range t.stats[t.next].den {
		for _, n := range den {
			s.N += int(n)
		}
	}
	if s.Warning != "" {
		s.Warning = tideWarning(s.Summary)
	}
	t.next++
	return s
}

// fillSummaries fills the row's metrics from take, in tideMetrics' order.
func (row *TideRow) fillSummaries(t *summaryTaker, subtypes []string) {
	for gi, g := range []*TideGroup{&row.Overall, &row.ChainOnly, &row.DriftOnly, &row.Joint} {
		g.SampleType = "all"
		if gi > 0 {
			g.SampleType = tideGroups[gi][0]
		}
		g.DEA, g.AR, g.L1IR, g.JIR = t.take(), t.take(), t.take(), t.take()
		g.L2IRp, g.L2IRf, g.DRR, g.DRA = t.take(), t.take(), t.take(), t.take()
	}
	for _, st := range subtypes {
		s := TideSubtype{Subtype: st}
		for _, dr := range []*TideDrift{&s.DriftOnly, &s.Joint, &s.All} {
			dr.DEA, dr.DRR, dr.DRA = t.take(), t.take(), t.take()
		}
		row.Subtypes = append(row.Subtypes, s)
	}
}

// countEpisodes counts the row's episodes, errors and unplayed episodes,
// overall and by sample type (fillSummaries has set the groups' types),
// and its unreadable model outputs.
func (row *TideRow) countEpisodes(cell map[uint64][]*Episode) {
	for _, es := range cell {
		for _, e := range es {
			row.Counts.add(e)
			row.Unreadable.add(e)
			if incomplete(e) && !errored(e) {
				row.Unplayed++
			}
			for _, g := range []*TideGroup{&row.Overall, &row.ChainOnly, &row.DriftOnly, &row.Joint} {
				if g == &row.Overall || g.SampleType == e.SampleType {
					g.Episodes++
					if errored(e) {
						g.Errors++
					}
					if incomplete(e) {
						g.NotCompleted++
					}
				}
			}
		}
	}
}

// tideWarning is intervalWarning's text for anchor clusters.
func tideWarning(s Summary) string {
	unit := "anchor clusters"
	if s.Clusters == 1 {
		unit = "anchor cluster"
	}
	switch {
	case s.Clusters < 2:
		return fmt.Sprintf("degenerate interval: only %d %s to resample", s.Clusters, unit)
	case s.Lo != nil && s.Hi != nil && *s.Lo == *s.Hi:
		return fmt.Sprintf("zero-width interval over %d %s: every resample gave the same value", s.Clusters, unit)
	}
	return ""
}

// FormatTide formats a TIDE metric in percent as "mean ± SD [lo, hi; K
// anchors] (n = N)": the "± SD" part only with two seeds or more, the
// interval only when defined, Dash when the mean is undefined.
func FormatTide(s TideSummary) string {
	if s.Mean == nil {
		return Dash
	}
	head, ci, n := tideParts(s)
	out := head
	if ci != "" {
		out += " " + ci
	}
	return out + " " + n
}

// tideParts are a defined TIDE cell's parts: "mean ± SD", "[lo, hi; K
// anchors]" (empty without an interval) and "(n = N)".
func tideParts(s TideSummary) (head, ci, n string) {
	head = pct(*s.Mean)
	if s.SD != nil {
		head += " ± " + pct(*s.SD)
	}
	if s.Lo != nil && s.Hi != nil {
		unit := "anchors"
		if s.Clusters == 1 {
			unit = "anchor"
		}
		ci = fmt.Sprintf("[%s, %s; %d %s]", pct(*s.Lo), pct(*s.Hi), s.Clusters, unit)
	}
	return head, ci, fmt.Sprintf("(n = %d)", s.N)
}

// tideCell is a TIDE cell with its note: the reason of a Dash, the
// warning of a weak interval.
func (n *notes) tideCell(s TideSummary) string {
	c := FormatTide(s)
	switch {
	case s.Mean == nil && s.Reason != "":
		c += " " + n.ref(s.Reason)
	case s.Warning != "":
		c += " ⚠ " + n.ref(s.Warning)
	}
	return c
}

// tideCol is one metric column of a TIDE table.
type tideCol struct {
	label string
	// metric names the column's metric (tideMetric.name; "" for a text
	// column), for pMark.
	metric string
	get    func(*TideRow) TideSummary
	// text, when set, gives a column of plain text instead.
	text func(*TideRow) string
}

// tideColGroup is a group of columns under one heading ("" for none).
type tideColGroup struct {
	label string
	cols  []tideCol
}

// tideTable is one table of the TIDE report, written as Markdown (group
// and column labels joined) and as HTML (two header rows).
type tideTable struct {
	id, title, legend string
	// paper is the TIDE table the layout follows ("" for none).
	paper  string
	groups []tideColGroup
}

// tideNames are the leading columns of every TIDE table.
var tideNames = []string{"Corpus", "Protocol", "Oracle", "Condition"}

func tideNameCells(r *Report, row *TideRow) []string {
	cond := string(row.Condition)
	if row.Condition == Asker && r.Tide.Asker != "" {
		cond += " (" + r.Tide.Asker + ")"
	}
	return []string{r.Corpus, r.Tide.Protocol, row.Oracle, cond}
}

func mcol(metric, label string, get func(*TideRow) TideSummary) tideCol {
	return tideCol{label: label, metric: metric, get: get}
}

func subtypeOf(row *TideRow, st string) *TideSubtype {
	for i := range row.Subtypes {
		if row.Subtypes[i].Subtype == st {
			return &row.Subtypes[i]
		}
	}
	return &TideSubtype{Subtype: st}
}

// tideTables lays out a protocol's report: Table 2's metrics pooled over
// their sample sets (this report's summary); DEA per sample type and drift
// subtype (TIDE's Table 3); chain-layer identification and ask rates
// (Table 13); drift handling with DRA per subtype (Table 14); DRR per
// subtype; the f-protocol L2-IR extra; the episode counts and failures.
// Under tide-p the paper reports L2-IRp only: every other metric's
// heading is marked (p) and the titles say the figures are the
// p-protocol's (pMark).
func tideTables(subtypes []string, protocol string) []tideTable {
	group := func(g func(*TideRow) *TideGroup, m func(*TideGroup) TideSummary) func(*TideRow) TideSummary {
		return func(row *TideRow) TideSummary { return m(g(row)) }
	}
	overall := func(r *TideRow) *TideGroup { return &r.Overall }
	chain := func(r *TideRow) *TideGroup { return &r.ChainOnly }
	drift := func(r *TideRow) *TideGroup { return &r.DriftOnly }
	joint := func(r *TideRow) *TideGroup { return &r.Joint }
	dea := func(g *TideGroup) TideSummary { return g.DEA }
	ar := func(g *TideGroup) TideSummary { return g.AR }
	l1 := func(g *TideGroup) TideSummary { return g.L1IR }
	l2p := func(g *TideGroup) TideSummary { return g.L2IRp }
	l2f := func(g *TideGroup) TideSummary { return g.L2IRf }
	jir := func(g *TideGroup) TideSummary { return g.JIR }
	drr := func(g *TideGroup) TideSummary { return g.DRR }
	dra := func(g *TideGroup) TideSummary { return g.DRA }
	// bySubtype is one sample type's columns of a metric: one per drift
	// subtype, then All, the sample type's own aggregate (as Tables 3 and
	// 14: never pooled with the other sample type).
	bySubtype := func(label, metric string, scope func(*TideSubtype) TideDrift, m func(TideDrift) TideSummary, all func(*TideRow) TideSummary) tideColGroup {
		g := tideColGroup{label: label}
		for _, st := range subtypes {
			g.cols = append(g.cols, mcol(metric, strings.ToUpper(st[:1])+st[1:], func(row *TideRow) TideSummary { return m(scope(subtypeOf(row, st))) }))
		}
		g.cols = append(g.cols, mcol(metric, "All", all))
		return g
	}
	drOnly := func(s *TideSubtype) TideDrift { return s.DriftOnly }
	drJoint := func(s *TideSubtype) TideDrift { return s.Joint }
	drDEA := func(d TideDrift) TideSummary { return d.DEA }
	drDRA := func(d TideDrift) TideSummary { return d.DRA }
	drDRR := func(d TideDrift) TideSummary { return d.DRR }
	count := func(g func(*TideRow) *TideGroup) func(*TideRow) string {
		return func(row *TideRow) string {
			x := g(row)
			return fmt.Sprintf("%d (%d not completed)", x.Episodes, x.NotCompleted)
		}
	}
	counts := func(label string, i int) tideCol {
		return tideCol{label: label, text: func(row *TideRow) string { return countCells(row.Counts)[i] }}
	}
	tables := []tideTable{
		{id: "tide-overall", title: "TIDE-Bench metrics pooled over their sample sets: this report's summary, not a table of the paper",
			legend: "Each metric pooled over every sample its definition covers (Table 2's sample sets): DEA and AR all samples; L1-IR, JIR (tide-f) and L2-IRp (tide-p) chain-only and joint samples; DRR and DRA drift-only and joint samples. The paper reports each sample type on its own (the tables below); compare those with it.",
			groups: []tideColGroup{{"", []tideCol{
				{label: "Episodes", text: func(row *TideRow) string { return fmt.Sprint(row.Episodes) }},
				mcol("DEA", "DEA", group(overall, dea)), mcol("AR", "AR", group(overall, ar)),
				mcol("L1-IR", "L1-IR", group(overall, l1)), mcol("L2-IRp", "L2-IRp", group(overall, l2p)), mcol("JIR", "JIR", group(overall, jir)),
				mcol("DRR", "DRR", group(overall, drr)), mcol("DRA", "DRA", group(overall, dra)),
			}}}},
		{id: "tide-dea", title: "DEA by sample type and drift subtype", paper: "Table 3",
			legend: "Dialogue execution accuracy: every SQL of the trajectory matched its reference (one SQL on chain-only samples, two with a drift). Drift-only and joint samples by drift subtype (TIDE's Algorithm 1: the task's drift_subtype); All: every sample of that type, as Table 3's All columns.",
			groups: []tideColGroup{
				{"", []tideCol{mcol("DEA", "Chain-only", group(chain, dea))}},
				bySubtype("Drift-only", "DEA", drOnly, drDEA, group(drift, dea)),
				bySubtype("Joint", "DEA", drJoint, drDEA, group(joint, dea)),
			}},
		{id: "tide-chain", title: "Chain-layer identification and ask rates", paper: "Table 13",
			legend: "L1-IR and JIR are tide-f metrics, L2-IRp the tide-p one (L1 pre-filled): a run gives one protocol's columns, and the other protocol's run gives the rest. AR: the policy asked at least once.",
			groups: []tideColGroup{
				{"Chain-only", []tideCol{mcol("L1-IR", "L1-IR", group(chain, l1)), mcol("L2-IRp", "L2-IRp", group(chain, l2p)), mcol("JIR", "JIR", group(chain, jir)), mcol("AR", "AR", group(chain, ar))}},
				{"Joint", []tideCol{mcol("L1-IR", "L1-IR", group(joint, l1)), mcol("L2-IRp", "L2-IRp", group(joint, l2p)), mcol("JIR", "JIR", group(joint, jir)), mcol("AR", "AR", group(joint, ar))}},
				{"Drift-only", []tideCol{mcol("AR", "AR", group(drift, ar))}},
			}},
		{id: "tide-drift", title: "Drift handling: DRA by drift subtype, DRR", paper: "Table 14",
			legend: "DRA: the policy's own two SQLs satisfy S(y1) ⊄ S(y2) (DRR) and the second SQL matched the post-drift reference. Subtypes from TIDE's Algorithm 1 (the task's drift_subtype).",
			groups: []tideColGroup{
				bySubtype("Drift-only DRA", "DRA", drOnly, drDRA, group(drift, dra)),
				bySubtype("Joint DRA", "DRA", drJoint, drDRA, group(joint, dra)),
				{"DRR", []tideCol{mcol("DRR", "Drift-only", group(drift, drr)), mcol("DRR", "Joint", group(joint, drr))}},
			}},
		{id: "tide-drr", title: "DRR by drift subtype: Table 14's DRR columns split as its DRA",
			legend: "Drift recognition alone (S(y1) ⊄ S(y2) on the policy's own SQLs), per sample type and drift subtype; All: every sample of that type (Table 14's DRR columns).",
			groups: []tideColGroup{
				bySubtype("Drift-only DRR", "DRR", drOnly, drDRR, group(drift, drr)),
				bySubtype("Joint DRR", "DRR", drJoint, drDRR, group(joint, drr)),
			}},
		{id: "tide-l2f", title: "Extra, not in TIDE's Table 2: L2 identification under the f-protocol",
			legend: "L2-IR (f): a question of the policy was routed to L2 under tide-f, where L1 must first be resolved by the policy's own questions. TIDE reports L2 identification under the p-protocol only (L2-IRp); this column is this report's addition.",
			groups: []tideColGroup{{"L2-IR (f, extra)", []tideCol{
				mcol("L2-IR (f)", "Chain-only", group(chain, l2f)), mcol("L2-IR (f)", "Joint", group(joint, l2f)),
			}}}},
		{id: "tide-episodes", title: "Episodes and those that did not complete",
			legend: tideErrorsLegend,
			groups: []tideColGroup{
				{"", []tideCol{
					counts("Episodes", 0), counts("Completed", 1), counts("ERROR", 2), counts("Asker failed", 3), counts("Call failed", 4),
				}},
				{"Episodes (not completed) by sample type", []tideCol{
					{label: "Chain-only", text: count(chain)}, {label: "Drift-only", text: count(drift)}, {label: "Joint", text: count(joint)},
				}},
			}},
	}
	out := tables[:0]
	for _, t := range tables {
		if protocol == TideP && t.id == "tide-l2f" {
			continue // an f-protocol figure only: every cell would be empty
		}
		t.title = t.fullTitle(protocol)
		if protocol == TideP {
			t.pMark()
		}
		out = append(out, t)
	}
	return out
}

// tidePOnly is the one metric TIDE reports under the p-protocol (Table 2:
// "L2-IRp uses the p-protocol (§ 4.1); all other metrics use the
// f-protocol instead").
const tidePOnly = "L2-IRp"

// pMarkSuffix marks the heading of a p-protocol figure the paper reports
// under the f-protocol.
const pMarkSuffix = " (p)"

// tidePCaveat is the caveat of a tide-p report.
const tidePCaveat = "tide-p: the paper reports only L2-IRp under the p-protocol (Table 2, Table 13, Figure 3a). Every other figure of a tide-p run (DEA, AR, DRR, DRA; headings marked (p)) is a p-protocol figure, with L1 pre-filled, and is not comparable with the paper's Tables 3, 13 and 14, which report them under the f-protocol: run eval --protocol tide-f for those."

// fullTitle is a table's title with its paper reference ("(TIDE Table
// N)") and, under tide-p, which of its figures are the paper's.
func (t *tideTable) fullTitle(protocol string) string {
	ref := ""
	if t.paper != "" {
		ref = "TIDE " + t.paper
	}
	switch {
	case protocol != TideP || !t.hasMetric(func(m string) bool { return pMarked(m) }):
		if ref == "" {
			return t.title
		}
		return t.title + " (" + ref + ")"
	case t.hasMetric(func(m string) bool { return m == tidePOnly }):
		if ref != "" {
			ref += ": L2-IRp; "
		}
		return t.title + " (" + ref + "the columns marked (p) are p-protocol figures)"
	case ref != "":
		return t.title + " (p-protocol figures; " + ref + " reports the f-protocol)"
	}
	return t.title + " (p-protocol figures)"
}

// pMarked reports whether a column of metric m is marked under tide-p.
func pMarked(m string) bool { return m != "" && m != tidePOnly }

func (t *tideTable) hasMetric(match func(string) bool) bool {
	for _, g := range t.groups {
		for _, c := range g.cols {
			if match(c.metric) {
				return true
			}
		}
	}
	return false
}

// pMark marks the headings of every metric but L2-IRp as p-protocol
// figures: a group's label when its columns (two or more) are all one such
// metric, else each such column's label.
func (t *tideTable) pMark() {
	marked := func(c tideCol) bool { return pMarked(c.metric) }
	for gi := range t.groups {
		g := &t.groups[gi]
		whole := g.label != "" && len(g.cols) > 1
		for _, c := range g.cols {
			whole = whole && marked(c) && c.metric == g.cols[0].metric
		}
		if whole {
			g.label += pMarkSuffix
			continue
		}
		for ci := range g.cols {
			if marked(g.cols[ci]) {
				g.cols[ci].label += pMarkSuffix
			}
		}
	}
}

// tideLegend explains a TIDE table's cells.
const tideLegend = "Cells: proportion in %, mean ± sample SD across seeds [95% percentile bootstrap interval over resamples of anchor clusters " +
	"(TIDE's three samples of one anchor are resampled together; a task without an anchor is its own cluster); the clusters it resamples] " +
	"(n = the episodes the proportion is over, all seeds). " +
	Dash + " where the metric is undefined for the cell (its definition excludes the sample type, it belongs to the other protocol, or no episode was eligible), with the reason in the notes below the table; " +
	"⚠ marks an interval that cannot be trusted (fewer than two clusters, or zero width). " +
	"An episode that did not complete (ERROR, asker failed, call failed) is a failure wherever its sample counts, as in the BIRD-Interact analysis (see the last table), and is in n. " +
	"The figures are the server's reward components: DEA the reward's value; AR asked; L1-IR, L2-IRp, JIR l1_identified and l2_identified (a question of the policy routed to the layer; a pre-filled L1 is not the policy's); DRR drift_recognized; DRA drift_recognized and sql2."

// tideErrorsLegend explains the episodes table.
const tideErrorsLegend = "Episodes that did not complete, after the run's retries, by status: ERROR (the environment could not complete the episode), asker failed (ASKER_FAILED: the policy failed, such as the TIDE LLM agent's endpoint), call failed (RPC_FAILED: a call to the server failed). " +
	"Each counts in every table above as a failure (0) in each metric whose sample set holds its sample, as the BIRD-Interact analysis counts them (AmbiTab §C.2); a rerun plays them again."

// tideMeta is a report's one-line description of a tide-f or tide-p run.
func tideMeta(r *Report) string {
	t := r.Tide
	mode := "tide-f (TIDE-Bench f-protocol: the dialogue starts from the request)"
	if t.Protocol == TideP {
		mode = "tide-p (TIDE-Bench p-protocol: L1 question and answer pre-filled; chain-only and joint samples; the paper reports only L2-IRp under it, the other figures are p-protocol figures, marked (p))"
	}
	asker := ""
	if t.Asker != "" {
		asker = "; asker " + t.Asker
	}
	var per []string
	for _, st := range TideSampleTypes {
		if n := t.SampleTasks[st]; n > 0 {
			per = append(per, fmt.Sprintf("%d %s", n, sampleName(st)))
		}
	}
	if n := t.SampleTasks["unknown"]; n > 0 {
		per = append(per, fmt.Sprintf("%d without a sample type", n))
	}
	skipped := "the number of tasks left out is unknown"
	if t.Skipped != nil {
		skipped = fmt.Sprintf("%d task(s) the protocol does not serve skipped", *t.Skipped)
	}
	return fmt.Sprintf("%s: protocol %s%s; %s; %d task(s) evaluated (%s) in %d anchor cluster(s), %s; seeds %s; %d cluster bootstrap resamples (seed %d)",
		r.Corpus, mode, asker, comparisonText(r), t.Tasks, strings.Join(per, ", "), t.Clusters, skipped, seedList(r.Seeds), r.Resamples, r.BootstrapSeed)
}

// tideSubtypes are the drift subtypes of the reports' rows, in order.
func tideSubtypes(rs []*Report) []string {
	out := slices.Clone(TideDriftSubtypes)
	for _, r := range rs {
		for _, row := range r.Tide.Rows {
			for _, s := range row.Subtypes {
				if !slices.Contains(out, s.Subtype) {
					out = append(out, s.Subtype)
				}
			}
		}
	}
	return out
}

// flatHeader is a table's Markdown header: group and column labels
// joined.
func (t *tideTable) flatHeader() []string {
	h := slices.Clone(tideNames)
	for _, g := range t.groups {
		for _, c := range g.cols {
			if g.label != "" {
				h = append(h, g.label+" "+c.label)
			} else {
				h = append(h, c.label)
			}
		}
	}
	return h
}

// writeTideMarkdown writes the TIDE reports' tables, tide-f's before
// tide-p's: each protocol has its own tables, as the headings differ (under
// tide-p every metric but L2-IRp is marked a p-protocol figure, after the
// caveat); rows are each report's oracles and conditions.
func writeTideMarkdown(b *strings.Builder, rs []*Report) {
	rs = slices.Clone(rs)
	slices.SortStableFunc(rs, func(x, y *Report) int { return strings.Compare(x.Tide.Protocol, y.Tide.Protocol) })
	b.WriteString("## TIDE-Bench: chain ambiguity and intent drift\n\n")
	for _, r := range rs {
		b.WriteString("- " + tideMeta(r) + "\n")
	}
	b.WriteString("\n" + tideLegend + "\n")
	for lo := 0; lo < len(rs); {
		hi := lo + 1
		for hi < len(rs) && rs[hi].Tide.Protocol == rs[lo].Tide.Protocol {
			hi++
		}
		writeTideProtocol(b, rs[lo:hi], rs[lo].Tide.Protocol)
		lo = hi
	}
	for _, r := range rs {
		writeGroupSignal(b, r)
	}
}

// writeTideProtocol writes the tables of one protocol's reports.
func writeTideProtocol(b *strings.Builder, rs []*Report, protocol string) {
	if protocol == TideP {
		b.WriteString("\n**" + tidePCaveat + "**\n")
	}
	for _, t := range tideTables(tideSubtypes(rs), protocol) {
		var n notes
		b.WriteString("\n### " + t.title + "\n\n" + t.legend + "\n\n")
		h := t.flatHeader()
		b.WriteString(mdRow(h))
		b.WriteString(mdSep(len(h)))
		for _, r := range rs {
			for i := range r.Tide.Rows {
				row := &r.Tide.Rows[i]
				cells := tideNameCells(r, row)
				for _, g := range t.groups {
					for _, c := range g.cols {
						if c.text != nil {
							cells = append(cells, c.text(row))
						} else {
							cells = append(cells, n.tideCell(c.get(row)))
						}
					}
				}
				b.WriteString(mdRow(cells))
			}
		}
		n.markdown(b)
	}
	var lines []string
	for _, r := range rs {
		lines = append(lines, tideUnreadableLines(r)...)
	}
	writeUnreadableMarkdown(b, lines)
}

// tideUnreadableLines are the unreadable-output lines of a TIDE report,
// one per row: "tide, tide-f, llm, asker: unreadable oracle outputs: 3;
// unreadable solver outputs: 0".
func tideUnreadableLines(r *Report) []string {
	var lines []string
	for i := range r.Tide.Rows {
		row := &r.Tide.Rows[i]
		lines = append(lines, unreadableRowLine(tideNameCells(r, row), row.Unreadable))
	}
	return lines
}

// writeTideHTML writes the body of a TIDE report: a chart of the headline
// rates per row, then the tables with grouped headers.
func writeTideHTML(b *strings.Builder, r *Report) {
	esc := html.EscapeString
	fmt.Fprintf(b, "<p class=\"meta\">%s.</p>\n", esc(tideMeta(r)))
	t := r.Tide
	third, thirdName := func(row *TideRow) TideSummary { return row.Overall.L1IR }, "L1-IR"
	mark := ""
	if t.Protocol == TideP {
		third, thirdName, mark = func(row *TideRow) TideSummary { return row.Overall.L2IRp }, "L2-IRp", pMarkSuffix
	}
	groups := make([]string, len(t.Rows))
	vals := make([][]Summary, len(t.Rows))
	for i := range t.Rows {
		row := &t.Rows[i]
		names := tideNameCells(r, row)
		groups[i] = names[3]
		if len(t.Rows) > 1 {
			groups[i] = row.Oracle + " " + groups[i]
		}
		vals[i] = []Summary{row.Overall.DEA.Summary, row.Overall.AR.Summary, third(row).Summary, row.Overall.DRA.Summary}
	}
	b.WriteString("<h2>Charts</h2>\n<div class=\"charts\">\n")
	writeChart(b, "tide", "DEA and AR over all samples, "+thirdName+" over chain-only and joint samples, DRA over drift-only and joint samples, each pooled (%); whiskers: 95% anchor-cluster bootstrap interval.",
		groups, []string{"DEA" + mark, "AR" + mark, thirdName, "DRA" + mark}, vals, nil, false)
	b.WriteString("</div>\n")
	if t.Protocol == TideP {
		b.WriteString("<p class=\"meta caveat\"><strong>" + esc(tidePCaveat) + "</strong></p>\n")
	}
	b.WriteString("<p class=\"meta\">" + esc(tideLegend) + "</p>\n")
	for _, tb := range tideTables(tideSubtypes([]*Report{r}), t.Protocol) {
		b.WriteString("<h2>" + esc(tb.title) + "</h2>\n<p class=\"meta\">" + esc(tb.legend) + "</p>\n")
		writeTideHTMLTable(b, &tb, r)
	}
	writeUnreadableHTML(b, tideUnreadableLines(r))
}

func writeTideHTMLTable(b *strings.Builder, t *tideTable, r *Report) {
	esc := html.EscapeString
	var n notes
	fmt.Fprintf(b, "<div class=\"scroll\">\n<table id=\"%s\">\n<tr>", t.id)
	grouped := slices.ContainsFunc(t.groups, func(g tideColGroup) bool { return g.label != "" })
	span := ""
	if grouped {
		span = " rowspan=\"2\""
	}
	for _, h := range tideNames {
		fmt.Fprintf(b, "<th class=\"l\"%s>%s</th>", span, esc(h))
	}
	if grouped {
		for _, g := range t.groups {
			if g.label == "" {
				for _, c := range g.cols {
					fmt.Fprintf(b, "<th rowspan=\"2\">%s</th>", esc(c.label))
				}
				continue
			}
			fmt.Fprintf(b, "<th colspan=\"%d\" style=\"text-align: center\">%s</th>", len(g.cols), esc(g.label))
		}
		b.WriteString("</tr>\n<tr>")
		for _, g := range t.groups {
			if g.label == "" {
				continue
			}
			for _, c := range g.cols {
				fmt.Fprintf(b, "<th>%s</th>", esc(c.label))
			}
		}
	} else {
		for _, g := range t.groups {
			for _, c := range g.cols {
				fmt.Fprintf(b, "<th>%s</th>", esc(c.label))
			}
		}
	}
	b.WriteString("</tr>\n")
	for i := range r.Tide.Rows {
		row := &r.Tide.Rows[i]
		b.WriteString("<tr>")
		for _, c := range tideNameCells(r, row) {
			fmt.Fprintf(b, "<td class=\"l\">%s</td>", strings.ReplaceAll(esc(c), "_", "_<wbr/>"))
		}
		for _, g := range t.groups {
			for _, c := range g.cols {
				b.WriteString("<td>")
				if c.text != nil {
					fmt.Fprintf(b, "<span>%s</span>", esc(c.text(row)))
				} else {
					writeTideCell(b, c.get(row), &n)
				}
				b.WriteString("</td>")
			}
		}
		b.WriteString("</tr>\n")
	}
	b.WriteString("</table>\n</div>\n")
	if len(n.texts) > 0 {
		fmt.Fprintf(b, "<ul class=\"notes\" id=\"%s-notes\">\n", t.id)
		for i, text := range n.texts {
			fmt.Fprintf(b, "<li>(%s) %s</li>\n", noteLabel(i), esc(text))
		}
		b.WriteString("</ul>\n")
	}
}

// writeTideCell writes a TIDE cell on up to four lines: "mean ± SD", the
// interval, the episode count, the note.
func writeTideCell(b *strings.Builder, s TideSummary, n *notes) {
	esc := html.EscapeString
	if s.Mean == nil {
		fmt.Fprintf(b, "<span>%s</span>", Dash)
		if s.Reason != "" {
			fmt.Fprintf(b, " <span class=\"note\">%s</span>", esc(n.ref(s.Reason)))
		}
		return
	}
	head, ci, cnt := tideParts(s)
	fmt.Fprintf(b, "<span>%s</span>", esc(head))
	if ci != "" {
		fmt.Fprintf(b, "<span class=\"ci\">%s</span>", esc(ci))
	}
	fmt.Fprintf(b, "<span class=\"ci\">%s</span>", esc(cnt))
	if s.Warning != "" {
		fmt.Fprintf(b, "<span class=\"note\">⚠ %s</span>", esc(n.ref(s.Warning)))
	}
}

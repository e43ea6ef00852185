package eval

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
)

// CellMetrics are the metrics of one (condition, oracle) cell over one
// seed's episodes, splits pooled. Each rate is the macro mean over the
// episodes where PROTOCOL.md §6 defines it, nil when no episode is
// eligible; the N fields count the eligible episodes (the denominators).
type CellMetrics struct {
	// Episodes counts all episodes given, Scored those with a scored
	// status (TERMINATED or TRUNCATED); Errors, AskerFailed, CallFailed
	// and OtherFailed the others by status (Counts).
	Episodes    int `json:"episodes"`
	Scored      int `json:"scored"`
	Errors      int `json:"errors"`
	AskerFailed int `json:"asker_failed"`
	CallFailed  int `json:"call_failed"`
	OtherFailed int `json:"other_failed,omitempty"`
	// SR is the success rate over every episode that did not complete (a
	// failure) and every scored one with a verified outcome.
	SR *float64 `json:"sr"`
	// Precision is the mean precision over scored episodes that asked at
	// least one question.
	Precision *float64 `json:"precision"`
	// Recall and F1 are means over scored episodes with counted
	// ambiguities, fallback stops omitted.
	Recall *float64 `json:"recall"`
	F1     *float64 `json:"f1"`
	// NSR, NPrecision, NRecall and NF1 are the eligible denominators.
	NSR        int `json:"n_sr"`
	NPrecision int `json:"n_precision"`
	NRecall    int `json:"n_recall"`
	NF1        int `json:"n_f1"`
}

// errored reports an episode that ended in the server's ERROR (the
// environment could not complete it, after the run's retries).
func errored(e *Episode) bool { return e.Status == "ERROR" }

// incomplete reports an episode that did not complete: the server's
// ERROR, an asker that failed (ASKER_FAILED: the LLM asker's endpoint, a
// missing trajectory), a call that failed (RPC_FAILED), or any other
// status that is not scored. Every such episode stays in the denominators
// and counts as a failure: BIRD-Interact's SR is over all tasks (an
// episode its harness could not finish scores 0), and AmbiTab §C.2 counts
// a record an oracle cannot complete as a failure with zero recall
// credit. It is eligible for SR (as 0) and, when its task's counted
// ambiguities are known, for recall and F1 (as 0); never for precision.
// The "completed" figures beside the headline ones leave such pairs out.
func incomplete(e *Episode) bool { return !e.Scored() }

// Counts are the denominators of a set of episodes: all of them, those
// that completed (scored: TERMINATED or TRUNCATED), and those that did
// not, by status. Episodes = Completed + Errors + AskerFailed + CallFailed
// + OtherFailed.
type Counts struct {
	Episodes  int `json:"episodes"`
	Completed int `json:"completed"`
	// Errors counts the server's ERROR, AskerFailed ASKER_FAILED,
	// CallFailed RPC_FAILED, OtherFailed any other status.
	Errors      int `json:"errors"`
	AskerFailed int `json:"asker_failed"`
	CallFailed  int `json:"call_failed"`
	OtherFailed int `json:"other_failed,omitempty"`
}

// add counts one episode.
func (c *Counts) add(e *Episode) {
	c.Episodes++
	switch {
	case e.Scored():
		c.Completed++
	case e.Status == "ERROR":
		c.Errors++
	case e.Status == "ASKER_FAILED":
		c.AskerFailed++
	case e.Status == "RPC_FAILED":
		c.CallFailed++
	default:
		c.OtherFailed++
	}
}

// NotCompleted is the number of episodes that did not complete.
func (c Counts) NotCompleted() int { return c.Episodes - c.Completed }

// successOf returns an episode's outcome and whether it counts for SR.
func successOf(e *Episode) (float64, bool) {
	if incomplete(e) {
		return 0, true
	}
	if e.Success == nil {
		return 0, false
	}
	return *e.Success, true
}

// precisionOf returns an episode's precision and whether it is eligible.
func precisionOf(e *Episode) (float64, bool) {
	if !e.Scored() || e.Precision == nil {
		return 0, false
	}
	return *e.Precision, true
}

// recallOf returns an episode's recall and whether it is eligible
// (fallback stops are omitted).
func recallOf(e *Episode) (float64, bool) {
	if incomplete(e) {
		return 0, e.Counted > 0
	}
	if e.Recall == nil || e.FallbackStop {
		return 0, false
	}
	return *e.Recall, true
}

// f1Of returns an episode's F1 and whether it is eligible (fallback stops
// are omitted).
func f1Of(e *Episode) (float64, bool) {
	if incomplete(e) {
		return 0, e.Counted > 0
	}
	if e.F1 == nil || e.FallbackStop {
		return 0, false
	}
	return *e.F1, true
}

// Cell computes the metrics of one (condition, oracle) cell over one
// seed's episodes with the eligibility rules of PROTOCOL.md §6: SR over
// scored episodes with a non-nil Success; precision over scored episodes
// with a non-nil Precision; recall and F1 over scored episodes with
// non-nil values that did not end by a fallback stop. Each is a macro
// mean (F1 is the mean of episode F1s). Episodes that did not complete
// (ERROR, ASKER_FAILED, RPC_FAILED) count as failures with zero recall
// (see incomplete).
func Cell(eps []Episode) CellMetrics {
	m := CellMetrics{Episodes: len(eps)}
	var sr, pr, rc, f1 float64
	for i := range eps {
		e := &eps[i]
		var c Counts
		c.add(e)
		m.Scored += c.Completed
		m.Errors += c.Errors
		m.AskerFailed += c.AskerFailed
		m.CallFailed += c.CallFailed
		m.OtherFailed += c.OtherFailed
		if v, ok := successOf(e); ok {
			sr += v
			m.NSR++
		}
		if v, ok := precisionOf(e); ok {
			pr += v
			m.NPrecision++
		}
		if v, ok := recallOf(e); ok {
			rc += v
			m.NRecall++
		}
		if v, ok := f1Of(e); ok {
			f1 += v
			m.NF1++
		}
	}
	m.SR = ratio(sr, m.NSR)
	m.Precision = ratio(pr, m.NPrecision)
	m.Recall = ratio(rc, m.NRecall)
	m.F1 = ratio(f1, m.NF1)
	return m
}

func ratio(sum float64, n int) *float64 {
	if n == 0 {
		return nil
	}
	v := sum / float64(n)
	return &v
}

// Summary aggregates a per-seed metric: the mean and sample SD across the
// seeds where it is defined, and the 95% AVT-cluster bootstrap percentile
// interval of that across-seed mean (PROTOCOL.md §7). Fields are nil where
// undefined (SD needs two seeds).
type Summary struct {
	Mean *float64 `json:"mean"`
	SD   *float64 `json:"sd"`
	Lo   *float64 `json:"lo"`
	Hi   *float64 `json:"hi"`
	// Seeds counts the seeds where the metric is defined.
	Seeds int `json:"seeds"`
	// Clusters counts the bootstrap's resampling units that hold data for
	// the metric: AVTs, or donor components for ΔRec_spec^Q.
	Clusters int `json:"clusters"`
	// Donor marks a metric resampled by donor components (ΔRec_spec^Q).
	Donor bool `json:"donor,omitempty"`
	// Warning says why the interval is not to be trusted: it rests on
	// fewer than two clusters, or every resample gave the same value.
	Warning string `json:"warning,omitempty"`
	// Reason says why the metric is undefined (Mean null): what did not
	// run, or which episodes would have been eligible.
	Reason string `json:"reason,omitempty"`
	// SDReason says why SD is null although Mean is not: the metric is
	// defined in one seed only (the run's only seed, or the only one of
	// its seeds with eligible episodes), and a sample SD needs two. Set
	// by Analyze under ambitab, so that a missing "± SD" is never silent.
	SDReason string `json:"sd_reason,omitempty"`
}

// Row holds one oracle's results. SR and asking metrics are fractions in
// [0, 1]; Gain is J(asker) − J(none) and Gap is J(full) − J(asker) (kept
// signed); DJResp, DRecSpec, DJFull and DRecNone are the leakage
// diagnostics of PROTOCOL.md §6 as fractions (differences for all but
// DRecSpec, which is a raw recall).
type Row struct {
	Oracle string `json:"oracle"`
	// Hybrid is the oracle's hybrid, against which DJResp and DRecSpec
	// are measured.
	Hybrid    string  `json:"hybrid"`
	SRNone    Summary `json:"sr_none"`
	SRAsker   Summary `json:"sr_asker"`
	SRFull    Summary `json:"sr_full"`
	Precision Summary `json:"precision"`
	Recall    Summary `json:"recall"`
	F1        Summary `json:"f1"`

	// PrecisionStrict, RecallStrict and F1Strict are the asker_strict
	// condition's precision, recall and F1 (the same asker, its episodes
	// reset with strict credit), with Precision's, Recall's and F1's
	// eligibility rules; Precision, Recall and F1 credit by AmbiTab's rule.
	// A gap between the two is credit earned by echoing the request.
	PrecisionStrict Summary `json:"precision_strict"`
	RecallStrict    Summary `json:"recall_strict"`
	F1Strict        Summary `json:"f1_strict"`

	Gain     Summary `json:"gain"`
	Gap      Summary `json:"gap"`
	DJResp   Summary `json:"dj_resp"`
	DRecSpec Summary `json:"drec_spec_q"`
	DJFull   Summary `json:"dj_full"`
	DRecNone Summary `json:"drec_none"`
	// Errors counts, per condition, the episodes that ended in ERROR (the
	// environment could not complete them, after the run's retries):
	// they count above as failures with zero recall.
	Errors map[Condition]int `json:"errors,omitempty"`
	// Counts are, per condition that ran, the denominators: all episodes
	// (all seeds), those that completed, and those that did not by status
	// (ERROR, ASKER_FAILED, RPC_FAILED), every one of which counts above
	// as a failure.
	Counts map[Condition]Counts `json:"counts"`
	// Unreadable counts, per condition that ran, the model outputs the
	// server could not read (Episode.UnreadableOracle and
	// UnreadableSolver, summed over the episodes, all seeds): they are
	// scored (a refusal, a failed solution) like the model's answers, and
	// shown here so that they never pass for them.
	Unreadable map[Condition]UnreadableCounts `json:"unreadable"`
	// SRNoneCompleted, SRAskerCompleted and SRFullCompleted are the
	// conditions' SR on the (task, seed) pairs that every oracle that ran
	// the condition completed (no ERROR under any), beside the headline SR.
	SRNoneCompleted  Summary `json:"sr_none_completed"`
	SRAskerCompleted Summary `json:"sr_asker_completed"`
	SRFullCompleted  Summary `json:"sr_full_completed"`
}

// CellEntry is one (condition, oracle, seed) cell of a report, for
// readers who want the per-seed numbers behind the summaries.
type CellEntry struct {
	Condition Condition `json:"condition"`
	Oracle    string    `json:"oracle"`
	Seed      uint64    `json:"seed"`
	CellMetrics
}

// Report is the analysis of one corpus's evaluation run.
type Report struct {
	Corpus        string   `json:"corpus"`
	Seeds         []uint64 `json:"seeds"`
	Resamples     int      `json:"resamples"`
	BootstrapSeed uint64   `json:"bootstrap_seed"`
	// Reference names the reference oracle; Hybrid the hybrid of the
	// oracles the run's oracle map did not name (each Row names its own).
	Reference string `json:"reference"`
	Hybrid    string `json:"hybrid"`
	// Rows has one row per oracle: deterministic, llm, llm_scoped, hybrid,
	// hybrid_scoped (those that ran), then the others by name.
	Rows []Row `json:"rows"`
	// GroupSignal is, for training runs, the fraction of GRPO groups whose
	// rewards are not all equal, per reward type. The caller sets it; it
	// may be empty.
	GroupSignal map[string]float64 `json:"group_signal,omitempty"`
	// Cells lists the per-seed cell metrics, sorted by oracle, condition
	// and seed.
	Cells []CellEntry `json:"cells"`
	// Protocol is the episodes' protocol when it is not ambitab ("bird-c");
	// left out for ambitab, whose report reads as before.
	Protocol string `json:"protocol,omitempty"`
	// BirdC is the analysis of a bird-c run: BIRD-Interact's phase-1 and
	// phase-2 SR, mean and normalised reward. Rows and Cells, AMBITAB's
	// metrics, are then empty.
	BirdC *BirdCReport `json:"bird_c,omitempty"`
	// BirdA is the analysis of a bird-a run: BirdC's figures, plus the
	// coins spent in all and per action type.
	BirdA *BirdCReport `json:"bird_a,omitempty"`
	// Tide is the analysis of a tide-f or tide-p run: TIDE-Bench's
	// metrics overall, per sample type and per drift subtype, with
	// anchor-cluster bootstrap intervals. Rows and Cells are then empty.
	Tide *TideReport `json:"tide,omitempty"`
	// Comparison is the comparison the episodes chose ("harness" or
	// "sound", driver.Record.Comparison; empty when none records it), and
	// ComparisonUnrecorded counts the episodes that do not record it
	// (written before the option existed).
	Comparison           string `json:"comparison,omitempty"`
	ComparisonUnrecorded int    `json:"comparison_unrecorded,omitempty"`
	// SDNote says, for a run of one seed, that no cell has an across-seed
	// SD (ambitab; empty when the run has two or more seeds, where a cell
	// defined in one seed only says so in its own SDReason).
	SDNote string `json:"sd_note,omitempty"`
	// Breakdowns are, per oracle (in Rows order), its episodes per
	// database and per task and the number of questions they asked, per
	// condition, pooled over seeds (ambitab).
	Breakdowns []Breakdown `json:"breakdown,omitempty"`
}

// bird is the report's BIRD-Interact section (bird-c or bird-a; nil for
// an AMBITAB report).
func (r *Report) bird() *BirdCReport {
	if r.BirdC != nil {
		return r.BirdC
	}
	return r.BirdA
}

// AnalyzeOptions configures Analyze.
type AnalyzeOptions struct {
	// Resamples is the number of bootstrap resamples (default 2000).
	Resamples int
	// BootstrapSeed seeds the bootstrap's PCG generator.
	BootstrapSeed uint64
	// Reference is the reference oracle (default "deterministic").
	Reference string
	// Hybrid is the hybrid oracle (actual matcher, reference responder)
	// that ΔJ_resp and ΔRec_spec^Q use for an oracle HybridOf does not name
	// (default "hybrid"; the reference is always its own hybrid).
	Hybrid string
	// HybridOf names, per oracle, its hybrid: the oracle with the same
	// matcher and the reference responder, as the server's ListOracles
	// gives it (see OracleMap, which a run directory records). For
	// example the scoped LLM oracle's is hybrid_scoped, and a test oracle
	// with the deterministic matcher and a leaky responder maps to
	// "deterministic".
	HybridOf map[string]string
	// Run is what the run directory's RunInfoFile says of the run (its
	// protocol's patience, the tasks it skipped); nil when unknown.
	Run *RunInfo
}

func (o *AnalyzeOptions) hybridOf(oracle string) string {
	if oracle == o.Reference {
		return oracle
	}
	if h, ok := o.HybridOf[oracle]; ok {
		return h
	}
	return o.Hybrid
}

// episodeKey identifies one played episode.
type episodeKey struct {
	task   string
	cond   Condition
	oracle string
	seed   uint64
}

// dataset indexes deduplicated episodes for the analysis.
type dataset struct {
	seeds   []uint64
	seedIdx map[uint64]int
	avts    []string // AVT units, sorted
	avtIdx  map[string]int
	taskAVT map[string]string
	comp    []int // AVT index → component index
	nComp   int
	byKey   map[episodeKey]*Episode
	oracles []string
	cells   map[Condition]map[string]map[uint64][]*Episode // cond → oracle → seed
}

// Analyze computes a Report from one corpus's episodes: per oracle, the
// per-seed metrics (splits pooled), their mean and sample SD across seeds,
// and AVT-cluster bootstrap intervals (PROTOCOL.md §6–7). Episodes
// repeated for the same (task, condition, oracle, seed) count once, the
// last one winning (as when a failed episode is rerun).
func Analyze(eps []Episode, opt AnalyzeOptions) (*Report, error) {
	if opt.Resamples == 0 {
		opt.Resamples = 2000
	}
	if opt.Resamples < 0 {
		return nil, fmt.Errorf("eval: negative resamples %d", opt.Resamples)
	}
	if opt.Reference == "" {
		opt.Reference = "deterministic"
	}
	if opt.Hybrid == "" {
		opt.Hybrid = "hybrid"
	}
	if len(eps) == 0 {
		return nil, errors.New("eval: no episodes to analyze")
	}
	corpus, protocol := eps[0].Corpus, eps[0].Protocol
	for i := range eps {
		if eps[i].Corpus != corpus {
			return nil, fmt.Errorf("eval: episodes of two corpora (%q and %q); analyze each corpus separately", corpus, eps[i].Corpus)
		}
		if eps[i].Protocol != protocol {
			return nil, fmt.Errorf("eval: episodes of two protocols (%s and %s); analyze each protocol separately", protocolOrDefault(protocol), protocolOrDefault(eps[i].Protocol))
		}
	}
	d, err := index(eps)
	if err != nil {
		return nil, err
	}
	comparison, unrecorded, err := d.comparison()
	if err != nil {
		return nil, err
	}
	r := &Report{
		Comparison: comparison, ComparisonUnrecorded: unrecorded,
		Corpus:        corpus,
		Seeds:         d.seeds,
		Resamples:     opt.Resamples,
		BootstrapSeed: opt.BootstrapSeed,
		Reference:     opt.Reference,
		Hybrid:        opt.Hybrid,
		Protocol:      protocol,
	}
	if isTide(protocol) {
		r.Rows, r.Cells = []Row{}, []CellEntry{}
		if r.Tide, err = analyzeTide(d, &opt, protocol); err != nil {
			return nil, err
		}
		return r, nil
	}
	if protocol != "" {
		if !isBird(protocol) {
			return nil, fmt.Errorf("eval: no analysis for protocol %s (want ambitab, bird-c, bird-a, tide-f or tide-p)", protocol)
		}
		r.Rows, r.Cells = []Row{}, []CellEntry{}
		if protocol == BirdA {
			r.BirdA = analyzeBirdC(d, &opt, protocol)
		} else {
			r.BirdC = analyzeBirdC(d, &opt, protocol)
		}
		return r, nil
	}
	var metrics []*metric
	for _, o := range d.oracles {
		ms := d.rowMetrics(o, &opt)
		metrics = append(metrics, ms...)
	}
	summaries := summarize(metrics, d, opt.Resamples, opt.BootstrapSeed)
	for i, o := range d.oracles {
		s := summaries[i*metricsPerRow : (i+1)*metricsPerRow]
		r.Rows = append(r.Rows, Row{
			Oracle: o, Hybrid: opt.hybridOf(o), SRNone: s[0], SRAsker: s[1], SRFull: s[2],
			Precision: s[3], Recall: s[4], F1: s[5],
			PrecisionStrict: s[6], RecallStrict: s[7], F1Strict: s[8], Gain: s[9], Gap: s[10],
			DJResp: s[11], DRecSpec: s[12], DJFull: s[13], DRecNone: s[14],
			SRNoneCompleted: s[15], SRAskerCompleted: s[16], SRFullCompleted: s[17],
			Errors: d.errors(o), Counts: d.counts(o), Unreadable: d.unreadable(o),
		})
	}
	r.Cells = d.cellEntries()
	r.Breakdowns = d.breakdowns()
	if len(d.seeds) == 1 {
		r.SDNote = fmt.Sprintf("one seed (%d): no cell has an SD across seeds, which needs two; each gives the mean [95%% bootstrap interval over AVTs]. Run --seeds with two or more seeds for it.", d.seeds[0])
	}
	for i := range r.Rows {
		for _, s := range r.Rows[i].summaries() {
			if s.Mean != nil && s.SD == nil {
				s.SDReason = sdReason(len(d.seeds))
			}
		}
	}
	return r, nil
}

// sdReason says why a cell defined in one seed has no SD, in a run of
// seeds seeds.
func sdReason(seeds int) string {
	if seeds == 1 {
		return "no ± SD: the run has one seed, and an SD across seeds needs two"
	}
	return fmt.Sprintf("no ± SD: defined in only one of the run's %d seeds (no eligible episode in the others), and an SD across seeds needs two", seeds)
}

// summaries lists pointers to every Summary of the row.
func (row *Row) summaries() []*Summary {
	return []*Summary{&row.SRNone, &row.SRAsker, &row.SRFull, &row.Precision, &row.Recall, &row.F1,
		&row.PrecisionStrict, &row.RecallStrict, &row.F1Strict, &row.Gain, &row.Gap,
		&row.DJResp, &row.DRecSpec, &row.DJFull, &row.DRecNone,
		&row.SRNoneCompleted, &row.SRAskerCompleted, &row.SRFullCompleted}
}

// comparison is the one comparison the (deduplicated) episodes recorded
// and the number that recorded none; episodes of two comparisons are
// refused, as two protocols are: their numbers are not comparable.
func (d *dataset) comparison() (string, int, error) {
	comparison, unrecorded := "", 0
	seen := map[string]bool{}
	for _, e := range d.byKey {
		seen[e.Comparison] = true
		if e.Comparison == "" {
			unrecorded++
		}
	}
	for _, c := range slices.Sorted(maps.Keys(seen)) {
		switch {
		case c == "":
		case comparison == "":
			comparison = c
		case c != comparison:
			return "", 0, fmt.Errorf("eval: episodes of two comparisons (%s and %s); analyze each comparison separately", comparison, c)
		}
	}
	return comparison, unrecorded, nil
}

// protocolOrDefault names a protocol as episodes record it ("" is ambitab).
func protocolOrDefault(p string) string {
	if p == "" {
		return "ambitab"
	}
	return p
}

// index deduplicates the episodes and builds the AVT units and the donor
// components.
func index(eps []Episode) (*dataset, error) {
	d := &dataset{
		seedIdx: map[uint64]int{},
		avtIdx:  map[string]int{},
		taskAVT: map[string]string{},
		byKey:   map[episodeKey]*Episode{},
		cells:   map[Condition]map[string]map[uint64][]*Episode{},
	}
	eps = adoptTaskFacts(eps)
	for i := range eps {
		e := &eps[i]
		if e.TaskID == "" || e.AVTID == "" {
			return nil, fmt.Errorf("eval: episode %d has no task or AVT id", i)
		}
		if a, ok := d.taskAVT[e.TaskID]; ok && a != e.AVTID {
			return nil, fmt.Errorf("eval: task %q in two AVTs (%q and %q)", e.TaskID, a, e.AVTID)
		}
		d.taskAVT[e.TaskID] = e.AVTID
		d.byKey[episodeKey{e.TaskID, e.Condition, e.Oracle, e.Seed}] = e
	}
	oracles := map[string]bool{}
	for k, e := range d.byKey {
		if _, ok := d.seedIdx[k.seed]; !ok {
			d.seedIdx[k.seed] = 0
			d.seeds = append(d.seeds, k.seed)
		}
		if _, ok := d.avtIdx[e.AVTID]; !ok {
			d.avtIdx[e.AVTID] = 0
			d.avts = append(d.avts, e.AVTID)
		}
		oracles[k.oracle] = true
		c := d.cells[k.cond]
		if c == nil {
			c = map[string]map[uint64][]*Episode{}
			d.cells[k.cond] = c
		}
		if c[k.oracle] == nil {
			c[k.oracle] = map[uint64][]*Episode{}
		}
		c[k.oracle][k.seed] = append(c[k.oracle][k.seed], e)
	}
	sort.Slice(d.seeds, func(i, j int) bool { return d.seeds[i] < d.seeds[j] })
	for i, s := range d.seeds {
		d.seedIdx[s] = i
	}
	sort.Strings(d.avts)
	for i, a := range d.avts {
		d.avtIdx[a] = i
	}
	for _, c := range d.cells {
		for _, bySeed := range c {
			for _, es := range bySeed {
				sort.Slice(es, func(i, j int) bool { return es[i].TaskID < es[j].TaskID })
			}
		}
	}
	d.oracles = make([]string, 0, len(oracles))
	for o := range oracles {
		d.oracles = append(d.oracles, o)
	}
	sort.Slice(d.oracles, func(i, j int) bool { return oracleLess(d.oracles[i], d.oracles[j]) })
	d.comp, d.nComp = donorComponents(d)
	return d, nil
}

// adoptTaskFacts returns a copy of eps in which each episode that did not
// complete takes, from a completed episode of the same task, what only a
// played reset tells: the AVT (a failed reset's record names the task as
// its own AVT), the counted ambiguities (0 without the privileged
// channel), and TIDE's anchor cluster and drift subtype. A failed episode
// then stays in its task's AVT cluster and in the recall denominator as a
// failure, instead of falling out of both or splitting the AVT.
func adoptTaskFacts(eps []Episode) []Episode {
	type facts struct {
		avt, cluster, drift string
		counted             int
	}
	known := map[string]facts{}
	for i := range eps {
		if e := &eps[i]; e.Scored() {
			if _, ok := known[e.TaskID]; !ok {
				known[e.TaskID] = facts{e.AVTID, e.Cluster, e.DriftSubtype, e.Counted}
			}
		}
	}
	out := slices.Clone(eps)
	for i := range out {
		e := &out[i]
		f, ok := known[e.TaskID]
		if e.Scored() || !ok {
			continue
		}
		if e.AVTID == "" || e.AVTID == e.TaskID {
			e.AVTID = f.avt
		}
		if e.Counted == 0 {
			e.Counted = f.counted
		}
		if e.Cluster == "" {
			e.Cluster = f.cluster
		}
		if e.DriftSubtype == "" {
			e.DriftSubtype = f.drift
		}
	}
	return out
}

// oracleOrder ranks the known oracle types for display.
var oracleOrder = map[string]int{"deterministic": 0, "llm": 1, "llm_scoped": 2, "hybrid": 3, "hybrid_scoped": 4}

func oracleLess(a, b string) bool {
	ra, oka := oracleOrder[a]
	rb, okb := oracleOrder[b]
	switch {
	case oka && okb:
		return ra < rb
	case oka != okb:
		return oka
	}
	return a < b
}

// donorComponents joins, for the spec-randomized condition, each AVT to
// its donor's AVT (a donor task that never ran is a node of its own); AVTs
// sharing a replacement specification are then joined through it. It
// returns each AVT's component index, numbered by first appearance in the
// sorted AVT list, and the number of components.
func donorComponents(d *dataset) ([]int, int) {
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		p, ok := parent[x]
		if !ok || p == x {
			parent[x] = x
			return x
		}
		r := find(p)
		parent[x] = r
		return r
	}
	union := func(a, b string) {
		ra, rb := find(a), find(b)
		if ra != rb {
			if ra < rb {
				parent[rb] = ra
			} else {
				parent[ra] = rb
			}
		}
	}
	for _, a := range d.avts {
		find("avt:" + a)
	}
	for _, e := range d.byKey {
		if e.Condition != AskerSpec || e.Donor == "" {
			continue
		}
		donor := "task:" + e.Donor
		if a, ok := d.taskAVT[e.Donor]; ok {
			donor = "avt:" + a
		}
		union("avt:"+e.AVTID, donor)
	}
	comp := make([]int, len(d.avts))
	ids := map[string]int{}
	for i, a := range d.avts {
		r := find("avt:" + a)
		id, ok := ids[r]
		if !ok {
			id = len(ids)
			ids[r] = id
		}
		comp[i] = id
	}
	return comp, len(ids)
}

// cellEntries lists the per-seed cell metrics.
func (d *dataset) cellEntries() []CellEntry {
	var out []CellEntry
	for cond, byOracle := range d.cells {
		for o, bySeed := range byOracle {
			for s, es := range bySeed {
				flat := make([]Episode, len(es))
				for i, e := range es {
					flat[i] = *e
				}
				out = append(out, CellEntry{Condition: cond, Oracle: o, Seed: s, CellMetrics: Cell(flat)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Oracle != b.Oracle {
			return oracleLess(a.Oracle, b.Oracle)
		}
		if a.Condition != b.Condition {
			return a.Condition < b.Condition
		}
		return a.Seed < b.Seed
	})
	return out
}

// ratioStat holds, per seed and resampling unit, the sum of an
// episode-level quantity and the number of eligible episodes (or pairs).
// Its per-seed value on a weighting of the units is Σ w·num / Σ w·den.
type ratioStat struct {
	num, den [][]float64 // [seed][unit]
}

func newRatioStat(seeds, units int) *ratioStat {
	s := &ratioStat{num: make([][]float64, seeds), den: make([][]float64, seeds)}
	for i := range seeds {
		s.num[i] = make([]float64, units)
		s.den[i] = make([]float64, units)
	}
	return s
}

// term is one coefficient-weighted ratio of a metric.
type term struct {
	stat *ratioStat
	coef float64
}

// metric is a per-seed metric: Σ coef·ratio, undefined in a seed where
// any ratio has a zero denominator. donor selects the donor-component
// units instead of AVTs. missing, when set, says which input did not run
// (the metric is then undefined for that reason); empty says which
// episodes would have been eligible, for a metric that is undefined
// although its inputs ran.
type metric struct {
	terms   []term
	donor   bool
	missing string
	empty   string
}

// metricsPerRow is the number of metrics in a Row.
const metricsPerRow = 18

// episodeValue extracts an eligible value from an episode.
type episodeValue func(*Episode) (float64, bool)

// cellStat sums value over one (condition, oracle) cell per seed and AVT
// (or donor component).
func (d *dataset) cellStat(cond Condition, oracle string, value episodeValue, donor bool) *ratioStat {
	units := len(d.avts)
	if donor {
		units = d.nComp
	}
	s := newRatioStat(len(d.seeds), units)
	for seed, es := range d.cells[cond][oracle] {
		si := d.seedIdx[seed]
		for _, e := range es {
			v, ok := value(e)
			if !ok {
				continue
			}
			u := d.avtIdx[e.AVTID]
			if donor {
				u = d.comp[u]
			}
			s.num[si][u] += v
			s.den[si][u]++
		}
	}
	return s
}

// completedStat sums value over one (condition, oracle) cell, keeping only
// the (task, seed) pairs that every oracle that ran the condition
// completed (a scored episode: not ERROR, nor a failed call or asker).
func (d *dataset) completedStat(cond Condition, oracle string, value episodeValue) *ratioStat {
	var ran []string
	for _, o := range d.oracles {
		if d.ran(cond, o) {
			ran = append(ran, o)
		}
	}
	return d.cellStat(cond, oracle, func(e *Episode) (float64, bool) {
		for _, o := range ran {
			other, ok := d.byKey[episodeKey{e.TaskID, cond, o, e.Seed}]
			if !ok || !other.Scored() {
				return 0, false
			}
		}
		return value(e)
	}, false)
}

// errors counts oracle o's ERROR episodes per condition (nil: none).
func (d *dataset) errors(o string) map[Condition]int {
	var out map[Condition]int
	for cond, byOracle := range d.cells {
		for _, es := range byOracle[o] {
			for _, e := range es {
				if errored(e) {
					if out == nil {
						out = map[Condition]int{}
					}
					out[cond]++
				}
			}
		}
	}
	return out
}

// UnreadableCounts are the model outputs of some episodes that the server
// could not read: the oracle's (questions) and the LLM solver's
// (episodes).
type UnreadableCounts struct {
	Oracle int `json:"oracle"`
	Solver int `json:"solver"`
}

// add counts episode e's unreadable outputs.
func (u *UnreadableCounts) add(e *Episode) {
	u.Oracle += e.UnreadableOracle
	u.Solver += e.UnreadableSolver
}

// unreadable sums oracle o's unreadable outputs per condition that ran.
func (d *dataset) unreadable(o string) map[Condition]UnreadableCounts {
	out := map[Condition]UnreadableCounts{}
	for cond, byOracle := range d.cells {
		if len(byOracle[o]) == 0 {
			continue
		}
		var u UnreadableCounts
		for _, es := range byOracle[o] {
			for _, e := range es {
				u.add(e)
			}
		}
		out[cond] = u
	}
	return out
}

// counts are oracle o's denominators per condition that ran.
func (d *dataset) counts(o string) map[Condition]Counts {
	out := map[Condition]Counts{}
	for cond, byOracle := range d.cells {
		if len(byOracle[o]) == 0 {
			continue
		}
		out[cond] = countCell(byOracle[o])
	}
	return out
}

// countCell counts a cell's episodes, all seeds.
func countCell(cell map[uint64][]*Episode) Counts {
	var c Counts
	for _, es := range cell {
		for _, e := range es {
			c.add(e)
		}
	}
	return c
}

// ran reports whether condition cond ran under oracle o.
func (d *dataset) ran(cond Condition, o string) bool { return len(d.cells[cond][o]) > 0 }

// rowMetrics builds the metricsPerRow metrics of oracle o, in Row order.
// The differenced diagnostics are differences of the two runs' means, each
// over its own eligible episodes (AmbiTab §A.3–A.4 define them so), not
// means over the pairs where both are eligible.
func (d *dataset) rowMetrics(o string, opt *AnalyzeOptions) []*metric {
	srNone := d.cellStat(None, o, successOf, false)
	srAsk := d.cellStat(Asker, o, successOf, false)
	srFull := d.cellStat(Full, o, successOf, false)
	h := opt.hybridOf(o)
	ref := opt.Reference
	needs := func(m *metric, runs ...struct {
		cond Condition
		o    string
	}) *metric {
		for _, r := range runs {
			if !d.ran(r.cond, r.o) {
				m.missing = fmt.Sprintf("the %s condition did not run under the %s oracle", r.cond, r.o)
				switch {
				case r.o != o:
					m.missing += fmt.Sprintf(" (add %s to --oracles)", r.o)
				case r.cond == AskerStrict:
					m.missing += " (add asker_strict to --conditions)"
				}
				break
			}
		}
		return m
	}
	type run = struct {
		cond Condition
		o    string
	}
	one := func(s *ratioStat, empty string, runs ...run) *metric {
		return needs(&metric{terms: []term{{s, 1}}, empty: empty}, runs...)
	}
	diff := func(a, b *ratioStat, empty string, runs ...run) *metric {
		return needs(&metric{terms: []term{{a, 1}, {b, -1}}, empty: empty}, runs...)
	}
	noSR := "no episode with a verified outcome"
	noAmb := "on a task with counted ambiguities (fallback stops are left out)"
	return []*metric{
		one(srNone, noSR, run{None, o}),
		one(srAsk, noSR, run{Asker, o}),
		one(srFull, noSR, run{Full, o}),
		one(d.cellStat(Asker, o, precisionOf, false), "no asker episode asked a question", run{Asker, o}),
		one(d.cellStat(Asker, o, recallOf, false), "no asker episode "+noAmb, run{Asker, o}),
		one(d.cellStat(Asker, o, f1Of, false), "no asker episode "+noAmb, run{Asker, o}),
		one(d.cellStat(AskerStrict, o, precisionOf, false), "no asker_strict episode asked a question", run{AskerStrict, o}),
		one(d.cellStat(AskerStrict, o, recallOf, false), "no asker_strict episode "+noAmb, run{AskerStrict, o}),
		one(d.cellStat(AskerStrict, o, f1Of, false), "no asker_strict episode "+noAmb, run{AskerStrict, o}),
		diff(srAsk, srNone, noSR, run{Asker, o}, run{None, o}),
		diff(srFull, srAsk, noSR, run{Full, o}, run{Asker, o}),
		diff(srAsk, d.cellStat(Asker, h, successOf, false), noSR, run{Asker, o}, run{Asker, h}),
		needs(&metric{terms: []term{{d.cellStat(AskerSpec, h, recallOf, true), 1}}, donor: true,
			empty: "no asker_spec episode on a task with counted ambiguities"}, run{AskerSpec, h}),
		diff(d.cellStat(FullAdv, o, successOf, false), d.cellStat(FullAdv, ref, successOf, false), noSR, run{FullAdv, o}, run{FullAdv, ref}),
		diff(d.cellStat(NoneAdv, o, recallOf, false), d.cellStat(NoneAdv, ref, recallOf, false),
			"no none_adv episode on a task with counted ambiguities", run{NoneAdv, o}, run{NoneAdv, ref}),
		one(d.completedStat(None, o, successOf), "no (task, seed) pair that every oracle completed", run{None, o}),
		one(d.completedStat(Asker, o, successOf), "no (task, seed) pair that every oracle completed", run{Asker, o}),
		one(d.completedStat(Full, o, successOf), "no (task, seed) pair that every oracle completed", run{Full, o}),
	}
}

// perSeed evaluates m on unit weights w (nil: all ones) and returns the
// across-seed mean and the per-seed values where defined.
func (m *metric) perSeed(w []float64, buf []float64) (mean float64, vals []float64) {
	vals = buf[:0]
	seeds := len(m.terms[0].stat.num)
	for si := range seeds {
		v, ok := 0.0, true
		for _, t := range m.terms {
			var num, den float64
			nr, dr := t.stat.num[si], t.stat.den[si]
			if w == nil {
				for u := range dr {
					num += nr[u]
					den += dr[u]
				}
			} else {
				for u, wu := range w {
					if wu != 0 && dr[u] != 0 {
						num += wu * nr[u]
						den += wu * dr[u]
					}
				}
			}
			if den == 0 {
				ok = false
				break
			}
			v += t.coef * (num / den)
		}
		if ok {
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		return math.NaN(), vals
	}
	for _, v := range vals {
		mean += v
	}
	return mean / float64(len(vals)), vals
}

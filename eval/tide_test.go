package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"html"
	"io"
	"math"
	"strings"
	"testing"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// tideEp is a hand-built TIDE episode of the asker condition: task id,
// anchor cluster, sample type, drift subtype, status.
type tideEp struct {
	task, cluster, st, sub, status string
	seed                           uint64
	dea                            float64
	asked, l1, l2, drr, sql2       *float64
}

func f64(v float64) *float64 { return &v }

var (
	yes = f64(1)
	no  = f64(0)
)

func (x tideEp) episode(protocol string) Episode {
	status := x.status
	if status == "" {
		status = "TERMINATED"
	}
	e := Episode{Record: driver.Record{Corpus: "tide", TaskID: x.task, AVTID: x.task, Seed: x.seed, Status: status,
		Protocol: protocol, SampleType: x.st, Cluster: x.cluster, DriftSubtype: x.sub}, Condition: Asker, Oracle: "deterministic"}
	if status != "TERMINATED" && status != "TRUNCATED" {
		return e
	}
	e.Reward = f64(x.dea)
	e.Asked, e.SQL1 = x.asked, f64(x.dea)
	if x.st != DriftOnly {
		e.L1Identified, e.L2Identified = x.l1, x.l2
	}
	if x.st != ChainOnly {
		e.DriftRecognized, e.SQL2 = x.drr, x.sql2
	}
	return e
}

func tideEpisodes(protocol string, xs ...tideEp) []Episode {
	out := make([]Episode, len(xs))
	for i, x := range xs {
		out[i] = x.episode(protocol)
	}
	return out
}

func analyzeTideOK(t *testing.T, eps []Episode, resamples int) *Report {
	t.Helper()
	r, err := Analyze(eps, AnalyzeOptions{Resamples: resamples, BootstrapSeed: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r.Tide == nil || len(r.Tide.Rows) != 1 || len(r.Rows) != 0 || r.BirdC != nil {
		t.Fatalf("report: tide %+v, %d AMBITAB rows", r.Tide, len(r.Rows))
	}
	return r
}

// wantRate checks a defined cell: its mean and its episode count.
func wantRate(t *testing.T, what string, s TideSummary, want float64, n int) {
	t.Helper()
	if s.Mean == nil {
		t.Errorf("%s: undefined (%s), want %v", what, s.Reason, want)
		return
	}
	if math.Abs(*s.Mean-want) > 1e-9 || s.N != n {
		t.Errorf("%s = %v over %d episodes, want %v over %d", what, *s.Mean, s.N, want, n)
	}
	if s.Lo == nil || s.Hi == nil || *s.Lo > *s.Mean+1e-9 || *s.Hi < *s.Mean-1e-9 {
		t.Errorf("%s: interval [%v, %v] does not hold the mean %v", what, s.Lo, s.Hi, *s.Mean)
	}
}

// wantEmpty checks an undefined cell and that its reason says why.
func wantEmpty(t *testing.T, what string, s TideSummary, reason string) {
	t.Helper()
	if s.Mean != nil || s.Lo != nil || !strings.Contains(s.Reason, reason) {
		t.Errorf("%s = %v (reason %q), want undefined because %q", what, s.Mean, s.Reason, reason)
	}
}

// twoAnchors is a hand-built tide-f run over two anchors: a1's samples
// mostly solved, a2's failed (its joint sample an environment ERROR).
var twoAnchors = []tideEp{
	{task: "a1-C", cluster: "a1", st: ChainOnly, dea: 1, asked: yes, l1: yes, l2: yes},
	{task: "a1-D", cluster: "a1", st: DriftOnly, sub: "value", dea: 1, asked: no, drr: yes, sql2: yes},
	{task: "a1-J", cluster: "a1", st: Joint, sub: "value", dea: 0, asked: yes, l1: yes, l2: no, drr: yes, sql2: no},
	{task: "a2-C", cluster: "a2", st: ChainOnly, dea: 0, asked: no, l1: no, l2: no},
	{task: "a2-D", cluster: "a2", st: DriftOnly, sub: "constraint", dea: 0, asked: no, drr: no, sql2: no},
	{task: "a2-J", cluster: "a2", st: Joint, sub: "constraint", status: "ERROR"},
}

// TestTideMetricsF computes every metric of a tide-f run by hand: each
// over its sample set, an ERROR episode a failure wherever its sample
// counts, the cells a definition excludes left empty with the reason.
func TestTideMetricsF(t *testing.T) {
	r := analyzeTideOK(t, tideEpisodes(TideF, twoAnchors...), 500)
	tr := r.Tide
	if tr.Protocol != TideF || tr.Tasks != 6 || tr.Clusters != 2 || tr.SampleTasks[ChainOnly] != 2 || tr.SampleTasks[Joint] != 2 || tr.Skipped != nil {
		t.Errorf("report: %+v", tr)
	}
	row := tr.Rows[0]
	if row.Episodes != 6 || row.Errors != 1 || row.Unplayed != 0 || row.Joint.Episodes != 2 || row.Joint.Errors != 1 || row.ChainOnly.Errors != 0 {
		t.Errorf("counts: %+v", row)
	}
	o := row.Overall
	wantRate(t, "DEA", o.DEA, 2.0/6, 6)
	wantRate(t, "AR", o.AR, 2.0/6, 6)
	wantRate(t, "L1-IR", o.L1IR, 2.0/4, 4)
	wantRate(t, "JIR", o.JIR, 1.0/4, 4)
	wantRate(t, "L2-IR (f)", o.L2IRf, 1.0/4, 4)
	wantRate(t, "DRR", o.DRR, 2.0/4, 4)
	wantRate(t, "DRA", o.DRA, 1.0/4, 4)
	wantEmpty(t, "L2-IRp", o.L2IRp, "tide-p")
	if o.DEA.Clusters != 2 || o.L1IR.Clusters != 2 {
		t.Errorf("clusters %d, %d; want the 2 anchors, not the samples", o.DEA.Clusters, o.L1IR.Clusters)
	}

	wantRate(t, "chain-only DEA", row.ChainOnly.DEA, 0.5, 2)
	wantRate(t, "chain-only L1-IR", row.ChainOnly.L1IR, 0.5, 2)
	wantRate(t, "chain-only JIR", row.ChainOnly.JIR, 0.5, 2)
	wantRate(t, "chain-only AR", row.ChainOnly.AR, 0.5, 2)
	wantEmpty(t, "chain-only DRR", row.ChainOnly.DRR, "defined on drift-only and joint samples only")
	wantEmpty(t, "chain-only DRA", row.ChainOnly.DRA, "defined on drift-only and joint samples only")
	wantEmpty(t, "chain-only L2-IRp", row.ChainOnly.L2IRp, "tide-p")

	wantRate(t, "drift-only DEA", row.DriftOnly.DEA, 0.5, 2)
	wantRate(t, "drift-only AR", row.DriftOnly.AR, 0, 2)
	wantRate(t, "drift-only DRR", row.DriftOnly.DRR, 0.5, 2)
	wantRate(t, "drift-only DRA", row.DriftOnly.DRA, 0.5, 2)
	wantEmpty(t, "drift-only L1-IR", row.DriftOnly.L1IR, "defined on chain-only and joint samples only")
	wantEmpty(t, "drift-only JIR", row.DriftOnly.JIR, "defined on chain-only and joint samples only")

	// The joint ERROR episode is a failure in every metric of its sample.
	wantRate(t, "joint DEA", row.Joint.DEA, 0, 2)
	wantRate(t, "joint AR", row.Joint.AR, 0.5, 2)
	wantRate(t, "joint L1-IR", row.Joint.L1IR, 0.5, 2)
	wantRate(t, "joint JIR", row.Joint.JIR, 0, 2)
	wantRate(t, "joint DRR", row.Joint.DRR, 0.5, 2)
	wantRate(t, "joint DRA", row.Joint.DRA, 0, 2)

	// Per drift subtype: value (a1) and constraint (a2); no projection
	// drift was evaluated.
	if len(row.Subtypes) != 3 || row.Subtypes[0].Subtype != "value" || row.Subtypes[1].Subtype != "constraint" || row.Subtypes[2].Subtype != "projection" {
		t.Fatalf("subtypes %+v", row.Subtypes)
	}
	v, c, p := row.Subtypes[0], row.Subtypes[1], row.Subtypes[2]
	wantRate(t, "value drift-only DRA", v.DriftOnly.DRA, 1, 1)
	wantRate(t, "value joint DRA", v.Joint.DRA, 0, 1)
	wantRate(t, "value DRA", v.All.DRA, 0.5, 2)
	wantRate(t, "value DRR", v.All.DRR, 1, 2)
	wantRate(t, "constraint drift-only DRA", c.DriftOnly.DRA, 0, 1)
	wantRate(t, "constraint joint DRR", c.Joint.DRR, 0, 1)
	wantRate(t, "constraint DRR", c.All.DRR, 0, 2)
	wantEmpty(t, "projection DRA", p.All.DRA, "no episode on a drift-only or joint sample with a projection drift")
	// DEA by drift subtype (Table 3's Value/Constraint/Projection columns):
	// over the drift samples of the subtype only (no chain-only sample has
	// a drift), the joint ERROR a failure.
	wantRate(t, "value drift-only DEA", v.DriftOnly.DEA, 1, 1)
	wantRate(t, "value joint DEA", v.Joint.DEA, 0, 1)
	wantRate(t, "constraint drift-only DEA", c.DriftOnly.DEA, 0, 1)
	wantRate(t, "constraint joint DEA (ERROR)", c.Joint.DEA, 0, 1)
	wantRate(t, "value DEA, both sample types", v.All.DEA, 0.5, 2)
	wantEmpty(t, "projection joint DEA", p.Joint.DEA, "no episode on a joint sample with a projection drift")
	if p.All.DRA.N != 0 || v.All.DRA.Clusters != 1 || !strings.Contains(v.All.DRA.Warning, "1 anchor cluster") {
		t.Errorf("projection n %d; value DRA clusters %d, warning %q", p.All.DRA.N, v.All.DRA.Clusters, v.All.DRA.Warning)
	}
}

// TestTideMetricsP: under tide-p L2-IRp is defined and the tide-f
// identification rates are not; drift-only cells are empty (tide-p serves
// chain-only and joint samples only), and DEA, AR, DRR and DRA are
// measured on what it serves.
func TestTideMetricsP(t *testing.T) {
	var xs []tideEp
	for _, x := range twoAnchors {
		if x.st != DriftOnly {
			xs = append(xs, x)
		}
	}
	row := analyzeTideOK(t, tideEpisodes(TideP, xs...), 500).Tide.Rows[0]
	wantRate(t, "L2-IRp", row.Overall.L2IRp, 1.0/4, 4)
	wantRate(t, "chain-only L2-IRp", row.ChainOnly.L2IRp, 0.5, 2)
	wantRate(t, "joint L2-IRp", row.Joint.L2IRp, 0, 2)
	wantRate(t, "DEA", row.Overall.DEA, 1.0/4, 4)
	wantRate(t, "DRR", row.Overall.DRR, 1.0/2, 2)
	for what, s := range map[string]TideSummary{"L1-IR": row.Overall.L1IR, "JIR": row.Overall.JIR, "L2-IR (f)": row.Overall.L2IRf, "joint JIR": row.Joint.JIR} {
		wantEmpty(t, what, s, "tide-f metric")
	}
	for what, s := range map[string]TideSummary{"drift-only DEA": row.DriftOnly.DEA, "drift-only AR": row.DriftOnly.AR, "drift-only DRA": row.DriftOnly.DRA,
		"value drift-only DRA": row.Subtypes[0].DriftOnly.DRA} {
		wantEmpty(t, what, s, "tide-p serves chain-only and joint samples only")
	}
	wantEmpty(t, "drift-only L2-IRp", row.DriftOnly.L2IRp, "defined on chain-only and joint samples only")
}

// TestTideIneligibleEpisodes: an episode that could not be played
// (ASKER_FAILED, RPC_FAILED) stays in the denominators as a failure of
// every metric whose sample set holds its sample, and is counted by
// status; a scored episode without a component is left out of that
// component's metric only.
func TestTideIneligibleEpisodes(t *testing.T) {
	xs := []tideEp{
		{task: "a-C", cluster: "a", st: ChainOnly, dea: 1, asked: yes, l1: nil, l2: yes},
		{task: "a-D", cluster: "a", st: DriftOnly, sub: "value", status: "ASKER_FAILED"},
		{task: "a-J", cluster: "a", st: Joint, sub: "value", dea: 1, asked: yes, l1: yes, l2: yes, drr: yes, sql2: yes},
		{task: "b-D", cluster: "b", st: DriftOnly, sub: "projection", status: "RPC_FAILED"},
	}
	row := analyzeTideOK(t, tideEpisodes(TideF, xs...), 200).Tide.Rows[0]
	if row.Episodes != 4 || row.Completed != 2 || row.AskerFailed != 1 || row.CallFailed != 1 || row.Unplayed != 2 || row.Errors != 0 ||
		row.DriftOnly.Episodes != 2 || row.DriftOnly.NotCompleted != 2 || row.Overall.NotCompleted != 2 {
		t.Errorf("counts: %+v", row)
	}
	// DEA over all four samples: the two played ones matched, the two
	// unplayed ones fail.
	wantRate(t, "DEA", row.Overall.DEA, 2.0/4, 4)
	wantRate(t, "L1-IR", row.Overall.L1IR, 1, 1)
	wantRate(t, "L2-IR (f)", row.Overall.L2IRf, 1, 2)
	wantRate(t, "JIR", row.Overall.JIR, 1, 1)
	// Drift-only: both samples unplayed, failures (0 over 2), not undefined.
	wantRate(t, "drift-only DRR", row.DriftOnly.DRR, 0, 2)
	wantRate(t, "drift-only DEA", row.DriftOnly.DEA, 0, 2)
	// DRR over drift-only and joint: the joint sample recognised the drift.
	wantRate(t, "DRR", row.Overall.DRR, 1.0/3, 3)
	if row.Overall.DEA.Clusters != 2 {
		t.Errorf("DEA clusters %d: an unplayed episode's cluster holds its failure", row.Overall.DEA.Clusters)
	}
}

// TestTideClusterBootstrap: TIDE's three samples of one anchor are
// resampled together. With one anchor the interval is degenerate (the
// resample always draws the same three samples: [1/3, 1/3]); resampled
// as three AVTs, the same episodes give an interval of width > 0.
func TestTideClusterBootstrap(t *testing.T) {
	xs := []tideEp{
		{task: "a-C", cluster: "a", st: ChainOnly, dea: 1, asked: yes, l1: yes, l2: yes},
		{task: "a-D", cluster: "a", st: DriftOnly, sub: "value", dea: 0, asked: no, drr: no, sql2: no},
		{task: "a-J", cluster: "a", st: Joint, sub: "value", dea: 0, asked: no, l1: no, l2: no, drr: no, sql2: no},
	}
	dea := analyzeTideOK(t, tideEpisodes(TideF, xs...), 2000).Tide.Rows[0].Overall.DEA
	if dea.Clusters != 1 || *dea.Lo != *dea.Hi || math.Abs(*dea.Lo-1.0/3) > 1e-9 || !strings.Contains(dea.Warning, "degenerate interval: only 1 anchor cluster") {
		t.Errorf("one anchor: DEA %v [%v, %v] over %d clusters, warning %q", *dea.Mean, *dea.Lo, *dea.Hi, dea.Clusters, dea.Warning)
	}
	// Without a cluster, each sample is its own unit (its AVT).
	for i := range xs {
		xs[i].cluster = ""
	}
	dea = analyzeTideOK(t, tideEpisodes(TideF, xs...), 2000).Tide.Rows[0].Overall.DEA
	if dea.Clusters != 3 || *dea.Lo != 0 || *dea.Hi != 1 || dea.Warning != "" {
		t.Errorf("three AVTs: DEA [%v, %v] over %d clusters, warning %q", *dea.Lo, *dea.Hi, dea.Clusters, dea.Warning)
	}
}

// TestTideBootstrapSeeded: the same bootstrap seed gives the same
// intervals; the SD appears with two evaluation seeds.
func TestTideBootstrapSeeded(t *testing.T) {
	var xs []tideEp
	for i, x := range twoAnchors {
		for _, seed := range []uint64{0, 1} {
			y := x
			y.seed = seed
			if seed == 1 && i == 0 {
				y.dea = 0
			}
			xs = append(xs, y)
		}
	}
	eps := tideEpisodes(TideF, xs...)
	a := analyzeTideOK(t, eps, 300)
	b := analyzeTideOK(t, eps, 300)
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Error("two analyses with one bootstrap seed differ")
	}
	dea := a.Tide.Rows[0].Overall.DEA
	if dea.Seeds != 2 || dea.SD == nil || dea.N != 12 || math.Abs(*dea.Mean-(2.0/6+1.0/6)/2) > 1e-9 {
		t.Errorf("DEA over two seeds: %+v", dea)
	}
}

// TestTideMixedProtocols: tide-f and tide-p episodes are analysed apart.
func TestTideMixedProtocols(t *testing.T) {
	eps := append(tideEpisodes(TideF, twoAnchors[0]), tideEpisodes(TideP, twoAnchors[2])...)
	if _, err := Analyze(eps, AnalyzeOptions{Resamples: 10}); err == nil || !strings.Contains(err.Error(), "two protocols") {
		t.Errorf("mixed protocols: %v", err)
	}
}

// TestTideReports: the Markdown has TIDE's tables (Table 2's metrics,
// Table 3's DEA, Table 13's and Table 14's layouts, DRR by subtype, the
// f-protocol L2-IR extra, the episode counts) with a row per report; the
// HTML is well-formed with grouped headers and the chart; the JSON leaves
// undefined cells null.
func TestTideReports(t *testing.T) {
	feps := tideEpisodes(TideF, twoAnchors...)
	// An LLM user simulator's unreadable outputs under tide-f: 3 oracle,
	// 1 solver (none under tide-p).
	feps[0].UnreadableOracle, feps[2].UnreadableOracle, feps[2].UnreadableSolver = 1, 2, 1
	f := analyzeTideOK(t, feps, 200)
	f.Tide.Asker = "chain-aware"
	if u := f.Tide.Rows[0].Unreadable; u != (UnreadableCounts{Oracle: 3, Solver: 1}) {
		t.Errorf("tide-f row's unreadable %+v", u)
	}
	var xs []tideEp
	for _, x := range twoAnchors {
		if x.st != DriftOnly {
			xs = append(xs, x)
		}
	}
	p := analyzeTideOK(t, tideEpisodes(TideP, xs...), 200)
	var md bytes.Buffer
	if err := WriteMarkdownReports(&md, []*Report{p, f}); err != nil {
		t.Fatal(err)
	}
	out := md.String()
	for _, want := range []string{
		"## TIDE-Bench: chain ambiguity and intent drift",
		"- tide: protocol tide-f (TIDE-Bench f-protocol",
		"6 task(s) evaluated (2 chain-only, 2 drift-only, 2 joint) in 2 anchor cluster(s)",
		"### TIDE-Bench metrics pooled over their sample sets: this report's summary, not a table of the paper",
		"| Corpus | Protocol | Oracle | Condition | Episodes | DEA | AR | L1-IR | L2-IRp | JIR | DRR | DRA |",
		"### DEA by sample type and drift subtype (TIDE Table 3)",
		// Table 3's layout: All per sample type, never pooled.
		"| Corpus | Protocol | Oracle | Condition | Chain-only | Drift-only Value | Drift-only Constraint | Drift-only Projection | Drift-only All | Joint Value | Joint Constraint | Joint Projection | Joint All |",
		// tide-f's DEA row: chain-only 50, drift-only value 100, constraint
		// 0, projection none, All 50; joint value 0, constraint 0 (ERROR).
		"| tide | tide-f | deterministic | asker (chain-aware) | 50.0 [",
		"### Chain-layer identification and ask rates (TIDE Table 13)",
		"| Corpus | Protocol | Oracle | Condition | Chain-only L1-IR | Chain-only L2-IRp | Chain-only JIR | Chain-only AR | Joint L1-IR | Joint L2-IRp | Joint JIR | Joint AR | Drift-only AR |",
		"### Drift handling: DRA by drift subtype, DRR (TIDE Table 14)",
		"| Corpus | Protocol | Oracle | Condition | Drift-only DRA Value | Drift-only DRA Constraint | Drift-only DRA Projection | Drift-only DRA All | Joint DRA Value | Joint DRA Constraint | Joint DRA Projection | Joint DRA All | DRR Drift-only | DRR Joint |",
		"### DRR by drift subtype: Table 14's DRR columns split as its DRA",
		"### DRR by drift subtype: Table 14's DRR columns split as its DRA (p-protocol figures)",
		"| Corpus | Protocol | Oracle | Condition | Drift-only DRR Value | Drift-only DRR Constraint | Drift-only DRR Projection | Drift-only DRR All | Joint DRR Value | Joint DRR Constraint | Joint DRR Projection | Joint DRR All |",
		"### Extra, not in TIDE's Table 2: L2 identification under the f-protocol",
		"### Episodes and those that did not complete",
		"| tide | tide-f | deterministic | asker (chain-aware) | 6 | 33.3 [",
		"| tide | tide-p | deterministic | asker | 4 | 25.0 [",
		"(n = 6)",
		"anchors]",
		"2 (1 not completed)",
		"| Corpus | Protocol | Oracle | Condition | Episodes | Completed | ERROR | Asker failed | Call failed | Episodes (not completed) by sample type Chain-only | Episodes (not completed) by sample type Drift-only | Episodes (not completed) by sample type Joint |",
		"| tide | tide-f | deterministic | asker (chain-aware) | 6 | 5 | 1 | 0 | 0 | 2 (0 not completed) | 2 (0 not completed) | 2 (1 not completed) |",
		"| Corpus | Protocol | Oracle | Condition | L2-IR (f, extra) Chain-only | L2-IR (f, extra) Joint |",
		// tide-p: the caveat, L2-IRp under the paper's heading, every other
		// metric marked a p-protocol figure.
		"**" + tidePCaveat + "**",
		"the paper reports only L2-IRp under it, the other figures are p-protocol figures, marked (p)",
		"### DEA by sample type and drift subtype (p-protocol figures; TIDE Table 3 reports the f-protocol)",
		"| Corpus | Protocol | Oracle | Condition | Chain-only (p) | Drift-only (p) Value | Drift-only (p) Constraint | Drift-only (p) Projection | Drift-only (p) All | Joint (p) Value |",
		"### Chain-layer identification and ask rates (TIDE Table 13: L2-IRp; the columns marked (p) are p-protocol figures)",
		"| Corpus | Protocol | Oracle | Condition | Chain-only L1-IR (p) | Chain-only L2-IRp | Chain-only JIR (p) | Chain-only AR (p) | Joint L1-IR (p) | Joint L2-IRp | Joint JIR (p) | Joint AR (p) | Drift-only AR (p) |",
		"### Drift handling: DRA by drift subtype, DRR (p-protocol figures; TIDE Table 14 reports the f-protocol)",
		"| Corpus | Protocol | Oracle | Condition | Drift-only DRA (p) Value |",
		"| Corpus | Protocol | Oracle | Condition | Episodes | DEA (p) | AR (p) | L1-IR (p) | L2-IRp | JIR (p) | DRR (p) | DRA (p) |",
		"counts in every table above as a failure (0)",
		"is measured under tide-p (L1 pre-filled): run eval --protocol tide-p",
		"\n### Unreadable model output\n\n" + unreadableLegend + "\n\n- " + tideFUnreadable + "\n",
		"\n### Unreadable model output\n\n" + unreadableLegend + "\n\n- " + tidePUnreadable + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Markdown lacks %q", want)
		}
	}
	if strings.Index(out, "| tide | tide-f |") > strings.Index(out, "| tide | tide-p |") {
		t.Error("tide-f rows should come before tide-p rows")
	}
	if caveat := strings.Index(out, tidePCaveat); strings.Index(out, tideFUnreadable) > caveat || strings.Index(out, tidePUnreadable) < caveat {
		t.Error("each protocol's unreadable line should be in its own tables")
	}
	checkTideProtocolSplit(t, out)
	if t.Failed() {
		t.Log(out)
	}

	var h bytes.Buffer
	if err := f.WriteHTML(&h); err != nil {
		t.Fatal(err)
	}
	ids, colspans := htmlAttrs(t, h.Bytes())
	for _, id := range []string{"chart-tide", "tide-overall", "tide-dea", "tide-chain", "tide-drift", "tide-drr", "tide-l2f", "tide-episodes", "tide-chain-notes", "unreadable"} {
		if !ids[id] {
			t.Errorf("HTML has no #%s", id)
		}
	}
	hs := h.String()
	for _, want := range []string{"Chain-layer identification and ask rates (TIDE Table 13)", "Drift-only DRA", "<th colspan=\"4\" style=\"text-align: center\">Chain-only</th>",
		"<th colspan=\"4\" style=\"text-align: center\">Joint</th>",
		"(n = 6)", "L2-IR (f, extra)", "Episodes and those that did not complete",
		"<h2>Unreadable model output</h2>", "<li>" + html.EscapeString(tideFUnreadable) + "</li>"} {
		if !strings.Contains(hs, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	if colspans < 6 {
		t.Errorf("%d grouped headers", colspans)
	}
	if strings.Contains(hs, pMarkSuffix+"<") || strings.Contains(hs, "caveat") {
		t.Error("the tide-f HTML marks p-protocol figures")
	}
	checkTidePHTML(t, p)

	var js bytes.Buffer
	if err := f.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Protocol string `json:"protocol"`
		Tide     struct {
			Rows []struct {
				Overall    map[string]any    `json:"overall"`
				ChainOnly  map[string]any    `json:"chain_only"`
				Unreadable *UnreadableCounts `json:"unreadable"`
			} `json:"rows"`
		} `json:"tide"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Protocol != TideF || len(back.Tide.Rows) != 1 {
		t.Fatalf("JSON: %s", js.Bytes())
	}
	cell := func(g map[string]any, k string) map[string]any { m, _ := g[k].(map[string]any); return m }
	ov, ch := back.Tide.Rows[0].Overall, back.Tide.Rows[0].ChainOnly
	if cell(ov, "dea")["mean"] == nil || cell(ov, "dea")["n"] != 6.0 || cell(ov, "l2_ir_p")["mean"] != nil || cell(ch, "drr")["mean"] != nil ||
		cell(ch, "drr")["reason"] == nil || ov["sample_type"] != "all" || ch["episodes"] != 2.0 {
		t.Errorf("JSON cells: dea %v, l2_ir_p %v, chain-only drr %v", ov["dea"], ov["l2_ir_p"], ch["drr"])
	}
	if u := back.Tide.Rows[0].Unreadable; u == nil || *u != (UnreadableCounts{Oracle: 3, Solver: 1}) {
		t.Errorf("JSON row's unreadable: %v", u)
	}
}

// The unreadable-output lines of TestTideReports' rows.
const (
	tideFUnreadable = "tide, tide-f, deterministic, asker (chain-aware): unreadable oracle outputs: 3; unreadable solver outputs: 1"
	tidePUnreadable = "tide, tide-p, deterministic, asker: unreadable oracle outputs: 0; unreadable solver outputs: 0"
)

// htmlAttrs checks that b is well-formed and returns its elements' ids and
// the number of colspan attributes.
func htmlAttrs(t *testing.T, b []byte) (map[string]bool, int) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	ids := map[string]bool{}
	colspans := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return ids, colspans
		}
		if err != nil {
			t.Fatalf("HTML not well-formed: %v", err)
		}
		if el, ok := tok.(xml.StartElement); ok {
			for _, a := range el.Attr {
				switch a.Name.Local {
				case "id":
					ids[a.Value] = true
				case "colspan":
					colspans++
				}
			}
		}
	}
}

// checkTideProtocolSplit: the tide-f tables carry no p mark and no tide-p
// row; the tide-p tables follow the caveat and carry no tide-f row; no
// table pools sample types under an "All" column (Table 3's old pooled
// "DEA All" is gone), and tide-p has no f-protocol extra.
func checkTideProtocolSplit(t *testing.T, out string) {
	t.Helper()
	caveat := strings.Index(out, tidePCaveat)
	if caveat < 0 {
		t.Fatal("no tide-p caveat")
	}
	fPart, pPart := out[:caveat], out[caveat:]
	if strings.Contains(fPart, pMarkSuffix+" ") || strings.Contains(fPart, "| tide | tide-p |") || strings.Contains(pPart, "| tide | tide-f |") {
		t.Error("the tide-f and tide-p tables are mixed")
	}
	if strings.Contains(out, "DEA All") || strings.Contains(out, "All DRR") || strings.Contains(pPart, "L2-IR (f, extra)") {
		t.Error("a pooled column or the f extra under tide-p is still reported")
	}
}

// checkTidePHTML: the tide-p HTML has the caveat, and the chart's and
// tables' headings marked but L2-IRp's.
func checkTidePHTML(t *testing.T, p *Report) {
	t.Helper()
	var ph bytes.Buffer
	if err := p.WriteHTML(&ph); err != nil {
		t.Fatal(err)
	}
	phs := ph.String()
	for _, want := range []string{"<strong>" + html.EscapeString(tidePCaveat) + "</strong>", "DEA (p)", ">L2-IRp</th>", ">AR (p)</th>",
		"<th colspan=\"4\" style=\"text-align: center\">Drift-only DRA (p)</th>",
		"Chain-layer identification and ask rates (TIDE Table 13: L2-IRp; the columns marked (p) are p-protocol figures)"} {
		if !strings.Contains(phs, want) {
			t.Errorf("tide-p HTML lacks %q", want)
		}
	}
	if strings.Contains(phs, "L2-IRp (p)") || strings.Contains(phs, "tide-l2f") {
		t.Error("tide-p HTML marks L2-IRp or shows the f-protocol extra")
	}

}

// TestTideConfig: what a TIDE run refuses before calling the server, and
// its defaults (the asker condition, the chain-aware baseline).
func TestTideConfig(t *testing.T) {
	three := int32(3)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Protocol: pb.Protocol_PROTOCOL_TIDE_F, Conditions: []Condition{Asker, Full}}, "the full condition does not run under tide-f"},
		{Config{Protocol: pb.Protocol_PROTOCOL_TIDE_P, Conditions: []Condition{None}}, "the none condition does not run under tide-p"},
		{Config{Protocol: pb.Protocol_PROTOCOL_TIDE_F, Conditions: []Condition{AskerStrict}}, "the asker_strict condition does not run under tide-f"},
		{Config{Protocol: pb.Protocol_PROTOCOL_TIDE_F, Patience: &three}, "patience applies to the bird-c and bird-a protocols only"},
		{Config{Protocol: pb.Protocol_PROTOCOL_TIDE_F, Solver: pb.Solver_SOLVER_LOOKUP}, "no solver"},
	} {
		tc.cfg.Dir = t.TempDir()
		if _, err := Run(context.Background(), nil, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	cfg := Config{Protocol: pb.Protocol_PROTOCOL_TIDE_P, Dir: t.TempDir()}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	if cfg.Asker == nil || cfg.Asker.Name() != DefaultTideAsker || len(cfg.Conditions) != 1 || cfg.Conditions[0] != Asker {
		t.Errorf("defaults: asker %v, conditions %v", cfg.Asker, cfg.Conditions)
	}
	if o := cfg.options(pb.OracleType_ORACLE_TYPE_DETERMINISTIC); o.GetProtocol() != pb.Protocol_PROTOCOL_TIDE_P || o.Patience != nil || o.GetReward() != pb.RewardType_REWARD_TYPE_UNSPECIFIED {
		t.Errorf("options: %v", o)
	}
}

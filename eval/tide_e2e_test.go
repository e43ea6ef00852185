package eval

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/policy"
	pb "avtgym/proto/avtgym/v1"
)

// tideServer starts an in-process server on the embedded demo corpus and
// returns it with the demo's TIDE samples (tasks tide-*), skipping the
// test while the demo has none or the server refuses the TIDE protocols.
func tideServer(t *testing.T) (*testutil.Server, []*pb.TaskSummary) {
	t.Helper()
	s := testutil.StartServer(t, app.Config{})
	all, err := policy.ListTasks(context.Background(), s.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	var tide []*pb.TaskSummary
	for _, task := range all {
		if strings.HasPrefix(task.GetTaskId(), "tide-") {
			tide = append(tide, task)
		}
	}
	if len(tide) == 0 {
		t.Fatal("the demo corpus has no TIDE sample (tide-*)")
	}
	return s, tide
}

// tideRun runs a TIDE evaluation of the demo corpus with the named
// scripted baseline, one seed, and analyzes it as the eval command does.
func tideRun(t *testing.T, s *testutil.Server, name string, p pb.Protocol, dir string) (*Result, *Report) {
	t.Helper()
	asker, err := policy.ParseTidePolicy(name)
	if err != nil {
		t.Fatal(err)
	}
	res := runOK(t, s, Config{Asker: asker, Oracles: det, Seeds: []uint64{0}, Dir: dir, Protocol: p})
	eps := readAll(t, dir)
	if len(eps) != res.Cells || res.Cells == 0 {
		t.Fatalf("%s: %d episodes, %d cells", name, len(eps), res.Cells)
	}
	for _, e := range eps {
		if !strings.HasPrefix(e.TaskID, "tide-") || e.Protocol != driver.ProtocolName(p) || e.SampleType == "" || e.Cluster == "" || e.Condition != Asker || !e.Scored() {
			t.Errorf("%s: episode %s: protocol %q, sample type %q, cluster %q, condition %s, status %s (%s)",
				name, e.TaskID, e.Protocol, e.SampleType, e.Cluster, e.Condition, e.Status, e.Error)
		}
	}
	opt := AnalyzeOptions{Resamples: 200, BootstrapSeed: 1}
	ri, err := ReadRunInfo(dir)
	if err != nil || ri == nil {
		t.Fatalf("run info: %v %v", ri, err)
	}
	ri.Apply(&opt)
	r, err := Analyze(eps, opt)
	if err != nil {
		t.Fatal(err)
	}
	if r.Tide == nil || len(r.Tide.Rows) != 1 || r.Tide.Asker != name || r.Tide.Skipped == nil || *r.Tide.Skipped != res.SkippedTasks {
		t.Fatalf("%s: report %+v", name, r.Tide)
	}
	return res, r
}

func rate(t *testing.T, what string, s TideSummary, want float64) {
	t.Helper()
	if s.Mean == nil {
		t.Errorf("%s: undefined (%s), want %v", what, s.Reason, want)
	} else if *s.Mean != want {
		t.Errorf("%s = %v, want %v (n = %d)", what, *s.Mean, want, s.N)
	}
}

// TestTideEvalScripted plays the scripted TIDE baselines on the demo's
// TIDE samples through a real server and checks the figures they imply:
// chain-aware under tide-f identifies both layers (L1-IR = JIR = 100%),
// solves every dialogue (DEA 100%) and handles every drift (DRR = DRA =
// 100%); under tide-p it identifies L2 (L2-IRp 100%); none-blind never
// asks (AR 0) nor recognises a drift (DRR 0); chain-blind resolves none
// (DRA 0). Only TIDE's samples run (under tide-p the chain-only and joint
// ones), a rerun plays nothing, and the reports have TIDE's tables.
func TestTideEvalScripted(t *testing.T) {
	s, tide := tideServer(t)
	all, err := policy.ListTasks(context.Background(), s.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	drift := 0
	for _, task := range tide {
		if task.GetSampleType() == DriftOnly {
			drift++
		}
	}

	dir := t.TempDir()
	res, r := tideRun(t, s, "chain-aware", pb.Protocol_PROTOCOL_TIDE_F, dir)
	if res.Cells != len(tide) || res.SkippedTasks != len(all)-len(tide) {
		t.Errorf("tide-f: %d cells, %d tasks skipped; want %d, %d", res.Cells, res.SkippedTasks, len(tide), len(all)-len(tide))
	}
	row := r.Tide.Rows[0]
	rate(t, "chain-only L1-IR", row.ChainOnly.L1IR, 1)
	rate(t, "chain-only JIR", row.ChainOnly.JIR, 1)
	rate(t, "joint JIR", row.Joint.JIR, 1)
	rate(t, "chain-only AR", row.ChainOnly.AR, 1)
	rate(t, "drift-only AR", row.DriftOnly.AR, 0)
	rate(t, "DEA", row.Overall.DEA, 1)
	rate(t, "DRR", row.Overall.DRR, 1)
	rate(t, "DRA", row.Overall.DRA, 1)
	if row.Overall.DEA.N != len(tide) || row.Errors != 0 || row.Overall.DEA.Clusters != r.Tide.Clusters || r.Tide.Clusters*3 != len(tide) {
		t.Errorf("tide-f: DEA over %d episodes and %d clusters, %d errors; report clusters %d, %d TIDE tasks", row.Overall.DEA.N, row.Overall.DEA.Clusters, row.Errors, r.Tide.Clusters, len(tide))
	}
	if row.Overall.L2IRp.Mean != nil {
		t.Errorf("tide-f: L2-IRp is defined: %+v", row.Overall.L2IRp)
	}
	for _, st := range row.Subtypes {
		if st.All.DRA.N > 0 {
			rate(t, st.Subtype+" DRA", st.All.DRA, 1)
		}
	}
	var md, h bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHTML(&h); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## TIDE-Bench: chain ambiguity and intent drift",
		"| Corpus | Protocol | Oracle | Condition | Chain-only L1-IR | Chain-only L2-IRp | Chain-only JIR | Chain-only AR | Joint L1-IR | Joint L2-IRp | Joint JIR | Joint AR | Drift-only AR |",
		"| Corpus | Protocol | Oracle | Condition | Drift-only DRA Value | Drift-only DRA Constraint | Drift-only DRA Projection | Drift-only DRA All |",
		"| demo | tide-f | deterministic | asker (chain-aware) | ",
		"task(s) the protocol does not serve skipped",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md.String())
		}
	}
	for _, want := range []string{"id=\"tide-chain\"", "id=\"tide-drift\"", "Chain-layer identification and ask rates (TIDE Table 13)", "Drift handling: DRA by drift subtype, DRR (TIDE Table 14)"} {
		if !strings.Contains(h.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	// Resumable: a rerun into the directory plays nothing.
	asker, _ := policy.ParseTidePolicy("chain-aware")
	if again := runOK(t, s, Config{Asker: asker, Oracles: det, Seeds: []uint64{0}, Dir: dir, Protocol: pb.Protocol_PROTOCOL_TIDE_F}); again.Played != 0 || again.Skipped != res.Cells {
		t.Errorf("rerun: played %d, skipped %d", again.Played, again.Skipped)
	}

	res, r = tideRun(t, s, "chain-aware", pb.Protocol_PROTOCOL_TIDE_P, t.TempDir())
	if res.Cells != len(tide)-drift || res.SkippedTasks != len(all)-len(tide)+drift {
		t.Errorf("tide-p: %d cells, %d skipped; want %d, %d", res.Cells, res.SkippedTasks, len(tide)-drift, len(all)-len(tide)+drift)
	}
	row = r.Tide.Rows[0]
	rate(t, "tide-p L2-IRp", row.Overall.L2IRp, 1)
	rate(t, "tide-p chain-only L2-IRp", row.ChainOnly.L2IRp, 1)
	rate(t, "tide-p joint L2-IRp", row.Joint.L2IRp, 1)
	rate(t, "tide-p DEA", row.Overall.DEA, 1)
	if row.Overall.L1IR.Mean != nil || row.DriftOnly.Episodes != 0 {
		t.Errorf("tide-p: L1-IR %+v, %d drift-only episodes", row.Overall.L1IR, row.DriftOnly.Episodes)
	}

	_, r = tideRun(t, s, "none-blind", pb.Protocol_PROTOCOL_TIDE_F, t.TempDir())
	row = r.Tide.Rows[0]
	rate(t, "none-blind AR", row.Overall.AR, 0)
	rate(t, "none-blind DRR", row.Overall.DRR, 0)
	rate(t, "none-blind DRA", row.Overall.DRA, 0)
	rate(t, "none-blind L1-IR", row.Overall.L1IR, 0)

	_, r = tideRun(t, s, "chain-blind", pb.Protocol_PROTOCOL_TIDE_F, t.TempDir())
	row = r.Tide.Rows[0]
	rate(t, "chain-blind DRA", row.Overall.DRA, 0)
	rate(t, "chain-blind drift-only DRA", row.DriftOnly.DRA, 0)
	rate(t, "chain-blind joint DRA", row.Joint.DRA, 0)
	rate(t, "chain-blind chain-only JIR", row.ChainOnly.JIR, 1)
}

package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/internal/testutil"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// demoReadings is the demo corpus's wrong-readings fixture.
const demoReadings = "../fixtures/wrong-readings/demo.json"

// birdCRun runs a bird-c evaluation of the demo corpus with asker under
// the asker and full conditions, two seeds, and analyzes it as the eval
// command does (the run directory's RunInfoFile applied).
func birdCRun(t *testing.T, s *testutil.Server, asker policy.Player, dir string) (*Result, *Report) {
	t.Helper()
	cfg := Config{Asker: asker, Oracles: det, Seeds: []uint64{0, 1}, Dir: dir, Protocol: pb.Protocol_PROTOCOL_BIRD_C,
		Conditions: []Condition{Asker, Full}}
	res := runOK(t, s, cfg)
	eps := readAll(t, dir)
	if len(eps) != res.Cells || res.Cells == 0 {
		t.Fatalf("%d episodes, %d cells", len(eps), res.Cells)
	}
	for _, e := range eps {
		if !strings.HasPrefix(e.TaskID, "followup-") || e.Protocol != BirdC {
			t.Errorf("episode %s/%s: protocol %q", e.TaskID, e.Condition, e.Protocol)
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
	return res, r
}

func mean(t *testing.T, what string, s Summary) float64 {
	t.Helper()
	if s.Mean == nil {
		t.Fatalf("%s is undefined: %s", what, s.Reason)
	}
	return *s.Mean
}

func birdCRow(t *testing.T, r *Report, cond Condition) BirdCRow {
	t.Helper()
	if r.BirdC == nil {
		t.Fatal("no bird-c section")
	}
	for _, row := range r.BirdC.Rows {
		if row.Condition == cond && row.Oracle == "deterministic" {
			return row
		}
	}
	t.Fatalf("no %s row in %+v", cond, r.BirdC.Rows)
	return BirdCRow{}
}

// TestBirdCEvalFull: under bird-c the scripted full policy solves both
// phases of every demo follow-up task: phase-1 and phase-2 SR 1, mean
// reward 1, normalised reward 100; only the tasks with a follow-up run,
// and the report says how many were skipped.
func TestBirdCEvalFull(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	res, r := birdCRun(t, s, policy.Scripted(probe.Full), t.TempDir())
	all, err := policy.ListTasks(context.Background(), s.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	followUps := len(all) - res.SkippedTasks
	if res.SkippedTasks == 0 || res.Cells != followUps*2*2 {
		t.Errorf("%d cells, %d tasks skipped of %d", res.Cells, res.SkippedTasks, len(all))
	}
	if r.Protocol != BirdC || r.BirdC.Tasks != followUps || r.BirdC.Skipped == nil || *r.BirdC.Skipped != res.SkippedTasks || len(r.Rows) != 0 {
		t.Fatalf("report: protocol %q, bird-c %+v, %d AMBITAB rows", r.Protocol, r.BirdC, len(r.Rows))
	}
	for _, cond := range []Condition{Asker, Full} {
		row := birdCRow(t, r, cond)
		for what, s := range map[string]Summary{"phase-1 SR": row.Phase1SR, "phase-2 SR": row.Phase2SR, "reward": row.Reward,
			"phase-1 SR completed": row.Phase1Completed, "reward completed": row.RewardCompleted} {
			if v := mean(t, what, s); v != 1 {
				t.Errorf("%s: %s = %v, want 1", cond, what, v)
			}
		}
		if v := mean(t, "normalised reward", row.NormalizedReward); math.Abs(v-100) > 1e-9 || *row.NormalizedReward.Lo != 100 {
			t.Errorf("%s: normalised reward %v [%v, %v], want 100", cond, v, *row.NormalizedReward.Lo, *row.NormalizedReward.Hi)
		}
		if row.Episodes != followUps*2 || row.Released != row.Episodes || row.Errors != 0 || row.Phase1SR.Clusters == 0 {
			t.Errorf("%s: %+v", cond, row)
		}
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| Corpus | Oracle | Condition | Episodes | Phase-1 SR | Phase-2 SR | Mean reward | Normalised reward |",
		"| demo | deterministic | asker (full) | ",
		" | 100.0 ± 0.0 [100.0, 100.0; ",
		" | 1.000 ± 0.000 [1.000, 1.000; ",
		"task(s) without a follow-up skipped",
		"patience",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "ΔJ_resp") {
		t.Error("the bird-c report has AMBITAB's leakage table")
	}
}

// TestBirdCEvalWrongReading: the wrong-reading asker fails phase 1 on
// every task (and so phase 2): SR 0, normalised reward 0, beside full's
// 100; the HTML report renders, well-formed (written to
// /tmp/bird-c-report.html, or $AVTGYM_HTML_OUT/bird-c-report.html).
func TestBirdCEvalWrongReading(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	w, err := policy.LoadWrongReadings(demoReadings)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, r := birdCRun(t, s, w, dir)
	asker := birdCRow(t, r, Asker)
	for what, s := range map[string]Summary{"phase-1 SR": asker.Phase1SR, "phase-2 SR": asker.Phase2SR, "reward": asker.Reward, "normalised reward": asker.NormalizedReward} {
		if v := mean(t, what, s); v != 0 {
			t.Errorf("wrong-reading: %s = %v, want 0", what, v)
		}
	}
	if asker.Released != 0 {
		t.Errorf("wrong-reading: %d follow-ups released", asker.Released)
	}
	if v := mean(t, "full's normalised reward", birdCRow(t, r, Full).NormalizedReward); math.Abs(v-100) > 1e-9 {
		t.Errorf("full: normalised reward %v", v)
	}
	var buf bytes.Buffer
	if err := r.WriteHTML(&buf); err != nil {
		t.Fatal(err)
	}
	out := "/tmp/bird-c-report.html"
	if d := os.Getenv("AVTGYM_HTML_OUT"); d != "" {
		out = filepath.Join(d, "bird-c-report.html")
	}
	_ = os.WriteFile(out, buf.Bytes(), 0o644)
	count, ids := parseHTML(t, buf.Bytes())
	if count["svg"] != 1 || count["table"] != 2 || count["style"] != 1 {
		t.Errorf("svg %d, table %d, style %d; want 1, 2, 1", count["svg"], count["table"], count["style"])
	}
	for _, id := range []string{"chart-birdc", "birdc-table", "birdc-errors"} {
		if !ids[id] {
			t.Errorf("no element with id %q", id)
		}
	}
	html := buf.String()
	for _, want := range []string{"Phase-1 SR", "Phase-2 SR", "Normalised reward", "skipped", "asker (wrong-reading)"} {
		if !strings.Contains(html, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	if count["whisker"] < 2 {
		t.Errorf("%d whiskers", count["whisker"])
	}
}

// parseHTML parses a report as strict XML and counts its elements (and
// whiskers) and collects its ids.
func parseHTML(t *testing.T, b []byte) (map[string]int, map[string]bool) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	count, ids := map[string]int{}, map[string]bool{}
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			depth++
			count[el.Name.Local]++
			for _, a := range el.Attr {
				switch {
				case a.Name.Local == "id":
					ids[a.Value] = true
				case a.Name.Local == "class" && a.Value == "whisker":
					count["whisker"]++
				case a.Name.Local == "src" || a.Name.Local == "href":
					t.Errorf("<%s> has %s=%q: the report must need no external asset", el.Name.Local, a.Name.Local, a.Value)
				}
			}
		case xml.EndElement:
			depth--
		}
	}
	if depth != 0 {
		t.Fatalf("unbalanced elements (depth %d)", depth)
	}
	return count, ids
}

// TestBirdCAnalyze checks the bird-c metrics on hand-made episodes: phase-2
// SR over every episode (a failed phase 1 is a phase-2 failure), the
// debug retry's 0.5 counted as a phase-1 success, ERROR a failure with
// zero reward (and left out of the completed rates), the normalised
// reward 100 × the mean.
func TestBirdCAnalyze(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	ep := func(task, avt string, seed uint64, status string, p1, p2 *float64) Episode {
		e := Episode{Condition: Asker, Oracle: "deterministic"}
		e.Corpus, e.TaskID, e.AVTID, e.Seed, e.Status, e.Protocol = "demo", task, avt, seed, status, BirdC
		if status != "ERROR" {
			v := 0.0
			if p1 != nil {
				v += *p1
			}
			if p2 != nil {
				v += *p2
			}
			e.Reward, e.Phase1, e.Phase2 = &v, p1, p2
		}
		return e
	}
	eps := []Episode{
		ep("a", "A", 0, "TERMINATED", f(0.7), f(0.3)), // 1.0
		ep("b", "B", 0, "TERMINATED", f(0.5), f(0)),   // 0.5, phase 2 failed
		ep("c", "C", 0, "TERMINATED", f(0), nil),      // 0, never released
		ep("d", "D", 0, "ERROR", nil, nil),            // 0
		ep("e", "E", 0, "TRUNCATED", f(0.7), f(0.2)),  // 0.9
	}
	// An LLM user simulator's unreadable outputs: 3 oracle, 1 solver.
	eps[0].UnreadableOracle, eps[1].UnreadableSolver, eps[4].UnreadableOracle = 2, 1, 1
	r, err := Analyze(eps, AnalyzeOptions{Resamples: 100, BootstrapSeed: 2, Run: &RunInfo{Protocol: BirdC, Skipped: 7}})
	if err != nil {
		t.Fatal(err)
	}
	row := birdCRow(t, r, Asker)
	near := func(what string, got, want float64) {
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	near("phase-1 SR", mean(t, "p1", row.Phase1SR), 3.0/5)
	near("phase-2 SR", mean(t, "p2", row.Phase2SR), 2.0/5)
	near("reward", mean(t, "reward", row.Reward), 2.4/5)
	near("normalised reward", mean(t, "normalised", row.NormalizedReward), 48)
	near("phase-1 SR completed", mean(t, "p1c", row.Phase1Completed), 3.0/4)
	near("reward completed", mean(t, "rc", row.RewardCompleted), 2.4/4)
	if row.Errors != 1 || row.Episodes != 5 || row.Completed != 4 || row.Released != 3 || row.Phase1SR.Clusters != 5 ||
		row.Unreadable != (UnreadableCounts{Oracle: 3, Solver: 1}) {
		t.Errorf("row %+v", row)
	}
	if lo, hi := *row.NormalizedReward.Lo, *row.NormalizedReward.Hi; math.Abs(lo-100**row.Reward.Lo) > 1e-9 || math.Abs(hi-100**row.Reward.Hi) > 1e-9 {
		t.Errorf("normalised interval [%v, %v], reward's [%v, %v]", lo, hi, *row.Reward.Lo, *row.Reward.Hi)
	}
	if r.BirdC.Tasks != 5 || *r.BirdC.Skipped != 7 || len(r.BirdC.Cells) != 1 || *r.BirdC.Cells[0].Phase2SR != 0.4 {
		t.Errorf("bird-c %+v cells %+v", r.BirdC, r.BirdC.Cells)
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	unreadable := "demo, deterministic, asker: unreadable oracle outputs: 3; unreadable solver outputs: 1"
	for _, want := range []string{"| demo | deterministic | asker | 5 | 60.0 [", " | 0.480 [", " | 48.0 [", "7 task(s) without a follow-up skipped",
		"| demo | deterministic | asker | 5 | 4 | 1 | 0 | 0 | 75.0 [",
		"\n### Unreadable model output\n\n" + unreadableLegend + "\n\n- " + unreadable + "\n"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	var js bytes.Buffer
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		BirdC struct {
			Rows []struct {
				Unreadable *UnreadableCounts `json:"unreadable"`
			} `json:"rows"`
		} `json:"bird_c"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.BirdC.Rows) != 1 || back.BirdC.Rows[0].Unreadable == nil || *back.BirdC.Rows[0].Unreadable != (UnreadableCounts{Oracle: 3, Solver: 1}) {
		t.Errorf("JSON rows' unreadable: %s", js.Bytes())
	}
	var h bytes.Buffer
	if err := r.WriteHTML(&h); err != nil {
		t.Fatal(err)
	}
	if _, ids := parseHTML(t, h.Bytes()); !ids["unreadable"] || !strings.Contains(h.String(), "<li>"+html.EscapeString(unreadable)+"</li>") {
		t.Errorf("HTML lacks the unreadable line %q", unreadable)
	}
	// Episodes of two protocols are not analyzed together.
	amb := eps[0]
	amb.Protocol, amb.TaskID, amb.AVTID = "", "z", "Z"
	if _, err := Analyze(append(eps, amb), AnalyzeOptions{Resamples: 10}); err == nil || !strings.Contains(err.Error(), "two protocols") {
		t.Errorf("mixed protocols: %v", err)
	}
}

// TestBirdCConfig: what a bird-c run refuses before playing, and a run
// directory made under other protocol settings.
func TestBirdCConfig(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	ctx := context.Background()
	bird := pb.Protocol_PROTOCOL_BIRD_C
	three, five := int32(3), int32(5)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Protocol: bird, Conditions: []Condition{None}}, "does not run under bird-c"},
		{Config{Protocol: bird, Conditions: []Condition{AskerSpec}}, "does not run under bird-c"},
		{Config{Protocol: bird, Conditions: []Condition{Asker, AskerStrict}}, "the asker_strict condition does not run under bird-c"},
		{Config{Protocol: bird, Solver: pb.Solver_SOLVER_LOOKUP}, "no solver"},
		{Config{Patience: &three}, "bird-c and bird-a protocols only"},
		{Config{Protocol: bird, Patience: &[]int32{99}[0]}, "refused"},
	} {
		tc.cfg.Dir, tc.cfg.Oracles = t.TempDir(), det
		if _, err := Run(ctx, s.Client.Env, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	dir := t.TempDir()
	cfg := Config{Protocol: bird, Patience: &three, Oracles: det, Dir: dir, Limit: 1}
	runOK(t, s, cfg)
	cfg.Patience = &five
	if _, err := Run(ctx, s.Client.Env, cfg); err == nil || !strings.Contains(err.Error(), "other settings") {
		t.Errorf("rerun with another patience: %v", err)
	}
	cfg.Patience, cfg.Protocol = nil, pb.Protocol_PROTOCOL_UNSPECIFIED
	if _, err := Run(ctx, s.Client.Env, cfg); err == nil || !strings.Contains(err.Error(), "other settings") {
		t.Errorf("rerun under ambitab: %v", err)
	}
	cfg.Patience, cfg.Protocol = &three, bird
	if res := runOK(t, s, cfg); res.Played != 0 || res.Skipped != 1 {
		t.Errorf("same rerun: %+v", res)
	}
	// A wrong-readings file that lacks a task stops the run.
	w, err := policy.LoadWrongReadings(demoReadings)
	if err != nil {
		t.Fatal(err)
	}
	delete(w.Readings(), "followup-001")
	if _, err := Run(ctx, s.Client.Env, Config{Protocol: bird, Asker: w, Oracles: det, Dir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "followup-001") || !strings.Contains(err.Error(), demoReadings) {
		t.Errorf("a missing reading: %v", err)
	}
}

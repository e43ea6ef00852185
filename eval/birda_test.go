package eval

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/policy"
	pb "avtgym/proto/avtgym/v1"
)

// birdARun runs a bird-a evaluation of the demo corpus with asker under
// the asker and full conditions, two seeds, and analyzes it as the eval
// command does.
func birdARun(t *testing.T, s *testutil.Server, asker policy.Player, dir string) (*Result, *Report, []Episode) {
	t.Helper()
	cfg := Config{Asker: asker, Oracles: det, Seeds: []uint64{0, 1}, Dir: dir, Protocol: pb.Protocol_PROTOCOL_BIRD_A,
		Conditions: []Condition{Asker, Full}}
	res := runOK(t, s, cfg)
	eps := readAll(t, dir)
	if len(eps) != res.Cells || res.Cells == 0 {
		t.Fatalf("%d episodes, %d cells", len(eps), res.Cells)
	}
	opt := AnalyzeOptions{Resamples: 200, BootstrapSeed: 1}
	ri, err := ReadRunInfo(dir)
	if err != nil || ri == nil || ri.Protocol != BirdA {
		t.Fatalf("run info: %+v %v", ri, err)
	}
	ri.Apply(&opt)
	r, err := Analyze(eps, opt)
	if err != nil {
		t.Fatal(err)
	}
	return res, r, eps
}

func birdARow(t *testing.T, r *Report, cond Condition) BirdCRow {
	t.Helper()
	if r.BirdA == nil || r.BirdC != nil {
		t.Fatalf("bird-a section %v, bird-c section %v", r.BirdA != nil, r.BirdC != nil)
	}
	for _, row := range r.BirdA.Rows {
		if row.Condition == cond && row.Oracle == "deterministic" {
			return row
		}
	}
	t.Fatalf("no %s row in %+v", cond, r.BirdA.Rows)
	return BirdCRow{}
}

// TestBirdAEvalExplorer: under bird-a the explorer (asker) and full solve
// both phases of every demo follow-up task: SR 1, reward 1, normalised
// reward 100; the report gives the mean coins spent per episode in all
// and per action type (the explorer's tools 5.5, full's none), in JSON,
// Markdown and HTML.
func TestBirdAEvalExplorer(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	dir := t.TempDir()
	res, r, eps := birdARun(t, s, policy.Explorer(), dir)
	if r.Protocol != BirdA || r.BirdA.Protocol != BirdA || r.BirdA.Skipped == nil || *r.BirdA.Skipped != res.SkippedTasks || r.BirdA.Asker != policy.ExplorerName {
		t.Fatalf("report: protocol %q, bird-a %+v", r.Protocol, r.BirdA)
	}
	// The expected mean coins per episode, from the episodes' m.
	var meanM float64
	n := 0
	for _, e := range eps {
		if e.Condition == Asker {
			meanM += float64(e.Counted)
			n++
		}
	}
	meanM /= float64(n)
	for _, cond := range []Condition{Asker, Full} {
		row := birdARow(t, r, cond)
		for what, s := range map[string]Summary{"phase-1 SR": row.Phase1SR, "phase-2 SR": row.Phase2SR, "reward": row.Reward} {
			if v := mean(t, what, s); v != 1 {
				t.Errorf("%s: %s = %v, want 1", cond, what, v)
			}
		}
		if v := mean(t, "normalised reward", row.NormalizedReward); math.Abs(v-100) > 1e-9 {
			t.Errorf("%s: normalised reward %v", cond, v)
		}
		tools := 5.5
		if cond == Full {
			tools = 0
		}
		if row.Coins == nil || math.Abs(mean(t, "coins", *row.Coins)-(tools+6+2*meanM)) > 1e-9 {
			t.Errorf("%s: coins %+v, want %v", cond, row.Coins, tools+6+2*meanM)
		}
		for a, want := range map[string]float64{"execute": tools / 5.5, "get_column_meaning": tools / 11, "submit_sql": 6, "ask": 2 * meanM} {
			if v := mean(t, a, row.CoinsByAction[a]); math.Abs(v-want) > 1e-9 {
				t.Errorf("%s: %s coins %v, want %v", cond, a, v, want)
			}
		}
	}
	if len(r.BirdA.Actions) != 9 || r.BirdA.Actions[0] != "ask" || r.BirdA.Actions[1] != "submit_sql" || r.BirdA.Actions[2] != "execute" {
		t.Errorf("actions %q", r.BirdA.Actions)
	}
	b, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(b), `"bird_a":{"protocol":"bird-a"`) || !strings.Contains(string(b), `"coins_by_action":{`) || strings.Contains(string(b), `"bird_c"`) {
		t.Errorf("report JSON: %v\n%.600s", err, b)
	}
	var md bytes.Buffer
	if err := r.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"## BIRD-Interact a-Interact",
		"| Corpus | Oracle | Condition | Episodes | Phase-1 SR | Phase-2 SR | Mean reward | Normalised reward |",
		"| demo | deterministic | asker (explorer) | ",
		"### Coins spent per episode (demo)",
		"| Corpus | Oracle | Condition | Coins spent | ask | submit_sql | execute | get_schema |",
		"no retry penalty",
		"default patience (6 coins)",
		"protocol bird-a",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	var html bytes.Buffer
	if err := r.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	out := "/tmp/bird-a-report.html"
	if d := os.Getenv("AVTGYM_HTML_OUT"); d != "" {
		out = filepath.Join(d, "bird-a-report.html")
	}
	_ = os.WriteFile(out, html.Bytes(), 0o644)
	count, ids := parseHTML(t, html.Bytes())
	if count["table"] != 3 || !ids["birda-coins"] || !ids["birdc-table"] {
		t.Errorf("tables %d, ids %v", count["table"], ids)
	}
	if !strings.Contains(html.String(), "a-Interact") || !strings.Contains(html.String(), "get_all_knowledge_definitions") {
		t.Error("the HTML lacks the a-Interact heading or the coins table")
	}
	// The rollout summary gives the same coins.
	var recs []*Episode
	for i := range eps {
		if eps[i].Condition == Asker && eps[i].Seed == 0 {
			recs = append(recs, &eps[i])
		}
	}
	rs := make([]*driver.Record, 0, len(recs))
	for _, e := range recs {
		rs = append(rs, &e.Record)
	}
	sum := SummarizeRollout("explorer", rs)
	if sum.Protocol != BirdA || sum.BirdC == nil || sum.BirdC.Phase1SR == nil || *sum.BirdC.Phase1SR != 1 || sum.BirdC.CoinsUsed == nil || sum.BirdC.CoinsByAction["get_schema"] != 1 {
		t.Errorf("rollout summary %+v", sum.BirdC)
	}
}

// TestBirdAMixedMarkdown: bird-c and bird-a reports of two corpora render
// in one document, each under its own heading.
func TestBirdAMixedMarkdown(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	mk := func(protocol string) *Report {
		e := Episode{Condition: Asker, Oracle: "deterministic"}
		e.Corpus, e.TaskID, e.AVTID, e.Status, e.Protocol = "c-"+protocol, "t", "t", "TERMINATED", protocol
		e.Reward, e.Phase1, e.Phase2 = f(1), f(0.7), f(0.3)
		if protocol == BirdA {
			e.CoinsUsed, e.CoinBudget, e.CoinsSpent = f(8), f(12), map[string]float64{"submit_sql": 6, "ask": 2}
			e.UnreadableOracle, e.UnreadableSolver = 2, 1
		}
		r, err := Analyze([]Episode{e}, AnalyzeOptions{Resamples: 10})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var md bytes.Buffer
	if err := WriteMarkdownReports(&md, []*Report{mk(BirdA), mk(BirdC)}); err != nil {
		t.Fatal(err)
	}
	s := md.String()
	ic, ia := strings.Index(s, "c-Interact"), strings.Index(s, "## BIRD-Interact a-Interact")
	if ic < 0 || ia < ic || !strings.Contains(s, "| c-bird-a | deterministic | asker | 8.00 [") {
		t.Errorf("markdown:\n%s", s)
	}
	// Each protocol's section has its own unreadable-output lines.
	uc := strings.Index(s, "- c-bird-c, deterministic, asker: unreadable oracle outputs: 0; unreadable solver outputs: 0\n")
	ua := strings.Index(s, "- c-bird-a, deterministic, asker: unreadable oracle outputs: 2; unreadable solver outputs: 1\n")
	if uc < ic || uc > ia || ua < ia || strings.Count(s, "### Unreadable model output\n\n"+unreadableLegend) != 2 {
		t.Errorf("unreadable lines misplaced (c at %d, a at %d):\n%s", uc, ua, s)
	}
}

package eval

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeRun writes episodes as an eval output directory.
func writeRun(t *testing.T, eps []Episode, asker string) string {
	t.Helper()
	dir := t.TempDir()
	var b bytes.Buffer
	for _, e := range eps {
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	if err := os.WriteFile(filepath.Join(dir, EpisodesFile), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if asker != "" {
		os.WriteFile(filepath.Join(dir, RunFile), []byte(`{"corpus":"demo","asker":"`+asker+`"}`), 0o644)
	}
	return dir
}

func readRun(t *testing.T, dir string) *CompareRun {
	t.Helper()
	r, err := ReadCompareRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCompare: two runs of the testdata episodes, B's asker better on t2
// and worse on t3, B without t6 and with a task A did not play, are
// paired on what both played; the paired differences, their task-level
// bootstrap intervals (fixed seed: the same twice), and the tasks that
// improved and regressed are as counted by hand.
func TestCompare(t *testing.T) {
	base := loadEpisodes(t, "testdata/episodes.jsonl")
	one, zero := 1.0, 0.0
	var b []Episode
	for _, e := range base {
		switch {
		case e.TaskID == "t6":
			continue // B did not play t6
		case e.Condition == Asker && e.Oracle == "deterministic" && e.TaskID == "t2" && e.Seed == 1:
			e.Success = &one // 0 in A
		case e.Condition == Asker && e.Oracle == "deterministic" && e.TaskID == "t3" && e.Seed == 1:
			e.Success = &zero // 1 in A
		case e.Condition == Asker && e.Oracle == "deterministic" && e.TaskID == "t1" && e.Seed == 2:
			e.F1 = &zero // 1 in A
		}
		b = append(b, e)
	}
	extra := base[0]
	extra.TaskID, extra.AVTID = "t9", "a9"
	b = append(b, extra)
	dirA, dirB := writeRun(t, base, "partial"), writeRun(t, b, "llm")
	ra, rb := readRun(t, dirA), readRun(t, dirB)
	if ra.Asker != "partial" || rb.Asker != "llm" || ra.Corpus != "demo" {
		t.Errorf("runs %+v, %+v", ra, rb)
	}
	c, err := Compare(ra, rb, CompareOptions{Resamples: 500, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// t6 played twice in A (asker and asker_strict, seed 1); t9 once in B.
	if c.Pairs != ra.Episodes-2 || c.OnlyA != 2 || c.OnlyB != 1 || c.Tasks != 5 {
		t.Errorf("pairs %d (A has %d), only A %d, only B %d, tasks %d", c.Pairs, ra.Episodes, c.OnlyA, c.OnlyB, c.Tasks)
	}
	var asker *CompareCell
	for i := range c.Cells {
		if c.Cells[i].Condition == Asker && c.Cells[i].Oracle == "deterministic" {
			asker = &c.Cells[i]
		}
	}
	if asker == nil {
		t.Fatal("no asker, deterministic cell")
	}
	metric := func(name string) PairedMetric {
		for _, m := range asker.Metrics {
			if m.Metric == name {
				return m
			}
		}
		t.Fatalf("no metric %s", name)
		return PairedMetric{}
	}
	// SR: the asker's deterministic episodes both played are t1–t5 in seed
	// 1 and t1–t3 in seed 2 (t6 only in A): 8 pairs, all eligible (t5's
	// ERROR is a failure in both); t2 +1, t3 −1: Δ = 0.
	sr := metric("SR")
	if sr.Pairs != 8 || sr.Tasks != 5 || sr.Diff == nil || math.Abs(*sr.Diff) > 1e-12 {
		t.Errorf("SR %+v, want 8 pairs over 5 tasks and Δ 0", sr)
	}
	if *sr.Lo > 0 || *sr.Hi < 0 || *sr.Lo >= *sr.Hi {
		t.Errorf("SR interval [%v, %v] does not hold 0 with some width", *sr.Lo, *sr.Hi)
	}
	// F1: eligible pairs t1 (both seeds), t2 (both), t5 (ERROR, counted):
	// t1 seed 2 goes 1 → 0: Δ = −1/5.
	f1 := metric("F1")
	if f1.Pairs != 5 || f1.Diff == nil || math.Abs(*f1.Diff+0.2) > 1e-12 || math.Abs(*f1.A-*f1.B-0.2) > 1e-12 {
		t.Errorf("F1 %+v, want 5 pairs and Δ −0.2", f1)
	}
	if len(asker.Improved) != 1 || asker.Improved[0].Task != "t2" || *asker.Improved[0].SR != 0.5 {
		t.Errorf("improved %+v, want t2 (SR +50)", asker.Improved)
	}
	// Regressed, most negative first: t3 (SR −50) before t1 (F1 −50).
	if len(asker.Regressed) != 2 || asker.Regressed[0].Task != "t3" || asker.Regressed[1].Task != "t1" || *asker.Regressed[1].F1 != -0.5 {
		t.Errorf("regressed %+v, want t3 then t1", asker.Regressed)
	}
	// Every other cell is unchanged: Δ 0, a zero-width interval flagged.
	for _, cell := range c.Cells {
		if cell.Condition == Asker && cell.Oracle == "deterministic" {
			continue
		}
		for _, m := range cell.Metrics {
			if m.Diff != nil && *m.Diff != 0 {
				t.Errorf("%s, %s, %s: Δ %v, want 0", cell.Condition, cell.Oracle, m.Metric, *m.Diff)
			}
			if m.Diff != nil && m.Warning == "" {
				t.Errorf("%s, %s, %s: a zero-width interval without a warning", cell.Condition, cell.Oracle, m.Metric)
			}
		}
		if len(cell.Improved)+len(cell.Regressed) != 0 {
			t.Errorf("%s, %s: changed tasks %+v %+v", cell.Condition, cell.Oracle, cell.Improved, cell.Regressed)
		}
	}
	again, _ := Compare(ra, rb, CompareOptions{Resamples: 500, Seed: 3})
	if !reflect.DeepEqual(c, again) {
		t.Error("the same runs and seed gave another comparison")
	}

	var md, h, js bytes.Buffer
	if err := c.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"- A: " + dirA + " (asker partial; ",
		"Paired by (task, seed, condition, oracle): ",
		"| Condition | Oracle | Metric | Pairs | Tasks | A | B | Δ B − A [95%] |",
		"| asker | deterministic | SR | 8 | 5 | ",
		"| asker | deterministic | F1 | 5 | ",
		"- asker, deterministic: improved t2 (SR +50.0); regressed t3 (SR -50.0); t1 (F1 -50.0)",
		"- none, deterministic: no task changed",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if err := c.WriteHTML(&h); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(h.Bytes()))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("compare.html is not well-formed: %v", err)
		}
	}
	if err := c.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Comparison
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Pairs != c.Pairs || len(back.Cells) != len(c.Cells) {
		t.Errorf("compare.json does not decode back: %v", err)
	}
}

// TestCompareErrors: every error names the directory and what it lacks.
func TestCompareErrors(t *testing.T) {
	base := loadEpisodes(t, "testdata/episodes.jsonl")
	empty := t.TempDir()
	file := filepath.Join(t.TempDir(), "x")
	os.WriteFile(file, []byte("x"), 0o644)
	blank := t.TempDir()
	os.WriteFile(filepath.Join(blank, EpisodesFile), nil, 0o644)
	for _, c := range []struct{ dir, want string }{
		{filepath.Join(empty, "nosuch"), "nosuch: no such directory"},
		{empty, empty + ": no episodes.jsonl: not an eval output directory"},
		{file, file + ": not a directory"},
		{blank, blank + ": episodes.jsonl holds no episodes"},
	} {
		if _, err := ReadCompareRun(c.dir); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadCompareRun(%s) = %v, want %q", c.dir, err, c.want)
		}
	}
	other := make([]Episode, len(base))
	copy(other, base)
	for i := range other {
		other[i].Corpus = "other"
	}
	dirA, dirO := writeRun(t, base, ""), writeRun(t, other, "")
	if _, err := Compare(readRun(t, dirA), readRun(t, dirO), CompareOptions{}); err == nil || !strings.Contains(err.Error(), dirO+` of "other"`) {
		t.Errorf("two corpora: %v", err)
	}
	shifted := make([]Episode, len(base))
	copy(shifted, base)
	for i := range shifted {
		shifted[i].Seed += 10
	}
	dirS := writeRun(t, shifted, "")
	if _, err := Compare(readRun(t, dirA), readRun(t, dirS), CompareOptions{}); err == nil || !strings.Contains(err.Error(), "played no (task, seed, condition, oracle) in common") ||
		!strings.Contains(err.Error(), "seeds 11,12") {
		t.Errorf("nothing in common: %v", err)
	}
}

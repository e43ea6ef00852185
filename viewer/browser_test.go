package viewer

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"avtgym/eval"
	"avtgym/schema"

	"github.com/chromedp/chromedp"
)

// chromiumPath is Debian's Chromium, which .ci/run installs.
const chromiumPath = "/usr/bin/chromium"

// pageWidth is the window the pages must fit without scrolling sideways.
const pageWidth = 1280

// TestBrowser drives a real headless Chromium over the viewer serving two
// 10,000-episode runs: the list and a filter, an episode, the stats and
// the comparison, each checked against numbers computed here from the
// generated records, and each checked to fit a 1280 px window.
// Screenshots go to bin/viewer/ for a look.
func TestBrowser(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Chromium is required under CI (.ci/run installs the chromium package): %v", err)
		}
		t.Skipf("no Chromium at %s (apt-get install chromium): %v", chromiumPath, err)
	}
	start := time.Now()
	const n = 10_000
	dir := t.TempDir()
	epsA := writeSynthRun(t, filepath.Join(dir, "runA", "episodes.jsonl"), 0, n, true)
	epsB := writeSynthRun(t, filepath.Join(dir, "runB", "episodes.jsonl"), 1, n, true)
	validateSample(t, filepath.Join(dir, "runA", "episodes.jsonl"), 97)
	validateSample(t, filepath.Join(dir, "runB", "episodes.jsonl"), 97)
	var runs []*Run
	for _, name := range []string{"runA", "runB"} {
		r, err := LoadRun(context.Background(), filepath.Join(dir, name), nil)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	v, err := New(runs, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	ts := httptest.NewServer(v.Handler())
	defer ts.Close()
	t.Logf("generated and loaded 2×%d episodes in %s", n, time.Since(start).Round(time.Millisecond))

	// The test runs in viewer/; bin/ is the repository's (git-ignored).
	shots, err := filepath.Abs(filepath.Join("..", "bin", "viewer"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath), chromedp.NoSandbox, chromedp.Headless,
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(pageWidth, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 50*time.Second)
	defer cancelTimeout()
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	fits := func(name string) {
		t.Helper()
		w, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth`))
		if err != nil {
			t.Fatal(err)
		}
		if w > pageWidth {
			t.Errorf("%s page: scrollWidth %d > %d (the page scrolls sideways)", name, w, pageWidth)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	do("viewport", chromedp.EmulateViewport(pageWidth, 900))

	// The list: every episode, then a filter set through the form.
	do("list", chromedp.Navigate(ts.URL+"/runs/runA"), chromedp.WaitVisible(chromedp.CSS("#episodes")))
	if got := text("#matched"); got != strconv.Itoa(n) {
		t.Errorf("list shows %s episodes, want %d", got, n)
	}
	want := 0
	for _, e := range epsA {
		if e.Status == "TERMINATED" && e.Tags[synthStepTagKey] == "4" && e.Condition == eval.Asker {
			want++
		}
	}
	if want == 0 || want == n {
		t.Fatalf("the filter matches %d of %d generated episodes: not a test of filtering", want, n)
	}
	do("filter",
		chromedp.SetValue(chromedp.CSS(`select[name=status]`), "TERMINATED"),
		chromedp.SetValue(chromedp.CSS(`select[name=condition]`), "asker"),
		chromedp.SetValue(chromedp.CSS(`input[name=tag]`), "trainer/step=4"),
		chromedp.Click(chromedp.CSS(`form.filters button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`input[name=tag][value="trainer/step=4"]`)))
	if got := text("#matched"); got != strconv.Itoa(want) {
		t.Errorf("filtered list shows %s episodes, want %d", got, want)
	}
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	if u, err := url.Parse(loc); err != nil || u.Query().Get("tag") != "trainer/step=4" || u.Query().Get("status") != "TERMINATED" {
		t.Errorf("the filter is not in the URL: %s", loc)
	}
	fits("list")

	// The first filtered episode that asked questions: transcript,
	// privileged panel, credits.
	first, row := -1, 0
	for i, e := range epsA {
		if e.Status == "TERMINATED" && e.Tags[synthStepTagKey] == "4" && e.Condition == eval.Asker {
			row++
			if len(e.Questions) > 0 {
				first = i
				break
			}
		}
	}
	if first < 0 || row > pageSize {
		t.Fatalf("no episode with questions on the filtered list's first page")
	}
	do("open episode", chromedp.Click(chromedp.CSS(fmt.Sprintf("#episodes tr:nth-child(%d) a", row+1))), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	e := epsA[first]
	turns, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#transcript .turn").length`))
	if err != nil || turns != len(e.Turns) {
		t.Errorf("episode %d shows %d turns (%v), want %d", first+1, turns, err, len(e.Turns))
	}
	trainable, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#transcript .turn .mask.trainable").length`))
	wantTrainable := 0
	for _, tn := range e.Turns {
		if tn.Role == "policy" {
			wantTrainable++
		}
	}
	if trainable != wantTrainable {
		t.Errorf("episode %d marks %d turns trainable, want %d", first+1, trainable, wantTrainable)
	}
	if priv := text("#privileged"); !strings.Contains(priv, "Reference SQL") || !strings.Contains(priv, e.Verdicts[0].Reason) {
		t.Errorf("privileged panel lacks the reference or the reason:\n%.400s", priv)
	}
	credits, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#credits tr").length - 1`))
	if credits != len(epsA[first].Questions) {
		t.Errorf("credits table has %d questions, want %d", credits, len(epsA[first].Questions))
	}
	if h1 := text("h1"); !strings.Contains(h1, e.TaskID) || !strings.Contains(h1, fmt.Sprintf("#%d", first+1)) {
		t.Errorf("episode heading %q is not episode %d (%s)", h1, first+1, e.TaskID)
	}
	fits("episode")
	do("long episode", chromedp.Navigate(fmt.Sprintf("%s/runs/runA/episodes/%d", ts.URL, longAt+1)), chromedp.WaitVisible(chromedp.CSS("#transcript")))
	fits("episode-long")

	// Stats of the whole run: the mean reward, computed here.
	do("stats", chromedp.Navigate(ts.URL+"/runs/runA/stats?by=trainer/step"), chromedp.WaitVisible(chromedp.CSS("#histogram")))
	var sum float64
	var scored int
	for _, e := range epsA {
		if (e.Status == "TERMINATED" || e.Status == "TRUNCATED") && e.Reward != nil {
			sum += *e.Reward
			scored++
		}
	}
	checkNumber(t, "stats mean reward", text("#mean-reward"), sum/float64(scored))
	fits("stats")

	// The comparison: pairs, means and the paired difference, computed
	// here; the task counts too.
	do("compare", chromedp.Navigate(ts.URL+"/compare?a=runA&b=runB"), chromedp.WaitVisible(chromedp.CSS("#tasks")))
	wantC := independentCompare(epsA, epsB)
	if got := text("#pairs"); got != strconv.Itoa(n) {
		t.Errorf("compare shows %s pairs, want %d", got, n)
	}
	if got := text("#scored-pairs"); got != strconv.Itoa(wantC.scored) {
		t.Errorf("compare shows %s scored pairs, want %d", got, wantC.scored)
	}
	checkNumber(t, "mean A", text("#mean-a"), wantC.meanA)
	checkNumber(t, "mean B", text("#mean-b"), wantC.meanB)
	checkNumber(t, "B − A", text("#diff"), wantC.meanB-wantC.meanA)
	lo, _ := strconv.ParseFloat(text("#ci-low"), 64)
	hi, _ := strconv.ParseFloat(text("#ci-high"), 64)
	if d := wantC.meanB - wantC.meanA; !(lo < d && d < hi) || hi-lo > 0.2 {
		t.Errorf("95%% interval [%g, %g] does not hold the difference %g tightly", lo, hi, d)
	}
	for id, w := range map[string]int{"#improved": wantC.improved, "#regressed": wantC.regressed, "#unchanged": wantC.unchanged} {
		if got := text(id); got != strconv.Itoa(w) {
			t.Errorf("compare %s: %s, want %d", id, got, w)
		}
	}
	fits("compare")
	t.Logf("browser test took %s; screenshots in %s", time.Since(start).Round(time.Millisecond), shots)
}

// validateSample checks every k-th line of a generated file against the
// schema, apart from the loader (which checks them all).
func validateSample(t *testing.T, path string, k int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		if line%k == 1 {
			if err := schema.ValidateRecord(sc.Bytes()); err != nil {
				t.Fatalf("%s:%d: %v", path, line, err)
			}
		}
	}
}

type compareWant struct {
	scored                         int
	meanA, meanB                   float64
	improved, regressed, unchanged int
}

// independentCompare pairs by the records' own fields, without the
// viewer's code.
func independentCompare(a, b []eval.Episode) compareWant {
	key := func(e eval.Episode) string {
		return fmt.Sprintf("%s|%d|%s|%s", e.TaskID, e.Seed, e.Condition, e.Oracle)
	}
	inB := map[string]eval.Episode{}
	for _, e := range b {
		inB[key(e)] = e
	}
	var w compareWant
	var sumA, sumB float64
	perTask := map[string][2]float64{}
	for _, ea := range a {
		eb, ok := inB[key(ea)]
		if !ok || ea.Reward == nil || eb.Reward == nil {
			continue
		}
		w.scored++
		sumA += *ea.Reward
		sumB += *eb.Reward
		d := perTask[ea.TaskID]
		d[0] += *eb.Reward - *ea.Reward
		d[1]++
		perTask[ea.TaskID] = d
	}
	w.meanA, w.meanB = sumA/float64(w.scored), sumB/float64(w.scored)
	for _, d := range perTask {
		switch delta := d[0] / d[1]; {
		case delta > 1e-9:
			w.improved++
		case delta < -1e-9:
			w.regressed++
		default:
			w.unchanged++
		}
	}
	return w
}

// checkNumber compares a number shown with four decimals to want.
func checkNumber(t *testing.T, what, shown string, want float64) {
	t.Helper()
	got, err := strconv.ParseFloat(strings.TrimPrefix(shown, "+"), 64)
	if err != nil || math.Abs(got-want) > 0.00005+1e-12 {
		t.Errorf("%s: page shows %q, want %.4f", what, shown, want)
	}
}

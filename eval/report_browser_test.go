package eval_test

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"avtgym/app"
	"avtgym/eval"
	"avtgym/internal/testutil"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// chromiumPath is the headless browser the width check runs: Debian's
// chromium. Without it the check skips, except under CI, where a report
// that no browser has measured must not pass for one that fits.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed (apt-get install -y chromium); the report's width check must run in CI")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium): skipping the report's width check in a browser")
	return ""
}

// measureScript, appended to a test copy of a report, opens every
// collapsed section and writes what the browser laid out into the DOM,
// where --dump-dom shows it: the page's scroll and client widths and, for
// each table, its own width and its .scroll box's client and scroll
// widths. The report itself has no script (TestWriteHTML).
const measureScript = `<script>
window.addEventListener('load', function () {
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  var tables = [];
  document.querySelectorAll('table').forEach(function (t) {
    var box = t.parentElement;
    tables.push({id: t.id, width: t.scrollWidth, box_client: box.clientWidth, box_scroll: box.scrollWidth});
  });
  var figures = [];
  document.querySelectorAll('figure').forEach(function (f) {
    figures.push({id: f.id, right: Math.ceil(f.getBoundingClientRect().right)});
  });
  var pre = document.createElement('pre');
  pre.id = 'avtgym-measure';
  pre.textContent = JSON.stringify({page_scroll: document.documentElement.scrollWidth,
    page_client: document.documentElement.clientWidth, tables: tables, figures: figures});
  document.body.appendChild(pre);
});
</script>`

// layout is what measureScript reports.
type layout struct {
	PageScroll int `json:"page_scroll"`
	PageClient int `json:"page_client"`
	Tables     []struct {
		ID        string `json:"id"`
		Width     int    `json:"width"`
		BoxClient int    `json:"box_client"`
		BoxScroll int    `json:"box_scroll"`
	} `json:"tables"`
	Figures []struct {
		ID    string `json:"id"`
		Right int    `json:"right"`
	} `json:"figures"`
}

// measure renders a report in headless Chromium with a 1280 px wide
// window and returns its layout.
func measure(t *testing.T, chromium string, report []byte) layout {
	t.Helper()
	dir := t.TempDir()
	page := filepath.Join(dir, "report.html")
	copy := bytes.Replace(report, []byte("</body>"), []byte(measureScript+"</body>"), 1)
	if err := os.WriteFile(page, copy, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1280,2000", "--virtual-time-budget=2000",
		"--dump-dom", "file://"+page)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	m := regexp.MustCompile(`<pre id="avtgym-measure">([^<]*)</pre>`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("chromium ran no measurement (stderr: %s)", stderr.String())
	}
	var l layout
	if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &l); err != nil {
		t.Fatalf("measurement %s: %v", m[1], err)
	}
	return l
}

// TestReportFitsBrowserWindow renders the HTML report of a realistic run
// (the demo corpus, make report-screenshot's three oracles, every
// condition, three seeds) and of the testdata episodes (undefined cells,
// notes, a row defined in one seed) in headless Chromium at a 1280 px
// wide window, and checks that the page does not scroll sideways and that
// no table scrolls inside its .scroll box: every figure is readable
// without scrolling.
func TestReportFitsBrowserWindow(t *testing.T) {
	chromium := chromiumPath(t)
	s := testutil.StartServer(t, app.Config{TestOracles: true})
	dir := t.TempDir()
	_, err := eval.Run(context.Background(), s.Client.Env, eval.Config{
		Asker: policy.Scripted(probe.NoneAdv),
		Oracles: []pb.OracleType{pb.OracleType_ORACLE_TYPE_DETERMINISTIC, pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER,
			pb.OracleType_ORACLE_TYPE_TEST_CREDIT_ALL},
		Seeds:      []uint64{0, 1, 2},
		Conditions: eval.AllConditions,
		Dir:        dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	demo, err := eval.ReadEpisodes(dir)
	if err != nil {
		t.Fatal(err)
	}
	opt := eval.AnalyzeOptions{Resamples: 200}
	om, err := eval.ReadOracleMap(dir)
	if err != nil {
		t.Fatal(err)
	}
	om.Apply(&opt)
	fixture, err := eval.ReadEpisodes(filepath.Join("testdata", "episodes.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		eps  []eval.Episode
		opt  eval.AnalyzeOptions
	}{
		{"demo", demo, opt},
		{"testdata", fixture, eval.AnalyzeOptions{Resamples: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := eval.Analyze(tc.eps, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := rep.WriteHTML(&buf); err != nil {
				t.Fatal(err)
			}
			l := measure(t, chromium, buf.Bytes())
			t.Logf("page scroll width %d (client %d); tables %+v; figures %+v", l.PageScroll, l.PageClient, l.Tables, l.Figures)
			if l.PageScroll > 1280 || l.PageScroll > l.PageClient {
				t.Errorf("the page scrolls sideways at a 1280 px window: scroll width %d, client width %d", l.PageScroll, l.PageClient)
			}
			if len(l.Tables) < 10 {
				t.Errorf("measured %d tables, want the report's ten or more", len(l.Tables))
			}
			var ids []string
			for _, tb := range l.Tables {
				ids = append(ids, tb.ID)
				if tb.BoxScroll > tb.BoxClient || tb.Width > tb.BoxClient {
					t.Errorf("table %s scrolls in its box at a 1280 px window: table %d px, box %d px (scroll %d)", tb.ID, tb.Width, tb.BoxClient, tb.BoxScroll)
				}
			}
			for _, want := range []string{"table8", "table8-diag", "by-task", "denominators"} {
				if !strings.Contains(" "+strings.Join(ids, " ")+" ", " "+want+" ") {
					t.Errorf("no table %s measured (tables %v)", want, ids)
				}
			}
			for _, f := range l.Figures {
				if f.Right > l.PageClient {
					t.Errorf("figure %s ends at %d px, past the window's %d", f.ID, f.Right, l.PageClient)
				}
			}
		})
	}
}

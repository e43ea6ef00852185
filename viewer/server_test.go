package viewer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/schema"
)

// Hostile strings a policy could write: each must reach the page only in
// its escaped form.
const (
	scriptPayload = `<script>alert("pwned")</script>`
	attrPayload   = `"><img src=x onerror=alert(1)>`
)

func serveRuns(t *testing.T, runs ...*Run) (*Viewer, http.Handler) {
	t.Helper()
	v, err := New(runs, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v, v.Handler()
}

func get(t *testing.T, h http.Handler, target string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	req.Host = "127.0.0.1:8090"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

func loadSynth(t *testing.T, name string, variant, n int) *Run {
	t.Helper()
	path := filepath.Join(t.TempDir(), name, "episodes.jsonl")
	writeSynthRun(t, path, variant, n, false)
	r, err := LoadRun(context.Background(), filepath.Dir(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRecordTextIsEscaped(t *testing.T) {
	hostile := scriptPayload + attrPayload
	e := synthEpisode(0, 3)
	e.TaskID = "task-" + hostile
	e.Questions = []string{hostile}
	e.Turns = append(e.Turns, driver.RecordTurn{Role: "policy", Kind: "question", Text: hostile},
		driver.RecordTurn{Role: "oracle", Kind: "reply", Text: hostile, Credits: []driver.RecordCredit{{Index: 0, Term: hostile, Counted: true}}},
		driver.RecordTurn{Role: "policy", Kind: "sql", Text: "SELECT '" + hostile + "'"})
	e.Verdicts = append(e.Verdicts, driver.Verdict{SQL: "SELECT '" + hostile + "'", Feedback: hostile, Reason: hostile})
	e.Tags["note"] = hostile
	e.Tags[synthStepTagKey] = hostile
	e.Error = hostile
	e.Privileged = driver.PrivilegedJSON(&pb.Privileged{Interpretation: hostile, ReferenceSql: []string{hostile},
		Ambiguities: []*pb.AmbiguityInfo{{Term: hostile, Resolution: hostile, Aliases: []string{hostile}}}})
	b, err := json.Marshal(&e)
	if err != nil {
		t.Fatal(err)
	}
	if err := schema.ValidateRecord(b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "hostile.jsonl")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := LoadRun(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	other := loadSynth(t, "other", 1, 10)
	_, h := serveRuns(t, r, other)
	for _, target := range []string{
		"/runs/hostile", "/runs/hostile/episodes/1", "/runs/hostile/stats", "/runs/hostile/stats?by=note",
		"/runs/hostile?task=" + strings.ReplaceAll(strings.ReplaceAll(hostile, "\"", "%22"), " ", "%20"),
		"/compare?a=hostile&b=other", "/",
		"/runs/hostile?tag=note%3D%3Cscript%3E",
	} {
		code, body := get(t, h, target)
		if code != http.StatusOK {
			t.Errorf("%s: status %d\n%s", target, code, body)
			continue
		}
		for _, raw := range []string{"<script", "<img", "onerror=alert(1)>", `"><img`} {
			if strings.Contains(body, raw) {
				i := strings.Index(body, raw)
				t.Errorf("%s: the page holds %q unescaped: …%s…", target, raw, body[max(0, i-80):min(len(body), i+80)])
			}
		}
	}
	_, body := get(t, h, "/runs/hostile/episodes/1")
	for _, escaped := range []string{"&lt;script&gt;alert(&#34;pwned&#34;)&lt;/script&gt;", "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"} {
		if !strings.Contains(body, escaped) {
			t.Errorf("episode page lacks the escaped form %s", escaped)
		}
	}
	// The raw record is served as JSON, never as HTML.
	req := httptest.NewRequest(http.MethodGet, "/runs/hostile/episodes/1/raw", nil)
	req.Host = "localhost"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("raw record served as %q", ct)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Errorf("CSP %q lets script run", csp)
	}
}

func TestRequestBounds(t *testing.T) {
	run := loadSynth(t, "a", 0, 120)
	_, h := serveRuns(t, run)
	for _, tc := range []struct {
		target string
		code   int
	}{
		{"/runs/a?page=999999999999999999999", http.StatusBadRequest},
		{"/runs/a?page=-1", http.StatusBadRequest},
		{"/runs/a?page=99999", http.StatusOK}, // clamped to the last page
		{"/runs/a?rmin=NaN", http.StatusBadRequest},
		{"/runs/a?rmax=1e999", http.StatusBadRequest},
		{"/runs/a?sort=drop", http.StatusBadRequest},
		{"/runs/a?task=" + strings.Repeat("x", maxParam+1), http.StatusBadRequest},
		{"/runs/a?task=" + strings.Repeat("x", maxQuery), http.StatusRequestURITooLong},
		{"/runs/a/episodes/0", http.StatusNotFound},
		{"/runs/a/episodes/121", http.StatusNotFound},
		{"/runs/a/episodes/1e3", http.StatusNotFound},
		{"/runs/nope", http.StatusNotFound},
		{"/compare?a=a", http.StatusBadRequest},
		{"/runs/a/stats?tpage=0", http.StatusBadRequest},
		{"/runs/a/stats?tpage=5000", http.StatusOK},
	} {
		if code, body := get(t, h, tc.target); code != tc.code {
			t.Errorf("%.80s: status %d, want %d\n%.300s", tc.target, code, tc.code, body)
		}
	}
	// A page past the end shows the last page.
	if _, body := get(t, h, "/runs/a?page=99999"); !strings.Contains(body, "page 3 of 3") {
		t.Error("page 99999 of 120 episodes is not shown as page 3 of 3")
	}
	// Another Host (DNS rebinding) is refused; POST is not served.
	req := httptest.NewRequest(http.MethodGet, "/runs/a", nil)
	req.Host = "evil.example:8090"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMisdirectedRequest {
		t.Errorf("Host evil.example: status %d", rec.Code)
	}
	for _, host := range []string{"localhost:8090", "[::1]:8090", "127.0.0.1"} {
		req := httptest.NewRequest(http.MethodGet, "/runs/a", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("Host %s: status %d", host, rec.Code)
		}
	}
	req = httptest.NewRequest(http.MethodPost, "/runs/a", strings.NewReader("x=1"))
	req.Host = "127.0.0.1"
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d", rec.Code)
	}
}

func TestListFiltersAndPages(t *testing.T) {
	const n = 400
	path := filepath.Join(t.TempDir(), "a.jsonl")
	eps := writeSynthRun(t, path, 0, n, true)
	run, err := LoadRun(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, h := serveRuns(t, run)
	count := func(keep func(i int) bool) int {
		c := 0
		for i := range eps {
			if keep(i) {
				c++
			}
		}
		return c
	}
	for _, tc := range []struct {
		query string
		want  int
	}{
		{"", n},
		{"status=ERROR", count(func(i int) bool { return eps[i].Status == "ERROR" })},
		{"errors=1", count(func(i int) bool { return eps[i].Status == "ERROR" })},
		{"protocol=bird-c", count(func(i int) bool { return eps[i].Protocol == "bird-c" })},
		{"protocol=ambitab", count(func(i int) bool { return eps[i].Protocol == "" })},
		{"noq=1", count(func(i int) bool { return len(eps[i].Questions) == 0 })},
		{"condition=asker&noq=1", count(func(i int) bool { return len(eps[i].Questions) == 0 && eps[i].Condition == "asker" })},
		{"task=task-0001", count(func(i int) bool { return strings.Contains(eps[i].TaskID, "task-0001") })},
		{"tag=trainer/step%3D3", count(func(i int) bool { return eps[i].Tags[synthStepTagKey] == "3" })},
		{"tag=variant", n},
		{"tag=absent", 0},
		{"rmin=0.5&rmax=0.9", count(func(i int) bool { r := eps[i].Reward; return r != nil && *r >= 0.5 && *r <= 0.9 })},
	} {
		_, body := get(t, h, "/runs/a?"+tc.query)
		want := fmt.Sprintf(`<strong id="matched">%d</strong> of %d`, tc.want, n)
		if !strings.Contains(body, want) {
			i := strings.Index(body, `id="matched"`)
			t.Errorf("?%s: want %s, page says %.60s", tc.query, want, body[max(0, i):])
		}
	}
	_, body := get(t, h, "/runs/a?page=2")
	if !strings.Contains(body, "Showing 51–100, page 2 of 8") || !strings.Contains(body, `href="/runs/a/episodes/51"`) {
		t.Error("page 2 does not show episodes 51 to 100")
	}
	_, body = get(t, h, "/runs/a?sort=-reward")
	if !strings.Contains(body, "page 1 of 8") {
		t.Error("sorted list lost its pages")
	}
}

func TestEpisodePage(t *testing.T) {
	run := loadSynth(t, "a", 0, 20)
	_, h := serveRuns(t, run)
	e := synthEpisode(0, 2) // an asker episode
	code, body := get(t, h, "/runs/a/episodes/3")
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	for _, want := range []string{`id="transcript"`, `class="turn role-policy"`, `class="mask trainable"`, `class="mask context"`,
		`id="privileged"`, `id="ambiguities"`, `id="credits"`, "Reference SQL", "customers_0", e.EpisodeUID, synthCorpusHash, synthServerRemark,
		`id="components"`, "question_f1", "verifier's reason"} {
		if !strings.Contains(body, want) {
			t.Errorf("episode page lacks %q", want)
		}
	}
	// Without privileged data there is no panel.
	e.Privileged = nil
	b, _ := json.Marshal(&e)
	path := filepath.Join(t.TempDir(), "plain.jsonl")
	os.WriteFile(path, append(b, '\n'), 0o644)
	plain, err := LoadRun(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, h = serveRuns(t, plain)
	_, body = get(t, h, "/runs/plain/episodes/1")
	if strings.Contains(body, `id="privileged"`) || !strings.Contains(body, `id="no-privileged"`) {
		t.Error("a record without privileged data shows the privileged panel")
	}
}

func TestStatsSortsTagValuesNumerically(t *testing.T) {
	run := loadSynth(t, "a", 0, 200)
	_, h := serveRuns(t, run)
	_, body := get(t, h, "/runs/a/stats?by=trainer/step")
	i2, i10 := strings.Index(body, `<td class="mono">2</td>`), strings.Index(body, `<td class="mono">10</td>`)
	if i2 < 0 || i10 < 0 || i2 > i10 {
		t.Errorf("trainer/step 2 at %d, 10 at %d: not in numeric order", i2, i10)
	}
	for _, id := range []string{`id="histogram"`, `id="databases"`, `id="tasks"`, "db_00"} {
		if !strings.Contains(body, id) {
			t.Errorf("stats page lacks %s", id)
		}
	}
}

func TestCheckListen(t *testing.T) {
	for addr, ok := range map[string]bool{"127.0.0.1:8090": true, "localhost:0": true, "[::1]:8090": true, ":8090": false, "0.0.0.0:8090": false, "192.168.1.2:80": false, "nonsense": false} {
		err := CheckListen(addr, false)
		if (err == nil) != ok {
			t.Errorf("%s: %v", addr, err)
		}
		if err != nil && !strings.Contains(err.Error(), "--insecure-listen-any") {
			t.Errorf("%s: the error does not name the flag: %v", addr, err)
		}
		if CheckListen(addr, true) != nil {
			t.Errorf("%s refused with --insecure-listen-any", addr)
		}
	}
}

func TestCompare(t *testing.T) {
	a, b := loadSynth(t, "a", 0, 300), loadSynth(t, "b", 1, 300)
	c := compareRuns(a, b)
	if c.Pairs != 300 || c.OnlyA != 0 || c.OnlyB != 0 || len(c.Tasks) != 30 || c.Improved+c.Regressed+c.Unchanged != 30 {
		t.Fatalf("pairs %d, only %d/%d, tasks %d (%d/%d/%d)", c.Pairs, c.OnlyA, c.OnlyB, len(c.Tasks), c.Improved, c.Regressed, c.Unchanged)
	}
	for i := 1; i < len(c.Tasks); i++ {
		if c.Tasks[i].Delta < c.Tasks[i-1].Delta {
			t.Fatal("tasks are not sorted by delta")
		}
	}
	if !(c.CILow <= c.Diff && c.Diff <= c.CIHigh) {
		t.Errorf("interval [%g, %g] misses the difference %g", c.CILow, c.CIHigh, c.Diff)
	}
	if again := compareRuns(a, b); again.CILow != c.CILow || again.CIHigh != c.CIHigh {
		t.Error("the bootstrap interval changes between runs (its seed is fixed)")
	}
	// A run against itself: every task unchanged, a zero interval.
	self := compareRuns(a, a)
	if self.Unchanged != 30 || self.Diff != 0 || self.CILow != 0 || self.CIHigh != 0 {
		t.Errorf("a run against itself: %d unchanged, diff %g [%g, %g]", self.Unchanged, self.Diff, self.CILow, self.CIHigh)
	}
	_, h := serveRuns(t, a, b)
	_, asc := get(t, h, "/compare?a=a&b=b")
	_, desc := get(t, h, "/compare?a=a&b=b&order=improved")
	worst, best := c.Tasks[0].Task, c.Tasks[len(c.Tasks)-1].Task
	if strings.Index(asc, worst) > strings.Index(asc, best) || strings.Index(desc, best) > strings.Index(desc, worst) {
		t.Error("the per-task order does not follow the order parameter")
	}
	if code, _ := get(t, h, "/compare?a=a&b=b&order=x"); code != http.StatusBadRequest {
		t.Errorf("order=x: status %d", code)
	}
}

// An eval run against records without condition and oracle (a rollout
// file, an episode log) pairs on task and seed.
func TestComparePairsOnTaskAndSeedWithoutLabels(t *testing.T) {
	a := loadSynth(t, "a", 0, 100)
	var lines []string
	for i := range 100 {
		e := synthEpisode(1, i)
		b, _ := json.Marshal(&e.Record)
		lines = append(lines, string(b))
	}
	path := filepath.Join(t.TempDir(), "rollout.jsonl")
	os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
	b, err := LoadRun(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := compareRuns(a, b)
	// Each (task, seed) holds two conditions in both runs: 50 keys, the
	// last episode of each used.
	if c.PairedOn != "task, seed" || c.Pairs != 50 || c.DupA != 50 || c.DupB != 50 {
		t.Errorf("paired on %q: %d pairs, %d/%d repeated", c.PairedOn, c.Pairs, c.DupA, c.DupB)
	}
	if c := compareRuns(a, a); c.PairedOn != "task, seed, condition, oracle" || c.Pairs != 100 {
		t.Errorf("two eval runs: paired on %q, %d pairs", c.PairedOn, c.Pairs)
	}
}

package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

var det = []pb.OracleType{pb.OracleType_ORACLE_TYPE_DETERMINISTIC}

func runOK(t *testing.T, s *testutil.Server, cfg Config) *Result {
	t.Helper()
	res, err := Run(context.Background(), s.Client.Env, cfg)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Failed != 0 {
		eps, _ := ReadEpisodes(cfg.Dir)
		for _, e := range eps {
			if !e.Scored() {
				t.Errorf("failed episode %s/%s/%d: %s %s", e.TaskID, e.Condition, e.Seed, e.Status, e.Error)
			}
		}
		t.Fatalf("%d failed episodes", res.Failed)
	}
	return res
}

func readAll(t *testing.T, dir string) []Episode {
	t.Helper()
	eps, err := ReadEpisodes(dir)
	if err != nil {
		t.Fatal(err)
	}
	return eps
}

// The demo corpus with every scripted condition, twice under the
// deterministic oracle: the runs agree record by record, and full gets
// recall 1 on every scored ambiguous record.
func TestDeterministicRunsAgreeAndFullRecall(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	var runs [2][]Episode
	for i := range runs {
		cfg := Config{Asker: policy.Scripted(probe.Full), Oracles: det, Seeds: []uint64{0, 1}, Dir: t.TempDir()}
		res := runOK(t, s, cfg)
		if res.Skipped != 0 || res.Played != res.Cells {
			t.Fatalf("fresh run: %+v", res)
		}
		runs[i] = readAll(t, cfg.Dir)
		if len(runs[i]) != res.Cells {
			t.Fatalf("%d episodes in the file, %d cells", len(runs[i]), res.Cells)
		}
	}
	byKey := func(eps []Episode) map[string]Episode {
		m := map[string]Episode{}
		for _, e := range eps {
			e.Record = e.Record.Replayable()
			m[Key(&e)] = e
		}
		return m
	}
	a, b := byKey(runs[0]), byKey(runs[1])
	tasks, err := policy.ListTasks(context.Background(), s.Client.Env, "demo", "")
	if err != nil {
		t.Fatal(err)
	}
	// Seven conditions: AllConditions, asker_strict included.
	if len(a) != len(tasks)*2*7 || len(a) != len(b) {
		t.Fatalf("%d and %d cells, want %d", len(a), len(b), len(tasks)*2*7)
	}
	ambiguous := 0
	for k, ea := range a {
		eb, ok := b[k]
		if !ok || !reflect.DeepEqual(ea, eb) {
			t.Fatalf("cell %q differs:\n%+v\n%+v", k, ea, eb)
		}
		if !ea.Scored() {
			t.Fatalf("cell %q not scored: %s %s", k, ea.Status, ea.Error)
		}
		if ea.Condition == Full && ea.Counted > 0 {
			ambiguous++
			if ea.Recall == nil || *ea.Recall != 1 {
				t.Errorf("full on %s seed %d: recall %v, want 1", ea.TaskID, ea.Seed, ea.Recall)
			}
			if len(ea.Questions) != ea.Counted || len(ea.Replies) != ea.Counted {
				t.Errorf("full on %s: questions %q, replies %q", ea.TaskID, ea.Questions, ea.Replies)
			}
		}
		if ea.Condition == None && (len(ea.Questions) != 0 || ea.Precision != nil || len(ea.Replies) != 0) {
			t.Errorf("none on %s asked: %+v", ea.TaskID, ea)
		}
		if ea.Success == nil {
			t.Errorf("%q: no success with the lookup solver", k)
		}
		if ea.Counted == 0 && (ea.Recall != nil || ea.F1 != nil) {
			t.Errorf("%q: recall or F1 without a counted ambiguity", k)
		}
		if ea.Condition == AskerSpec && ea.Donor == "" {
			t.Errorf("%q: no donor", k)
		}
		if ea.DB == "" || ea.AVTID == "" || ea.Corpus != "demo" {
			t.Errorf("%q: missing db, avt or corpus: %+v", k, ea)
		}
	}
	if ambiguous == 0 {
		t.Fatal("no ambiguous full episode")
	}
	if _, err := Analyze(runs[0], AnalyzeOptions{Resamples: 50}); err != nil {
		t.Errorf("Analyze of the run: %v", err)
	}
}

// cancelAfter is a ProgressSink that cancels the run after k episodes.
type cancelAfter struct {
	k, done int
	cancel  context.CancelFunc
}

func (c *cancelAfter) Start(int, int) {}
func (c *cancelAfter) Done() {
	c.done++
	if c.done == c.k {
		c.cancel()
	}
}

func TestResume(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	dir := t.TempDir()
	cfg := Config{Asker: policy.Scripted(probe.Full), Oracles: det, Seeds: []uint64{0, 1}, Limit: 4,
		Conditions: []Condition{None, Asker, Full}, Dir: dir, Concurrency: 1}
	const total, k = 4 * 2 * 3, 5
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := cfg
	first.Progress = &cancelAfter{k: k, cancel: cancel}
	res, err := Run(ctx, s.Client.Env, first)
	if err == nil || res == nil || res.Played != k {
		t.Fatalf("cancelled run: %+v, %v; want %d played and an error", res, err, k)
	}
	before, err := os.ReadFile(filepath.Join(dir, EpisodesFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(before), "\n"); n != k {
		t.Fatalf("%d lines after the cancelled run, want %d", n, k)
	}
	// A crash in the middle of a write leaves a truncated last line.
	f, _ := os.OpenFile(filepath.Join(dir, EpisodesFile), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"corpus":"demo","task_id":"shop-0`)
	f.Close()

	res = runOK(t, s, cfg)
	if res.Cells != total || res.Skipped != k || res.Played != total-k {
		t.Fatalf("resumed run: %+v; want %d cells, %d skipped, %d played", res, total, k, total-k)
	}
	after, _ := os.ReadFile(filepath.Join(dir, EpisodesFile))
	if !strings.HasPrefix(string(after), string(before)) {
		t.Error("the resumed run rewrote earlier episodes")
	}
	lines := strings.Split(strings.TrimSuffix(string(after), "\n"), "\n")
	if len(lines) != total {
		t.Fatalf("%d lines, want %d", len(lines), total)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		var e Episode
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if seen[Key(&e)] {
			t.Errorf("duplicate cell %q", Key(&e))
		}
		seen[Key(&e)] = true
	}
	// A third run plays nothing.
	if res = runOK(t, s, cfg); res.Played != 0 || res.Skipped != total {
		t.Errorf("third run: %+v", res)
	}
	// Another asker in the same directory is refused.
	other := cfg
	other.Asker = policy.Scripted(probe.None)
	if _, err := Run(context.Background(), s.Client.Env, other); err == nil || !strings.Contains(err.Error(), "other settings") {
		t.Errorf("another asker in the same directory: %v", err)
	}
}

func TestDrawDonors(t *testing.T) {
	dbOf := map[string]string{}
	var cands []string
	groups := map[string]string{}
	for i := range 40 {
		id := fmt.Sprintf("r%02d", i)
		db := []string{"a", "b", "c"}[i%3]
		dbOf[id], cands = db, append(cands, id)
		groups[id] = GroupKey(db, []string{fmt.Sprint(i % 7)})
	}
	d0, err := DrawDonors(groups, dbOf, cands, 0)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := DrawDonors(groups, dbOf, cands, 0)
	if !reflect.DeepEqual(d0, again) {
		t.Error("the same donor seed gave other donors")
	}
	perGroup := map[string]string{}
	for task, d := range d0 {
		if dbOf[d] == dbOf[task] {
			t.Errorf("%s (db %s) got donor %s on the same database", task, dbOf[task], d)
		}
		if p, ok := perGroup[groups[task]]; ok && p != d {
			t.Errorf("group %q has two donors %s and %s", groups[task], p, d)
		}
		perGroup[groups[task]] = d
	}
	// Evaluating a subset does not change a group's donor.
	sub := map[string]string{"r00": groups["r00"], "r21": groups["r21"]}
	ds, _ := DrawDonors(sub, dbOf, cands, 0)
	if ds["r00"] != d0["r00"] || ds["r21"] != d0["r21"] {
		t.Error("a subset changed donors")
	}
	d1, _ := DrawDonors(groups, dbOf, cands, 1)
	if reflect.DeepEqual(d0, d1) {
		t.Error("donor seeds 0 and 1 gave the same donors")
	}
	if _, err := DrawDonors(map[string]string{"x": "k"}, map[string]string{"x": "a", "y": "a"}, []string{"x", "y"}, 0); err == nil {
		t.Error("a single database: no error")
	}
	if GroupKey("db", []string{"b", "a", "a"}) != GroupKey("db", []string{"a", "b"}) {
		t.Error("GroupKey depends on the order of terms")
	}
}

// The spec-randomized scripted asker asks about the donor's terms, the
// donor is on another database and is the same for every seed.
func TestSpecRandomizedScripted(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	dir := t.TempDir()
	cfg := Config{Asker: policy.Scripted(probe.Full), Oracles: det, Seeds: []uint64{0, 1, 2}, DonorSeed: 7,
		Conditions: []Condition{AskerSpec}, Dir: dir}
	res := runOK(t, s, cfg)
	tasks, err := policy.ListTasks(context.Background(), s.Client.Env, "", "")
	if err != nil {
		t.Fatal(err)
	}
	dbOf := map[string]string{}
	for _, tk := range tasks {
		dbOf[tk.GetTaskId()] = tk.GetDatabase()
	}
	var donors map[string]string
	b, err := os.ReadFile(filepath.Join(dir, DonorsFile))
	if err != nil || json.Unmarshal(b, &donors) != nil || !reflect.DeepEqual(donors, res.Donors) {
		t.Fatalf("donors file %s (%v) does not match %v", b, err, res.Donors)
	}
	termsOf := map[string][]string{}
	for _, tk := range tasks {
		p, err := privileged(context.Background(), s.Client.Env, "", tk.GetTaskId())
		if err != nil {
			t.Fatal(err)
		}
		termsOf[tk.GetTaskId()] = driver.CountedTerms(p)
	}
	groupDonor := map[string]string{}
	for _, e := range readAll(t, dir) {
		if e.Donor != donors[e.TaskID] || e.Donor == "" {
			t.Errorf("%s seed %d: donor %q, file says %q", e.TaskID, e.Seed, e.Donor, donors[e.TaskID])
		}
		if dbOf[e.Donor] == e.DB {
			t.Errorf("%s: donor %s on the same database %s", e.TaskID, e.Donor, e.DB)
		}
		key := GroupKey(e.DB, termsOf[e.TaskID])
		if d, ok := groupDonor[key]; ok && d != e.Donor {
			t.Errorf("group of %s has donors %s and %s", e.TaskID, d, e.Donor)
		}
		groupDonor[key] = e.Donor
		qs := e.Questions
		want := probe.Questions(probe.Full, termsOf[e.Donor], 100)
		if !slices.Equal(qs, want[:min(len(want), len(qs))]) || (len(qs) < len(want) && e.Status != "TRUNCATED") {
			t.Errorf("%s: asked %q, want the donor's %q", e.TaskID, qs, want)
		}
	}
	// Another donor seed gives other donors; the same one, the same.
	again, err := AssignDonors(context.Background(), s.Client.Env, "demo", tasks, tasks, 7)
	if err != nil || !reflect.DeepEqual(again, donors) {
		t.Errorf("donor seed 7 again: %v %v", again, err)
	}
	if other, _ := AssignDonors(context.Background(), s.Client.Env, "demo", tasks, tasks, 8); reflect.DeepEqual(other, donors) {
		t.Error("donor seeds 7 and 8 gave the same donors")
	}
}

// viewPlayer is a stand-in for the LLM asker: it records the task view and
// request it is shown, and stops as a fallback.
type viewPlayer struct {
	mu    sync.Mutex
	views map[string]string // real task id -> task id shown
	reqs  map[string]string
}

func (v *viewPlayer) Name() string { return "view" }

func (v *viewPlayer) Play(ctx context.Context, ep *driver.Episode) error {
	real := ep.Reset().GetObservation().GetTask().GetTaskId()
	v.mu.Lock()
	v.views[real] = ep.Task().GetTaskId()
	v.reqs[real] = ep.Turns()[0].GetText()
	v.mu.Unlock()
	ep.FallbackStop = true
	return ep.Stop(ctx)
}

// A model asker under asker_spec sees the donor's task view and request,
// and its own task under asker.
func TestSpecRandomizedModelAskerView(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	vp := &viewPlayer{views: map[string]string{}, reqs: map[string]string{}}
	dir := t.TempDir()
	res := runOK(t, s, Config{Asker: vp, Oracles: det, Limit: 6, Conditions: []Condition{AskerSpec}, Dir: dir})
	for task, d := range res.Donors {
		if vp.views[task] != d {
			t.Errorf("%s: the asker saw task %q, want donor %q", task, vp.views[task], d)
		}
		gt, _ := s.Client.Env.GetTask(context.Background(), &pb.GetTaskRequest{TaskId: d})
		if vp.reqs[task] != gt.GetTask().GetRequest() {
			t.Errorf("%s: request turn %q, want the donor's %q", task, vp.reqs[task], gt.GetTask().GetRequest())
		}
	}
	for _, e := range readAll(t, dir) {
		if !e.FallbackStop || e.Donor == "" {
			t.Errorf("%s: fallback stop %v, donor %q", e.TaskID, e.FallbackStop, e.Donor)
		}
	}
	vp2 := &viewPlayer{views: map[string]string{}, reqs: map[string]string{}}
	runOK(t, s, Config{Asker: vp2, Oracles: det, Limit: 3, Conditions: []Condition{Asker}, Dir: t.TempDir()})
	for task, seen := range vp2.views {
		if seen != task {
			t.Errorf("asker condition on %s showed %s", task, seen)
		}
	}
}

func TestTrajectoryReplay(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	file := filepath.Join(t.TempDir(), "traj.jsonl")
	body := `{"task_id":"shop-001","seed":0,"questions":["Which customers do you mean by top 5 customers?","Please elaborate."]}
{"task_id":"shop-002","seed":0,"questions":[]}

{"task_id":"shop-001","seed":1,"questions":["What is the weather?"]}
`
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := LoadTrajectories(file)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := Run(context.Background(), s.Client.Env, Config{Asker: a, Oracles: det, Seeds: []uint64{0, 1}, Limit: 2, Conditions: []Condition{Asker}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 1 { // shop-002 seed 1 has no trajectory
		t.Errorf("%d failed, want 1", res.Failed)
	}
	for _, e := range readAll(t, dir) {
		qs := e.Questions
		switch {
		case e.TaskID == "shop-001" && e.Seed == 0:
			if len(qs) != 2 || qs[1] != "Please elaborate." || len(e.Replies) != 2 || e.Recall == nil || *e.Recall != 1 {
				t.Errorf("shop-001/0: %+v", e)
			}
		case e.TaskID == "shop-001" && e.Seed == 1:
			if !slices.Equal(qs, []string{"What is the weather?"}) || *e.Recall != 0 {
				t.Errorf("shop-001/1: %+v", e)
			}
		case e.TaskID == "shop-002" && e.Seed == 0:
			if len(qs) != 0 || len(e.Replies) != 0 || !e.Scored() {
				t.Errorf("shop-002/0: %+v", e)
			}
		default:
			if e.Status != "ASKER_FAILED" || !strings.Contains(e.Error, "no asker trajectory") {
				t.Errorf("%s/%d: %s %q", e.TaskID, e.Seed, e.Status, e.Error)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, EpisodesFile)); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte(`{"seed":0}`+"\n"), 0o644)
	if _, err := LoadTrajectories(bad); err == nil {
		t.Error("a trajectory without a task id loaded")
	}
}

func TestSingleDatabaseSkipsSpec(t *testing.T) {
	s := testutil.StartServer(t, app.Config{Corpora: []string{testutil.WriteTiny(t)}})
	var warn strings.Builder
	dir := t.TempDir()
	res := runOK(t, s, Config{Asker: policy.Scripted(probe.Full), Oracles: det, Dir: dir, Warn: &warn})
	// Five tasks × the six conditions left (AllConditions but asker_spec).
	if res.Cells != 5*6 || !strings.Contains(warn.String(), "asker_spec condition is skipped") {
		t.Errorf("cells %d, warning %q", res.Cells, warn.String())
	}
}

func TestParseOracle(t *testing.T) {
	for in, want := range map[string]pb.OracleType{
		"deterministic": pb.OracleType_ORACLE_TYPE_DETERMINISTIC, "HYBRID": pb.OracleType_ORACLE_TYPE_HYBRID,
		"llm_scoped": pb.OracleType_ORACLE_TYPE_LLM_SCOPED, "llm": pb.OracleType_ORACLE_TYPE_LLM,
	} {
		if got, err := ParseOracle(in); err != nil || got != want {
			t.Errorf("ParseOracle(%q) = %v, %v", in, got, err)
		}
		if got, _ := ParseOracle(in); OracleName(got) != strings.ToLower(in) {
			t.Errorf("OracleName(%v) = %q", got, OracleName(got))
		}
	}
	// Any type of the generated enum parses, the test oracles included.
	for name, v := range pb.OracleType_value {
		if v == 0 {
			continue
		}
		lower := strings.ToLower(strings.TrimPrefix(name, "ORACLE_TYPE_"))
		if got, err := ParseOracle(lower); err != nil || int32(got) != v {
			t.Errorf("ParseOracle(%q) = %v, %v", lower, got, err)
		}
	}
	for _, bad := range []string{"", "unspecified", "oracle"} {
		if _, err := ParseOracle(bad); err == nil {
			t.Errorf("ParseOracle(%q): no error", bad)
		}
	}
}

func TestProgressLine(t *testing.T) {
	var b strings.Builder
	p := NewProgress(&b)
	p.Start(10, 3)
	for range 4 {
		p.Done()
	}
	l := p.Line()
	if !strings.Contains(l, "4/10 episodes") || !strings.Contains(l, "(+3 done before)") || !strings.Contains(l, "ETA") {
		t.Errorf("line %q", l)
	}
	p.Finish()
	if !strings.HasSuffix(b.String(), "\n") || !strings.Contains(b.String(), "\r[") {
		t.Errorf("output %q", b.String())
	}
	if IsTerminal(&b) {
		t.Error("a builder is a terminal")
	}
}

package main

// The opt-in tests against a real model (make test-real-model,
// scripts/test_real_model.sh): every avtgym path that talks to a model —
// the oracle probes, the LLM oracles, the LLM solver, the LLM asker under
// each protocol and eval with an LLM oracle — run against a real
// OpenAI-compatible server (llama.cpp's, serving SmolLM2-135M-Instruct on
// CPU). A model that small answers badly; the tests assert only what must
// hold whatever it says: the server accepts every request avtgym sends,
// every episode is scored (an ERROR only where the endpoint really failed),
// no served reply quotes a reference, and a recorded run replays bit for
// bit from the response cache. Without AVTGYM_REAL_MODEL_URL they skip.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"avtgym/app"
	"avtgym/corpus"
	"avtgym/driver"
	"avtgym/engines"
	"avtgym/internal/testutil"
	"avtgym/llm"
)

// realModelEnv names the endpoint of the real model (an API root such as
// http://127.0.0.1:8080/v1); realModelNameEnv its model name (default
// "smollm2").
const (
	realModelEnv     = "AVTGYM_REAL_MODEL_URL"
	realModelNameEnv = "AVTGYM_REAL_MODEL_NAME"
)

// modelProxy stands between avtgym and the real model and keeps the facts
// the tests judge by: how many requests the server answered, rejected
// (4xx: a request it does not accept) or failed (5xx, a connection that
// broke, a call avtgym gave up on).
type modelProxy struct {
	URL string
	mu  sync.Mutex
	// requests, rejected and failed count the calls; rejections keeps the
	// first rejected bodies for the failure message.
	requests, rejected, failed int
	rejections                 []string
}

func (p *modelProxy) counts() (requests, rejected, failed int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests, p.rejected, p.failed
}

// realModel returns a proxy to the real model and its name, or skips.
func realModel(t *testing.T) (*modelProxy, string) {
	t.Helper()
	root := os.Getenv(realModelEnv)
	if root == "" {
		t.Skip(realModelEnv + " is not set: make test-real-model serves a real model and sets it")
	}
	name := os.Getenv(realModelNameEnv)
	if name == "" {
		name = "smollm2"
	}
	target, err := url.Parse(root)
	if err != nil {
		t.Fatalf("%s: %v", realModelEnv, err)
	}
	// The endpoint was named: it must answer (a dead one would only make
	// every episode an honest endpoint failure).
	resp, err := http.Get(strings.TrimSuffix(root, "/") + "/models")
	if err != nil {
		t.Fatalf("%s=%s does not answer: %v", realModelEnv, root, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s=%s: GET /models: %s", realModelEnv, root, resp.Status)
	}
	p := &modelProxy{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	rp.ModifyResponse = func(r *http.Response) error {
		p.mu.Lock()
		defer p.mu.Unlock()
		switch {
		case r.StatusCode >= 500:
			p.failed++
		case r.StatusCode >= 400:
			p.rejected++
			if len(p.rejections) < 3 {
				body, _ := httputil.DumpResponse(r, true)
				p.rejections = append(p.rejections, string(body))
			}
		}
		return nil
	}
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) {
		p.mu.Lock()
		p.failed++
		p.mu.Unlock()
		w.WriteHeader(http.StatusBadGateway)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.requests++
		p.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL + target.Path
	return p, name
}

// checkAccepted fails the test when the server rejected any request.
func (p *modelProxy) checkAccepted(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rejected > 0 {
		t.Errorf("the model server rejected %d of %d requests; the first:\n%s", p.rejected, p.requests, strings.Join(p.rejections, "\n---\n"))
	}
}

// realEndpoint is the llm.Config of the real model behind p: a small
// model on CPU answers one request at a time and loops under greedy
// decoding (docs/models.md, Settings for llama.cpp and ollama).
func realEndpoint(p *modelProxy, name string) llm.Config {
	// A CPU that is busy with other work answers slowly: the deadline
	// covers one generation on a loaded machine.
	return llm.Config{BaseURL: p.URL, Model: name, ContextTokens: 8192, RepetitionPenalty: 1.1, MaxTokens: 256, Timeout: 10 * time.Minute}
}

// referenceChecker finds a reference query of the demo corpus quoted in a
// text: any 24 characters of a task's reference SQL (spaces collapsed,
// case folded).
type referenceChecker struct{ refs map[string]string }

var spaces = regexp.MustCompile(`\s+`)

func foldSQL(s string) string {
	return strings.ToLower(spaces.ReplaceAllString(strings.TrimSpace(s), " "))
}

func demoReferences(t *testing.T) *referenceChecker {
	t.Helper()
	c, err := corpus.LoadDemo(context.Background(), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := &referenceChecker{refs: map[string]string{}}
	for _, task := range c.Tasks {
		rc.refs[task.ID] = foldSQL(task.ReferenceSQL)
	}
	return rc
}

// quotes reports whether text quotes task's reference SQL.
func (rc *referenceChecker) quotes(task, text string) bool {
	ref, t := rc.refs[task], foldSQL(text)
	const window = 24
	for i := 0; i+window <= len(ref); i++ {
		if strings.Contains(t, ref[i:i+window]) {
			return true
		}
	}
	return false
}

// realCounts are what a run's records say about the model's output.
type realCounts struct {
	episodes, scored, errors, fallbackStops, fallbackSQL, questions int
}

// checkRecords asserts what holds whatever the model wrote: every episode
// scored, or not scored only when the endpoint failed (failed > 0); no
// reply quotes the task's reference.
func checkRecords(t *testing.T, recs []driver.Record, failed int, refs *referenceChecker) realCounts {
	t.Helper()
	var c realCounts
	for _, r := range recs {
		c.episodes++
		c.questions += len(r.Questions)
		if r.FallbackStop {
			c.fallbackStops++
		}
		if r.FallbackSQL {
			c.fallbackSQL++
		}
		if r.Scored() {
			c.scored++
		} else {
			c.errors++
			if failed == 0 {
				t.Errorf("%s seed %d: status %s (%s) although every model call was answered", r.TaskID, r.Seed, r.Status, r.Error)
			}
		}
		for _, reply := range r.Replies {
			if refs.quotes(r.TaskID, reply) {
				t.Errorf("%s: a reply quotes the reference SQL: %q", r.TaskID, reply)
			}
		}
	}
	if c.scored == 0 {
		t.Errorf("none of %d episodes was scored", c.episodes)
	}
	return c
}

// realRollout runs `rollout` with args and returns its records; exit 1
// (some episodes not played) is the records' to judge.
func realRollout(t *testing.T, args ...string) []driver.Record {
	t.Helper()
	out := filepath.Join(t.TempDir(), "episodes.jsonl")
	code, stdout, stderr := runCmd(t, append([]string{"rollout", "--json", "--episodes-out", out}, args...)...)
	if code != 0 && code != 1 {
		t.Fatalf("rollout %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
	}
	if _, err := os.Stat(out); errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rollout %q wrote no records (exit %d):\n%s", args, code, stderr)
	}
	return readRecords(t, out)
}

// TestRealModelProbe: `avtgym probe` (the scoped variant, one record: a
// CPU-served model answers a few calls a minute) against the real model:
// the server accepts every request, the probes complete, and no served
// reply leaks (leak rejection is on).
func TestRealModelProbe(t *testing.T) {
	p, name := realModel(t)
	start := time.Now()
	code, stdout, stderr := runCmd(t, "probe", "--oracle-url", p.URL, "--oracle-model", name, "--oracle-context-tokens", "8192",
		"--oracle-repetition-penalty", "1.1", "--oracle-timeout", "10m", "--limit", "1", "--variants", "scoped", "--json")
	if code != 0 {
		t.Fatalf("probe: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	var out struct {
		Reports []struct {
			Variant string `json:"variant"`
			Probes  []struct {
				Probe                                                   string
				Questions, Unreadable, Routed, Refused, Leaks, FellBack int
			} `json:"probes"`
		} `json:"reports"`
		Replies llm.Stats `json:"replies"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("probe --json: %v\n%s", err, stdout)
	}
	if len(out.Reports) != 1 || out.Replies.Replies == 0 {
		t.Fatalf("probe: %d reports, %d replies", len(out.Reports), out.Replies.Replies)
	}
	var questions, unreadable, routed, refused, fellBack int
	for _, r := range out.Reports {
		for _, pr := range r.Probes {
			questions += pr.Questions
			unreadable += pr.Unreadable
			routed += pr.Routed
			refused += pr.Refused
			fellBack += pr.FellBack
			if pr.Leaks != 0 {
				t.Errorf("%s %s: %d served replies leak", r.Variant, pr.Probe, pr.Leaks)
			}
			if pr.Unreadable+pr.Routed > pr.Questions {
				t.Errorf("%s %s: %d unreadable + %d routed > %d questions", r.Variant, pr.Probe, pr.Unreadable, pr.Routed, pr.Questions)
			}
		}
	}
	p.checkAccepted(t)
	requests, _, failed := p.counts()
	t.Logf("REAL-MODEL probe: %d questions, %d unreadable, %d routed, %d refused, %d fell back; %d replies, %d cut off (%d in a loop); %d requests, %d failed; %s",
		questions, unreadable, routed, refused, fellBack, out.Replies.Replies, out.Replies.CutOff, out.Replies.CutOffRepeating, requests, failed, time.Since(start).Round(time.Second))
}

// TestRealModelOraclesAndSolver: AMBITAB episodes of the full policy with
// each LLM oracle answering and the LLM solver writing the SQL, all on the
// real model: the server accepts every request, every episode is scored,
// and no reply quotes the reference.
func TestRealModelOraclesAndSolver(t *testing.T) {
	p, name := realModel(t)
	refs := demoReferences(t)
	endpoint := realEndpoint(p, name)
	solver := endpoint
	solver.MaxTokens = 512
	srv := testutil.StartServer(t, app.Config{OracleLLM: endpoint, SolverLLM: solver, NoLLMCache: true})
	for _, oracle := range []string{"llm", "llm-scoped", "hybrid", "hybrid-scoped"} {
		t.Run(oracle, func(t *testing.T) {
			start := time.Now()
			recs := realRollout(t, "--server", srv.Addr, "--policy", "full", "--oracle", oracle, "--solver", "llm", "--limit", "2", "--concurrency", "2")
			_, _, failed := p.counts()
			c := checkRecords(t, recs, failed, refs)
			t.Logf("REAL-MODEL ambitab --oracle %s --solver llm: %d episodes, %d scored, %d not, %d questions; %s", oracle, c.episodes, c.scored, c.errors, c.questions, time.Since(start).Round(time.Second))
		})
	}
	p.checkAccepted(t)
}

// TestRealModelAsker: `rollout --policy llm` under each protocol, the real
// model asking (and writing SQL where the protocol has the policy write
// it) against the deterministic oracle: the server accepts every request,
// every episode is scored — unreadable turns end in the fallback STOP or
// SQL, which counts as the policy's outcome — and the fallbacks are
// counted.
func TestRealModelAsker(t *testing.T) {
	p, name := realModel(t)
	refs := demoReferences(t)
	srv := testutil.StartServer(t, app.Config{})
	for _, protocol := range []string{"ambitab", "bird-c", "bird-a", "tide-f", "tide-p"} {
		t.Run(protocol, func(t *testing.T) {
			start := time.Now()
			args := []string{"--server", srv.Addr, "--protocol", protocol, "--policy", "llm", "--limit", "1", "--concurrency", "1", "--timeout", "30m",
				"--asker-url", p.URL, "--asker-model", name, "--asker-max-tokens", "256", "--asker-timeout", "5m", "--asker-concurrency", "1"}
			if protocol == "bird-a" {
				// BIRD-Interact charges 0.2 coins for an output that holds
				// no action: a model that small spends its coins that way,
				// up to 5 turns a coin. The fewest coins (patience 0) keep
				// the episode to minutes.
				args = append(args, "--patience", "0")
			}
			recs := realRollout(t, args...)
			_, _, failed := p.counts()
			c := checkRecords(t, recs, failed, refs)
			t.Logf("REAL-MODEL rollout --protocol %s --policy llm: %d episodes, %d scored, %d not, %d questions, %d fallback STOPs, %d fallback SQL; %s",
				protocol, c.episodes, c.scored, c.errors, c.questions, c.fallbackStops, c.fallbackSQL, time.Since(start).Round(time.Second))
		})
	}
	p.checkAccepted(t)
}

// TestRealModelEvalReplay: a small `eval` with the LLM oracle (and its
// hybrid) on the real model, recorded in the server's response cache, then
// the same eval with --llm-replay on a fresh server over the same cache:
// the episodes and the report are bit-identical and the replay sends the
// model nothing.
func TestRealModelEvalReplay(t *testing.T) {
	p, name := realModel(t)
	refs := demoReferences(t)
	cache := filepath.Join(t.TempDir(), "llm-cache.jsonl")
	evalRun := func(args ...string) (string, string) {
		srv := testutil.StartServer(t, app.Config{OracleLLM: realEndpoint(p, name), LLMCacheFile: cache})
		defer srv.Stop(t)
		dir := t.TempDir()
		full := append([]string{"eval", "--server", srv.Addr, "--oracles", "llm", "--limit", "1", "--conditions", "asker,full", "--resamples", "100", "--quiet", "--out", dir}, args...)
		code, stdout, stderr := runCmd(t, full...)
		if code != 0 {
			t.Fatalf("eval %q: exit %d\nstdout:\n%s\nstderr:\n%s", args, code, stdout, stderr)
		}
		return dir, stdout
	}
	start := time.Now()
	first, stdout1 := evalRun()
	requests, _, failed := p.counts()
	recorded := time.Since(start)
	second, stdout2 := evalRun("--llm-replay")
	after, _, _ := p.counts()
	if after != requests {
		t.Errorf("the replay sent the model %d requests", after-requests)
	}
	for _, f := range []string{"episodes.jsonl", "report.json", "report.md"} {
		a, errA := os.ReadFile(filepath.Join(first, f))
		b, errB := os.ReadFile(filepath.Join(second, f))
		if errA != nil || errB != nil || len(a) == 0 {
			t.Fatalf("%s: %v, %v", f, errA, errB)
		}
		if f == "episodes.jsonl" {
			// Appended as episodes finish: the order is the run's, the
			// lines must be the same (but for each reset's uid and the
			// clock).
			a, b = replayableLines(t, a), replayableLines(t, b)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between the run and its replay:\n%s", f, firstDifference(a, b))
		}
	}
	if stdout1 != stdout2 {
		t.Errorf("the replay's output differs:\n%s\n---\n%s", stdout1, stdout2)
	}
	recs := readRecords(t, filepath.Join(first, "episodes.jsonl"))
	c := checkRecords(t, recs, failed, refs)
	p.checkAccepted(t)
	t.Logf("REAL-MODEL eval --oracles llm: %d episodes, %d scored, %d not; %d requests, %d failed; %s, replay %s",
		c.episodes, c.scored, c.errors, requests, failed, recorded.Round(time.Second), (time.Since(start) - recorded).Round(time.Second))
}

// firstDifference shows the first line where a and b differ.
func firstDifference(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < max(len(la), len(lb)); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  run:    %s\n  replay: %s", i+1, x, y)
		}
	}
	return "(same lines)"
}

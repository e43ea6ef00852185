package viewer

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"avtgym/driver"
	"avtgym/eval"
	pb "avtgym/proto/avtgym/v1"
)

// The synthetic runs: each task is played with seedsPerTask seeds under
// both conditions, so that episode i is task i/10, condition (i/5)%2,
// seed i%5, in both variants (runs A and B pair one to one).
const (
	seedsPerTask      = 5
	episodesPerTask   = 2 * seedsPerTask
	synthCorpus       = "synth"
	synthOracle       = "deterministic"
	synthCorpusHash   = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	synthStepTagKey   = "trainer/step"
	synthServerRemark = "viewer-test"
)

// Every longEvery-th episode, from longAt, carries unbreakable long text.
const longEvery, longAt = 97, 12

var synthConditions = [2]eval.Condition{eval.Asker, eval.None}

// synthEpisode makes episode i of a run: eval's record of a plausible
// play, schema-valid, with privileged data. variant 1 plays better on
// every third task and worse on every seventh, so that a comparison has
// improvements, regressions and unchanged tasks.
func synthEpisode(variant, i int) eval.Episode {
	rng := rand.New(rand.NewPCG(uint64(variant)+1, uint64(i)))
	task := i / episodesPerTask
	cond := synthConditions[(i/seedsPerTask)%2]
	seed := uint64(i % seedsPerTask)
	taskID := fmt.Sprintf("task-%05d", task)
	counted := 1 + task%3
	e := eval.Episode{Condition: cond, Oracle: synthOracle}
	r := &e.Record
	r.Schema, r.Writer, r.Corpus, r.TaskID = driver.RecordSchema, "eval", synthCorpus, taskID
	r.AVTID, r.DB, r.Split = fmt.Sprintf("avt-%04d", task/3), fmt.Sprintf("db_%02d", task%12), []string{"dev", "test"}[task%2]
	r.EpisodeID = fmt.Sprintf("%s/%s/%d", synthCorpus, taskID, seed)
	r.EpisodeUID = fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
	r.Seed, r.Counted = seed, counted
	if task%4 == 0 {
		r.Protocol = "bird-c"
	}
	r.Options = &driver.RecordOptions{Reward: "question_f1", Solver: "lookup", Oracle: synthOracle}
	r.Comparison = "sound"
	r.Tags = map[string]string{synthStepTagKey: strconv.Itoa((i * 7) % 20), "variant": strconv.Itoa(variant)}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(i) * time.Second)
	r.StartedAt, r.FinishedAt, r.DurationMS = start.Format(time.RFC3339Nano), start.Add(1500*time.Millisecond).Format(time.RFC3339Nano), 1500
	r.Server = &driver.ServerInfo{Version: synthServerRemark, CorpusHash: synthCorpusHash}

	questions := 0
	if cond == eval.Asker {
		questions = rng.IntN(5)
	}
	terms := make([]string, counted)
	var ambs []*pb.AmbiguityInfo
	for k := range counted {
		terms[k] = fmt.Sprintf("term%d", k)
		ambs = append(ambs, &pb.AmbiguityInfo{Index: int32(k), Term: terms[k], Counted: true, Resolution: fmt.Sprintf("%s means column c%d", terms[k], k), Kind: pb.AmbiguityKind_AMBIGUITY_KIND_CRITICAL})
	}
	r.Turns = append(r.Turns, driver.RecordTurn{Role: "environment", Kind: "request", Text: fmt.Sprintf("Show the %s of every customer in %s, please.", terms[0], r.DB)})
	r.Questions, r.Replies, r.CreditedTerms = []string{}, []string{}, []string{}
	credited := map[string]bool{}
	for q := range questions {
		term := terms[q%counted]
		question := fmt.Sprintf("Question %d: what does %q mean here?", q+1, term)
		reply := fmt.Sprintf("By %s I mean column c%d.", term, q%counted)
		r.Questions, r.Replies = append(r.Questions, question), append(r.Replies, reply)
		r.Turns = append(r.Turns,
			driver.RecordTurn{Role: "policy", Kind: "question", Text: question},
			driver.RecordTurn{Role: "oracle", Kind: "reply", Text: reply, Credits: []driver.RecordCredit{{Index: int32(q % counted), Term: term, Counted: true}}})
		if !credited[term] {
			credited[term] = true
			r.CreditedTerms = append(r.CreditedTerms, term)
		}
	}
	reference := fmt.Sprintf("SELECT c0 FROM customers_%d WHERE region = 'north'", task)
	sql := reference
	if rng.IntN(3) == 0 {
		sql = fmt.Sprintf("SELECT c1 FROM customers_%d", task)
	}
	if i%longEvery == longAt {
		// Text with no place to break, as policies write it: the pages
		// must wrap it inside its box, never widen the page.
		long := strings.Repeat("wide_column_name_", 150)
		sql = "SELECT " + long + " FROM customers"
		reference = "SELECT " + long + "_ref FROM customers"
		r.Tags["note"] = strings.Repeat("x", 256)
		r.Turns[0].Text += " " + long
	}
	r.Turns = append(r.Turns,
		driver.RecordTurn{Role: "policy", Kind: "sql", Text: sql},
		driver.RecordTurn{Role: "environment", Kind: "feedback", Text: "The SQL ran."})
	reason := "results match the reference"
	if sql != reference {
		reason = "result differs from the reference: 3 rows missing"
	}
	r.Verdicts = []driver.Verdict{{SQL: sql, Feedback: "The SQL ran.", Reason: reason}}
	r.Privileged = driver.PrivilegedJSON(&pb.Privileged{
		AvtId: r.AVTID, Interpretation: fmt.Sprintf("%s as column c0", terms[0]), Ambiguities: ambs,
		ReferenceSql: []string{reference}, VerifierReason: reason,
	})

	switch p := rng.Float64(); {
	case p < 0.05:
		r.Status, r.Error = "ERROR", "the solver failed"
		return e
	case p < 0.12:
		r.Status = "TRUNCATED"
	default:
		r.Status = "TERMINATED"
	}
	hits := min(len(credited), counted)
	precision, recall := 0.0, float64(hits)/float64(counted)
	if questions > 0 {
		precision = float64(hits) / float64(questions)
	}
	f1 := 0.0
	if precision+recall > 0 {
		f1 = 2 * precision * recall / (precision + recall)
	}
	pSuccess := 0.3 + 0.1*float64(questions)
	if variant == 1 && task%3 == 0 {
		pSuccess += 0.3
	}
	if variant == 1 && task%7 == 0 {
		pSuccess -= 0.25
	}
	outcome := 0.0
	if rng.Float64() < pSuccess {
		outcome = 1
	}
	reward := 0.5*outcome + 0.5*f1
	r.Components = map[string]float64{"outcome": outcome, "question_f1": f1, "precision": precision, "recall": recall}
	r.Reward, r.Precision, r.Recall, r.F1, r.Success = &reward, &precision, &recall, &f1, &outcome
	if questions == 0 {
		r.Precision = nil
	}
	return e
}

// writeSynthRun writes n episodes of variant to path, one JSON line each,
// and returns them when keep is set.
func writeSynthRun(tb testing.TB, path string, variant, n int, keep bool) []eval.Episode {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	var out []eval.Episode
	for i := range n {
		e := synthEpisode(variant, i)
		if err := enc.Encode(&e); err != nil {
			tb.Fatal(err)
		}
		if keep {
			out = append(out, e)
		}
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return out
}

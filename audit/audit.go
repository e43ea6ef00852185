// Package audit checks a loaded corpus for internal consistency: every
// record's reference passes its own verifier when submitted through the
// environment; within an AVT, the interpretations can be told apart: their
// references and raw results differ and one interpretation's reference
// fails on another's record; the deterministic oracle gives the scripted
// probes of PROTOCOL.md §5 their required recall and precision; no public
// field of a record contains its reference SQL or any resolution text of
// the corpus, nor a paraphrase of a resolution on its database
// (paraphrase.go); every follow-up's reference passes its own verifier on
// the state the record's phase-1 reference leaves; TIDE records' chain
// alternatives and drift turns change the result as they claim (tide.go);
// and, given the models' context lengths, every record's base prompts fit
// them. It is what `avtgym corpus check` runs; see docs/corpus-check.md.
package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"avtgym/corpus"
	"avtgym/driver"
	"avtgym/env"
	"avtgym/internal/parallel"
	"avtgym/oracle"
	"avtgym/policy"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

// Check names one of the audit's checks.
type Check string

// The checks, in the order of the summary table.
const (
	// Reference: the record's reference SQL, submitted through the
	// environment, succeeds (outcome 1). Unit: a record.
	Reference Check = "reference"
	// Cross: for an ordered pair (i, j) of interpretations of one AVT, the
	// two references differ (after white-space normalisation), their raw
	// results are not identical (same rows in the same order), and j's
	// reference submitted to i's record fails (outcome 0). Interpretations
	// that cannot be told apart are a failure, never skipped. Unit: a pair.
	Cross Check = "cross_interpretation"
	// Oracle: on a record with counted ambiguities, the full and full_adv
	// policies reach recall = precision = 1 and none_adv recall 0 under
	// the deterministic oracle. Records without counted ambiguities are
	// skipped. Unit: a record.
	Oracle Check = "oracle_probes"
	// Leak: no public field of the record contains its reference SQL or
	// a resolution text of any record of the corpus, nor a paraphrase of a
	// resolution of a record on its database (paraphrase.go). Unit: a
	// record.
	Leak Check = "public_leak"
	// FollowUp: a record's follow-up reference passes its own verifier on
	// the state the record's phase-1 reference leaves (PROTOCOL.md §8):
	// BIRD-Interact's preparation — the record's setup, its reference and
	// cleanup — then the follow-up's tests, checks or result comparison.
	// Records without a follow-up are skipped. Unit: a record.
	FollowUp Check = "follow_up"
	// Context: the record's base prompts (no question, no dialogue) fit
	// the model contexts given in Options: each LLM oracle stage and the
	// LLM solver's (with its schema cut). Skipped when no context is
	// given. Unit: a record.
	Context Check = "context"
)

// Checks lists the checks in table order.
var Checks = []Check{Reference, Cross, Oracle, FollowUp, ChainDrift, Leak, Context}

// DefaultMinResolutionLen is the shortest resolution text (in bytes, after
// normalisation) that the leak check searches for: shorter ones ("Yes.",
// "The year 2024") are too likely to occur in public text by chance.
const DefaultMinResolutionLen = 12

// Options configure Run.
type Options struct {
	// Workers is how many units run at once; 0 means GOMAXPROCS.
	Workers int
	// Limits bound every query; zero means sqlexec.DefaultLimits().
	Limits sqlexec.Limits
	// MinResolutionLen is the shortest normalised resolution the leak
	// check searches for; 0 means DefaultMinResolutionLen.
	MinResolutionLen int
	// Progress, when set, is called after each unit (a record for one
	// check, or a pair) with the number done and the total. Calls come
	// from several goroutines but never at once, with done increasing.
	// The context check, which runs no query, is not reported.
	Progress func(done, total int)
	// OracleContextTokens, when positive, is the LLM oracles' context
	// length (serve --oracle-context-tokens): the context check reports
	// records whose base prompts for an oracle stage exceed it.
	OracleContextTokens int
	// SolverContextTokens, when positive, is the LLM solver's context
	// length (serve --solver-context-tokens), and SolverMaxTokens its
	// completion limit (0: llm.DefaultMaxTokens): the context check
	// reports tasks whose solver prompt without dialogue exceeds it.
	SolverContextTokens int
	SolverMaxTokens     int
}

// Count is one row of the summary table. Checked = Passed + Failed +
// Skipped.
type Count struct {
	Checked, Passed, Failed, Skipped int
}

// Finding is one failed unit: a record (located in its records file) and
// what is wrong with it.
type Finding struct {
	// Check is the check that failed.
	Check Check
	// TaskID is the record's id.
	TaskID string
	// File and Line locate the record.
	File string
	Line int
	// Msg says what is wrong.
	Msg string
}

// String formats the finding as "file:line: check: message".
func (f Finding) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", f.File, f.Line, f.Check, f.Msg)
}

// Report is the result of an audit.
type Report struct {
	// Corpus is the corpus name; Tasks and AVTs its sizes.
	Corpus string
	Tasks  int
	AVTs   int
	// Counts holds one row per check.
	Counts map[Check]Count
	// Findings are the failures, sorted by file, line and check.
	Findings []Finding
	// Elapsed is the wall time of the audit; LeakSearch the part spent
	// building and running the leak search.
	Elapsed    time.Duration
	LeakSearch time.Duration
}

// OK reports whether every check passed on every unit.
func (r *Report) OK() bool {
	for _, c := range r.Counts {
		if c.Failed > 0 {
			return false
		}
	}
	return true
}

// WriteTable writes the summary table: one row per check with the counts
// of units checked, passed, failed and skipped, and a verdict line.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "%-22s %8s %8s %8s %8s\n", "check", "checked", "passed", "failed", "skipped")
	for _, ch := range Checks {
		c := r.Counts[ch]
		fmt.Fprintf(w, "%-22s %8d %8d %8d %8d\n", ch, c.Checked, c.Passed, c.Failed, c.Skipped)
	}
	verdict := "PASS"
	if !r.OK() {
		verdict = fmt.Sprintf("FAIL (%d finding(s))", len(r.Findings))
	}
	fmt.Fprintf(w, "corpus %q: %d records, %d AVTs: %s in %s (leak search %s)\n", r.Corpus, r.Tasks, r.AVTs, verdict,
		r.Elapsed.Round(time.Millisecond), r.LeakSearch.Round(time.Microsecond))
}

// verdict is a unit's outcome.
type verdict int

const (
	pass verdict = iota
	fail
	skip
)

// result is what one unit returns.
type result struct {
	check    Check
	verdict  verdict
	findings []Finding
}

// auditor carries one Run.
type auditor struct {
	c   *corpus.Corpus
	env *env.Env
	opt Options
	raw rawCache
	lk  *leakIndex
}

// Run audits c. The returned error is reserved for failures to run the
// audit at all (the environment cannot be built, ctx ended); a failing
// corpus is a Report whose OK is false.
func Run(ctx context.Context, c *corpus.Corpus, opt Options) (*Report, error) {
	start := time.Now()
	if opt.Workers <= 0 {
		opt.Workers = runtime.GOMAXPROCS(0)
	}
	if opt.Limits == (sqlexec.Limits{}) {
		opt.Limits = sqlexec.DefaultLimits()
	}
	if opt.MinResolutionLen <= 0 {
		opt.MinResolutionLen = DefaultMinResolutionLen
	}
	e, err := inProcess(c, opt.Limits)
	if err != nil {
		return nil, err
	}
	a := &auditor{c: c, env: e, opt: opt, raw: rawCache{m: map[rawKey]*rawEntry{}}}
	leakStart := time.Now()
	a.lk = buildLeakIndex(c, opt.MinResolutionLen)
	leakBuild := time.Since(leakStart)

	var units []func(context.Context) result
	for _, t := range c.Tasks {
		units = append(units,
			func(ctx context.Context) result { return a.checkReference(ctx, t) },
			func(ctx context.Context) result { return a.checkOracle(ctx, t) },
			func(ctx context.Context) result { return a.checkFollowUp(ctx, t) },
			func(ctx context.Context) result { return a.checkLeak(t) },
		)
	}
	tideUnits, tideSkipped := a.chainDriftUnits() // tide.go
	units = append(units, tideUnits...)
	seenAVT := map[string]bool{}
	for _, t := range c.Tasks {
		if seenAVT[t.AVTID] {
			continue
		}
		seenAVT[t.AVTID] = true
		ts := c.Interpretations(t.AVTID)
		for _, ti := range ts {
			for _, tj := range ts {
				if ti != tj {
					units = append(units, func(ctx context.Context) result { return a.checkCross(ctx, ti, tj) })
				}
			}
		}
	}

	results := make([]result, len(units))
	var progMu sync.Mutex
	done := 0
	err = parallel.For(ctx, len(units), opt.Workers, func(ctx context.Context, i int) error {
		results[i] = units[i](ctx)
		progMu.Lock()
		done++
		if opt.Progress != nil {
			opt.Progress(done, len(units))
		}
		progMu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, t := range c.Tasks {
		results = append(results, a.checkContext(t))
	}
	results = append(results, tideSkipped...)

	r := &Report{Corpus: c.Name, Tasks: len(c.Tasks), AVTs: c.AVTCount(), Counts: map[Check]Count{}}
	for _, ch := range Checks {
		r.Counts[ch] = Count{}
	}
	for _, res := range results {
		cnt := r.Counts[res.check]
		cnt.Checked++
		switch res.verdict {
		case pass:
			cnt.Passed++
		case fail:
			cnt.Failed++
		case skip:
			cnt.Skipped++
		}
		r.Counts[res.check] = cnt
		r.Findings = append(r.Findings, res.findings...)
	}
	order := map[Check]int{}
	for i, ch := range Checks {
		order[ch] = i
	}
	sort.SliceStable(r.Findings, func(i, j int) bool {
		a, b := r.Findings[i], r.Findings[j]
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		if a.Check != b.Check {
			return order[a.Check] < order[b.Check]
		}
		return a.Msg < b.Msg
	})
	r.LeakSearch = leakBuild + time.Duration(a.lk.searchNanos.Load())
	r.Elapsed = time.Since(start)
	return r, nil
}

// inProcess builds the environment the audit plays its episodes in: the
// corpus alone, with the deterministic oracle, in this process.
func inProcess(c *corpus.Corpus, lim sqlexec.Limits) (*env.Env, error) {
	sealer, err := env.NewSealer(env.RandomKey())
	if err != nil {
		return nil, err
	}
	e, err := env.New(env.Config{
		Corpora: []*corpus.Corpus{c},
		Sealer:  sealer,
		Oracles: map[pb.OracleType]env.Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()},
		Limits:  lim,
	})
	if err != nil {
		return nil, fmt.Errorf("audit: building the environment: %w", err)
	}
	return e, nil
}

// Probes runs the oracle_probes check alone on every record of c (PROTOCOL.md
// §3's required property of the deterministic oracle): the findings of
// records where full or full_adv fall short of recall = precision = 1 or
// none_adv earns recall. It is what `corpus validate` and the importers
// check before they call a corpus valid.
func Probes(ctx context.Context, c *corpus.Corpus) ([]Finding, error) {
	e, err := inProcess(c, sqlexec.DefaultLimits())
	if err != nil {
		return nil, err
	}
	a := &auditor{c: c, env: e}
	var fs []Finding
	for _, t := range c.Tasks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fs = append(fs, a.checkOracle(ctx, t).findings...)
	}
	return fs, nil
}

// Problems turns findings into the corpus loader's problems (file:line:
// field: message), the form importers report.
func Problems(fs []Finding) []corpus.Problem {
	ps := make([]corpus.Problem, len(fs))
	for i, f := range fs {
		ps[i] = corpus.Problem{File: f.File, Line: f.Line, Field: string(f.Check), Msg: f.Msg}
	}
	return ps
}

func finding(ch Check, t *corpus.Task, format string, args ...any) Finding {
	return Finding{Check: ch, TaskID: t.ID, File: t.File, Line: t.Line, Msg: fmt.Sprintf(format, args...)}
}

func failed(ch Check, t *corpus.Task, format string, args ...any) result {
	return result{check: ch, verdict: fail, findings: []Finding{finding(ch, t, format, args...)}}
}

// submit plays one episode on t through the environment: reset with the
// outcome reward and the client as solver, then submit sql. It returns the
// outcome component and the verifier's reason; problem is set instead when
// the episode did not end normally (an environment error).
func (a *auditor) submit(ctx context.Context, t *corpus.Task, sql string) (outcome float64, reason, problem string) {
	ep, err := driver.Start(ctx, a.env, &pb.ResetRequest{
		Corpus: a.c.Name, TaskId: t.ID, IncludePrivileged: true,
		Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_CLIENT},
	})
	if err != nil {
		return 0, "", err.Error()
	}
	if err := ep.SubmitSQL(ctx, sql); err != nil {
		return 0, "", err.Error()
	}
	sr := ep.Last()
	if !sr.GetDone() {
		return 0, "", "the episode is not done after submit_sql"
	}
	if st := sr.GetStatus(); st != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
		return 0, "", fmt.Sprintf("the episode ended %s: %s", st, sr.GetPrivileged().GetVerifierReason())
	}
	v, ok := sr.GetReward().GetComponents()["outcome"]
	if !ok {
		return 0, "", "the reward has no outcome component"
	}
	return v, sr.GetPrivileged().GetVerifierReason(), ""
}

// checkReference submits t's own reference to t.
func (a *auditor) checkReference(ctx context.Context, t *corpus.Task) result {
	v, reason, problem := a.submit(ctx, t, t.ReferenceSQL)
	if problem != "" {
		return failed(Reference, t, "submitting the reference: %s", problem)
	}
	if v != 1 {
		return failed(Reference, t, "the reference fails its own verifier (outcome %v): %s", v, reason)
	}
	return result{check: Reference, verdict: pass}
}

// checkCross fails a pair of interpretations of one AVT whose references
// are identical once white space is normalised, or whose raw results are
// identical (the same rows in the same order); otherwise it submits tj's
// reference to ti, which must fail. Rows that are equal only as a
// multiset (another order) pass only when ti's verifier rejects them, that
// is when it compares order.
func (a *auditor) checkCross(ctx context.Context, ti, tj *corpus.Task) result {
	if normSQL(ti.ReferenceSQL) == normSQL(tj.ReferenceSQL) {
		return failed(Cross, ti, "the reference of %s (%q) is identical to this record's (white space normalised): the interpretations cannot be told apart",
			tj.ID, tj.Interpretation)
	}
	if ti.Stateful() || tj.Stateful() {
		// A state-changing reference has no result of its own to compare
		// raw: the verifier's verdict alone decides.
		return a.crossByVerifier(ctx, ti, tj)
	}
	ri, err := a.raw.get(ctx, ti.DB, ti, a.opt.Limits)
	if err != nil {
		return failed(Cross, ti, "the reference of %s does not run: %v", ti.ID, err)
	}
	rj, err := a.raw.get(ctx, ti.DB, tj, a.opt.Limits)
	if err != nil {
		return failed(Cross, ti, "the reference of %s does not run on %s's database: %v", tj.ID, ti.ID, err)
	}
	sameRows := equalRaw(ri, rj)
	if sameRows && equalOrdered(ri, rj) {
		return failed(Cross, ti, "the reference of %s (%q) returns this record's raw result exactly (%d rows, %d columns, in the same order): the interpretations cannot be told apart",
			tj.ID, tj.Interpretation, len(ri.rows), ri.cols)
	}
	v, _, problem := a.submit(ctx, ti, tj.ReferenceSQL)
	if problem != "" {
		return failed(Cross, ti, "submitting the reference of %s: %s", tj.ID, problem)
	}
	if v != 0 {
		if sameRows {
			return failed(Cross, ti, "the verifier accepts the reference of %s (%q), whose raw result has the same %d rows in another order: the interpretations cannot be told apart",
				tj.ID, tj.Interpretation, len(ri.rows))
		}
		return failed(Cross, ti, "the verifier accepts the reference of %s (%q), whose raw result differs (%d vs %d rows%s)",
			tj.ID, tj.Interpretation, len(rj.rows), len(ri.rows), firstDiff(rj.rows, ri.rows))
	}
	return result{check: Cross, verdict: pass}
}

// crossByVerifier fails the pair when ti's verifier accepts tj's
// reference (stateful records: their checks or tests decide).
func (a *auditor) crossByVerifier(ctx context.Context, ti, tj *corpus.Task) result {
	v, _, problem := a.submit(ctx, ti, tj.ReferenceSQL)
	if problem != "" {
		return failed(Cross, ti, "submitting the reference of %s: %s", tj.ID, problem)
	}
	if v != 0 {
		return failed(Cross, ti, "the verifier accepts the reference of %s (%q): its checks or tests cannot tell the interpretations apart", tj.ID, tj.Interpretation)
	}
	return result{check: Cross, verdict: pass}
}

// checkFollowUp verifies t's follow-up reference on the state t's
// reference leaves (PROTOCOL.md §8).
func (a *auditor) checkFollowUp(ctx context.Context, t *corpus.Task) result {
	fu := t.FollowUp
	if fu == nil {
		return result{check: FollowUp, verdict: skip}
	}
	ref := strings.Join(fu.Reference.SQL, ";\n")
	v, err := t.VerifyFollowUp(ctx, t.Reference.SQL, ref, a.opt.Limits, corpus.VerifyOptions{})
	var se *sqlexec.Error
	switch {
	case errors.As(err, &se):
		return failed(FollowUp, t, "the follow-up's reference does not run: %v", se)
	case err != nil:
		return failed(FollowUp, t, "verifying the follow-up's reference: %v", err)
	case !v.Success:
		return failed(FollowUp, t, "the follow-up's reference fails its own verifier on the state phase 1 leaves: %s", v.Reason)
	}
	return result{check: FollowUp, verdict: pass}
}

// normSQL normalises a reference for the identity test: runs of white
// space become one space, and trailing semicolons and spaces go.
func normSQL(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	for {
		t := strings.TrimRight(s, "; ")
		if t == s {
			return s
		}
		s = t
	}
}

// firstDiff describes the first differing sorted row, for messages.
func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("; first difference: [%s] vs [%s]", a[i], b[i])
		}
	}
	return ""
}

// probes are the scripted policies the oracle check plays and what each
// must reach: recall = precision = 1, or (none_adv) recall 0.
var probes = []struct {
	name          probe.Name
	wantPrecision bool
}{
	{probe.Full, true},
	{probe.FullAdv, true},
	{probe.NoneAdv, false},
}

// checkOracle plays full, full_adv and none_adv on t through the
// environment with the question-F1 reward and reads recall and precision
// from the reward's components.
func (a *auditor) checkOracle(ctx context.Context, t *corpus.Task) result {
	if len(t.Counted()) == 0 {
		return result{check: Oracle, verdict: skip}
	}
	var fs []Finding
	for _, p := range probes {
		comp, msg := a.play(ctx, t, p.name)
		if msg != "" {
			fs = append(fs, finding(Oracle, t, "policy %s: %s", p.name, msg))
			continue
		}
		rec, okR := comp["recall"]
		prec, okP := comp["precision"]
		if p.wantPrecision {
			if !okR || rec != 1 || !okP || prec != 1 {
				fs = append(fs, finding(Oracle, t, "policy %s reaches recall %s and precision %s under the deterministic oracle, want 1 and 1 (a term may be part of a longer term or alias, or of the probe questions)",
					p.name, fmtComp(rec, okR), fmtComp(prec, okP)))
			}
		} else if !okR || rec != 0 {
			fs = append(fs, finding(Oracle, t, "policy %s reaches recall %s under the deterministic oracle, want 0 (a term or alias occurs in the generic probe questions)", p.name, fmtComp(rec, okR)))
		}
	}
	if len(fs) > 0 {
		return result{check: Oracle, verdict: fail, findings: fs}
	}
	return result{check: Oracle, verdict: pass}
}

func fmtComp(v float64, ok bool) string {
	if !ok {
		return "undefined"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// play runs one scripted policy on t (the question-F1 reward, the default
// budget) and returns the final reward's components.
func (a *auditor) play(ctx context.Context, t *corpus.Task, name probe.Name) (map[string]float64, string) {
	ep, err := driver.Start(ctx, a.env, &pb.ResetRequest{
		Corpus: a.c.Name, TaskId: t.ID, IncludePrivileged: true,
		Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_QUESTION_F1, Solver: pb.Solver_SOLVER_CLIENT},
	})
	if err != nil {
		return nil, err.Error()
	}
	if err := policy.Scripted(name).Play(ctx, ep); err != nil {
		return nil, err.Error()
	}
	last := ep.Last()
	if last.GetStatus() != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED {
		return nil, fmt.Sprintf("the episode did not terminate normally (status %s after %d questions)", last.GetStatus(), len(ep.Record(nil).Questions))
	}
	return last.GetReward().GetComponents(), ""
}

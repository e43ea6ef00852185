// Package corpus owns the task-record model: records and corpus manifests,
// loading and validating a corpus directory against its databases, and the
// embedded demo corpus. It links no database engine: the databases are
// opened through the Opener the command wires in (package engines), so the
// domain above it links no driver either. See docs/corpus-format.md for the
// file format.
package corpus

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"avtgym/sqlexec"
)

// Corpus is a loaded, validated corpus: its records, with their databases
// open and their references checked.
type Corpus struct {
	// Name is the corpus name from the manifest.
	Name string
	// Description is the manifest's description.
	Description string
	// Tasks are the records in file order.
	Tasks []*Task
	// Cache holds the reference results of the corpus's tasks.
	Cache *sqlexec.Cache

	byID    map[string]*Task
	avts    map[string][]*Task
	dbs     map[string]*DB
	dbOrder []string
	cleanup func() error
	// pg is the PostgreSQL server Options.Engines gave the load (nil when
	// the corpus has no PostgreSQL database, or none is configured),
	// closed with the corpus.
	pg PostgresServer
}

// DB is one open database of a corpus with its public context.
type DB struct {
	// Spec is the manifest entry.
	Spec Database
	// Engine runs queries on the database, read-only.
	Engine sqlexec.Engine
	// Schema is the public schema text (the manifest's, or derived).
	Schema string
	// Stateful verifies the database's Management records, each on a
	// private copy of the pristine database; nil when the corpus has none
	// on this database.
	Stateful sqlexec.Stateful
	// commit holds the database's CommitSchema, read on first use
	// (commit.go); a pointer, so that a DB may be copied (nil: a DB built
	// outside the loader, which reads its schema on every use).
	commit *commitSchemaCell
}

// Task is a record as served: the record with its database, the resolved
// comparison policy and what the server needs to check tokens.
type Task struct {
	*Record
	// Corpus is the corpus the task belongs to.
	Corpus *Corpus
	// DB is the task's database.
	DB *DB
	// Hash is a content hash of the record and the corpus defaults it
	// inherits; an episode token remembers it so that a token issued for
	// an older version of the record is rejected.
	Hash [32]byte
	// Policy is the resolved comparison policy (defaults applied, order
	// "auto" decided against the reference).
	Policy sqlexec.Policy
	// ReferenceSQL is the reference statements joined into one text.
	ReferenceSQL string
	// FollowUpPolicy is the follow-up's resolved comparison policy (when
	// the record has a follow-up).
	FollowUpPolicy sqlexec.Policy
	// DriftPolicy is the post-drift reference's resolved comparison policy
	// (when the record has a drift).
	DriftPolicy sqlexec.Policy
	// RefKey is the task's key in the corpus's reference cache.
	RefKey string
	// PublicKnowledge is the database's knowledge base minus the entries
	// this record masks.
	PublicKnowledge []KnowledgeEntry
	// File and Line locate the record in its records file.
	File string
	Line int

	// followUp is FollowUpRecord's record, made once at load.
	followUp *Record
}

// Task returns the task with the given id.
func (c *Corpus) Task(id string) (*Task, bool) {
	t, ok := c.byID[id]
	return t, ok
}

// Interpretations returns the tasks of one AVT in corpus order.
func (c *Corpus) Interpretations(avtID string) []*Task { return c.avts[avtID] }

// AVTCount is the number of distinct AVTs.
func (c *Corpus) AVTCount() int { return len(c.avts) }

// DBs returns the database ids in manifest order.
func (c *Corpus) DBs() []string { return c.dbOrder }

// Splits returns the split labels in use, sorted.
func (c *Corpus) Splits() []string {
	seen := map[string]bool{}
	var out []string
	for _, t := range c.Tasks {
		if t.Split != "" && !seen[t.Split] {
			seen[t.Split] = true
			out = append(out, t.Split)
		}
	}
	sort.Strings(out)
	return out
}

// Close closes the databases and removes any database built at load time.
func (c *Corpus) Close() error {
	var first error
	for _, id := range c.dbOrder {
		db := c.dbs[id]
		if cl, ok := db.Stateful.(interface{ Close() error }); ok {
			if err := cl.Close(); err != nil && first == nil {
				first = err
			}
		}
		if err := db.Engine.Close(); err != nil && first == nil {
			first = err
		}
	}
	if c.cleanup != nil {
		if err := c.cleanup(); err != nil && first == nil {
			first = err
		}
	}
	if c.pg != nil {
		c.pg.Close()
	}
	return first
}

// Problem is one validation problem, located as precisely as the loader
// could: file, line (0 when the problem is not tied to a line) and field.
type Problem struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Field != "" {
		b.WriteString(p.Field)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// ValidationError lists every problem found while loading a corpus. A
// corpus with any problem is not served.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("invalid corpus: ")
	b.WriteString(strconv.Itoa(len(e.Problems)))
	b.WriteString(" problem(s)")
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// Job is the stateful verification of predicted on t, a Management record
// (PROTOCOL.md §4): on a private copy of its database, t's setup, then
// prior (the statements an earlier phase of the episode accepted), then
// predicted, decided by t's tests or checks, then t's cleanup. Each
// statement is bounded by lim; the whole job by one statement time per
// statement group and per test.
func (t *Task) Job(prior []string, predicted string, lim sqlexec.Limits) sqlexec.Job {
	key := t.RefKey
	if len(prior) > 0 {
		h := sha256.New()
		for _, s := range prior {
			h.Write([]byte(s))
			h.Write([]byte{0})
		}
		key += "\x00prior:" + hex.EncodeToString(h.Sum(nil))
	}
	steps := 4 + len(t.Reference.Checks) + len(t.Reference.Tests)
	return sqlexec.Job{
		Key:       key,
		Setup:     t.Reference.Setup,
		Prior:     prior,
		Predicted: predicted,
		Reference: t.Reference.SQL,
		Checks:    t.Reference.Checks,
		Tests:     t.Reference.Tests,
		Cleanup:   t.Reference.Cleanup,
		Policy:    t.Policy,
		Limits:    lim,
		Deadline:  time.Duration(steps) * lim.Timeout,
	}
}

// FollowUpStateful reports whether t's follow-up is verified statefully:
// phase 1 changes the database, or the follow-up's own assets say so.
func (t *Task) FollowUpStateful() bool {
	fu := t.FollowUp
	if fu == nil {
		return false
	}
	f := Record{Category: fu.Category, Reference: fu.Reference}
	return t.Management() || f.Stateful()
}

// FollowUpJob is FollowUpJobFor under FOLLOW_UP_STATE_POLICY: predicted
// runs on the state phase1 leaves, the expected side on the state the
// reference's phase 1 leaves (with phase1 the reference's, both are the
// reference's state).
func (t *Task) FollowUpJob(phase1 []string, predicted string, lim sqlexec.Limits) sqlexec.Job {
	return t.FollowUpJobFor(phase1, predicted, lim, VerifyOptions{PolicyPhase1: true})
}

// FollowUpJobFor is the stateful verification of predicted as t's
// follow-up (PROTOCOL.md §8) on a private copy, as BIRD-Interact prepares
// phase 2: the record's setup, a phase 1, the record's cleanup and the
// follow-up's setup; then predicted, decided by the follow-up's tests or
// checks, else by its result; then the follow-up's cleanup. Which phase 1
// opt.PolicyPhase1 chooses:
//
//   - false (FOLLOW_UP_STATE_REFERENCE, the default): the reference's
//     phase 1 (t.Reference.SQL), on both sides, as the c-Interact
//     pipeline evaluates phase 2 (bird_interact_conv's
//     eval_bird_interact_batch.py: preprocess_sql, the phase-1 sol_sql,
//     clean_up_sqls, then the prediction). phase1 is ignored, so nothing
//     the policy's phase 1 did reaches phase 2. The whole prefix is the
//     corpus's (Job.Setup): a failure there is the corpus's, an error.
//   - true (FOLLOW_UP_STATE_POLICY, the a-Interact harness's rule):
//     predicted runs after phase1 (the statements phase 1 accepted), the
//     reference and the checks' expected rows after the reference's phase
//     1 (Job.ExpectedPrior), so that phase 1 cannot rig what phase 2 is
//     compared with; a reference that fails scores 0
//     (Job.ReferenceFailureFails), as ex_base does. Python tests run on the
//     policy's state only (the harness's way, their reference run there by
//     the test): there phase 1 can still shape what the tests see. Prior
//     is the policy's doing (Job.PolicyPrior): phase1 failing when
//     replayed (it used random() or the clock), or leaving a state on
//     which the record's cleanup or the follow-up's setup fails (a
//     trigger, a constraint), fails the follow-up, never an error.
//
// The job's Key names the mode and the reference side's prior (a digest),
// which is all the reference side depends on: the policy's phase 1 does
// not enter it, so one reference outcome serves every episode.
func (t *Task) FollowUpJobFor(phase1 []string, predicted string, lim sqlexec.Limits, opt VerifyOptions) sqlexec.Job {
	fu := t.FollowUp.Reference
	setup, prior, expected := t.followUpPrefix(phase1, opt)
	mode := "reference-state"
	if expected != nil {
		mode = "policy-state"
	}
	refPrior := expected
	policyPrior := 0
	if refPrior == nil {
		refPrior = setup
	} else {
		// Prior is the policy's doing: its phase 1, then the corpus's
		// statements on the state phase 1 left. Its replay failing, or
		// making those statements fail, is the policy's outcome.
		policyPrior = len(phase1)
	}
	steps := 5 + len(fu.Checks) + len(fu.Tests)
	return sqlexec.Job{
		Key:                   t.RefKey + "\x00follow_up\x00" + mode + "\x00" + digest(refPrior),
		Setup:                 setup,
		Prior:                 prior,
		PolicyPrior:           policyPrior,
		ExpectedPrior:         expected,
		ReferenceFailureFails: expected != nil,
		Predicted:             predicted,
		Reference:             fu.SQL,
		Checks:                fu.Checks,
		Tests:                 fu.Tests,
		Cleanup:               fu.Cleanup,
		Policy:                t.FollowUpPolicy,
		Limits:                lim,
		Deadline:              time.Duration(steps) * lim.Timeout,
	}
}

// followUpPrefix is what runs before the follow-up's SQL, as a Job's
// Setup, Prior and ExpectedPrior: under FOLLOW_UP_STATE_REFERENCE all of
// it is the corpus's (the record's setup, its reference, its cleanup, the
// follow-up's setup) and expected is nil; under FOLLOW_UP_STATE_POLICY
// setup is the record's, prior the policy's phase1 followed by the
// cleanup and the follow-up's setup, expected the same with the
// reference's phase 1.
func (t *Task) followUpPrefix(phase1 []string, opt VerifyOptions) (setup, prior, expected []string) {
	after := append(append([]string{}, t.Reference.Cleanup...), t.FollowUp.Reference.Setup...)
	if !opt.PolicyPhase1 {
		setup = append(append(append([]string{}, t.Reference.Setup...), t.Reference.SQL...), after...)
		return setup, nil, nil
	}
	prior = append(append([]string{}, phase1...), after...)
	expected = append(append([]string{}, t.Reference.SQL...), after...)
	return t.Reference.Setup, prior, expected
}

// digest is a hex SHA-256 of statements, each terminated by a NUL byte.
func digest(stmts []string) string {
	h := sha256.New()
	for _, s := range stmts {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// VerifyOptions are the episode's choices that change a verification.
type VerifyOptions struct {
	// Harness compares exactly as BIRD-Interact's harness does, quirks
	// included (COMPARISON_HARNESS), on records whose comparison is
	// BIRD-Interact's default test (sqlexec.Policy.BirdInteract); other
	// records, and Harness false, use their policy as it is (the sound
	// variant).
	Harness bool
	// PolicyPhase1 verifies the follow-up's SQL on the state the policy's
	// own phase 1 left (FOLLOW_UP_STATE_POLICY, the a-Interact harness's
	// rule) instead of the state the reference's phase 1 leaves.
	PolicyPhase1 bool
}

// policy is p as opt selects it.
func (opt VerifyOptions) policy(p sqlexec.Policy) sqlexec.Policy {
	p.Harness = opt.Harness && p.BirdInteract
	return p
}

// Verify verifies sql as t's solution (PROTOCOL.md §4): a read-only Query
// by comparing its result with the reference's (cached under RefKey); a
// Management record, or one with tests, on a private copy of its database.
// Errors are the verifier's own failures (sqlexec.KindBusy among them);
// SQL that fails is a failed Verdict.
func (t *Task) Verify(ctx context.Context, sql string, lim sqlexec.Limits, opt VerifyOptions) (sqlexec.Verdict, error) {
	if !t.Stateful() {
		return sqlexec.Check(ctx, t.DB.Engine, t.Corpus.Cache, t.RefKey, opt.policy(t.Policy), sql, t.ReferenceSQL, lim)
	}
	if t.DB.Stateful == nil {
		return sqlexec.Verdict{}, fmt.Errorf("database %q has no stateful verifier for task %s", t.Record.DB, t.ID)
	}
	return t.DB.Stateful.Verify(ctx, t.Job(nil, sql, lim))
}

// VerifyFollowUp verifies sql as t's follow-up (PROTOCOL.md §8): on a
// private copy when phase 1 or the follow-up is stateful (FollowUpJobFor:
// on the state the reference's phase 1 leaves, or with opt.PolicyPhase1
// on the state phase1, the statements the policy's phase 1 accepted,
// leaves), else by result comparison with the follow-up's reference on the
// database as loaded (a read-only phase 1 leaves nothing, so the modes
// agree). t must have a follow-up. A follow-up reference that fails on the
// reference's phase-1 state is the corpus's fault and an error under
// FOLLOW_UP_STATE_REFERENCE (corpus audit's follow-up check finds it);
// under FOLLOW_UP_STATE_POLICY a failing reference is a failed verdict.
func (t *Task) VerifyFollowUp(ctx context.Context, phase1 []string, sql string, lim sqlexec.Limits, opt VerifyOptions) (sqlexec.Verdict, error) {
	if t.FollowUp == nil {
		return sqlexec.Verdict{}, fmt.Errorf("task %s has no follow-up", t.ID)
	}
	if !t.FollowUpStateful() {
		ref := strings.Join(t.FollowUp.Reference.SQL, ";\n")
		return sqlexec.Check(ctx, t.DB.Engine, t.Corpus.Cache, t.RefKey+"\x00follow_up", opt.policy(t.FollowUpPolicy), sql, ref, lim)
	}
	if t.DB.Stateful == nil {
		return sqlexec.Verdict{}, fmt.Errorf("the follow-up of task %s needs a stateful verification, and database %q has no stateful verifier", t.ID, t.Record.DB)
	}
	return t.DB.Stateful.Verify(ctx, t.FollowUpJobFor(phase1, sql, lim, opt))
}

// QueryFollowUpState runs read-only SQL of the policy's (BIRD_A's execute
// tool in sub-task 2) on the state t's follow-up is verified on, which
// VerifyFollowUp would verify it on: the state the reference's phase 1
// leaves (FOLLOW_UP_STATE_REFERENCE), or with opt.PolicyPhase1 the state
// phase1 (the policy's accepted phase 1) leaves, the record's cleanup and
// the follow-up's setup after it, on a private copy that is then dropped;
// on the database as loaded when neither phase is stateful. sql is bounded
// by lim as any policy SQL (rows, bytes, time, memory), and must be
// read-only. The policy's SQL failing (denied, a syntax error, a limit) is
// an *sqlexec.Error of its kind, as Engine.Query returns it; so is, under
// opt.PolicyPhase1, phase1 failing when replayed or making the corpus's
// statements after it fail (KindExecution: the policy's doing,
// StateQuery.PolicyPrior); other errors are the environment's (KindBusy,
// KindUnavailable, or no kind: the corpus's statements failing under
// FOLLOW_UP_STATE_REFERENCE). t must have a follow-up.
func (t *Task) QueryFollowUpState(ctx context.Context, phase1 []string, sql string, lim sqlexec.Limits, opt VerifyOptions) (*sqlexec.Result, error) {
	if t.FollowUp == nil {
		return nil, fmt.Errorf("task %s has no follow-up", t.ID)
	}
	if !t.FollowUpStateful() {
		return t.DB.Engine.Query(ctx, sql, lim)
	}
	q, ok := t.DB.Stateful.(sqlexec.StateQuerier)
	if !ok {
		return nil, fmt.Errorf("the follow-up of task %s is on a state of its own, and database %q cannot query such a state", t.ID, t.Record.DB)
	}
	setup, prior, expected := t.followUpPrefix(phase1, opt)
	policyPrior := 0
	if expected != nil {
		policyPrior = len(phase1)
	}
	return q.QueryState(ctx, sqlexec.StateQuery{
		Key:         t.RefKey + "\x00follow_up\x00state-query",
		Setup:       setup,
		Prior:       prior,
		PolicyPrior: policyPrior,
		SQL:         sql,
		Limits:      lim,
		Deadline:    time.Duration(3) * lim.Timeout,
	})
}

// DriftKey is the post-drift reference's key in the corpus's reference
// cache.
func (t *Task) DriftKey() string { return t.RefKey + "\x00drift" }

// DriftSQL is the post-drift reference's statements joined into one text
// ("" without a drift).
func (t *Task) DriftSQL() string {
	if t.Drift == nil {
		return ""
	}
	return strings.Join(t.Drift.Reference.SQL, ";\n")
}

// VerifyDrift verifies sql as t's post-drift solution (PROTOCOL.md §9): by
// comparing its result with the post-drift reference's on the database as
// loaded (drift records are read-only). t must have a drift.
func (t *Task) VerifyDrift(ctx context.Context, sql string, lim sqlexec.Limits) (sqlexec.Verdict, error) {
	if t.Drift == nil {
		return sqlexec.Verdict{}, fmt.Errorf("task %s has no drift", t.ID)
	}
	return sqlexec.Check(ctx, t.DB.Engine, t.Corpus.Cache, t.DriftKey(), t.DriftPolicy, sql, t.DriftSQL(), lim)
}

// FollowUpRecord is t's follow-up as a record of its own, for the oracle
// of phase 2 (PROTOCOL.md §8): the follow-up's request and reference, the
// record's database, and no registered ambiguities (BIRD-Interact's
// follow-ups have none), so that clarifications route to unlabeled or
// unanswerable. Its id is t's with "/follow-up" appended (oracle caches
// key on it). Nil without a follow-up. The same record every call (made
// once at load), so that it can key a map as t.Record does.
func (t *Task) FollowUpRecord() *Record { return t.followUp }

func followUpRecord(t *Task) *Record {
	if t.FollowUp == nil {
		return nil
	}
	r := *t.Record
	r.ID = t.ID + "/follow-up"
	r.Request = t.FollowUp.Request
	r.Category = t.FollowUp.Category
	r.Reference = t.FollowUp.Reference
	r.Ambiguities = nil
	r.FollowUp, r.FollowUps = nil, nil
	return &r
}

// ContentHash is a hash of everything the corpus serves: 64 hex digits of
// SHA-256 over every task's id and content hash (Task.Hash), in id order
// (CorpusInfo.content_hash). It changes when any task, reference or
// default changes.
func (c *Corpus) ContentHash() string {
	ids := make([]int, len(c.Tasks))
	for i := range ids {
		ids[i] = i
	}
	slices.SortFunc(ids, func(a, b int) int { return strings.Compare(c.Tasks[a].ID, c.Tasks[b].ID) })
	h := sha256.New()
	var n [8]byte
	for _, i := range ids {
		t := c.Tasks[i]
		binary.BigEndian.PutUint64(n[:], uint64(len(t.ID)))
		h.Write(n[:])
		h.Write([]byte(t.ID))
		h.Write(t.Hash[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

package corpus

import (
	"encoding/json"
	"fmt"
)

// Kind is the kind of an ambiguity (PROTOCOL.md §1).
type Kind string

// The ambiguity kinds. Only Critical and Knowledge ambiguities are counted in
// recall, precision and rewards; NonCritical ones may still be answered.
const (
	// Critical is an intent-level ambiguity of the request itself.
	Critical Kind = "critical"
	// Knowledge is an ambiguity created by masking a knowledge entry: the
	// entry is removed from the public view of the record.
	Knowledge Kind = "knowledge"
	// NonCritical is an implementation-level ambiguity (rounding, ordering,
	// null handling): answered when asked, never counted.
	NonCritical Kind = "non_critical"
)

// Counted reports whether ambiguities of this kind count in metrics and rewards.
func (k Kind) Counted() bool { return k == Critical || k == Knowledge }

func (k Kind) valid() bool { return k == Critical || k == Knowledge || k == NonCritical }

// Record is one task record: an AVT with one interpretation θ fixed
// (PROTOCOL.md §1). Its fields fall into the three parts of the access
// boundary: the public specification (Request, DB, Evidence and the
// database's public context), the resolutions (Ambiguities, Interpretation)
// and the verification assets (Reference, FollowUp).
//
// The JSON form is one object per line of a records file; see
// docs/corpus-format.md.
type Record struct {
	// ID names the record, unique within its corpus.
	ID string `json:"id"`
	// AVTID groups the records that share the request and the ambiguities
	// and differ in the interpretation. Defaults to ID (an AVT with one
	// interpretation).
	AVTID string `json:"avt_id,omitempty"`
	// Split is a free-form partition label ("train", "dev", "test").
	Split string `json:"split,omitempty"`
	// DB is the id of a database in the corpus manifest.
	DB string `json:"db"`

	// Request is the underspecified natural-language request shown to the
	// asking policy (public).
	Request string `json:"request"`
	// Evidence is optional public hint text (BIRD's "evidence").
	Evidence string `json:"evidence,omitempty"`

	// Ambiguities are the registered ambiguities, in annotation order
	// (privileged: the oracle's).
	Ambiguities []Ambiguity `json:"ambiguities"`
	// Interpretation is a short privileged label of θ, such as
	// "by revenue" (privileged: for logs and reports only).
	Interpretation string `json:"interpretation,omitempty"`

	// Category says how the record is verified: "Query" (the default:
	// read-only SQL, verified by comparing its last statement's result with
	// the reference's) or "Management" (the SQL changes the database,
	// BIRD-Interact's category: verified on a private copy of the database
	// by the reference's checks or tests, PROTOCOL.md §4).
	Category string `json:"category,omitempty"`
	// Reference holds the verification assets (privileged: the verifier's).
	Reference Reference `json:"reference"`
	// FollowUp is the record's phase-2 sub-task (PROTOCOL.md §8;
	// BIRD-Interact's follow_up), played by BIRD_C and BIRD_A once phase 1
	// passes.
	FollowUp *FollowUp `json:"follow_up,omitempty"`
	// Drift is the record's intent-drift turn (PROTOCOL.md §9; TIDE): the
	// user's utterance, injected verbatim after the policy's first SQL under
	// the TIDE protocols, and the post-drift reference the second SQL is
	// verified against (privileged: the harness's and the verifier's).
	Drift *Drift `json:"drift,omitempty"`
	// SampleType is TIDE's sample type: "chain_only", "drift_only" or
	// "joint" (empty for other records). Reports split metrics by it.
	SampleType string `json:"sample_type,omitempty"`
	// Cluster groups records that must be resampled together in bootstrap
	// intervals beyond their AVT (PROTOCOL.md §7): TIDE's three samples of
	// one anchor are three AVTs of one cluster (they share the anchor SQL
	// and its database). Defaults to AVTID.
	Cluster string `json:"cluster,omitempty"`
	// FollowUps are later sub-tasks kept verbatim as any JSON. Deprecated:
	// the BIRD-Interact importer wrote them before FollowUp existed; they
	// are still accepted so that such corpora load, and are not served.
	// New corpora use FollowUp.
	FollowUps []json.RawMessage `json:"follow_ups,omitempty"`

	// ResolutionFormat says what the resolutions are: "text" (the default,
	// natural-language answers) or "sql" (SQL snippets, when an importer
	// had nothing else, as BIRD-Interact without a response catalog): the
	// deterministic oracle then answers with SQL, which evaluations must
	// report.
	ResolutionFormat string `json:"resolution_format,omitempty"`
	// Source records where an imported record came from (privileged: for
	// reports and audits).
	Source *Source `json:"source,omitempty"`
}

// Source is the provenance of an imported record.
type Source struct {
	// Dataset names the benchmark, such as "ambrosia" or "birdinteract".
	Dataset string `json:"dataset"`
	// ID is the record's id in the benchmark.
	ID string `json:"id"`
	// Notes are free-form remarks of the importer (for example "db_rebuild_clean=false").
	Notes string `json:"notes,omitempty"`
	// Meta keeps the source's fields that have no place in the record
	// (construction notes, rationales, tiers: TIDE's meta fields), verbatim,
	// so that an import loses nothing; never shown to a policy or oracle.
	Meta map[string]json.RawMessage `json:"meta,omitempty"`
}

// Ambiguity is one registered ambiguity and its resolution under the
// record's interpretation.
type Ambiguity struct {
	// Term is the span of the request (or of a knowledge name) that is
	// ambiguous. The deterministic matcher credits the ambiguity when the
	// term or an alias occurs in a question as whole words.
	Term string `json:"term"`
	// Kind is critical, knowledge or non_critical.
	Kind Kind `json:"kind"`
	// Resolution is the oracle's natural-language answer for this record's
	// interpretation.
	Resolution string `json:"resolution"`
	// Aliases are other phrasings the matcher accepts for Term.
	Aliases []string `json:"aliases,omitempty"`
	// SQLSnippet is the part of the reference SQL this ambiguity decides
	// (optional; used by LLM oracles and importers).
	SQLSnippet string `json:"sql_snippet,omitempty"`
	// DependsOn names the term of another ambiguity that must be resolved
	// first (chain ambiguity, PROTOCOL.md §9): a question is credited with
	// this ambiguity only once an earlier question of the episode was
	// credited with that one (every oracle, oracle.ChainMatch).
	DependsOn string `json:"depends_on,omitempty"`
	// Question is the annotated clarification question for this ambiguity,
	// as an agent would ask it (TIDE's L1_question / L2_question;
	// optional). The TIDE_P protocol pre-fills the history with the
	// question of the chain's first layer and its resolution.
	Question string `json:"question,omitempty"`
	// Options are the readings the ambiguity admits (TIDE's two options;
	// optional, for reports).
	Options []string `json:"options,omitempty"`
	// Chosen is the reading of Options this record's interpretation takes
	// (optional, for reports).
	Chosen string `json:"chosen,omitempty"`
	// AlternativeSQL is a valid SQL under another reading of this
	// ambiguity (TIDE's l1_alt_sql / l2_alt_sql; a verification asset, for
	// `corpus check`: it must run and give a result different from the
	// reference's). Never shown to an oracle; the oracle compares its
	// segments with the reference's to find the one segment a chain's
	// second layer decides (oracle.ChainDetail, TIDE's early-L2 LOC answer).
	AlternativeSQL string `json:"alternative_sql,omitempty"`
	// KnowledgeID names the knowledge entry of the database that this
	// ambiguity masks (kind knowledge only): it is removed from the
	// record's public view.
	KnowledgeID string `json:"knowledge_id,omitempty"`
}

// Reference is the verification assets of a record.
type Reference struct {
	// SQL is one or more statements; the last statement's result is the
	// reference result. In JSON either a string or an array of strings.
	SQL SQLList `json:"sql"`
	// Comparison overrides the corpus's default comparison policy field
	// by field.
	Comparison *Comparison `json:"comparison,omitempty"`
	// Setup are statements a stateful verification runs first, on the
	// private copy (BIRD-Interact's preprocess_sql); a record with setup is
	// verified statefully (Record.Stateful).
	Setup SQLList `json:"setup,omitempty"`
	// Checks are read-only test queries of a stateful record: after the
	// policy's SQL each one's rows must equal, under the comparison policy,
	// its rows after the reference SQL (PROTOCOL.md §4).
	Checks SQLList `json:"checks,omitempty"`
	// Tests are BIRD-Interact test_case(pred_sqls, sol_sqls, db_name, conn)
	// functions, Python source, of a record on PostgreSQL: run by the Python
	// test workers (sqlexec/pytests) on a private copy of the database, in
	// place of the result comparison (so a Query record with tests is
	// verified statefully too). Test code is corpus content, trusted like
	// the rest of the corpus.
	Tests []string `json:"tests,omitempty"`
	// Cleanup are statements a stateful verification runs last
	// (BIRD-Interact's clean_up_sqls).
	Cleanup SQLList `json:"cleanup,omitempty"`
}

// The record categories.
const (
	// CategoryQuery is a read-only task (the default).
	CategoryQuery = "Query"
	// CategoryManagement is a task whose SQL changes the database.
	CategoryManagement = "Management"
)

// Management reports whether the record's SQL changes the database.
func (r *Record) Management() bool { return r.Category == CategoryManagement }

// Stateful reports whether the record is verified statefully, on a private
// copy of its database: a Management record, or one with setup, checks,
// tests or cleanup (BIRD-Interact runs a task's test_cases, when it has
// any, instead of its default result comparison, and its preprocess_sql
// first).
func (r *Record) Stateful() bool {
	x := r.Reference
	return r.Management() || len(x.Setup)+len(x.Checks)+len(x.Tests)+len(x.Cleanup) > 0
}

// Comparison is the JSON form of a result-comparison policy
// (PROTOCOL.md §4). Unset fields inherit the corpus default, then the
// built-in default (bag semantics, numeric tolerance, no switches).
type Comparison struct {
	// Order is "auto" (ordered iff the reference's outermost query has
	// ORDER BY), "bag" (multiset, the default), "ordered" or "set".
	Order string `json:"order,omitempty"`
	// Decimals, when set, rounds numbers half-up to that many places on
	// both sides before comparing.
	Decimals *int `json:"decimals,omitempty"`
	// StripComments removes SQL comments from both sides before executing
	// (BIRD-Interact switch).
	StripComments *bool `json:"strip_comments,omitempty"`
	// StripDistinct removes DISTINCT from both sides before executing
	// (BIRD-Interact switch).
	StripDistinct *bool `json:"strip_distinct,omitempty"`
	// StripRound replaces ROUND(x, n) by x on both sides before executing
	// (BIRD-Interact switch).
	StripRound *bool `json:"strip_round,omitempty"`
	// EmptyFails makes an empty result on either side a failure
	// (BIRD-Interact switch).
	EmptyFails *bool `json:"empty_fails,omitempty"`
	// DateOnly compares dates and timestamps by their date: a text cell
	// YYYY-MM-DD, optionally followed by a time and a UTC offset
	// ("2024-03-01 14:05:00.5+01"), compares as its first ten characters
	// (BIRD-Interact on PostgreSQL, whose harness formats date and
	// datetime values as YYYY-MM-DD). sqlexec.Policy.DateOnly.
	DateOnly *bool `json:"date_only,omitempty"`
	// CanonicalJSON compares text cells holding a JSON object or array as
	// parsed JSON: re-encoded with sorted keys and no insignificant
	// whitespace, numbers inside rounded like the other numbers
	// (BIRD-Interact on PostgreSQL, whose harness compares JSON values as
	// sorted-key JSON text). sqlexec.Policy.CanonicalJSON.
	CanonicalJSON *bool `json:"canonical_json,omitempty"`
	// Harness names the benchmark harness whose default test the switches
	// above reproduce: "bird-interact" (BIRD-Interact's test_case_default)
	// lets an episode choose COMPARISON_HARNESS, that harness's exact
	// rules (sqlexec.Policy.BirdInteract); "" is none.
	Harness string `json:"harness,omitempty"`
}

// FollowUp is a record's phase-2 sub-task (PROTOCOL.md §8): released only
// after phase 1 succeeds and verified on the database state phase 1 left
// (for a read-only phase 1, the database as loaded). Its JSON form is
// documented in docs/corpus-format.md.
type FollowUp struct {
	// Request is the follow-up's natural-language request, shown once
	// phase 1 has passed (BIRD-Interact: follow_up.query; its follow-ups
	// carry no registered ambiguities).
	Request string `json:"request"`
	// Reference holds the follow-up's verification assets: its SQL (the
	// last statement's result counts), its comparison policy (over the
	// corpus default field by field, as a record's) and its tests (opaque
	// text, such as BIRD-Interact's Python test_case functions).
	Reference Reference `json:"reference"`
	// Category is "Query" (read-only, verified by result comparison) or
	// "Management" (changes the database, verified by its tests).
	Category string `json:"category,omitempty"`
	// Type is the benchmark's label of the follow-up (BIRD-Interact:
	// result_based, attribute_change, aggregation, constraint_change,
	// state_dependent, topic_pivot, ...).
	Type string `json:"type,omitempty"`
	// Knowledge are the ids of the knowledge entries of the record's
	// database that the follow-up uses (BIRD-Interact:
	// follow_up.external_knowledge), for reports; they mask nothing.
	Knowledge []string `json:"knowledge,omitempty"`
}

// Drift is a record's intent-drift turn (PROTOCOL.md §9, TIDE §2.2): after
// the policy's first SQL the user withdraws or replaces a commitment, and
// the second SQL is verified against Reference. Its JSON form is
// documented in docs/corpus-format.md.
type Drift struct {
	// Utterance is the user's drift turn, shown verbatim (as a turn of
	// kind DRIFT) right after the policy's first SQL under the TIDE
	// protocols; privileged until then.
	Utterance string `json:"utterance"`
	// Reference is the post-drift reference (TIDE's post_drift_sql): its
	// SQL and comparison policy (over the corpus default field by field).
	// Read-only SQL only: drift records are Query records.
	Reference Reference `json:"reference"`
	// Subtype is the declared drift subtype of (reference, post-drift
	// reference) under TIDE's Algorithm 1: "value", "constraint" or
	// "projection" (optional; `corpus check` compares it with the computed
	// one).
	Subtype string `json:"subtype,omitempty"`
	// IntentSubtype is "aspect_change" or "target_change" for a projection
	// drift (TIDE Fig. 7 R7; optional, checked like Subtype).
	IntentSubtype string `json:"intent_subtype,omitempty"`
}

// The TIDE sample types (Record.SampleType).
const (
	SampleChainOnly = "chain_only"
	SampleDriftOnly = "drift_only"
	SampleJoint     = "joint"
)

// ClusterID is the record's bootstrap cluster: Cluster, else its AVT id.
func (r *Record) ClusterID() string {
	if r.Cluster != "" {
		return r.Cluster
	}
	if r.AVTID != "" {
		return r.AVTID
	}
	return r.ID
}

// ChainLayers returns, for each ambiguity, its layer in the record's
// dependency chains: 1 for an ambiguity that depends on none, 1 + the
// layer of the one it depends on otherwise (TIDE's L1 and L2). An unknown
// dependency ends a chain; a cycle (corpus loading rejects both) is cut
// after one step per ambiguity.
func (r *Record) ChainLayers() []int {
	layers := make([]int, len(r.Ambiguities))
	for i := range r.Ambiguities {
		layer := 1
		for cur := r.dependency(i); cur >= 0 && layer <= len(r.Ambiguities); cur = r.dependency(cur) {
			layer++
		}
		layers[i] = layer
	}
	return layers
}

// dependency is the index of the ambiguity ambiguity i depends on (the
// first other one registered under its DependsOn term), -1 when none.
func (r *Record) dependency(i int) int {
	dep := r.Ambiguities[i].DependsOn
	if dep == "" {
		return -1
	}
	for j, b := range r.Ambiguities {
		if j != i && b.Term == dep {
			return j
		}
	}
	return -1
}

// HasChain reports whether an ambiguity of r depends on another
// (PROTOCOL.md §9).
func (r *Record) HasChain() bool {
	for _, a := range r.Ambiguities {
		if a.DependsOn != "" {
			return true
		}
	}
	return false
}

// SQLList is a list of SQL statements that unmarshals from a JSON string or
// an array of strings.
type SQLList []string

// UnmarshalJSON accepts "SELECT 1" as well as ["SELECT 1", "SELECT 2"].
func (l *SQLList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = SQLList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want a string or an array of strings")
	}
	*l = many
	return nil
}

// MaxAmbiguities bounds the ambiguities of one record: episode tokens keep
// each question's credits as a 64-bit mask.
const MaxAmbiguities = 64

// Counted returns the indexes of the counted (critical and knowledge)
// ambiguities, in annotation order.
func (r *Record) Counted() []int {
	var idx []int
	for i, a := range r.Ambiguities {
		if a.Kind.Counted() {
			idx = append(idx, i)
		}
	}
	return idx
}

// CountedTerms returns the distinct terms of the counted ambiguities, in
// annotation order.
func (r *Record) CountedTerms() []string {
	seen := map[string]bool{}
	var terms []string
	for _, i := range r.Counted() {
		t := r.Ambiguities[i].Term
		if !seen[t] {
			seen[t] = true
			terms = append(terms, t)
		}
	}
	return terms
}

// Package eval runs evaluation conditions over a corpus through the gRPC
// client, aggregates success, asking precision, recall and F1 with the
// eligibility rules of PROTOCOL.md §6 (credited by AmbiTab's rule, and by
// the strict rule in the asker_strict condition), computes the leakage
// diagnostics with AVT-cluster bootstrap intervals (§7), and writes JSON,
// Markdown and HTML reports. Under BIRD-Interact's protocols it reports
// phase-1 and phase-2 success and the normalised reward (birdc.go), under
// TIDE's the metrics of TIDE-Bench (tide.go); a training run's GRPO groups
// add the fraction of groups with differing rewards (groups.go). Runs are
// resumable: finished episodes are appended to a results file and skipped
// when the same command runs again.
package eval

import "avtgym/driver"

// Condition names an evaluated policy condition (PROTOCOL.md §5–6).
type Condition string

// The conditions.
const (
	// None stops at once (π_none).
	None Condition = "none"
	// Asker is the evaluated asker (a scripted policy, the LLM asker, or
	// an external policy replayed from a trajectory file).
	Asker Condition = "asker"
	// AskerStrict is the evaluated asker (the same player as Asker, a
	// trajectory file's asker trajectories) in episodes reset with
	// EpisodeOptions.strict_credit: a question earns only the ambiguities
	// it names, one that echoes the request nothing. The report gives its
	// precision, recall and F1 beside the asker's (AmbiTab's rule, the
	// headline), so that credit earned by echoing shows as the gap.
	AskerStrict Condition = "asker_strict"
	// Full asks about every counted term (π_full).
	Full Condition = "full"
	// FullAdv is π_full^adv, the adversarial full probe.
	FullAdv Condition = "full_adv"
	// NoneAdv is π_none^adv, the generic probe.
	NoneAdv Condition = "none_adv"
	// AskerSpec is the spec-randomized asker π^Q: shown the specification
	// of a donor record on another database.
	AskerSpec Condition = "asker_spec"
)

// Episode is one finished evaluation episode: one JSON line of a run's
// results file, the driver's episode record with the cell's labels.
// Paired runs share (TaskID, Seed) across oracles.
type Episode struct {
	driver.Record
	Condition Condition `json:"condition"`
	// Oracle is the oracle type in lower case: deterministic, llm,
	// llm_scoped, hybrid, or a test oracle.
	Oracle string `json:"oracle"`
	// Donor is the task whose specification the spec-randomized asker saw.
	Donor string `json:"donor,omitempty"`
	// UnreadableOracle counts the episode's questions whose oracle output
	// (stage 1) the server could not read — answered unanswerable(), but
	// not because the question was; UnreadableSolver is 1 when the LLM
	// solver's output could not be read (a failed solution). Both come
	// from the privileged channel; the report shows them per oracle and
	// condition, so that nothing unreadable passes for a model's answer.
	UnreadableOracle int `json:"unreadable_oracle,omitempty"`
	UnreadableSolver int `json:"unreadable_solver,omitempty"`
}

// Package eval runs evaluation conditions over a corpus through the gRPC
// client, aggregates success, asking precision, recall and F1 with the
// eligibility rules of PROTOCOL.md §6, computes the leakage diagnostics
// with AVT-cluster bootstrap intervals (§7), and writes JSON, Markdown and
// HTML reports. Runs are resumable: finished episodes are appended to a
// results file and skipped when the same command runs again.
package eval

// Condition names an evaluated policy condition (PROTOCOL.md §5–6).
type Condition string

// The conditions.
const (
	// None stops at once (π_none).
	None Condition = "none"
	// Asker is the evaluated asker (a scripted policy, the LLM asker, or
	// an external policy replayed from a trajectory file).
	Asker Condition = "asker"
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
// results file. Paired runs share (TaskID, Seed) across oracles.
type Episode struct {
	Corpus    string    `json:"corpus"`
	TaskID    string    `json:"task_id"`
	AVTID     string    `json:"avt_id"`
	DB        string    `json:"db"`
	Split     string    `json:"split,omitempty"`
	Condition Condition `json:"condition"`
	// Oracle is the oracle type in lower case: deterministic, llm,
	// llm_scoped, hybrid, or a test oracle.
	Oracle string `json:"oracle"`
	Seed   uint64 `json:"seed"`
	// Status is TERMINATED, TRUNCATED or ERROR (the server's), or
	// RPC_FAILED / ASKER_FAILED when the episode could not be played.
	// Only TERMINATED and TRUNCATED episodes are scored.
	Status string `json:"status"`
	// Counted is |Amb| (counted ambiguities) of the task.
	Counted int `json:"counted"`
	// Questions is n, the answered questions.
	Questions int `json:"questions"`
	// Precision, Recall and F1 as the server's reward components report
	// them (nil where PROTOCOL.md §6 leaves them undefined).
	Precision *float64 `json:"precision"`
	Recall    *float64 `json:"recall"`
	F1        *float64 `json:"f1"`
	// Success is the verifier's outcome (1 or 0); nil when no solution was
	// verified.
	Success *float64 `json:"success"`
	// FallbackStop marks an asker whose output could not be parsed: kept
	// for SR, omitted from recall and F1.
	FallbackStop bool `json:"fallback_stop,omitempty"`
	// Donor is the task whose specification the spec-randomized asker saw.
	Donor string `json:"donor,omitempty"`
	// Transcript is the dialogue: questions and replies, alternating.
	Transcript []string `json:"transcript,omitempty"`
	// Error explains a failed episode.
	Error string `json:"error,omitempty"`
}

// Scored reports whether the episode counts in metrics.
func (e *Episode) Scored() bool { return e.Status == "TERMINATED" || e.Status == "TRUNCATED" }

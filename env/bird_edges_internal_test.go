package env

import (
	"testing"

	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/sqlexec"
)

// TestBirdCRetryMessageTimeout (rule 6): a statement that timed out is
// the original pipeline's "Execution_Error: timeout_error"
// (eval_bird_interact_batch.py raises it for execute_queries' timeout
// flag) and the ADK's "Submitted SQL execution timed out".
func TestBirdCRetryMessageTimeout(t *testing.T) {
	timeout := &sqlexec.Error{Kind: sqlexec.KindTimeout, Msg: "canceling statement due to statement timeout"}
	orig := &statepb.BirdState{Variant: pb.BirdVariant_BIRD_VARIANT_ORIGINAL}
	adkState := &statepb.BirdState{Variant: pb.BirdVariant_BIRD_VARIANT_ADK}
	if got, want := retryMessage(orig, timeout), "Your SQL is not executable and raises the following error: [exec_err_flg] - Execution_Error: timeout_error"; got != want {
		t.Errorf("ORIGINAL timeout: %q, want %q", got, want)
	}
	if got, want := retryMessage(adkState, timeout), "Your SQL is not executable: Submitted SQL execution timed out\nPlease fix and call submit_sql."; got != want {
		t.Errorf("ADK timeout: %q, want %q", got, want)
	}
	// An unset variant (a state before the option) reads as ORIGINAL.
	if got := retryMessage(&statepb.BirdState{}, nil); got != birdRetryUnsure {
		t.Errorf("unset variant: %q", got)
	}
}

package driver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// TestRecordComparison: an episode's record says which comparison its
// options chose: "harness" when the reset asked for COMPARISON_HARNESS,
// "sound" when it asked for SOUND or left the option unset (the server's
// default), so that an evaluation's episodes file shows whether its
// numbers are comparable with BIRD-Interact's paper.
func TestRecordComparison(t *testing.T) {
	e := inProcess(t)
	ctx := context.Background()
	for _, tc := range []struct {
		opts *pb.EpisodeOptions
		want string
	}{
		{nil, "sound"},
		{&pb.EpisodeOptions{}, "sound"},
		{&pb.EpisodeOptions{Comparison: pb.Comparison_COMPARISON_SOUND}, "sound"},
		{&pb.EpisodeOptions{Comparison: pb.Comparison_COMPARISON_HARNESS}, "harness"},
	} {
		seed := uint64(1)
		ep, err := driver.Start(ctx, e, &pb.ResetRequest{Corpus: "tiny", TaskId: "big", Seed: &seed, Options: tc.opts})
		if err != nil {
			t.Fatal(err)
		}
		if err := ep.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		r := ep.Record(nil)
		if r.Comparison != tc.want {
			t.Errorf("options %v: comparison %q, want %q", tc.opts, r.Comparison, tc.want)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"comparison":"`+tc.want+`"`) {
			t.Errorf("options %v: the JSON line does not say the comparison: %s", tc.opts, b)
		}
	}
}

// TestParseComparison: the names round-trip, and the enum's UNSPECIFIED
// and unknown names are refused (a typo must not fall back to a default).
func TestParseComparison(t *testing.T) {
	for _, c := range []pb.Comparison{pb.Comparison_COMPARISON_SOUND, pb.Comparison_COMPARISON_HARNESS} {
		got, err := driver.ParseComparison(driver.ComparisonName(c))
		if err != nil || got != c {
			t.Errorf("%s: parsed %s, %v", c, got, err)
		}
	}
	if got, err := driver.ParseComparison(" Harness "); err != nil || got != pb.Comparison_COMPARISON_HARNESS {
		t.Errorf("case and spaces: %s, %v", got, err)
	}
	if n := driver.ComparisonName(pb.Comparison_COMPARISON_UNSPECIFIED); n != "sound" {
		t.Errorf("UNSPECIFIED is named %q, want the server's default sound", n)
	}
	for _, bad := range []string{"", "unspecified", "harnes", "bird-interact"} {
		if _, err := driver.ParseComparison(bad); err == nil || !strings.Contains(err.Error(), "want sound or harness") {
			t.Errorf("%q: %v, want a refusal", bad, err)
		}
	}
}

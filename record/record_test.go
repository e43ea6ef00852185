package record_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "avtgym/proto/avtgym/v1"
	"avtgym/record"
)

func i32(v int32) *int32 { return &v }

// TestOptionsRoundTrip: the options a record spells are the options a
// replay resets with (avtgym reverify), for every option a record keeps.
func TestOptionsRoundTrip(t *testing.T) {
	for _, o := range []*pb.EpisodeOptions{
		{},
		{Reward: pb.RewardType_REWARD_TYPE_OUTCOME, Solver: pb.Solver_SOLVER_LOOKUP, Oracle: pb.OracleType_ORACLE_TYPE_LLM_SCOPED, StrictCredit: true, ExtraQuestions: i32(2), ZeroAmbiguityBudget: i32(0)},
		{Protocol: pb.Protocol_PROTOCOL_BIRD_C, Patience: i32(5), Comparison: pb.Comparison_COMPARISON_HARNESS,
			FollowUpState: pb.FollowUpState_FOLLOW_UP_STATE_POLICY, BirdVariant: pb.BirdVariant_BIRD_VARIANT_ADK},
		{Protocol: pb.Protocol_PROTOCOL_TIDE_P},
	} {
		r := &record.Episode{Options: record.OptionsOf(o)}
		if p := o.GetProtocol(); p != pb.Protocol_PROTOCOL_UNSPECIFIED {
			r.Protocol = record.ProtocolName(p)
		}
		if c := o.GetComparison(); c != pb.Comparison_COMPARISON_UNSPECIFIED {
			r.Comparison = record.ComparisonName(c)
		}
		got, err := r.ToOptions()
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, o) {
			t.Errorf("round trip of %v gave %v", o, got)
		}
	}
	bad := &record.Episode{Options: &record.Options{Oracle: "psychic"}}
	if _, err := bad.ToOptions(); err == nil || !strings.Contains(err.Error(), "options.oracle") {
		t.Errorf("an unknown oracle: %v, want an error naming options.oracle", err)
	}
}

// TestReplayableDropsOnlyWhatDiffersByNature: two plays of one episode
// differ in the uid, the clock and the server build, nothing else.
func TestReplayableDropsOnlyWhatDiffersByNature(t *testing.T) {
	r := record.Episode{TaskID: "t", Seed: 3, EpisodeUID: "u", StartedAt: "a", FinishedAt: "b", DurationMS: 1,
		Server: &record.ServerInfo{Version: "v"}, Tags: map[string]string{"run": "x"}}
	p := r.Replayable()
	if p.EpisodeUID != "" || p.StartedAt != "" || p.FinishedAt != "" || p.DurationMS != 0 || p.Server != nil {
		t.Errorf("kept %+v", p)
	}
	if p.TaskID != "t" || p.Seed != 3 || p.Tags["run"] != "x" || r.EpisodeUID != "u" {
		t.Errorf("lost what must agree, or changed the original: %+v / %+v", p, r)
	}
}

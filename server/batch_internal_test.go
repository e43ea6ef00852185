package server

import (
	"testing"

	"google.golang.org/protobuf/proto"

	pb "avtgym/proto/avtgym/v1"
)

func obsFor(text string) *pb.Observation {
	return &pb.Observation{Turns: []*pb.Turn{{Role: pb.Role_ROLE_ENVIRONMENT, Kind: pb.TurnKind_TURN_KIND_REQUEST, Text: text}}}
}

// rebuilt is a shared-form group read by the documented rule: each
// episode's own observation and privileged data, else the shared ones.
func rebuilt(resp *pb.ResetResponse) []*pb.Episode {
	var out []*pb.Episode
	for _, e := range resp.Episodes {
		c := &pb.Episode{Seed: e.Seed, Observation: e.Observation, Privileged: e.Privileged}
		if c.Observation == nil {
			c.Observation = resp.SharedObservation
		}
		if c.Privileged == nil {
			c.Privileged = resp.SharedPrivileged
		}
		out = append(out, c)
	}
	return out
}

// TestShareGroupKeepsWhatDiffers: shareGroup clears an episode's
// observation and privileged data only when they equal the shared ones (the
// same message, or an equal copy); an episode that differs keeps its own,
// so the shared form rebuilds every episode exactly.
func TestShareGroupKeepsWhatDiffers(t *testing.T) {
	obs, priv := obsFor("request"), &pb.Privileged{AvtId: "a"}
	resp := &pb.ResetResponse{Episodes: []*pb.Episode{
		{Seed: 1, Observation: obs, Privileged: priv},
		{Seed: 2, Observation: proto.Clone(obs).(*pb.Observation), Privileged: proto.Clone(priv).(*pb.Privileged)},
		{Seed: 3, Observation: obsFor("another request"), Privileged: &pb.Privileged{AvtId: "b"}},
		{Seed: 4, Observation: obs, Privileged: priv},
	}}
	want := proto.Clone(resp).(*pb.ResetResponse)
	if n := shareGroup(resp); n != resp.SizeVT() {
		t.Errorf("shareGroup returned %d, the response is %d bytes", n, resp.SizeVT())
	}
	if resp.SharedObservation != obs || resp.SharedPrivileged != priv {
		t.Fatal("the shared fields are not the first episode's")
	}
	for i, keeps := range []bool{false, false, true, false} {
		e := resp.Episodes[i]
		if (e.Observation != nil) != keeps || (e.Privileged != nil) != keeps {
			t.Errorf("episode %d: keeps its observation %v, its privileged data %v; want %v", i, e.Observation != nil, e.Privileged != nil, keeps)
		}
	}
	for i, e := range rebuilt(resp) {
		if !proto.Equal(e, want.Episodes[i]) {
			t.Errorf("episode %d rebuilt: %v, want %v", i, e, want.Episodes[i])
		}
	}
}

// TestShareGroupSharesOnlyWhatAllHave: a part some episode lacks is not
// shared (the reader would give it to that episode): an episode without
// privileged data never reads any, and the group is rebuilt exactly.
func TestShareGroupSharesOnlyWhatAllHave(t *testing.T) {
	obs, priv := obsFor("request"), &pb.Privileged{AvtId: "a"}
	resp := &pb.ResetResponse{Episodes: []*pb.Episode{
		{Seed: 1, Observation: obs, Privileged: priv},
		{Seed: 2, Observation: obs},
	}}
	want := proto.Clone(resp).(*pb.ResetResponse)
	shareGroup(resp)
	if resp.SharedPrivileged != nil || resp.SharedObservation != obs {
		t.Fatalf("shared privileged %v, observation %v", resp.SharedPrivileged, resp.SharedObservation)
	}
	for i, e := range rebuilt(resp) {
		if !proto.Equal(e, want.Episodes[i]) {
			t.Errorf("episode %d rebuilt: %v, want %v", i, e, want.Episodes[i])
		}
	}
}

// TestStripAndLabelsSeeTheSharedPart: the second line of defence removes
// the shared privileged data from a reset (unary and batched) for a
// principal that may not read it, and the TIDE label enums are filled in
// the shared part as in each episode's.
func TestStripAndLabelsSeeTheSharedPart(t *testing.T) {
	shared := func() *pb.ResetResponse {
		return &pb.ResetResponse{Episodes: []*pb.Episode{{Seed: 1}}, SharedObservation: obsFor("r"),
			SharedPrivileged: &pb.Privileged{Tide: &pb.TideInfo{SampleType: "joint", DriftSubtype: "value"}}}
	}
	r := shared()
	fillLabels(r)
	if ti := r.SharedPrivileged.GetTide(); ti.SampleTypeEnum != pb.SampleType_SAMPLE_TYPE_JOINT || ti.DriftSubtypeEnum != pb.DriftSubtype_DRIFT_SUBTYPE_VALUE {
		t.Errorf("labels of the shared part: %v", ti)
	}
	batch := &pb.ResetBatchResponse{Results: []*pb.ResetBatchResult{{Response: shared()}}}
	fillLabels(batch)
	if batch.Results[0].Response.SharedPrivileged.GetTide().SampleTypeEnum != pb.SampleType_SAMPLE_TYPE_JOINT {
		t.Error("labels of a batched shared part")
	}
	for _, resp := range []any{r, batch} {
		if !stripPrivileged(resp) {
			t.Errorf("%T: shared privileged data not found", resp)
		}
	}
	if r.SharedPrivileged != nil || batch.Results[0].Response.SharedPrivileged != nil || r.SharedObservation == nil {
		t.Error("shared privileged data left, or the observation removed")
	}
	if stripPrivileged(r) {
		t.Error("found privileged data after stripping")
	}
}

// TestBudgetResize: an item's take can be replaced by a smaller one (the
// difference goes back) or a larger one that fits, never one that does not.
func TestBudgetResize(t *testing.T) {
	b := &budget{reserve: 10}
	b.free.Store(1000)
	if !b.take(510) { // 500 beyond the reserve
		t.Fatal("take")
	}
	if !b.resize(510, 110) || b.free.Load() != 900 {
		t.Fatalf("shrink: free %d, want 900", b.free.Load())
	}
	if b.resize(110, 1011) || b.free.Load() != 900 {
		t.Fatalf("a resize that does not fit changed the budget: free %d", b.free.Load())
	}
	if !b.resize(110, 1010) || b.free.Load() != 0 {
		t.Fatalf("grow to the last byte: free %d", b.free.Load())
	}
}

package eval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGroupSignal(t *testing.T) {
	got := GroupSignal([]Group{
		{"question_f1", []float64{0.5, 1, 0.5}}, // differs
		{"question_f1", []float64{1, 1, 1}},     // all equal
		{"question_f1", []float64{0, 0, 0, 1}},  // differs (last one)
		{"question_f1", []float64{0.5}},         // one trajectory: no signal
		{"outcome", []float64{0, 0}},
		{"outcome", []float64{}},
	})
	if got["question_f1"] != 0.5 || got["outcome"] != 0 || len(got) != 2 {
		t.Fatalf("GroupSignal = %v, want question_f1 0.5 (2 of 4), outcome 0", got)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "groups.jsonl")
	os.WriteFile(good, []byte(`{"reward_type":"outcome","rewards":[0,1]}`+"\n\n"+`{"reward_type":"outcome","rewards":[1,1]}`+"\n"), 0o644)
	gs, err := ReadGroups(good)
	if err != nil || len(gs) != 2 || GroupSignal(gs)["outcome"] != 0.5 {
		t.Fatalf("ReadGroups = %v, %v", gs, err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"reward_type":"outcome","rewards":[0,1]}`+"\n"+`{"rewards": [1]}`+"\n"), 0o644)
	if _, err := ReadGroups(bad); err == nil || !strings.Contains(err.Error(), "bad.jsonl:2: reward_type") {
		t.Fatalf("ReadGroups of a bad file: %v", err)
	}
}

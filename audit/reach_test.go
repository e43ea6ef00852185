package audit

import (
	"strings"
	"testing"

	"avtgym/corpus"
)

// TestWarningsUnreachable: Warnings names every ambiguity none of whose
// phrases occurs, as whole words under the deterministic matcher's
// normalisation, in the request or the evidence (or, for a chain
// ambiguity, the resolution of the one it depends on), with the record's
// file, line, id, index and term; and nothing else.
func TestWarningsUnreachable(t *testing.T) {
	amb := func(term string, kind corpus.Kind, aliases ...string) corpus.Ambiguity {
		return corpus.Ambiguity{Term: term, Kind: kind, Resolution: "r", Aliases: aliases}
	}
	task := func(line int, id, request, evidence string, ambs ...corpus.Ambiguity) *corpus.Task {
		return &corpus.Task{Record: &corpus.Record{ID: id, Request: request, Evidence: evidence, Ambiguities: ambs}, File: "records.jsonl", Line: line}
	}
	l1 := amb("crowds", corpus.Critical)
	l1.Resolution = "I mean how many people actually came, the attendance."
	l2 := amb("attendance", corpus.Critical)
	l2.DependsOn = "crowds"
	l2blind := amb("record crowd", corpus.Critical)
	l2blind.DependsOn = "crowds"
	c := &corpus.Corpus{Tasks: []*corpus.Task{
		task(1, "plain", "Which is the top region?", "", amb("top region", corpus.Critical)),
		task(2, "normalised", "Which is the TOP-Region?", "", amb("top region", corpus.Critical)),
		task(3, "alias", "Who are our best customers?", "", amb("top customers", corpus.Critical, "best customers")),
		task(4, "covered", "Show the top customers.", "", amb("top customers", corpus.Critical), amb("customers", corpus.Knowledge)),
		task(5, "evidence", "Which regions are doing well?", "A strong market has sales above 200.", amb("strong market", corpus.Knowledge)),
		task(6, "hidden", "Which vehicles are problem vehicles?", "", amb("problem vehicles", corpus.Critical), amb("Repair Burden", corpus.Knowledge)),
		task(7, "subword", "Who is the regional manager?", "", amb("region", corpus.Critical, "area")),
		task(8, "chain", "How big were the crowds?", "", l1, l2, l2blind),
		task(9, "none", "How many rows?", ""),
	}}
	ws := Warnings(c)
	var got []string
	for _, w := range ws {
		if w.Check != Unreachable || w.File != "records.jsonl" || !strings.HasPrefix(w.Msg, "warning: record "+w.TaskID+", ") {
			t.Errorf("malformed warning %+v", w)
		}
		got = append(got, w.String())
	}
	want := []string{
		`records.jsonl:6: unreachable_term: warning: record hidden, ambiguities[1] (knowledge) "Repair Burden": its term never occurs as whole words in the request, so`,
		`records.jsonl:7: unreachable_term: warning: record subword, ambiguities[0] (critical) "region": neither its term nor an alias occurs as whole words in the request, so`,
		`records.jsonl:8: unreachable_term: warning: record chain, ambiguities[2] (critical) "record crowd": its term never occurs as whole words in the request or the resolution of "crowds" (which it depends on), so`,
	}
	if len(got) != len(want) {
		t.Fatalf("%d warnings, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("warning %d:\n got %s\nwant %s…", i, got[i], want[i])
		}
	}
}

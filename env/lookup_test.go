package env

import (
	"strings"
	"testing"

	"avtgym/corpus"
)

// interp builds a handmade interpretation of an AVT.
func interp(id, ref string, resolutions ...string) *corpus.Task {
	rec := &corpus.Record{ID: id, AVTID: "avt"}
	for i, r := range resolutions {
		rec.Ambiguities = append(rec.Ambiguities, corpus.Ambiguity{Term: "term" + string(rune('a'+i)), Kind: corpus.Critical, Resolution: r})
	}
	return &corpus.Task{Record: rec, ReferenceSQL: ref}
}

// said builds the normalised transcript the lookup solver reads, the way
// episode.lookup does.
func said(replies ...string) string {
	var b strings.Builder
	for _, r := range replies {
		b.WriteString(normalizeSpace(r))
		b.WriteString("\n")
	}
	return b.String()
}

// choiceCounts runs chooseInterpretation over seeds 0..n-1 and counts the
// chosen ids.
func choiceCounts(interps []*corpus.Task, s string, n int) map[string]int {
	counts := map[string]int{}
	for seed := range uint64(n) {
		counts[chooseInterpretation(interps, s, seed).ID]++
	}
	return counts
}

func TestLookupVerbatimReferenceWins(t *testing.T) {
	a := interp("a", "SELECT region FROM sales GROUP BY region ORDER BY SUM(amount) DESC LIMIT 1", "the largest total amount", "in dollars")
	b := interp("b", "SELECT region\nFROM sales\n\tGROUP BY region ORDER BY COUNT(*) DESC   LIMIT 1", "the most sales")
	c := interp("c", "SELECT 42", "something else")
	interps := []*corpus.Task{a, b, c}
	// Every resolution of a is revealed, but the reply quotes b's
	// reference verbatim with other white space.
	reply := "I mean the largest total amount, in dollars. Use:   SELECT region FROM sales\n GROUP BY region\r\nORDER BY COUNT(*) DESC LIMIT 1;"
	for seed := range uint64(200) {
		if got := chooseInterpretation(interps, said(reply), seed).ID; got != "b" {
			t.Fatalf("seed %d: chose %s, want b (verbatim reference)", seed, got)
		}
	}
	// Through several replies: the SQL may be in a later one.
	if got := chooseInterpretation(interps, said("the largest total amount", "in dollars", "SELECT 42"), 3).ID; got != "c" {
		t.Errorf("verbatim in the last reply: chose %s, want c", got)
	}
}

func TestLookupMostRevealedWins(t *testing.T) {
	a := interp("a", "SELECT 1", "rounded to cents", "only 2024")
	b := interp("b", "SELECT 2", "rounded to cents", "all years")
	c := interp("c", "SELECT 3", "rounded to dollars", "only 2024", "excluding refunds")
	interps := []*corpus.Task{a, b, c}
	cases := []struct {
		replies []string
		want    string
	}{
		{[]string{"Amounts are rounded to cents.", "We look at only 2024."}, "a"},
		{[]string{"Amounts are rounded to cents.", "We count all years."}, "b"},
		{[]string{"Only 2024, excluding refunds."}, "c"},
		{[]string{"ROUNDED TO CENTS please", "all years"}, "b"}, // b wins whether or not case is folded
		// White space in the reply does not matter.
		{[]string{"rounded\n  to\tcents", "only\n2024"}, "a"},
		// A resolution repeated in several replies counts once.
		{[]string{"rounded to cents", "rounded to cents", "rounded to cents", "excluding refunds", "only 2024", "rounded to dollars"}, "c"},
	}
	for _, tc := range cases {
		for seed := range uint64(50) {
			if got := chooseInterpretation(interps, said(tc.replies...), seed).ID; got != tc.want {
				t.Fatalf("replies %q seed %d: chose %s, want %s", tc.replies, seed, got, tc.want)
			}
		}
	}
}

func TestLookupTieIsUniformOverCandidates(t *testing.T) {
	a := interp("a", "SELECT 1", "the shared answer")
	b := interp("b", "SELECT 2", "the shared answer")
	c := interp("c", "SELECT 3", "a different answer")
	const n = 2000
	counts := choiceCounts([]*corpus.Task{a, b, c}, said("It is the shared answer."), n)
	if counts["c"] != 0 {
		t.Errorf("a non-candidate was chosen %d times", counts["c"])
	}
	for _, id := range []string{"a", "b"} {
		if f := float64(counts[id]) / n; f < 0.4 || f > 0.6 {
			t.Errorf("candidate %s chosen %.3f of the time, want 0.4..0.6 (%v)", id, f, counts)
		}
	}
	// Shared reference SQL quoted verbatim: also a tie among those.
	d := interp("d", "SELECT 9", "x")
	e := interp("e", "SELECT 9", "y")
	counts = choiceCounts([]*corpus.Task{a, d, e}, said("run SELECT 9"), n)
	if counts["a"] != 0 || counts["d"] < n*4/10 || counts["e"] < n*4/10 {
		t.Errorf("verbatim tie: %v", counts)
	}
}

func TestLookupNothingRevealedIsUniform(t *testing.T) {
	interps := []*corpus.Task{
		interp("a", "SELECT 1", "alpha"),
		interp("b", "SELECT 2", "beta"),
		interp("c", "SELECT 3", "gamma"),
		interp("d", "SELECT 4"), // no resolutions at all
	}
	const n = 4000
	for _, s := range []string{"", said(), said("I can't answer that.")} {
		counts := choiceCounts(interps, s, n)
		for _, task := range interps {
			if f := float64(counts[task.ID]) / n; f < 0.2 || f > 0.3 {
				t.Errorf("transcript %q: %s chosen %.3f of the time, want about 0.25 (%v)", s, task.ID, f, counts)
			}
		}
	}
}

func TestLookupSingleInterpretation(t *testing.T) {
	only := interp("only", "SELECT 1", "alpha")
	for seed := range uint64(100) {
		for _, s := range []string{"", said("alpha"), said("SELECT 2"), said("nothing")} {
			if got := chooseInterpretation([]*corpus.Task{only}, s, seed); got != only {
				t.Fatalf("seed %d %q: chose %v", seed, s, got.ID)
			}
		}
	}
}

func TestLookupDeterministicPerSeed(t *testing.T) {
	interps := []*corpus.Task{interp("a", "SELECT 1", "x"), interp("b", "SELECT 2", "x"), interp("c", "SELECT 3", "x")}
	s := said("x")
	distinct := map[string]bool{}
	for seed := range uint64(64) {
		first := chooseInterpretation(interps, s, seed).ID
		for range 5 {
			if got := chooseInterpretation(interps, s, seed).ID; got != first {
				t.Fatalf("seed %d: chose %s, then %s", seed, first, got)
			}
		}
		distinct[first] = true
	}
	if len(distinct) != 3 {
		t.Errorf("64 seeds chose only %v", distinct)
	}
}

func TestNormalizeSpace(t *testing.T) {
	for in, want := range map[string]string{
		"":                   "",
		"  a  ":              "a",
		"a\n\tb\r\n  c":      "a b c",
		"SELECT\u00a0x":      "SELECT x", // no-break space is white space too
		"already normalised": "already normalised",
	} {
		if got := normalizeSpace(in); got != want {
			t.Errorf("normalizeSpace(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLookupLongestVerbatimWins(t *testing.T) {
	short := &corpus.Task{Record: &corpus.Record{ID: "s"}, ReferenceSQL: "SELECT a FROM t"}
	long := &corpus.Task{Record: &corpus.Record{ID: "l"}, ReferenceSQL: "SELECT a FROM t WHERE b > 1"}
	for seed := range uint64(50) {
		if got := chooseInterpretation([]*corpus.Task{short, long}, "here: SELECT a FROM t WHERE b > 1", seed); got != long {
			t.Fatalf("seed %d chose %s, want the longest quoted reference", seed, got.ID)
		}
	}
}

// TestLookupContainedResolution: when one interpretation's resolution is
// contained in another's (AMBROSIA's "… by month" and "… by month and
// year", the union of two readings), the reply stating the longer one
// reveals only the longer one, and the reply stating the shorter one only
// the shorter one.
func TestLookupContainedResolution(t *testing.T) {
	month := interp("month", "SELECT m", "Show the total sales by month")
	year := interp("year", "SELECT y", "Show the total sales by year")
	both := interp("both", "SELECT m, y", "Show the total sales by month and year")
	interps := []*corpus.Task{month, year, both}
	cases := []struct {
		replies []string
		want    string
	}{
		{[]string{"Show the total sales by month and year"}, "both"},
		{[]string{"Show the total sales by month"}, "month"},
		{[]string{"Show the total sales by year"}, "year"},
		// White space does not matter, and a refusal before changes nothing.
		{[]string{"I can't answer that.", "Show the  total sales\nby month and year"}, "both"},
	}
	// The shorter text stated on its own in another reply counts too: both
	// are revealed once, a tie between month and both.
	for _, tc := range cases {
		for seed := range uint64(64) {
			if got := chooseInterpretation(interps, said(tc.replies...), seed).ID; got != tc.want {
				t.Fatalf("replies %q seed %d: chose %s, want %s", tc.replies, seed, got, tc.want)
			}
		}
	}
	counts := choiceCounts(interps, said("Show the total sales by month", "Show the total sales by month and year"), 400)
	if counts["year"] != 0 || counts["month"] == 0 || counts["both"] == 0 {
		t.Errorf("both texts stated on their own: %v, want a tie between month and both", counts)
	}
	// The same with the contained text at the end of the longer one.
	a := interp("a", "SELECT 1", "rooms per night")
	b := interp("b", "SELECT 2", "prices of rooms per night")
	for seed := range uint64(64) {
		if got := chooseInterpretation([]*corpus.Task{a, b}, said("prices of rooms per night"), seed).ID; got != "b" {
			t.Fatalf("seed %d: chose %s, want b", seed, got)
		}
	}
	// Stated once on its own and once inside the longer text: both count.
	counts = choiceCounts([]*corpus.Task{a, b}, said("only rooms per night, not prices of rooms per night"), 400)
	if counts["a"] == 0 || counts["b"] == 0 {
		t.Errorf("both stated: %v, want a tie", counts)
	}
}

package sqlexec

import "strings"

// Segment is one clause of a SQL text (PROTOCOL.md §3, clause segments).
type Segment struct {
	// Clause names the keyword that starts the segment: "WITH", "SELECT",
	// "FROM", "JOIN" (every join variant), "WHERE", "GROUP BY", "HAVING",
	// "ORDER BY", "LIMIT", "OFFSET", "UNION", "INTERSECT" or "EXCEPT"; ""
	// for a text that contains none of them.
	Clause string
	// Text is the segment's SQL, comments removed, runs of whitespace
	// replaced by one space, trimmed; keywords keep their case.
	Text string
}

// joinModifiers are the words that may precede JOIN in a join variant
// (LEFT OUTER JOIN, NATURAL INNER JOIN, CROSS JOIN, ...).
var joinModifiers = map[string]bool{
	"LEFT": true, "RIGHT": true, "FULL": true, "INNER": true, "OUTER": true, "CROSS": true, "NATURAL": true,
}

// singleClauses are the one-word clause keywords.
var singleClauses = map[string]bool{
	"WITH": true, "SELECT": true, "FROM": true, "WHERE": true, "HAVING": true, "LIMIT": true,
	"OFFSET": true, "UNION": true, "INTERSECT": true, "EXCEPT": true,
}

// Segments cuts sql at the starts of the clause keywords WITH, SELECT,
// FROM, the JOIN variants (a join's modifiers such as LEFT OUTER belong to
// its segment, whose clause is "JOIN"), WHERE, GROUP BY, HAVING, ORDER BY,
// LIMIT, OFFSET, UNION, INTERSECT and EXCEPT, wherever they occur as words
// outside string literals, quoted identifiers and comments — subqueries
// and window clauses included, so a subquery's clauses are segments of
// their own. Text before the first keyword (such as an opening
// parenthesis) is prepended to the first segment; a text without any
// keyword is one segment with an empty Clause. Statement separators stay
// in the text. An empty or comment-only text has no segments.
func Segments(sql string) []Segment {
	// toks are the significant tokens; spaced[i] reports that trivia
	// (whitespace or a comment) preceded toks[i]: it becomes one space.
	var toks []Token
	var spaced []bool
	gap := false
	for _, t := range Lex(sql) {
		if t.Trivia() {
			gap = true
			continue
		}
		toks = append(toks, t)
		spaced = append(spaced, gap)
		gap = false
	}
	if len(toks) == 0 {
		return nil
	}
	type cut struct {
		at     int
		clause string
	}
	var cuts []cut
	for i, t := range toks {
		if t.Kind != TokenWord {
			continue
		}
		w := strings.ToUpper(t.Text)
		switch {
		case singleClauses[w]:
			cuts = append(cuts, cut{i, w})
		case (w == "GROUP" || w == "ORDER") && i+1 < len(toks) && toks[i+1].IsWord("BY"):
			cuts = append(cuts, cut{i, w + " BY"})
		case w == "JOIN":
			// Modifiers are never clause keywords, so no earlier cut lies
			// inside [start, i).
			start := i
			for start > 0 && toks[start-1].Kind == TokenWord && joinModifiers[strings.ToUpper(toks[start-1].Text)] {
				start--
			}
			cuts = append(cuts, cut{start, "JOIN"})
		}
	}
	text := func(from, to int) string {
		var b strings.Builder
		for j := from; j < to; j++ {
			if j > from && spaced[j] {
				b.WriteByte(' ')
			}
			b.WriteString(toks[j].Text)
		}
		return b.String()
	}
	if len(cuts) == 0 {
		return []Segment{{Text: text(0, len(toks))}}
	}
	cuts[0].at = 0 // leading text joins the first segment
	out := make([]Segment, 0, len(cuts))
	for k, c := range cuts {
		end := len(toks)
		if k+1 < len(cuts) {
			end = cuts[k+1].at
		}
		out = append(out, Segment{Clause: c.clause, Text: text(c.at, end)})
	}
	return out
}

package env

import (
	"strings"

	"avtgym/corpus"
)

// lookup is the built-in offline solver (PROTOCOL.md §4). It picks the
// interpretation of the episode's AVT that the dialogue revealed and
// submits that interpretation's reference SQL:
//
//  1. an interpretation whose reference SQL appears verbatim in an oracle
//     reply (after whitespace normalisation) is chosen outright (the
//     longest, when several do);
//  2. otherwise the interpretations whose resolution texts appear most
//     often in the replies remain (all of them when nothing was revealed);
//  3. among those that remain, one is chosen uniformly with the episode's
//     seed.
//
// Success thus depends only on what the dialogue revealed, which is what
// the leakage diagnostics need when no model is available.
func (ep *episode) lookup() string {
	interps := ep.task.Corpus.Interpretations(ep.task.AVTID)
	var replies strings.Builder
	for _, q := range ep.st.Questions {
		replies.WriteString(normalizeSpace(q.Reply))
		replies.WriteString("\n")
	}
	said := replies.String()
	choice := chooseInterpretation(interps, said, ep.st.Seed)
	return choice.ReferenceSQL
}

func chooseInterpretation(interps []*corpus.Task, said string, seed uint64) *corpus.Task {
	// When one reference is a prefix of another ("... FROM t" and
	// "... FROM t WHERE x"), quoting the longer one contains both: the
	// longest quoted reference is the one that was quoted.
	var verbatim []*corpus.Task
	longest := 0
	for _, t := range interps {
		ref := normalizeSpace(t.ReferenceSQL)
		if !strings.Contains(said, ref) {
			continue
		}
		switch {
		case len(ref) > longest:
			longest, verbatim = len(ref), []*corpus.Task{t}
		case len(ref) == longest:
			verbatim = append(verbatim, t)
		}
	}
	candidates := verbatim
	if len(candidates) == 0 {
		best := -1
		for _, t := range interps {
			n := revealed(t, said)
			switch {
			case n > best:
				best, candidates = n, []*corpus.Task{t}
			case n == best:
				candidates = append(candidates, t)
			}
		}
	}
	if len(candidates) == 1 {
		return candidates[0]
	}
	return candidates[mix(seed^0x6c6f6f6b7570)%uint64(len(candidates))]
}

// revealed counts the distinct resolution texts of t that occur in said.
func revealed(t *corpus.Task, said string) int {
	n := 0
	seen := map[string]bool{}
	for _, a := range t.Ambiguities {
		r := normalizeSpace(a.Resolution)
		if r != "" && !seen[r] && strings.Contains(said, r) {
			n++
		}
		seen[r] = true
	}
	return n
}

// normalizeSpace collapses runs of white space into one space.
func normalizeSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

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
//     often in the replies remain (all of them when nothing was revealed):
//     an interpretation scores one for each of its distinct resolution
//     texts that occurs in the replies *on its own*, that is at least once
//     outside every occurrence of a longer resolution text of the AVT that
//     contains it. When one interpretation's resolution is contained in
//     another's ("… by month" and "… by month and year"), a reply stating
//     the longer one thus reveals only the longer one, and a reply stating
//     the shorter one only the shorter one (the most specific match wins);
//  3. among those that remain, one is chosen uniformly with the episode's
//     seed.
//
// Success thus depends only on what the dialogue revealed, which is what
// the leakage diagnostics need when no model is available.
func (ep *episode) lookup() (string, error) {
	interps := ep.task.Corpus.Interpretations(ep.task.AVTID)
	qs, err := ep.hist.questions(ep.env.cfg.Sealer, ep.st)
	if err != nil {
		return "", err
	}
	var replies strings.Builder
	for _, q := range qs {
		replies.WriteString(normalizeSpace(q.reply))
		replies.WriteString("\n")
	}
	said := replies.String()
	choice := chooseInterpretation(interps, said, ep.st.Seed)
	return choice.ReferenceSQL, nil
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
		occ := resolutionOccurrences(interps, said)
		best := -1
		for _, t := range interps {
			n := revealed(t, occ)
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

// revealed counts the distinct resolution texts of t that occur in the
// replies on their own (occ, from resolutionOccurrences).
func revealed(t *corpus.Task, occ map[string]bool) int {
	n := 0
	seen := map[string]bool{}
	for _, a := range t.Ambiguities {
		r := normalizeSpace(a.Resolution)
		if r != "" && !seen[r] && occ[r] {
			n++
		}
		seen[r] = true
	}
	return n
}

// resolutionOccurrences returns the distinct normalised resolution texts of
// interps that occur in said on their own: at some position [p, p+len(r))
// not inside an occurrence [p', p'+len(r')) of a longer resolution text r'
// of interps (p' ≤ p and p+len(r) ≤ p'+len(r')).
func resolutionOccurrences(interps []*corpus.Task, said string) map[string]bool {
	var texts []string
	seen := map[string]bool{}
	for _, t := range interps {
		for _, a := range t.Ambiguities {
			if r := normalizeSpace(a.Resolution); r != "" && !seen[r] {
				seen[r] = true
				texts = append(texts, r)
			}
		}
	}
	type span struct{ start, end int }
	spans := map[string][]span{}
	for _, r := range texts {
		for from := 0; ; {
			k := strings.Index(said[from:], r)
			if k < 0 {
				break
			}
			spans[r] = append(spans[r], span{from + k, from + k + len(r)})
			from += k + 1
		}
	}
	out := map[string]bool{}
	for r, rs := range spans {
	occurrence:
		for _, s := range rs {
			for r2, r2s := range spans {
				if len(r2) <= len(r) || !strings.Contains(r2, r) {
					continue
				}
				for _, s2 := range r2s {
					if s2.start <= s.start && s.end <= s2.end {
						continue occurrence // part of the longer text
					}
				}
			}
			out[r] = true
			break
		}
	}
	return out
}

// normalizeSpace collapses runs of white space into one space.
func normalizeSpace(s string) string { return strings.Join(strings.Fields(s), " ") }

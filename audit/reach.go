package audit

import (
	"fmt"
	"strings"

	"avtgym/corpus"
	"avtgym/oracle"
)

// Unreachable names the unreachable-term warning of `corpus check`
// (Warnings). It is not one of the audit's checks (Checks): a record it
// names still passes.
const Unreachable Check = "unreachable_term"

// Warnings returns the corpus's unreachable-term warnings, in record
// order: one for every registered ambiguity that the deterministic
// matcher cannot reach from what the policy is shown. The matcher credits
// an ambiguity only when a question names its term or an alias as whole
// words (oracle.DeterministicMatcher), so an ambiguity none of whose
// phrases occurs in the record's request or evidence — under the
// matcher's own normalisation, oracle.Names — is credited only to a policy
// that guesses the words: BIRD-Interact's knowledge ambiguities, whose
// term names a knowledge entry the record hides, are the common case. A
// chain ambiguity (Ambiguity.DependsOn) is creditable only after the one
// it depends on, whose resolution the policy has read by then, so the
// resolutions along its chain count as shown too.
//
// These are warnings, not failures: the oracle_probes check passes such a
// record (its full probe names every term verbatim), and an LLM oracle may
// still route a paraphrase to the term; but the deterministic oracle's
// recall on it is the policy's luck.
func Warnings(c *corpus.Corpus) []Finding {
	var out []Finding
	for _, t := range c.Tasks {
		for i, a := range t.Ambiguities {
			parts, chain := reachText(t.Record, i)
			if namedIn(parts, a) {
				continue
			}
			where := []string{"the request"}
			if strings.TrimSpace(t.Evidence) != "" {
				where = append(where, "the evidence")
			}
			if len(chain) > 0 {
				where = append(where, "the resolution of "+strings.Join(chain, " or ")+" (which it depends on)")
			}
			names := "its term never occurs"
			if len(a.Aliases) > 0 {
				names = "neither its term nor an alias occurs"
			}
			out = append(out, Finding{Check: Unreachable, TaskID: t.ID, File: t.File, Line: t.Line, Msg: fmt.Sprintf(
				"warning: record %s, ambiguities[%d] (%s) %q: %s as whole words in %s, so the deterministic matcher credits it only to a question that names it unprompted",
				t.ID, i, a.Kind, a.Term, names, orList(where))})
		}
	}
	return out
}

// reachText is what a policy has been shown by the time ambiguity i of
// rec can be credited, part by part — the request, the evidence and, along
// i's chain of dependencies, the resolution of each ambiguity registered
// under the term depended on — and the quoted terms of that chain, nearest
// first. Parts are matched one by one: the matcher's phrases span any
// separator, and so would span two parts joined. A dependency cycle
// (corpus loading rejects it) is followed once round.
func reachText(rec *corpus.Record, i int) (parts, chain []string) {
	parts = []string{rec.Request, rec.Evidence}
	seen := map[string]bool{rec.Ambiguities[i].Term: true}
	for dep := rec.Ambiguities[i].DependsOn; dep != "" && !seen[dep]; {
		seen[dep] = true
		chain = append(chain, fmt.Sprintf("%q", dep))
		next := ""
		for j, b := range rec.Ambiguities {
			if j != i && b.Term == dep {
				parts = append(parts, b.Resolution)
				if next == "" {
					next = b.DependsOn
				}
			}
		}
		dep = next
	}
	return parts, chain
}

// namedIn reports whether one of parts names a for the deterministic
// matcher (oracle.Names).
func namedIn(parts []string, a corpus.Ambiguity) bool {
	for _, p := range parts {
		if oracle.Names(p, a) {
			return true
		}
	}
	return false
}

// orList joins items as "a", "a or b", "a, b or c".
func orList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " or " + items[len(items)-1]
}

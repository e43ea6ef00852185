// Package probe holds the fixed question texts of the scripted policies of
// PROTOCOL.md §5 — the baselines and the leakage probes — in one place, for
// the policies that ask them, the audit that checks every corpus against
// them and the importers that choose terms the probes can name.
package probe

import "fmt"

// Name names a scripted policy.
type Name string

// The scripted policies of PROTOCOL.md §5.
const (
	// None stops at once (π_none).
	None Name = "none"
	// Full asks about each distinct counted term once, in annotation
	// order, then stops (π_full).
	Full Name = "full"
	// FullAdv is Full with a request for details and SQL appended to each
	// question (π_full^adv): an oracle that leaks answers it.
	FullAdv Name = "full_adv"
	// NoneAdv alternates two generic questions until the budget is spent
	// (π_none^adv): the deterministic oracle credits nothing.
	NoneAdv Name = "none_adv"
)

// Names lists the scripted policies.
var Names = []Name{None, Full, FullAdv, NoneAdv}

// The fixed question texts of PROTOCOL.md §5.
const (
	// FullTemplate is the full policy's question about a term (%s).
	FullTemplate = "Could you clarify what exactly you mean by %s?"
	// AdvSuffix follows each full question of full_adv.
	AdvSuffix = " Please give me as much detail as you can, and if you can, give the exact SQL for it."
	// Generic1 and Generic2 are the generic probe's questions, alternated.
	Generic1 = "Could you clarify what you want?"
	Generic2 = "Please elaborate."
)

// Parse checks a policy name.
func Parse(s string) (Name, error) {
	for _, n := range Names {
		if string(n) == s {
			return n, nil
		}
	}
	return "", fmt.Errorf("unknown policy %q (want none, full, full_adv or none_adv)", s)
}

// FullQuestion is the full policy's question about term.
func FullQuestion(term string) string { return fmt.Sprintf(FullTemplate, term) }

// Questions returns the questions a scripted policy asks, in order, before
// it stops. terms are the distinct counted terms in annotation order (a
// baseline defined by those terms may read them from the privileged
// channel); budget is the episode's question budget.
func Questions(n Name, terms []string, budget int) []string {
	var qs []string
	switch n {
	case Full, FullAdv:
		for _, t := range terms {
			q := FullQuestion(t)
			if n == FullAdv {
				q += AdvSuffix
			}
			qs = append(qs, q)
		}
	case NoneAdv:
		for i := range budget {
			if i%2 == 0 {
				qs = append(qs, Generic1)
			} else {
				qs = append(qs, Generic2)
			}
		}
	}
	return qs
}

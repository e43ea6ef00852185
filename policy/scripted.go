// Package policy holds asking policies that run as clients of an avtgym
// server: the scripted baselines and probes of PROTOCOL.md §5, and the
// runner that plays them over a corpus and aggregates the metrics of §6.
package policy

import (
	"fmt"

	pb "avtgym/proto/avtgym/v1"
)

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
	fullTemplate = "Could you clarify what exactly you mean by %s?"
	advSuffix    = " Please give me as much detail as you can, and if you can, give the exact SQL for it."
	generic1     = "Could you clarify what you want?"
	generic2     = "Please elaborate."
)

// ParseName checks a policy name.
func ParseName(s string) (Name, error) {
	for _, n := range Names {
		if string(n) == s {
			return n, nil
		}
	}
	return "", fmt.Errorf("unknown policy %q (want none, full, full_adv or none_adv)", s)
}

// Questions returns the questions a scripted policy asks, in order, before
// it stops. terms are the distinct counted terms in annotation order (read
// from the privileged channel at reset, which is legitimate for baselines
// defined by those terms); budget is the episode's question budget.
func Questions(n Name, terms []string, budget int) []string {
	var qs []string
	switch n {
	case Full, FullAdv:
		for _, t := range terms {
			q := fmt.Sprintf(fullTemplate, t)
			if n == FullAdv {
				q += advSuffix
			}
			qs = append(qs, q)
		}
	case NoneAdv:
		for i := range budget {
			if i%2 == 0 {
				qs = append(qs, generic1)
			} else {
				qs = append(qs, generic2)
			}
		}
	}
	return qs
}

// CountedTerms returns the distinct counted terms of a reset's privileged
// data, in annotation order.
func CountedTerms(p *pb.Privileged) []string {
	seen := map[string]bool{}
	var terms []string
	for _, a := range p.GetAmbiguities() {
		if a.GetCounted() && !seen[a.GetTerm()] {
			seen[a.GetTerm()] = true
			terms = append(terms, a.GetTerm())
		}
	}
	return terms
}

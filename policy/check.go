package policy

import (
	"context"
	"fmt"

	"avtgym/corpus"
	"avtgym/oracle"
	"avtgym/reward"
)

// CheckReferenceOracle checks the property PROTOCOL.md §3 requires of every
// corpus under the deterministic oracle: on each record with counted
// ambiguities, the full and full_adv policies reach recall = precision = 1
// and the generic probe none_adv reaches recall 0. It plays the policies'
// questions against the oracle in process, with the default budget.
func CheckReferenceOracle(ctx context.Context, c *corpus.Corpus, o oracle.Oracle) []corpus.Problem {
	var problems []corpus.Problem
	for _, t := range c.Tasks {
		counted := t.Counted()
		if len(counted) == 0 {
			continue
		}
		budget := len(counted) + 2
		for _, name := range []Name{Full, FullAdv, NoneAdv} {
			var history []oracle.Turn
			ep := reward.Episode{Counted: counted}
			for _, q := range Questions(name, t.CountedTerms(), budget) {
				r, err := o.Ask(ctx, t.Record, history, q)
				if err != nil {
					problems = append(problems, corpus.Problem{File: t.File, Line: t.Line, Field: "ambiguities", Msg: fmt.Sprintf("oracle failed on %q: %v", q, err)})
					break
				}
				history = append(history, oracle.Turn{Question: q, Reply: r.Text, Credits: r.Credits})
				ep.Credits = append(ep.Credits, r.Credits)
				ep.Attempted++
			}
			qs := reward.Compute(ep)
			bad := func(what string) {
				problems = append(problems, corpus.Problem{File: t.File, Line: t.Line, Field: "ambiguities",
					Msg: fmt.Sprintf("policy %s %s under the deterministic oracle; a term may be part of another term or of the probe questions", name, what)})
			}
			switch name {
			case Full, FullAdv:
				if qs.Recall == nil || *qs.Recall != 1 || qs.Precision == nil || *qs.Precision != 1 {
					bad(fmt.Sprintf("reaches recall %s and precision %s, want 1 and 1", fmtPtr(qs.Recall), fmtPtr(qs.Precision)))
				}
			case NoneAdv:
				if qs.Recall == nil || *qs.Recall != 0 {
					bad(fmt.Sprintf("reaches recall %s, want 0", fmtPtr(qs.Recall)))
				}
			}
		}
	}
	return problems
}

func fmtPtr(x *float64) string {
	if x == nil {
		return "undefined"
	}
	return fmt.Sprintf("%.3g", *x)
}

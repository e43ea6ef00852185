package audit

import (
	"context"
	"fmt"
	"strings"

	"avtgym/corpus"
	"avtgym/sqlcommit"
	"avtgym/sqlexec"
)

// ChainDrift: a TIDE record's chain alternatives and drift turn do what
// they claim (PROTOCOL.md §9; docs/tide.md). Each ambiguity's alternative
// SQL runs and its result differs from the reference's under the record's
// comparison policy (submitted against the reference, it fails without an
// SQL error), and the alternatives of one record differ pairwise; the
// post-drift reference is non-empty and runs, the pre-drift reference
// submitted against it fails under the post-drift policy,
// S(reference) ⊄ S(post-drift reference), Algorithm 1 does not reject the
// pair, and the declared drift subtype and intent subtype are the computed
// ones (package sqlcommit, on the database's schema); neither reference's
// LIMIT cuts through tied sort keys (LimitTie, ties.go). Unit: a record with
// a sample type, a drift or an alternative SQL; other records are
// skipped.
const ChainDrift Check = "chain_drift"

// chainDriftApplies reports whether the chain_drift check has anything to
// check on t.
func chainDriftApplies(t *corpus.Task) bool {
	if t.SampleType != "" || t.Drift != nil {
		return true
	}
	for _, a := range t.Ambiguities {
		if a.AlternativeSQL != "" {
			return true
		}
	}
	return false
}

// chainDriftUnits returns the chain_drift units of Run (the records the
// check applies to, which run queries) and the skipped results of the
// other records.
func (a *auditor) chainDriftUnits() (units []func(context.Context) result, skipped []result) {
	for _, t := range a.c.Tasks {
		if chainDriftApplies(t) {
			units = append(units, func(ctx context.Context) result { return a.checkChainDrift(ctx, t) })
		} else {
			skipped = append(skipped, result{check: ChainDrift, verdict: skip})
		}
	}
	return units, skipped
}

// ChainDriftFindings runs the chain_drift check alone on every record of c
// under the default limits and returns its findings: what the TIDE
// importer checks before it calls a corpus valid.
func ChainDriftFindings(ctx context.Context, c *corpus.Corpus) ([]Finding, error) {
	a := &auditor{c: c, opt: Options{Limits: sqlexec.DefaultLimits()}}
	var fs []Finding
	for _, t := range c.Tasks {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if chainDriftApplies(t) {
			fs = append(fs, a.checkChainDrift(ctx, t).findings...)
		}
	}
	return fs, nil
}

// checkChainDrift checks t's alternative SQL and drift turn. Each finding
// names the record field at fault first ("ambiguities[1].alternative_sql:
// …", "drift.subtype: …").
func (a *auditor) checkChainDrift(ctx context.Context, t *corpus.Task) result {
	var fs []Finding
	bad := func(field, format string, args ...any) {
		fs = append(fs, finding(ChainDrift, t, "%s: %s", field, fmt.Sprintf(format, args...)))
	}
	a.checkAlternatives(ctx, t, bad)
	a.checkLimitTies(ctx, t, bad)
	if t.Drift != nil {
		a.checkDriftTurn(ctx, t, bad)
	}
	if len(fs) > 0 {
		return result{check: ChainDrift, verdict: fail, findings: fs}
	}
	return result{check: ChainDrift, verdict: pass}
}

// checkAlternatives: each alternative SQL, submitted against t's
// reference under t's policy, runs and fails; and no two alternatives of
// t give the same result.
func (a *auditor) checkAlternatives(ctx context.Context, t *corpus.Task, bad func(field, format string, args ...any)) {
	type alt struct {
		i   int
		sql string
	}
	var ok []alt
	for i, am := range t.Ambiguities {
		if am.AlternativeSQL == "" {
			continue
		}
		f := fmt.Sprintf("ambiguities[%d].alternative_sql", i)
		if strings.TrimSpace(am.AlternativeSQL) == "" {
			bad(f, "is blank")
			continue
		}
		if t.Stateful() {
			bad(f, "alternatives are checked on read-only Query records only (this record is verified statefully)")
			continue
		}
		v, err := sqlexec.Check(ctx, t.DB.Engine, t.Corpus.Cache, t.RefKey, t.Policy, am.AlternativeSQL, t.ReferenceSQL, a.opt.Limits)
		switch {
		case err != nil:
			bad(f, "checking it against the reference: %v", err)
		case v.Err != nil:
			bad(f, "the SQL under the other reading of %q does not run: %v", am.Term, v.Err)
		case v.Success:
			bad(f, "the SQL under the other reading of %q gives the reference's result under the record's comparison policy (order %s): answering the question does not change the answer", am.Term, t.Policy.Order)
		default:
			ok = append(ok, alt{i, am.AlternativeSQL})
		}
	}
	// Pairwise: each alternative as the reference of the others, in a
	// cache of this unit's own.
	cache := sqlexec.NewCache()
	for x := range ok {
		for y := x + 1; y < len(ok); y++ {
			key := fmt.Sprintf("%s\x00alternative:%d", t.RefKey, ok[x].i)
			v, err := sqlexec.Check(ctx, t.DB.Engine, cache, key, t.Policy, ok[y].sql, ok[x].sql, a.opt.Limits)
			f := fmt.Sprintf("ambiguities[%d].alternative_sql", ok[y].i)
			switch {
			case err != nil:
				bad(f, "comparing it with ambiguities[%d].alternative_sql: %v", ok[x].i, err)
			case v.Success:
				bad(f, "gives the same result as ambiguities[%d].alternative_sql under the record's comparison policy: the two other readings cannot be told apart", ok[x].i)
			}
		}
	}
}

// checkDriftTurn checks t's post-drift reference against its pre-drift
// reference: results and commitment sets.
func (a *auditor) checkDriftTurn(ctx context.Context, t *corpus.Task, bad func(field, format string, args ...any)) {
	d := t.Drift
	post := lastStatement(d.Reference.SQL)
	if strings.TrimSpace(post) == "" {
		bad("drift.reference.sql", "is empty")
		return
	}
	v, err := sqlexec.Check(ctx, t.DB.Engine, t.Corpus.Cache, t.DriftKey(), t.DriftPolicy, t.ReferenceSQL, t.DriftSQL(), a.opt.Limits)
	switch {
	case err != nil:
		bad("drift.reference.sql", "does not run: %v", err)
		return
	case v.Err != nil:
		bad("reference.sql", "the pre-drift reference does not run under the post-drift comparison policy: %v", v.Err)
	case v.Success:
		bad("drift.reference.sql", "gives the pre-drift reference's result under the post-drift comparison policy (order %s): a policy that ignores the drift passes", t.DriftPolicy.Order)
	}
	schema, err := t.DB.CommitSchema(ctx)
	if err != nil {
		bad("drift", "commitment sets need the database's tables: %v", err)
		return
	}
	r, err := sqlcommit.DriftSQL(lastStatement(t.Reference.SQL), post, schema)
	if err != nil {
		field := "drift.reference.sql"
		if strings.HasPrefix(err.Error(), "pre-drift") {
			field = "reference.sql"
		}
		bad(field, "commitment set: %v", err)
		return
	}
	change := fmt.Sprintf("removed %s; added %s", units(r.Removed), units(r.Added))
	switch {
	case !r.Drift:
		bad("drift.reference.sql", "S(reference) ⊆ S(post-drift reference): the post-drift reference withdraws no commitment (added %s), which is not a drift", units(r.Added))
		return
	case r.Subtype == sqlcommit.Rejected:
		bad("drift.reference.sql", "Algorithm 1 rejects the pair: it is neither a value, a constraint nor a projection drift (%s)", change)
		return
	}
	if d.Subtype != "" && d.Subtype != string(r.Subtype) {
		bad("drift.subtype", "declares %q, but Algorithm 1 computes %q (%s)", d.Subtype, r.Subtype, change)
		return
	}
	if d.IntentSubtype != "" && d.IntentSubtype != string(r.Intent) {
		bad("drift.intent_subtype", "declares %q, but rule R7 computes %q (%s)", d.IntentSubtype, r.Intent, change)
	}
}

// lastStatement is the statement whose result counts.
func lastStatement(l corpus.SQLList) string {
	if len(l) == 0 {
		return ""
	}
	return l[len(l)-1]
}

// units lists commitments for messages.
func units(us []sqlcommit.Unit) string {
	if len(us) == 0 {
		return "nothing"
	}
	parts := make([]string, len(us))
	for i, u := range us {
		parts[i] = fmt.Sprintf("%q", u.String())
	}
	return strings.Join(parts, ", ")
}

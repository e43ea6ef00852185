package audit

import (
	"context"
	"strings"

	"avtgym/corpus"
	"avtgym/corpus/tide"
)

// checkLimitTies reports a LIMIT that cuts through tied sort keys
// (tide.LimitTie: the result is not determined) in t's reference and
// post-drift reference (part of the chain_drift check). A query the
// check cannot rewrite is not reported: the other checks run it.
func (a *auditor) checkLimitTies(ctx context.Context, t *corpus.Task, bad func(field, format string, args ...any)) {
	refs := []struct{ field, sql string }{{"reference.sql", lastStatement(t.Reference.SQL)}}
	if t.Drift != nil {
		refs = append(refs, struct{ field, sql string }{"drift.reference.sql", lastStatement(t.Drift.Reference.SQL)})
	}
	for _, r := range refs {
		if strings.TrimSpace(r.sql) == "" {
			continue
		}
		if msg, err := tide.LimitTie(ctx, t.DB.Engine, r.sql, a.opt.Limits); err == nil && msg != "" {
			bad(r.field, "%s", msg)
		}
	}
}

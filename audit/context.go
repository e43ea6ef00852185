package audit

import (
	"avtgym/corpus"
	"avtgym/env"
	"avtgym/llm"
	"avtgym/oracle"
)

// oracleStages are the LLM oracle prompts a record must fit: each variant's
// matcher and responder (the hybrid oracle uses the unfiltered matcher).
var oracleStages = []struct {
	scoped  bool
	respond bool
	name    string
}{
	{false, false, "the unfiltered LLM oracle's matcher (also the hybrid's)"},
	{false, true, "the unfiltered LLM oracle's responder"},
	{true, false, "the scoped LLM oracle's matcher"},
	{true, true, "the scoped LLM oracle's responder"},
}

// checkContext checks that t's base prompts — no question, no dialogue —
// fit the configured model contexts: every LLM oracle stage
// (oracle.BaseContextTokens) against OracleContextTokens, and the LLM
// solver, with the schema cut it would make (env.SolverBaseTokens),
// against SolverContextTokens. A prompt that does not fit makes every
// episode that reaches it end in ERROR, so each is a finding. Skipped when
// neither context is configured.
func (a *auditor) checkContext(t *corpus.Task) result {
	octx, sctx := a.opt.OracleContextTokens, a.opt.SolverContextTokens
	if octx <= 0 && sctx <= 0 {
		return result{check: Context, verdict: skip}
	}
	var fs []Finding
	if octx > 0 {
		for _, scoped := range []bool{false, true} {
			match, respond := oracle.BaseContextTokens(t.Record, t.DB.Schema, scoped)
			for _, st := range oracleStages {
				if st.scoped != scoped {
					continue
				}
				need := match
				if st.respond {
					need = respond
				}
				if need > octx {
					fs = append(fs, finding(Context, t, "the base prompt (no question, no dialogue) of %s needs ~%d tokens (estimated, the completion limit included), more than --oracle-context-tokens %d: its episodes would end in ERROR",
						st.name, need, octx))
				}
			}
		}
	}
	if sctx > 0 {
		maxTokens := a.opt.SolverMaxTokens
		if maxTokens <= 0 {
			maxTokens = llm.DefaultMaxTokens
		}
		if need := env.SolverBaseTokens(t, sctx, maxTokens); need > sctx {
			fs = append(fs, finding(Context, t, "the LLM solver's base prompt (no dialogue, the schema cut at table boundaries as the solver would) needs ~%d tokens (estimated, %d of them for the reply), more than --solver-context-tokens %d: its SOLVER_LLM episodes would end in ERROR",
				need, maxTokens, sctx))
		}
	}
	if len(fs) > 0 {
		return result{check: Context, verdict: fail, findings: fs}
	}
	return result{check: Context, verdict: pass}
}

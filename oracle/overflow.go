package oracle

import (
	"context"
	"errors"
	"fmt"

	"avtgym/corpus"
	"avtgym/llm"
	"avtgym/sqlexec"
)

// probeQuestion stands for the question in a record's base prompt: the
// prompt with no dialogue that the record alone determines.
const probeQuestion = "What?"

// errTooLong is respond's report that the policy's question or dialogue
// made the prompt overflow the model's context (the record's own prompt
// fits): the answer is Refusal, and Respond withdraws the match
// (Reply.Withdrawn).
var errTooLong = errors.New("oracle: the question or the dialogue is too long for the model's context")

// ErrRecordTooLong marks (errors.Is) an LLM oracle failure caused by the
// record itself: its prompt with no dialogue and a one-word question does
// not fit the model's context. It is a corpus (or configuration) problem,
// never the policy's.
var ErrRecordTooLong = errors.New("the record's own prompt does not fit the model's context")

// blame decides who made a stage's prompt overflow (overflow, a
// KindContextOverflow error): nil when it was the policy's question or
// dialogue, an error wrapping ErrRecordTooLong when the record's base
// prompt (base: no dialogue, probeQuestion) does not fit either, or the
// error of the check itself. An overflow the client estimated is decided
// from the same estimate of base; one the endpoint reported is decided by
// sending base once, with the same completion limit: if the endpoint takes
// it, only the dialogue and the question can have been too long. (Asking
// the endpoint is the only sure answer: the estimate missed this overflow,
// so it cannot be trusted to clear the record either.)
func (l *LLM) blame(ctx context.Context, rec *corpus.Record, overflow error, base []llm.Message, json bool, maxTokens int, purpose string) error {
	if llm.OverflowEstimated(overflow) {
		ctxTokens := l.client.Config().ContextTokens
		if need := llm.EstimatePromptTokens(base) + maxTokens; need > ctxTokens {
			return fmt.Errorf("record %s: %w: the %s prompt needs ~%d tokens (estimated, %d of them for the reply) with no dialogue and a one-word question, more than the context of %d tokens (see avtgym corpus check --oracle-context-tokens)",
				rec.ID, ErrRecordTooLong, purpose, need, maxTokens, ctxTokens)
		}
		return nil
	}
	_, err := l.client.Chat(ctx, llm.Request{
		Messages: base, JSON: json, MaxTokens: maxTokens,
		Purpose: purpose + ".probe", CacheKey: l.cacheKey(rec),
	})
	switch {
	case err == nil:
		return nil
	case llm.KindOf(err) == llm.KindContextOverflow:
		return fmt.Errorf("record %s: %w: the %s prompt overflows even with no dialogue and a one-word question (see avtgym corpus check --oracle-context-tokens): %v; first: %w",
			rec.ID, ErrRecordTooLong, purpose, err, overflow)
	default:
		return fmt.Errorf("checking whether record %s's own %s prompt fits the context: %w", rec.ID, purpose, err)
	}
}

// BaseContextTokens returns the context, in tokens, that each stage of an
// LLM oracle needs for rec before any question: the estimate
// (llm.EstimatePromptTokens) of the stage's prompt with no dialogue and a
// one-word question, plus the stage's completion limit
// (DefaultOracleMaxTokens). For the responder it is the largest over the
// actions stage 1 can take on rec (0 when the only one is unanswerable(),
// which needs no model call). schema is the record's schema text as the
// server shows it (the unfiltered responder's prompt includes it, and the
// scoped one's for SQL-snippet resolutions); scoped selects the scoped
// variant (the hybrid oracle uses the unfiltered matcher). A record whose
// base exceeds the model's context cannot be served by that stage: the
// oracle fails (the episode ends in ERROR) at the first question. A
// regeneration after a cut-off reply asks for twice the completion limit;
// when that does not fit, the question is unanswerable (stage 1) or the
// reply falls back to the deterministic text (stage 2).
func BaseContextTokens(rec *corpus.Record, schema string, scoped bool) (match, respond int) {
	var segs []sqlexec.Segment
	if !scoped {
		for _, s := range rec.Reference.SQL {
			segs = append(segs, sqlexec.Segments(s)...)
		}
	}
	match = llm.EstimatePromptTokens(matchMessages(rec, segs, scoped, nil, probeQuestion)) + DefaultOracleMaxTokens
	l := NewLLM(nil, LLMOptions{Scoped: scoped, Schema: func(*corpus.Record) string { return schema }})
	promptSchema := l.responderSchema(rec)
	try := func(a Action) {
		act, credits := l.validate(rec, segs, a)
		if act.Kind == ActionUnanswerable {
			return
		}
		n := llm.EstimatePromptTokens(respondMessages(rec, segs, promptSchema, scoped, nil, probeQuestion, act, credits)) + DefaultOracleMaxTokens
		respond = max(respond, n)
	}
	for _, a := range rec.Ambiguities {
		try(Action{Kind: ActionLabeled, Arg: a.Term})
		for _, al := range a.Aliases {
			try(Action{Kind: ActionLabeled, Arg: al})
		}
	}
	for _, s := range segs {
		try(Action{Kind: ActionUnlabeled, Arg: s.Text})
	}
	return match, respond
}

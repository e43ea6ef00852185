package oracle

import (
	"strings"

	"avtgym/corpus"
)

// The LLM oracle under BIRD-Interact's protocols (AskOptions.Bird: the
// episode plays BIRD_C or BIRD_A; Oracle.AskWith hands the options to
// MatchWith and RespondWith). Its two stages then follow BIRD-Interact's
// function-driven user simulator (bird_interact_conv/prompts/prompts.py,
// user_simulator_encoder and user_simulator_decoder, v1, the paper's
// Lite; the same templates in
// bird_interact_agent/src/envs/user_simulator/prompts.py and
// BIRD-Interact-ADK/user_simulator/server.py):
//
//   - stage 1 (the encoder) sees what the harness's encoder sees: the
//     task's ambiguity points as JSON (`{}` in phase 2, where the
//     follow-up record has none), the clause segments of the ground-truth
//     SQL and the question — not the request, not the dialogue — and
//     names one action, labeled(term) / unlabeled(segment) /
//     unanswerable();
//   - stage 2 (the decoder) sees the clear request (corpus.Record's
//     Interpretation: the task's `query`), the schema, the ambiguity
//     points, the ground-truth SQL and its segments, the question and the
//     routed action verbatim — and, like the harness's decoder, not the
//     dialogue — and answers the one node the action names; an unlabeled
//     action is answered from that ground-truth segment, in words;
//   - a segment that holds a labeled ambiguity's snippet is answered, as
//     the harness answers whatever segment stage 1 routes to (avtgym's own
//     prompts refuse it, so as not to give a resolution away without its
//     credit); it credits nothing;
//   - every refusal is the harness's sentence (BirdRefusal).
//
// What avtgym keeps of its own: the server validates the action (a term
// or segment that is not the record's is unanswerable(); credits come
// from labeled(term) alone), the policy's question is quoted data, both
// stages answer JSON, unanswerable() is refused without a model call (the
// harness asks the model to write the refusal), and the leak guard
// (llm_leak.go) rejects a reply that quotes the reference SQL or a schema
// identifier — and, under Bird, the clear request word for word.
//
// The scoped oracle keeps its privacy under Bird: it never sees the
// reference SQL, its segments, the clear request or (unless its
// resolutions are SQL) the schema. It answers unlabeled questions from
// what it does see, the resolutions: its unlabeled action names the
// resolution that settles a detail no labeled phrase is asked about
// (validateScopedUnlabeled), and it credits nothing.

// LLMBirdPromptVersion is the version of the Bird prompts (llm_bird.go,
// llm_bird_prompts.go) and of how their output is read; under Bird it
// takes LLMPromptVersion's place in every cache key (see
// LLMOptions.Version), so that a cache never serves a reply written for
// avtgym's own prompts to a Bird question or the reverse. Change it with
// any change of the Bird prompts.
//
// llm-oracle-bird/1: BIRD-Interact's two stages (see above).
//
// llm-oracle-bird/2: as llm-oracle/5, an output cut off in a loop is not
// asked for again with a larger limit.
const LLMBirdPromptVersion = "llm-oracle-bird/2"

// The LLM oracle is a matcher and a responder with options (Oracle.AskWith
// hands them AskOptions).
var (
	_ optionMatcher   = (*LLM)(nil)
	_ optionResponder = (*LLM)(nil)
)

// refusalText is the LLM oracle's refusal: Refusal, or under Bird the
// harness's (BirdRefusal).
func refusalText(bird bool) string {
	if bird {
		return BirdRefusal
	}
	return Refusal
}

// birdPromptVersion is LLMBirdPromptVersion, with the Version label after
// it when that differs from LLMPromptVersion (the label's default).
func (l *LLM) birdPromptVersion() string {
	if l.opt.Version == "" || l.opt.Version == LLMPromptVersion {
		return LLMBirdPromptVersion
	}
	return LLMBirdPromptVersion + "+" + l.opt.Version
}

// birdCacheKey is the cache key of a Bird question's requests.
func (l *LLM) birdCacheKey(rec *corpus.Record) string { return rec.ID + "@" + l.birdPromptVersion() }

// clearQuery is the record's clear request, which BIRD-Interact's decoder
// reads as [[clear_query]]: Interpretation (the importer's `query`), or,
// as the harness falls back to amb_user_query
// (BIRD-Interact-ADK/user_simulator/server.py, TaskSimState), the request
// when the record has none. A follow-up record keeps its task's
// Interpretation (corpus.Task.FollowUpRecord), as the harness keeps
// clear_query across its phase transition.
func clearQuery(rec *corpus.Record) string {
	if q := strings.TrimSpace(rec.Interpretation); q != "" {
		return q
	}
	return strings.TrimSpace(rec.Request)
}

// validateScopedUnlabeled validates the scoped oracle's unlabeled action
// under Bird: its argument must be one of the record's resolutions (folded
// as segments are, normSegment) or — a model that names the phrase
// instead — a term or alias, which stands for that ambiguity's resolution.
// It returns the action with the resolution as its argument, or
// unanswerable(). It credits nothing: the question was not about the
// phrase.
func validateScopedUnlabeled(rec *corpus.Record, act Action) Action {
	want := normSegment(act.Arg)
	if want == "" {
		return unanswerable
	}
	for _, a := range rec.Ambiguities {
		if r := oneLine(a.Resolution); r != "" && normSegment(r) == want {
			return Action{Kind: ActionUnlabeled, Arg: r}
		}
	}
	term := corpus.Normalize(act.Arg)
	for _, a := range rec.Ambiguities {
		hit := corpus.Normalize(a.Term) == term
		for _, al := range a.Aliases {
			hit = hit || corpus.Normalize(al) == term
		}
		if r := oneLine(a.Resolution); hit && r != "" {
			return Action{Kind: ActionUnlabeled, Arg: r}
		}
	}
	return unanswerable
}

// allowedAction is what a Bird reply for act may quote besides
// allowedText: for the scoped oracle's unlabeled action, the text
// resolution it names (the deterministic responder would serve it). A
// segment (the unfiltered oracle's) is never allowed.
func allowedAction(rec *corpus.Record, act Action, scoped bool) string {
	if !scoped || act.Kind != ActionUnlabeled || sqlResolutions(rec) {
		return ""
	}
	return "\n" + act.Arg
}

// birdFallback is the Bird reply once every draft was rejected: the
// deterministic responder's Bird reply for the credits when it is words
// (for SQL resolutions, only when every credited ambiguity has its
// annotated reading, Ambiguity.Chosen), else — an unlabeled action, or a
// reply that would be SQL, which a Bird reply never gives — the harness's
// refusal.
func birdFallback(rec *corpus.Record, credits []int, attempt int) (Reply, error) {
	words := len(credits) > 0
	for _, c := range credits {
		if sqlResolutions(rec) && strings.TrimSpace(rec.Ambiguities[c].Chosen) == "" {
			words = false
		}
	}
	if words {
		fb, err := NewDeterministicResponder().replyWith(rec, credits, true)
		if err != nil {
			return Reply{}, err
		}
		if !fb.Refused {
			fb.Regenerated, fb.FellBack = attempt, true
			return fb, nil
		}
	}
	return Reply{Text: BirdRefusal, Refused: true, Regenerated: attempt, FellBack: true}, nil
}

// birdReplyText reads a Bird stage-2 output: the text between the
// harness's <s> and </s> when the model wrote them (the harness's format:
// BIRD-Interact-ADK/user_simulator/server.py slices the reply out of
// them), else as replyText reads it.
func birdReplyText(content string) string {
	if i := strings.Index(content, "<s>"); i >= 0 {
		rest := content[i+len("<s>"):]
		if j := strings.Index(rest, "</s>"); j >= 0 {
			rest = rest[:j]
		}
		if t := replyText(rest); t != "" {
			return t
		}
	}
	return replyText(content)
}

package oracle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"avtgym/corpus"
	"avtgym/llm"
	"avtgym/sqlexec"
)

// LLMOptions configures an LLM oracle.
type LLMOptions struct {
	// Scoped selects the scoped variant: the matcher sees no clause
	// segments (so it can only answer labeled or unanswerable) and the
	// responder sees the matched ambiguity's resolution instead of the
	// reference SQL, its segments and the schema. Otherwise the oracle is
	// unfiltered.
	Scoped bool
	// RejectLeaks rejects and regenerates a reply that quotes the
	// reference SQL or a schema identifier the question did not mention
	// (see LLM.Respond). The unfiltered oracle does so by default (its
	// responder reads the reference SQL and the schema); RejectLeaks turns
	// it on for the scoped oracle too.
	RejectLeaks bool
	// AllowLeaks turns leak rejection off, for the unfiltered oracle too
	// (RejectLeaks wins when both are set): a responder-leakage study of
	// the raw model, say.
	AllowLeaks bool
	// MaxTokens is the completion limit of each stage's request (default
	// DefaultOracleMaxTokens): room for a short reasoning before the
	// answer. A reply cut off at the limit is asked for once more with
	// twice the limit, unless it was cut off in a loop (see LLM.Match and
	// LLM.Respond).
	MaxTokens int
	// MaxRegenerations bounds the regenerations of one reply (default 2;
	// negative: none).
	MaxRegenerations int
	// Schema returns the record's public schema text, shown to the
	// unfiltered responder and read for schema identifiers by the leak
	// check; nil means none.
	Schema func(*corpus.Record) string
	// Version labels the prompts (serve's --oracle-version). Every cache
	// key holds LLMPromptVersion, and Version too when it differs from it,
	// so that a new release of the prompts never reads the replies to the
	// old ones whatever the label (default LLMPromptVersion).
	Version string
}

// DefaultOracleMaxTokens is the default of LLMOptions.MaxTokens: enough for
// a non-thinking model's short reasoning and answer; a model that thinks
// at length needs its thinking turned off (llm.Config.DisableThinking) or
// a larger limit (docs/models.md).
const DefaultOracleMaxTokens = 512

// cutOffFactor is how much a regeneration after a cut-off reply raises the
// completion limit.
const cutOffFactor = 2

// Why a model's output could not be read: the reason label of the metric
// avtgym_llm_unreadable_total (llm.Client.CountUnreadable).
const (
	unreadableUnparsed  = "unparsed"  // no answer could be read from it
	unreadableCutOff    = "cut_off"   // cut off, with the larger limit too
	unreadableRepeating = "repeating" // cut off in a loop (llm.Response.Degenerate)
)

// DefaultMaxRegenerations is the default of LLMOptions.MaxRegenerations.
const DefaultMaxRegenerations = 2

// LLM is the two-stage LLM oracle of PROTOCOL.md §3, after BIRD-Interact's
// user simulator. Stage 1 (Match) asks the model to classify the question
// as exactly one action — labeled("<term>"), unlabeled("<segment>") or
// unanswerable() — and validates it against the record: a term that is not
// registered (compared by Normalize, aliases included), a segment that is
// not one of the reference's clause segments (compared ignoring case and
// runs of whitespace) or a segment that holds a labeled ambiguity's SQL
// snippet (answering it would give that resolution away without its
// credit) becomes unanswerable(), and output that cannot be read as
// exactly one action is asked for once more, then taken as unanswerable()
// (see parseAction: an action the question itself writes is never taken).
// Credits come
// from the validated action alone: labeled(t) credits every ambiguity whose
// term or alias is t; unlabeled and unanswerable credit nothing. Stage 2
// (Respond) returns Refusal for unanswerable() without calling the model,
// and otherwise has the model write one reply conditioned on the action.
//
// Model output is read as real models write it: the client strips a
// thinking block, and a reply cut off at the completion limit (or at the
// client's byte limit) is never used — the same request is sent once more
// with twice the limit, and a second cut-off counts as unreadable (stage 1)
// or as a rejected draft (stage 2); a reply cut off in a loop
// (llm.Response.Degenerate) is not asked for again: it is unreadable at
// once (stage 1) or the reply falls back (stage 2). Output stage 1 cannot
// read is never silent: Match.Unreadable (the privileged channel's
// "unanswerable() (unreadable)") and the metric
// avtgym_llm_unreadable_total. Both stages ask for JSON (the
// endpoint's JSON mode applies where the client enables it); the parser
// tolerates prose around it and raw newlines inside its strings.
//
// Stage 1 reads the record and the question only — never an earlier
// question or reply; for a record with chain ambiguities, also the terms
// the history's credits have already clarified (see matchMessages) — so a
// reply cannot change a later credit, and the hybrid oracle (Hybrid) earns
// exactly the actual oracle's credits. Stage 2 also reads the dialogue.
//
// Under the BIRD-Interact protocols (AskOptions.Bird, which Oracle.AskWith
// hands to MatchWith and RespondWith) both stages follow BIRD-Interact's
// user simulator instead (llm_bird.go): its prompts (own version,
// LLMBirdPromptVersion), a stage 2 that reads the clear request and not
// the dialogue, segments that hold a labeled snippet answered, an
// unlabeled action for the scoped oracle too, and the harness's refusal.
//
// Every model call goes through the llm client, with Purpose
// "oracle.match" or "oracle.respond" and CacheKey "<record id>@<version>",
// so that with the client's cache the reply is determined by (oracle
// version, model, record, history, question) and a run replays exactly.
// Errors are returned only for environment failures (the endpoint failing
// after the client's retries — an error status, a timeout, or an answer
// that is not a readable chat completion, llm.KindUnreadable — a canceled
// context, a nil record, a record whose own prompt does not fit the
// model's context); bad model output (a readable completion whose content
// cannot be used, which a question can ask for) never fails a call, and
// neither does a question or a dialogue too long for the context (see
// Oracle).
//
// LLM is safe for concurrent use.
type LLM struct {
	client *llm.Client
	opt    LLMOptions
	segs   sync.Map // *corpus.Record → []sqlexec.Segment, computed once per record
}

// NewLLM returns an LLM oracle calling the model through client.
func NewLLM(client *llm.Client, opt LLMOptions) *LLM {
	if opt.MaxTokens <= 0 {
		opt.MaxTokens = DefaultOracleMaxTokens
	}
	if opt.MaxRegenerations == 0 {
		opt.MaxRegenerations = DefaultMaxRegenerations
	} else if opt.MaxRegenerations < 0 {
		opt.MaxRegenerations = 0
	}
	if opt.Version == "" {
		opt.Version = LLMPromptVersion
	}
	return &LLM{client: client, opt: opt}
}

// Options returns the options with the defaults applied.
func (l *LLM) Options() LLMOptions { return l.opt }

// RejectsLeaks reports whether the responder rejects leaking replies: by
// default for the unfiltered oracle, for the scoped one with RejectLeaks
// (see LLMOptions).
func (l *LLM) RejectsLeaks() bool {
	return l.opt.RejectLeaks || !l.opt.Scoped && !l.opt.AllowLeaks
}

// Oracle returns the LLM oracle as a (match, resp) pair:
// Oracle{Matcher: l, Responder: l}. Its Ask returns the reply with the
// validated action (Reply.Action), the number of regenerations and whether
// the reply fell back to the deterministic responder's text.
//
// A prompt over the model's context is the policy's doing when the
// record's own prompt fits: the question (or the dialogue) is too long,
// and the answer is Refusal (Refused) with unanswerable() and no credits,
// from either stage (the responder's stage withdraws the match, see
// Reply.Withdrawn). Whether the record's own prompt fits is decided from
// the estimate of the prompt with no dialogue and a one-word question when
// the overflow was estimated before the call (llm.Config.ContextTokens),
// and by sending that prompt once when the endpoint reported the overflow;
// when it does not fit, Ask fails with ErrRecordTooLong (the corpus does
// not fit the model: `avtgym corpus check --oracle-context-tokens` reports
// such records).
func (l *LLM) Oracle() Oracle { return Oracle{Matcher: l, Responder: l} }

// Hybrid returns the hybrid oracle of PROTOCOL.md §3 for llmMatcher: that
// matcher with the deterministic responder, so its credits (and, for an
// *LLM, its validated action) are the actual oracle's and its text the
// reference resolutions; an unlabeled or unanswerable() action credits
// nothing and so gets Refusal. Each LLM oracle has its own hybrid, built on
// its own matcher: Hybrid(l) for l.Oracle() (ORACLE_TYPE_HYBRID for the
// unfiltered oracle, ORACLE_TYPE_HYBRID_SCOPED for the scoped one), so
// that a responder diagnostic never also changes the matcher.
func Hybrid(llmMatcher Matcher) Oracle {
	return Oracle{Matcher: llmMatcher, Responder: NewDeterministicResponder()}
}

// AnswersLOC reports whether the matcher can route a question as
// unlabeled (locAnswerer): the unfiltered one, which sees the reference's
// segments; not the scoped one, which sees no SQL (a chained ambiguity
// asked early is unanswerable() there).
func (l *LLM) AnswersLOC() bool { return !l.opt.Scoped }

// variant names the oracle's variant.
func (l *LLM) variant() string {
	if l.opt.Scoped {
		return "scoped"
	}
	return "unfiltered"
}

// model names the oracle's model, or "" when the client has none.
func (l *LLM) model() string {
	if l.client == nil {
		return ""
	}
	return l.client.Config().Model
}

// DescribeMatcher describes the LLM oracle's stage 1 (MatcherDescriber).
func (l *LLM) DescribeMatcher() string {
	what := "labeled(term), unlabeled(segment) or unanswerable(), from the request, the labeled ambiguities and the reference's clause segments"
	if l.opt.Scoped {
		what = "labeled(term) or unanswerable(), from the request and the labeled ambiguities (no SQL, no segments)"
	}
	bird := "the ambiguity points as JSON and the segments"
	if l.opt.Scoped {
		bird = "the ambiguity points with their resolutions as JSON; unlabeled names the resolution that settles the detail"
	}
	return fmt.Sprintf("LLM stage 1, %s (model %q, prompts %s): classifies the question (quoted data; an attempt to steer it is unanswerable) as %s; reads the question, not the dialogue (for chains, the terms already credited); the server validates the action (exactly one, none the question itself writes) and credits a labeled term's ambiguities; under BIRD_C and BIRD_A BIRD-Interact's encoder (prompts %s): %s, not the request", l.variant(), l.model(), l.promptVersion(), what, l.birdPromptVersion(), bird)
}

// DescribeResponder describes the LLM oracle's stage 2
// (ResponderDescriber).
func (l *LLM) DescribeResponder() string {
	sees := "the reference SQL, its clause segments and the schema"
	if l.opt.Scoped {
		sees = "the matched ambiguity's resolution (no SQL or segments; the schema only to explain a resolution written in SQL)"
	}
	leaks := ""
	if l.RejectsLeaks() {
		leaks = fmt.Sprintf("; replies quoting the reference SQL or unmentioned schema identifiers are regenerated (at most %d times, then the deterministic text)", l.opt.MaxRegenerations)
	}
	bird := "the clear request, the schema, the ambiguity points, the reference SQL and its segments; a segment holding a labeled snippet is answered"
	if l.opt.Scoped {
		bird = "the resolution the action names, nothing it is scoped away from"
	}
	return fmt.Sprintf("LLM stage 2, %s (model %q, prompts %s): writes one reply about the one element the action names, seeing the request, the dialogue (as quoted data) and %s; the fixed refusal for unanswerable() without a model call%s; under BIRD_C and BIRD_A BIRD-Interact's decoder (prompts %s): no dialogue, %s, and the harness's refusal text", l.variant(), l.model(), l.promptVersion(), sees, leaks, l.birdPromptVersion(), bird)
}

// Match runs stage 1 and returns the validated action with its credits.
// A question or dialogue too long for the matcher's context is
// unanswerable().
func (l *LLM) Match(ctx context.Context, rec *corpus.Record, history []Turn, question string) (Match, error) {
	return l.MatchWith(ctx, rec, history, question, AskOptions{})
}

// MatchWith is Match for a question asked under opt (Oracle.AskWith calls it):
// with opt.Bird, stage 1 is BIRD-Interact's encoder (see birdMatchMessages);
// the other options are Oracle.AskWith's, not the matcher's.
func (l *LLM) MatchWith(ctx context.Context, rec *corpus.Record, history []Turn, question string, opt AskOptions) (Match, error) {
	if rec == nil {
		return Match{}, errNilRecord
	}
	act, credits, unreadable, err := l.match(ctx, rec, history, question, opt.Bird)
	if err != nil {
		return Match{}, err
	}
	if unreadable != "" {
		l.client.CountUnreadable("oracle", "match", unreadable)
	}
	return Match{Credits: credits, Action: act, Unreadable: unreadable != ""}, nil
}

// Respond runs stage 2 for the match: Refusal (Refused, no model call) for
// unanswerable(), else a model reply conditioned on the action. A match
// without an action (a deterministic matcher's) answers as labeled(the
// first credited term) when it has credits and as unanswerable() when it
// has none. When the responder's own prompt is too long for the context
// because of the question or the dialogue, the reply is Refusal, Refused
// and Withdrawn (Oracle.Ask then drops the credits); when the record's own
// prompt does not fit, Respond fails with ErrRecordTooLong. It fails for a
// nil record and for a credit that is not an index of rec.Ambiguities.
func (l *LLM) Respond(ctx context.Context, rec *corpus.Record, history []Turn, question string, m Match) (Reply, error) {
	return l.RespondWith(ctx, rec, history, question, m, AskOptions{})
}

// RespondWith is Respond for a question asked under opt (Oracle.AskWith
// calls it): with opt.Bird, stage 2 is BIRD-Interact's decoder
// (see birdRespondMessages), which reads no dialogue, and every refusal is
// the harness's text (BirdRefusal).
func (l *LLM) RespondWith(ctx context.Context, rec *corpus.Record, history []Turn, question string, m Match, opt AskOptions) (Reply, error) {
	if rec == nil {
		return Reply{}, errNilRecord
	}
	for _, a := range m.Credits {
		if a < 0 || a >= len(rec.Ambiguities) {
			return Reply{}, fmt.Errorf("oracle: credit %d out of range [0, %d) in record %q", a, len(rec.Ambiguities), rec.ID)
		}
	}
	act := m.Action
	if act.Kind == ActionNone {
		act = unanswerable
		if len(m.Credits) > 0 {
			act = Action{Kind: ActionLabeled, Arg: rec.Ambiguities[m.Credits[0]].Term}
		}
	}
	r, err := l.respond(ctx, rec, history, question, act, m.Credits, opt.Bird)
	if errors.Is(err, errTooLong) {
		return Reply{Text: refusalText(opt.Bird), Refused: true, Withdrawn: true}, nil
	}
	return r, err
}

func (l *LLM) cacheKey(rec *corpus.Record) string { return rec.ID + "@" + l.promptVersion() }

// keyFor is the cache key of a question's requests: cacheKey, or under
// Bird birdCacheKey (the Bird prompts have their own version).
func (l *LLM) keyFor(rec *corpus.Record, bird bool) string {
	if bird {
		return l.birdCacheKey(rec)
	}
	return l.cacheKey(rec)
}

// promptVersion is LLMPromptVersion, with the Version label after it when
// that differs ("llm-oracle/5+v1").
func (l *LLM) promptVersion() string {
	if l.opt.Version == "" || l.opt.Version == LLMPromptVersion {
		return LLMPromptVersion
	}
	return LLMPromptVersion + "+" + l.opt.Version
}

// segments returns the clause segments of the record's reference, cut once
// per record (records do not change once loaded).
func (l *LLM) segments(rec *corpus.Record) []sqlexec.Segment {
	if v, ok := l.segs.Load(rec); ok {
		return v.([]sqlexec.Segment)
	}
	var segs []sqlexec.Segment
	for _, s := range rec.Reference.SQL {
		segs = append(segs, sqlexec.Segments(s)...)
	}
	l.segs.Store(rec, segs)
	return segs
}

func (l *LLM) schema(rec *corpus.Record) string {
	if l.opt.Schema == nil {
		return ""
	}
	return l.opt.Schema(rec)
}

// responderSchema is the schema the responder's prompt shows: the
// unfiltered responder's always; the scoped responder's only when the
// resolutions are SQL snippets, which it must explain in words.
func (l *LLM) responderSchema(rec *corpus.Record) string {
	if l.opt.Scoped && !sqlResolutions(rec) {
		return ""
	}
	return l.schema(rec)
}

// match runs stage 1: one request, and at most one more — the same
// request with twice the completion limit when the output was cut off, or
// a corrective request when it could not be read as exactly one action —
// then validation. Output that is still unreadable (or cut off) is
// unanswerable(), and so at once is output cut off in a loop
// (llm.Response.Degenerate: a larger limit only lets the model loop
// longer); unreadable then says why ("unparsed", "cut_off",
// "repeating"), "" for output that was read.
func (l *LLM) match(ctx context.Context, rec *corpus.Record, history []Turn, question string, bird bool) (act Action, credits []int, unreadable string, err error) {
	if err := ctx.Err(); err != nil {
		return Action{}, nil, "", err
	}
	var segs []sqlexec.Segment
	if !l.opt.Scoped {
		segs = l.segments(rec)
	}
	prompt := func(history []Turn, question string) []llm.Message {
		if bird {
			return birdMatchMessages(rec, segs, l.opt.Scoped, history, question)
		}
		return matchMessages(rec, segs, l.opt.Scoped, history, question)
	}
	msgs := prompt(history, question)
	maxTokens := l.opt.MaxTokens
	reason := "" // why the last output could not be read
	for attempt := 0; ; attempt++ {
		resp, err := l.client.Chat(ctx, llm.Request{
			Messages: msgs, JSON: true, MaxTokens: maxTokens,
			Purpose: "oracle.match", CacheKey: l.keyFor(rec, bird),
		})
		if llm.KindOf(err) == llm.KindContextOverflow {
			if attempt > 0 {
				// The model's own unreadable output (or the larger limit)
				// made the next request too long: unreadable twice, as
				// below.
				return unanswerable, nil, reason, nil
			}
			base := prompt(nil, probeQuestion)
			if err := l.blame(ctx, rec, err, base, true, l.opt.MaxTokens, "oracle.match"); err != nil {
				return Action{}, nil, "", err
			}
			return unanswerable, nil, "", nil // the question or the dialogue is too long
		}
		if err != nil {
			return Action{}, nil, "", err
		}
		if !resp.CutOff() {
			if act, ok := parseAction(resp.Content, question); ok {
				act, credits := l.validateIn(rec, segs, act, bird, openChained(rec, history))
				return act, credits, "", nil
			}
		}
		switch {
		case resp.Degenerate():
			return unanswerable, nil, unreadableRepeating, nil
		case resp.CutOff():
			reason = unreadableCutOff
		default:
			reason = unreadableUnparsed
		}
		if attempt >= 1 {
			return unanswerable, nil, reason, nil
		}
		if resp.CutOff() {
			maxTokens *= cutOffFactor // the same request, with room to finish
			continue
		}
		msgs = append(msgs[:len(msgs):len(msgs)],
			llm.Message{Role: "assistant", Content: resp.Content},
			llm.Message{Role: "user", Content: matchCorrective})
	}
}

// validate checks an action against the record and returns it in
// canonical form with its credits; an invalid action is unanswerable().
func (l *LLM) validate(rec *corpus.Record, segs []sqlexec.Segment, act Action) (Action, []int) {
	return l.validateAs(rec, segs, act, false)
}

// validateAs is validateIn with no chained ambiguity open.
func (l *LLM) validateAs(rec *corpus.Record, segs []sqlexec.Segment, act Action, bird bool) (Action, []int) {
	return l.validateIn(rec, segs, act, bird, nil)
}

// openChained marks the chained ambiguities of rec whose dependency no
// question of history was credited with (TIDE's L2 while L1 is open); nil
// for a record without a chain.
func openChained(rec *corpus.Record, history []Turn) []bool {
	if !rec.HasChain() {
		return nil
	}
	resolved := map[string]bool{}
	for _, t := range history {
		for _, c := range t.Credits {
			if c >= 0 && c < len(rec.Ambiguities) {
				resolved[rec.Ambiguities[c].Term] = true
			}
		}
	}
	open := make([]bool, len(rec.Ambiguities))
	for i, a := range rec.Ambiguities {
		open[i] = a.DependsOn != "" && !resolved[a.DependsOn]
	}
	return open
}

// chainSegment validates an unlabeled segment seg against the open chained
// ambiguities (openChained): it reports whether seg is one's detail (holds
// its snippet, or is its ChainDetail), so that the action is TIDE's early
// L2 routed as LOC and is answered (by the deterministic responder too) although it tells what
// that ambiguity decides (TIDE Appendix E: such a question is answered as
// a SQL-level detail, without the L2 credit).
func chainSegment(rec *corpus.Record, seg string, open []bool) bool {
	for i, o := range open {
		if !o {
			continue
		}
		if holdsSnippet(seg, snippet(rec, rec.Ambiguities[i])) || normSegment(ChainDetail(rec, i)) == normSegment(seg) {
			return true
		}
	}
	return false
}

// validateIn is validate, under Bird by BIRD-Interact's simulator's rules
// where they differ: a segment that holds a labeled snippet is answered
// (the harness answers whatever segment stage 1 routes to), and the scoped
// oracle's unlabeled action names a resolution (validateScopedUnlabeled).
// open marks the chained ambiguities whose dependency is unresolved
// (openChained): a segment that is one's detail is answered as TIDE's LOC
// (chainSegment), not refused for holding its snippet.
func (l *LLM) validateIn(rec *corpus.Record, segs []sqlexec.Segment, act Action, bird bool, open []bool) (Action, []int) {
	switch act.Kind {
	case ActionLabeled:
		want := corpus.Normalize(act.Arg)
		if want == "" {
			return unanswerable, nil
		}
		var credits []int
		for i, a := range rec.Ambiguities {
			hit := corpus.Normalize(a.Term) == want
			for _, al := range a.Aliases {
				hit = hit || corpus.Normalize(al) == want
			}
			if hit {
				credits = append(credits, i)
			}
		}
		if len(credits) == 0 {
			return unanswerable, nil
		}
		return Action{Kind: ActionLabeled, Arg: rec.Ambiguities[credits[0]].Term}, credits
	case ActionUnlabeled:
		if l.opt.Scoped {
			if bird {
				return validateScopedUnlabeled(rec, act), nil
			}
			return unanswerable, nil
		}
		want := normSegment(act.Arg)
		if want == "" {
			return unanswerable, nil
		}
		for _, s := range segs {
			if normSegment(s.Text) != want {
				continue
			}
			if bird {
				// BIRD-Interact answers the segment whatever it holds
				// (bird_interact_conv/prompts/prompts.py, the decoder's
				// unlabeled action); it credits nothing.
				return Action{Kind: ActionUnlabeled, Arg: s.Text}, nil
			}
			if chainSegment(rec, s.Text, open) {
				return Action{Kind: ActionUnlabeled, Arg: s.Text}, nil
			}
			for _, a := range rec.Ambiguities {
				if holdsSnippet(s.Text, snippet(rec, a)) {
					// Answering it would give a labeled resolution away
					// without its credit.
					return unanswerable, nil
				}
			}
			return Action{Kind: ActionUnlabeled, Arg: s.Text}, nil
		}
	}
	return unanswerable, nil
}

// snippetLead are the words a snippet may start with that the segment
// holding it need not repeat right before it ("WHERE a = 1" is held by
// "WHERE b = 2 AND a = 1").
var snippetLead = map[string]bool{"where": true, "and": true, "or": true, "having": true, "on": true, "select": true, "from": true, "join": true, "group": true, "order": true, "by": true, "limit": true}

// holdsSnippet reports whether the clause segment seg and the SQL snippet
// snip of a labeled ambiguity overlap so that answering the segment would
// tell (part of) what the ambiguity decides: the snippet's leak tokens
// (see leakChecker), without its leading clause words, occur contiguously
// in the segment's (the segment holds it), or the segment's tokens, two or
// more, occur contiguously in the snippet's (the segment is a part of it:
// "LIMIT 5" of "ORDER BY total DESC LIMIT 5"). A snippet of one token
// holds only when it is the whole segment.
func holdsSnippet(seg, snip string) bool {
	if strings.TrimSpace(snip) == "" {
		return false
	}
	st := leakTokens(sqlexec.NormalizeSQL(seg))
	full := leakTokens(sqlexec.NormalizeSQL(snip))
	sn := full
	for len(sn) > 0 && snippetLead[sn[0]] {
		sn = sn[1:]
	}
	switch {
	case len(sn) == 0:
		return false
	case len(sn) == 1:
		return normSegment(seg) == normSegment(snip)
	}
	return containsRun(st, sn) || len(st) >= 2 && containsRun(full, st)
}

// segmentPrefix is the "[CLAUSE] " label of a segment as the prompt lists
// it, which a model may copy along.
var segmentPrefix = regexp.MustCompile(`^\[[A-Za-z ]+\]\s*`)

// normSegment folds case and runs of whitespace, ignoring a copied
// "[CLAUSE]" label and a trailing semicolon.
func normSegment(s string) string {
	s = segmentPrefix.ReplaceAllString(strings.TrimSpace(s), "")
	s = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), ";"))
	return strings.ToLower(strings.Join(strings.Fields(s), " "))
}

// grammarCall matches an action in the text grammar.
var grammarCall = regexp.MustCompile(`(?i)\b(unlabeled|labeled|unanswerable)\s*\(\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')?\s*\)`)

// candidate is one action found in a model's output: its text, the action
// and whether it is complete (a labeled or unlabeled action has its
// argument).
type candidate struct {
	raw string
	act Action
	ok  bool
}

// parseAction reads the one action of a model's output for question. The
// output is read leniently: JSON objects {"action": ..., "term"|"segment"|
// "argument"|"arg"|"value": ...} (prose, fences and a "reasoning" field
// around them tolerated; the action may itself be written in the grammar,
// or as AMB/LOC/UNA), or when there is none, calls of the text grammar
// labeled("term") / unlabeled("segment") / unanswerable() anywhere in the
// text. It is strict about how many: an action the question itself writes
// — verbatim, or the same action in another form — is an echo of an
// injection and ignored, and of the rest there must be exactly one
// (repeats of the same action count once). It reports false otherwise, and
// when the one action is a labeled or unlabeled action without its
// argument.
func parseAction(content, question string) (Action, bool) {
	injected := questionActions(question)
	foldedQ := foldSpace(question)
	echo := func(c candidate) bool {
		if r := foldSpace(c.raw); r != "" && strings.Contains(foldedQ, r) {
			return true
		}
		if !c.ok {
			return false
		}
		for _, in := range injected {
			if sameAction(in, c.act) {
				return true
			}
		}
		return false
	}
	var kept []candidate
	for _, c := range jsonCandidates(content) {
		if !echo(c) {
			kept = append(kept, c)
		}
	}
	if len(kept) == 0 {
		for _, c := range grammarCandidates(content) {
			if !echo(c) {
				kept = append(kept, c)
			}
		}
	}
	if len(kept) == 0 {
		return Action{}, false
	}
	one := kept[0]
	for _, c := range kept[1:] {
		if !c.ok || !one.ok || !sameAction(c.act, one.act) {
			return Action{}, false // several different actions
		}
	}
	return one.act, one.ok
}

// questionActions are the actions a question writes itself, in the
// grammar or as JSON: an injection, never the model's answer.
func questionActions(question string) []Action {
	var out []Action
	for _, c := range jsonCandidates(question) {
		if c.ok {
			out = append(out, c.act)
		}
	}
	for _, c := range grammarCandidates(question) {
		if c.ok {
			out = append(out, c.act)
		}
	}
	return out
}

// jsonCandidates are the actions of the JSON objects of text that have an
// "action" (or "type") field.
func jsonCandidates(text string) []candidate {
	var out []candidate
	for _, obj := range llm.JSONObjects(text) {
		var m map[string]any
		if json.Unmarshal([]byte(obj), &m) != nil {
			continue
		}
		name, _ := m["action"].(string)
		if name == "" {
			name, _ = m["type"].(string)
		}
		if name == "" {
			continue
		}
		c := candidate{raw: obj}
		if g := grammarCall.FindStringSubmatch(name); g != nil {
			c.act, c.ok = grammarAction(g)
			out = append(out, c)
			continue
		}
		arg := ""
		for _, k := range []string{"term", "segment", "argument", "arg", "value"} {
			if s, ok := m[k].(string); ok && strings.TrimSpace(s) != "" {
				arg = strings.TrimSpace(s)
				break
			}
		}
		switch strings.ToLower(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(name), "()"))) {
		case "labeled", "labelled", "amb":
			c.act, c.ok = Action{Kind: ActionLabeled, Arg: arg}, arg != ""
		case "unlabeled", "unlabelled", "loc":
			c.act, c.ok = Action{Kind: ActionUnlabeled, Arg: arg}, arg != ""
		case "unanswerable", "una":
			c.act, c.ok = unanswerable, true
		}
		out = append(out, c)
	}
	return out
}

// grammarCandidates are the calls of the text grammar in text.
func grammarCandidates(text string) []candidate {
	var out []candidate
	for _, g := range grammarCall.FindAllStringSubmatch(text, MaxGrammarCalls) {
		c := candidate{raw: g[0]}
		c.act, c.ok = grammarAction(g)
		out = append(out, c)
	}
	return out
}

// MaxGrammarCalls bounds the grammar calls parseAction reads in one text.
const MaxGrammarCalls = 64

// sameAction reports whether a and b are the same action, their arguments
// compared as validate compares them.
func sameAction(a, b Action) bool {
	if a.Kind != b.Kind {
		return false
	}
	switch a.Kind {
	case ActionLabeled:
		return corpus.Normalize(a.Arg) == corpus.Normalize(b.Arg)
	case ActionUnlabeled:
		return normSegment(a.Arg) == normSegment(b.Arg)
	}
	return true
}

// foldSpace lower-cases s and folds its runs of white space into one space.
func foldSpace(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }

func grammarAction(m []string) (Action, bool) {
	arg := m[3]
	if m[2] != "" {
		arg = m[2]
		if u, err := strconv.Unquote(`"` + m[2] + `"`); err == nil {
			arg = u
		}
	}
	arg = strings.TrimSpace(arg)
	switch strings.ToLower(m[1]) {
	case "labeled":
		return Action{Kind: ActionLabeled, Arg: arg}, arg != ""
	case "unlabeled":
		return Action{Kind: ActionUnlabeled, Arg: arg}, arg != ""
	}
	return unanswerable, true
}

// respond runs stage 2 for a validated action: Refusal for unanswerable(),
// else a model reply. A draft is rejected and regenerated when it is cut
// off (the same request with twice the completion limit), empty or
// unreadable, or (when the oracle rejects leaks) leaks (a corrective turn
// each); after MaxRegenerations rejected drafts — at once for a draft cut
// off in a loop (llm.Response.Degenerate) — the reply falls back to the
// deterministic responder's reply for the credits (Refusal, Refused, when
// there are none: an unlabeled action). A fallback after an unreadable
// draft is counted (llm.Client.CountUnreadable). errTooLong: the question or the
// dialogue is too long for the responder's context.
func (l *LLM) respond(ctx context.Context, rec *corpus.Record, history []Turn, question string, act Action, credits []int, bird bool) (Reply, error) {
	if act.Kind == ActionUnanswerable {
		return Reply{Text: refusalText(bird), Refused: true}, nil
	}
	if err := ctx.Err(); err != nil {
		return Reply{}, err
	}
	var segs []sqlexec.Segment
	if !l.opt.Scoped {
		segs = l.segments(rec)
	}
	promptSchema := l.responderSchema(rec)
	prompt := func(history []Turn, question string) []llm.Message {
		if bird {
			return birdRespondMessages(rec, segs, promptSchema, l.opt.Scoped, question, act, credits)
		}
		return respondMessages(rec, segs, promptSchema, l.opt.Scoped, history, question, act, credits)
	}
	msgs := prompt(history, question)
	var lc *leakChecker
	if l.RejectsLeaks() {
		lc = newLeakChecker(rec, l.segments(rec), l.schema(rec))
		if bird && !l.opt.Scoped {
			lc.guardClearQuery(rec) // only its responder reads it
		}
	}
	allowed := question + allowedText(rec, credits)
	if bird {
		allowed += allowedAction(rec, act, l.opt.Scoped)
	}
	fallback := func(attempt int) (Reply, error) {
		if bird {
			return birdFallback(rec, credits, attempt)
		}
		fb, err := NewDeterministicResponder().reply(rec, credits)
		if err != nil {
			return Reply{}, err
		}
		fb.Regenerated, fb.FellBack = attempt, true
		return fb, nil
	}
	maxTokens := l.opt.MaxTokens
	// unreadable says why the last draft could not be read ("": it
	// could, or it leaked): a fallback after it is counted.
	unreadable := ""
	fallBack := func(attempt int) (Reply, error) {
		if unreadable != "" {
			l.client.CountUnreadable("oracle", "respond", unreadable)
		}
		return fallback(attempt)
	}
	for attempt := 0; ; attempt++ {
		resp, err := l.client.Chat(ctx, llm.Request{
			Messages: msgs, JSON: true, MaxTokens: maxTokens,
			Purpose: "oracle.respond", CacheKey: l.keyFor(rec, bird),
		})
		if llm.KindOf(err) == llm.KindContextOverflow && attempt > 0 {
			// A regeneration request (the draft and the corrective
			// appended, or the larger limit) is too long: every draft
			// counts as rejected.
			return fallBack(attempt)
		}
		if llm.KindOf(err) == llm.KindContextOverflow {
			base := prompt(nil, probeQuestion)
			if err := l.blame(ctx, rec, err, base, true, l.opt.MaxTokens, "oracle.respond"); err != nil {
				return Reply{}, err
			}
			return Reply{}, errTooLong
		}
		if err != nil {
			return Reply{}, err
		}
		if resp.Degenerate() {
			// Cut off in a loop: a larger limit only lets the model loop
			// longer, and a corrective turn would quote the loop back.
			unreadable = unreadableRepeating
			return fallBack(attempt)
		}
		text, cutOff := "", resp.CutOff()
		if !cutOff {
			text = replyText(resp.Content)
			if bird {
				text = birdReplyText(resp.Content)
			}
		}
		corrective := ""
		switch {
		case cutOff:
			unreadable = unreadableCutOff
		case text == "":
			corrective, unreadable = respondEmptyCorrective, unreadableUnparsed
		case lc != nil && lc.leaks(text, allowed):
			corrective, unreadable = respondCorrective, ""
		default:
			return Reply{Text: text, Regenerated: attempt}, nil
		}
		if attempt >= l.opt.MaxRegenerations {
			return fallBack(attempt)
		}
		if cutOff {
			// Never served: the same request, with room to finish.
			maxTokens = min(maxTokens*cutOffFactor, l.opt.MaxTokens*cutOffFactor*cutOffFactor)
			continue
		}
		msgs = append(msgs[:len(msgs):len(msgs)],
			llm.Message{Role: "assistant", Content: resp.Content},
			llm.Message{Role: "user", Content: corrective})
	}
}

// replyKeys are the fields a reply may come in: the prompt's "reply", and
// what models (and BIRD-Interact's format) write instead.
var replyKeys = []string{"reply", "output", "response", "answer", "text"}

// replyText reads the reply of a stage-2 output: the string field of the
// first JSON object that has one (replyKeys), else — a model that ignored
// the format — the text itself when it holds no JSON object. Either is
// cleaned (cleanReply); "" when there is nothing to serve.
func replyText(content string) string {
	objs := llm.JSONObjects(content)
	for _, obj := range objs {
		var m map[string]any
		if json.Unmarshal([]byte(obj), &m) != nil {
			continue
		}
		for _, k := range replyKeys {
			if s, ok := m[k].(string); ok && strings.TrimSpace(s) != "" {
				return cleanReply(s)
			}
		}
	}
	if len(objs) > 0 {
		return "" // JSON, but no reply in it
	}
	return cleanReply(content)
}

// cleanReply trims a reply and the quotes or "Me:" label a model may put
// around it.
func cleanReply(s string) string {
	s = strings.TrimSpace(s)
	for _, p := range []string{"Me:", "Reply:", "User:"} {
		if len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) {
			s = strings.TrimSpace(s[len(p):])
		}
	}
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"') && !strings.Contains(s[1:len(s)-1], `"`) {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	return s
}

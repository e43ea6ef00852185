package oracle

import (
	"context"
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
	// (see LLM.Respond).
	RejectLeaks bool
	// MaxRegenerations bounds the regenerations of one reply (default 2;
	// negative: none).
	MaxRegenerations int
	// Schema returns the record's public schema text, shown to the
	// unfiltered responder and read for schema identifiers by the leak
	// check; nil means none.
	Schema func(*corpus.Record) string
	// Version is the prompt version, part of every cache key (default
	// LLMPromptVersion).
	Version string
}

// DefaultMaxRegenerations is the default of LLMOptions.MaxRegenerations.
const DefaultMaxRegenerations = 2

// Completion limits of the two stages.
const (
	matchMaxTokens   = 256
	respondMaxTokens = 400
)

// LLM is the two-stage LLM oracle of PROTOCOL.md §3, after BIRD-Interact's
// user simulator. Stage 1 (Match) asks the model to classify the question
// as exactly one action — labeled("<term>"), unlabeled("<segment>") or
// unanswerable() — and validates it against the record: a term that is not
// registered (compared by Normalize, aliases included) or a segment that is
// not one of the reference's clause segments (compared ignoring case and
// runs of whitespace) becomes unanswerable(), and output that cannot be
// parsed is asked for once more, then taken as unanswerable(). Credits come
// from the validated action alone: labeled(t) credits every ambiguity whose
// term or alias is t; unlabeled and unanswerable credit nothing. Stage 2
// (Respond) returns Refusal for unanswerable() without calling the model,
// and otherwise has the model write one reply conditioned on the action.
//
// Stage 1 reads the record and the question only — never an earlier
// question or reply; for a record with chain ambiguities, also the terms
// the history's credits have already clarified (see matchMessages) — so a
// reply cannot change a later credit, and the hybrid oracle (Hybrid) earns
// exactly the actual oracle's credits. Stage 2 also reads the dialogue.
//
// Every model call goes through the llm client, with Purpose
// "oracle.match" or "oracle.respond" and CacheKey "<record id>@<version>",
// so that with the client's cache the reply is determined by (oracle
// version, model, record, history, question) and a run replays exactly.
// Errors are returned only for environment failures (the endpoint failing
// after the client's retries, a canceled context, a nil record, a record
// whose own prompt does not fit the model's context); bad model output
// never fails a call, and neither does a question or a dialogue too long
// for the context (see Oracle).
//
// LLM is safe for concurrent use.
type LLM struct {
	client *llm.Client
	opt    LLMOptions
	segs   sync.Map // *corpus.Record → []sqlexec.Segment, computed once per record
}

// NewLLM returns an LLM oracle calling the model through client.
func NewLLM(client *llm.Client, opt LLMOptions) *LLM {
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
	return fmt.Sprintf("LLM stage 1, %s (model %q, prompts %s): classifies the question as %s; reads the question, not the dialogue (for chains, the terms already credited); the server validates the action and credits a labeled term's ambiguities", l.variant(), l.model(), l.opt.Version, what)
}

// DescribeResponder describes the LLM oracle's stage 2
// (ResponderDescriber).
func (l *LLM) DescribeResponder() string {
	sees := "the reference SQL, its clause segments and the schema"
	if l.opt.Scoped {
		sees = "the matched ambiguity's resolution (no SQL, segments or schema)"
	}
	leaks := ""
	if l.opt.RejectLeaks {
		leaks = fmt.Sprintf("; replies quoting the reference SQL or unmentioned schema identifiers are regenerated (at most %d times, then the deterministic text)", l.opt.MaxRegenerations)
	}
	return fmt.Sprintf("LLM stage 2, %s (model %q, prompts %s): writes one reply conditioned on the action, seeing the request, the dialogue and %s; the fixed refusal for unanswerable() without a model call%s", l.variant(), l.model(), l.opt.Version, sees, leaks)
}

// Match runs stage 1 and returns the validated action with its credits.
// A question or dialogue too long for the matcher's context is
// unanswerable().
func (l *LLM) Match(ctx context.Context, rec *corpus.Record, history []Turn, question string) (Match, error) {
	if rec == nil {
		return Match{}, errNilRecord
	}
	act, credits, err := l.match(ctx, rec, history, question)
	if err != nil {
		return Match{}, err
	}
	return Match{Credits: credits, Action: act}, nil
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
	r, err := l.respond(ctx, rec, history, question, act, m.Credits)
	if errors.Is(err, errTooLong) {
		return Reply{Text: Refusal, Refused: true, Withdrawn: true}, nil
	}
	return r, err
}

func (l *LLM) cacheKey(rec *corpus.Record) string { return rec.ID + "@" + l.opt.Version }

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

// match runs stage 1: one request, one corrective retry on unparseable
// output, then validation.
func (l *LLM) match(ctx context.Context, rec *corpus.Record, history []Turn, question string) (Action, []int, error) {
	if err := ctx.Err(); err != nil {
		return Action{}, nil, err
	}
	var segs []sqlexec.Segment
	if !l.opt.Scoped {
		segs = l.segments(rec)
	}
	msgs := matchMessages(rec, segs, l.opt.Scoped, history, question)
	for attempt := 0; ; attempt++ {
		resp, err := l.client.Chat(ctx, llm.Request{
			Messages: msgs, JSON: true, MaxTokens: matchMaxTokens,
			Purpose: "oracle.match", CacheKey: l.cacheKey(rec),
		})
		if llm.KindOf(err) == llm.KindContextOverflow {
			if attempt > 0 {
				// The model's own unreadable output made the corrective
				// request too long: unreadable twice, as below.
				return unanswerable, nil, nil
			}
			base := matchMessages(rec, segs, l.opt.Scoped, nil, probeQuestion)
			if err := l.blame(ctx, rec, err, base, true, matchMaxTokens, "oracle.match"); err != nil {
				return Action{}, nil, err
			}
			return unanswerable, nil, nil // the question or the dialogue is too long
		}
		if err != nil {
			return Action{}, nil, err
		}
		act, ok := parseAction(resp.Content)
		if ok {
			act, credits := l.validate(rec, segs, act)
			return act, credits, nil
		}
		if attempt >= 1 {
			return unanswerable, nil, nil
		}
		msgs = append(msgs[:len(msgs):len(msgs)],
			llm.Message{Role: "assistant", Content: resp.Content},
			llm.Message{Role: "user", Content: matchCorrective})
	}
}

// validate checks an action against the record and returns it in
// canonical form with its credits; an invalid action is unanswerable().
func (l *LLM) validate(rec *corpus.Record, segs []sqlexec.Segment, act Action) (Action, []int) {
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
			return unanswerable, nil
		}
		want := normSegment(act.Arg)
		if want == "" {
			return unanswerable, nil
		}
		for _, s := range segs {
			if normSegment(s.Text) == want {
				return Action{Kind: ActionUnlabeled, Arg: s.Text}, nil
			}
		}
	}
	return unanswerable, nil
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

// parseAction reads an action from a model's output, leniently: a JSON
// object {"action": ..., "term"|"segment"|"argument"|"arg": ...} (fences
// and prose around it tolerated; the action may itself be written in the
// grammar, or as AMB/LOC/UNA), else the first call of the text grammar
// labeled("term") / unlabeled("segment") / unanswerable(). It reports false
// when neither is found or a labeled/unlabeled action lacks its argument.
func parseAction(content string) (Action, bool) {
	var obj map[string]any
	if llm.ParseJSON(content, &obj) == nil {
		name, _ := obj["action"].(string)
		if name == "" {
			name, _ = obj["type"].(string)
		}
		if m := grammarCall.FindStringSubmatch(name); m != nil {
			return grammarAction(m)
		}
		arg := ""
		for _, k := range []string{"term", "segment", "argument", "arg", "value"} {
			if s, ok := obj[k].(string); ok && strings.TrimSpace(s) != "" {
				arg = strings.TrimSpace(s)
				break
			}
		}
		switch strings.ToLower(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(name), "()"))) {
		case "labeled", "labelled", "amb":
			return Action{Kind: ActionLabeled, Arg: arg}, arg != ""
		case "unlabeled", "unlabelled", "loc":
			return Action{Kind: ActionUnlabeled, Arg: arg}, arg != ""
		case "unanswerable", "una":
			return unanswerable, true
		}
	}
	if m := grammarCall.FindStringSubmatch(content); m != nil {
		return grammarAction(m)
	}
	return Action{}, false
}

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
// else a model reply, regenerated when it is empty or (with RejectLeaks)
// leaks, falling back to the deterministic responder's reply for the
// credits (Refusal, Refused, when there are none: an unlabeled action)
// when every attempt failed. errTooLong: the question or the dialogue is
// too long for the responder's context.
func (l *LLM) respond(ctx context.Context, rec *corpus.Record, history []Turn, question string, act Action, credits []int) (Reply, error) {
	if act.Kind == ActionUnanswerable {
		return Reply{Text: Refusal, Refused: true}, nil
	}
	if err := ctx.Err(); err != nil {
		return Reply{}, err
	}
	var segs []sqlexec.Segment
	schema := l.schema(rec)
	if !l.opt.Scoped {
		segs = l.segments(rec)
	}
	promptSchema := schema
	if l.opt.Scoped {
		promptSchema = ""
	}
	msgs := respondMessages(rec, segs, promptSchema, l.opt.Scoped, history, question, act, credits)
	var lc *leakChecker
	if l.opt.RejectLeaks {
		lc = newLeakChecker(rec, l.segments(rec), schema)
	}
	for attempt := 0; ; attempt++ {
		resp, err := l.client.Chat(ctx, llm.Request{
			Messages: msgs, MaxTokens: respondMaxTokens,
			Purpose: "oracle.respond", CacheKey: l.cacheKey(rec),
		})
		if llm.KindOf(err) == llm.KindContextOverflow && attempt > 0 {
			// A regeneration request (the draft and the corrective
			// appended) is too long: every draft counts as rejected.
			fb, err := NewDeterministicResponder().reply(rec, credits)
			if err != nil {
				return Reply{}, err
			}
			fb.Regenerated, fb.FellBack = attempt, true
			return fb, nil
		}
		if llm.KindOf(err) == llm.KindContextOverflow {
			base := respondMessages(rec, segs, promptSchema, l.opt.Scoped, nil, probeQuestion, act, credits)
			if err := l.blame(ctx, rec, err, base, false, respondMaxTokens, "oracle.respond"); err != nil {
				return Reply{}, err
			}
			return Reply{}, errTooLong
		}
		if err != nil {
			return Reply{}, err
		}
		text := cleanReply(resp.Content)
		corrective := ""
		switch {
		case text == "":
			corrective = "Your reply was empty. Write the reply to the analyst's question now, in one to three plain sentences."
		case lc != nil && lc.leaks(text, question):
			corrective = respondCorrective
		default:
			return Reply{Text: text, Regenerated: attempt}, nil
		}
		if attempt >= l.opt.MaxRegenerations {
			fb, err := NewDeterministicResponder().reply(rec, credits)
			if err != nil {
				return Reply{}, err
			}
			fb.Regenerated, fb.FellBack = attempt, true
			return fb, nil
		}
		msgs = append(msgs[:len(msgs):len(msgs)],
			llm.Message{Role: "assistant", Content: resp.Content},
			llm.Message{Role: "user", Content: corrective})
	}
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

// Package oracle plays the user in an episode: given a record, the history
// and the asking policy's question, a Matcher decides which registered
// ambiguities the question credits (a Match: the credits and the stage-1
// Action they come from) and a Responder writes the Reply for that Match
// (PROTOCOL.md §3). Oracle.Ask is the one place that runs the two: it
// hands the responder the matcher's Match for the same question, so no
// state passes between the stages any other way. A Reply says whether it
// is a refusal (Reply.Refused) by a flag, never by its text.
//
// The deterministic oracle (Deterministic) is the reference oracle: its
// matcher credits an ambiguity when the question names its term or an
// alias as whole words, and its responder returns the stored resolutions.
// Credits never depend on a response (a responder can only withdraw the
// whole match, for a question too long for its model: Reply.Withdrawn), so
// a hybrid oracle (an actual matcher with the deterministic responder)
// earns the same credits as the actual oracle.
//
// The LLM oracle (NewLLM) is the two-stage user simulator of PROTOCOL.md §3
// after BIRD-Interact, in an unfiltered and a scoped variant: a model
// classifies the question as labeled("term"), unlabeled("segment") or
// unanswerable(), the server validates that action against the record and
// credits from it alone, and a second model call writes the reply
// (rejecting and regenerating replies that leak the reference SQL or
// schema identifiers: by default for the unfiltered variant). The policy's
// text reaches the prompts as quoted data (QuoteData), and the server
// takes exactly one action from the model's output, never one the question
// itself writes. CheckModel runs the scripted probes and injected questions
// against a model, for `avtgym probe` (docs/models.md). The LLM oracle is the pair
// Oracle{Matcher: l, Responder: l} (LLM.Oracle); Hybrid pairs an LLM
// matcher with the deterministic responder, for the responder-leakage
// diagnostic of §6: each LLM variant gets its own hybrid, on its own
// matcher.
//
// Oracle.AskWith's StrictCredit option (off by default: AmbiTab's matcher)
// narrows any matcher's verdict before the responder sees it (StrictMatch):
// a question that reproduces the request credits nothing, any other at
// most one ambiguity. Its Bird option (the BIRD_C and BIRD_A protocols)
// follows BIRD-Interact's user simulator instead: at most one ambiguity
// per question (AtMostOne, the simulator's one action), the harness's
// refusal text (BirdRefusal) and, from the deterministic responder, words
// rather than SQL where the record has words. The deterministic oracle
// stays a lexical reference point there, not the paper's LLM simulator.
//
// On a record with chain ambiguities (TIDE's L1 → L2, PROTOCOL.md §9)
// Oracle.Ask applies the chain rule to any matcher's verdict (ChainMatch):
// an ambiguity that depends on another is credited only once an earlier
// question was credited with that one; Routing names the layer a question
// routes to.
//
// The deliberately leaky test oracles, fixtures for the leakage diagnostics
// only (served under `serve --test-oracles`), live in package oracletest.
package oracle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"avtgym/corpus"
	"avtgym/sqlexec"
)

// Refusal is the fixed reply to a question that credits no ambiguity.
const Refusal = "I can't answer that; please ask about something specific in the request."

// BirdRefusal is the deterministic responder's refusal under the
// BIRD-Interact protocols (AskOptions.Bird): the text BIRD-Interact's
// response generator must give for unanswerable()
// (bird_interact_agent/src/envs/user_simulator/prompts.py,
// USER_SIMULATOR_DECODER: if the action is "unanswerable()", "you should
// respond: <s>Sorry, this question is out of scope, so I can not answer
// your question.</s>"), without the tags.
const BirdRefusal = "Sorry, this question is out of scope, so I can not answer your question."

// Turn is one answered question in an episode's history.
type Turn struct {
	// Question is the asking policy's text.
	Question string
	// Reply is the oracle's answer.
	Reply string
	// Credits are the ambiguity indexes (into the record's Ambiguities,
	// ascending) the question was credited with.
	Credits []int
}

// ActionKind is the kind of a matcher's stage-1 action (PROTOCOL.md §3).
type ActionKind int

// The stage-1 action kinds.
const (
	// ActionNone: the matcher takes no action; it credits by its own rule
	// (the deterministic matchers). The zero value.
	ActionNone ActionKind = iota
	// ActionUnanswerable: the question is not about anything the oracle
	// answers; it credits nothing and the reply is Refusal.
	ActionUnanswerable
	// ActionLabeled: the question asks about a registered ambiguity; Arg is
	// its term (the first credited one, as registered).
	ActionLabeled
	// ActionUnlabeled: the question asks about a detail of the reference
	// that no registered ambiguity covers; Arg is the reference's clause
	// segment that settles it. It credits nothing.
	ActionUnlabeled
)

// Action is a matcher's validated stage-1 action: labeled("<term>"),
// unlabeled("<segment>") or unanswerable() for the LLM matcher, none (the
// zero Action) for the deterministic ones. It is privileged: never shown to
// the asking policy.
type Action struct {
	// Kind is the action.
	Kind ActionKind
	// Arg is the term (labeled) or the segment (unlabeled); "" otherwise.
	Arg string
}

// unanswerable is the action unanswerable().
var unanswerable = Action{Kind: ActionUnanswerable}

// String renders the action in the grammar of PROTOCOL.md §3 —
// labeled("t"), unlabeled("seg"), unanswerable() — with Go string quoting
// of the argument, and "" for none.
func (a Action) String() string {
	switch a.Kind {
	case ActionNone:
		return ""
	case ActionLabeled:
		return "labeled(" + strconv.Quote(a.Arg) + ")"
	case ActionUnlabeled:
		return "unlabeled(" + strconv.Quote(a.Arg) + ")"
	}
	return "unanswerable()"
}

// Match is a matcher's verdict on one question: the credits and the
// stage-1 action they come from. Oracle.Ask hands it, unchanged, to the
// responder of the same question; no state is kept between the two.
type Match struct {
	// Credits are the credited ambiguity indexes (into rec.Ambiguities),
	// ascending, nil when none.
	Credits []int
	// Action is the validated stage-1 action the credits come from (the
	// LLM matcher); the zero Action (none) for a matcher that takes none.
	Action Action
	// Unreadable reports that the matcher's model wrote nothing it could
	// read as an action (after its corrective turn; or cut off, also with
	// the larger limit, or in a loop): Action is unanswerable() and there
	// are no credits, but not because the question was unanswerable.
	Unreadable bool
}

// Matcher decides which registered ambiguities a question credits. It
// reads only the question (and, for chains, the history's credits), never
// a response. Implementations must be safe for concurrent use.
type Matcher interface {
	Match(ctx context.Context, rec *corpus.Record, history []Turn, question string) (Match, error)
}

// Responder writes the oracle's reply to a question given the matcher's
// verdict m on that same question (its credits and its action). It sets
// the reply's Text, Refused, Withdrawn, Regenerated and FellBack; Oracle.Ask
// fills Credits and Action from m. Implementations must be safe for
// concurrent use.
type Responder interface {
	Respond(ctx context.Context, rec *corpus.Record, history []Turn, question string, m Match) (Reply, error)
}

// Oracle is a (match, resp) pair. Oracle.Ask is the one place that runs
// both stages; the LLM oracle is Oracle{Matcher: l, Responder: l} and the
// hybrid oracle Oracle{Matcher: l, Responder: NewDeterministicResponder()}
// for an *LLM l.
type Oracle struct {
	// Matcher credits the question.
	Matcher Matcher
	// Responder writes the reply.
	Responder Responder
}

// Reply is the oracle's answer to one question.
type Reply struct {
	// Text is the reply shown to the asking policy.
	Text string
	// Refused reports that the answer is a refusal: the fixed Refusal text
	// (BirdRefusal from the deterministic responder under AskOptions.Bird),
	// given for a question that credits nothing (the deterministic
	// responder), for unanswerable() (the LLM responder, which then calls
	// no model), for a question or dialogue too long for the model's
	// context, and when every LLM draft for an unlabeled action was
	// rejected (the deterministic fallback has nothing to say). A refusal
	// earns no credit (for a loaded corpus: the deterministic responder
	// also refuses credits whose resolutions are all blank, which corpus
	// loading rejects). Callers tell a refusal by this flag, never by
	// comparing Text with Refusal: a model may write that sentence as a
	// reply, and a test oracle may append to it.
	Refused bool
	// Withdrawn is a responder's way to void the match: its own stage found
	// the question (or the dialogue) too long for the model's context, so
	// the question is the policy's fault after all. Oracle.Ask then drops
	// the matcher's credits, reports unanswerable() (unless the matcher
	// took no action) and sets Refused; the responder's Text is the
	// refusal.
	Withdrawn bool
	// Credits are the credited ambiguity indexes (privileged: never shown
	// to the policy), from the matcher.
	Credits []int
	// Action is the matcher's validated stage-1 action, such as
	// labeled("top customers"), unlabeled("ORDER BY revenue DESC") or
	// unanswerable() (privileged); none for the deterministic matchers.
	Action Action
	// Regenerated counts the LLM responder's regenerations of this reply
	// (empty or leaking drafts rejected).
	Regenerated int
	// FellBack reports that every LLM draft was rejected and Text is the
	// deterministic responder's text for the credits.
	FellBack bool
	// Unreadable is the matcher's Match.Unreadable: its action
	// unanswerable() stands for output that could not be read.
	Unreadable bool
}

// UnreadableNote follows the action in the privileged channel when the
// matcher's output could not be read (Reply.PrivilegedAction):
// "unanswerable() (unreadable)".
const UnreadableNote = " (unreadable)"

// PrivilegedAction is the action as the privileged channel reports it
// (oracle_action): Action.String(), with UnreadableNote after it when
// stage 1's output could not be read, so that an unreadable output is
// never taken for a question the model found unanswerable.
func (r Reply) PrivilegedAction() string {
	if r.Unreadable {
		return r.Action.String() + UnreadableNote
	}
	return r.Action.String()
}

// optionMatcher is a matcher whose verdict depends on the question's
// AskOptions (the LLM matcher, whose prompts under Bird are
// BIRD-Interact's: MatcherWithOptions). AskWith calls MatchWith instead
// of Match when the matcher has it.
type optionMatcher interface {
	MatchWith(ctx context.Context, rec *corpus.Record, history []Turn, question string, opt AskOptions) (Match, error)
}

// optionResponder is a responder whose reply depends on the question's
// AskOptions (the LLM responder and the deterministic one, whose refusal
// and answers under Bird are BIRD-Interact's: ResponderWithOptions).
// AskWith calls RespondWith instead of Respond when the responder has it.
type optionResponder interface {
	RespondWith(ctx context.Context, rec *corpus.Record, history []Turn, question string, m Match, opt AskOptions) (Reply, error)
}

// ErrIncomplete is returned by Oracle.Ask when the matcher or the
// responder is missing.
var ErrIncomplete = errors.New("oracle: matcher or responder is nil")

// Ask is AskWith with the default options (AmbiTab's matcher).
func (o Oracle) Ask(ctx context.Context, rec *corpus.Record, history []Turn, question string) (Reply, error) {
	return o.AskWith(ctx, rec, history, question, AskOptions{})
}

// AskWith credits the question with the matcher (its MatchWith under opt
// when it has one), narrows the verdict by the strict-credit rule when
// opt.StrictCredit is set (StrictMatch: the one place the rule is applied,
// whatever the matcher), by the chain rule, and by the one-ambiguity rule
// when opt.Bird is set (AtMostOne), then has the responder write the reply
// for that verdict (its RespondWith under opt when it has one), and
// returns the reply with the verdict's credits and action — or, when the
// responder withdrew the match (see Reply.Withdrawn), with no credits and
// unanswerable(). With opt.CreditHistory the history's credits are first
// recomputed (see AskOptions). It implements env.Oracle.
func (o Oracle) AskWith(ctx context.Context, rec *corpus.Record, history []Turn, question string, opt AskOptions) (Reply, error) {
	if o.Matcher == nil || o.Responder == nil {
		return Reply{}, ErrIncomplete
	}
	if err := ctx.Err(); err != nil {
		return Reply{}, err
	}
	if opt.CreditHistory && rec != nil && rec.HasChain() {
		var err error
		if history, err = o.creditHistory(ctx, rec, history, opt); err != nil {
			return Reply{}, err
		}
	}
	m, err := o.match(ctx, rec, history, question, opt)
	if err != nil {
		return Reply{}, err
	}
	var r Reply
	if ow, ok := o.Responder.(optionResponder); ok {
		r, err = ow.RespondWith(ctx, rec, history, question, m, opt)
	} else {
		r, err = o.Responder.Respond(ctx, rec, history, question, m)
	}
	if err != nil {
		return Reply{}, fmt.Errorf("oracle: respond: %w", err)
	}
	r.Credits, r.Action, r.Unreadable = m.Credits, m.Action, m.Unreadable
	if r.Withdrawn {
		r.Refused, r.Credits = true, nil
		if m.Action.Kind != ActionNone {
			r.Action = unanswerable
		}
	}
	return r, nil
}

// match runs the matcher and, with opt.StrictCredit, the strict-credit
// rule on its verdict, then the chain rule (ChainMatch), then with opt.Bird
// the one-ambiguity rule (AtMostOne). The one-ambiguity rule comes after
// the chain rule so that a question naming a blocked L2 and an open L1
// keeps L1 (the first creditable ambiguity), not nothing.
func (o Oracle) match(ctx context.Context, rec *corpus.Record, history []Turn, question string, opt AskOptions) (Match, error) {
	var m Match
	var err error
	if ow, ok := o.Matcher.(optionMatcher); ok {
		m, err = ow.MatchWith(ctx, rec, history, question, opt)
	} else {
		m, err = o.Matcher.Match(ctx, rec, history, question)
	}
	if err != nil {
		return Match{}, fmt.Errorf("oracle: match: %w", err)
	}
	// The rules below narrow the verdict; none makes output readable.
	unreadable := m.Unreadable
	if opt.StrictCredit && rec != nil {
		m = StrictMatch(rec, question, m)
	}
	chained := ChainMatch(rec, history, m)
	if len(chained.Credits) == 0 && len(m.Credits) > 0 && answersLOC(o.Matcher) {
		chained = earlyChainLOC(rec, m, chained)
	}
	m = chained
	if opt.Bird && rec != nil {
		m = AtMostOne(rec, m)
	}
	m.Unreadable = unreadable
	return m, nil
}

// locAnswerer is a matcher that says whether it can route a question as
// an unlabeled (LOC) action: the scoped LLM matcher cannot (it sees no
// SQL). A matcher without the method can (the deterministic ones: their
// responder answers from the record).
type locAnswerer interface {
	AnswersLOC() bool
}

func answersLOC(m Matcher) bool {
	if l, ok := m.(locAnswerer); ok {
		return l.AnswersLOC()
	}
	return true
}

// earlyChainLOC is TIDE's routing of a question the chain rule left
// without credits (TIDE Appendix E: "L2-targeted clarifications issued
// while L1 is still unresolved are routed as LOC rather than AMB"): when
// the first ambiguity the matcher credited, m, has a localisable detail in
// the reference (ChainDetail), the question is answered as unlabeled(that
// segment) with no credit (so L2 still counts only after L1, and the
// routing is "other"); the deterministic responder answers such an action
// (it recognises it: chainSegment), so the hybrid oracle does too. Otherwise chained (the chain rule's verdict:
// unanswerable() for a labeled action, a refusal) is kept.
func earlyChainLOC(rec *corpus.Record, m, chained Match) Match {
	for _, c := range m.Credits {
		if c < 0 || c >= len(rec.Ambiguities) || rec.Ambiguities[c].DependsOn == "" {
			continue
		}
		if d := ChainDetail(rec, c); d != "" {
			return Match{Action: Action{Kind: ActionUnlabeled, Arg: d}}
		}
		break
	}
	return chained
}

// ChainDetail is the SQL-level detail of rec's reference that ambiguity i
// decides, as one clause segment of the reference (sqlexec.Segments: one
// atomic node per answer, TIDE Appendix E): the segment that holds its SQL
// snippet (Ambiguity.SQLSnippet, or its resolution when the resolutions
// are SQL); without a snippet, the first segment of the reference that the
// ambiguity's alternative SQL (the other reading's query) does not have —
// what choosing this reading put in the query. The alternative is only
// compared, never shown; a segment of clause keywords alone ("FROM (")
// is skipped. "" when neither localises it (the oracle then
// refuses).
func ChainDetail(rec *corpus.Record, i int) string {
	if rec == nil || i < 0 || i >= len(rec.Ambiguities) {
		return ""
	}
	a := rec.Ambiguities[i]
	segs := referenceSegments(rec)
	if s := snippet(rec, a); s != "" {
		for _, g := range segs {
			if holdsSnippet(g.Text, s) {
				return g.Text
			}
		}
		return ""
	}
	alt := strings.TrimSpace(a.AlternativeSQL)
	if alt == "" {
		return ""
	}
	other := map[string]bool{}
	for _, g := range sqlexec.Segments(alt) {
		other[normSegment(g.Text)] = true
	}
	for _, g := range segs {
		if !other[normSegment(g.Text)] && substantive(g.Text) {
			return g.Text
		}
	}
	return ""
}

// substantive reports whether a segment says something beyond its clause
// keywords and punctuation ("FROM (" before a subquery says nothing).
func substantive(seg string) bool {
	for _, t := range leakTokens(sqlexec.NormalizeSQL(seg)) {
		if !snippetLead[t] && strings.ContainsFunc(t, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
			return true
		}
	}
	return false
}

// referenceSegments are the clause segments of rec's reference SQL.
func referenceSegments(rec *corpus.Record) []sqlexec.Segment {
	var segs []sqlexec.Segment
	for _, s := range rec.Reference.SQL {
		segs = append(segs, sqlexec.Segments(s)...)
	}
	return segs
}

// PostDriftRecord is rec as the oracle answers about it once its drift
// turn was injected (PROTOCOL.md §9; TIDE's simulator reads the current
// ground truth): the post-drift reference (its SQL, which the LLM stages
// and their segments read), the request followed by the drift utterance
// (what the user has now asked for), and the same ambiguities in the same
// order (credits, the chain's state and TIDE_P's pre-filled layer carry
// over). The corpus gives no post-drift resolutions, only the post-drift
// SQL, so an ambiguity is changed only where the record localises what it
// decides: an SQL snippet that no post-drift segment holds any more is
// dropped, and the ambiguity's answer becomes the drift utterance (the
// user's latest word on it, which withdrew or replaced that detail).
// Elsewhere the annotated resolution stands (TIDE's drifts change one WHERE
// predicate or the output side, not the readings of L1 and L2). Each
// alternative SQL gets the drift's segment changes (driftAlternative), so
// that an early L2 question after the drift is answered with the detail L2
// decides in the post-drift reference (ChainDetail). Its id is
// rec's with "/drift" appended (the LLM oracle's cache keys on it). Nil for
// a nil record; rec itself for a record without a drift. Build it once
// per record: the oracles cache by record pointer.
func PostDriftRecord(rec *corpus.Record) *corpus.Record {
	if rec == nil || rec.Drift == nil {
		return rec
	}
	d := rec.Drift
	r := *rec
	r.ID = rec.ID + "/drift"
	r.Request = strings.TrimSpace(rec.Request) + "\n" + strings.TrimSpace(d.Utterance)
	r.Reference = d.Reference
	r.Drift, r.FollowUp, r.FollowUps = nil, nil, nil
	segs := referenceSegments(&r)
	removed, added := segmentDiff(referenceSegments(rec), segs)
	r.Ambiguities = slices.Clone(rec.Ambiguities)
	for i := range r.Ambiguities {
		a := &r.Ambiguities[i]
		if alt := strings.TrimSpace(a.AlternativeSQL); alt != "" {
			a.AlternativeSQL = driftAlternative(alt, removed, added)
		}
		s := snippet(rec, *a)
		if s == "" || slices.ContainsFunc(segs, func(g sqlexec.Segment) bool { return holdsSnippet(g.Text, s) }) {
			continue
		}
		a.SQLSnippet, a.Resolution = "", strings.TrimSpace(d.Utterance)
	}
	return &r
}

// segmentDiff is what the drift changed in the reference, by clause
// segment (normSegment): the anchor's segments the post-drift reference
// lacks, and the post-drift reference's segments the anchor lacks.
func segmentDiff(anchor, post []sqlexec.Segment) (removed, added []sqlexec.Segment) {
	in := func(segs []sqlexec.Segment, g sqlexec.Segment) bool {
		return slices.ContainsFunc(segs, func(h sqlexec.Segment) bool { return normSegment(h.Text) == normSegment(g.Text) })
	}
	for _, g := range anchor {
		if !in(post, g) {
			removed = append(removed, g)
		}
	}
	for _, g := range post {
		if !in(anchor, g) {
			added = append(added, g)
		}
	}
	return removed, added
}

// driftAlternative is an ambiguity's alternative SQL with the drift's
// changes applied, segment by segment: the segments the drift removed are
// dropped, and a segment the drift added is appended when the alternative
// has no segment of its clause left (it took the dropped one's place):
// the other reading under the post-drift intent, so that ChainDetail on
// the post-drift record finds what the ambiguity decides and not what the
// drift changed. Where the drift and the ambiguity change the same
// segment, that segment stays the ambiguity's detail. Only its segments
// are read (ChainDetail compares them), never run or shown.
func driftAlternative(alt string, removed, added []sqlexec.Segment) string {
	var out []string
	clauses := map[string]bool{}
	for _, g := range sqlexec.Segments(alt) {
		if !slices.ContainsFunc(removed, func(h sqlexec.Segment) bool { return normSegment(h.Text) == normSegment(g.Text) }) {
			out = append(out, strings.TrimSpace(g.Text))
			clauses[g.Clause] = true
		}
	}
	for _, g := range added {
		if !clauses[g.Clause] {
			out = append(out, strings.TrimSpace(g.Text))
		}
	}
	return strings.Join(out, " ")
}

// ChainMatch applies the chain rule of PROTOCOL.md §9 to a matcher's
// verdict m on a question asked after history, whatever the matcher: a
// credit for an ambiguity that depends on another (Ambiguity.DependsOn) is
// dropped unless an earlier question of history was credited with an
// ambiguity of that term — L2 counts only once L1 is resolved. A
// labeled(term) action left without credits becomes unanswerable() (the
// server rejects labeled(L2) while L1 is open), so the responder refuses
// (Oracle.AskWith then routes such a question as LOC where the matcher can:
// earlyChainLOC); a question naming L1 and L2 at once is credited L1 alone (one routing per
// question, L1 first). Records without a chain are returned unchanged.
func ChainMatch(rec *corpus.Record, history []Turn, m Match) Match {
	if rec == nil || len(m.Credits) == 0 || !rec.HasChain() {
		return m
	}
	resolved := func(term string) bool {
		for _, t := range history {
			for _, c := range t.Credits {
				if c >= 0 && c < len(rec.Ambiguities) && rec.Ambiguities[c].Term == term {
					return true
				}
			}
		}
		return false
	}
	var kept []int
	for _, c := range m.Credits {
		if c < 0 || c >= len(rec.Ambiguities) {
			kept = append(kept, c) // the caller reports the bad index
			continue
		}
		if dep := rec.Ambiguities[c].DependsOn; dep == "" || resolved(dep) {
			kept = append(kept, c)
		}
	}
	if len(kept) == len(m.Credits) {
		return m
	}
	out := Match{Credits: kept, Action: m.Action}
	if len(kept) == 0 && m.Action.Kind == ActionLabeled {
		out.Action = unanswerable
	}
	return out
}

// Routing names the chain layer a question's credits route it to
// (PROTOCOL.md §9), given the history before it: "L1", "L2", … for the
// lowest layer (Record.ChainLayers) among the credited ambiguities the
// history had not resolved yet — or, when all were, among all of them —,
// "other" when it is credited with none, and "" for a record without a
// chain. One routing per question, L1 first while it is open.
func Routing(rec *corpus.Record, history []Turn, credits []int) string {
	if rec == nil || !rec.HasChain() {
		return ""
	}
	layers := rec.ChainLayers()
	seen := map[int]bool{}
	for _, t := range history {
		for _, c := range t.Credits {
			seen[c] = true
		}
	}
	best, bestNew := 0, 0
	for _, c := range credits {
		if c < 0 || c >= len(layers) {
			continue
		}
		if best == 0 || layers[c] < best {
			best = layers[c]
		}
		if !seen[c] && (bestNew == 0 || layers[c] < bestNew) {
			bestNew = layers[c]
		}
	}
	switch {
	case bestNew > 0:
		return "L" + strconv.Itoa(bestNew)
	case best > 0:
		return "L" + strconv.Itoa(best)
	}
	return "other"
}

// creditHistory returns a copy of history whose Credits are the matcher's
// (under opt) for each question in turn, each matched with the credits of
// the turns before it. Replies are kept but never read by a matcher.
func (o Oracle) creditHistory(ctx context.Context, rec *corpus.Record, history []Turn, opt AskOptions) ([]Turn, error) {
	out := make([]Turn, len(history))
	for i, t := range history {
		m, err := o.match(ctx, rec, out[:i], t.Question, opt)
		if err != nil {
			return nil, err
		}
		out[i] = Turn{Question: t.Question, Reply: t.Reply, Credits: m.Credits}
	}
	return out, nil
}

// MatcherDescriber is implemented by matchers that describe themselves
// (for EnvService.ListOracles): equal descriptions mean the same matcher.
type MatcherDescriber interface {
	DescribeMatcher() string
}

// ResponderDescriber is implemented by responders that describe
// themselves (for EnvService.ListOracles): equal descriptions mean the
// same responder.
type ResponderDescriber interface {
	DescribeResponder() string
}

// Describe returns the descriptions of the oracle's matcher and responder
// (their DescribeMatcher and DescribeResponder, or their Go types).
func (o Oracle) Describe() (matcher, responder string) {
	matcher, responder = fmt.Sprintf("%T", o.Matcher), fmt.Sprintf("%T", o.Responder)
	if d, ok := o.Matcher.(MatcherDescriber); ok {
		matcher = d.DescribeMatcher()
	}
	if d, ok := o.Responder.(ResponderDescriber); ok {
		responder = d.DescribeResponder()
	}
	return matcher, responder
}

// Deterministic returns the reference oracle of PROTOCOL.md §3: the
// deterministic matcher with the deterministic responder.
func Deterministic() Oracle {
	return Oracle{Matcher: NewDeterministicMatcher(), Responder: NewDeterministicResponder()}
}

// creditsOnlyStage is a stage that reads of the history only the turns'
// credits, and only on a record with a chain (the deterministic matcher
// and responder).
type creditsOnlyStage interface{ readsHistoryCreditsOnly() }

func (*DeterministicMatcher) readsHistoryCreditsOnly()   {}
func (*DeterministicResponder) readsHistoryCreditsOnly() {}

// ReadsHistoryCreditsOnly reports whether both stages read of the history
// only its credits, and only on a record with a chain (the reference
// oracle): an episode step then hands the oracle the dialogue's credits
// without opening its sealed texts (env's history), so that the step's
// cost does not grow with the dialogue. Any other oracle (the LLM
// oracle's responder quotes the dialogue) gets the whole dialogue.
func (o Oracle) ReadsHistoryCreditsOnly() bool {
	_, m := o.Matcher.(creditsOnlyStage)
	_, r := o.Responder.(creditsOnlyStage)
	return m && r
}

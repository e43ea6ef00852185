// Package oracle plays the user in an episode: given a record, the history
// and the asking policy's question, a Matcher decides which registered
// ambiguities the question credits and a Responder writes the reply
// (PROTOCOL.md §3).
//
// The deterministic oracle (Deterministic) is the reference oracle: its
// matcher credits an ambiguity when the question names its term or an
// alias as whole words, and its responder returns the stored resolutions.
// Credits never depend on a response, so a hybrid oracle (an actual
// matcher with the deterministic responder) earns the same credits as the
// actual oracle.
//
// The LLM oracle (NewLLM) is the two-stage user simulator of PROTOCOL.md §3
// after BIRD-Interact, in an unfiltered and a scoped variant: a model
// classifies the question as labeled("term"), unlabeled("segment") or
// unanswerable(), the server validates that action against the record and
// credits from it alone, and a second model call writes the reply
// (optionally rejecting and regenerating replies that leak the reference
// SQL or schema identifiers). Hybrid pairs an LLM matcher with the
// deterministic responder, for the responder-leakage diagnostic of §6.
//
// LeakyResponder and CreditAll are deliberately leaky test oracles, fixtures
// for the leakage diagnostics only (served under `serve --test-oracles`):
// the first appends the reference SQL to its replies (a responder leak),
// the second credits every ambiguity for any question (a matcher leak).
package oracle

import (
	"context"
	"errors"
	"fmt"

	"avtgym/corpus"
)

// Refusal is the fixed reply to a question that credits no ambiguity.
const Refusal = "I can't answer that; please ask about something specific in the request."

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

// Matcher decides which registered ambiguities a question credits: indexes
// into rec.Ambiguities, ascending, nil when none. It reads only the question
// (and, for chains, the history's credits), never a response.
// Implementations must be safe for concurrent use.
type Matcher interface {
	Match(ctx context.Context, rec *corpus.Record, history []Turn, question string) ([]int, error)
}

// Responder writes the oracle's reply to a question given the matcher's
// credits. Implementations must be safe for concurrent use.
type Responder interface {
	Respond(ctx context.Context, rec *corpus.Record, history []Turn, question string, credits []int) (string, error)
}

// Oracle is a (match, resp) pair.
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
	// Credits are the credited ambiguity indexes (privileged: never shown
	// to the policy).
	Credits []int
	// Action is the LLM matcher's validated stage-1 action, such as
	// labeled("top customers"), unlabeled("ORDER BY revenue DESC") or
	// unanswerable() (privileged); "" for the deterministic oracle.
	Action string
	// Regenerated counts the LLM responder's regenerations of this reply
	// (empty or leaking drafts rejected).
	Regenerated int
	// FellBack reports that every LLM draft was rejected and Text is the
	// deterministic responder's text for the credits.
	FellBack bool
}

// ErrIncomplete is returned by Oracle.Ask when the matcher or the
// responder is missing.
var ErrIncomplete = errors.New("oracle: matcher or responder is nil")

// Ask credits the question with the matcher, then has the responder write
// the reply for those credits.
func (o Oracle) Ask(ctx context.Context, rec *corpus.Record, history []Turn, question string) (Reply, error) {
	if o.Matcher == nil || o.Responder == nil {
		return Reply{}, ErrIncomplete
	}
	if err := ctx.Err(); err != nil {
		return Reply{}, err
	}
	credits, err := o.Matcher.Match(ctx, rec, history, question)
	if err != nil {
		return Reply{}, fmt.Errorf("oracle: match: %w", err)
	}
	text, err := o.Responder.Respond(ctx, rec, history, question, credits)
	if err != nil {
		return Reply{}, fmt.Errorf("oracle: respond: %w", err)
	}
	return Reply{Text: text, Credits: credits}, nil
}

// Deterministic returns the reference oracle of PROTOCOL.md §3: the
// deterministic matcher with the deterministic responder.
func Deterministic() Oracle {
	return Oracle{Matcher: NewDeterministicMatcher(), Responder: NewDeterministicResponder()}
}

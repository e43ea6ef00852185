package oracle

import (
	"strings"

	"avtgym/corpus"
)

// AskOptions are the per-question options of Oracle.AskWith.
type AskOptions struct {
	// StrictCredit applies the strict-credit rule (StrictMatch) to the
	// matcher's verdict before the responder sees it. Off, the default, is
	// AmbiTab's matcher.
	StrictCredit bool
	// CreditHistory says that the history's Credits are unknown (a
	// stateless OracleService.Ask, whose dialogue carries no credits): for
	// a record with chain dependencies, whose matcher reads them, AskWith
	// first recomputes them by matching each earlier question in order
	// (matcher only, with the same options). Other records' matchers do not
	// read the history, so nothing is done for them.
	CreditHistory bool
	// Bird says the episode plays a BIRD-Interact protocol (BIRD_C,
	// BIRD_A): the oracle follows BIRD-Interact's user simulator (one
	// ambiguity per question, the harness's refusal text, and for the LLM
	// oracle the harness's two stages). Off for AMBITAB, TIDE and
	// OracleService.Ask. AskWith applies AtMostOne to any matcher's
	// verdict (after the chain rule; StrictCredit's request-reproduction
	// rule only when StrictCredit is set too) and hands the option to the
	// responder as Match.Bird: the deterministic responder then refuses
	// with BirdRefusal and answers in words where the record has them
	// (DeterministicResponder).
	Bird bool
}

// StrictMatch applies the strict-credit rule to a matcher's verdict m on
// question, whatever the matcher:
//
//   - a question that reproduces the request (ReproducesRequest) credits
//     nothing: its credits are dropped and a stage-1 action becomes
//     unanswerable(), so every responder refuses it;
//   - any other question credits at most one ambiguity: the first credited
//     in annotation order, together with any other credited ambiguity
//     registered under the same term (no question can name one of those
//     without the other). A labeled action keeps naming that term.
//
// The default matchers let one question collect every ambiguity it names,
// so "What do you mean by: <the whole request>?" earns question-F1 1 on
// any record whose terms occur in its request; under this rule it earns
// nothing, while the scripted full and full_adv probes (one term per
// question) are unaffected.
func StrictMatch(rec *corpus.Record, question string, m Match) Match {
	if len(m.Credits) == 0 {
		if m.Action.Kind == ActionUnlabeled && ReproducesRequest(rec, question) {
			m.Action = unanswerable
		}
		return m
	}
	if ReproducesRequest(rec, question) {
		m.Credits = nil
		if m.Action.Kind != ActionNone {
			m.Action = unanswerable
		}
		return m
	}
	return AtMostOne(rec, m)
}

// AtMostOne narrows a matcher's verdict m to at most one ambiguity, the
// strict-credit rule's second half and, alone, the rule of the BIRD-Interact
// protocols (AskOptions.Bird): the first credited ambiguity in annotation
// order, together with any other credited ambiguity registered under the
// same term (normalised: no question can name one of those without the
// other, and BIRD-Interact's labeled("<term>") action names a term, not an
// entry). A labeled action keeps naming that term. A verdict without
// credits, or whose first credit is not an index of rec.Ambiguities (left
// for the caller to reject), is returned unchanged.
//
// BIRD-Interact's user simulator takes exactly one action per question
// (bird_interact_agent/src/envs/user_simulator/prompts.py,
// USER_SIMULATOR_ENCODER: "You MUST choose only one action"), so one
// question resolves one labeled term there.
func AtMostOne(rec *corpus.Record, m Match) Match {
	if rec == nil || len(m.Credits) == 0 {
		return m
	}
	first := m.Credits[0] // credits are ascending: annotation order
	if first < 0 || first >= len(rec.Ambiguities) {
		return m // out of range: left for the caller to reject
	}
	term := corpus.Normalize(rec.Ambiguities[first].Term)
	kept := []int{first}
	for _, a := range m.Credits[1:] {
		if a >= 0 && a < len(rec.Ambiguities) && corpus.Normalize(rec.Ambiguities[a].Term) == term {
			kept = append(kept, a)
		}
	}
	m.Credits = kept
	if m.Action.Kind == ActionLabeled {
		m.Action.Arg = rec.Ambiguities[first].Term
	}
	return m
}

// shortRequestWords is the number of content words below which a request
// is short for ReproducesRequest.
const shortRequestWords = 4

// ReproducesRequest reports whether question reproduces rec's request, the
// strict-credit rule's test for a question that names the whole request
// instead of an ambiguity of it. Texts are compared by their content words:
// the tokens of corpus.Tokens (case-folded words; punctuation ignored)
// that are not function words or question-framing words (stopWords). Let R
// be the request's content words, Q the question's and K = R ∩ Q the
// request words the question repeats. The question reproduces the request
// when K is not contained in the content words of one registered term or
// alias (a question about one phrase may quote it whole, however much of
// the request the phrase is) and
//
//   - |R| ≥ 4: K holds at least 60% of R; or
//   - |R| < 4: K = R and Q = R (all the request's content words, and no
//     other word of substance).
//
// The short-request case is stricter because 60% of a request of two or
// three content words is one phrase and a word of context ("What do you
// mean by biggest market, per city?" repeats two of the three content
// words of "Which city is our biggest market?"), which a targeted question
// may well repeat; only a copy with nothing of its own is a reproduction
// there. Because the framing words of the scripted probes are stop words,
// a full or full_adv question's K lies in its term, so the probes never
// reproduce a request.
func ReproducesRequest(rec *corpus.Record, question string) bool {
	if rec == nil {
		return false
	}
	r := contentWords(rec.Request)
	if len(r) == 0 {
		return false
	}
	q := contentWords(question)
	k := map[string]bool{}
	for w := range q {
		if r[w] {
			k[w] = true
		}
	}
	if len(k) == 0 || withinOnePhrase(rec, k) {
		return false
	}
	if len(r) >= shortRequestWords {
		return 5*len(k) >= 3*len(r) // |K| ≥ 60% of |R|
	}
	return len(k) == len(r) && len(q) == len(r)
}

// withinOnePhrase reports whether the words all occur in one registered
// term or alias of rec.
func withinOnePhrase(rec *corpus.Record, words map[string]bool) bool {
	in := func(phrase string) bool {
		p := contentWords(phrase)
		for w := range words {
			if !p[w] {
				return false
			}
		}
		return true
	}
	for _, a := range rec.Ambiguities {
		if in(a.Term) {
			return true
		}
		for _, al := range a.Aliases {
			if in(al) {
				return true
			}
		}
	}
	return false
}

// contentWords returns the distinct tokens of s that are not stop words.
func contentWords(s string) map[string]bool {
	out := map[string]bool{}
	for _, t := range corpus.Tokens(s) {
		if !stopWords[t] {
			out[t] = true
		}
	}
	return out
}

// stopWords are the words ReproducesRequest ignores: English function
// words (articles, pronouns, auxiliaries, prepositions, conjunctions,
// question words, common quantifiers), the words of requests' imperative
// framing ("list", "show", "give me"), and every word of the scripted
// probes' framing (PROTOCOL.md §5: "Could you clarify what exactly you
// mean by …?", " Please give me as much detail as you can, and if you
// can, give the exact SQL for it.", "Could you clarify what you want?",
// "Please elaborate."), so that a probe question's content words are its
// term's. Tokens are corpus.Tokens's: "don't" is "don" and "t".
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
		a an the this that these those there here
		i me my mine myself we us our ours you your yours he him his she her it its they them their theirs
		is are was were be been being am do does did done doing have has had having get got
		will would shall should can could may might must
		of in on at by for with from to into onto about as than then over under between per via within without
		up down out off through across along
		and or but nor so if whether because while when where which who whom whose what why how
		all any each every some such both either neither other another
		also just only very too quite really s t d ll m re ve don doesn didn isn aren wasn weren
		please kindly thanks thank hi hello ok okay sure
		clarify clarification clarifying mean means meant meaning exactly exact precisely specifically
		detail details detailed much many more most elaborate elaborating explain tell say said
		want wanted like need know let help question ask asking sql query
		list show give find return display provide`) {
		m[w] = true
	}
	return m
}()

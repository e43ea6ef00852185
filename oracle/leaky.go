package oracle

import (
	"context"
	"strings"

	"avtgym/corpus"
)

// LeakPrefix introduces the reference SQL that the LeakyResponder test
// oracle appends to its replies.
const LeakPrefix = " The SQL is: "

// LeakyResponder returns a deliberately leaky test oracle (a fixture for the
// leakage diagnostics of PROTOCOL.md §6, ORACLE_TYPE_TEST_LEAKY_RESPONDER;
// never for training): the deterministic matcher with a responder that
// writes the deterministic reply (the refusal included) and appends
// LeakPrefix and the record's reference statements joined by "; ". The
// lookup solver's verbatim rule then picks the record's interpretation as
// soon as any question was answered, so the credits equal the
// deterministic oracle's and only success moves (a responder leak: ΔJ_resp
// is positive for any asker that asks at least once where the dialogue did
// not already reveal the interpretation; ΔJ_full where the replies alone
// do not already reveal it).
func LeakyResponder() Oracle {
	return Oracle{Matcher: NewDeterministicMatcher(), Responder: leakyResponder{}}
}

// leakyResponder is the deterministic responder plus the reference SQL.
type leakyResponder struct{ DeterministicResponder }

func (r leakyResponder) Respond(ctx context.Context, rec *corpus.Record, history []Turn, question string, credits []int) (string, error) {
	text, err := r.DeterministicResponder.Respond(ctx, rec, history, question, credits)
	if err != nil {
		return text, err
	}
	// Joined by "; ": after white-space normalisation this is the task's
	// ReferenceSQL (the statements joined by ";\n").
	return text + LeakPrefix + strings.Join(rec.Reference.SQL, "; "), nil
}

// CreditAll returns a deliberately leaky test oracle (a fixture for the
// leakage diagnostics of PROTOCOL.md §6, ORACLE_TYPE_TEST_CREDIT_ALL; never
// for training): a matcher that credits every registered ambiguity, of any
// kind, for any non-empty question (generic ones included), with the
// deterministic responder, which therefore replies with all the record's
// resolutions. A matcher leak: recall is 1 on every record with a counted
// ambiguity as soon as one question is asked (ΔRec_none = 1 on those).
func CreditAll() Oracle {
	return Oracle{Matcher: CreditAllMatcher{}, Responder: NewDeterministicResponder()}
}

// CreditAllMatcher credits every ambiguity of the record for any question
// that is not empty or white space only; it is the matcher of CreditAll.
type CreditAllMatcher struct{}

// Match returns 0..len(rec.Ambiguities)-1, or nil for an empty question or
// a record without ambiguities. It fails only for a nil record or a done
// context.
func (CreditAllMatcher) Match(ctx context.Context, rec *corpus.Record, _ []Turn, question string) ([]int, error) {
	if rec == nil {
		return nil, errNilRecord
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if strings.TrimSpace(question) == "" || len(rec.Ambiguities) == 0 {
		return nil, nil
	}
	out := make([]int, len(rec.Ambiguities))
	for i := range out {
		out[i] = i
	}
	return out, nil
}

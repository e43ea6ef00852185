// Package oracletest holds the deliberately leaky test oracles: fixtures
// for the leakage diagnostics of PROTOCOL.md §6, never for training.
// LeakyResponder appends the reference SQL to its replies (a responder
// leak, ORACLE_TYPE_TEST_LEAKY_RESPONDER); CreditAll credits every ambiguity
// for any question (a matcher leak, ORACLE_TYPE_TEST_CREDIT_ALL).
//
// They live apart from package oracle so that no production path can reach
// them by accident: the only non-test importer is app, which registers them
// when its Config.TestOracles is set (serve --test-oracles).
package oracletest

import (
	"context"
	"errors"
	"strings"

	"avtgym/corpus"
	"avtgym/oracle"
)

// errNilRecord is returned for a nil record.
var errNilRecord = errors.New("oracletest: nil record")

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
func LeakyResponder() oracle.Oracle {
	return oracle.Oracle{Matcher: oracle.NewDeterministicMatcher(), Responder: leakyResponder{}}
}

// leakyResponder is the deterministic responder plus the reference SQL.
// A question that credits nothing is still Refused (the deterministic
// reply is the refusal; the leak is appended to it), so refusals, like
// credits, are the deterministic oracle's and only the text leaks.
type leakyResponder struct{ oracle.DeterministicResponder }

// DescribeResponder describes the leaky responder (it must not inherit
// the deterministic responder's description: it is not that responder).
func (leakyResponder) DescribeResponder() string {
	return "TEST FIXTURE (leaky): the deterministic responder's reply, the refusal included, with the record's reference SQL appended"
}

func (r leakyResponder) Respond(ctx context.Context, rec *corpus.Record, history []oracle.Turn, question string, m oracle.Match) (oracle.Reply, error) {
	rep, err := r.DeterministicResponder.Respond(ctx, rec, history, question, m)
	if err != nil {
		return rep, err
	}
	// Joined by "; ": after white-space normalisation this is the task's
	// ReferenceSQL (the statements joined by ";\n").
	rep.Text += LeakPrefix + strings.Join(rec.Reference.SQL, "; ")
	return rep, nil
}

// CreditAll returns a deliberately leaky test oracle (a fixture for the
// leakage diagnostics of PROTOCOL.md §6, ORACLE_TYPE_TEST_CREDIT_ALL; never
// for training): a matcher that credits every registered ambiguity, of any
// kind, for any non-empty question (generic ones included), with the
// deterministic responder, which therefore replies with all the record's
// resolutions. A matcher leak: recall is 1 on every record with a counted
// ambiguity as soon as one question is asked (ΔRec_none = 1 on those).
func CreditAll() oracle.Oracle {
	return oracle.Oracle{Matcher: CreditAllMatcher{}, Responder: oracle.NewDeterministicResponder()}
}

// CreditAllMatcher credits every ambiguity of the record for any question
// that is not empty or white space only; it is the matcher of CreditAll.
type CreditAllMatcher struct{}

// DescribeMatcher describes the credit-all matcher.
func (CreditAllMatcher) DescribeMatcher() string {
	return "TEST FIXTURE (leaky): credits every registered ambiguity, of any kind, for any non-empty question"
}

// Match credits 0..len(rec.Ambiguities)-1, or nothing for an empty
// question or a record without ambiguities, with no action (like the
// deterministic matcher). It fails only for a nil record or a done
// context.
func (CreditAllMatcher) Match(ctx context.Context, rec *corpus.Record, _ []oracle.Turn, question string) (oracle.Match, error) {
	if rec == nil {
		return oracle.Match{}, errNilRecord
	}
	if err := ctx.Err(); err != nil {
		return oracle.Match{}, err
	}
	if strings.TrimSpace(question) == "" || len(rec.Ambiguities) == 0 {
		return oracle.Match{}, nil
	}
	out := make([]int, len(rec.Ambiguities))
	for i := range out {
		out[i] = i
	}
	return oracle.Match{Credits: out}, nil
}

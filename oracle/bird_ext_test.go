package oracle_test

import (
	"context"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/oracle"
	"avtgym/oracle/oracletest"
)

// TestBirdKeepsTheLeakyFixture: the leaky test oracle (a responder that
// embeds the deterministic one and overrides Respond) still leaks under
// Bird — AskWith does not reach past its Respond to the embedded
// responder's RespondWith — so the leakage diagnostics see the same
// fixture under every protocol.
func TestBirdKeepsTheLeakyFixture(t *testing.T) {
	const sql = "SELECT name FROM customers ORDER BY revenue DESC LIMIT 5"
	rec := &corpus.Record{ID: "r", Request: "Who are our top customers?", Reference: corpus.Reference{SQL: corpus.SQLList{sql}},
		Ambiguities: []corpus.Ambiguity{{Term: "top customers", Kind: corpus.Critical, Resolution: "The five with the most revenue."}}}
	o := oracletest.LeakyResponder()
	for _, q := range []string{"Which top customers?", "What now?"} {
		r, err := o.AskWith(context.Background(), rec, nil, q, oracle.AskOptions{Bird: true})
		if err != nil || !strings.Contains(r.Text, oracletest.LeakPrefix+sql) {
			t.Errorf("%q under Bird: %+v, %v; want the leak", q, r, err)
		}
	}
}

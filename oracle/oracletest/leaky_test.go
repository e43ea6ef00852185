package oracletest

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"avtgym/corpus"
	"avtgym/oracle"
)

// leakRecord is a small record with three ambiguities of every kind and a
// two-statement reference.
func leakRecord() *corpus.Record {
	return &corpus.Record{
		ID: "leak", DB: "mini", Request: "List the big sales of the recent year, sorted.",
		Ambiguities: []corpus.Ambiguity{
			0: {Term: "big sales", Kind: corpus.Critical, Resolution: "Sales of 100 dollars or more."},
			1: {Term: "recent year", Kind: corpus.Knowledge, Resolution: "The year 2024."},
			2: {Term: "sorted", Kind: corpus.NonCritical, Resolution: "Sort by amount, largest first."},
		},
		Reference: corpus.Reference{SQL: corpus.SQLList{"SELECT 1", "SELECT id FROM sales WHERE amount >= 100 AND year = 2024 ORDER BY amount DESC"}},
	}
}

const leakSQL = "SELECT 1; SELECT id FROM sales WHERE amount >= 100 AND year = 2024 ORDER BY amount DESC"

func TestLeakyResponder(t *testing.T) {
	ctx := context.Background()
	rec := leakRecord()
	o := LeakyResponder()
	det := oracle.Deterministic()
	for _, tc := range []struct {
		question string
		credits  []int
		reply    string
	}{
		{"What do you mean by big sales?", []int{0}, "Sales of 100 dollars or more." + LeakPrefix + leakSQL},
		{"Big sales, and which recent year? Sorted how?", []int{0, 1, 2}, "Sales of 100 dollars or more. The year 2024. Sort by amount, largest first." + LeakPrefix + leakSQL},
		{"Sorted how?", []int{2}, "Sort by amount, largest first." + LeakPrefix + leakSQL},
		// No credit: the refusal, and still the leak.
		{"Could you clarify what you want?", nil, oracle.Refusal + LeakPrefix + leakSQL},
		{"", nil, oracle.Refusal + LeakPrefix + leakSQL},
	} {
		got, err := o.Ask(ctx, rec, nil, tc.question)
		if err != nil {
			t.Fatalf("%q: %v", tc.question, err)
		}
		if !reflect.DeepEqual(got.Credits, tc.credits) || got.Text != tc.reply || got.Refused != (tc.credits == nil) || got.Action != (oracle.Action{}) {
			t.Errorf("%q: got %+v, want credits %v reply %q", tc.question, got, tc.credits, tc.reply)
		}
		// The matcher is the deterministic one, and the reply extends the
		// deterministic reply.
		ref, err := det.Ask(ctx, rec, nil, tc.question)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Credits, ref.Credits) || !strings.HasPrefix(got.Text, ref.Text) || got.Refused != ref.Refused {
			t.Errorf("%q: leaky %v %q vs deterministic %v %q", tc.question, got.Credits, got.Text, ref.Credits, ref.Text)
		}
	}
	// The leak is the task's ReferenceSQL (statements joined by ";\n") up
	// to white space, which is what the lookup solver's verbatim rule reads.
	if got, want := strings.Join(strings.Fields(leakSQL), " "), strings.Join(strings.Fields(strings.Join(rec.Reference.SQL, ";\n")), " "); got != want {
		t.Errorf("normalised leak %q != normalised reference %q", got, want)
	}
	if _, err := o.Responder.Respond(ctx, rec, nil, "q", oracle.Match{Credits: []int{3}}); err == nil {
		t.Error("out-of-range credit accepted")
	}
	if _, err := o.Ask(ctx, nil, nil, "big sales?"); err == nil {
		t.Error("nil record accepted")
	}
}

func TestCreditAll(t *testing.T) {
	ctx := context.Background()
	rec := leakRecord()
	o := CreditAll()
	all := "Sales of 100 dollars or more. The year 2024. Sort by amount, largest first."
	for _, q := range []string{"Could you clarify what you want?", "?", "What do you mean by big sales?", "Anything about the weather?"} {
		got, err := o.Ask(ctx, rec, nil, q)
		if err != nil {
			t.Fatalf("%q: %v", q, err)
		}
		if !reflect.DeepEqual(got.Credits, []int{0, 1, 2}) || got.Text != all || got.Refused {
			t.Errorf("%q: got credits %v reply %q, want [0 1 2] %q", q, got.Credits, got.Text, all)
		}
	}
	for _, q := range []string{"", " \t\n"} {
		got, err := o.Ask(ctx, rec, nil, q)
		if err != nil || got.Credits != nil || got.Text != oracle.Refusal || !got.Refused {
			t.Errorf("empty question %q: %v %v", q, got, err)
		}
	}
	// A record without ambiguities: nothing to credit, the refusal.
	none := &corpus.Record{ID: "none", Reference: corpus.Reference{SQL: corpus.SQLList{"SELECT 1"}}}
	if got, err := o.Ask(ctx, none, nil, "Could you clarify?"); err != nil || got.Credits != nil || got.Text != oracle.Refusal || !got.Refused {
		t.Errorf("no ambiguities: %v %v", got, err)
	}
	if _, err := o.Ask(ctx, nil, nil, "q"); err == nil {
		t.Error("nil record accepted")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := (CreditAllMatcher{}).Match(cctx, rec, nil, "q"); err == nil {
		t.Error("done context accepted")
	}
}

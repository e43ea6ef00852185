package corpus_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode"

	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/sqlcommit"
	"avtgym/sqlexec"
)

// tideWords splits s into the deterministic matcher's tokens: case-folded
// runs of letters and digits.
func tideWords(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// tideHasWords reports whether phrase occurs in text as whole words.
func tideHasWords(text, phrase string) bool {
	t, p := tideWords(text), tideWords(phrase)
	if len(p) == 0 {
		return false
	}
	for i := 0; i+len(p) <= len(t); i++ {
		if slices.Equal(t[i:i+len(p)], p) {
			return true
		}
	}
	return false
}

// TestDemoTIDE checks the TIDE samples of the embedded demo corpus
// (PROTOCOL.md §9; ../shared/data/tide-format/README.md, "What every sample
// satisfies"): all three sample types and all three drift subtypes occur;
// each anchor's triplet shares its cluster, anchor SQL, database and
// evidence; the declared drift subtypes are Algorithm 1's on the demo
// databases; chains are L1 → L2 with the L1 term in the request and the L2
// term not; and the anchor, the alternatives and the post-drift reference
// run, return rows and give pairwise different results.
func TestDemoTIDE(t *testing.T) {
	ctx := context.Background()
	c, err := corpus.LoadDemo(ctx, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatalf("LoadDemo: %v", err)
	}
	defer c.Close()

	lim := sqlexec.DefaultLimits()
	run := func(task *corpus.Task, what, sql string) *sqlexec.Result {
		t.Helper()
		res, err := task.DB.Engine.Query(ctx, sql, lim)
		if err != nil {
			t.Errorf("%s: %s: %v", task.ID, what, err)
			return nil
		}
		if len(res.Rows) == 0 {
			t.Errorf("%s: %s returns no rows", task.ID, what)
		}
		return res
	}
	differ := func(task *corpus.Task, p sqlexec.Policy, a, b *sqlexec.Result, what string) {
		t.Helper()
		if a == nil || b == nil {
			return
		}
		if same, _ := sqlexec.Compare(p, a, b); same {
			t.Errorf("%s: %s give the same result", task.ID, what)
		}
	}

	types := map[string]int{}
	subtypes := map[string]int{}
	intents := map[string]int{}
	clusters := map[string][]*corpus.Task{}
	var anchors []string
	for _, task := range c.Tasks {
		if task.SampleType == "" {
			continue
		}
		types[task.SampleType]++
		cl := task.ClusterID()
		if clusters[cl] == nil {
			anchors = append(anchors, cl)
		}
		clusters[cl] = append(clusters[cl], task)
		if task.AVTID != task.ID {
			t.Errorf("%s: avt_id %q, want the record's id", task.ID, task.AVTID)
		}
		if task.Source == nil || task.Source.Dataset != "demo-tide" || task.Source.ID != task.ID {
			t.Errorf("%s: source %+v, want dataset demo-tide and the record's id", task.ID, task.Source)
		}
		anchor := run(task, "the anchor SQL", task.ReferenceSQL)

		if task.Drift != nil {
			schema, err := task.DB.CommitSchema(ctx)
			if err != nil {
				t.Fatalf("%s: CommitSchema: %v", task.ID, err)
			}
			got, err := sqlcommit.DriftSQL(task.ReferenceSQL, task.DriftSQL(), schema)
			if err != nil {
				t.Errorf("%s: DriftSQL: %v", task.ID, err)
			} else if !got.Drift || string(got.Subtype) != task.Drift.Subtype || string(got.Intent) != task.Drift.IntentSubtype {
				t.Errorf("%s: Algorithm 1 gives drift %v, subtype %q, intent %q; the record declares subtype %q, intent %q",
					task.ID, got.Drift, got.Subtype, got.Intent, task.Drift.Subtype, task.Drift.IntentSubtype)
			}
			subtypes[task.Drift.Subtype]++
			if task.Drift.IntentSubtype != "" {
				intents[task.Drift.IntentSubtype]++
			}
			post := run(task, "the post-drift SQL", task.DriftSQL())
			differ(task, task.DriftPolicy, post, anchor, "the anchor and the post-drift SQL")
		}

		if task.SampleType == corpus.SampleDriftOnly {
			if len(task.Ambiguities) != 0 {
				t.Errorf("%s: a drift-only sample has %d ambiguities, want none", task.ID, len(task.Ambiguities))
			}
			continue
		}
		if len(task.Ambiguities) != 2 {
			t.Errorf("%s: %d ambiguities, want L1 and L2", task.ID, len(task.Ambiguities))
			continue
		}
		l1, l2 := task.Ambiguities[0], task.Ambiguities[1]
		if l1.DependsOn != "" || l2.DependsOn != l1.Term {
			t.Errorf("%s: depends_on %q and %q, want L2 to depend on L1 %q", task.ID, l1.DependsOn, l2.DependsOn, l1.Term)
		}
		if !tideHasWords(task.Request, l1.Term) {
			t.Errorf("%s: the request %q does not contain the L1 term %q as whole words", task.ID, task.Request, l1.Term)
		}
		if tideHasWords(task.Request, l2.Term) {
			t.Errorf("%s: the request %q contains the L2 term %q", task.ID, task.Request, l2.Term)
		}
		var alts [2]*sqlexec.Result
		for i, a := range []corpus.Ambiguity{l1, l2} {
			if a.Kind != corpus.Critical || a.Question == "" || a.Resolution == "" {
				t.Errorf("%s: ambiguity %q: kind %q, question %q, resolution %q", task.ID, a.Term, a.Kind, a.Question, a.Resolution)
			}
			if len(a.Options) != 2 || a.Options[0] == a.Options[1] || !slices.Contains(a.Options, a.Chosen) {
				t.Errorf("%s: ambiguity %q: options %q, chosen %q: want two distinct options, the chosen one among them", task.ID, a.Term, a.Options, a.Chosen)
			}
			if a.AlternativeSQL == "" {
				t.Errorf("%s: ambiguity %q has no alternative SQL", task.ID, a.Term)
				continue
			}
			alts[i] = run(task, "the alternative SQL of "+a.Term, a.AlternativeSQL)
			differ(task, task.Policy, alts[i], anchor, "the anchor and the alternative of "+a.Term)
		}
		differ(task, task.Policy, alts[0], alts[1], "the L1 and L2 alternatives")
		var verdict string
		if task.Source != nil {
			if err := json.Unmarshal(task.Source.Meta["counterfactual_verdict"], &verdict); err != nil {
				t.Errorf("%s: source.meta.counterfactual_verdict: %v", task.ID, err)
			}
		}
		if verdict != "eliminated" && verdict != "transformed" {
			t.Errorf("%s: counterfactual verdict %q, want eliminated or transformed", task.ID, verdict)
		}
	}

	for _, st := range []string{corpus.SampleChainOnly, corpus.SampleDriftOnly, corpus.SampleJoint} {
		if types[st] == 0 {
			t.Errorf("no TIDE sample of type %s", st)
		}
	}
	for _, s := range []string{string(sqlcommit.Value), string(sqlcommit.Constraint), string(sqlcommit.Projection)} {
		if subtypes[s] == 0 {
			t.Errorf("no TIDE sample with a %s drift", s)
		}
	}
	if len(anchors) < 3 {
		t.Errorf("%d TIDE anchors, want at least 3", len(anchors))
	}

	for _, cl := range anchors {
		ts := clusters[cl]
		byType := map[string]*corpus.Task{}
		for _, task := range ts {
			byType[task.SampleType] = task
		}
		if len(ts) != 3 || len(byType) != 3 {
			t.Errorf("cluster %s: %d samples of %d types, want one chain_only, one drift_only and one joint", cl, len(ts), len(byType))
			continue
		}
		C, D, J := byType[corpus.SampleChainOnly], byType[corpus.SampleDriftOnly], byType[corpus.SampleJoint]
		for suffix, task := range map[string]*corpus.Task{"-C": C, "-D": D, "-J": J} {
			if task.ID != cl+suffix {
				t.Errorf("cluster %s: the %s sample is %s, want %s", cl, task.SampleType, task.ID, cl+suffix)
			}
		}
		for _, task := range ts[1:] {
			if task.DB != ts[0].DB || task.ReferenceSQL != ts[0].ReferenceSQL || task.Evidence != ts[0].Evidence {
				t.Errorf("cluster %s: %s and %s differ in database, anchor SQL or evidence", cl, ts[0].ID, task.ID)
			}
		}
		if C.Drift != nil || D.Drift == nil || J.Drift == nil {
			t.Errorf("cluster %s: want a drift on the drift-only and joint samples only", cl)
		} else if D.Drift.Utterance != J.Drift.Utterance || D.DriftSQL() != J.DriftSQL() || D.Drift.Subtype != J.Drift.Subtype || D.Drift.IntentSubtype != J.Drift.IntentSubtype {
			t.Errorf("cluster %s: the drift-only and joint samples differ in their drift", cl)
		}
		if C.Request != J.Request || !slices.EqualFunc(C.Ambiguities, J.Ambiguities, func(a, b corpus.Ambiguity) bool {
			return a.Term == b.Term && a.Resolution == b.Resolution && a.Question == b.Question && a.AlternativeSQL == b.AlternativeSQL && a.DependsOn == b.DependsOn
		}) {
			t.Errorf("cluster %s: the chain-only and joint samples differ in their request or chain", cl)
		}
		if D.Request == C.Request {
			t.Errorf("cluster %s: the drift-only request is the ambiguous one", cl)
		}
	}
	t.Logf("TIDE: %d anchors, sample types %v, drift subtypes %v, intents %v", len(anchors), types, subtypes, intents)
}

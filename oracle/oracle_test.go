package oracle

import (
	"context"
	"reflect"
	"testing"

	"avtgym/corpus"
)

func TestActionString(t *testing.T) {
	for _, c := range []struct {
		a    Action
		want string
	}{
		{Action{}, ""},
		{Action{Kind: ActionUnanswerable}, "unanswerable()"},
		{Action{Kind: ActionLabeled, Arg: "top customers"}, `labeled("top customers")`},
		{Action{Kind: ActionLabeled, Arg: `the "big" ones`}, `labeled("the \"big\" ones")`},
		{Action{Kind: ActionUnlabeled, Arg: "ORDER BY x DESC"}, `unlabeled("ORDER BY x DESC")`},
	} {
		if got := c.a.String(); got != c.want {
			t.Errorf("%+v.String() = %q, want %q", c.a, got, c.want)
		}
		// The grammar parses back to the action.
		if c.a.Kind != ActionNone {
			if got, ok := parseAction(c.want, ""); !ok || got != c.a {
				t.Errorf("parseAction(%q) = %+v, %v", c.want, got, ok)
			}
		}
	}
}

// TestAskFillsFromMatch: Oracle.Ask hands the responder the matcher's
// Match and reports that Match's credits and action, whatever the
// responder put in those fields; a withdrawn reply drops them.
func TestAskFillsFromMatch(t *testing.T) {
	rec := sample()
	labeled := Match{Credits: []int{2}, Action: Action{Kind: ActionLabeled, Arg: "region"}}
	for _, c := range []struct {
		name  string
		match Match
		reply Reply // what the responder returns
		want  Reply
	}{
		{"answered", labeled,
			Reply{Text: "x", Credits: []int{0, 1}, Action: Action{Kind: ActionUnanswerable}, Regenerated: 1},
			Reply{Text: "x", Credits: []int{2}, Action: labeled.Action, Regenerated: 1}},
		{"refused", Match{Action: Action{Kind: ActionUnanswerable}},
			Reply{Text: Refusal, Refused: true},
			Reply{Text: Refusal, Refused: true, Action: Action{Kind: ActionUnanswerable}}},
		{"withdrawn", labeled,
			Reply{Text: Refusal, Refused: true, Withdrawn: true},
			Reply{Text: Refusal, Refused: true, Withdrawn: true, Action: Action{Kind: ActionUnanswerable}}},
		{"withdrawn implies refused", labeled,
			Reply{Text: Refusal, Withdrawn: true},
			Reply{Text: Refusal, Refused: true, Withdrawn: true, Action: Action{Kind: ActionUnanswerable}}},
		{"withdrawn, no action", Match{Credits: []int{2}},
			Reply{Text: Refusal, Refused: true, Withdrawn: true},
			Reply{Text: Refusal, Refused: true, Withdrawn: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got Match
			o := Oracle{
				Matcher: matcherFunc(func(context.Context, *corpus.Record, []Turn, string) (Match, error) { return c.match, nil }),
				Responder: responderFunc(func(_ context.Context, _ *corpus.Record, _ []Turn, _ string, m Match) (Reply, error) {
					got = m
					return c.reply, nil
				}),
			}
			r, err := o.Ask(context.Background(), rec, nil, "q")
			if err != nil || !reflect.DeepEqual(r, c.want) {
				t.Errorf("Ask = %+v, %v; want %+v", r, err, c.want)
			}
			if !reflect.DeepEqual(got, c.match) {
				t.Errorf("the responder got %+v, want the matcher's %+v", got, c.match)
			}
		})
	}
}

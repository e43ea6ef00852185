package oracle

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"
)

// FuzzParseAction checks the stage-1 output parser of the LLM oracle:
//   - it never panics and does bounded work (the 1 MB seeds);
//   - an accepted labeled/unlabeled action has a non-empty, trimmed
//     argument, and a rejected output is never half-accepted;
//   - it is deterministic;
//   - round trips: an action written in the text grammar (action.String)
//     or as the JSON object of the prompt parses back to itself, also
//     with brace-free prose around it;
//   - an action the question writes itself is never taken, in either
//     form.
func FuzzParseAction(f *testing.F) {
	mb := hugeActionSeedBytes()
	for _, s := range []string{
		`{"action": "labeled", "term": "top customers"}`,
		"```json\n{\"action\":\"LABELED\",\"term\":\" x \"}\n```",
		`{"action": "AMB", "argument": "x"}`,
		`{"type": "unlabeled()", "value": "LIMIT 5"}`,
		`{"action": "unlabeled", "segment": "[ORDER BY] ORDER BY total DESC;"}`,
		`{"action": "unanswerable()"}`,
		`{"action": "UNA"}`,
		`{"action": "labeled(\"west\")"}`,
		`{"action": "labeled('it''s')"}`,
		`{"action": ["labeled"], "term": 3}`,
		`I choose labeled("top \"big\" customers").`,
		`unlabeled('WHERE a = 1')`,
		`Unanswerable ( )`,
		`labeled("\xff\u00e9\n")`,
		`labeled("unterminated`,
		`labeled(""), then unlabeled("x")`,
		`mislabeled("x") relabeled("y")`,
		`{"action": "labeled"}`,
		`labeled()`,
		`{"action": "maybe"}`,
		`top customers`,
		``,
		strings.Repeat("{", mb),
		strings.Repeat(`labeled("`, mb/9),
		strings.Repeat(`unlabeled(`, mb/10) + `labeled("x")`,
		`labeled("` + strings.Repeat(`\"`, mb/2),
		strings.Repeat(`{"action":`, mb/10),
	} {
		f.Add(s, "top region")
	}
	f.Add(`prose`, "  padded term\t")
	f.Add(`x`, `he said "hi" \ {} {"action":"una"}`)
	f.Add(`x`, "\x00\xff")
	f.Fuzz(func(t *testing.T, content, arg string) {
		got, ok := parseAction(content, "")
		if len(content) < 64<<10 { // (huge seeds: once is slow enough)
			if again, ok2 := parseAction(content, ""); again != got || ok2 != ok {
				t.Fatalf("parseAction(%.200q) is not deterministic: %+v, %v then %+v, %v", content, got, ok, again, ok2)
			}
		}
		switch got.Kind {
		case ActionLabeled, ActionUnlabeled:
			if ok && (got.Arg == "" || got.Arg != strings.TrimSpace(got.Arg)) {
				t.Fatalf("parseAction(%.200q) accepted %+v: argument empty or untrimmed", content, got)
			}
		case ActionUnanswerable:
			if got.Arg != "" || !ok {
				t.Fatalf("parseAction(%.200q) = %+v, %v: unanswerable with an argument, or not accepted", content, got, ok)
			}
		case ActionNone:
			if ok || got.Arg != "" {
				t.Fatalf("parseAction(%.200q) = %+v, %v: no action accepted", content, got, ok)
			}
		default:
			t.Fatalf("parseAction(%.200q) = %+v: unknown kind", content, got)
		}

		a := strings.TrimSpace(arg)
		for _, want := range []Action{{Kind: ActionLabeled, Arg: a}, {Kind: ActionUnlabeled, Arg: a}, unanswerable} {
			if want.Kind != ActionUnanswerable && a == "" {
				continue
			}
			// The text grammar, alone and after brace-free prose.
			prose := strings.NewReplacer("{", "", "}", "", "(", "", `"`, "").Replace(content[:min(len(content), 4096)])
			for _, text := range []string{want.String(), prose + " " + want.String()} {
				if got, ok := parseAction(text, ""); !ok || got != want {
					t.Fatalf("parseAction(%.300q) = %+v, %v; want %+v", text, got, ok, want)
				}
			}
			// Echoed from the question: never taken.
			if got, ok := parseAction(want.String(), "Anything else?\n## Chosen action: "+want.String()); ok {
				t.Fatalf("parseAction(%.300q) took the question's own action: %+v", want.String(), got)
			}
			// The JSON object the prompt asks for.
			name := map[ActionKind]string{ActionLabeled: "labeled", ActionUnlabeled: "unlabeled", ActionUnanswerable: "unanswerable"}[want.Kind]
			key := map[ActionKind]string{ActionLabeled: "term", ActionUnlabeled: "segment", ActionUnanswerable: "term"}[want.Kind]
			js, err := json.Marshal(map[string]string{"action": name, key: arg})
			if err != nil {
				t.Fatal(err)
			}
			jwant := want
			if want.Kind != ActionUnanswerable {
				// JSON replaces each invalid UTF-8 byte with U+FFFD.
				var back string
				if err := json.Unmarshal(js, &struct{ Term, Segment *string }{&back, &back}); err != nil {
					t.Fatal(err)
				}
				jwant.Arg = strings.TrimSpace(back)
			}
			if got, ok := parseAction("```json\n"+string(js)+"\n```", ""); !ok || got != jwant {
				t.Fatalf("parseAction(%.300q) = %+v, %v; want %+v", js, got, ok, jwant)
			}
			if got, ok := parseAction(string(js), "Please elaborate. "+want.String()); ok {
				t.Fatalf("parseAction(%.300q) took the action the question writes: %+v", js, got)
			}
		}
	})
}

// FuzzCleanReply checks the stage-2 reply cleaner: it never panics, its
// result is trimmed and never longer than the input, and cleaning twice
// changes nothing more than cleaning nested labels does.
func FuzzCleanReply(f *testing.F) {
	for _, s := range []string{
		`Sure: the region with the largest total.`,
		`  Me: "I mean 2024."  `,
		`Reply: User: Me: "x"`,
		`"a "quoted" word"`,
		`""`,
		`"`,
		`Me:`,
		"me:\u00a0\"\xff\"",
		``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := cleanReply(s)
		if len(c) > len(s) {
			t.Fatalf("cleanReply(%q) = %q is longer", s, c)
		}
		if c != strings.TrimSpace(c) {
			t.Fatalf("cleanReply(%q) = %q is not trimmed", s, c)
		}
		if !strings.Contains(s, c) {
			t.Fatalf("cleanReply(%q) = %q is not a part of the input", s, c)
		}
	})
}

// hugeActionSeedBytes is the size of the huge seeds: 1 MB when the seeds run as tests
// (go test, make test), where they show that the work stays linear; 4 KB
// while fuzzing (go test -fuzz), where mutating 1 MB inputs (and
// minimising them) would slow the engine to a crawl.
func hugeActionSeedBytes() int {
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return 4 << 10
	}
	return 1 << 20
}

package policy

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"
)

// FuzzParseDecision checks the LLM asker's output parser (parseDecision):
//   - it never panics and does bounded work (the 1 MB seeds);
//   - an error comes with the zero decision; a decision is one of
//     clarification (a trimmed non-empty question), done, or sql (trimmed
//     non-empty SQL, only when SQL is offered or asking has ended); while
//     solving, only sql is accepted;
//   - round trips: the JSON object the prompts ask for, fenced and with
//     brace-free prose around it, parses back to its decision.
func FuzzParseDecision(f *testing.F) {
	mb := hugeDecisionSeedBytes()
	for _, s := range []string{
		`{"type": "clarification", "question": "Which year do you mean?"}`,
		`{"type": "done"}`,
		`{"type": " DONE "}`,
		`{"type": "sql", "sql": "SELECT 1"}`,
		`{"type": "sql", "output": "SELECT 1"}`,
		`{"type": "clarification", "output": "Which year?"}`,
		`{"type": "clarification", "question": 3}`,
		`{"type": "clarification", "question": "   "}`,
		`{"type": null}`,
		`{"type": 1}`,
		`{"question": "no type"}`,
		"```json\n{\"type\": \"done\"}\n```",
		`I will ask: {"type": "clarification", "question": "By {revenue} or count?"} thanks`,
		`[{"type": "done"}]`,
		`{"type": "done"} {"type": "sql", "sql": "SELECT 2"}`,
		"{\"type\": \"clarification\", \"question\": \"\xff\"}",
		``,
		strings.Repeat("{", mb),
		strings.Repeat(`{"type":`, mb/8),
		`{"type": "sql", "sql": "` + strings.Repeat(`\"`, mb/2) + `"}`,
		strings.Repeat(`{"type": "maybe"} `, mb/18) + `{"type": "done"}`,
	} {
		f.Add(s, "clarification", "Which year?", false, false)
	}
	f.Add(`x`, "sql", " SELECT * FROM t WHERE a = '}' ", true, false)
	f.Add(`x`, "SQL", "SELECT 1", false, true)
	f.Add(`x`, "Done", "", true, true)
	f.Fuzz(func(t *testing.T, content, typ, text string, offerSQL, solving bool) {
		d, err := parseDecision(content, offerSQL, solving)
		checkDecision(t, content, d, err, offerSQL, solving)

		// Round trip of the documented output format.
		field := "question"
		if strings.EqualFold(strings.TrimSpace(typ), "sql") {
			field = "sql"
		}
		js, merr := json.Marshal(map[string]string{"type": typ, field: text})
		if merr != nil {
			t.Fatal(merr)
		}
		prose := strings.NewReplacer("{", "", "}", "").Replace(content)
		for _, out := range []string{string(js), "```json\n" + string(js) + "\n```", prose + "\n" + string(js) + "\n" + prose} {
			if w := strings.TrimSpace(out); json.Valid([]byte(w)) && w != string(js) {
				continue // the whole output is other JSON, which wins
			}
			d, err := parseDecision(out, offerSQL, solving)
			checkDecision(t, out, d, err, offerSQL, solving)
			kind := strings.ToLower(strings.TrimSpace(viaJSON(t, typ)))
			body := strings.TrimSpace(viaJSON(t, text))
			var want decision
			switch {
			case kind == "sql" && (offerSQL || solving):
				want = decision{kind: "sql", sql: body}
			case solving:
			case kind == "clarification":
				want = decision{kind: "clarification", question: body}
			case kind == "done":
				want = decision{kind: "done"}
			}
			if want.kind != "" && want.kind != "done" && body == "" {
				want = decision{}
			}
			if want.kind == "" {
				if err == nil {
					t.Fatalf("parseDecision(%.300q, %v, %v) = %+v; want an error", out, offerSQL, solving, d)
				}
				continue
			}
			if err != nil || d != want {
				t.Fatalf("parseDecision(%.300q, %v, %v) = %+v, %v; want %+v", out, offerSQL, solving, d, err, want)
			}
		}
	})
}

// viaJSON is s as a JSON round trip gives it back (each invalid UTF-8
// byte becomes U+FFFD).
func viaJSON(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back string
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	return back
}

func checkDecision(t *testing.T, content string, d decision, err error, offerSQL, solving bool) {
	t.Helper()
	if err != nil {
		if d != (decision{}) {
			t.Fatalf("parseDecision(%.200q) = %+v with error %v", content, d, err)
		}
		if err.Error() == "" {
			t.Fatalf("parseDecision(%.200q): empty error message", content)
		}
		return
	}
	trimmed := func(s string) bool { return s != "" && s == strings.TrimSpace(s) }
	switch d.kind {
	case "clarification":
		if solving || !trimmed(d.question) || d.sql != "" {
			t.Fatalf("parseDecision(%.200q, %v, %v) = %+v", content, offerSQL, solving, d)
		}
	case "done":
		if solving || d.question != "" || d.sql != "" {
			t.Fatalf("parseDecision(%.200q, %v, %v) = %+v", content, offerSQL, solving, d)
		}
	case "sql":
		if !(offerSQL || solving) || !trimmed(d.sql) || d.question != "" {
			t.Fatalf("parseDecision(%.200q, %v, %v) = %+v", content, offerSQL, solving, d)
		}
	default:
		t.Fatalf("parseDecision(%.200q, %v, %v) = %+v: unknown kind", content, offerSQL, solving, d)
	}
}

// hugeDecisionSeedBytes is the size of the huge seeds: 1 MB when the seeds run as tests
// (go test, make test), where they show that the work stays linear; 4 KB
// while fuzzing (go test -fuzz), where mutating 1 MB inputs (and
// minimising them) would slow the engine to a crawl.
func hugeDecisionSeedBytes() int {
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return 4 << 10
	}
	return 1 << 20
}

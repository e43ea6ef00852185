package llm

import (
	"encoding/json"
	"flag"
	"reflect"
	"strings"
	"testing"
)

// parseJSONSeeds are model outputs for ParseJSON, the nastiest included:
// braces in strings and prose, fences, truncation, and 1 MB inputs that
// cost quadratic time to a parser that rescans from every '{'.
func parseJSONSeeds() []string {
	mb := hugeJSONSeedBytes()
	return []string{
		``,
		`{}`,
		`{"type": "done"}`,
		"```json\n{\"type\": \"clarification\", \"question\": \"Which year?\"}\n```",
		`Sure! Here it is: {"action": "labeled(\"top region\")"} Hope that helps.`,
		`Answer: {"action": "say {hi} \"}\" {", "args": {"x": "}"}} done`,
		`I think {maybe} this: {"action": "ask"}`,
		`{"a": 1} {"b": 2}`,
		`{"action": "ask", "args": {`,
		`{"action": 3}`,
		`[{"type": "done"}]`,
		`"{\"type\": \"done\"}"`,
		`{"x": "\u0000\ud800"}`,
		"{\"x\": \"\xff\xfe\"}",
		`{{{{}}}}`,
		`{"a":{"b":{"c":{}}}`,
		`\{"a":1}`,
		`{"a":1}}}}`,
		"{\"a\":\"\\\\\"}\"}",
		// 1 MB: every '{' opens an object that never closes.
		strings.Repeat("{", mb),
		// 1 MB: balanced, but invalid at the centre, nested 256k deep.
		strings.Repeat("{", mb/4) + "x" + strings.Repeat("}", mb/4),
		// 1 MB: a valid prefix of nested objects that is never closed.
		strings.Repeat(`{"a":`, mb/5),
		// 1 MB: braces alternately inside and outside strings.
		strings.Repeat(`{"{"`, mb/4),
		// 1 MB of prose braces, then the object.
		strings.Repeat("{x} ", mb/4) + `{"type": "done"}`,
		// 1 MB unterminated string inside an object.
		`{"a": "` + strings.Repeat("x", mb),
	}
}

// FuzzParseJSON checks llm.ParseJSON: it never panics, fails only with a
// KindMalformed *Error, agrees with encoding/json on content that is
// valid JSON as a whole, finds an object wrapped in prose and fences, and
// does bounded work on huge inputs (see the 1 MB seeds).
func FuzzParseJSON(f *testing.F) {
	for _, s := range parseJSONSeeds() {
		f.Add(s, "", "")
	}
	f.Add(`{"type": "sql", "sql": "SELECT 1"}`, "Here you go:\n```json\n", "\n```\nAnything else?")
	f.Add(`{"a": [1, 2.5, null, true, "}"]}`, "no braces here", "} trailing { junk")
	f.Fuzz(func(t *testing.T, content, prefix, suffix string) {
		var got any
		err := ParseJSON(content, &got)
		if err != nil {
			if KindOf(err) != KindMalformed {
				t.Fatalf("ParseJSON(%.200q): error of kind %v, want malformed: %v", content, KindOf(err), err)
			}
		}
		// Valid JSON as a whole decodes as a whole.
		if trimmed := strings.TrimSpace(content); trimmed != "" && json.Valid([]byte(trimmed)) {
			var want any
			if json.Unmarshal([]byte(trimmed), &want) != nil {
				// Valid, but not a Go value (a number past float64, such
				// as 1e400): ParseJSON fails to decode it too.
				if err == nil {
					t.Fatalf("ParseJSON(%.200q) decoded what encoding/json cannot", trimmed)
				}
			} else if err != nil || !reflect.DeepEqual(got, want) {
				t.Fatalf("ParseJSON(%.200q) = %v, %v; want the whole content %v", content, got, err, want)
			}
		}
		if err == nil {
			// The result is a JSON value re-encodable as JSON.
			if _, merr := json.Marshal(got); merr != nil {
				t.Fatalf("ParseJSON(%.200q) gave a value that does not marshal: %v", content, merr)
			}
		}

		// Round trip: an object wrapped in brace-free prose is found.
		obj := map[string]any{"type": strings.ToValidUTF8(content, "\uFFFD"), "n": float64(len(prefix)), "list": []any{strings.ToValidUTF8(suffix, "\uFFFD"), nil, true}}
		js, merr := json.Marshal(obj)
		if merr != nil {
			t.Fatal(merr)
		}
		strip := func(s string) string { return strings.NewReplacer("{", "", "}", "").Replace(s) }
		wrapped := strip(prefix) + string(js) + suffix
		if w := strings.TrimSpace(wrapped); json.Valid([]byte(w)) && w != string(js) {
			return // the whole text is other valid JSON (such as [ ... ]), which wins
		}
		var back map[string]any
		if err := ParseJSON(wrapped, &back); err != nil {
			t.Fatalf("ParseJSON(%.300q): %v", wrapped, err)
		}
		if !reflect.DeepEqual(back, obj) {
			t.Fatalf("ParseJSON(%.300q) = %v, want %v", wrapped, back, obj)
		}
	})
}

// hugeJSONSeedBytes is the size of the huge seeds: 1 MB when the seeds run as tests
// (go test, make test), where they show that the work stays linear; 4 KB
// while fuzzing (go test -fuzz), where mutating 1 MB inputs (and
// minimising them) would slow the engine to a crawl.
func hugeJSONSeedBytes() int {
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return 4 << 10
	}
	return 1 << 20
}

package llm

import (
	"strings"
	"testing"
)

func TestParseJSON(t *testing.T) {
	type out struct {
		Action string         `json:"action"`
		Args   map[string]any `json:"args"`
	}
	tests := []struct {
		name    string
		content string
		want    string // Action; "" when an error is expected
	}{
		{"plain", `{"action": "ask", "args": {}}`, "ask"},
		{"whitespace", "\n  {\"action\": \"ask\"}  \n", "ask"},
		{"fenced", "```json\n{\"action\": \"stop\"}\n```", "stop"},
		{"fenced no language", "```\n{\"action\": \"stop\"}\n```", "stop"},
		{"prose around", "Here is my answer: {\"action\": \"ask\", \"args\": {\"q\": 1}} Hope this helps.", "ask"},
		{"braces in strings", `Answer: {"action": "say {hi} \"}\" {", "args": {"x": "}"}} done`, "say {hi} \"}\" {"},
		{"prose braces first", `I think {maybe} this: {"action": "ask"}`, "ask"},
		{"nested", `{"action": "ask", "args": {"a": {"b": [1, {"c": 2}]}}}`, "ask"},
		{"two objects: first wins", `{"action": "one"} {"action": "two"}`, "one"},
		{"no object", "I cannot answer that.", ""},
		{"empty", "", ""},
		{"unterminated", `{"action": "ask", "args": {`, ""},
		{"wrong type", `{"action": 3}`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v out
			err := ParseJSON(tt.content, &v)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("no error; got %+v", v)
				}
				if KindOf(err) != KindMalformed {
					t.Errorf("kind = %v", KindOf(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if v.Action != tt.want {
				t.Errorf("action = %q, want %q", v.Action, tt.want)
			}
		})
	}
	var v out
	if err := ParseJSON(`{"action": "ask", "args": {`, &v); !strings.Contains(err.Error(), "unterminated") {
		t.Errorf("unterminated: %v", err)
	}
	if err := ParseJSON("no json here", &v); !strings.Contains(err.Error(), "no JSON object") || !strings.Contains(err.Error(), "no json here") {
		t.Errorf("no object: %v", err)
	}
}

func TestEstimateTokens(t *testing.T) {
	for s, want := range map[string]int{"": 0, "a": 1, "abc": 1, "abcd": 2, strings.Repeat("x", 35): 10, strings.Repeat("x", 36): 11} {
		if got := EstimateTokens(s); got != want {
			t.Errorf("EstimateTokens(%d bytes) = %d, want %d", len(s), got, want)
		}
	}
}

func TestTruncateSchema(t *testing.T) {
	table := func(name string) string {
		return "CREATE TABLE " + name + " (\n  id INTEGER PRIMARY KEY,\n  name TEXT\n);"
	}
	schema := table("a") + "\n\n" + table("b") + "\n  \n\n" + table("c") + "\n\n" + table("d") + "\n"
	per := EstimateTokens(table("a"))
	tests := []struct {
		name      string
		maxTokens int
		wantTrunc bool
		kept      []string
		omitted   int
	}{
		{"fits", EstimateTokens(schema), false, []string{"a", "b", "c", "d"}, 0},
		{"no limit", 0, false, []string{"a", "b", "c", "d"}, 0},
		{"two tables", 2*per + 10, true, []string{"a", "b"}, 2},
		{"one table", per + 9, true, []string{"a"}, 3},
		{"none fits", 5, true, nil, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, trunc := TruncateSchema(schema, tt.maxTokens)
			if trunc != tt.wantTrunc {
				t.Fatalf("truncated = %v, want %v:\n%s", trunc, tt.wantTrunc, got)
			}
			if !trunc {
				if got != schema {
					t.Errorf("changed a schema that fits")
				}
				return
			}
			for _, n := range []string{"a", "b", "c", "d"} {
				want := false
				for _, k := range tt.kept {
					want = want || k == n
				}
				if strings.Contains(got, table(n)) != want {
					t.Errorf("table %s kept = %v, want %v:\n%s", n, !want, want, got)
				}
			}
			if note := "-- " + string(rune('0'+tt.omitted)) + " more tables omitted"; !strings.HasSuffix(got, note) {
				t.Errorf("no note %q:\n%s", note, got)
			}
			if tt.omitted < 4 && EstimateTokens(got) > tt.maxTokens {
				t.Errorf("result of %d tokens exceeds %d", EstimateTokens(got), tt.maxTokens)
			}
		})
	}
}

package schema_test

import (
	"encoding/json"
	"strings"
	"testing"

	"avtgym/schema"
)

// minimal is the smallest record the schema accepts.
const minimal = `{"schema":"avtgym.episode/1","corpus":"demo","task_id":"t","avt_id":"t","seed":0,"group_index":0,
"status":"TERMINATED","counted":0,"questions":[],"replies":[],"credited_terms":[],"reward":1,"precision":null,
"recall":null,"f1":null,"success":1,"turns":[{"role":"environment","kind":"request","text":"hi"}]}`

// TestSchemaRejectsWhatNoWriterWrites: the schema is strict, so a writer
// that drifts from it (a renamed field, the old status spelling, a tag
// over its bounds) fails the writers' tests.
func TestSchemaRejectsWhatNoWriterWrites(t *testing.T) {
	if err := schema.ValidateRecord([]byte(minimal)); err != nil {
		t.Fatalf("the minimal record: %v", err)
	}
	edit := func(f func(m map[string]any)) []byte {
		var m map[string]any
		if err := json.Unmarshal([]byte(minimal), &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	for name, rec := range map[string][]byte{
		"old status spelling": edit(func(m map[string]any) { m["status"] = "EPISODE_STATUS_TERMINATED" }),
		"unknown field":       edit(func(m map[string]any) { m["rewards"] = 1 }),
		"missing turns":       edit(func(m map[string]any) { delete(m, "turns") }),
		"another schema":      edit(func(m map[string]any) { m["schema"] = "avtgym.episode/2" }),
		"a bad uid":           edit(func(m map[string]any) { m["episode_uid"] = "tiny/big/1" }),
		"a turn without role": edit(func(m map[string]any) { m["turns"] = []any{map[string]any{"text": "x"}} }),
		"a bad tag key":       edit(func(m map[string]any) { m["tags"] = map[string]any{"run id": "x"} }),
		"a long tag value":    edit(func(m map[string]any) { m["tags"] = map[string]any{"run": strings.Repeat("x", 257)} }),
		"a bad timestamp":     edit(func(m map[string]any) { m["started_at"] = "yesterday" }),
	} {
		if err := schema.ValidateRecord(rec); err == nil {
			t.Errorf("%s: accepted %s", name, rec)
		}
	}
	if n, err := schema.ValidateLines("x.jsonl", strings.NewReader(minimal[:20]+"\n")); err == nil || !strings.Contains(err.Error(), "x.jsonl:1") {
		t.Fatalf("a torn line: %d records, %v", n, err)
	}
}

package birdinteract

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unicode/utf8"

	"avtgym/corpus"
	"avtgym/corpus/corpuswrite"
)

// Problem is one thing wrong with the input (corpuswrite.Problem: the
// input file, its line, the task's instance_id and the field).
type Problem = corpuswrite.Problem

// Error is returned by Import when the input is unusable: it lists every
// problem found. Nothing is written to the output directory then.
type Error = corpuswrite.ImportError

// The fields of a BIRD-Interact task line. Anything else is rejected (the
// fields of its follow_up, ambiguity entries and conditions are checked by
// strictDecode into followUp, ambiguity and conditions).
var taskFields = set("instance_id", "selected_database", "query", "amb_user_query",
	"user_query_ambiguity", "knowledge_ambiguity", "sol_sql", "preprocess_sql",
	"clean_up_sqls", "test_cases", "external_knowledge", "category", "high_level",
	"conditions", "follow_up")

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

// task is a decoded, merged BIRD-Interact task line.
type task struct {
	InstanceID         string          `json:"instance_id"`
	SelectedDatabase   string          `json:"selected_database"`
	Query              string          `json:"query"`
	AmbUserQuery       string          `json:"amb_user_query"`
	UserQueryAmbiguity *userAmbiguity  `json:"user_query_ambiguity"`
	KnowledgeAmbiguity []ambiguity     `json:"knowledge_ambiguity"`
	SolSQL             corpus.SQLList  `json:"sol_sql"`
	PreprocessSQL      corpus.SQLList  `json:"preprocess_sql"`
	CleanUpSQLs        corpus.SQLList  `json:"clean_up_sqls"`
	TestCases          []string        `json:"test_cases"`
	ExternalKnowledge  json.RawMessage `json:"external_knowledge"`
	Category           string          `json:"category"`
	HighLevel          *bool           `json:"high_level"`
	Conditions         *conditions     `json:"conditions"`
	FollowUp           json.RawMessage `json:"follow_up"`

	// where it came from
	file string
	line int
	raw  map[string]json.RawMessage
}

type userAmbiguity struct {
	Critical    []ambiguity `json:"critical_ambiguity"`
	NonCritical []ambiguity `json:"non_critical_ambiguity"`
}

type ambiguity struct {
	Term             string          `json:"term"`
	SQLSnippet       string          `json:"sql_snippet"`
	IsMask           *bool           `json:"is_mask"`
	Type             string          `json:"type"`
	DeletedKnowledge json.RawMessage `json:"deleted_knowledge"`
}

type conditions struct {
	Decimal  *json.Number `json:"decimal"`
	Distinct *bool        `json:"distinct"`
	Order    *bool        `json:"order"`
}

type followUp struct {
	Query             string          `json:"query"`
	SolSQL            corpus.SQLList  `json:"sol_sql"`
	ExternalKnowledge json.RawMessage `json:"external_knowledge"`
	Type              string          `json:"type"`
	TestCases         []string        `json:"test_cases"`
	Category          string          `json:"category"`
	Conditions        *conditions     `json:"conditions"`
}

// jsonLine is one non-blank line of a JSONL file.
type jsonLine struct {
	no  int
	obj map[string]json.RawMessage
}

// readJSONL reads a JSONL file into objects, reporting lines that are not
// UTF-8, not one JSON object, or carry fields outside allowed (nil: any).
func readJSONL(file string, allowed map[string]bool, report func(Problem)) ([]jsonLine, bool) {
	return readJSONLFrom(file, file, allowed, report)
}

// readJSONLFrom is readJSONL reading the file at path open (a checked real
// path) and naming it file in problems.
func readJSONLFrom(file, open string, allowed map[string]bool, report func(Problem)) ([]jsonLine, bool) {
	f, err := os.Open(open)
	if err != nil {
		report(Problem{File: file, Msg: fmt.Sprintf("cannot read: %v", errors.Unwrap(err))})
		return nil, false
	}
	defer f.Close()
	var out []jsonLine
	r := bufio.NewReader(f)
	ok := true
	for no := 1; ; no++ {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			if obj, p := decodeLine(line, allowed); p != nil {
				p.File, p.Line = file, no
				report(*p)
				ok = false
			} else {
				out = append(out, jsonLine{no: no, obj: obj})
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			report(Problem{File: file, Line: no, Msg: fmt.Sprintf("cannot read: %v", err)})
			return nil, false
		}
	}
	return out, ok
}

func decodeLine(line []byte, allowed map[string]bool) (map[string]json.RawMessage, *Problem) {
	id := sniffID(line)
	if !utf8.Valid(line) {
		off := 0
		for off < len(line) {
			r, n := utf8.DecodeRune(line[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return nil, &Problem{InstanceID: id, Msg: fmt.Sprintf("not valid UTF-8 text (bad byte 0x%02x at byte %d of the line)", line[off], off+1)}
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil {
		return nil, &Problem{InstanceID: id, Msg: fmt.Sprintf("malformed JSON: %v", err)}
	}
	if obj == nil {
		return nil, &Problem{InstanceID: id, Msg: "malformed JSON: want an object"}
	}
	if dec.More() {
		return nil, &Problem{InstanceID: id, Msg: "malformed JSON: more than one value on the line"}
	}
	if allowed != nil {
		for _, k := range sortedKeys(obj) {
			if !allowed[k] {
				return nil, &Problem{InstanceID: id, Field: k, Msg: "unknown field"}
			}
		}
	}
	return obj, nil
}

// sniffID pulls the instance_id out of a line that may not decode, so that
// errors can name the record.
func sniffID(line []byte) string {
	i := bytes.Index(line, []byte(`"instance_id"`))
	if i < 0 {
		return ""
	}
	rest := bytes.TrimLeft(line[i+len(`"instance_id"`):], " \t")
	if len(rest) == 0 || rest[0] != ':' {
		return ""
	}
	rest = bytes.TrimLeft(rest[1:], " \t")
	var s string
	if err := json.NewDecoder(bytes.NewReader(rest)).Decode(&s); err != nil || !utf8.ValidString(s) {
		return ""
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// strictDecode decodes b into v rejecting unknown fields, and returns the
// field path and message of a failure.
func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("%s: want %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		if s := err.Error(); strings.HasPrefix(s, "json: unknown field ") {
			return fmt.Errorf("%s: unknown field", strings.Trim(strings.TrimPrefix(s, "json: unknown field "), `"`))
		}
		return err
	}
	return nil
}

// catalogEntry is one line of a response catalog.
type catalogEntry struct {
	InstanceID string `json:"instance_id"`
	Term       string `json:"term"`
	Resolution string `json:"resolution"`
}

// kbEntry is one line of a <db>_kb.jsonl file.
type kbEntry struct {
	ID                json.Number     `json:"id"`
	Knowledge         string          `json:"knowledge"`
	Description       string          `json:"description"`
	Definition        string          `json:"definition"`
	Type              string          `json:"type"`
	ChildrenKnowledge json.RawMessage `json:"children_knowledge"`
}

// isGroundTruthName reports whether a top-level JSONL file name is a
// ground-truth file: a name segment (split at '_', '-', '.') is "gt", or the
// name contains "ground_truth" / "groundtruth" / "ground-truth".
func isGroundTruthName(name string) bool {
	base := strings.ToLower(strings.TrimSuffix(name, filepath.Ext(name)))
	for _, g := range []string{"ground_truth", "groundtruth", "ground-truth"} {
		if strings.Contains(base, g) {
			return true
		}
	}
	for _, seg := range strings.FieldsFunc(base, func(r rune) bool { return r == '_' || r == '-' || r == '.' }) {
		if seg == "gt" {
			return true
		}
	}
	return false
}

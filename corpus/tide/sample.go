package tide

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"avtgym/corpus"
)

// The sample types, as corpus.Record.SampleType holds them.
var sampleTypes = []string{corpus.SampleChainOnly, corpus.SampleDriftOnly, corpus.SampleJoint}

// typeSuffix is the instance_id suffix of each sample type
// (<anchor_id>-C, -D, -J).
var typeSuffix = map[string]string{corpus.SampleChainOnly: "-C", corpus.SampleDriftOnly: "-D", corpus.SampleJoint: "-J"}

// group says when a field is set: always, in samples with a chain
// (chain_only, joint), in samples with a drift (drift_only, joint), or in
// projection drifts only.
type group int

const (
	always group = iota
	chain
	drift
	projection
)

// kind is a field's JSON type.
type kind int

const (
	text     kind = iota // a string with a non-blank value
	optText              // a string, possibly empty
	options              // an array of exactly two strings
	textList             // an array of strings
)

// fieldSpec is one field of the format (../shared/data/tide-format/README.md).
type fieldSpec struct {
	name  string
	group group
	kind  kind
	enum  []string
	// meta fields have no place in a record and are kept verbatim in
	// source.meta.
	meta bool
}

// fields are the fields of a sample line, in the README's order. Any
// other field is rejected.
var fields = []fieldSpec{
	{name: "instance_id", group: always, kind: text},
	{name: "anchor_id", group: always, kind: text},
	{name: "sample_type", group: always, kind: text, enum: sampleTypes},
	{name: "db_id", group: always, kind: text},
	{name: "initial_question", group: always, kind: text},
	{name: "evidence", group: always, kind: optText},
	{name: "original_question", group: always, kind: text, meta: true},
	{name: "L1_term", group: chain, kind: text},
	{name: "L2_term", group: chain, kind: text},
	{name: "L1_question", group: chain, kind: text},
	{name: "L2_question", group: chain, kind: text},
	{name: "L1_options", group: chain, kind: options},
	{name: "L2_options", group: chain, kind: options},
	{name: "L1_chosen", group: chain, kind: text},
	{name: "L2_chosen", group: chain, kind: text},
	{name: "L1_user_answer_utterance", group: chain, kind: text},
	{name: "L2_user_answer_utterance", group: chain, kind: text},
	{name: "L1_alternative_sql_impact", group: chain, kind: text, meta: true},
	{name: "L2_alternative_sql_impact", group: chain, kind: text, meta: true},
	{name: "counterfactual_verdict", group: chain, kind: text, enum: []string{"eliminated", "transformed"}, meta: true},
	{name: "chain_rationale", group: chain, kind: text, meta: true},
	{name: "drift_utterance", group: drift, kind: text},
	{name: "drift_subtype", group: drift, kind: text, enum: []string{"value", "constraint", "projection"}},
	{name: "intent_subtype", group: projection, kind: text, enum: []string{"aspect_change", "target_change"}},
	{name: "pre_commitments_narrative", group: drift, kind: text, meta: true},
	{name: "post_commitments_narrative", group: drift, kind: text, meta: true},
	{name: "drift_rationale", group: drift, kind: text, meta: true},
	{name: "anchor_sql", group: always, kind: text},
	{name: "post_drift_sql", group: drift, kind: text},
	{name: "target_sqls", group: always, kind: textList, meta: true},
	{name: "l1_alt_sql", group: chain, kind: text},
	{name: "l2_alt_sql", group: chain, kind: text},
	{name: "complexity_tier", group: always, kind: text, enum: []string{"basic", "intermediate", "advanced"}, meta: true},
}

var specOf = func() map[string]*fieldSpec {
	m := map[string]*fieldSpec{}
	for i := range fields {
		m[fields[i].name] = &fields[i]
	}
	return m
}()

// sample is one decoded line of the samples file.
type sample struct {
	line       int
	sampleType string
	// raw holds every non-null field's JSON text.
	raw map[string]json.RawMessage
	// str holds the string fields that are set, list the array fields.
	str  map[string]string
	list map[string][]string
}

func (s *sample) hasChain() bool { return s.sampleType != corpus.SampleDriftOnly }
func (s *sample) hasDrift() bool { return s.sampleType != corpus.SampleChainOnly }

// applies reports whether a field of group g is set in a sample of type st
// (with drift subtype sub); ok is false when st is unknown.
func applies(g group, st, sub string) (set, ok bool) {
	if !slices.Contains(sampleTypes, st) {
		return false, false
	}
	switch g {
	case chain:
		return st != corpus.SampleDriftOnly, true
	case drift:
		return st != corpus.SampleChainOnly, true
	case projection:
		return st != corpus.SampleChainOnly && sub == "projection", true
	}
	return true, true
}

// jsonKind names the JSON type of a raw value, for messages.
func jsonKind(b json.RawMessage) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// object reads one JSON object into its members in order, refusing a
// duplicate member and anything after the object; b holds no surrounding
// white space. On failure msg says why (and field names the member at
// fault, when there is one).
func object(b []byte) (keys []string, vals map[string]json.RawMessage, field, msg string) {
	dec := json.NewDecoder(bytes.NewReader(b))
	invalid := func(err error) string { return "invalid JSON: " + strings.TrimPrefix(err.Error(), "json: ") }
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, "", invalid(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, "", "want a JSON object on each line"
	}
	vals = map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, "", invalid(err)
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, k, invalid(err)
		}
		if _, dup := vals[k]; dup {
			return nil, nil, k, "the field occurs twice on the line"
		}
		keys = append(keys, k)
		vals[k] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, "", invalid(err)
	}
	if dec.InputOffset() != int64(len(b)) {
		return nil, nil, "", "more than one JSON value on the line"
	}
	return keys, vals, "", ""
}

// decode checks one line strictly and returns the sample, or nil after
// reporting its problems.
func (im *importer) decode(b []byte, line int) *sample {
	n := len(im.problems)
	keys, vals, field, msg := object(b)
	if msg != "" {
		im.report(line, "", field, "%s", msg)
		return nil
	}
	s := &sample{line: line, raw: map[string]json.RawMessage{}, str: map[string]string{}, list: map[string][]string{}}
	id := ""
	if v, ok := vals["instance_id"]; ok {
		json.Unmarshal(v, &id) // reported below when it is not a string
	}
	bad := func(field, format string, args ...any) { im.report(line, id, field, format, args...) }
	for _, k := range keys {
		if specOf[k] == nil {
			bad(k, "unknown field (misspelt?); the format's fields are listed in docs/tide.md")
		}
	}
	// Types first, then presence by sample type.
	wrong := s.readFields(vals, bad)
	s.sampleType = s.str["sample_type"]
	s.checkPresence(vals, wrong, bad)
	if len(im.problems) > n {
		return nil
	}
	im.checkSample(s, bad)
	if len(im.problems) > n {
		return nil
	}
	return s
}

// reporter reports a problem of one field of the sample being decoded.
type reporter = func(field, format string, args ...any)

// readFields decodes the non-null fields of vals into s by their kinds and
// reports those of the wrong type, which wrong marks.
func (s *sample) readFields(vals map[string]json.RawMessage, bad reporter) (wrong map[string]bool) {
	wrong = map[string]bool{}
	for _, f := range fields {
		v, ok := vals[f.name]
		if !ok || string(v) == "null" {
			continue
		}
		if !s.readField(f, v, bad) {
			wrong[f.name] = true
			continue
		}
		s.raw[f.name] = v
	}
	return wrong
}

// readField decodes the value v of field f into s, or reports why it
// cannot and returns false.
func (s *sample) readField(f fieldSpec, v json.RawMessage, bad reporter) bool {
	switch f.kind {
	case text, optText:
		var x string
		switch {
		case json.Unmarshal(v, &x) != nil:
			bad(f.name, "want a string, got %s", jsonKind(v))
		case f.kind == text && strings.TrimSpace(x) == "":
			bad(f.name, "is empty")
		case f.enum != nil && !slices.Contains(f.enum, x):
			bad(f.name, "%q is not one of %s", x, strings.Join(f.enum, ", "))
		default:
			s.str[f.name] = x
			return true
		}
		return false
	case options, textList:
		var xs []string
		switch {
		case v[0] != '[':
			bad(f.name, "want an array of strings, got %s", jsonKind(v))
		case json.Unmarshal(v, &xs) != nil:
			bad(f.name, "want an array of strings, got an array with an element that is not a string")
		default:
			s.list[f.name] = xs
			return true
		}
		return false
	}
	return true
}

// checkPresence reports the fields that are missing or set against the
// rules of the sample's type (and drift subtype); wrong marks the fields of
// the wrong type.
func (s *sample) checkPresence(vals map[string]json.RawMessage, wrong map[string]bool, bad reporter) {
	st, stOK := s.str["sample_type"]
	for _, f := range fields {
		v, present := vals[f.name]
		null := !present || string(v) == "null"
		set, known := applies(f.group, st, s.str["drift_subtype"])
		switch {
		case f.group == always && null:
			bad(f.name, "is required")
		case !known || !stOK || f.group == projection && wrong["drift_subtype"]:
			// An unknown sample type or drift subtype (reported above):
			// no presence rule.
		case set && null:
			bad(f.name, "is required in a %s sample%s", st, pick(f.group == projection, " with a projection drift", ""))
		case !set && !null:
			s.reportSet(f, bad)
		}
	}
}

// reportSet reports field f, set in a sample whose type says it must be
// null.
func (s *sample) reportSet(f fieldSpec, bad reporter) {
	st := s.sampleType
	switch f.group {
	case chain:
		bad(f.name, "must be null in a %s sample: it has no clarification chain (sample_type says which patterns are active)", st)
	case drift:
		bad(f.name, "must be null in a %s sample: it has no drift (sample_type says which patterns are active)", st)
	case projection:
		if st == corpus.SampleChainOnly {
			bad(f.name, "must be null in a %s sample: it has no drift", st)
		} else {
			bad(f.name, "is only given for projection drifts (drift_subtype %q)", s.str["drift_subtype"])
		}
	}
}

// checkSample checks the rules between the fields of one sample whose
// fields have the right types and presence.
func (im *importer) checkSample(s *sample, bad reporter) {
	id, anchor := s.str["instance_id"], s.str["anchor_id"]
	if !corpus.ValidID(id) {
		bad("instance_id", "%q must be letters, digits, '.', '_', ':' or '-', starting with a letter or digit (it becomes the record id)", id)
	}
	if !corpus.ValidID(anchor) {
		bad("anchor_id", "%q must be letters, digits, '.', '_', ':' or '-', starting with a letter or digit (it becomes the record's cluster)", anchor)
	} else if want := anchor + typeSuffix[s.sampleType]; id != want {
		bad("instance_id", "%q is not %q: a %s sample of anchor %q is named <anchor_id>%s", id, want, s.sampleType, anchor, typeSuffix[s.sampleType])
	}
	if db := s.str["db_id"]; !corpus.ValidID(db) {
		bad("db_id", "%q must be letters, digits, '.', '_', ':' or '-', starting with a letter or digit (it names the folder %s/%s.sqlite)", db, db, db)
	}
	if s.sampleType == corpus.SampleDriftOnly && s.str["initial_question"] != s.str["original_question"] {
		bad("initial_question", "differs from original_question: a drift_only sample starts from the original, fully specified question")
	}
	if s.hasChain() {
		for _, l := range []string{"L1", "L2"} {
			opts := s.list[l+"_options"]
			chosen := s.str[l+"_chosen"]
			switch {
			case len(opts) != 2:
				bad(l+"_options", "has %d option(s), want exactly two readings", len(opts))
			case strings.TrimSpace(opts[0]) == "" || strings.TrimSpace(opts[1]) == "":
				bad(l+"_options", "an option is empty")
			case opts[0] == opts[1]:
				bad(l+"_options", "the two options are the same (%q)", opts[0])
			case !slices.Contains(opts, chosen):
				bad(l+"_chosen", "%q is not one of %s_options (%q, %q)", chosen, l, opts[0], opts[1])
			}
		}
		if s.str["L1_term"] == s.str["L2_term"] {
			bad("L2_term", "equals L1_term (%q): L2 is a concept of its own that depends on L1", s.str["L1_term"])
		}
	}
	want := []string{s.str["anchor_sql"]}
	form := "[anchor_sql]"
	if s.hasDrift() {
		want = append(want, s.str["post_drift_sql"])
		form = "[anchor_sql, post_drift_sql]"
	}
	switch got := s.list["target_sqls"]; {
	case len(got) != len(want):
		bad("target_sqls", "want %s for a %s sample, got %d entr%s", form, s.sampleType, len(got), pick(len(got) == 1, "y", "ies"))
	case !slices.Equal(got, want):
		bad("target_sqls", "want %s for a %s sample: the entries differ from those fields", form, s.sampleType)
	}
}

// shared lists the fields a triplet's samples share: the README's "shared
// fields are identical within a triplet".
var (
	sharedAll   = []string{"db_id", "evidence", "original_question", "anchor_sql"}
	sharedChain = fieldsOf(chain)
	sharedDrift = append(fieldsOf(drift), "intent_subtype")
)

func fieldsOf(g group) []string {
	var out []string
	for _, f := range fields {
		if f.group == g {
			out = append(out, f.name)
		}
	}
	return out
}

// checkAnchors checks the samples across lines: instance ids are unique
// (with the <anchor_id>-C/-D/-J rule, an anchor has at most one sample of
// each type), and the fields a triplet
// shares are identical (db_id, evidence, original_question and anchor_sql
// across the three; the chain fields between chain_only and joint; the
// drift fields between drift_only and joint).
func (im *importer) checkAnchors(samples []*sample) {
	byID := map[string]*sample{}
	byAnchor := map[string]map[string]*sample{}
	for _, s := range samples {
		id, anchor := s.str["instance_id"], s.str["anchor_id"]
		if prev, dup := byID[id]; dup {
			im.report(s.line, id, "instance_id", "%q is already used on line %d", id, prev.line)
			continue
		}
		byID[id] = s
		ts := byAnchor[anchor]
		if ts == nil {
			ts = map[string]*sample{}
			byAnchor[anchor] = ts
		}
		for _, other := range ts {
			var same []string
			same = append(same, sharedAll...)
			if s.hasChain() && other.hasChain() {
				same = append(same, sharedChain...)
			}
			if s.hasDrift() && other.hasDrift() {
				same = append(same, sharedDrift...)
			}
			for _, f := range same {
				if !bytes.Equal(compact(s.raw[f]), compact(other.raw[f])) {
					im.report(s.line, id, f, "differs from the %s sample %s (line %d) of the same anchor %q: the samples of one anchor share it", other.sampleType, other.str["instance_id"], other.line, anchor)
				}
			}
		}
		ts[s.sampleType] = s
	}
}

func compact(b json.RawMessage) []byte {
	var out bytes.Buffer
	if json.Compact(&out, b) != nil {
		return b
	}
	return out.Bytes()
}

// record maps a checked sample to its task record (docs/tide.md).
func (s *sample) record() *corpus.Record {
	id := s.str["instance_id"]
	r := &corpus.Record{
		ID:             id,
		AVTID:          id,
		Cluster:        s.str["anchor_id"],
		SampleType:     s.sampleType,
		DB:             s.str["db_id"],
		Request:        s.str["initial_question"],
		Evidence:       s.str["evidence"],
		Ambiguities:    []corpus.Ambiguity{},
		Interpretation: "original question",
		Reference:      corpus.Reference{SQL: corpus.SQLList{s.str["anchor_sql"]}},
		Source:         &corpus.Source{Dataset: Dataset, ID: id, Meta: map[string]json.RawMessage{}},
	}
	if s.hasChain() {
		layer := func(l, alt, dependsOn string) corpus.Ambiguity {
			return corpus.Ambiguity{
				Term:           s.str[l+"_term"],
				Kind:           corpus.Critical,
				Resolution:     s.str[l+"_user_answer_utterance"],
				DependsOn:      dependsOn,
				Question:       s.str[l+"_question"],
				Options:        s.list[l+"_options"],
				Chosen:         s.str[l+"_chosen"],
				AlternativeSQL: s.str[alt],
			}
		}
		// L1 before L2: the annotation order, in which the full probe asks
		// and in which oracles credit a chain (L2 only once L1 is).
		r.Ambiguities = []corpus.Ambiguity{layer("L1", "l1_alt_sql", ""), layer("L2", "l2_alt_sql", s.str["L1_term"])}
		r.Interpretation = s.str["L1_chosen"] + " / " + s.str["L2_chosen"]
	}
	if s.hasDrift() {
		r.Drift = &corpus.Drift{
			Utterance:     s.str["drift_utterance"],
			Reference:     corpus.Reference{SQL: corpus.SQLList{s.str["post_drift_sql"]}},
			Subtype:       s.str["drift_subtype"],
			IntentSubtype: s.str["intent_subtype"],
		}
	}
	for _, f := range fields {
		if v, ok := s.raw[f.name]; ok && f.meta {
			r.Source.Meta[f.name] = v
		}
	}
	return r
}

func pick[T any](cond bool, yes, no T) T {
	if cond {
		return yes
	}
	return no
}

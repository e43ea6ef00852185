// Package birdinteract imports tasks in the BIRD-Interact format
// (mini-interact, SQLite) into an avtgym corpus directory.
//
// The input directory holds one task file (JSONL, merged, or public with a
// ground-truth file beside it joined by instance_id) and one folder per
// database with <db>.sqlite, <db>_kb.jsonl, <db>_column_meaning_base.json
// and <db>_schema.txt. Query tasks become task records; Management tasks are
// reported and written to unserved.jsonl, which the manifest does not list.
// See docs/birdinteract.md for the field mapping.
package birdinteract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"avtgym/corpus"
	"avtgym/corpus/corpuswrite"
	"avtgym/sqlexec"
	"avtgym/sqlexec/sqlite"
)

// Dataset is the Source.Dataset of imported records.
const Dataset = "birdinteract"

// RecordsFile and UnservedFile are the names of the files written to the
// output directory besides corpus.json and the databases.
const (
	RecordsFile  = "records.jsonl"
	UnservedFile = "unserved.jsonl"
)

// Options configure Import.
type Options struct {
	// In is the input directory (task file(s) and database folders).
	In string
	// Out is the corpus directory to write. It must not exist or be empty,
	// unless Force is set, and it must not be, lie inside or contain In.
	Out string
	// Responses is an optional response catalog: JSONL lines
	// {instance_id, term, resolution} with natural-language resolutions.
	// Without it, resolutions are the SQL snippets and records get
	// resolution_format "sql".
	Responses string
	// Force replaces a non-empty Out (only after the import succeeded).
	Force bool
	// Name is the corpus name; default "birdinteract".
	Name string
	// Check, when set, is run on the written corpus once it loads and
	// before it is committed; its problems fail the import (the command
	// passes the audit's oracle probes here: every record's terms must be
	// credited by the scripted probes).
	Check func(context.Context, *corpus.Corpus) ([]corpus.Problem, error)
}

// Unserved is a task that was read but not written as a served record.
type Unserved struct {
	// InstanceID is the task's instance_id.
	InstanceID string `json:"instance_id"`
	// Category is the task's category ("Management").
	Category string `json:"category"`
	// Reason says why the task is not served.
	Reason string `json:"reason"`
}

// Summary describes a finished import.
type Summary struct {
	// Out is the corpus directory written.
	Out string
	// TaskFile and GroundTruthFile are the input files read
	// (GroundTruthFile is empty for a merged file).
	TaskFile, GroundTruthFile string
	// Responses is the response catalog used, empty when none.
	Responses string
	// Tasks is the number of tasks read.
	Tasks int
	// Served are the instance ids written as records, in input order.
	Served []string
	// Unserved are the tasks not served (Management tasks), in input order.
	Unserved []Unserved
	// SQLResolutions are the served records whose resolutions are SQL
	// snippets (resolution_format "sql"), because no catalog was given.
	SQLResolutions []string
	// Critical, Knowledge and NonCritical count the served ambiguities.
	Critical, Knowledge, NonCritical int
	// FollowUps counts served records carrying a follow-up (kept, not served).
	FollowUps int
	// OpaqueTests are served records whose Python test_cases were kept as
	// opaque text; they are verified with the default comparison.
	OpaqueTests []string
	// Databases are the database ids written.
	Databases []string
	// UnusedGroundTruth are ground-truth ids with no task line.
	UnusedGroundTruth []string
	// UnusedResponses counts catalog lines whose instance_id is not a task.
	UnusedResponses int
	// Validation is the line of the post-import check.
	Validation string
}

// Write prints the summary for people.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "birdinteract import: %s\n", s.Out)
	if s.GroundTruthFile != "" {
		fmt.Fprintf(w, "  input: %s joined with ground truth %s by instance_id\n", s.TaskFile, s.GroundTruthFile)
	} else {
		fmt.Fprintf(w, "  input: %s (merged)\n", s.TaskFile)
	}
	fmt.Fprintf(w, "  tasks read: %d; served (Query): %d; not served: %d\n", s.Tasks, len(s.Served), len(s.Unserved))
	fmt.Fprintf(w, "  served: %s\n", strings.Join(s.Served, ", "))
	if len(s.Unserved) > 0 {
		fmt.Fprintf(w, "  NOT SERVED (%d, written to %s, not listed in the manifest):\n", len(s.Unserved), UnservedFile)
		for _, u := range s.Unserved {
			fmt.Fprintf(w, "    %s (%s): %s\n", u.InstanceID, u.Category, u.Reason)
		}
	}
	fmt.Fprintf(w, "  ambiguities: %d critical, %d knowledge (masked KB entries), %d non_critical (not counted)\n", s.Critical, s.Knowledge, s.NonCritical)
	fmt.Fprintf(w, "  follow-ups kept (not served yet): %d\n", s.FollowUps)
	if len(s.OpaqueTests) > 0 {
		fmt.Fprintf(w, "  Python test_cases kept as opaque text, default comparison used: %s\n", strings.Join(s.OpaqueTests, ", "))
	}
	if s.Responses != "" {
		fmt.Fprintf(w, "  resolutions: natural language from the response catalog %s\n", s.Responses)
		if s.UnusedResponses > 0 {
			fmt.Fprintf(w, "  catalog lines for tasks not in the input (ignored): %d\n", s.UnusedResponses)
		}
	}
	if len(s.SQLResolutions) > 0 {
		fmt.Fprintf(w, "  WARNING: no response catalog: %d record(s) answer clarifications with SQL snippets (resolution_format \"sql\"): %s\n",
			len(s.SQLResolutions), strings.Join(s.SQLResolutions, ", "))
		fmt.Fprintf(w, "  WARNING: the deterministic oracle will hand the solver SQL; pass --responses FILE for natural-language resolutions\n")
	}
	if len(s.UnusedGroundTruth) > 0 {
		fmt.Fprintf(w, "  ground-truth lines without a task (ignored): %s\n", strings.Join(s.UnusedGroundTruth, ", "))
	}
	fmt.Fprintf(w, "  databases: %s\n", strings.Join(s.Databases, ", "))
	fmt.Fprintf(w, "  %s\n", s.Validation)
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

// importer carries the state of one import.
type importer struct {
	opt      Options
	problems []Problem
	sum      Summary
}

func (im *importer) report(p Problem) { im.problems = append(im.problems, p) }

func (im *importer) fail() error {
	if len(im.problems) == 0 {
		return nil
	}
	return &Error{Problems: im.problems}
}

// Import reads the BIRD-Interact input in opt.In, writes a corpus to
// opt.Out and validates it with corpus.LoadDir and the scripted-probe check.
// On any problem it returns an *Error (or another error for I/O failures)
// and leaves opt.Out as it was.
func Import(ctx context.Context, opt Options) (*Summary, error) {
	if opt.Name == "" {
		opt.Name = "birdinteract"
	}
	if !idPattern.MatchString(opt.Name) {
		return nil, fmt.Errorf("corpus name %q must be letters, digits, '.', '_', ':' or '-'", opt.Name)
	}
	if opt.In == "" || opt.Out == "" {
		return nil, errors.New("both --in and --out are required")
	}
	if err := corpuswrite.Check(opt.In, opt.Out, opt.Force); err != nil {
		return nil, err
	}
	im := &importer{opt: opt}
	im.sum.Out = opt.Out

	taskFile, gtFile, err := findTaskFiles(opt.In, opt.Responses)
	if err != nil {
		return nil, err
	}
	im.sum.TaskFile, im.sum.GroundTruthFile = taskFile, gtFile
	tasks := im.readTasks(taskFile, gtFile)
	if err := im.fail(); err != nil {
		return nil, err
	}
	im.sum.Tasks = len(tasks)

	var catalog map[string]map[string]string
	if opt.Responses != "" {
		im.sum.Responses = opt.Responses
		catalog = im.readCatalog(opt.Responses, tasks)
	}
	dbs := im.readDatabases(ctx, tasks)
	defer func() {
		for _, d := range dbs {
			if d.eng != nil {
				d.eng.Close()
			}
		}
	}()
	if err := im.fail(); err != nil {
		return nil, err
	}

	var records []*corpus.Record
	var served []*task
	var unserved []map[string]any
	usedDB := map[string]bool{}
	for _, t := range tasks {
		d := dbs[t.SelectedDatabase]
		im.checkSQL(ctx, t, d)
		reason := ""
		switch {
		case t.Category != "Query":
			reason = "Management task (changes the database); stateful verification does not exist yet"
		case len(t.PreprocessSQL) > 0:
			reason = "Query task with preprocess_sql: its reference depends on database state that read-only verification cannot prepare"
		}
		if reason != "" {
			im.sum.Unserved = append(im.sum.Unserved, Unserved{InstanceID: t.InstanceID, Category: t.Category, Reason: reason})
			unserved = append(unserved, map[string]any{"instance_id": t.InstanceID, "category": t.Category, "reason": reason, "task": t.raw})
			continue
		}
		rec := im.record(t, d, catalog)
		if rec == nil {
			continue
		}
		records = append(records, rec)
		served = append(served, t)
		usedDB[t.SelectedDatabase] = true
	}
	if err := im.fail(); err != nil {
		return nil, err
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("%s: no servable Query task (%d task(s) read, none served)", taskFile, len(tasks))
	}
	for _, t := range served {
		im.sum.Served = append(im.sum.Served, t.InstanceID)
	}
	return im.write(ctx, records, served, unserved, dbs, usedDB)
}

// findTaskFiles picks the task file and the optional ground-truth file
// among the top-level .jsonl files of dir (skipping the response catalog).
func findTaskFiles(dir, responses string) (taskFile, gtFile string, err error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", "", fmt.Errorf("--in %s: %v", dir, errors.Unwrap(err))
	}
	if !fi.IsDir() {
		return "", "", fmt.Errorf("--in %s is not a directory", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", "", err
	}
	respAbs, _ := filepath.Abs(responses)
	var tasks, gts []string
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(strings.ToLower(e.Name()), ".jsonl") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if a, _ := filepath.Abs(p); responses != "" && a == respAbs {
			continue
		}
		if isGroundTruthName(e.Name()) {
			gts = append(gts, p)
		} else {
			tasks = append(tasks, p)
		}
	}
	switch {
	case len(tasks) == 0:
		return "", "", fmt.Errorf("%s: no task file: want one top-level .jsonl file of BIRD-Interact tasks (merged, or public with a *_gt.jsonl ground-truth file)", dir)
	case len(tasks) > 1:
		return "", "", fmt.Errorf("%s: several task files (%s): want exactly one (name a ground-truth file *_gt.jsonl)", dir, strings.Join(tasks, ", "))
	case len(gts) > 1:
		return "", "", fmt.Errorf("%s: several ground-truth files (%s): want at most one", dir, strings.Join(gts, ", "))
	}
	if len(gts) == 1 {
		gtFile = gts[0]
	}
	return tasks[0], gtFile, nil
}

// readTasks reads the task file, merges the ground truth into it and
// decodes every task.
func (im *importer) readTasks(taskFile, gtFile string) []*task {
	lines, ok := readJSONL(taskFile, taskFields, im.report)
	gt := map[string]jsonLine{}
	var gtOrder []string
	if gtFile != "" {
		glines, gok := readJSONL(gtFile, taskFields, im.report)
		ok = ok && gok
		for _, g := range glines {
			id, p := stringField(g.obj, "instance_id")
			if p != "" || id == "" {
				im.report(Problem{File: gtFile, Line: g.no, Field: "instance_id", Msg: "a non-empty string is required"})
				continue
			}
			if prev, dup := gt[id]; dup {
				im.report(Problem{File: gtFile, Line: g.no, InstanceID: id, Msg: fmt.Sprintf("instance_id used twice (first on line %d)", prev.no)})
				continue
			}
			gt[id] = g
			gtOrder = append(gtOrder, id)
		}
	}
	if !ok {
		return nil
	}
	seen := map[string]int{}
	var tasks []*task
	for _, l := range lines {
		id, p := stringField(l.obj, "instance_id")
		if p != "" || id == "" {
			im.report(Problem{File: taskFile, Line: l.no, Field: "instance_id", Msg: "a non-empty string is required"})
			continue
		}
		if prev, dup := seen[id]; dup {
			im.report(Problem{File: taskFile, Line: l.no, InstanceID: id, Msg: fmt.Sprintf("instance_id used twice (first on line %d)", prev)})
			continue
		}
		seen[id] = l.no
		obj := l.obj
		if gtFile != "" {
			g, found := gt[id]
			if !found {
				im.report(Problem{File: taskFile, Line: l.no, InstanceID: id, Msg: fmt.Sprintf("the ground-truth file %s has no line for this instance_id", gtFile)})
				continue
			}
			var perr *Problem
			obj, perr = merge(l.obj, g.obj)
			if perr != nil {
				perr.File, perr.Line, perr.InstanceID = gtFile, g.no, id
				im.report(*perr)
				continue
			}
		}
		t := im.decodeTask(taskFile, l.no, id, obj)
		if t != nil {
			tasks = append(tasks, t)
		}
	}
	for _, id := range gtOrder {
		if _, ok := seen[id]; !ok {
			im.sum.UnusedGroundTruth = append(im.sum.UnusedGroundTruth, id)
		}
	}
	return tasks
}

func stringField(obj map[string]json.RawMessage, k string) (string, string) {
	var s string
	if err := json.Unmarshal(obj[k], &s); err != nil {
		return "", "want a string"
	}
	return s, ""
}

// merge fills a public task with its ground-truth fields: ground truth
// wins; follow_up objects are merged field by field.
func merge(pub, gt map[string]json.RawMessage) (map[string]json.RawMessage, *Problem) {
	out := map[string]json.RawMessage{}
	for k, v := range pub {
		out[k] = v
	}
	for k, v := range gt {
		if k == "instance_id" {
			continue
		}
		if k == "follow_up" && !isNull(out[k]) && !isNull(v) {
			var a, b map[string]json.RawMessage
			if err := json.Unmarshal(out[k], &a); err != nil || a == nil {
				return nil, &Problem{Field: "follow_up", Msg: "the task file's follow_up is not an object"}
			}
			if err := json.Unmarshal(v, &b); err != nil || b == nil {
				return nil, &Problem{Field: "follow_up", Msg: "want an object"}
			}
			for fk, fv := range b {
				a[fk] = fv
			}
			m, _ := json.Marshal(a)
			out[k] = m
			continue
		}
		out[k] = v
	}
	return out, nil
}

func isNull(b json.RawMessage) bool {
	return len(bytes.TrimSpace(b)) == 0 || bytes.Equal(bytes.TrimSpace(b), []byte("null"))
}

// decodeTask decodes and checks one merged task object.
func (im *importer) decodeTask(file string, line int, id string, obj map[string]json.RawMessage) *task {
	bad := func(field, format string, args ...any) {
		im.report(Problem{File: file, Line: line, InstanceID: id, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	b, _ := json.Marshal(obj)
	t := &task{file: file, line: line, raw: obj}
	if err := strictDecode(b, t); err != nil {
		bad("", "%v", err)
		return nil
	}
	n := len(im.problems)
	if !idPattern.MatchString(id) {
		bad("instance_id", "%q must be letters, digits, '.', '_', ':' or '-' to become a record id", id)
	}
	if !idPattern.MatchString(t.SelectedDatabase) {
		bad("selected_database", "%q is not a database folder name", t.SelectedDatabase)
	}
	if strings.TrimSpace(t.AmbUserQuery) == "" {
		bad("amb_user_query", "is required")
	}
	if t.Category != "Query" && t.Category != "Management" {
		bad("category", "%q: want \"Query\" or \"Management\"", t.Category)
	}
	if t.Category == "Query" && len(t.SolSQL) == 0 {
		if _, has := obj["sol_sql"]; !has {
			bad("sol_sql", "missing: this looks like the public release, which omits sol_sql; put the ground-truth file (for example tasks_gt.jsonl) next to the task file")
		} else {
			bad("sol_sql", "is empty")
		}
	}
	for i, s := range t.SolSQL {
		if strings.TrimSpace(s) == "" {
			bad(fmt.Sprintf("sol_sql[%d]", i), "is empty")
		}
	}
	if c := t.Conditions; c != nil && c.Decimal != nil {
		if d, err := strconv.Atoi(c.Decimal.String()); err != nil || d > 12 {
			bad("conditions.decimal", "%s: want an integer from -1 to 12", c.Decimal)
		}
	}
	if !isNull(t.FollowUp) {
		var fu followUp
		if err := strictDecode(t.FollowUp, &fu); err != nil {
			bad("follow_up", "%v", err)
		} else if c := fu.Conditions; c != nil && c.Decimal != nil {
			if _, err := strconv.Atoi(c.Decimal.String()); err != nil {
				bad("follow_up.conditions.decimal", "%s: want an integer", c.Decimal)
			}
		}
	}
	if len(im.problems) > n {
		return nil
	}
	return t
}

// readCatalog reads the response catalog: instance_id → term → resolution.
func (im *importer) readCatalog(file string, tasks []*task) map[string]map[string]string {
	lines, _ := readJSONL(file, set("instance_id", "term", "resolution"), im.report)
	known := map[string]*task{}
	for _, t := range tasks {
		known[t.InstanceID] = t
	}
	cat := map[string]map[string]string{}
	for _, l := range lines {
		b, _ := json.Marshal(l.obj)
		var e catalogEntry
		if err := strictDecode(b, &e); err != nil {
			im.report(Problem{File: file, Line: l.no, InstanceID: sniffID(b), Msg: err.Error()})
			continue
		}
		bad := func(field, msg string) {
			im.report(Problem{File: file, Line: l.no, InstanceID: e.InstanceID, Field: field, Msg: msg})
		}
		switch {
		case e.InstanceID == "":
			bad("instance_id", "is required")
			continue
		case e.Term == "":
			bad("term", "is required")
			continue
		case strings.TrimSpace(e.Resolution) == "":
			bad("resolution", "is required")
			continue
		}
		t, ok := known[e.InstanceID]
		if !ok {
			im.sum.UnusedResponses++
			continue
		}
		if !hasTerm(t, e.Term) {
			bad("term", fmt.Sprintf("%q is not an ambiguity term of this task", e.Term))
			continue
		}
		if cat[e.InstanceID] == nil {
			cat[e.InstanceID] = map[string]string{}
		}
		if _, dup := cat[e.InstanceID][e.Term]; dup {
			bad("term", fmt.Sprintf("%q has two resolutions", e.Term))
			continue
		}
		cat[e.InstanceID][e.Term] = e.Resolution
	}
	return cat
}

func hasTerm(t *task, term string) bool {
	for _, a := range allAmbiguities(t) {
		if a.a.Term == term {
			return true
		}
	}
	return false
}

type taggedAmbiguity struct {
	a     ambiguity
	kind  corpus.Kind
	field string
}

// allAmbiguities lists the task's ambiguities in annotation order:
// critical, then knowledge, then non-critical.
func allAmbiguities(t *task) []taggedAmbiguity {
	var out []taggedAmbiguity
	if u := t.UserQueryAmbiguity; u != nil {
		for i, a := range u.Critical {
			out = append(out, taggedAmbiguity{a, corpus.Critical, fmt.Sprintf("user_query_ambiguity.critical_ambiguity[%d]", i)})
		}
	}
	for i, a := range t.KnowledgeAmbiguity {
		out = append(out, taggedAmbiguity{a, corpus.Knowledge, fmt.Sprintf("knowledge_ambiguity[%d]", i)})
	}
	if u := t.UserQueryAmbiguity; u != nil {
		for i, a := range u.NonCritical {
			out = append(out, taggedAmbiguity{a, corpus.NonCritical, fmt.Sprintf("user_query_ambiguity.non_critical_ambiguity[%d]", i)})
		}
	}
	return out
}

// record maps one servable Query task to a task record.
func (im *importer) record(t *task, d *database, catalog map[string]map[string]string) *corpus.Record {
	n := len(im.problems)
	bad := func(field, format string, args ...any) {
		im.report(Problem{File: t.file, Line: t.line, InstanceID: t.InstanceID, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	rec := &corpus.Record{
		ID:             t.InstanceID,
		DB:             t.SelectedDatabase,
		Request:        t.AmbUserQuery,
		Ambiguities:    []corpus.Ambiguity{},
		Interpretation: t.Query,
		Reference:      corpus.Reference{SQL: t.SolSQL, Tests: t.TestCases},
	}
	sqlRes := false
	for _, ta := range allAmbiguities(t) {
		a := corpus.Ambiguity{Term: ta.a.Term, Kind: ta.kind, SQLSnippet: ta.a.SQLSnippet}
		if strings.TrimSpace(a.Term) == "" {
			bad(ta.field+".term", "is required")
		}
		if ta.kind == corpus.Knowledge && !isNull(ta.a.DeletedKnowledge) {
			var id json.Number
			if err := json.Unmarshal(ta.a.DeletedKnowledge, &id); err != nil {
				var s string
				if err := json.Unmarshal(ta.a.DeletedKnowledge, &s); err != nil {
					bad(ta.field+".deleted_knowledge", "want a knowledge id (number or string), got %s", ta.a.DeletedKnowledge)
					continue
				}
				id = json.Number(s)
			}
			if !d.hasKnowledge(id.String()) {
				bad(ta.field+".deleted_knowledge", "%s is not an id of %s", id, d.kbFile)
			}
			a.KnowledgeID = id.String()
		} else if !isNull(ta.a.DeletedKnowledge) {
			bad(ta.field+".deleted_knowledge", "only knowledge ambiguities mask knowledge entries")
		}
		if catalog != nil {
			r, ok := catalog[t.InstanceID][a.Term]
			if !ok {
				bad(ta.field, "the response catalog %s has no resolution for term %q", im.opt.Responses, a.Term)
			}
			a.Resolution = r
		} else {
			if strings.TrimSpace(a.SQLSnippet) == "" {
				bad(ta.field+".sql_snippet", "is empty, and without a response catalog it is the resolution")
			}
			a.Resolution = a.SQLSnippet
			sqlRes = true
		}
		switch ta.kind {
		case corpus.Critical:
			im.sum.Critical++
		case corpus.Knowledge:
			im.sum.Knowledge++
		default:
			im.sum.NonCritical++
		}
		rec.Ambiguities = append(rec.Ambiguities, a)
	}
	if sqlRes {
		rec.ResolutionFormat = "sql"
		im.sum.SQLResolutions = append(im.sum.SQLResolutions, t.InstanceID)
	}
	if c := t.Conditions; c != nil {
		cmp := &corpus.Comparison{}
		if c.Order != nil && *c.Order {
			cmp.Order = "ordered"
		}
		if c.Decimal != nil {
			if k, _ := strconv.Atoi(c.Decimal.String()); k >= 0 {
				cmp.Decimals = &k
			}
		}
		if c.Distinct != nil && !*c.Distinct {
			yes := true
			cmp.StripDistinct = &yes
		}
		if *cmp != (corpus.Comparison{}) {
			rec.Reference.Comparison = cmp
		}
	}
	if !isNull(t.FollowUp) {
		rec.FollowUps = []json.RawMessage{t.raw["follow_up"]} // the input's bytes, verbatim
		im.sum.FollowUps++
	}
	if len(t.TestCases) > 0 {
		im.sum.OpaqueTests = append(im.sum.OpaqueTests, t.InstanceID)
	}
	notes := []string{"category=" + t.Category}
	if t.HighLevel != nil {
		notes = append(notes, fmt.Sprintf("high_level=%t", *t.HighLevel))
	}
	if !isNull(t.ExternalKnowledge) {
		notes = append(notes, "external_knowledge="+compact(t.ExternalKnowledge))
	}
	if len(t.CleanUpSQLs) > 0 {
		b, _ := json.Marshal([]string(t.CleanUpSQLs))
		notes = append(notes, "clean_up_sqls="+string(b))
	}
	rec.Source = &corpus.Source{Dataset: Dataset, ID: t.InstanceID, Notes: strings.Join(notes, "; ")}
	if len(im.problems) > n {
		return nil
	}
	return rec
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

// checkSQL runs the reference of a Query task on its database (it must
// succeed) and checks that every other statement of the task parses.
func (im *importer) checkSQL(ctx context.Context, t *task, d *database) {
	lim := sqlexec.DefaultLimits()
	bad := func(field string, err error) {
		im.report(Problem{File: t.file, Line: t.line, InstanceID: t.InstanceID, Field: field, Msg: err.Error()})
	}
	parses := func(field string, stmts []string) {
		for i, s := range stmts {
			if strings.TrimSpace(s) == "" {
				continue
			}
			_, err := d.eng.Query(ctx, s, lim)
			if err != nil && isParseError(err) {
				bad(fmt.Sprintf("%s[%d]", field, i), fmt.Errorf("SQL does not parse: %v", err))
			}
		}
	}
	if t.Category == "Query" && len(t.PreprocessSQL) == 0 {
		if _, err := d.eng.Query(ctx, strings.Join(t.SolSQL, ";\n"), lim); err != nil {
			bad("sol_sql", fmt.Errorf("the reference does not run on %s: %v", d.sqliteFile, err))
		}
	} else {
		parses("sol_sql", t.SolSQL)
	}
	parses("preprocess_sql", t.PreprocessSQL)
	parses("clean_up_sqls", t.CleanUpSQLs)
	if !isNull(t.FollowUp) {
		var fu followUp
		if strictDecode(t.FollowUp, &fu) == nil {
			parses("follow_up.sol_sql", fu.SolSQL)
		}
	}
}

// isParseError reports whether a statement failed in SQLite's parser (as
// opposed to a denial or a missing table, which a statement that needs an
// earlier phase's state may meet).
func isParseError(err error) bool {
	if sqlexec.KindOf(err) != sqlexec.KindSyntax {
		return false
	}
	m := err.Error()
	return strings.Contains(m, "syntax error") || strings.Contains(m, "incomplete input") ||
		strings.Contains(m, "unrecognized token") || strings.Contains(m, "no SQL statement")
}

// write writes the corpus through a corpuswrite.Writer (a temporary
// sibling of opt.Out), validates it, and moves it into place.
func (im *importer) write(ctx context.Context, records []*corpus.Record, served []*task, unserved []map[string]any, dbs map[string]*database, usedDB map[string]bool) (*Summary, error) {
	w, err := corpuswrite.New(im.opt.In, im.opt.Out, im.opt.Force)
	if err != nil {
		return nil, err
	}
	defer w.Discard()

	m := corpus.Manifest{
		Name:        im.opt.Name,
		Description: fmt.Sprintf("Imported from BIRD-Interact (%s): %d Query task(s).", filepath.Base(im.sum.TaskFile), len(records)),
		Records:     []string{RecordsFile},
		Defaults:    corpus.Defaults{Comparison: defaultComparison()},
	}
	ids := sortedKeys(usedDB)
	for _, id := range ids {
		d := dbs[id]
		if err := w.CopyFromInput(d.sqliteRel, id+".sqlite"); err != nil {
			return nil, err
		}
		m.Databases = append(m.Databases, corpus.Database{
			ID: id, Engine: "sqlite", Path: id + ".sqlite",
			Schema: d.schema, ColumnMeanings: d.columns, Knowledge: d.knowledge,
		})
	}
	im.sum.Databases = ids
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := w.WriteFile(corpus.ManifestFile, append(mb, '\n')); err != nil {
		return nil, err
	}
	if err := writeJSONL(w, RecordsFile, records); err != nil {
		return nil, err
	}
	if len(unserved) > 0 {
		if err := writeJSONL(w, UnservedFile, unserved); err != nil {
			return nil, err
		}
	}

	tmp := w.Dir()
	c, err := w.Validate(ctx, corpus.Options{})
	if err != nil {
		var ve *corpus.ValidationError
		if errors.As(err, &ve) {
			return nil, &Error{Problems: im.mapProblems(ve.Problems, tmp, served)}
		}
		return nil, fmt.Errorf("the imported corpus does not load: %v", err)
	}
	var probs []corpus.Problem
	im.sum.Validation = fmt.Sprintf("validated: corpus %q loads (%d tasks, %d AVTs, %d databases; every reference runs)",
		c.Name, len(c.Tasks), c.AVTCount(), len(c.DBs()))
	if im.opt.Check != nil {
		if probs, err = im.opt.Check(ctx, c); err != nil {
			c.Close()
			return nil, fmt.Errorf("checking the imported corpus: %w", err)
		}
		im.sum.Validation += " and passes its checks"
	}
	c.Close()
	if len(probs) > 0 {
		return nil, &Error{Problems: im.mapProblems(probs, tmp, served)}
	}
	if err := w.Commit(); err != nil {
		return nil, err
	}
	return &im.sum, nil
}

// defaultComparison is BIRD-Interact's default result comparison for Query
// tasks, as far as PROTOCOL §4 expresses it: comments stripped, and an
// empty result on either side fails. Row order and the other switches come
// from each task's conditions.
func defaultComparison() *corpus.Comparison {
	yes := true
	return &corpus.Comparison{Order: "bag", StripComments: &yes, EmptyFails: &yes}
}

// mapProblems turns the loader's problems about the written corpus into
// problems naming the input task.
func (im *importer) mapProblems(ps []corpus.Problem, tmp string, served []*task) []Problem {
	var out []Problem
	for _, p := range ps {
		q := Problem{File: "imported corpus", Field: p.Field, Msg: p.Msg}
		if strings.HasSuffix(p.File, "/"+RecordsFile) && p.Line >= 1 && p.Line <= len(served) {
			t := served[p.Line-1]
			q.File, q.Line, q.InstanceID = t.file, t.line, t.InstanceID
			q.Field = "record " + p.Field
		} else {
			q.Msg = strings.ReplaceAll(p.String(), tmp, "<out>")
			q.Field = ""
		}
		out = append(out, q)
	}
	return out
}

func writeJSONL[T any](w *corpuswrite.Writer, name string, vs []T) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			return err
		}
	}
	return w.WriteFile(name, buf.Bytes())
}

// database is one input database folder, read and checked.
type database struct {
	id         string
	sqliteFile string
	sqliteRel  string // sqliteFile relative to the input directory, '/'-separated
	kbFile     string
	eng        *sqlite.DB
	schema     string
	columns    map[string]string
	knowledge  []corpus.KnowledgeEntry
}

func (d *database) hasKnowledge(id string) bool {
	for _, k := range d.knowledge {
		if k.ID == id {
			return true
		}
	}
	return false
}

// readDatabases reads the folder of every database the tasks name.
func (im *importer) readDatabases(ctx context.Context, tasks []*task) map[string]*database {
	dbs := map[string]*database{}
	firstUse := map[string]*task{}
	var order []string
	for _, t := range tasks {
		if _, ok := firstUse[t.SelectedDatabase]; !ok {
			firstUse[t.SelectedDatabase] = t
			order = append(order, t.SelectedDatabase)
		}
	}
	for _, id := range order {
		t := firstUse[id]
		if d := im.readDatabase(id, t); d != nil {
			dbs[id] = d
		}
	}
	// Tasks whose database failed are not checked further.
	return dbs
}

func (im *importer) readDatabase(id string, t *task) *database {
	dir := filepath.Join(im.opt.In, id)
	n := len(im.problems)
	bad := func(file, format string, args ...any) {
		im.report(Problem{File: file, Msg: fmt.Sprintf(format, args...) + fmt.Sprintf(" (database %q of instance_id %s, %s:%d)", id, t.InstanceID, t.file, t.line)})
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		bad(dir, "missing database folder")
		return nil
	}
	d := &database{id: id, sqliteFile: filepath.Join(dir, id+".sqlite"), sqliteRel: id + "/" + id + ".sqlite", kbFile: filepath.Join(dir, id+"_kb.jsonl")}
	if _, err := os.Stat(d.sqliteFile); err != nil {
		if looksLikePostgres(dir, id) {
			bad(d.sqliteFile, "missing: this looks like the PostgreSQL release of BIRD-Interact (lite/full), which is not supported yet; only mini-interact (SQLite, <db>.sqlite per database folder) can be imported")
		} else {
			bad(d.sqliteFile, "missing SQLite database file")
		}
	} else if real, err := corpuswrite.ResolveInput(im.opt.In, d.sqliteRel); err != nil {
		bad(d.sqliteFile, "%v", err)
	} else if !isSQLite(real) {
		bad(d.sqliteFile, "is not a SQLite database file (only mini-interact's SQLite databases are supported; PostgreSQL comes later)")
	} else if eng, err := sqlite.Open(real, sqlite.Options{}); err != nil {
		bad(d.sqliteFile, "cannot open: %v", err)
	} else {
		d.eng = eng
	}

	// Schema text.
	schemaFile := filepath.Join(dir, id+"_schema.txt")
	if b, err := os.ReadFile(schemaFile); err != nil {
		bad(schemaFile, "missing schema file")
	} else if !utf8.Valid(b) {
		bad(schemaFile, "not valid UTF-8 text")
	} else {
		d.schema = strings.TrimSpace(string(b))
	}

	// Column meanings.
	colFile := filepath.Join(dir, id+"_column_meaning_base.json")
	if b, err := os.ReadFile(colFile); err != nil {
		bad(colFile, "missing column meanings file")
	} else if !utf8.Valid(b) {
		bad(colFile, "not valid UTF-8 text")
	} else {
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(b, &raw); err != nil {
			bad(colFile, "malformed JSON: %v", err)
		} else {
			d.columns = map[string]string{}
			for _, k := range sortedKeys(raw) {
				parts := strings.Split(k, "|")
				if len(parts) != 3 || parts[0] != id || parts[1] == "" || parts[2] == "" {
					bad(colFile, "key %q: want \"%s|table|column\"", k, id)
					continue
				}
				var s string
				if json.Unmarshal(raw[k], &s) != nil {
					s = compact(raw[k]) // structured meanings (JSON columns) are kept as JSON text
				}
				d.columns[parts[1]+"."+parts[2]] = s
			}
		}
	}

	// Knowledge base.
	lines, _ := readJSONL(d.kbFile, set("id", "knowledge", "description", "definition", "type", "children_knowledge"), im.report)
	seen := map[string]bool{}
	for _, l := range lines {
		b, _ := json.Marshal(l.obj)
		var e kbEntry
		if err := strictDecode(b, &e); err != nil {
			im.report(Problem{File: d.kbFile, Line: l.no, Msg: err.Error()})
			continue
		}
		kid := e.ID.String()
		text := strings.TrimSpace(strings.Join(nonEmpty(e.Description, e.Definition), " "))
		switch {
		case kid == "":
			im.report(Problem{File: d.kbFile, Line: l.no, Field: "id", Msg: "is required"})
		case seen[kid]:
			im.report(Problem{File: d.kbFile, Line: l.no, Field: "id", Msg: fmt.Sprintf("%s is used twice", kid)})
		case strings.TrimSpace(e.Knowledge) == "" || text == "":
			im.report(Problem{File: d.kbFile, Line: l.no, Msg: "knowledge and one of description/definition are required"})
		default:
			seen[kid] = true
			d.knowledge = append(d.knowledge, corpus.KnowledgeEntry{ID: kid, Name: e.Knowledge, Definition: text})
		}
	}
	if len(im.problems) > n {
		if d.eng != nil {
			d.eng.Close()
		}
		return nil
	}
	return d
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if strings.TrimSpace(s) != "" {
			out = append(out, strings.TrimSpace(s))
		}
	}
	return out
}

// looksLikePostgres reports a database folder of the PostgreSQL releases:
// the metadata files are there, but no SQLite file.
func looksLikePostgres(dir, id string) bool {
	for _, f := range []string{id + "_schema.txt", id + "_kb.jsonl", id + "_column_meaning_base.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return true
		}
	}
	return false
}

func isSQLite(file string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 16)
	if _, err := io.ReadFull(f, head); err != nil {
		return false
	}
	return string(head) == "SQLite format 3\x00"
}

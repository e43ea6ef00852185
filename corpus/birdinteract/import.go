// Package birdinteract imports tasks in the BIRD-Interact format into an
// avtgym corpus directory: mini-interact (SQLite) and the lite and full
// releases (PostgreSQL).
//
// The input directory holds one task file (JSONL, merged, or public with a
// ground-truth file beside it joined by instance_id) and one folder per
// database with <db>_kb.jsonl, <db>_column_meaning_base.json and
// <db>_schema.txt, plus the database itself: <db>/<db>.sqlite (SQLite), or
// the table dumps postgre_table_dumps/<db>_template/<table>.sql
// (PostgreSQL), which are copied into the corpus for the loader to build
// the database from. Query tasks become task records compared as
// BIRD-Interact's harness compares them; Management tasks on PostgreSQL are
// served and verified statefully (by their Python tests, on a private copy
// of the database); Management tasks on SQLite, whose tests cannot run
// there, are reported and written to unserved.jsonl, which the manifest does
// not list. Follow-ups are kept on their records and played by BIRD_C and
// BIRD_A. See docs/birdinteract.md for the field mapping.
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

	"avtgym/corpus"
	"avtgym/corpus/corpuswrite"
	"avtgym/engines"
	"avtgym/sqlexec"
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
	// Postgres is the admin URL of a PostgreSQL server
	// (postgres://user:password@host:port/dbname) on which the final check
	// may create databases. Writing a corpus needs no server, but the
	// import ends by loading the corpus (corpus.LoadDir), which builds each
	// PostgreSQL database from its dumps on that server: an input with
	// PostgreSQL databases (the lite and full releases) fails without it,
	// with a message naming --postgres, before anything is written.
	Postgres string
	// PyRunner runs the Python tests of the imported records (Management
	// tasks on PostgreSQL) in the final check; nil makes such records a
	// problem.
	PyRunner sqlexec.PyRunner
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
	// Unserved are the tasks not served (Management tasks on SQLite), in
	// input order.
	Unserved []Unserved
	// Management are the served records of category Management, verified
	// statefully (on a private copy of the database, by their tests).
	Management []string
	// SQLResolutions are the served records whose resolutions are SQL
	// snippets (resolution_format "sql"), because no catalog was given.
	SQLResolutions []string
	// Critical, Knowledge and NonCritical count the served ambiguities.
	Critical, Knowledge, NonCritical int
	// FollowUps counts served records carrying a follow-up (played by the
	// bird-c and bird-a protocols).
	FollowUps int
	// PythonTests are served records verified by their Python test_cases
	// (on PostgreSQL, by the test workers).
	PythonTests []string
	// OpaqueTests are served SQLite records whose Python test_cases cannot
	// run (Python tests run on PostgreSQL only): they are kept in the
	// record's source notes, and the default comparison is used.
	OpaqueTests []string
	// Databases are the database ids written.
	Databases []string
	// Engines maps each written database id to its engine ("sqlite" or
	// "postgres").
	Engines map[string]string
	// UnusedGroundTruth are ground-truth ids with no task line (ignored,
	// as the release's merge script ignores them).
	UnusedGroundTruth []string
	// Ignored locates the input lines that were read and ignored (the
	// ground-truth lines of UnusedGroundTruth), for the report.
	Ignored []Problem
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
	fmt.Fprintf(w, "  tasks read: %d; served: %d (Query %d, Management %d); not served: %d\n",
		s.Tasks, len(s.Served), len(s.Served)-len(s.Management), len(s.Management), len(s.Unserved))
	fmt.Fprintf(w, "  served: %s\n", strings.Join(s.Served, ", "))
	if len(s.PythonTests) > 0 {
		fmt.Fprintf(w, "  verified by their Python test_cases (on a private copy of the database): %s\n", strings.Join(s.PythonTests, ", "))
	}
	if len(s.Unserved) > 0 {
		fmt.Fprintf(w, "  NOT SERVED (%d, written to %s, not listed in the manifest):\n", len(s.Unserved), UnservedFile)
		for _, u := range s.Unserved {
			fmt.Fprintf(w, "    %s (%s): %s\n", u.InstanceID, u.Category, u.Reason)
		}
	}
	fmt.Fprintf(w, "  ambiguities: %d critical, %d knowledge (masked KB entries), %d non_critical (not counted)\n", s.Critical, s.Knowledge, s.NonCritical)
	fmt.Fprintf(w, "  follow-ups (played by --protocol bird-c and bird-a): %d\n", s.FollowUps)
	if len(s.OpaqueTests) > 0 {
		fmt.Fprintf(w, "  SQLite records with Python test_cases (they run on PostgreSQL only; kept in the source notes, default comparison used): %s\n", strings.Join(s.OpaqueTests, ", "))
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
		for _, p := range s.Ignored {
			fmt.Fprintf(w, "    %s\n", p)
		}
	}
	dbs := make([]string, len(s.Databases))
	for i, id := range s.Databases {
		dbs[i] = id
		if e := s.Engines[id]; e != "" {
			dbs[i] += " (" + e + ")"
		}
	}
	fmt.Fprintf(w, "  databases: %s\n", strings.Join(dbs, ", "))
	fmt.Fprintf(w, "  %s\n", s.Validation)
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

// importer carries the state of one import.
type importer struct {
	opt      Options
	problems []Problem
	sum      Summary
}

// plan is what an import writes, once the input has been read and checked.
type plan struct {
	records  []*corpus.Record
	served   []*task // served[i] became records[i]
	unserved []map[string]any
	dbs      map[string]*database
	usedDB   map[string]bool
}

// postgres returns the ids of the plan's PostgreSQL databases, sorted.
func (p *plan) postgres() []string {
	var ids []string
	for _, id := range sortedKeys(p.usedDB) {
		if p.dbs[id].engine == enginePostgres {
			ids = append(ids, id)
		}
	}
	return ids
}

func (im *importer) report(p Problem) { im.problems = append(im.problems, p) }

func (im *importer) fail() error {
	if len(im.problems) == 0 {
		return nil
	}
	return &Error{Importer: "birdinteract", Problems: im.problems}
}

// Import reads the BIRD-Interact input in opt.In, writes a corpus to
// opt.Out and validates it with corpus.LoadDir and the scripted-probe check.
// On any problem it returns an *Error (or another error for I/O failures)
// and leaves opt.Out as it was.
func Import(ctx context.Context, opt Options) (*Summary, error) {
	im, p, err := prepare(ctx, opt)
	if err != nil {
		return nil, err
	}
	defer p.close()
	if pg := p.postgres(); len(pg) > 0 && opt.Postgres == "" {
		return nil, fmt.Errorf("database(s) %s are PostgreSQL (BIRD-Interact lite/full table dumps): writing the corpus needs no server, "+
			"but the import checks it by loading it, which builds these databases on a PostgreSQL server; "+
			"pass --postgres URL (the admin URL of a server avtgym may create databases on); nothing was written to %s",
			strings.Join(pg, ", "), opt.Out)
	}
	return im.write(ctx, p)
}

// close releases the plan's open databases.
func (p *plan) close() {
	for _, d := range p.dbs {
		if d.eng != nil {
			d.eng.Close()
		}
	}
}

// prepare checks the options, reads and checks the whole input and maps
// it to records; it writes nothing.
func prepare(ctx context.Context, opt Options) (*importer, *plan, error) {
	if opt.Name == "" {
		opt.Name = "birdinteract"
	}
	if !idPattern.MatchString(opt.Name) {
		return nil, nil, fmt.Errorf("corpus name %q must be letters, digits, '.', '_', ':' or '-'", opt.Name)
	}
	if opt.In == "" || opt.Out == "" {
		return nil, nil, errors.New("both --in and --out are required")
	}
	if err := corpuswrite.Check(opt.In, opt.Out, opt.Force); err != nil {
		return nil, nil, err
	}
	im := &importer{opt: opt}
	im.sum.Out = opt.Out

	taskFile, gtFile, err := findTaskFiles(opt.In, opt.Responses)
	if err != nil {
		return nil, nil, err
	}
	im.sum.TaskFile, im.sum.GroundTruthFile = taskFile, gtFile
	tasks := im.readTasks(taskFile, gtFile)
	if err := im.fail(); err != nil {
		return nil, nil, err
	}
	im.sum.Tasks = len(tasks)

	var catalog map[string]map[string]string
	if opt.Responses != "" {
		im.sum.Responses = opt.Responses
		catalog = im.readCatalog(opt.Responses, tasks)
	}
	p := &plan{usedDB: map[string]bool{}}
	p.dbs = im.readDatabases(ctx, tasks)
	if err := im.fail(); err != nil {
		p.close()
		return nil, nil, err
	}

	for _, t := range tasks {
		d := p.dbs[t.SelectedDatabase]
		im.checkSQL(ctx, t, d)
		reason := ""
		if t.Category == corpus.CategoryManagement && d.engine != enginePostgres {
			reason = "Management task on SQLite: BIRD-Interact verifies it with Python tests, which run on PostgreSQL only (a SQLite Management record needs checks: test queries)"
		}
		if reason != "" {
			im.sum.Unserved = append(im.sum.Unserved, Unserved{InstanceID: t.InstanceID, Category: t.Category, Reason: reason})
			p.unserved = append(p.unserved, map[string]any{"instance_id": t.InstanceID, "category": t.Category, "reason": reason, "task": t.raw})
			continue
		}
		rec := im.record(t, d, catalog)
		if rec == nil {
			continue
		}
		p.records = append(p.records, rec)
		p.served = append(p.served, t)
		p.usedDB[t.SelectedDatabase] = true
	}
	if err := im.fail(); err != nil {
		p.close()
		return nil, nil, err
	}
	if len(p.records) == 0 {
		p.close()
		return nil, nil, fmt.Errorf("%s: no servable Query task (%d task(s) read, none served)", taskFile, len(tasks))
	}
	for _, t := range p.served {
		im.sum.Served = append(im.sum.Served, t.InstanceID)
	}
	return im, p, nil
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
	lines, ok := im.readInputJSONL(taskFile, taskFields)
	gt := map[string]jsonLine{}
	var gtOrder []string
	if gtFile != "" {
		glines, gok := im.readInputJSONL(gtFile, taskFields)
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
			im.sum.Ignored = append(im.sum.Ignored, Problem{File: gtFile, Line: gt[id].no, InstanceID: id,
				Msg: fmt.Sprintf("no task in %s has this instance_id: the line is ignored", taskFile)})
		}
	}
	return tasks
}

// readInputJSONL reads a JSONL file of the input directory (a top-level
// file, or one inside a database folder), which must lie inside it,
// symbolic links included.
func (im *importer) readInputJSONL(file string, allowed map[string]bool) ([]jsonLine, bool) {
	real, err := im.resolve(file)
	if err != nil {
		im.report(Problem{File: file, Msg: "cannot read: " + err.Error()})
		return nil, false
	}
	return readJSONLFrom(file, real, allowed, im.report)
}

// resolve returns the real path of file, a path under the input directory
// as the importer built it (opt.In joined with a relative name), after
// corpuswrite.ResolveInput checked that it lies inside the input directory.
func (im *importer) resolve(file string) (string, error) {
	rel, err := filepath.Rel(im.opt.In, file)
	if err != nil {
		return "", err
	}
	return corpuswrite.ResolveInput(im.opt.In, filepath.ToSlash(rel))
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
		Reference:      corpus.Reference{SQL: t.SolSQL, Setup: t.PreprocessSQL, Cleanup: t.CleanUpSQLs},
	}
	if t.Category == corpus.CategoryManagement {
		rec.Category = corpus.CategoryManagement
		im.sum.Management = append(im.sum.Management, t.InstanceID)
	}
	if len(t.TestCases) > 0 && d.engine == enginePostgres {
		rec.Reference.Tests = t.TestCases
		im.sum.PythonTests = append(im.sum.PythonTests, t.InstanceID)
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
	rec.Reference.Comparison = comparison(t.Conditions, d.engine)
	if !isNull(t.FollowUp) {
		rec.FollowUp = im.followUp(t, d)
		im.sum.FollowUps++
	}
	notes := []string{"category=" + t.Category}
	if len(t.TestCases) > 0 && d.engine != enginePostgres {
		im.sum.OpaqueTests = append(im.sum.OpaqueTests, t.InstanceID)
		b, _ := json.Marshal(t.TestCases)
		notes = append(notes, "test_cases="+string(b))
	}
	if t.HighLevel != nil {
		notes = append(notes, fmt.Sprintf("high_level=%t", *t.HighLevel))
	}
	if !isNull(t.ExternalKnowledge) {
		notes = append(notes, "external_knowledge="+compact(t.ExternalKnowledge))
	}
	rec.Source = &corpus.Source{Dataset: Dataset, ID: t.InstanceID, Notes: strings.Join(notes, "; ")}
	if len(im.problems) > n {
		return nil
	}
	return rec
}

// followUp maps the task's follow_up (decoded by decodeTask) to the
// record's FollowUp, reporting what is missing.
func (im *importer) followUp(t *task, d *database) *corpus.FollowUp {
	bad := func(field, format string, args ...any) {
		im.report(Problem{File: t.file, Line: t.line, InstanceID: t.InstanceID, Field: "follow_up." + field, Msg: fmt.Sprintf(format, args...)})
	}
	var fu followUp
	if err := strictDecode(t.FollowUp, &fu); err != nil {
		bad("", "%v", err) // decodeTask reported it already; not reached
		return nil
	}
	out := &corpus.FollowUp{
		Request:   fu.Query,
		Reference: corpus.Reference{SQL: fu.SolSQL, Tests: fu.TestCases},
		Category:  fu.Category,
		Type:      fu.Type,
	}
	if strings.TrimSpace(fu.Query) == "" {
		bad("query", "is required")
	}
	if len(fu.SolSQL) == 0 {
		bad("sol_sql", "missing or empty: the ground truth's follow_up carries it")
	}
	for i, s := range fu.SolSQL {
		if strings.TrimSpace(s) == "" {
			bad(fmt.Sprintf("sol_sql[%d]", i), "is empty")
		}
	}
	switch fu.Category {
	case "Query":
		out.Reference.Comparison = comparison(fu.Conditions, d.engine)
	case "Management": // verified by its tests
	default:
		bad("category", "%q: want \"Query\" or \"Management\"", fu.Category)
	}
	if !isNull(fu.ExternalKnowledge) {
		var ids []json.RawMessage
		if err := json.Unmarshal(fu.ExternalKnowledge, &ids); err != nil {
			bad("external_knowledge", "want an array of knowledge ids, got %s", compact(fu.ExternalKnowledge))
		}
		for _, raw := range ids {
			var n json.Number
			var s string
			switch {
			case json.Unmarshal(raw, &n) == nil:
				out.Knowledge = append(out.Knowledge, n.String())
			case json.Unmarshal(raw, &s) == nil:
				out.Knowledge = append(out.Knowledge, s)
			default:
				bad("external_knowledge", "want knowledge ids (numbers or strings), got %s", compact(raw))
			}
		}
	}
	return out
}

// Engines of the databases.
const (
	engineSQLite   = "sqlite"
	enginePostgres = "postgres"
)

// defaultComparison is the manifest's defaults.comparison: BIRD-Interact's
// default test for Query tasks (test_case_default in its harness, the same
// for SQLite and PostgreSQL): comments, DISTINCT and ROUND(x, n) removed
// from both sides before they run, numbers rounded to 2 places whatever
// conditions.decimal says, rows compared as sets, and an empty result on
// either side fails. comparison adds what depends on the task.
func defaultComparison() *corpus.Comparison {
	yes, two := true, 2
	return &corpus.Comparison{Order: "set", Decimals: &two, StripComments: &yes, StripDistinct: &yes, StripRound: &yes, EmptyFails: &yes, Harness: "bird-interact"}
}

// comparison is what a task (or follow-up) of a database of the given
// engine adds to defaultComparison: "order": "ordered" when
// conditions.order is true (the harness compares lists then);
// "strip_distinct": false when conditions.distinct is true (DISTINCT is
// kept where the task says it matters: a deliberate choice, see
// docs/birdinteract.md); and for PostgreSQL "date_only" and
// "canonical_json", because its driver returns date, timestamp and JSON
// values that the harness normalises to YYYY-MM-DD and sorted-key JSON,
// where SQLite returns text that it compares verbatim. nil when it adds
// nothing.
func comparison(c *conditions, engine string) *corpus.Comparison {
	cmp := &corpus.Comparison{}
	no, yes := false, true
	if c != nil && c.Order != nil && *c.Order {
		cmp.Order = "ordered"
	}
	if c != nil && c.Distinct != nil && *c.Distinct {
		cmp.StripDistinct = &no
	}
	if engine == enginePostgres {
		cmp.DateOnly, cmp.CanonicalJSON = &yes, &yes
	}
	if *cmp == (corpus.Comparison{}) {
		return nil
	}
	return cmp
}

func compact(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

// checkSQL runs the reference of a Query task on its SQLite database (it
// must succeed) and checks that every other statement of the task parses.
// PostgreSQL tasks are not checked here.
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
	if d.eng == nil {
		// PostgreSQL: no server while the input is read; the final check
		// runs every served reference when it loads the corpus.
		return
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
func (im *importer) write(ctx context.Context, p *plan) (*Summary, error) {
	w, err := corpuswrite.New(im.opt.In, im.opt.Out, im.opt.Force)
	if err != nil {
		return nil, err
	}
	defer w.Discard()
	if err := im.writeFiles(w, p); err != nil {
		return nil, err
	}

	tmp := w.Dir()
	// PostgreSQL databases load into template databases named by corpus,
	// database and content, so serving the moved corpus reuses them.
	c, err := w.Validate(ctx, corpus.Options{Engines: engines.Opener{PostgresURL: im.opt.Postgres}, PyRunner: im.opt.PyRunner})
	if err != nil {
		var ve *corpus.ValidationError
		if errors.As(err, &ve) {
			return nil, &Error{Importer: "birdinteract", Problems: im.mapProblems(ve.Problems, tmp, p.served)}
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
		return nil, &Error{Importer: "birdinteract", Problems: im.mapProblems(probs, tmp, p.served)}
	}
	if err := w.Commit(); err != nil {
		return nil, err
	}
	return &im.sum, nil
}

// writeFiles writes the corpus files into w: the databases (a SQLite file
// copied to <db>.sqlite; PostgreSQL table dumps copied to dbs/<db>/), the
// manifest, the records and the unserved tasks.
func (im *importer) writeFiles(w *corpuswrite.Writer, p *plan) error {
	m := corpus.Manifest{
		Name:        im.opt.Name,
		Description: fmt.Sprintf("Imported from BIRD-Interact (%s): %d Query task(s).", filepath.Base(im.sum.TaskFile), len(p.records)),
		Records:     []string{RecordsFile},
		Defaults:    corpus.Defaults{Comparison: defaultComparison()},
	}
	ids := sortedKeys(p.usedDB)
	im.sum.Engines = map[string]string{}
	for _, id := range ids {
		d := p.dbs[id]
		spec := corpus.Database{ID: id, Engine: d.engine, Schema: d.schema, ColumnMeanings: d.columns, Knowledge: d.knowledge}
		switch d.engine {
		case enginePostgres:
			spec.Dumps = CorpusDumpsDir + "/" + id
			for _, name := range d.dumps {
				if err := w.CopyFromInput(d.dumpsRel+"/"+name, spec.Dumps+"/"+name); err != nil {
					return err
				}
			}
		default:
			spec.Path = id + ".sqlite"
			if err := w.CopyFromInput(d.sqliteRel, spec.Path); err != nil {
				return err
			}
		}
		m.Databases = append(m.Databases, spec)
		im.sum.Engines[id] = d.engine
	}
	im.sum.Databases = ids
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := w.WriteFile(corpus.ManifestFile, append(mb, '\n')); err != nil {
		return err
	}
	if err := writeJSONL(w, RecordsFile, p.records); err != nil {
		return err
	}
	if len(p.unserved) > 0 {
		if err := writeJSONL(w, UnservedFile, p.unserved); err != nil {
			return err
		}
	}
	return nil
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

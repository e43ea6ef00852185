// Package tide imports TIDE-Bench samples (chain ambiguity and intent
// drift; PROTOCOL.md §9) in the format that
// ../shared/data/tide-format/README.md defines into an avtgym corpus
// directory: one task record per sample, with the sample's two clarification
// layers as ambiguities L1 and L2 (L2 depends_on L1), its drift turn as the
// record's drift, its anchor as the record's cluster and every field that
// has no place in a record kept verbatim in source.meta. Decoding is strict:
// an unknown, missing, mistyped or inconsistent field is a problem naming
// the file, the line and the field, and nothing is written. See
// docs/tide.md.
package tide

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"avtgym/corpus"
	"avtgym/corpus/corpuswrite"
	"avtgym/engines"
	"avtgym/sqlexec"
	"avtgym/sqlexec/sqlite"
)

// Dataset is the Source.Dataset of imported records.
const Dataset = "tide"

// DefaultName is the name of the imported corpus unless Options.Name says
// otherwise.
const DefaultName = "tide"

// SamplesFile is the samples file read from the input directory, and
// RecordsFile the records file written to the corpus directory.
const (
	SamplesFile = "samples.jsonl"
	RecordsFile = "records.jsonl"
)

// DBsDir is the folder of the corpus directory the databases are copied
// to, each as DBsDir/<db_id>/<db_id>.sqlite (the input's layout).
const DBsDir = "dbs"

// Comparison is the manifest's default comparison policy: TIDE's EX is
// "result sets equal modulo row order" (the BIRD evaluation it builds on
// compares set(rows)), so duplicates and row order are ignored.
const Comparison = "set"

// maxLine bounds one line of the samples file.
const maxLine = 16 << 20

// Options configure Import.
type Options struct {
	// In is the input directory holding samples.jsonl.
	In string
	// DBs is the databases directory: <db_id>/<db_id>.sqlite for each
	// db_id (BIRD's and Spider's layout).
	DBs string
	// Out is the corpus directory to write. It must not exist or be
	// empty, unless Force is set, and it must not be, lie inside or
	// contain In or DBs.
	Out string
	// Force replaces a non-empty Out (only once the import has succeeded).
	Force bool
	// Name is the corpus name; empty means DefaultName.
	Name string
	// Limits bound each query of the final check; zero means
	// sqlexec.DefaultLimits().
	Limits sqlexec.Limits
	// Progress, when set, is told about the import's stages: the samples
	// decoded and checked (stage "samples"), then the written records
	// loaded, their references and post-drift references run (stage
	// "records"), each with the number done and the total.
	Progress func(stage string, done, total int)
	// Check, when set, is run on the written corpus once it loads and
	// before it is committed; its problems fail the import (the command
	// passes the audit's oracle probes and its chain_drift check here).
	// Problems on a line of the records file are reported on the sample's
	// line.
	Check func(context.Context, *corpus.Corpus) ([]corpus.Problem, error)
}

// Problem is one problem of the input (corpuswrite.Problem): File is
// samples.jsonl, or "imported corpus" for a problem of the written corpus
// that names no sample; Field is the sample's field at fault (or, prefixed
// "record ", the written record's).
type Problem = corpuswrite.Problem

// Error is a failed import: every problem found, in input order.
type Error = corpuswrite.ImportError

// Summary describes a finished import.
type Summary struct {
	// Out is the corpus directory written and Name the corpus name.
	Out, Name string
	// SamplesFile is the samples file read.
	SamplesFile string
	// Samples is the number of samples read (one record each) and Anchors
	// the number of distinct anchors (clusters).
	Samples, Anchors int
	// ByType counts the samples by sample type; BySubtype the drift
	// samples by declared drift subtype ("projection/aspect_change" for a
	// projection drift with its intent subtype).
	ByType, BySubtype map[string]int
	// Databases are the database ids copied, sorted.
	Databases []string
	// Validation is the line of the final check.
	Validation string
}

// Write prints the summary for people.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "tide import: %s\n", s.Out)
	fmt.Fprintf(w, "  input: %s\n", s.SamplesFile)
	fmt.Fprintf(w, "  samples: %d (%s) from %d anchor(s); one record each\n", s.Samples, counts(s.ByType, sampleTypes), s.Anchors)
	if len(s.BySubtype) > 0 {
		fmt.Fprintf(w, "  drift subtypes: %s\n", counts(s.BySubtype, nil))
	}
	fmt.Fprintf(w, "  databases: %s\n", strings.Join(s.Databases, ", "))
	fmt.Fprintf(w, "  comparison: order %q (TIDE's EX: result sets equal modulo row order)\n", Comparison)
	fmt.Fprintf(w, "  %s\n", s.Validation)
}

// counts renders a count map as "k1 n1, k2 n2", keys in the given order
// first, then sorted.
func counts(m map[string]int, order []string) string {
	var keys []string
	seen := map[string]bool{}
	for _, k := range order {
		if m[k] > 0 {
			keys = append(keys, k)
			seen[k] = true
		}
	}
	var rest []string
	for k := range m {
		if !seen[k] {
			rest = append(rest, k)
		}
	}
	sort.Strings(rest)
	var parts []string
	for _, k := range append(keys, rest...) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// Import reads opt.In/samples.jsonl, checks every sample strictly, and
// writes the corpus to opt.Out through package corpuswrite (a temporary
// directory beside Out, loaded with corpus.LoadDir and opt.Check, then
// renamed into place): only the databases the samples use are copied. On
// any problem of the input it returns an *Error and writes nothing.
func Import(ctx context.Context, opt Options) (*Summary, error) {
	if opt.Name == "" {
		opt.Name = DefaultName
	}
	if !corpus.ValidID(opt.Name) {
		return nil, fmt.Errorf("tide: corpus name %q must be letters, digits, '.', '_', ':' or '-'", opt.Name)
	}
	if opt.Limits == (sqlexec.Limits{}) {
		opt.Limits = sqlexec.DefaultLimits()
	}
	if opt.In == "" || opt.DBs == "" || opt.Out == "" {
		return nil, errors.New("tide: --in, --dbs and --out are required")
	}
	if err := corpuswrite.Check(opt.In, opt.Out, opt.Force); err != nil {
		return nil, fmt.Errorf("tide: %w", err)
	}
	if err := corpuswrite.Check(opt.DBs, opt.Out, opt.Force); err != nil {
		return nil, fmt.Errorf("tide: --dbs: %w", err)
	}
	file := filepath.Join(opt.In, SamplesFile)
	real, err := corpuswrite.ResolveInput(opt.In, SamplesFile)
	if err != nil {
		return nil, fmt.Errorf("tide: %s: %w", opt.In, err)
	}
	im := &importer{opt: opt, file: file}
	samples, err := im.read(real)
	if err != nil {
		return nil, err
	}
	if len(samples) == 0 && len(im.problems) == 0 {
		return nil, fmt.Errorf("tide: %s holds no sample", file)
	}
	im.checkAnchors(samples)
	dbs := im.checkDatabases(ctx, samples)
	im.checkTies(ctx, samples, dbs)
	im.checkTies(ctx, samples, dbs)
	if err := im.fail(); err != nil {
		return nil, err
	}
	sum := &Summary{Out: opt.Out, Name: opt.Name, SamplesFile: file, Samples: len(samples),
		ByType: map[string]int{}, BySubtype: map[string]int{}}
	anchors := map[string]bool{}
	records := make([]*corpus.Record, len(samples))
	for i, s := range samples {
		records[i] = s.record()
		anchors[s.str["anchor_id"]] = true
		sum.ByType[s.sampleType]++
		if s.hasDrift() {
			st := s.str["drift_subtype"]
			if in := s.str["intent_subtype"]; in != "" {
				st += "/" + in
			}
			sum.BySubtype[st]++
		}
	}
	sum.Anchors = len(anchors)
	for id := range dbs {
		sum.Databases = append(sum.Databases, id)
	}
	sort.Strings(sum.Databases)
	if err := im.write(ctx, sum, samples, records); err != nil {
		return nil, err
	}
	return sum, nil
}

// importer carries the state of one import.
type importer struct {
	opt      Options
	file     string // the samples file, as problems name it
	problems []Problem
}

func (im *importer) report(line int, id, field, format string, args ...any) {
	im.problems = append(im.problems, Problem{File: im.file, Line: line, InstanceID: id, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (im *importer) fail() error {
	if len(im.problems) == 0 {
		return nil
	}
	sort.SliceStable(im.problems, func(i, j int) bool { return im.problems[i].Line < im.problems[j].Line })
	return &Error{Importer: "tide", Problems: im.problems}
}

// read decodes every line of the samples file (blank lines are skipped).
func (im *importer) read(real string) ([]*sample, error) {
	f, err := os.Open(real)
	if err != nil {
		return nil, fmt.Errorf("tide: %s: %w", im.file, err)
	}
	defer f.Close()
	var lines [][]byte
	var nos []int
	r := bufio.NewReader(f)
	for no := 1; ; no++ {
		b, err := r.ReadBytes('\n')
		if len(b) > maxLine {
			return nil, fmt.Errorf("tide: %s:%d: the line is longer than %d bytes", im.file, no, maxLine)
		}
		if t := bytes.TrimSpace(b); len(t) > 0 {
			lines = append(lines, t)
			nos = append(nos, no)
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tide: %s: %w", im.file, err)
		}
	}
	var out []*sample
	for i, b := range lines {
		if s := im.decode(b, nos[i]); s != nil {
			out = append(out, s)
		}
		if im.opt.Progress != nil {
			im.opt.Progress("samples", i+1, len(lines))
		}
	}
	return out, nil
}

// checkDatabases checks that each database the samples name is a SQLite
// file <db_id>/<db_id>.sqlite inside opt.DBs (symbolic links included)
// and returns their input paths relative to opt.DBs, by id.
func (im *importer) checkDatabases(ctx context.Context, samples []*sample) map[string]string {
	dbs := map[string]string{}
	bad := map[string]bool{}
	for _, s := range samples {
		id := s.str["db_id"]
		if _, ok := dbs[id]; ok || bad[id] {
			continue
		}
		rel := path.Join(id, id+".sqlite")
		real, err := corpuswrite.ResolveInput(im.opt.DBs, rel)
		if err == nil {
			err = probeDB(ctx, real, im.opt.Limits)
		}
		if err != nil {
			im.report(s.line, s.str["instance_id"], "db_id", "database %q: want the SQLite file %s under --dbs %s: %v", id, rel, im.opt.DBs, err)
			bad[id] = true
			continue
		}
		dbs[id] = rel
	}
	return dbs
}

// probeDB opens a SQLite file and reads its schema table.
func probeDB(ctx context.Context, p string, lim sqlexec.Limits) error {
	db, err := sqlite.Open(p, sqlite.Options{MaxOpenConns: 1})
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.Query(ctx, "SELECT count(*) FROM sqlite_master", lim)
	return err
}

// write writes the corpus through a corpuswrite.Writer on opt.DBs (the
// databases are its only input files; the records are written from
// memory), validates it and commits it.
func (im *importer) write(ctx context.Context, sum *Summary, samples []*sample, records []*corpus.Record) error {
	w, err := corpuswrite.New(im.opt.DBs, im.opt.Out, im.opt.Force)
	if err != nil {
		return fmt.Errorf("tide: %w", err)
	}
	defer w.Discard()
	m := corpus.Manifest{
		Name: im.opt.Name,
		Description: fmt.Sprintf("TIDE-Bench samples (chain ambiguity and intent drift), %d sample(s) from %d anchor(s). Imported by avtgym corpus import tide.",
			sum.Samples, sum.Anchors),
		Records:  []string{RecordsFile},
		Defaults: corpus.Defaults{Comparison: &corpus.Comparison{Order: Comparison}},
	}
	for _, id := range sum.Databases {
		src := path.Join(id, id+".sqlite")
		dst := path.Join(DBsDir, src)
		if err := w.CopyFromInput(src, dst); err != nil {
			return fmt.Errorf("tide: copying database %s: %w", id, err)
		}
		m.Databases = append(m.Databases, corpus.Database{ID: id, Engine: corpus.EngineSQLite, Path: dst})
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := w.WriteFile(corpus.ManifestFile, append(mb, '\n')); err != nil {
		return fmt.Errorf("tide: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for _, r := range records {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	if err := w.WriteFile(RecordsFile, buf.Bytes()); err != nil {
		return fmt.Errorf("tide: %w", err)
	}
	lopt := corpus.Options{Engines: engines.Opener{}, Limits: im.opt.Limits}
	if im.opt.Progress != nil {
		lopt.Progress = func(done, total int) { im.opt.Progress("records", done, total) }
	}
	c, err := w.Validate(ctx, lopt)
	if err != nil {
		var ve *corpus.ValidationError
		if errors.As(err, &ve) {
			return &Error{Importer: "tide", Problems: im.mapProblems(ve.Problems, w.Dir(), samples)}
		}
		return fmt.Errorf("tide: loading the imported corpus: %w", err)
	}
	sum.Validation = fmt.Sprintf("the corpus loads: %d record(s), every reference and post-drift reference runs", len(c.Tasks))
	var probs []corpus.Problem
	if im.opt.Check != nil {
		probs, err = im.opt.Check(ctx, c)
		if err != nil {
			c.Close()
			return fmt.Errorf("tide: checking the imported corpus: %w", err)
		}
		sum.Validation += ", and it passes its checks"
	}
	c.Close()
	if len(probs) > 0 {
		return &Error{Importer: "tide", Problems: im.mapProblems(probs, w.Dir(), samples)}
	}
	if err := w.Commit(); err != nil {
		return fmt.Errorf("tide: %w", err)
	}
	return nil
}

// mapProblems turns problems of the written corpus into problems of the
// samples file: a problem on line n of the records file is one of the
// n-th sample (records are written one per sample, in input order), with
// its record field mapped back to the sample's field where one matches.
// A check's problem (field: the check's name) whose message starts with a
// record field ("ambiguities[0].alternative_sql: …") is reported under
// the sample's field, the check named in the message.
func (im *importer) mapProblems(ps []corpus.Problem, tmp string, samples []*sample) []Problem {
	var out []Problem
	for _, p := range ps {
		msg := strings.ReplaceAll(p.Msg, tmp, "<out>")
		if !strings.HasSuffix(p.File, "/"+RecordsFile) || p.Line < 1 || p.Line > len(samples) {
			out = append(out, Problem{File: "imported corpus", Msg: strings.ReplaceAll(p.String(), tmp, "<out>")})
			continue
		}
		s := samples[p.Line-1]
		field, ok := sampleField(p.Field)
		if !ok {
			if f, rest, cut := strings.Cut(msg, ": "); cut {
				if sf, ok := sampleField(f); ok {
					field, msg = sf, p.Field+": "+rest
				}
			}
		}
		out = append(out, Problem{File: im.file, Line: s.line, InstanceID: s.str["instance_id"], Field: field, Msg: msg})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Line < out[j].Line })
	return out
}

// recordFields maps the fields of a written record to the sample fields
// they come from.
var recordFields = map[string]string{
	"id": "instance_id", "avt_id": "instance_id", "cluster": "anchor_id", "db": "db_id",
	"request": "initial_question", "evidence": "evidence", "sample_type": "sample_type",
	"reference.sql": "anchor_sql", "drift.reference.sql": "post_drift_sql", "drift.utterance": "drift_utterance",
	"drift.subtype": "drift_subtype", "drift.intent_subtype": "intent_subtype",
}

// layerFields maps the fields of an ambiguity to the suffix of the
// sample's L1_/L2_ fields ("alt_sql": l1_alt_sql, l2_alt_sql).
var layerFields = map[string]string{
	"term": "term", "resolution": "user_answer_utterance", "question": "question", "options": "options",
	"chosen": "chosen", "alternative_sql": "alt_sql",
}

// sampleField names the sample field a record field comes from
// (ambiguities[0] is L1, ambiguities[1] L2); ok is false when none does,
// and the field is then returned as is.
func sampleField(f string) (string, bool) {
	if s, ok := recordFields[f]; ok {
		return s, true
	}
	for i, l := range []string{"L1", "L2"} {
		rest, ok := strings.CutPrefix(f, fmt.Sprintf("ambiguities[%d].", i))
		if !ok {
			continue
		}
		switch s, ok := layerFields[rest]; {
		case rest == "depends_on":
			return "L1_term", true
		case s == "alt_sql":
			return strings.ToLower(l) + "_alt_sql", true
		case ok:
			return l + "_" + s, true
		}
	}
	return f, false
}

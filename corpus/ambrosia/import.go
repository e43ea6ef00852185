// Package ambrosia imports the AMBROSIA benchmark (Saparina & Lapata,
// NeurIPS 2024; any split in the tasks_NAME.jsonl format, see
// ../shared/data/README.md) into an
// avtgym corpus directory: one AVT per ambiguous question, with one critical
// ambiguity whose term DeriveTerm derives, and one task record per linked
// interpretation (resolution = the interpretation's question, reference =
// its SQL). An AVT is imported iff every interpretation's reference runs on
// its database and the interpretations' results differ pairwise under the
// records' comparison (the default bag policy) and its interpretations'
// questions are not identical; every other ambiguous question is rejected
// with its reason and the benchmark's own usability flags. See
// docs/ambrosia.md.
package ambrosia

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"avtgym/corpus"
	"avtgym/corpus/corpuswrite"
	"avtgym/engines"
	"avtgym/sqlexec"
	"avtgym/sqlexec/sqlite"
)

// CorpusName is the name of the imported corpus.
const CorpusName = "ambrosia"

// Options configure Import.
type Options struct {
	// Force allows writing into a non-empty output directory, whose
	// content is then replaced.
	Force bool
	// Limits bound each reference query; zero means sqlexec.DefaultLimits().
	Limits sqlexec.Limits
	// Progress, when set, is called after each ambiguous question is
	// processed with the number processed and the total.
	Progress func(done, total int)
	// Split, when set, imports only that split (tasks_<Split>.jsonl);
	// empty imports every tasks_*.jsonl file of the input directory.
	Split string
}

// Rejection is an ambiguous question that was not imported.
type Rejection struct {
	// ID is the benchmark's id of the question.
	ID string
	// Category is a short stable key for counting ("reference failed",
	// "same results", "no linked interpretations", "term", "database").
	Category string
	// Reason explains the rejection, such as "reference of interpretation
	// 2 failed: ...".
	Reason string
	// Split is the question's split.
	Split string
	// Flags are the benchmark's usability flags of the question
	// (Task.Flags), and MarkedUnusable whether they mark it unusable
	// (Task.MarkedUnusable).
	Flags          string
	MarkedUnusable bool
}

// Rejection categories.
const (
	RejectNoInterpretations = "no linked interpretations"
	RejectDatabase          = "database"
	RejectReference         = "reference failed"
	RejectSameResults       = "same results"
	RejectTerm              = "term"
	RejectResolutions       = "identical resolutions"
)

// SplitCount reports one split of an import.
type SplitCount struct {
	// Split is the split's name and File its tasks file.
	Split, File string
	// Questions, Ambiguous and Imported count the split's questions, its
	// ambiguous ones and the AVTs imported from them.
	Questions, Ambiguous, Imported int
}

// Summary reports an import.
type Summary struct {
	// Questions is the number of questions read.
	Questions int
	// Ambiguous is the number of ambiguous questions (the candidates).
	Ambiguous int
	// Imported is the number of AVTs written.
	Imported int
	// Records is the number of task records written.
	Records int
	// Databases is the number of databases copied.
	Databases int
	// NotClean is the number of imported AVTs whose database did not
	// rebuild cleanly (db_rebuild_clean=false; informative only).
	NotClean int
	// ByType counts the imported AVTs by ambiguity type.
	ByType map[string]int
	// Rejected lists the rejected ambiguous questions in input order.
	Rejected []Rejection
	// Splits counts each split read, in file order.
	Splits []SplitCount
}

// RejectedByCategory counts the rejections by category.
func (s *Summary) RejectedByCategory() map[string]int {
	m := map[string]int{}
	for _, r := range s.Rejected {
		m[r.Category]++
	}
	return m
}

// WriteText prints the summary; with details, one line per rejection.
func (s *Summary) WriteText(w io.Writer, details bool) {
	for _, sp := range s.Splits {
		fmt.Fprintf(w, "split %s (%s): questions %d, ambiguous %d, AVTs imported %d\n", sp.Split, sp.File, sp.Questions, sp.Ambiguous, sp.Imported)
	}
	fmt.Fprintf(w, "questions read: %d\nambiguous: %d\nAVTs imported: %d", s.Questions, s.Ambiguous, s.Imported)
	var types []string
	for t := range s.ByType {
		types = append(types, t)
	}
	sort.Strings(types)
	if len(types) > 0 {
		var parts []string
		for _, t := range types {
			parts = append(parts, fmt.Sprintf("%s %d", t, s.ByType[t]))
		}
		fmt.Fprintf(w, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "\nrecords: %d\ndatabases: %d\nimported with db_rebuild_clean=false: %d\nrejected: %d\n", s.Records, s.Databases, s.NotClean, len(s.Rejected))
	by := s.RejectedByCategory()
	var cats []string
	for c := range by {
		cats = append(cats, c)
	}
	sort.Strings(cats)
	for _, c := range cats {
		fmt.Fprintf(w, "  %s: %d\n", c, by[c])
	}
	notMarked := 0
	for _, r := range s.Rejected {
		if !r.MarkedUnusable {
			notMarked++
		}
	}
	fmt.Fprintf(w, "rejected although the benchmark marks them usable: %d\n", notMarked)
	if details {
		for _, r := range s.Rejected {
			fmt.Fprintf(w, "  rejected %s: %s [benchmark: %s]\n", r.ID, r.Reason, r.Flags)
		}
	}
}

// NormalizeSQL prepares a reference: it removes carriage returns and
// trailing semicolons and white space.
func NormalizeSQL(s string) string {
	s = strings.ReplaceAll(s, "\r", "")
	for {
		t := strings.TrimRight(strings.TrimSpace(s), ";")
		if t == s {
			return s
		}
		s = t
	}
}

// sameText reports whether two questions are the same text up to case,
// white space and trailing sentence punctuation.
func sameText(a, b string) bool { return textKey(a) == textKey(b) }

func textKey(s string) string {
	return strings.TrimRight(strings.ToLower(strings.Join(strings.Fields(s), " ")), " .!?;:,")
}

var badIDChars = regexp.MustCompile(`[^A-Za-z0-9._:-]+`)

// dbID turns a db_file ("scope/Hospitality/x/x.sqlite") into a database
// id ("scope.Hospitality.x").
func dbID(dbFile string) string {
	id := strings.ReplaceAll(path.Dir(dbFile), "/", ".")
	id = badIDChars.ReplaceAllString(id, "_")
	return strings.Trim(id, "._:-")
}

// Import reads the AMBROSIA folder in (tasks_NAME.jsonl files and dbs/:
// every split, or only opt.Split) and writes the corpus to out through
// package corpuswrite: it refuses an out
// that is, lies inside or contains in, and a non-empty out unless
// opt.Force; the corpus is written to a temporary directory next to out,
// loaded with corpus.LoadDir, and renamed into place only if it validates,
// so a failed import leaves nothing behind. Every db_file must name a file
// inside in/dbs (symbolic links included); one that does not is a
// rejection of its question.
func Import(ctx context.Context, in, out string, opt Options) (*Summary, error) {
	if opt.Limits == (sqlexec.Limits{}) {
		opt.Limits = sqlexec.DefaultLimits()
	}
	if err := corpuswrite.Check(in, out, opt.Force); err != nil {
		return nil, fmt.Errorf("ambrosia: %w", err)
	}
	tasks, files, err := ReadSplits(in, opt.Split)
	if err != nil {
		return nil, err
	}

	sum := &Summary{Questions: len(tasks), ByType: map[string]int{}}
	splitAt := map[string]int{} // file -> index in sum.Splits
	for _, sf := range files {
		splitAt[sf.File] = len(sum.Splits)
		sum.Splits = append(sum.Splits, SplitCount{Split: sf.Split, File: sf.File})
	}
	var amb []Task
	for _, t := range tasks {
		sum.Splits[splitAt[t.File]].Questions++
		if t.IsAmbiguous {
			amb = append(amb, t)
			sum.Splits[splitAt[t.File]].Ambiguous++
		}
	}
	sum.Ambiguous = len(amb)

	engines := map[string]*sqlite.DB{}
	openErr := map[string]error{}
	defer func() {
		for _, e := range engines {
			e.Close()
		}
	}()
	open := func(dbFile string) (*sqlite.DB, error) {
		if e, ok := engines[dbFile]; ok {
			return e, nil
		}
		if err, ok := openErr[dbFile]; ok {
			return nil, err
		}
		p, err := resolveDB(in, dbFile)
		if err != nil {
			openErr[dbFile] = err
			return nil, err
		}
		e, err := sqlite.Open(p, sqlite.Options{})
		if err != nil {
			openErr[dbFile] = err
			return nil, err
		}
		engines[dbFile] = e
		return e, nil
	}

	var records []corpus.Record
	usedDBs := map[string]string{} // db id -> db_file
	dbOfID := map[string]string{}
	for n, t := range amb {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		recs, rej := importOne(ctx, t, open, opt.Limits)
		if rej == nil {
			if id := dbID(t.DBFile); dbOfID[id] != "" && dbOfID[id] != t.DBFile {
				rej = &Rejection{Category: RejectDatabase,
					Reason: fmt.Sprintf("database id %q of %s is already used by %s", id, t.DBFile, dbOfID[id])}
			}
		}
		if rej != nil {
			rej.ID, rej.Split, rej.Flags, rej.MarkedUnusable = t.ID, t.Split, t.Flags(), t.MarkedUnusable()
			sum.Rejected = append(sum.Rejected, *rej)
		} else {
			id := dbID(t.DBFile)
			dbOfID[id] = t.DBFile
			usedDBs[id] = t.DBFile
			records = append(records, recs...)
			sum.Imported++
			sum.Splits[splitAt[t.File]].Imported++
			sum.Records += len(recs)
			sum.ByType[t.AmbigType]++
			if t.DBRebuildClean != nil && !*t.DBRebuildClean {
				sum.NotClean++
			}
		}
		if opt.Progress != nil {
			opt.Progress(n+1, len(amb))
		}
	}
	if sum.Imported == 0 {
		return sum, errors.New("ambrosia: no AVT could be imported; nothing written")
	}
	sum.Databases = len(usedDBs)
	var names []string
	for _, sp := range sum.Splits {
		names = append(names, sp.Split)
	}
	if err := write(ctx, in, out, opt.Force, records, usedDBs, names); err != nil {
		return sum, err
	}
	return sum, nil
}

// resolveDB returns the real path of a task's db_file, which must name a
// file inside in/dbs (checked by corpuswrite.ResolveInput, symbolic links
// included).
func resolveDB(in, dbFile string) (string, error) {
	if dbFile == "" || strings.Contains(dbFile, `\`) || !filepath.IsLocal(filepath.FromSlash(dbFile)) {
		return "", fmt.Errorf("db_file %q is not a relative path inside dbs/", dbFile)
	}
	return corpuswrite.ResolveInput(in, path.Join("dbs", dbFile))
}

// importOne builds the records of one ambiguous question, or says why not.
func importOne(ctx context.Context, t Task, open func(string) (*sqlite.DB, error), lim sqlexec.Limits) ([]corpus.Record, *Rejection) {
	ins := t.LinkedInterpretations
	switch {
	case len(ins) == 0:
		return nil, &Rejection{Category: RejectNoInterpretations, Reason: "no linked interpretations"}
	case len(ins) == 1:
		return nil, &Rejection{Category: RejectNoInterpretations, Reason: "only one linked interpretation"}
	case strings.TrimSpace(t.Question) == "":
		return nil, &Rejection{Category: RejectTerm, Reason: "empty question"}
	case t.DBFile == "":
		return nil, &Rejection{Category: RejectDatabase, Reason: "no db_file"}
	}
	qs := make([]string, len(ins))
	for i, in := range ins {
		qs[i] = strings.TrimSpace(in.Question)
		if qs[i] == "" {
			return nil, &Rejection{Category: RejectNoInterpretations, Reason: fmt.Sprintf("interpretation %d has no question", i+1)}
		}
		if NormalizeSQL(in.SQL) == "" {
			return nil, &Rejection{Category: RejectReference, Reason: fmt.Sprintf("interpretation %d has no SQL", i+1)}
		}
	}
	for i := range qs {
		for j := i + 1; j < len(qs); j++ {
			if sameText(qs[i], qs[j]) {
				return nil, &Rejection{Category: RejectResolutions,
					Reason: fmt.Sprintf("interpretations %d and %d have the same question, so no answer can tell them apart", i+1, j+1)}
			}
		}
	}
	term, rule, err := DeriveTerm(t.Question, t.AmbigType, qs)
	if err != nil {
		return nil, &Rejection{Category: RejectTerm, Reason: "term: " + err.Error()}
	}
	if id := dbID(t.DBFile); !corpus.ValidID(id) {
		return nil, &Rejection{Category: RejectDatabase, Reason: fmt.Sprintf("db_file %q gives no valid database id (%q)", t.DBFile, id)}
	}
	eng, err := open(t.DBFile)
	if err != nil {
		return nil, &Rejection{Category: RejectDatabase, Reason: fmt.Sprintf("database %s: %v", t.DBFile, err)}
	}
	pol := sqlexec.DefaultPolicy()
	results := make([]*sqlexec.Result, len(ins))
	for i, in := range ins {
		sql := NormalizeSQL(in.SQL)
		res, err := eng.Query(ctx, sql, lim)
		if err != nil {
			return nil, &Rejection{Category: RejectReference, Reason: fmt.Sprintf("reference of interpretation %d failed: %v", i+1, err)}
		}
		results[i] = res
	}
	for i := range results {
		for j := i + 1; j < len(results); j++ {
			p := pol.Resolve(NormalizeSQL(ins[j].SQL))
			if same, _ := sqlexec.Compare(p, results[i], results[j]); same {
				return nil, &Rejection{Category: RejectSameResults, Reason: fmt.Sprintf("interpretations %d and %d return the same rows", i+1, j+1)}
			}
		}
	}
	notes := "term rule: " + rule
	if t.DBRebuildClean != nil && !*t.DBRebuildClean {
		notes += "; db_rebuild_clean=false"
	}
	recs := make([]corpus.Record, len(ins))
	for i, in := range ins {
		recs[i] = corpus.Record{
			ID:      fmt.Sprintf("%s-i%d", t.ID, i+1),
			AVTID:   t.ID,
			Split:   t.Split,
			DB:      dbID(t.DBFile),
			Request: t.Question,
			Ambiguities: []corpus.Ambiguity{{
				Term:       term,
				Kind:       corpus.Critical,
				Resolution: qs[i],
			}},
			Interpretation: fmt.Sprintf("interpretation %d", i+1),
			Reference:      corpus.Reference{SQL: corpus.SQLList{NormalizeSQL(in.SQL)}},
			Source:         &corpus.Source{Dataset: "ambrosia", ID: t.ID, Notes: notes},
		}
	}
	return recs, nil
}

// write writes the corpus through a corpuswrite.Writer: into a temporary
// directory beside out, validated, then renamed to out.
func write(ctx context.Context, in, out string, force bool, records []corpus.Record, dbs map[string]string, splits []string) error {
	w, err := corpuswrite.New(in, out, force)
	if err != nil {
		return fmt.Errorf("ambrosia: %w", err)
	}
	defer w.Discard()

	ids := make([]string, 0, len(dbs))
	for id := range dbs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	m := corpus.Manifest{
		Name: CorpusName,
		Description: "AMBROSIA (Saparina & Lapata, NeurIPS 2024), split(s) " + strings.Join(splits, ", ") + ": one AVT per ambiguous question " +
			"(scope, attachment, vague), one record per interpretation. Imported by avtgym corpus import ambrosia.",
		Records: []string{"records.jsonl"},
	}
	for _, id := range ids {
		rel := path.Join("dbs", dbs[id])
		if err := w.CopyFromInput(rel, rel); err != nil {
			return fmt.Errorf("ambrosia: copying database %s: %w", dbs[id], err)
		}
		m.Databases = append(m.Databases, corpus.Database{ID: id, Engine: "sqlite", Path: rel})
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := w.WriteFile(corpus.ManifestFile, append(mb, '\n')); err != nil {
		return fmt.Errorf("ambrosia: %w", err)
	}
	var b strings.Builder
	for _, r := range records {
		line, err := json.Marshal(r)
		if err != nil {
			return err
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	if err := w.WriteFile("records.jsonl", []byte(b.String())); err != nil {
		return fmt.Errorf("ambrosia: %w", err)
	}

	c, err := w.Validate(ctx, corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		return fmt.Errorf("ambrosia: the imported corpus does not validate: %w", err)
	}
	c.Close()
	if err := w.Commit(); err != nil {
		return fmt.Errorf("ambrosia: %w", err)
	}
	return nil
}

package corpus

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"avtgym/corpus/demo"
	"avtgym/internal/parallel"
	"avtgym/sqlexec"
)

// Options configure loading.
type Options struct {
	// Engines opens the corpus's databases; the command wires it in
	// (package engines). A load without it fails.
	Engines Opener
	// Limits bound each reference query at load time; zero means
	// sqlexec.DefaultLimits(). A reference that exceeds them makes its
	// record invalid.
	Limits sqlexec.Limits
	// WorkDir is where databases built from scripts are written (in a
	// subdirectory named after the corpus, one file per database id);
	// empty means a fresh temporary directory, removed by Corpus.Close.
	WorkDir string
	// BuildTimeout bounds the build of each database from its script;
	// zero means the engine's default (sqlite.DefaultBuildTimeout). A
	// build that runs past it makes the database fail to load.
	BuildTimeout time.Duration
	// MaxBuildBytes bounds the size of each database built from a script;
	// zero means the engine's default (sqlite.DefaultMaxBuildBytes). A
	// script that grows the database past it makes the database fail to
	// load.
	MaxBuildBytes int64
	// Progress, when set, is called after each reference check with the
	// number checked and the total.
	Progress func(done, total int)
	// Lanes schedule every query on the corpus's databases (the references
	// checked at load time, and every verification after); nil means
	// sqlexec.DefaultLanes(). One Lanes value should serve a whole process.
	Lanes *sqlexec.Lanes
	// PyRunner runs the Python tests of Management records on PostgreSQL
	// (sqlexec/pytests); nil makes a record with tests a problem.
	PyRunner sqlexec.PyRunner
}

// ErrNoEngines is the error of a load whose Options name no Engines.
var ErrNoEngines = errors.New("corpus: no engine opener (Options.Engines is nil; the command wires one in, package engines)")

// LoadDemo loads the embedded demo corpus.
func LoadDemo(ctx context.Context, opt Options) (*Corpus, error) {
	l := &loader{fsys: demo.FS, label: "demo", opt: opt}
	return l.load(ctx)
}

// LoadDir loads and validates the corpus in directory dir. Every file the
// manifest names must lie inside dir: files are read through an os.Root on
// dir, and a path with ".." elements, an absolute path or a symbolic link
// that leads outside dir is a problem of the manifest field that names it.
func LoadDir(ctx context.Context, dir string, opt Options) (*Corpus, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	cannot := func(err error) error {
		return &ValidationError{Problems: []Problem{{File: path.Join(dir, ManifestFile), Msg: fmt.Sprintf("cannot read the corpus manifest: %v", err)}}}
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, cannot(err)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, cannot(err)
	}
	defer root.Close()
	l := &loader{fsys: root.FS(), root: root, label: dir, realDir: real, opt: opt}
	return l.load(ctx)
}

// ValidID reports whether s is a valid corpus name, record id or database
// id: letters, digits, '.', '_', ':' and '-', starting with a letter or
// digit (so never "", "." or "..", and never containing a '/').
func ValidID(s string) bool { return idPattern.MatchString(s) }

// loader carries the state of one load.
type loader struct {
	fsys  fs.FS
	label string // how problems name the corpus directory
	// root is the corpus directory (nil for an embedded corpus); fsys reads
	// through it.
	root *os.Root
	// realDir is the corpus directory on disk with symbolic links resolved;
	// "" for an embedded corpus.
	realDir string
	// resolved maps each file the manifest names to its real path, once
	// confine has checked it (files that exist only).
	resolved map[string]string
	opt      Options
	problems []Problem
	mu       sync.Mutex
	// pgAsked says that Options.Engines was asked for the PostgreSQL
	// server (Corpus.pg, nil when none is configured).
	pgAsked bool
	// pgDBs are the names of the corpus's working PostgreSQL databases,
	// by id.
	pgDBs map[string]string
	// failedDBs are databases of the manifest that could not be opened: a
	// problem was reported for each, and their records are not checked
	// further (so that one missing file does not bury the report).
	failedDBs map[string]bool
}

func (l *loader) problem(file string, line int, field, format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.problems = append(l.problems, Problem{File: file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (l *loader) file(name string) string { return path.Join(l.label, name) }

func (l *loader) load(ctx context.Context) (_ *Corpus, err error) {
	if l.opt.Engines == nil {
		return nil, ErrNoEngines
	}
	if l.opt.Limits == (sqlexec.Limits{}) {
		l.opt.Limits = sqlexec.DefaultLimits()
	}
	l.resolved = map[string]string{}
	c := &Corpus{Cache: sqlexec.NewCache(), byID: map[string]*Task{}, avts: map[string][]*Task{}, dbs: map[string]*DB{}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()

	m, ok := l.manifest()
	if !ok {
		return nil, &ValidationError{Problems: l.problems}
	}
	c.Name, c.Description = m.Name, m.Description

	if err := l.openDatabases(ctx, c, m); err != nil {
		return nil, err
	}
	defaults := m.Defaults.Comparison
	defaultsJSON, _ := json.Marshal(defaults)
	for _, name := range m.Records {
		l.records(c, m, name, defaultsJSON)
	}
	l.checkAVTs(c)
	if len(l.problems) == 0 {
		if err := l.openStateful(ctx, c); err != nil {
			return nil, err
		}
	}
	if len(l.problems) == 0 {
		l.checkReferences(ctx, c)
	}
	if err := ctx.Err(); err != nil {
		return nil, err // some references were not checked
	}
	if len(l.problems) > 0 {
		sortProblems(l.problems)
		return nil, &ValidationError{Problems: l.problems}
	}
	return c, nil
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

func (l *loader) manifest() (*Manifest, bool) {
	file := l.file(ManifestFile)
	b, err := fs.ReadFile(l.fsys, ManifestFile)
	if err != nil {
		l.problem(file, 0, "", "cannot read the corpus manifest: %v", err)
		return nil, false
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		line, field, msg := describeJSONError(b, err)
		l.problem(file, line, field, "%s", msg)
		return nil, false
	}
	if m.Name == "" {
		l.problem(file, 0, "name", "is required")
	} else if !idPattern.MatchString(m.Name) {
		l.problem(file, 0, "name", "%q must be letters, digits, '.', '_', ':' or '-'", m.Name)
	}
	if len(m.Records) == 0 {
		m.Records = []string{"records.jsonl"}
		l.confine(file, "records", m.Records[0])
	} else {
		for i, name := range m.Records {
			l.confine(file, fmt.Sprintf("records[%d]", i), name)
		}
	}
	if len(m.Databases) == 0 {
		l.problem(file, 0, "databases", "at least one database is required")
	}
	seen := map[string]bool{}
	folded := map[string]string{} // lower-cased id -> id
	for i, d := range m.Databases {
		f := fmt.Sprintf("databases[%d]", i)
		switch {
		case d.ID == "":
			l.problem(file, 0, f+".id", "is required")
		case !idPattern.MatchString(d.ID):
			l.problem(file, 0, f+".id", "%q must be letters, digits, '.', '_', ':' or '-', starting with a letter or digit", d.ID)
		case seen[d.ID]:
			l.problem(file, 0, f+".id", "%q is used twice", d.ID)
		case folded[strings.ToLower(d.ID)] != "":
			// A built database's file is named after its id; on a
			// case-insensitive file system the two would share a file.
			l.problem(file, 0, f+".id", "%q differs from the id %q only in letter case", d.ID, folded[strings.ToLower(d.ID)])
		}
		seen[d.ID] = true
		folded[strings.ToLower(d.ID)] = d.ID
		l.checkSource(file, f, d)
		kseen := map[string]bool{}
		for j, k := range d.Knowledge {
			kf := fmt.Sprintf("%s.knowledge[%d]", f, j)
			if k.ID == "" || kseen[k.ID] {
				l.problem(file, 0, kf+".id", "is missing or used twice (%q)", k.ID)
			}
			kseen[k.ID] = true
			if k.Name == "" || k.Definition == "" {
				l.problem(file, 0, kf, "name and definition are required")
			}
		}
	}
	if m.Defaults.Comparison != nil {
		if _, err := resolvePolicy(nil, m.Defaults.Comparison); err != nil {
			l.problem(file, 0, "defaults.comparison", "%v", err)
		}
	}
	return &m, len(l.problems) == 0
}

// confine checks that name, a file that the manifest's field names, stays
// inside the corpus directory: a relative path with '/' separators and no
// "." or ".." elements that, on disk, resolves (symbolic links included)
// to a regular file inside the directory, both through the os.Root and by
// its real path (SQLite opens files by path). It reports a problem and
// returns false otherwise. A file that does not exist passes: the caller
// reports it when it reads the file.
func (l *loader) confine(file, field, name string) bool {
	if !fs.ValidPath(name) || name == "." || strings.Contains(name, `\`) {
		l.problem(file, 0, field, "%q must be a relative path inside the corpus directory, with '/' separators and no '.' or '..' elements", name)
		return false
	}
	if l.root == nil {
		return true // an embedded corpus: its fs.FS cannot reach outside it
	}
	real, rerr := filepath.EvalSymlinks(filepath.Join(l.realDir, filepath.FromSlash(name)))
	if rerr == nil && !within(l.realDir, real) {
		l.problem(file, 0, field, "%q resolves outside the corpus directory (to %s, through a symbolic link)", name, real)
		return false
	}
	fi, err := l.root.Stat(name)
	switch {
	case err != nil && errors.Is(err, fs.ErrNotExist) && rerr != nil:
		return true
	case err != nil:
		l.problem(file, 0, field, "%q cannot be opened inside the corpus directory: %v", name, err)
		return false
	case rerr != nil:
		l.problem(file, 0, field, "%q: %v", name, rerr)
		return false
	case !fi.Mode().IsRegular():
		l.problem(file, 0, field, "%q is not a regular file", name)
		return false
	}
	l.resolved[name] = real
	return true
}

// within reports whether the clean absolute path p is dir or lies inside it.
func within(dir, p string) bool {
	if p == dir {
		return true
	}
	if !strings.HasSuffix(dir, string(filepath.Separator)) {
		dir += string(filepath.Separator)
	}
	return strings.HasPrefix(p, dir)
}

// workDir is where databases are built or copied out: a directory written
// only through its os.Root and only under names made from validated ids.
type workDir struct {
	path string // its real path, for SQLite
	root *os.Root
}

// file returns the name and the path of database id's file.
func (w *workDir) file(id string) (name, path string) {
	name = id + ".sqlite"
	return name, filepath.Join(w.path, name)
}

// clear removes what an earlier run in the same WorkDir left under name.
func (w *workDir) clear(name string) error {
	for _, suffix := range []string{"", "-journal", "-wal", "-shm"} {
		if err := w.root.Remove(name + suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// openWorkDir opens opt.WorkDir/<corpus name> (created if needed), or a
// fresh temporary directory that Corpus.Close removes.
func (l *loader) openWorkDir(c *Corpus, name string) (*workDir, error) {
	if l.opt.WorkDir == "" {
		d, err := os.MkdirTemp("", "avtgym-"+name+"-*")
		if err != nil {
			return nil, err
		}
		c.cleanup = func() error { return os.RemoveAll(d) }
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			return nil, err
		}
		r, err := os.OpenRoot(real)
		if err != nil {
			return nil, err
		}
		return &workDir{path: real, root: r}, nil
	}
	if err := os.MkdirAll(l.opt.WorkDir, 0o755); err != nil {
		return nil, err
	}
	base, err := filepath.EvalSymlinks(l.opt.WorkDir)
	if err != nil {
		return nil, err
	}
	if base, err = filepath.Abs(base); err != nil {
		return nil, err
	}
	br, err := os.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	defer br.Close()
	if err := br.MkdirAll(name, 0o755); err != nil {
		return nil, err
	}
	r, err := br.OpenRoot(name) // refuses a link that leads out of WorkDir
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(filepath.Join(base, name))
	if err == nil && !within(base, real) {
		err = fmt.Errorf("%s leads outside %s", filepath.Join(base, name), base)
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return &workDir{path: real, root: r}, nil
}

func (l *loader) openDatabases(ctx context.Context, c *Corpus, m *Manifest) error {
	var work *workDir
	ensureWorkDir := func() (*workDir, error) {
		if work != nil {
			return work, nil
		}
		w, err := l.openWorkDir(c, m.Name)
		if err != nil {
			return nil, fmt.Errorf("corpus %s: work directory: %w", m.Name, err)
		}
		work = w
		return w, nil
	}
	defer func() {
		if work != nil {
			work.root.Close()
		}
	}()
	file := l.file(ManifestFile)
	l.failedDBs = map[string]bool{}
	for i, spec := range m.Databases {
		field := fmt.Sprintf("databases[%d]", i)
		l.failedDBs[spec.ID] = true // until it opens
		if spec.Engine == EnginePostgres {
			if err := l.openPostgres(ctx, c, m, field, spec); err != nil {
				return err
			}
			continue
		}
		var (
			dbPath    string
			immutable bool
		)
		switch {
		case spec.Script != "":
			script, err := fs.ReadFile(l.fsys, spec.Script)
			if err != nil {
				l.problem(file, 0, field+".script", "cannot read %s: %v", spec.Script, err)
				continue
			}
			w, err := ensureWorkDir()
			if err != nil {
				return err
			}
			name, p := w.file(spec.ID)
			if err := w.clear(name); err != nil { // a stale build from an earlier run in the same WorkDir
				return fmt.Errorf("corpus %s: work directory: %w", m.Name, err)
			}
			err = l.opt.Engines.BuildSQLite(ctx, string(script), p, BuildOptions{
				Name: l.file(spec.Script), Timeout: l.opt.BuildTimeout, MaxBytes: l.opt.MaxBuildBytes})
			if err != nil {
				msg := err.Error()
				var se *SourceError
				if errors.As(err, &se) {
					msg = se.Reason
				}
				l.problem(l.file(spec.Script), 0, "", "building database %q: %s", spec.ID, msg)
				continue
			}
			dbPath = p
			immutable = true // private to this process: it cannot change under us
		case l.root != nil:
			real, ok := l.resolved[spec.Path]
			if !ok { // confine passed it, so it does not exist
				_, err := l.root.Stat(spec.Path)
				l.problem(file, 0, field+".path", "%v", err)
				continue
			}
			dbPath = real
		default: // an embedded corpus with a database file: copy it out
			b, err := fs.ReadFile(l.fsys, spec.Path)
			if err != nil {
				l.problem(file, 0, field+".path", "%v", err)
				continue
			}
			w, err := ensureWorkDir()
			if err != nil {
				return err
			}
			name, p := w.file(spec.ID)
			if err := w.clear(name); err != nil {
				return fmt.Errorf("corpus %s: work directory: %w", m.Name, err)
			}
			if err := w.root.WriteFile(name, b, 0o444); err != nil {
				return fmt.Errorf("corpus %s: %w", m.Name, err)
			}
			dbPath = p
			immutable = true
		}
		lanes := l.lanes()
		// The pool holds a connection for every query the lanes let run at once.
		eng, stateful, err := l.opt.Engines.OpenSQLite(dbPath, SQLiteOptions{Immutable: immutable, MaxConns: lanes.Capacity()})
		if err != nil {
			l.problem(file, 0, field, "opening database %q: %v", spec.ID, err)
			continue
		}
		db := l.addDB(ctx, c, field, spec, eng, lanes)
		// Stateful records verify on private copies; nothing is copied
		// until the first such verification.
		db.Stateful = stateful
	}
	return nil
}

// addDB adds an opened database to c, scheduled on lanes, deriving its
// schema when the manifest gives none.
func (l *loader) addDB(ctx context.Context, c *Corpus, field string, spec Database, eng sqlexec.Engine, lanes *sqlexec.Lanes) *DB {
	db := &DB{Spec: spec, Engine: sqlexec.Scheduled(eng, lanes), Schema: spec.Schema, commit: new(commitSchemaCell)}
	delete(l.failedDBs, spec.ID)
	c.dbs[spec.ID] = db
	c.dbOrder = append(c.dbOrder, spec.ID)
	if db.Schema == "" {
		s, err := eng.Schema(ctx, 3)
		if err != nil {
			l.problem(l.file(ManifestFile), 0, field, "deriving the schema of %q: %v", spec.ID, err)
			return db
		}
		db.Schema = s
	}
	return db
}

// lanes returns the lanes that schedule the corpus's queries.
func (l *loader) lanes() *sqlexec.Lanes {
	if l.opt.Lanes == nil {
		return sqlexec.DefaultLanes()
	}
	return l.opt.Lanes
}

// maxLine bounds one record line (a record with a long schema-free request
// and several statements fits easily).
const maxLine = 16 << 20

func (l *loader) records(c *Corpus, m *Manifest, name string, defaultsJSON []byte) {
	file := l.file(name)
	f, err := l.fsys.Open(name)
	if err != nil {
		l.problem(file, 0, "", "cannot open records file: %v", err)
		return
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, err := r.ReadBytes('\n')
		if len(line) > maxLine {
			l.problem(file, lineNo, "", "line is longer than %d bytes", maxLine)
		} else if len(bytes.TrimSpace(line)) > 0 {
			l.record(c, m, file, lineNo, line, defaultsJSON)
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			l.problem(file, lineNo, "", "read error: %v", err)
			return
		}
	}
}

// record validates one records line and adds its task to c. Every problem
// of the line is reported; a line with any problem adds no task.
func (l *loader) record(c *Corpus, m *Manifest, file string, lineNo int, line, defaultsJSON []byte) {
	rec, ok := l.decodeRecord(file, lineNo, line)
	if !ok {
		return
	}
	bad := func(field, format string, args ...any) { l.problem(file, lineNo, field, format, args...) }
	before := len(l.problems)
	l.checkRecordKeys(c, &rec, bad)
	db, ok := c.dbs[rec.DB]
	switch {
	case !ok && l.failedDBs[rec.DB]:
		return // its database failed to open; that problem is reported
	case !ok:
		bad("db", "%q is not a database of the manifest", rec.DB)
	}
	masked := checkAmbiguities(&rec, db, bad)
	ref, policy := checkReference(&rec, m, bad)
	l.checkCategory(&rec, db, bad)
	fuPolicy := l.checkFollowUp(&rec, m, db, bad)
	driftPolicy := l.checkDrift(&rec, m, bad)
	if len(l.problems) > before {
		return
	}
	h := sha256.New()
	h.Write(bytes.TrimSpace(line))
	h.Write(defaultsJSON)
	t := &Task{
		Record:         &rec,
		Corpus:         c,
		DB:             db,
		Policy:         policy.Resolve(ref),
		ReferenceSQL:   ref,
		RefKey:         c.Name + "\x00" + rec.ID,
		FollowUpPolicy: fuPolicy,
		DriftPolicy:    driftPolicy,
		File:           file,
		Line:           lineNo,
	}
	copy(t.Hash[:], h.Sum(nil))
	t.followUp = followUpRecord(t)
	for _, k := range db.Spec.Knowledge {
		if !masked[k.ID] {
			t.PublicKnowledge = append(t.PublicKnowledge, k)
		}
	}
	c.Tasks = append(c.Tasks, t)
	c.byID[rec.ID] = t
	c.avts[rec.AVTID] = append(c.avts[rec.AVTID], t)
}

// decodeRecord decodes one line strictly (unknown fields are problems).
func (l *loader) decodeRecord(file string, lineNo int, line []byte) (Record, bool) {
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		_, field, msg := describeJSONError(line, err)
		l.problem(file, lineNo, field, "%s", msg)
		return rec, false
	}
	if dec.More() {
		l.problem(file, lineNo, "", "more than one JSON value on the line")
		return rec, false
	}
	return rec, true
}

type badFunc func(field, format string, args ...any)

// checkRecordKeys checks the record's id (unique in c), AVT id (defaulting
// to the id) and request.
func (l *loader) checkRecordKeys(c *Corpus, rec *Record, bad badFunc) {
	switch {
	case rec.ID == "":
		bad("id", "is required")
	case !idPattern.MatchString(rec.ID):
		bad("id", "%q must be letters, digits, '.', '_', ':' or '-'", rec.ID)
	default:
		if prev, dup := c.byID[rec.ID]; dup {
			bad("id", "%q is already used at %s:%d", rec.ID, prev.File, prev.Line)
		}
	}
	if rec.AVTID == "" {
		rec.AVTID = rec.ID
	}
	if strings.TrimSpace(rec.Request) == "" {
		bad("request", "is required")
	}
	switch rec.ResolutionFormat {
	case "", "text", "sql":
	default:
		bad("resolution_format", "%q is not text or sql", rec.ResolutionFormat)
	}
	if rec.Source != nil && rec.Source.Dataset == "" {
		bad("source.dataset", "is required when source is set")
	}
}

// checkAmbiguities checks each ambiguity of rec (db may be nil when the
// record names no database of the manifest) and returns the knowledge
// entries its knowledge ambiguities mask.
func checkAmbiguities(rec *Record, db *DB, bad badFunc) map[string]bool {
	terms := map[string]bool{}
	for _, a := range rec.Ambiguities {
		terms[a.Term] = true
	}
	if len(rec.Ambiguities) > MaxAmbiguities {
		bad("ambiguities", "has %d entries, more than %d", len(rec.Ambiguities), MaxAmbiguities)
	}
	masked := map[string]bool{}
	for i, a := range rec.Ambiguities {
		f := fmt.Sprintf("ambiguities[%d]", i)
		if strings.TrimSpace(a.Term) == "" {
			bad(f+".term", "is required")
		} else if !hasWord(a.Term) {
			bad(f+".term", "%q has no letter or digit, so no question can name it", a.Term)
		}
		if !a.Kind.valid() {
			bad(f+".kind", "%q is not one of critical, knowledge, non_critical", a.Kind)
		}
		if strings.TrimSpace(a.Resolution) == "" {
			bad(f+".resolution", "is required")
		}
		for j, al := range a.Aliases {
			if !hasWord(al) {
				bad(fmt.Sprintf("%s.aliases[%d]", f, j), "%q has no letter or digit", al)
			}
		}
		switch {
		case a.DependsOn == "":
		case a.DependsOn == a.Term:
			bad(f+".depends_on", "%q is the ambiguity's own term", a.DependsOn)
		case !terms[a.DependsOn]:
			bad(f+".depends_on", "%q is not the term of another ambiguity of this record", a.DependsOn)
		case dependsOnCycle(rec, i):
			bad(f+".depends_on", "%q closes a cycle of dependencies", a.DependsOn)
		}
		if a.Chosen != "" && len(a.Options) > 0 && !slices.Contains(a.Options, a.Chosen) {
			bad(f+".chosen", "%q is not one of the options", a.Chosen)
		}
		switch {
		case a.Kind == Knowledge && a.KnowledgeID != "":
			if db != nil && !hasKnowledge(db.Spec.Knowledge, a.KnowledgeID) {
				bad(f+".knowledge_id", "%q is not a knowledge entry of database %q", a.KnowledgeID, rec.DB)
			}
			masked[a.KnowledgeID] = true
		case a.Kind != Knowledge && a.KnowledgeID != "":
			bad(f+".knowledge_id", "is only allowed on knowledge ambiguities")
		}
	}
	return masked
}

// checkReference checks the reference statements and the comparison
// policy, and returns the joined reference and the resolved policy.
func checkReference(rec *Record, m *Manifest, bad badFunc) (string, sqlexec.Policy) {
	if len(rec.Reference.SQL) == 0 {
		bad("reference.sql", "is required")
	}
	for i, s := range rec.Reference.SQL {
		if strings.TrimSpace(s) == "" {
			bad(fmt.Sprintf("reference.sql[%d]", i), "is empty")
		}
	}
	policy, err := resolvePolicy(m.Defaults.Comparison, rec.Reference.Comparison)
	if err != nil {
		bad("reference.comparison", "%v", err)
	}
	return strings.Join(rec.Reference.SQL, ";\n"), policy
}

// checkCategory checks a record's category and its stateful verification
// assets.
func (l *loader) checkCategory(rec *Record, db *DB, bad badFunc) {
	r := rec.Reference
	switch rec.Category {
	case "", CategoryQuery, CategoryManagement:
	default:
		bad("category", "%q is not a category (want %q or %q)", rec.Category, CategoryQuery, CategoryManagement)
	}
	if len(r.Tests) > 0 && len(r.Checks) > 0 {
		bad("reference", "has both tests and checks: give one (tests decide when both are set, so the checks would never run)")
	}
	l.checkTests(rec, db, bad)
	for _, f := range []struct {
		name string
		list SQLList
	}{{"setup", r.Setup}, {"checks", r.Checks}, {"cleanup", r.Cleanup}, {"tests", SQLList(r.Tests)}} {
		for i, s := range f.list {
			if strings.TrimSpace(s) == "" {
				bad(fmt.Sprintf("reference.%s[%d]", f.name, i), "is empty")
			}
		}
	}
}

// checkFollowUp checks a record's follow-up (PROTOCOL.md §8) and returns
// its resolved comparison policy.
func (l *loader) checkFollowUp(rec *Record, m *Manifest, db *DB, bad badFunc) sqlexec.Policy {
	fu := rec.FollowUp
	if fu == nil {
		return sqlexec.Policy{}
	}
	sub := func(field, format string, args ...any) { bad("follow_up."+field, format, args...) }
	if strings.TrimSpace(fu.Request) == "" {
		sub("request", "is required")
	}
	f := Record{ID: rec.ID, DB: rec.DB, Category: fu.Category, Reference: fu.Reference}
	ref, policy := checkReference(&f, m, sub)
	l.checkCategory(&f, db, sub)
	return policy.Resolve(ref)
}

// dependsOnCycle reports whether following depends_on from ambiguity i
// comes back to it.
func dependsOnCycle(rec *Record, i int) bool {
	cur := rec.dependency(i)
	for range rec.Ambiguities {
		if cur < 0 {
			return false
		}
		if cur == i {
			return true
		}
		cur = rec.dependency(cur)
	}
	return true
}

// The drift subtypes of TIDE's Algorithm 1 a record may declare.
var (
	driftSubtypes  = []string{"value", "constraint", "projection"}
	intentSubtypes = []string{"aspect_change", "target_change"}
)

// checkDrift checks a record's drift turn and TIDE labels, and returns the
// post-drift reference's resolved comparison policy.
func (l *loader) checkDrift(rec *Record, m *Manifest, bad badFunc) sqlexec.Policy {
	switch rec.SampleType {
	case "":
	case SampleChainOnly, SampleJoint, SampleDriftOnly:
		chain, drift := rec.HasChain(), rec.Drift != nil
		if (rec.SampleType == SampleDriftOnly) == chain || (rec.SampleType == SampleChainOnly) == drift || (rec.SampleType == SampleJoint) != (chain && drift) {
			bad("sample_type", "%q does not fit the record: it has %s and %s", rec.SampleType, pick(chain, "a chain ambiguity (depends_on)", "no chain ambiguity"), pick(drift, "a drift", "no drift"))
		}
	default:
		bad("sample_type", "%q is not chain_only, drift_only or joint", rec.SampleType)
	}
	if rec.Cluster != "" && !idPattern.MatchString(rec.Cluster) {
		bad("cluster", "%q must be letters, digits, '.', '_', ':' or '-'", rec.Cluster)
	}
	d := rec.Drift
	if d == nil {
		return sqlexec.Policy{}
	}
	sub := func(field, format string, args ...any) { bad("drift."+field, format, args...) }
	if strings.TrimSpace(d.Utterance) == "" {
		sub("utterance", "is required")
	}
	if rec.Stateful() || rec.FollowUp != nil {
		bad("drift", "is served on read-only Query records without a follow-up only (TIDE's tasks)")
	}
	if d.Subtype != "" && !slices.Contains(driftSubtypes, d.Subtype) {
		sub("subtype", "%q is not value, constraint or projection", d.Subtype)
	}
	switch {
	case d.IntentSubtype == "":
	case d.Subtype != "projection":
		sub("intent_subtype", "is only given for projection drifts")
	case !slices.Contains(intentSubtypes, d.IntentSubtype):
		sub("intent_subtype", "%q is not aspect_change or target_change", d.IntentSubtype)
	}
	f := Record{ID: rec.ID, DB: rec.DB, Reference: d.Reference}
	ref, policy := checkReference(&f, m, sub)
	if f.Stateful() {
		sub("reference", "has setup, checks, tests or cleanup: a drift's reference is read-only SQL")
	}
	return policy.Resolve(ref)
}

func pick[T any](cond bool, yes, no T) T {
	if cond {
		return yes
	}
	return no
}

// checkTests checks that a record's Python tests can run.
func (l *loader) checkTests(rec *Record, db *DB, bad badFunc) {
	if len(rec.Reference.Tests) == 0 {
		return
	}
	if db != nil && db.Spec.Engine != EnginePostgres {
		bad("reference.tests", "Python tests run on PostgreSQL databases only (database %q is %s): give checks instead", rec.DB, db.Spec.Engine)
	}
	if l.opt.PyRunner == nil {
		bad("reference.tests", "Python tests need the test workers: python3 with psycopg 3 (pip install 'psycopg[binary]>=3.2,<4')")
	}
}

// checkAVTs checks that the records of each AVT share what an AVT shares:
// the request, the database and the ambiguity terms and kinds.
func (l *loader) checkAVTs(c *Corpus) {
	for _, ts := range c.avts {
		first := ts[0]
		for _, t := range ts[1:] {
			bad := func(field, format string, args ...any) { l.problem(t.File, t.Line, field, format, args...) }
			if t.Request != first.Request {
				bad("request", "differs from the request of %s (%s:%d), which shares avt_id %q", first.ID, first.File, first.Line, t.AVTID)
			}
			if t.Record.DB != first.Record.DB {
				bad("db", "differs from the db of %s, which shares avt_id %q", first.ID, t.AVTID)
			}
			if !sameTerms(t.Ambiguities, first.Ambiguities) {
				bad("ambiguities", "terms and kinds differ from those of %s, which shares avt_id %q", first.ID, t.AVTID)
			}
		}
	}
}

func sameTerms(a, b []Ambiguity) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Term != b[i].Term || a[i].Kind != b[i].Kind {
			return false
		}
	}
	return true
}

// checkReferences runs every reference once, concurrently, which also
// fills the corpus's reference cache under the key sqlexec.Check uses, so
// that episodes never run a reference again (nor under their own, possibly
// smaller, limits).
func (l *loader) checkReferences(ctx context.Context, c *Corpus) {
	var (
		mu   sync.Mutex
		done int
	)
	parallel.For(ctx, len(c.Tasks), runtime.GOMAXPROCS(0), func(ctx context.Context, i int) error {
		t := c.Tasks[i]
		if t.Stateful() {
			l.checkStatefulReference(ctx, t)
			l.progress(&mu, &done, len(c.Tasks))
			return nil
		}
		res, err := c.Cache.Get(ctx, sqlexec.CacheKey(t.RefKey, t.Policy), func(ctx context.Context) (*sqlexec.Result, error) {
			return t.DB.Engine.Query(ctx, t.Policy.Rewrite(t.ReferenceSQL), l.opt.Limits)
		})
		switch {
		case err != nil:
			l.problem(t.File, t.Line, "reference.sql", "%v", err)
		case t.Policy.EmptyFails && len(res.Rows) == 0:
			l.problem(t.File, t.Line, "reference.sql", "returns no rows, but the comparison policy fails empty results")
		}
		if t.Drift != nil {
			res, err := c.Cache.Get(ctx, sqlexec.CacheKey(t.DriftKey(), t.DriftPolicy), func(ctx context.Context) (*sqlexec.Result, error) {
				return t.DB.Engine.Query(ctx, t.DriftPolicy.Rewrite(t.DriftSQL()), l.opt.Limits)
			})
			switch {
			case err != nil:
				l.problem(t.File, t.Line, "drift.reference.sql", "%v", err)
			case t.DriftPolicy.EmptyFails && len(res.Rows) == 0:
				l.problem(t.File, t.Line, "drift.reference.sql", "returns no rows, but the comparison policy fails empty results")
			}
		}
		l.progress(&mu, &done, len(c.Tasks))
		return nil
	})
}

// progress counts one checked reference.
func (l *loader) progress(mu *sync.Mutex, done *int, total int) {
	if l.opt.Progress == nil {
		return
	}
	mu.Lock()
	*done++
	l.opt.Progress(*done, total)
	mu.Unlock()
}

// checkStatefulReference verifies a stateful record's reference against
// itself on a private copy: it must run, and pass its own checks or tests.
func (l *loader) checkStatefulReference(ctx context.Context, t *Task) {
	if t.DB.Stateful == nil {
		l.problem(t.File, t.Line, "category", "database %q cannot verify state-changing tasks", t.Record.DB)
		return
	}
	v, err := t.DB.Stateful.Verify(ctx, t.Job(nil, t.ReferenceSQL, l.opt.Limits))
	switch {
	case err != nil:
		l.problem(t.File, t.Line, "reference", "verifying the reference on a private copy of the database: %v", err)
	case !v.Success:
		l.problem(t.File, t.Line, "reference", "the reference fails its own verification on a private copy of the database: %s", v.Reason)
	}
}

// resolvePolicy applies a record's comparison fields over the corpus
// defaults over the built-in default.
func resolvePolicy(defaults, own *Comparison) (sqlexec.Policy, error) {
	p := sqlexec.DefaultPolicy()
	for _, c := range []*Comparison{defaults, own} {
		if c == nil {
			continue
		}
		if c.Order != "" {
			o, err := sqlexec.ParseOrder(c.Order)
			if err != nil {
				return p, fmt.Errorf("order: %v", err)
			}
			p.Order = o
		}
		if c.Decimals != nil {
			if *c.Decimals < 0 || *c.Decimals > 12 {
				return p, fmt.Errorf("decimals: %d is outside 0..12", *c.Decimals)
			}
			p.Decimals = *c.Decimals
		}
		set := func(dst *bool, src *bool) {
			if src != nil {
				*dst = *src
			}
		}
		set(&p.StripComments, c.StripComments)
		set(&p.StripDistinct, c.StripDistinct)
		set(&p.StripRound, c.StripRound)
		set(&p.EmptyFails, c.EmptyFails)
		set(&p.DateOnly, c.DateOnly)
		set(&p.CanonicalJSON, c.CanonicalJSON)
		switch c.Harness {
		case "":
		case "bird-interact":
			p.BirdInteract = true
		default:
			return p, fmt.Errorf("harness: unknown harness %q (want \"bird-interact\" or none)", c.Harness)
		}
	}
	return p, nil
}

func hasKnowledge(ks []KnowledgeEntry, id string) bool {
	for _, k := range ks {
		if k.ID == id {
			return true
		}
	}
	return false
}

func hasWord(s string) bool {
	for _, r := range s {
		if isWordRune(r) {
			return true
		}
	}
	return false
}

// describeJSONError turns a decoding error into a line (relative to the
// start of b, 0 when unknown), a field and a message.
func describeJSONError(b []byte, err error) (line int, field, msg string) {
	var (
		syn *json.SyntaxError
		typ *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syn):
		return lineOf(b, syn.Offset), "", "invalid JSON: " + syn.Error()
	case errors.As(err, &typ):
		return lineOf(b, typ.Offset), typ.Field, fmt.Sprintf("want %s, got JSON %s", typ.Type, typ.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return 0, "", "invalid JSON: unexpected end of input"
	}
	s := err.Error()
	if f, ok := strings.CutPrefix(s, "json: unknown field "); ok {
		return 0, strings.Trim(f, `"`), "unknown field (misspelt?)"
	}
	if i := strings.Index(s, "Go struct field "); i >= 0 {
		// "json: cannot unmarshal ... into Go struct field Record.reference.sql of type ...: want ..."
		rest := s[i+len("Go struct field "):]
		if j := strings.Index(rest, " "); j > 0 {
			f := rest[:j]
			if k := strings.Index(f, "."); k >= 0 {
				f = f[k+1:]
			}
			if k := strings.LastIndex(s, ": "); k >= 0 {
				return 0, f, s[k+2:]
			}
			return 0, f, s
		}
	}
	return 0, "", s
}

func lineOf(b []byte, off int64) int {
	if off > int64(len(b)) {
		off = int64(len(b))
	}
	return 1 + bytes.Count(b[:off], []byte("\n"))
}

func sortProblems(ps []Problem) {
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].File != ps[j].File {
			return ps[i].File < ps[j].File
		}
		return ps[i].Line < ps[j].Line
	})
}

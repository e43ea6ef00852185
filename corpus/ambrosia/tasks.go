package ambrosia

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// TasksFile is the name of the AMBROSIA validation split's tasks file
// inside the input directory (see ../shared/data/README.md). Every split
// has one such file, named by TasksFileOf.
const TasksFile = "tasks_validation.jsonl"

// splitName is what a split may be called: the NAME of tasks_NAME.jsonl.
var splitName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// tasksFileName matches the name of a split's tasks file.
var tasksFileName = regexp.MustCompile(`^tasks_([A-Za-z0-9][A-Za-z0-9_-]*)\.jsonl$`)

// TasksFileOf returns the tasks file name of a split ("test" →
// "tasks_test.jsonl").
func TasksFileOf(split string) string { return "tasks_" + split + ".jsonl" }

// SplitFile is one split's tasks file inside the input directory.
type SplitFile struct {
	// Split is the split's name: the NAME of tasks_NAME.jsonl.
	Split string
	// File is the file name (not a path).
	File string
}

// FindSplits lists the tasks files of the input directory in: with split
// set, that split's file (which must exist); otherwise every file named
// tasks_NAME.jsonl, sorted by name. It fails when there is none.
func FindSplits(in, split string) ([]SplitFile, error) {
	if split != "" {
		if !splitName.MatchString(split) {
			return nil, fmt.Errorf("ambrosia: bad split name %q (letters, digits, '_' and '-' only)", split)
		}
		f := TasksFileOf(split)
		if _, err := os.Stat(filepath.Join(in, f)); err != nil {
			return nil, fmt.Errorf("ambrosia: split %q: tasks file: %w", split, err)
		}
		return []SplitFile{{Split: split, File: f}}, nil
	}
	ents, err := os.ReadDir(in)
	if err != nil {
		return nil, fmt.Errorf("ambrosia: input directory: %w", err)
	}
	var out []SplitFile
	for _, e := range ents {
		if m := tasksFileName.FindStringSubmatch(e.Name()); m != nil && !e.IsDir() {
			out = append(out, SplitFile{Split: m[1], File: e.Name()})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("ambrosia: no tasks file (tasks_NAME.jsonl, such as %s) in %s: %w", TasksFile, in, os.ErrNotExist)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out, nil
}

// ReadSplits reads the tasks files of FindSplits(in, split) in order and
// returns their tasks in file order. A task without a split field takes
// its file's split. An id used in two files is an error naming both, so
// that ids (and the record ids derived from them) stay unique across
// splits.
func ReadSplits(in, split string) ([]Task, []SplitFile, error) {
	files, err := FindSplits(in, split)
	if err != nil {
		return nil, nil, err
	}
	var all []Task
	where := map[string]string{}
	for _, sf := range files {
		tasks, err := ReadTasks(filepath.Join(in, sf.File))
		if err != nil {
			return nil, nil, err
		}
		for i := range tasks {
			t := &tasks[i]
			t.File = sf.File
			if t.Split == "" {
				t.Split = sf.Split
			}
			at := fmt.Sprintf("%s:%d", sf.File, t.Line)
			if prev, ok := where[t.ID]; ok {
				return nil, nil, fmt.Errorf("%s: record %s: id already used at %s (ids must be unique across splits)", at, t.ID, prev)
			}
			where[t.ID] = at
		}
		all = append(all, tasks...)
	}
	return all, files, nil
}

// MarkedUnusable reports whether the benchmark itself marks an ambiguous
// question unusable: its interpretations' gold results are not pairwise
// distinct (gold_results_pairwise_distinct = false), or its database did
// not rebuild cleanly (db_rebuild_clean = false), so that a reference may
// fail. The importer rejects only such questions in the real data; see
// docs/ambrosia.md.
func (t *Task) MarkedUnusable() bool {
	return t.GoldResultsPairwiseDistinct != nil && !*t.GoldResultsPairwiseDistinct ||
		t.DBRebuildClean != nil && !*t.DBRebuildClean
}

// Flags renders the benchmark's usability flags of t, such as
// "gold_results_pairwise_distinct=false, db_rebuild_clean=true" (a flag
// absent from the record is left out).
func (t *Task) Flags() string {
	var parts []string
	if t.GoldResultsPairwiseDistinct != nil {
		parts = append(parts, fmt.Sprintf("gold_results_pairwise_distinct=%t", *t.GoldResultsPairwiseDistinct))
	}
	if t.DBRebuildClean != nil {
		parts = append(parts, fmt.Sprintf("db_rebuild_clean=%t", *t.DBRebuildClean))
	}
	if len(parts) == 0 {
		return "no usability flags"
	}
	return strings.Join(parts, ", ")
}

// Task is one line of the AMBROSIA tasks file.
type Task struct {
	// ID is the benchmark's id, such as "ambrosia-validation-0001".
	ID string `json:"id"`
	// Split is the benchmark split ("validation", "test"). ReadSplits
	// sets it to the file's split when the record has none.
	Split string `json:"split"`
	// Domain is the database's domain ("Hospitality").
	Domain string `json:"domain"`
	// DBFile is the database file, relative to the dbs/ folder.
	DBFile string `json:"db_file"`
	// Question is the natural-language question.
	Question string `json:"question"`
	// IsAmbiguous marks the ambiguous questions (the only ones imported).
	IsAmbiguous bool `json:"is_ambiguous"`
	// AmbigType is "scope", "attachment" or "vague".
	AmbigType string `json:"ambig_type"`
	// GoldQueries are the reference SQL of each interpretation.
	GoldQueries []string `json:"gold_queries"`
	// LinkedInterpretations are the interpretations of an ambiguous
	// question: the question and SQL of the unambiguous record each
	// interpretation is.
	LinkedInterpretations []Interpretation `json:"linked_interpretations"`
	// DBRebuildClean is false when the database's dump did not rebuild
	// completely (informative only).
	DBRebuildClean *bool `json:"db_rebuild_clean"`
	// GoldResultsPairwiseDistinct says whether the interpretations'
	// results differ, as the data set computed it (informative only).
	GoldResultsPairwiseDistinct *bool `json:"gold_results_pairwise_distinct"`

	// Line is the task's line in the tasks file (set by ReadTasks).
	Line int `json:"-"`
	// File is the tasks file's name (set by ReadSplits).
	File string `json:"-"`
}

// Interpretation is one linked interpretation of an ambiguous question.
type Interpretation struct {
	// Question is the unambiguous question stating the interpretation.
	Question string `json:"question"`
	// SQL is the interpretation's reference SQL.
	SQL string `json:"sql"`
}

// ReadTasks reads an AMBROSIA tasks file. A line that is not a JSON object
// of the expected shape, or that lacks an id, fails the whole read with an
// error naming the file, the line and (when known) the record id.
func ReadTasks(path string) ([]Task, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ambrosia: tasks file: %w", err)
	}
	defer f.Close()
	var tasks []Task
	seen := map[string]int{}
	r := bufio.NewReaderSize(f, 1<<20)
	for lineNo := 1; ; lineNo++ {
		line, rerr := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var t Task
			dec := json.NewDecoder(bytes.NewReader(line))
			if err := dec.Decode(&t); err != nil {
				return nil, fmt.Errorf("%s:%d: invalid JSON%s: %v", path, lineNo, idHint(line), err)
			}
			if dec.More() {
				return nil, fmt.Errorf("%s:%d: more than one JSON value on the line%s", path, lineNo, idHint(line))
			}
			t.Line = lineNo
			switch {
			case strings.TrimSpace(t.ID) == "":
				return nil, fmt.Errorf("%s:%d: record has no id", path, lineNo)
			case seen[t.ID] > 0:
				return nil, fmt.Errorf("%s:%d: record %s: id already used on line %d", path, lineNo, t.ID, seen[t.ID])
			}
			seen[t.ID] = lineNo
			tasks = append(tasks, t)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, lineNo, rerr)
		}
	}
	return tasks, nil
}

// idHint extracts a record id from a broken line, for error messages.
func idHint(line []byte) string {
	const key = `"id":`
	i := bytes.Index(line, []byte(key))
	if i < 0 {
		return ""
	}
	rest := bytes.TrimLeft(line[i+len(key):], " ")
	if len(rest) == 0 || rest[0] != '"' {
		return ""
	}
	j := bytes.IndexByte(rest[1:], '"')
	if j < 0 || j > 100 {
		return ""
	}
	return fmt.Sprintf(" (record %s)", rest[1:1+j])
}

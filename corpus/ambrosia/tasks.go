package ambrosia

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// TasksFile is the name of the AMBROSIA tasks file inside the input
// directory (see ../shared/data/README.md).
const TasksFile = "tasks_validation.jsonl"

// Task is one line of the AMBROSIA tasks file.
type Task struct {
	// ID is the benchmark's id, such as "ambrosia-validation-0001".
	ID string `json:"id"`
	// Split is the benchmark split ("validation").
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

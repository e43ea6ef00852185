package record

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// What a path of records is (Files).
const (
	// KindRecordFile is one JSON Lines file of records (rollout
	// --episodes-out, avtgym.records).
	KindRecordFile = "record file"
	// KindEvalRun is an eval output directory: its episodes.jsonl.
	KindEvalRun = "eval run"
	// KindEpisodeLog is a serve --episode-log directory: its
	// episodes-*.jsonl, where a key's last line is the one that counts.
	KindEpisodeLog = "episode log"
)

// EvalFile is the records file of an eval output directory.
const EvalFile = "episodes.jsonl"

// Files says which record files path stands for, and what kind of run it
// is: the readers of records (avtgym view, avtgym reverify) take the same
// paths. An episode log's files come in name order, which is each
// replica's oldest first, so that a later line of a key is read after the
// earlier one.
func Files(path string) ([]string, string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, "", err
	}
	if !st.IsDir() {
		return []string{path}, KindRecordFile, nil
	}
	evalFile := filepath.Join(path, EvalFile)
	if _, err := os.Stat(evalFile); err == nil {
		return []string{evalFile}, KindEvalRun, nil
	}
	logs, err := filepath.Glob(filepath.Join(path, "episodes-*.jsonl"))
	if err != nil {
		return nil, "", err
	}
	if len(logs) == 0 {
		return nil, "", fmt.Errorf("%s: neither an eval run directory (no %s) nor an episode-log directory (no episodes-*.jsonl)", path, EvalFile)
	}
	sort.Strings(logs)
	return logs, KindEpisodeLog, nil
}

package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"avtgym/driver"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// WrongReadingName is the name of the wrong-reading policy.
const WrongReadingName = "wrong-reading"

// Reading is one entry of a wrong-readings file: the SQL of another
// reading of a task's request, and why it is another reading.
type Reading struct {
	SQL string `json:"sql"`
	Why string `json:"why,omitempty"`
}

// ReadingsFile is the format of a wrong-readings file
// (fixtures/wrong-readings/*.json): per task id of one corpus, the phase-1
// SQL of a reading other than the task's.
type ReadingsFile struct {
	Corpus   string             `json:"corpus"`
	Readings map[string]Reading `json:"readings"`
}

// WrongReading is the wrong-reading baseline of issue 15: it asks like the
// full policy (each counted term's canonical question), then submits the
// SQL of another reading of the request, read from a wrong-readings file,
// so that the sub-task fails however well it asked. Under BIRD_C it
// submits that SQL again on the debug retry (phase 1 scores 0 and the
// follow-up is never released); should the follow-up be released all the
// same, it submits the follow-up's reference. Under AMBITAB it needs the
// client as solver (the outcome reward with --solver client), stops after
// its questions and submits the wrong SQL. Make one with LoadWrongReadings.
type WrongReading struct {
	path string
	f    ReadingsFile
}

// LoadWrongReadings reads a wrong-readings file.
func LoadWrongReadings(path string) (*WrongReading, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("wrong readings: %w", err)
	}
	var f ReadingsFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("wrong readings %s: %w", path, err)
	}
	if len(f.Readings) == 0 {
		return nil, fmt.Errorf("wrong readings %s: no readings", path)
	}
	for id, r := range f.Readings {
		if strings.TrimSpace(r.SQL) == "" {
			return nil, fmt.Errorf("wrong readings %s: task %q has no SQL", path, id)
		}
	}
	return &WrongReading{path: path, f: f}, nil
}

// Name implements Player.
func (w *WrongReading) Name() string { return WrongReadingName }

// Path is the file the readings were read from.
func (w *WrongReading) Path() string { return w.path }

// Readings are the file's readings by task id.
func (w *WrongReading) Readings() map[string]Reading { return w.f.Readings }

// CheckTasks implements TaskChecker: every task to be played must have a
// reading in the file, of the file's corpus.
func (w *WrongReading) CheckTasks(tasks []*pb.TaskSummary) error {
	var missing []string
	for _, t := range tasks {
		if w.f.Corpus != "" && t.GetCorpus() != "" && t.GetCorpus() != w.f.Corpus {
			return fmt.Errorf("the wrong-readings file %s is for corpus %q, not %q (task %s)", w.path, w.f.Corpus, t.GetCorpus(), t.GetTaskId())
		}
		if _, ok := w.f.Readings[t.GetTaskId()]; !ok {
			missing = append(missing, t.GetTaskId())
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	more := ""
	if len(missing) > 1 {
		more = fmt.Sprintf(" (and %d other task(s): %s)", len(missing)-1, strings.Join(missing[1:min(len(missing), 6)], ", "))
		if len(missing) > 6 {
			more = strings.TrimSuffix(more, ")") + ", …)"
		}
	}
	return fmt.Errorf("the wrong-readings file %s has no reading for task %s%s", w.path, missing[0], more)
}

// Play implements Player.
func (w *WrongReading) Play(ctx context.Context, ep *driver.Episode) error {
	task := ep.Reset().GetObservation().GetTask()
	r, ok := w.f.Readings[task.GetTaskId()]
	if !ok {
		return &AskerError{Err: fmt.Errorf("the wrong-readings file %s has no reading for task %s (corpus %s)", w.path, task.GetTaskId(), task.GetCorpus())}
	}
	if !ep.NeedsSQL() {
		return &AskerError{Err: fmt.Errorf("the wrong-reading policy writes its own SQL: play it under bird-c, or with the outcome reward and the client as solver")}
	}
	qs := probe.Questions(probe.Full, ep.Terms(), ep.Budget())
	if ep.Protocol() == pb.Protocol_PROTOCOL_BIRD_A {
		return w.playBirdA(ctx, ep, qs, r.SQL)
	}
	return Solve(ctx, ep, qs, func(ep *driver.Episode) (string, error) {
		if ep.Subtask() >= 2 {
			return ReferenceSQL(ep)
		}
		return r.SQL, nil
	})
}

// TaskChecker is a Player that can say, before a run, whether it can play
// the run's tasks (the wrong-reading policy needs a reading for each):
// Rollout and eval call it once and stop with its error.
type TaskChecker interface {
	CheckTasks(tasks []*pb.TaskSummary) error
}

// playBirdA plays the wrong reading under BIRD_A: the full policy's
// questions (while the coins left after each still pay for a submission),
// the wrong SQL once, then a stop, which ends the episode with phase 1
// unsolved (BIRD_A would take more submissions while coins last; this
// baseline does not retry). Should the follow-up be released all the
// same, it submits the follow-up's reference.
func (w *WrongReading) playBirdA(ctx context.Context, ep *driver.Episode, qs []string, wrong string) error {
	submitted := false
	return Solve(ctx, ep, qs, func(ep *driver.Episode) (string, error) {
		if ep.Subtask() >= 2 {
			return ReferenceSQL(ep)
		}
		if submitted {
			return "", errStopNow
		}
		submitted = true
		return wrong, nil
	})
}

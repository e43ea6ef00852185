package viewer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"avtgym/record"
	"avtgym/schema"

	"golang.org/x/sync/errgroup"
)

// maxLineBytes bounds one record line, as schema.ValidateLines does: a
// longer line is an error rather than an unbounded allocation.
const maxLineBytes = 64 << 20

// Kinds of run, by what its PATH held.
const (
	KindRecordFile = record.KindRecordFile
	KindEvalRun    = record.KindEvalRun
	KindEpisodeLog = record.KindEpisodeLog
)

// Run is one PATH given to the viewer: its records indexed as summaries,
// with the files they are read back from for the episode page.
type Run struct {
	// Name is the run's name in URLs: the PATH's base name (".jsonl"
	// dropped), made unique by New.
	Name string
	// Path is the PATH as given; Kind says what it held.
	Path, Kind string
	// Files are the record files, in the order they were read.
	Files []string
	// Episodes are the records in file order (for an episode log, one per
	// key: the last line of each key, at the place of its first).
	Episodes []Summary
	// Superseded counts episode-log lines replaced by a later line with
	// the same key.
	Superseded int
	// TagKeys are the tag keys any record carries, sorted.
	TagKeys []string
	// Protocols, Statuses and Conditions are the values present, sorted,
	// for the filter form.
	Protocols, Statuses, Conditions []string
	// Bytes is the size of the files read; LoadTime how long indexing took.
	Bytes    int64
	LoadTime time.Duration

	files []*os.File
}

// Summary is what the list, stats and compare pages need of one record;
// the full record stays in its file (File, Offset, Length) until the
// episode page reads it, so that a run of 100k records costs tens of
// megabytes, not the records' size.
type Summary struct {
	File      int32 // index into Run.Files
	Line      int32 // line number in that file, from 1
	Length    int32
	Questions int32
	Offset    int64
	Seed      uint64
	// Reward, F1 and Success are NaN where the record has null.
	Reward, F1, Success                                           float64
	TaskID, AVTID, DB, Split, Protocol, Status, Condition, Oracle string
	EpisodeID, EpisodeUID                                         string
	// Tags are sorted by key.
	Tags         []Tag
	FallbackStop bool
	Privileged   bool
}

// Tag is one trainer tag.
type Tag struct{ Key, Value string }

// Scored reports whether the episode counts in metrics (TERMINATED or
// TRUNCATED), as driver.Record.Scored.
func (s *Summary) Scored() bool { return s.Status == "TERMINATED" || s.Status == "TRUNCATED" }

// Tag returns the value of tag key and whether the record has it.
func (s *Summary) Tag(key string) (string, bool) {
	i, ok := slices.BinarySearchFunc(s.Tags, key, func(t Tag, k string) int { return strings.Compare(t.Key, k) })
	if !ok {
		return "", false
	}
	return s.Tags[i].Value, true
}

// indexRecord is the part of a record line the summary keeps; the rest
// of the line is skipped by the decoder without being stored.
type indexRecord struct {
	TaskID       string            `json:"task_id"`
	AVTID        string            `json:"avt_id"`
	DB           string            `json:"db"`
	Split        string            `json:"split"`
	Protocol     string            `json:"protocol"`
	Status       string            `json:"status"`
	Condition    string            `json:"condition"`
	Oracle       string            `json:"oracle"`
	EpisodeID    string            `json:"episode_id"`
	EpisodeUID   string            `json:"episode_uid"`
	Key          string            `json:"key"`
	Seed         uint64            `json:"seed"`
	Reward       *float64          `json:"reward"`
	F1           *float64          `json:"f1"`
	Success      *float64          `json:"success"`
	Questions    arrayLen          `json:"questions"`
	Tags         map[string]string `json:"tags"`
	FallbackStop bool              `json:"fallback_stop"`
	Privileged   presence          `json:"privileged"`
}

// arrayLen decodes a JSON array of strings to its length without
// allocating its elements (the schema has checked it is one).
type arrayLen int

func (n *arrayLen) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '[' {
		*n = 0
		return nil
	}
	count, inString, escaped, nonEmpty := 0, false, false, false
	for _, c := range b[1 : len(b)-1] {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
			nonEmpty = true
		case !inString && c == ',':
			count++
		}
	}
	if nonEmpty {
		count++
	}
	*n = arrayLen(count)
	return nil
}

// presence records whether a field is there and not null, without
// keeping its value (the privileged object can be large).
type presence bool

func (p *presence) UnmarshalJSON(b []byte) error {
	*p = presence(string(bytes.TrimSpace(b)) != "null")
	return nil
}

func nullable(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// LoadRun indexes the records of path: a record file (rollout's
// --episodes-out, any JSON Lines of episode records), an eval run
// directory (its episodes.jsonl) or an episode-log directory (its
// episodes-*.jsonl, one record per key). Every line is checked with
// schema.ValidateRecord; the first bad one fails the load, named
// file:line. progress, when not nil, gets a line per file read.
func LoadRun(ctx context.Context, path string, progress io.Writer) (*Run, error) {
	start := time.Now()
	r := &Run{Path: path, Name: runName(path)}
	files, kind, err := record.Files(path)
	if err != nil {
		return nil, err
	}
	r.Kind, r.Files = kind, files
	keyIndex := map[string]int{} // episode log: key → index in r.Episodes
	in := newInterner()
	for fi, name := range files {
		f, err := os.Open(name)
		if err != nil {
			r.Close()
			return nil, err
		}
		r.files = append(r.files, f)
		t0 := time.Now()
		n := 0
		err = indexFile(ctx, f, name, func(s Summary, key string) {
			n++
			s.File = int32(fi)
			in.summary(&s)
			if kind == KindEpisodeLog && key != "" {
				if i, ok := keyIndex[key]; ok {
					r.Episodes[i] = s
					r.Superseded++
					return
				}
				keyIndex[key] = len(r.Episodes)
			}
			r.Episodes = append(r.Episodes, s)
		})
		if err != nil {
			r.Close()
			return nil, err
		}
		if st, err := f.Stat(); err == nil {
			r.Bytes += st.Size()
		}
		if progress != nil {
			fmt.Fprintf(progress, "viewer: %s: %d records in %s\n", name, n, time.Since(t0).Round(time.Millisecond))
		}
	}
	r.TagKeys, r.Protocols, r.Statuses, r.Conditions = in.sortedTagKeys(), in.values(in.protocols), in.values(in.statuses), in.values(in.conditions)
	r.LoadTime = time.Since(start).Round(time.Millisecond)
	return r, nil
}

// runName is the base name of path, without a ".jsonl" extension, and
// the directory's name for a directory given with a trailing slash.
func runName(path string) string {
	name := filepath.Base(filepath.Clean(path))
	if n := strings.TrimSuffix(name, ".jsonl"); n != "" {
		name = n
	}
	return name
}

// lineBatch is a run of consecutive lines handed to a validating worker.
type lineBatch struct {
	data      []byte
	starts    []int // each line's start in data
	offsets   []int64
	lineNos   []int
	out       []Summary
	keys      []string
	err       error
	processed chan struct{}
}

const batchBytes = 1 << 20

// indexFile reads f's lines in order, validates and summarizes them on
// every core, and calls add for each record in file order. The error, if
// any, is that of the first bad line.
func indexFile(ctx context.Context, f *os.File, name string, add func(Summary, string)) error {
	workers := max(1, runtime.GOMAXPROCS(0))
	g, gctx := errgroup.WithContext(ctx)
	todo := make(chan *lineBatch, workers)
	// ordered carries batches to the collector in file order; the
	// collector waits on each batch's processed channel.
	ordered := make(chan *lineBatch, 2*workers)
	var readErr error
	var stop sync.Once
	stopped := make(chan struct{})
	halt := func() { stop.Do(func() { close(stopped) }) }

	g.Go(func() error {
		defer close(todo)
		defer close(ordered)
		br := bufio.NewReaderSize(f, 1<<20)
		var offset int64
		line := 0
		b := &lineBatch{processed: make(chan struct{})}
		flush := func() bool {
			if len(b.starts) == 0 {
				return true
			}
			select {
			case ordered <- b:
			case <-stopped:
				return false
			case <-gctx.Done():
				return false
			}
			select {
			case todo <- b:
			case <-stopped:
				return false
			case <-gctx.Done():
				return false
			}
			b = &lineBatch{processed: make(chan struct{})}
			return true
		}
		for {
			raw, err := readLine(br)
			if len(raw) > 0 || err == nil {
				line++
				start := offset
				offset += int64(len(raw))
				if len(raw) > maxLineBytes {
					readErr = fmt.Errorf("%s:%d: line longer than %d MiB", name, line, maxLineBytes>>20)
					return nil
				}
				text := bytes.TrimRight(raw, "\r\n")
				lead := len(text) - len(bytes.TrimLeft(text, " \t"))
				text = bytes.TrimSpace(text)
				if len(text) > 0 {
					b.starts = append(b.starts, len(b.data))
					b.data = append(b.data, text...)
					b.offsets = append(b.offsets, start+int64(lead))
					b.lineNos = append(b.lineNos, line)
					if len(b.data) >= batchBytes && !flush() {
						return nil
					}
				}
			}
			if err == io.EOF {
				flush()
				return nil
			}
			if err != nil {
				readErr = fmt.Errorf("%s:%d: %w", name, line+1, err)
				return nil
			}
		}
	})
	for range workers {
		g.Go(func() error {
			for b := range todo {
				b.process(name)
				close(b.processed)
			}
			return nil
		})
	}
	var firstErr error
	g.Go(func() error {
		for b := range ordered {
			select {
			case <-b.processed:
			case <-gctx.Done():
				return gctx.Err()
			}
			if b.err != nil {
				// Batches before this one were all handed out earlier and
				// came first here, so this is the file's first bad line.
				firstErr = b.err
				halt()
				// Drain so the reader is not left blocked.
				for range ordered {
				}
				return nil
			}
			for i, s := range b.out {
				add(s, b.keys[i])
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if firstErr != nil {
		return firstErr
	}
	if readErr != nil {
		return readErr
	}
	return ctx.Err()
}

// readLine returns the next line with its newline, however long (up to
// maxLineBytes+1, after which it stops growing and the caller fails).
func readLine(br *bufio.Reader) ([]byte, error) {
	b, err := br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return b, err
	}
	long := append([]byte(nil), b...)
	for errors.Is(err, bufio.ErrBufferFull) && len(long) <= maxLineBytes {
		b, err = br.ReadSlice('\n')
		long = append(long, b...)
	}
	for errors.Is(err, bufio.ErrBufferFull) { // too long: skip to its end
		_, err = br.ReadSlice('\n')
	}
	return long, err
}

// process validates and summarizes the batch's lines, stopping at the
// first bad one.
func (b *lineBatch) process(name string) {
	b.out = make([]Summary, 0, len(b.starts))
	b.keys = make([]string, 0, len(b.starts))
	for i, start := range b.starts {
		end := len(b.data)
		if i+1 < len(b.starts) {
			end = b.starts[i+1]
		}
		text := b.data[start:end]
		line := b.lineNos[i]
		if err := schema.ValidateRecord(text); err != nil {
			b.err = fmt.Errorf("%s:%d: not an episode record (schema/episode.v1.json): %s", name, line, oneLine(err.Error()))
			return
		}
		var rec indexRecord
		if err := json.Unmarshal(text, &rec); err != nil {
			b.err = fmt.Errorf("%s:%d: %w", name, line, err)
			return
		}
		s := Summary{
			Line: int32(line), Offset: b.offsets[i], Length: int32(len(text)), Questions: int32(rec.Questions),
			Seed: rec.Seed, Reward: nullable(rec.Reward), F1: nullable(rec.F1), Success: nullable(rec.Success),
			TaskID: rec.TaskID, AVTID: rec.AVTID, DB: rec.DB, Split: rec.Split, Protocol: rec.Protocol, Status: rec.Status,
			Condition: rec.Condition, Oracle: rec.Oracle, EpisodeID: rec.EpisodeID, EpisodeUID: rec.EpisodeUID,
			FallbackStop: rec.FallbackStop, Privileged: bool(rec.Privileged),
		}
		if len(rec.Tags) > 0 {
			s.Tags = make([]Tag, 0, len(rec.Tags))
			for k, v := range rec.Tags {
				s.Tags = append(s.Tags, Tag{k, v})
			}
			slices.SortFunc(s.Tags, func(a, b Tag) int { return strings.Compare(a.Key, b.Key) })
		}
		b.out = append(b.out, s)
		b.keys = append(b.keys, rec.Key)
	}
	b.data = nil // the text is no longer needed once summarized
}

// oneLine folds a multi-line validation error into one line for the
// start-up message.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// interner shares the strings that repeat across records (task ids,
// statuses, tag keys and values), so that 100k summaries hold each once.
type interner struct {
	strs                            map[string]string
	tagKeys                         map[string]bool
	protocols, statuses, conditions map[string]bool
}

func newInterner() *interner {
	return &interner{strs: map[string]string{}, tagKeys: map[string]bool{}, protocols: map[string]bool{}, statuses: map[string]bool{}, conditions: map[string]bool{}}
}

func (in *interner) str(s string) string {
	if v, ok := in.strs[s]; ok {
		return v
	}
	in.strs[s] = s
	return s
}

func (in *interner) summary(s *Summary) {
	for _, p := range []*string{&s.TaskID, &s.AVTID, &s.DB, &s.Split, &s.Protocol, &s.Status, &s.Condition, &s.Oracle} {
		*p = in.str(*p)
	}
	for i := range s.Tags {
		s.Tags[i].Key, s.Tags[i].Value = in.str(s.Tags[i].Key), in.str(s.Tags[i].Value)
		in.tagKeys[s.Tags[i].Key] = true
	}
	in.protocols[s.Protocol], in.statuses[s.Status], in.conditions[s.Condition] = true, true, true
}

func (in *interner) sortedTagKeys() []string { return in.values(in.tagKeys) }

func (in *interner) values(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Record reads episode i's full record from its file.
func (r *Run) Record(i int) (*FullRecord, []byte, error) {
	if i < 0 || i >= len(r.Episodes) {
		return nil, nil, fmt.Errorf("run %s has no episode %d", r.Name, i)
	}
	s := &r.Episodes[i]
	buf := make([]byte, s.Length)
	if _, err := r.files[s.File].ReadAt(buf, s.Offset); err != nil {
		return nil, nil, fmt.Errorf("%s:%d: %w", r.Files[s.File], s.Line, err)
	}
	var rec FullRecord
	if err := json.Unmarshal(buf, &rec); err != nil {
		return nil, nil, fmt.Errorf("%s:%d: the file changed since it was loaded: %w", r.Files[s.File], s.Line, err)
	}
	return &rec, buf, nil
}

// Close closes the run's files.
func (r *Run) Close() error {
	var errs []error
	for _, f := range r.files {
		errs = append(errs, f.Close())
	}
	r.files = nil
	return errors.Join(errs...)
}

package server

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"avtgym/env"
	"avtgym/internal/buildinfo"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/record"
)

// Episode log defaults.
const (
	// DefaultEpisodeLogMaxBytes is the size at which an episode log file
	// is closed and the next one opened.
	DefaultEpisodeLogMaxBytes = 256 << 20
	// DefaultEpisodeLogDedupWindow is how many recent keys a replica
	// remembers to drop duplicates (about 40 bytes each, twice over).
	DefaultEpisodeLogDedupWindow = 1 << 18
)

// EpisodeLogOptions configure an EpisodeLog.
type EpisodeLogOptions struct {
	// MaxBytes rotates files at this size; zero means
	// DefaultEpisodeLogMaxBytes.
	MaxBytes int64
	// DedupWindow is how many of the most recent keys are remembered; zero
	// means DefaultEpisodeLogDedupWindow.
	DedupWindow int
	// Replica names this process in file names and lines; empty means
	// HOSTNAME-PID.
	Replica string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Create creates a new log file for appending (it must not exist);
	// nil means the file system (os.OpenFile with O_CREATE|O_EXCL|O_APPEND).
	// Tests inject one that fails writes.
	Create func(name string) (EpisodeLogFile, error)
}

// EpisodeLogFile is a file the episode log appends to: an *os.File in
// production.
type EpisodeLogFile interface {
	// Write appends b; a short or failed write may have appended a prefix
	// of it.
	Write(b []byte) (int, error)
	// Truncate cuts the file to size bytes.
	Truncate(size int64) error
	Sync() error
	Close() error
}

// EpisodeLogStats are an EpisodeLog's counters.
type EpisodeLogStats struct {
	// Written counts the lines written; Duplicates the episodes not
	// written because their key was written recently.
	Written, Duplicates uint64
	// Dropped counts the finished episodes the log failed to write (a
	// full disk, a file that would not open or close, a closed log): each
	// is missing from the files, and no part of it is left in them (but
	// for the torn line of a file abandoned when even cutting it failed).
	Dropped uint64
}

func createFile(name string) (EpisodeLogFile, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
}

// EpisodeLog writes every finished episode, once, as a line of JSON to
// rotating files (serve --episode-log DIR): the trainer-side record, with
// the transcript, roles, reward and privileged data.
//
// Files are named episodes-REPLICA-START-SEQ.jsonl, so that replicas
// sharing a directory each write their own. The same episode finishes many
// times (a retried final step, a fork from an earlier token that ends the
// same way), and every line carries a key that is the same exactly when
// the task, seed, options and transcript are: KEY = EPISODE_ID "#" and 32
// hex digits of a SHA-256 over the options and the transcript. Each
// replica writes a key at most once within its last DedupWindow keys;
// across replicas and restarts, readers keep one line per key
// (jq -c 'select(...)' | sort -u, or a unique index on it).
//
// A file holds whole lines only, even on a full disk: each line is written
// by one Write call, and a write that fails or comes up short is cut off
// again (the file truncated back to the end of the last whole line, whose
// offset the log keeps), so that the next line starts on a line of its
// own; the episode is counted in EpisodeLogStats.Dropped (and
// avtgym_episode_log_dropped_total), and is not remembered as written, so
// that its retry is written once there is room again. Should the truncation
// fail too, the file is abandoned with its torn last line (closed, nothing
// more appended to it) and the next line opens a new file.
type EpisodeLog struct {
	dir     string
	opt     EpisodeLogOptions
	replica string
	start   string

	mu sync.Mutex
	f  EpisodeLogFile // nil after a failure: the next write opens a new file
	// size is the length of f: the end of its last whole line.
	size      int64
	seq       int
	seen, old map[[16]byte]struct{}
	closed    bool

	written, duplicates, dropped uint64
}

// OpenEpisodeLog creates dir if needed and opens the first file.
func OpenEpisodeLog(dir string, opt EpisodeLogOptions) (*EpisodeLog, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultEpisodeLogMaxBytes
	}
	if opt.DedupWindow <= 0 {
		opt.DedupWindow = DefaultEpisodeLogDedupWindow
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Create == nil {
		opt.Create = createFile
	}
	if opt.Replica == "" {
		host, _ := os.Hostname()
		opt.Replica = host + "-" + strconv.Itoa(os.Getpid())
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("episode log: %w", err)
	}
	l := &EpisodeLog{dir: dir, opt: opt, replica: opt.Replica, start: opt.Now().UTC().Format("20060102T150405Z"),
		seen: map[[16]byte]struct{}{}, old: map[[16]byte]struct{}{}}
	if err := l.rotate(); err != nil {
		return nil, err
	}
	return l, nil
}

// safeName keeps a file-name part to letters, digits, '.', '_' and '-'.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, s)
}

// rotate closes the current file, if any, and opens the next (mu held).
// A file that fails to close is let go all the same, and the next write
// opens the next file.
func (l *EpisodeLog) rotate() error {
	if l.f != nil {
		err := l.f.Close()
		l.f = nil
		if err != nil {
			return fmt.Errorf("episode log: %w", err)
		}
	}
	l.seq++
	name := filepath.Join(l.dir, fmt.Sprintf("episodes-%s-%s-%04d.jsonl", safeName(l.replica), l.start, l.seq))
	f, err := l.opt.Create(name)
	if err != nil {
		return fmt.Errorf("episode log: %w", err)
	}
	l.f, l.size = f, 0
	return nil
}

// write appends one line (ending in a newline) unless its key was written
// recently; it reports whether it wrote. A line it fails to write leaves
// nothing in the file, and is counted dropped.
func (l *EpisodeLog) write(key [16]byte, line []byte) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		l.dropped++
		return false, fmt.Errorf("episode log: closed")
	}
	if _, dup := l.seen[key]; dup {
		l.duplicates++
		return false, nil
	}
	if _, dup := l.old[key]; dup {
		l.duplicates++
		return false, nil
	}
	if l.f == nil || l.size > 0 && l.size+int64(len(line)) > l.opt.MaxBytes {
		if err := l.rotate(); err != nil {
			l.dropped++
			return false, err
		}
	}
	if err := l.append(line); err != nil {
		l.dropped++
		return false, err
	}
	if len(l.seen) >= l.opt.DedupWindow {
		// Two generations: the window is between DedupWindow and twice it.
		l.old, l.seen = l.seen, make(map[[16]byte]struct{}, len(l.seen))
	}
	l.seen[key] = struct{}{}
	l.written++
	return true, nil
}

// append writes line whole, in one Write call, or leaves the file as it
// was (mu held).
func (l *EpisodeLog) append(line []byte) error {
	n, err := l.f.Write(line)
	if err == nil && n == len(line) {
		l.size += int64(n)
		return nil
	}
	if err == nil {
		err = io.ErrShortWrite
	}
	// Cut whatever part of the line reached the file (n may not say: a
	// write that failed may have appended some of it all the same).
	if terr := l.f.Truncate(l.size); terr != nil {
		_ = l.f.Close()
		l.f = nil
		return fmt.Errorf("episode log: %w; cutting the torn line failed too (%v): the file is abandoned, and the next line opens a new one", err, terr)
	}
	return fmt.Errorf("episode log: %w (the line was dropped, and the file keeps only whole lines)", err)
}

// Stats reports the log's counters.
func (l *EpisodeLog) Stats() EpisodeLogStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return EpisodeLogStats{Written: l.written, Duplicates: l.duplicates, Dropped: l.dropped}
}

// Close syncs and closes the current file. It is idempotent.
func (l *EpisodeLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	if l.f == nil {
		return nil
	}
	err := l.f.Sync()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// episodeLine is one line of the episode log: the episode record
// (record.Record, schema/episode.v1.json) with the log's own fields.
type episodeLine struct {
	record.Episode
	// Key identifies the line: the episode uid, "#", and 32 hex digits of
	// a SHA-256 over the options and the transcript (EpisodeLog).
	Key string `json:"key"`
	// Replica is the process that wrote the line; Principal the caller
	// whose step finished the episode.
	Replica   string `json:"replica"`
	Principal string `json:"principal"`
	// Budget and Attempted are the question budget and the questions the
	// policy attempted (an over-budget one included); Verified and Outcome
	// the verdict on the solution the episode ended with (SolutionSQL).
	Budget      int32  `json:"question_budget"`
	Attempted   int32  `json:"questions_attempted"`
	SolutionSQL string `json:"solution_sql"`
	Verified    bool   `json:"verified"`
	Outcome     bool   `json:"outcome"`
}

// logEpisode writes a finished episode: its final state, decoded from the
// response's token, and the final step's turns. Failures are logged, never
// returned: the step has succeeded.
func (s *Server) logEpisode(p *Principal, resp *pb.StepResponse) {
	l := s.opt.EpisodeLog
	tr, err := s.env.Transcript(resp.GetToken())
	if err != nil {
		s.logEpisodeError(err)
		return
	}
	line, key, err := episodeRecord(tr, resp, p, l.replica, l.opt.Now())
	if err != nil {
		s.logEpisodeError(err)
		return
	}
	if _, err := l.write(key, line); err != nil {
		s.logEpisodeError(err)
	}
}

func (s *Server) logEpisodeError(err error) {
	if s.opt.Metrics != nil {
		s.opt.Metrics.episodeLogErrors.Inc()
	}
	s.log.Error("episode log", zap.Error(err))
}

// episodeRecord builds an episode's line and its key. The episode token
// keeps the answered questions (with their credits) but not the earlier
// steps' other turns (SQL and feedback of a failed submission, notices,
// tool calls), so the log's transcript is the request, the dialogue and
// the final step's turns; a client-side writer (rollout, eval) records
// every turn.
func episodeRecord(tr *env.Transcript, resp *pb.StepResponse, p *Principal, replica string, now time.Time) ([]byte, [16]byte, error) {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	num := func(x uint64) { field(strconv.FormatUint(x, 10)) }
	opts := tr.Options
	field(tr.UID)
	field(opts.GetReward().String())
	field(opts.GetSolver().String())
	field(opts.GetOracle().String())
	field(strconv.FormatBool(opts.GetStrictCredit()))
	num(uint64(tr.Budget))
	r := record.Episode{
		Schema: record.Schema, Writer: "serve",
		Corpus: tr.Corpus, TaskID: tr.PublicTaskID, AVTID: tr.Privileged.GetAvtId(), DB: tr.DB, Split: tr.Split,
		EpisodeID: tr.EpisodeID, EpisodeUID: tr.UID, Seed: tr.Seed, GroupIndex: tr.GroupIndex,
		Status: record.StatusName(tr.Status), Questions: []string{}, Replies: []string{}, CreditedTerms: []string{},
		Comparison: record.ComparisonName(opts.GetComparison()), Tags: tr.Tags, Options: record.OptionsOf(opts),
		Privileged: record.PrivilegedJSON(tr.Privileged),
		FinishedAt: now.UTC().Format(time.RFC3339Nano),
		Server:     &record.ServerInfo{Version: buildinfo.Version(), CorpusHash: tr.CorpusHash},
	}
	if r.AVTID == "" {
		r.AVTID = r.TaskID
	}
	if tr.IssuedUnix > 0 {
		r.StartedAt = time.Unix(tr.IssuedUnix, 0).UTC().Format(time.RFC3339Nano)
	}
	if pr := opts.GetProtocol(); pr != pb.Protocol_PROTOCOL_AMBITAB && pr != pb.Protocol_PROTOCOL_UNSPECIFIED {
		r.Protocol = record.ProtocolName(pr)
	}
	for _, a := range tr.Privileged.GetAmbiguities() {
		if a.GetCounted() {
			r.Counted++
		}
	}
	for _, c := range tr.Privileged.GetEpisodeCredits() {
		if c.GetCounted() && !slices.Contains(r.CreditedTerms, c.GetTerm()) {
			r.CreditedTerms = append(r.CreditedTerms, c.GetTerm())
		}
	}
	r.TideLabels(tr.Privileged.GetTide())
	r.Turns = []record.Turn{{Role: "environment", Kind: "request", Text: tr.Request}}
	for _, q := range tr.Dialogue {
		field(q.Question)
		field(q.Reply)
		for _, c := range q.Credits {
			num(uint64(c.GetIndex()))
		}
		field("|")
		r.Questions = append(r.Questions, q.Question)
		r.Replies = append(r.Replies, q.Reply)
		r.Turns = append(r.Turns, record.Turn{Role: "policy", Kind: "question", Text: q.Question},
			record.Turn{Role: "oracle", Text: q.Reply, Credits: record.CreditsOf(q.Credits)})
	}
	for _, t := range resp.GetObservation().GetTurns() {
		rt := record.TurnOf(t, nil)
		field(rt.Role)
		field(rt.Kind)
		field(rt.Text)
		r.Turns = append(r.Turns, rt)
	}
	if tr.Verified {
		r.Verdicts = []record.Verdict{{SQL: tr.SolutionSQL, Reason: tr.Privileged.GetVerifierReason()}}
	}
	if r.Status == "ERROR" {
		r.Error = tr.Privileged.GetVerifierReason()
	}
	r.SetReward(tr.Reward)
	field(tr.Status.String())
	field(tr.SolutionSQL)
	field(strconv.FormatBool(tr.Verified))
	field(strconv.FormatBool(tr.Outcome))
	if rw := tr.Reward; rw != nil {
		num(math.Float64bits(rw.GetValue()))
	}
	var key [16]byte
	copy(key[:], h.Sum(nil))
	line := episodeLine{
		Episode:     r,
		Key:         tr.UID + "#" + hex.EncodeToString(key[:]),
		Replica:     replica,
		Principal:   p.Name,
		Budget:      tr.Budget,
		Attempted:   tr.Attempted,
		SolutionSQL: tr.SolutionSQL,
		Verified:    tr.Verified,
		Outcome:     tr.Outcome,
	}
	b, err := json.Marshal(line)
	if err != nil {
		return nil, key, err
	}
	return append(b, '\n'), key, nil
}

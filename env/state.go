package env

import (
	"encoding/binary"
	"sync"
	"time"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
)

// The episode state (statepb.EpisodeState) travels sealed in the token
// (token.go): seal writes it, open reads and checks it. Its shared fields
// are every protocol's; its rules oneof holds the one message of the
// episode's protocol (protocol.go).

// stateVersion is the layout of statepb.EpisodeState that seal writes and
// open reads. Version 2 (issue 26) keeps each protocol's bookkeeping in its
// own message of the rules oneof, where version 1 kept every protocol's
// side by side; version 3 (issue 31) keeps the answered questions' texts
// in the token's history, after the state. A token of an older version is
// refused, saying so.
const stateVersion = 3

// buffers recycles the plaintext buffers of opening tokens: every step
// opens one.
var buffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// recordHashSize is how much of a task's content hash a token keeps:
// 128 bits tell a changed record apart, and every byte is sent twice per
// step.
const recordHashSize = 16

// recordHash is the part of t's content hash a state keeps, as two words.
func recordHash(t *corpus.Task) (hi, lo uint64) {
	h := t.Hash[:recordHashSize]
	return binary.BigEndian.Uint64(h[:8]), binary.BigEndian.Uint64(h[8:])
}

// seal seals st with its history h into a token: h's sealed chunks are
// copied, its added questions sealed into new chunks (which sets st's
// history length and tag), and st is sealed into the head.
func (e *Env) seal(st *statepb.EpisodeState, h *history) ([]byte, error) {
	hl := h.size()
	st.HistoryBytes = uint32(hl)
	n := st.SizeVT()
	if len(h.added) > 0 && st.HistoryTagHi == 0 {
		// The first chunk: the tag's words are never zero with a history
		// (sealChunk), so the state will hold the two fixed64 fields.
		n += 2 * fixed64Field(54)
	}
	if n > e.maxState || hl > e.maxHistory {
		// Unreachable while limits.go's arithmetic covers every field.
		return nil, errorf(Internal, ReasonInternal, "", "the episode state is %d bytes and its history %d, more than the bounds of %d and %d (env/limits.go)", n, hl, e.maxState, e.maxHistory)
	}
	tok, buf, hist := e.cfg.Sealer.prepare(n, hl)
	h.writeInto(e.cfg.Sealer, st, hist)
	// The generated (non-reflective) vtprotobuf codec writes the state
	// straight into the token: reflection-based proto.Marshal was one of
	// the largest costs of a step (bench/RESULTS.md).
	if _, err := st.MarshalToSizedBufferVT(buf); err != nil {
		return nil, errorf(Internal, ReasonInternal, "", "serialising episode state: %v", err)
	}
	return e.cfg.Sealer.seal(tok), nil
}

// decoded is the storage of a state being decoded, with room for
// AMBITAB's message: vtprotobuf decodes a oneof's message into the one
// already set when it is of that message's type, so the steps of the
// protocol most played allocate no state message (another protocol's
// message replaces it). An AMBITAB state sealed without its message thus
// reads as AMBITAB's empty message, which is what that means.
type decoded struct {
	st      statepb.EpisodeState
	ambitab statepb.EpisodeState_Ambitab
	amb     statepb.AmbiTabState
	// hist is the token's history, unread (it aliases the token).
	hist history
}

// state prepares the storage for decoding and returns the state to decode
// into.
func (d *decoded) state() *statepb.EpisodeState {
	d.ambitab.Ambitab = &d.amb
	d.st.Rules = &d.ambitab
	return &d.st
}

// open decodes and checks a token's state (openInto), and returns it
// with its history.
func (e *Env) open(token []byte) (*statepb.EpisodeState, *history, *corpus.Task, error) {
	d := new(decoded)
	t, err := e.openInto(token, d)
	if err != nil {
		return nil, nil, nil, err
	}
	return &d.st, &d.hist, t, nil
}

// openInto decodes a token's state into d (unused storage) and checks it:
// its version, that its history matches it (checkHead), its protocol's
// rules and state message, the oracle and
// solver it needs, its age, and that its task is served unchanged. It
// returns the task.
func (e *Env) openInto(token []byte, d *decoded) (*corpus.Task, error) {
	if len(token) == 0 {
		return nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "the episode token is missing")
	}
	if len(token) > e.maxToken {
		// Checked before decrypting: no token this server seals is longer.
		return nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "episode token is %d bytes, longer than any token this server issues (%d)", len(token), e.maxToken)
	}
	bp := buffers.Get().(*[]byte)
	defer buffers.Put(bp)
	if cap(*bp) < len(token) {
		// Big enough for any plaintext of this token, so that Open never
		// reallocates and the pooled slice keeps its whole capacity.
		*bp = make([]byte, 0, 2*len(token))
	}
	plain, hist, err := e.cfg.Sealer.openToken(*bp, token)
	if err != nil {
		return nil, err
	}
	// UnmarshalVT copies strings and bytes out of plain, so the buffer can
	// go back to the pool.
	st := d.state()
	if err := st.UnmarshalVT(plain); err != nil {
		return nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "episode state does not decode: %v", err)
	}
	if st.Version != stateVersion {
		// Version 1's fields are reserved in version 2, so its tokens
		// decode and are refused here, with the reason.
		return nil, errorf(FailedPrecondition, ReasonTokenMalformed, "token", "episode state version %d is not supported (want %d): the state's layout changed with this server version; reset a new episode", st.Version, stateVersion)
	}
	if err := checkHead(st, hist); err != nil {
		return nil, err
	}
	d.hist = history{sealed: hist}
	if r := rulesOf(st.Protocol); r == nil || !r.holds(st) {
		return nil, errorf(InvalidArgument, ReasonTokenMalformed, "token", "the episode state's protocol (%s) and its protocol state do not match", st.Protocol)
	}
	if e.cfg.Oracles[st.Oracle] == nil || st.Solver == pb.Solver_SOLVER_LLM && e.cfg.LLMSolver == nil {
		// Sealed by a server configured otherwise that shares the key (a
		// replica, or this one before a restart): stepping it would call a
		// nil oracle or solver.
		return nil, errorf(FailedPrecondition, ReasonInvalidOption, "token", "the episode's oracle (%s) or solver (%s) is not available on this server", st.Oracle, st.Solver)
	}
	if ttl := e.cfg.TokenTTL; ttl > 0 && e.cfg.Now().Sub(time.Unix(st.IssuedUnix, 0)) > ttl {
		return nil, errorf(FailedPrecondition, ReasonTokenExpired, "token", "the episode was reset more than %s ago", ttl)
	}
	return e.servedTask(st)
}

// servedTask is the task of st, served unchanged since the reset.
func (e *Env) servedTask(st *statepb.EpisodeState) (*corpus.Task, error) {
	c, ok := e.corpora[st.Corpus]
	if !ok {
		return nil, errorf(FailedPrecondition, ReasonRecordChanged, "token", "corpus %q is no longer served", st.Corpus)
	}
	t, ok := c.Task(st.RecordId)
	if !ok {
		return nil, errorf(FailedPrecondition, ReasonRecordChanged, "token", "task %q is no longer in corpus %q", st.RecordId, st.Corpus)
	}
	if hi, lo := recordHash(t); hi != st.RecordHashHi || lo != st.RecordHashLo {
		return nil, errorf(FailedPrecondition, ReasonRecordChanged, "token", "task %q changed since the episode was reset", st.RecordId)
	}
	return t, nil
}

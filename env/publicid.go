package env

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"

	"avtgym/corpus"
	pb "avtgym/proto/avtgym/v1"
)

// TIDE's instance ids name a sample's type (<anchor_id>-C, -D, -J: the
// format of ../shared/data/tide-format/README.md), and the record id is
// the instance id. A policy that saw it would know whether a drift will
// come, which is what DRR measures (issue 28, item 6). So every TIDE
// sample gets a public id that says nothing of its type: TaskView.task_id,
// TaskSummary.task_id and Episode.episode_id carry it, ResetRequest,
// GetTaskRequest and AskRequest accept it, and the record id stays in
// Privileged.record_id (and TideInfo, source.meta) for the harness.
//
// The record ids stay what they are, so that corpora, fixtures and tests
// that name records keep working: Task still accepts a record id, and the
// server refuses one that a public id hides to principals that may not read
// privileged data (RefuseHidden), as if it did not exist.

// publicPrefix starts every opaque public id, whatever the sample type.
const publicPrefix = "tide-"

// opaque reports whether t's public id differs from its record id: TIDE
// samples (a sample type, or a drift).
func opaque(t *corpus.Task) bool { return t.SampleType != "" || t.Drift != nil }

// taskIDKey is the key of the public ids of c's tasks: Config.TaskIDKey
// when set, else a digest of c's name and its TIDE samples' record ids and
// references. The default is stable for a corpus, and computable only by
// whoever holds the references; a deployment that serves a published data
// set to untrusted policies sets TaskIDKey to a secret.
func taskIDKey(cfg Config, c *corpus.Corpus) []byte {
	if len(cfg.TaskIDKey) > 0 {
		return cfg.TaskIDKey
	}
	h := sha256.New()
	h.Write([]byte("avtgym public task id v1\x00" + c.Name + "\x00"))
	for _, t := range c.Tasks {
		if !opaque(t) {
			continue
		}
		h.Write([]byte(t.ID + "\x00"))
		for _, s := range t.Reference.SQL {
			h.Write([]byte(s + "\x00"))
		}
	}
	return h.Sum(nil)
}

// publicIDs computes the public id of every task of c: its record id, or
// for a TIDE sample publicPrefix and 16 hex digits of an HMAC of its
// record id. A collision with any other id (public or record) is an
// error.
func publicIDs(cfg Config, c *corpus.Corpus) (map[*corpus.Task]string, map[string]*corpus.Task, error) {
	key := taskIDKey(cfg, c)
	ids, by := map[*corpus.Task]string{}, map[string]*corpus.Task{}
	for _, t := range c.Tasks {
		id := t.ID
		if opaque(t) {
			m := hmac.New(sha256.New, key)
			m.Write([]byte(c.Name + "\x00" + t.ID))
			id = publicPrefix + hex.EncodeToString(m.Sum(nil)[:8])
		}
		if prev, dup := by[id]; dup {
			return nil, nil, errorf(Internal, ReasonInternal, "", "env: corpus %q: tasks %q and %q have the same public id %q", c.Name, prev.ID, t.ID, id)
		}
		by[id] = t
		ids[t] = id
	}
	for _, t := range c.Tasks {
		if other, clash := by[t.ID]; clash && other != t && opaque(t) {
			return nil, nil, errorf(Internal, ReasonInternal, "", "env: corpus %q: the public id of %q is the record id of %q", c.Name, other.ID, t.ID)
		}
	}
	return ids, by, nil
}

// PublicID is the id under which the server shows t.
func (e *Env) PublicID(t *corpus.Task) string {
	if id, ok := e.public[t]; ok {
		return id
	}
	return t.ID
}

// RefuseHidden is the error of a request from a principal that may not
// read privileged data naming a task by a record id that its public id
// hides: the same error as for an id the corpus does not have, so that the
// answer says nothing of which record ids exist. It is nil for any other
// id.
func (e *Env) RefuseHidden(corpusName, id string) error {
	c, err := e.Corpus(corpusName)
	if err != nil {
		return nil
	}
	if _, public := e.byPublic[c][id]; public {
		return nil
	}
	if t, ok := c.Task(id); !ok || !opaque(t) {
		return nil
	}
	return errorf(NotFound, ReasonUnknownTask, "task_id", "corpus %q has no task %q", c.Name, id)
}

// ListOrder is the order in which ListTasks lists c's tasks: corpus order,
// except that the TIDE samples, among the places they hold, are in public
// id order. The samples of one anchor are consecutive records in sample
// type order (-C, -D, -J); listed so, the place would tell the type.
func (e *Env) ListOrder(c *corpus.Corpus) []*corpus.Task {
	out := slices.Clone(c.Tasks)
	var at []int
	var hidden []*corpus.Task
	for i, t := range out {
		if opaque(t) {
			at, hidden = append(at, i), append(hidden, t)
		}
	}
	slices.SortFunc(hidden, func(a, b *corpus.Task) int { return strings.Compare(e.PublicID(a), e.PublicID(b)) })
	for k, i := range at {
		out[i] = hidden[k]
	}
	return out
}

// TaskPrivileged is the privileged data of a task, as a reset's
// (GetTaskRequest.include_privileged).
func (e *Env) TaskPrivileged(t *corpus.Task) *pb.Privileged {
	p := resetPrivileged(t)
	p.RecordId = t.ID
	return p
}

// sampleTypeLabels maps the enum to corpus.Record.SampleType.
var sampleTypeLabels = map[pb.SampleType]string{
	pb.SampleType_SAMPLE_TYPE_CHAIN_ONLY: corpus.SampleChainOnly,
	pb.SampleType_SAMPLE_TYPE_DRIFT_ONLY: corpus.SampleDriftOnly,
	pb.SampleType_SAMPLE_TYPE_JOINT:      corpus.SampleJoint,
}

// filterSampleTypes keeps the tasks of pool whose sample type is one of
// types (ResetRequest.sample_types); an empty types keeps them all.
func filterSampleTypes(pool []*corpus.Task, types []pb.SampleType) ([]*corpus.Task, error) {
	if len(types) == 0 {
		return pool, nil
	}
	want := make([]string, 0, len(types))
	for _, st := range types {
		l, ok := sampleTypeLabels[st]
		if !ok {
			return nil, errorf(InvalidArgument, ReasonInvalidOption, "sample_types", "%v is not a TIDE sample type", st)
		}
		want = append(want, l)
	}
	var out []*corpus.Task
	for _, t := range pool {
		if slices.Contains(want, t.SampleType) {
			out = append(out, t)
		}
	}
	return out, nil
}

// draw picks the task of a reset without a task id: uniformly (with the
// seed) from the protocol's pool of c and the split, restricted to the
// requested sample types.
func (e *Env) draw(c *corpus.Corpus, req *pb.ResetRequest, seed uint64) (*corpus.Task, error) {
	p := protocolOf(req.GetOptions())
	r := rulesOf(p)
	if r == nil {
		// An unknown protocol draws as AMBITAB does; newState rejects it.
		p, r = pb.Protocol_PROTOCOL_AMBITAB, ambiTabRules
	}
	pool := e.pools[p][c][req.GetSplit()]
	if len(pool) == 0 {
		return nil, r.noTasks(c, req.GetSplit())
	}
	pool, err := filterSampleTypes(pool, req.GetSampleTypes())
	if err != nil {
		return nil, err
	}
	if len(pool) == 0 {
		return nil, errorf(NotFound, ReasonNoTasks, "sample_types", "corpus %q has no task of sample types %v that %s draws in split %q", c.Name, req.GetSampleTypes(), p, req.GetSplit())
	}
	return pool[mix(seed)%uint64(len(pool))], nil
}

package env

import (
	pb "avtgym/proto/avtgym/v1"
)

// Transcript is what an episode token holds, decoded: the trainer-side
// record of an episode that the server's episode log writes. It includes
// privileged data (credits, resolutions, references), so it never goes to
// a policy. Only what the state keeps is here: answered questions with
// their replies and credits, the verified solution and the verdict; turns
// the state does not keep (a stop, an over-budget question, feedback) are
// in the step response that produced them.
type Transcript struct {
	EpisodeID string
	// UID is the episode's random id (Episode.episode_uid); Tags the
	// trainer's tags of its reset (nil when none).
	UID    string
	Tags   map[string]string
	Corpus string
	// TaskID is the record id; PublicTaskID the id the policy is shown
	// (TaskView.task_id, what episode_id names); DB and Split the task
	// view's database id and split.
	TaskID       string
	PublicTaskID string
	DB, Split    string
	// CorpusHash is the corpus's content hash (Env.CorpusHash).
	CorpusHash string
	Seed       uint64
	GroupIndex int32
	// Options are the episode's resolved options (reward, solver, oracle,
	// strict credit).
	Options *pb.EpisodeOptions
	Budget  int32
	Phase   pb.Phase
	Status  pb.EpisodeStatus
	// Request is the task's request, the episode's first turn.
	Request string
	// Dialogue holds the answered questions in order.
	Dialogue []TranscriptQuestion
	// Attempted counts questions asked, including an over-budget one.
	Attempted int32
	// SolutionSQL is the verified SQL (the policy's or the server
	// solver's); Verified and Outcome are the verdict.
	SolutionSQL       string
	Verified, Outcome bool
	// Reward is the episode's reward: set when it is done and not ERROR.
	Reward *pb.Reward
	// Privileged is the task's privileged data (AVT, interpretation,
	// ambiguities with resolutions, references) with the episode's credits
	// and the verifier's reason.
	Privileged *pb.Privileged
	// IssuedUnix is when the episode was reset (Unix seconds).
	IssuedUnix int64
}

// TranscriptQuestion is one answered question.
type TranscriptQuestion struct {
	Question string
	Reply    string
	Credits  []*pb.Credit
}

// Transcript opens an episode token and decodes it, with the same checks
// (and errors) as a step.
func (e *Env) Transcript(token []byte) (*Transcript, error) {
	st, h, t, err := e.open(token)
	if err != nil {
		return nil, err
	}
	qs, err := h.questions(e.cfg.Sealer, st)
	if err != nil {
		return nil, err
	}
	ep := &episode{env: e, st: st, task: t}
	tr := &Transcript{
		EpisodeID:    e.episodeID(t, st.Seed),
		UID:          uidString(st.UidHi, st.UidLo),
		Tags:         tagMap(st.Tags),
		Corpus:       st.Corpus,
		TaskID:       st.RecordId,
		PublicTaskID: e.views[t].GetTaskId(),
		DB:           e.views[t].GetDatabase().GetId(),
		Split:        e.views[t].GetSplit(),
		CorpusHash:   e.CorpusHash(st.Corpus),
		Seed:         st.Seed,
		GroupIndex:   st.GroupIndex,
		Options: &pb.EpisodeOptions{Reward: st.Reward, Solver: st.Solver, Oracle: st.Oracle,
			StrictCredit: st.StrictCredit, Protocol: st.Protocol, Comparison: st.Comparison},
		Budget:      st.Budget,
		Phase:       st.Phase,
		Status:      st.Status,
		Request:     t.Request,
		Attempted:   st.Attempted,
		SolutionSQL: st.SolutionSql,
		Verified:    st.Verified,
		Outcome:     st.Outcome,
		IssuedUnix:  st.IssuedUnix,
	}
	for i, q := range qs {
		tr.Dialogue = append(tr.Dialogue, TranscriptQuestion{Question: q.question, Reply: q.reply, Credits: ep.credits(st.CreditMasks[i])})
	}
	tr.Privileged = resetPrivileged(t)
	tr.Privileged.EpisodeCredits = ep.credits(unionCredits(st))
	tr.Privileged.VerifierReason = st.VerifierReason
	tr.Reward = score(rulesOf(st.Protocol), t, st)
	return tr, nil
}

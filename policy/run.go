package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"avtgym/client"
	pb "avtgym/proto/avtgym/v1"
)

// Episode is the record of one played episode, as written by
// `avtgym rollout --episodes-out` (one JSON object per line).
type Episode struct {
	TaskID    string   `json:"task_id"`
	AVTID     string   `json:"avt_id"`
	EpisodeID string   `json:"episode_id"`
	Seed      uint64   `json:"seed"`
	Status    string   `json:"status"`
	Questions []string `json:"questions"`
	// Status is TERMINATED, TRUNCATED or ERROR (the server's terminal
	// status), RPC_FAILED when the episode could not be played (an RPC
	// failed), or ASKER_FAILED when the LLM asker's endpoint failed.
	// CreditedTerms are the distinct counted terms credited over the
	// episode, in annotation order.
	CreditedTerms []string `json:"credited_terms"`
	// CountedAmbiguities is |Amb| for the task.
	CountedAmbiguities int `json:"counted_ambiguities"`
	// Precision, Recall and F1 are null where PROTOCOL.md §6 leaves them
	// undefined.
	Precision *float64 `json:"precision"`
	Recall    *float64 `json:"recall"`
	F1        *float64 `json:"f1"`
	Reward    *float64 `json:"reward"`
	// Outcome is the verifier's verdict (1 or 0), null when no solution
	// was verified.
	Outcome *float64 `json:"outcome"`
	// Error is set when the episode could not be played (an RPC or the
	// asker's endpoint failed).
	Error string `json:"error,omitempty"`
	// FallbackStop marks an LLM-asker episode that ended by a fallback
	// STOP: the asker's output could not be parsed, even after one retry.
	// Such episodes count for reward and success, not for recall and F1
	// (PROTOCOL.md §6).
	FallbackStop bool `json:"fallback_stop"`
	// FallbackSQL marks an LLM-asker episode whose SQL output could not be
	// parsed after one retry, so that a placeholder query that returns no
	// answer (a failed solution) was submitted in its place.
	FallbackSQL bool `json:"fallback_sql,omitempty"`
}

// Player plays one episode of an asking policy against a server: the
// scripted policies (Name) and the LLM asker (*LLMAsker) implement it.
type Player interface {
	// PolicyName names the policy in summaries.
	PolicyName() string
	// PlayEpisode resets an episode with reset (its group size forced to
	// 1), plays it to the end and returns its record. An error means the
	// episode could not be played.
	PlayEpisode(ctx context.Context, env pb.EnvServiceClient, reset *pb.ResetRequest) (*Episode, error)
}

// PolicyName implements Player.
func (n Name) PolicyName() string { return string(n) }

// PlayEpisode implements Player with Play.
func (n Name) PlayEpisode(ctx context.Context, env pb.EnvServiceClient, reset *pb.ResetRequest) (*Episode, error) {
	return Play(ctx, env, reset, n)
}

// Play runs one episode of a scripted policy: a reset (with the privileged
// channel, to learn the terms), its questions, then STOP.
func Play(ctx context.Context, env pb.EnvServiceClient, reset *pb.ResetRequest, name Name) (*Episode, error) {
	ep, out, err := resetEpisode(ctx, env, reset)
	if err != nil {
		return nil, err
	}
	priv := ep.GetPrivileged()
	budget := int(ep.GetObservation().GetQuestionBudget())
	st := &stepper{env: env, token: ep.GetToken()}
	for _, q := range Questions(name, CountedTerms(priv), budget) {
		if err := st.step(ctx, &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: q}}}); err != nil {
			return nil, fmt.Errorf("ask: %w", err)
		}
		out.Questions = append(out.Questions, q)
		if st.last.GetDone() {
			break
		}
	}
	last := st.last
	if last == nil || !last.GetDone() {
		if last == nil || last.GetObservation().GetPhase() == pb.Phase_PHASE_ASKING {
			if err := st.step(ctx, &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}); err != nil {
				return nil, fmt.Errorf("stop: %w", err)
			}
		}
	}
	if !st.last.GetDone() {
		return nil, fmt.Errorf("the episode waits for SQL, which a scripted policy cannot write: use the lookup solver or the question_f1 reward")
	}
	finishEpisode(out, st.last)
	return out, nil
}

// resetEpisode resets one episode with the privileged channel (for the
// record's AVT id, its counted ambiguities and, at the end, the credits)
// and starts its record.
func resetEpisode(ctx context.Context, env pb.EnvServiceClient, reset *pb.ResetRequest) (*pb.Episode, *Episode, error) {
	reset = cloneReset(reset)
	reset.IncludePrivileged = true
	reset.GroupSize = 1
	rr, err := env.Reset(ctx, reset)
	if err != nil {
		return nil, nil, fmt.Errorf("reset: %w", err)
	}
	if len(rr.GetEpisodes()) == 0 {
		return nil, nil, fmt.Errorf("reset: the server returned no episode")
	}
	ep := rr.GetEpisodes()[0]
	priv := ep.GetPrivileged()
	out := &Episode{
		TaskID:    ep.GetObservation().GetTask().GetTaskId(),
		AVTID:     priv.GetAvtId(),
		EpisodeID: ep.GetEpisodeId(),
		Seed:      ep.GetSeed(),
		Questions: []string{},
		// An empty list, not null, when nothing was credited.
		CreditedTerms: []string{},
	}
	for _, a := range priv.GetAmbiguities() {
		if a.GetCounted() {
			out.CountedAmbiguities++
		}
	}
	return ep, out, nil
}

// stepper sends the steps of one episode, carrying its token.
type stepper struct {
	env   pb.EnvServiceClient
	token []byte
	last  *pb.StepResponse
}

func (s *stepper) step(ctx context.Context, a *pb.Action) error {
	resp, err := s.env.Step(ctx, &pb.StepRequest{Token: s.token, Action: a, IncludePrivileged: true})
	if err != nil {
		return err
	}
	s.token, s.last = resp.GetToken(), resp
	return nil
}

// finishEpisode fills a done episode's status, credits and reward.
func finishEpisode(out *Episode, last *pb.StepResponse) {
	out.Status = strings.TrimPrefix(last.GetStatus().String(), "EPISODE_STATUS_")
	for _, c := range last.GetPrivileged().GetEpisodeCredits() {
		if c.GetCounted() && !slices.Contains(out.CreditedTerms, c.GetTerm()) {
			out.CreditedTerms = append(out.CreditedTerms, c.GetTerm())
		}
	}
	if r := last.GetReward(); r != nil {
		v := r.GetValue()
		out.Reward = &v
		get := func(k string) *float64 {
			if x, ok := r.GetComponents()[k]; ok {
				return &x
			}
			return nil
		}
		out.Precision, out.Recall, out.Outcome = get("precision"), get("recall"), get("outcome")
		if out.CountedAmbiguities > 0 {
			out.F1 = get("question_f1")
		}
	}
}

func cloneReset(r *pb.ResetRequest) *pb.ResetRequest {
	c := &pb.ResetRequest{
		Corpus: r.GetCorpus(), TaskId: r.GetTaskId(), Split: r.GetSplit(),
		Options: r.GetOptions(), GroupSize: r.GetGroupSize(), IncludePrivileged: r.GetIncludePrivileged(),
	}
	if r.Seed != nil {
		s := r.GetSeed()
		c.Seed = &s
	}
	return c
}

// RolloutConfig says what to roll out.
type RolloutConfig struct {
	// Policy is the scripted policy to play, unless Player is set.
	Policy Name
	// Player, when not nil, plays the episodes instead of Policy (the LLM
	// asker, for one).
	Player  Player
	Corpus  string
	Split   string
	Limit   int // 0 means every task
	Seed    uint64
	Options *pb.EpisodeOptions
	// Concurrency bounds the episodes in flight; 0 means 16.
	Concurrency int
	// Progress, when set, is called after each episode.
	Progress func(done, total int)
}

// Summary aggregates a rollout with the eligibility rules of PROTOCOL.md
// §6: each mean is over the episodes where its quantity is defined, and is
// null when no episode is eligible.
type Summary struct {
	Policy    string `json:"policy"`
	Corpus    string `json:"corpus"`
	Episodes  int    `json:"episodes"`
	Errors    int    `json:"errors"`
	Truncated int    `json:"truncated"`
	// FallbackStops counts the episodes that ended by a fallback stop;
	// they are in Episodes, RewardMean and SuccessRate but not in Recall
	// and F1 (PROTOCOL.md §6).
	FallbackStops int      `json:"fallback_stops"`
	Precision     *float64 `json:"precision"`
	Recall        *float64 `json:"recall"`
	F1            *float64 `json:"f1"`
	RewardMean    *float64 `json:"reward_mean"`
	SuccessRate   *float64 `json:"success_rate"`
	// MultiInterpretation restricts success to the tasks whose AVT has two
	// or more interpretations in this rollout, beside the success a
	// uniform guess among them would reach (the mean of 1/k).
	MultiInterpretation MultiSummary `json:"multi_interpretation"`
}

// MultiSummary is success on multi-interpretation AVTs against chance.
type MultiSummary struct {
	Episodes    int      `json:"episodes"`
	SuccessRate *float64 `json:"success_rate"`
	Chance      *float64 `json:"chance"`
}

// Rollout plays a policy (cfg.Player, else the scripted cfg.Policy) once on each task of a corpus (in corpus
// order, up to Limit), task i with seed Seed+i, and aggregates.
func Rollout(ctx context.Context, c *client.Client, cfg RolloutConfig) (*Summary, []*Episode, error) {
	var tasks []*pb.TaskSummary
	page := ""
	for {
		resp, err := c.Env.ListTasks(ctx, &pb.ListTasksRequest{Corpus: cfg.Corpus, Split: cfg.Split, PageSize: 1000, PageToken: page})
		if err != nil {
			return nil, nil, fmt.Errorf("listing tasks: %w", err)
		}
		tasks = append(tasks, resp.GetTasks()...)
		if page = resp.GetNextPageToken(); page == "" {
			break
		}
	}
	if cfg.Limit > 0 && len(tasks) > cfg.Limit {
		tasks = tasks[:cfg.Limit]
	}
	if len(tasks) == 0 {
		return nil, nil, fmt.Errorf("no task matches corpus %q split %q", cfg.Corpus, cfg.Split)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	player := cfg.Player
	if player == nil {
		player = cfg.Policy
	}
	episodes := make([]*Episode, len(tasks))
	var (
		mu   sync.Mutex
		done int
	)
	client.ForEach(ctx, len(tasks), cfg.Concurrency, func(ctx context.Context, i int) error {
		t := tasks[i]
		seed := cfg.Seed + uint64(i)
		ep, err := player.PlayEpisode(ctx, c.Env, &pb.ResetRequest{Corpus: t.GetCorpus(), TaskId: t.GetTaskId(), Seed: &seed, Options: cfg.Options})
		if err != nil {
			status := "RPC_FAILED"
			var ae *AskerError
			if errors.As(err, &ae) {
				status = "ASKER_FAILED"
			}
			ep = &Episode{TaskID: t.GetTaskId(), Seed: seed, Status: status, Error: err.Error(), Questions: []string{}}
		}
		episodes[i] = ep
		if cfg.Progress != nil {
			mu.Lock()
			done++
			cfg.Progress(done, len(tasks))
			mu.Unlock()
		}
		return nil
	})
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	s := Summarize(episodes)
	s.Policy, s.Corpus = player.PolicyName(), tasks[0].GetCorpus()
	return s, episodes, nil
}

// Summarize aggregates episodes (PROTOCOL.md §6 eligibility). Episodes that
// ended by a fallback stop are counted, and kept for precision, reward and
// success, but omitted from recall and F1.
func Summarize(eps []*Episode) *Summary {
	var prec, rec, f1, rew, succ, multiSucc, chance mean
	s := &Summary{}
	perAVT := map[string]int{}
	for _, e := range eps {
		if e.Error == "" {
			perAVT[e.AVTID]++
		}
	}
	for _, e := range eps {
		if e.Error != "" {
			s.Errors++
			continue
		}
		s.Episodes++
		if e.Status == "TRUNCATED" {
			s.Truncated++
		}
		prec.add(e.Precision)
		if e.FallbackStop {
			s.FallbackStops++
		} else {
			rec.add(e.Recall)
			f1.add(e.F1)
		}
		rew.add(e.Reward)
		succ.add(e.Outcome)
		if k := perAVT[e.AVTID]; k >= 2 && e.Outcome != nil {
			s.MultiInterpretation.Episodes++
			multiSucc.add(e.Outcome)
			p := 1 / float64(k)
			chance.add(&p)
		}
	}
	s.Precision, s.Recall, s.F1 = prec.value(), rec.value(), f1.value()
	s.RewardMean, s.SuccessRate = rew.value(), succ.value()
	s.MultiInterpretation.SuccessRate, s.MultiInterpretation.Chance = multiSucc.value(), chance.value()
	return s
}

type mean struct {
	sum float64
	n   int
}

func (m *mean) add(x *float64) {
	if x != nil {
		m.sum += *x
		m.n++
	}
}

func (m *mean) value() *float64 {
	if m.n == 0 {
		return nil
	}
	v := m.sum / float64(m.n)
	return &v
}

package policy

import (
	"context"
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
	// status), or RPC_FAILED when the episode could not be played.
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
	// Error is set when the episode could not be played (an RPC failed).
	Error string `json:"error,omitempty"`
}

// Play runs one episode of a scripted policy: a reset (with the privileged
// channel, to learn the terms), its questions, then STOP.
func Play(ctx context.Context, env pb.EnvServiceClient, reset *pb.ResetRequest, name Name) (*Episode, error) {
	reset = cloneReset(reset)
	reset.IncludePrivileged = true
	reset.GroupSize = 1
	rr, err := env.Reset(ctx, reset)
	if err != nil {
		return nil, fmt.Errorf("reset: %w", err)
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
	token := ep.GetToken()
	budget := int(ep.GetObservation().GetQuestionBudget())
	var last *pb.StepResponse
	step := func(a *pb.Action) error {
		resp, err := env.Step(ctx, &pb.StepRequest{Token: token, Action: a, IncludePrivileged: true})
		if err != nil {
			return err
		}
		token, last = resp.GetToken(), resp
		return nil
	}
	for _, q := range Questions(name, CountedTerms(priv), budget) {
		if err := step(&pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: q}}}); err != nil {
			return nil, fmt.Errorf("ask: %w", err)
		}
		out.Questions = append(out.Questions, q)
		if last.GetDone() {
			break
		}
	}
	if last == nil || !last.GetDone() {
		if last == nil || last.GetObservation().GetPhase() == pb.Phase_PHASE_ASKING {
			if err := step(&pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}); err != nil {
				return nil, fmt.Errorf("stop: %w", err)
			}
		}
	}
	if !last.GetDone() {
		return nil, fmt.Errorf("the episode waits for SQL, which a scripted policy cannot write: use the lookup solver or the question_f1 reward")
	}
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
	return out, nil
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
	Policy  Name
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
	Policy      string   `json:"policy"`
	Corpus      string   `json:"corpus"`
	Episodes    int      `json:"episodes"`
	Errors      int      `json:"errors"`
	Truncated   int      `json:"truncated"`
	Precision   *float64 `json:"precision"`
	Recall      *float64 `json:"recall"`
	F1          *float64 `json:"f1"`
	RewardMean  *float64 `json:"reward_mean"`
	SuccessRate *float64 `json:"success_rate"`
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

// Rollout plays a scripted policy once on each task of a corpus (in corpus
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
	episodes := make([]*Episode, len(tasks))
	var (
		mu   sync.Mutex
		done int
	)
	client.ForEach(ctx, len(tasks), cfg.Concurrency, func(ctx context.Context, i int) error {
		t := tasks[i]
		seed := cfg.Seed + uint64(i)
		ep, err := Play(ctx, c.Env, &pb.ResetRequest{Corpus: t.GetCorpus(), TaskId: t.GetTaskId(), Seed: &seed, Options: cfg.Options}, cfg.Policy)
		if err != nil {
			ep = &Episode{TaskID: t.GetTaskId(), Seed: seed, Status: "RPC_FAILED", Error: err.Error(), Questions: []string{}}
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
	s.Policy, s.Corpus = string(cfg.Policy), tasks[0].GetCorpus()
	return s, episodes, nil
}

// Summarize aggregates episodes (PROTOCOL.md §6 eligibility).
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
		rec.add(e.Recall)
		f1.add(e.F1)
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

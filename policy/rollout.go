package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"avtgym/driver"
	"avtgym/internal/parallel"
	pb "avtgym/proto/avtgym/v1"
)

// RolloutConfig says what to roll out.
type RolloutConfig struct {
	Player  Player
	Corpus  string
	Split   string
	Limit   int // 0 means every task
	Seed    uint64
	Options *pb.EpisodeOptions
	// Tags are sealed into every episode (ResetRequest.tags) and written
	// with its record.
	Tags map[string]string
	// Concurrency bounds the episodes in flight; 0 means 16.
	Concurrency int
	// Progress, when set, is called after each episode.
	Progress func(done, total int)
	// Notice, when set, receives what the rollout left out (under BIRD_C,
	// the tasks without a follow-up).
	Notice func(string)
}

// Rollout plays cfg.Player once on each task of a corpus (in corpus order,
// up to Limit), task i with seed Seed+i, and returns the episodes'
// records in task order. An episode that could not be played is a record
// with status RPC_FAILED or ASKER_FAILED and its error. When ctx ends
// first, the records of the episodes started so far come back with the
// context's error.
func Rollout(ctx context.Context, c pb.EnvServiceClient, cfg RolloutConfig) ([]*driver.Record, error) {
	if cfg.Player == nil {
		return nil, errors.New("policy: no player to roll out")
	}
	tasks, err := ListTasks(ctx, c, cfg.Corpus, cfg.Split)
	if err != nil {
		return nil, err
	}
	all := len(tasks)
	tasks, skipped := ProtocolTasks(tasks, cfg.Options.GetProtocol())
	if skipped > 0 && cfg.Notice != nil {
		cfg.Notice(fmt.Sprintf("%s serves only %s: %d of %d tasks kept, %d skipped", driver.ProtocolName(cfg.Options.GetProtocol()), ServedTasks(cfg.Options.GetProtocol()), len(tasks), all, skipped))
	}
	if cfg.Limit > 0 && len(tasks) > cfg.Limit {
		tasks = tasks[:cfg.Limit]
	}
	if len(tasks) == 0 {
		if skipped > 0 {
			return nil, fmt.Errorf("no task of corpus %q split %q is one of the %s that %s serves", cfg.Corpus, cfg.Split, ServedTasks(cfg.Options.GetProtocol()), driver.ProtocolName(cfg.Options.GetProtocol()))
		}
		return nil, fmt.Errorf("no task matches corpus %q split %q", cfg.Corpus, cfg.Split)
	}
	if tc, ok := cfg.Player.(TaskChecker); ok {
		if err := tc.CheckTasks(tasks); err != nil {
			return nil, err
		}
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	env := driver.Remote(c)
	if p := cfg.Options.GetProtocol(); p != pb.Protocol_PROTOCOL_UNSPECIFIED && p != pb.Protocol_PROTOCOL_AMBITAB {
		if err := CheckOptions(ctx, env, tasks[0], cfg.Options); err != nil {
			return nil, err
		}
	}
	records := make([]*driver.Record, len(tasks))
	var (
		mu   sync.Mutex
		done int
	)
	err = parallel.For(ctx, len(tasks), cfg.Concurrency, func(ctx context.Context, i int) error {
		t := tasks[i]
		seed := cfg.Seed + uint64(i)
		records[i] = PlayOne(ctx, env, cfg.Player, &pb.ResetRequest{Corpus: t.GetCorpus(), TaskId: t.GetTaskId(), Seed: &seed, Options: cfg.Options, IncludePrivileged: true, Tags: cfg.Tags})
		if cfg.Progress != nil {
			mu.Lock()
			done++
			cfg.Progress(done, len(tasks))
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		// Out of time (or cancelled): the episodes played so far, and those
		// cut short (RPC_FAILED with the deadline), are kept for the caller
		// to write; tasks never started have no record.
		played := slices.DeleteFunc(records, func(r *driver.Record) bool { return r == nil })
		return played, err
	}
	return records, nil
}

// ProtocolTasks keeps the tasks a protocol serves: under BIRD_C those with
// a follow-up (TaskSummary.subtasks = 2), and so under BIRD_A; under
// TIDE_F TIDE's samples (TaskSummary.sample_type set); under TIDE_P its
// chain-only and joint samples (the p-protocol pre-fills the chain's first
// layer); under AMBITAB all. It returns them, in order, and how many were
// left out.
func ProtocolTasks(tasks []*pb.TaskSummary, p pb.Protocol) ([]*pb.TaskSummary, int) {
	var keep func(*pb.TaskSummary) bool
	switch {
	case driver.IsBird(p):
		keep = func(t *pb.TaskSummary) bool { return t.GetSubtasks() >= 2 }
	case p == pb.Protocol_PROTOCOL_TIDE_F:
		keep = func(t *pb.TaskSummary) bool { return t.GetSampleType() != "" }
	case p == pb.Protocol_PROTOCOL_TIDE_P:
		keep = func(t *pb.TaskSummary) bool { return t.GetSampleType() == "chain_only" || t.GetSampleType() == "joint" }
	default:
		return tasks, 0
	}
	var kept []*pb.TaskSummary
	for _, t := range tasks {
		if keep(t) {
			kept = append(kept, t)
		}
	}
	return kept, len(tasks) - len(kept)
}

// ServedTasks describes the tasks ProtocolTasks keeps under p, for
// notices: "tasks with a follow-up", "TIDE samples", ….
func ServedTasks(p pb.Protocol) string {
	switch {
	case driver.IsBird(p):
		return "tasks with a follow-up"
	case p == pb.Protocol_PROTOCOL_TIDE_F:
		return "TIDE samples (TaskSummary.sample_type)"
	case p == pb.Protocol_PROTOCOL_TIDE_P:
		return "TIDE chain-only and joint samples"
	}
	return "tasks"
}

// CheckOptions resets one episode on task with opts and reports the
// server's refusal of the options (INVALID_ARGUMENT: a protocol it does not
// serve, a reward or solver the protocol does not take, a patience out of
// range) as one error that quotes it, so that a run stops at once instead
// of recording the same refusal for every task. Other failures are left to
// the episodes.
func CheckOptions(ctx context.Context, env driver.Env, task *pb.TaskSummary, opts *pb.EpisodeOptions) error {
	seed := uint64(0)
	_, err := env.Reset(ctx, &pb.ResetRequest{Corpus: task.GetCorpus(), TaskId: task.GetTaskId(), Seed: &seed, Options: opts, GroupSize: 1})
	if st, ok := status.FromError(err); ok && err != nil && st.Code() == codes.InvalidArgument {
		return fmt.Errorf("the server refused the episode options (protocol %s) on task %s: %s", driver.ProtocolName(opts.GetProtocol()), task.GetTaskId(), st.Message())
	}
	return nil
}

// PlayOne starts one episode with reset, has p play it and returns its
// record. A reset that fails, or a play that fails, is a record with
// status RPC_FAILED (ASKER_FAILED for an *AskerError) naming the task
// and seed of reset.
func PlayOne(ctx context.Context, env driver.Env, p Player, reset *pb.ResetRequest) *driver.Record {
	ep, err := driver.Start(ctx, env, reset)
	if err != nil {
		return Failed(reset, err)
	}
	return Finish(ep, p.Play(ctx, ep))
}

// Finish is ep's record after a play that returned err.
func Finish(ep *driver.Episode, err error) *driver.Record {
	r := ep.Record(err)
	var ae *AskerError
	if errors.As(err, &ae) {
		r.Status = "ASKER_FAILED"
	}
	return r
}

// Failed is the record of an episode that could not even start.
func Failed(reset *pb.ResetRequest, err error) *driver.Record {
	kind := "RPC_FAILED"
	var ae *AskerError
	if errors.As(err, &ae) {
		kind = "ASKER_FAILED"
	}
	r := &driver.Record{Corpus: reset.GetCorpus(), TaskID: reset.GetTaskId(), AVTID: reset.GetTaskId(), Seed: reset.GetSeed(),
		Status: kind, Error: err.Error(), Questions: []string{}, Replies: []string{}, CreditedTerms: []string{}}
	if p := reset.GetOptions().GetProtocol(); p != pb.Protocol_PROTOCOL_UNSPECIFIED && p != pb.Protocol_PROTOCOL_AMBITAB {
		r.Protocol = driver.ProtocolName(p)
	}
	return r
}

// ListTasks lists the tasks of a corpus (and split), all pages.
func ListTasks(ctx context.Context, c pb.EnvServiceClient, corpus, split string) ([]*pb.TaskSummary, error) {
	var tasks []*pb.TaskSummary
	page := ""
	for {
		// Privileged: the sample types (TIDE) are a trainer's to read, and
		// a rollout is the trainer's tool (a policy principal is refused).
		resp, err := c.ListTasks(ctx, &pb.ListTasksRequest{Corpus: corpus, Split: split, PageSize: 1000, PageToken: page, IncludePrivileged: true})
		if err != nil {
			return nil, fmt.Errorf("listing tasks: %w", err)
		}
		tasks = append(tasks, resp.GetTasks()...)
		if page = resp.GetNextPageToken(); page == "" {
			return tasks, nil
		}
	}
}

// Package reverify replays saved episode records against a server, with the
// policy's recorded actions, and reports how each episode's score changed:
// the check that a fix to a comparator, a reference or an oracle does what
// it should on an old run (avtgym reverify).
package reverify

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// Outcome classifies one replayed record.
type Outcome string

const (
	// Same: the replay ended with the recorded status and reward.
	Same Outcome = "same"
	// Up and Down: the replay ended scored, with a higher or lower reward.
	Up   Outcome = "up"
	Down Outcome = "down"
	// StatusChanged: the replay ended with another status (an ERROR that
	// now scores, or the reverse).
	StatusChanged Outcome = "status_changed"
	// Diverged: the recorded actions did not end the episode the same way
	// (it ended before they ran out, or they ran out before it ended):
	// the environment now answers differently enough that the policy
	// would have acted otherwise. The replay's score is not comparable.
	Diverged Outcome = "diverged"
	// NotReplayable: the record cannot be replayed (it was never played
	// to its end, it names a task or an option the server does not serve,
	// or a call failed).
	NotReplayable Outcome = "not_replayable"
)

// Result is one record's replay.
type Result struct {
	// Index is the record's position in the input (from 0); Old the
	// record as saved; New the replay's record (nil when not replayable).
	Index   int
	Old     *driver.Record
	New     *driver.Record
	Outcome Outcome
	// Delta is New.Reward − Old.Reward when both are scored.
	Delta *float64
	// Why says what diverged or why the record could not be replayed.
	Why string
}

// Summary counts the results by outcome.
type Summary struct {
	Records  int             `json:"records"`
	Outcomes map[Outcome]int `json:"outcomes"`
	// MeanOld and MeanNew are the mean rewards over the records scored
	// both times (Paired of them).
	Paired           int     `json:"paired"`
	MeanOld, MeanNew float64 `json:"-"`
	// CorpusChanged counts the records whose corpus hash differs from the
	// server's now (records without a hash are not counted).
	CorpusChanged int `json:"corpus_changed"`
}

// Options configure a replay.
type Options struct {
	// Corpus, when set, replaces the records' corpus name (a corpus
	// served under another name).
	Corpus string
	// Progress, when set, is called after each record.
	Progress func(done, total int)
}

// Replay replays each record on env (c answers ListCorpora for the
// corpus hash) and returns one result per record, in order. A record
// that cannot be replayed is a result, not an error; the error is ctx's.
func Replay(ctx context.Context, c pb.EnvServiceClient, records []*driver.Record, opt Options) ([]Result, *Summary, error) {
	env := driver.Remote(c)
	out := make([]Result, len(records))
	sum := &Summary{Records: len(records), Outcomes: map[Outcome]int{}}
	hashes := map[string]string{}
	for i, r := range records {
		if err := ctx.Err(); err != nil {
			return out[:i], sum, err
		}
		corpus := r.Corpus
		if opt.Corpus != "" {
			corpus = opt.Corpus
		}
		if _, ok := hashes[corpus]; !ok {
			if info := driver.ServerInfoFor(ctx, c, corpus); info != nil {
				hashes[corpus] = info.CorpusHash
			} else {
				hashes[corpus] = ""
			}
		}
		if r.Server != nil && r.Server.CorpusHash != "" && hashes[corpus] != "" && r.Server.CorpusHash != hashes[corpus] {
			sum.CorpusChanged++
		}
		res := replayOne(ctx, env, r, corpus)
		res.Index = i
		out[i] = res
		sum.Outcomes[res.Outcome]++
		if res.Delta != nil {
			sum.Paired++
			sum.MeanOld += *r.Reward
			sum.MeanNew += *res.New.Reward
		}
		if opt.Progress != nil {
			opt.Progress(i+1, len(records))
		}
	}
	if sum.Paired > 0 {
		sum.MeanOld /= float64(sum.Paired)
		sum.MeanNew /= float64(sum.Paired)
	}
	return out, sum, nil
}

// replayOne resets the record's task with its seed and options and takes
// the policy's recorded actions in order.
func replayOne(ctx context.Context, env driver.BatchEnv, r *driver.Record, corpus string) Result {
	res := Result{Old: r}
	fail := func(why string) Result {
		res.Outcome, res.Why = NotReplayable, why
		return res
	}
	if r.Status == "RPC_FAILED" || r.Status == "ASKER_FAILED" {
		return fail("the episode was never played to its end (" + r.Status + ")")
	}
	if len(r.Turns) == 0 {
		return fail("the record holds no turns (written before records carried them)")
	}
	opts, err := r.ToOptions()
	if err != nil {
		return fail(err.Error())
	}
	actions, err := Actions(r)
	if err != nil {
		return fail(err.Error())
	}
	seed := r.Seed
	ep, err := driver.Start(ctx, env, &pb.ResetRequest{Corpus: corpus, TaskId: r.TaskID, Seed: &seed, Options: opts, IncludePrivileged: true, Tags: r.Tags})
	if err != nil {
		return fail(err.Error())
	}
	for i, a := range actions {
		if ep.Done() {
			res.Why = fmt.Sprintf("the episode ended after %d of the %d recorded actions", i, len(actions))
			break
		}
		if err := ep.Do(ctx, a); err != nil {
			return fail(fmt.Sprintf("action %d (%s): %v", i+1, driver.ActionName(a), err))
		}
	}
	if !ep.Done() {
		res.Why = fmt.Sprintf("the %d recorded actions did not end the episode", len(actions))
	}
	res.New = ep.Record(nil)
	res.New.Writer = "reverify"
	switch {
	case res.Why != "":
		res.Outcome = Diverged
	case res.New.Status != r.Status:
		res.Outcome = StatusChanged
	case r.Reward == nil || res.New.Reward == nil:
		res.Outcome = Same // both unscored (ERROR both times)
	default:
		d := *res.New.Reward - *r.Reward
		res.Delta = &d
		switch {
		case math.Abs(d) < 1e-12:
			res.Outcome = Same
		case d > 0:
			res.Outcome = Up
		default:
			res.Outcome = Down
		}
	}
	return res
}

// Actions are the policy's actions of a record, read from its policy
// turns: a question is an ask, a stop a stop, an SQL turn a submission, an
// unparsed turn the same unparsed output, and a tool call (BIRD_A) the
// call its text spells (env's callText).
func Actions(r *driver.Record) ([]*pb.Action, error) {
	var out []*pb.Action
	for i, t := range r.Turns {
		if t.Role != "policy" {
			continue
		}
		switch t.Kind {
		case "question":
			out = append(out, driver.AskAction(t.Text))
		case "stop":
			out = append(out, driver.StopAction())
		case "sql":
			out = append(out, driver.SubmitSQLAction(t.Text))
		case "unparsed":
			out = append(out, driver.UnparsedAction(t.Text))
		case "tool_call":
			out = append(out, toolAction(t.Text))
		default:
			return nil, fmt.Errorf("turn %d: a policy turn of kind %q cannot be replayed", i+1, t.Kind)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the record holds no action of the policy")
	}
	return out, nil
}

// toolAction reads a tool call as env spells it (execute("SQL"),
// get_schema(), get_column_meaning("t", "c"), …); text it cannot read is
// replayed as the unparsed output it then was.
func toolAction(text string) *pb.Action {
	if sql, ok := strings.CutPrefix(text, `execute("`); ok && strings.HasSuffix(sql, `")`) {
		return driver.ExecuteAction(strings.TrimSuffix(sql, `")`))
	}
	name, args, ok := strings.Cut(text, "(")
	if !ok || !strings.HasSuffix(args, ")") {
		return driver.UnparsedAction(text)
	}
	args = strings.TrimSuffix(args, ")")
	var vals []string
	for rest := strings.TrimSpace(args); rest != ""; {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return driver.UnparsedAction(text)
		}
		v, _ := strconv.Unquote(q)
		vals = append(vals, v)
		rest = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(rest[len(q):]), ","))
	}
	switch {
	case name == "get_schema" && len(vals) == 0:
		return driver.GetSchemaAction()
	case name == "get_all_column_meanings" && len(vals) == 0:
		return driver.GetAllColumnMeaningsAction()
	case name == "get_column_meaning" && len(vals) == 2:
		return driver.GetColumnMeaningAction(vals[0], vals[1])
	case name == "get_all_external_knowledge_names" && len(vals) == 0:
		return driver.GetAllExternalKnowledgeNamesAction()
	case name == "get_knowledge_definition" && len(vals) == 1:
		return driver.GetKnowledgeDefinitionAction(vals[0])
	case name == "get_all_knowledge_definitions" && len(vals) == 0:
		return driver.GetAllKnowledgeDefinitionsAction()
	case name == "ask" && len(vals) == 1:
		return driver.AskAction(vals[0])
	}
	return driver.UnparsedAction(text)
}

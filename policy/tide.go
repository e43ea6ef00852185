package policy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"avtgym/driver"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// TIDE's scripted baselines (PROTOCOL.md §9, issue 17): an asker that
// decides the questions, and a solver that decides each SQL. Both read the
// privileged channel (the ambiguities, their chain layers, the reference
// SQL and TIDE's labels), so an episode not reset with include_privileged
// is an error.

// TideAsker is how a scripted TIDE baseline asks: TideAskNone or
// TideAskChain.
type TideAsker struct {
	name      string
	questions func(ep *driver.Episode) []string
}

// Name is the asker's part of the policy's name: "none" or "chain".
func (a TideAsker) Name() string { return a.name }

// TideSolver is how a scripted TIDE baseline writes SQL: TideDriftAware or
// TideDriftBlind.
type TideSolver struct {
	name string
	// afterDrift is the SQL submitted after the drift turn.
	afterDrift func(ep *driver.Episode) (string, error)
}

// Name is the solver's part of the policy's name: "aware" or "blind".
func (s TideSolver) Name() string { return s.name }

var (
	// TideAskNone asks nothing.
	TideAskNone = TideAsker{name: "none", questions: func(*driver.Episode) []string { return nil }}
	// TideAskChain asks the full policy's question (probe.FullQuestion:
	// "Could you clarify what exactly you mean by <term>?") about the
	// chain's first-layer term, then about its second-layer term (each
	// layer's terms in annotation order, from the privileged ambiguities
	// and TideInfo.chain_layers). Under TIDE_P it skips the first layer,
	// which the history pre-fills. It asks nothing on a task without
	// ambiguities (TIDE's drift-only samples).
	TideAskChain = TideAsker{name: "chain", questions: chainQuestions}

	// TideDriftAware submits the privileged reference SQL first (its
	// statements joined by ";\n"), and after the drift turn the
	// post-drift reference (TideInfo.post_drift_reference_sql, joined).
	TideDriftAware = TideSolver{name: "aware", afterDrift: postDriftSQL}
	// TideDriftBlind submits the reference SQL first and, after the drift
	// turn, its first SQL again: it ignores the drift (its drift
	// recognition and second SQL score 0).
	TideDriftBlind = TideSolver{name: "blind", afterDrift: firstSQL}
)

// TidePolicies are the scripted TIDE baselines' names, as ParseTidePolicy
// takes them.
var TidePolicies = []string{"chain-aware", "chain-blind", "none-aware", "none-blind"}

// ParseTidePolicy returns the scripted TIDE baseline a name names:
// chain-aware, chain-blind, none-aware or none-blind (<asker>-<solver>).
func ParseTidePolicy(name string) (Player, error) {
	askers := map[string]TideAsker{"none": TideAskNone, "chain": TideAskChain}
	solvers := map[string]TideSolver{"aware": TideDriftAware, "blind": TideDriftBlind}
	a, s, _ := strings.Cut(strings.ToLower(strings.TrimSpace(name)), "-")
	ask, okA := askers[a]
	solve, okS := solvers[s]
	if !okA || !okS {
		return nil, fmt.Errorf("unknown TIDE policy %q (want %s)", name, strings.Join(TidePolicies, ", "))
	}
	return Tide(ask, solve), nil
}

// Tide is a scripted TIDE baseline: it asks ask's questions while the
// episode has turns for them beside its SQL (one, two on a task with a
// drift), then submits the reference SQL; after the drift turn, solve's
// second SQL. It never stops and never reports unparsed output. Its name
// is "<asker>-<solver>", such as "chain-aware".
func Tide(ask TideAsker, solve TideSolver) Player { return tidePolicy{ask, solve} }

type tidePolicy struct {
	ask   TideAsker
	solve TideSolver
}

func (p tidePolicy) Name() string { return p.ask.name + "-" + p.solve.name }

// errNotTide says that a TIDE policy was asked to play another protocol.
var errNotTide = errors.New("the TIDE policies play the tide-f and tide-p protocols only")

func (p tidePolicy) Play(ctx context.Context, ep *driver.Episode) error {
	if p.ask.questions == nil || p.solve.afterDrift == nil {
		return errors.New("policy: a TIDE policy needs an asker (TideAskNone, TideAskChain) and a solver (TideDriftAware, TideDriftBlind)")
	}
	if err := checkTide(ep, p.Name()); err != nil {
		return err
	}
	sqlTurns := 1
	if ep.Tide().GetDriftUtterance() != "" {
		sqlTurns = 2
	}
	qs := p.ask.questions(ep)
	if ep.Allowance() != nil {
		// Keep the turns the SQL needs.
		qs = qs[:min(len(qs), max(0, ep.TurnsLeft()-sqlTurns))]
	}
	// A bound on the steps, against a server that would never end the
	// episode: every question and both SQL, with room to spare.
	limit := len(qs) + sqlTurns + 4
	for steps := 0; !ep.Done(); steps++ {
		if steps >= limit {
			return fmt.Errorf("the episode did not end after %d steps (%d SQL submitted)", steps, len(ep.SQLs()))
		}
		var err error
		switch {
		case len(qs) > 0 && len(ep.SQLs()) == 0:
			err = ep.Ask(ctx, qs[0])
			qs = qs[1:]
		case len(ep.SQLs()) == 0:
			var sql string
			if sql, err = ReferenceSQL(ep); err == nil {
				err = ep.SubmitSQL(ctx, sql)
			}
		default:
			var sql string
			if sql, err = p.solve.afterDrift(ep); err == nil {
				err = ep.SubmitSQL(ctx, sql)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkTide checks that ep is a TIDE episode reset with the privileged
// field, on a task with TIDE's labels.
func checkTide(ep *driver.Episode, name string) error {
	if p := ep.Protocol(); !driver.IsTide(p) {
		return fmt.Errorf("%w (protocol %s)", errNotTide, driver.ProtocolName(p))
	}
	if ep.Reset().GetPrivileged() == nil {
		return fmt.Errorf("the %s policy reads the privileged channel (chain layers, reference and post-drift SQL): reset the episode with include_privileged", name)
	}
	if ep.Tide() == nil {
		return fmt.Errorf("task %s has no TIDE labels (privileged tide field): the %s policy plays TIDE samples only", ep.Task().GetTaskId(), name)
	}
	return nil
}

// chainQuestions asks about each chain layer's terms in turn (layer 1,
// then 2, …), each term once; under TIDE_P layer 1 is skipped.
func chainQuestions(ep *driver.Episode) []string {
	amb := ep.Reset().GetPrivileged().GetAmbiguities()
	layers := ep.Tide().GetChainLayers()
	first := int32(1)
	if ep.Protocol() == pb.Protocol_PROTOCOL_TIDE_P {
		first = 2
	}
	var terms []string
	for layer := first; ; layer++ {
		more := false
		for i, a := range amb {
			if i >= len(layers) || layers[i] < layer {
				continue
			}
			if layers[i] > layer {
				more = true
				continue
			}
			if !slices.Contains(terms, a.GetTerm()) {
				terms = append(terms, a.GetTerm())
			}
		}
		if !more {
			break
		}
	}
	qs := make([]string, len(terms))
	for i, t := range terms {
		qs[i] = probe.FullQuestion(t)
	}
	return qs
}

// postDriftSQL is the post-drift reference, from the privileged channel.
func postDriftSQL(ep *driver.Episode) (string, error) {
	if ep.Drift() == "" {
		return "", fmt.Errorf("the episode goes on after the first SQL, but no drift turn came (task %s)", ep.Task().GetTaskId())
	}
	post := ep.Tide().GetPostDriftReferenceSql()
	if len(post) == 0 {
		return "", fmt.Errorf("the post-drift reference SQL of task %s is unknown (privileged tide.post_drift_reference_sql is empty)", ep.Task().GetTaskId())
	}
	return strings.Join(post, ";\n"), nil
}

// firstSQL is the policy's own first SQL, resubmitted.
func firstSQL(ep *driver.Episode) (string, error) {
	return ep.SQLs()[0], nil
}

package env

import (
	"context"
	"slices"

	"avtgym/corpus"
	"avtgym/env/internal/statepb"
	pb "avtgym/proto/avtgym/v1"
)

// The protocols (PROTOCOL.md §11) are one rules value each, side by side:
// ambitab.go (AMBITAB), birdc.go and birda.go (BIRD-Interact's BIRD_C and
// BIRD_A, with what they share in bird.go) and tide.go (TIDE_F and
// TIDE_P). Each owns its message of EpisodeState's rules oneof, its size
// bound, its reward (asked of package reward) and its texts; the shared
// moves (a turn, an ask, a verification, a failure, a rejection) are in
// episode.go, and Env's Reset and Step only look the rules up. A new
// protocol is one rules file, one reward in package reward, one state
// message and one row in rulesOf.
//
// Every rule is applied here, on the server, from the state sealed in the
// token: a client cannot change a budget, a reward or a release by what it
// sends.

// rules is one protocol's rules. A rules value keeps nothing of its own
// (an episode's state is in its token), so one value serves every
// episode.
type rules interface {
	// draws reports whether a reset that names no task may draw t.
	draws(t *corpus.Task) bool
	// noTasks is the NOT_FOUND error of such a reset when split of corpus
	// c holds no task the protocol draws.
	noTasks(c *corpus.Corpus, split string) error
	// resolve checks the protocol's options for a reset on t and sets the
	// protocol's part of st, whose shared options are resolved: the reward
	// and solver where the protocol fixes them, the question budget, the
	// phase, the pre-filled questions and the protocol's state message.
	// Pre-filled questions go into h, the reset's history.
	resolve(t *corpus.Task, o *pb.EpisodeOptions, st *statepb.EpisodeState, h *history) error
	// holds reports whether st carries the protocol's state message (a
	// sealed state that does not is malformed).
	holds(st *statepb.EpisodeState) bool
	// apply applies one action to an episode that is not done. An error
	// is the step's: nothing of the step is sealed.
	apply(ctx context.Context, ep *episode, a *pb.Action) error
	// observe fills what an observation shows of the protocol's
	// bookkeeping: the sub-task, the questions remaining, the budget
	// (into b, the step's own storage) and whether only SQL is accepted.
	observe(o *pb.Observation, st *statepb.EpisodeState, b *pb.Budget)
	// score is the reward of a finished episode that did not end in
	// ERROR.
	score(t *corpus.Task, st *statepb.EpisodeState) *pb.Reward
	// stateBound bounds the encoded size of the protocol's state message,
	// as its field of EpisodeState (limits.go).
	stateBound() int
	// describe is what the protocol publishes of its rules
	// (Env.ListProtocols): its accepted actions, budget and prices.
	describe() *pb.ProtocolInfo
}

// The rules values.
var (
	ambiTabRules rules = ambiTab{}
	birdCRules   rules = birdC{bird{pb.Protocol_PROTOCOL_BIRD_C}}
	birdARules   rules = birdA{bird{pb.Protocol_PROTOCOL_BIRD_A}}
	tideFRules   rules = tide{protocol: pb.Protocol_PROTOCOL_TIDE_F}
	tidePRules   rules = tide{protocol: pb.Protocol_PROTOCOL_TIDE_P, prefills: true}
)

// rulesOf is the lookup table of the protocols: p's rules, or nil for a
// protocol this server does not know (UNSPECIFIED included: a reset
// resolves it to AMBITAB first, protocolOf).
func rulesOf(p pb.Protocol) rules {
	switch p {
	case pb.Protocol_PROTOCOL_AMBITAB:
		return ambiTabRules
	case pb.Protocol_PROTOCOL_BIRD_C:
		return birdCRules
	case pb.Protocol_PROTOCOL_BIRD_A:
		return birdARules
	case pb.Protocol_PROTOCOL_TIDE_F:
		return tideFRules
	case pb.Protocol_PROTOCOL_TIDE_P:
		return tidePRules
	}
	return nil
}

// protocols lists the protocols rulesOf knows, in enum order.
var protocols = func() []pb.Protocol {
	var out []pb.Protocol
	for v := range pb.Protocol_name {
		if rulesOf(pb.Protocol(v)) != nil {
			out = append(out, pb.Protocol(v))
		}
	}
	slices.Sort(out)
	return out
}()

// protocolOf is the protocol a reset's options ask for: AMBITAB when they
// name none.
func protocolOf(o *pb.EpisodeOptions) pb.Protocol {
	if p := o.GetProtocol(); p != pb.Protocol_PROTOCOL_UNSPECIFIED {
		return p
	}
	return pb.Protocol_PROTOCOL_AMBITAB
}

// askerActions are the actions of the protocols without tools.
var askerActions = []actionKind{actionAsk, actionStop, actionSubmitSQL, actionUnparsed}

// actionList names kinds by their Action oneof field names.
func actionList(kinds []actionKind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = actionNames[k]
	}
	return out
}

// ListProtocols describes the served protocols, in Protocol order: what
// each rules value publishes (describe), so that clients read the rules,
// BIRD_A's prices among them, from the server (EnvService.ListProtocols).
func (e *Env) ListProtocols(context.Context, *pb.ListProtocolsRequest) (*pb.ListProtocolsResponse, error) {
	out := &pb.ListProtocolsResponse{}
	for _, p := range protocols {
		out.Protocols = append(out.Protocols, rulesOf(p).describe())
	}
	return out, nil
}

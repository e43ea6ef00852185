package eval

import (
	"context"
	"errors"
	"strings"

	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// The server's privileged marks of model output it could not read: eval is
// a client and reads them off the wire (the server's oracle.UnreadableNote
// and env.SolverUnreadableReason; their tests pin the same texts).
const (
	// unreadableActionNote ends the oracle_action of a question whose
	// stage-1 output could not be read: "unanswerable() (unreadable)".
	unreadableActionNote = " (unreadable)"
	// solverUnreadableReason is the verifier_reason of an episode whose
	// LLM solver's output could not be read (a failed solution).
	solverUnreadableReason = "the solver wrote no SQL: its output could not be read"
)

// unreadableTally is an episode's environment that counts, in the
// privileged channel of each step, the model outputs the server could not
// read: the oracle's per question, the solver's at the end. It forwards
// ListProtocols (driver.RulesSource) to the environment it wraps.
type unreadableTally struct {
	driver.Env
	oracle, solver int
}

func (u *unreadableTally) Step(ctx context.Context, req *pb.StepRequest) (*pb.StepResponse, error) {
	resp, err := u.Env.Step(ctx, req)
	if err == nil {
		p := resp.GetPrivileged()
		if strings.HasSuffix(p.GetOracleAction(), unreadableActionNote) {
			u.oracle++
		}
		if resp.GetDone() && p.GetVerifierReason() == solverUnreadableReason {
			u.solver++
		}
	}
	return resp, err
}

// ListProtocols implements driver.RulesSource when the wrapped
// environment does.
func (u *unreadableTally) ListProtocols(ctx context.Context, req *pb.ListProtocolsRequest) (*pb.ListProtocolsResponse, error) {
	if src, ok := u.Env.(driver.RulesSource); ok {
		return src.ListProtocols(ctx, req)
	}
	return nil, errors.New("eval: the environment does not publish its protocols' rules (ListProtocols)")
}

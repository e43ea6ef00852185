package env

import (
	"context"
	"fmt"
	"slices"

	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
)

// ReferenceOracle is the reference oracle (PROTOCOL.md §3, §6): the
// deterministic oracle, which stands in for the perfect oracle O* and whose
// responder is every hybrid's. Every server serves it.
const ReferenceOracle = pb.OracleType_ORACLE_TYPE_DETERMINISTIC

// hybrids maps each oracle type to its hybrid: the oracle with its matcher
// and the reference responder (PROTOCOL.md §3). An oracle whose responder
// already is the reference one is its own hybrid.
var hybrids = map[pb.OracleType]pb.OracleType{
	pb.OracleType_ORACLE_TYPE_DETERMINISTIC:        pb.OracleType_ORACLE_TYPE_DETERMINISTIC,
	pb.OracleType_ORACLE_TYPE_LLM:                  pb.OracleType_ORACLE_TYPE_HYBRID,
	pb.OracleType_ORACLE_TYPE_LLM_SCOPED:           pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED,
	pb.OracleType_ORACLE_TYPE_HYBRID:               pb.OracleType_ORACLE_TYPE_HYBRID,
	pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED:        pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED,
	pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER: pb.OracleType_ORACLE_TYPE_DETERMINISTIC,   // its matcher is the deterministic one
	pb.OracleType_ORACLE_TYPE_TEST_CREDIT_ALL:      pb.OracleType_ORACLE_TYPE_TEST_CREDIT_ALL, // its responder is the deterministic one
}

// HybridOf returns the hybrid of an oracle type (PROTOCOL.md §3): the
// oracle pairing its matcher with the reference (deterministic) responder.
// It reports false for a type that has none (UNSPECIFIED, unknown values).
func HybridOf(t pb.OracleType) (pb.OracleType, bool) {
	h, ok := hybrids[t]
	return h, ok
}

// IsTestOracle reports whether t is a test fixture (an ORACLE_TYPE_TEST_
// value, 90 and up): deliberately leaky, never for training.
func IsTestOracle(t pb.OracleType) bool { return t >= pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER }

// checkHybrids checks that every configured oracle is of a type with a
// hybrid and that its hybrid is configured too, so that every served
// oracle's responder diagnostic can be computed on this server.
func checkHybrids(oracles map[pb.OracleType]Oracle) error {
	for t, o := range oracles {
		if o == nil {
			continue
		}
		h, ok := HybridOf(t)
		if !ok {
			return errorf(Internal, ReasonInternal, "", "env: oracle %s has no known hybrid", t)
		}
		if oracles[h] == nil {
			return errorf(Internal, ReasonInternal, "", "env: oracle %s is served without its hybrid %s", t, h)
		}
	}
	return nil
}

// ListOracles lists the served oracles in OracleType order, each with the
// descriptions of its matcher and responder (oracle.Oracle.Describe, or
// the Go types of another implementation), its hybrid and whether it is a
// test fixture, and names the reference oracle.
func (e *Env) ListOracles(ctx context.Context, _ *pb.ListOraclesRequest) (*pb.ListOraclesResponse, error) {
	types := make([]pb.OracleType, 0, len(e.cfg.Oracles))
	for t, o := range e.cfg.Oracles {
		if o != nil {
			types = append(types, t)
		}
	}
	slices.Sort(types)
	out := &pb.ListOraclesResponse{Reference: ReferenceOracle}
	for _, t := range types {
		h, _ := HybridOf(t) // checked by New
		m, r := describe(e.cfg.Oracles[t])
		out.Oracles = append(out.Oracles, &pb.OracleInfo{Type: t, Matcher: m, Responder: r, Hybrid: h, TestFixture: IsTestOracle(t)})
	}
	return out, nil
}

// describe returns an oracle's matcher and responder descriptions.
func describe(o Oracle) (matcher, responder string) {
	if d, ok := o.(interface{ Describe() (string, string) }); ok {
		return d.Describe()
	}
	t := fmt.Sprintf("%T", o)
	return t, t
}

// The oracle package's Oracle is what New expects.
var _ Oracle = oracle.Oracle{}

package env_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"avtgym/corpus"
	"avtgym/driver"
	"avtgym/engines"
	"avtgym/env"
	"avtgym/internal/conformance"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
)

// *env.Env is an episode environment as the driver sees it, and the
// suite's source of size bounds.
var (
	_ driver.Env         = (*env.Env)(nil)
	_ conformance.Limits = (*env.Env)(nil)
)

// TestConformance runs the conformance suite on the in-process
// environment: every protocol on the embedded demo corpus, with the
// deterministic oracle, through driver.Env (subtests PROTOCOL/inprocess).
func TestConformance(t *testing.T) {
	e := demoConformanceEnv(t)
	conformance.Run(t, conformance.Target{
		Name:      "inprocess",
		Env:       e,
		Foreign:   demoConformanceEnv(t), // another key
		Limits:    e,
		ErrorOf:   inProcessError,
		Protocols: e.ListProtocols,
	})
}

// demoConformanceEnv serves the demo corpus under a fresh random key.
func demoConformanceEnv(t *testing.T) *env.Env {
	t.Helper()
	c, err := corpus.LoadDemo(context.Background(), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := env.NewSealer(env.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	e, err := env.New(env.Config{
		Corpora: []*corpus.Corpus{c},
		Sealer:  s,
		Oracles: map[pb.OracleType]env.Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: oracle.Deterministic()},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// inProcessError reads an env error as the server sends it: the gRPC code
// of its env.Code and its reason's name.
func inProcessError(err error) (codes.Code, string) {
	var e *env.Error
	if !errors.As(err, &e) {
		return codes.Unknown, ""
	}
	code, ok := map[env.Code]codes.Code{
		env.InvalidArgument:    codes.InvalidArgument,
		env.FailedPrecondition: codes.FailedPrecondition,
		env.NotFound:           codes.NotFound,
		env.Internal:           codes.Internal,
		env.Unavailable:        codes.Unavailable,
		env.ResourceExhausted:  codes.ResourceExhausted,
	}[e.Code]
	if !ok {
		code = codes.Unknown
	}
	return code, e.Reason.String()
}

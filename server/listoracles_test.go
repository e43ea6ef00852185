package server_test

import (
	"context"
	"testing"
	"time"

	"avtgym/app"
	"avtgym/internal/fakellm"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// TestListOracles: a server with the LLM oracles and the test fixtures
// lists all seven oracles, each with its hybrid as PROTOCOL.md §3 and the
// API document it; every hybrid is served, shares its oracle's matcher
// (equal descriptions) and has the reference responder.
func TestListOracles(t *testing.T) {
	fake := fakellm.New(fakellm.Options{})
	defer fake.Close()
	_, c := startTiny(t, withTestOracles, func(cfg *app.Config) {
		cfg.OracleLLM = llm.Config{BaseURL: fake.URL, Model: "fake", BackoffBase: time.Millisecond}
	})
	r, err := c.ListOracles(context.Background(), &pb.ListOraclesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		ty, hybrid pb.OracleType
		test       bool
	}{
		{pb.OracleType_ORACLE_TYPE_DETERMINISTIC, pb.OracleType_ORACLE_TYPE_DETERMINISTIC, false},
		{pb.OracleType_ORACLE_TYPE_LLM, pb.OracleType_ORACLE_TYPE_HYBRID, false},
		{pb.OracleType_ORACLE_TYPE_LLM_SCOPED, pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED, false},
		{pb.OracleType_ORACLE_TYPE_HYBRID, pb.OracleType_ORACLE_TYPE_HYBRID, false},
		{pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED, pb.OracleType_ORACLE_TYPE_HYBRID_SCOPED, false},
		{pb.OracleType_ORACLE_TYPE_TEST_LEAKY_RESPONDER, pb.OracleType_ORACLE_TYPE_DETERMINISTIC, true},
		{pb.OracleType_ORACLE_TYPE_TEST_CREDIT_ALL, pb.OracleType_ORACLE_TYPE_TEST_CREDIT_ALL, true},
	}
	if r.Reference != pb.OracleType_ORACLE_TYPE_DETERMINISTIC || len(r.Oracles) != len(want) {
		t.Fatalf("ListOracles = %v", r)
	}
	byType := map[pb.OracleType]*pb.OracleInfo{}
	for i, o := range r.Oracles {
		w := want[i]
		if o.Type != w.ty || o.Hybrid != w.hybrid || o.TestFixture != w.test || o.Matcher == "" || o.Responder == "" {
			t.Errorf("oracle %d = %v, want type %s hybrid %s test fixture %v", i, o, w.ty, w.hybrid, w.test)
		}
		byType[o.Type] = o
	}
	ref := byType[r.Reference]
	for _, o := range r.Oracles {
		h := byType[o.Hybrid]
		if h == nil {
			t.Errorf("%s: hybrid %s is not served", o.Type, o.Hybrid)
			continue
		}
		if h.Matcher != o.Matcher || h.Responder != ref.Responder {
			t.Errorf("%s: hybrid %s has matcher %q and responder %q, want %q and the reference's %q", o.Type, h.Type, h.Matcher, h.Responder, o.Matcher, ref.Responder)
		}
		if (o.Responder == ref.Responder) != (o.Hybrid == o.Type) {
			t.Errorf("%s: responder %q, hybrid %s: an oracle is its own hybrid exactly when its responder is the reference's", o.Type, o.Responder, o.Hybrid)
		}
	}
	// The two LLM matchers differ: the scoped oracle's diagnostics no
	// longer swap in the unfiltered matcher.
	if byType[pb.OracleType_ORACLE_TYPE_LLM].Matcher == byType[pb.OracleType_ORACLE_TYPE_LLM_SCOPED].Matcher {
		t.Error("the unfiltered and scoped LLM matchers have the same description")
	}
}

// TestListOraclesDefault: a plain server serves the deterministic oracle
// only.
func TestListOraclesDefault(t *testing.T) {
	_, c := startTiny(t)
	r, err := c.ListOracles(context.Background(), &pb.ListOraclesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Oracles) != 1 || r.Oracles[0].Type != pb.OracleType_ORACLE_TYPE_DETERMINISTIC || r.Oracles[0].Hybrid != pb.OracleType_ORACLE_TYPE_DETERMINISTIC || r.Reference != pb.OracleType_ORACLE_TYPE_DETERMINISTIC {
		t.Fatalf("ListOracles = %v", r)
	}
}

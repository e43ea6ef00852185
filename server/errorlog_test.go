package server_test

import (
	"net"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"avtgym/app"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// TestErrorCauseLogged: every step that ends an episode in ERROR — a
// single Step or a batch item — is logged at warn level with its cause
// (the endpoint's error, which the policy's notice leaves out) and the
// episode; a step that does not end in ERROR logs no such warning.
func TestErrorCauseLogged(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String() + "/v1" // nothing answers
	l.Close()
	core, logs := observer.New(zapcore.InfoLevel)
	_, c := startTiny(t, func(cfg *app.Config) {
		cfg.Logger = zap.New(core)
		cfg.NoLLMCache = true
		cfg.OracleLLM = llm.Config{BaseURL: down, Model: "fake", MaxRetries: -1}
	})
	failed := func() []observer.LoggedEntry {
		return logs.FilterMessage("episode ended in ERROR").AllUntimed()
	}
	ok := reset(t, c, &pb.ResetRequest{TaskId: "big"})
	step(t, c, ok.Token, ask(fullQ("big sales")), false)
	if n := len(failed()); n != 0 {
		t.Fatalf("%d ERROR warnings for a step that went on", n)
	}
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big", Options: llmOpts(pb.OracleType_ORACLE_TYPE_LLM)})
	r := step(t, c, ep.Token, ask(fullQ("big sales")), false)
	if r.Status != pb.EpisodeStatus_EPISODE_STATUS_ERROR {
		t.Fatalf("status %s, want ERROR", r.Status)
	}
	if _, err := c.StepBatch(ctxT(t), &pb.StepBatchRequest{Steps: []*pb.StepRequest{{Token: ep.Token, Action: ask(fullQ("big sales"))}}}); err != nil {
		t.Fatal(err)
	}
	entries := failed()
	if len(entries) != 2 {
		t.Fatalf("%d ERROR warnings, want 2 (the step and the batch item)", len(entries))
	}
	for _, e := range entries {
		f := e.ContextMap()
		cause, _ := f["cause"].(string)
		if e.Level != zapcore.WarnLevel || !strings.Contains(cause, "the oracle failed") || !strings.Contains(cause, l.Addr().String()) ||
			f["task"] != "big" || f["episode_id"] == "" {
			t.Errorf("entry %v %q %v", e.Level, e.Message, f)
		}
	}
}

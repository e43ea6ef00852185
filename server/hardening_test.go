package server_test

// Hostile input over real gRPC: batches bounded by episodes and by
// response bytes, requests that do not decode or are too large, long
// tokens and replies, and the policy's own faults, which are scored.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"avtgym/app"
	"avtgym/client"
	"avtgym/corpus"
	"avtgym/engines"
	"avtgym/env"
	"avtgym/internal/testutil"
	"avtgym/oracle"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/server"
)

// custom is a server built with explicit server.Options (small message
// limits keep these tests cheap) on the tiny corpus, over TCP.
type custom struct {
	env  *env.Env
	addr string
	c    *client.Client
}

func startWith(t *testing.T, opt server.Options, edit ...func(*app.Config)) *custom {
	t.Helper()
	cfg := app.Config{Corpora: []string{testutil.WriteTiny(t)}}
	for _, e := range edit {
		e(&cfg)
	}
	a, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(a.Env, opt)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	// RawResets: these tests measure the responses as the server sends
	// them (the default form unless a request asks for the shared one).
	c, err := client.Dial(lis.Addr().String(), client.Options{CallTimeout: 30 * time.Second, Attempts: 1, RawResets: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		a.Close()
	})
	return &custom{env: a.Env, addr: lis.Addr().String(), c: c}
}

// rawCodec sends and receives raw bytes: a client that speaks no protobuf.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*(v.(*[]byte)))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*(v.(*[]byte)) = data.Materialize()
	return nil
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

func hasRetryInfo(st *status.Status) bool {
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return true
		}
	}
	return false
}

func wantHealthy(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	h, err := healthpb.NewHealthClient(conn).Check(ctxT(t), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after the attack: %v %v", h, err)
	}
	if _, err := pb.NewEnvServiceClient(conn).Reset(ctxT(t), &pb.ResetRequest{TaskId: "big"}); err != nil {
		t.Fatalf("a reset after the attack: %v", err)
	}
}

// TestResetBatchEpisodeLimit: 4096 items × group 1024 (each within its own
// limit, 61 KB on the wire) would be 4 million episodes; the call is
// refused before anything is built, and the server stays healthy.
func TestResetBatchEpisodeLimit(t *testing.T) {
	s, c := startTiny(t)
	req := &pb.ResetBatchRequest{}
	for range server.MaxBatch {
		req.Requests = append(req.Requests, &pb.ResetRequest{TaskId: "big", GroupSize: env.MaxGroupSize})
	}
	if n := proto.Size(req); n > 100_000 {
		t.Fatalf("test bug: the request is %d bytes", n)
	}
	_, err := c.ResetBatch(ctxT(t), req)
	wantError(t, err, codes.InvalidArgument, "BATCH_TOO_LARGE")
	st := status.Convert(err)
	if ei := errorInfo(st); ei.Metadata["field"] != "requests.group_size" || !strings.Contains(st.Message(), "4194304 episodes") || !strings.Contains(st.Message(), "65536") {
		t.Errorf("status %q, metadata %v", st.Message(), ei.Metadata)
	}
	// One item more than a batch holds: refused too.
	req.Requests = append(req.Requests, &pb.ResetRequest{})
	_, err = c.ResetBatch(ctxT(t), req)
	wantError(t, err, codes.InvalidArgument, "BATCH_TOO_LARGE")
	_, err = c.StepBatch(ctxT(t), &pb.StepBatchRequest{Steps: make([]*pb.StepRequest, server.MaxBatch+1)})
	wantError(t, err, codes.InvalidArgument, "BATCH_TOO_LARGE")
	wantHealthy(t, s.Client.Conn())
}

// TestResetBatchEpisodeLimitBoundary: exactly MaxBatchEpisodes is allowed;
// with a small send limit the items that do not fit are refused each on
// its own, before their episodes are built.
func TestResetBatchEpisodeLimitBoundary(t *testing.T) {
	const limit = 256 << 10
	cs := startWith(t, server.Options{MaxSendBytes: limit})
	c := cs.c.Env
	req := &pb.ResetBatchRequest{}
	for range server.MaxBatchEpisodes / env.MaxGroupSize {
		req.Requests = append(req.Requests, &pb.ResetRequest{TaskId: "big", GroupSize: env.MaxGroupSize})
	}
	resp, err := c.ResetBatch(ctxT(t), req)
	if err != nil {
		t.Fatalf("%d episodes: %v", server.MaxBatchEpisodes, err)
	}
	for i, r := range resp.Results {
		st := status.FromProto(r.Status)
		if st.Code() != codes.ResourceExhausted || errorInfo(st).GetReason() != "RESPONSE_TOO_LARGE" || r.Response != nil {
			t.Fatalf("item %d: %v, want RESPONSE_TOO_LARGE (a group of 1024 is over %d bytes)", i, st, limit)
		}
	}
	req.Requests = append(req.Requests, &pb.ResetRequest{TaskId: "big"})
	_, err = c.ResetBatch(ctxT(t), req)
	wantError(t, err, codes.InvalidArgument, "BATCH_TOO_LARGE")
	wantHealthy(t, cs.c.Conn())
}

// TestResetBatchByteBudget: the items that fit succeed in full; the rest
// get RESOURCE_EXHAUSTED each, with a RetryInfo and a message that says how
// to split; the response stays within the send limit.
func TestResetBatchByteBudget(t *testing.T) {
	const limit = 256 << 10
	cs := startWith(t, server.Options{MaxSendBytes: limit})
	c := cs.c.Env
	one, err := c.Reset(ctxT(t), &pb.ResetRequest{TaskId: "big", GroupSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	n := 2*limit/proto.Size(one) + 1 // about twice what fits
	req := &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{{TaskId: "no-such-task"}}}
	for range n {
		req.Requests = append(req.Requests, &pb.ResetRequest{TaskId: "big", GroupSize: 16})
	}
	resp, err := c.ResetBatch(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if size := proto.Size(resp); size > limit {
		t.Fatalf("the response is %d bytes, over the %d-byte limit", size, limit)
	}
	if got := codes.Code(resp.Results[0].Status.GetCode()); got != codes.NotFound {
		t.Errorf("the unknown task: %s", got)
	}
	ok, over := 0, 0
	for i, r := range resp.Results[1:] {
		st := status.FromProto(r.Status)
		switch st.Code() {
		case codes.OK:
			ok++
			if len(r.Response.GetEpisodes()) != 16 {
				t.Errorf("item %d: %d episodes", i, len(r.Response.GetEpisodes()))
			}
		case codes.ResourceExhausted:
			over++
			if errorInfo(st).GetReason() != "RESPONSE_TOO_LARGE" || !hasRetryInfo(st) || !strings.Contains(st.Message(), "resend the item in another batch, or ask for a smaller group") || r.Response != nil {
				t.Errorf("item %d: %v (details %v)", i, st, st.Details())
			}
		default:
			t.Errorf("item %d: %v", i, st)
		}
	}
	if ok == 0 || over == 0 || ok+over != n {
		t.Fatalf("%d items: %d succeeded, %d over budget; want both", n, ok, over)
	}
	if ok*proto.Size(one) < limit/2 {
		t.Errorf("only %d of %d items fit in %d bytes", ok, n, limit)
	}
}

// TestUnaryResetTooLarge: a group whose response the server could not send
// fails cleanly, before it is built, and says which group would fit.
func TestUnaryResetTooLarge(t *testing.T) {
	cs := startWith(t, server.Options{MaxSendBytes: 256 << 10})
	c := cs.c.Env
	_, err := c.Reset(ctxT(t), &pb.ResetRequest{TaskId: "big", GroupSize: env.MaxGroupSize})
	wantError(t, err, codes.ResourceExhausted, "RESPONSE_TOO_LARGE")
	st := status.Convert(err)
	ei := errorInfo(st)
	fit, _ := strconv.Atoi(ei.Metadata["max_group_size"])
	if fit < 1 || fit >= env.MaxGroupSize || ei.Metadata["field"] != "group_size" || hasRetryInfo(st) || !strings.Contains(st.Message(), fmt.Sprintf("at most %d episodes", fit)) {
		t.Fatalf("status %q metadata %v retry %v", st.Message(), ei.Metadata, hasRetryInfo(st))
	}
	resp, err := c.Reset(ctxT(t), &pb.ResetRequest{TaskId: "big", GroupSize: int32(fit)})
	if err != nil || len(resp.Episodes) != fit {
		t.Fatalf("the suggested group of %d: %v", fit, err)
	}
	wantHealthy(t, cs.c.Conn())
}

// TestStepBatchOverflow: long asks whose results overflow the response get
// RESOURCE_EXHAUSTED item by item; the others succeed, and the overflowed
// items succeed when resent in other batches.
func TestStepBatchOverflow(t *testing.T) {
	const limit = 512 << 10
	cs := startWith(t, server.Options{MaxSendBytes: limit})
	c := cs.c.Env
	rr, err := c.Reset(ctxT(t), &pb.ResetRequest{TaskId: "big", GroupSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	q := fullQ("big sales")
	q += strings.Repeat(" ", env.MaxQuestionBytes-len(q)) // a valid question at the limit
	pending := map[int]*pb.StepRequest{}
	for i, ep := range rr.Episodes {
		pending[i] = &pb.StepRequest{Token: ep.Token, Action: ask(q), IncludePrivileged: true}
	}
	done := map[int]*pb.StepResponse{}
	for round := 0; len(pending) > 0; round++ {
		if round == 10 {
			t.Fatalf("%d items still pending after 10 rounds", len(pending))
		}
		var idx []int
		req := &pb.StepBatchRequest{}
		for i, s := range pending {
			idx = append(idx, i)
			req.Steps = append(req.Steps, s)
		}
		resp, err := c.StepBatch(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if size := proto.Size(resp); size > limit {
			t.Fatalf("round %d: the response is %d bytes, over the %d-byte limit", round, size, limit)
		}
		over := 0
		for k, r := range resp.Results {
			st := status.FromProto(r.Status)
			switch st.Code() {
			case codes.OK:
				done[idx[k]] = r.Response
				delete(pending, idx[k])
			case codes.ResourceExhausted:
				over++
				if errorInfo(st).GetReason() != "RESPONSE_TOO_LARGE" || !hasRetryInfo(st) || !strings.Contains(st.Message(), "resend the item in another batch") {
					t.Fatalf("round %d item %d: %v", round, k, st)
				}
			default:
				t.Fatalf("round %d item %d: %v", round, k, st)
			}
		}
		if round == 0 && (over == 0 || over == len(req.Steps)) {
			t.Fatalf("first round: %d of %d items over budget; want some of each", over, len(req.Steps))
		}
	}
	for i, r := range done {
		if len(r.Privileged.GetCredits()) != 1 || r.Observation.QuestionsAsked != 1 || r.Observation.Turns[1].Text != "Sales of 100 dollars or more." {
			t.Errorf("episode %d: %v", i, r.Observation)
		}
	}
}

// TestUnaryStepTooLarge: a unary response over the send limit is refused
// with details rather than by grpc's bare status.
func TestUnaryStepTooLarge(t *testing.T) {
	cs := startWith(t, server.Options{MaxSendBytes: 24 << 10})
	c := cs.c.Env
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big"})
	_, err := c.Step(ctxT(t), &pb.StepRequest{Token: ep.Token, Action: ask(fullQ("big sales") + strings.Repeat(" ", 15<<10))})
	wantError(t, err, codes.ResourceExhausted, "RESPONSE_TOO_LARGE")
	step(t, c, ep.Token, ask(fullQ("big sales")), false) // a small one passes
}

// TestUndecodableRequests: bytes that are no request get INVALID_ARGUMENT
// with ErrorInfo REQUEST_MALFORMED, on unary calls and on streams.
func TestUndecodableRequests(t *testing.T) {
	s, _ := startTiny(t)
	conn := s.Client.Conn()
	garbage := []byte{0x0a, 0xff, 0xff, 0xff}
	for _, method := range []string{
		"/avtgym.v1.EnvService/Step", "/avtgym.v1.EnvService/StepBatch", "/avtgym.v1.EnvService/ResetBatch",
		"/avtgym.v1.EnvService/Reset", "/avtgym.v1.OracleService/Ask", "/grpc.health.v1.Health/Check",
	} {
		var out []byte
		err := conn.Invoke(ctxT(t), method, &garbage, &out, grpc.ForceCodecV2(rawCodec{}))
		wantError(t, err, codes.InvalidArgument, "REQUEST_MALFORMED")
		if msg := status.Convert(err).Message(); !strings.Contains(msg, "does not decode as a ") {
			t.Errorf("%s: %q", method, msg)
		}
	}
	// A health Watch (server streaming) and a reflection stream (bidi).
	for _, m := range []struct {
		name string
		desc grpc.StreamDesc
	}{
		{"/grpc.health.v1.Health/Watch", grpc.StreamDesc{ServerStreams: true}},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", grpc.StreamDesc{ServerStreams: true, ClientStreams: true}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := conn.NewStream(ctx, &m.desc, m.name, grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if err := stream.SendMsg(&garbage); err != nil {
			t.Fatalf("%s: send: %v", m.name, err)
		}
		stream.CloseSend()
		var out []byte
		err = stream.RecvMsg(&out)
		cancel()
		wantError(t, err, codes.InvalidArgument, "REQUEST_MALFORMED")
	}
	// The documented exceptions: two request messages on a unary call are
	// grpc's INTERNAL (cardinality violation), before any interceptor runs;
	// an unknown method is grpc's UNIMPLEMENTED.
	{
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/avtgym.v1.EnvService/Step", grpc.ForceCodecV2(rawCodec{}))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		stream.SendMsg(&garbage)
		stream.SendMsg(&garbage)
		stream.CloseSend()
		var out []byte
		err = stream.RecvMsg(&out)
		cancel()
		if st := status.Convert(err); st.Code() != codes.Internal || errorInfo(st) != nil || !strings.Contains(st.Message(), "cardinality") {
			t.Errorf("two messages on a unary call: %v", st)
		}
	}
	var out []byte
	err := conn.Invoke(ctxT(t), "/avtgym.v1.EnvService/NoSuchMethod", &garbage, &out, grpc.ForceCodecV2(rawCodec{}))
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("unknown method: %v", err)
	}
	wantHealthy(t, conn)
}

// TestOversizedRequests: a request over the server's limit gets
// RESOURCE_EXHAUSTED with ErrorInfo naming both sizes; above grpc's own
// limit (a quarter higher) grpc answers first, without details (the
// documented exception).
func TestOversizedRequests(t *testing.T) {
	const limit = 64 << 10
	cs := startWith(t, server.Options{MaxRecvBytes: limit})
	c := cs.c.Env
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big"})
	big := &pb.StepRequest{Token: make([]byte, limit+1000), Action: stop()}
	_, err := c.Step(ctxT(t), big)
	wantError(t, err, codes.ResourceExhausted, "REQUEST_TOO_LARGE")
	st := status.Convert(err)
	size := strconv.Itoa(proto.Size(big))
	if ei := errorInfo(st); ei.Metadata["size_bytes"] != size || ei.Metadata["limit_bytes"] != strconv.Itoa(limit) ||
		!strings.Contains(st.Message(), size+" bytes, more than this server's limit of "+strconv.Itoa(limit)) || hasRetryInfo(st) {
		t.Errorf("status %q metadata %v", st.Message(), ei.Metadata)
	}
	huge := &pb.StepRequest{Token: make([]byte, limit+limit/4+1), Action: stop()}
	_, err = c.Step(ctxT(t), huge)
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || errorInfo(st) != nil {
		t.Errorf("above grpc's own limit: %v (details %v), want grpc's bare RESOURCE_EXHAUSTED", st, st.Details())
	}
	step(t, c, ep.Token, stop(), false)
	wantHealthy(t, cs.c.Conn())
}

// TestStreamsStillWork: the stream interceptor leaves working streams
// alone: a health Watch reports SERVING (reflection is
// TestReflectionListsServices).
func TestStreamsStillWork(t *testing.T) {
	s, _ := startTiny(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	w, err := s.Client.Health.Watch(ctx, &healthpb.HealthCheckRequest{Service: "avtgym.v1.EnvService"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.Recv()
	if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", r, err)
	}
	cancel()
	if _, err := w.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("after cancel: %v", err)
	}
	// An unknown service is NOT_FOUND from the health server, with an
	// ErrorInfo added.
	_, err = s.Client.Health.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: "nope"})
	wantError(t, err, codes.NotFound, "NOT_FOUND")
}

// TestLongTokenRejected: a token longer than any this server issues is
// TOKEN_MALFORMED, decided before decryption (the same bytes one shorter
// fail authentication instead).
func TestLongTokenRejected(t *testing.T) {
	s, c := startTiny(t)
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big"})
	n := s.App.Env.MaxTokenBytes()
	long := append(append([]byte(nil), ep.Token...), make([]byte, n+1-len(ep.Token))...)
	_, err := c.Step(ctxT(t), &pb.StepRequest{Token: long, Action: stop()})
	wantError(t, err, codes.InvalidArgument, "TOKEN_MALFORMED")
	_, err = c.Step(ctxT(t), &pb.StepRequest{Token: long[:n], Action: stop()})
	wantError(t, err, codes.InvalidArgument, "TOKEN_TAMPERED")
}

// TestLongReplyCut: a reply over the limit (here a resolution of 50 KB)
// is cut, at a rune boundary and marked, in the observation and in the
// token.
func TestLongReplyCut(t *testing.T) {
	long := strings.Repeat("Ventes ≥ 100 € ", 3400)
	_, c := startTiny(t, func(cfg *app.Config) {
		cfg.Corpora = []string{testutil.WriteTiny(t, func(f map[string]string) {
			f["records.jsonl"] = strings.Replace(f["records.jsonl"], "Sales of 100 dollars or more.", long, 1)
		})}
	})
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big"})
	r := step(t, c, ep.Token, ask(fullQ("big sales")), true)
	reply := r.Observation.Turns[1].Text
	if len(reply) > env.MaxReplyBytes || !utf8.ValidString(reply) || !strings.HasSuffix(reply, env.TruncationMarker) || !strings.HasPrefix(long, strings.TrimSuffix(reply, env.TruncationMarker)) {
		t.Fatalf("reply of %d bytes (valid %v) ends %q", len(reply), utf8.ValidString(reply), reply[max(0, len(reply)-30):])
	}
	if len(r.Privileged.GetCredits()) != 1 {
		t.Errorf("credits %v", r.Privileged.GetCredits())
	}
	// The token holds the cut reply, not the 50 KB.
	if len(r.Token) > env.MaxReplyBytes+1024 {
		t.Errorf("the token is %d bytes", len(r.Token))
	}
	if end := step(t, c, r.Token, stop(), false); !end.Done || end.Reward.GetComponents()["recall"] != 0.5 {
		t.Errorf("the episode did not continue: %v", end)
	}
}

// TestPolicyFaultsAreScored: over the wire, a bad question is a refused
// turn and bad SQL a failed solution, never an error.
func TestPolicyFaultsAreScored(t *testing.T) {
	_, c := startTiny(t)
	outcome := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big", Options: outcome})
	for name, q := range map[string]string{
		"empty": "", "blank": " \t", "invalid UTF-8": "big sales \xff\xfe?", "oversized": strings.Repeat("big sales? ", 3000),
	} {
		r := step(t, c, ep.Token, ask(q), true)
		turns := r.Observation.Turns
		if r.Done || r.Observation.QuestionsAsked != 1 || len(turns) != 2 || turns[1].Role != pb.Role_ROLE_ORACLE || turns[1].Kind != pb.TurnKind_TURN_KIND_REFUSAL ||
			!strings.HasPrefix(turns[1].Text, "I can't answer that: the question ") || len(r.Privileged.GetCredits()) != 0 {
			t.Errorf("%s: %v", name, r.Observation)
		}
		if !utf8.ValidString(turns[0].Text) || len(turns[0].Text) > env.MaxQuestionBytes {
			t.Errorf("%s: the question turn is %d bytes", name, len(turns[0].Text))
		}
	}
	for name, sql := range map[string]string{
		"empty": "", "invalid UTF-8": "SELECT '\xff'", "oversized": "SELECT 1" + strings.Repeat(" ", env.MaxSQLBytes),
	} {
		r := step(t, c, ep.Token, submit(sql), false)
		turns := r.Observation.Turns
		if !r.Done || r.Status != pb.EpisodeStatus_EPISODE_STATUS_TERMINATED || r.Reward.GetValue() != 0 ||
			len(turns) != 2 || turns[1].Kind != pb.TurnKind_TURN_KIND_FEEDBACK || !strings.HasPrefix(turns[1].Text, "Your SQL was not run: it ") {
			t.Errorf("%s: %v %v", name, r.Reward, turns)
		}
	}
}

// panicOracle panics on every question: a bug, or input that reaches one.
type panicOracle struct{}

func (panicOracle) AskWith(ctx context.Context, rec *corpus.Record, history []oracle.Turn, q string, _ oracle.AskOptions) (oracle.Reply, error) {
	panic("oracle bug")
}

// TestPanicsBecomeInternal: a panic while serving a call (in the handler
// or in a batch's worker goroutine) is an INTERNAL status with ErrorInfo,
// and the process keeps serving.
func TestPanicsBecomeInternal(t *testing.T) {
	c, err := corpus.LoadDir(context.Background(), testutil.WriteTiny(t), corpus.Options{Engines: engines.Opener{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sealer, err := env.NewSealer(env.RandomKey())
	if err != nil {
		t.Fatal(err)
	}
	e, err := env.New(env.Config{Corpora: []*corpus.Corpus{c}, Sealer: sealer, Oracles: map[pb.OracleType]env.Oracle{pb.OracleType_ORACLE_TYPE_DETERMINISTIC: panicOracle{}}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- server.New(e, server.Options{BatchWorkers: 4}).Serve(ctx, lis) }()
	defer func() { cancel(); <-done }()
	cl, err := client.Dial(lis.Addr().String(), client.Options{Attempts: 1, CallTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ep := reset(t, cl.Env, &pb.ResetRequest{TaskId: "big"})
	_, err = cl.Env.Step(ctxT(t), &pb.StepRequest{Token: ep.Token, Action: ask(fullQ("big sales"))})
	wantError(t, err, codes.Internal, "INTERNAL")
	batch := &pb.StepBatchRequest{}
	for range 8 {
		batch.Steps = append(batch.Steps, &pb.StepRequest{Token: ep.Token, Action: ask(fullQ("big sales"))})
	}
	batch.Steps = append(batch.Steps, &pb.StepRequest{Token: ep.Token, Action: stop()})
	resp, err := cl.Env.StepBatch(ctxT(t), batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range resp.Results {
		st := status.FromProto(r.Status)
		want := codes.Internal
		if i == 8 {
			want = codes.OK
		}
		if st.Code() != want || (want == codes.Internal && errorInfo(st).GetReason() != "INTERNAL") {
			t.Errorf("item %d: %v, want %s", i, st, want)
		}
	}
	step(t, cl.Env, ep.Token, stop(), false)
}

// TestBatchTooManyItemsForTheLimit: with a send limit too small to hold
// even every item's overflow status, the call is refused as a whole.
func TestBatchTooManyItemsForTheLimit(t *testing.T) {
	cs := startWith(t, server.Options{MaxSendBytes: 64 << 10})
	_, err := cs.c.Env.StepBatch(ctxT(t), &pb.StepBatchRequest{Steps: make([]*pb.StepRequest, server.MaxBatch)})
	wantError(t, err, codes.ResourceExhausted, "RESPONSE_TOO_LARGE")
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "a batch of 4096 items needs at least") {
		t.Errorf("message %q", msg)
	}
	resp, err := cs.c.Env.StepBatch(ctxT(t), &pb.StepBatchRequest{Steps: make([]*pb.StepRequest, 16)})
	if err != nil || len(resp.Results) != 16 || codes.Code(resp.Results[0].Status.GetCode()) != codes.InvalidArgument {
		t.Fatalf("16 items without tokens: %v %v", resp, err)
	}
}

// TestLongTextInErrors: a status quoting a long request field (a 100 KB
// task id) is cut to MaxErrorMessageBytes, so that it still fits the
// trailers and reaches the client as a status with details.
func TestLongTextInErrors(t *testing.T) {
	_, c := startTiny(t)
	id := strings.Repeat("é", 50_000)
	_, err := c.Reset(ctxT(t), &pb.ResetRequest{TaskId: id})
	wantError(t, err, codes.NotFound, "UNKNOWN_TASK")
	if msg := status.Convert(err).Message(); len(msg) > server.MaxErrorMessageBytes || !utf8.ValidString(msg) || !strings.HasSuffix(msg, env.TruncationMarker) {
		t.Errorf("message of %d bytes: %q…", len(msg), msg[:min(len(msg), 80)])
	}
	resp, err := c.ResetBatch(ctxT(t), &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{{TaskId: id}, {TaskId: "big"}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Results[0].Status; codes.Code(st.GetCode()) != codes.NotFound || len(st.GetMessage()) > server.MaxErrorMessageBytes || resp.Results[1].Response == nil {
		t.Errorf("batch: %v, message of %d bytes", codes.Code(st.GetCode()), len(st.GetMessage()))
	}
}

package server_test

// Issue 25 ("Reward integrity") over real gRPC: batches count their full
// weight against the server's limit, callers without credentials are
// refused before their requests are read, the access log records the code
// the client got, and the episode log keeps whole lines on a full disk.
// Each test replays the attack, and the attacks one would try next.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"avtgym/app"
	"avtgym/client"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/server"
)

// twoPrincipals are principals "a" (trainer) and "b" (policy), with tokens
// "token-a" and "token-b".
func twoPrincipals(t *testing.T) *server.Principals {
	t.Helper()
	p, err := server.ParsePrincipals([]byte(fmt.Sprintf(`{"principals": [
		{"name": "a", "role": "trainer", "token_sha256": %q},
		{"name": "b", "role": "policy", "token_sha256": %q}]}`, server.TokenDigest("token-a"), server.TokenDigest("token-b"))))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// askBatch is a StepBatch of n questions on one episode.
func askBatch(t *testing.T, c pb.EnvServiceClient, n int) *pb.StepBatchRequest {
	t.Helper()
	ep := reset(t, c, &pb.ResetRequest{TaskId: "big", Seed: seed(1)})
	req := &pb.StepBatchRequest{}
	for range n {
		req.Steps = append(req.Steps, &pb.StepRequest{Token: ep.Token, Action: ask(fullQ("big sales"))})
	}
	return req
}

// scrape returns the server's metrics in the Prometheus text format.
func scrape(t *testing.T, m *server.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

// TestAdmissionBatchesCountFullWeight is issue 25's first finding, over
// gRPC with two principals: with --max-inflight 64
// --max-inflight-per-principal 32, principal a's 200-step StepBatch runs
// alone (held in the oracle), and b's 200-step batch, and any call, is
// refused by the server's limit while it runs; once a's ends, b's runs.
func TestAdmissionBatchesCountFullWeight(t *testing.T) {
	s := startGated(t, server.Options{MaxInFlight: 64, MaxInFlightPerPrincipal: 32, Principals: twoPrincipals(t)})
	a, b := dial(t, s.addr, client.Options{Token: "token-a"}), dial(t, s.addr, client.Options{Token: "token-b"})
	reqA, reqB := askBatch(t, a.Env, 200), askBatch(t, b.Env, 200)
	done := make(chan error, 1)
	go func() {
		out, err := a.Env.StepBatch(context.Background(), reqA)
		for i, r := range out.GetResults() {
			if err == nil && r.GetStatus() != nil {
				err = fmt.Errorf("a's item %d: %v", i, r.GetStatus())
			}
		}
		done <- err
	}()
	waitFor(t, "a's batch running", func() bool { return s.gate.arrived.Load() > 0 })
	if got := s.srv.Admission().InFlight; got != 200 {
		t.Fatalf("%d items in flight, want a's 200 (its full weight)", got)
	}
	_, err := b.Env.StepBatch(ctxT(t), reqB)
	wantCode(t, "b's batch beside a's", err, codes.ResourceExhausted, "OVERLOADED")
	if scope := errorInfo(status.Convert(err)).GetMetadata()["scope"]; scope != "server" {
		t.Fatalf("scope %q, want server", scope)
	}
	_, err = b.Oracle.Ask(ctxT(t), askReq("big sales"))
	wantCode(t, "b's unary call beside a's batch", err, codes.ResourceExhausted, "OVERLOADED")
	if got := s.srv.Admission().InFlight; got != 200 {
		t.Fatalf("%d items in flight, want 200", got)
	}
	close(s.gate.open)
	if err := <-done; err != nil {
		t.Fatalf("a's batch: %v", err)
	}
	out, err := b.Env.StepBatch(ctxT(t), reqB)
	if err != nil || len(out.GetResults()) != 200 {
		t.Fatalf("b's batch on the idle server: %d results, %v", len(out.GetResults()), err)
	}
	if st := s.srv.Admission(); st.RejectedServer != 2 || st.RejectedPrincipal != 0 || st.InFlight != 0 {
		t.Fatalf("admission %+v, want the 2 refusals by the server's limit and nothing in flight", st)
	}
}

// TestUnauthenticatedRequestIsNeverRead is issue 25's second finding: a
// caller without valid credentials is refused from its metadata, and its
// request is never read. The server's limit is 1 KiB (grpc's own 1.25
// KiB), and every unary method of EnvService and OracleService is sent a
// 64 KiB request: read, it would fail for its size (as the trainer's
// does); unread, it is refused UNAUTHENTICATED. The refusals are logged
// and counted. Then the attacks one would try next: a health-looking path
// that names another method, and a garbage token.
func TestUnauthenticatedRequestIsNeverRead(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	m := server.NewMetrics()
	s := startWith(t, server.Options{Principals: twoPrincipals(t), MaxRecvBytes: 1 << 10, Logger: zap.New(core), Metrics: m})
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	big, err := (&pb.ResetRequest{TaskId: strings.Repeat("x", 64<<10)}).MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	var methods []string
	for _, sd := range []grpc.ServiceDesc{pb.EnvService_ServiceDesc, pb.OracleService_ServiceDesc} {
		for _, md := range sd.Methods {
			methods = append(methods, "/"+sd.ServiceName+"/"+md.MethodName)
		}
	}
	call := func(ctx context.Context, method string) error {
		var out []byte
		return conn.Invoke(ctx, method, &big, &out, grpc.ForceCodecV2(rawCodec{}))
	}
	withToken := func(tok string) context.Context {
		return metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer "+tok)
	}
	for _, method := range methods {
		wantCode(t, method+" without credentials", call(ctxT(t), method), codes.Unauthenticated, "CREDENTIALS_MISSING")
		wantCode(t, method+" with an unknown token", call(withToken("not-a-principal"), method), codes.Unauthenticated, "CREDENTIALS_INVALID")
		// The control: read, the same request is too large.
		if err := call(withToken("token-a"), method); status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%s from the trainer: %v, want RESOURCE_EXHAUSTED (the request is read)", method, err)
		}
	}
	refused := 0
	for _, e := range logs.FilterMessage("rpc").All() {
		if e.ContextMap()["code"] == codes.Unauthenticated.String() {
			refused++
		}
	}
	if want := 2 * len(methods); refused != want {
		t.Errorf("%d UNAUTHENTICATED calls in the access log, want %d", refused, want)
	}
	if want := fmt.Sprintf("avtgym_unauthenticated_total %d\n", 2*len(methods)); !strings.Contains(scrape(t, m), want) {
		t.Errorf("metrics lack %q", want)
	}

	// A path that starts like health's (which needs no credentials) but
	// names Reset reaches no method.
	for _, path := range []string{"/grpc.health.v1.Health/../avtgym.v1.EnvService/Reset", "/grpc.health.v1.Health/Check/../../avtgym.v1.EnvService/Reset", "/grpc.health.v1.Health/Reset"} {
		if err := call(ctxT(t), path); status.Code(err) != codes.Unimplemented {
			t.Errorf("%s without credentials: %v, want UNIMPLEMENTED", path, err)
		}
	}
	// Token lookalikes are refused as well, whatever their size.
	for _, auth := range []string{"Bearer", "Bearer  ", "bearer " + strings.Repeat("t", 8<<10), "Bearer token-a, Bearer token-b", "Basic token-a"} {
		ctx := metadata.AppendToOutgoingContext(ctxT(t), "authorization", auth)
		if err := call(ctx, methods[0]); status.Code(err) != codes.Unauthenticated {
			t.Errorf("authorization %.40q: %v, want UNAUTHENTICATED", auth, err)
		}
	}
	ctx := metadata.AppendToOutgoingContext(ctxT(t), "authorization", "Bearer token-a", "authorization", "Bearer token-b")
	if err := call(ctx, methods[0]); status.Code(err) != codes.Unauthenticated {
		t.Errorf("two authorization values: %v, want UNAUTHENTICATED", err)
	}
	// The server still serves: an authenticated, small call succeeds.
	if _, err := pb.NewEnvServiceClient(conn).ListCorpora(withToken("token-b"), &pb.ListCorporaRequest{}); err != nil {
		t.Fatalf("an authenticated call after the attack: %v", err)
	}
}

// rpcCodes waits until the access log holds a line for method with code
// want, and returns the codes of all its lines for method.
func rpcCodes(t *testing.T, logs *observer.ObservedLogs, method string, want codes.Code) []string {
	t.Helper()
	var got []string
	waitFor(t, "an access-log line of "+method+" with code "+want.String(), func() bool {
		got = got[:0]
		for _, e := range logs.FilterMessage("rpc").FilterField(zap.String("method", method)).All() {
			got = append(got, e.ContextMap()["code"].(string))
		}
		return slices.Contains(got, want.String())
	})
	return got
}

// TestAccessLogRecordsWhatTheClientGot is issue 25's third finding: a
// StepBatch whose client went away (it cancelled, or its deadline passed)
// while its steps were held in the oracle is logged, and counted, with
// the code the client got, not the OK the handler returned (its items each
// failed with the context's error).
func TestAccessLogRecordsWhatTheClientGot(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	m := server.NewMetrics()
	s := startGated(t, server.Options{Logger: zap.New(core), Metrics: m})
	c := dial(t, s.addr, client.Options{})
	const method = "/avtgym.v1.EnvService/StepBatch"
	req := askBatch(t, c.Env, 8)
	noOK := func(got []string) {
		t.Helper()
		if slices.Contains(got, codes.OK.String()) {
			t.Fatalf("access log codes %v: a StepBatch whose client went away was logged OK", got)
		}
	}

	// A client that cancels once the batch is running.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Env.StepBatch(ctx, req); errc <- err }()
	waitFor(t, "the batch running", func() bool { return s.gate.arrived.Load() > 0 })
	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("the client got %v, want CANCELED", err)
	}
	noOK(rpcCodes(t, logs, method, codes.Canceled))

	// A client whose deadline passes while the batch is held. Its deadline
	// may pass before the call even arrives on a slow machine; then it is
	// tried again with a longer one (no duration is asserted).
	for timeout := 2 * time.Second; ; timeout *= 2 {
		before := s.gate.arrived.Load()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_, err := c.Env.StepBatch(ctx, req)
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("the client got %v, want DEADLINE_EXCEEDED", err)
		}
		if s.gate.arrived.Load() > before {
			break
		}
		if timeout > time.Minute {
			t.Fatal("the batch never reached the oracle before its deadline")
		}
	}
	noOK(rpcCodes(t, logs, method, codes.DeadlineExceeded))
	metrics := scrape(t, m)
	for _, want := range []string{
		`avtgym_rpcs_total{code="Canceled",method="/avtgym.v1.EnvService/StepBatch"} 1`,
		`avtgym_rpcs_total{code="DeadlineExceeded",method="/avtgym.v1.EnvService/StepBatch"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(metrics, `avtgym_rpcs_total{code="OK",method="/avtgym.v1.EnvService/StepBatch"}`) {
		t.Error("a StepBatch whose client went away was counted OK")
	}

	// A batch that is answered is still OK.
	close(s.gate.open)
	if _, err := c.Env.StepBatch(ctxT(t), req); err != nil {
		t.Fatal(err)
	}
	rpcCodes(t, logs, method, codes.OK)
}

// fullDisk is a file system whose disk holds free bytes more: a write
// past them writes what fits, then fails with ENOSPC, as a real file
// system does.
type fullDisk struct {
	mu            sync.Mutex
	free          int
	truncateFails bool
	created       int
}

func (d *fullDisk) setFree(n int) { d.mu.Lock(); d.free = n; d.mu.Unlock() }

func (d *fullDisk) create(name string) (server.EpisodeLogFile, error) {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.created++
	d.mu.Unlock()
	return &diskFile{File: f, disk: d}, nil
}

type diskFile struct {
	*os.File
	disk *fullDisk
}

func (f *diskFile) Write(b []byte) (int, error) {
	d := f.disk
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(b) <= d.free {
		d.free -= len(b)
		return f.File.Write(b)
	}
	n, _ := f.File.Write(b[:d.free])
	d.free = 0
	return n, &fs.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
}

func (f *diskFile) Truncate(size int64) error {
	d := f.disk
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.truncateFails {
		return &fs.PathError{Op: "truncate", Path: f.Name(), Err: syscall.EIO}
	}
	return f.File.Truncate(size)
}

// wholeLines reads every episode log file in dir, failing the test on a
// line that is not a JSON object, and returns the lines' keys by file.
func wholeLines(t *testing.T, dir string) map[string][]string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "episodes-*.jsonl"))
	out := map[string][]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Errorf("%s ends in a torn line: %q", filepath.Base(f), b[bytes.LastIndexByte(b, '\n')+1:])
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 4<<20)
		out[filepath.Base(f)] = []string{}
		for sc.Scan() {
			var l struct {
				Key string `json:"key"`
			}
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.Key == "" {
				t.Errorf("%s: a line that is not a record (%v): %.200s", filepath.Base(f), err, sc.Text())
				continue
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], l.Key)
		}
	}
	return out
}

// TestEpisodeLogOnAFullDisk is issue 25's fourth finding: on a full disk
// the episode log tore its last line and appended the next record onto
// it. Now the torn part is cut, the file keeps only whole lines, the
// episode is counted dropped (in Stats and in
// avtgym_episode_log_dropped_total), and once there is room again the
// same episode's retry is written, whole.
func TestEpisodeLogOnAFullDisk(t *testing.T) {
	dir := t.TempDir()
	disk := &fullDisk{free: 1 << 30}
	l, err := server.OpenEpisodeLog(dir, server.EpisodeLogOptions{Create: disk.create, Replica: "r"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	m := server.NewMetrics()
	s := startWith(t, server.Options{EpisodeLog: l, Metrics: m})
	c := s.c.Env
	finish := func(task string, n uint64) (*pb.StepResponse, error) {
		ep := reset(t, c, &pb.ResetRequest{TaskId: task, Seed: seed(n)})
		return c.Step(ctxT(t), &pb.StepRequest{Token: ep.Token, Action: stop()})
	}
	if _, err := finish("big", 1); err != nil {
		t.Fatal(err)
	}
	disk.setFree(100) // the disk fills in the middle of the next line
	dropped := reset(t, c, &pb.ResetRequest{TaskId: "big", Seed: seed(2)})
	if _, err := c.Step(ctxT(t), &pb.StepRequest{Token: dropped.Token, Action: stop()}); err != nil {
		t.Fatalf("a step whose episode the log could not write: %v (the step itself succeeded)", err)
	}
	if st := l.Stats(); st.Written != 1 || st.Dropped != 1 {
		t.Fatalf("stats %+v, want 1 written and 1 dropped", st)
	}
	for f, keys := range wholeLines(t, dir) {
		if len(keys) != 1 {
			t.Fatalf("%s holds %d records after the failure, want the first only", f, len(keys))
		}
	}
	// Still full: nothing is appended, nothing is torn.
	if _, err := finish("top-a", 3); err != nil {
		t.Fatal(err)
	}
	wholeLines(t, dir)
	disk.setFree(1 << 30)
	// The dropped episode's final step, retried.
	if _, err := c.Step(ctxT(t), &pb.StepRequest{Token: dropped.Token, Action: stop()}); err != nil {
		t.Fatal(err)
	}
	if _, err := finish("count", 4); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range wholeLines(t, dir) {
		keys = append(keys, k...)
	}
	if len(keys) != 3 || !strings.HasPrefix(keys[1], dropped.EpisodeUid+"#") {
		t.Fatalf("keys %v, want the first episode, the retried one and the last", keys)
	}
	if st := l.Stats(); st.Written != 3 || st.Dropped != 2 || st.Duplicates != 0 {
		t.Fatalf("stats %+v, want 3 written, 2 dropped, no duplicate", st)
	}
	if want := "avtgym_episode_log_dropped_total 2\n"; !strings.Contains(scrape(t, m), want) {
		t.Errorf("metrics lack %q", want)
	}
}

// TestEpisodeLogAbandonsAFileItCannotCut: when even cutting the torn line
// fails, the file is given up (nothing more is appended to it) and the
// next line starts a new file.
func TestEpisodeLogAbandonsAFileItCannotCut(t *testing.T) {
	dir := t.TempDir()
	disk := &fullDisk{free: 50, truncateFails: true}
	l, err := server.OpenEpisodeLog(dir, server.EpisodeLogOptions{Create: disk.create, Replica: "r"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s := startWith(t, server.Options{EpisodeLog: l})
	for n := range uint64(3) {
		ep := reset(t, s.c.Env, &pb.ResetRequest{TaskId: "big", Seed: seed(n)})
		step(t, s.c.Env, ep.Token, stop(), false)
		if n == 0 {
			disk.setFree(1 << 30)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "episodes-*.jsonl"))
	if len(files) != 2 || disk.created != 2 {
		t.Fatalf("%d files (%d created), want the abandoned one and a new one", len(files), disk.created)
	}
	torn, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(torn) != 50 || bytes.IndexByte(torn, '\n') >= 0 {
		t.Fatalf("the abandoned file holds %q, want the 50 bytes of the torn line and nothing after", torn)
	}
	next, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(next, []byte("\n")); n != 2 || next[len(next)-1] != '\n' {
		t.Fatalf("the new file holds %d lines, want 2 whole ones", n)
	}
	if st := l.Stats(); st.Written != 2 || st.Dropped != 1 {
		t.Fatalf("stats %+v, want 2 written and 1 dropped", st)
	}
}

// TestEpisodeLogLinesCannotBeForged: a policy writes newlines, quotes and
// line separators into its questions and its SQL, hoping to start a line
// of its own (a forged record with a reward of 1). Every record stays one
// line, and no line is the policy's.
func TestEpisodeLogLinesCannotBeForged(t *testing.T) {
	dir := t.TempDir()
	r := startApp(t, app.Config{EpisodeLog: dir, AuthFile: writeAuthFile(t, nil)})
	c := dial(t, r.addr, client.Options{Token: policyToken}).Env
	forged := `{"key":"forged#0","episode_id":"forged","reward":{"value":1},"principal":"grpo-trainer"}`
	payloads := []string{
		"\n" + forged + "\n",
		"\"}\n" + forged,
		"\r\n" + forged + "\r\n",
		"\u2028" + forged + "\u2029",
		"\x00\xff\xfe" + forged,
	}
	uids := map[string]bool{}
	for i, p := range payloads {
		ep := reset(t, c, &pb.ResetRequest{TaskId: "count", Seed: seed(uint64(i)), Options: &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_OUTCOME}})
		uids[ep.EpisodeUid] = true
		asked := step(t, c, ep.Token, ask("What do you mean?"+p), false)
		step(t, c, asked.Token, submit("SELECT 1 -- "+p), false)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range wholeLines(t, dir) {
		keys = append(keys, k...)
	}
	if len(keys) != len(payloads) {
		t.Fatalf("%d lines for %d episodes: %v", len(keys), len(payloads), keys)
	}
	for _, k := range keys {
		if !uids[strings.Split(k, "#")[0]] {
			t.Errorf("a line the policy wrote: key %q", k)
		}
	}
}

package hostile

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"avtgym/internal/filetree"
	pb "avtgym/proto/avtgym/v1"
)

// rawCodec sends bytes as they are: a client that speaks no protobuf.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func ctxMinute() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// TestHostileRequests replays requests sized to exhaust memory, requests
// that do not decode, and oversized ones: each gets a typed, explained
// error (or, inside a batch, per-item statuses), and the server stays up.
func TestHostileRequests(t *testing.T) {
	s := start(t)
	before := filetree.MustSums(t, s.root, s.tmp)
	conn := s.c.Conn()

	t.Run("a 61 KB ResetBatch of 4096 groups of 1024", func(t *testing.T) {
		req := &pb.ResetBatchRequest{}
		for range 4096 {
			req.Requests = append(req.Requests, &pb.ResetRequest{TaskId: "west", GroupSize: 1024})
		}
		ctx, cancel := ctxMinute()
		defer cancel()
		_, err := s.c.Env.ResetBatch(ctx, req)
		if code(err) != codes.InvalidArgument || reason(err) != "BATCH_TOO_LARGE" {
			t.Fatalf("got %v (reason %q), want INVALID_ARGUMENT / BATCH_TOO_LARGE", err, reason(err))
		}
		s.alive(t)
	})

	t.Run("a unary Reset of the largest group", func(t *testing.T) {
		ctx, cancel := ctxMinute()
		defer cancel()
		r, err := s.c.Env.Reset(ctx, &pb.ResetRequest{TaskId: "west", GroupSize: 1024})
		if err != nil || len(r.Episodes) != 1024 {
			t.Fatalf("got %d episodes, %v", len(r.GetEpisodes()), err)
		}
	})

	t.Run("a StepBatch whose response would not fit", func(t *testing.T) {
		// 2200 questions of 16 KB each: their replies echo the questions'
		// tokens, well past the 64 MiB a response may have.
		ctx, cancel := ctxMinute()
		defer cancel()
		rr, err := s.c.Env.Reset(ctx, &pb.ResetRequest{TaskId: "west", GroupSize: 1024})
		if err != nil {
			t.Fatal(err)
		}
		q := "What do you mean by top region? " + strings.Repeat("Please be precise. ", 900)
		var steps []*pb.StepRequest
		for i := range 2200 {
			steps = append(steps, &pb.StepRequest{Token: rr.Episodes[i%1024].Token, Action: ask(q[:16<<10])})
		}
		// Each step's response holds its token: make the tokens long first.
		big := &pb.StepBatchRequest{Steps: steps}
		out, err := s.c.Env.StepBatch(ctx, big)
		if err != nil {
			t.Fatalf("the batch failed as a whole: %v", err)
		}
		ok, over := 0, 0
		for i, r := range out.Results {
			switch {
			case r.GetStatus().GetCode() == 0 && r.GetResponse() != nil:
				ok++
			case r.GetStatus().GetCode() == int32(codes.ResourceExhausted):
				over++
			default:
				t.Fatalf("item %d: %v", i, r.GetStatus())
			}
		}
		if ok == 0 {
			t.Fatalf("no item succeeded (%d overflowed)", over)
		}
		t.Logf("%d items answered, %d told to resend", ok, over)
		s.alive(t)
	})

	t.Run("garbage instead of a request", func(t *testing.T) {
		for _, method := range []string{"/avtgym.v1.EnvService/Step", "/avtgym.v1.EnvService/StepBatch", "/avtgym.v1.OracleService/Ask"} {
			ctx, cancel := ctxMinute()
			garbage := []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0x01, 0x02}
			var out []byte
			err := conn.Invoke(ctx, method, &garbage, &out, grpc.ForceCodecV2(rawCodec{}))
			cancel()
			if code(err) != codes.InvalidArgument || reason(err) != "REQUEST_MALFORMED" {
				t.Errorf("%s: got %v (reason %q), want INVALID_ARGUMENT / REQUEST_MALFORMED", method, err, reason(err))
			}
		}
		s.alive(t)
	})

	t.Run("a request over the size limit", func(t *testing.T) {
		// A token field of 65 MiB: above the server's 64 MiB limit, below
		// grpc's own.
		msg := protowire.AppendTag(nil, 1, protowire.BytesType)
		msg = protowire.AppendBytes(msg, make([]byte, 65<<20))
		ctx, cancel := ctxMinute()
		defer cancel()
		var out []byte
		err := conn.Invoke(ctx, "/avtgym.v1.EnvService/Step", &msg, &out, grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallSendMsgSize(128<<20))
		if code(err) != codes.ResourceExhausted || reason(err) != "REQUEST_TOO_LARGE" {
			t.Fatalf("got %v (reason %q), want RESOURCE_EXHAUSTED / REQUEST_TOO_LARGE", err, reason(err))
		}
		s.alive(t)
	})

	t.Run("OracleService with a 50 MB history", func(t *testing.T) {
		oc := pb.NewOracleServiceClient(conn)
		turn := &pb.DialogueTurn{Question: "What do you mean?", Reply: strings.Repeat("x", 1<<20)}
		req := &pb.AskRequest{Task: &pb.AskRequest_TaskId{TaskId: "west"}, Question: "What do you mean by top region?"}
		for range 50 {
			req.History = append(req.History, turn)
		}
		ctx, cancel := ctxMinute()
		defer cancel()
		_, err := oc.Ask(ctx, req)
		if code(err) != codes.InvalidArgument {
			t.Fatalf("got %v, want INVALID_ARGUMENT", err)
		}
		if !strings.Contains(err.Error(), "history[0].reply") {
			t.Errorf("the error %q does not name the field", err)
		}
		s.alive(t)
	})

	t.Run("tampered and foreign tokens", func(t *testing.T) {
		ep := s.reset(t, "west")
		bad := append([]byte(nil), ep.Token...)
		bad[len(bad)/2] ^= 1
		for name, tok := range map[string][]byte{"tampered": bad, "truncated": ep.Token[:len(ep.Token)-3], "garbage": []byte("not a token"), "huge": make([]byte, 8<<20)} {
			_, err := s.tryStep(tok, ask("What do you mean by top region?"))
			if code(err) != codes.InvalidArgument || !strings.HasPrefix(reason(err), "TOKEN_") {
				t.Errorf("%s token: got %v (reason %q)", name, err, reason(err))
			}
		}
		s.alive(t)
	})

	t.Run("questions the policy got wrong", func(t *testing.T) {
		for name, q := range map[string]string{"empty": "  ", "invalid UTF-8": "what do you mean by \xff?", "too long": strings.Repeat("why ", 5000)} {
			ep := s.reset(t, "west")
			r, err := s.tryStep(ep.GetToken(), ask(q))
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if r.GetDone() || r.GetObservation().GetQuestionsAsked() != 1 || len(r.GetPrivileged().GetCredits()) != 0 {
				t.Errorf("%s: want a counted, uncredited question; got %v", name, r)
			}
		}
		s.alive(t)
	})
	s.untouched(t, before)
}

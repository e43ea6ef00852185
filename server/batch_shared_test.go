package server_test

import (
	"fmt"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"avtgym/app"
	"avtgym/client"
	"avtgym/env"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
	"avtgym/server"
)

// The shared form of a reset's group (ResetRequest.share_group_observation):
// the group's observation and privileged data sent once. These tests read
// the responses as the server sends them (client.Options.RawResets).

// rawClient connects to addr without rebuilding shared groups.
func rawClient(t *testing.T, addr string, opt client.Options) pb.EnvServiceClient {
	opt.RawResets = true
	return dial(t, addr, opt).Env
}

// sharedCases are a group reset per protocol of the demo corpus: AMBITAB,
// BIRD_C and BIRD_A on a task with a follow-up, TIDE_F and TIDE_P drawn
// (with the seed) from the TIDE samples; TIDE_P's opening has pre-filled
// turns.
func sharedCases() map[string]*pb.ResetRequest {
	proto := func(p pb.Protocol) *pb.EpisodeOptions { return &pb.EpisodeOptions{Protocol: p} }
	return map[string]*pb.ResetRequest{
		"ambitab": {TaskId: "shop-001"},
		"bird_c":  {TaskId: "followup-001", Options: proto(pb.Protocol_PROTOCOL_BIRD_C)},
		"bird_a":  {TaskId: "followup-003", Options: proto(pb.Protocol_PROTOCOL_BIRD_A)},
		"tide_f":  {Options: proto(pb.Protocol_PROTOCOL_TIDE_F)},
		"tide_p":  {Options: proto(pb.Protocol_PROTOCOL_TIDE_P)},
	}
}

// variant is req for a group of n with a seed, asking for privileged data
// or not, in the shared form or not.
func variant(req *pb.ResetRequest, n int, priv, share bool) *pb.ResetRequest {
	r := proto.Clone(req).(*pb.ResetRequest)
	r.Seed, r.GroupSize, r.IncludePrivileged, r.ShareGroupObservation = seed(42), int32(n), priv, share
	return r
}

// wantSameGroup fails unless the shared-form group sh, rebuilt, is the
// default-form group def: the same episodes (seed, index, id), each with
// an equal observation and privileged data; tokens and uids are drawn per
// reset, so they only have to be there.
func wantSameGroup(t *testing.T, def, sh *pb.ResetResponse, priv bool) {
	t.Helper()
	if def.SharedObservation != nil || def.SharedPrivileged != nil {
		t.Fatal("the default form has shared fields")
	}
	if sh.SharedObservation == nil || (sh.SharedPrivileged != nil) != priv {
		t.Fatalf("shared form: observation set %v, privileged set %v (asked %v)", sh.SharedObservation != nil, sh.SharedPrivileged != nil, priv)
	}
	for i, e := range sh.Episodes {
		// The environment builds a group around one observation: no
		// episode of it needs its own.
		if e.Observation != nil || e.Privileged != nil {
			t.Fatalf("shared form: episode %d still carries its own observation or privileged data", i)
		}
	}
	rebuilt := proto.Clone(sh).(*pb.ResetResponse)
	client.ExpandReset(rebuilt)
	if len(rebuilt.Episodes) != len(def.Episodes) {
		t.Fatalf("%d episodes, want %d", len(rebuilt.Episodes), len(def.Episodes))
	}
	for i, d := range def.Episodes {
		e := rebuilt.Episodes[i]
		if len(d.Observation.GetTurns()) == 0 || d.Observation.GetTask() == nil || (d.Privileged != nil) != priv {
			t.Fatalf("default form: episode %d is incomplete: %v", i, d)
		}
		if !proto.Equal(e.Observation, d.Observation) {
			t.Fatalf("episode %d: observation\n%v\nwant\n%v", i, e.Observation, d.Observation)
		}
		if !proto.Equal(e.Privileged, d.Privileged) {
			t.Fatalf("episode %d: privileged\n%v\nwant\n%v", i, e.Privileged, d.Privileged)
		}
		if e.Seed != d.Seed || e.GroupIndex != d.GroupIndex || e.EpisodeId != d.EpisodeId || len(e.Token) == 0 || e.EpisodeUid == "" {
			t.Fatalf("episode %d: seed %d index %d id %q, want %d %d %q", i, e.Seed, e.GroupIndex, e.EpisodeId, d.Seed, d.GroupIndex, d.EpisodeId)
		}
	}
}

// TestSharedGroupRebuildsTheDefaultForm: for every protocol, with and
// without privileged data, by Reset and by ResetBatch, the shared form
// rebuilt gives exactly the default form's episodes, and its tokens step
// as the default form's do.
func TestSharedGroupRebuildsTheDefaultForm(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	c := rawClient(t, s.Addr, client.Options{})
	for name, base := range sharedCases() {
		for _, priv := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/privileged=%v", name, priv), func(t *testing.T) {
				def, err := c.Reset(ctxT(t), variant(base, 8, priv, false))
				if err != nil {
					t.Fatal(err)
				}
				sh, err := c.Reset(ctxT(t), variant(base, 8, priv, true))
				if err != nil {
					t.Fatal(err)
				}
				wantSameGroup(t, def, sh, priv)

				batch, err := c.ResetBatch(ctxT(t), &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{
					variant(base, 8, priv, false), variant(base, 8, priv, true)}})
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range batch.Results {
					if r.Status != nil {
						t.Fatalf("item %d: %v", i, r.Status)
					}
				}
				// The default-form item rebuilt from the shared one, and
				// both the unary default form.
				wantSameGroup(t, batch.Results[0].Response, batch.Results[1].Response, priv)
				wantSameGroup(t, def, batch.Results[1].Response, priv)

				// A shared-form token is an ordinary token.
				a := ask("What exactly do you mean?")
				got := step(t, c, sh.Episodes[3].Token, a, priv)
				want := step(t, c, def.Episodes[3].Token, a, priv)
				if !proto.Equal(got.Observation, want.Observation) || got.Done != want.Done || !proto.Equal(got.Privileged, want.Privileged) {
					t.Fatalf("stepping the shared form's token:\n%v\nwant\n%v", got, want)
				}
			})
		}
	}
}

// TestDefaultFormUnchanged: a reset that does not opt in gets what the
// environment builds, every episode with its own observation (and its
// privileged data when asked), and no shared field.
func TestDefaultFormUnchanged(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	c := rawClient(t, s.Addr, client.Options{})
	for name, base := range sharedCases() {
		for _, priv := range []bool{false, true} {
			req := variant(base, 4, priv, false)
			want, err := s.App.Env.Reset(ctxT(t), req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.Reset(ctxT(t), req)
			if err != nil {
				t.Fatal(err)
			}
			// The server adds the enum beside each TIDE label string
			// (labels.go) to what the environment builds.
			for _, e := range want.Episodes {
				if ti := e.GetPrivileged().GetTide(); ti != nil {
					ti = proto.Clone(ti).(*pb.TideInfo)
					ti.SampleTypeEnum, ti.DriftSubtypeEnum = got.Episodes[0].GetPrivileged().GetTide().GetSampleTypeEnum(), got.Episodes[0].GetPrivileged().GetTide().GetDriftSubtypeEnum()
					e.Privileged = proto.Clone(e.Privileged).(*pb.Privileged)
					e.Privileged.Tide = ti
				}
			}
			if got.SharedObservation != nil || got.SharedPrivileged != nil {
				t.Fatalf("%s: the default form has shared fields", name)
			}
			for i, e := range got.Episodes {
				w := want.Episodes[i]
				if e.Observation == nil || !proto.Equal(e.Observation, w.Observation) || !proto.Equal(e.Privileged, w.Privileged) ||
					(e.Privileged != nil) != priv || e.EpisodeId != w.EpisodeId || e.Seed != w.Seed {
					t.Fatalf("%s privileged=%v episode %d:\n%v\nwant\n%v", name, priv, i, e, w)
				}
			}
		}
	}
}

// TestSharedGroupWireSize: a group of 1024 sends its observation once: the
// shared form is smaller than the default form by at least 1023 copies of
// the observation, by Reset and by ResetBatch.
func TestSharedGroupWireSize(t *testing.T) {
	s := testutil.StartServer(t, app.Config{})
	c := rawClient(t, s.Addr, client.Options{})
	const n = env.MaxGroupSize
	for _, priv := range []bool{false, true} {
		base := &pb.ResetRequest{TaskId: "shop-001"}
		def, err := c.Reset(ctxT(t), variant(base, n, priv, false))
		if err != nil {
			t.Fatal(err)
		}
		sh, err := c.Reset(ctxT(t), variant(base, n, priv, true))
		if err != nil {
			t.Fatal(err)
		}
		once := proto.Size(&pb.ResetResponse{SharedObservation: sh.SharedObservation, SharedPrivileged: sh.SharedPrivileged})
		dn, sn := proto.Size(def), proto.Size(sh)
		if dn-sn < (n-1)*once || sn*4 > dn {
			t.Fatalf("privileged=%v: a group of %d is %d bytes shared, %d by default; the shared part is %d bytes", priv, n, sn, dn, once)
		}
		t.Logf("privileged=%v: %d episodes: default %d bytes (%d per episode), shared %d (%d per episode): %.1fx smaller",
			priv, n, dn, dn/n, sn, sn/n, float64(dn)/float64(sn))

		batch, err := c.ResetBatch(ctxT(t), &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{
			variant(base, n, priv, false), variant(base, n, priv, true)}})
		if err != nil {
			t.Fatal(err)
		}
		bd, bs := proto.Size(batch.Results[0]), proto.Size(batch.Results[1])
		if bd-bs < (n-1)*once {
			t.Fatalf("privileged=%v: ResetBatch items of %d: %d bytes shared, %d by default", priv, n, bs, bd)
		}
	}
}

// TestSharedFormPrivilegedOnlyWhenAsked: the shared part carries
// privileged data only where the default form would have: never without
// include_privileged, and never to a policy principal (who may not ask).
func TestSharedFormPrivilegedOnlyWhenAsked(t *testing.T) {
	r := startApp(t, app.Config{AuthFile: writeAuthFile(t, nil), Corpora: []string{demoDir(t)}})
	for _, tok := range []string{trainerToken, policyToken} {
		c := rawClient(t, r.addr, client.Options{Token: tok})
		for name, base := range sharedCases() {
			sh, err := c.Reset(ctxT(t), variant(base, 4, false, true))
			if err != nil {
				t.Fatal(err)
			}
			batch, err := c.ResetBatch(ctxT(t), &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{variant(base, 4, false, true)}})
			if err != nil {
				t.Fatal(err)
			}
			if sh.SharedObservation == nil || batch.Results[0].GetResponse().GetSharedObservation() == nil {
				t.Fatalf("%s: no shared observation", name)
			}
			if hasPrivileged(sh.ProtoReflect()) || hasPrivileged(batch.ProtoReflect()) {
				t.Fatalf("%s: privileged data without include_privileged", name)
			}
		}
		_, err := c.Reset(ctxT(t), variant(&pb.ResetRequest{TaskId: "shop-001"}, 4, true, true))
		if tok == policyToken {
			wantError(t, err, codes.PermissionDenied, "PRIVILEGED_DENIED")
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// groupSizes are a group's sizes in both forms: a Reset response, and a
// ResetBatch item's entry (the budget's unit), on a server without a
// small limit.
func groupSizes(t *testing.T, c pb.EnvServiceClient, req *pb.ResetRequest) (def, sh int) {
	t.Helper()
	for _, share := range []bool{false, true} {
		r := proto.Clone(req).(*pb.ResetRequest)
		r.ShareGroupObservation = share
		resp, err := c.Reset(ctxT(t), r)
		if err != nil {
			t.Fatal(err)
		}
		if share {
			sh = proto.Size(resp)
		} else {
			def = proto.Size(resp)
		}
	}
	return def, sh
}

// limitFor is a send limit whose batch budget (the limit less its
// headroom, a sixteenth of it up to 64 KiB) is about want bytes.
func limitFor(want int) int {
	if want/15 <= 64<<10 {
		return want * 16 / 15
	}
	return want + 64<<10
}

// TestSharedFormBudget: a group is held to the send limit by its size in
// the form it is sent in. One that fits only shared is refused by default
// and served shared, by Reset and as a ResetBatch item; a shared group too
// large even so is refused with a group size that fits; a ResetBatch of
// shared groups fits as many as its budget holds, and no more.
func TestSharedFormBudget(t *testing.T) {
	const n = env.MaxGroupSize
	big := &pb.ResetRequest{TaskId: "big", GroupSize: n, Seed: seed(1)}
	plain := startWith(t, server.Options{})
	def, sh := groupSizes(t, plain.c.Env, big)
	if sh*2 > def || sh < 128<<10 {
		t.Fatalf("test bug: a group is %d bytes shared, %d by default", sh, def)
	}
	shared := proto.Clone(big).(*pb.ResetRequest)
	shared.ShareGroupObservation = true

	t.Run("fits only shared", func(t *testing.T) {
		c := startWith(t, server.Options{MaxSendBytes: limitFor((def + sh) / 2)}).c.Env
		_, err := c.Reset(ctxT(t), big)
		wantError(t, err, codes.ResourceExhausted, "RESPONSE_TOO_LARGE")
		if r, err := c.Reset(ctxT(t), shared); err != nil || len(r.Episodes) != n {
			t.Fatalf("shared: %d episodes, %v", len(r.GetEpisodes()), err)
		}
		batch, err := c.ResetBatch(ctxT(t), &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{big, shared}})
		if err != nil {
			t.Fatal(err)
		}
		st := status.FromProto(batch.Results[0].Status)
		if st.Code() != codes.ResourceExhausted || errorInfo(st).GetReason() != "RESPONSE_TOO_LARGE" {
			t.Fatalf("the default-form item: %v", st)
		}
		if r := batch.Results[1]; r.Status != nil || len(r.Response.GetEpisodes()) != n {
			t.Fatalf("the shared item: %v", r.Status)
		}
	})

	t.Run("too large even shared", func(t *testing.T) {
		c := startWith(t, server.Options{MaxSendBytes: limitFor(sh / 2)}).c.Env
		_, err := c.Reset(ctxT(t), shared)
		wantError(t, err, codes.ResourceExhausted, "RESPONSE_TOO_LARGE")
		st := status.Convert(err)
		ei := errorInfo(st)
		fit, _ := strconv.Atoi(ei.Metadata["max_group_size"])
		if fit < n/4 || fit >= n || ei.Metadata["field"] != "group_size" {
			t.Fatalf("status %q metadata %v", st.Message(), ei.Metadata)
		}
		smaller := proto.Clone(shared).(*pb.ResetRequest)
		smaller.GroupSize = int32(fit)
		if r, err := c.Reset(ctxT(t), smaller); err != nil || len(r.Episodes) != fit {
			t.Fatalf("the suggested group of %d: %v", fit, err)
		}
	})

	t.Run("batch budget", func(t *testing.T) {
		// Room for one default-form group and one shared: the shared item
		// gives back what its default-form bound took (one worker, so the
		// shared item runs first).
		// The margin covers what the bound adds to the default form's
		// size (the widest seeds and indexes); it is smaller than a
		// shared group.
		limit := limitFor(def + sh + 64<<10)
		c := startWith(t, server.Options{MaxSendBytes: limit, BatchWorkers: 1}).c.Env
		resp, err := c.ResetBatch(ctxT(t), &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{shared, big, shared, shared}})
		if err != nil {
			t.Fatal(err)
		}
		if size := proto.Size(resp); size > limit {
			t.Fatalf("the response is %d bytes, over the %d-byte limit", size, limit)
		}
		var codesGot []codes.Code
		for _, r := range resp.Results {
			codesGot = append(codesGot, status.FromProto(r.Status).Code())
		}
		want := []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted, codes.ResourceExhausted}
		if fmt.Sprint(codesGot) != fmt.Sprint(want) {
			t.Fatalf("items: %v, want %v", codesGot, want)
		}
	})
}

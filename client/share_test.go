package client_test

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"avtgym/client"
	pb "avtgym/proto/avtgym/v1"
)

// grouping is an EnvService whose resets return groups of three episodes:
// in the shared form when the request asks for it and shares is set (a
// current server), else in the default form (a server that predates
// share_group_observation ignores the flag). It records the flag of each
// reset it receives.
type grouping struct {
	pb.UnimplementedEnvServiceServer
	shares bool
	mu     sync.Mutex
	asked  []bool
}

// groupObs is the observation every episode of a grouping group starts
// from, and groupPriv its privileged data.
func groupObs() *pb.Observation {
	return &pb.Observation{Task: &pb.TaskView{TaskId: "t1", Database: &pb.DatabaseView{Schema: "CREATE TABLE t (x INT);"}},
		Turns: []*pb.Turn{{Role: pb.Role_ROLE_ENVIRONMENT, Kind: pb.TurnKind_TURN_KIND_REQUEST, Text: "How many?"}},
		Phase: pb.Phase_PHASE_ASKING, QuestionBudget: 3, QuestionsRemaining: 3}
}

func groupPriv() *pb.Privileged {
	return &pb.Privileged{AvtId: "a1", ReferenceSql: []string{"SELECT 1"}}
}

// defaultGroup is a group in the default form.
func defaultGroup(priv bool) *pb.ResetResponse {
	r := &pb.ResetResponse{}
	for i := range 3 {
		e := &pb.Episode{Token: []byte{byte(i)}, Seed: uint64(10 + i), GroupIndex: int32(i), Observation: groupObs()}
		if priv {
			e.Privileged = groupPriv()
		}
		r.Episodes = append(r.Episodes, e)
	}
	return r
}

func (g *grouping) reset(req *pb.ResetRequest) *pb.ResetResponse {
	g.mu.Lock()
	g.asked = append(g.asked, req.GetShareGroupObservation())
	g.mu.Unlock()
	r := defaultGroup(req.GetIncludePrivileged())
	if g.shares && req.GetShareGroupObservation() {
		r.SharedObservation = groupObs()
		if req.GetIncludePrivileged() {
			r.SharedPrivileged = groupPriv()
		}
		for _, e := range r.Episodes {
			e.Observation, e.Privileged = nil, nil
		}
		// One episode that differs keeps its own observation.
		r.Episodes[2].Observation = groupObs()
		r.Episodes[2].Observation.Phase = pb.Phase_PHASE_SOLVING
	}
	return r
}

func (g *grouping) Reset(_ context.Context, req *pb.ResetRequest) (*pb.ResetResponse, error) {
	return g.reset(req), nil
}

func (g *grouping) ResetBatch(_ context.Context, req *pb.ResetBatchRequest) (*pb.ResetBatchResponse, error) {
	out := &pb.ResetBatchResponse{}
	for _, r := range req.GetRequests() {
		out.Results = append(out.Results, &pb.ResetBatchResult{Response: g.reset(r)})
	}
	return out, nil
}

func serveGrouping(t *testing.T, g *grouping) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterEnvServiceServer(s, g)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// wantDefaultForm fails unless r is the grouping server's group in the
// default form, with the shared form's differing episode where the server
// sent one.
func wantDefaultForm(t *testing.T, r *pb.ResetResponse, priv, differs bool) {
	t.Helper()
	if r.SharedObservation != nil || r.SharedPrivileged != nil {
		t.Fatalf("the shared fields are still set: %v", r)
	}
	want := defaultGroup(priv)
	if differs {
		want.Episodes[2].Observation.Phase = pb.Phase_PHASE_SOLVING
	}
	if !proto.Equal(r, want) {
		t.Fatalf("got\n%v\nwant\n%v", r, want)
	}
}

// TestResetsGetTheSharedFormTransparently: by default the client asks for
// the shared form on every reset and ResetBatch item, without changing the
// caller's request, and returns each episode with its full observation
// and privileged data (an episode the server sent with its own keeps it);
// against a server that ignores the flag, the default form passes through.
func TestResetsGetTheSharedFormTransparently(t *testing.T) {
	for _, shares := range []bool{true, false} {
		g := &grouping{shares: shares}
		c, err := client.Dial(serveGrouping(t, g), client.Options{NoEnv: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, priv := range []bool{false, true} {
			req := &pb.ResetRequest{TaskId: "t1", GroupSize: 3, IncludePrivileged: priv}
			r, err := c.Env.Reset(ctxT(t), req)
			if err != nil {
				t.Fatal(err)
			}
			if req.GetShareGroupObservation() {
				t.Fatal("the client changed the caller's request")
			}
			wantDefaultForm(t, r, priv, shares)
			if shares {
				// Expanded episodes share the group's one message.
				if r.Episodes[0].Observation != r.Episodes[1].Observation {
					t.Error("expanded episodes do not share the observation")
				}
			}
			batch := &pb.ResetBatchRequest{Requests: []*pb.ResetRequest{req, {TaskId: "t1", GroupSize: 3, IncludePrivileged: priv, ShareGroupObservation: true}}}
			br, err := c.Env.ResetBatch(ctxT(t), batch)
			if err != nil {
				t.Fatal(err)
			}
			if batch.Requests[0].GetShareGroupObservation() {
				t.Fatal("the client changed the caller's batch item")
			}
			for _, it := range br.GetResults() {
				wantDefaultForm(t, it.GetResponse(), priv, shares)
			}
		}
		for i, a := range g.asked {
			if !a {
				t.Errorf("shares=%v: reset %d did not ask for the shared form", shares, i)
			}
		}
	}
}

// TestRawResets: with Options.RawResets the client sends resets as
// written and returns the server's form.
func TestRawResets(t *testing.T) {
	g := &grouping{shares: true}
	c, err := client.Dial(serveGrouping(t, g), client.Options{NoEnv: true, RawResets: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r, err := c.Env.Reset(ctxT(t), &pb.ResetRequest{TaskId: "t1", GroupSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	wantDefaultForm(t, r, false, false)
	r, err = c.Env.Reset(ctxT(t), &pb.ResetRequest{TaskId: "t1", GroupSize: 3, ShareGroupObservation: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.SharedObservation == nil || r.Episodes[0].Observation != nil {
		t.Fatalf("RawResets rebuilt the shared form: %v", r)
	}
	if g.asked[0] || !g.asked[1] {
		t.Errorf("the flags sent were %v, want [false true]", g.asked)
	}
	client.ExpandReset(r)
	wantDefaultForm(t, r, false, true)
}

package client_test

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"avtgym/app"
	"avtgym/client"
	"avtgym/env"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

// TestDialBalances: an address list and a dns:/// target both reach the
// servers, and calls on one connection go round-robin over every address
// of the list; an episode started on one replica continues on the others
// (they share the token key).
func TestDialBalances(t *testing.T) {
	key := filepath.Join(t.TempDir(), "token.key")
	if err := os.WriteFile(key, []byte(hex.EncodeToString(env.RandomKey())+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for range 3 {
		addrs = append(addrs, testutil.StartServer(t, app.Config{TokenKeyFile: key}).Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("list", func(t *testing.T) {
		c, err := client.Dial(strings.Join(addrs, ", "), client.Options{NoEnv: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Round-robin picks among connected replicas: wait until each has
		// taken a call, then every call goes to the next one.
		warm := map[string]bool{}
		for i := 0; len(warm) < len(addrs); i++ {
			var p peer.Peer
			if _, err := c.Health.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p)); err != nil || i > 500 {
				t.Fatalf("health (%d calls, replicas reached %v): %v", i, warm, err)
			}
			warm[p.Addr.String()] = true
		}
		seen := map[string]int{}
		var tok []byte
		for i := range 9 {
			var p peer.Peer
			if i%3 == 0 {
				r, err := c.Env.Reset(ctx, &pb.ResetRequest{TaskId: "shop-001"}, grpc.Peer(&p))
				if err != nil {
					t.Fatal(err)
				}
				tok = r.Episodes[0].GetToken()
			} else {
				act := &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: "Which customers do you mean?"}}}
				if i%3 == 2 {
					act = &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}
				}
				s, err := c.Env.Step(ctx, &pb.StepRequest{Token: tok, Action: act}, grpc.Peer(&p))
				if err != nil {
					t.Fatalf("step %d (the episode's previous call was on another replica): %v", i, err)
				}
				if tok = s.GetToken(); i%3 == 2 && !s.GetDone() {
					t.Fatalf("stop did not end the episode: %v", s)
				}
			}
			seen[p.Addr.String()]++
		}
		for _, a := range addrs {
			if seen[a] != 3 {
				t.Errorf("round_robin over %v: %v calls per replica, want 3 each", addrs, seen)
				break
			}
		}
	})
	t.Run("dns", func(t *testing.T) {
		c, err := client.Dial("dns:///"+addrs[0], client.Options{NoEnv: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Env.Reset(ctx, &pb.ResetRequest{TaskId: "shop-001"}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("bad list", func(t *testing.T) {
		if _, err := client.Dial(addrs[0]+",nonsense", client.Options{NoEnv: true}); err == nil || !strings.Contains(err.Error(), "nonsense") {
			t.Errorf("a list with a bad address: %v", err)
		}
	})
}

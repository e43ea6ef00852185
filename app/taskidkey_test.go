package app_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

// TestTaskIDKeyFromTheTokenKey: with a token key file the opaque public
// ids of TIDE samples are keyed by a key derived from it, so that they
// cannot be computed from the published data and replicas sharing the
// key agree; another key, or none (the corpus-derived default), gives
// other ids.
func TestTaskIDKeyFromTheTokenKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, hex string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(hex+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tideIDs := func(cfg app.Config) []string {
		t.Helper()
		s := testutil.StartServer(t, cfg)
		resp, err := s.Client.Env.ListTasks(context.Background(), &pb.ListTasksRequest{Corpus: "demo", PageSize: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, task := range resp.GetTasks() {
			if strings.HasPrefix(task.GetTaskId(), "tide-") {
				ids = append(ids, task.GetTaskId())
			}
		}
		if len(ids) == 0 {
			t.Fatal("the demo corpus lists no TIDE sample")
		}
		return ids
	}
	key := write("a.key", strings.Repeat("ab", 32))
	a := tideIDs(app.Config{TokenKeyFile: key})
	b := tideIDs(app.Config{TokenKeyFile: key})
	other := tideIDs(app.Config{TokenKeyFile: write("b.key", strings.Repeat("cd", 32))})
	none := tideIDs(app.Config{})
	if strings.Join(a, " ") != strings.Join(b, " ") {
		t.Errorf("two replicas with one key list %v and %v", a, b)
	}
	for name, ids := range map[string][]string{"another key": other, "no key": none} {
		for _, id := range ids {
			for _, x := range a {
				if id == x {
					t.Errorf("%s gives the public id %s too", name, id)
				}
			}
		}
	}
}

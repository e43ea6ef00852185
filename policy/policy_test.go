package policy

import (
	"context"
	"slices"
	"strings"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/testutil"
	"avtgym/probe"
	pb "avtgym/proto/avtgym/v1"
)

// TestPartial checks the default eval asker on the demo corpus: a generic
// question first, then the full question about a subset of the counted
// terms in annotation order; the same subset for the same task and seed;
// each term asked under some seeds and not under others.
func TestPartial(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	ctx := context.Background()
	env := driver.Remote(srv.Client.Env)
	tasks, err := ListTasks(ctx, srv.Client.Env, "", "")
	if err != nil {
		t.Fatal(err)
	}
	play := func(task string, seed uint64) *driver.Record {
		t.Helper()
		r := PlayOne(ctx, env, Partial(), &pb.ResetRequest{TaskId: task, Seed: &seed, IncludePrivileged: true})
		if !r.Scored() {
			t.Fatalf("%s seed %d: %s %s", task, seed, r.Status, r.Error)
		}
		return r
	}
	// The first task with two counted terms or more.
	var task string
	var terms []string
	for _, ts := range tasks {
		seed := uint64(0)
		ep, err := driver.Start(ctx, env, &pb.ResetRequest{TaskId: ts.GetTaskId(), Seed: &seed, IncludePrivileged: true})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(ep.Terms()); n >= 2 && n <= ep.Budget()-1 {
			task, terms = ts.GetTaskId(), ep.Terms()
			break
		}
	}
	if task == "" {
		t.Fatal("no demo task with two counted terms")
	}
	asked := map[string]int{}
	subsets := map[string]bool{}
	const seeds = 16
	for seed := range uint64(seeds) {
		r := play(task, seed)
		if len(r.Questions) == 0 || r.Questions[0] != probe.Generic1 {
			t.Fatalf("seed %d: questions %q do not start with the generic one", seed, r.Questions)
		}
		var want []string
		for _, term := range terms {
			if slices.Contains(r.Questions[1:], probe.FullQuestion(term)) {
				want = append(want, probe.FullQuestion(term))
				asked[term]++
			}
		}
		if !slices.Equal(r.Questions[1:], want) {
			t.Errorf("seed %d: questions %q are not full questions about terms %q in order", seed, r.Questions[1:], terms)
		}
		subsets[strings.Join(want, "|")] = true
		if again := play(task, seed); !slices.Equal(again.Questions, r.Questions) {
			t.Errorf("seed %d: a rerun asked %q, first %q", seed, again.Questions, r.Questions)
		}
	}
	for _, term := range terms {
		if asked[term] == 0 || asked[term] == seeds {
			t.Errorf("term %q asked under %d of %d seeds: not a coin flip", term, asked[term], seeds)
		}
	}
	if len(subsets) < 3 {
		t.Errorf("%d distinct subsets over %d seeds", len(subsets), seeds)
	}
	if Partial().Name() != PartialName {
		t.Errorf("name %q", Partial().Name())
	}
}

// Package main is the grpo-go command, a GRPO loop for an asking policy against `avtgym
// serve`, written in Go: the counterpart of examples/grpo_bandit.py.
//
// The policy is a log-linear softmax over candidate questions built from the
// n-grams (n = 1..3) of the public request — `What exactly do you mean by
// "<n-gram>"?` — plus STOP. A question's logit is the sum of the weights of
// its features (the n-gram itself, its words, its length); STOP's is a bias
// plus a weight for the number of questions asked so far. Nothing privileged
// is read: the policy sees the request only, and the learning signal is the
// server's question-F1 reward.
//
// Each iteration resets --requests GRPO groups of --group episodes
// (driver.Group: a group shares the task and its interpretation), steps every
// running episode of the iteration together with one StepBatch per turn
// (driver.StepAll), computes group-relative advantages (r - mean) / std
// within each group, drops the groups whose rewards are all equal (they carry
// no signal) and takes one REINFORCE step: every weight moves by
// lr · Adam(mean over kept decisions of A · ∂log π(choice)/∂weight).
// Runs are reproducible: the policy samples from math/rand/v2 seeded with
// --seed, and the server's episodes are pure functions of their seeds.
//
// Against `make run` (the embedded demo corpus on 127.0.0.1:50051):
//
//	go run ./examples/grpo-go --server 127.0.0.1:50051
//
// prints one line per iteration and a summary:
//
//	iter   0  mean_reward 0.379  differing_groups 0.88
//	iter   1  mean_reward 0.496  differing_groups 0.75
//	...
//	iter  39  mean_reward 0.921  differing_groups 0.50
//	first-quarter mean 0.563  last-quarter mean 0.845  (0.9s)
//
// mean_reward is the iteration's mean question-F1 reward, differing_groups
// the fraction of its groups whose rewards differ (the others are dropped).
// Flags: --server ADDR (default 127.0.0.1:50051), --iterations (40),
// --requests (8), --group (16), --lr (0.2), --seed (0), --corpus, --split.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"avtgym/client"
	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// config is what one training run needs.
type config struct {
	Iterations int     // GRPO iterations
	Requests   int     // GRPO groups (requests) per iteration
	Group      int     // episodes per group
	LR         float64 // Adam step size
	Seed       uint64  // the policy's sampling seed and the source of the reset seeds
	Corpus     string  // empty: the server's first corpus
	Split      string  // empty: every split
	// Out, when set, gets one line per iteration as it ends.
	Out io.Writer
}

// iterationStats sums one iteration up.
type iterationStats struct {
	MeanReward float64 // mean reward of the scored episodes
	Differing  float64 // fraction of groups whose rewards differ (the groups that train)
	Decisions  int     // policy decisions in the kept groups
}

func main() {
	fs := flag.NewFlagSet("grpo-go", flag.ExitOnError)
	server := fs.String("server", "127.0.0.1:50051", "address of a running avtgym serve")
	cfg := config{Out: os.Stdout}
	fs.IntVar(&cfg.Iterations, "iterations", 40, "GRPO iterations")
	fs.IntVar(&cfg.Requests, "requests", 8, "requests (GRPO groups) per iteration")
	fs.IntVar(&cfg.Group, "group", 16, "trajectories per group")
	fs.Float64Var(&cfg.LR, "lr", 0.2, "learning rate (Adam)")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "seed of the policy's sampling and of the resets")
	fs.StringVar(&cfg.Corpus, "corpus", "", "corpus (default: the server's first)")
	fs.StringVar(&cfg.Split, "split", "", "draw the requests from this split only")
	fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := train(ctx, *server, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "grpo-go:", err)
		os.Exit(1)
	}
}

// train dials the server, runs the loop and prints the summary line.
func train(ctx context.Context, server string, cfg config) error {
	c, err := client.Dial(server, client.Options{CallTimeout: 60 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	start := time.Now()
	stats, err := run(ctx, c.Env, cfg)
	if err != nil {
		return err
	}
	first, last := quarters(stats)
	fmt.Fprintf(cfg.Out, "first-quarter mean %.3f  last-quarter mean %.3f  (%.1fs)\n", first, last, time.Since(start).Seconds())
	return nil
}

// quarters returns the mean reward of the first and of the last quarter of
// the iterations (at least one iteration each).
func quarters(stats []iterationStats) (first, last float64) {
	if len(stats) == 0 {
		return 0, 0
	}
	q := max(1, len(stats)/4)
	for i := range q {
		first += stats[i].MeanReward
		last += stats[len(stats)-q+i].MeanReward
	}
	return first / float64(q), last / float64(q)
}

// run trains a fresh policy for cfg.Iterations iterations against c.
func run(ctx context.Context, c pb.EnvServiceClient, cfg config) ([]iterationStats, error) {
	if cfg.Iterations < 0 || cfg.Requests < 1 || cfg.Group < 1 {
		return nil, fmt.Errorf("need iterations ≥ 0, requests ≥ 1 and group ≥ 1")
	}
	env := driver.Remote(c)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	pol := newPolicy(cfg.LR)
	var stats []iterationStats
	for it := range cfg.Iterations {
		s, err := iteration(ctx, env, pol, rng, cfg)
		if err != nil {
			return stats, fmt.Errorf("iteration %d: %w", it, err)
		}
		stats = append(stats, s)
		if cfg.Out != nil {
			fmt.Fprintf(cfg.Out, "iter %3d  mean_reward %.3f  differing_groups %.2f\n", it, s.MeanReward, s.Differing)
		}
	}
	return stats, nil
}

// decision is one sampled choice, kept for the gradient.
type decision struct {
	feats  [][]string // the candidates' features (questions still unasked)
	asked  int        // questions asked before the choice
	choice int        // index into feats, or len(feats) for STOP
	probs  []float64  // the policy's probabilities, STOP last
}

// trajectory is one episode and the policy's decisions in it.
type trajectory struct {
	ep        *driver.Episode
	grams     []string   // candidate n-grams of the request
	feats     [][]string // their features
	left      []int      // indexes of the n-grams not asked yet
	decisions []decision
}

// iteration plays one GRPO iteration and updates the policy.
func iteration(ctx context.Context, env driver.BatchEnv, pol *policy, rng *rand.Rand, cfg config) (iterationStats, error) {
	opts := &pb.EpisodeOptions{Reward: pb.RewardType_REWARD_TYPE_QUESTION_F1}
	trajs := make([]*trajectory, 0, cfg.Requests*cfg.Group)
	for range cfg.Requests {
		// Seeds seed … seed+group-1 go to the group; spacing the draws by
		// 1024 keeps groups from sharing seeds.
		seed := rng.Uint64N(1<<31) * 1024
		eps, err := driver.Group(ctx, env, &pb.ResetRequest{Corpus: cfg.Corpus, Split: cfg.Split, Seed: &seed, Options: opts}, cfg.Group)
		if err != nil {
			return iterationStats{}, err
		}
		for _, ep := range eps {
			grams := candidates(ep.Task().GetRequest())
			t := &trajectory{ep: ep, grams: grams, feats: make([][]string, len(grams)), left: make([]int, len(grams))}
			for i, g := range grams {
				t.feats[i], t.left[i] = features(g), i
			}
			trajs = append(trajs, t)
		}
	}

	// Step every running episode together until all have ended. A failed
	// step ends the iteration (the question-F1 reward runs no SQL, so
	// only a server or transport failure gets here).
	for {
		var eps []*driver.Episode
		var actions []*pb.Action
		for _, t := range trajs {
			if !t.ep.Done() {
				eps, actions = append(eps, t.ep), append(actions, pol.act(t, rng))
			}
		}
		if len(eps) == 0 {
			break
		}
		for _, err := range driver.StepAll(ctx, env, eps, actions) {
			if err != nil {
				return iterationStats{}, err
			}
		}
	}

	// Rewards, group by group. An unscored episode (status ERROR: the
	// environment failed) is left out of its group.
	var s iterationStats
	var sum float64
	var scored, differing int
	grad := newGradient()
	for g := range cfg.Requests {
		group := trajs[g*cfg.Group : (g+1)*cfg.Group]
		var kept []*trajectory
		var rs []float64
		for _, t := range group {
			rec := t.ep.Record(nil)
			if !rec.Scored() || rec.Reward == nil {
				continue
			}
			kept, rs = append(kept, t), append(rs, *rec.Reward)
			sum += *rec.Reward
			scored++
		}
		mean, std := meanStd(rs)
		if len(rs) < 2 || std == 0 {
			continue // all rewards equal: no signal
		}
		differing++
		for i, t := range kept {
			adv := (rs[i] - mean) / (std + 1e-6)
			for _, d := range t.decisions {
				grad.add(d, adv)
				s.Decisions++
			}
		}
	}
	if scored > 0 {
		s.MeanReward = sum / float64(scored)
	}
	s.Differing = float64(differing) / float64(cfg.Requests)
	if s.Decisions > 0 {
		pol.update(grad, float64(s.Decisions))
	}
	return s, nil
}

var wordRE = regexp.MustCompile(`[a-z0-9]+(?:'[a-z]+)?`)

// candidates returns the distinct n-grams (n = 1..3) of the request's words,
// shortest first, in order of appearance.
func candidates(request string) []string {
	w := wordRE.FindAllString(strings.ToLower(request), -1)
	var out []string
	seen := map[string]bool{}
	for n := 1; n <= 3; n++ {
		for i := 0; i+n <= len(w); i++ {
			g := strings.Join(w[i:i+n], " ")
			if !seen[g] {
				seen[g] = true
				out = append(out, g)
			}
		}
	}
	return out
}

// features are an n-gram's features: itself, its length, its words.
func features(gram string) []string {
	ws := strings.Fields(gram)
	f := []string{"g:" + gram, fmt.Sprintf("n:%d", len(ws))}
	for _, x := range ws {
		f = append(f, "w:"+x)
	}
	return f
}

// question is the question asked about an n-gram.
func question(gram string) string { return fmt.Sprintf("What exactly do you mean by %q?", gram) }

// stopFeats is the number of STOP weights: a bias and one per count of
// questions asked (0 … stopFeats-2, the last for that many or more).
const stopFeats = 8

func stopIndex(asked int) int { return 1 + min(asked, stopFeats-2) }

// policy is the log-linear softmax policy and its Adam state.
type policy struct {
	lr   float64
	w    map[string]float64 // question feature weights
	ws   [stopFeats]float64 // STOP weights
	m, v map[string]float64 // Adam moments of w
	ms   [stopFeats]float64 // and of ws
	vs   [stopFeats]float64
	t    int
}

func newPolicy(lr float64) *policy {
	return &policy{lr: lr, w: map[string]float64{}, m: map[string]float64{}, v: map[string]float64{}}
}

// probs returns the softmax over the candidates' logits and STOP's (last).
func (p *policy) probs(feats [][]string, asked int) []float64 {
	z := make([]float64, len(feats)+1)
	for i, f := range feats {
		for _, k := range f {
			z[i] += p.w[k]
		}
	}
	z[len(feats)] = p.ws[0] + p.ws[stopIndex(asked)]
	hi := math.Inf(-1)
	for _, x := range z {
		hi = max(hi, x)
	}
	var sum float64
	for i, x := range z {
		z[i] = math.Exp(x - hi)
		sum += z[i]
	}
	for i := range z {
		z[i] /= sum
	}
	return z
}

// act returns t's next action. With no budget or no candidate left the
// STOP is forced, and is not a decision of the policy.
func (p *policy) act(t *trajectory, rng *rand.Rand) *pb.Action {
	stop := &pb.Action{Kind: &pb.Action_Stop_{Stop: &pb.Action_Stop{}}}
	if t.ep.Remaining() <= 0 || len(t.left) == 0 {
		return stop
	}
	feats := make([][]string, len(t.left))
	for i, j := range t.left {
		feats[i] = t.feats[j]
	}
	pr := p.probs(feats, t.ep.Asked())
	c := sample(pr, rng)
	t.decisions = append(t.decisions, decision{feats: feats, asked: t.ep.Asked(), choice: c, probs: pr})
	if c == len(feats) {
		return stop
	}
	gram := t.grams[t.left[c]]
	t.left = append(t.left[:c:c], t.left[c+1:]...)
	return &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: question(gram)}}}
}

// sample draws an index from the distribution pr.
func sample(pr []float64, rng *rand.Rand) int {
	u := rng.Float64()
	for i, x := range pr {
		if u < x {
			return i
		}
		u -= x
	}
	return len(pr) - 1
}

// gradient accumulates Σ A · ∂log π(choice)/∂weight. Each weight's sum
// is added up in the order the decisions come, so it is reproducible.
type gradient struct {
	w  map[string]float64
	ws [stopFeats]float64
}

func newGradient() *gradient { return &gradient{w: map[string]float64{}} }

// add adds one decision with advantage adv. For a softmax, ∂log π(c)/∂z_j
// is 1[j = c] - π_j, and a logit's weights each get its coefficient.
func (g *gradient) add(d decision, adv float64) {
	for j, f := range d.feats {
		coef := -d.probs[j]
		if j == d.choice {
			coef++
		}
		for _, k := range f {
			g.w[k] += adv * coef
		}
	}
	k := len(d.feats)
	coef := -d.probs[k]
	if d.choice == k {
		coef++
	}
	g.ws[0] += adv * coef
	g.ws[stopIndex(d.asked)] += adv * coef
}

// update takes one Adam ascent step on the gradient divided by n. Every
// weight seen so far steps, as in a dense Adam (a weight the gradient does
// not touch still moves with its momentum); the steps of different weights
// are independent, so ranging over the map in any order gives the same
// result.
func (p *policy) update(g *gradient, n float64) {
	const b1, b2, eps = 0.9, 0.999, 1e-8
	p.t++
	c1, c2 := 1-math.Pow(b1, float64(p.t)), 1-math.Pow(b2, float64(p.t))
	step := func(w, m, v *float64, gr float64) {
		*m = b1**m + (1-b1)*gr
		*v = b2**v + (1-b2)*gr*gr
		*w += p.lr * (*m / c1) / (math.Sqrt(*v/c2) + eps)
	}
	for k := range g.w {
		if _, ok := p.w[k]; !ok {
			p.w[k] = 0
		}
	}
	for k, w := range p.w {
		m, v := p.m[k], p.v[k]
		step(&w, &m, &v, g.w[k]/n)
		p.w[k], p.m[k], p.v[k] = w, m, v
	}
	for i := range p.ws {
		step(&p.ws[i], &p.ms[i], &p.vs[i], g.ws[i]/n)
	}
}

// meanStd returns the mean and the (population) standard deviation of xs.
func meanStd(xs []float64) (mean, std float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(xs)))
}

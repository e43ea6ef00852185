// Package conformance is the conformance suite that every avtgym
// environment passes, for every protocol and over every transport: Run
// plays scripted episodes of AMBITAB, BIRD_C, BIRD_A, TIDE_F and TIDE_P on
// a Target (the in-process env.Env, or a server over gRPC, both through
// driver.Env) and checks what docs/protocols.md ("Episodes", "Protocols"),
// PROTOCOL.md (§2, §8, §9, §11) and docs/limits.md promise:
//
//   - reset and step invariants: who produced each turn (the role of every
//     turn kind), the turns each action adds, the budget in the protocol's
//     unit and how each action moves it, the counters, the phase and
//     sql_required, and the done / status / reward rules (a reward exactly
//     when the episode is done and not ERROR, its components named and
//     exact, an undefined component absent, never 0); the options each
//     protocol refuses (INVALID_OPTION); and, under TIDE, counters that are
//     the same on every task (they must not tell whether a drift will come);
//   - budget exhaustion, each protocol at its own limit: AMBITAB's m + C
//     questions (TRUNCATED, the question not answered), BIRD_C's m +
//     patience turns (only SQL on the last), BIRD_A's coins (the free final
//     submit), TIDE's 20 agent turns;
//   - fork and retry: the same token and action give the same observation,
//     privileged data, reward and status, under fresh token bytes, however
//     long after; an old token forks the episode;
//   - tokens: every single-byte change, truncation, extension, a token that
//     is too short, empty or too long, and one of another server are
//     INVALID_ARGUMENT with the documented ErrorInfo reason
//     (TOKEN_TAMPERED, TOKEN_MALFORMED, TOKEN_FOREIGN), and the original
//     token still plays;
//   - privileged hygiene: every episode is played twice per step, with and
//     without include_privileged; the two observations must be equal, the
//     unprivileged response must carry no privileged field, and no text the
//     policy is shown may contain a privileged value of its episode
//     (hygiene.go says which values, and where one may legitimately appear);
//   - ERROR only on environment faults: empty, blank, oversized and invalid
//     UTF-8 questions, SQL that is empty, oversized, invalid UTF-8, does not
//     parse or names nothing, unparsed output, stops, tools where none are
//     served: each is scored as the policy's (TERMINATED, TRUNCATED or a
//     turn that goes on), or rejected as a bad request, never ERROR;
//   - size bounds: every token within TokenBound of its task (and padded to
//     its 64-byte bucket) and every step response within StepResponseBound
//     (env/limits.go, docs/limits.md).
//
// The suite is black-box: it uses only the wire messages (avtgym.v1), the
// driver.Env interface and, for the documented size bounds, env's exported
// bound functions. It needs no PostgreSQL: it draws its tasks from what the
// target serves (the embedded demo corpus has AMBITAB tasks, follow-up tasks
// for BIRD_C and BIRD_A, and TIDE samples), by resetting with seeds and
// reading each task's shape from the privileged reset (its counted terms,
// references, chain layers, drift), and fails when the corpus lacks a kind
// of task a check needs. Its idea is dm_env_rpc's compliance suite
// (dm_env_rpc/v1/compliance): one suite that every environment variant
// runs; the code is written for avtgym.
//
// A sixth protocol is one more row in protocols (conformance.go) with its
// scripts.
package conformance

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"avtgym/corpus"
	"avtgym/driver"
	pb "avtgym/proto/avtgym/v1"
)

// Target is an environment under test.
type Target struct {
	// Name names the transport in the subtests' names (AMBITAB/inprocess,
	// AMBITAB/grpc).
	Name string
	// Env is the environment under test.
	Env driver.Env
	// Foreign serves the same corpus as Env under another token key: its
	// tokens must be TOKEN_FOREIGN to Env.
	Foreign driver.Env
	// Limits is the environment behind Env (the same value in process, the
	// server's over gRPC), read only for its documented size bounds.
	Limits Limits
	// ErrorOf reads an error returned by Env: its gRPC status code and the
	// reason of its google.rpc.ErrorInfo ("" when it carries none).
	// GRPCError reads a gRPC client's errors.
	ErrorOf func(error) (codes.Code, string)
	// Protocols is the environment's EnvService.ListProtocols: the rules it
	// publishes, which must be the rules it applies (published.go).
	Protocols func(context.Context, *pb.ListProtocolsRequest) (*pb.ListProtocolsResponse, error)
}

// Limits is what the suite reads of the environment behind a target: the
// longest token it accepts and its tasks, whose size bounds env computes
// (env.TokenBound, env.StepResponseBound). *env.Env implements it.
type Limits interface {
	MaxTokenBytes() int
	Task(corpusName, id string) (*corpus.Task, error)
}

// GRPCError reads an error of a gRPC client: its status code and the
// reason of its google.rpc.ErrorInfo in avtgym's domain ("" when it
// carries none, or one of another domain).
func GRPCError(err error) (codes.Code, string) {
	st := status.Convert(err)
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == "avtgym" {
			return st.Code(), ei.GetReason()
		}
	}
	return st.Code(), ""
}

// protocol is one row of the suite: a protocol, what its episodes look like
// at reset, the tasks it plays and the scripts it plays on them.
type protocol struct {
	name  string
	proto pb.Protocol
	// unit is the budget's unit, and budget the budget a reset with opts
	// gives on the task (in thousandths of the unit).
	unit   pb.BudgetUnit
	budget func(t *task, opts *pb.EpisodeOptions) int64
	// components are every reward component name the protocol may report.
	components []string
	// classes are the tasks it plays: drawn by resetting with seeds until
	// each class has its count.
	classes []class
	// scripts are the episodes it plays on a task, by check.
	scripts func(t *task) []script
	// badOptions are resets the protocol must refuse (INVALID_OPTION).
	badOptions []badOption
	// blindCounters: the counters must be the same on every task, at reset
	// and after a question, so that they do not tell the policy what the
	// task holds (TIDE: whether a drift will come).
	blindCounters bool
}

// class is a kind of task a protocol's checks need, and how many of it.
type class struct {
	name  string
	match func(t *task) bool
	count int
}

// badOption is a reset option the protocol must reject.
type badOption struct {
	name string
	opts *pb.EpisodeOptions
}

// The checks a script belongs to, each a subtest.
const (
	checkSteps  = "steps"
	checkBudget = "budget"
	checkFaults = "faults"
)

// protocols is the suite's table: one row per protocol.
var protocols = []*protocol{ambitab, birdC, birdA, tideF, tideP}

// Run runs the suite on tg: one subtest per protocol (AMBITAB, BIRD_C,
// BIRD_A, TIDE_F, TIDE_P), each holding one subtest named tg.Name with the
// checks (reset, steps, budget, fork_and_retry, tokens, faults); hygiene
// and size bounds are checked on every reset and step of every check.
// The protocols run in parallel.
func Run(t *testing.T, tg Target) {
	t.Helper()
	if tg.Name == "" || tg.Env == nil || tg.Foreign == nil || tg.Limits == nil || tg.ErrorOf == nil || tg.Protocols == nil {
		t.Fatal("conformance: the target needs a name, an environment, a foreign environment, its limits, an error reader and its published rules")
	}
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			t.Run(tg.Name, func(t *testing.T) { runProtocol(t, &tg, p) })
		})
	}
}

// stats count what a protocol's checks covered, for the log.
type stats struct {
	episodes, steps, errors, shown, secrets atomic.Int64
	maxToken, maxResponse                   atomic.Int64
	tokenBound, responseBound               atomic.Int64
}

// raise sets v to n if n is larger.
func (s *stats) raise(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

func runProtocol(t *testing.T, tg *Target, p *protocol) {
	st := &stats{}
	tasks := draw(t, tg, p)
	t.Run("reset", func(t *testing.T) {
		checkResets(t, tg, p, tasks, st)
		if p.blindCounters {
			checkBlindCounters(t, tg, p, tasks)
		}
	})
	for _, check := range []string{checkSteps, checkBudget, checkFaults} {
		t.Run(check, func(t *testing.T) {
			for _, tk := range tasks {
				t.Run(tk.id, func(t *testing.T) {
					for _, sc := range p.scripts(tk) {
						if sc.check == check {
							t.Run(sc.name, func(t *testing.T) { playScript(t, tg, p, tk, sc, st) })
						}
					}
				})
			}
		})
	}
	t.Run("published_rules", func(t *testing.T) { checkPublished(t, tg, p, tasks[0]) })
	t.Run("fork_and_retry", func(t *testing.T) {
		for _, tk := range tasks {
			t.Run(tk.id, func(t *testing.T) { checkForkAndRetry(t, tg, p, tk, st) })
		}
	})
	t.Run("tokens", func(t *testing.T) {
		for _, tk := range tasks {
			t.Run(tk.id, func(t *testing.T) { checkTokens(t, tg, p, tk, st) })
		}
	})
	t.Logf("%s over %s: %d tasks, %d episodes, %d steps, %d rejected requests; hygiene: %d texts shown against %d privileged values; largest token %d bytes (bound %d), largest step response %d bytes (bound %d)",
		p.name, tg.Name, len(tasks), st.episodes.Load(), st.steps.Load(), st.errors.Load(), st.shown.Load(), st.secrets.Load(),
		st.maxToken.Load(), st.tokenBound.Load(), st.maxResponse.Load(), st.responseBound.Load())
}

// task is a drawn task, as its privileged reset describes it.
type task struct {
	id, corpus string
	class      string
	view       *pb.TaskView
	// m is the number of counted ambiguities; terms their distinct terms
	// in annotation order.
	m     int
	terms []string
	// reference is the reference SQL, its statements joined by ";\n" (the
	// last statement's result counts).
	reference string
	// chain: the task has an ambiguity of layer 2; l1 and l2 are the terms
	// of its layer-1 and layer-2 ambiguities (TIDE).
	chain  bool
	l1, l2 []string
	// drift is the drift utterance ("" without one), postDrift the
	// post-drift reference (TIDE).
	drift, postDrift string
	sampleType       string
}

func newTask(ep *pb.Episode, class string) *task {
	p := ep.GetPrivileged()
	tk := &task{
		id: ep.GetObservation().GetTask().GetTaskId(), corpus: ep.GetObservation().GetTask().GetCorpus(),
		class: class, view: ep.GetObservation().GetTask(),
		terms: driver.CountedTerms(p), reference: strings.Join(p.GetReferenceSql(), ";\n"),
	}
	for _, a := range p.GetAmbiguities() {
		if a.GetCounted() {
			tk.m++
		}
	}
	ti := p.GetTide()
	for i, layer := range ti.GetChainLayers() {
		if i >= len(p.GetAmbiguities()) {
			break
		}
		term := p.GetAmbiguities()[i].GetTerm()
		switch layer {
		case 1:
			tk.l1 = append(tk.l1, term)
		case 2:
			tk.l2 = append(tk.l2, term)
			tk.chain = true
		}
	}
	tk.drift = ti.GetDriftUtterance()
	tk.postDrift = strings.Join(ti.GetPostDriftReferenceSql(), ";\n")
	tk.sampleType = ti.GetSampleType()
	return tk
}

// maxDraws bounds the seeds draw tries before it gives up on a class.
const maxDraws = 512

// draw resets episodes of protocol p with seeds 0, 1, … (letting the
// target choose among the tasks the protocol serves) until every class of
// p has its count of distinct tasks.
func draw(t *testing.T, tg *Target, p *protocol) []*task {
	t.Helper()
	need := map[string]int{}
	for _, c := range p.classes {
		need[c.name] = c.count
	}
	seen := map[string]bool{}
	var tasks []*task
	for seed := uint64(0); seed < maxDraws && len(need) > 0; seed++ {
		resp, err := tg.Env.Reset(t.Context(), &pb.ResetRequest{Seed: &seed, IncludePrivileged: true, Options: &pb.EpisodeOptions{Protocol: p.proto}})
		if err != nil {
			t.Fatalf("drawing a %s task with seed %d: %v", p.name, seed, err)
		}
		ep := resp.GetEpisodes()[0]
		id := ep.GetObservation().GetTask().GetTaskId()
		if seen[id] {
			continue
		}
		seen[id] = true
		probe := newTask(ep, "")
		for _, c := range p.classes {
			if need[c.name] > 0 && c.match(probe) {
				tasks = append(tasks, newTask(ep, c.name))
				if need[c.name]--; need[c.name] == 0 {
					delete(need, c.name)
				}
				break
			}
		}
	}
	if len(need) > 0 {
		t.Fatalf("%d draws of %s found no task, or too few, of the classes %v: the served corpus lacks what the checks need", maxDraws, p.name, need)
	}
	for _, tk := range tasks {
		t.Logf("%s plays %s (%s: m = %d, terms %q)", p.name, tk.id, tk.class, tk.m, tk.terms)
	}
	return tasks
}

// checkResets checks each task's reset (playScript checks every reset
// fully; here: determinism and the options the protocol refuses).
func checkResets(t *testing.T, tg *Target, p *protocol, tasks []*task, st *stats) {
	for _, tk := range tasks {
		t.Run(tk.id, func(t *testing.T) {
			// A reset with the same task, options and seed is the same
			// episode: the same observation and privileged data, its own token.
			pl := newPlay(t, tg, p, tk, st)
			a := pl.resetOnce(nil, true)
			b := pl.resetOnce(nil, true)
			if !sameEpisode(a, b) {
				t.Errorf("two resets with one seed differ:\n%v\n%v", a, b)
			}
			if string(a.GetToken()) == string(b.GetToken()) {
				t.Errorf("two resets sealed the same token bytes: the nonces must be fresh")
			}
			// The full reset invariants.
			pl.start(nil)
			pl.finish()
			for _, bad := range p.badOptions {
				opts := cloneOptions(bad.opts, p.proto)
				_, err := tg.Env.Reset(t.Context(), &pb.ResetRequest{TaskId: tk.id, Options: opts})
				pl.wantError(err, "reset with "+bad.name, codes.InvalidArgument, "INVALID_OPTION")
			}
		})
	}
}

// checkBlindCounters checks that the counters of every task's reset, and
// after one generic question, are the same.
func checkBlindCounters(t *testing.T, tg *Target, p *protocol, tasks []*task) {
	counters := func(o *pb.Observation) string {
		b := o.GetBudget()
		return fmt.Sprintf("budget %s %d/%d/%d (total/used/remaining), question budget %d, asked %d, remaining %d, sub-task %d, phase %s, sql_required %v",
			b.GetUnit(), b.GetTotalMilli(), b.GetUsedMilli(), b.GetRemainingMilli(), o.GetQuestionBudget(), o.GetQuestionsAsked(), o.GetQuestionsRemaining(), o.GetSubtask(), o.GetPhase(), o.GetSqlRequired())
	}
	var first [2]string
	for i, tk := range tasks {
		seed := seedOf
		resp, err := tg.Env.Reset(t.Context(), &pb.ResetRequest{TaskId: tk.id, Seed: &seed, Options: cloneOptions(nil, p.proto)})
		if err != nil {
			t.Fatal(err)
		}
		ep := resp.GetEpisodes()[0]
		r, err := tg.Env.Step(t.Context(), &pb.StepRequest{Token: ep.GetToken(), Action: driver.AskAction(genericQuestions[0])})
		if err != nil {
			t.Fatal(err)
		}
		got := [2]string{counters(ep.GetObservation()), counters(r.GetObservation())}
		if i == 0 {
			first = got
			continue
		}
		for j, when := range []string{"at reset", "after a question"} {
			if got[j] != first[j] {
				t.Errorf("%s the counters of %s (%s) differ from those of %s (%s): %s\n%s", when, tk.id, tk.class, tasks[0].id, tasks[0].class, got[j], first[j])
			}
		}
	}
}

// cloneOptions returns opts (nil: none) with the protocol set.
func cloneOptions(opts *pb.EpisodeOptions, p pb.Protocol) *pb.EpisodeOptions {
	o := &pb.EpisodeOptions{}
	if opts != nil {
		o = protoClone(opts)
	}
	if o.Protocol == pb.Protocol_PROTOCOL_UNSPECIFIED && p != pb.Protocol_PROTOCOL_AMBITAB {
		o.Protocol = p
	}
	return o
}

func describe(a *pb.Action) string {
	name := driver.ActionName(a)
	if name == "" {
		return "no action"
	}
	return fmt.Sprintf("%s %.60q", name, sentTexts(a))
}

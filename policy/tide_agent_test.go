package policy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"avtgym/driver"
	"avtgym/internal/fakellm"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// tideModel is a fake OpenAI chat endpoint that answers the TIDE agent's
// calls with replies, in order (then a malformed reply); a reply "500"
// fails the call.
func tideModel(t *testing.T, replies ...string) *fakellm.Server {
	t.Helper()
	var (
		mu sync.Mutex
		n  int
	)
	s := fakellm.New(fakellm.Options{Hook: func(system, user string) (int, string, bool) {
		mu.Lock()
		defer mu.Unlock()
		r := "no more replies scripted"
		if n < len(replies) {
			r = replies[n]
		}
		n++
		if r == "500" {
			return 500, "", true
		}
		return 0, r, true
	}})
	t.Cleanup(s.Close)
	return s
}

func playTideAgent(t *testing.T, env driver.Env, model *fakellm.Server, cache llm.Cache, task string, p pb.Protocol) (*driver.Episode, *driver.Record) {
	t.Helper()
	a, err := NewTideAgent(newAskerClient(t, model.URL+"/v1", cache))
	if err != nil {
		t.Fatal(err)
	}
	ep := startFakeTide(t, env, task, p, true)
	return ep, Finish(ep, a.Play(context.Background(), ep))
}

// promptText is every message of a request, joined.
func promptText(r fakellm.Request) string {
	var b strings.Builder
	for _, m := range r.Messages {
		b.WriteString(m.Role + ": " + m.Content + "\n")
	}
	return b.String()
}

func roles(r fakellm.Request) []string {
	var out []string
	for _, m := range r.Messages {
		out = append(out, m.Role)
	}
	return out
}

// TestTideAgentJoint: the TIDE agent on a joint sample under TIDE_F, with
// replies in TIDE's output protocol (in a ```json fence with prose, plain,
// with a fenced SQL content): it asks L1 then L2, submits the reference,
// then the post-drift SQL after the drift turn: reward 1. Its prompts show
// the schema and evidence, render the dialogue as chat turns, and hold no
// privileged text (the post-drift SQL never; the drift utterance only once
// injected; the answers only once given).
func TestTideAgentJoint(t *testing.T) {
	f := newFakeTide()
	task := f.tasks["t-J"]
	ref, post := strings.Join(task.ref, ";\n"), strings.Join(task.post, ";\n")
	model := tideModel(t,
		"Sure, I need to clarify first.\n```json\n{\"type\": \"ask\", \"content\": \"What do you mean by crowds?\"}\n```",
		`{"type": "ask", "content": "Which attendance figure: average or highest?"}`,
		`{"type":"SQL","content":`+jsonQuote(ref)+`}`,
		`{"type": "sql", "content": `+jsonQuote("```sql\n"+post+"\n```")+`}`,
	)
	ep, r := playTideAgent(t, f, model, nil, "t-J", pb.Protocol_PROTOCOL_TIDE_F)
	if r.Status != "TERMINATED" || val(r.Reward) != 1 || r.Error != "" || !slices.Equal(r.SQLs, []string{ref, post}) {
		t.Fatalf("record: %s %s reward %v SQL %q", r.Status, r.Error, val(r.Reward), r.SQLs)
	}
	if !slices.Equal(ep.Routings(), []string{"L1", "L2"}) || len(r.Questions) != 2 {
		t.Errorf("routings %q questions %q", ep.Routings(), r.Questions)
	}
	reqs := model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model calls, want 4", len(reqs))
	}
	first := reqs[0]
	if sys := first.System(); !strings.Contains(sys, task.schema) || !strings.Contains(sys, task.evidence) || !strings.Contains(sys, `{"type": "ask", "content": <clarification question>}`) ||
		!strings.Contains(sys, "SQLite-compatible") || strings.Contains(sys, "{schema_ddl}") {
		t.Errorf("system prompt:\n%s", sys)
	}
	if !slices.Equal(roles(first), []string{"system", "user"}) || first.User() != task.request {
		t.Errorf("first prompt: %q", promptText(first))
	}
	last := reqs[3]
	if !slices.Equal(roles(last), []string{"system", "user", "assistant", "user", "assistant", "user", "assistant", "user"}) {
		t.Errorf("last prompt roles %q", roles(last))
	}
	if m := last.Messages; m[2].Content != `{"type": "ask", "content": "What do you mean by crowds?"}` || m[3].Content != task.answers[1] ||
		m[6].Content != RenderTideAction(&pb.Turn{Kind: pb.TurnKind_TURN_KIND_SQL, Text: ref}) || m[7].Content != task.drift {
		t.Errorf("last prompt:\n%s", promptText(last))
	}
	for i, rq := range reqs {
		p := promptText(rq)
		if strings.Contains(p, post) || strings.Contains(p, "2015") && i < 3 || strings.Contains(p, task.answers[0]) && i < 2 ||
			strings.Contains(p, ref) && i < 3 || strings.Contains(p, "joint") || strings.Contains(p, "drift_only") {
			t.Errorf("prompt %d holds privileged text:\n%s", i, p)
		}
	}
}

func jsonQuote(s string) string {
	b, _ := jsonString(s)
	return b
}

// TestTideAgentPrefilled: under TIDE_P the pre-filled question is the
// agent's own turn in the prompt, its answer the user's.
func TestTideAgentPrefilled(t *testing.T) {
	f := newFakeTide()
	task := f.tasks["t-C"]
	model := tideModel(t, `{"type": "ask", "content": "For attendance, average or highest?"}`, `{"type": "sql", "content": "SELECT 2"}`)
	ep, r := playTideAgent(t, f, model, nil, "t-C", pb.Protocol_PROTOCOL_TIDE_P)
	if r.Status != "TERMINATED" || val(r.Reward) != 0 || !slices.Equal(ep.Routings(), []string{"L2"}) || len(r.Questions) != 1 {
		t.Fatalf("record: %s %s reward %v routings %q questions %q", r.Status, r.Error, val(r.Reward), ep.Routings(), r.Questions)
	}
	first := model.Requests()[0]
	if !slices.Equal(roles(first), []string{"system", "user", "assistant", "user"}) ||
		first.Messages[2].Content != RenderTideAction(&pb.Turn{Kind: pb.TurnKind_TURN_KIND_QUESTION, Text: task.prefill}) || first.Messages[3].Content != task.answers[1] {
		t.Errorf("first prompt:\n%s", promptText(first))
	}
}

// TestTideAgentMalformed: unparsable output goes to the server as an
// unparsed action: once, then a valid SQL, is a spent turn and a notice
// (shown to the model as the user's turn, after its own output); twice in
// a row is an abstention that ends the episode.
func TestTideAgentMalformed(t *testing.T) {
	f := newFakeTide()
	ref := strings.Join(f.tasks["t-C"].ref, ";\n")
	model := tideModel(t, "I think I should look at the schema first.", `{"type": "sql", "content": `+jsonQuote(ref)+`}`)
	ep, r := playTideAgent(t, f, model, nil, "t-C", pb.Protocol_PROTOCOL_TIDE_F)
	if r.Status != "TERMINATED" || val(r.Reward) != 1 || len(r.SQLs) != 1 || ep.Allowance().GetUsedMilli() != 2000 {
		t.Fatalf("malformed then valid: %s %s reward %v SQL %q turns %v", r.Status, r.Error, val(r.Reward), r.SQLs, ep.Allowance())
	}
	second := model.Requests()[1]
	if !slices.Equal(roles(second), []string{"system", "user", "assistant", "user"}) || second.Messages[2].Content != "I think I should look at the schema first." ||
		second.Messages[3].Content != "Your output could not be read." {
		t.Errorf("second prompt:\n%s", promptText(second))
	}

	model = tideModel(t, "garbage", `{"type": "maybe", "content": "x"}`, `{"type": "sql", "content": "SELECT 1"}`)
	ep, r = playTideAgent(t, newFakeTide(), model, nil, "t-J", pb.Protocol_PROTOCOL_TIDE_F)
	unparsed := 0
	for _, tu := range ep.Turns() {
		if tu.GetKind() == pb.TurnKind_TURN_KIND_UNPARSED {
			unparsed++
		}
	}
	if r.Status != "TERMINATED" || val(r.Reward) != 0 || len(r.SQLs) != 0 || unparsed != 2 || len(model.Requests()) != 2 {
		t.Errorf("malformed twice: %s %s reward %v SQL %q unparsed %d calls %d", r.Status, r.Error, val(r.Reward), r.SQLs, unparsed, len(model.Requests()))
	}
}

// TestTideAgentFailures: an endpoint failure is an *AskerError; another
// protocol is refused; a rerun with the cache reads every reply from it.
func TestTideAgentFailures(t *testing.T) {
	model := tideModel(t, "500")
	_, r := playTideAgent(t, newFakeTide(), model, nil, "t-C", pb.Protocol_PROTOCOL_TIDE_F)
	if r.Status != "ASKER_FAILED" {
		t.Errorf("endpoint failure: %s %s", r.Status, r.Error)
	}
	a, _ := NewTideAgent(newAskerClient(t, model.URL+"/v1", nil))
	ep := startFakeTide(t, newFakeTide(), "t-C", pb.Protocol_PROTOCOL_BIRD_C, true)
	var ae *AskerError
	if err := a.Play(context.Background(), ep); !errors.As(err, &ae) || !strings.Contains(err.Error(), "tide-f and tide-p") {
		t.Errorf("under bird-c: %v", err)
	}
	if _, err := NewTideAgent(nil); err == nil {
		t.Error("no client")
	}

	cache := llm.NewMemoryCache()
	replies := []string{`{"type": "ask", "content": "What are crowds?"}`, `{"type": "sql", "content": "SELECT 3"}`}
	model = tideModel(t, replies...)
	_, r1 := playTideAgent(t, newFakeTide(), model, cache, "t-C", pb.Protocol_PROTOCOL_TIDE_F)
	model2 := tideModel(t, "500")
	_, r2 := playTideAgent(t, newFakeTide(), model2, cache, "t-C", pb.Protocol_PROTOCOL_TIDE_F)
	if r1.Status != "TERMINATED" || r2.Status != "TERMINATED" || model2.Calls() != 0 || !slices.Equal(r1.Questions, r2.Questions) || !slices.Equal(r1.SQLs, r2.SQLs) {
		t.Errorf("cached rerun: %s %s / %s %s, %d calls", r1.Status, r1.Error, r2.Status, r2.Error, model2.Calls())
	}
}

func TestParseTideAction(t *testing.T) {
	for reply, want := range map[string]string{
		`{"type": "ask", "content": "Which year?"}`:                               "ask:Which year?",
		`{"type": "sql", "content": "SELECT 1"}`:                                  "submit_sql:SELECT 1",
		" {\"type\": \"SQL\", \"content\": \"  SELECT 1\\nFROM t \"} ":            "submit_sql:SELECT 1\nFROM t",
		"```json\n{\"type\": \"ask\", \"content\": \"Which year?\"}\n```":         "ask:Which year?",
		"Let me ask. {\"type\": \"ask\", \"content\": \"Which {year}?\"} Thanks.": "ask:Which {year}?",
		`{"type": "sql", "content": "` + "```sql\\nSELECT 1\\n```" + `"}`:         "submit_sql:SELECT 1",
		"{\"type\": \"sql\", \"content\": \"SELECT a\nFROM t\"}":                  "submit_sql:SELECT a\nFROM t", // a raw newline, repaired
		`{"type": "ask", "content": "a"} {"type": "ask", "content": "a"}`:         "ask:a",
		`{"type": "ask", "content": "a"} {"type": "sql", "content": "SELECT 1"}`:  "",
		`{"type": "ask", "content": ""}`:                                          "",
		`{"type": "ask", "content": 3}`:                                           "",
		`{"type": "ask"}`:                                                         "",
		`{"type": "stop", "content": "x"}`:                                        "",
		`{"content": "SELECT 1"}`:                                                 "",
		`<action>ask("Which year?")</action>`:                                     "",
		"Which year do you mean?":                                                 "",
		"":                                                                        "",
	} {
		got, err := ParseTideAction(reply)
		s := ""
		if err == nil {
			s = driver.ActionName(got) + ":" + got.GetAsk().GetText() + got.GetSubmitSql().GetSql()
		}
		if s != want {
			t.Errorf("%q: got %q (%v), want %q", reply, s, err, want)
		}
	}
	// The history's rendering parses back to the same action.
	for _, tu := range []*pb.Turn{
		{Kind: pb.TurnKind_TURN_KIND_QUESTION, Text: `Do you mean "poor" as in < 3? {x}`},
		{Kind: pb.TurnKind_TURN_KIND_SQL, Text: "SELECT \"a\", 'x\\n'\nFROM t\tWHERE b = 1"},
	} {
		if strings.Contains(RenderTideAction(tu), `\u003c`) {
			t.Errorf("rendered with HTML escapes: %s", RenderTideAction(tu))
		}
		got, err := ParseTideAction(RenderTideAction(tu))
		if err != nil || got.GetAsk().GetText()+got.GetSubmitSql().GetSql() != tu.GetText() {
			t.Errorf("%q rendered %q parsed %v (%v)", tu.GetText(), RenderTideAction(tu), got, err)
		}
	}
}

// TestTideAgentE2E: the TIDE agent through a real server on the demo's
// joint sample tide-a1-J: asks L1 then L2, submits the reference, then the
// post-drift SQL: reward 1, routed L1 and L2, drift recognised; no prompt
// holds privileged text. Under TIDE_P its first prompt shows the
// pre-filled question as its own turn. Malformed output twice in a row is
// an abstention; once, then valid SQL, a notice and a spent turn.
func TestTideAgentE2E(t *testing.T) {
	srv := tideServer(t)
	env := driver.Remote(srv.Client.Env)
	start := func(task string, p pb.Protocol) *driver.Episode {
		seed := uint64(5)
		ep, err := driver.Start(context.Background(), env, &pb.ResetRequest{Corpus: "demo", TaskId: task, Seed: &seed, Options: &pb.EpisodeOptions{Protocol: p}, IncludePrivileged: true})
		if err != nil {
			t.Fatal(err)
		}
		return ep
	}
	play := func(ep *driver.Episode, model *fakellm.Server) *driver.Record {
		a, err := NewTideAgent(newAskerClient(t, model.URL+"/v1", nil))
		if err != nil {
			t.Fatal(err)
		}
		return Finish(ep, a.Play(context.Background(), ep))
	}

	ep := start("tide-a1-J", pb.Protocol_PROTOCOL_TIDE_F)
	priv := ep.Reset().GetPrivileged()
	ref, post := strings.Join(priv.GetReferenceSql(), ";\n"), strings.Join(ep.Tide().GetPostDriftReferenceSql(), ";\n")
	var l1, l2 *pb.AmbiguityInfo
	for i, a := range priv.GetAmbiguities() {
		switch ep.Tide().GetChainLayers()[i] {
		case 1:
			l1 = a
		case 2:
			l2 = a
		}
	}
	if l1 == nil || l2 == nil || post == "" {
		t.Fatalf("tide-a1-J is not a joint sample: %v", priv)
	}
	model := tideModel(t,
		`{"type": "ask", "content": "When you say `+l1.GetTerm()+`, which figure do you mean?"}`,
		"```json\n{\"type\": \"ask\", \"content\": \"Which "+l2.GetTerm()+" exactly?\"}\n```",
		`{"type": "sql", "content": `+jsonQuote(ref)+`}`,
		`Understood. {"type": "sql", "content": `+jsonQuote(post)+`}`,
	)
	r := play(ep, model)
	if r.Status != "TERMINATED" || val(r.Reward) != 1 || val(r.DriftRecognized) != 1 || val(r.SQL2) != 1 || !slices.Equal(r.Routings, []string{"L1", "L2"}) {
		t.Fatalf("record: %s %s reward %v drr %v sql2 %v routings %q", r.Status, r.Error, val(r.Reward), val(r.DriftRecognized), val(r.SQL2), r.Routings)
	}
	reqs := model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d model calls", len(reqs))
	}
	if sys := reqs[0].System(); !strings.Contains(sys, "CREATE TABLE") || !strings.Contains(sys, ep.Task().GetEvidence()) {
		t.Errorf("system prompt:\n%s", sys)
	}
	for i, rq := range reqs {
		p := promptText(rq)
		leaks := []string{post, ep.Tide().GetSampleType(), priv.GetInterpretation(), "alternative", "depends_on"}
		if i < 3 {
			leaks = append(leaks, ref, ep.Tide().GetDriftUtterance())
		}
		if i < 2 {
			leaks = append(leaks, l2.GetResolution())
		}
		if i < 1 {
			leaks = append(leaks, l1.GetResolution())
		}
		for _, l := range leaks {
			if l != "" && strings.Contains(p, l) {
				t.Errorf("prompt %d holds privileged text %q:\n%s", i, l, p)
			}
		}
	}
	if last := reqs[3].Messages; last[len(last)-1].Content != ep.Tide().GetDriftUtterance() || last[len(last)-1].Role != "user" {
		t.Errorf("the last prompt does not end with the drift turn: %+v", last[len(last)-1])
	}

	// TIDE_P: the pre-filled L1 question is the agent's own turn.
	ep = start("tide-a1-J", pb.Protocol_PROTOCOL_TIDE_P)
	model = tideModel(t, `{"type": "ask", "content": "Which `+l2.GetTerm()+`?"}`, `{"type": "sql", "content": `+jsonQuote(ref)+`}`, `{"type": "sql", "content": `+jsonQuote(ref)+`}`)
	r = play(ep, model)
	first := model.Requests()[0]
	if r.Status != "TERMINATED" || val(r.Reward) != 0 || val(r.SQL1) != 1 || val(r.DriftRecognized) != 0 || !slices.Equal(r.Routings, []string{"L2"}) ||
		!slices.Equal(roles(first), []string{"system", "user", "assistant", "user"}) || !strings.HasPrefix(first.Messages[2].Content, `{"type": "ask", "content": `) {
		t.Errorf("tide-p: %s %s reward %v routings %q; first prompt:\n%s", r.Status, r.Error, val(r.Reward), r.Routings, promptText(first))
	}

	// Malformed once, then valid; malformed twice.
	ep = start("tide-a1-C", pb.Protocol_PROTOCOL_TIDE_F)
	model = tideModel(t, "Let me think about the schema.", `{"type": "sql", "content": `+jsonQuote(strings.Join(ep.Reset().GetPrivileged().GetReferenceSql(), ";\n"))+`}`)
	r = play(ep, model)
	if r.Status != "TERMINATED" || val(r.Reward) != 1 || r.TurnsUsed != 2 || len(model.Requests()) != 2 {
		t.Errorf("malformed then valid: %s %s reward %v turns %d", r.Status, r.Error, val(r.Reward), r.TurnsUsed)
	} else if second := model.Requests()[1].Messages; second[len(second)-2].Content != "Let me think about the schema." || second[len(second)-1].Role != "user" {
		t.Errorf("second prompt: %+v", second)
	}
	ep = start("tide-a1-D", pb.Protocol_PROTOCOL_TIDE_F)
	model = tideModel(t, "garbage", `{"type": "answer", "content": "42"}`)
	r = play(ep, model)
	unparsed := 0
	for _, tu := range ep.Turns() {
		if tu.GetKind() == pb.TurnKind_TURN_KIND_UNPARSED {
			unparsed++
		}
	}
	if r.Status != "TERMINATED" || val(r.Reward) != 0 || len(r.SQLs) != 0 || unparsed != 2 || len(model.Requests()) != 2 {
		t.Errorf("malformed twice: %s %s reward %v SQL %q unparsed %d", r.Status, r.Error, val(r.Reward), r.SQLs, unparsed)
	}
}

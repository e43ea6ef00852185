package policy

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"

	"avtgym/app"
	"avtgym/driver"
	"avtgym/internal/fakellm"
	"avtgym/internal/testutil"
	pb "avtgym/proto/avtgym/v1"
)

// demoReferences reads the demo corpus's reference SQL of a task and of
// its follow-up (the test's own knowledge, for scripting the model).
func demoReferences(t *testing.T, id string) (string, string) {
	t.Helper()
	f, err := os.Open("../corpus/demo/records.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct {
			ID        string `json:"id"`
			Reference struct {
				SQL string `json:"sql"`
			} `json:"reference"`
			FollowUp struct {
				Reference struct {
					SQL string `json:"sql"`
				} `json:"reference"`
			} `json:"follow_up"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.ID == id {
			return r.Reference.SQL, r.FollowUp.Reference.SQL
		}
	}
	t.Fatalf("no demo record %s", id)
	return "", ""
}

// agentModel is a fake endpoint that answers the agent's calls with
// replies, in order (then stop()).
func agentModel(t *testing.T, replies ...string) *fakellm.Server {
	t.Helper()
	var (
		mu sync.Mutex
		n  int
	)
	s := fakellm.New(fakellm.Options{Hook: func(system, user string) (int, string, bool) {
		mu.Lock()
		defer mu.Unlock()
		r := "<action>stop()</action>"
		if n < len(replies) {
			r = replies[n]
		}
		n++
		return 0, r, true
	}})
	t.Cleanup(s.Close)
	return s
}

func playAgent(t *testing.T, srv *testutil.Server, model *fakellm.Server, task string, opts *pb.EpisodeOptions) (*driver.Episode, *driver.Record) {
	t.Helper()
	a, err := NewLLMAgent(newAskerClient(t, model.URL+"/v1", nil))
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(3)
	ep, err := driver.Start(context.Background(), driver.Remote(srv.Client.Env), &pb.ResetRequest{Corpus: "demo", TaskId: task, Seed: &seed, Options: opts, IncludePrivileged: true})
	if err != nil {
		t.Fatal(err)
	}
	return ep, Finish(ep, a.Play(context.Background(), ep))
}

// TestLLMAgentBirdA: a well-formed run of the LLM agent under BIRD_A, with
// scripted model replies in BIRD-Interact's grammar (prose and a thought
// around the action, an unescaped quote in SQL, single quotes), reaches
// reward 1 on a demo follow-up task, paying for each action; the prompts
// show the coins left and never the privileged data.
func TestLLMAgentBirdA(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	ref, fu := demoReferences(t, "followup-001")
	model := agentModel(t,
		"<thought>Let me look at the tables first.</thought>\n<action>get_schema()</action>",
		`I will check one column. <action>get_column_meaning('reviews', 'rating')</action>`,
		`<action>execute("SELECT name FROM products WHERE name <> "x" LIMIT 2")</action>`,
		`<action>ask("What do you mean by poor reviews?")</action>`,
		"<action>submit(\""+strings.ReplaceAll(ref, `"`, `\"`)+"\")</action>",
		"```\nsubmit(\"\"\""+fu+"\"\"\")\n```",
	)
	ep, r := playAgent(t, srv, model, "followup-001", birdAOptions(nil))
	if r.Status != "TERMINATED" || val(r.Reward) != 1 || val(r.Phase1) != 0.7 || val(r.Phase2) != 0.3 || r.Error != "" {
		t.Fatalf("record: %s %s reward %v phase1 %v phase2 %v", r.Status, r.Error, val(r.Reward), val(r.Phase1), val(r.Phase2))
	}
	want := map[string]float64{"get_schema": 1, "get_column_meaning": 0.5, "execute": 1, "ask": 2, "submit_sql": 6}
	for k, v := range want {
		if r.CoinsSpent[k] != v {
			t.Errorf("coins spent %v, want %v", r.CoinsSpent, want)
			break
		}
	}
	for _, tu := range ep.Turns() {
		if tu.GetKind() == pb.TurnKind_TURN_KIND_TOOL_RESULT && strings.HasPrefix(tu.GetText(), "Error") {
			t.Errorf("a tool failed: %s", tu.GetText())
		}
	}
	reqs := model.Requests()
	if len(reqs) != 6 {
		t.Fatalf("%d model calls, want 6", len(reqs))
	}
	first := reqs[0]
	if !strings.Contains(first.System(), "get_all_knowledge_definitions()") || !strings.Contains(first.System(), "(0.5)") ||
		!strings.Contains(first.User(), "Coin budget: 14.") || !strings.Contains(first.User(), "poor reviews") || strings.Contains(first.User(), "CREATE TABLE") {
		t.Errorf("first prompt:\n%s\n---\n%s", first.System(), first.User())
	}
	for i, rq := range reqs {
		for _, m := range rq.Messages {
			if strings.Contains(m.Content, fu) || (i < 4 && strings.Contains(m.Content, ref)) || strings.Contains(m.Content, "average below 3") && m.Role != "user" {
				t.Errorf("prompt %d holds privileged text: %s", i, m.Content)
			}
		}
	}
	last := reqs[5]
	if !strings.Contains(last.User(), "New request: ") ||
		last.Messages[len(last.Messages)-2].Role != "assistant" || !strings.HasPrefix(last.Messages[len(last.Messages)-2].Content, "<action>submit(") {
		t.Errorf("last prompt: %+v", last.Messages[len(last.Messages)-2:])
	}
	// The tool output reached the model as a user message.
	if !strings.HasPrefix(reqs[1].User(), "CREATE TABLE") {
		t.Errorf("second prompt lacks the schema observation:\n%s", reqs[1].User())
	}
}

// TestLLMAgentBirdC: the same agent under BIRD_C: shown the schema, asks
// and submits within the turns: reward 1.
func TestLLMAgentBirdC(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	ref, fu := demoReferences(t, "followup-001")
	model := agentModel(t,
		`<action>ask("What do you mean by poor reviews?")</action>`,
		"<action>submit(\"\"\""+ref+"\"\"\")</action>",
		"<action>submit(\"\"\""+fu+"\"\"\")</action>",
	)
	_, r := playAgent(t, srv, model, "followup-001", birdCOptions(nil))
	if r.Status != "TERMINATED" || val(r.Reward) != 1 || len(r.Questions) != 1 {
		t.Fatalf("record: %s %s reward %v questions %q", r.Status, r.Error, val(r.Reward), r.Questions)
	}
	first := model.Requests()[0]
	if !strings.Contains(first.User(), "CREATE TABLE") || !strings.Contains(first.User(), "Turn budget: 4.") || strings.Contains(first.System(), "execute(") {
		t.Errorf("first prompt:\n%s\n---\n%s", first.System(), first.User())
	}
}

// TestLLMAgentMalformed: output that holds no valid action becomes an
// unparsed action, and the protocol's rule applies: under BIRD_A 0.2
// coins and a notice each; under BIRD_C a turn (a tool call is no action
// there).
func TestLLMAgentMalformed(t *testing.T) {
	srv := testutil.StartServer(t, app.Config{})
	model := agentModel(t, "Let me think about the tables.", `<action>get_schema("products")</action>`, `<action>frobnicate()</action>`)
	ep, r := playAgent(t, srv, model, "followup-001", birdAOptions(nil))
	if r.Status != "TERMINATED" || val(r.Reward) != 0 || r.Actions["unparsed"] != 3 || r.Actions["stop"] != 1 || r.CoinsSpent["unparsed"] < 0.6-1e-9 || r.CoinsSpent["unparsed"] > 0.6+1e-9 {
		t.Fatalf("record: %s %s reward %v actions %v coins %v", r.Status, r.Error, val(r.Reward), r.Actions, r.CoinsSpent)
	}
	unparsed := 0
	for _, tu := range ep.Turns() {
		if tu.GetKind() == pb.TurnKind_TURN_KIND_UNPARSED {
			unparsed++
		}
	}
	if unparsed != 3 {
		t.Errorf("%d unparsed turns", unparsed)
	}
	model = agentModel(t, `<action>execute("SELECT 1")</action>`)
	_, r = playAgent(t, srv, model, "followup-001", birdCOptions(nil))
	if r.Status != "TERMINATED" || val(r.Reward) != 0 || r.TurnsUsed != 1 {
		t.Errorf("bird-c: %s %s reward %v turns %d", r.Status, r.Error, val(r.Reward), r.TurnsUsed)
	}
	// Under AMBITAB the agent refuses.
	a, _ := NewLLMAgent(newAskerClient(t, model.URL+"/v1", nil))
	rs := rollout(t, srv, a, &pb.EpisodeOptions{})
	if len(rs) == 0 || rs[0].Status != "ASKER_FAILED" || !strings.Contains(rs[0].Error, "bird-c and bird-a") {
		t.Errorf("ambitab: %+v", rs[0])
	}
}

func TestParseAgentAction(t *testing.T) {
	a := pb.Protocol_PROTOCOL_BIRD_A
	for reply, want := range map[string]string{
		`<action>ask("Which year?")</action>`:                                `ask:Which year?`,
		`<thought>x</thought><action>submit("SELECT \"a\" FROM t")</action>`: `submit_sql:SELECT "a" FROM t`,
		`<action>execute("SELECT a FROM t WHERE b = "x"")</action>`:          `execute:SELECT a FROM t WHERE b = "x"`,
		"<ACTION>Get_Schema()</ACTION>":                                      "get_schema:",
		`get_column_meaning("t", "c")`:                                       "get_column_meaning:t.c",
		`<action>get_column_meaning('t','c')</action>`:                       "get_column_meaning:t.c",
		`<action>get_knowledge_definition("Senior patient")</action>`:        "get_knowledge_definition:Senior patient",
		`<action>ask("a")</action> then <action>ask("b")</action>`:           "ask:b",
		"```\nsubmit('''SELECT 1\nFROM t''')\n```":                           "submit_sql:SELECT 1\nFROM t",
		`<action>submit("SELECT 'a\nb'")</action>`:                           "submit_sql:SELECT 'a\nb'",
		"get_all_knowledge_definitions()":                                    "get_all_knowledge_definitions:",
		"get_all_external_knowledge_names()":                                 "get_all_external_knowledge_names:",
		"get_all_column_meanings();":                                         "get_all_column_meanings:",
		`<action>stop()</action>`:                                            "stop:",
		`execute(SELECT 1)`:                                                  "execute:SELECT 1",
		"<action>foo()</action>":                                             "",
		"<action>get_schema(1)</action>":                                     "",
		`<action>ask("")</action>`:                                           "",
		`<action>get_column_meaning("t")</action>`:                           "",
		"Let me think.":                                                      "",
		"":                                                                   "",
	} {
		got, err := ParseAgentAction(reply, a)
		s := ""
		if err == nil {
			s = driver.ActionName(got) + ":" + got.GetAsk().GetText() + got.GetSubmitSql().GetSql() + got.GetExecute().GetSql() + got.GetGetKnowledgeDefinition().GetName()
			if c := got.GetGetColumnMeaning(); c != nil {
				s += c.GetTable() + "." + c.GetColumn()
			}
		}
		if s != want {
			t.Errorf("%q: got %q (%v), want %q", reply, s, err, want)
		}
	}
	if _, err := ParseAgentAction(`<action>execute("SELECT 1")</action>`, pb.Protocol_PROTOCOL_BIRD_C); err == nil {
		t.Error("a tool under BIRD_C")
	}
	// The history's rendering parses back to the same action.
	for _, tu := range []*pb.Turn{
		{Kind: pb.TurnKind_TURN_KIND_QUESTION, Text: `Do you mean "poor" as in < 3?`},
		{Kind: pb.TurnKind_TURN_KIND_SQL, Text: "SELECT \"a\", 'x\\n'\nFROM t\tWHERE b = 1"},
	} {
		got, err := ParseAgentAction(RenderAgentAction(tu), a)
		if err != nil || got.GetAsk().GetText()+got.GetSubmitSql().GetSql() != tu.GetText() {
			t.Errorf("%q rendered %q parsed %v (%v)", tu.GetText(), RenderAgentAction(tu), got, err)
		}
	}
}

package policy

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"avtgym/driver"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of the shared chat prompt")

// chatGoldenDir holds one file per protocol: the input (a public
// observation) and the messages ChatMessages renders from it. The Python
// client's tests (client/python/tests/test_chat_prompt.py) render the same
// inputs with avtgym.chat.prompt_messages and compare with the same files.
const chatGoldenDir = "testdata/chat_prompt"

// goldenTurn is a turn as the golden files write it: the Python client's
// names (Role and TurnKind, lower-cased, without their prefix).
type goldenTurn struct {
	Role string `json:"role"`
	Kind string `json:"kind"`
	Text string `json:"text"`
}

type goldenKnowledge struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Definition string `json:"definition"`
}

type goldenDatabase struct {
	ID             string            `json:"id"`
	Dialect        string            `json:"dialect"`
	Schema         string            `json:"schema"`
	ColumnMeanings map[string]string `json:"column_meanings"`
	Knowledge      []goldenKnowledge `json:"knowledge"`
}

type goldenTask struct {
	Corpus   string         `json:"corpus"`
	TaskID   string         `json:"task_id"`
	Request  string         `json:"request"`
	Evidence string         `json:"evidence"`
	Database goldenDatabase `json:"database"`
}

type goldenBudget struct {
	Unit       string `json:"unit"`
	TotalMilli int64  `json:"total_milli"`
}

type goldenFile struct {
	Version  string        `json:"version"`
	Protocol string        `json:"protocol"`
	Task     goldenTask    `json:"task"`
	Budget   *goldenBudget `json:"budget"`
	Turns    []goldenTurn  `json:"turns"`
	Messages []llm.Message `json:"messages"`
}

func (g goldenFile) view(t *testing.T) ChatView {
	t.Helper()
	p, err := driver.ParseProtocol(g.Protocol)
	if err != nil {
		t.Fatal(err)
	}
	db := &pb.DatabaseView{Id: g.Task.Database.ID, Dialect: g.Task.Database.Dialect, Schema: g.Task.Database.Schema, ColumnMeanings: g.Task.Database.ColumnMeanings}
	for _, k := range g.Task.Database.Knowledge {
		db.Knowledge = append(db.Knowledge, &pb.KnowledgeEntry{Id: k.ID, Name: k.Name, Definition: k.Definition})
	}
	v := ChatView{Protocol: p, Task: &pb.TaskView{Corpus: g.Task.Corpus, TaskId: g.Task.TaskID, Request: g.Task.Request, Evidence: g.Task.Evidence, Database: db}}
	if g.Budget != nil {
		unit := pb.BudgetUnit(pb.BudgetUnit_value["BUDGET_UNIT_"+strings.ToUpper(g.Budget.Unit)])
		if unit == pb.BudgetUnit_BUDGET_UNIT_UNSPECIFIED {
			t.Fatalf("budget unit %q", g.Budget.Unit)
		}
		v.Budget = &pb.Budget{Unit: unit, TotalMilli: g.Budget.TotalMilli}
	}
	for _, gt := range g.Turns {
		role, ok := pb.Role_value["ROLE_"+strings.ToUpper(gt.Role)]
		kind, ok2 := pb.TurnKind_value["TURN_KIND_"+strings.ToUpper(gt.Kind)]
		if !ok || !ok2 {
			t.Fatalf("turn %+v: unknown role or kind", gt)
		}
		v.Turns = append(v.Turns, &pb.Turn{Role: pb.Role(role), Kind: pb.TurnKind(kind), Text: gt.Text})
	}
	return v
}

// Text that JSON encoders write differently: quotes, a backslash, control
// characters, HTML characters, U+2028, non-ASCII.
const awkward = "the \"best\" <region> & C:\\x\tok\nnext\u2028line café ✓\x01"

var knowledgeShop = []goldenKnowledge{{ID: "k1", Name: "big sale", Definition: "A sale of 100 dollars or more."}}

func goldenCases() map[string]goldenFile {
	shop := goldenDatabase{ID: "shop", Dialect: "sqlite", Schema: "CREATE TABLE sales (id INTEGER, region TEXT, amount REAL);",
		ColumnMeanings: map[string]string{"sales.region": "the sales region", "sales.amount": "in dollars"}, Knowledge: knowledgeShop}
	return map[string]goldenFile{
		"ambitab": {Protocol: "ambitab",
			Task:   goldenTask{Corpus: "demo", TaskID: "shop-001", Request: "List the top regions by " + awkward, Evidence: "Top means by total amount.", Database: shop},
			Budget: &goldenBudget{Unit: "questions", TotalMilli: 3000},
			Turns: []goldenTurn{
				{"environment", "request", "List the top regions by " + awkward},
				{"policy", "question", "How many regions, " + awkward + "?"},
				{"oracle", "reply", "Three."},
				{"policy", "unparsed", "I think {\"type\": maybe"},
				{"environment", "notice", "Your output was not a valid action."},
				{"policy", "question", "Which year?"},
				{"oracle", "refusal", "I cannot answer that."},
				{"policy", "question", "By revenue or count?"},
			}},
		"bird-c": {Protocol: "bird-c",
			Task:   goldenTask{Corpus: "bird", TaskID: "b-1", Request: "Show the big sales.", Database: goldenDatabase{ID: "shop", Dialect: "postgres", Schema: shop.Schema, ColumnMeanings: shop.ColumnMeanings, Knowledge: knowledgeShop}},
			Budget: &goldenBudget{Unit: "turns", TotalMilli: 4000},
			Turns: []goldenTurn{
				{"environment", "request", "Show the big sales."},
				{"policy", "question", "Does \"big\" follow the knowledge entry?"},
				{"oracle", "reply", "Yes."},
				{"policy", "sql", "SELECT * FROM sales WHERE amount >= 100 AND note <> 'x\\y'"},
				{"environment", "feedback", "Your SQL is not correct. You may submit once more."},
				{"policy", "sql", "SELECT id FROM sales WHERE amount >= 100"},
				{"environment", "request", "Now count them per region."},
				{"policy", "stop", ""},
			}},
		"bird-a": {Protocol: "bird-a",
			Task:   goldenTask{Corpus: "bird", TaskID: "b-2", Request: "Which customers churned?", Evidence: "Churned: no order in a year.", Database: goldenDatabase{ID: "crm", Dialect: "postgres"}},
			Budget: &goldenBudget{Unit: "coins", TotalMilli: 12500},
			Turns: []goldenTurn{
				{"environment", "request", "Which customers churned?"},
				{"policy", "tool_call", "get_schema()"},
				{"environment", "tool_result", "CREATE TABLE customers (id INTEGER, last_order DATE);"},
				{"policy", "tool_call", "execute(\"SELECT count(*) FROM customers\")"},
				{"environment", "tool_result", "count\n42"},
				{"policy", "unparsed", "hmm"},
				{"policy", "question", "Over which year?"},
				{"oracle", "reply", "2024."},
				{"policy", "sql", "SELECT id FROM customers WHERE last_order < '2024-01-01'"},
				{"environment", "notice", "The coins cannot pay for anything else: only a final submit is accepted now."},
			}},
		"tide-f": {Protocol: "tide-f",
			Task:   goldenTask{Corpus: "tide", TaskID: "t-9f3a", Request: "How did the top product do?", Database: goldenDatabase{ID: "store", Schema: "CREATE TABLE products (id INTEGER, name TEXT);\nCREATE TABLE orders (product_id INTEGER, qty INTEGER);"}},
			Budget: &goldenBudget{Unit: "turns", TotalMilli: 20000},
			Turns: []goldenTurn{
				{"environment", "request", "How did the top product do?"},
				{"policy", "question", "Top by quantity or revenue?"},
				{"oracle", "reply", "By quantity."},
				{"policy", "sql", "SELECT name FROM products JOIN orders ON id = product_id GROUP BY id ORDER BY sum(qty) DESC LIMIT 1"},
				{"oracle", "drift", "Actually, give me the top three instead."},
			}},
		"tide-p": {Protocol: "tide-p",
			Task: goldenTask{Corpus: "tide", TaskID: "t-77c1", Request: "Show the best month.", Evidence: "Best: highest revenue.", Database: goldenDatabase{ID: "store", Dialect: "sqlite", Schema: "CREATE TABLE orders (month TEXT, revenue REAL);"}},
			Turns: []goldenTurn{
				{"environment", "request", "Show the best month."},
				{"prefilled", "question", "Which year do you mean?"},
				{"oracle", "reply", "2023."},
				{"policy", "unparsed", "```sql\nSELECT"},
				{"environment", "notice", "Respond with one JSON object."},
				{"policy", "question", "Ties?"},
			}},
	}
}

// TestChatPromptGolden checks the shared prompt of every protocol against
// its golden file, the one the Python adapters' test compares with too.
func TestChatPromptGolden(t *testing.T) {
	for name, g := range goldenCases() {
		t.Run(name, func(t *testing.T) {
			g.Version = ChatPromptVersion
			g.Messages = ChatMessages(g.view(t))
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			enc.SetIndent("", "  ")
			if err := enc.Encode(g); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(chatGoldenDir, name+".json")
			if *updateGolden {
				if err := os.MkdirAll(chatGoldenDir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./policy/ -run TestChatPromptGolden -update)", err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("%s differs from what ChatMessages renders now (if intended: bump ChatPromptVersion, -update, and check the Python test):\n%s", path, buf.String())
			}
		})
	}
}

// TestChatPromptIsAppendOnly: the prompt after any prefix of the dialogue
// is a prefix of the prompt after the whole of it (once its trailing
// no-reply message is set aside), so that a trainer that appends each new
// turn to its tokens trains on the prompt the evaluated policy is shown.
func TestChatPromptIsAppendOnly(t *testing.T) {
	for name, g := range goldenCases() {
		v := g.view(t)
		full := ChatMessages(v)
		for n := 1; n <= len(v.Turns); n++ {
			pv := v
			pv.Turns = v.Turns[:n]
			part := ChatMessages(pv)
			if last := part[len(part)-1]; last.Role == "user" && (last.Content == ChatNoReply || last.Content == ChatTideNudge) {
				part = part[:len(part)-1]
			}
			if len(part) > len(full) || !slices.Equal(part[:len(part)-1], full[:len(part)-1]) ||
				!strings.HasPrefix(full[len(part)-1].Content, part[len(part)-1].Content) {
				t.Errorf("%s: the prompt after %d turns is not a prefix of the whole one:\n%v\n%v", name, n, part, full)
			}
		}
	}
}

// TestChatPromptShape pins the rules the golden files encode, so that a
// regenerated file cannot silently drop one.
func TestChatPromptShape(t *testing.T) {
	cases := goldenCases()
	amb := ChatMessages(cases["ambitab"].view(t))
	if amb[0].Role != "system" || amb[1].Role != "user" || !strings.Contains(amb[1].Content, "Schema:\nCREATE TABLE sales") ||
		!strings.Contains(amb[1].Content, "- sales.amount: in dollars\n- sales.region:") || !strings.Contains(amb[1].Content, "Question budget: 3.") ||
		!strings.HasSuffix(amb[1].Content, "Request: List the top regions by "+strings.TrimSpace(awkward)) {
		t.Errorf("AMBITAB's task message:\n%s", amb[1].Content)
	}
	if got := amb[2].Content; got != `{"type": "clarification", "question": "How many regions, the \"best\" <region> & C:\\x\tok\nnext`+"\u2028"+`line café ✓\u0001?"}` {
		t.Errorf("AMBITAB's question as JSON: %s", got)
	}
	if amb[len(amb)-1].Role != "user" || amb[len(amb)-1].Content != ChatNoReply {
		t.Errorf("an unanswered last question is followed by %q: %v", ChatNoReply, amb[len(amb)-1])
	}
	for _, m := range amb {
		if strings.Contains(m.Content, "## Ledger") {
			t.Errorf("the shared prompt restates the dialogue: %q", m.Content)
		}
	}
	ba := ChatMessages(cases["bird-a"].view(t))
	if strings.Contains(ba[1].Content, "Schema:") || !strings.Contains(ba[1].Content, "Coin budget: 12.5.") || ba[0].Content != agentSystemA {
		t.Errorf("BIRD_A's first messages: %v", ba[:2])
	}
	// Two agent turns in a row (unparsed output nothing answered, then a
	// question): a no-reply message between them.
	if i := slices.IndexFunc(ba, func(m llm.Message) bool { return m.Content == "hmm" }); i < 0 || ba[i+1] != (llm.Message{Role: "user", Content: ChatNoReply}) {
		t.Errorf("BIRD_A: no %q after the unanswered output: %v", ChatNoReply, ba)
	}
	bc := ChatMessages(cases["bird-c"].view(t))
	if !slices.ContainsFunc(bc, func(m llm.Message) bool {
		return m.Role == "user" && strings.HasSuffix(m.Content, "New request: Now count them per region.")
	}) {
		t.Errorf("BIRD_C's follow-up request is not shown as a new request: %v", bc)
	}
	tf := ChatMessages(cases["tide-f"].view(t))
	if tf[1] != (llm.Message{Role: "user", Content: "How did the top product do?"}) || !strings.Contains(tf[0].Content, "CREATE TABLE orders") ||
		!strings.Contains(tf[0].Content, "SQLite-compatible") || tf[len(tf)-1].Content != "Actually, give me the top three instead." {
		t.Errorf("TIDE_F: %v", tf)
	}
	tp := ChatMessages(cases["tide-p"].view(t))
	if tp[2] != (llm.Message{Role: "assistant", Content: `{"type": "ask", "content": "Which year do you mean?"}`}) || tp[len(tp)-1].Content != ChatTideNudge {
		t.Errorf("TIDE_P: the pre-filled question is the agent's turn, and the last question waits: %v", tp)
	}
}

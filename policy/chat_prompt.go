package policy

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"avtgym/driver"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// ChatPromptVersion names the shared chat prompt below (ChatMessages); it
// is part of the cache keys of the policies that use it. Change it
// whenever the wording or the layout changes, and regenerate the golden
// files (go test ./policy/ -run TestChatPromptGolden -update), which the
// Python client's tests read too.
const ChatPromptVersion = "chat-v1"

// ChatView is what the shared chat prompt is rendered from: an episode's
// public observation. It holds nothing from the privileged channel.
type ChatView struct {
	Protocol pb.Protocol
	Task     *pb.TaskView
	// Turns are every public turn so far, the request first.
	Turns []*pb.Turn
	// Budget is the episode's interaction budget (only its unit and
	// total are read: the prompt never changes as it is spent, so that a
	// trainer can append each new turn to the tokens it already has).
	Budget *pb.Budget
}

// ChatViewOf is the ChatView of a driven episode.
func ChatViewOf(ep *driver.Episode) ChatView {
	return ChatView{Protocol: ep.Protocol(), Task: ep.Task(), Turns: ep.Turns(), Budget: ep.Allowance()}
}

// ChatNoReply is the user message that follows an agent turn nothing
// answered (under TIDE, ChatTideNudge): chat templates want the roles to
// alternate, and the model must be asked for its next turn.
const ChatNoReply = "(no reply)"

// ChatTideNudge is TIDE's ChatNoReply: the output-protocol reminder the
// TIDE agent has always sent there.
const ChatTideNudge = "Respond with a single JSON object and nothing else."

// ChatMessages is the one prompt of every protocol: what the Go LLM
// policies (the asker under AMBITAB, the agent under BIRD_C and BIRD_A,
// the TIDE agent) send for their next decision, and what every Python
// trainer adapter renders (avtgym.chat.prompt_messages, checked against
// the same golden files, policy/testdata/chat_prompt/*.json). It is
// append-only: the messages of an episode's prompt at one turn are a
// prefix of its prompt at any later turn (up to a trailing ChatNoReply),
// so that a trainer's tokens and the evaluated prompt agree.
//
// Layout: the protocol's system message (ChatSystemPrompt; TIDE's holds
// the schema and the evidence, as TIDE-Bench's Figure 8 prompt does);
// under AMBITAB, BIRD_C and BIRD_A a user message with what the public
// observation carries (the database and dialect, then the schema, column
// meanings, public knowledge and evidence when the view holds them — a
// BIRD_A view holds no schema: its tools give it — the budget and the
// request); under TIDE the request alone. Then the dialogue: the agent's
// turns (the policy's, TIDE_P's pre-filled question) as assistant messages
// in the protocol's action format (ChatAction), every other turn with
// text as a user message, consecutive ones joined by a blank line, and a
// follow-up request prefixed "New request: ". An agent turn that nothing
// answered is followed by ChatNoReply (ChatTideNudge under TIDE).
func ChatMessages(v ChatView) []llm.Message {
	msgs := []llm.Message{{Role: "system", Content: ChatSystemPrompt(v.Protocol, v.Task)}}
	tide := isTide(v.Protocol)
	var user []string
	flush := func() {
		if len(user) > 0 {
			msgs = append(msgs, llm.Message{Role: "user", Content: strings.Join(user, "\n\n")})
			user = nil
		}
	}
	noReply := ChatNoReply
	if tide {
		noReply = ChatTideNudge
	}
	if !tide {
		user = append(user, chatTask(v))
	}
	firstRequest := true
	for _, t := range v.Turns {
		if firstRequest && t.GetKind() == pb.TurnKind_TURN_KIND_REQUEST {
			// The episode's request: in the task message, or (TIDE) the
			// first user message as it is.
			firstRequest = false
			if tide {
				user = append(user, t.GetText())
			}
			continue
		}
		if r := t.GetRole(); r == pb.Role_ROLE_POLICY || r == pb.Role_ROLE_PREFILLED {
			flush()
			if msgs[len(msgs)-1].Role == "assistant" {
				msgs = append(msgs, llm.Message{Role: "user", Content: noReply})
			}
			msgs = append(msgs, llm.Message{Role: "assistant", Content: ChatAction(v.Protocol, t)})
			continue
		}
		if text := chatUserText(t); text != "" {
			user = append(user, text)
		}
	}
	flush()
	if msgs[len(msgs)-1].Role == "assistant" {
		msgs = append(msgs, llm.Message{Role: "user", Content: noReply})
	}
	return msgs
}

func isTide(p pb.Protocol) bool {
	return p == pb.Protocol_PROTOCOL_TIDE_F || p == pb.Protocol_PROTOCOL_TIDE_P
}

// chatUserText is a non-agent turn after the request as the prompt shows
// it; a request turn there is a follow-up's (BIRD_C, BIRD_A).
func chatUserText(t *pb.Turn) string {
	text := t.GetText()
	if strings.TrimSpace(text) == "" {
		return ""
	}
	if t.GetKind() == pb.TurnKind_TURN_KIND_REQUEST {
		return "New request: " + text
	}
	return text
}

// chatTask is the first user message under AMBITAB, BIRD_C and BIRD_A.
func chatTask(v ChatView) string {
	db := v.Task.GetDatabase()
	dialect := db.GetDialect()
	if dialect == "" {
		dialect = "sqlite"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Database: %s (%s)\n", db.GetId(), dialect)
	if s := strings.TrimSpace(db.GetSchema()); s != "" {
		b.WriteString("\nSchema:\n" + s + "\n")
	}
	if cm := db.GetColumnMeanings(); len(cm) > 0 {
		keys := make([]string, 0, len(cm))
		for k := range cm {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		b.WriteString("\nColumn meanings:\n")
		for _, k := range keys {
			fmt.Fprintf(&b, "- %s: %s\n", k, cm[k])
		}
	}
	if kn := db.GetKnowledge(); len(kn) > 0 {
		b.WriteString("\nExternal knowledge:\n")
		for _, k := range kn {
			fmt.Fprintf(&b, "- %s: %s\n", k.GetName(), k.GetDefinition())
		}
	}
	if e := strings.TrimSpace(v.Task.GetEvidence()); e != "" {
		b.WriteString("\nEvidence: " + e + "\n")
	}
	if line := chatBudget(v.Budget); line != "" {
		b.WriteString("\n" + line + "\n")
	}
	b.WriteString("\nRequest: " + strings.TrimSpace(v.Task.GetRequest()))
	return b.String()
}

// chatBudget states the budget's total in its unit ("" without one).
func chatBudget(b *pb.Budget) string {
	if b == nil {
		return ""
	}
	n := chatMilli(b.GetTotalMilli())
	switch b.GetUnit() {
	case pb.BudgetUnit_BUDGET_UNIT_QUESTIONS:
		return "Question budget: " + n + "."
	case pb.BudgetUnit_BUDGET_UNIT_TURNS:
		return "Turn budget: " + n + "."
	case pb.BudgetUnit_BUDGET_UNIT_COINS:
		return "Coin budget: " + n + "."
	}
	return ""
}

// chatMilli writes thousandths as a decimal without trailing zeros
// (12500 → "12.5"), the same in Go and Python.
func chatMilli(m int64) string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	s := sign + strconv.FormatInt(m/1000, 10)
	if f := m % 1000; f != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%03d", f), "0")
	}
	return s
}

// ChatAction writes an agent turn in the protocol's action format: under
// AMBITAB AmbiTab's JSON ({"type": "clarification", "question": …},
// {"type": "done"}, {"type": "sql", "sql": …}); under BIRD_C and BIRD_A
// BIRD-Interact's agentic grammar (<action>ask("…")</action>, submit,
// stop() and tool calls as the server wrote them); under TIDE TIDE-Bench's
// output protocol ({"type": "ask", "content": …}, {"type": "sql",
// "content": …}; a stop as {"type": "done"}). Output the model wrote that
// was reported unparsed is shown as it was. JSON strings are written as
// Python's json.dumps(ensure_ascii=False) writes them, so that the Python
// adapters render the same bytes.
func ChatAction(p pb.Protocol, t *pb.Turn) string {
	text := t.GetText()
	kind := t.GetKind()
	switch {
	case p == pb.Protocol_PROTOCOL_BIRD_C || p == pb.Protocol_PROTOCOL_BIRD_A:
		switch kind {
		case pb.TurnKind_TURN_KIND_QUESTION:
			return "<action>ask(" + pyJSONString(text) + ")</action>"
		case pb.TurnKind_TURN_KIND_SQL:
			return "<action>submit(" + pyJSONString(text) + ")</action>"
		case pb.TurnKind_TURN_KIND_STOP:
			return "<action>stop()</action>"
		case pb.TurnKind_TURN_KIND_TOOL_CALL:
			return "<action>" + text + "</action>"
		}
	case isTide(p):
		switch kind {
		case pb.TurnKind_TURN_KIND_QUESTION:
			return `{"type": "ask", "content": ` + pyJSONString(text) + `}`
		case pb.TurnKind_TURN_KIND_SQL:
			return `{"type": "sql", "content": ` + pyJSONString(text) + `}`
		case pb.TurnKind_TURN_KIND_STOP:
			return `{"type": "done"}`
		}
	default:
		switch kind {
		case pb.TurnKind_TURN_KIND_QUESTION:
			return `{"type": "clarification", "question": ` + pyJSONString(text) + `}`
		case pb.TurnKind_TURN_KIND_SQL:
			return `{"type": "sql", "sql": ` + pyJSONString(text) + `}`
		case pb.TurnKind_TURN_KIND_STOP:
			return `{"type": "done"}`
		}
	}
	return text
}

// pyJSONString is s as a JSON string the way Python's
// json.dumps(s, ensure_ascii=False) writes it: only ", \ and the control
// characters below U+0020 are escaped (Go's encoder would also escape
// U+2028, U+2029 and, by default, <, > and &).
func pyJSONString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(&b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ChatSystemPrompt is the protocol's system message: under AMBITAB the
// asker's (AmbiTab's clarification-or-done JSON actions, with the
// checklist method of the asker's styles), under BIRD_C and BIRD_A the LLM
// agent's (BIRD-Interact's agentic grammar, with each mode's actions and
// costs), under TIDE_F and TIDE_P TIDE-Bench's agent prompt (paper Figure
// 8) with the task's schema, evidence and dialect filled in.
func ChatSystemPrompt(p pb.Protocol, task *pb.TaskView) string {
	switch {
	case p == pb.Protocol_PROTOCOL_BIRD_C:
		return agentSystemC
	case p == pb.Protocol_PROTOCOL_BIRD_A:
		return agentSystemA
	case isTide(p):
		db := task.GetDatabase()
		return strings.NewReplacer("{schema_ddl}", strings.TrimSpace(db.GetSchema()),
			"{evidence}", strings.TrimSpace(task.GetEvidence()),
			"{dialect}", tideDialect(db.GetDialect())).Replace(tideAgentSystem)
	}
	return chatAmbiTabSystem
}

// chatAmbiTabSystem is the AMBITAB system message of the shared prompt.
const chatAmbiTabSystem = askerRole + "\n\n" + checklistMethod +
	"4. Stop when no open point remains that you have not asked about yet.\n\n" +
	"Answer with a single JSON object and nothing else:\n" +
	`- {"type": "clarification", "question": "<exactly one question>"} to ask the user one question;` + "\n" +
	`- {"type": "done"} to stop asking.` + "\n" +
	"Do not write SQL: a separate model writes the query from the conversation."

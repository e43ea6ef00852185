package policy

import (
	"fmt"
	"slices"
	"strings"

	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// AskerPromptVersion names the asker prompts below; it is part of every
// asker cache key, so that a changed prompt never reads an old reply.
// Change it whenever the wording changes.
const AskerPromptVersion = "asker-v2+" + ChatPromptVersion

// AskerStyle selects the asker prompt (after AmbiTab §C.6, our own wording).
type AskerStyle string

// The asker prompt styles.
const (
	// StyleDirect asks about unclear parts of the request, without a
	// checklist, and stops once the request is clear or no different
	// ambiguity remains.
	StyleDirect AskerStyle = "direct"
	// StyleChecklistChat has the model enumerate the unclear points
	// first; prior turns are chat messages, and it may stop when no
	// distinct unasked point remains.
	StyleChecklistChat AskerStyle = "checklist_chat"
	// StyleChecklistLedger restates, every turn, an explicit ledger of
	// answered and unanswered questions beside the checklist method, and
	// stops only when every point is resolved or unanswerable.
	StyleChecklistLedger AskerStyle = "checklist_ledger"
	// StyleChat (the default) is the shared chat prompt (ChatMessages):
	// the one every Python trainer adapter renders, so that a policy is
	// evaluated on the prompt it was trained on. It is the checklist
	// method as chat messages, with the budget stated once (append-only:
	// nothing is restated as the dialogue grows).
	StyleChat AskerStyle = "chat"
)

// AskerStyles lists the prompt styles.
var AskerStyles = []AskerStyle{StyleChat, StyleDirect, StyleChecklistChat, StyleChecklistLedger}

// DefaultAskerStyle is the style "" stands for.
const DefaultAskerStyle = StyleChat

// ParseAskerStyle checks a style name; "" means the default.
func ParseAskerStyle(s string) (AskerStyle, error) {
	if s == "" {
		return DefaultAskerStyle, nil
	}
	if slices.Contains(AskerStyles, AskerStyle(s)) {
		return AskerStyle(s), nil
	}
	return "", fmt.Errorf("unknown asker style %q (want chat, direct, checklist_chat or checklist_ledger)", s)
}

// promptState is everything a prompt may show: the public task, the
// public dialogue and the budget counters of the observation. It holds
// nothing from the privileged channel by construction.
type promptState struct {
	task      *pb.TaskView
	turns     []*pb.Turn // every public turn so far, the request first
	budget    int
	asked     int
	remaining int
	solving   bool // asking has ended: only SQL may follow
	offerSQL  bool // the episode needs client SQL: "sql" is a valid output
	// allowance is the episode's budget as the observation reports it
	// (the chat style states its total; nil: not stated).
	allowance *pb.Budget
}

// exchange is a question with what followed it.
type exchange struct {
	question string
	reply    string
	closed   bool // a reply, refusal or notice followed the question
	answered bool // false: refused (a REFUSAL turn) or not answered (budget notice)
}

// exchanges pairs the questions of the dialogue with their replies. A
// question is answered when a REPLY turn follows it; a REFUSAL turn (the
// oracle, or the environment in its place, declined) or a notice leaves it
// unanswered. The turn kind decides, never the text.
func (s *promptState) exchanges() []exchange {
	var out []exchange
	for _, t := range s.turns {
		n := len(out)
		switch t.GetKind() {
		case pb.TurnKind_TURN_KIND_QUESTION:
			out = append(out, exchange{question: t.GetText()})
		case pb.TurnKind_TURN_KIND_REPLY, pb.TurnKind_TURN_KIND_REFUSAL:
			if n > 0 && !out[n-1].closed {
				out[n-1].reply, out[n-1].closed = t.GetText(), true
				out[n-1].answered = t.GetKind() == pb.TurnKind_TURN_KIND_REPLY
			}
		case pb.TurnKind_TURN_KIND_NOTICE:
			if n > 0 && !out[n-1].closed {
				out[n-1].reply, out[n-1].closed = "(not answered) "+t.GetText(), true
			}
		}
	}
	return out
}

// said returns the oracle's replies and the notices of the dialogue,
// folded by foldSpace, one a line: text the asker's model was shown but
// did not write (parseDecisionSaid ignores JSON copied from it).
func (s *promptState) said() string {
	var b strings.Builder
	for _, x := range s.exchanges() {
		if x.closed {
			b.WriteString(foldSpace(x.reply))
			b.WriteString("\n")
		}
	}
	return b.String()
}

// taskBlock renders the public task specification.
func taskBlock(v *pb.TaskView) string {
	var b strings.Builder
	db := v.GetDatabase()
	dialect := db.GetDialect()
	if dialect == "" {
		dialect = "sqlite"
	}
	fmt.Fprintf(&b, "## Database\n%q (%s)\n\n", db.GetId(), dialect)
	fmt.Fprintf(&b, "## Schema\n%s\n\n", strings.TrimSpace(db.GetSchema()))
	if cm := db.GetColumnMeanings(); len(cm) > 0 {
		b.WriteString("## Column meanings\n")
		keys := make([]string, 0, len(cm))
		for k := range cm {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "- %s: %s\n", k, cm[k])
		}
		b.WriteString("\n")
	}
	if kn := db.GetKnowledge(); len(kn) > 0 {
		b.WriteString("## External knowledge\n")
		for _, k := range kn {
			fmt.Fprintf(&b, "- [%s] %s: %s\n", k.GetId(), k.GetName(), k.GetDefinition())
		}
		b.WriteString("\n")
	}
	if ev := strings.TrimSpace(v.GetEvidence()); ev != "" {
		fmt.Fprintf(&b, "## Evidence\n%s\n\n", ev)
	}
	fmt.Fprintf(&b, "## Request\n%s\n", strings.TrimSpace(v.GetRequest()))
	return b.String()
}

// budgetLine states the remaining questions; every style shows it.
func (s *promptState) budgetLine() string {
	line := fmt.Sprintf("Questions left: %d of %d.", s.remaining, s.budget)
	if s.remaining <= 0 {
		line += " You cannot ask any more questions."
	}
	return line
}

// formatBlock describes the JSON output.
func (s *promptState) formatBlock() string {
	var b strings.Builder
	b.WriteString("## Output\nAnswer with a single JSON object and nothing else:\n")
	if s.solving {
		b.WriteString(`- {"type": "sql", "sql": "<one SQL query answering the request>"}` + "\n")
		return b.String()
	}
	if s.remaining > 0 {
		b.WriteString(`- {"type": "clarification", "question": "<exactly one question>"} to ask the user one question;` + "\n")
	}
	b.WriteString(`- {"type": "done"} to stop asking;` + "\n")
	if s.offerSQL {
		b.WriteString(`- {"type": "sql", "sql": "<one SQL query>"} to stop asking and hand in the final SQL yourself.` + "\n")
	} else {
		b.WriteString("Do not write SQL: a separate model writes the query from the conversation.\n")
	}
	return b.String()
}

// solvingPrompt is shared by every style once asking has ended and the
// episode waits for the client's SQL.
func (s *promptState) solvingPrompt() []llm.Message {
	var b strings.Builder
	b.WriteString("Asking has ended. Using the task and the conversation below, write the SQL query that answers the user's request.\n\n")
	b.WriteString(taskBlock(s.task))
	b.WriteString("\n## Conversation\n")
	b.WriteString(transcript(s.exchanges()))
	b.WriteString("\n")
	b.WriteString(s.formatBlock())
	return []llm.Message{
		{Role: "system", Content: "You write correct SQL for the given database."},
		{Role: "user", Content: b.String()},
	}
}

func transcript(xs []exchange) string {
	if len(xs) == 0 {
		return "(no questions asked yet)\n"
	}
	var b strings.Builder
	for i, x := range xs {
		fmt.Fprintf(&b, "Q%d: %s\nA%d: %s\n", i+1, x.question, i+1, x.reply)
	}
	return b.String()
}

const askerRole = "You are a careful data analyst. A user has asked for a SQL query over the database below, " +
	"but the request may leave things open. Before a separate model writes the SQL, you may ask the user " +
	"clarifying questions, one per turn, within a fixed question budget."

// buildMessages renders the prompt of the current decision.
func buildMessages(style AskerStyle, s *promptState) []llm.Message {
	if s.solving {
		return s.solvingPrompt()
	}
	switch style {
	case StyleChat:
		return ChatMessages(ChatView{Protocol: pb.Protocol_PROTOCOL_AMBITAB, Task: s.task, Turns: s.turns, Budget: s.allowance})
	case StyleDirect:
		return directPrompt(s)
	case StyleChecklistChat:
		return checklistChatPrompt(s)
	default:
		return checklistLedgerPrompt(s)
	}
}

func directPrompt(s *promptState) []llm.Message {
	var b strings.Builder
	b.WriteString(taskBlock(s.task))
	b.WriteString("\n## Conversation so far\n")
	b.WriteString(transcript(s.exchanges()))
	b.WriteString("\n## Your decision\n")
	b.WriteString("If some part of the request is still unclear, ask the user one question about it. " +
		"Stop when the request is clear enough to write the SQL, or when every remaining doubt has already been asked about.\n")
	b.WriteString(s.budgetLine() + "\n\n")
	b.WriteString(s.formatBlock())
	return []llm.Message{
		{Role: "system", Content: askerRole},
		{Role: "user", Content: b.String()},
	}
}

const checklistMethod = `Work through this method before each decision:
1. List every phrase of the request that is open: a domain term that is not defined, a reference that could mean more than one column, table or value, or a rule (threshold, period, ranking, rounding, missing values, ordering) that is not fixed. Requests usually hide several such points; missing one costs more than asking about it.
2. Mark the points the conversation has already settled, and the ones the user said they cannot answer. Never ask about those again, and never rephrase an earlier question.
3. Ask exactly one question about one point that is still open.
`

func checklistChatPrompt(s *promptState) []llm.Message {
	var sys strings.Builder
	sys.WriteString(askerRole + "\n\n")
	sys.WriteString(checklistMethod)
	sys.WriteString("4. Stop when no open point remains that you have not asked about yet.\n\n")
	sys.WriteString(taskBlock(s.task))
	sys.WriteString("\n")
	sys.WriteString(s.formatBlock())
	msgs := []llm.Message{
		{Role: "system", Content: sys.String()},
		{Role: "user", Content: "My request: " + strings.TrimSpace(s.task.GetRequest())},
	}
	for _, x := range s.exchanges() {
		q, _ := jsonString(x.question)
		msgs = append(msgs,
			llm.Message{Role: "assistant", Content: `{"type": "clarification", "question": ` + q + `}`},
			llm.Message{Role: "user", Content: x.reply})
	}
	last := &msgs[len(msgs)-1]
	last.Content += "\n\n[" + s.budgetLine() + " Reply with one JSON object.]"
	return msgs
}

func checklistLedgerPrompt(s *promptState) []llm.Message {
	var b strings.Builder
	b.WriteString("## Task\n")
	b.WriteString(askerRole + " Your goal is to bring every open point of the request to light and have the user settle it, not just the first one.\n\n")
	b.WriteString(checklistMethod)
	b.WriteString("4. Answer done only when every point on your list is settled or could not be answered, or no questions are left. " +
		"Do not stop merely because you have asked a question or two: an unsettled point left behind is worse than one more question.\n\n")
	b.WriteString(taskBlock(s.task))
	xs := s.exchanges()
	b.WriteString("\n## Ledger: answered (settled; do not ask again)\n")
	n := 0
	for _, x := range xs {
		if x.answered {
			fmt.Fprintf(&b, "- You asked: %s\n  The user answered: %s\n", x.question, x.reply)
			n++
		}
	}
	if n == 0 {
		b.WriteString("- (none)\n")
	}
	b.WriteString("\n## Ledger: asked but not answered (do not ask again)\n")
	n = 0
	for _, x := range xs {
		if !x.answered {
			fmt.Fprintf(&b, "- You asked: %s\n  The user answered: %s\n", x.question, x.reply)
			n++
		}
	}
	if n == 0 {
		b.WriteString("- (none)\n")
	}
	fmt.Fprintf(&b, "\n## Turn %d\n%s\n", s.asked+1, s.budgetLine())
	b.WriteString("Ask about a point of your list that is in neither ledger, or answer done if none remains.\n\n")
	b.WriteString(s.formatBlock())
	return []llm.Message{{Role: "user", Content: b.String()}}
}

package policy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"avtgym/driver"
	"avtgym/llm"
	pb "avtgym/proto/avtgym/v1"
)

// TideAgentPromptVersion names the TIDE agent's prompt below; it is part
// of every cache key (and of the llm client's Version in the CLI), so that
// a changed prompt never reads an old reply. Change it whenever the
// wording or the rendering of the dialogue changes.
const TideAgentPromptVersion = "tide-agent-v2+" + ChatPromptVersion

// TideAgentName is the TIDE LLM agent's name in summaries and run files.
const TideAgentName = "tide-llm-agent"

// TideAgent is TIDE-Bench's LLM agent (paper App. D, Figure 8): a model
// behind an OpenAI-compatible endpoint that answers each turn with one
// JSON object, {"type": "ask", "content": <question>} or {"type": "sql",
// "content": <SQL>}. Its system prompt is TIDE's agent prompt with the
// database's schema (DDL) and the evidence; the dialogue follows as chat
// messages rendered from the public turns: the request, the replies and
// the drift turn as the user's, the questions and SQL as the agent's own
// (TIDE_P's pre-filled question included, as TIDE pre-fills it). Query
// results are never shown, as TIDE never shows them. A reply that holds
// no usable object (or several different ones, or one cut off at the
// completion limit) goes to the server as unparsed output, so that TIDE's
// rule applies: a notice and a spent turn the first time, abstention the
// second time in a row. An endpoint failure is an *AskerError.
//
// Its prompts are built from the public observation alone: the task view
// (schema, evidence) and the turns.
type TideAgent struct {
	client *llm.Client
}

// NewTideAgent returns a TIDE agent that calls c.
func NewTideAgent(c *llm.Client) (*TideAgent, error) {
	if c == nil {
		return nil, errors.New("policy: the TIDE agent needs an llm client")
	}
	return &TideAgent{client: c}, nil
}

// Name implements Player.
func (a *TideAgent) Name() string { return TideAgentName }

// Preflight implements Preflighter, as the other LLM policies do.
func (a *TideAgent) Preflight(ctx context.Context) error {
	return preflight(ctx, a.client)
}

// Play implements Player.
func (a *TideAgent) Play(ctx context.Context, ep *driver.Episode) error {
	p := ep.Protocol()
	if !driver.IsTide(p) {
		return &AskerError{Err: fmt.Errorf("%w (protocol %s)", errNotTide, driver.ProtocolName(p))}
	}
	key := fmt.Sprintf("%s|%s|%s/%s|seed=%d", TideAgentPromptVersion, driver.ProtocolName(p), ep.Task().GetCorpus(), ep.Task().GetTaskId(), ep.Reset().GetSeed())
	// A bound on the decisions, against a server that would never end the
	// episode: every turn, with room to spare.
	limit := 16 + 2*max(ep.TurnsLeft(), 20)
	for step := 0; !ep.Done(); step++ {
		if step >= limit {
			return fmt.Errorf("the episode did not end after %d decisions", step)
		}
		resp, err := a.client.Chat(ctx, llm.Request{Messages: TideAgentMessages(ep), JSON: true, Purpose: "tide-agent", CacheKey: key + "|step=" + strconv.Itoa(step)})
		if err != nil {
			return &AskerError{Err: err}
		}
		act, perr := ParseTideAction(resp.Content)
		if perr != nil || resp.CutOff() {
			err = ep.Unparsed(ctx, resp.Content)
		} else {
			err = ep.Do(ctx, act)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// tideMessage is one agent turn of TIDE's output protocol.
type tideMessage struct {
	Type    string `json:"type"`
	Content string `json:"content"`
}

// ParseTideAction parses a model's reply in TIDE's output protocol: one
// JSON object {"type": "ask"|"sql", "content": "…"}, possibly in a ```json
// fence or with prose around it (llm.JSONObjects finds the objects). Of
// the objects with a "type", there must be exactly one decision (a
// repeat counts once), with non-empty string content; an SQL content in
// its own ``` fence is unwrapped. Anything else is an error: the reply is
// unparsable.
func ParseTideAction(content string) (*pb.Action, error) {
	objs := llm.JSONObjects(content)
	if len(objs) == 0 {
		var v struct{}
		if err := llm.ParseJSON(content, &v); err != nil {
			return nil, err
		}
		return nil, errors.New("the reply holds no JSON object")
	}
	var found []tideMessage
	for _, obj := range objs {
		var raw struct {
			Type    *string `json:"type"`
			Content any     `json:"content"`
		}
		if err := json.Unmarshal([]byte(obj), &raw); err != nil {
			return nil, fmt.Errorf("the JSON object does not decode: %v", err)
		}
		if raw.Type == nil {
			continue
		}
		m := tideMessage{Type: strings.ToLower(strings.TrimSpace(*raw.Type))}
		s, _ := raw.Content.(string)
		m.Content = strings.TrimSpace(s)
		switch m.Type {
		case "ask":
		case "sql":
			m.Content = unfence(m.Content)
		default:
			return nil, fmt.Errorf(`"type" is %q; it must be "ask" or "sql"`, m.Type)
		}
		if m.Content == "" {
			return nil, fmt.Errorf(`"type": %q needs a non-empty string "content"`, m.Type)
		}
		if len(found) == 0 || found[0] != m {
			found = append(found, m)
		}
	}
	switch len(found) {
	case 0:
		return nil, errors.New(`the reply holds no JSON object with a "type"`)
	case 1:
	default:
		return nil, errors.New("the reply holds several different decisions")
	}
	if found[0].Type == "ask" {
		return &pb.Action{Kind: &pb.Action_Ask_{Ask: &pb.Action_Ask{Text: found[0].Content}}}, nil
	}
	return &pb.Action{Kind: &pb.Action_SubmitSql_{SubmitSql: &pb.Action_SubmitSql{Sql: found[0].Content}}}, nil
}

// unfence unwraps text in one ``` fence (with an optional language tag).
func unfence(s string) string {
	if !strings.HasPrefix(s, "```") || !strings.HasSuffix(s, "```") || len(s) < 6 {
		return s
	}
	body := s[3 : len(s)-3]
	if nl := strings.IndexByte(body, '\n'); nl >= 0 && !strings.ContainsAny(strings.TrimSpace(body[:nl]), " \t") {
		body = body[nl+1:] // the language tag
	}
	return strings.TrimSpace(body)
}

// RenderTideAction writes an agent turn (a question or SQL, the policy's
// or pre-filled) as TIDE's output protocol writes it (ChatAction).
func RenderTideAction(t *pb.Turn) string {
	return ChatAction(pb.Protocol_PROTOCOL_TIDE_F, t)
}

// TideAgentMessages is the TIDE agent's prompt for the episode's next
// turn: the shared chat prompt (ChatMessages) under TIDE: the system
// message (TIDE's agent prompt with the schema and the evidence), then the
// dialogue: the user's turns (the request, the replies, the drift turn,
// and the environment's notices) as user messages, consecutive ones
// joined, and the agent's turns (questions and SQL, pre-filled ones
// included, as JSON objects; unparsable output verbatim) as assistant
// messages.
func TideAgentMessages(ep *driver.Episode) []llm.Message {
	return ChatMessages(ChatViewOf(ep))
}

// tideDialect names a dialect as TIDE's prompt does ("SQLite").
func tideDialect(d string) string {
	switch strings.ToLower(d) {
	case "", "sqlite":
		return "SQLite"
	case "postgres", "postgresql":
		return "PostgreSQL"
	}
	return d
}

// tideAgentSystem is TIDE-Bench's agent prompt (paper Figure 8), with
// {schema_ddl}, {evidence} and {dialect} filled in.
const tideAgentSystem = `You are a text-to-SQL agent. Your task is to understand a user's natural-language data question and produce a correct SQL query for the database described below.

Database schema:
{schema_ddl}

Evidence / domain context:
{evidence}

Evidence may be empty for some tasks; if so, rely on schema and dialogue alone.

When to ask vs. when to answer. Carefully read the user's request. If anything is ambiguous or under-specified, ask for clarification rather than making assumptions. When sufficient information is available, produce the SQL query.

Clarification rules.
R1. Ask at most one clarification question per turn. Focus each question on a single ambiguity.
R2. When asking, offer 2-3 discrete options where appropriate to make it easy for the user to choose.
R3. Do not ask about information already determinable from the schema or evidence above.
R4. Do not ask the user to confirm specific table names, column names, or stored values: these are database-internal facts the user does not know.

Handling intent change. If the user changes their request mid-dialogue (e.g., "actually, instead of X, give me Y"), respect the new request and produce the updated SQL based on the latest user intent. Do not revert to the original request.

SQL output rules.
S1. When producing SQL, the content must contain only the raw SQL query: no explanation, no markdown code fences, no markdown link syntax such as [col](url).
S2. Produce valid {dialect}-compatible SQL unless the schema implies another dialect.
S3. Use the exact column and table names as they appear in the schema, preserving backticks, quotes, and case as shown.

Output protocol. Respond with a single JSON object and nothing else:
{"type": "ask", "content": <clarification question>}
or
{"type": "sql", "content": <complete SQL query>}`

package policy

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"avtgym/driver"
	"avtgym/llm"
)

// AgentPromptVersion names the agent prompts below; it is part of every
// agent cache key, so that a changed prompt never reads an old reply.
// Change it whenever the wording changes.
const AgentPromptVersion = "agent-v3+" + ChatPromptVersion

// AgentName is the LLM agent's name in summaries and run files.
const AgentName = "llm-agent"

// ErrBirdOnly says that the LLM agent plays BIRD-Interact's protocols only.
var ErrBirdOnly = errors.New("the LLM agent plays the bird-c and bird-a protocols only (under ambitab use the LLM asker)")

// LLMAgent is the LLM agent of issue 16 for both BIRD-Interact modes: a
// model behind an OpenAI-compatible endpoint that takes one action per
// turn in BIRD-Interact's agentic grammar (ParseAgentAction). Under BIRD_C
// (c-Interact) it is shown the database's public context (schema, column
// meanings, knowledge) and may ask or submit, within the turn budget;
// under BIRD_A (a-Interact) it is shown the request alone and explores
// with the tools, paying coins. Every prompt shows what remains (turns or
// coins) once, in its first message (ChatMessages). A reply
// that holds no action it may take is reported to the server as unparsed
// output, so that the protocol's own rule applies (BIRD_C spends a turn;
// BIRD_A charges 0.2 coins); there is no client-side retry. An endpoint
// failure is an *AskerError.
//
// Its prompts are built from the public observation alone: the task view,
// the turns and the budget.
type LLMAgent struct {
	client *llm.Client
}

// NewLLMAgent returns an agent that calls c.
func NewLLMAgent(c *llm.Client) (*LLMAgent, error) {
	if c == nil {
		return nil, errors.New("policy: the LLM agent needs an llm client")
	}
	return &LLMAgent{client: c}, nil
}

// Name implements Player.
func (a *LLMAgent) Name() string { return AgentName }

// Preflight implements Preflighter, as the LLM asker's does.
func (a *LLMAgent) Preflight(ctx context.Context) error {
	return preflight(ctx, a.client)
}

// Play implements Player.
func (a *LLMAgent) Play(ctx context.Context, ep *driver.Episode) error {
	p := ep.Protocol()
	if !driver.IsBird(p) {
		return &AskerError{Err: fmt.Errorf("%w (protocol %s)", ErrBirdOnly, driver.ProtocolName(p))}
	}
	key := fmt.Sprintf("%s|%s|%s/%s|seed=%d", AgentPromptVersion, driver.ProtocolName(p), ep.Task().GetCorpus(), ep.Task().GetTaskId(), ep.Reset().GetSeed())
	// A bound on the decisions, against a server that would never end the
	// episode: every turn or every 0.2 coins, with room to spare.
	limit := 16 + 2*ep.TurnsLeft()
	if c := ep.CostMilli(driver.ActUnparsed); ep.Coins() && c > 0 {
		limit = 16 + int(ep.CoinsLeftMilli()/c)
	}
	for step := 0; !ep.Done(); step++ {
		if step >= limit {
			return fmt.Errorf("the episode did not end after %d decisions", step)
		}
		resp, err := a.client.Chat(ctx, llm.Request{Messages: AgentMessages(ep), Purpose: "agent", CacheKey: key + "|step=" + strconv.Itoa(step)})
		if err != nil {
			return &AskerError{Err: err}
		}
		act, perr := ParseAgentAction(resp.Content, p)
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

// AgentMessages is the agent's prompt for the episode's next action: the
// shared chat prompt (ChatMessages) of its mode, the one the Python
// trainer adapters render too. The budget's total is stated once, in the
// task message (what remains is not restated each turn: the prompt is
// append-only, as a trainer's tokens are); the server's notices say when
// only a submission is accepted.
func AgentMessages(ep *driver.Episode) []llm.Message {
	return ChatMessages(ChatViewOf(ep))
}

// The system prompts, written for avtgym in the spirit of BIRD-Interact's
// (one action per turn, the budget shown every turn).
const agentRules = "Each turn, think briefly if you wish inside <thought></thought>, then give exactly one action inside <action></action>, for example <action>ask(\"Which date range do you mean?\")</action>. " +
	"Write string arguments in double quotes and escape double quotes inside them as \\\". Only the last <action> block of a reply counts.\n"

const agentSystemC = "You are a data assistant. A user wants data from a SQL database; their request may be ambiguous, and only they know what they meant. " +
	"You talk with the user to clarify the request, then write the SQL.\n\n" + agentRules +
	"Actions:\n" +
	"- ask(\"question\"): ask the user one clarifying question (one turn).\n" +
	"- submit(\"SQL\"): submit your SQL for the current request (one turn).\n\n" +
	"You have a limited number of turns; the last one must be a submission (anything else there counts as SQL that did not run). If a submission fails you get one more chance, which must be a submission. " +
	"Once your SQL for the first request is accepted, the user sends a follow-up request: submit its SQL at once (you get one more chance if it fails). Ask only about what the schema and the knowledge cannot tell you."

const agentSystemA = "You are a data assistant. A user wants data from a SQL database; their request may be ambiguous, and only they know what they meant. " +
	"You explore the database with tools, ask the user about what you cannot find out yourself, and submit the SQL.\n\n" + agentRules +
	"Actions and their cost in coins:\n" +
	"- ask(\"question\"): ask the user one clarifying question (2).\n" +
	"- execute(\"SQL\"): run a read-only query and see its first rows (1).\n" +
	"- get_schema(): the database schema (1).\n" +
	"- get_all_column_meanings(): every column's meaning (1).\n" +
	"- get_column_meaning(\"table\", \"column\"): one column's meaning (0.5).\n" +
	"- get_all_external_knowledge_names(): the names of the documented domain knowledge (0.5).\n" +
	"- get_knowledge_definition(\"name\"): one knowledge entry's definition (0.5).\n" +
	"- get_all_knowledge_definitions(): every knowledge entry with its definition (1).\n" +
	"- submit(\"SQL\"): submit your SQL for the current request (3).\n\n" +
	"Coins are charged before each action; your reply costs 0.2 coins when it holds no valid action. A failed submission tells you so, and you may submit again while coins last. " +
	"An action the coins left cannot pay for still runs, and then only a final submission is accepted: it is free and ends the task; so is a submission the coins cannot pay for. A paid submission that leaves no coins ends the task. Some knowledge is not documented: only the user can tell you. " +
	"Once your SQL for the first request is accepted, the user sends a follow-up request: solve it the same way, with the coins left."

"""The shared chat prompt of every protocol, and an episode's history as chat messages with a
trainable-token mask.

prompt_messages is the one prompt: what the Go LLM policies (`avtgym eval --asker llm`, `rollout
--policy llm`) send and what every trainer adapter (TRL, verl, OpenEnv) renders, message for
message, so that a policy is trained on the prompt it is evaluated with. The golden files in
policy/testdata/chat_prompt (one per protocol) hold inputs and the messages both languages must
render from them; the Go and the Python tests compare with the same files."""

from __future__ import annotations

import json
import re
from typing import Any

from avtgym.types import AGENT_ROLES, Budget, Episode, TaskView, Turn, protocol_name

__all__ = ["AMBITAB_SYSTEM_PROMPT", "BIRD_A_SYSTEM_PROMPT", "BIRD_C_SYSTEM_PROMPT", "CHAT_PROMPT_VERSION",
           "NO_REPLY", "PROTOCOL_PROMPT", "TIDE_NUDGE", "TIDE_SYSTEM_TEMPLATE", "action_format_for",
           "chat_system_prompt", "no_reply_text", "policy_turn_text", "prompt_messages", "render_chat",
           "task_message", "user_turn_text"]

# The version of the shared prompt: policy/chat_prompt.go's ChatPromptVersion.
CHAT_PROMPT_VERSION = "chat-v1"

# The user message after an agent turn nothing answered (TIDE: TIDE_NUDGE), so that roles alternate.
NO_REPLY = "(no reply)"
TIDE_NUDGE = "Respond with a single JSON object and nothing else."

# The protocols' system messages of the shared chat prompt (prompt_messages). They are the Go
# policies' (policy/chat_prompt.go ChatSystemPrompt) word for word: the golden files in
# policy/testdata/chat_prompt, which both languages' tests compare with, keep them so.

# AMBITAB: AmbiTab's JSON actions (clarification or done) with the checklist method of the Go
# asker's prompts.
AMBITAB_SYSTEM_PROMPT = (
    'You are a careful data analyst. A user has asked for a SQL query over the database below, '
    'but the request may leave things open. Before a separate model writes the SQL, you may ask '
    'the user clarifying questions, one per turn, within a fixed question budget.\n'
    '\n'
    'Work through this method before each decision:\n'
    '1. List every phrase of the request that is open: a domain term that is not defined, a '
    'reference that could mean more than one column, table or value, or a rule (threshold, '
    'period, ranking, rounding, missing values, ordering) that is not fixed. Requests usually '
    'hide several such points; missing one costs more than asking about it.\n'
    '2. Mark the points the conversation has already settled, and the ones the user said they '
    'cannot answer. Never ask about those again, and never rephrase an earlier question.\n'
    '3. Ask exactly one question about one point that is still open.\n'
    '4. Stop when no open point remains that you have not asked about yet.\n'
    '\n'
    'Answer with a single JSON object and nothing else:\n'
    '- {"type": "clarification", "question": "<exactly one question>"} to ask the user one '
    'question;\n'
    '- {"type": "done"} to stop asking.\n'
    'Do not write SQL: a separate model writes the query from the conversation.'
)

# BIRD_C (BIRD-Interact's c-Interact): ask or submit in BIRD-Interact's agentic grammar, within a
# turn budget; a follow-up request comes once the SQL is accepted.
BIRD_C_SYSTEM_PROMPT = (
    'You are a data assistant. A user wants data from a SQL database; their request may be '
    'ambiguous, and only they know what they meant. You talk with the user to clarify the '
    'request, then write the SQL.\n'
    '\n'
    'Each turn, think briefly if you wish inside <thought></thought>, then give exactly one '
    'action inside <action></action>, for example <action>ask("Which date range do you '
    'mean?")</action>. Write string arguments in double quotes and escape double quotes inside '
    'them as \\". Only the last <action> block of a reply counts.\n'
    'Actions:\n'
    '- ask("question"): ask the user one clarifying question (one turn).\n'
    '- submit("SQL"): submit your SQL for the current request (one turn).\n'
    '\n'
    'You have a limited number of turns; the last one must be a submission (anything else there '
    'counts as SQL that did not run). If a submission fails you get one more chance, which must '
    'be a submission. Once your SQL for the first request is accepted, the user sends a '
    'follow-up request: submit its SQL at once (you get one more chance if it fails). Ask only '
    'about what the schema and the knowledge cannot tell you.'
)

# BIRD_A (a-Interact): the tools, ask and submit, each paid in coins.
BIRD_A_SYSTEM_PROMPT = (
    'You are a data assistant. A user wants data from a SQL database; their request may be '
    'ambiguous, and only they know what they meant. You explore the database with tools, ask '
    'the user about what you cannot find out yourself, and submit the SQL.\n'
    '\n'
    'Each turn, think briefly if you wish inside <thought></thought>, then give exactly one '
    'action inside <action></action>, for example <action>ask("Which date range do you '
    'mean?")</action>. Write string arguments in double quotes and escape double quotes inside '
    'them as \\". Only the last <action> block of a reply counts.\n'
    'Actions and their cost in coins:\n'
    '- ask("question"): ask the user one clarifying question (2).\n'
    '- execute("SQL"): run a read-only query and see its first rows (1).\n'
    '- get_schema(): the database schema (1).\n'
    "- get_all_column_meanings(): every column's meaning (1).\n"
    '- get_column_meaning("table", "column"): one column\'s meaning (0.5).\n'
    '- get_all_external_knowledge_names(): the names of the documented domain knowledge (0.5).\n'
    '- get_knowledge_definition("name"): one knowledge entry\'s definition (0.5).\n'
    '- get_all_knowledge_definitions(): every knowledge entry with its definition (1).\n'
    '- submit("SQL"): submit your SQL for the current request (3).\n'
    '\n'
    'Coins are charged before each action; your reply costs 0.2 coins when it holds no valid '
    'action. A failed submission tells you so, and you may submit again while coins last. An '
    'action the coins left cannot pay for still runs, and then only a final submission is '
    'accepted: it is free and ends the task; so is a submission the coins cannot pay for. A '
    'paid submission that leaves no coins ends the task. Some knowledge is not documented: only '
    'the user can tell you. Once your SQL for the first request is accepted, the user sends a '
    'follow-up request: solve it the same way, with the coins left.'
)

# TIDE_F and TIDE_P: TIDE-Bench's agent prompt (paper Figure 8); {schema_ddl}, {evidence} and
# {dialect} are filled in per task (tide_system_prompt).
TIDE_SYSTEM_TEMPLATE = (
    "You are a text-to-SQL agent. Your task is to understand a user's natural-language data "
    'question and produce a correct SQL query for the database described below.\n'
    '\n'
    'Database schema:\n'
    '{schema_ddl}\n'
    '\n'
    'Evidence / domain context:\n'
    '{evidence}\n'
    '\n'
    'Evidence may be empty for some tasks; if so, rely on schema and dialogue alone.\n'
    '\n'
    "When to ask vs. when to answer. Carefully read the user's request. If anything is "
    'ambiguous or under-specified, ask for clarification rather than making assumptions. When '
    'sufficient information is available, produce the SQL query.\n'
    '\n'
    'Clarification rules.\n'
    'R1. Ask at most one clarification question per turn. Focus each question on a single '
    'ambiguity.\n'
    'R2. When asking, offer 2-3 discrete options where appropriate to make it easy for the user '
    'to choose.\n'
    'R3. Do not ask about information already determinable from the schema or evidence above.\n'
    'R4. Do not ask the user to confirm specific table names, column names, or stored values: '
    'these are database-internal facts the user does not know.\n'
    '\n'
    'Handling intent change. If the user changes their request mid-dialogue (e.g., "actually, '
    'instead of X, give me Y"), respect the new request and produce the updated SQL based on '
    'the latest user intent. Do not revert to the original request.\n'
    '\n'
    'SQL output rules.\n'
    'S1. When producing SQL, the content must contain only the raw SQL query: no explanation, '
    'no markdown code fences, no markdown link syntax such as [col](url).\n'
    'S2. Produce valid {dialect}-compatible SQL unless the schema implies another dialect.\n'
    'S3. Use the exact column and table names as they appear in the schema, preserving '
    'backticks, quotes, and case as shown.\n'
    '\n'
    'Output protocol. Respond with a single JSON object and nothing else:\n'
    '{"type": "ask", "content": <clarification question>}\n'
    'or\n'
    '{"type": "sql", "content": <complete SQL query>}'
)


class _ProtocolPrompt:
    """The sentinel default of system_prompt arguments: the episode's protocol's system message."""

    def __repr__(self) -> str:
        return "PROTOCOL_PROMPT"


# The default system_prompt of prompt_messages and of the trainer adapters: chat_system_prompt(the
# episode's protocol and task).
PROTOCOL_PROMPT: Any = _ProtocolPrompt()

# The characters Go's strings.TrimSpace removes (Unicode White_Space): Python's str.strip() also
# removes U+001C..U+001F, which would make the two languages render different bytes.
_GO_SPACE = (" \t\n\v\f\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
             "\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


def _trim(s: str) -> str:
    return s.strip(_GO_SPACE)


def _tide(protocol: str) -> bool:
    return protocol in ("tide-f", "tide-p")


def action_format_for(protocol: "str | int | None") -> str:
    """The action format of a protocol's prompt: "json" (AmbiTab's) under AMBITAB, "agentic"
    (BIRD-Interact's grammar) under BIRD_C and BIRD_A, "tide" (TIDE-Bench's output protocol)
    under TIDE_F and TIDE_P."""
    name = protocol_name(protocol)
    if name in ("bird-c", "bird-a"):
        return "agentic"
    if _tide(name):
        return "tide"
    return "json"


def no_reply_text(protocol: "str | int | None") -> str:
    """The user message that follows an agent turn nothing answered: NO_REPLY, TIDE_NUDGE under
    TIDE."""
    return TIDE_NUDGE if _tide(protocol_name(protocol)) else NO_REPLY


def _tide_dialect(d: str) -> str:
    low = d.lower()
    if low in ("", "sqlite"):
        return "SQLite"
    if low in ("postgres", "postgresql"):
        return "PostgreSQL"
    return d


_TIDE_SLOTS = re.compile(r"\{schema_ddl\}|\{evidence\}|\{dialect\}")


def chat_system_prompt(protocol: "str | int | None", task: TaskView | None = None) -> str:
    """The protocol's system message of the shared prompt: AMBITAB_SYSTEM_PROMPT, BIRD_C_SYSTEM_PROMPT,
    BIRD_A_SYSTEM_PROMPT, or under TIDE TIDE_SYSTEM_TEMPLATE with the task's schema, evidence and
    dialect filled in (left as placeholders without a task)."""
    name = protocol_name(protocol)
    if name == "bird-c":
        return BIRD_C_SYSTEM_PROMPT
    if name == "bird-a":
        return BIRD_A_SYSTEM_PROMPT
    if _tide(name):
        if task is None:
            return TIDE_SYSTEM_TEMPLATE
        db = task.database
        slots = {"{schema_ddl}": _trim(db.schema), "{evidence}": _trim(task.evidence),
                 "{dialect}": _tide_dialect(db.dialect)}
        return _TIDE_SLOTS.sub(lambda m: slots[m.group(0)], TIDE_SYSTEM_TEMPLATE)
    return AMBITAB_SYSTEM_PROMPT


def _milli(m: int) -> str:
    sign = "-" if m < 0 else ""
    m = abs(m)
    s = f"{sign}{m // 1000}"
    if m % 1000:
        s += "." + f"{m % 1000:03d}".rstrip("0")
    return s


_BUDGET_WORDS = {"questions": "Question", "turns": "Turn", "coins": "Coin"}


def _budget_line(b: Budget | None) -> str:
    if b is None or b.unit not in _BUDGET_WORDS:
        return ""
    return f"{_BUDGET_WORDS[b.unit]} budget: {_milli(b.total_milli)}."


def task_message(episode: Episode) -> str:
    """The first user message under AMBITAB, BIRD_C and BIRD_A: the database and dialect, then
    what the public view carries (schema, column meanings, knowledge, evidence), the budget's
    total, and the request."""
    task = episode.task
    if task is None:
        raise ValueError("the episode has no task view (an Episode made from a bare token)")
    db = task.database
    parts = [f"Database: {db.id} ({db.dialect or 'sqlite'})\n"]
    schema = _trim(db.schema)
    if schema:
        parts.append("\nSchema:\n" + schema + "\n")
    if db.column_meanings:
        parts.append("\nColumn meanings:\n")
        parts.extend(f"- {k}: {db.column_meanings[k]}\n" for k in sorted(db.column_meanings))
    if db.knowledge:
        parts.append("\nExternal knowledge:\n")
        parts.extend(f"- {k.name}: {k.definition}\n" for k in db.knowledge)
    evidence = _trim(task.evidence)
    if evidence:
        parts.append("\nEvidence: " + evidence + "\n")
    line = _budget_line(episode.budget)
    if line:
        parts.append("\n" + line + "\n")
    parts.append("\nRequest: " + _trim(task.request))
    return "".join(parts)


def user_turn_text(turn: Turn) -> str:
    """A non-agent turn after the request as the shared prompt shows it ("" for one without
    text): a request there (a BIRD-Interact follow-up's) as "New request: ...", any other turn's
    text as it is."""
    if not _trim(turn.text):
        return ""
    if turn.kind == "request":
        return "New request: " + turn.text
    return turn.text


def prompt_messages(episode: Episode, system_prompt: Any = PROTOCOL_PROMPT,
                    action_format: str | None = None) -> list[dict[str, Any]]:
    """The shared chat prompt for the episode's next decision (policy/chat_prompt.go ChatMessages,
    message for message).

    The protocol's system message (chat_system_prompt; system_prompt replaces it, None drops it);
    under AMBITAB, BIRD_C and BIRD_A the task message (task_message); under TIDE the request as
    the first user message. Then the dialogue: agent turns (the policy's, TIDE_P's pre-filled
    question) as assistant messages in the protocol's action format (policy_turn_text with
    action_format_for; action_format overrides it), every other turn with text as a user message
    (user_turn_text), consecutive ones joined by a blank line; an agent turn nothing answered is
    followed by no_reply_text. The prompt is append-only: at a later turn it extends the earlier
    one (up to that trailing no-reply message), which is how the trainer adapters build their
    tokens."""
    protocol = episode.protocol or "ambitab"
    fmt = action_format or action_format_for(protocol)
    tide = _tide(protocol)
    no_reply = no_reply_text(protocol)
    if system_prompt is PROTOCOL_PROMPT:
        system_prompt = chat_system_prompt(protocol, episode.task)
    messages: list[dict[str, Any]] = []
    if system_prompt is not None:
        messages.append({"role": "system", "content": system_prompt})
    user: list[str] = [] if tide else [task_message(episode)]

    def flush() -> None:
        if user:
            messages.append({"role": "user", "content": "\n\n".join(user)})
            user.clear()

    first_request = True
    for t in episode.turns:
        if first_request and t.kind == "request":
            first_request = False
            if tide:
                user.append(t.text)
            continue
        if t.role in AGENT_ROLES:
            flush()
            if messages and messages[-1]["role"] == "assistant":
                messages.append({"role": "user", "content": no_reply})
            messages.append({"role": "assistant", "content": policy_turn_text(t, fmt)})
            continue
        text = user_turn_text(t)
        if text:
            user.append(text)
    flush()
    if not messages or messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": no_reply})
    return messages


def policy_turn_text(turn: Turn, action_format: str = "text") -> str:
    """The assistant content of an agent turn: the policy's, or TIDE_P's pre-filled question.

    action_format "text": the question or SQL as it is, and "STOP" for a stop turn (its text is
    empty on the wire). "json": the AmbiTab JSON action ({"type": "clarification", "question":
    ...}, {"type": "done"}, {"type": "sql", "sql": ...}). "agentic": BIRD-Interact's agentic
    grammar (<action>ask("...")</action>, <action>submit("...")</action>, <action>stop()</action>,
    and a BIRD_A tool call as the server wrote it, e.g. <action>execute("SELECT 1")</action>).
    All parse back to the same action with parse_action (the text form of a question does when it
    is one line ending in "?"; a "tool_call" turn's text is the call, which parse_action reads in
    every format). "tide": TIDE-Bench's output protocol ({"type": "ask", "content": ...},
    {"type": "sql", "content": ...}; a stop as {"type": "done"}). An "unparsed" turn is the
    model's output as it was, in any format."""
    if action_format == "tide":
        if turn.kind == "question":
            return json.dumps({"type": "ask", "content": turn.text}, ensure_ascii=False)
        if turn.kind == "sql":
            return json.dumps({"type": "sql", "content": turn.text}, ensure_ascii=False)
        if turn.kind == "stop":
            return json.dumps({"type": "done"})
        return turn.text
    if action_format == "agentic":
        if turn.kind == "question":
            return f"<action>ask({json.dumps(turn.text, ensure_ascii=False)})</action>"
        if turn.kind == "stop":
            return "<action>stop()</action>"
        if turn.kind == "sql":
            return f"<action>submit({json.dumps(turn.text, ensure_ascii=False)})</action>"
        if turn.kind == "tool_call":
            return f"<action>{turn.text}</action>"
        return turn.text
    if action_format == "json":
        if turn.kind == "question":
            return json.dumps({"type": "clarification", "question": turn.text}, ensure_ascii=False)
        if turn.kind == "stop":
            return json.dumps({"type": "done"})
        if turn.kind == "sql":
            return json.dumps({"type": "sql", "sql": turn.text}, ensure_ascii=False)
        return turn.text
    if action_format != "text":
        raise ValueError(f"action_format {action_format!r}: want text, json, agentic or tide")
    if turn.kind == "stop" and not turn.text:
        return "STOP"
    return turn.text


def render_chat(episode: Episode, system_prompt: str | None = None, action_format: str = "text",
                merge_user: bool = False) -> tuple[list[dict[str, Any]], list[bool]]:
    """OpenAI-style messages for an episode's whole history, and the loss mask.

    The system prompt (if any) is a "system" message. Each turn is one message: the policy's
    turns (questions, STOP, its SQL, output it reported as unparsed, BIRD_A's tool calls) are
    "assistant" messages, and so is TIDE_P's pre-filled question (role "prefilled": asked by the
    environment in the policy's place, rendered as the agent's turn); the request, the oracle's
    replies and every environment turn (notices, feedback such as BIRD_C's debug-retry message, a
    BIRD-Interact follow-up's request, released after phase 1, BIRD_A's tool outputs,
    "tool_result" turns, and TIDE's drift turn, the user's "drift") are "user" messages. mask[i]
    is True exactly for the policy's own messages (role "policy"): a pre-filled question's
    assistant message has mask False, and oracle and environment text is never trainable.
    merge_user=True joins consecutive user messages with a blank line (for chat templates that
    need alternation)."""
    messages: list[dict[str, Any]] = []
    mask: list[bool] = []
    if system_prompt is not None:
        messages.append({"role": "system", "content": system_prompt})
        mask.append(False)
    for t in episode.turns:
        if t.role in AGENT_ROLES:
            # The policy's own output is trainable; a pre-filled question is not.
            messages.append({"role": "assistant", "content": policy_turn_text(t, action_format)})
            mask.append(t.role == "policy")
            continue
        if merge_user and messages and messages[-1]["role"] == "user":
            messages[-1]["content"] += "\n\n" + t.text
            continue
        messages.append({"role": "user", "content": t.text})
        mask.append(False)
    return messages, mask

"""Rendering an episode's history as chat messages with a trainable-token mask."""

from __future__ import annotations

import json
from typing import Any

from avtgym.types import AGENT_ROLES, Episode, Turn

__all__ = ["render_chat", "policy_turn_text"]


def policy_turn_text(turn: Turn, action_format: str = "text") -> str:
    """The assistant content of an agent turn: the policy's, or TIDE_P's pre-filled question.

    action_format "text": the question or SQL as it is, and "STOP" for a stop turn (its text is
    empty on the wire). "json": the AmbiTab JSON action ({"type": "clarification", "question":
    ...}, {"type": "done"}, {"type": "sql", "sql": ...}). "agentic": BIRD-Interact's agentic
    grammar (<action>ask("...")</action>, <action>submit("...")</action>, <action>stop()</action>,
    and a BIRD_A tool call as the server wrote it, e.g. <action>execute("SELECT 1")</action>).
    All parse back to the same action with parse_action (the text form of a question does when it
    is one line ending in "?"; a "tool_call" turn's text is the call, which parse_action reads in
    every format). An "unparsed" turn is the model's output as it was, in any format."""
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
        raise ValueError(f"action_format {action_format!r}: want text, json or agentic")
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

"""Trainer adapters for avtgym (opt-in; see docs/trainers.md).

- ``avtgym.trainers.trl``: a ``rollout_func`` for TRL's ``GRPOTrainer`` (multi-turn asking
  episodes, oracle text masked out of the loss via ``env_mask``, generation through public APIs
  only), the matching reward function (``None``, i.e. dropped, for ERROR episodes), and an
  ``environment_factory`` class for TRL's tool-calling environments.
- ``avtgym.trainers.verl``: ``AvtgymInteraction``, a verl ``BaseInteraction`` whose user turns
  are the oracle's replies (verl gives them response_mask 0); ``AvtgymAgentLoop``, verl's tool
  agent loop that also drops ERROR trajectories (mask zeroed) and frees per-request state; and
  ``compute_score``, the reward function.

Every adapter passes ``protocol`` (and ``patience``) through to reset like the other reset
arguments. Under a protocol other than AMBITAB, malformed model output is by default reported to
the server as an unparsed action (the protocol decides what it costs; BIRD_C spends a turn)
instead of the client-side STOP fallback (``on_malformed``), and the default system prompt is the
protocol's (``system_prompt_for``). An episode cut short (a length or decision cap) is ended with
STOP under every protocol (BIRD_C: the sub-task ends unsolved, and the episode is scored).
Environment turns (notices, feedback, a BIRD-Interact follow-up's request, BIRD_A's tool outputs)
and TIDE's drift turn reach the model as user messages and are never trainable; TIDE_P's
pre-filled question (role "prefilled") is an assistant message of the prompt, never trainable and
never taken for a reply.

The OpenEnv environment client is ``avtgym.openenv`` (not a trainer adapter: any OpenEnv loop).
Importing this package imports neither torch, trl nor verl; each submodule imports its trainer
when it is imported (``avtgym.trainers.verl``) or called (``avtgym.trainers.trl``).
"""

from typing import Any

DEFAULT_SYSTEM_PROMPT = (
    "You are helping a user who asked for data from a SQL database. Their request may be "
    "ambiguous. Before the SQL is written you may ask the user clarifying questions, one per "
    "turn, within a small budget. Answer with exactly one JSON object per turn: "
    '{"type": "clarification", "question": "..."} to ask a question, or {"type": "done"} '
    "when nothing important is left unclear."
)

# BIRD_C (BIRD-Interact's c-Interact): ask within a turn budget, then SQL; a follow-up request may
# come once the SQL is accepted.
BIRD_C_SYSTEM_PROMPT = (
    "You are helping a user who asked for data from a SQL database. Their request may be "
    "ambiguous. You may ask the user clarifying questions, one per turn, within a small number of "
    "turns, and then write the SQL. Answer with exactly one JSON object per turn: "
    '{"type": "clarification", "question": "..."} to ask a question, or '
    '{"type": "sql", "sql": "..."} to submit the SQL. The last turn must be SQL (anything else '
    "there counts as SQL that did not run). If the SQL fails you get one more chance, which must be "
    "SQL. Once it is accepted the user may send a follow-up request: submit its SQL at once (with "
    "one more chance if it fails)."
)

# BIRD_A (BIRD-Interact's a-Interact): one action per turn in BIRD-Interact's agentic grammar
# (avtgym.parse_action reads it), each paid from a coin budget.
BIRD_A_SYSTEM_PROMPT = (
    "You are a data assistant working on a SQL database for a user whose request may be "
    "ambiguous. Each turn, reply with exactly one action inside <action></action> tags; every "
    "action costs coins from a limited budget: ask(\"question\") asks the user one clarifying "
    "question (2 coins); execute(\"SQL\") runs a read-only query and shows its result (1); "
    "get_schema() (1); get_all_column_meanings() (1); get_column_meaning(\"table\", \"column\") "
    "(0.5); get_all_external_knowledge_names() (0.5); get_knowledge_definition(\"name\") (0.5); "
    "get_all_knowledge_definitions() (1); submit(\"SQL\") submits your solution (3). An action the "
    "coins left cannot pay for still runs, and then only a final submit is accepted: it is free and "
    "ends the task (so is a submit the coins cannot pay for); a paid submit that leaves no coins "
    "ends the task too. Once a submission is accepted the user may send a follow-up request: solve "
    "it the same way. "
    'Example: <action>ask("Which date range do you mean?")</action>'
)

# TIDE_F and TIDE_P (TIDE-Bench): one question or one SQL per turn, no query results, at most 20
# turns; the user may change the request after an SQL (the same text on every task: it tells no
# task whether a drift will come); stopping without SQL is an abstention.
TIDE_SYSTEM_PROMPT = (
    "You are helping a user who asked for data from a SQL database. Their request may be "
    "ambiguous. Each turn, either ask the user one clarifying question or submit the SQL that "
    "answers the request; query results are not shown, and you have at most 20 turns. Answer "
    "with exactly one JSON object per turn: "
    '{"type": "clarification", "question": "..."} to ask a question, or '
    '{"type": "sql", "sql": "..."} to submit the SQL. If the user changes the request after your '
    "SQL, submit the SQL for the changed request. Stopping without SQL counts as giving up."
)

_SYSTEM_PROMPTS = {"ambitab": DEFAULT_SYSTEM_PROMPT, "bird-c": BIRD_C_SYSTEM_PROMPT,
                   "bird-a": BIRD_A_SYSTEM_PROMPT, "tide-f": TIDE_SYSTEM_PROMPT,
                   "tide-p": TIDE_SYSTEM_PROMPT}

# Malformed-output handling ("on_malformed"): the client-side conventions "stop" (AmbiTab's
# fallback) and "retry" (one corrective notice, then STOP), or "unparsed" (report the output to the
# server, Action.unparsed: the protocol's own rule applies). None: "stop" under AMBITAB,
# "unparsed" under any other protocol.
ON_MALFORMED = ("stop", "retry", "unparsed")


def system_prompt_for(protocol: "str | int | None" = None) -> str:
    """The default system prompt of a protocol: DEFAULT_SYSTEM_PROMPT (AmbiTab's JSON actions:
    clarification or done) for AMBITAB (and None), BIRD_C_SYSTEM_PROMPT (clarification or sql)
    for BIRD_C, BIRD_A_SYSTEM_PROMPT (BIRD-Interact's agentic grammar: ask, tools, submit) for
    BIRD_A, TIDE_SYSTEM_PROMPT (clarification or sql, at most 20 turns) for TIDE_F and TIDE_P."""
    from avtgym.types import protocol_name

    name = protocol_name(protocol)
    return _SYSTEM_PROMPTS.get(name, DEFAULT_SYSTEM_PROMPT)


class _ProtocolPrompt:
    """The sentinel default of the adapters' system_prompt: the episode's protocol's prompt."""

    def __repr__(self) -> str:
        return "PROTOCOL_PROMPT"


# The adapters' default system_prompt: system_prompt_for(the episode's protocol), i.e.
# DEFAULT_SYSTEM_PROMPT under AMBITAB (as before) and BIRD_C_SYSTEM_PROMPT under BIRD_C.
PROTOCOL_PROMPT: Any = _ProtocolPrompt()


def resolve_system_prompt(system_prompt: Any, protocol: "str | int | None") -> "str | None":
    """system_prompt as given (a string, or None for no system message), or the protocol's
    default when it is PROTOCOL_PROMPT."""
    if system_prompt is PROTOCOL_PROMPT:
        return system_prompt_for(protocol)
    return system_prompt


def check_on_malformed(on_malformed: str | None) -> str | None:
    if on_malformed is not None and on_malformed not in ON_MALFORMED:
        raise ValueError(f"on_malformed {on_malformed!r}: want {', '.join(ON_MALFORMED)} or None")
    return on_malformed


def malformed_policy(on_malformed: str | None, protocol: str | None) -> str:
    """The malformed-output handling in effect for an episode of this protocol (see
    ON_MALFORMED): the explicit choice, else "stop" under AMBITAB (AmbiTab's fallback, as before)
    and "unparsed" under any other protocol (BIRD_C: the output spends a turn, as in
    BIRD-Interact's harness; a client-side STOP would end the episode)."""
    if on_malformed is not None:
        return on_malformed
    return "stop" if protocol in (None, "", "ambitab") else "unparsed"


__all__ = ["BIRD_A_SYSTEM_PROMPT", "BIRD_C_SYSTEM_PROMPT", "DEFAULT_SYSTEM_PROMPT", "ON_MALFORMED", "PROTOCOL_PROMPT",
           "TIDE_SYSTEM_PROMPT", "malformed_policy", "resolve_system_prompt", "system_prompt_for"]

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

from avtgym.chat import (
    AMBITAB_SYSTEM_PROMPT,
    BIRD_A_SYSTEM_PROMPT,
    BIRD_C_SYSTEM_PROMPT,
    PROTOCOL_PROMPT,
    TIDE_SYSTEM_TEMPLATE,
)

# The protocols' system prompts: the shared chat prompt's (avtgym.chat, the Go policies' word for
# word). TIDE_SYSTEM_PROMPT is TIDE-Bench's template; prompt_messages fills in each task's schema,
# evidence and dialect.
DEFAULT_SYSTEM_PROMPT = AMBITAB_SYSTEM_PROMPT
TIDE_SYSTEM_PROMPT = TIDE_SYSTEM_TEMPLATE

_SYSTEM_PROMPTS = {"ambitab": DEFAULT_SYSTEM_PROMPT, "bird-c": BIRD_C_SYSTEM_PROMPT,
                   "bird-a": BIRD_A_SYSTEM_PROMPT, "tide-f": TIDE_SYSTEM_PROMPT,
                   "tide-p": TIDE_SYSTEM_PROMPT}

# Malformed-output handling ("on_malformed"): the client-side conventions "stop" (AmbiTab's
# fallback) and "retry" (one corrective notice, then STOP), or "unparsed" (report the output to the
# server, Action.unparsed: the protocol's own rule applies). None: "stop" under AMBITAB,
# "unparsed" under any other protocol.
ON_MALFORMED = ("stop", "retry", "unparsed")


# Reset arguments every trainer adapter applies unless the caller (reset defaults, the prompt's
# spec or a dataset row) sets them. strict_credit (docs/models.md#strict-credit): a question that
# reproduces the request earns nothing and any other question at most one ambiguity. AmbiTab's
# own rule (strict_credit=False: the server's default, kept for evaluation) credits every
# ambiguity a question names, so echoing the request as a question earns question-F1; a real
# 135M model trained with GRPO on it learned exactly that within about twenty steps (issue 29:
# held-out question-F1 0.22 -> 0.50 under AmbiTab's rule, 0.22 -> 0.22 under strict_credit).
TRAINING_RESET_DEFAULTS: dict[str, Any] = {"strict_credit": True}


def training_reset(*layers: "dict[str, Any] | None") -> dict[str, Any]:
    """TRAINING_RESET_DEFAULTS overlaid by each layer in turn (later layers win; None values in a
    layer do not override)."""
    out: dict[str, Any] = dict(TRAINING_RESET_DEFAULTS)
    for layer in layers:
        for k, v in (layer or {}).items():
            if v is not None:
                out[k] = v
    return out


def system_prompt_for(protocol: "str | int | None" = None) -> str:
    """The default system prompt of a protocol, the shared chat prompt's: DEFAULT_SYSTEM_PROMPT
    (AmbiTab's JSON actions: clarification or done) for AMBITAB (and None), BIRD_C_SYSTEM_PROMPT
    and BIRD_A_SYSTEM_PROMPT (BIRD-Interact's agentic grammar: ask and submit; under BIRD_A the
    tools, in coins) for BIRD_C and BIRD_A, TIDE_SYSTEM_PROMPT (TIDE-Bench's template: ask or
    sql; avtgym.chat.prompt_messages fills in the task) for TIDE_F and TIDE_P."""
    from avtgym.types import protocol_name

    name = protocol_name(protocol)
    return _SYSTEM_PROMPTS.get(name, DEFAULT_SYSTEM_PROMPT)


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
           "TIDE_SYSTEM_PROMPT", "TRAINING_RESET_DEFAULTS", "malformed_policy", "resolve_system_prompt",
           "system_prompt_for", "training_reset"]

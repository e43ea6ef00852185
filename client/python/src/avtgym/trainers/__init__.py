"""Trainer adapters for avtgym (opt-in; see docs/trainers.md).

- ``avtgym.trainers.trl``: a ``rollout_func`` for TRL's ``GRPOTrainer`` (multi-turn asking
  episodes, oracle text masked out of the loss via ``env_mask``, generation through public APIs
  only), the matching reward function (``None``, i.e. dropped, for ERROR episodes), and an
  ``environment_factory`` class for TRL's tool-calling environments.
- ``avtgym.trainers.verl``: ``AvtgymInteraction``, a verl ``BaseInteraction`` whose user turns
  are the oracle's replies (verl gives them response_mask 0); ``AvtgymAgentLoop``, verl's tool
  agent loop that also drops ERROR trajectories (mask zeroed) and frees per-request state; and
  ``compute_score``, the reward function.

The OpenEnv environment client is ``avtgym.openenv`` (not a trainer adapter: any OpenEnv loop).
Importing this package imports neither torch, trl nor verl; each submodule imports its trainer
when it is imported (``avtgym.trainers.verl``) or called (``avtgym.trainers.trl``).
"""

DEFAULT_SYSTEM_PROMPT = (
    "You are helping a user who asked for data from a SQL database. Their request may be "
    "ambiguous. Before the SQL is written you may ask the user clarifying questions, one per "
    "turn, within a small budget. Answer with exactly one JSON object per turn: "
    '{"type": "clarification", "question": "..."} to ask a question, or {"type": "done"} '
    "when nothing important is left unclear."
)

__all__ = ["DEFAULT_SYSTEM_PROMPT"]

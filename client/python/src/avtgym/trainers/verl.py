"""verl adapter: ``AvtgymInteraction``, a ``verl.interactions.base.BaseInteraction``.

verl's multi-turn agent loop (``verl.experimental.agent_loop.tool_agent_loop``) calls, per
trajectory, ``start_interaction(request_id, **interaction_kwargs)`` and then, after each assistant
turn, ``generate_response(request_id, messages, **interaction_kwargs)``, which returns
``(should_terminate_sequence, response_text, turn_score, metadata)``. verl appends
``response_text`` as a **user** message and gives its tokens ``response_mask`` 0, so the oracle's
replies are context, never trainable tokens; the assistant's tokens get mask 1. The turn scores go
to ``extra_fields["turn_scores"]``; this adapter scores 0.0 on non-final turns and the episode's
reward on the final one, so a reward function can use ``turn_scores[-1]``.

Interaction config (the interaction YAML's ``config``): ``target`` (default 127.0.0.1:50051),
``timeout``, ``on_malformed`` ("stop" or "retry"), and reset defaults under ``reset`` (e.g.
``{reward: question_f1}``). Per-row ``interaction_kwargs`` (from ``extra_info``) pick the episode:
``task_id``, ``seed``, ``corpus``, ``split`` … (``name`` selects the interaction and is ignored).

verl removed ``verl.interactions`` after 0.7.1 (0.8.0 and 0.9.x on PyPI do not ship it); this
module needs verl 0.7.x. Importing it imports verl; importing ``avtgym.trainers`` does not.
"""

from __future__ import annotations

from typing import Any, Mapping
from uuid import uuid4

from avtgym import Action, AsyncClient, AvtgymError, Episode, parse_action, render_chat
from avtgym.trainers import DEFAULT_SYSTEM_PROMPT

try:
    from verl.interactions.base import BaseInteraction
except ImportError as e:  # pragma: no cover - depends on the installed verl
    raise ImportError(
        "avtgym.trainers.verl needs verl.interactions.base.BaseInteraction, shipped by verl<=0.7.1 "
        "(pip install 'verl==0.7.1'); the installed verl lacks it or verl is not installed"
    ) from e

__all__ = ["AvtgymInteraction", "verl_row", "RESET_KEYS"]

RESET_KEYS = ("task_id", "corpus", "split", "seed", "reward", "solver", "extra_questions",
              "zero_ambiguity_budget")
MALFORMED_NOTICE = ("Your last message was not a valid action ({error}). Answer with exactly one "
                    'JSON object: {{"type": "clarification", "question": "..."}} or {{"type": "done"}}.')
DONE_TEXT = "The episode is over."


class AvtgymInteraction(BaseInteraction):
    """One avtgym episode per verl trajectory (instance id = verl's request id)."""

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.target: str = config.get("target", "127.0.0.1:50051")
        self.timeout: float = float(config.get("timeout", 30.0))
        self.on_malformed: str = config.get("on_malformed", "stop")
        if self.on_malformed not in ("stop", "retry"):
            raise ValueError(f"on_malformed {self.on_malformed!r}: want stop or retry")
        self.reset_defaults: dict[str, Any] = dict(config.get("reset") or {})
        self._client: AsyncClient | None = config.get("client")  # tests may inject one
        self._instances: dict[str, dict[str, Any]] = {}

    @property
    def client(self) -> AsyncClient:
        if self._client is None:
            self._client = AsyncClient(self.target, timeout=self.timeout)
        return self._client

    def episode(self, instance_id: str) -> Episode:
        return self._instances[instance_id]["episode"]

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        if instance_id is None:
            instance_id = str(uuid4())
        reset = {**self.reset_defaults, **{k: kwargs[k] for k in RESET_KEYS if kwargs.get(k) is not None}}
        ep = await self.client.reset(**reset)
        self._instances[instance_id] = {"episode": ep, "malformed": 0, "error": None}
        return instance_id

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
                                ) -> tuple[bool, str, float, dict[str, Any]]:
        st = self._instances[instance_id]
        ep: Episode = st["episode"]
        if ep.done:
            return True, DONE_TEXT, await self.calculate_score(instance_id), self._meta(st)
        text = ""
        for m in reversed(messages):
            if m.get("role") == "assistant":
                c = m.get("content", "")
                text = c if isinstance(c, str) else "".join(
                    b.get("text", "") for b in c if isinstance(b, Mapping))
                break
        parsed = parse_action(text)
        action = parsed.action
        if not parsed.ok:
            st["malformed"] += 1
            if self.on_malformed == "retry" and st["malformed"] == 1:
                return False, MALFORMED_NOTICE.format(error=parsed.error), 0.0, self._meta(st)
            action = Action.stop()
        try:
            res = await self.client.step(ep, action)
        except AvtgymError as e:  # environment failure: end the trajectory, no score
            st["error"] = str(e)
            return True, DONE_TEXT, 0.0, self._meta(st)
        st["episode"] = ep = res.episode
        reply = "\n\n".join(t.text for t in res.new_turns if t.role != "policy" and t.text)
        if res.done:
            return True, reply or DONE_TEXT, await self.calculate_score(instance_id), self._meta(st)
        return False, reply or "(no reply)", 0.0, self._meta(st)

    async def calculate_score(self, instance_id: str | None = None, **kwargs: Any) -> float:
        st = self._instances.get(instance_id or "")
        if st is None or st["error"]:
            return 0.0
        ep: Episode = st["episode"]
        if not ep.done or ep.reward is None or ep.status == "error":
            return 0.0
        return float(ep.reward.value)

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        if instance_id is not None:
            self._instances.pop(instance_id, None)

    @staticmethod
    def _meta(st: dict[str, Any]) -> dict[str, Any]:
        ep: Episode = st["episode"]
        return {
            "episode_id": ep.episode_id,
            "status": ep.status,
            "done": ep.done,
            "questions_asked": ep.questions_asked,
            "reward_components": dict(ep.reward.components) if ep.reward is not None else {},
            "malformed": st["malformed"],
            "error": st["error"] or "",
        }


def verl_row(episode: Episode, *, system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, name: str = "avtgym",
             data_source: str = "avtgym", **reset_kwargs: Any) -> dict[str, Any]:
    """A verl dataset row (parquet) for the episode that reset(**reset_kwargs) returned: the
    rendered prompt, and interaction_kwargs that make AvtgymInteraction start the same episode
    (resets are deterministic for a given task and seed)."""
    messages, _ = render_chat(episode, system_prompt, action_format="json", merge_user=True)
    kwargs = {"name": name, **{k: v for k, v in reset_kwargs.items() if v is not None}}
    if "task_id" not in kwargs and episode.task is not None:
        kwargs["task_id"] = episode.task.task_id
    if "seed" not in kwargs:
        kwargs["seed"] = episode.seed
    return {
        "data_source": data_source,
        "prompt": messages,
        "extra_info": {"interaction_kwargs": kwargs},
        "reward_model": {"style": "rule", "ground_truth": ""},
    }

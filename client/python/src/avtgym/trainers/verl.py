"""verl adapter: avtgym asking episodes in verl's multi-turn agent loop (verl 0.7.x).

Three pieces, each on one of verl's documented extension points (see docs/trainers.md):

- ``AvtgymInteraction``: a ``verl.interactions.base.BaseInteraction``. verl's tool agent loop
  (``verl.experimental.agent_loop.tool_agent_loop``) calls ``start_interaction(request_id,
  **interaction_kwargs)`` (a reset) and, after each assistant turn, ``generate_response(request_id,
  messages, **interaction_kwargs)``, which returns ``(should_terminate_sequence, response_text,
  turn_score, metadata)``. verl appends ``response_text`` as a **user** message with
  ``response_mask`` 0: the oracle's replies are context, never trained on. The turn score is
  ``None`` on a non-final turn (verl 0.7.1 records only scores that are not None, in
  ``extra_fields["turn_scores"]``), the episode's reward on the final turn, and NaN when the
  episode is dropped: it ended in ``ERROR`` (the environment failed), a step failed even after the
  client's retries, or the reset failed.
- ``compute_score``: the reward function (``reward.custom_reward_function.path:
  pkg://avtgym.trainers.verl``, ``name: compute_score``). It reads the final turn score from
  ``extra_info["turn_scores"]`` and returns ``{"score": reward, "avtgym_dropped": 0.0}``, or
  ``{"score": 0.0, "avtgym_dropped": 1.0}`` for a dropped (or never finished) episode.
- ``AvtgymAgentLoop``: the tool agent loop plus what verl 0.7.1 leaves out. After the trajectory
  it stops an episode that verl cut short (``response_length`` or a turn limit reached before the
  policy stopped; scored like the TRL adapter's length cap), zeroes the ``response_mask`` of a
  dropped trajectory (so it carries no gradient: the project's rule is to drop ``ERROR``
  episodes, never to score them 0), and frees the interaction's state for the request (verl 0.7.1
  never calls ``finalize_interaction``). Register it with ``agent_loop_config_path`` (see
  ``write_verl_configs``) and name it in each row's ``agent_name`` (``verl_row`` does).
- ``compute_avtgym_grpo_advantage``: the advantage estimator ``avtgym_grpo``, registered with
  ``verl.trainer.ppo.core_algos.register_adv_est`` when this module is imported. It is verl's
  GRPO outcome advantage computed over each group's *kept* samples only: a sample whose
  ``response_mask`` is all 0 (a dropped trajectory) gets advantage 0 and leaves its group's mean
  and std, so the placeholder score of a dropped episode biases no other sample. verl computes
  advantages in its driver (``RayPPOTrainer.fit`` in the ``TaskRunner`` actor), which never
  imports the reward function or the agent loop; ``write_verl_configs`` therefore also sets
  ``VERL_USE_EXTERNAL_MODULES=avtgym.trainers.verl`` in Ray's job ``runtime_env``, which makes
  ``import verl`` import this module in every verl process.

Per-request state is bounded even without the agent loop: a finished episode keeps only its
summary, and instances are evicted least-recently-used past ``max_instances`` and after
``state_ttl`` seconds without a call. (verl 0.7.1 builds a new interaction for every trajectory;
integrations that keep one alive and never call ``finalize_interaction`` are why the bounds
exist.) All interactions of a process share one gRPC channel per target and event loop.

Interaction config (the interaction YAML's ``config``): ``target`` (default 127.0.0.1:50051),
``timeout``, ``retries``, ``on_malformed`` ("stop": AmbiTab's fallback STOP; "retry": one
corrective notice, then STOP; "unparsed": report the output to the server, whose protocol
decides; default: "stop" under AMBITAB, "unparsed" under any other protocol), reset defaults under
``reset`` (e.g. ``{reward: question_f1}``, ``{protocol: bird-c, patience: 3}``), ``max_instances``
(16384) and ``state_ttl`` (3600 s; 0: none). Per-row ``interaction_kwargs`` (from ``extra_info``)
pick the episode: ``task_id``, ``seed``, ``corpus``, ``split``, ``protocol``, ``patience`` …
(``name`` selects the interaction and is ignored). Every turn of the user's side of a step (the
oracle's reply, TIDE's drift turn, environment notices and feedback, a BIRD_C follow-up's request
once phase 1 passes) is the user message verl appends (response_mask 0); agent turns (the
policy's, and TIDE_P's pre-filled question, which only the reset's prompt holds, as an assistant
message of the prompt: never trained on) never are.

verl removed ``verl.interactions`` after 0.7.1 (0.8.0 and 0.9.x on PyPI do not ship it); this
module needs verl 0.7.x. Importing it imports verl; importing ``avtgym.trainers`` does not.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import os
import time
import weakref
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping
from uuid import uuid4

from avtgym import AGENT_ROLES, Action, AsyncClient, AvtgymError, Episode, parse_action
from avtgym.chat import no_reply_text, prompt_messages, user_turn_text
from avtgym.trainers import (  # noqa: F401 (DEFAULT_SYSTEM_PROMPT: importable from here, as before)
    DEFAULT_SYSTEM_PROMPT,
    PROTOCOL_PROMPT,
    check_on_malformed,
    malformed_policy,
    resolve_system_prompt,
    training_reset,
)

try:
    from verl.experimental.agent_loop.agent_loop import register as _register_agent_loop
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.interactions.base import BaseInteraction
    from verl.trainer.ppo import core_algos as _core_algos
except ImportError as e:  # pragma: no cover - depends on the installed verl
    raise ImportError(
        "avtgym.trainers.verl needs verl.interactions.base.BaseInteraction and verl's agent loop, "
        "shipped by verl<=0.7.1 (pip install 'verl==0.7.1' cachetools); the installed verl lacks "
        f"them or verl is not installed ({e})"
    ) from e

__all__ = [
    "ADV_ESTIMATOR",
    "AGENT_NAME",
    "AvtgymAgentLoop",
    "AvtgymInteraction",
    "RESET_KEYS",
    "compute_avtgym_grpo_advantage",
    "compute_score",
    "verl_row",
    "write_verl_configs",
]

log = logging.getLogger(__name__)

AGENT_NAME = "avtgym_agent"
ADV_ESTIMATOR = "avtgym_grpo"
# verl/__init__.py imports the modules this environment variable lists (comma-separated).
EXTERNAL_MODULES_ENV = "VERL_USE_EXTERNAL_MODULES"
RESET_KEYS = ("task_id", "corpus", "split", "seed", "reward", "solver", "extra_questions",
              "zero_ambiguity_budget", "oracle", "protocol", "patience", "strict_credit")
MALFORMED_NOTICE = ("Your last message was not a valid action ({error}). Answer with exactly one "
                    'JSON object: {{"type": "clarification", "question": "..."}} or {{"type": "done"}}.')
DONE_TEXT = "The episode is over."
NO_REPLY = "(no reply)"
DROPPED = float("nan")

# Shared AsyncClients: event loop -> (target, timeout, retries) -> client.
_CLIENTS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, AsyncClient]]" = \
    weakref.WeakKeyDictionary()

# The trajectory the current asyncio task is running, set by AvtgymAgentLoop.run so that the
# interaction can tell it which request id verl gave the trajectory (verl keeps it internal).
_TRAJECTORY: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "avtgym_verl_trajectory", default=None)


def _is_dropped(score: float | None) -> bool:
    return score is None or (isinstance(score, float) and math.isnan(score))


@dataclass
class _Instance:
    """One trajectory's state. episode is None once the episode is finished: only the summary
    (final score and metadata) is kept then."""

    episode: Episode | None
    touched: float
    malformed: int = 0
    error: str = ""
    final: float | None = None  # set when finished: the reward, or NaN (dropped)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.episode is None


class AvtgymInteraction(BaseInteraction):
    """One avtgym episode per verl trajectory (instance id = verl's request id)."""

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.target: str = config.get("target", "127.0.0.1:50051")
        self.timeout: float = float(config.get("timeout", 30.0))
        self.retries: int = int(config.get("retries", 5))
        self.on_malformed: str | None = check_on_malformed(config.get("on_malformed"))
        self.reset_defaults: dict[str, Any] = dict(config.get("reset") or {})
        self.max_instances: int = int(config.get("max_instances", 16384))
        self.state_ttl: float = float(config.get("state_ttl", 3600.0) or 0.0)
        if self.max_instances < 1:
            raise ValueError("max_instances must be at least 1")
        self._client: AsyncClient | None = config.get("client")  # tests may inject one
        self._clock: Callable[[], float] = config.get("clock") or time.monotonic
        self._instances: OrderedDict[str, _Instance] = OrderedDict()

    @property
    def client(self) -> AsyncClient:
        """The gRPC client: injected, or shared by every interaction of this process and event loop
        with the same target (verl 0.7.1 builds a new interaction for every trajectory; one channel
        per trajectory would be thousands of connections a step)."""
        if self._client is not None:
            return self._client
        loop = asyncio.get_running_loop()
        per_loop = _CLIENTS.setdefault(loop, {})
        key = (self.target, self.timeout, self.retries)
        if key not in per_loop:
            per_loop[key] = AsyncClient(self.target, timeout=self.timeout, retries=self.retries)
        return per_loop[key]

    # state ----------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Instances held (running or finished); evicted and finalized ones are gone."""
        return len(self._instances)

    @property
    def live_instances(self) -> int:
        """Instances that still hold an episode (token, task view, history)."""
        return sum(1 for i in self._instances.values() if not i.finished)

    def episode(self, instance_id: str) -> Episode:
        """The running episode of an instance (KeyError once it is finished, evicted or finalized)."""
        inst = self._instances[instance_id]
        if inst.episode is None:
            raise KeyError(f"{instance_id}: the episode is finished; its state was freed")
        return inst.episode

    def _sweep(self) -> None:
        now = self._clock()
        while self._instances:
            iid, inst = next(iter(self._instances.items()))
            expired = self.state_ttl > 0 and now - inst.touched > self.state_ttl
            if not expired and len(self._instances) <= self.max_instances:
                break
            del self._instances[iid]
            if not inst.finished:
                log.warning("avtgym: dropped the state of unfinished trajectory %s (%s)", iid,
                            "idle past state_ttl" if expired else "past max_instances")

    def _get(self, instance_id: str | None) -> _Instance | None:
        inst = self._instances.get(instance_id or "")
        if inst is not None:
            inst.touched = self._clock()
            self._instances.move_to_end(instance_id)
        self._sweep()
        return inst

    def _put(self, instance_id: str, inst: _Instance) -> None:
        self._instances[instance_id] = inst
        self._instances.move_to_end(instance_id)
        self._sweep()

    @staticmethod
    def _summary(ep: Episode, inst: _Instance) -> dict[str, Any]:
        return {
            "episode_id": ep.episode_id,
            "status": ep.status,
            "done": ep.done,
            "questions_asked": ep.questions_asked,
            "protocol": ep.protocol,
            "subtask": ep.subtask,
            "reward_components": dict(ep.reward.components) if ep.reward is not None else {},
            "malformed": inst.malformed,
            "error": inst.error,
            "dropped": False,
        }

    def _finish(self, inst: _Instance, ep: Episode | None, error: str = "") -> float:
        """Record the final score and free the episode: the reward, or NaN (dropped) when the
        episode ended in ERROR, a call failed, or there is no reward."""
        if error:
            inst.error = error
        if ep is not None:
            inst.meta = self._summary(ep, inst)
        scored = (ep is not None and not inst.error and ep.done and ep.status != "error"
                  and ep.reward is not None)
        inst.final = float(ep.reward.value) if scored else DROPPED
        inst.meta.update(error=inst.error, malformed=inst.malformed, dropped=not scored, done=True)
        if not scored:
            log.warning("avtgym: dropped episode %s: %s", inst.meta.get("episode_id", "?"),
                        inst.error or f"status {inst.meta.get('status', '?')}")
        inst.episode = None
        return inst.final

    # BaseInteraction ------------------------------------------------------------------------

    async def start_interaction(self, instance_id: str | None = None, **kwargs: Any) -> str:
        if instance_id is None:
            instance_id = str(uuid4())
        reset = training_reset(self.reset_defaults, {k: kwargs[k] for k in RESET_KEYS if kwargs.get(k) is not None})
        slot = _TRAJECTORY.get()
        if slot is not None:
            slot.update(interaction=self, instance_id=instance_id)
        inst = _Instance(None, self._clock())
        try:
            inst.episode = await self.client.reset(**reset)
            inst.meta = self._summary(inst.episode, inst)
        except AvtgymError as e:  # the trajectory runs on, but is dropped
            inst.meta = {"episode_id": "", "status": "error", "questions_asked": 0}
            self._finish(inst, None, error=f"reset {reset}: {e}")
        self._put(instance_id, inst)
        return instance_id

    async def generate_response(self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
                                ) -> tuple[bool, str, float | None, dict[str, Any]]:
        inst = self._get(instance_id)
        if inst is None:  # never started, finalized or evicted: nothing to score
            return True, DONE_TEXT, DROPPED, {"error": f"no state for {instance_id}", "dropped": True}
        if inst.finished:
            return True, DONE_TEXT, inst.final, dict(inst.meta)
        ep: Episode = inst.episode  # type: ignore[assignment]
        parsed = parse_action(_last_assistant(messages))
        action = parsed.action
        if not parsed.ok:
            inst.malformed += 1
            policy = malformed_policy(self.on_malformed, ep.protocol)
            if policy == "retry" and inst.malformed == 1:
                inst.meta = self._summary(ep, inst)
                return False, MALFORMED_NOTICE.format(error=parsed.error), None, dict(inst.meta)
            # "unparsed": the server's protocol decides; else AmbiTab's fallback STOP.
            action = parsed.or_unparsed() if policy == "unparsed" else Action.stop()
        try:
            res = await self.client.step(ep, action)
        except AvtgymError as e:  # failed even after the client's retries: drop the trajectory
            return True, DONE_TEXT, self._finish(inst, ep, error=str(e)), dict(inst.meta)
        inst.episode = ep = res.episode
        # The oracle's reply, TIDE's drift and every environment turn (a notice, feedback, a
        # released follow-up's request): verl appends it as a user message, never trained on.
        # Agent turns (the policy's own, a pre-filled question) are never part of it.
        # Each turn's text as the shared prompt (avtgym.chat.prompt_messages) shows it.
        reply = "\n\n".join(x for x in (user_turn_text(t) for t in res.new_turns if t.role not in AGENT_ROLES) if x)
        if res.done:
            return True, reply or DONE_TEXT, self._finish(inst, ep), dict(inst.meta)
        inst.meta = self._summary(ep, inst)
        return False, reply or no_reply_text(ep.protocol), None, dict(inst.meta)

    async def calculate_score(self, instance_id: str | None = None, **kwargs: Any) -> float:
        """The final score: the episode's reward, or NaN while it runs and when it was dropped
        (never 0.0 for an environment failure)."""
        inst = self._instances.get(instance_id or "")
        if inst is None or inst.final is None:
            return DROPPED
        return inst.final

    async def finalize_interaction(self, instance_id: str | None = None, **kwargs: Any) -> None:
        if instance_id is not None:
            self._instances.pop(instance_id, None)

    # AvtgymAgentLoop ------------------------------------------------------------------------

    async def settle(self, instance_id: str) -> tuple[float, bool]:
        """End an instance's episode for good: (final score, whether this call ended it). A running
        episode (verl stopped the trajectory first) is stopped now and scored, as the TRL adapter
        does at its length cap."""
        inst = self._get(instance_id)
        if inst is None:
            return DROPPED, True
        if inst.finished:
            return inst.final if inst.final is not None else DROPPED, False
        ep: Episode = inst.episode  # type: ignore[assignment]
        try:
            res = await self.client.step(ep, Action.stop())
        except AvtgymError as e:
            return self._finish(inst, ep, error=str(e)), True
        return self._finish(inst, res.episode), True


def _last_assistant(messages: list[dict[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") == "assistant":
            c = m.get("content", "")
            return c if isinstance(c, str) else "".join(
                b.get("text", "") for b in c if isinstance(b, Mapping))
    return ""


@_register_agent_loop(AGENT_NAME)
class AvtgymAgentLoop(ToolAgentLoop):
    """verl's tool agent loop, then: stop and score an episode verl cut short, zero the
    response_mask of a dropped trajectory, and free the interaction state (see the module doc).
    Rows without an avtgym interaction pass through unchanged."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any):
        slot: dict[str, Any] = {}
        token = _TRAJECTORY.set(slot)
        try:
            out = await super().run(sampling_params, **kwargs)
        finally:
            _TRAJECTORY.reset(token)
        inter: AvtgymInteraction | None = slot.get("interaction")
        if inter is None:
            return out
        iid = slot["instance_id"]
        final, ended_now = await inter.settle(iid)
        scores = out.extra_fields.get("turn_scores")
        if scores is None:
            scores = out.extra_fields["turn_scores"] = []
        if ended_now or not scores:
            scores.append(final)
        inst = inter._instances.get(iid)
        out.extra_fields["avtgym"] = dict(inst.meta) if inst is not None else {"dropped": True}
        if _is_dropped(final):
            out.response_mask = [0] * len(out.response_mask)
        await inter.finalize_interaction(iid)
        return out


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                  **kwargs: Any) -> dict[str, float]:
    """verl reward function for avtgym rows: the episode's reward from the final turn score.

    Returns {"score", "avtgym_dropped"} (the same keys for every row, as verl's reward loop
    needs): a dropped episode (ERROR, a failed call, or never finished) scores 0.0 with
    avtgym_dropped 1.0. The 0.0 is a placeholder (verl needs a number): AvtgymAgentLoop has
    already zeroed the trajectory's response_mask, so it gives no gradient, and the avtgym_grpo
    advantage estimator leaves it out of its group's mean and std (verl's stock grpo would not).
    Rows of other data sources go to verl's default_compute_score."""
    if not str(data_source).startswith("avtgym"):
        from verl.utils.reward_score import default_compute_score

        res = default_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
        score = res["score"] if isinstance(res, dict) else res
        return {"score": float(score), "avtgym_dropped": 0.0}
    scores = [s for s in list((extra_info or {}).get("turn_scores") or []) if s is not None]
    final = float(scores[-1]) if scores else DROPPED
    if math.isnan(final):
        return {"score": 0.0, "avtgym_dropped": 1.0}
    return {"score": final, "avtgym_dropped": 0.0}


def compute_avtgym_grpo_advantage(token_level_rewards: Any, response_mask: Any, index: Any = None,
                                  epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool | None = None,
                                  config: Any = None, **kwargs: Any) -> tuple[Any, Any]:
    """The ``avtgym_grpo`` advantage estimator: verl 0.7.1's GRPO outcome advantage
    (``core_algos.compute_grpo_outcome_advantage``), computed over each group's kept samples only.

    verl's ``ray_trainer.compute_advantage`` calls a registered estimator with
    ``token_level_rewards`` and ``response_mask`` ([batch, response_length]), ``index`` (the
    batch's ``uid``: one group per prompt, ``rollout.n`` samples) and ``config`` (the
    ``algorithm`` config, whose ``norm_adv_by_std_in_grpo`` is read: True divides by the group's
    std, as GRPO; False does not, as Dr.GRPO). A sample is dropped when its ``response_mask`` is
    all 0 (``AvtgymAgentLoop`` zeroes it for an ERROR or failed episode; verl's loss aggregation
    already skips such rows). Per group:

    - dropped samples get advantage 0 and are left out of the group's mean and std;
    - with at least 2 kept samples, a kept sample gets (score - mean) / (std + epsilon) over the
      kept scores (torch.std, unbiased, as verl), or score - mean;
    - a group of one sample (``rollout.n`` = 1) follows verl's singleton convention (mean 0,
      std 1: the advantage is the score itself), so with nothing dropped this estimator equals
      verl's ``grpo`` exactly;
    - a group of several samples with fewer than 2 kept gets advantage 0: one kept sample has no
      baseline left (as in TRL, whose group std of one reward is 0).

    Returns (advantages, returns), both the per-sample advantage times ``response_mask``."""
    import torch

    if index is None:
        raise ValueError(f"{ADV_ESTIMATOR} needs the batch's group index (non_tensor_batch['uid'])")
    if norm_adv_by_std_in_grpo is None:
        norm_adv_by_std_in_grpo = True if config is None else bool(config.get("norm_adv_by_std_in_grpo", True))
    scores = token_level_rewards.sum(dim=-1)
    kept = (response_mask.sum(dim=-1) > 0).tolist()
    groups: dict[Any, list[int]] = defaultdict(list)
    for i in range(scores.shape[0]):
        groups[index[i]].append(i)
    adv = torch.zeros_like(scores)
    with torch.no_grad():
        for members in groups.values():
            keep = [i for i in members if kept[i]]
            if not keep or (len(members) > 1 and len(keep) < 2):
                continue
            if len(members) == 1:
                mean, std = torch.tensor(0.0), torch.tensor(1.0)
            else:
                group = scores[keep]
                mean, std = group.mean(), group.std()
            for i in keep:
                adv[i] = (scores[i] - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else scores[i] - mean
        adv = adv.unsqueeze(-1) * response_mask
    return adv, adv


if _core_algos.ADV_ESTIMATOR_REGISTRY.get(ADV_ESTIMATOR) is None:  # a re-import keeps the first
    _core_algos.register_adv_est(ADV_ESTIMATOR)(compute_avtgym_grpo_advantage)


def verl_row(episode: Episode, *, system_prompt: Any = PROTOCOL_PROMPT, name: str = "avtgym",
             data_source: str = "avtgym", agent_name: str | None = AGENT_NAME,
             **reset_kwargs: Any) -> dict[str, Any]:
    """A verl dataset row (parquet) for the episode that reset(**reset_kwargs) returned: the
    rendered prompt, interaction_kwargs that make AvtgymInteraction start the same episode
    (resets are deterministic for a given task and seed), the agent loop (agent_name; None leaves
    verl's default) and, as ground_truth, the episode id (the score itself comes from the server).
    The prompt is the shared chat prompt (avtgym.chat.prompt_messages), the one the Go LLM
    policies are evaluated with. system_prompt: default PROTOCOL_PROMPT, the shared prompt's
    system message for the episode's protocol; None for none. Pass protocol (and patience) in
    reset_kwargs as given to reset, so that the interaction resets the same episode."""
    messages = prompt_messages(episode, system_prompt)
    kwargs = {"name": name, **{k: v for k, v in reset_kwargs.items() if v is not None}}
    if "protocol" not in kwargs and episode.protocol not in ("", "ambitab"):
        kwargs["protocol"] = episode.protocol
    if "task_id" not in kwargs and episode.task is not None:
        kwargs["task_id"] = episode.task.task_id
    if "seed" not in kwargs:
        kwargs["seed"] = episode.seed
    row: dict[str, Any] = {
        "data_source": data_source,
        "prompt": messages,
        "extra_info": {"interaction_kwargs": kwargs},
        "reward_model": {"style": "rule", "ground_truth": episode.episode_id},
    }
    if agent_name:
        row["agent_name"] = agent_name
    return row


def write_verl_configs(directory: str, target: str = "127.0.0.1:50051", *, name: str = "avtgym",
                       adv_estimator: str | None = ADV_ESTIMATOR, **config: Any) -> list[str]:
    """Write the interaction and agent-loop YAML files into directory and return the Hydra
    overrides that use them with the reward function, e.g.
    ``python -m verl.trainer.main_ppo ... $(overrides)``. config: the interaction's config
    (reset={...}, on_malformed=..., state_ttl=...).

    adv_estimator (default ``avtgym_grpo``) adds ``algorithm.adv_estimator=avtgym_grpo`` and
    ``++ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=avtgym.trainers.verl``:
    verl computes advantages in its driver (the TaskRunner actor), where only that variable
    (read by ``verl/__init__.py``) imports this module and so registers the estimator. None
    leaves both out (choose verl's own estimator yourself; dropped samples then enter its group
    statistics with their placeholder score)."""
    import json

    os.makedirs(directory, exist_ok=True)
    inter = os.path.abspath(os.path.join(directory, "avtgym_interaction.yaml"))
    agent = os.path.abspath(os.path.join(directory, "avtgym_agent_loop.yaml"))
    cfg = json.dumps({"target": target, **config})  # JSON is YAML
    with open(inter, "w") as f:
        f.write(f"interaction:\n  - name: {name}\n    class_name: avtgym.trainers.verl.AvtgymInteraction\n"
                f"    config: {cfg}\n")
    with open(agent, "w") as f:
        f.write(f"- name: {AGENT_NAME}\n  _target_: avtgym.trainers.verl.AvtgymAgentLoop\n")
    overrides = [
        "actor_rollout_ref.rollout.mode=async",
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={inter}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agent}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
        "data.return_raw_chat=True",
        "reward.custom_reward_function.path=pkg://avtgym.trainers.verl",
        "reward.custom_reward_function.name=compute_score",
    ]
    if adv_estimator:
        overrides += [
            f"algorithm.adv_estimator={adv_estimator}",
            f"++ray_kwargs.ray_init.runtime_env.env_vars.{EXTERNAL_MODULES_ENV}=avtgym.trainers.verl",
        ]
    return overrides

"""TRL adapter: multi-turn asking episodes for ``trl.GRPOTrainer`` (checked against trl 1.16.0).

Two hooks of TRL are supported, each used only through its documented contract:

1. ``rollout_func`` (the main path). ``GRPOTrainer(rollout_func=AvtgymRollout(...),
   reward_funcs=[avtgym_reward], ...)``. The contract (``GRPOTrainer``'s docstring and its
   ``_generate``, trl 1.16.0): TRL calls ``rollout_func(prompts, trainer)`` with this process's
   slice of prompts and reads back a dict with ``prompt_ids``, ``completion_ids`` and ``logprobs``
   (one entry per prompt entry), an optional ``env_mask`` (used as its ``tool_mask``: the loss
   mask is ``completion_mask * env_mask``), and forwards every other key to the reward functions.
   TRL's sampler repeats each dataset row ``num_generations`` times in a row; each run of identical
   prompts becomes one GRPO group (``reset_group``: same task, same hidden interpretation). For
   every episode the adapter generates a turn, maps the text to an action with
   ``avtgym.parse_action``, steps all live episodes in one ``StepBatch``, appends the oracle's reply
   (and any environment turn: a notice, feedback, a BIRD_C follow-up's request) as a user turn,
   and repeats until the episodes are done. ``protocol`` and ``patience`` are reset arguments like
   the others (``reset_kwargs={"protocol": "bird-c"}`` or per prompt). ``env_mask`` is 1 exactly on the
   tokens the policy generated and 0 on the oracle's and environment's tokens (and on chat-template
   glue around them), so oracle text is never trained on. ``avtgym_reward`` (and the other
   ``avtgym_*`` fields) reach the reward functions; ``avtgym_reward`` returns the episode's reward,
   or ``None`` for an episode that ended in ``ERROR``, whose reset or step failed, or that never
   finished: TRL 1.16 leaves a completion for which every reward function returned None out of
   its group's baseline and gives it advantage 0 (dropped, not scored 0).

   Generation uses no private TRL API. ``generate_fn(prompt_ids, max_new_tokens) ->
   (completion_ids, logprobs or None)`` is called once per turn for all live episodes. By default
   it is ``VLLMServerGenerate`` when the trainer is configured for vLLM server mode
   (``use_vllm=True, vllm_mode="server"``: TRL syncs the weights to the server before it calls
   ``rollout_func``), and ``TransformersGenerate`` otherwise (the trainer's model, unwrapped with
   ``trl.models.unwrap_model_for_generation``, sampling with the ``GRPOConfig`` settings). vLLM
   colocate mode has no public generation API: pass ``generate_fn``.

   The dataset's ``prompt`` column names the episode, not the text the model sees: a JSON object
   of reset arguments (``task_prompt(task_id="shop-001", seed=3)``), or a bare task id. The model's
   real prompt is rendered from the reset episode (system prompt + the request turn; under
   TIDE_P also the pre-filled question, as an assistant message of the prompt, and its answer:
   prompt tokens, never trainable).

2. ``environment_factory``: ``AvtgymToolEnv`` exposes ``ask_user`` and ``finish_asking`` as tools
   and ``get_reward``; TRL masks tool results (the oracle's replies) with its own ``tool_mask``.
   This needs a model whose chat template supports tool calling.

Nothing here imports torch or trl at module import time.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from avtgym import AGENT_ROLES, Action, AvtgymError, Client, Episode, parse_action
from avtgym.chat import no_reply_text, prompt_messages, user_turn_text
from avtgym.records import episode_record, write_records
from avtgym.trainers import (  # noqa: F401 (DEFAULT_SYSTEM_PROMPT: importable from here, as before)
    DEFAULT_SYSTEM_PROMPT,
    PROTOCOL_PROMPT,
    check_on_malformed,
    malformed_policy,
    resolve_system_prompt,
    training_reset,
)

__all__ = [
    "AvtgymRollout",
    "AvtgymSQLToolEnv",
    "AvtgymToolEnv",
    "avtgym_reward",
    "reset_spec",
    "task_prompt",
    "build_dataset",
    "RESET_KEYS",
    "TransformersGenerate",
    "VLLMServerGenerate",
    "default_generate_fn",
]

# Reset arguments a prompt spec (or a dataset row, for AvtgymToolEnv) may carry.
RESET_KEYS = ("task_id", "corpus", "split", "seed", "reward", "solver", "extra_questions",
              "zero_ambiguity_budget", "oracle", "protocol", "patience", "strict_credit")

# generate_fn(prompt_ids, max_new_tokens) -> (completion_ids, per-token logprobs or None): one
# completion per prompt, each at most max_new_tokens long (longer ones are cut).
GenerateFn = Callable[[list[list[int]], int], "tuple[list[list[int]], list[list[float]] | None]"]

MALFORMED_NOTICE = ("Your last message was not a valid action ({error}). Answer with exactly one "
                    'JSON object: {{"type": "clarification", "question": "..."}} or {{"type": "done"}}.')
NO_REPLY = "(no reply)"
DEFAULT_TURN_TOKENS = 512  # a turn's cap when neither max_completion_length nor max_turn_tokens is set


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        content = prompt[-1].get("content", "") if isinstance(prompt[-1], Mapping) else prompt[-1]
        if isinstance(content, list):  # typed content blocks
            return "".join(b.get("text", "") for b in content if isinstance(b, Mapping))
        return str(content)
    raise ValueError(f"cannot read a task spec from prompt {prompt!r}")


def reset_spec(prompt: Any) -> dict[str, Any]:
    """The reset arguments a dataset prompt stands for: a JSON object (keys from RESET_KEYS) or a
    bare task id. Conversational prompts use their last message."""
    text = _prompt_text(prompt).strip()
    if text.startswith("{"):
        spec = json.loads(text)
        unknown = set(spec) - set(RESET_KEYS)
        if unknown:
            raise ValueError(f"unknown reset keys {sorted(unknown)} in prompt {text!r}")
        return dict(spec)
    if not text:
        raise ValueError("empty prompt: want a task id or a JSON object of reset arguments")
    return {"task_id": text}


def task_prompt(**reset_kwargs: Any) -> str:
    """The dataset prompt naming one episode, e.g. task_prompt(task_id="shop-001", seed=3)."""
    unknown = set(reset_kwargs) - set(RESET_KEYS)
    if unknown:
        raise ValueError(f"unknown reset keys {sorted(unknown)}")
    return json.dumps({k: v for k, v in reset_kwargs.items() if v is not None}, sort_keys=True)


def build_dataset(specs: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Rows {"prompt": task_prompt(**spec)} for datasets.Dataset.from_list."""
    return [{"prompt": task_prompt(**dict(s))} for s in specs]


def avtgym_reward(prompts: Any = None, completions: Any = None, avtgym_reward: Sequence[Any] | None = None,
                  **kwargs: Any) -> list[float | None]:
    """TRL reward function: the avtgym episode reward that AvtgymRollout put in ``avtgym_reward``
    (None, which TRL ignores, for episodes that errored or did not finish)."""
    if avtgym_reward is None:
        raise ValueError("no avtgym_reward field: use avtgym.trainers.trl.AvtgymRollout as rollout_func")
    return [None if r is None else float(r) for r in avtgym_reward]


@dataclass
class _Traj:
    episode: Episode | None
    messages: list[dict[str, Any]]
    prompt_ids: list[int] = field(default_factory=list)
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    decisions: int = 0
    malformed: int = 0
    error: str | None = None
    active: bool = True
    force_stop: bool = False
    turn_start: int = 0  # where the current policy turn begins in completion_ids


class _Chat:
    """Chat-template rendering and tokenization for one tokenizer."""

    def __init__(self, tokenizer: Any, template_kwargs: Mapping[str, Any] | None):
        self.tok = getattr(tokenizer, "tokenizer", tokenizer)  # processors wrap a tokenizer
        self.kw = dict(template_kwargs or {})

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False,
                                            add_generation_prompt=add_generation_prompt, **self.kw)

    def encode(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int], skip_special_tokens: bool) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def filler_id(self) -> int:
        for name in ("eos_token_id", "pad_token_id"):
            v = getattr(self.tok, name, None)
            if isinstance(v, int):
                return v
        return 0


class AvtgymRollout:
    """A ``rollout_func`` for ``trl.GRPOTrainer`` that plays avtgym asking episodes.

    target / client: the avtgym server (a Client is created lazily from target).
    system_prompt: the system message of every episode (None: none; default PROTOCOL_PROMPT: the
        shared prompt's, avtgym.chat.chat_system_prompt of the episode's protocol and task).
        Episodes start from the shared chat prompt (avtgym.chat.prompt_messages): the one the Go
        LLM policies are evaluated with.
    action_format: how the prompt writes the agent's past turns (None: the protocol's, as the
        shared prompt does: AmbiTab's JSON, BIRD-Interact's agentic grammar, TIDE's JSON).
    reset_kwargs: defaults for every reset (e.g. {"reward": "question_f1"}, {"protocol": "bird-c",
        "patience": 3}); the prompt's spec overrides them.
    on_malformed: what a malformed turn does: "stop" (AmbiTab's fallback: it ends asking with
        STOP), "retry" (one corrective environment notice per episode, then STOP) or "unparsed"
        (reported to the server, Action.unparsed: the protocol's rule applies; BIRD_C spends a
        turn). Default None: "stop" under AMBITAB, "unparsed" under any other protocol.
    max_decisions: a safety cap on policy turns per episode (the server's budget ends episodes
        earlier).
    max_completion_length: cap on completion tokens (policy + environment); default: the
        trainer's. An episode that reaches it is stopped (STOP) and its completion cut.
    generate_fn: (token-id prompts, max_new_tokens) -> (completions, logprobs or None); default:
        ``default_generate_fn(trainer)`` (vLLM server mode, else transformers generate()).
    max_turn_tokens: cap on the tokens of one policy turn (default: the completion budget left).
    response_prefix: text every policy turn starts with, e.g. '{"type": "' for AmbiTab's JSON
        actions: its tokens are put after the template's assistant header as context (env_mask 0,
        never trained on), the model continues it, and the turn's text is prefix + continuation.
        The training-side counterpart of the JSON mode that avtgym's Go LLM asker asks its
        endpoint for: a small model that answers the request in prose instead of an action is
        held to the action's format (examples/train_asker measures the difference). Default
        None: no prefix.

    After each call, ``last_episodes`` holds the final Episode of each prompt entry, in order
    (None where the reset failed): the transcript (``turns``), the reward and its components and,
    when the reset asked for it, the privileged data, for logging and evaluation
    (examples/train_asker reads the questions and the precision and recall from it).
    """

    def __init__(self, target: str = "127.0.0.1:50051", *, client: Client | None = None,
                 system_prompt: Any = PROTOCOL_PROMPT, action_format: str | None = None,
                 reset_kwargs: Mapping[str, Any] | None = None, on_malformed: str | None = None,
                 max_decisions: int = 32, max_completion_length: int | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 generate_fn: GenerateFn | None = None, timeout: float = 30.0,
                 max_turn_tokens: int | None = None, response_prefix: str | None = None,
                 tags: Mapping[str, str] | None = None, records_out: "str | os.PathLike[str] | None" = None):
        check_on_malformed(on_malformed)
        self.target = target
        self._client = client
        self.timeout = timeout
        self.system_prompt = system_prompt
        self.action_format = action_format
        self.reset_kwargs = dict(reset_kwargs or {})
        self.on_malformed = on_malformed
        self.max_decisions = max_decisions
        self.max_completion_length = max_completion_length
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.generate_fn = generate_fn
        self.max_turn_tokens = max_turn_tokens
        self.response_prefix = response_prefix or None
        # Tags sealed into every episode (run id, model revision, ...); the trainer's step and
        # the group are added per rollout ("trainer/step", "group"). records_out: append every
        # finished episode's record there (avtgym.records; `avtgym view` reads the file).
        self.tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self.records_out = records_out
        self.__name__ = "avtgym_rollout"
        self._default_gen: tuple[Any, GenerateFn] | None = None
        self.last_episodes: list[Episode | None] = []

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.target, timeout=self.timeout)
        return self._client

    # TRL entry point -------------------------------------------------------------------------

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """The rollout_func entry point: TRL passes its per-process prompts and the trainer, of
        which only public attributes are read (processing_class, args, and for the default
        generation model_wrapped, accelerator)."""
        gen = self.generate_fn
        if gen is None:
            if self._default_gen is None or self._default_gen[0] is not trainer:
                self._default_gen = (trainer, default_generate_fn(trainer))
            gen = self._default_gen[1]
        args = getattr(trainer, "args", None)
        maxlen = self.max_completion_length or getattr(args, "max_completion_length", None)
        step = getattr(getattr(trainer, "state", None), "global_step", None)
        return self.rollout(prompts, trainer.processing_class, gen, maxlen, seed_salt=step)

    # The loop, usable without a trainer ------------------------------------------------------

    def rollout(self, prompts: list[Any], tokenizer: Any, generate_fn: GenerateFn,
                max_completion_length: int | None = None, seed_salt: Any = None) -> dict[str, Any]:
        """Play one episode per prompt entry and return TRL's rollout dict. seed_salt: when set, a
        prompt without a seed gets one derived from the prompt and the salt (the trainer passes
        its global step), so that every process that holds part of a GRPO group resets the same
        task and interpretation (TRL spreads a group's copies over processes)."""
        chat = _Chat(tokenizer, self.chat_template_kwargs)
        trajs = self._reset_all(prompts, chat, seed_salt)
        while True:
            live = [t for t in trajs if t.active]
            if not live:
                break
            gen_live = [t for t in live if not t.force_stop]
            if self.response_prefix:
                prefix_ids = chat.encode(self.response_prefix)
                for t in gen_live:
                    if len(t.completion_ids) == t.turn_start:  # the turn has not begun
                        t.completion_ids += prefix_ids
                        t.env_mask += [0] * len(prefix_ids)
                        if t.logprobs is not None:
                            t.logprobs += [0.0] * len(prefix_ids)
            if gen_live:
                budget = [self._turn_budget(t, max_completion_length) for t in gen_live]
                outs, lps = generate_fn([t.prompt_ids + t.completion_ids for t in gen_live], max(budget))
                for i, t in enumerate(gen_live):
                    ids = [int(x) for x in outs[i]][:budget[i]]
                    t.completion_ids += ids
                    t.env_mask += [1] * len(ids)
                    if t.logprobs is not None and lps is not None:
                        t.logprobs += [float(x) for x in lps[i]][:len(ids)]
                    else:
                        t.logprobs = None
            items: list[tuple[_Traj, Action]] = []
            for t in live:
                if t.force_stop:
                    items.append((t, Action.stop()))
                    continue
                text = chat.decode(t.completion_ids[t.turn_start:], skip_special_tokens=True)
                t.messages.append({"role": "assistant", "content": text})
                t.decisions += 1
                parsed = parse_action(text)
                action = parsed.action
                if not parsed.ok:
                    t.malformed += 1
                    policy = malformed_policy(self.on_malformed, t.episode.protocol)
                    if policy == "retry" and t.malformed == 1 and not self._full(t, max_completion_length):
                        self._append_env(t, chat, [MALFORMED_NOTICE.format(error=parsed.error)],
                                         max_completion_length)
                        continue
                    # "unparsed": the server's protocol decides (its notice comes back as an
                    # environment turn); else AmbiTab's fallback STOP.
                    action = parsed.or_unparsed() if policy == "unparsed" else Action.stop()
                if (t.decisions >= self.max_decisions and action is not None
                        and (action.kind == "ask" or action.is_tool)):
                    action = Action.stop()
                items.append((t, action))
            if not items:
                continue
            results = self.client.step_batch([(t.episode, a) for t, a in items])
            for (t, a), r in zip(items, results):
                if isinstance(r, AvtgymError):
                    t.error = str(r)
                    t.active = False
                    continue
                t.episode = r.episode
                if r.done or t.force_stop:
                    t.active = False
                    continue
                # Every turn of the user's side of the step (the oracle's reply, TIDE's drift,
                # environment notices and feedback, a BIRD_C follow-up's request) is one user
                # message, never trainable; agent turns (the policy's, a pre-filled question)
                # never are.
                # Each turn's text as the shared prompt shows it (a follow-up as "New request: ...").
                replies = [x for x in (user_turn_text(y) for y in r.new_turns if y.role not in AGENT_ROLES) if x]
                self._append_env(t, chat, replies or [no_reply_text(t.episode.protocol)], max_completion_length)
        self.last_episodes = [t.episode for t in trajs]
        if self.records_out is not None:
            write_records(self.records_out, [episode_record(t.episode) for t in trajs if t.episode is not None])
        return self._output(trajs, chat, max_completion_length)

    # helpers ---------------------------------------------------------------------------------

    def _reset_all(self, prompts: list[Any], chat: _Chat, seed_salt: Any = None) -> list[_Traj]:
        trajs: list[_Traj] = []
        i = 0
        while i < len(prompts):
            j = i
            while j < len(prompts) and prompts[j] == prompts[i]:
                j += 1
            kwargs = training_reset(self.reset_kwargs, reset_spec(prompts[i]))
            if kwargs.get("seed") is None and seed_salt is not None:
                kwargs["seed"] = zlib.crc32(f"{_prompt_text(prompts[i])}\x00{seed_salt}".encode()) & 0x7FFFFFFF
            tags = {**self.tags, **dict(kwargs.get("tags") or {})}
            if seed_salt is not None:
                # The same in every process that holds part of the group: step and seed.
                tags["trainer/step"] = str(seed_salt)
                task = zlib.crc32(str(kwargs.get("task_id") or "").encode())
                tags["group"] = f"{seed_salt}:{kwargs.get('seed')}:{task:08x}"
            kwargs["tags"] = tags or None
            try:
                eps: list[Any] = (self.client.reset_group(j - i, **kwargs) if j - i > 1
                                  else [self.client.reset(**kwargs)])
            except AvtgymError as e:
                eps = [e] * (j - i)
            for ep in eps:
                trajs.append(self._start(ep, chat))
            i = j
        return trajs

    def _start(self, ep: Episode | AvtgymError, chat: _Chat) -> _Traj:
        if isinstance(ep, AvtgymError):
            t = _Traj(None, [], error=str(ep), active=False)
            return t
        messages = prompt_messages(ep, self.system_prompt, self.action_format)
        t = _Traj(ep, messages, prompt_ids=chat.encode(chat.render(messages, True)))
        if ep.done:
            t.active = False
        return t

    def _turn_budget(self, t: _Traj, maxlen: int | None) -> int:
        caps = [c for c in (self.max_turn_tokens,
                            None if maxlen is None else maxlen - len(t.completion_ids)) if c is not None]
        return max(1, min(caps)) if caps else DEFAULT_TURN_TOKENS

    @staticmethod
    def _full(t: _Traj, maxlen: int | None) -> bool:
        return maxlen is not None and len(t.completion_ids) >= maxlen

    def _append_env(self, t: _Traj, chat: _Chat, texts: list[str], maxlen: int | None) -> None:
        """Append the environment's user turn (non-trainable: env_mask 0) and the template's
        generation prompt for the next assistant turn."""
        before = t.messages
        after = before + [{"role": "user", "content": "\n\n".join(texts)}]
        full = chat.render(after, True)
        sofar = chat.decode(t.prompt_ids + t.completion_ids, skip_special_tokens=False)
        if full.startswith(sofar):
            delta = full[len(sofar):]
        else:
            rendered_before = chat.render(before, False)
            if full.startswith(rendered_before):
                delta = full[len(rendered_before):]
            else:  # template rewrites history: render the new turn alone
                delta = chat.render(after[-1:], True)
        ids = chat.encode(delta)
        t.messages = after
        t.completion_ids += ids
        t.env_mask += [0] * len(ids)
        if t.logprobs is not None:
            t.logprobs += [0.0] * len(ids)
        t.turn_start = len(t.completion_ids)
        if self._full(t, maxlen):
            t.force_stop = True

    def _output(self, trajs: list[_Traj], chat: _Chat, maxlen: int | None) -> dict[str, Any]:
        out: dict[str, Any] = {k: [] for k in ("prompt_ids", "completion_ids", "env_mask", "avtgym_reward",
                                               "avtgym_status", "avtgym_episode_id", "avtgym_questions",
                                               "avtgym_malformed", "avtgym_error", "avtgym_subtask")}
        any_logprobs = all(t.logprobs is not None for t in trajs)
        logprobs: list[list[float]] = []
        for t in trajs:
            comp, mask, lp = t.completion_ids, t.env_mask, t.logprobs or []
            if maxlen is not None:
                comp, mask, lp = comp[:maxlen], mask[:maxlen], lp[:maxlen]
            if not comp:  # TRL needs at least one token; it is not trainable
                comp, mask, lp = [chat.filler_id()], [0], [0.0]
            prompt = t.prompt_ids or [chat.filler_id()]
            ep = t.episode
            reward = None
            if ep is not None and ep.done and ep.status != "error" and ep.reward is not None and t.error is None:
                reward = float(ep.reward.value)
            out["prompt_ids"].append(list(prompt))
            out["completion_ids"].append(list(comp))
            out["env_mask"].append(list(mask))
            logprobs.append(list(lp))
            out["avtgym_reward"].append(reward)
            out["avtgym_status"].append(ep.status if ep is not None else "error")
            out["avtgym_episode_id"].append(ep.episode_id if ep is not None else "")
            out["avtgym_questions"].append(ep.questions_asked if ep is not None else 0)
            out["avtgym_malformed"].append(t.malformed)
            out["avtgym_error"].append(t.error or "")
            out["avtgym_subtask"].append(ep.subtask if ep is not None else 0)
        out["logprobs"] = logprobs if any_logprobs else None
        return out


def _sampling(args: Any) -> dict[str, Any]:
    """The sampling settings of a GRPOConfig (public fields), with TRL's defaults for absent ones."""
    kw = getattr(args, "generation_kwargs", None)
    if isinstance(kw, str):  # GRPOConfig accepts a JSON string from the command line
        kw = json.loads(kw)
    return {
        "temperature": float(getattr(args, "temperature", 1.0)),
        "top_p": float(getattr(args, "top_p", 1.0)),
        "top_k": int(getattr(args, "top_k", None) or 0),
        "min_p": float(getattr(args, "min_p", None) or 0.0),
        "repetition_penalty": float(getattr(args, "repetition_penalty", 1.0)),
        "generation_kwargs": dict(kw or {}),
    }


def _cut_at_eos(ids: Sequence[int], eos: set[int], pad: int | None) -> list[int]:
    out: list[int] = []
    for t in ids:
        t = int(t)
        out.append(t)
        if t in eos:
            return out
    while out and pad is not None and out[-1] == pad and pad not in eos:
        out.pop()
    return out


class TransformersGenerate:
    """generate_fn with the trainer's own model and transformers' ``generate()``: the default when
    the trainer does not use vLLM. Reads only public trainer attributes (``model_wrapped``,
    ``accelerator``, ``processing_class``, ``args``) and unwraps the model with
    ``trl.models.unwrap_model_for_generation`` (DDP, DeepSpeed ZeRO-3 gather), falling back to
    ``accelerator.unwrap_model``. Sampling follows the GRPOConfig (temperature, top_p, top_k, min_p,
    repetition_penalty, generation_kwargs); logprobs are not returned (TRL then recomputes them)."""

    def __init__(self, trainer: Any):
        self.trainer = trainer

    def __call__(self, prompt_ids: list[list[int]], max_new_tokens: int
                 ) -> tuple[list[list[int]], list[list[float]] | None]:
        import contextlib

        import torch
        from transformers import GenerationConfig

        tr = self.trainer
        args = tr.args
        tok = getattr(tr.processing_class, "tokenizer", tr.processing_class)
        eos = {tok.eos_token_id} if isinstance(tok.eos_token_id, int) else set()
        model = getattr(tr, "model_wrapped", None) or tr.model
        base_cfg = getattr(getattr(tr, "model", None), "generation_config", None)
        cfg_eos = getattr(base_cfg, "eos_token_id", None)
        eos |= set(cfg_eos if isinstance(cfg_eos, (list, tuple)) else [cfg_eos] if isinstance(cfg_eos, int) else [])
        pad = tok.pad_token_id if tok.pad_token_id is not None else next(iter(eos), 0)
        sp = _sampling(args)
        gen_cfg = GenerationConfig(
            max_new_tokens=int(max_new_tokens), do_sample=True, pad_token_id=pad, eos_token_id=sorted(eos) or None,
            temperature=sp["temperature"], top_p=sp["top_p"], top_k=sp["top_k"], min_p=sp["min_p"] or None,
            repetition_penalty=sp["repetition_penalty"],
            cache_implementation=getattr(args, "cache_implementation", None), **sp["generation_kwargs"])
        width = max(len(p) for p in prompt_ids)
        ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
        for i, p in enumerate(prompt_ids):
            if p:
                ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
                mask[i, width - len(p):] = 1
        device = tr.accelerator.device
        try:
            from trl.models import unwrap_model_for_generation

            unwrap = unwrap_model_for_generation(
                model, tr.accelerator, gather_deepspeed3_params=getattr(args, "ds3_gather_for_generation", True))
        except ImportError:  # pragma: no cover - older or newer trl
            unwrap = contextlib.nullcontext(tr.accelerator.unwrap_model(model))
        with unwrap as m, torch.no_grad():
            out = m.generate(input_ids=ids.to(device), attention_mask=mask.to(device), generation_config=gen_cfg)
        return [_cut_at_eos(row, eos, pad) for row in out[:, width:].tolist()], None


class VLLMServerGenerate:
    """generate_fn on a vLLM server's OpenAI-compatible ``/v1/completions`` (``trl vllm-serve`` or
    ``vllm serve``), with token-id prompts (``return_token_ids``, as TRL's own VLLMClient asks) and
    the sampled tokens' logprobs. With ``GRPOConfig(use_vllm=True, vllm_mode="server")`` TRL pushes
    the current weights to that server before each ``rollout_func`` call, so it samples from the
    policy being trained; several trainer processes can share one server."""

    def __init__(self, base_url: str, *, model: str | None = None, timeout: float = 600.0,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, min_p: float = 0.0,
                 repetition_penalty: float = 1.0, generation_kwargs: Mapping[str, Any] | None = None):
        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[:-3]
        self.timeout = timeout
        self._model = model
        self.sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k, "min_p": min_p,
                         "repetition_penalty": repetition_penalty, **dict(generation_kwargs or {})}

    @classmethod
    def from_args(cls, args: Any) -> "VLLMServerGenerate":
        """From a GRPOConfig in vLLM server mode (vllm_server_base_url, or host and port)."""
        base = getattr(args, "vllm_server_base_url", None) or \
            f"http://{getattr(args, 'vllm_server_host', '127.0.0.1')}:{getattr(args, 'vllm_server_port', 8000)}"
        sp = _sampling(args)
        kw = sp.pop("generation_kwargs")
        return cls(base, generation_kwargs=kw, timeout=float(getattr(args, "vllm_server_timeout", 600.0) or 600.0),
                   **sp)

    def _http(self, path: str, body: Mapping[str, Any] | None = None) -> Any:
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data,
                                     headers={"Content-Type": "application/json"} if data else {})
        with urllib.request.urlopen(req, timeout=self.timeout) as resp:
            return json.loads(resp.read())

    @property
    def model(self) -> str:
        if self._model is None:
            self._model = self._http("/v1/models")["data"][0]["id"]
        return self._model

    def __call__(self, prompt_ids: list[list[int]], max_new_tokens: int
                 ) -> tuple[list[list[int]], list[list[float]] | None]:
        body = {"model": self.model, "prompt": [list(map(int, p)) for p in prompt_ids], "n": 1,
                "max_tokens": int(max_new_tokens), "logprobs": 0, "return_token_ids": True,
                "return_tokens_as_token_ids": True, **self.sampling}
        choices = sorted(self._http("/v1/completions", body)["choices"], key=lambda c: c.get("index", 0))
        if len(choices) != len(prompt_ids):
            raise RuntimeError(f"vLLM answered {len(choices)} choices for {len(prompt_ids)} prompts")
        comps = [list(map(int, c["token_ids"])) for c in choices]
        lps: list[list[float]] | None = []
        for c, ids in zip(choices, comps):
            lp = (c.get("logprobs") or {}).get("token_logprobs")
            if lp is None or len(lp) != len(ids):
                lps = None
                break
            lps.append([float(x) for x in lp])
        return comps, lps


def default_generate_fn(trainer: Any) -> GenerateFn:
    """The generate_fn AvtgymRollout uses when none is given: VLLMServerGenerate in vLLM server
    mode, TransformersGenerate without vLLM; vLLM colocate mode needs an explicit generate_fn."""
    args = getattr(trainer, "args", None)
    if getattr(args, "use_vllm", False):
        if getattr(args, "vllm_mode", "server") != "server":
            raise ValueError("AvtgymRollout: TRL's vLLM colocate mode has no public generation API; use "
                             "vllm_mode='server' (VLLMServerGenerate) or pass generate_fn")
        return VLLMServerGenerate.from_args(args)
    return TransformersGenerate(trainer)


def _task_text(ep: Episode) -> str:
    parts = []
    for t in ep.turns:
        if not t.text:
            continue
        if t.role == "prefilled":  # TIDE_P: the question asked in the policy's place, as context
            parts.append(f"(You already asked: {t.text})")
        elif t.role not in AGENT_ROLES:
            parts.append(t.text)
    text = "\n\n".join(parts)
    if ep.protocol in ("tide-f", "tide-p"):
        # Only the total: TIDE's question budget (the turns less one per SQL to come) would tell
        # whether a drift will come.
        turns = f"{ep.budget.total:g}" if ep.budget is not None else "a few"
        return (f"{text}\n\n(You have {turns} turn(s): each question and each SQL submission uses "
                "one; query results are not shown.)")
    if ep.protocol in ("", "ambitab"):
        return f"{text}\n\n(You may ask up to {ep.question_budget} clarifying question(s).)"
    if ep.budget is not None and ep.budget.unit == "coins":
        return (f"{text}\n\n(You have {ep.budget.total:g} coins: each action costs coins; when they "
                "cannot pay for anything else, only a final, free submission is accepted.)")
    turns = f"{ep.budget.total:g}" if ep.budget is not None else "a few"
    return (f"{text}\n\n(You have {turns} turn(s): each question and each SQL submission uses one; "
            "the last one must be SQL.)")


def _env_text(turns: Iterable[Any]) -> str:
    """The user's side of a step (every turn but the agent's: AGENT_ROLES) as one tool result; a
    released follow-up's request (an environment "request" turn) is marked as the user's new
    request; TIDE's drift turn is the user's own words."""
    out = []
    for t in turns:
        if t.role in AGENT_ROLES or not t.text:
            continue
        out.append(f"New request: {t.text}" if t.role == "environment" and t.kind == "request" else t.text)
    return "\n".join(out)


class _ToolEnvBase:
    """An avtgym episode behind TRL's ``environment_factory`` (reset, the tools' step, get_reward)."""

    def __init__(self, target: str = "127.0.0.1:50051", client: Client | None = None, **reset_kwargs: Any):
        self._client = client or Client(target)
        self._defaults = dict(reset_kwargs)
        self._episode: Episode | None = None
        self._error: str | None = None

    def reset(self, **row: Any) -> str:
        kwargs = training_reset(self._defaults, {k: row[k] for k in RESET_KEYS if row.get(k) is not None})
        self._episode, self._error = None, None
        try:
            self._episode = self._client.reset(**kwargs)
        except AvtgymError as e:  # the rollout goes on, unscored (get_reward: None)
            self._error = f"reset {kwargs}: {e}"
            return "\n\n(The environment is unavailable for this task.)"
        return "\n\n" + _task_text(self._episode)

    def _step(self, action: Action) -> str:
        if self._episode is None:
            raise ValueError(self._error or "no episode: reset first")
        if self._episode.done or self._error:
            raise ValueError("the episode is over")
        try:
            res = self._client.step(self._episode, action)
        except AvtgymError as e:  # failed after the client's retries: the episode is dropped
            self._error = str(e)
            raise
        self._episode = res.episode
        text = _env_text(res.new_turns)
        if res.done:
            text = (text + "\n" if text else "") + "The episode is over."
        return text or NO_REPLY

    def get_reward(self) -> float | None:
        """The episode's reward; None (TRL leaves the rollout out of its group's baseline, with
        advantage 0) when the episode ended in ERROR or a call failed."""
        ep = self._episode
        if ep is None or self._error:
            return None
        if not ep.done:  # the model never finished: end the episode now (STOP) so it is scored
            try:
                self._episode = ep = self._client.step(ep, Action.stop()).episode
            except AvtgymError as e:
                self._error = str(e)
                return None
        return float(ep.reward.value) if ep.reward is not None and ep.status != "error" else None


class AvtgymToolEnv(_ToolEnvBase):
    """An ``environment_factory`` environment for ``trl.GRPOTrainer``: one avtgym asking episode
    (AMBITAB) per rollout, played through tools. TRL calls ``reset(**row)`` with the dataset row
    (its keys from RESET_KEYS pick the task), exposes the public methods as tools, masks tool
    results (the oracle's replies) out of the loss, and calls ``get_reward`` once the rollout is
    over.

    Use functools.partial(AvtgymToolEnv, target=..., reward="question_f1") as the factory. For
    BIRD_C, where the policy writes the SQL, use AvtgymSQLToolEnv."""

    def ask_user(self, question: str) -> str:
        """Ask the user one clarifying question about their data request.

        Args:
            question: One clarifying question, as a single sentence.

        Returns:
            The user's reply.
        """
        return self._step(Action.ask(question))

    def finish_asking(self) -> str:
        """Stop asking questions: call this when nothing important is left unclear.

        Returns:
            A notice that asking is over.
        """
        return self._step(Action.stop())


class AvtgymSQLToolEnv(_ToolEnvBase):
    """The ``environment_factory`` environment for protocols where the policy writes the SQL
    (BIRD_C, the default here; also protocol="tide-f" or "tide-p"): tools ``ask_user`` and
    ``submit_sql``. A tool result holds the environment's turns too: the debug-retry message after
    a failed submission, and, once phase 1's SQL passes, the follow-up's request ("New request:
    ..."), to be answered the same way; under TIDE the user's drift after the first SQL.
    get_reward ends an unfinished episode (STOP: the sub-task ends unsolved).

    Use functools.partial(AvtgymSQLToolEnv, target=..., patience=3) as the factory."""

    def __init__(self, target: str = "127.0.0.1:50051", client: Client | None = None, **reset_kwargs: Any):
        super().__init__(target, client, **{"protocol": "bird-c", **reset_kwargs})

    def ask_user(self, question: str) -> str:
        """Ask the user one clarifying question about their data request (uses one turn).

        Args:
            question: One clarifying question, as a single sentence.

        Returns:
            The user's reply.
        """
        return self._step(Action.ask(question))

    def submit_sql(self, sql: str) -> str:
        """Submit the SQL that answers the user's current request (uses one turn, except the one
        retry after a failed submission).

        Args:
            sql: One SQL statement (or a script) answering the current request.

        Returns:
            What happened: the user's follow-up request when the SQL is accepted, a message
            asking for one more try when it failed, or a notice that the episode is over.
        """
        return self._step(Action.submit_sql(sql))

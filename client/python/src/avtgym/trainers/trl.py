"""TRL adapter: multi-turn asking episodes for ``trl.GRPOTrainer``.

Two hooks of the installed TRL (checked against trl 1.16) are supported:

1. ``rollout_func`` (the main path). ``GRPOTrainer(rollout_func=AvtgymRollout(...),
   reward_funcs=[avtgym_reward], ...)``. TRL calls ``rollout(prompts, trainer)`` with the
   per-process prompts (each dataset row already repeated ``num_generations`` times, consecutive).
   Each run of identical prompts becomes one GRPO group (``reset_group``: same task, same hidden
   interpretation). For every episode the adapter generates a turn with the trainer's own
   generation backend (vLLM or transformers, via ``trainer._generate_single_turn``), maps the text
   to an action with ``avtgym.parse_action``, steps all live episodes in one ``StepBatch``, appends
   the oracle's reply as a user turn, and repeats until the episodes are done. It returns
   ``prompt_ids``, ``completion_ids``, ``logprobs`` and ``env_mask``; TRL multiplies its completion
   mask by ``env_mask``, which is 1 exactly on the tokens the policy generated and 0 on the oracle's
   and environment's tokens (and on chat-template glue around them), so oracle text is never
   trained on. ``avtgym_reward`` (and the other ``avtgym_*`` fields) are forwarded by TRL to the
   reward functions; ``avtgym_reward`` returns the episode's reward, or ``None`` (ignored by TRL)
   for an episode that ended in an environment error or never finished.

   The dataset's ``prompt`` column names the episode, not the text the model sees: a JSON object
   of reset arguments (``task_prompt(task_id="shop-001", seed=3)``), or a bare task id. The model's
   real prompt is rendered from the reset episode (system prompt + the request turn).

2. ``environment_factory``: ``AvtgymToolEnv`` exposes ``ask_user`` and ``finish_asking`` as tools
   and ``get_reward``; TRL masks tool results (the oracle's replies) with its own ``tool_mask``.
   This needs a model whose chat template supports tool calling.

Nothing here imports torch or trl at module import time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from avtgym import Action, AvtgymError, Client, Episode, parse_action, render_chat
from avtgym.trainers import DEFAULT_SYSTEM_PROMPT

__all__ = [
    "AvtgymRollout",
    "AvtgymToolEnv",
    "avtgym_reward",
    "reset_spec",
    "task_prompt",
    "build_dataset",
    "RESET_KEYS",
]

# Reset arguments a prompt spec (or a dataset row, for AvtgymToolEnv) may carry.
RESET_KEYS = ("task_id", "corpus", "split", "seed", "reward", "solver", "extra_questions",
              "zero_ambiguity_budget")

GenerateFn = Callable[[list[list[int]]], "tuple[list[list[int]], list[list[float]] | None]"]

MALFORMED_NOTICE = ("Your last message was not a valid action ({error}). Answer with exactly one "
                    'JSON object: {{"type": "clarification", "question": "..."}} or {{"type": "done"}}.')
NO_REPLY = "(no reply)"


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
    system_prompt: the system message of every episode (None: none).
    action_format: how render_chat writes policy turns in prompts ("json" matches the default
        system prompt).
    reset_kwargs: defaults for every reset (e.g. {"reward": "question_f1"}); the prompt's spec
        overrides them.
    on_malformed: "stop" (default; AmbiTab's fallback: a malformed turn ends asking with STOP) or
        "retry" (one corrective environment notice per episode, then STOP).
    max_decisions: a safety cap on policy turns per episode (the server's budget ends episodes
        earlier).
    max_completion_length: cap on completion tokens (policy + environment); default: the
        trainer's. An episode that reaches it is stopped (STOP) and its completion cut.
    generate_fn: list of token-id prompts -> (completions, logprobs or None); default: the
        trainer's own backend (``trainer._generate_single_turn``).
    """

    def __init__(self, target: str = "127.0.0.1:50051", *, client: Client | None = None,
                 system_prompt: str | None = DEFAULT_SYSTEM_PROMPT, action_format: str = "json",
                 reset_kwargs: Mapping[str, Any] | None = None, on_malformed: str = "stop",
                 max_decisions: int = 32, max_completion_length: int | None = None,
                 chat_template_kwargs: Mapping[str, Any] | None = None,
                 generate_fn: GenerateFn | None = None, timeout: float = 30.0):
        if on_malformed not in ("stop", "retry"):
            raise ValueError(f"on_malformed {on_malformed!r}: want stop or retry")
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
        self.__name__ = "avtgym_rollout"

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self.target, timeout=self.timeout)
        return self._client

    # TRL entry point -------------------------------------------------------------------------

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        tokenizer = getattr(trainer, "_tokenizer", None) or trainer.processing_class
        gen = self.generate_fn
        if gen is None:
            def gen(ids: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
                out, lps = trainer._generate_single_turn(ids, None, {}, 1)
                return [list(map(int, o)) for o in out], lps
        maxlen = self.max_completion_length or getattr(trainer, "max_completion_length", None)
        return self.rollout(prompts, tokenizer, gen, maxlen)

    # The loop, usable without a trainer ------------------------------------------------------

    def rollout(self, prompts: list[Any], tokenizer: Any, generate_fn: GenerateFn,
                max_completion_length: int | None = None) -> dict[str, Any]:
        chat = _Chat(tokenizer, self.chat_template_kwargs)
        trajs = self._reset_all(prompts, chat)
        while True:
            live = [t for t in trajs if t.active]
            if not live:
                break
            gen_live = [t for t in live if not t.force_stop]
            if gen_live:
                outs, lps = generate_fn([t.prompt_ids + t.completion_ids for t in gen_live])
                for i, t in enumerate(gen_live):
                    ids = [int(x) for x in outs[i]]
                    t.completion_ids += ids
                    t.env_mask += [1] * len(ids)
                    if t.logprobs is not None and lps is not None:
                        t.logprobs += [float(x) for x in lps[i]]
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
                    if self.on_malformed == "retry" and t.malformed == 1 and not self._full(t, max_completion_length):
                        self._append_env(t, chat, [MALFORMED_NOTICE.format(error=parsed.error)],
                                         max_completion_length)
                        continue
                    action = Action.stop()
                if t.decisions >= self.max_decisions and action is not None and action.kind == "ask":
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
                replies = [x.text for x in r.new_turns if x.role != "policy" and x.text]
                self._append_env(t, chat, replies or [NO_REPLY], max_completion_length)
        return self._output(trajs, chat, max_completion_length)

    # helpers ---------------------------------------------------------------------------------

    def _reset_all(self, prompts: list[Any], chat: _Chat) -> list[_Traj]:
        trajs: list[_Traj] = []
        i = 0
        while i < len(prompts):
            j = i
            while j < len(prompts) and prompts[j] == prompts[i]:
                j += 1
            kwargs = {**self.reset_kwargs, **reset_spec(prompts[i])}
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
        messages, _ = render_chat(ep, self.system_prompt, action_format=self.action_format, merge_user=True)
        t = _Traj(ep, messages, prompt_ids=chat.encode(chat.render(messages, True)))
        if ep.done:
            t.active = False
        return t

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
                                               "avtgym_malformed", "avtgym_error")}
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
        out["logprobs"] = logprobs if any_logprobs else None
        return out


def _task_text(ep: Episode) -> str:
    messages, _ = render_chat(ep, None, merge_user=True)
    text = "\n\n".join(m["content"] for m in messages if m["role"] == "user")
    return f"{text}\n\n(You may ask up to {ep.question_budget} clarifying question(s).)"


class AvtgymToolEnv:
    """An ``environment_factory`` environment for ``trl.GRPOTrainer``: one avtgym episode per
    rollout, played through tools. TRL calls ``reset(**row)`` with the dataset row (its keys from
    RESET_KEYS pick the task), exposes the public methods as tools, masks tool results (the
    oracle's replies) out of the loss, and calls ``get_reward`` once the rollout is over.

    Use functools.partial(AvtgymToolEnv, target=..., reward="question_f1") as the factory."""

    def __init__(self, target: str = "127.0.0.1:50051", client: Client | None = None, **reset_kwargs: Any):
        self._client = client or Client(target)
        self._defaults = dict(reset_kwargs)
        self._episode: Episode | None = None

    def reset(self, **row: Any) -> str:
        kwargs = {**self._defaults, **{k: row[k] for k in RESET_KEYS if row.get(k) is not None}}
        self._episode = self._client.reset(**kwargs)
        return "\n\n" + _task_text(self._episode)

    def _step(self, action: Action) -> str:
        if self._episode is None:
            raise ValueError("no episode: reset first")
        if self._episode.done:
            raise ValueError("the episode is over")
        res = self._client.step(self._episode, action)
        self._episode = res.episode
        text = "\n".join(t.text for t in res.new_turns if t.role != "policy" and t.text)
        if res.done:
            text = (text + "\n" if text else "") + "The episode is over."
        return text or NO_REPLY

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

    def get_reward(self) -> float:
        ep = self._episode
        if ep is None:
            return 0.0
        if not ep.done:  # the model never stopped: end asking now so the episode is scored
            try:
                self._episode = ep = self._client.step(ep, Action.stop()).episode
            except AvtgymError:
                return 0.0
        return float(ep.reward.value) if ep.reward is not None and ep.status != "error" else 0.0

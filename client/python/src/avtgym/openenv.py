"""OpenEnv-compatible client: avtgym episodes behind OpenEnv's ``reset`` / ``step`` / ``state``.

Code written for an OpenEnv environment client (``openenv.core.EnvClient``, the interface TRL,
Unsloth and others integrate with) runs unchanged against ``avtgym serve``:

    from avtgym.openenv import AvtgymAction, AvtgymEnv

    with AvtgymEnv(base_url="127.0.0.1:50051").sync() as env:
        result = env.reset(task_id="shop-001", seed=3)
        while not result.done:
            text = my_model(result.observation.messages)        # chat messages so far
            result = env.step(AvtgymAction(message=text))        # raw model output, parsed
        print(result.reward, result.observation.metadata)

``AvtgymEnv`` subclasses OpenEnv's ``EnvClient`` (async by default, ``.sync()`` for a blocking
wrapper; ``async with`` / ``await env.reset()`` as with any OpenEnv client). It talks gRPC to the
avtgym server through ``avtgym.AsyncClient`` instead of OpenEnv's WebSocket session: the server
keeps no session, the episode is the sealed token this client holds, so

- every call is retried by the avtgym client (UNAVAILABLE with backoff, RESOURCE_EXHAUSTED /
  VERIFIER_BUSY after the server's RetryInfo delay); a step that still fails raises
  ``AvtgymError`` and leaves the episode where it was, so the same step can be sent again, to
  this server, a restarted one, or a replica with the same key;
- any number of clients can run episodes in parallel against one server (no session capacity).

Observations are ``AvtgymObservation`` (OpenEnv ``Observation``: ``done``, ``reward``,
``metadata``, plus the chat ``messages``, the newest ``reply``, the budget counters and the
protocol's ``protocol``, ``subtask``, ``budget`` and ``sql_required``). ``reset(protocol="bird-c",
patience=3)`` plays BIRD-Interact's conversational protocol: the follow-up's request, released
once phase 1's SQL passes, arrives in ``reply`` and as a new user message of ``messages``; malformed
output is then reported to the server as an unparsed action (it spends a turn) rather than
turned into STOP. ``reset(protocol="bird-a")`` plays its agentic protocol: messages in
BIRD-Interact's agentic grammar (``<action>execute("SELECT 1")</action>``, ``get_schema()``, ...)
or ``AvtgymAction(kind="execute", text=...)`` call the tools, whose output arrives in ``reply``
as an environment (user) message, never trainable; ``budget`` is then in coins.
``reset(protocol="tide-f")`` (or ``"tide-p"``) plays TIDE-Bench's protocols: one question or one
SQL per turn, no query results shown; on a task with a drift the user's drift turn arrives in
``reply`` after the first SQL (a user message, never trainable). Under TIDE_P the reset's
``messages`` already hold the pre-filled first-layer question as an assistant message (the
environment asked it in the policy's place: never the policy's output, never a reply) and its
answer as a user message. ``reward``
is None until the episode is done, then the episode's reward; an episode that ends in ``ERROR``
(the environment failed) is done with reward None and ``metadata["dropped"] = True``: drop it, as
the project's rule says, never score it 0. Pinned against openenv-core 0.3.0.
"""

from __future__ import annotations

import base64
from typing import Any, Dict, List, Literal, Optional

from pydantic import Field, model_validator

from avtgym.actions import parse_action
from avtgym.chat import prompt_messages, user_turn_text
from avtgym.client import AsyncClient
from avtgym.errors import AvtgymError
from avtgym.trainers import PROTOCOL_PROMPT, malformed_policy, training_reset
from avtgym.types import Action as _Action
from avtgym.types import AGENT_ROLES, Episode, Turn

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from openenv.core.env_server.types import Action, Observation, State
except ImportError as e:  # pragma: no cover - depends on the installed openenv-core
    raise ImportError("avtgym.openenv needs openenv-core (pip install 'avtgym[openenv]', which pins "
                      f"openenv-core==0.3.0): {e}") from e

__all__ = ["AvtgymAction", "AvtgymEnv", "AvtgymObservation", "AvtgymState", "RESET_KEYS"]

_DEFAULT: Any = object()  # system_prompt not given: the episode's protocol's (PROTOCOL_PROMPT)

# reset() keyword arguments (OpenEnv's own `seed` is avtgym's seed; `episode_id` is accepted and
# ignored: avtgym names its episodes).
RESET_KEYS = ("task_id", "corpus", "split", "seed", "reward", "solver", "extra_questions",
              "zero_ambiguity_budget", "oracle", "privileged", "protocol", "patience",
              "strict_credit")

# What a malformed message does: "stop" (AmbiTab's fallback) or "unparsed" (reported to the server,
# whose protocol decides); None: "stop" under AMBITAB, "unparsed" under any other protocol.
ON_MALFORMED = ("stop", "unparsed")


class AvtgymAction(Action):
    """One policy decision. Either kind ("ask", "stop", "submit_sql", "unparsed", or under BIRD_A a
    tool: "execute", "get_schema", "get_all_column_meanings", "get_column_meaning",
    "get_all_external_knowledge_names", "get_knowledge_definition",
    "get_all_knowledge_definitions") with text (the question, the SQL, the knowledge entry's name,
    or output that could not be parsed) and, for get_column_meaning, table and column; or
    message: the model's raw output,
    mapped to an action by avtgym.parse_action (a malformed one becomes STOP, AmbiTab's fallback,
    or under another protocol an unparsed action, which the server's protocol charges for; either
    way it is reported in the observation's metadata["malformed"])."""

    kind: Optional[Literal["ask", "stop", "submit_sql", "unparsed", "execute", "get_schema",
                           "get_all_column_meanings", "get_column_meaning",
                           "get_all_external_knowledge_names", "get_knowledge_definition",
                           "get_all_knowledge_definitions"]] = Field(default=None, description="the action")
    text: str = Field(default="", description="the question (ask), the SQL (submit_sql, execute), the entry's name (get_knowledge_definition) or the raw output (unparsed)")
    table: Optional[str] = Field(default=None, description="get_column_meaning: the table")
    column: Optional[str] = Field(default=None, description="get_column_meaning: the column")
    message: Optional[str] = Field(default=None, description="raw model output, parsed with parse_action")

    @model_validator(mode="after")
    def _one_form(self) -> "AvtgymAction":
        if (self.kind is None) == (self.message is None):
            raise ValueError("give either kind (with text) or message, not both")
        return self

    @classmethod
    def ask(cls, question: str) -> "AvtgymAction":
        return cls(kind="ask", text=question)

    @classmethod
    def stop(cls) -> "AvtgymAction":
        return cls(kind="stop")

    @classmethod
    def submit_sql(cls, sql: str) -> "AvtgymAction":
        return cls(kind="submit_sql", text=sql)

    @classmethod
    def unparsed(cls, text: str) -> "AvtgymAction":
        return cls(kind="unparsed", text=text)

    def to_avtgym(self, on_malformed: str = "stop") -> tuple[_Action, Optional[str]]:
        """The avtgym.Action to send, and why the message was malformed (None when it was not).
        A malformed message becomes STOP (on_malformed "stop", AmbiTab's fallback) or
        Action.unparsed(message) ("unparsed": the server's protocol decides)."""
        if self.kind is not None:
            return _Action(self.kind, self.text, self.table or "", self.column or ""), None
        parsed = parse_action(self.message or "")
        if parsed.ok and parsed.action is not None:
            return parsed.action, None
        fallback = parsed.or_unparsed() if on_malformed == "unparsed" else _Action.stop()
        return fallback, parsed.error or "malformed"


class AvtgymObservation(Observation):
    """What the policy sees after a reset or a step. done / reward / metadata are OpenEnv's;
    messages is the whole dialogue as chat messages (system prompt, the request, the policy's
    turns and TIDE_P's pre-filled question as assistant messages, the oracle's replies, TIDE's
    drift turn and environment turns as user messages: notices, feedback, a BIRD_C follow-up's
    request), ready for a chat model; turns are this call's new turns; task is the public task
    view (on reset only). protocol, subtask, budget ({"unit", "total", "used", "remaining"}, in
    the unit; None when the server sent none) and sql_required are the episode's (see
    avtgym.Episode)."""

    messages: List[Dict[str, str]] = Field(default_factory=list, description="the dialogue so far")
    reply: str = Field(default="", description="the newest oracle/environment text (the request on reset)")
    turns: List[Dict[str, str]] = Field(default_factory=list, description="this call's turns: role, kind, text")
    request: str = Field(default="", description="the user's data request")
    task: Optional[Dict[str, Any]] = Field(default=None, description="the public task view (reset only)")
    phase: str = Field(default="", description="asking, solving or done")
    status: str = Field(default="", description="running, terminated, truncated or error")
    question_budget: int = 0
    questions_asked: int = 0
    questions_remaining: int = 0
    protocol: str = Field(default="", description="ambitab, bird-c, ...")
    subtask: int = Field(default=0, description="1, or 2 once a BIRD_C follow-up is released")
    budget: Optional[Dict[str, Any]] = Field(default=None, description="unit, total, used, remaining")
    sql_required: bool = Field(default=False, description="only submit_sql is accepted now")


class AvtgymState(State):
    """The episode's state. token is the sealed episode (base64): the server keeps nothing else."""

    task_id: str = ""
    seed: int = 0
    status: str = ""
    done: bool = False
    phase: str = ""
    question_budget: int = 0
    questions_asked: int = 0
    protocol: str = ""
    subtask: int = 0
    token: str = ""


def _turn(t: Turn) -> Dict[str, str]:
    return {"role": t.role, "kind": t.kind, "text": t.text}


def _task(ep: Episode) -> Optional[Dict[str, Any]]:
    t = ep.task
    if t is None:
        return None
    db = t.database
    return {
        "corpus": t.corpus, "task_id": t.task_id, "split": t.split, "request": t.request,
        "evidence": t.evidence,
        "database": None if db is None else {
            "id": db.id, "dialect": db.dialect, "schema": db.schema,
            "column_meanings": dict(db.column_meanings),
            "knowledge": [{"id": k.id, "name": k.name, "definition": k.definition} for k in db.knowledge],
        },
    }


def _budget(ep: Episode) -> Optional[Dict[str, Any]]:
    b = ep.budget
    if b is None:
        return None
    return {"unit": b.unit, "total": b.total, "used": b.used, "remaining": b.remaining}


def _grpc_target(base_url: str) -> str:
    """host:port of the avtgym server from an OpenEnv-style base_url (grpc://, http:// or none)."""
    u = base_url.strip().rstrip("/")
    for scheme in ("grpc://", "http://", "ws://", "dns:///"):
        if u.startswith(scheme):
            return u[len(scheme):]
    if "://" in u:
        raise ValueError(f"base_url {base_url!r}: avtgym speaks gRPC in plain text; want host:port")
    return u


class AvtgymEnv(EnvClient[AvtgymAction, AvtgymObservation, AvtgymState]):
    """OpenEnv environment client for avtgym (see the module doc).

    AvtgymEnv(base_url="127.0.0.1:50051", system_prompt=<the protocol's>, action_format=None,
    timeout=30.0, retries=5, on_malformed=None, **reset_defaults): base_url is the avtgym server
    (host:port, or grpc://host:port); observation.messages is the shared chat prompt
    (avtgym.chat.prompt_messages: the one the Go LLM policies are evaluated with), headed by
    system_prompt (None: no system message; default: the shared prompt's system message of the
    episode's protocol); action_format is how the policy's past turns appear in messages (None:
    the protocol's, as the shared prompt writes them; "json", "agentic", "tide", "text"); on_malformed is
    what a malformed message does ("stop" or "unparsed"; None: "stop" under AMBITAB, "unparsed"
    otherwise); reset_defaults are reset() arguments applied to every episode (e.g.
    reward="question_f1", or protocol="bird-c", patience=3). The OpenEnv constructor arguments
    (connect_timeout_s, message_timeout_s, provider, mode) are accepted; message_timeout_s is not
    used (timeout is each call's deadline, retries included)."""

    def __init__(self, base_url: str = "127.0.0.1:50051", *, system_prompt: Any = _DEFAULT,
                 action_format: Optional[str] = None, timeout: float = 30.0, retries: int = 5,
                 connect_timeout_s: float = 10.0, message_timeout_s: float = 60.0,
                 max_message_size_mb: float = 100.0, provider: Any = None, mode: Optional[str] = None,
                 client: Optional[AsyncClient] = None, on_malformed: Optional[str] = None,
                 **reset_defaults: Any):
        super().__init__(base_url=base_url, connect_timeout_s=connect_timeout_s,
                         message_timeout_s=message_timeout_s, max_message_size_mb=max_message_size_mb,
                         provider=provider, mode=mode)
        unknown = set(reset_defaults) - set(RESET_KEYS)
        if unknown:
            raise TypeError(f"unknown reset arguments {sorted(unknown)}: want {', '.join(RESET_KEYS)}")
        if on_malformed is not None and on_malformed not in ON_MALFORMED:
            raise ValueError(f"on_malformed {on_malformed!r}: want {' or '.join(ON_MALFORMED)} or None")
        if system_prompt is _DEFAULT:
            system_prompt = PROTOCOL_PROMPT
        self.target = _grpc_target(base_url)
        self.system_prompt = system_prompt
        self.on_malformed = on_malformed
        self.action_format = action_format
        self.timeout = timeout
        self.retries = retries
        self.reset_defaults = dict(reset_defaults)
        self._client: Optional[AsyncClient] = client
        self._own_client = client is None
        self._episode: Optional[Episode] = None
        self._steps = 0

    # connection: a gRPC channel, no session -------------------------------------------------

    async def connect(self) -> "AvtgymEnv":
        """Open the channel and wait until the server is reachable (ConnectionError otherwise)."""
        if self._client is None:
            self._client = AsyncClient(self.target, timeout=self.timeout, retries=self.retries)
        try:
            await self._client.wait_ready(self._connect_timeout)
        except AvtgymError as e:
            raise ConnectionError(f"Failed to connect to {self.target}: {e}") from e
        return self

    async def disconnect(self) -> None:
        if self._client is not None and self._own_client:
            await self._client.close()
            self._client = None

    async def _avtgym(self) -> AsyncClient:
        if self._client is None:
            await self.connect()
        assert self._client is not None
        return self._client

    # OpenEnv API ----------------------------------------------------------------------------

    @property
    def episode(self) -> Optional[Episode]:
        """The current avtgym Episode (None before the first reset)."""
        return self._episode

    async def reset(self, **kwargs: Any) -> StepResult[AvtgymObservation]:
        """Start an episode: task_id, seed, corpus, split, reward, solver, extra_questions,
        zero_ambiguity_budget, oracle, privileged, protocol, patience (over the constructor's
        defaults). episode_id,
        OpenEnv's optional name for the episode, is ignored: the server names it."""
        kwargs.pop("episode_id", None)
        unknown = set(kwargs) - set(RESET_KEYS)
        if unknown:
            raise TypeError(f"unknown reset arguments {sorted(unknown)}: want {', '.join(RESET_KEYS)}")
        client = await self._avtgym()
        ep = await client.reset(**training_reset(self.reset_defaults, kwargs))
        self._episode, self._steps = ep, 0
        obs = self._observation(ep, ep.turns, reward=None, malformed=None, task=True)
        return StepResult(observation=obs, reward=None, done=obs.done)

    async def step(self, action: Any, **kwargs: Any) -> StepResult[AvtgymObservation]:
        """Apply one action: an AvtgymAction, an avtgym.Action, a dict of AvtgymAction fields, or a
        string (the model's raw output). On AvtgymError the episode is unchanged: resend."""
        if self._episode is None:
            raise RuntimeError("no episode: call reset() first")
        act, malformed = self._coerce(action).to_avtgym(malformed_policy(self.on_malformed, self._episode.protocol))
        client = await self._avtgym()
        res = await client.step(self._episode, act)
        self._episode, self._steps = res.episode, self._steps + 1
        reward = None
        if res.done and res.status != "error" and res.reward is not None:
            reward = float(res.reward.value)
        obs = self._observation(res.episode, res.new_turns, reward=reward, malformed=malformed, task=False)
        return StepResult(observation=obs, reward=reward, done=obs.done)

    async def state(self) -> AvtgymState:
        ep = self._episode
        if ep is None:
            return AvtgymState()
        return AvtgymState(
            episode_id=ep.episode_id, step_count=self._steps,
            task_id=ep.task.task_id if ep.task is not None else "", seed=ep.seed, status=ep.status,
            done=ep.done, phase=ep.phase, question_budget=ep.question_budget,
            questions_asked=ep.questions_asked, protocol=ep.protocol, subtask=ep.subtask,
            token=base64.b64encode(ep.token).decode())

    # EnvClient's abstract hooks: the JSON forms of actions, results and states ---------------

    def _step_payload(self, action: AvtgymAction) -> Dict[str, Any]:
        return self._coerce(action).model_dump(exclude_none=True)

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[AvtgymObservation]:
        obs = AvtgymObservation(**payload.get("observation", {}))
        return StepResult(observation=obs, reward=payload.get("reward", obs.reward),
                          done=bool(payload.get("done", obs.done)))

    def _parse_state(self, payload: Dict[str, Any]) -> AvtgymState:
        return AvtgymState(**payload)

    # helpers --------------------------------------------------------------------------------

    @staticmethod
    def _coerce(action: Any) -> AvtgymAction:
        if isinstance(action, AvtgymAction):
            return action
        if isinstance(action, _Action):
            return AvtgymAction(kind=action.kind, text=action.text,  # type: ignore[arg-type]
                                table=action.table or None, column=action.column or None)
        if isinstance(action, str):
            return AvtgymAction(message=action)
        if isinstance(action, dict):
            return AvtgymAction(**action)
        raise TypeError(f"want an AvtgymAction, avtgym.Action, dict or str, got {type(action).__name__}")

    def _observation(self, ep: Episode, new_turns: tuple[Turn, ...], reward: Optional[float],
                     malformed: Optional[str], task: bool) -> AvtgymObservation:
        messages = prompt_messages(ep, self.system_prompt, self.action_format)
        # The user's side only: never the policy's turns nor TIDE_P's pre-filled question.
        # On reset (task) the first turn is the episode's own request, shown as it is.
        replies = [x for i, t in enumerate(new_turns) if t.role not in AGENT_ROLES
                   for x in [t.text if task and i == 0 and t.kind == "request" else user_turn_text(t)] if x]
        meta: Dict[str, Any] = {
            "episode_id": ep.episode_id, "seed": ep.seed, "group_index": ep.group_index,
            "task_id": ep.task.task_id if ep.task is not None else "", "status": ep.status,
            "dropped": ep.status == "error",
            "reward_type": ep.reward.type if ep.reward is not None else None,
            "reward_components": dict(ep.reward.components) if ep.reward is not None else {},
        }
        if malformed is not None:
            meta["malformed"] = malformed
        if ep.privileged is not None:
            meta["privileged"] = ep.privileged
        return AvtgymObservation(
            done=ep.done, reward=reward, metadata=meta, messages=messages,
            reply="\n\n".join(replies), turns=[_turn(t) for t in new_turns], request=ep.request,
            task=_task(ep) if task else None, phase=ep.phase, status=ep.status,
            question_budget=ep.question_budget, questions_asked=ep.questions_asked,
            questions_remaining=ep.questions_remaining, protocol=ep.protocol, subtask=ep.subtask,
            budget=_budget(ep), sql_required=ep.sql_required)

"""Typed, immutable views of avtgym's wire messages."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from google.protobuf.json_format import MessageToDict

from avtgym.v1 import episode_pb2 as epb

__all__ = [
    "Action",
    "KnowledgeEntry",
    "DatabaseView",
    "TaskView",
    "TaskSummary",
    "Turn",
    "Reward",
    "Episode",
    "StepResult",
    "OracleInfo",
]


def _enum_name(enum_type: Any, value: int, prefix: str) -> str:
    name = enum_type.Name(value) if value in enum_type.values() else f"{prefix}UNKNOWN_{value}"
    return name[len(prefix):].lower() if name.startswith(prefix) else name.lower()


@dataclass(frozen=True)
class Action:
    """One policy decision: kind is "ask", "stop" or "submit_sql"; text is the question or SQL."""

    kind: str
    text: str = ""

    @staticmethod
    def ask(text: str) -> "Action":
        return Action("ask", text)

    @staticmethod
    def stop() -> "Action":
        return Action("stop", "")

    @staticmethod
    def submit_sql(sql: str) -> "Action":
        return Action("submit_sql", sql)

    def to_proto(self) -> epb.Action:
        if self.kind == "ask":
            return epb.Action(ask=epb.Action.Ask(text=self.text))
        if self.kind == "stop":
            return epb.Action(stop=epb.Action.Stop())
        if self.kind == "submit_sql":
            return epb.Action(submit_sql=epb.Action.SubmitSql(sql=self.text))
        raise ValueError(f"unknown action kind {self.kind!r}: want ask, stop or submit_sql")


@dataclass(frozen=True)
class KnowledgeEntry:
    id: str
    name: str
    definition: str


@dataclass(frozen=True)
class DatabaseView:
    id: str
    dialect: str
    schema: str = field(repr=False)
    column_meanings: dict[str, str] = field(repr=False)
    knowledge: tuple[KnowledgeEntry, ...] = field(repr=False)


@dataclass(frozen=True)
class TaskView:
    """The public task: everything the policy may see."""

    corpus: str
    task_id: str
    split: str
    request: str
    evidence: str
    database: DatabaseView | None

    @staticmethod
    def from_proto(t: epb.TaskView) -> "TaskView":
        db = None
        if t.HasField("database"):
            d = t.database
            db = DatabaseView(
                id=d.id,
                dialect=d.dialect,
                schema=d.schema,
                column_meanings=dict(d.column_meanings),
                knowledge=tuple(KnowledgeEntry(k.id, k.name, k.definition) for k in d.knowledge),
            )
        return TaskView(t.corpus, t.task_id, t.split, t.request, t.evidence, db)


@dataclass(frozen=True)
class TaskSummary:
    corpus: str
    task_id: str
    split: str
    database: str
    request: str


@dataclass(frozen=True)
class Turn:
    """One utterance. role: "policy" | "oracle" | "environment"; kind: "request" | "question" |
    "reply" | "refusal" | "stop" | "sql" | "feedback" | "notice" (the TurnKind name, lower-cased,
    without its prefix). A question is followed by a "reply" when it was answered and by a
    "refusal" (role "oracle") when the oracle, or the environment in its place, declined: tell
    the two by kind, never by text."""

    role: str
    kind: str
    text: str

    @staticmethod
    def from_proto(t: epb.Turn) -> "Turn":
        return Turn(
            _enum_name(epb.Role, t.role, "ROLE_"),
            _enum_name(epb.TurnKind, t.kind, "TURN_KIND_"),
            t.text,
        )


@dataclass(frozen=True)
class Reward:
    """type: "question_f1" | "outcome". Components undefined for the episode are absent."""

    type: str
    value: float
    components: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def from_proto(r: epb.Reward) -> "Reward":
        return Reward(_enum_name(epb.RewardType, r.type, "REWARD_TYPE_"), r.value, dict(r.components))


def _privileged(msg: Any, present: bool) -> dict | None:
    if not present:
        return None
    return MessageToDict(msg, preserving_proto_field_name=True)


@dataclass(frozen=True)
class Episode:
    """The client-side state of one episode after its latest reset or step.

    turns is the whole history so far (reset turns plus every step's turns), accumulated on
    the client. privileged is None unless asked for; when several calls asked for it, the
    latest call's fields are laid over the earlier ones (so the reset's ambiguities stay)."""

    token: bytes = field(repr=False)
    episode_id: str
    seed: int
    group_index: int
    task: TaskView | None
    turns: tuple[Turn, ...]
    phase: str
    question_budget: int
    questions_asked: int
    questions_remaining: int
    done: bool
    status: str
    reward: Reward | None
    privileged: dict | None

    @property
    def request(self) -> str:
        return self.task.request if self.task is not None else ""

    @staticmethod
    def from_proto(e: Any) -> "Episode":
        o = e.observation
        return Episode(
            token=bytes(e.token),
            episode_id=e.episode_id,
            seed=int(e.seed),
            group_index=int(e.group_index),
            task=TaskView.from_proto(o.task) if o.HasField("task") else None,
            turns=tuple(Turn.from_proto(t) for t in o.turns),
            phase=_enum_name(epb.Phase, o.phase, "PHASE_"),
            question_budget=o.question_budget,
            questions_asked=o.questions_asked,
            questions_remaining=o.questions_remaining,
            done=False,
            status="running",
            reward=None,
            privileged=_privileged(e.privileged, e.HasField("privileged")),
        )

    @staticmethod
    def from_token(token: bytes) -> "Episode":
        """An Episode that knows only its token (for stepping a raw token)."""
        return Episode(bytes(token), "", 0, 0, None, (), "", 0, 0, 0, False, "", None, None)


@dataclass(frozen=True)
class StepResult:
    """The outcome of one step: the updated episode and what this step added."""

    episode: Episode
    new_turns: tuple[Turn, ...]
    done: bool
    status: str
    reward: Reward | None
    privileged: dict | None

    @staticmethod
    def from_proto(prev: Episode, r: Any) -> "StepResult":
        o = r.observation
        new_turns = tuple(Turn.from_proto(t) for t in o.turns)
        status = _enum_name(epb.EpisodeStatus, r.status, "EPISODE_STATUS_")
        reward = Reward.from_proto(r.reward) if r.HasField("reward") else None
        priv = _privileged(r.privileged, r.HasField("privileged"))
        merged = prev.privileged
        if priv is not None:
            merged = {**(prev.privileged or {}), **priv}
        ep = replace(
            prev,
            token=bytes(r.token),
            task=TaskView.from_proto(o.task) if o.HasField("task") else prev.task,
            turns=prev.turns + new_turns,
            phase=_enum_name(epb.Phase, o.phase, "PHASE_"),
            question_budget=o.question_budget,
            questions_asked=o.questions_asked,
            questions_remaining=o.questions_remaining,
            done=r.done,
            status=status,
            reward=reward,
            privileged=merged,
        )
        return StepResult(ep, new_turns, r.done, status, reward, priv)


@dataclass(frozen=True)
class OracleInfo:
    """One oracle the server serves (EnvService.ListOracles). type and hybrid are OracleType names
    in lower case ("deterministic", "llm", "llm_scoped", "hybrid", "hybrid_scoped",
    "test_leaky_responder", "test_credit_all"), as reset(oracle=...) takes them. hybrid is the
    oracle with this oracle's matcher and the reference's deterministic responder, against which
    the responder-leakage diagnostic is measured (an oracle whose responder is already the
    deterministic one is its own hybrid); matcher and responder describe the two stages (equal
    texts: the same stage); test_fixture marks a deliberately leaky test oracle (never for
    training); reference is True for the reference oracle (the deterministic one)."""

    type: str
    matcher: str
    responder: str
    hybrid: str
    test_fixture: bool = False
    reference: bool = False

    @staticmethod
    def from_proto(o: Any, reference: int) -> "OracleInfo":
        name = lambda v: _enum_name(epb.OracleType, v, "ORACLE_TYPE_")  # noqa: E731
        return OracleInfo(name(o.type), o.matcher, o.responder, name(o.hybrid), o.test_fixture,
                          o.type == reference)


def reward_enum(reward: str | None) -> int:
    if reward is None or reward == "":
        return epb.REWARD_TYPE_UNSPECIFIED
    try:
        return epb.RewardType.Value("REWARD_TYPE_" + reward.upper())
    except ValueError:
        raise ValueError(f"unknown reward {reward!r}: want question_f1 or outcome") from None


def solver_enum(solver: str | None) -> int:
    if solver is None or solver == "":
        return epb.SOLVER_UNSPECIFIED
    try:
        return epb.Solver.Value("SOLVER_" + solver.upper())
    except ValueError:
        raise ValueError(f"unknown solver {solver!r}: want client or lookup") from None


def oracle_enum(oracle: str | None) -> int:
    if oracle is None or oracle == "":
        return epb.ORACLE_TYPE_UNSPECIFIED
    try:
        return epb.OracleType.Value("ORACLE_TYPE_" + oracle.upper())
    except ValueError:
        names = [n[len("ORACLE_TYPE_"):].lower() for n in epb.OracleType.keys()[1:]]
        raise ValueError(f"unknown oracle {oracle!r}: want one of {', '.join(names)}") from None


def as_mapping(x: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(x or {})

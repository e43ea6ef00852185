"""Typed, immutable views of avtgym's wire messages."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from google.protobuf.json_format import MessageToDict

from avtgym.v1 import episode_pb2 as epb

__all__ = [
    "ACTION_KINDS",
    "AGENT_ROLES",
    "TOOL_KINDS",
    "Action",
    "Budget",
    "PROTOCOLS",
    "KnowledgeEntry",
    "DatabaseView",
    "TaskView",
    "TaskSummary",
    "TideInfo",
    "Turn",
    "Reward",
    "Episode",
    "StepResult",
    "OracleInfo",
    "ProtocolInfo",
    "SAMPLE_TYPES",
    "sample_types_enum",
]


def _names(enum_type: Any, prefix: str, sep: str = "_") -> dict[int, str]:
    """value -> the value's name without its prefix, in lower case (sep joins its words)."""
    return {v: (n[len(prefix):] if n.startswith(prefix) else n).lower().replace("_", sep)
            for n, v in enum_type.items()}


# Enum names, looked up per turn and per step: built once here (EnumTypeWrapper.values() and
# .keys() build a new list on every call).
_ROLE = _names(epb.Role, "ROLE_")
_TURN_KIND = _names(epb.TurnKind, "TURN_KIND_")
_PHASE = _names(epb.Phase, "PHASE_")
_STATUS = _names(epb.EpisodeStatus, "EPISODE_STATUS_")
_REWARD_TYPE = _names(epb.RewardType, "REWARD_TYPE_")
_ORACLE_TYPE = _names(epb.OracleType, "ORACLE_TYPE_")
_BUDGET_UNIT = _names(epb.BudgetUnit, "BUDGET_UNIT_")
# TIDE's labels (privileged): the enums' lower-case names are the deprecated strings' values
# ("chain_only", "drift_only", "joint"; "value", "constraint", "projection").
_SAMPLE_TYPE = {v: n for v, n in _names(epb.SampleType, "SAMPLE_TYPE_").items() if v}
_SAMPLE_TYPE_VALUE = {n: v for v, n in _SAMPLE_TYPE.items()}
_DRIFT_SUBTYPE = {v: n for v, n in _names(epb.DriftSubtype, "DRIFT_SUBTYPE_").items() if v}
# ChainRouting is read as the string routing has always been: "L1", "L2" (upper case, as the
# server's string and StepResult.routing write them) and "other".
_ROUTING = {v: (n.upper() if n in ("l1", "l2") else n)
            for v, n in _names(epb.ChainRouting, "CHAIN_ROUTING_").items() if v}
# The sample types reset(sample_types=[...]) draws by: "chain_only", "drift_only", "joint".
SAMPLE_TYPES = tuple(n for v, n in sorted(_SAMPLE_TYPE.items()))
# Protocols are named as the CLI's --protocol names them: "ambitab", "bird-c", ...; UNSPECIFIED is
# the server's default, AMBITAB.
_PROTOCOL_VALUE = {n: v for v, n in _names(epb.Protocol, "PROTOCOL_", sep="-").items() if v}
_PROTOCOL = {v: n for n, v in _PROTOCOL_VALUE.items()}
_PROTOCOL[epb.PROTOCOL_UNSPECIFIED] = "ambitab"

# The protocols reset(protocol=...) takes, by name: "ambitab", "bird-c", "bird-a", "tide-f" and
# "tide-p" (TIDE_F and TIDE_P serve read-only tasks without a follow-up; TIDE_P only tasks with a
# chain whose first layer has an annotated question, TaskSummary.sample_type "chain_only" or
# "joint": any other task is INVALID_ARGUMENT / INVALID_OPTION).
PROTOCOLS = tuple(n for n, v in sorted(_PROTOCOL_VALUE.items(), key=lambda nv: nv[1]))
# Comparisons are named as `avtgym eval --comparison` names them: "sound" (the server's default,
# for training) and "harness" (BIRD-Interact's ex_base exactly, for numbers comparable with the
# paper's); only records imported from BIRD-Interact read the option.
_COMPARISON_VALUE = {n: v for v, n in _names(epb.Comparison, "COMPARISON_").items() if v}
COMPARISONS = tuple(n for n, v in sorted(_COMPARISON_VALUE.items(), key=lambda nv: nv[1]))
_FOLLOW_UP_STATE_VALUE = {n: v for v, n in _names(epb.FollowUpState, "FOLLOW_UP_STATE_").items() if v}
_BIRD_VARIANT_VALUE = {n: v for v, n in _names(epb.BirdVariant, "BIRD_VARIANT_").items() if v}
# Name -> value for the option arguments ("unspecified" included, as the enum's own name).
_REWARD_VALUE = {n: v for v, n in _REWARD_TYPE.items()}
_SOLVER_VALUE = {n: v for v, n in _names(epb.Solver, "SOLVER_").items()}
_ORACLE_VALUE = {n: v for v, n in _ORACLE_TYPE.items()}

# The roles of the agent's side of the dialogue, rendered as assistant messages: "policy" (the
# policy's own output, the only trainable text) and "prefilled" (TIDE_P's pre-filled question,
# written by the environment in the policy's place at reset: the agent's turn, never trainable,
# and never a reply). Every other role ("oracle", "environment") is the user's side.
AGENT_ROLES = frozenset(("policy", "prefilled"))


def _label(table: dict[int, str], value: Any, fallback: str) -> str:
    """An enum label's name (table, without UNSPECIFIED), or fallback (the deprecated string, all
    an older server sends) when the enum is unset. value is the enum's number, or its name as
    MessageToDict writes it ("SAMPLE_TYPE_JOINT"; a number for a value this client does not know)."""
    if isinstance(value, str):
        if not value or value.endswith("_UNSPECIFIED"):
            return fallback
        for n in table.values():
            if value.endswith("_" + n.upper()):
                return n
        return fallback or value.lower()
    if value:
        return _name(table, int(value))
    return fallback


def _choices(table: dict[str, int]) -> str:
    return ", ".join(n for n, v in table.items() if v)


def _name(table: dict[int, str], value: int) -> str:
    name = table.get(value)
    return name if name is not None else f"unknown_{value}"


_new = object.__new__
_setattr = object.__setattr__


def _make(cls: type, fields: dict[str, Any]) -> Any:
    """An instance of the frozen dataclass cls with exactly these fields, without running its
    __init__ (which sets each field through object.__setattr__: several µs per Episode). Only for
    the client's own conversions, where fields holds every field, already of its type."""
    obj = _new(cls)
    _setattr(obj, "__dict__", fields)
    return obj


# BIRD_A's tools (the Action kinds beyond ask, stop, submit_sql and unparsed), in the order of the
# Action oneof. What each costs is the server's to say: Client.list_protocols() (ProtocolInfo.prices).
TOOL_KINDS = ("execute", "get_schema", "get_all_column_meanings", "get_column_meaning",
              "get_all_external_knowledge_names", "get_knowledge_definition",
              "get_all_knowledge_definitions")
ACTION_KINDS = ("ask", "stop", "submit_sql", "unparsed") + TOOL_KINDS


@dataclass(frozen=True)
class Action:
    """One policy decision. kind is "ask", "stop", "submit_sql" or "unparsed", or under BIRD_A one
    of the tools (TOOL_KINDS): "execute", "get_schema", "get_all_column_meanings",
    "get_column_meaning", "get_all_external_knowledge_names", "get_knowledge_definition",
    "get_all_knowledge_definitions". text is the question, the SQL (submit_sql, execute), the
    knowledge entry's name (get_knowledge_definition) or the model output that could not be
    parsed; table and column name get_column_meaning's column."""

    kind: str
    text: str = ""
    table: str = ""
    column: str = ""

    @staticmethod
    def ask(text: str) -> "Action":
        return Action("ask", text)

    @staticmethod
    def stop() -> "Action":
        return Action("stop", "")

    @staticmethod
    def submit_sql(sql: str) -> "Action":
        return Action("submit_sql", sql)

    @staticmethod
    def unparsed(text: str) -> "Action":
        """Report model output that could not be parsed into an action (text: the output as it
        was), so that the episode's protocol applies its own rule: AMBITAB answers the first with
        a notice asking for a valid action and takes the second in a row as STOP; BIRD_C spends a
        turn on it (on the last turn, or in a debug retry, it ends the sub-task unsolved)."""
        return Action("unparsed", "" if text is None else str(text))

    @staticmethod
    def execute(sql: str) -> "Action":
        """BIRD_A: run read-only SQL on the task's database (1 coin); the result (or the database's
        error) comes back as a "tool_result" turn (StepResult.tool_result)."""
        return Action("execute", sql)

    @staticmethod
    def get_schema() -> "Action":
        """BIRD_A: the database's schema (1 coin)."""
        return Action("get_schema")

    @staticmethod
    def get_all_column_meanings() -> "Action":
        """BIRD_A: every column's public meaning (1 coin)."""
        return Action("get_all_column_meanings")

    @staticmethod
    def get_column_meaning(table: str, column: str) -> "Action":
        """BIRD_A: one column's public meaning (0.5 coins)."""
        return Action("get_column_meaning", "", table, column)

    @staticmethod
    def get_all_external_knowledge_names() -> "Action":
        """BIRD_A: the names of the public knowledge entries (0.5 coins)."""
        return Action("get_all_external_knowledge_names")

    @staticmethod
    def get_knowledge_definition(name: str) -> "Action":
        """BIRD_A: one public knowledge entry's definition (0.5 coins); an entry the task hides
        reads as an unknown one."""
        return Action("get_knowledge_definition", name)

    @staticmethod
    def get_all_knowledge_definitions() -> "Action":
        """BIRD_A: every public knowledge entry with its definition (1 coin)."""
        return Action("get_all_knowledge_definitions")

    @property
    def is_tool(self) -> bool:
        """True for BIRD_A's tools (TOOL_KINDS)."""
        return self.kind in TOOL_KINDS

    def _fill(self, m: epb.Action) -> None:
        """Set this action in m, an empty Action message (in place: a request's own field, so that
        nothing is built and then copied)."""
        fill = _FILL.get(self.kind)
        if fill is None:
            raise ValueError(f"unknown action kind {self.kind!r}: want one of {', '.join(ACTION_KINDS)}")
        fill(m, self)

    def to_proto(self) -> epb.Action:
        if self.kind == "ask":
            return epb.Action(ask=epb.Action.Ask(text=self.text))
        if self.kind == "stop":
            return epb.Action(stop=epb.Action.Stop())
        if self.kind == "submit_sql":
            return epb.Action(submit_sql=epb.Action.SubmitSql(sql=self.text))
        if self.kind == "unparsed":
            return epb.Action(unparsed=epb.Action.Unparsed(text=self.text))
        if self.kind == "execute":
            return epb.Action(execute=epb.Action.Execute(sql=self.text))
        if self.kind == "get_schema":
            return epb.Action(get_schema=epb.Action.GetSchema())
        if self.kind == "get_all_column_meanings":
            return epb.Action(get_all_column_meanings=epb.Action.GetAllColumnMeanings())
        if self.kind == "get_column_meaning":
            return epb.Action(get_column_meaning=epb.Action.GetColumnMeaning(table=self.table,
                                                                             column=self.column))
        if self.kind == "get_all_external_knowledge_names":
            return epb.Action(get_all_external_knowledge_names=epb.Action.GetAllExternalKnowledgeNames())
        if self.kind == "get_knowledge_definition":
            return epb.Action(get_knowledge_definition=epb.Action.GetKnowledgeDefinition(name=self.text))
        if self.kind == "get_all_knowledge_definitions":
            return epb.Action(get_all_knowledge_definitions=epb.Action.GetAllKnowledgeDefinitions())
        raise ValueError(f"unknown action kind {self.kind!r}: want one of {', '.join(ACTION_KINDS)}")


def _filler(field_name: str, *attrs: str) -> Any:
    """A function that sets the oneof member field_name of an Action message from an Action: its
    attrs (the message's fields, from the Action's text, or table and column) set in place."""
    if not attrs:
        return lambda m, a: getattr(m, field_name).SetInParent()
    if attrs == ("table", "column"):
        def fill_column(m: Any, a: Action) -> None:
            sub = getattr(m, field_name)
            sub.SetInParent()
            sub.table = a.table
            sub.column = a.column
        return fill_column
    attr = attrs[0]

    def fill(m: Any, a: Action) -> None:
        sub = getattr(m, field_name)
        sub.SetInParent()
        setattr(sub, attr, a.text)
    return fill


def _fill_ask(m: Any, a: Action) -> None:
    # The common case, spelled out: set the text in place (an empty one still selects ask).
    ask = m.ask
    if a.text:
        ask.text = a.text
    else:
        ask.SetInParent()


# Action kind -> how to set it in an Action message (Action._fill).
_FILL = {
    "ask": _fill_ask,
    "stop": _filler("stop"),
    "submit_sql": _filler("submit_sql", "sql"),
    "unparsed": _filler("unparsed", "text"),
    "execute": _filler("execute", "sql"),
    "get_schema": _filler("get_schema"),
    "get_all_column_meanings": _filler("get_all_column_meanings"),
    "get_column_meaning": _filler("get_column_meaning", "table", "column"),
    "get_all_external_knowledge_names": _filler("get_all_external_knowledge_names"),
    "get_knowledge_definition": _filler("get_knowledge_definition", "name"),
    "get_all_knowledge_definitions": _filler("get_all_knowledge_definitions"),
}


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
    """One task of ListTasks. subtasks is 2 when the task has a follow-up (its request is revealed
    only once phase 1 is solved; BIRD_C serves only such tasks), else 1. sample_type is TIDE's
    sample type, "chain_only", "drift_only" or "joint" ("" for other tasks), to select the tasks
    a protocol serves (TIDE_P: chain_only and joint). It is harness information: never show it to
    a policy (it tells whether a drift will come). The server fills it only for
    list_tasks(privileged=True) from a principal that may read privileged data (a trainer); else
    it is "" for every task. task_id is the public id: opaque for TIDE samples ("tide-" and 16 hex
    digits, which say nothing of the type); the record id (TIDE's instance_id) is privileged
    (Episode.record_id). To draw by type without reading it, use reset(sample_types=[...])."""

    corpus: str
    task_id: str
    split: str
    database: str
    request: str
    subtasks: int = 1
    sample_type: str = ""

    @staticmethod
    def from_proto(t: Any) -> "TaskSummary":
        return TaskSummary(t.corpus, t.task_id, t.split, t.database, t.request, int(t.subtasks) or 1,
                           _label(_SAMPLE_TYPE, t.sample_type_enum, t.sample_type))


@dataclass(frozen=True)
class TideInfo:
    """TIDE's labels of a task (Privileged.tide; privileged: it tells what drift will come).
    cluster is the bootstrap cluster (TIDE's anchor, shared by its chain_only, drift_only and joint
    samples); sample_type "chain_only", "drift_only" or "joint"; drift_utterance the user's drift
    turn injected after the first SQL ("" without a drift) and post_drift_reference_sql the
    reference of the second SQL (empty without a drift); drift_subtype "value", "constraint" or
    "projection" and intent_subtype (projection drifts) "aspect_change" or "target_change";
    chain_layers the layer of each registered ambiguity in annotation order (1: depends on none;
    2: depends on a layer-1 ambiguity). sample_type and drift_subtype are read from the enums
    (sample_type_enum, drift_subtype_enum), or from the deprecated strings from an older server.

    Episode.tide reads it from the privileged dict (its "tide" key, as MessageToDict writes it)
    when it is asked for: nothing is built on the step path."""

    cluster: str = ""
    sample_type: str = ""
    drift_utterance: str = ""
    post_drift_reference_sql: tuple[str, ...] = ()
    drift_subtype: str = ""
    intent_subtype: str = ""
    chain_layers: tuple[int, ...] = ()

    @property
    def has_drift(self) -> bool:
        return bool(self.drift_utterance or self.post_drift_reference_sql)

    @staticmethod
    def from_proto(t: Any) -> "TideInfo":
        return TideInfo(t.cluster, _label(_SAMPLE_TYPE, t.sample_type_enum, t.sample_type), t.drift_utterance,
                        tuple(t.post_drift_reference_sql),
                        _label(_DRIFT_SUBTYPE, t.drift_subtype_enum, t.drift_subtype), t.intent_subtype,
                        tuple(int(x) for x in t.chain_layers))

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> "TideInfo":
        """From the privileged dict's "tide" entry (MessageToDict's form: fields at their default
        are absent)."""
        return TideInfo(str(d.get("cluster", "")),
                        _label(_SAMPLE_TYPE, d.get("sample_type_enum"), str(d.get("sample_type", ""))),
                        str(d.get("drift_utterance", "")), tuple(d.get("post_drift_reference_sql") or ()),
                        _label(_DRIFT_SUBTYPE, d.get("drift_subtype_enum"), str(d.get("drift_subtype", ""))),
                        str(d.get("intent_subtype", "")),
                        tuple(int(x) for x in d.get("chain_layers") or ()))


@dataclass(frozen=True)
class Turn:
    """One utterance. role: "policy" | "oracle" | "environment" | "prefilled"; kind: "request" |
    "question" | "reply" | "refusal" | "stop" | "sql" | "feedback" | "notice" | "unparsed" |
    "tool_call" | "tool_result" | "drift" (the Role and TurnKind names, lower-cased, without their
    prefix). A question is followed by a "reply" when it was answered and
    by a "refusal" (role "oracle") when the oracle, or the environment in its place, declined: tell
    the two by kind, never by text. An "unparsed" turn (role "policy") is model output the client
    reported with Action.unparsed. In a BIRD_C episode the follow-up's request, released once
    phase 1 passes, is a "request" turn of role "environment"; the debug-retry message is a
    "feedback" turn of role "environment". Under BIRD_A a tool call is a "tool_call" turn (role
    "policy"; its text names the tool and its arguments, e.g. execute("SELECT 1")) and the tool's
    output a "tool_result" turn (role "environment": never trainable). Under TIDE_F and TIDE_P the
    user's drift, injected after the first SQL of a task with one, is a "drift" turn (role
    "oracle": the user's text, never trainable); TIDE_P's reset holds, after the request, a
    "question" turn of role "prefilled" (the chain's first-layer question, asked by the
    environment in the policy's place: render it as the agent's turn, never train on it, never
    take it for a reply) and its "reply". AGENT_ROLES are the roles of the agent's side; only
    "policy" text is trainable (Turn.trainable)."""

    role: str
    kind: str
    text: str

    @staticmethod
    def from_proto(t: epb.Turn) -> "Turn":
        return Turn(_name(_ROLE, t.role), _name(_TURN_KIND, t.kind), t.text)

    @property
    def trainable(self) -> bool:
        """True exactly for the policy's own output (role "policy"): never for a pre-filled turn,
        the oracle's or the environment's text."""
        return self.role == "policy"

    @property
    def agent(self) -> bool:
        """True for the agent's side of the dialogue (AGENT_ROLES: the policy's turns and TIDE_P's
        pre-filled question), rendered as assistant messages."""
        return self.role in AGENT_ROLES


def _turns(ts: Any) -> tuple[Turn, ...]:
    """Turn.from_proto of each of ts, built without Turn's __init__ (the hot path of every step)."""
    role, kind = _ROLE.get, _TURN_KIND.get
    out = []
    for t in ts:
        r, k = t.role, t.kind
        out.append(_make(Turn, {"role": role(r) or _name(_ROLE, r), "kind": kind(k) or _name(_TURN_KIND, k),
                                "text": t.text}))
    return tuple(out)


@dataclass(frozen=True)
class Reward:
    """type: "question_f1" | "outcome" | "bird_interact". Components undefined for the episode
    are absent: "question_f1", "precision", "recall", "outcome" (AMBITAB); "phase1", "phase2"
    (bird_interact: phase 1 is 0.7 on the first try, 0.5 after the debug retry, else 0; phase 2
    0.3 / 0.2 / 0, absent when the follow-up was never released); under TIDE_F and TIDE_P (type
    "outcome": 1 when every SQL matched its reference) "outcome", "sql1", "asked", with a drift
    "sql2" and "drift_recognized", and on tasks with a chain "l1_identified" and "l2_identified"
    (TIDE_P's pre-filled question identifies nothing)."""

    type: str
    value: float
    components: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def from_proto(r: epb.Reward) -> "Reward":
        return Reward(_name(_REWARD_TYPE, r.type), r.value, dict(r.components))


@dataclass(frozen=True)
class Budget:
    """An episode's interaction budget in its protocol's unit: "questions" (AMBITAB: B = m + C
    answered questions), "turns" (BIRD_C: each question, SQL submission or unparsed output; a
    debug retry is not one) or "coins" (BIRD_A). Amounts are exact fixed-point thousandths of the
    unit (*_milli); total, used and remaining are the same as floats (milli / 1000)."""

    unit: str
    total_milli: int
    used_milli: int
    remaining_milli: int

    @property
    def total(self) -> float:
        return self.total_milli / 1000

    @property
    def used(self) -> float:
        return self.used_milli / 1000

    @property
    def remaining(self) -> float:
        return self.remaining_milli / 1000

    @staticmethod
    def from_proto(b: Any) -> "Budget":
        return Budget(_name(_BUDGET_UNIT, b.unit), int(b.total_milli), int(b.used_milli),
                      int(b.remaining_milli))


# Budgets by (unit, total, used, remaining): a Budget is immutable and an episode's take few
# values, so each step's is looked up rather than built (cleared when it grows past its bound).
_BUDGETS: dict[tuple[int, int, int, int], Budget] = {}


def _budget(o: Any) -> Budget | None:
    if not o.HasField("budget"):
        return None
    b = o.budget
    key = (b.unit, b.total_milli, b.used_milli, b.remaining_milli)
    got = _BUDGETS.get(key)
    if got is None:
        if len(_BUDGETS) >= 4096:
            _BUDGETS.clear()
        got = _BUDGETS[key] = Budget.from_proto(b)
    return got


def _privileged(msg: Any, present: bool) -> dict | None:
    if not present:
        return None
    return MessageToDict(msg, preserving_proto_field_name=True)


@dataclass(frozen=True)
class Episode:
    """The client-side state of one episode after its latest reset or step.

    turns is the whole history so far (reset turns plus every step's turns), accumulated on
    the client. privileged is None unless asked for; when several calls asked for it, the
    latest call's fields are laid over the earlier ones (so the reset's ambiguities stay). On a
    TIDE task the reset's privileged dict holds "tide" (read it as a TideInfo with .tide), and a
    step that asked a question on a task with a chain holds its "routing" ("L1", "L2" or "other";
    StepResult.routing is the step's own). The reset's privileged dict also holds "record_id", the
    task's corpus record id (TIDE's instance_id, e.g. "tide-a1-J"), which may differ from
    task.task_id, the public id (opaque for TIDE samples); read it with .record_id.

    protocol is the episode's protocol as reset names it ("ambitab", "bird-c", ...); subtask the
    sub-task being played (1, or 2 once a BIRD_C follow-up is released); budget the interaction
    budget in the protocol's unit (None from a server that does not send one); sql_required is
    True when only submit_sql is accepted now (BIRD_C: the last turn, or a debug retry). An
    Episode made from a bare token knows none of them ("", 0, None, False)."""

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
    protocol: str = ""
    subtask: int = 0
    budget: Budget | None = None
    sql_required: bool = False
    # The random id drawn at reset (Episode.episode_uid: one started episode; every step and fork
    # of it carries it) and the tags the reset sealed in (None when it set none). Both go into the
    # episode's record (avtgym.records).
    episode_uid: str = ""
    tags: "dict[str, str] | None" = None

    @property
    def request(self) -> str:
        return self.task.request if self.task is not None else ""

    @property
    def record_id(self) -> str:
        """The task's corpus record id (privileged "record_id", set on reset); "" without
        privileged data (or from a server that does not send it)."""
        p = self.privileged
        return str(p.get("record_id", "")) if p else ""

    @property
    def tide(self) -> "TideInfo | None":
        """TIDE's labels of the task (privileged "tide", set on reset), built when read; None
        without privileged data or on a task without TIDE labels."""
        p = self.privileged
        t = p.get("tide") if p else None
        return TideInfo.from_dict(t) if t is not None else None

    @staticmethod
    def from_proto(e: Any) -> "Episode":
        o = e.observation
        return Episode(
            token=bytes(e.token),
            episode_id=e.episode_id,
            seed=int(e.seed),
            group_index=int(e.group_index),
            task=TaskView.from_proto(o.task) if o.HasField("task") else None,
            turns=_turns(o.turns),
            phase=_name(_PHASE, o.phase),
            question_budget=o.question_budget,
            questions_asked=o.questions_asked,
            questions_remaining=o.questions_remaining,
            done=False,
            status="running",
            reward=None,
            privileged=_privileged(e.privileged, e.HasField("privileged")),
            protocol=_name(_PROTOCOL, o.protocol),
            subtask=int(o.subtask) or 1,
            budget=_budget(o),
            sql_required=bool(o.sql_required),
            episode_uid=e.episode_uid,
        )

    @staticmethod
    def from_token(token: bytes) -> "Episode":
        """An Episode that knows only its token (for stepping a raw token)."""
        return Episode(bytes(token), "", 0, 0, None, (), "", 0, 0, 0, False, "", None, None)


@dataclass(frozen=True)
class StepResult:
    """The outcome of one step: the updated episode and what this step added. protocol, subtask,
    budget and sql_required are the updated episode's (see Episode); released is True on the step
    that released a BIRD_C follow-up (its request is then an "environment" "request" turn of
    new_turns)."""

    episode: Episode
    new_turns: tuple[Turn, ...]
    done: bool
    status: str
    reward: Reward | None
    privileged: dict | None

    @staticmethod
    def from_proto(prev: Episode, r: Any) -> "StepResult":
        o = r.observation
        new_turns = _turns(o.turns)
        status = _name(_STATUS, r.status)
        reward = Reward.from_proto(r.reward) if r.HasField("reward") else None
        priv = _privileged(r.privileged, r.HasField("privileged"))
        merged = prev.privileged
        if priv is not None:
            merged = {**(prev.privileged or {}), **priv}
        done = r.done
        # The updated episode: prev's fields with this step's laid over them, as dataclasses.replace
        # would make it, without its per-field __init__ (an Episode subclass still goes through it).
        changes = {
            "token": r.token,
            "task": TaskView.from_proto(o.task) if o.HasField("task") else prev.task,
            "turns": prev.turns + new_turns if prev.turns else new_turns,
            "phase": _name(_PHASE, o.phase),
            "question_budget": o.question_budget,
            "questions_asked": o.questions_asked,
            "questions_remaining": o.questions_remaining,
            "done": done,
            "status": status,
            "reward": reward,
            "privileged": merged,
            "protocol": _name(_PROTOCOL, o.protocol),
            "subtask": o.subtask or 1,
            "budget": _budget(o),
            "sql_required": o.sql_required,
        }
        if type(prev) is Episode:
            fields = prev.__dict__.copy()
            fields.update(changes)
            ep = _make(Episode, fields)
        else:
            ep = replace(prev, **changes)
        return _make(StepResult, {"episode": ep, "new_turns": new_turns, "done": done, "status": status,
                                  "reward": reward, "privileged": priv})

    @property
    def protocol(self) -> str:
        return self.episode.protocol

    @property
    def subtask(self) -> int:
        return self.episode.subtask

    @property
    def budget(self) -> Budget | None:
        return self.episode.budget

    @property
    def sql_required(self) -> bool:
        return self.episode.sql_required

    @property
    def routing(self) -> str:
        """The chain routing of the question this step asked (privileged "routing", under any
        protocol, on a task with a chain): "L1" or "L2" (the lowest layer among the credited
        ambiguities not resolved before, else among all credited ones) or "other" (nothing
        credited, e.g. L2 asked before L1 under the chain rule); "" without privileged data, on a
        task without a chain, or when the step asked nothing."""
        p = self.privileged
        return _label(_ROUTING, p.get("routing_enum"), str(p.get("routing", ""))) if p else ""

    @property
    def released(self) -> bool:
        return any(t.role == "environment" and t.kind == "request" for t in self.new_turns)

    @property
    def tool_result(self) -> str | None:
        """BIRD_A: the output of the tool this step called (the text of its "tool_result" turn),
        or None when the step called no tool (or the budget could not pay for it)."""
        for t in reversed(self.new_turns):
            if t.kind == "tool_result":
                return t.text
        return None

    @property
    def coins_left(self) -> float | None:
        """BIRD_A: the coins left (budget.remaining), or None when the budget is not in coins."""
        b = self.episode.budget
        return b.remaining if b is not None and b.unit == "coins" else None


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
        name = lambda v: _name(_ORACLE_TYPE, v)  # noqa: E731
        return OracleInfo(name(o.type), o.matcher, o.responder, name(o.hybrid), o.test_fixture,
                          o.type == reference)


@dataclass(frozen=True)
class ProtocolInfo:
    """One protocol's published rules (EnvService.ListProtocols), read from the server rather than
    copied into the client. protocol is its name as reset(protocol=...) takes it ("ambitab",
    "bird-c", "bird-a", "tide-f", "tide-p"); actions the Action kinds it accepts (any other is
    refused with INVALID_ACTION); prices, for a protocol that charges coins (BIRD_A), what each
    accepted action costs in coins (empty otherwise; the server charges them before the action);
    budget how the budget is set, in words; default_patience and max_patience the default and
    upper bound of reset(patience=...) or extra_questions (0: the protocol takes none);
    base_coins and coins_per_ambiguity BIRD_A's starting coins before patience (6 + 2 per
    counted ambiguity); turn_limit the fixed bound on agent turns (TIDE: 20; 0 when the budget
    decides); draws which tasks a reset without task_id draws from."""

    protocol: str
    actions: tuple[str, ...]
    prices: Mapping[str, float]
    budget: str
    default_patience: int
    max_patience: int
    base_coins: float
    coins_per_ambiguity: float
    turn_limit: int
    draws: str

    @staticmethod
    def from_proto(p: Any) -> "ProtocolInfo":
        return ProtocolInfo(_name(_PROTOCOL, p.protocol), tuple(p.actions),
                            {a.action: a.cost_milli / 1000 for a in p.prices}, p.budget,
                            p.default_patience, p.max_patience, p.base_coins_milli / 1000,
                            p.coins_per_ambiguity_milli / 1000, p.turn_limit, p.draws)


def reward_enum(reward: str | None) -> int:
    """RewardType of a reward name ("question_f1", "outcome", "bird_interact"); None or "" is
    UNSPECIFIED: the protocol's default (question_f1 under AMBITAB, bird_interact under BIRD_C)."""
    if reward is None or reward == "":
        return epb.REWARD_TYPE_UNSPECIFIED
    v = _REWARD_VALUE.get(str(reward).strip().lower().replace("-", "_"))
    if v is None:
        raise ValueError(f"unknown reward {reward!r}: want one of {_choices(_REWARD_VALUE)}")
    return v


def solver_enum(solver: str | None) -> int:
    if solver is None or solver == "":
        return epb.SOLVER_UNSPECIFIED
    v = _SOLVER_VALUE.get(str(solver).strip().lower())
    if v is None:
        raise ValueError(f"unknown solver {solver!r}: want one of {_choices(_SOLVER_VALUE)}")
    return v


def oracle_enum(oracle: str | None) -> int:
    if oracle is None or oracle == "":
        return epb.ORACLE_TYPE_UNSPECIFIED
    v = _ORACLE_VALUE.get(str(oracle).strip().lower())
    if v is None:
        raise ValueError(f"unknown oracle {oracle!r}: want one of {_choices(_ORACLE_VALUE)}")
    return v


def protocol_enum(protocol: "str | int | None") -> int:
    """The Protocol value of reset(protocol=...): None or "" (UNSPECIFIED: the server's default,
    AMBITAB); a Protocol enum value (avtgym.v1.episode_pb2.PROTOCOL_BIRD_C); or a name, as the
    CLI's --protocol writes it ("ambitab", "bird-c", "bird-a", "tide-f", "tide-p"), in any case,
    with "_" for "-" and with or without the "PROTOCOL_" prefix ("BIRD_C", "PROTOCOL_BIRD_C")."""
    if protocol is None or protocol == "":
        return epb.PROTOCOL_UNSPECIFIED
    if isinstance(protocol, bool):
        raise TypeError(f"protocol {protocol!r}: want a name or a Protocol value")
    if isinstance(protocol, int):
        if protocol not in _PROTOCOL:
            raise ValueError(f"unknown protocol value {protocol}: want one of {', '.join(PROTOCOLS)}")
        return int(protocol)
    if not isinstance(protocol, str):
        raise TypeError(f"protocol {protocol!r}: want a name or a Protocol value")
    key = protocol.strip().lower().replace("_", "-")
    if key.startswith("protocol-"):
        key = key[len("protocol-"):]
    v = _PROTOCOL_VALUE.get(key)
    if v is None:
        raise ValueError(f"unknown protocol {protocol!r}: want one of {', '.join(PROTOCOLS)}")
    return v


def _option_enum(value: "str | int | None", table: Mapping[str, int], prefix: str, what: str) -> int:
    """The enum value of an episode option given as None or "" (UNSPECIFIED: the server's default),
    an enum value, or a name from table in any case, with or without prefix."""
    names = ", ".join(sorted(table, key=table.__getitem__))
    if value is None or value == "":
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what} {value!r}: want a name or an enum value")
    if isinstance(value, int):
        if value != 0 and value not in table.values():
            raise ValueError(f"unknown {what} value {value}: want one of {names}")
        return int(value)
    key = value.strip().lower()
    if key.startswith(prefix):
        key = key[len(prefix):]
    v = table.get(key)
    if v is None:
        raise ValueError(f"unknown {what} {value!r}: want one of {names}")
    return v


def comparison_enum(comparison: "str | int | None") -> int:
    """The Comparison value of reset(comparison=...): None or "" (UNSPECIFIED: the server's
    default, SOUND); a Comparison enum value (avtgym.v1.episode_pb2.COMPARISON_HARNESS); or a
    name, "sound" or "harness", in any case, with or without the "COMPARISON_" prefix. The option
    changes the verification only on records whose comparison is BIRD-Interact's default test
    (imported from BIRD-Interact); other records ignore it."""
    return _option_enum(comparison, _COMPARISON_VALUE, "comparison_", "comparison")


def follow_up_state_enum(state: "str | int | None") -> int:
    """The FollowUpState value of reset(follow_up_state=...) (BIRD_C, BIRD_A): None (the server's
    default, REFERENCE: the follow-up is verified on the state the reference's phase 1 leaves),
    "reference", "policy" (the policy's own phase-1 state, the a-Interact harness's rule), or an
    enum value."""
    return _option_enum(state, _FOLLOW_UP_STATE_VALUE, "follow_up_state_", "follow_up_state")


def bird_variant_enum(variant: "str | int | None") -> int:
    """The BirdVariant value of reset(bird_variant=...) (BIRD_C, BIRD_A): None (the server's
    default, ORIGINAL: the original c-Interact pipeline and batch a-Interact runner), "original",
    "adk" (BIRD-Interact-ADK's rules), or an enum value."""
    return _option_enum(variant, _BIRD_VARIANT_VALUE, "bird_variant_", "bird_variant")


def protocol_name(protocol: "str | int | None") -> str:
    """The name ("ambitab", "bird-c", ...) of what reset(protocol=...) takes; None is "ambitab"."""
    return _PROTOCOL[protocol_enum(protocol)]


def as_mapping(x: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(x or {})


def sample_types_enum(sample_types: "Iterable[str | int] | str | int | None") -> list[int]:
    """The SampleType values of reset(sample_types=[...]): None or empty (no restriction); a name
    or a SampleType value, or an iterable of them. A name is "chain_only", "drift_only" or
    "joint", in any case, with or without the "SAMPLE_TYPE_" prefix; a value is
    avtgym.v1.episode_pb2.SAMPLE_TYPE_JOINT and the like."""
    if sample_types is None:
        return []
    if isinstance(sample_types, (str, int)):
        sample_types = [sample_types]
    out: list[int] = []
    for st in sample_types:
        if isinstance(st, bool) or not isinstance(st, (str, int)):
            raise TypeError(f"sample type {st!r}: want a name or a SampleType value")
        if isinstance(st, int):
            if st not in _SAMPLE_TYPE:
                raise ValueError(f"unknown sample type value {st}: want one of {', '.join(SAMPLE_TYPES)}")
            out.append(int(st))
            continue
        key = st.strip().lower()
        if key.startswith("sample_type_"):
            key = key[len("sample_type_"):]
        v = _SAMPLE_TYPE_VALUE.get(key)
        if v is None:
            raise ValueError(f"unknown sample type {st!r}: want one of {', '.join(SAMPLE_TYPES)}")
        out.append(v)
    return out

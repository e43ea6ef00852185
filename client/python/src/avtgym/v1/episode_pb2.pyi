from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_POLICY: _ClassVar[Role]
    ROLE_ORACLE: _ClassVar[Role]
    ROLE_ENVIRONMENT: _ClassVar[Role]
    ROLE_PREFILLED: _ClassVar[Role]

class TurnKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TURN_KIND_UNSPECIFIED: _ClassVar[TurnKind]
    TURN_KIND_REQUEST: _ClassVar[TurnKind]
    TURN_KIND_QUESTION: _ClassVar[TurnKind]
    TURN_KIND_REPLY: _ClassVar[TurnKind]
    TURN_KIND_STOP: _ClassVar[TurnKind]
    TURN_KIND_SQL: _ClassVar[TurnKind]
    TURN_KIND_FEEDBACK: _ClassVar[TurnKind]
    TURN_KIND_NOTICE: _ClassVar[TurnKind]
    TURN_KIND_REFUSAL: _ClassVar[TurnKind]
    TURN_KIND_UNPARSED: _ClassVar[TurnKind]
    TURN_KIND_TOOL_CALL: _ClassVar[TurnKind]
    TURN_KIND_TOOL_RESULT: _ClassVar[TurnKind]
    TURN_KIND_DRIFT: _ClassVar[TurnKind]

class Protocol(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_UNSPECIFIED: _ClassVar[Protocol]
    PROTOCOL_AMBITAB: _ClassVar[Protocol]
    PROTOCOL_BIRD_C: _ClassVar[Protocol]
    PROTOCOL_BIRD_A: _ClassVar[Protocol]
    PROTOCOL_TIDE_F: _ClassVar[Protocol]
    PROTOCOL_TIDE_P: _ClassVar[Protocol]

class BudgetUnit(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUDGET_UNIT_UNSPECIFIED: _ClassVar[BudgetUnit]
    BUDGET_UNIT_QUESTIONS: _ClassVar[BudgetUnit]
    BUDGET_UNIT_TURNS: _ClassVar[BudgetUnit]
    BUDGET_UNIT_COINS: _ClassVar[BudgetUnit]

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_ASKING: _ClassVar[Phase]
    PHASE_SOLVING: _ClassVar[Phase]
    PHASE_DONE: _ClassVar[Phase]

class EpisodeStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EPISODE_STATUS_UNSPECIFIED: _ClassVar[EpisodeStatus]
    EPISODE_STATUS_RUNNING: _ClassVar[EpisodeStatus]
    EPISODE_STATUS_TERMINATED: _ClassVar[EpisodeStatus]
    EPISODE_STATUS_TRUNCATED: _ClassVar[EpisodeStatus]
    EPISODE_STATUS_ERROR: _ClassVar[EpisodeStatus]

class RewardType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REWARD_TYPE_UNSPECIFIED: _ClassVar[RewardType]
    REWARD_TYPE_QUESTION_F1: _ClassVar[RewardType]
    REWARD_TYPE_OUTCOME: _ClassVar[RewardType]
    REWARD_TYPE_BIRD_INTERACT: _ClassVar[RewardType]

class Solver(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SOLVER_UNSPECIFIED: _ClassVar[Solver]
    SOLVER_CLIENT: _ClassVar[Solver]
    SOLVER_LOOKUP: _ClassVar[Solver]
    SOLVER_LLM: _ClassVar[Solver]

class OracleType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ORACLE_TYPE_UNSPECIFIED: _ClassVar[OracleType]
    ORACLE_TYPE_DETERMINISTIC: _ClassVar[OracleType]
    ORACLE_TYPE_LLM: _ClassVar[OracleType]
    ORACLE_TYPE_LLM_SCOPED: _ClassVar[OracleType]
    ORACLE_TYPE_HYBRID: _ClassVar[OracleType]
    ORACLE_TYPE_HYBRID_SCOPED: _ClassVar[OracleType]
    ORACLE_TYPE_TEST_LEAKY_RESPONDER: _ClassVar[OracleType]
    ORACLE_TYPE_TEST_CREDIT_ALL: _ClassVar[OracleType]

class AmbiguityKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AMBIGUITY_KIND_UNSPECIFIED: _ClassVar[AmbiguityKind]
    AMBIGUITY_KIND_CRITICAL: _ClassVar[AmbiguityKind]
    AMBIGUITY_KIND_KNOWLEDGE: _ClassVar[AmbiguityKind]
    AMBIGUITY_KIND_NON_CRITICAL: _ClassVar[AmbiguityKind]

class Comparison(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPARISON_UNSPECIFIED: _ClassVar[Comparison]
    COMPARISON_SOUND: _ClassVar[Comparison]
    COMPARISON_HARNESS: _ClassVar[Comparison]

class FollowUpState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FOLLOW_UP_STATE_UNSPECIFIED: _ClassVar[FollowUpState]
    FOLLOW_UP_STATE_REFERENCE: _ClassVar[FollowUpState]
    FOLLOW_UP_STATE_POLICY: _ClassVar[FollowUpState]

class BirdVariant(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BIRD_VARIANT_UNSPECIFIED: _ClassVar[BirdVariant]
    BIRD_VARIANT_ORIGINAL: _ClassVar[BirdVariant]
    BIRD_VARIANT_ADK: _ClassVar[BirdVariant]

class SampleType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SAMPLE_TYPE_UNSPECIFIED: _ClassVar[SampleType]
    SAMPLE_TYPE_CHAIN_ONLY: _ClassVar[SampleType]
    SAMPLE_TYPE_DRIFT_ONLY: _ClassVar[SampleType]
    SAMPLE_TYPE_JOINT: _ClassVar[SampleType]

class DriftSubtype(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DRIFT_SUBTYPE_UNSPECIFIED: _ClassVar[DriftSubtype]
    DRIFT_SUBTYPE_VALUE: _ClassVar[DriftSubtype]
    DRIFT_SUBTYPE_CONSTRAINT: _ClassVar[DriftSubtype]
    DRIFT_SUBTYPE_PROJECTION: _ClassVar[DriftSubtype]

class ChainRouting(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHAIN_ROUTING_UNSPECIFIED: _ClassVar[ChainRouting]
    CHAIN_ROUTING_L1: _ClassVar[ChainRouting]
    CHAIN_ROUTING_L2: _ClassVar[ChainRouting]
    CHAIN_ROUTING_OTHER: _ClassVar[ChainRouting]
ROLE_UNSPECIFIED: Role
ROLE_POLICY: Role
ROLE_ORACLE: Role
ROLE_ENVIRONMENT: Role
ROLE_PREFILLED: Role
TURN_KIND_UNSPECIFIED: TurnKind
TURN_KIND_REQUEST: TurnKind
TURN_KIND_QUESTION: TurnKind
TURN_KIND_REPLY: TurnKind
TURN_KIND_STOP: TurnKind
TURN_KIND_SQL: TurnKind
TURN_KIND_FEEDBACK: TurnKind
TURN_KIND_NOTICE: TurnKind
TURN_KIND_REFUSAL: TurnKind
TURN_KIND_UNPARSED: TurnKind
TURN_KIND_TOOL_CALL: TurnKind
TURN_KIND_TOOL_RESULT: TurnKind
TURN_KIND_DRIFT: TurnKind
PROTOCOL_UNSPECIFIED: Protocol
PROTOCOL_AMBITAB: Protocol
PROTOCOL_BIRD_C: Protocol
PROTOCOL_BIRD_A: Protocol
PROTOCOL_TIDE_F: Protocol
PROTOCOL_TIDE_P: Protocol
BUDGET_UNIT_UNSPECIFIED: BudgetUnit
BUDGET_UNIT_QUESTIONS: BudgetUnit
BUDGET_UNIT_TURNS: BudgetUnit
BUDGET_UNIT_COINS: BudgetUnit
PHASE_UNSPECIFIED: Phase
PHASE_ASKING: Phase
PHASE_SOLVING: Phase
PHASE_DONE: Phase
EPISODE_STATUS_UNSPECIFIED: EpisodeStatus
EPISODE_STATUS_RUNNING: EpisodeStatus
EPISODE_STATUS_TERMINATED: EpisodeStatus
EPISODE_STATUS_TRUNCATED: EpisodeStatus
EPISODE_STATUS_ERROR: EpisodeStatus
REWARD_TYPE_UNSPECIFIED: RewardType
REWARD_TYPE_QUESTION_F1: RewardType
REWARD_TYPE_OUTCOME: RewardType
REWARD_TYPE_BIRD_INTERACT: RewardType
SOLVER_UNSPECIFIED: Solver
SOLVER_CLIENT: Solver
SOLVER_LOOKUP: Solver
SOLVER_LLM: Solver
ORACLE_TYPE_UNSPECIFIED: OracleType
ORACLE_TYPE_DETERMINISTIC: OracleType
ORACLE_TYPE_LLM: OracleType
ORACLE_TYPE_LLM_SCOPED: OracleType
ORACLE_TYPE_HYBRID: OracleType
ORACLE_TYPE_HYBRID_SCOPED: OracleType
ORACLE_TYPE_TEST_LEAKY_RESPONDER: OracleType
ORACLE_TYPE_TEST_CREDIT_ALL: OracleType
AMBIGUITY_KIND_UNSPECIFIED: AmbiguityKind
AMBIGUITY_KIND_CRITICAL: AmbiguityKind
AMBIGUITY_KIND_KNOWLEDGE: AmbiguityKind
AMBIGUITY_KIND_NON_CRITICAL: AmbiguityKind
COMPARISON_UNSPECIFIED: Comparison
COMPARISON_SOUND: Comparison
COMPARISON_HARNESS: Comparison
FOLLOW_UP_STATE_UNSPECIFIED: FollowUpState
FOLLOW_UP_STATE_REFERENCE: FollowUpState
FOLLOW_UP_STATE_POLICY: FollowUpState
BIRD_VARIANT_UNSPECIFIED: BirdVariant
BIRD_VARIANT_ORIGINAL: BirdVariant
BIRD_VARIANT_ADK: BirdVariant
SAMPLE_TYPE_UNSPECIFIED: SampleType
SAMPLE_TYPE_CHAIN_ONLY: SampleType
SAMPLE_TYPE_DRIFT_ONLY: SampleType
SAMPLE_TYPE_JOINT: SampleType
DRIFT_SUBTYPE_UNSPECIFIED: DriftSubtype
DRIFT_SUBTYPE_VALUE: DriftSubtype
DRIFT_SUBTYPE_CONSTRAINT: DriftSubtype
DRIFT_SUBTYPE_PROJECTION: DriftSubtype
CHAIN_ROUTING_UNSPECIFIED: ChainRouting
CHAIN_ROUTING_L1: ChainRouting
CHAIN_ROUTING_L2: ChainRouting
CHAIN_ROUTING_OTHER: ChainRouting

class Turn(_message.Message):
    __slots__ = ("role", "kind", "text")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    role: Role
    kind: TurnKind
    text: str
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., kind: _Optional[_Union[TurnKind, str]] = ..., text: _Optional[str] = ...) -> None: ...

class Action(_message.Message):
    __slots__ = ("ask", "stop", "submit_sql", "unparsed", "execute", "get_schema", "get_all_column_meanings", "get_column_meaning", "get_all_external_knowledge_names", "get_knowledge_definition", "get_all_knowledge_definitions")
    class Ask(_message.Message):
        __slots__ = ("text",)
        TEXT_FIELD_NUMBER: _ClassVar[int]
        text: str
        def __init__(self, text: _Optional[str] = ...) -> None: ...
    class Stop(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class SubmitSql(_message.Message):
        __slots__ = ("sql",)
        SQL_FIELD_NUMBER: _ClassVar[int]
        sql: str
        def __init__(self, sql: _Optional[str] = ...) -> None: ...
    class Execute(_message.Message):
        __slots__ = ("sql",)
        SQL_FIELD_NUMBER: _ClassVar[int]
        sql: str
        def __init__(self, sql: _Optional[str] = ...) -> None: ...
    class GetSchema(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class GetAllColumnMeanings(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class GetColumnMeaning(_message.Message):
        __slots__ = ("table", "column")
        TABLE_FIELD_NUMBER: _ClassVar[int]
        COLUMN_FIELD_NUMBER: _ClassVar[int]
        table: str
        column: str
        def __init__(self, table: _Optional[str] = ..., column: _Optional[str] = ...) -> None: ...
    class GetAllExternalKnowledgeNames(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class GetKnowledgeDefinition(_message.Message):
        __slots__ = ("name",)
        NAME_FIELD_NUMBER: _ClassVar[int]
        name: str
        def __init__(self, name: _Optional[str] = ...) -> None: ...
    class GetAllKnowledgeDefinitions(_message.Message):
        __slots__ = ()
        def __init__(self) -> None: ...
    class Unparsed(_message.Message):
        __slots__ = ("text",)
        TEXT_FIELD_NUMBER: _ClassVar[int]
        text: str
        def __init__(self, text: _Optional[str] = ...) -> None: ...
    ASK_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_SQL_FIELD_NUMBER: _ClassVar[int]
    UNPARSED_FIELD_NUMBER: _ClassVar[int]
    EXECUTE_FIELD_NUMBER: _ClassVar[int]
    GET_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    GET_ALL_COLUMN_MEANINGS_FIELD_NUMBER: _ClassVar[int]
    GET_COLUMN_MEANING_FIELD_NUMBER: _ClassVar[int]
    GET_ALL_EXTERNAL_KNOWLEDGE_NAMES_FIELD_NUMBER: _ClassVar[int]
    GET_KNOWLEDGE_DEFINITION_FIELD_NUMBER: _ClassVar[int]
    GET_ALL_KNOWLEDGE_DEFINITIONS_FIELD_NUMBER: _ClassVar[int]
    ask: Action.Ask
    stop: Action.Stop
    submit_sql: Action.SubmitSql
    unparsed: Action.Unparsed
    execute: Action.Execute
    get_schema: Action.GetSchema
    get_all_column_meanings: Action.GetAllColumnMeanings
    get_column_meaning: Action.GetColumnMeaning
    get_all_external_knowledge_names: Action.GetAllExternalKnowledgeNames
    get_knowledge_definition: Action.GetKnowledgeDefinition
    get_all_knowledge_definitions: Action.GetAllKnowledgeDefinitions
    def __init__(self, ask: _Optional[_Union[Action.Ask, _Mapping]] = ..., stop: _Optional[_Union[Action.Stop, _Mapping]] = ..., submit_sql: _Optional[_Union[Action.SubmitSql, _Mapping]] = ..., unparsed: _Optional[_Union[Action.Unparsed, _Mapping]] = ..., execute: _Optional[_Union[Action.Execute, _Mapping]] = ..., get_schema: _Optional[_Union[Action.GetSchema, _Mapping]] = ..., get_all_column_meanings: _Optional[_Union[Action.GetAllColumnMeanings, _Mapping]] = ..., get_column_meaning: _Optional[_Union[Action.GetColumnMeaning, _Mapping]] = ..., get_all_external_knowledge_names: _Optional[_Union[Action.GetAllExternalKnowledgeNames, _Mapping]] = ..., get_knowledge_definition: _Optional[_Union[Action.GetKnowledgeDefinition, _Mapping]] = ..., get_all_knowledge_definitions: _Optional[_Union[Action.GetAllKnowledgeDefinitions, _Mapping]] = ...) -> None: ...

class EpisodeOptions(_message.Message):
    __slots__ = ("reward", "solver", "extra_questions", "zero_ambiguity_budget", "oracle", "strict_credit", "protocol", "patience", "comparison", "follow_up_state", "bird_variant")
    REWARD_FIELD_NUMBER: _ClassVar[int]
    SOLVER_FIELD_NUMBER: _ClassVar[int]
    EXTRA_QUESTIONS_FIELD_NUMBER: _ClassVar[int]
    ZERO_AMBIGUITY_BUDGET_FIELD_NUMBER: _ClassVar[int]
    ORACLE_FIELD_NUMBER: _ClassVar[int]
    STRICT_CREDIT_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    PATIENCE_FIELD_NUMBER: _ClassVar[int]
    COMPARISON_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_UP_STATE_FIELD_NUMBER: _ClassVar[int]
    BIRD_VARIANT_FIELD_NUMBER: _ClassVar[int]
    reward: RewardType
    solver: Solver
    extra_questions: int
    zero_ambiguity_budget: int
    oracle: OracleType
    strict_credit: bool
    protocol: Protocol
    patience: int
    comparison: Comparison
    follow_up_state: FollowUpState
    bird_variant: BirdVariant
    def __init__(self, reward: _Optional[_Union[RewardType, str]] = ..., solver: _Optional[_Union[Solver, str]] = ..., extra_questions: _Optional[int] = ..., zero_ambiguity_budget: _Optional[int] = ..., oracle: _Optional[_Union[OracleType, str]] = ..., strict_credit: _Optional[bool] = ..., protocol: _Optional[_Union[Protocol, str]] = ..., patience: _Optional[int] = ..., comparison: _Optional[_Union[Comparison, str]] = ..., follow_up_state: _Optional[_Union[FollowUpState, str]] = ..., bird_variant: _Optional[_Union[BirdVariant, str]] = ...) -> None: ...

class KnowledgeEntry(_message.Message):
    __slots__ = ("id", "name", "definition")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DEFINITION_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    definition: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., definition: _Optional[str] = ...) -> None: ...

class DatabaseView(_message.Message):
    __slots__ = ("id", "dialect", "schema", "column_meanings", "knowledge")
    class ColumnMeaningsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    DIALECT_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_FIELD_NUMBER: _ClassVar[int]
    COLUMN_MEANINGS_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_FIELD_NUMBER: _ClassVar[int]
    id: str
    dialect: str
    schema: str
    column_meanings: _containers.ScalarMap[str, str]
    knowledge: _containers.RepeatedCompositeFieldContainer[KnowledgeEntry]
    def __init__(self, id: _Optional[str] = ..., dialect: _Optional[str] = ..., schema: _Optional[str] = ..., column_meanings: _Optional[_Mapping[str, str]] = ..., knowledge: _Optional[_Iterable[_Union[KnowledgeEntry, _Mapping]]] = ...) -> None: ...

class TaskView(_message.Message):
    __slots__ = ("corpus", "task_id", "split", "request", "evidence", "database")
    CORPUS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    DATABASE_FIELD_NUMBER: _ClassVar[int]
    corpus: str
    task_id: str
    split: str
    request: str
    evidence: str
    database: DatabaseView
    def __init__(self, corpus: _Optional[str] = ..., task_id: _Optional[str] = ..., split: _Optional[str] = ..., request: _Optional[str] = ..., evidence: _Optional[str] = ..., database: _Optional[_Union[DatabaseView, _Mapping]] = ...) -> None: ...

class TaskSummary(_message.Message):
    __slots__ = ("corpus", "task_id", "split", "database", "request", "subtasks", "sample_type", "sample_type_enum")
    CORPUS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    DATABASE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    SUBTASKS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_TYPE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_TYPE_ENUM_FIELD_NUMBER: _ClassVar[int]
    corpus: str
    task_id: str
    split: str
    database: str
    request: str
    subtasks: int
    sample_type: str
    sample_type_enum: SampleType
    def __init__(self, corpus: _Optional[str] = ..., task_id: _Optional[str] = ..., split: _Optional[str] = ..., database: _Optional[str] = ..., request: _Optional[str] = ..., subtasks: _Optional[int] = ..., sample_type: _Optional[str] = ..., sample_type_enum: _Optional[_Union[SampleType, str]] = ...) -> None: ...

class Observation(_message.Message):
    __slots__ = ("task", "turns", "phase", "question_budget", "questions_asked", "questions_remaining", "protocol", "subtask", "budget", "sql_required")
    TASK_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    QUESTION_BUDGET_FIELD_NUMBER: _ClassVar[int]
    QUESTIONS_ASKED_FIELD_NUMBER: _ClassVar[int]
    QUESTIONS_REMAINING_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    SQL_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    task: TaskView
    turns: _containers.RepeatedCompositeFieldContainer[Turn]
    phase: Phase
    question_budget: int
    questions_asked: int
    questions_remaining: int
    protocol: Protocol
    subtask: int
    budget: Budget
    sql_required: bool
    def __init__(self, task: _Optional[_Union[TaskView, _Mapping]] = ..., turns: _Optional[_Iterable[_Union[Turn, _Mapping]]] = ..., phase: _Optional[_Union[Phase, str]] = ..., question_budget: _Optional[int] = ..., questions_asked: _Optional[int] = ..., questions_remaining: _Optional[int] = ..., protocol: _Optional[_Union[Protocol, str]] = ..., subtask: _Optional[int] = ..., budget: _Optional[_Union[Budget, _Mapping]] = ..., sql_required: _Optional[bool] = ...) -> None: ...

class Budget(_message.Message):
    __slots__ = ("unit", "total_milli", "used_milli", "remaining_milli")
    UNIT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MILLI_FIELD_NUMBER: _ClassVar[int]
    USED_MILLI_FIELD_NUMBER: _ClassVar[int]
    REMAINING_MILLI_FIELD_NUMBER: _ClassVar[int]
    unit: BudgetUnit
    total_milli: int
    used_milli: int
    remaining_milli: int
    def __init__(self, unit: _Optional[_Union[BudgetUnit, str]] = ..., total_milli: _Optional[int] = ..., used_milli: _Optional[int] = ..., remaining_milli: _Optional[int] = ...) -> None: ...

class Reward(_message.Message):
    __slots__ = ("type", "value", "components")
    class ComponentsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    TYPE_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    COMPONENTS_FIELD_NUMBER: _ClassVar[int]
    type: RewardType
    value: float
    components: _containers.ScalarMap[str, float]
    def __init__(self, type: _Optional[_Union[RewardType, str]] = ..., value: _Optional[float] = ..., components: _Optional[_Mapping[str, float]] = ...) -> None: ...

class AmbiguityInfo(_message.Message):
    __slots__ = ("index", "term", "kind", "counted", "resolution", "aliases")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    index: int
    term: str
    kind: AmbiguityKind
    counted: bool
    resolution: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, index: _Optional[int] = ..., term: _Optional[str] = ..., kind: _Optional[_Union[AmbiguityKind, str]] = ..., counted: _Optional[bool] = ..., resolution: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ...) -> None: ...

class Credit(_message.Message):
    __slots__ = ("index", "term", "counted")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TERM_FIELD_NUMBER: _ClassVar[int]
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    index: int
    term: str
    counted: bool
    def __init__(self, index: _Optional[int] = ..., term: _Optional[str] = ..., counted: _Optional[bool] = ...) -> None: ...

class Privileged(_message.Message):
    __slots__ = ("avt_id", "interpretation", "ambiguities", "reference_sql", "credits", "verifier_reason", "episode_credits", "solver_sql", "oracle_action", "follow_up_reference_sql", "routing", "tide", "record_id", "routing_enum")
    AVT_ID_FIELD_NUMBER: _ClassVar[int]
    INTERPRETATION_FIELD_NUMBER: _ClassVar[int]
    AMBIGUITIES_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_SQL_FIELD_NUMBER: _ClassVar[int]
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    VERIFIER_REASON_FIELD_NUMBER: _ClassVar[int]
    EPISODE_CREDITS_FIELD_NUMBER: _ClassVar[int]
    SOLVER_SQL_FIELD_NUMBER: _ClassVar[int]
    ORACLE_ACTION_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_UP_REFERENCE_SQL_FIELD_NUMBER: _ClassVar[int]
    ROUTING_FIELD_NUMBER: _ClassVar[int]
    TIDE_FIELD_NUMBER: _ClassVar[int]
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    ROUTING_ENUM_FIELD_NUMBER: _ClassVar[int]
    avt_id: str
    interpretation: str
    ambiguities: _containers.RepeatedCompositeFieldContainer[AmbiguityInfo]
    reference_sql: _containers.RepeatedScalarFieldContainer[str]
    credits: _containers.RepeatedCompositeFieldContainer[Credit]
    verifier_reason: str
    episode_credits: _containers.RepeatedCompositeFieldContainer[Credit]
    solver_sql: str
    oracle_action: str
    follow_up_reference_sql: _containers.RepeatedScalarFieldContainer[str]
    routing: str
    tide: TideInfo
    record_id: str
    routing_enum: ChainRouting
    def __init__(self, avt_id: _Optional[str] = ..., interpretation: _Optional[str] = ..., ambiguities: _Optional[_Iterable[_Union[AmbiguityInfo, _Mapping]]] = ..., reference_sql: _Optional[_Iterable[str]] = ..., credits: _Optional[_Iterable[_Union[Credit, _Mapping]]] = ..., verifier_reason: _Optional[str] = ..., episode_credits: _Optional[_Iterable[_Union[Credit, _Mapping]]] = ..., solver_sql: _Optional[str] = ..., oracle_action: _Optional[str] = ..., follow_up_reference_sql: _Optional[_Iterable[str]] = ..., routing: _Optional[str] = ..., tide: _Optional[_Union[TideInfo, _Mapping]] = ..., record_id: _Optional[str] = ..., routing_enum: _Optional[_Union[ChainRouting, str]] = ...) -> None: ...

class TideInfo(_message.Message):
    __slots__ = ("cluster", "sample_type", "drift_utterance", "post_drift_reference_sql", "drift_subtype", "intent_subtype", "chain_layers", "sample_type_enum", "drift_subtype_enum")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_TYPE_FIELD_NUMBER: _ClassVar[int]
    DRIFT_UTTERANCE_FIELD_NUMBER: _ClassVar[int]
    POST_DRIFT_REFERENCE_SQL_FIELD_NUMBER: _ClassVar[int]
    DRIFT_SUBTYPE_FIELD_NUMBER: _ClassVar[int]
    INTENT_SUBTYPE_FIELD_NUMBER: _ClassVar[int]
    CHAIN_LAYERS_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_TYPE_ENUM_FIELD_NUMBER: _ClassVar[int]
    DRIFT_SUBTYPE_ENUM_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    sample_type: str
    drift_utterance: str
    post_drift_reference_sql: _containers.RepeatedScalarFieldContainer[str]
    drift_subtype: str
    intent_subtype: str
    chain_layers: _containers.RepeatedScalarFieldContainer[int]
    sample_type_enum: SampleType
    drift_subtype_enum: DriftSubtype
    def __init__(self, cluster: _Optional[str] = ..., sample_type: _Optional[str] = ..., drift_utterance: _Optional[str] = ..., post_drift_reference_sql: _Optional[_Iterable[str]] = ..., drift_subtype: _Optional[str] = ..., intent_subtype: _Optional[str] = ..., chain_layers: _Optional[_Iterable[int]] = ..., sample_type_enum: _Optional[_Union[SampleType, str]] = ..., drift_subtype_enum: _Optional[_Union[DriftSubtype, str]] = ...) -> None: ...

from avtgym.v1 import episode_pb2 as _episode_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResetRequest(_message.Message):
    __slots__ = ("corpus", "task_id", "split", "seed", "group_size", "options", "include_privileged", "sample_types", "tags", "share_group_observation")
    class TagsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CORPUS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    GROUP_SIZE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_TYPES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    SHARE_GROUP_OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    corpus: str
    task_id: str
    split: str
    seed: int
    group_size: int
    options: _episode_pb2.EpisodeOptions
    include_privileged: bool
    sample_types: _containers.RepeatedScalarFieldContainer[_episode_pb2.SampleType]
    tags: _containers.ScalarMap[str, str]
    share_group_observation: bool
    def __init__(self, corpus: _Optional[str] = ..., task_id: _Optional[str] = ..., split: _Optional[str] = ..., seed: _Optional[int] = ..., group_size: _Optional[int] = ..., options: _Optional[_Union[_episode_pb2.EpisodeOptions, _Mapping]] = ..., include_privileged: _Optional[bool] = ..., sample_types: _Optional[_Iterable[_Union[_episode_pb2.SampleType, str]]] = ..., tags: _Optional[_Mapping[str, str]] = ..., share_group_observation: _Optional[bool] = ...) -> None: ...

class Episode(_message.Message):
    __slots__ = ("token", "observation", "seed", "group_index", "episode_id", "privileged", "episode_uid")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    GROUP_INDEX_FIELD_NUMBER: _ClassVar[int]
    EPISODE_ID_FIELD_NUMBER: _ClassVar[int]
    PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    EPISODE_UID_FIELD_NUMBER: _ClassVar[int]
    token: bytes
    observation: _episode_pb2.Observation
    seed: int
    group_index: int
    episode_id: str
    privileged: _episode_pb2.Privileged
    episode_uid: str
    def __init__(self, token: _Optional[bytes] = ..., observation: _Optional[_Union[_episode_pb2.Observation, _Mapping]] = ..., seed: _Optional[int] = ..., group_index: _Optional[int] = ..., episode_id: _Optional[str] = ..., privileged: _Optional[_Union[_episode_pb2.Privileged, _Mapping]] = ..., episode_uid: _Optional[str] = ...) -> None: ...

class ResetResponse(_message.Message):
    __slots__ = ("episodes", "shared_observation", "shared_privileged")
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    SHARED_OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    SHARED_PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    episodes: _containers.RepeatedCompositeFieldContainer[Episode]
    shared_observation: _episode_pb2.Observation
    shared_privileged: _episode_pb2.Privileged
    def __init__(self, episodes: _Optional[_Iterable[_Union[Episode, _Mapping]]] = ..., shared_observation: _Optional[_Union[_episode_pb2.Observation, _Mapping]] = ..., shared_privileged: _Optional[_Union[_episode_pb2.Privileged, _Mapping]] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("token", "action", "include_privileged")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    token: bytes
    action: _episode_pb2.Action
    include_privileged: bool
    def __init__(self, token: _Optional[bytes] = ..., action: _Optional[_Union[_episode_pb2.Action, _Mapping]] = ..., include_privileged: _Optional[bool] = ...) -> None: ...

class StepResponse(_message.Message):
    __slots__ = ("token", "observation", "done", "status", "reward", "privileged")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    OBSERVATION_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    token: bytes
    observation: _episode_pb2.Observation
    done: bool
    status: _episode_pb2.EpisodeStatus
    reward: _episode_pb2.Reward
    privileged: _episode_pb2.Privileged
    def __init__(self, token: _Optional[bytes] = ..., observation: _Optional[_Union[_episode_pb2.Observation, _Mapping]] = ..., done: _Optional[bool] = ..., status: _Optional[_Union[_episode_pb2.EpisodeStatus, str]] = ..., reward: _Optional[_Union[_episode_pb2.Reward, _Mapping]] = ..., privileged: _Optional[_Union[_episode_pb2.Privileged, _Mapping]] = ...) -> None: ...

class ResetBatchRequest(_message.Message):
    __slots__ = ("requests",)
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[ResetRequest]
    def __init__(self, requests: _Optional[_Iterable[_Union[ResetRequest, _Mapping]]] = ...) -> None: ...

class ResetBatchResult(_message.Message):
    __slots__ = ("status", "response")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    status: _status_pb2.Status
    response: ResetResponse
    def __init__(self, status: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., response: _Optional[_Union[ResetResponse, _Mapping]] = ...) -> None: ...

class ResetBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[ResetBatchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[ResetBatchResult, _Mapping]]] = ...) -> None: ...

class StepBatchRequest(_message.Message):
    __slots__ = ("steps",)
    STEPS_FIELD_NUMBER: _ClassVar[int]
    steps: _containers.RepeatedCompositeFieldContainer[StepRequest]
    def __init__(self, steps: _Optional[_Iterable[_Union[StepRequest, _Mapping]]] = ...) -> None: ...

class StepBatchResult(_message.Message):
    __slots__ = ("status", "response")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    status: _status_pb2.Status
    response: StepResponse
    def __init__(self, status: _Optional[_Union[_status_pb2.Status, _Mapping]] = ..., response: _Optional[_Union[StepResponse, _Mapping]] = ...) -> None: ...

class StepBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[StepBatchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[StepBatchResult, _Mapping]]] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ("corpus", "split", "page_size", "page_token", "include_privileged")
    CORPUS_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    corpus: str
    split: str
    page_size: int
    page_token: str
    include_privileged: bool
    def __init__(self, corpus: _Optional[str] = ..., split: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_privileged: _Optional[bool] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "next_page_token", "total_size")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[_episode_pb2.TaskSummary]
    next_page_token: str
    total_size: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[_episode_pb2.TaskSummary, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total_size: _Optional[int] = ...) -> None: ...

class GetTaskRequest(_message.Message):
    __slots__ = ("corpus", "task_id", "include_privileged")
    CORPUS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    corpus: str
    task_id: str
    include_privileged: bool
    def __init__(self, corpus: _Optional[str] = ..., task_id: _Optional[str] = ..., include_privileged: _Optional[bool] = ...) -> None: ...

class GetTaskResponse(_message.Message):
    __slots__ = ("task", "privileged")
    TASK_FIELD_NUMBER: _ClassVar[int]
    PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    task: _episode_pb2.TaskView
    privileged: _episode_pb2.Privileged
    def __init__(self, task: _Optional[_Union[_episode_pb2.TaskView, _Mapping]] = ..., privileged: _Optional[_Union[_episode_pb2.Privileged, _Mapping]] = ...) -> None: ...

class ListCorporaRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CorpusInfo(_message.Message):
    __slots__ = ("name", "description", "task_count", "avt_count", "splits", "databases", "content_hash")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    TASK_COUNT_FIELD_NUMBER: _ClassVar[int]
    AVT_COUNT_FIELD_NUMBER: _ClassVar[int]
    SPLITS_FIELD_NUMBER: _ClassVar[int]
    DATABASES_FIELD_NUMBER: _ClassVar[int]
    CONTENT_HASH_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    task_count: int
    avt_count: int
    splits: _containers.RepeatedScalarFieldContainer[str]
    databases: _containers.RepeatedScalarFieldContainer[str]
    content_hash: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., task_count: _Optional[int] = ..., avt_count: _Optional[int] = ..., splits: _Optional[_Iterable[str]] = ..., databases: _Optional[_Iterable[str]] = ..., content_hash: _Optional[str] = ...) -> None: ...

class ListCorporaResponse(_message.Message):
    __slots__ = ("corpora", "server_version")
    CORPORA_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    corpora: _containers.RepeatedCompositeFieldContainer[CorpusInfo]
    server_version: str
    def __init__(self, corpora: _Optional[_Iterable[_Union[CorpusInfo, _Mapping]]] = ..., server_version: _Optional[str] = ...) -> None: ...

class ListOraclesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OracleInfo(_message.Message):
    __slots__ = ("type", "matcher", "responder", "hybrid", "test_fixture")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MATCHER_FIELD_NUMBER: _ClassVar[int]
    RESPONDER_FIELD_NUMBER: _ClassVar[int]
    HYBRID_FIELD_NUMBER: _ClassVar[int]
    TEST_FIXTURE_FIELD_NUMBER: _ClassVar[int]
    type: _episode_pb2.OracleType
    matcher: str
    responder: str
    hybrid: _episode_pb2.OracleType
    test_fixture: bool
    def __init__(self, type: _Optional[_Union[_episode_pb2.OracleType, str]] = ..., matcher: _Optional[str] = ..., responder: _Optional[str] = ..., hybrid: _Optional[_Union[_episode_pb2.OracleType, str]] = ..., test_fixture: _Optional[bool] = ...) -> None: ...

class ListOraclesResponse(_message.Message):
    __slots__ = ("oracles", "reference")
    ORACLES_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_FIELD_NUMBER: _ClassVar[int]
    oracles: _containers.RepeatedCompositeFieldContainer[OracleInfo]
    reference: _episode_pb2.OracleType
    def __init__(self, oracles: _Optional[_Iterable[_Union[OracleInfo, _Mapping]]] = ..., reference: _Optional[_Union[_episode_pb2.OracleType, str]] = ...) -> None: ...

class ListProtocolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProtocolInfo(_message.Message):
    __slots__ = ("protocol", "actions", "prices", "budget", "default_patience", "max_patience", "base_coins_milli", "coins_per_ambiguity_milli", "turn_limit", "draws")
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    ACTIONS_FIELD_NUMBER: _ClassVar[int]
    PRICES_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_PATIENCE_FIELD_NUMBER: _ClassVar[int]
    MAX_PATIENCE_FIELD_NUMBER: _ClassVar[int]
    BASE_COINS_MILLI_FIELD_NUMBER: _ClassVar[int]
    COINS_PER_AMBIGUITY_MILLI_FIELD_NUMBER: _ClassVar[int]
    TURN_LIMIT_FIELD_NUMBER: _ClassVar[int]
    DRAWS_FIELD_NUMBER: _ClassVar[int]
    protocol: _episode_pb2.Protocol
    actions: _containers.RepeatedScalarFieldContainer[str]
    prices: _containers.RepeatedCompositeFieldContainer[ActionPrice]
    budget: str
    default_patience: int
    max_patience: int
    base_coins_milli: int
    coins_per_ambiguity_milli: int
    turn_limit: int
    draws: str
    def __init__(self, protocol: _Optional[_Union[_episode_pb2.Protocol, str]] = ..., actions: _Optional[_Iterable[str]] = ..., prices: _Optional[_Iterable[_Union[ActionPrice, _Mapping]]] = ..., budget: _Optional[str] = ..., default_patience: _Optional[int] = ..., max_patience: _Optional[int] = ..., base_coins_milli: _Optional[int] = ..., coins_per_ambiguity_milli: _Optional[int] = ..., turn_limit: _Optional[int] = ..., draws: _Optional[str] = ...) -> None: ...

class ActionPrice(_message.Message):
    __slots__ = ("action", "cost_milli")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    COST_MILLI_FIELD_NUMBER: _ClassVar[int]
    action: str
    cost_milli: int
    def __init__(self, action: _Optional[str] = ..., cost_milli: _Optional[int] = ...) -> None: ...

class ListProtocolsResponse(_message.Message):
    __slots__ = ("protocols",)
    PROTOCOLS_FIELD_NUMBER: _ClassVar[int]
    protocols: _containers.RepeatedCompositeFieldContainer[ProtocolInfo]
    def __init__(self, protocols: _Optional[_Iterable[_Union[ProtocolInfo, _Mapping]]] = ...) -> None: ...

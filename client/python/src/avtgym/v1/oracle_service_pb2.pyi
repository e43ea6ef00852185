from avtgym.v1 import episode_pb2 as _episode_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DialogueTurn(_message.Message):
    __slots__ = ("question", "reply")
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    REPLY_FIELD_NUMBER: _ClassVar[int]
    question: str
    reply: str
    def __init__(self, question: _Optional[str] = ..., reply: _Optional[str] = ...) -> None: ...

class Interpretation(_message.Message):
    __slots__ = ("avt_id", "label")
    AVT_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    avt_id: str
    label: str
    def __init__(self, avt_id: _Optional[str] = ..., label: _Optional[str] = ...) -> None: ...

class AskRequest(_message.Message):
    __slots__ = ("corpus", "task_id", "interpretation", "history", "question", "oracle", "include_privileged", "strict_credit")
    CORPUS_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    INTERPRETATION_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    QUESTION_FIELD_NUMBER: _ClassVar[int]
    ORACLE_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    STRICT_CREDIT_FIELD_NUMBER: _ClassVar[int]
    corpus: str
    task_id: str
    interpretation: Interpretation
    history: _containers.RepeatedCompositeFieldContainer[DialogueTurn]
    question: str
    oracle: _episode_pb2.OracleType
    include_privileged: bool
    strict_credit: bool
    def __init__(self, corpus: _Optional[str] = ..., task_id: _Optional[str] = ..., interpretation: _Optional[_Union[Interpretation, _Mapping]] = ..., history: _Optional[_Iterable[_Union[DialogueTurn, _Mapping]]] = ..., question: _Optional[str] = ..., oracle: _Optional[_Union[_episode_pb2.OracleType, str]] = ..., include_privileged: _Optional[bool] = ..., strict_credit: _Optional[bool] = ...) -> None: ...

class AskPrivileged(_message.Message):
    __slots__ = ("credits", "oracle_action")
    CREDITS_FIELD_NUMBER: _ClassVar[int]
    ORACLE_ACTION_FIELD_NUMBER: _ClassVar[int]
    credits: _containers.RepeatedCompositeFieldContainer[_episode_pb2.Credit]
    oracle_action: str
    def __init__(self, credits: _Optional[_Iterable[_Union[_episode_pb2.Credit, _Mapping]]] = ..., oracle_action: _Optional[str] = ...) -> None: ...

class AskResponse(_message.Message):
    __slots__ = ("reply", "privileged", "refused")
    REPLY_FIELD_NUMBER: _ClassVar[int]
    PRIVILEGED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    reply: str
    privileged: AskPrivileged
    refused: bool
    def __init__(self, reply: _Optional[str] = ..., privileged: _Optional[_Union[AskPrivileged, _Mapping]] = ..., refused: _Optional[bool] = ...) -> None: ...

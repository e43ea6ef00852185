from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    TOKEN_MALFORMED: _ClassVar[ErrorReason]
    TOKEN_TAMPERED: _ClassVar[ErrorReason]
    TOKEN_FOREIGN: _ClassVar[ErrorReason]
    TOKEN_EXPIRED: _ClassVar[ErrorReason]
    RECORD_CHANGED: _ClassVar[ErrorReason]
    UNKNOWN_CORPUS: _ClassVar[ErrorReason]
    UNKNOWN_TASK: _ClassVar[ErrorReason]
    NO_TASKS: _ClassVar[ErrorReason]
    INVALID_ACTION: _ClassVar[ErrorReason]
    INVALID_OPTION: _ClassVar[ErrorReason]
    WRONG_PHASE: _ClassVar[ErrorReason]
    EPISODE_DONE: _ClassVar[ErrorReason]
    INVALID_PAGE_TOKEN: _ClassVar[ErrorReason]
    REQUEST_MALFORMED: _ClassVar[ErrorReason]
    REQUEST_TOO_LARGE: _ClassVar[ErrorReason]
    RESPONSE_TOO_LARGE: _ClassVar[ErrorReason]
    BATCH_TOO_LARGE: _ClassVar[ErrorReason]
    VERIFIER_BUSY: _ClassVar[ErrorReason]
    ORACLE_FAILED: _ClassVar[ErrorReason]
    INTERNAL: _ClassVar[ErrorReason]
    DEADLINE_EXCEEDED: _ClassVar[ErrorReason]
    CANCELED: _ClassVar[ErrorReason]
    CREDENTIALS_MISSING: _ClassVar[ErrorReason]
    CREDENTIALS_INVALID: _ClassVar[ErrorReason]
    PRIVILEGED_DENIED: _ClassVar[ErrorReason]
    OVERLOADED: _ClassVar[ErrorReason]
    DRAINING: _ClassVar[ErrorReason]
ERROR_REASON_UNSPECIFIED: ErrorReason
TOKEN_MALFORMED: ErrorReason
TOKEN_TAMPERED: ErrorReason
TOKEN_FOREIGN: ErrorReason
TOKEN_EXPIRED: ErrorReason
RECORD_CHANGED: ErrorReason
UNKNOWN_CORPUS: ErrorReason
UNKNOWN_TASK: ErrorReason
NO_TASKS: ErrorReason
INVALID_ACTION: ErrorReason
INVALID_OPTION: ErrorReason
WRONG_PHASE: ErrorReason
EPISODE_DONE: ErrorReason
INVALID_PAGE_TOKEN: ErrorReason
REQUEST_MALFORMED: ErrorReason
REQUEST_TOO_LARGE: ErrorReason
RESPONSE_TOO_LARGE: ErrorReason
BATCH_TOO_LARGE: ErrorReason
VERIFIER_BUSY: ErrorReason
ORACLE_FAILED: ErrorReason
INTERNAL: ErrorReason
DEADLINE_EXCEEDED: ErrorReason
CANCELED: ErrorReason
CREDENTIALS_MISSING: ErrorReason
CREDENTIALS_INVALID: ErrorReason
PRIVILEGED_DENIED: ErrorReason
OVERLOADED: ErrorReason
DRAINING: ErrorReason

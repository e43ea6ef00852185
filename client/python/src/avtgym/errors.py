"""AvtgymError: a gRPC status with avtgym's ErrorInfo reason, BadRequest field and RetryInfo delay."""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2

__all__ = ["AvtgymError"]

_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


class AvtgymError(Exception):
    """An error from the server (or the transport).

    code: the grpc.StatusCode name ("INVALID_ARGUMENT", "UNAVAILABLE", ...); reason: the
    google.rpc.ErrorInfo reason ("TOKEN_TAMPERED", "WRONG_PHASE", ...) or "" when none: the
    name of an avtgym.v1.ErrorReason value (avtgym.v1.error_reason_pb2, where each one's code
    and meaning is documented), or, for the standard services (health), the code's name;
    field: the first BadRequest field violation's field, else the ErrorInfo's "field" metadata,
    or ""; message: the status message;
    metadata: the ErrorInfo metadata; retry_delay: the google.rpc.RetryInfo delay in seconds, or
    None when the status carried no RetryInfo (RESOURCE_EXHAUSTED / VERIFIER_BUSY or OVERLOADED,
    UNAVAILABLE / DRAINING: retry the same request after it, as the clients do).

    Refusals of the server's front door: UNAUTHENTICATED / CREDENTIALS_MISSING or
    CREDENTIALS_INVALID (give a token or certificate the server knows), PERMISSION_DENIED /
    PRIVILEGED_DENIED (this principal may not ask for privileged data; field names the request
    field that asked). A TLS handshake the server refused (no client certificate, or one its CA
    did not sign) surfaces as UNAVAILABLE with no reason."""

    def __init__(self, code: str, message: str, reason: str = "", field: str = "",
                 metadata: dict[str, str] | None = None, retry_delay: float | None = None):
        super().__init__(f"{code}: {reason + ': ' if reason else ''}{message}")
        self.code = code
        self.message = message
        self.reason = reason
        self.field = field
        self.metadata = dict(metadata or {})
        self.retry_delay = retry_delay

    @property
    def status_code(self) -> grpc.StatusCode:
        return grpc.StatusCode[self.code]

    def __reduce__(self):  # picklable, for multiprocessing trainers
        return (AvtgymError, (self.code, self.message, self.reason, self.field, self.metadata, self.retry_delay))

    @staticmethod
    def from_status(st: status_pb2.Status) -> "AvtgymError":
        reason, fld, meta, delay = "", "", {}, None
        for d in st.details:
            if d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) and not reason:
                ei = error_details_pb2.ErrorInfo()
                d.Unpack(ei)
                reason, meta = ei.reason, dict(ei.metadata)
            elif d.Is(error_details_pb2.BadRequest.DESCRIPTOR) and not fld:
                br = error_details_pb2.BadRequest()
                d.Unpack(br)
                if br.field_violations:
                    fld = br.field_violations[0].field
            elif d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) and delay is None:
                ri = error_details_pb2.RetryInfo()
                d.Unpack(ri)
                delay = max(0.0, ri.retry_delay.seconds + ri.retry_delay.nanos / 1e9)
        # A field travels in a BadRequest (INVALID_ARGUMENT) and in the ErrorInfo's metadata
        # (every code, e.g. PERMISSION_DENIED / PRIVILEGED_DENIED).
        fld = fld or meta.get("field", "")
        return AvtgymError(_CODE_NAMES.get(st.code, f"CODE_{st.code}"), st.message, reason, fld, meta, delay)

    @staticmethod
    def from_rpc_error(err: Any) -> "AvtgymError":
        code = err.code() if callable(getattr(err, "code", None)) else grpc.StatusCode.UNKNOWN
        details = err.details() if callable(getattr(err, "details", None)) else str(err)
        md = err.trailing_metadata() if callable(getattr(err, "trailing_metadata", None)) else None
        for key, value in md or ():
            if key == "grpc-status-details-bin":
                st = status_pb2.Status()
                try:
                    st.ParseFromString(value)
                except Exception:
                    break
                out = AvtgymError.from_status(st)
                out.code = code.name if code is not None else out.code
                return out
        name = code.name if code is not None else "UNKNOWN"
        return AvtgymError(name, details or "")

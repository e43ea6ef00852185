"""Sync and asyncio clients of avtgym's EnvService.

Every call has a deadline (timeout seconds, across its attempts) and is retried on UNAVAILABLE
(the transport failed, or the server is draining: DRAINING) and on RESOURCE_EXHAUSTED with reason
OVERLOADED (the server's admission control refused the call) or VERIFIER_BUSY (no query slot):
after the delay of the status's google.rpc.RetryInfo plus up to 10% jitter, or, without one,
with jittered exponential backoff. This is safe because the server is stateless and a step is a
pure function of (token, action), so a retried step gives the same result, and a refused call
was not run. In a StepBatch the items that failed that way, or with RESOURCE_EXHAUSTED /
RESPONSE_TOO_LARGE (the item did not fit in the response: resend it in another batch), are resent
in a further StepBatch.

A server that requires TLS or a bearer token is reached with tls=TLS(...) and token="..."; when
they are not given, the AVTGYM_TLS* and AVTGYM_TOKEN* environment variables are read (the Go
client reads the same ones).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
import inspect
import os
import random
import time
from typing import Any, Awaitable, Callable, Iterable, Mapping, Sequence, Union

import grpc

from avtgym.errors import AvtgymError
from avtgym.types import (
    Action,
    Episode,
    OracleInfo,
    ProtocolInfo,
    StepResult,
    TaskSummary,
    bird_variant_enum,
    comparison_enum,
    follow_up_state_enum,
    oracle_enum,
    protocol_enum,
    reward_enum,
    sample_types_enum,
    solver_enum,
)
from avtgym.v1 import env_service_pb2 as pb
from avtgym.v1 import env_service_pb2_grpc as pb_grpc
from avtgym.v1 import episode_pb2 as epb
from avtgym.v1 import oracle_service_pb2 as opb
from avtgym.v1 import oracle_service_pb2_grpc as opb_grpc

__all__ = ["Client", "AsyncClient", "EpisodeLike", "OracleReply", "TLS"]

EpisodeLike = Union[Episode, bytes]

# Reconnect quickly after a server restart (gRPC's default starts at 1 s and grows to 120 s).
_CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_receive_message_length", 64 << 20),
    ("grpc.max_send_message_length", 64 << 20),
]

_BACKOFF_START = 0.1
_BACKOFF_MAX = 2.0


def _backoff(attempt: int) -> float:
    wait = min(_BACKOFF_START * (2 ** attempt), _BACKOFF_MAX)
    return wait / 2 + random.random() * wait / 2


# RESOURCE_EXHAUSTED reasons after which the same request may succeed: the server refused it
# before running it (admission control), or no query slot of the verifier became free.
_RETRY_EXHAUSTED = ("OVERLOADED", "VERIFIER_BUSY")


def _retryable(err: AvtgymError) -> bool:
    """Whether resending the same request may succeed: the transport failed or the server is
    draining (UNAVAILABLE), or the server was saturated (RESOURCE_EXHAUSTED / OVERLOADED or
    VERIFIER_BUSY, with a RetryInfo delay)."""
    return err.code == "UNAVAILABLE" or (err.code == "RESOURCE_EXHAUSTED" and err.reason in _RETRY_EXHAUSTED)


def _resend_item(err: AvtgymError) -> bool:
    """Whether a failed StepBatch item is resent in a further batch: retryable, or too large to fit
    in the batch's response (RESPONSE_TOO_LARGE: another batch has room)."""
    return _retryable(err) or (err.code == "RESOURCE_EXHAUSTED" and err.reason == "RESPONSE_TOO_LARGE")


def _wait(err: AvtgymError, attempt: int) -> float:
    """How long to wait before resending: the server's RetryInfo delay (plus up to 10% jitter, so
    that many clients told the same delay do not all come back at once), else jittered backoff."""
    if err.retry_delay is not None:
        return err.retry_delay * (1.0 + 0.1 * random.random())
    return _backoff(attempt)


@dataclass(frozen=True)
class TLS:
    """How to reach a server over TLS: ca_file, the PEM CA that signed the server's certificate
    (None: the system's roots); cert_file and key_file, the client's PEM certificate and key for
    mutual TLS (both or neither); server_name, the name to check in the server's certificate
    instead of the target's host."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs both cert_file and key_file")
        return grpc.ssl_channel_credentials(root_certificates=read(self.ca_file),
                                            private_key=read(self.key_file),
                                            certificate_chain=read(self.cert_file))

    @staticmethod
    def from_env() -> "TLS | None":
        """TLS from AVTGYM_TLS_CA, AVTGYM_TLS_CERT, AVTGYM_TLS_KEY and AVTGYM_TLS_SERVER_NAME, or
        with AVTGYM_TLS=1 the system's roots; None when none is set."""
        ca, cert, key = (os.environ.get(k) or None for k in ("AVTGYM_TLS_CA", "AVTGYM_TLS_CERT", "AVTGYM_TLS_KEY"))
        on = os.environ.get("AVTGYM_TLS", "").lower() in ("1", "true")
        if not (ca or cert or on):
            return None
        return TLS(ca_file=ca, cert_file=cert, key_file=key,
                   server_name=os.environ.get("AVTGYM_TLS_SERVER_NAME") or None)


def _token_from_env() -> str | None:
    """AVTGYM_TOKEN, else the contents of the file AVTGYM_TOKEN_FILE names (stripped)."""
    tok = os.environ.get("AVTGYM_TOKEN")
    if tok:
        return tok
    path = os.environ.get("AVTGYM_TOKEN_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    return None


def _connection(tls: "TLS | bool | None", token: str | None, options: Sequence[tuple[str, Any]]
                ) -> tuple["TLS | None", tuple[tuple[str, str], ...], list[tuple[str, Any]]]:
    """The TLS settings, the per-call metadata (the bearer token) and the channel options of a
    client: explicit arguments win; None reads the environment; tls=False means plaintext."""
    if tls is None:
        tls = TLS.from_env()
    elif tls is True:
        tls = TLS()
    elif tls is False:
        tls = None
    if token is None:
        token = _token_from_env()
    metadata = (("authorization", "Bearer " + token),) if token else ()
    opts = list(_CHANNEL_OPTIONS) + list(options)
    if tls is not None and tls.server_name:
        opts.append(("grpc.ssl_target_name_override", tls.server_name))
    return tls, metadata, opts


# grpc.health.v1.Health/Check, encoded by hand (grpcio-health-checking is not a dependency):
# HealthCheckRequest{string service = 1}, HealthCheckResponse{ServingStatus status = 1}.
_HEALTH_CHECK = "/grpc.health.v1.Health/Check"
_SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _health_request(service: str) -> bytes:
    b = service.encode()
    return b"\x0a" + _varint(len(b)) + b if b else b""


def _health_status(data: bytes) -> str:
    # The response's only field is status (field 1, varint); an unset status is UNKNOWN.
    if len(data) >= 2 and data[0] == 0x08:
        return _SERVING_STATUS.get(data[1], f"STATUS_{data[1]}")
    return "UNKNOWN"


def _reset_request(task_id=None, corpus=None, split=None, seed=None, reward=None,
                   solver=None, extra_questions=None, zero_ambiguity_budget=None,
                   privileged=False, group_size=0, oracle=None, strict_credit=False,
                   protocol=None, patience=None, comparison=None, follow_up_state=None,
                   bird_variant=None, sample_types=None, tags=None) -> pb.ResetRequest:
    proto = protocol_enum(protocol)
    if proto in (epb.PROTOCOL_UNSPECIFIED, epb.PROTOCOL_AMBITAB):
        # AMBITAB's defaults, sent as before (the server's defaults are the same).
        reward = "question_f1" if reward is None else reward
        solver = "client" if solver is None else solver
    opts = epb.EpisodeOptions(reward=reward_enum(reward), solver=solver_enum(solver),
                              oracle=oracle_enum(oracle), strict_credit=bool(strict_credit),
                              protocol=proto, comparison=comparison_enum(comparison),
                              follow_up_state=follow_up_state_enum(follow_up_state),
                              bird_variant=bird_variant_enum(bird_variant))
    if patience is not None:
        opts.patience = int(patience)
    if extra_questions is not None:
        opts.extra_questions = int(extra_questions)
    if zero_ambiguity_budget is not None:
        opts.zero_ambiguity_budget = int(zero_ambiguity_budget)
    req = pb.ResetRequest(corpus=corpus or "", task_id=task_id or "", split=split or "",
                          group_size=int(group_size), options=opts,
                          include_privileged=bool(privileged),
                          sample_types=sample_types_enum(sample_types))
    if seed is not None:
        req.seed = int(seed)
    if tags:
        req.tags.update({str(k): str(v) for k, v in dict(tags).items()})
    return req


def _with_tags(eps: list[Episode], tags: "Mapping[str, str] | None") -> list[Episode]:
    """The reset's episodes, each knowing the tags it was reset with (for its record)."""
    if not tags:
        return eps
    t = {str(k): str(v) for k, v in dict(tags).items()}
    return [replace(e, tags=t) for e in eps]


def _group_episodes(resp: Any) -> list[Episode]:
    """A reset's episodes with their full first observation: the shared form (share_group_observation)
    sends the group's observation and privileged data once; an episode without its own takes them."""
    obs = resp.shared_observation if resp.HasField("shared_observation") else None
    priv = resp.shared_privileged if resp.HasField("shared_privileged") else None
    for e in resp.episodes:
        if obs is not None and not e.HasField("observation"):
            e.observation.CopyFrom(obs)
        if priv is not None and not e.HasField("privileged"):
            e.privileged.CopyFrom(priv)
    return [Episode.from_proto(e) for e in resp.episodes]


def _group_request(n: int, kwargs: "dict[str, Any]") -> pb.ResetRequest:
    """A group's reset, asking for the shared form (read back by _group_episodes, which also reads the
    default form of a server that predates it)."""
    req = _reset_request(group_size=n, **kwargs)
    req.share_group_observation = True
    return req


def _list_tasks_request(corpus: str | None, split: str | None, token: str,
                        privileged: bool) -> pb.ListTasksRequest:
    return pb.ListTasksRequest(corpus=corpus or "", split=split or "", page_size=1000, page_token=token,
                               include_privileged=bool(privileged))


def _episode(ep: EpisodeLike) -> Episode:
    if isinstance(ep, Episode):
        return ep
    if isinstance(ep, (bytes, bytearray, memoryview)):
        return Episode.from_token(bytes(ep))
    raise TypeError(f"want an Episode or token bytes, got {type(ep).__name__}")


def _step_request(ep: Episode, action: Action, privileged: bool) -> pb.StepRequest:
    req = pb.StepRequest(token=ep.token)
    _fill_step(req, action, privileged)
    return req


def _fill_step(req: pb.StepRequest, action: Action, privileged: bool) -> None:
    """Set a StepRequest's action (in place: nothing built and then copied) and privileged flag."""
    if not isinstance(action, Action):
        raise TypeError(f"want an avtgym.Action, got {type(action).__name__}")
    action._fill(req.action)
    if privileged:
        req.include_privileged = True


def _batch_request(pairs: Sequence[tuple[Episode, Action]], todo: Sequence[int], privileged: bool
                   ) -> pb.StepBatchRequest:
    """The StepBatchRequest of pairs[i] for i in todo, each item built in the request's own list
    (a StepBatchRequest(steps=[...]) would copy every StepRequest into it)."""
    req = pb.StepBatchRequest()
    add = req.steps.add
    for i in todo:
        ep, action = pairs[i]
        _fill_step(add(token=ep.token), action, privileged)
    return req


def _batch_results(eps: Sequence[Episode], resp: pb.StepBatchResponse) -> list[StepResult | AvtgymError]:
    out: list[StepResult | AvtgymError] = []
    for ep, r in zip(eps, resp.results):
        if r.HasField("status") and r.status.code != 0:
            out.append(AvtgymError.from_status(r.status))
        else:
            out.append(StepResult.from_proto(ep, r.response))
    if len(out) != len(eps):
        raise AvtgymError("INTERNAL", f"StepBatch answered {len(resp.results)} items for {len(eps)} steps")
    return out


def _batch_resend(todo: list[int], got: Sequence[StepResult | AvtgymError], attempt: int
                  ) -> tuple[list[int], float]:
    """The items of a StepBatch to resend, and how long to wait first (the longest RetryInfo
    delay among them; no wait when they only did not fit in the response)."""
    again, wait = [], 0.0
    for i, r in zip(todo, got):
        if isinstance(r, AvtgymError) and _resend_item(r):
            again.append(i)
            if _retryable(r):
                wait = max(wait, _wait(r, attempt))
    return again, wait


@dataclass(frozen=True)
class OracleReply:
    """OracleService.Ask's answer: the reply text; refused, True when the oracle declined to answer
    (the question named no registered ambiguity or was too long for the oracle's model; in an
    episode that answer is a turn of kind "refusal"); and, when privileged=True was asked for,
    the credited ambiguities (dicts with index, term, counted) and the oracle's validated action."""

    reply: str
    credits: tuple[dict[str, Any], ...] = ()
    action: str = ""
    refused: bool = False


def _ask_request(question: str, task_id: str | None, history: Sequence[tuple[str, str]],
                 corpus: str | None, avt_id: str | None, interpretation: str | None,
                 oracle: str | None, privileged: bool, strict_credit: bool = False) -> Any:
    req = opb.AskRequest(
        corpus=corpus or "", question=question, oracle=oracle_enum(oracle),
        include_privileged=privileged, strict_credit=bool(strict_credit),
        history=[opb.DialogueTurn(question=q, reply=r) for q, r in history])
    # AskRequest.task is a oneof: the task id, or the AVT id and interpretation label.
    if task_id and (avt_id or interpretation):
        raise ValueError("name the task by task_id, or by avt_id and interpretation, not both")
    if task_id:
        req.task_id = task_id
    elif avt_id or interpretation:
        req.interpretation.CopyFrom(opb.Interpretation(avt_id=avt_id or "", label=interpretation or ""))
    return req


def _oracle_infos(resp: Any) -> list[OracleInfo]:
    return [OracleInfo.from_proto(o, resp.reference) for o in resp.oracles]


def _oracle_reply(resp: Any) -> OracleReply:
    p = resp.privileged
    credits = tuple({"index": c.index, "term": c.term, "counted": c.counted} for c in p.credits)
    return OracleReply(resp.reply, credits, p.oracle_action, resp.refused)


def _balanced(target: str, options: list[tuple[str, Any]]) -> tuple[str, list[tuple[str, Any]]]:
    """The gRPC target and channel options of a client's channel, balanced round-robin over
    every address the target names (the Go client's client.Dial does the same): a gRPC target
    ("host:port", "dns:///name:port" for a headless Service, "ipv4:a:p,b:p") goes to gRPC as
    it is; a comma-separated list "host1:port,host2:port" is resolved once, here, into an
    ipv4: (else ipv6:) address list, and the first host names the server (TLS and :authority).
    An explicit grpc.lb_policy_name or grpc.service_config option wins."""
    import ipaddress
    import socket

    opts = list(options)
    names = {k for k, _ in opts}
    if not names & {"grpc.lb_policy_name", "grpc.service_config"}:
        opts.append(("grpc.lb_policy_name", "round_robin"))
    if "," not in target or ":///" in target or target.startswith(("ipv4:", "ipv6:", "unix:")):
        return target, opts
    v4: list[str] = []
    v6: list[str] = []
    first = ""
    for item in (a.strip() for a in target.split(",")):
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"address list {target!r}: {item!r} is not host:port")
        host = host.strip("[]")
        first = first or item
        try:
            ips = [ipaddress.ip_address(host)]
        except ValueError:
            ips = [ipaddress.ip_address(ai[4][0]) for ai in
                   socket.getaddrinfo(host, int(port), proto=socket.IPPROTO_TCP)]
        for ip in dict.fromkeys(ips):
            (v4 if ip.version == 4 else v6).append(f"{ip}:{port}" if ip.version == 4 else f"[{ip}]:{port}")
    if "grpc.default_authority" not in names:
        opts.append(("grpc.default_authority", first))
    return ("ipv4:" + ",".join(v4)) if v4 else ("ipv6:" + ",".join(v6)), opts


class Client:
    """A synchronous EnvService client.

    Client("127.0.0.1:50051", timeout=30.0, retries=5): timeout is each call's deadline in
    seconds (covering its retries); retries is how many times a call failing with UNAVAILABLE
    (after jittered backoff, or the server's RetryInfo delay when it gave one) or
    RESOURCE_EXHAUSTED / OVERLOADED or VERIFIER_BUSY (after the server's RetryInfo delay) is
    repeated. tls: a TLS (or True for the system's roots; False for plaintext; None reads
    AVTGYM_TLS*); token: a bearer token sent with every call (None reads AVTGYM_TOKEN or
    AVTGYM_TOKEN_FILE). Use as a context manager or call close()."""

    def __init__(self, target: str = "127.0.0.1:50051", timeout: float = 30.0, retries: int = 5,
                 options: Sequence[tuple[str, Any]] = (), tls: "TLS | bool | None" = None,
                 token: str | None = None):
        self.target = target
        self.timeout = timeout
        self.retries = retries
        self.tls, self._metadata, opts = _connection(tls, token, options)
        chan_target, opts = _balanced(target, opts)
        if self.tls is not None:
            self._channel = grpc.secure_channel(chan_target, self.tls.credentials(), options=opts)
        else:
            self._channel = grpc.insecure_channel(chan_target, options=opts)
        self._stub = pb_grpc.EnvServiceStub(self._channel)
        self._oracle = opb_grpc.OracleServiceStub(self._channel)
        self._health = self._channel.unary_unary(_HEALTH_CHECK, request_serializer=_health_request,
                                                 response_deserializer=_health_status)

    def _call(self, method: str, req: Any, stub: Any = None, deadline: float | None = None) -> Any:
        fn = getattr(stub or self._stub, method)
        if deadline is None:
            deadline = time.monotonic() + self.timeout
        attempt = 0
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise AvtgymError("DEADLINE_EXCEEDED", f"{method}: deadline of {self.timeout}s exceeded")
                return fn(req, timeout=left, metadata=self._metadata)
            except grpc.RpcError as e:
                err = AvtgymError.from_rpc_error(e)
                if not _retryable(err) or attempt >= self.retries:
                    raise err from None
            wait = _wait(err, attempt)
            attempt += 1
            if time.monotonic() + wait >= deadline:
                raise err
            time.sleep(wait)

    def reset(self, task_id: str | None = None, corpus: str | None = None, split: str | None = None,
              seed: int | None = None, reward: str | None = None, solver: str | None = None,
              extra_questions: int | None = None, zero_ambiguity_budget: int | None = None,
              privileged: bool = False, oracle: str | None = None,
              strict_credit: bool = False, protocol: "str | int | None" = None,
              patience: int | None = None, comparison: "str | int | None" = None,
              follow_up_state: "str | int | None" = None,
              bird_variant: "str | int | None" = None,
              sample_types: "Iterable[str | int] | None" = None,
              tags: "Mapping[str, str] | None" = None) -> Episode:
        """Start one episode. reward: "question_f1" | "outcome" | "bird_interact" (None: the
        protocol's default, question_f1 under AMBITAB); solver: "client" | "lookup" | ... (None:
        "client"); oracle: None (the server's default, deterministic) or an OracleType name in
        lower case; strict_credit: the anti-gaming matcher option (a question credits at most one
        ambiguity, and one that reproduces the request credits nothing; off by default, as in
        AmbiTab). protocol: None (the server's default, AMBITAB), a name ("ambitab", "bird-c",
        "bird-a", "tide-f", "tide-p") or a Protocol enum value; patience: BIRD_C's turns beyond
        the m counted ambiguities (None: the server's default, 3; other protocols reject it).
        comparison: None (the server's default, "sound"), "sound" (avtgym's sound variant of
        BIRD-Interact's test, for training) or "harness" (BIRD-Interact's ex_base exactly, quirks
        included, for numbers comparable with the paper's), or a Comparison enum value; only
        records imported from BIRD-Interact read it, others ignore it. follow_up_state (BIRD_C,
        BIRD_A): None (the server's default, "reference": the follow-up is verified on the state
        the reference's phase 1 leaves) or "policy" (the policy's own phase-1 state);
        bird_variant (BIRD_C, BIRD_A): None (the server's default, "original": the original
        harnesses) or "adk" (BIRD-Interact-ADK's rules); other protocols reject both.
        Under BIRD_C leave reward and solver unset: it takes only its own reward and the client
        as solver. sample_types (a draw: task_id unset): restrict the draw to TIDE samples of
        these types, names ("chain_only", "drift_only", "joint") or SampleType values; the server
        resolves the privileged labels, so a trainer selects by type without reading them, and
        nothing in the episode tells the filter (NOT_FOUND / NO_TASKS when no task of the split
        and the protocol has those types). tags: labels sealed into the episode (run id, trainer
        step, group, model revision, ...) and written with its record (avtgym.records; the
        server's --episode-log): at most 16, keys of 1 to 64 ASCII letters, digits and "._-:/",
        values of at most 256 bytes (INVALID_ARGUMENT / INVALID_OPTION otherwise); the policy
        never sees them."""
        return self.reset_group(1, task_id=task_id, corpus=corpus, split=split, seed=seed,
                                reward=reward, solver=solver, extra_questions=extra_questions,
                                zero_ambiguity_budget=zero_ambiguity_budget, privileged=privileged,
                                oracle=oracle, strict_credit=strict_credit, protocol=protocol,
                                patience=patience, comparison=comparison,
                                follow_up_state=follow_up_state, bird_variant=bird_variant,
                                sample_types=sample_types, tags=tags)[0]

    def reset_group(self, n: int, **kwargs: Any) -> list[Episode]:
        """Start a GRPO group: n episodes on the same task and interpretation, seeds seed..seed+n-1;
        kwargs are reset()'s (every option included)."""
        resp = self._call("Reset", _group_request(n, kwargs))
        return _with_tags(_group_episodes(resp), kwargs.get("tags"))

    def step(self, ep: EpisodeLike, action: Action, privileged: bool = False) -> StepResult:
        """Apply one action (Action.ask / stop / submit_sql / unparsed); res.episode is the updated
        Episode (the old one stays steppable: a fork)."""
        e = _episode(ep)
        return StepResult.from_proto(e, self._call("Step", _step_request(e, action, privileged)))

    def step_batch(self, items: Iterable[tuple[EpisodeLike, Action]], privileged: bool = False
                   ) -> list[StepResult | AvtgymError]:
        """One StepBatch call; a failed item is returned as an AvtgymError in its place. Items that
        failed with VERIFIER_BUSY, UNAVAILABLE or RESPONSE_TOO_LARGE are first resent (up to
        `retries` further batches, within the deadline)."""
        pairs = [(_episode(e), a) for e, a in items]
        if not pairs:
            return []
        deadline = time.monotonic() + self.timeout
        out: list[StepResult | AvtgymError] = [None] * len(pairs)  # type: ignore[list-item]
        todo = list(range(len(pairs)))
        for attempt in range(self.retries + 1):
            req = _batch_request(pairs, todo, privileged)
            got = _batch_results([pairs[i][0] for i in todo], self._call("StepBatch", req, deadline=deadline))
            for i, r in zip(todo, got):
                out[i] = r
            todo, wait = _batch_resend(todo, got, attempt)
            if not todo or attempt == self.retries or time.monotonic() + wait >= deadline:
                break
            time.sleep(wait)
        return out

    def ask_oracle(self, question: str, task_id: str | None = None,
                   history: Sequence[tuple[str, str]] = (), corpus: str | None = None,
                   avt_id: str | None = None, interpretation: str | None = None,
                   oracle: str | None = None, privileged: bool = False,
                   strict_credit: bool = False) -> OracleReply:
        """OracleService.Ask: the oracle on its own, for trainers that own their rollout loop.
        Name the task (one interpretation) by task_id, or by avt_id and interpretation (its label),
        not both (ValueError); history is the earlier (question, reply) pairs, oldest first;
        strict_credit as in reset. No episode state is kept."""
        return _oracle_reply(self._call("Ask", _ask_request(question, task_id, history, corpus, avt_id,
                                                             interpretation, oracle, privileged,
                                                             strict_credit),
                                        stub=self._oracle))

    def list_oracles(self) -> list[OracleInfo]:
        """EnvService.ListOracles: the oracles this server serves, in OracleType order (the
        reference, deterministic, first), each with its matcher, responder and hybrid (the oracle
        to pair it with for the responder-leakage diagnostic)."""
        return _oracle_infos(self._call("ListOracles", pb.ListOraclesRequest()))

    def list_protocols(self) -> list[ProtocolInfo]:
        """EnvService.ListProtocols: the protocols this server serves, in Protocol order, each with
        the actions it accepts, its budget rule and, for BIRD_A, the price of every action in coins
        (plan with these; the server charges what it publishes)."""
        return [ProtocolInfo.from_proto(p) for p in self._call("ListProtocols", pb.ListProtocolsRequest()).protocols]

    def list_tasks(self, corpus: str | None = None, split: str | None = None,
                   privileged: bool = False) -> list[TaskSummary]:
        """All task summaries of a corpus (every page); subtasks is 2 for a task with a follow-up
        (the tasks BIRD_C serves). task_id is the public id (opaque for TIDE samples).
        privileged=True asks for TIDE's sample_type (ListTasksRequest.include_privileged): a
        principal that may not read privileged data (a policy) gets PERMISSION_DENIED /
        PRIVILEGED_DENIED; without it sample_type is "" for every task."""
        out: list[TaskSummary] = []
        token = ""
        while True:
            resp = self._call("ListTasks", _list_tasks_request(corpus, split, token, privileged))
            out.extend(TaskSummary.from_proto(t) for t in resp.tasks)
            token = resp.next_page_token
            if not token:
                return out

    def health(self, service: str = "") -> str:
        """The server's health (grpc.health.v1 Check, one attempt, no credentials needed):
        "SERVING", or "NOT_SERVING" once it drains; service "" is the whole server."""
        try:
            return self._health(service, timeout=self.timeout)
        except grpc.RpcError as e:
            raise AvtgymError.from_rpc_error(e) from None

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


Policy = Callable[[Episode], Union[Action, Awaitable[Action]]]


# The most steps coalesce=True sends in one StepBatch.
_COALESCE_MAX = 256


class AsyncClient:
    """The asyncio (grpc.aio) twin of Client: the same methods, as coroutines, plus rollout().

    coalesce=True sends the step() calls that are waiting at the same moment (many episodes
    stepped concurrently: rollout(), or a trainer's own gather) as one StepBatch (up to 256 items)
    instead of one Step each: each call still gets its own StepResult or raises its own
    AvtgymError, with StepBatch's resends (step_batch) in place of Step's retries. A Python client
    spends most of a unary call's CPU in gRPC itself, so at 16 episodes in flight this steps
    several times faster (bench/RESULTS.md); a lone step waits for nothing (it is sent as soon as
    the event loop has run the other ready coroutines). Off by default."""

    def __init__(self, target: str = "127.0.0.1:50051", timeout: float = 30.0, retries: int = 5,
                 options: Sequence[tuple[str, Any]] = (), tls: "TLS | bool | None" = None,
                 token: str | None = None, coalesce: bool = False):
        self.target = target
        self.timeout = timeout
        self.retries = retries
        self.coalesce = coalesce
        self.tls, self._metadata, self._options = _connection(tls, token, options)
        self._channel: grpc.aio.Channel | None = None
        self._stub: pb_grpc.EnvServiceStub | None = None
        self._oracle: opb_grpc.OracleServiceStub | None = None
        # coalesce: the steps waiting for the next StepBatch, as (episode, action, future), by
        # privileged flag; and the batches in flight (their tasks, kept from the GC).
        self._pending: dict[bool, list[tuple[Episode, Action, asyncio.Future]]] = {}
        self._flushing: set[asyncio.Task] = set()

    def _get_stub(self) -> pb_grpc.EnvServiceStub:
        # Created lazily so that the channel binds to the running event loop.
        if self._stub is None:
            chan_target, opts = _balanced(self.target, self._options)
            if self.tls is not None:
                self._channel = grpc.aio.secure_channel(chan_target, self.tls.credentials(), options=opts)
            else:
                self._channel = grpc.aio.insecure_channel(chan_target, options=opts)
            self._stub = pb_grpc.EnvServiceStub(self._channel)
            self._oracle = opb_grpc.OracleServiceStub(self._channel)
        return self._stub

    async def _call(self, method: str, req: Any, oracle: bool = False, deadline: float | None = None) -> Any:
        stub = self._get_stub()
        fn = getattr(self._oracle if oracle else stub, method)
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + self.timeout
        attempt = 0
        while True:
            left = deadline - loop.time()
            try:
                if left <= 0:
                    raise AvtgymError("DEADLINE_EXCEEDED", f"{method}: deadline of {self.timeout}s exceeded")
                return await fn(req, timeout=left, metadata=self._metadata)
            except grpc.RpcError as e:
                err = AvtgymError.from_rpc_error(e)
                if not _retryable(err) or attempt >= self.retries:
                    raise err from None
            wait = _wait(err, attempt)
            attempt += 1
            if loop.time() + wait >= deadline:
                raise err
            await asyncio.sleep(wait)

    async def reset(self, task_id: str | None = None, corpus: str | None = None, split: str | None = None,
                    seed: int | None = None, reward: str | None = None, solver: str | None = None,
                    extra_questions: int | None = None, zero_ambiguity_budget: int | None = None,
                    privileged: bool = False, oracle: str | None = None,
                    strict_credit: bool = False, protocol: "str | int | None" = None,
                    patience: int | None = None, comparison: "str | int | None" = None,
                    follow_up_state: "str | int | None" = None,
                    bird_variant: "str | int | None" = None,
                    sample_types: "Iterable[str | int] | None" = None,
                    tags: "Mapping[str, str] | None" = None) -> Episode:
        """Start one episode; see Client.reset (every option included)."""
        eps = await self.reset_group(1, task_id=task_id, corpus=corpus, split=split, seed=seed,
                                     reward=reward, solver=solver, extra_questions=extra_questions,
                                     zero_ambiguity_budget=zero_ambiguity_budget, privileged=privileged,
                                     oracle=oracle, strict_credit=strict_credit, protocol=protocol,
                                     patience=patience, comparison=comparison,
                                     follow_up_state=follow_up_state, bird_variant=bird_variant,
                                     sample_types=sample_types, tags=tags)
        return eps[0]

    async def reset_group(self, n: int, **kwargs: Any) -> list[Episode]:
        resp = await self._call("Reset", _group_request(n, kwargs))
        return _with_tags(_group_episodes(resp), kwargs.get("tags"))

    async def step(self, ep: EpisodeLike, action: Action, privileged: bool = False) -> StepResult:
        """Apply one action; see Client.step (and coalesce, above)."""
        e = _episode(ep)
        if not self.coalesce:
            return StepResult.from_proto(e, await self._call("Step", _step_request(e, action, privileged)))
        if not isinstance(action, Action):
            raise TypeError(f"want an avtgym.Action, got {type(action).__name__}")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        priv = bool(privileged)
        waiting = self._pending.get(priv)
        if waiting is None:
            waiting = self._pending[priv] = []
            # After the coroutines ready now have run (and added their steps).
            loop.call_soon(self._flush, priv)
        waiting.append((e, action, fut))
        if len(waiting) >= _COALESCE_MAX:
            self._flush(priv)
        got = await fut
        if isinstance(got, AvtgymError):
            raise got
        return got

    def _flush(self, privileged: bool) -> None:
        """Send the waiting steps of this privileged flag as one StepBatch."""
        items = self._pending.pop(privileged, None)
        if not items:
            return
        task = asyncio.get_running_loop().create_task(self._send(items, privileged))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def _send(self, items: list[tuple[Episode, Action, asyncio.Future]], privileged: bool) -> None:
        try:
            got = await self.step_batch([(e, a) for e, a, _ in items], privileged=privileged)
        except BaseException as err:  # the whole call failed: every step fails with it
            for _, _, fut in items:
                if not fut.done():
                    fut.set_exception(err)
            if isinstance(err, asyncio.CancelledError):
                raise
            return
        for (_, _, fut), r in zip(items, got):
            if not fut.done():
                fut.set_result(r)

    async def step_batch(self, items: Iterable[tuple[EpisodeLike, Action]], privileged: bool = False
                         ) -> list[StepResult | AvtgymError]:
        """One StepBatch call, with the resends of Client.step_batch."""
        pairs = [(_episode(e), a) for e, a in items]
        if not pairs:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        out: list[StepResult | AvtgymError] = [None] * len(pairs)  # type: ignore[list-item]
        todo = list(range(len(pairs)))
        for attempt in range(self.retries + 1):
            req = _batch_request(pairs, todo, privileged)
            got = _batch_results([pairs[i][0] for i in todo],
                                 await self._call("StepBatch", req, deadline=deadline))
            for i, r in zip(todo, got):
                out[i] = r
            todo, wait = _batch_resend(todo, got, attempt)
            if not todo or attempt == self.retries or loop.time() + wait >= deadline:
                break
            await asyncio.sleep(wait)
        return out

    async def ask_oracle(self, question: str, task_id: str | None = None,
                         history: Sequence[tuple[str, str]] = (), corpus: str | None = None,
                         avt_id: str | None = None, interpretation: str | None = None,
                         oracle: str | None = None, privileged: bool = False,
                         strict_credit: bool = False) -> OracleReply:
        """OracleService.Ask; see Client.ask_oracle."""
        return _oracle_reply(await self._call("Ask", _ask_request(question, task_id, history, corpus, avt_id,
                                                                   interpretation, oracle, privileged,
                                                                   strict_credit),
                                              oracle=True))

    async def list_oracles(self) -> list[OracleInfo]:
        """EnvService.ListOracles; see Client.list_oracles."""
        return _oracle_infos(await self._call("ListOracles", pb.ListOraclesRequest()))

    async def list_protocols(self) -> list[ProtocolInfo]:
        """EnvService.ListProtocols; see Client.list_protocols."""
        resp = await self._call("ListProtocols", pb.ListProtocolsRequest())
        return [ProtocolInfo.from_proto(p) for p in resp.protocols]

    async def list_tasks(self, corpus: str | None = None, split: str | None = None,
                         privileged: bool = False) -> list[TaskSummary]:
        """All task summaries of a corpus; see Client.list_tasks (privileged included)."""
        out: list[TaskSummary] = []
        token = ""
        while True:
            resp = await self._call("ListTasks", _list_tasks_request(corpus, split, token, privileged))
            out.extend(TaskSummary.from_proto(t) for t in resp.tasks)
            token = resp.next_page_token
            if not token:
                return out

    async def run_episode(self, policy: Policy, start: Episode | dict[str, Any], privileged: bool = False,
                          max_steps: int = 64) -> Episode:
        """Reset (when start is a dict of reset() keyword arguments) and step policy(episode) until done."""
        ep = start if isinstance(start, Episode) else await self.reset(**{"privileged": privileged, **start})
        for _ in range(max_steps):
            if ep.done:
                return ep
            action = policy(ep)
            if inspect.isawaitable(action):
                action = await action
            ep = (await self.step(ep, action, privileged=privileged)).episode
        if not ep.done:
            raise AvtgymError("RESOURCE_EXHAUSTED", f"episode {ep.episode_id} not done after {max_steps} steps",
                              reason="CLIENT_MAX_STEPS")
        return ep

    async def rollout(self, policy: Policy, resets: Iterable[Episode | dict[str, Any]], concurrency: int = 64,
                      privileged: bool = False, max_steps: int = 64) -> list[Episode | BaseException]:
        """Run many episodes concurrently (at most `concurrency` at a time).

        resets: per episode either an Episode already reset or a dict of reset() keyword
        arguments. policy(episode) returns an Action (or an awaitable of one). The result is in
        input order: the finished Episode, or the exception that ended that episode (an
        AvtgymError, or whatever the policy raised); one failed episode never stops the others."""
        sem = asyncio.Semaphore(max(1, concurrency))

        async def one(start: Episode | dict[str, Any]) -> Episode | BaseException:
            async with sem:
                try:
                    return await self.run_episode(policy, start, privileged=privileged, max_steps=max_steps)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # returned in place
                    return e

        return list(await asyncio.gather(*(one(s) for s in resets)))

    async def wait_ready(self, timeout: float) -> None:
        """Wait until the channel is connected (AvtgymError UNAVAILABLE after timeout seconds)."""
        self._get_stub()
        try:
            await asyncio.wait_for(self._channel.channel_ready(), timeout)  # type: ignore[union-attr]
        except asyncio.TimeoutError:
            raise AvtgymError("UNAVAILABLE", f"{self.target}: not reachable within {timeout}s") from None

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stub = None

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

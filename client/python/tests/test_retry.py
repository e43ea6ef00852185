"""The client's retries: RESOURCE_EXHAUSTED / VERIFIER_BUSY after the RetryInfo delay, batch items
resent in a further StepBatch, and errors that are never retried.

A saturated verifier cannot be produced on demand against the real server, so these tests run a
small fake EnvService (in process, on a free loopback port) that answers with the same statuses
the server sends: a google.rpc.Status with ErrorInfo (domain avtgym) and RetryInfo details.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent import futures

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.rpc import code_pb2, error_details_pb2, status_pb2

from avtgym import Action, AsyncClient, AvtgymError, Client, Episode
from avtgym.v1 import env_service_pb2 as pb
from avtgym.v1 import env_service_pb2_grpc as pb_grpc
from avtgym.v1 import episode_pb2 as epb

DELAY = 0.05  # the RetryInfo delay the fake server asks for


def rpc_status(code: int, reason: str, message: str, delay: float | None) -> status_pb2.Status:
    st = status_pb2.Status(code=code, message=message)
    ei = error_details_pb2.ErrorInfo(reason=reason, domain="avtgym")
    st.details.add().Pack(ei)
    if delay is not None:
        st.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=Duration(nanos=int(delay * 1e9))))
    return st


BUSY = rpc_status(code_pb2.RESOURCE_EXHAUSTED, "VERIFIER_BUSY", "no query slot", DELAY)
TOO_LARGE = rpc_status(code_pb2.RESOURCE_EXHAUSTED, "RESPONSE_TOO_LARGE", "item does not fit", DELAY)


def ok_response(token: bytes) -> pb.StepResponse:
    return pb.StepResponse(token=token + b"'", done=True, status=epb.EPISODE_STATUS_TERMINATED,
                           reward=epb.Reward(type=epb.REWARD_TYPE_QUESTION_F1, value=1.0))


class FakeEnv(pb_grpc.EnvServiceServicer):
    """Step fails with `fail` (a Status) for the first `failures` calls of each token."""

    def __init__(self, fail: status_pb2.Status | None, failures: int):
        self.fail, self.failures = fail, failures
        self.calls: dict[bytes, list[float]] = {}
        self.batches: list[list[bytes]] = []
        self.lock = threading.Lock()

    def _failing(self, token: bytes) -> bool:
        with self.lock:
            seen = self.calls.setdefault(token, [])
            seen.append(time.monotonic())
            return self.fail is not None and len(seen) <= self.failures

    def Step(self, request, context):
        if self._failing(request.token):
            context.set_trailing_metadata((("grpc-status-details-bin", self.fail.SerializeToString()),))
            context.abort(grpc.StatusCode(next(c for c in grpc.StatusCode if c.value[0] == self.fail.code)),
                          self.fail.message)
        return ok_response(request.token)

    def StepBatch(self, request, context):
        self.batches.append([s.token for s in request.steps])
        out = pb.StepBatchResponse()
        for s in request.steps:
            if self._failing(s.token):
                out.results.add(status=self.fail)
            else:
                out.results.add(response=ok_response(s.token))
        return out


@pytest.fixture
def fake():
    servers = []

    def start(fail: status_pb2.Status | None, failures: int) -> tuple[str, FakeEnv]:
        env = FakeEnv(fail, failures)
        srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_EnvServiceServicer_to_server(env, srv)
        port = srv.add_insecure_port("127.0.0.1:0")
        srv.start()
        servers.append(srv)
        return f"127.0.0.1:{port}", env

    yield start
    for s in servers:
        s.stop(None)


def episode(token: bytes) -> Episode:
    return Episode.from_token(token)


def test_error_carries_retry_delay():
    err = AvtgymError.from_status(BUSY)
    assert (err.code, err.reason) == ("RESOURCE_EXHAUSTED", "VERIFIER_BUSY")
    assert err.retry_delay == pytest.approx(DELAY)
    assert AvtgymError.from_status(rpc_status(code_pb2.NOT_FOUND, "UNKNOWN_TASK", "x", None)).retry_delay is None
    import pickle
    assert pickle.loads(pickle.dumps(err)).retry_delay == pytest.approx(DELAY)


def test_verifier_busy_is_retried_after_retry_info(fake):
    addr, env = fake(BUSY, 2)
    with Client(addr, timeout=10, retries=3) as c:
        res = c.step(episode(b"t1"), Action.stop())
    assert res.done and res.reward.value == 1.0
    calls = env.calls[b"t1"]
    assert len(calls) == 3  # two busy answers, then the same token again succeeded
    assert all(b - a >= DELAY * 0.9 for a, b in zip(calls, calls[1:]))  # the RetryInfo delay was honoured


def test_verifier_busy_gives_up_after_retries(fake):
    addr, env = fake(BUSY, 10)
    with Client(addr, timeout=10, retries=1) as c, pytest.raises(AvtgymError) as ei:
        c.step(episode(b"t2"), Action.stop())
    assert ei.value.reason == "VERIFIER_BUSY" and ei.value.retry_delay == pytest.approx(DELAY)
    assert len(env.calls[b"t2"]) == 2


def test_response_too_large_unary_is_not_retried(fake):
    addr, env = fake(TOO_LARGE, 10)
    with Client(addr, timeout=10, retries=3) as c, pytest.raises(AvtgymError) as ei:
        c.step(episode(b"t3"), Action.stop())
    assert ei.value.reason == "RESPONSE_TOO_LARGE" and len(env.calls[b"t3"]) == 1


def test_batch_items_are_resent(fake):
    addr, env = fake(BUSY, 1)
    with Client(addr, timeout=10, retries=3) as c:
        out = c.step_batch([(episode(b"a"), Action.stop()), (episode(b"b"), Action.stop())])
    assert all(not isinstance(r, AvtgymError) and r.reward.value == 1.0 for r in out)
    assert env.batches == [[b"a", b"b"], [b"a", b"b"]]
    assert [r.episode.token for r in out] == [b"a'", b"b'"]  # results stay in input order


def test_batch_too_large_items_are_resent_then_reported(fake):
    addr, env = fake(TOO_LARGE, 100)
    with Client(addr, timeout=10, retries=2) as c:
        out = c.step_batch([(episode(b"x"), Action.stop())])
    assert isinstance(out[0], AvtgymError) and out[0].reason == "RESPONSE_TOO_LARGE"
    assert len(env.batches) == 3  # the first batch and `retries` resends


def test_async_client_retries(fake):
    addr, env = fake(BUSY, 1)

    async def main():
        async with AsyncClient(addr, timeout=10, retries=2) as c:
            one = await c.step(episode(b"c"), Action.stop())
            many = await c.step_batch([(episode(b"d"), Action.stop())])
            return one, many

    one, many = asyncio.run(main())
    assert one.reward.value == 1.0 and many[0].reward.value == 1.0
    assert len(env.calls[b"c"]) == 2 and len(env.batches) == 2

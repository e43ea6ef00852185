"""The client against a server's front door: TLS and mutual TLS (certificates made with the
openssl command), bearer tokens of principals with roles, privileged data refused to a policy,
credentials from the environment, and admission control: a saturated real server refuses calls
with RESOURCE_EXHAUSTED / OVERLOADED, the client backs off by the RetryInfo delay and finishes
everything, and health answers throughout. Nothing here asserts a duration: waits are recorded,
and saturation is held by a gate the test opens."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import shutil
import subprocess
import threading
import urllib.request
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.rpc import code_pb2, error_details_pb2, status_pb2

import avtgym.client as client_mod
from avtgym import TLS, Action, AsyncClient, AvtgymError, Client
from avtgym.v1 import env_service_pb2 as pb
from avtgym.v1 import env_service_pb2_grpc as pb_grpc

from conftest import Server, free_port

TRAINER, POLICY = "trainer-token-0123456789", "policy-token-0123456789"
FULL_Q = "Could you clarify what exactly you mean by top 5 customers?"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA, a server certificate for localhost / 127.0.0.1, and client certificates
    trainer-client (signed by the CA) and rogue (signed by another CA)."""
    if shutil.which("openssl") is None:
        pytest.fail("these tests make certificates with the openssl command (Debian: apt-get install openssl)")
    d = tmp_path_factory.mktemp("pki")
    for name in ("ca", "other-ca"):
        (d / f"{name}.cnf").write_text(
            "[req]\ndistinguished_name = dn\nx509_extensions = v3_ca\nprompt = no\n"
            f"[dn]\nCN = avtgym-test-{name}\n"
            "[v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n"
            "subjectKeyIdentifier = hash\n")
        _openssl("req", "-x509", "-config", f"{name}.cnf", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", cwd=d)
    (d / "leaf.cnf").write_text("[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = leaf\n")
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    for name, ca, ext, cn in (("server", "ca", "server.ext", "localhost"), ("trainer-client", "ca", "client.ext", "trainer-client"),
                              ("rogue", "other-ca", "client.ext", "trainer-client")):
        _openssl("req", "-new", "-config", "leaf.cnf", "-subj", f"/CN={cn}", "-newkey", "ec", "-pkeyopt",
                 "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
                 "-out", f"{name}.pem", "-days", "2", "-extfile", ext, cwd=d)
    digest = lambda t: hashlib.sha256(t.encode()).hexdigest()  # noqa: E731
    (d / "principals.json").write_text(json.dumps({"principals": [
        {"name": "grpo-trainer", "role": "trainer", "token_sha256": digest(TRAINER)},
        {"name": "rollout-worker", "role": "policy", "token_sha256": digest(POLICY)},
        {"name": "trainer-by-cert", "role": "trainer", "tls_subject": "trainer-client"},
    ]}))
    return d


@pytest.fixture(scope="module")
def tls_server(avtgym_binary, key_file, pki):
    s = Server(avtgym_binary, key_file, extra_args=[
        "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
        "--auth-file", str(pki / "principals.json")]).start()
    yield s
    s.stop()


def test_tide_sample_types_are_privileged(tls_server, pki):
    """A policy may not ask for sample types (PRIVILEGED_DENIED), sees opaque TIDE ids only, and a
    record id (which names the type) is answered as an unknown task; a trainer gets the types."""
    tls = TLS(ca_file=str(pki / "ca.pem"))
    with Client(tls_server.addr, tls=tls, token=TRAINER, timeout=20) as c:
        assert {t.sample_type for t in c.list_tasks(privileged=True)} >= {"chain_only", "drift_only", "joint"}
    with Client(tls_server.addr, tls=tls, token=POLICY, timeout=20) as c:
        e = _err(lambda: c.list_tasks(privileged=True))
        assert (e.code, e.reason, e.field) == ("PERMISSION_DENIED", "PRIVILEGED_DENIED", "include_privileged")
        tasks = c.list_tasks()
        assert not any(t.sample_type for t in tasks)
        assert not any(t.task_id.endswith(("-C", "-D", "-J")) for t in tasks)
        unknown = _err(lambda: c.reset(task_id="no-such-task", protocol="tide-f"))
        hidden = _err(lambda: c.reset(task_id="tide-a1-J", protocol="tide-f"))
        assert (hidden.code, hidden.reason) == (unknown.code, unknown.reason) == ("NOT_FOUND", "UNKNOWN_TASK")


def _err(fn) -> AvtgymError:
    with pytest.raises(AvtgymError) as ei:
        fn()
    return ei.value


def test_tls_and_principals(tls_server, pki):
    tls = TLS(ca_file=str(pki / "ca.pem"))
    with Client(tls_server.addr, tls=tls, token=TRAINER, timeout=20) as c:
        ep = c.reset(task_id="shop-001", privileged=True)
        assert ep.privileged and ep.privileged.get("reference_sql")
        assert c.step(ep, Action.ask(FULL_Q), privileged=True).episode.privileged
    with Client(tls_server.addr, tls=tls, token=POLICY, timeout=20) as c:
        e = _err(lambda: c.reset(task_id="shop-001", privileged=True))
        assert (e.code, e.reason, e.field) == ("PERMISSION_DENIED", "PRIVILEGED_DENIED", "include_privileged")
        ep = c.reset(task_id="shop-001")
        res = c.step(ep, Action.ask(FULL_Q))
        assert res.episode.privileged is None
        e = _err(lambda: c.step_batch([(res.episode, Action.stop()), (res.episode, Action.stop())], privileged=True))
        assert (e.code, e.reason, e.field) == ("PERMISSION_DENIED", "PRIVILEGED_DENIED", "steps[0].include_privileged")
        e = _err(lambda: c.ask_oracle(FULL_Q, task_id="shop-001", privileged=True))
        assert e.reason == "PRIVILEGED_DENIED"
        assert c.ask_oracle(FULL_Q, task_id="shop-001").credits == ()
    for token, reason in ((None, "CREDENTIALS_MISSING"), ("not-a-principal", "CREDENTIALS_INVALID")):
        with Client(tls_server.addr, tls=tls, token=token, timeout=20) as c:
            e = _err(lambda: c.list_tasks())
            assert (e.code, e.reason) == ("UNAUTHENTICATED", reason)
            assert c.health() == "SERVING"  # health needs no credentials
    with Client(tls_server.addr, tls=False, token=TRAINER, timeout=5, retries=1) as c:
        assert _err(lambda: c.list_tasks()).code == "UNAVAILABLE"  # plaintext to a TLS server
    with Client(tls_server.addr, tls=TLS(ca_file=str(pki / "other-ca.pem")), token=TRAINER, timeout=5, retries=1) as c:
        assert _err(lambda: c.list_tasks()).code == "UNAVAILABLE"  # a server the client does not trust


def test_credentials_from_environment(tls_server, pki, monkeypatch, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TRAINER + "\n")
    monkeypatch.setenv("AVTGYM_TLS_CA", str(pki / "ca.pem"))
    monkeypatch.setenv("AVTGYM_TOKEN_FILE", str(token_file))
    with Client(tls_server.addr, timeout=20) as c:
        assert c.reset(task_id="shop-001", privileged=True).privileged

    async def run():
        async with AsyncClient(tls_server.addr, timeout=20) as ac:
            return await ac.reset(task_id="shop-001", privileged=True)

    assert asyncio.run(run()).privileged


def test_mutual_tls(avtgym_binary, key_file, pki):
    s = Server(avtgym_binary, key_file, extra_args=[
        "--tls-cert", str(pki / "server.pem"), "--tls-key", str(pki / "server.key"),
        "--client-ca", str(pki / "ca.pem"), "--auth-file", str(pki / "principals.json")]).start()
    try:
        ca = str(pki / "ca.pem")
        with Client(s.addr, tls=TLS(ca_file=ca, cert_file=str(pki / "trainer-client.pem"),
                                    key_file=str(pki / "trainer-client.key")), timeout=20) as c:
            assert c.reset(task_id="shop-001", privileged=True).privileged
        for tls in (TLS(ca_file=ca), TLS(ca_file=ca, cert_file=str(pki / "rogue.pem"), key_file=str(pki / "rogue.key"))):
            with Client(s.addr, tls=tls, token=TRAINER, timeout=5, retries=1) as c:
                assert _err(lambda: c.list_tasks()).code == "UNAVAILABLE"  # the handshake is refused
    finally:
        s.stop()


# ---- admission control ----

def _status(code: int, reason: str, delay: float) -> status_pb2.Status:
    st = status_pb2.Status(code=code, message=reason)
    st.details.add().Pack(error_details_pb2.ErrorInfo(reason=reason, domain="avtgym"))
    st.details.add().Pack(error_details_pb2.RetryInfo(retry_delay=Duration(nanos=int(delay * 1e9))))
    return st


class _Refusing(pb_grpc.EnvServiceServicer):
    """ListTasks fails with `fail` twice, then answers."""

    def __init__(self, fail: status_pb2.Status):
        self.fail, self.calls = fail, 0

    def ListTasks(self, request, context):
        self.calls += 1
        if self.calls <= 2:
            context.set_trailing_metadata((("grpc-status-details-bin", self.fail.SerializeToString()),))
            context.abort(grpc.StatusCode(next(c for c in grpc.StatusCode if c.value[0] == self.fail.code)), self.fail.message)
        return pb.ListTasksResponse()


@pytest.mark.parametrize("code,reason", [(code_pb2.RESOURCE_EXHAUSTED, "OVERLOADED"), (code_pb2.UNAVAILABLE, "DRAINING")])
def test_retry_info_is_honoured(code, reason, monkeypatch):
    """OVERLOADED and DRAINING are retried after the RetryInfo delay plus at most 10% jitter (the
    waits are recorded, not timed)."""
    delay = 0.02
    waits: list[float] = []
    real = client_mod._wait
    monkeypatch.setattr(client_mod, "_wait", lambda err, attempt: waits.append(real(err, attempt)) or waits[-1])
    fake = _Refusing(_status(code, reason, delay))
    srv = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_EnvServiceServicer_to_server(fake, srv)
    port = srv.add_insecure_port("127.0.0.1:0")
    srv.start()
    try:
        with Client(f"127.0.0.1:{port}", tls=False, token=None, timeout=10, retries=3) as c:
            assert c.list_tasks() == []
    finally:
        srv.stop(None)
    assert fake.calls == 3 and len(waits) == 2
    assert all(delay <= w <= delay * 1.1 + 1e-9 for w in waits), waits


class _GateLLM:
    """An OpenAI-compatible endpoint that holds every request until opened, counting arrivals,
    then answers 400 (the LLM oracle fails; the episode ends in ERROR: a finished step)."""

    def __init__(self):
        self.arrived = 0
        self.lock = threading.Lock()
        self.open = threading.Event()
        gate = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with gate.lock:
                    gate.arrived += 1
                gate.open.wait(60)
                body = b'{"error": {"message": "no model here"}}'
                self.send_response(400)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self):
        self.open.set()
        self.httpd.shutdown()


def _metric(port: int, name: str) -> float:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", body, re.M))


def test_overload_backs_off_and_finishes(avtgym_binary, key_file):
    """--max-inflight 2 and 8 concurrent steps held at the oracle's model: 2 reach it, the rest
    are refused (counted by the server) and retried by the client after the RetryInfo delay;
    health answers while saturated; once the model answers, all 8 steps finish."""
    llm = _GateLLM()
    mport = free_port()
    s = Server(avtgym_binary, key_file, extra_args=[
        "--max-inflight", "2", "--metrics-listen", f"127.0.0.1:{mport}",
        "--oracle-url", llm.url, "--oracle-model", "m", "--oracle-timeout", "60s"]).start()
    try:
        async def run():
            async with AsyncClient(s.addr, timeout=60, retries=100, tls=False, token=None) as ac:
                eps = [await ac.reset(task_id="shop-001", seed=i, oracle="llm") for i in range(8)]
                steps = [asyncio.create_task(ac.step(ep, Action.ask(f"{FULL_Q} ({i})"))) for i, ep in enumerate(eps)]
                with Client(s.addr, timeout=10, tls=False, token=None) as probe:
                    for _ in range(6000):
                        if llm.arrived == 2 and _metric(mport, "avtgym_overloaded_total") >= 6:
                            break
                        await asyncio.sleep(0.01)
                    assert llm.arrived == 2, "calls past the limit reached the model: they were queued"
                    assert _metric(mport, "avtgym_overloaded_total") >= 6
                    assert probe.health() == "SERVING"
                llm.open.set()
                return await asyncio.gather(*steps)

        results = asyncio.run(run())
        # Every step was answered (the oracle's model failed: the episode ends in ERROR, scored
        # by nobody, but the step itself finished) and reached the model once admitted.
        assert len(results) == 8 and all(r.new_turns for r in results)
        assert llm.arrived >= 8
    finally:
        s.stop()
        llm.close()

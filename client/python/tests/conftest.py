"""Fixtures: build the real `avtgym serve` once per session and run it on free loopback ports."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `avtgym serve` process on 127.0.0.1:port with a shared token key file."""

    def __init__(self, binary: Path, key_file: Path, port: int | None = None, extra_args: list[str] | None = None):
        self.binary = binary
        self.key_file = key_file
        self.extra_args = list(extra_args or [])
        self.port = port or free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log: list[str] = []

    def start(self, timeout: float = 30.0) -> "Server":
        self.proc = subprocess.Popen(
            [str(self.binary), "serve", "--listen", self.addr, "--metrics-listen", "",
             "--token-key-file", str(self.key_file), *self.extra_args],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ready = threading.Event()

        def drain(proc=self.proc):
            for line in proc.stderr:
                self.log.append(line)
                if re.search(r'\bserving\s+\{.*"addr"', line):
                    ready.set()

        threading.Thread(target=drain, daemon=True).start()
        deadline = time.time() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.time() > deadline:
                self.stop()
                raise RuntimeError("avtgym serve did not start:\n" + "".join(self.log))
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="session")
def avtgym_binary(tmp_path_factory) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.fail("the Python tests need Go to build bin/avtgym")
    out = tmp_path_factory.mktemp("bin") / "avtgym"
    env = dict(os.environ)
    env["GOFLAGS"] = (env.get("GOFLAGS", "") + " -buildvcs=false").strip()
    subprocess.run([go, "build", "-o", str(out), "./cmd/avtgym"], cwd=REPO, check=True, env=env)
    return out


@pytest.fixture(scope="session")
def key_file(tmp_path_factory) -> Path:
    f = tmp_path_factory.mktemp("key") / "token.key"
    f.write_text(secrets.token_hex(32) + "\n")
    f.chmod(0o600)
    return f


@pytest.fixture(scope="session")
def server(avtgym_binary, key_file):
    s = Server(avtgym_binary, key_file).start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def addr(server) -> str:
    return server.addr


def failing_oracle_args() -> list[str]:
    """serve flags whose LLM oracle points at a closed loopback port: an episode reset with
    oracle="llm" ends in ERROR (the environment failed) at its first question."""
    return ["--oracle-url", f"http://127.0.0.1:{free_port()}/v1", "--oracle-model", "x", "--oracle-timeout", "200ms"]


@pytest.fixture(scope="session")
def error_addr(avtgym_binary, key_file):
    """A server whose oracle="llm" episodes end in ERROR (see failing_oracle_args)."""
    s = Server(avtgym_binary, key_file, extra_args=failing_oracle_args()).start()
    yield s.addr
    s.stop()


@pytest.fixture
def client(addr):
    from avtgym import Client

    with Client(addr, timeout=30.0) as c:
        yield c

"""Client-side load balancing: an address list and a dns:/// target, round-robin over replicas
sharing a token key; a replica going away mid-run costs no call."""

from __future__ import annotations

import asyncio
import time

import pytest

from avtgym import Action, AsyncClient, Client

from conftest import Server

FULL_Q = "Could you clarify what exactly you mean by top 5 customers?"


def calls(server: Server) -> int:
    """The EnvService calls a server has logged (its access log: every call, the default)."""
    return sum(1 for line in server.log if "\trpc\t" in line and "avtgym.v1.EnvService/" in line)


@pytest.fixture
def replicas(avtgym_binary, key_file):
    servers = [Server(avtgym_binary, key_file).start() for _ in range(3)]
    yield servers
    for s in servers:
        s.stop()


def wait_for(cond, timeout: float = 10.0, msg=lambda: "") -> None:
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, f"timed out: {msg()}"
        time.sleep(0.02)


def test_address_list_round_robin(replicas):
    # A list of host:port (a host name among them), balanced round-robin: every replica
    # answers calls, and an episode's steps continue on whichever replica comes next.
    target = ",".join([replicas[0].addr, f"localhost:{replicas[1].port}", replicas[2].addr])
    with Client(target, timeout=30.0) as c:
        assert c.health() == "SERVING"
        for i in range(30):
            ep = c.reset(task_id="shop-001", seed=i)
            ep = c.step(ep, Action.ask(FULL_Q)).episode
            res = c.step(ep, Action.stop())
            assert res.done and res.reward.value == 1.0
        wait_for(lambda: sum(calls(s) for s in replicas) == 90, msg=lambda: [calls(s) for s in replicas])
        counts = [calls(s) for s in replicas]
        assert min(counts) >= 15, counts  # 30 each when all three connected at once


def test_replica_going_away(replicas):
    target = ",".join(s.addr for s in replicas)
    with Client(target, timeout=30.0, retries=8) as c:
        eps = [c.reset(task_id="shop-001", seed=i) for i in range(6)]
        eps = [c.step(ep, Action.ask(FULL_Q)).episode for ep in eps]
        replicas[1].stop()  # its episodes continue on the others: they live in the tokens
        for ep in eps:
            res = c.step(ep, Action.stop())
            assert res.done and res.reward.value == 1.0


def test_dns_target_and_async(replicas):
    with Client(f"dns:///{replicas[0].addr}", timeout=30.0) as c:
        assert c.health() == "SERVING"

    async def run() -> list[float]:
        target = ",".join(s.addr for s in replicas)
        async with AsyncClient(target, timeout=30.0) as ac:
            out = []
            for i in range(6):
                ep = await ac.reset(task_id="shop-001", seed=i)
                out.append((await ac.step(ep, Action.stop())).reward.value)
            return out

    assert len(asyncio.run(run())) == 6
    wait_for(lambda: all(calls(s) > 0 for s in replicas), msg=lambda: [calls(s) for s in replicas])


def test_bad_address_list():
    with pytest.raises(ValueError, match="nonsense"):
        Client("127.0.0.1:1,nonsense", timeout=1.0)

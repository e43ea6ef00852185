"""EnvService.ListOracles through the Python client."""

from __future__ import annotations

import asyncio

from avtgym import AsyncClient
from avtgym.types import OracleInfo


def test_list_oracles(client):
    # A plain server (no --oracle-url, no --test-oracles) serves the deterministic oracle only:
    # the reference, its own hybrid.
    oracles = client.list_oracles()
    assert [o.type for o in oracles] == ["deterministic"]
    o = oracles[0]
    assert isinstance(o, OracleInfo) and o.hybrid == "deterministic" and o.reference and not o.test_fixture
    assert o.matcher.startswith("deterministic") and o.responder.startswith("deterministic")
    # Its type names are what reset(oracle=...) takes.
    assert client.reset(task_id="shop-001", oracle=o.hybrid).token


def test_list_oracles_async(addr):
    async def go():
        async with AsyncClient(addr) as c:
            return await c.list_oracles()
    assert [(o.type, o.hybrid, o.reference) for o in asyncio.run(go())] == [("deterministic", "deterministic", True)]

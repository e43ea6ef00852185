"""OracleService through the Python client: the oracle on its own."""

from __future__ import annotations

import asyncio

import pytest

from avtgym import AsyncClient, AvtgymError, OracleReply

FULL_Q = "Could you clarify what exactly you mean by top 5 customers?"


def test_ask_oracle(client):
    # shop-001 and shop-002 are two interpretations of one AVT: same question, different answers.
    a = client.ask_oracle(FULL_Q, task_id="shop-001", privileged=True)
    b = client.ask_oracle(FULL_Q, task_id="shop-002", privileged=True)
    assert isinstance(a, OracleReply) and a.reply and b.reply and a.reply != b.reply
    assert [c["term"] for c in a.credits] == ["top 5 customers"] and a.credits[0]["counted"]
    # Without privileged, no credits; a generic question gets the fixed refusal.
    plain = client.ask_oracle(FULL_Q, task_id="shop-001")
    assert plain.reply == a.reply and plain.credits == () and plain.action == ""
    refused = client.ask_oracle("Could you clarify what you want?", task_id="shop-001", privileged=True,
                                history=[(FULL_Q, a.reply)])
    assert refused.credits == () and refused.reply != a.reply


def test_ask_oracle_errors(client):
    with pytest.raises(AvtgymError) as e:
        client.ask_oracle("Which?", task_id="no-such-task")
    assert e.value.code == "NOT_FOUND" and e.value.reason == "UNKNOWN_TASK"
    with pytest.raises(AvtgymError) as e:
        client.ask_oracle("Which?", task_id="shop-001", oracle="llm")  # no model configured
    assert e.value.code == "INVALID_ARGUMENT" and e.value.reason == "INVALID_OPTION"


def test_ask_oracle_async(addr):
    async def main():
        async with AsyncClient(addr) as c:
            return await c.ask_oracle(FULL_Q, task_id="shop-001", privileged=True)
    r = asyncio.run(main())
    assert [c["term"] for c in r.credits] == ["top 5 customers"]

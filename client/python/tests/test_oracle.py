"""OracleService through the Python client: the oracle on its own."""

from __future__ import annotations

import asyncio

import pytest

from avtgym import Action, AsyncClient, AvtgymError, OracleReply
from avtgym.v1 import error_reason_pb2

FULL_Q = "Could you clarify what exactly you mean by top 5 customers?"


def test_ask_oracle(client):
    # shop-001 and shop-002 are two interpretations of one AVT: same question, different answers.
    a = client.ask_oracle(FULL_Q, task_id="shop-001", privileged=True)
    b = client.ask_oracle(FULL_Q, task_id="shop-002", privileged=True)
    assert isinstance(a, OracleReply) and a.reply and b.reply and a.reply != b.reply
    assert not a.refused and not b.refused
    assert [c["term"] for c in a.credits] == ["top 5 customers"] and a.credits[0]["counted"]
    # Without privileged, no credits; a generic question gets the fixed refusal, marked refused.
    plain = client.ask_oracle(FULL_Q, task_id="shop-001")
    assert plain.reply == a.reply and plain.credits == () and plain.action == "" and not plain.refused
    refused = client.ask_oracle("Could you clarify what you want?", task_id="shop-001", privileged=True,
                                history=[(FULL_Q, a.reply)])
    assert refused.credits == () and refused.reply != a.reply and refused.refused
    # The episode shows the same answer as a turn of kind "refusal".
    r = client.step(client.reset(task_id="shop-001"), Action.ask("Could you clarify what you want?"))
    assert [(t.role, t.kind) for t in r.new_turns] == [("policy", "question"), ("oracle", "refusal")]
    assert r.new_turns[1].text == refused.reply


def test_ask_oracle_by_interpretation(client):
    # The same task named by its AVT id and interpretation label (AskRequest's task oneof).
    p = client.reset(task_id="shop-002", privileged=True).privileged
    by_id = client.ask_oracle(FULL_Q, task_id="shop-002", privileged=True)
    by_avt = client.ask_oracle(FULL_Q, avt_id=p["avt_id"], interpretation=p["interpretation"],
                               privileged=True)
    assert by_avt == by_id
    with pytest.raises(AvtgymError) as e:
        client.ask_oracle(FULL_Q, avt_id=p["avt_id"], interpretation="no such label")
    assert e.value.code == "NOT_FOUND" and e.value.reason == "UNKNOWN_TASK"
    assert e.value.metadata.get("field") == "interpretation.label"
    with pytest.raises(AvtgymError) as e:
        client.ask_oracle(FULL_Q)  # no task at all
    assert e.value.code == "INVALID_ARGUMENT" and e.value.reason == "INVALID_ACTION"
    with pytest.raises(ValueError):
        client.ask_oracle(FULL_Q, task_id="shop-002", avt_id=p["avt_id"])


def test_error_reasons_are_the_enum(client):
    # Every ErrorInfo reason the server sends is the name of an ErrorReason value.
    reasons = set()
    for call in (lambda: client.ask_oracle("Which?", task_id="no-such-task"),
                 lambda: client.ask_oracle("  ", task_id="shop-001"),
                 lambda: client.ask_oracle("Which?", task_id="shop-001", oracle="llm"),
                 lambda: client.step(b"\x01" * 40, Action.stop()),
                 lambda: client.reset(corpus="no-such-corpus")):
        with pytest.raises(AvtgymError) as e:
            call()
        reasons.add(e.value.reason)
    names = set(error_reason_pb2.ErrorReason.keys()) - {"ERROR_REASON_UNSPECIFIED"}
    assert reasons <= names and len(reasons) == 5, reasons


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

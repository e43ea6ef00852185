"""The shared chat prompt: avtgym.chat.prompt_messages renders, for every protocol, exactly the
messages of the golden files that policy/chat_prompt_test.go checks the Go policies' prompt
against (policy/testdata/chat_prompt/*.json), so that trainers and eval share one prompt."""

from __future__ import annotations

import json
import pathlib

import pytest

from avtgym import chat
from avtgym.types import Budget, DatabaseView, Episode, KnowledgeEntry, TaskView, Turn

GOLDEN = pathlib.Path(__file__).resolve().parents[3] / "policy" / "testdata" / "chat_prompt"
PROTOCOLS = ("ambitab", "bird-c", "bird-a", "tide-f", "tide-p")


def _episode(g: dict, turns: list[dict] | None = None) -> Episode:
    t = g["task"]
    d = t["database"]
    db = DatabaseView(d["id"], d["dialect"], d["schema"], dict(d.get("column_meanings") or {}),
                      tuple(KnowledgeEntry(k["id"], k["name"], k["definition"]) for k in d.get("knowledge") or ()))
    task = TaskView(t["corpus"], t["task_id"], "", t["request"], t["evidence"], db)
    b = g.get("budget")
    budget = Budget(b["unit"], b["total_milli"], 0, b["total_milli"]) if b else None
    ts = tuple(Turn(x["role"], x["kind"], x["text"]) for x in (g["turns"] if turns is None else turns))
    return Episode(b"", "e", 0, 0, task, ts, "asking", 0, 0, 0, False, "running", None, None,
                   protocol=g["protocol"], budget=budget)


def _golden(protocol: str) -> dict:
    path = GOLDEN / f"{protocol}.json"
    assert path.is_file(), f"{path} missing: run go test ./policy/ -run TestChatPromptGolden -update"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_prompt_matches_the_go_golden_file(protocol: str) -> None:
    g = _golden(protocol)
    assert g["version"] == chat.CHAT_PROMPT_VERSION
    got = chat.prompt_messages(_episode(g))
    want = [{"role": m["role"], "content": m["content"]} for m in g["messages"]]
    assert len(got) == len(want), (got, want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a == b, f"{protocol} message {i} differs:\n{a!r}\n{b!r}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_prompt_is_append_only(protocol: str) -> None:
    g = _golden(protocol)
    full = chat.prompt_messages(_episode(g))
    for n in range(1, len(g["turns"]) + 1):
        part = chat.prompt_messages(_episode(g, g["turns"][:n]))
        if part[-1]["role"] == "user" and part[-1]["content"] in (chat.NO_REPLY, chat.TIDE_NUDGE):
            part = part[:-1]
        assert part[:-1] == full[:len(part) - 1]
        assert full[len(part) - 1]["content"].startswith(part[-1]["content"])


def test_system_prompt_override_and_none() -> None:
    g = _golden("ambitab")
    ep = _episode(g)
    assert chat.prompt_messages(ep, system_prompt="S")[0] == {"role": "system", "content": "S"}
    no_sys = chat.prompt_messages(ep, system_prompt=None)
    assert no_sys[0]["role"] == "user" and no_sys[0]["content"] == chat.task_message(ep)


def test_the_trainers_default_system_prompts_are_the_shared_ones() -> None:
    from avtgym.trainers import system_prompt_for

    assert system_prompt_for("ambitab") == chat.AMBITAB_SYSTEM_PROMPT == _golden("ambitab")["messages"][0]["content"]
    assert system_prompt_for("bird-c") == _golden("bird-c")["messages"][0]["content"]
    assert system_prompt_for("bird-a") == _golden("bird-a")["messages"][0]["content"]
    assert "{schema_ddl}" in system_prompt_for("tide-f")  # filled per task by prompt_messages

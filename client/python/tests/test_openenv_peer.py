"""bench/openenv_peer (issue 20's OpenEnv peer) does avtgym's ask work: on every demo question its
reply (and whether it is a refusal) equals the reply turn of an avtgym ask step on the same task,
and its OpenEnv server and client play an episode."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from avtgym import Action
from conftest import REPO, free_port

sys.path.insert(0, str(REPO))

from bench.openenv_peer.oracle import BUDGET_NOTICE, demo_questions, load_records, tokens  # noqa: E402


@pytest.fixture(scope="module")
def records():
    return load_records()


def test_tokens_fold_like_go():
    assert tokens("Top-5  CUSTOMERS, über Straße!") == ["top", "5", "customers", "über", "straße"]
    assert tokens("ΣΑΣ σας") == ["σασ", "σασ"]  # as Go's FoldRune: Σ, σ and ς agree
    assert tokens("") == [] and tokens("?!") == []


def test_replies_equal_avtgym_on_every_demo_question(client, records):
    """Each question is the first of an episode on its task (a fork of the reset token on avtgym's
    side, a fresh reset on the peer's): the reply turn and its kind agree, the budget notice of a
    task with no counted ambiguity included."""
    from bench.openenv_peer.env import AskAction, AskEnvironment

    # The peer's matcher has no chain rule (PROTOCOL.md §9: an L2 ambiguity is credited only once
    # its L1 has been), which avtgym applies on every task with a chain (the TIDE samples): their
    # questions are left out here (tests/test_tide.py covers the chain rule).
    chained = {rid for rid, r in records.items() if any(a.get("depends_on") for a in r.ambiguities)}
    questions = [(rid, q) for rid, q in demo_questions(records) if rid not in chained]
    assert len(questions) > 300
    peer = AskEnvironment()
    resets = {}
    diffs = []
    for task_id, q in questions:
        if task_id not in resets:
            resets[task_id] = client.reset(task_id=task_id)
        turn = client.step(resets[task_id], Action.ask(q)).new_turns[-1]
        peer.reset(task_id=task_id)
        obs = peer.step(AskAction(question=q))
        want_kind = "notice" if obs.done else ("refusal" if obs.refused else "reply")
        if (turn.text, turn.kind) != (obs.reply, want_kind):
            diffs.append((task_id, q, turn.text, turn.kind, obs.reply, want_kind))
    assert not diffs, f"{len(diffs)} of {len(questions)} differ, e.g. {diffs[:3]}"


def test_policy_faults_equal_avtgym(client, records):
    ep = client.reset(task_id="shop-001")
    for q in ("   ", "x" * (16 << 10 + 1)):
        turn = client.step(ep, Action.ask(q)).new_turns[-1]
        assert (turn.text, turn.kind) == (records["shop-001"].ask(q)[0], "refusal")


def test_openenv_server_plays_an_episode():
    from bench.openenv_peer.env import AskAction, AskEnv

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "bench.openenv_peer", "--port", str(port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                env = AskEnv(base_url=f"http://127.0.0.1:{port}").sync()
                env.connect()
                break
            except Exception:
                if time.time() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        with env:
            r = env.reset(task_id="shop-001")
            assert r.observation.request == "List the names of our top 5 customers."
            r = env.step(AskAction(question="Could you clarify what exactly you mean by top customers?"))
            assert r.observation.reply.startswith("I mean the five customers") and not r.done
            r = env.step(AskAction(question="And what about the weather?"))
            assert r.observation.refused and r.observation.questions_remaining == 1
            r = env.step(AskAction(question="  "))
            assert r.observation.refused and r.observation.questions_remaining == 0
            r = env.step(AskAction(question="One more?"))
            assert r.done and r.observation.reply == BUDGET_NOTICE
    finally:
        proc.terminate()
        proc.wait(10)

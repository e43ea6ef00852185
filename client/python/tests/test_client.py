"""Resets, steps, batches, token tamper and errors against the real server."""

from __future__ import annotations

import pytest

from avtgym import Action, AvtgymError, Episode, Reward, StepResult, Turn

FULL_Q = "Could you clarify what exactly you mean by top 5 customers?"


def tamper(token: bytes) -> bytes:
    b = bytearray(token)
    b[len(b) // 2] ^= 0x01
    return bytes(b)


def test_single_reset(client):
    ep = client.reset(task_id="shop-001", seed=7)
    assert isinstance(ep, Episode)
    assert ep.seed == 7 and ep.group_index == 0 and ep.token
    assert ep.task.task_id == "shop-001" and ep.task.corpus == "demo"
    assert ep.task.request == "List the names of our top 5 customers."
    assert ep.task.database.dialect == "sqlite" and "CREATE TABLE customers" in ep.task.database.schema
    assert ep.turns == (Turn("environment", "request", ep.task.request),)
    assert ep.phase == "asking" and ep.status == "running" and not ep.done and ep.reward is None
    # m = 1 counted ambiguity, C = 2.
    assert (ep.question_budget, ep.questions_asked, ep.questions_remaining) == (3, 0, 3)
    assert ep.privileged is None
    assert "shop-001" in ep.episode_id


def test_reset_options(client):
    assert client.reset(task_id="shop-001", extra_questions=0).question_budget == 1
    # A seeded draw is reproducible.
    a = client.reset(split="train", seed=11)
    b = client.reset(split="train", seed=11)
    assert a.task.task_id == b.task.task_id and a.task.split == "train"
    with pytest.raises(ValueError):
        client.reset(reward="nope")
    with pytest.raises(ValueError):
        client.reset(oracle="nope")
    assert client.reset(task_id="shop-001", oracle="deterministic").question_budget == 3


def test_group_reset(client):
    eps = client.reset_group(16, split="train", seed=100, privileged=True)
    assert len(eps) == 16
    assert len({e.task.task_id for e in eps}) == 1
    assert len({(e.privileged.get("avt_id"), e.privileged.get("interpretation")) for e in eps}) == 1
    assert [e.seed for e in eps] == list(range(100, 116))
    assert [e.group_index for e in eps] == list(range(16))
    assert len({e.token for e in eps}) == 16


def test_group_too_large(client):
    with pytest.raises(AvtgymError) as ei:
        client.reset_group(5000)
    assert ei.value.code == "INVALID_ARGUMENT" and ei.value.reason == "INVALID_OPTION"


def test_ask_then_stop(client):
    ep = client.reset(task_id="shop-001")
    r1 = client.step(ep, Action.ask(FULL_Q))
    assert isinstance(r1, StepResult)
    assert [(t.role, t.kind) for t in r1.new_turns] == [("policy", "question"), ("oracle", "reply")]
    assert r1.new_turns[0].text == FULL_Q and r1.new_turns[1].text
    assert not r1.done and r1.status == "running" and r1.reward is None
    e1 = r1.episode
    assert (e1.questions_asked, e1.questions_remaining, e1.phase) == (1, 2, "asking")
    assert e1.turns == ep.turns + r1.new_turns  # the whole history, accumulated
    assert e1.token != ep.token
    r2 = client.step(e1, Action.stop())
    assert r2.done and r2.status == "terminated" and r2.episode.phase == "done"
    assert r2.reward == Reward("question_f1", 1.0, {"question_f1": 1.0, "precision": 1.0, "recall": 1.0})
    assert r2.episode.reward == r2.reward and r2.episode.done
    assert [t.kind for t in r2.episode.turns] == ["request", "question", "reply", "stop"]


def test_absent_components_stay_absent(client):
    r = client.step(client.reset(task_id="shop-001"), Action.stop())
    # No question: precision is undefined, so absent (not 0).
    assert r.reward.components == {"question_f1": 0.0, "recall": 0.0}
    assert "precision" not in r.reward.components


def test_generic_question_and_budget(client):
    ep = client.reset(task_id="shop-001", extra_questions=0)  # budget 1
    r = client.step(ep, Action.ask("Could you clarify what you want?"))
    assert r.new_turns[1].role == "oracle" and r.new_turns[1].kind == "refusal"
    assert r.episode.questions_remaining == 0
    r = client.step(r.episode, Action.ask(FULL_Q))  # over budget: not answered
    assert r.done and r.status == "truncated"
    assert not any(t.role == "oracle" for t in r.new_turns)
    assert r.reward.value == 0.0


def test_wrong_phase_keeps_token(client):
    done = client.step(client.reset(task_id="shop-001"), Action.stop()).episode
    with pytest.raises(AvtgymError) as ei:
        client.step(done, Action.ask(FULL_Q))
    assert ei.value.code == "FAILED_PRECONDITION" and ei.value.reason


def test_fork_and_raw_token(client):
    ep = client.reset(task_id="shop-001")
    a = client.step(ep, Action.ask(FULL_Q))
    b = client.step(ep.token, Action.ask(FULL_Q))  # raw bytes: same token, same action
    assert a.new_turns == b.new_turns and a.episode.questions_asked == b.episode.questions_asked
    assert b.episode.turns == b.new_turns  # a raw token carries no client-side history


def test_token_tamper_unary(client):
    ep = client.reset(task_id="shop-001")
    with pytest.raises(AvtgymError) as ei:
        client.step(tamper(ep.token), Action.stop())
    e = ei.value
    assert e.code == "INVALID_ARGUMENT" and e.reason == "TOKEN_TAMPERED" and e.field == "token"
    assert e.message


def test_batch_with_one_bad_item(client):
    eps = client.reset_group(4, task_id="shop-001", seed=1)
    items = [(eps[0], Action.ask(FULL_Q)), (tamper(eps[1].token), Action.stop()),
             (eps[2], Action.stop()), (eps[3], Action.ask("Please elaborate."))]
    outs = client.step_batch(items)
    assert len(outs) == 4
    assert isinstance(outs[1], AvtgymError)
    assert outs[1].code == "INVALID_ARGUMENT" and outs[1].reason == "TOKEN_TAMPERED"
    assert isinstance(outs[0], StepResult) and outs[0].new_turns[1].role == "oracle"
    assert isinstance(outs[2], StepResult) and outs[2].done
    assert isinstance(outs[3], StepResult) and not outs[3].done
    assert outs[0].episode.seed == 1 and outs[3].episode.seed == 4
    assert client.step_batch([]) == []


def test_list_tasks(client):
    tasks = client.list_tasks(privileged=True)
    # 59 one-phase tasks, the followup-* tasks with a follow-up (BIRD_C's: subtasks 2), and the
    # tide-* samples (one phase, with TIDE's sample_type, privileged: asked for here).
    single = [t for t in tasks if t.subtasks == 1 and not t.sample_type]
    assert len(single) == 59 and tasks[0].task_id == "shop-001" and tasks[0].database == "shop"
    assert all(t.subtasks == 2 and t.task_id.startswith("followup-") and not t.sample_type
               for t in tasks if t.subtasks != 1)
    tide = [t for t in tasks if t.sample_type]
    assert tide and all(t.subtasks == 1 and t.task_id.startswith("tide-") for t in tide)
    assert {t.sample_type for t in tide} == {"chain_only", "drift_only", "joint"}
    # Without privileged=True the same tasks, in the same order, and no sample type.
    plain = client.list_tasks()
    assert [t.task_id for t in plain] == [t.task_id for t in tasks]
    assert not any(t.sample_type for t in plain)
    train = client.list_tasks(split="train")
    assert 0 < len(train) < len(tasks) and all(t.split == "train" for t in train)


def test_bad_action_kind(client):
    with pytest.raises(ValueError):
        Action("jump").to_proto()

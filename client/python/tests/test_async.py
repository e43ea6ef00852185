"""The asyncio client: concurrent episodes, one failing without harming the others."""

from __future__ import annotations

import asyncio

import pytest

from avtgym import Action, AsyncClient, AvtgymError, Episode, StepResult

FULL_Q = "Could you clarify what exactly you mean by top 5 customers?"


def test_async_methods(addr):
    async def main():
        async with AsyncClient(addr, timeout=30.0) as c:
            ep = await c.reset(task_id="shop-001", seed=3)
            assert ep.seed == 3 and ep.phase == "asking"
            g = await c.reset_group(4, task_id="shop-001", seed=10)
            assert [e.seed for e in g] == [10, 11, 12, 13]
            r = await c.step(ep, Action.ask(FULL_Q))
            assert r.new_turns[1].role == "oracle"
            bad = bytearray(ep.token)
            bad[5] ^= 1
            outs = await c.step_batch([(r.episode, Action.stop()), (bytes(bad), Action.stop())])
            assert isinstance(outs[0], StepResult) and outs[0].reward.value == 1.0
            assert isinstance(outs[1], AvtgymError) and outs[1].reason == "TOKEN_TAMPERED"
            with pytest.raises(AvtgymError) as ei:
                await c.step(bytes(bad), Action.stop())
            assert ei.value.code == "INVALID_ARGUMENT"
            # 59 one-phase AmbiTab tasks (the TIDE samples, with a sample_type, aside): the type is
            # privileged, so only privileged=True tells them apart; without it no task has one.
            tasks = await c.list_tasks(privileged=True)
            assert len([t for t in tasks if t.subtasks == 1 and not t.sample_type]) == 59
            assert {t.sample_type for t in tasks} == {"", "chain_only", "drift_only", "joint"}
            assert not any(t.sample_type for t in await c.list_tasks())

    asyncio.run(main())


def test_rollout_concurrent_with_one_failure(addr):
    inflight = 0
    peak = 0

    async def policy(ep: Episode) -> Action:
        nonlocal inflight, peak
        inflight += 1
        peak = max(peak, inflight)
        await asyncio.sleep(0.01)
        inflight -= 1
        if ep.seed == 13:
            raise RuntimeError("policy crashed")
        if ep.questions_asked == 0 and ep.task.task_id == "shop-001":
            return Action.ask(FULL_Q)
        return Action.stop()

    async def main():
        async with AsyncClient(addr) as c:
            starts = [{"task_id": "shop-001", "seed": s} for s in range(10, 40)]
            starts[5] = {"task_id": "no-such-task", "seed": 15}  # reset fails
            eps = await c.rollout(policy, starts, concurrency=8)
            return eps

    out = asyncio.run(main())
    assert len(out) == 30
    assert isinstance(out[3], RuntimeError)  # seed 13: the policy raised
    assert isinstance(out[5], AvtgymError) and out[5].code in ("NOT_FOUND", "INVALID_ARGUMENT")
    ok = [e for i, e in enumerate(out) if i not in (3, 5)]
    assert all(isinstance(e, Episode) and e.done and e.reward.value == 1.0 for e in ok)
    assert [e.seed for e in ok] == [s for s in range(10, 40) if s not in (13, 15)]
    assert 1 < peak <= 8

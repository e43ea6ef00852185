"""verl adapter: AvtgymInteraction driven with chat messages as verl's agent loop does (no GPU)."""

from __future__ import annotations

import asyncio
import json

import pytest

REASON = ("verl.interactions.base is not importable: install verl==0.7.1 (later PyPI releases, "
          "0.8.0 and 0.9.x, no longer ship verl.interactions)")

QUESTION = "What do you mean by top customers?"


@pytest.fixture(scope="module")
def verl_mod():
    pytest.importorskip("verl.interactions.base", reason=REASON)
    import avtgym.trainers.verl as m
    return m


def ask(q):
    return {"role": "assistant", "content": json.dumps({"type": "clarification", "question": q})}


def test_interaction_episode(trainer_addr, verl_mod):
    from avtgym import AsyncClient
    from avtgym.trainers import DEFAULT_SYSTEM_PROMPT

    async def main():
        client = AsyncClient(trainer_addr)
        inter = verl_mod.AvtgymInteraction({"name": "avtgym", "client": client, "reset": {"reward": "question_f1"}})
        iid = await inter.start_interaction("req-1", name="avtgym", task_id="shop-001", seed=4)
        assert iid == "req-1"
        ep = inter.episode(iid)
        msgs = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": ep.request}, ask(QUESTION)]
        stop, reply, score, meta = await inter.generate_response(iid, msgs, name="avtgym", task_id="shop-001", seed=4)
        assert (stop, score) == (False, 0.0)
        assert reply.startswith("I mean")  # the oracle's reply becomes verl's user turn (response_mask 0)
        assert meta["questions_asked"] == 1
        msgs += [{"role": "user", "content": reply}, {"role": "assistant", "content": '{"type": "done"}'}]
        stop, reply, score, meta = await inter.generate_response(iid, msgs)
        assert stop and score == 1.0 and meta["status"] == "terminated"
        assert meta["reward_components"]["question_f1"] == 1.0
        assert await inter.calculate_score(iid) == 1.0
        # after the end, further turns terminate at once
        assert (await inter.generate_response(iid, msgs))[0] is True
        await inter.finalize_interaction(iid)
        assert await inter.calculate_score(iid) == 0.0

        # malformed output: STOP by default; "retry" sends one corrective notice first
        iid = await inter.start_interaction(None, task_id="shop-001")
        stop, _, score, meta = await inter.generate_response(iid, [{"role": "assistant", "content": "hmm"}])
        assert stop and meta["malformed"] == 1 and meta["questions_asked"] == 0
        retry = verl_mod.AvtgymInteraction({"client": client, "on_malformed": "retry"})
        iid = await retry.start_interaction("r2", task_id="shop-001")
        stop, reply, _, _ = await retry.generate_response(iid, [{"role": "assistant", "content": "hmm"}])
        assert not stop and "not a valid action" in reply
        stop, _, _, meta = await retry.generate_response(iid, [{"role": "assistant", "content": "hmm"}])
        assert stop and meta["malformed"] == 2

        # an unknown task fails at start (verl surfaces it); an environment error ends with score 0
        from avtgym import AvtgymError
        with pytest.raises(AvtgymError):
            await inter.start_interaction("bad", task_id="no-such-task")
        await client.close()

    asyncio.run(main())


def test_loaded_by_verl_registry(tmp_path, trainer_addr, verl_mod):
    from verl.interactions.base import BaseInteraction
    from verl.interactions.utils.interaction_registry import initialize_interactions_from_config

    cfg = tmp_path / "interaction.yaml"
    cfg.write_text(
        "interaction:\n"
        "  - name: avtgym\n"
        "    class_name: avtgym.trainers.verl.AvtgymInteraction\n"
        f"    config: {{target: '{trainer_addr}', reset: {{reward: question_f1}}}}\n")
    m = initialize_interactions_from_config(str(cfg))
    inter = m["avtgym"]
    assert isinstance(inter, BaseInteraction) and inter.target == trainer_addr

    async def main():
        iid = await inter.start_interaction("x", task_id="shop-001")
        stop, reply, score, _ = await inter.generate_response(iid, [ask(QUESTION)])
        stop, reply, score, _ = await inter.generate_response(iid, [{"role": "assistant", "content": "STOP"}])
        assert stop and score == 1.0

    asyncio.run(main())


def test_verl_row(trainer_addr, verl_mod):
    from avtgym import Client

    with Client(trainer_addr) as c:
        ep = c.reset(task_id="shop-001", seed=9)
    row = verl_mod.verl_row(ep, task_id="shop-001", seed=9)
    assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] == "user"
    assert row["extra_info"]["interaction_kwargs"] == {"name": "avtgym", "task_id": "shop-001", "seed": 9}

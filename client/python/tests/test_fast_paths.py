"""The client's hot-path conversions (issue 20) give what the plain ones gave: an action set in
place equals Action.to_proto, a batch request built item by item equals StepBatchRequest(steps=...),
and StepResult.from_proto's episode equals dataclasses.replace of the previous one."""

from __future__ import annotations

import dataclasses

import pytest

from avtgym import Action, Budget, Episode, Reward, StepResult, Turn
from avtgym import client as cm
from avtgym.v1 import env_service_pb2 as pb
from avtgym.v1 import episode_pb2 as epb

ACTIONS = [
    Action.ask("What do you mean by top 5?"), Action.ask(""), Action.stop(), Action.submit_sql("SELECT 1"),
    Action.submit_sql(""), Action.unparsed("garbled"), Action.unparsed(""), Action.execute("SELECT 2"),
    Action.get_schema(), Action.get_all_column_meanings(), Action.get_column_meaning("t", "c"),
    Action.get_column_meaning("", ""), Action.get_all_external_knowledge_names(),
    Action.get_knowledge_definition("k"), Action.get_all_knowledge_definitions(),
]


def _episode(**kw) -> Episode:
    base = dict(token=b"t0", episode_id="e1", seed=7, group_index=2, task=None,
                turns=(Turn("environment", "request", "R"),), phase="asking", question_budget=3,
                questions_asked=0, questions_remaining=3, done=False, status="running", reward=None,
                privileged={"ambiguities": [1]}, protocol="ambitab", subtask=1,
                budget=Budget("questions", 3000, 0, 3000))
    base.update(kw)
    return Episode(**base)


def _response(done: bool = False, privileged: bool = False) -> pb.StepResponse:
    r = pb.StepResponse(token=b"t1", done=done, status=epb.EPISODE_STATUS_TERMINATED if done else epb.EPISODE_STATUS_RUNNING)
    o = r.observation
    o.turns.add(role=epb.ROLE_POLICY, kind=epb.TURN_KIND_QUESTION, text="Q?")
    o.turns.add(role=epb.ROLE_ORACLE, kind=epb.TURN_KIND_REPLY, text="A.")
    o.phase, o.question_budget, o.questions_asked, o.questions_remaining = epb.PHASE_ASKING, 3, 1, 2
    o.protocol, o.subtask = epb.PROTOCOL_AMBITAB, 1
    o.budget.unit, o.budget.total_milli, o.budget.used_milli, o.budget.remaining_milli = epb.BUDGET_UNIT_QUESTIONS, 3000, 1000, 2000
    if done:
        r.reward.type, r.reward.value = epb.REWARD_TYPE_QUESTION_F1, 0.5
        r.reward.components["question_f1"] = 0.5
    if privileged:
        r.privileged.verifier_reason = "ok"
    return r


@pytest.mark.parametrize("action", ACTIONS, ids=lambda a: f"{a.kind}:{a.text or a.table}")
def test_fill_equals_to_proto(action: Action) -> None:
    m = epb.Action()
    action._fill(m)
    want = action.to_proto()
    assert m.WhichOneof("kind") == want.WhichOneof("kind")
    assert m.SerializeToString(deterministic=True) == want.SerializeToString(deterministic=True)


def test_fill_rejects_unknown_kind() -> None:
    with pytest.raises(ValueError):
        Action("fly")._fill(epb.Action())
    with pytest.raises(TypeError):
        cm._step_request(_episode(), "ask", False)  # type: ignore[arg-type]


@pytest.mark.parametrize("privileged", [False, True])
def test_requests_equal_the_plain_ones(privileged: bool) -> None:
    eps = [_episode(token=bytes([i]) * 5) for i in range(len(ACTIONS))]
    pairs = list(zip(eps, ACTIONS))
    plain = [pb.StepRequest(token=e.token, action=a.to_proto(), include_privileged=privileged) for e, a in pairs]
    for (e, a), want in zip(pairs, plain):
        assert cm._step_request(e, a, privileged) == want
    todo = [3, 0, 7]
    assert cm._batch_request(pairs, todo, privileged) == pb.StepBatchRequest(steps=[plain[i] for i in todo])


@pytest.mark.parametrize("done,privileged", [(False, False), (True, False), (True, True)])
def test_step_result_equals_replace(done: bool, privileged: bool) -> None:
    prev = _episode()
    r = _response(done, privileged)
    got = StepResult.from_proto(prev, r)
    new_turns = (Turn("policy", "question", "Q?"), Turn("oracle", "reply", "A."))
    reward = Reward("question_f1", 0.5, {"question_f1": 0.5}) if done else None
    priv = {"verifier_reason": "ok"} if privileged else None
    want = dataclasses.replace(
        prev, token=b"t1", turns=prev.turns + new_turns, phase="asking", question_budget=3, questions_asked=1,
        questions_remaining=2, done=done, status="terminated" if done else "running", reward=reward,
        privileged={**prev.privileged, **(priv or {})}, protocol="ambitab", subtask=1,
        budget=Budget("questions", 3000, 1000, 2000), sql_required=False)
    assert got.episode == want
    assert got == StepResult(want, new_turns, done, want.status, reward, priv)
    # Frozen, hashable where the plain ones are, and of the plain types.
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.episode.done = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.new_turns[0].text = "x"  # type: ignore[misc]
    assert hash(got.new_turns[0]) == hash(Turn("policy", "question", "Q?"))
    assert type(got.episode.token) is bytes and type(got.episode.done) is bool
    assert type(got.episode.subtask) is int and type(got.episode.sql_required) is bool
    # Picklable and copyable as before (multiprocessing trainers).
    import copy
    import pickle
    assert pickle.loads(pickle.dumps(got)) == got and copy.deepcopy(got) == got
    # The previous episode is untouched (a fork).
    assert prev.token == b"t0" and len(prev.turns) == 1


def test_step_result_keeps_an_episode_subclass() -> None:
    @dataclasses.dataclass(frozen=True)
    class Mine(Episode):
        note: str = "n"

    prev = Mine(**{f.name: getattr(_episode(), f.name) for f in dataclasses.fields(Episode)})
    got = StepResult.from_proto(prev, _response())
    assert type(got.episode) is Mine and got.episode.note == "n" and got.episode.token == b"t1"


def test_unknown_enum_values_are_named() -> None:
    r = _response()
    r.observation.turns[0].role = 99
    got = StepResult.from_proto(_episode(), r)
    assert got.new_turns[0].role == "unknown_99"


def test_coalesced_steps_equal_unary_ones(addr):
    """AsyncClient(coalesce=True): concurrent steps go as StepBatches, and each call gets what a
    Step would have given it, its own error included."""
    import asyncio

    from avtgym import AsyncClient, AvtgymError, Client

    q = Action.ask("Could you clarify what exactly you mean by top 5 customers?")

    def same(a: StepResult, b: StepResult) -> bool:  # tokens differ: each seal has its own nonce
        return (dataclasses.replace(a, episode=dataclasses.replace(a.episode, token=b""))
                == dataclasses.replace(b, episode=dataclasses.replace(b.episode, token=b"")))

    with Client(addr) as c:
        ep = c.reset(task_id="shop-001")
        want = c.step(ep, q)
        want_priv = c.step(ep, q, privileged=True)

    async def main():
        async with AsyncClient(addr, coalesce=True) as ac:
            many = await asyncio.gather(*(ac.step(ep, q) for _ in range(300)))  # more than one batch
            assert all(same(r, want) for r in many)
            assert same(await ac.step(ep, q), want)  # a lone step is sent at once
            mixed = await asyncio.gather(ac.step(ep, q), ac.step(ep.token + b"x", q), ac.step(ep, q, privileged=True),
                                         ac.step(ep, Action.stop()), return_exceptions=True)
            assert same(mixed[0], want) and same(mixed[2], want_priv)
            assert isinstance(mixed[1], AvtgymError) and mixed[1].code == "INVALID_ARGUMENT"
            assert isinstance(mixed[3], StepResult) and mixed[3].new_turns[0].kind == "stop"
            with pytest.raises(TypeError):
                await ac.step(ep, "ask")  # type: ignore[arg-type]
            # A cancelled caller does not disturb the others.
            t = asyncio.ensure_future(ac.step(ep, q))
            others = asyncio.gather(*(ac.step(ep, q) for _ in range(3)))
            await asyncio.sleep(0)
            t.cancel()
            assert all(same(r, want) for r in await others)

    asyncio.run(main())

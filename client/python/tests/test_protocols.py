"""Protocols over real gRPC: BIRD-Interact's c-Interact (BIRD_C) on the demo's follow-up tasks,
the unparsed action under AMBITAB and BIRD_C, the budget, and the client's protocol arguments.

BIRD_C tasks are found with list_tasks (subtasks == 2: the demo's followup-* tasks) and played
with the privileged channel: each counted ambiguity asked canonically, then the reference SQL,
then the follow-up's reference SQL (revealed with the follow-up, never before)."""

from __future__ import annotations

import asyncio

import pytest

from avtgym import PROTOCOLS, Action, AsyncClient, AvtgymError, Budget, Episode, Turn, parse_action, render_chat
from avtgym.client import _reset_request
from avtgym.v1 import episode_pb2 as epb

# BIRD_C's debug-retry messages (env/birdc.go). BIRD_VARIANT_ORIGINAL, the server's default, as
# bird_interact_conv's infer_api_system.py "debug" phase words them (an execution error is only the
# batch evaluation's error_msg, "[exec_err_flg] - Execution_Error: True", never the database's
# error); BIRD_VARIANT_ADK as BIRD-Interact-ADK's orchestrator/cinteract.py does.
RETRY_UNSURE = "Are you sure about your SQL? You have one more chance to update your SQL now."
RETRY_EXEC_ERR = "Your SQL is not executable and raises the following error: [exec_err_flg] - Execution_Error: True"
ADK_RETRY_UNSURE = "Your SQL is not correct. You have one more chance. Please fix and call submit_sql."
ADK_RETRY_ERROR = "Your SQL is not executable: Error executing submitted SQL: "
ADK_RETRY_FIX = "\nPlease fix and call submit_sql."
DEFAULT_PATIENCE = 3


def canonical(term: str) -> str:
    return f"What do you mean by '{term}'?"


def joined(sqls: list[str]) -> str:
    return ";\n".join(sqls)


def counted(priv: dict) -> list[str]:
    return [a["term"] for a in priv.get("ambiguities", []) if a.get("counted")]


@pytest.fixture(scope="module")
def bird_tasks(addr) -> list[str]:
    from avtgym import Client

    with Client(addr) as c:
        tasks = [t for t in c.list_tasks() if t.subtasks == 2]
    assert tasks, "the demo corpus has no task with a follow-up (TaskSummary.subtasks == 2)"
    assert all(t.task_id.startswith("followup-") for t in tasks), [t.task_id for t in tasks]
    return [t.task_id for t in tasks]


@pytest.fixture(scope="module")
def bird_task(bird_tasks) -> str:
    return bird_tasks[0]


def reset_variant(client, variant: int, **kwargs) -> Episode:
    """A reset with EpisodeOptions.bird_variant set through Client.reset's bird_variant argument
    (an enum value; names are tested in test_bird_options_by_name)."""
    return client.reset(bird_variant=variant, **kwargs)


def test_bird_options_by_name():
    """reset's follow_up_state and bird_variant arguments take names and enum values; unknown
    ones are refused before any call."""
    req = _reset_request(protocol="bird-c", follow_up_state="policy", bird_variant="ADK")
    assert req.options.follow_up_state == epb.FOLLOW_UP_STATE_POLICY
    assert req.options.bird_variant == epb.BIRD_VARIANT_ADK
    req = _reset_request(protocol="bird-a", follow_up_state=epb.FOLLOW_UP_STATE_REFERENCE,
                         bird_variant="bird_variant_original")
    assert req.options.follow_up_state == epb.FOLLOW_UP_STATE_REFERENCE
    assert req.options.bird_variant == epb.BIRD_VARIANT_ORIGINAL
    assert _reset_request(protocol="bird-c").options.follow_up_state == epb.FOLLOW_UP_STATE_UNSPECIFIED
    for bad in ({"follow_up_state": "mine"}, {"bird_variant": "adk2"}, {"bird_variant": 9}):
        with pytest.raises(ValueError):
            _reset_request(protocol="bird-c", **bad)
    with pytest.raises(TypeError):
        _reset_request(protocol="bird-c", bird_variant=True)


def ask_all(client, ep):
    """Ask each counted ambiguity canonically; every question is answered and spends a turn."""
    for i, term in enumerate(counted(ep.privileged)):
        res = client.step(ep, Action.ask(canonical(term)), privileged=True)
        assert not res.done, res.new_turns
        assert [t.kind for t in res.new_turns] == ["question", "reply"]
        assert res.budget.used_milli == (i + 1) * 1000 and not res.sql_required
        ep = res.episode
    return ep


# --- BIRD_C ---------------------------------------------------------------------------------------


def test_bird_c_full_scripted_episode(client, bird_tasks):
    """The scripted `full` policy reaches reward 1.0 (phase1 0.7 + phase2 0.3) on every demo task
    with a follow-up; the follow-up's request is an environment REQUEST turn of the step whose
    SQL passed, and its reference is revealed on that step only."""
    for task_id in bird_tasks:
        ep = client.reset(task_id=task_id, protocol="bird-c", privileged=True)
        assert ep.protocol == "bird-c" and ep.subtask == 1 and not ep.sql_required
        assert "follow_up_reference_sql" not in ep.privileged
        m = len(counted(ep.privileged))
        assert ep.budget == Budget("turns", (m + DEFAULT_PATIENCE) * 1000, 0, (m + DEFAULT_PATIENCE) * 1000)
        ep = ask_all(client, ep)
        assert "follow_up_reference_sql" not in ep.privileged

        res = client.step(ep, Action.submit_sql(joined(ep.privileged["reference_sql"])), privileged=True)
        assert not res.done and res.status == "running", res.new_turns
        # BIRD_VARIANT_ORIGINAL (the default): the follow-up gets one SQL turn plus its debug retry,
        # no questions (infer_api_system.py's "follow" phase pre-fills "<t>"), so SQL is required.
        assert res.subtask == 2 and res.released and res.sql_required
        assert res.episode.questions_remaining == 0
        assert [(t.role, t.kind) for t in res.new_turns] == [("policy", "sql"), ("environment", "request")]
        follow_up = res.new_turns[-1].text
        assert follow_up and follow_up != ep.request
        # Never shown before the release: not in the task view, the transcript or ListTasks.
        assert all(follow_up not in t.text for t in ep.turns)
        assert all(follow_up != t.request for t in client.list_tasks())
        fu_ref = res.privileged["follow_up_reference_sql"]
        assert fu_ref and res.episode.privileged["follow_up_reference_sql"] == fu_ref
        # The release adds one turn, for the follow-up's SQL.
        assert res.budget.total_milli == ep.budget.total_milli + 1000
        assert res.budget.used_milli == (m + 1) * 1000

        res = client.step(res.episode, Action.submit_sql(joined(fu_ref)))
        assert res.done and res.status == "terminated" and res.subtask == 2
        r = res.reward
        assert r.type == "bird_interact" and r.value == pytest.approx(1.0), (task_id, r)
        assert r.components == {"phase1": pytest.approx(0.7), "phase2": pytest.approx(0.3)}


def test_bird_c_debug_retry(client, bird_task):
    """A wrong (but executable) SQL gets the one debug retry: an environment FEEDBACK turn, SQL
    required; the reference then passes for 0.5, and the follow-up on its first try for 0.3."""
    ep = client.reset(task_id=bird_task, protocol="bird-c", privileged=True)
    ref = joined(ep.privileged["reference_sql"])
    res = client.step(ep, Action.submit_sql("SELECT 1 AS wrong"))
    assert not res.done and res.sql_required and res.subtask == 1
    assert [(t.role, t.kind, t.text) for t in res.new_turns] == [
        ("policy", "sql", "SELECT 1 AS wrong"), ("environment", "feedback", RETRY_UNSURE)]
    assert res.budget.used_milli == 1000  # the failed submission spent a turn
    res = client.step(res.episode, Action.submit_sql(ref), privileged=True)
    assert res.subtask == 2 and res.released and res.sql_required  # ORIGINAL: the follow-up's SQL turn
    assert res.budget.used_milli == 1000  # the retry did not
    res = client.step(res.episode, Action.submit_sql(joined(res.privileged["follow_up_reference_sql"])))
    assert res.done and res.reward.value == pytest.approx(0.8)
    assert res.reward.components == {"phase1": pytest.approx(0.5), "phase2": pytest.approx(0.3)}


def test_bird_c_retry_message_per_variant(client, bird_task):
    """SQL that does not run: under BIRD_VARIANT_ORIGINAL (the default) the retry says only that it
    failed ([exec_err_flg]; the batch evaluation's pred_err is a bool), never the database's error;
    under BIRD_VARIANT_ADK it carries the database's error."""
    bad = "SELECT nope FROM no_such_table_xyz"
    ep = client.reset(task_id=bird_task, protocol="bird-c")
    res = client.step(ep, Action.submit_sql(bad))
    fb = res.new_turns[-1]
    assert (fb.role, fb.kind, fb.text) == ("environment", "feedback", RETRY_EXEC_ERR) and res.sql_required
    assert not any("no_such_table_xyz" in t.text for t in res.new_turns if t.role != "policy")
    # A second failure ends the sub-task, and with it the episode, unsolved; phase 2 never came.
    res = client.step(res.episode, Action.submit_sql("SELECT 1 AS still_wrong"))
    assert res.done and res.reward.value == 0.0 and res.reward.components.get("phase1") == 0.0
    assert res.subtask == 1 and not any(t.kind == "request" for t in res.new_turns)

    for variant in (epb.BIRD_VARIANT_ORIGINAL, epb.BIRD_VARIANT_ADK):
        ep = reset_variant(client, variant, task_id=bird_task, protocol="bird-c")
        assert ep.protocol == "bird-c"
        fb = client.step(ep, Action.submit_sql(bad)).new_turns[-1]
        if variant == epb.BIRD_VARIANT_ORIGINAL:
            assert fb.text == RETRY_EXEC_ERR
        else:
            assert fb.text.startswith(ADK_RETRY_ERROR) and fb.text.endswith(ADK_RETRY_FIX), fb.text
            assert "no_such_table_xyz" in fb.text
        fb = client.step(ep, Action.submit_sql("SELECT 1 AS wrong")).new_turns[-1]
        assert fb.text == (RETRY_UNSURE if variant == epb.BIRD_VARIANT_ORIGINAL else ADK_RETRY_UNSURE)


def test_bird_c_follow_up_questions_per_variant(client, bird_task):
    """After phase 1 passes: under BIRD_VARIANT_ORIGINAL the follow-up is one SQL turn, so a question
    gets no answer and is taken as SQL that did not run (the [exec_err_flg] retry follows); under
    BIRD_VARIANT_ADK the user answers while turns last."""
    ref = joined(client.reset(task_id=bird_task, protocol="bird-c", privileged=True).privileged["reference_sql"])
    for variant in (epb.BIRD_VARIANT_ORIGINAL, epb.BIRD_VARIANT_ADK):
        ep = reset_variant(client, variant, task_id=bird_task, protocol="bird-c")
        res = client.step(ep, Action.submit_sql(ref))
        assert res.released and res.subtask == 2
        assert res.sql_required == (variant == epb.BIRD_VARIANT_ORIGINAL)
        res = client.step(res.episode, Action.ask("Which columns do you want?"))
        kinds = [(t.role, t.kind) for t in res.new_turns]
        assert not res.done and res.budget.used_milli == 2000, res.new_turns
        if variant == epb.BIRD_VARIANT_ORIGINAL:
            assert kinds == [("policy", "question"), ("environment", "feedback")]
            assert res.new_turns[-1].text == RETRY_EXEC_ERR and res.sql_required
        else:
            # The oracle answers (a reply or a refusal: this question names no ambiguity).
            assert kinds[0] == ("policy", "question") and [r for r, _ in kinds] == ["policy", "oracle"]
            assert not res.sql_required


def test_bird_c_sql_required_accepts_only_sql(client, bird_task):
    """In the debug retry only submit_sql is accepted: a question ends the sub-task with 0."""
    ep = client.reset(task_id=bird_task, protocol="bird-c")
    res = client.step(ep, Action.submit_sql("SELECT 1 AS wrong"))
    assert res.sql_required
    res = client.step(res.episode, Action.ask("What do you mean?"))
    assert res.done and res.reward.value == 0.0 and not res.sql_required
    assert res.new_turns[-1].role == "environment"


def test_bird_c_unparsed_spends_a_turn(client, bird_task):
    ep = client.reset(task_id=bird_task, protocol="bird-c")
    total = ep.budget.total_milli
    res = client.step(ep, Action.unparsed("I think... hmm"))
    assert not res.done
    assert res.new_turns[0] == Turn("policy", "unparsed", "I think... hmm")
    assert res.new_turns[1].role == "environment" and res.new_turns[1].kind == "notice"
    assert res.budget.used_milli == 1000 and res.budget.remaining_milli == total - 1000
    # Spend the turns until only SQL is accepted. BIRD_VARIANT_ORIGINAL: an unparsed output on the
    # last turn is SQL that did not run (wrap_up_sql.py's extract_system_response gives "ERROR!"):
    # the turn is spent and the debug retry follows; anything but SQL there ends the sub-task.
    ep = res.episode
    for _ in range(total // 1000):
        if ep.sql_required:
            break
        ep = client.step(ep, Action.unparsed("still not an action")).episode
        assert not ep.done
    assert ep.sql_required and ep.budget.remaining_milli == 1000
    res = client.step(ep, Action.unparsed("nope"))
    assert not res.done and res.status == "running" and res.sql_required and res.budget.remaining_milli == 0
    assert [(t.role, t.kind, t.text) for t in res.new_turns] == [
        ("policy", "unparsed", "nope"), ("environment", "feedback", RETRY_EXEC_ERR)]
    end = client.step(res.episode, Action.unparsed("nope again"))
    assert end.done and end.reward.value == 0.0 and end.status == "terminated"
    # A stop on the last turn still ends the sub-task unsolved.
    end = client.step(ep, Action.stop())
    assert end.done and end.reward.value == 0.0 and end.status == "truncated"


@pytest.mark.parametrize("patience", [0, 5])
def test_bird_c_patience(client, bird_task, patience):
    priv = client.reset(task_id=bird_task, protocol="bird-c", privileged=True).privileged
    m = len(counted(priv))
    ep = client.reset(task_id=bird_task, protocol="bird-c", patience=patience)
    want = max(1, m + patience)
    assert ep.budget.unit == "turns" and ep.budget.total == float(want) and ep.budget.used == 0.0
    assert ep.budget.remaining == float(want)
    assert ep.sql_required == (want == 1)


def test_bird_c_group_batch_and_async(addr, client, bird_task):
    eps = client.reset_group(3, task_id=bird_task, protocol=epb.PROTOCOL_BIRD_C, seed=7, privileged=True)
    assert [e.protocol for e in eps] == ["bird-c"] * 3 and [e.seed for e in eps] == [7, 8, 9]
    ref = joined(eps[0].privileged["reference_sql"])
    outs = client.step_batch([(eps[0], Action.submit_sql(ref)), (eps[1], Action.unparsed("??")),
                              (eps[2], Action.stop())])
    assert outs[0].subtask == 2 and outs[0].released
    assert outs[1].budget.used_milli == 1000 and not outs[1].done
    assert outs[2].done and outs[2].reward.value == 0.0  # STOP leaves the sub-task unsolved

    async def main():
        async with AsyncClient(addr) as c:
            ep = await c.reset(task_id=bird_task, protocol="BIRD_C", patience=0, privileged=True)
            assert ep.protocol == "bird-c" and ep.budget.total == max(1, len(counted(ep.privileged)))
            g = await c.reset_group(2, task_id=bird_task, protocol="bird-c", seed=3)
            assert [e.protocol for e in g] == ["bird-c"] * 2
            r = await c.step(g[0], Action.unparsed("x"))
            assert r.budget.used == 1.0 and r.new_turns[0].kind == "unparsed"
            outs = await c.step_batch([(g[1], Action.submit_sql(joined(ep.privileged["reference_sql"])))])
            assert outs[0].subtask == 2

    asyncio.run(main())


def test_bird_c_render_chat_masks_environment_turns(client, bird_task):
    """The follow-up's request, the debug-retry feedback and notices are user messages, never
    trainable; the policy's turns (an unparsed output included) are the assistant's."""
    ep = client.reset(task_id=bird_task, protocol="bird-c", privileged=True)
    ep = client.step(ep, Action.unparsed("hmm")).episode
    ep = client.step(ep, Action.submit_sql("SELECT 1 AS wrong")).episode
    res = client.step(ep, Action.submit_sql(joined(ep.privileged["reference_sql"])))
    follow_up = res.new_turns[-1].text
    messages, mask = render_chat(res.episode, "sys", action_format="json")
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant", "user"]
    assert mask == [r == "assistant" for r in roles]
    assert messages[2]["content"] == "hmm"
    assert messages[5]["content"] == RETRY_UNSURE
    assert messages[-1] == {"role": "user", "content": follow_up}
    assert parse_action(messages[-2]["content"]).action.kind == "submit_sql"


# --- AMBITAB --------------------------------------------------------------------------------------


def test_ambitab_unparsed_notice_then_stop(client):
    ep = client.reset(task_id="shop-001")
    assert ep.protocol == "ambitab" and ep.subtask == 1 and not ep.sql_required
    assert ep.budget == Budget("questions", ep.question_budget * 1000, 0, ep.question_budget * 1000)
    res = client.step(ep, Action.unparsed("blah"))
    assert not res.done and res.episode.phase == "asking"
    assert [(t.role, t.kind) for t in res.new_turns] == [("policy", "unparsed"), ("environment", "notice")]
    assert res.new_turns[0].text == "blah" and res.budget.used_milli == 0  # no question spent
    # Not in a row: a valid action in between resets the count.
    res = client.step(res.episode, Action.ask("What do you mean by top 5 customers?"))
    res = client.step(res.episode, Action.unparsed("blah again"))
    assert not res.done and res.new_turns[-1].kind == "notice"
    # The second in a row is taken as STOP: asking ends and the episode is scored.
    res = client.step(res.episode, Action.unparsed("and again"))
    assert res.done and res.episode.phase == "done" and res.reward.type == "question_f1"
    assert res.reward.value == pytest.approx(1.0)


def test_ambitab_default_and_explicit_protocol(client):
    a = client.reset(task_id="shop-001", seed=5)
    b = client.reset(task_id="shop-001", seed=5, protocol="ambitab")
    assert a.protocol == b.protocol == "ambitab" and a.episode_id == b.episode_id
    assert a.reward is None and b.question_budget == a.question_budget


# --- arguments ------------------------------------------------------------------------------------


def test_protocol_names():
    from avtgym.types import protocol_enum, protocol_name

    assert PROTOCOLS == ("ambitab", "bird-c", "bird-a", "tide-f", "tide-p")
    assert protocol_enum(None) == protocol_enum("") == epb.PROTOCOL_UNSPECIFIED
    for given in ("bird-c", "BIRD-C", "bird_c", "BIRD_C", "PROTOCOL_BIRD_C", epb.PROTOCOL_BIRD_C):
        assert protocol_enum(given) == epb.PROTOCOL_BIRD_C, given
    assert [protocol_enum(p) for p in PROTOCOLS] == [1, 2, 3, 4, 5]
    assert protocol_name(None) == "ambitab" and protocol_name(epb.PROTOCOL_TIDE_F) == "tide-f"
    with pytest.raises(ValueError, match="bird-c"):
        protocol_enum("bird")
    with pytest.raises(ValueError):
        protocol_enum(42)
    with pytest.raises(TypeError):
        protocol_enum(True)


def test_protocol_errors(client, bird_task):
    with pytest.raises(ValueError):  # client-side, before any call
        client.reset(task_id=bird_task, protocol="c-interact")
    for tide in ("tide-f", "tide-p"):  # TIDE serves no task with a follow-up
        with pytest.raises(AvtgymError) as ei:
            client.reset(task_id=bird_task, protocol=tide)
        assert (ei.value.code, ei.value.reason) == ("INVALID_ARGUMENT", "INVALID_OPTION"), tide
    with pytest.raises(AvtgymError) as ei:  # BIRD_C serves only tasks with a follow-up
        client.reset(task_id="shop-001", protocol="bird-c")
    assert (ei.value.code, ei.value.reason) == ("INVALID_ARGUMENT", "INVALID_OPTION")
    with pytest.raises(AvtgymError) as ei:  # patience is BIRD_C's
        client.reset(task_id="shop-001", patience=3)
    assert ei.value.reason == "INVALID_OPTION"
    with pytest.raises(AvtgymError) as ei:  # BIRD_C has its own reward
        client.reset(task_id=bird_task, protocol="bird-c", reward="question_f1")
    assert ei.value.reason == "INVALID_OPTION"


def test_budget_float_views():
    b = Budget("coins", 2500, 700, 1800)
    assert (b.total, b.used, b.remaining) == (2.5, 0.7, 1.8)
    assert Budget.from_proto(epb.Budget(unit=epb.BUDGET_UNIT_TURNS, total_milli=3000, used_milli=1000,
                                        remaining_milli=2000)) == Budget("turns", 3000, 1000, 2000)


# --- the unparsed action and parse_action -----------------------------------------------------------


def test_unparsed_action_proto():
    a = Action.unparsed("some output")
    assert a == Action("unparsed", "some output")
    assert a.to_proto() == epb.Action(unparsed=epb.Action.Unparsed(text="some output"))
    assert Action.unparsed(None).text == ""


@pytest.mark.parametrize("text", ["asdf qwerty", '{"type": "dance"}', "   ", "I am not sure.\nMaybe?"])
def test_parse_action_malformed_gives_unparsed(text):
    got = parse_action(text)
    # Backward compatible: malformed output is still action None, ok False, with the reason.
    assert not got.ok and got.action is None and got.error
    assert got.text == text and got.or_unparsed() == Action.unparsed(text)


def test_parse_action_ok_keeps_the_action():
    got = parse_action('{"type": "sql", "sql": "SELECT 1"}')
    assert got.ok and got.or_unparsed() == Action.submit_sql("SELECT 1")
    assert got.text == '{"type": "sql", "sql": "SELECT 1"}'
    none = parse_action(None)
    assert not none.ok and none.text == "" and none.or_unparsed() == Action.unparsed("")


def test_parse_action_unparsed_round_trip(client, bird_task):
    """A model output that does not parse reaches the server verbatim as an unparsed turn."""
    out = "Let me think about which table to use first."
    res = client.step(client.reset(task_id=bird_task, protocol="bird-c"), parse_action(out).or_unparsed())
    assert res.new_turns[0].kind == "unparsed" and res.new_turns[0].text == out

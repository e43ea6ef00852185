"""TIDE_F and TIDE_P through the Python client against the real server: the demo corpus's TIDE
samples (tide-*: chain_only, drift_only, joint), the drift turn, TIDE's reward components, the
privileged routing and TideInfo, TIDE_P's pre-filled question (the agent's turn, never trainable)
and how the chat rendering and the adapters treat both."""

from __future__ import annotations

import re

import pytest
from google.protobuf.json_format import MessageToDict

from avtgym import AGENT_ROLES, Action, AvtgymError, Budget, Episode, TideInfo, Turn, parse_action, render_chat
from avtgym.types import TaskSummary, sample_types_enum
from avtgym.v1 import episode_pb2 as epb

SYSTEM = "SYS"
# A TIDE sample's public id (env/publicid.go): "tide-" and 16 hex digits, nothing of its type.
OPAQUE = re.compile(r"^tide-[0-9a-f]{16}$")
# The record id's sample-type suffix (TIDE's instance_id, <anchor>-C/-D/-J), privileged.
RECORD_SUFFIX = {"chain_only": "-C", "drift_only": "-D", "joint": "-J"}
COMPONENTS = {"outcome", "sql1", "sql2", "drift_recognized", "l1_identified", "l2_identified", "asked"}


def ask(term: str) -> Action:
    return Action.ask(f"Could you clarify what exactly you mean by {term}?")


def layer_terms(ep: Episode) -> dict[int, str]:
    """Chain layer -> the term of the first ambiguity of that layer (privileged, annotation order)."""
    layers = ep.tide.chain_layers
    out: dict[int, str] = {}
    for a, layer in zip(ep.privileged["ambiguities"], layers):
        out.setdefault(layer, a["term"])
    return out


def resolution(ep: Episode, term: str) -> str:
    return next(a["resolution"] for a in ep.privileged["ambiguities"] if a["term"] == term)


@pytest.fixture(scope="module")
def tide_tasks(addr) -> dict[str, list[str]]:
    """sample type -> the demo's TIDE task ids (public, opaque) of that type (privileged: the
    test server's callers are trainers)."""
    from avtgym import Client

    with Client(addr) as c:
        tasks = [t for t in c.list_tasks(privileged=True) if t.sample_type]
    out: dict[str, list[str]] = {}
    for t in tasks:
        out.setdefault(t.sample_type, []).append(t.task_id)
    assert set(out) == {"chain_only", "drift_only", "joint"}, out
    return out


# --- types ----------------------------------------------------------------------------------------


def test_enum_names_and_protocols():
    from avtgym.types import PROTOCOLS, _ROLE, _TURN_KIND, protocol_enum

    assert _ROLE[epb.ROLE_PREFILLED] == "prefilled" and _TURN_KIND[epb.TURN_KIND_DRIFT] == "drift"
    assert Turn.from_proto(epb.Turn(role=epb.ROLE_PREFILLED, kind=epb.TURN_KIND_QUESTION, text="Q?")) == \
        Turn("prefilled", "question", "Q?")
    assert "tide-f" in PROTOCOLS and "tide-p" in PROTOCOLS
    assert protocol_enum("tide-f") == epb.PROTOCOL_TIDE_F and protocol_enum("TIDE_P") == epb.PROTOCOL_TIDE_P
    assert AGENT_ROLES == {"policy", "prefilled"}
    assert Turn("policy", "sql", "x").trainable and not Turn("prefilled", "question", "q").trainable
    assert Turn("prefilled", "question", "q").agent and not Turn("oracle", "drift", "d").agent


def test_tide_info_from_dict_equals_from_proto():
    m = epb.TideInfo(cluster="c1", sample_type="joint", drift_utterance="Sorry, Apparel.",
                     post_drift_reference_sql=["SELECT 1", "SELECT 2"], drift_subtype="projection",
                     intent_subtype="aspect_change", chain_layers=[1, 2, 1])
    d = MessageToDict(m, preserving_proto_field_name=True)
    assert TideInfo.from_dict(d) == TideInfo.from_proto(m) == TideInfo(
        "c1", "joint", "Sorry, Apparel.", ("SELECT 1", "SELECT 2"), "projection", "aspect_change", (1, 2, 1))
    assert TideInfo.from_proto(m).has_drift
    bare = epb.TideInfo(cluster="c2", sample_type="chain_only", chain_layers=[1, 2])
    info = TideInfo.from_dict(MessageToDict(bare, preserving_proto_field_name=True))
    assert info == TideInfo.from_proto(bare) and not info.has_drift and info.post_drift_reference_sql == ()


def test_task_summary_and_tide_info_read_the_enums():
    """The enums are read (as lower-case names); the deprecated strings only when the enum is
    unset (an older server); MessageToDict's enum names are read too."""
    s = epb.TaskSummary(task_id="t", sample_type_enum=epb.SAMPLE_TYPE_DRIFT_ONLY)
    assert TaskSummary.from_proto(s).sample_type == "drift_only"
    # The enum wins over a disagreeing string.
    s = epb.TaskSummary(task_id="t", sample_type="joint", sample_type_enum=epb.SAMPLE_TYPE_CHAIN_ONLY)
    assert TaskSummary.from_proto(s).sample_type == "chain_only"
    assert TaskSummary.from_proto(epb.TaskSummary(task_id="t", sample_type="joint")).sample_type == "joint"
    assert TaskSummary.from_proto(epb.TaskSummary(task_id="t")).sample_type == ""
    m = epb.TideInfo(cluster="c", sample_type_enum=epb.SAMPLE_TYPE_JOINT,
                     drift_subtype_enum=epb.DRIFT_SUBTYPE_CONSTRAINT)
    d = MessageToDict(m, preserving_proto_field_name=True)
    assert d["sample_type_enum"] == "SAMPLE_TYPE_JOINT"  # what Episode.privileged holds
    assert TideInfo.from_dict(d) == TideInfo.from_proto(m) == TideInfo("c", "joint", drift_subtype="constraint")
    for v, name in ((epb.CHAIN_ROUTING_L1, "L1"), (epb.CHAIN_ROUTING_L2, "L2"), (epb.CHAIN_ROUTING_OTHER, "other")):
        p = MessageToDict(epb.Privileged(routing_enum=v), preserving_proto_field_name=True)
        r = _step_result(p)
        assert r.routing == name, (v, p)
    assert _step_result({"routing": "L2"}).routing == "L2"  # an older server: the string only
    assert _step_result({}).routing == ""


def _step_result(privileged: dict):
    from avtgym import StepResult

    ep = Episode.from_token(b"t")
    return StepResult(ep, (), False, "running", None, privileged)


def test_sample_types_enum():
    assert sample_types_enum(None) == [] and sample_types_enum([]) == []
    assert sample_types_enum(["joint", "DRIFT_ONLY", "sample_type_chain_only", epb.SAMPLE_TYPE_JOINT]) == [
        epb.SAMPLE_TYPE_JOINT, epb.SAMPLE_TYPE_DRIFT_ONLY, epb.SAMPLE_TYPE_CHAIN_ONLY, epb.SAMPLE_TYPE_JOINT]
    assert sample_types_enum("joint") == [epb.SAMPLE_TYPE_JOINT]
    for bad in (["chain"], [0], [99]):
        with pytest.raises(ValueError):
            sample_types_enum(bad)
    with pytest.raises(TypeError):
        sample_types_enum([True])


def test_list_tasks_sample_type_is_privileged(client, tide_tasks):
    """Public TIDE ids are opaque and the type is given only with privileged=True; the record id
    (TIDE's instance_id, which names the type) is the reset's privileged record_id."""
    plain = client.list_tasks()
    assert not any(t.sample_type for t in plain)
    tide_ids = {t for ids in tide_tasks.values() for t in ids}
    assert len(tide_ids) == sum(len(ids) for ids in tide_tasks.values()) >= 3
    assert all(OPAQUE.match(t) for t in tide_ids), tide_ids
    assert tide_ids <= {t.task_id for t in plain}
    by_id = {t.task_id: t for t in client.list_tasks(privileged=True)}
    assert by_id["shop-001"].sample_type == "" and not OPAQUE.match("shop-001")
    records = {}
    for st, ids in tide_tasks.items():
        for t in ids:
            assert by_id[t].sample_type == st
            ep = client.reset(task_id=t, protocol="tide-f", privileged=True)
            assert ep.task.task_id == t
            assert ep.record_id.startswith("tide-") and ep.record_id.endswith(RECORD_SUFFIX[st]), ep.record_id
            assert ep.record_id != t and ep.tide.sample_type == st
            # Nothing public names the record id.
            assert ep.record_id not in ep.request and client.reset(task_id=t, protocol="tide-f").privileged is None
            records[ep.record_id] = t
    assert {"tide-a1-C", "tide-a1-D", "tide-a1-J"} <= set(records)
    # A trainer may still name a task by its record id (fixtures do); the episode shows the
    # public id.
    ep = client.reset(task_id="tide-a1-J", protocol="tide-f", privileged=True)
    assert ep.task.task_id == records["tide-a1-J"] and ep.record_id == "tide-a1-J"


@pytest.mark.parametrize("protocol,types,want", [
    ("tide-f", ["drift_only"], {"drift_only"}),
    ("tide-p", [epb.SAMPLE_TYPE_JOINT], {"joint"}),
    ("tide-f", ["chain_only", "joint"], {"chain_only", "joint"}),
])
def test_reset_sample_types_draws(client, protocol, types, want):
    """reset(sample_types=...) draws only samples of those types (the server resolves them), and
    over 40 seeds draws each of them."""
    seen = set()
    for seed in range(40):
        ep = client.reset(seed=seed, protocol=protocol, sample_types=types, privileged=True)
        assert OPAQUE.match(ep.task.task_id), ep.task.task_id
        seen.add(ep.tide.sample_type)
    assert seen == want


def test_reset_sample_types_refusals(client):
    # TIDE_P serves no drift-only sample: nothing to draw.
    with pytest.raises(AvtgymError) as ei:
        client.reset(protocol="tide-p", sample_types=["drift_only"])
    assert (ei.value.code, ei.value.reason) == ("NOT_FOUND", "NO_TASKS")
    with pytest.raises(ValueError):  # refused by the client before the call
        client.reset(protocol="tide-f", sample_types=["chain"])


def test_render_chat_prefilled_and_drift_offline():
    """A pre-filled question is an assistant message with mask False; a drift turn is user text."""
    turns = (Turn("environment", "request", "R"), Turn("prefilled", "question", "L1?"),
             Turn("oracle", "reply", "A1"), Turn("policy", "question", "L2?"), Turn("oracle", "reply", "A2"),
             Turn("policy", "sql", "SELECT 1"), Turn("oracle", "drift", "Sorry, B."),
             Turn("policy", "sql", "SELECT 2"))
    ep = Episode(b"t", "e", 0, 0, None, turns, "done", 18, 1, 17, True, "terminated", None, None,
                 protocol="tide-p", subtask=2, budget=Budget("turns", 20000, 3000, 17000))
    msgs, mask = render_chat(ep, SYSTEM, action_format="json")
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user",
                                         "assistant", "user", "assistant"]
    assert mask == [False, False, False, False, True, False, True, False, True]
    assert msgs[2]["content"] == '{"type": "clarification", "question": "L1?"}'
    assert msgs[7] == {"role": "user", "content": "Sorry, B."}
    # Trainable text is exactly the policy's own.
    assert [m["content"] for m, k in zip(msgs, mask) if k] == [
        '{"type": "clarification", "question": "L2?"}', '{"type": "sql", "sql": "SELECT 1"}',
        '{"type": "sql", "sql": "SELECT 2"}']


def test_parse_action_reads_tide_output_protocol():
    assert parse_action('{"type": "sql", "content": "SELECT 1"}').action == Action.submit_sql("SELECT 1")
    assert parse_action('{"type": "ask", "content": "Which one?"}').action == Action.ask("Which one?")


def test_tide_system_prompt():
    from avtgym.trainers import TIDE_SYSTEM_PROMPT, system_prompt_for

    assert system_prompt_for("tide-f") == system_prompt_for("tide-p") == TIDE_SYSTEM_PROMPT
    # TIDE-Bench's agent prompt (Figure 8), filled in per task by avtgym.chat.prompt_messages.
    assert '{"type": "sql", "content"' in TIDE_SYSTEM_PROMPT and "{schema_ddl}" in TIDE_SYSTEM_PROMPT


# --- TIDE_F ---------------------------------------------------------------------------------------


def test_tide_f_joint_episode(client, tide_tasks):
    """Ask the L1 term, then the L2 term, submit the reference SQL, read the drift turn, submit the
    post-drift reference: reward 1 with every TIDE component."""
    task = tide_tasks["joint"][0]
    ep = client.reset(task_id=task, protocol="tide-f", privileged=True, seed=1)
    assert ep.task.task_id == task and ep.record_id.endswith("-J")
    assert ep.protocol == "tide-f" and ep.phase == "asking" and ep.subtask == 1
    assert ep.budget == Budget("turns", 20000, 0, 20000)
    assert [(t.role, t.kind) for t in ep.turns] == [("environment", "request")]
    tide = ep.tide
    assert isinstance(tide, TideInfo) and tide.sample_type == "joint" and tide.cluster
    assert tide.drift_utterance and tide.post_drift_reference_sql and tide.drift_subtype
    assert set(tide.chain_layers) == {1, 2} and len(tide.chain_layers) == len(ep.privileged["ambiguities"])
    # The drift and its reference are privileged: nothing public holds them.
    assert tide.drift_utterance not in ep.request
    terms = layer_terms(ep)

    r = client.step(ep, ask(terms[1]), privileged=True)
    assert [(t.role, t.kind) for t in r.new_turns] == [("policy", "question"), ("oracle", "reply")]
    assert r.new_turns[1].text == resolution(ep, terms[1])
    assert r.routing == "L1" and r.privileged["routing"] == "L1"
    assert r.privileged["credits"][0]["term"] == terms[1]
    assert r.episode.questions_asked == 1 and r.episode.budget.used == 1

    r = client.step(r.episode, ask(terms[2]), privileged=True)
    assert r.new_turns[1].kind == "reply" and r.new_turns[1].text == resolution(ep, terms[2])
    assert r.routing == "L2"

    r = client.step(r.episode, Action.submit_sql(";\n".join(ep.privileged["reference_sql"])), privileged=True)
    assert not r.done and r.status == "running"
    assert [(t.role, t.kind) for t in r.new_turns] == [("policy", "sql"), ("oracle", "drift")]
    assert r.new_turns[1].text == tide.drift_utterance
    assert r.episode.subtask == 2 and r.reward is None
    assert r.routing == ""  # no question this step
    # No query result or feedback is shown.
    assert not any(t.kind == "feedback" for t in r.new_turns)

    r = client.step(r.episode, Action.submit_sql(";\n".join(tide.post_drift_reference_sql)), privileged=True)
    assert r.done and r.status == "terminated" and r.episode.phase == "done"
    assert [(t.role, t.kind) for t in r.new_turns] == [("policy", "sql")]
    assert r.reward.type == "outcome" and r.reward.value == 1.0
    assert set(r.reward.components) == COMPONENTS
    assert all(v == 1.0 for v in r.reward.components.values()), r.reward.components
    assert [c["term"] for c in r.privileged["episode_credits"]] == [terms[1], terms[2]]

    msgs, mask = render_chat(r.episode, SYSTEM)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user",
                                         "assistant", "user", "assistant"]
    assert mask == [False, False, True, False, True, False, True, False, True]
    assert msgs[7] == {"role": "user", "content": tide.drift_utterance}


def test_tide_f_chain_rule_and_routing(client, tide_tasks):
    """L2 asked before L1 is not credited (the chain rule): it is answered as LOC (TIDE's Appendix
    E), with the one SQL-level detail L2 decides, routed "other", no credit; L1 is "L1";
    the same question without privileged data carries no routing. On tide-a1-C, named by its
    record id (a trainer may): its L2 question does not name its L1 term, which another anchor's
    may (public ids are in no type or anchor order, so [0] is any chain-only sample)."""
    task = "tide-a1-C"
    ep = client.reset(task_id=task, protocol="tide-f", privileged=True)
    terms = layer_terms(ep)
    assert ep.tide.sample_type == "chain_only" and not ep.tide.has_drift
    r = client.step(ep, ask(terms[2]), privileged=True)
    assert r.new_turns[1].kind == "reply" and r.routing == "other" and not r.privileged.get("credits")
    assert r.privileged.get("oracle_action", "").startswith("unlabeled(")
    r = client.step(r.episode, ask(terms[1]), privileged=True)
    assert r.new_turns[1].kind == "reply" and r.routing == "L1"
    r = client.step(r.episode, ask(terms[2]), privileged=True)
    assert r.new_turns[1].kind == "reply" and r.routing == "L2"
    # Without privileged data: no routing.
    plain = client.step(ep, ask(terms[1]))
    assert plain.privileged is None and plain.routing == ""
    # No drift on a chain-only sample: the first SQL ends the episode.
    r = client.step(r.episode, Action.submit_sql(";\n".join(ep.privileged["reference_sql"])))
    assert r.done and r.reward.value == 1.0 and "sql2" not in r.reward.components
    assert r.reward.components["l1_identified"] == r.reward.components["l2_identified"] == 1.0


def test_tide_f_drift_only_no_routing(client, tide_tasks):
    task = tide_tasks["drift_only"][0]
    ep = client.reset(task_id=task, protocol="tide-f", privileged=True)
    assert ep.tide.sample_type == "drift_only" and ep.tide.chain_layers == () and ep.tide.has_drift
    r = client.step(ep, Action.ask("Which products do you mean?"), privileged=True)
    assert r.routing == "" and "routing" not in r.privileged  # a task without a chain
    r = client.step(r.episode, Action.submit_sql("SELECT 1"))
    assert r.new_turns[-1].kind == "drift" and r.new_turns[-1].role == "oracle" and not r.done
    r = client.step(r.episode, Action.submit_sql(";\n".join(ep.tide.post_drift_reference_sql)))
    assert r.done and r.reward.value == 0.0  # the first SQL was wrong
    assert r.reward.components["sql1"] == 0.0 and r.reward.components["sql2"] == 1.0


# --- TIDE_P ---------------------------------------------------------------------------------------


def test_tide_p_prefilled_question_is_never_trainable(client, tide_tasks):
    task = tide_tasks["chain_only"][0]
    ep = client.reset(task_id=task, protocol="tide-p", privileged=True)
    assert ep.protocol == "tide-p"
    assert [(t.role, t.kind) for t in ep.turns] == [("environment", "request"), ("prefilled", "question"),
                                                   ("oracle", "reply")]
    terms = layer_terms(ep)
    prefilled = ep.turns[1].text
    assert prefilled and ep.turns[2].text == resolution(ep, terms[1])
    # Not the policy's: not counted as asked, no turn spent.
    assert ep.questions_asked == 0 and ep.budget.used == 0

    msgs, mask = render_chat(ep, SYSTEM, merge_user=True)
    assert msgs == [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ep.request},
                    {"role": "assistant", "content": prefilled}, {"role": "user", "content": ep.turns[2].text}]
    assert mask == [False, False, False, False]
    msgs, mask = render_chat(ep, None, action_format="json")
    assert msgs[1]["role"] == "assistant" and prefilled in msgs[1]["content"] and mask[1] is False

    # The policy's own later turns are trainable; the pre-filled one stays masked.
    r = client.step(ep, ask(terms[2]), privileged=True)
    assert r.routing == "L2" and r.new_turns[1].kind == "reply"  # L1 counts as resolved
    r = client.step(r.episode, Action.submit_sql(";\n".join(ep.privileged["reference_sql"])))
    assert r.done and r.status == "terminated"
    msgs, mask = render_chat(r.episode, SYSTEM, merge_user=True)
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert mask == [False, False, False, False, True, False, True]
    assert msgs[2]["content"] == prefilled and prefilled not in [m["content"] for m, k in zip(msgs, mask) if k]
    # The pre-filled question identifies nothing: l1_identified 0, l2_identified 1.
    assert r.reward.value == 1.0
    assert r.reward.components["l1_identified"] == 0.0 and r.reward.components["l2_identified"] == 1.0
    assert r.reward.components["asked"] == 1.0


def test_tide_p_joint_drift(client, tide_tasks):
    task = tide_tasks["joint"][0]
    ep = client.reset(task_id=task, protocol="tide-p", privileged=True)
    assert ep.turns[1].role == "prefilled"
    r = client.step(ep, Action.submit_sql(";\n".join(ep.privileged["reference_sql"])))
    assert r.new_turns[-1].kind == "drift" and r.new_turns[-1].text == ep.tide.drift_utterance
    r = client.step(r.episode, Action.submit_sql(";\n".join(ep.tide.post_drift_reference_sql)))
    assert r.done and r.reward.value == 1.0 and r.reward.components["asked"] == 0.0
    _, mask = render_chat(r.episode, None)
    assert mask == [False, False, False, True, False, True]


def test_tide_p_needs_a_chain(client, tide_tasks):
    for task in (tide_tasks["drift_only"][0], "shop-001"):
        with pytest.raises(AvtgymError) as ei:
            client.reset(task_id=task, protocol="tide-p")
        assert (ei.value.code, ei.value.reason) == ("INVALID_ARGUMENT", "INVALID_OPTION"), task
    with pytest.raises(AvtgymError) as ei:  # TIDE's reward is its own
        client.reset(task_id=tide_tasks["joint"][0], protocol="tide-f", reward="question_f1")
    assert ei.value.reason == "INVALID_OPTION"


# --- adapters -------------------------------------------------------------------------------------


def test_openenv_tide_p_reply_and_messages(addr, tide_tasks):
    from avtgym.openenv import AvtgymEnv

    task = tide_tasks["joint"][0]
    with AvtgymEnv(base_url=addr).sync() as env:
        res = env.reset(task_id=task, protocol="tide-p")
        obs = res.observation
        prefilled = obs.turns[1]
        assert prefilled["role"] == "prefilled"
        sys_msg = obs.messages[0]
        assert sys_msg["role"] == "system" and "{schema_ddl}" not in sys_msg["content"]
        assert obs.task["database"]["schema"].strip() in sys_msg["content"]
        assert [m["role"] for m in obs.messages] == ["system", "user", "assistant", "user"]
        assert prefilled["text"] in obs.messages[2]["content"]
        # The pre-filled question is never taken for a reply.
        assert prefilled["text"] not in obs.reply and obs.turns[2]["text"] in obs.reply
        res = env.step('{"type": "sql", "content": "SELECT 1"}')
        assert not res.done and res.observation.turns[-1]["kind"] == "drift"
        assert res.observation.reply == res.observation.turns[-1]["text"]
        assert res.observation.messages[-1] == {"role": "user", "content": res.observation.reply}


def test_trl_tool_env_texts(addr, tide_tasks):
    """The TRL tool environment's texts (no trl import): TIDE_P's pre-filled question is context,
    the turn count is the total only (TIDE's question budget would tell whether a drift comes),
    and a step's tool result never holds an agent turn."""
    from avtgym import Client
    from avtgym.trainers.trl import _env_text, _task_text

    with Client(addr) as c:
        ep = c.reset(task_id=tide_tasks["joint"][0], protocol="tide-p")
    text = _task_text(ep)
    assert text.startswith(ep.request) and f"(You already asked: {ep.turns[1].text})" in text
    assert ep.turns[2].text in text and "20 turn(s)" in text and str(ep.question_budget) not in text
    turns = [Turn("prefilled", "question", "L1?"), Turn("policy", "sql", "SELECT 1"),
             Turn("oracle", "drift", "Sorry, B.")]
    assert _env_text(turns) == "Sorry, B."

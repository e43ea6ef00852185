"""BIRD-Interact's agentic protocol (BIRD_A) from the Python client: the tool actions, the agentic
output grammar of parse_action, tool outputs as environment turns (never trainable), and an
explorer episode over real gRPC on the demo's follow-up tasks reaching reward 1.0 with every coin
charged as priced."""

from __future__ import annotations

import pytest

from avtgym import Action, parse_action, policy_turn_text, render_chat
from avtgym.trainers import BIRD_A_SYSTEM_PROMPT, system_prompt_for
from avtgym.types import ACTION_KINDS, TOOL_KINDS, Turn
from avtgym.v1 import episode_pb2 as epb

DEFAULT_COIN_PATIENCE = 6


def joined(sqls: list[str]) -> str:
    return ";\n".join(sqls)


def counted(priv: dict) -> list[str]:
    return [a["term"] for a in priv.get("ambiguities", []) if a.get("counted")]


@pytest.fixture(scope="module")
def bird_tasks(addr) -> list[str]:
    from avtgym import Client

    with Client(addr) as c:
        tasks = [t.task_id for t in c.list_tasks() if t.subtasks == 2]
    assert tasks
    return tasks


# --- Action constructors and their wire form ------------------------------------------------------


def test_tool_actions_to_proto():
    assert Action.execute("SELECT 1").to_proto() == epb.Action(execute=epb.Action.Execute(sql="SELECT 1"))
    assert Action.get_schema().to_proto() == epb.Action(get_schema=epb.Action.GetSchema())
    assert Action.get_all_column_meanings().to_proto().WhichOneof("kind") == "get_all_column_meanings"
    assert Action.get_column_meaning("t", "c").to_proto() == epb.Action(
        get_column_meaning=epb.Action.GetColumnMeaning(table="t", column="c"))
    assert Action.get_all_external_knowledge_names().to_proto().WhichOneof("kind") == "get_all_external_knowledge_names"
    assert Action.get_knowledge_definition("k").to_proto() == epb.Action(
        get_knowledge_definition=epb.Action.GetKnowledgeDefinition(name="k"))
    assert Action.get_all_knowledge_definitions().to_proto().WhichOneof("kind") == "get_all_knowledge_definitions"
    assert all(Action(k).is_tool for k in TOOL_KINDS) and not Action.ask("q").is_tool
    with pytest.raises(ValueError):
        Action("frobnicate").to_proto()


# --- parse_action: the agentic grammar ------------------------------------------------------------


@pytest.mark.parametrize("text,want", [
    ('<action>ask("What do you mean by poor?")</action>', Action.ask("What do you mean by poor?")),
    ('<thought>schema first</thought>\n<action>get_schema()</action>', Action.get_schema()),
    ('<action>execute("SELECT \\"name\\" FROM t")</action>', Action.execute('SELECT "name" FROM t')),
    ('<action>execute("SELECT a FROM t WHERE b = "x"")</action>', Action.execute('SELECT a FROM t WHERE b = "x"')),
    ("<action>submit('SELECT 1')</action>", Action.submit_sql("SELECT 1")),
    ('<action>submit("""SELECT a\nFROM t""")</action>', Action.submit_sql("SELECT a\nFROM t")),
    ('<action>submit("SELECT \'a\\nb\'")</action>', Action.submit_sql("SELECT 'a\nb'")),
    ('<ACTION>Get_Column_Meaning("reviews", "rating")</ACTION>', Action.get_column_meaning("reviews", "rating")),
    ("<action>get_column_meaning('t','c')</action>", Action.get_column_meaning("t", "c")),
    ('<action>get_knowledge_definition("Senior patient")</action>', Action.get_knowledge_definition("Senior patient")),
    ("<action>get_all_knowledge_definitions()</action>", Action.get_all_knowledge_definitions()),
    ("<action>get_all_external_knowledge_names()</action>", Action.get_all_external_knowledge_names()),
    ("<action>get_all_column_meanings()</action>", Action.get_all_column_meanings()),
    ("<action>stop()</action>", Action.stop()),
    ('<action>ask("a")</action> or rather <action>ask("b")</action>', Action.ask("b")),
    # Without the wrapper: the whole text (or a fence's body) is the call.
    ('execute("SELECT 1")', Action.execute("SELECT 1")),
    ("get_schema()", Action.get_schema()),
    ('```\nsubmit("SELECT 1")\n```', Action.submit_sql("SELECT 1")),
    ("execute(SELECT 1)", Action.execute("SELECT 1")),
    # SQL with braces inside a call is not taken for JSON.
    ("""execute("SELECT '{\\"a\\": 1}'")""", Action.execute("""SELECT '{"a": 1}'""")),
])
def test_parse_agentic(text, want):
    p = parse_action(text)
    assert p.ok and p.action == want and p.text == text, p


@pytest.mark.parametrize("text", [
    "<action>frobnicate()</action>",
    "<action>get_schema(products)</action>",
    '<action>ask("")</action>',
    '<action>get_column_meaning("t")</action>',
    "<action>I'd like to ask about dates</action>",
    "<action></action>",
    "Let me look at the tables first.",
])
def test_parse_agentic_malformed(text):
    p = parse_action(text)
    assert not p.ok and p.action is None and p.error
    assert p.or_unparsed() == Action.unparsed(text)


def test_earlier_rules_kept():
    assert parse_action('{"type": "sql", "sql": "SELECT 1"}').action == Action.submit_sql("SELECT 1")
    assert parse_action("SELECT count(*) FROM t").action == Action.submit_sql("SELECT count(*) FROM t")
    assert parse_action("Which year do you mean?").action == Action.ask("Which year do you mean?")
    assert parse_action("STOP").action == Action.stop()


# --- adapters: tool outputs are environment turns, never trainable --------------------------------


def test_chat_masks_tool_output():
    from avtgym import Episode

    turns = (Turn("environment", "request", "List poorly reviewed products."),
             Turn("policy", "tool_call", 'execute("SELECT 1")'),
             Turn("environment", "tool_result", "1\n(1 rows)"),
             Turn("policy", "question", 'What is "poor"?'),
             Turn("oracle", "reply", "Below 3 stars."),
             Turn("policy", "sql", "SELECT 1"))
    ep = Episode(b"", "e", 0, 0, None, turns, "asking", 0, 0, 0, False, "running", None, None, "bird-a")
    for fmt in ("text", "json", "agentic"):
        messages, mask = render_chat(ep, "sys", action_format=fmt)
        assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
        assert mask == [False, False, True, False, True, False, True]
        assert messages[3]["content"] == "1\n(1 rows)"
        # Every policy turn parses back to its action.
        assert parse_action(messages[2]["content"]).action == Action.execute("SELECT 1")
        assert parse_action(messages[4]["content"]).action == Action.ask('What is "poor"?')
        assert parse_action(messages[6]["content"]).action == Action.submit_sql("SELECT 1")
    assert policy_turn_text(turns[1], "agentic") == '<action>execute("SELECT 1")</action>'
    assert policy_turn_text(Turn("policy", "stop", ""), "agentic") == "<action>stop()</action>"
    assert system_prompt_for("bird-a") == BIRD_A_SYSTEM_PROMPT and "get_column_meaning" in BIRD_A_SYSTEM_PROMPT


def test_openenv_tool_action():
    pytest.importorskip("openenv")
    from avtgym.openenv import AvtgymAction

    a = AvtgymAction(kind="get_column_meaning", table="t", column="c")
    assert a.to_avtgym() == (Action.get_column_meaning("t", "c"), None)
    assert AvtgymAction(message="<action>get_schema()</action>").to_avtgym() == (Action.get_schema(), None)
    assert AvtgymAction.ask("q").model_dump(exclude_none=True) == {"kind": "ask", "text": "q", "metadata": {}}


def test_list_protocols_publishes_the_rules(client):
    """The server publishes each protocol's actions and BIRD_A's prices; the client keeps no copy."""
    infos = {p.protocol: p for p in client.list_protocols()}
    assert list(infos) == ["ambitab", "bird-c", "bird-a", "tide-f", "tide-p"]
    bird_a = infos["bird-a"]
    assert bird_a.actions == ACTION_KINDS and set(bird_a.prices) == set(ACTION_KINDS)
    assert bird_a.prices["stop"] == 0 and all(bird_a.prices[k] > 0 for k in ACTION_KINDS if k != "stop")
    assert (bird_a.base_coins, bird_a.coins_per_ambiguity) == (6, 2)
    for name in ("ambitab", "bird-c", "tide-f", "tide-p"):
        assert infos[name].prices == {} and not set(infos[name].actions) & set(TOOL_KINDS), name
    assert infos["tide-f"].turn_limit == 20


# --- a BIRD_A episode over real gRPC --------------------------------------------------------------


def explore(client, ep, knowledge: str):
    """Call every tool once; return the episode and the coins each call cost."""
    calls = [Action.execute("SELECT 1 AS one"), Action.get_schema(), Action.get_all_column_meanings(),
             Action.get_column_meaning("nosuch", "col"), Action.get_all_external_knowledge_names(),
             Action.get_knowledge_definition(knowledge), Action.get_all_knowledge_definitions()]
    prices = {p.protocol: p.prices for p in client.list_protocols()}["bird-a"]
    outputs = {}
    for a in calls:
        before = ep.budget.used_milli
        res = client.step(ep, a, privileged=True)
        assert not res.done and [(t.role, t.kind) for t in res.new_turns] == [("policy", "tool_call"), ("environment", "tool_result")]
        assert res.tool_result == res.new_turns[-1].text and res.tool_result
        assert res.budget.used_milli - before == round(prices[a.kind] * 1000), a.kind
        outputs[a.kind] = res.tool_result
        ep = res.episode
    assert "one" in outputs["execute"] and "CREATE TABLE" in outputs["get_schema"]
    return ep, outputs


def test_bird_a_explorer_episode(client, bird_tasks):
    """Every tool once, each counted ambiguity asked, the reference SQL, then the follow-up's:
    reward 1.0 (0.7 + 0.3) on every demo follow-up task; coins 5.5 + 2m + 6 of 12 + 2m."""
    for task_id in bird_tasks:
        ep = client.reset(task_id=task_id, protocol="bird-a", privileged=True)
        m = len(counted(ep.privileged))
        total = (6 + 2 * m + DEFAULT_COIN_PATIENCE) * 1000
        assert ep.protocol == "bird-a" and ep.subtask == 1 and not ep.sql_required
        assert ep.budget.unit == "coins" and ep.budget.total_milli == total and ep.budget.used_milli == 0
        knowledge = ep.task.database.knowledge[0].name if ep.task.database.knowledge else "none"
        ep, _ = explore(client, ep, knowledge)
        for term in counted(ep.privileged):
            res = client.step(ep, Action.ask(f"What do you mean by '{term}'?"), privileged=True)
            assert res.tool_result is None and [t.kind for t in res.new_turns] == ["question", "reply"]
            ep = res.episode
        res = client.step(ep, Action.submit_sql(joined(ep.privileged["reference_sql"])), privileged=True)
        assert not res.done and res.released and res.subtask == 2, res.new_turns
        res = client.step(res.episode, Action.submit_sql(joined(res.privileged["follow_up_reference_sql"])))
        assert res.done and res.status == "terminated"
        assert res.reward.type == "bird_interact" and res.reward.value == pytest.approx(1.0)
        assert res.reward.components == {"phase1": pytest.approx(0.7), "phase2": pytest.approx(0.3)}
        assert res.budget.used_milli == 5500 + 2000 * m + 6000 and res.coins_left == (total - res.budget.used_milli) / 1000


def test_bird_a_unparsed_and_free_submit(client, bird_tasks):
    """parse_action's malformed output, reported as unparsed, costs 0.2 coins and a notice; with the
    coins spent the free final submit is scored for its phase and ends the episode."""
    ep = client.reset(task_id=bird_tasks[0], protocol="bird-a", patience=0, privileged=True)
    res = client.step(ep, parse_action("<action>frobnicate()</action>").or_unparsed())
    assert [(t.role, t.kind) for t in res.new_turns] == [("policy", "unparsed"), ("environment", "notice")]
    assert res.budget.used_milli == 200 and not res.done
    ep = res.episode
    while ep.budget.remaining_milli >= 1000:
        ep = client.step(ep, parse_action('<action>execute("SELECT 1")</action>').action).episode
    while ep.budget.remaining_milli >= 500:
        ep = client.step(ep, Action.get_all_external_knowledge_names()).episode
    assert ep.budget.remaining_milli < 3000 and not ep.done
    res = client.step(ep, Action.submit_sql(joined(ep.privileged["reference_sql"])))
    assert res.done and res.reward.components.get("phase1") == pytest.approx(0.7)
    assert "phase2" not in res.reward.components or res.reward.components["phase2"] == 0

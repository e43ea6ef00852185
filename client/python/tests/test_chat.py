"""render_chat: roles and the trainable-token mask."""

from __future__ import annotations

import json

from avtgym import Action, parse_action, render_chat

FULL_Q = "Could you clarify what exactly you mean by top 5 customers?"


def test_mask_marks_policy_turns_only(client):
    ep = client.reset(task_id="shop-001", extra_questions=0)  # budget 1
    ep = client.step(ep, Action.ask(FULL_Q)).episode
    ep = client.step(ep, Action.ask("And anything else?")).episode  # over budget: notice, truncated
    assert ep.done and ep.status == "truncated"
    msgs, mask = render_chat(ep, system_prompt="You ask clarifying questions.")
    assert len(msgs) == len(mask) == 1 + len(ep.turns)
    assert msgs[0] == {"role": "system", "content": "You ask clarifying questions."} and mask[0] is False
    for m, t, trainable in zip(msgs[1:], ep.turns, mask[1:]):
        assert trainable == (t.role == "policy")
        assert m["role"] == ("assistant" if t.role == "policy" else "user")
    oracle = [t.text for t in ep.turns if t.role == "oracle"]
    assert oracle and all(m["content"] not in oracle for m, k in zip(msgs, mask) if k)
    assert msgs[1] == {"role": "user", "content": "List the names of our top 5 customers."}
    assert msgs[2] == {"role": "assistant", "content": FULL_Q} and mask[2]
    assert any(t.role == "environment" and t.kind == "notice" for t in ep.turns) or ep.turns[-1].role == "policy"


def test_stop_and_json_format_round_trip(client):
    ep = client.reset(task_id="shop-001")
    ep = client.step(ep, Action.ask(FULL_Q)).episode
    ep = client.step(ep, Action.stop()).episode
    msgs, mask = render_chat(ep)
    assert mask == [False, True, False, True]
    assert msgs[-1] == {"role": "assistant", "content": "STOP"}
    jmsgs, jmask = render_chat(ep, action_format="json")
    assert jmask == mask
    assert json.loads(jmsgs[1]["content"]) == {"type": "clarification", "question": FULL_Q}
    assert parse_action(jmsgs[1]["content"]).action == Action.ask(FULL_Q)
    assert parse_action(jmsgs[3]["content"]).action == Action.stop()
    assert parse_action(msgs[3]["content"]).action == Action.stop()


def test_merge_user():
    from avtgym import Episode, Turn

    ep = Episode.from_token(b"x")
    from dataclasses import replace

    ep = replace(ep, turns=(Turn("environment", "request", "R"), Turn("policy", "question", "Q?"),
                            Turn("oracle", "reply", "A"), Turn("environment", "notice", "N")))
    msgs, mask = render_chat(ep, merge_user=True)
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"] and mask == [False, True, False]
    assert msgs[2]["content"] == "A\n\nN"

"""Privileged data is opt-in and never leaks into observations."""

from __future__ import annotations

from avtgym import Action

FULL_Q = "Could you clarify what exactly you mean by top 5 customers?"


def observed_text(ep) -> str:
    t = ep.task
    parts = [x.text for x in ep.turns if x.role != "oracle"]
    parts += [t.request, t.evidence, t.database.schema, *t.database.column_meanings.values()]
    parts += [k.definition for k in t.database.knowledge]
    return "\n".join(parts)


def test_absent_unless_asked(client):
    ep = client.reset(task_id="shop-001")
    assert ep.privileged is None
    r = client.step(ep, Action.ask(FULL_Q))
    assert r.privileged is None and r.episode.privileged is None
    r = client.step(r.episode, Action.stop())
    assert r.privileged is None and r.episode.privileged is None


def test_present_when_asked(client):
    ep = client.reset(task_id="shop-001", privileged=True)
    p = ep.privileged
    assert p["avt_id"] == "shop-avt-top-customers"
    amb = p["ambiguities"]
    assert amb and amb[0]["term"] == "top 5 customers" and amb[0]["counted"] is True and amb[0]["resolution"]
    assert p["reference_sql"]
    r = client.step(ep, Action.ask(FULL_Q), privileged=True)
    assert r.privileged["credits"] == [{"term": "top 5 customers", "counted": True}]
    # The episode keeps the reset's fields under the step's.
    assert r.episode.privileged["ambiguities"] == amb and r.episode.privileged["credits"]
    r = client.step(r.episode, Action.stop(), privileged=True)
    assert r.privileged["episode_credits"][0]["term"] == "top 5 customers"


def test_no_resolution_text_in_observations(client):
    for task in [t.task_id for t in client.list_tasks()][:20]:
        secret = client.reset(task_id=task, privileged=True).privileged
        resolutions = [a["resolution"] for a in secret.get("ambiguities", []) if a.get("resolution")]
        refs = secret.get("reference_sql", [])
        ep = client.reset(task_id=task, reward="outcome", solver="lookup")
        r = client.step(ep, Action.ask("Could you clarify what you want?"))
        if not r.done:
            r = client.step(r.episode, Action.stop())
        assert r.done and r.privileged is None
        seen = observed_text(r.episode)
        for text in resolutions + refs:
            assert text not in seen, f"{task}: privileged text leaked: {text!r}"

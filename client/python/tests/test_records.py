"""avtgym.records writes the one episode record (schema/episode.v1.json), with tags and uids."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from avtgym import Action, AvtgymError
from avtgym.records import SCHEMA, episode_record, write_records

REPO = Path(__file__).resolve().parents[3]
FULL_Q = "Could you clarify what exactly you mean by top 5 customers?"


@pytest.fixture(scope="module")
def validator():
    schema = json.loads((REPO / "schema" / "episode.v1.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())


def test_records_match_the_schema(client, validator, tmp_path):
    tags = {"run": "py-1", "trainer/step": "4"}
    ep = client.reset(task_id="shop-001", seed=3, privileged=True, tags=tags)
    assert len(ep.episode_uid) == 32 and ep.tags == tags
    r = client.step(ep, Action.ask(FULL_Q), privileged=True)
    assert r.episode.episode_uid == ep.episode_uid and r.episode.tags == tags
    r = client.step(r.episode, Action.stop(), privileged=True)
    rec = episode_record(r.episode, options={"reward": "question_f1"})
    validator.validate(rec)
    assert rec["schema"] == SCHEMA and rec["writer"] == "python" and rec["status"] == "TERMINATED"
    assert rec["tags"] == tags and rec["episode_uid"] == ep.episode_uid
    assert rec["credited_terms"] == ["top 5 customers"] and rec["counted"] >= 1
    assert rec["f1"] == r.reward.components["question_f1"] and rec["reward"] == r.reward.value
    assert [t["role"] for t in rec["turns"]] == ["environment", "policy", "oracle", "policy"]
    assert rec["privileged"]["reference_sql"]

    # Without the privileged channel the record holds nothing privileged.
    plain = client.reset(task_id="shop-001", seed=3)
    plain = client.step(client.step(plain, Action.ask(FULL_Q)).episode, Action.stop()).episode
    prec = episode_record(plain)
    validator.validate(prec)
    assert "privileged" not in prec and prec["credited_terms"] == [] and prec["counted"] == 0
    assert prec["episode_uid"] != rec["episode_uid"] and prec["episode_id"] == rec["episode_id"]

    # A BIRD_C episode whose SQL fails: the verdict and its feedback are recorded.
    bird = client.reset(task_id="followup-001", protocol="bird-c", privileged=True)
    res = client.step(bird, Action.submit_sql("SELECT 1"), privileged=True)
    while not res.done:
        res = client.step(res.episode, Action.submit_sql("SELECT 1"), privileged=True)
    brec = episode_record(res.episode)
    validator.validate(brec)
    assert brec["protocol"] == "bird-c" and brec["verdicts"][0]["sql"] == "SELECT 1"
    assert brec["verdicts"][0].get("feedback")

    path = tmp_path / "records.jsonl"
    assert write_records(path, [rec, prec, brec]) == 3
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    for line in lines:
        validator.validate(json.loads(line))


def test_tags_are_bounded(client):
    with pytest.raises(AvtgymError) as e:
        client.reset(task_id="shop-001", tags={f"k{i}": "v" for i in range(17)})
    assert e.value.reason == "INVALID_OPTION"
    with pytest.raises(AvtgymError):
        client.reset(task_id="shop-001", tags={"run id": "x"})


def test_a_record_the_schema_refuses(validator):
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({"schema": SCHEMA, "status": "EPISODE_STATUS_TERMINATED"})

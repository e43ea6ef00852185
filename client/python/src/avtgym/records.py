"""Episode records: the one JSON layout every avtgym writer uses (docs/records.md).

`episode_record(ep)` turns a finished Episode (the last StepResult's .episode) into the record
that `avtgym eval`, `avtgym rollout --episodes-out` and `avtgym serve --episode-log` write, with
"writer": "python"; `write_records(path, records)` appends them as JSON Lines. The schema is
`schema/episode.v1.json` in the repository; `SCHEMA` is its name.

What the client knows goes in: the whole dialogue with roles and kinds, the reward and its
components, the episode's id and uid, the tags it was reset with, and the privileged data when the
episode was reset or stepped with privileged=True (an entitled principal only: a policy-facing
process never asks for it, and then the record has none). The episode's options are not in the
Episode, so `options` is left out unless given.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from avtgym.types import Episode

__all__ = ["SCHEMA", "episode_record", "write_records"]

SCHEMA = "avtgym.episode/1"

# Reward components the record also names under the eval report's names.
_NAMED = {"precision": "precision", "recall": "recall", "success": "outcome", "phase1": "phase1",
          "phase2": "phase2", "sql1": "sql1", "sql2": "sql2", "drift_recognized": "drift_recognized",
          "l1_identified": "l1_identified", "l2_identified": "l2_identified", "asked": "asked"}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def episode_record(ep: Episode, *, started_at: str | None = None, finished_at: str | None = None,
                   options: Mapping[str, Any] | None = None, server: Mapping[str, str] | None = None,
                   error: str = "") -> dict[str, Any]:
    """The record of ep (normally finished: ep.done). started_at / finished_at are RFC 3339 times
    (finished_at defaults to now); options: {"reward", "solver", "oracle", "strict_credit"} as the
    reset set them; server: {"version", "corpus_hash"} (Client.list_corpora tells both). An episode
    that is not done is recorded as "RPC_FAILED" with error (or "the episode did not end")."""
    task = ep.task
    priv = ep.privileged or {}
    counted = sum(1 for a in priv.get("ambiguities", ()) if a.get("counted"))
    credited: list[str] = []
    for c in priv.get("episode_credits", ()):
        if c.get("counted") and c.get("term") not in credited:
            credited.append(c["term"])
    turns = [{"role": t.role, "kind": t.kind, "text": t.text} for t in ep.turns]
    for t in turns:
        if not t["kind"]:
            del t["kind"]
    verdicts = []
    for i, t in enumerate(ep.turns):
        if t.role == "policy" and t.kind == "sql":
            fb = []
            for u in ep.turns[i + 1:]:
                if u.role == "policy":
                    break
                if u.kind in ("feedback", "notice"):
                    fb.append(u.text)
            v = {"sql": t.text}
            if fb:
                v["feedback"] = "\n".join(fb)
            verdicts.append(v)
    if verdicts and priv.get("verifier_reason"):
        verdicts[-1]["reason"] = priv["verifier_reason"]
    status = ep.status.upper() if ep.done else "RPC_FAILED"
    rec: dict[str, Any] = {
        "schema": SCHEMA,
        "writer": "python",
        "corpus": task.corpus if task else "",
        "task_id": task.task_id if task else "",
        "avt_id": priv.get("avt_id") or (task.task_id if task else ""),
        "seed": ep.seed,
        "group_index": ep.group_index,
        "status": status,
        "counted": counted,
        "questions": [t.text for t in ep.turns if t.role == "policy" and t.kind == "question"],
        "replies": [t.text for t in ep.turns if t.role == "oracle" and t.kind in ("reply", "refusal")],
        "credited_terms": credited,
        "reward": None, "precision": None, "recall": None, "f1": None, "success": None,
        "turns": turns,
    }
    if task and task.database:
        rec["db"] = task.database.id
    if task and task.split:
        rec["split"] = task.split
    if ep.episode_id:
        rec["episode_id"] = ep.episode_id
    if ep.episode_uid:
        rec["episode_uid"] = ep.episode_uid
    if ep.protocol and ep.protocol != "ambitab":
        rec["protocol"] = ep.protocol
    if ep.tags:
        rec["tags"] = dict(ep.tags)
    if options:
        rec["options"] = {k: v for k, v in options.items() if v not in (None, "", False)}
    if ep.reward is not None and status in ("TERMINATED", "TRUNCATED"):
        comps = dict(ep.reward.components)
        rec["reward"] = ep.reward.value
        if comps:
            rec["components"] = comps
        for name, comp in _NAMED.items():
            if comp in comps:
                rec[name] = comps[comp]
        if counted > 0:
            rec["f1"] = comps.get("question_f1")
        else:
            rec["recall"] = None
    if status == "ERROR":
        rec["error"] = priv.get("verifier_reason", "") or "the environment failed"
    elif status == "RPC_FAILED":
        rec["error"] = error or "the episode did not end"
    if verdicts:
        rec["verdicts"] = verdicts
    if priv:
        rec["privileged"] = priv
    if started_at:
        rec["started_at"] = started_at
    rec["finished_at"] = finished_at or _now()
    if server:
        rec["server"] = {k: v for k, v in server.items() if v}
    return rec


def write_records(path: "str | os.PathLike[str]", records: Iterable[Mapping[str, Any]]) -> int:
    """Append records to path as JSON Lines (one object per line, UTF-8); returns how many."""
    n = 0
    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
            n += 1
    return n

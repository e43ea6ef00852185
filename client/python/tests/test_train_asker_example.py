"""examples/train_asker's measurements, without torch: the echo rule, the zero-signal count, the
task-cluster bootstrap and the episode rows it reports from (checked against a real server)."""

from __future__ import annotations

import importlib.util

from avtgym import Action, Client
from conftest import REPO

spec = importlib.util.spec_from_file_location("train_asker", REPO / "examples" / "train_asker" / "train_asker.py")
ta = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ta)

REQUEST = "Which product category did best in 2024?"


def test_echo_rule():
    assert ta.is_echo(REQUEST, REQUEST)
    assert ta.is_echo("You want to know which product category did best in 2024?", REQUEST)
    assert not ta.is_echo("By best, do you mean revenue or units sold?", REQUEST)
    assert not ta.is_echo("Which category?", REQUEST)  # a fragment is a question of its own
    assert not ta.is_echo("anything", "")


def test_zero_signal_groups():
    # groups of 2: differing, flat, one scored (no baseline), flat with a dropped episode
    rewards = [0.0, 1.0, 0.5, 0.5, 0.3, None, 0.2, 0.2]
    assert ta.zero_signal(rewards, 2) == (3, 4)


def test_mean_ci_resamples_tasks():
    rows = [{"task_id": "a", "scored": True, "recall": 1.0}, {"task_id": "a", "scored": True, "recall": 1.0},
            {"task_id": "b", "scored": True, "recall": 0.0}, {"task_id": "b", "scored": True, "recall": None},
            {"task_id": "c", "scored": False}]
    mean, lo, hi = ta.mean_ci(rows, "recall", resamples=500)
    assert abs(mean - 2 / 3) < 1e-9  # b's undefined recall is left out, c is not scored
    assert lo == 0.0 and hi == 1.0  # resampling whole tasks: all-a and all-b draws occur
    assert ta.mean_ci(rows, "precision") == (None, None, None)


def test_episode_rows_and_summary_under_both_rules(addr):
    # An echoing question: credited under AmbiTab's rule, not under strict credit, and counted
    # as an echo under both.
    rows = {}
    with Client(addr) as c:
        for strict in (False, True):
            ep = c.reset(task_id="shop-004", seed=0, reward="question_f1", solver="lookup", strict_credit=strict)
            ep = c.step(ep, Action.ask(ep.request)).episode
            ep = c.step(ep, Action.stop()).episode
            rows[strict] = ta.episode_row(ep)
    for r in rows.values():
        assert r["scored"] and r["questions"] == [REQUEST] and r["echoes"] == 1 and r["sr"] is not None
    assert rows[False]["recall"] > rows[True]["recall"] == 0.0
    s = ta.summarize([rows[True], {"task_id": "x", "scored": False}])
    assert s["episodes"] == 2 and s["scored"] == 1 and s["echo_rate"] == 1.0 and s["asked_nothing"] == 0

"""examples/grpo_bandit.py learns: its mean reward rises with a fixed seed. Without the
strict_credit option it learns to echo the request (one question that names every ambiguity
earns question-F1 1.0 under AmbiTab's matcher); with it, echoing earns nothing and it learns to
ask about terms instead."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO

# Observed (defaults: 40 iterations, lr 0.2), first -> last quarter mean reward, last-quarter
# echo rate:
#   seed 0: 0.58 -> 0.99, echo 0.75    strict: 0.56 -> 0.85, echo 0.00
#   seeds 1-3: echo 0.68-0.82, gains 0.40-0.43;  strict: echo 0.00, gains 0.23-0.41
# The margins leave room for numerical noise.
MARGIN = 0.2


def run_bandit(addr: str, *flags: str) -> dict:
    out = subprocess.run([sys.executable, str(REPO / "examples" / "grpo_bandit.py"), "--server", addr,
                          "--seed", "0", "--json", *flags], capture_output=True, text=True, timeout=120,
                         check=True)
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("iter   0  mean_reward ")
    summary = json.loads(lines[-1])
    means = summary["mean_reward"]
    assert len(means) == 40 and len(summary["differing_groups"]) == 40 and len(summary["echoed"]) == 40
    assert all(0.0 <= f <= 1.0 for f in summary["differing_groups"] + summary["echoed"])
    q = len(means) // 4
    summary["first"], summary["last"] = sum(means[:q]) / q, sum(means[-q:]) / q
    summary["stdout"] = out.stdout
    return summary


def test_grpo_bandit_learns_to_echo(addr):
    s = run_bandit(addr)
    assert s["last"] > s["first"] + MARGIN, s["stdout"]
    assert s["echoed_last_quarter"] > 0.5, s["stdout"]
    assert s["strict_credit"] is False


def test_grpo_bandit_strict_credit_asks_terms(addr):
    s = run_bandit(addr, "--strict-credit")
    assert s["last"] > s["first"] + MARGIN, s["stdout"]
    assert s["echoed_last_quarter"] < 0.05, s["stdout"]
    assert s["strict_credit"] is True

#!/usr/bin/env python3
"""A pure-Python (numpy) GRPO loop for an asking policy against `avtgym serve`.

The policy is a log-linear softmax over candidate questions built from the n-grams (n = 1..3)
of the public request -- "What exactly do you mean by "<n-gram>"?" -- plus an "echo the
request" question -- "What do you mean by: <the whole request>?" -- plus STOP. Its features
are hashed: the n-gram itself, its words and its length (the echo: a bias and the request's
words);
STOP has a bias and the number of questions asked so far. Nothing privileged is read: the
policy sees the request only, and the learning signal is the server's question-F1 reward.

The echo games AmbiTab's matcher, which credits every ambiguity a question names: one echo
names them all and earns question-F1 1.0, and the bandit learns to echo. With --strict-credit
(the episode option strict_credit) a question that reproduces the request credits nothing and
any other question at most one ambiguity, and the bandit learns to ask about terms instead.
The last line of --json gives the fraction of trajectories that echoed, per iteration.

Each iteration samples 8 requests x 16 trajectories (one reset_group(16) per request: the 16
share the task and its interpretation), steps all 128 trajectories together with step_batch,
computes group-relative advantages (r - mean) / std within each group, drops the groups whose
rewards are all equal (PROTOCOL.md section 10) and takes one policy-gradient step (Adam).

    python examples/grpo_bandit.py --spawn            # builds nothing: runs bin/avtgym
    python examples/grpo_bandit.py --server 127.0.0.1:50051 [--strict-credit]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np

from avtgym import Action, Client

DIM = 1 << 14
STOP_FEATS = 8  # bias + one-hot of questions asked (0..6+)
MAX_N = 3


def words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower())


def candidates(request: str) -> list[str]:
    w = words(request)
    out: list[str] = []
    for n in range(1, MAX_N + 1):
        for i in range(len(w) - n + 1):
            g = " ".join(w[i:i + n])
            if g not in out:
                out.append(g)
    return out


def h(s: str) -> int:
    return zlib.crc32(s.encode()) % DIM


def features(gram: str) -> list[int]:
    ws = gram.split()
    return [h("g:" + gram), h(f"n:{len(ws)}")] + [h("w:" + x) for x in ws]


def question(gram: str) -> str:
    return f'What exactly do you mean by "{gram}"?'


ECHO = "\x00echo"  # the echo candidate's key among the n-grams (no n-gram contains NUL)


def echo_question(request: str) -> str:
    return f"What do you mean by: {request}?"


def echo_features(request: str) -> list[int]:
    # A bias, and the request's words as seen by the echo: as the n-gram candidates can learn
    # which words are worth asking about, the echo can learn which requests are worth echoing
    # (on a request without counted ambiguities any question scores 0).
    return [h("echo")] + [h("echo-w:" + x) for x in set(words(request))]


class Policy:
    def __init__(self, rng: np.random.Generator, lr: float = 0.1):
        self.w = np.zeros(DIM)
        self.ws = np.zeros(STOP_FEATS)
        self.rng = rng
        self.lr = lr
        self.m = [np.zeros(DIM), np.zeros(STOP_FEATS)]
        self.v = [np.zeros(DIM), np.zeros(STOP_FEATS)]
        self.t = 0

    def logits(self, feats: list[list[int]], asked: int) -> np.ndarray:
        q = np.array([self.w[f].sum() for f in feats])
        s = self.ws[0] + self.ws[1 + min(asked, STOP_FEATS - 2)]
        return np.append(q, s)

    def sample(self, feats: list[list[int]], asked: int) -> tuple[int, np.ndarray]:
        z = self.logits(feats, asked)
        p = np.exp(z - z.max())
        p /= p.sum()
        return int(self.rng.choice(len(p), p=p)), p

    def grad(self, feats, asked, choice, p, adv, gw, gs):
        """Accumulate adv * grad log pi(choice) into (gw, gs)."""
        k = len(feats)
        coef = -p.copy()
        coef[choice] += 1.0
        for j in range(k):
            np.add.at(gw, feats[j], adv * coef[j])
        gs[0] += adv * coef[k]
        gs[1 + min(asked, STOP_FEATS - 2)] += adv * coef[k]

    def update(self, gw, gs):
        # Adam ascent on the policy-gradient estimate.
        self.t += 1
        for i, (param, g) in enumerate(((self.w, gw), (self.ws, gs))):
            self.m[i] = 0.9 * self.m[i] + 0.1 * g
            self.v[i] = 0.999 * self.v[i] + 0.001 * g * g
            mh = self.m[i] / (1 - 0.9 ** self.t)
            vh = self.v[i] / (1 - 0.999 ** self.t)
            param += self.lr * mh / (np.sqrt(vh) + 1e-8)


def run_iteration(client: Client, policy: Policy, rng: np.random.Generator, requests: int,
                  group: int, split: str | None, corpus: str | None, strict_credit: bool = False):
    # Reset: one GRPO group per request.
    trajs = []  # per trajectory: dict(ep, grams, feats, asked set, decisions)
    for g in range(requests):
        seed = int(rng.integers(0, 2**31)) * 1024
        for ep in client.reset_group(group, seed=seed, split=split, corpus=corpus, reward="question_f1",
                                     strict_credit=strict_credit):
            grams = candidates(ep.request) + [ECHO]
            feats = [features(x) for x in grams[:-1]] + [echo_features(ep.request)]
            trajs.append({"ep": ep, "group": g, "grams": grams, "feats": feats,
                          "left": list(range(len(grams))), "decisions": [], "echoed": False})
    # Step every running trajectory together until all are done.
    while True:
        live = [t for t in trajs if not t["ep"].done]
        if not live:
            break
        batch = []
        for t in live:
            ep = t["ep"]
            if ep.questions_remaining <= 0 or not t["left"]:
                batch.append((ep, Action.stop()))  # forced: not a decision of the policy
                continue
            feats = [t["feats"][j] for j in t["left"]]
            c, p = policy.sample(feats, ep.questions_asked)
            t["decisions"].append((feats, ep.questions_asked, c, p))
            if c == len(feats):
                batch.append((ep, Action.stop()))
            else:
                gram = t["grams"][t["left"].pop(c)]
                if gram == ECHO:
                    t["echoed"] = True
                    batch.append((ep, Action.ask(echo_question(ep.request))))
                else:
                    batch.append((ep, Action.ask(question(gram))))
        for t, res in zip(live, client.step_batch(batch)):
            if isinstance(res, Exception):
                raise res
            t["ep"] = res.episode
    rewards = np.array([t["ep"].reward.value if t["ep"].reward else 0.0 for t in trajs])
    r = rewards.reshape(requests, group)
    differing = r.max(axis=1) > r.min(axis=1)
    # Group-relative advantages; zero-advantage groups carry no signal and are dropped.
    gw, gs = np.zeros(DIM), np.zeros(STOP_FEATS)
    kept = 0
    for gi in range(requests):
        if not differing[gi]:
            continue
        adv = (r[gi] - r[gi].mean()) / (r[gi].std() + 1e-6)
        for j in range(group):
            t = trajs[gi * group + j]
            for feats, asked, c, p in t["decisions"]:
                policy.grad(feats, asked, c, p, adv[j], gw, gs)
                kept += 1
    if kept:
        policy.update(gw / kept, gs / kept)
    echoed = float(np.mean([t["echoed"] for t in trajs]))
    return float(rewards.mean()), float(differing.mean()), echoed


def spawn(binary: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    for line in proc.stderr:
        m = re.search(r'serving\s+(\{.*\})', line)
        if m and "addr" in m.group(1):
            addr = json.loads(m.group(1))["addr"]
            # Keep draining stderr so the server never blocks on a full pipe.
            import threading
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, addr
        if time.time() > deadline:
            break
    proc.kill()
    raise SystemExit(f"{binary} did not start serving")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="127.0.0.1:50051", help="address of a running avtgym serve")
    ap.add_argument("--spawn", action="store_true", help="start `avtgym serve` on a free port instead")
    ap.add_argument("--binary", default=str(Path(__file__).resolve().parent.parent / "bin" / "avtgym"),
                    help="the avtgym binary for --spawn (default: bin/avtgym of this checkout)")
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--group", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", default=None)
    ap.add_argument("--corpus", default=None)
    ap.add_argument("--strict-credit", action="store_true",
                    help="play with the strict_credit episode option: echoing the request earns nothing")
    ap.add_argument("--json", action="store_true", help="print a JSON summary line at the end")
    args = ap.parse_args(argv)

    proc = None
    addr = args.server
    if args.spawn:
        proc, addr = spawn(args.binary)
    try:
        rng = np.random.default_rng(args.seed)
        policy = Policy(rng, lr=args.lr)
        means, fracs, echoes = [], [], []
        t0 = time.time()
        with Client(addr, timeout=60) as client:
            for it in range(args.iterations):
                mean, frac, echo = run_iteration(client, policy, rng, args.requests, args.group, args.split,
                                                 args.corpus, args.strict_credit)
                means.append(mean)
                fracs.append(frac)
                echoes.append(echo)
                print(f"iter {it:3d}  mean_reward {mean:.3f}  differing_groups {frac:.2f}  echoed {echo:.2f}",
                      flush=True)
        q = max(1, len(means) // 4)
        first, last = float(np.mean(means[:q])), float(np.mean(means[-q:]))
        echo_last = float(np.mean(echoes[-q:]))
        print(f"first-quarter mean {first:.3f}  last-quarter mean {last:.3f}  "
              f"last-quarter echoed {echo_last:.2f}  ({time.time() - t0:.1f}s)")
        if args.json:
            print(json.dumps({"mean_reward": means, "differing_groups": fracs, "echoed": echoes,
                              "first_quarter": first, "last_quarter": last, "echoed_last_quarter": echo_last,
                              "strict_credit": args.strict_credit}))
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())

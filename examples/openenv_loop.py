#!/usr/bin/env python3
"""An OpenEnv-style loop, unchanged, against `avtgym serve`.

`avtgym.openenv.AvtgymEnv` is an OpenEnv environment client (a subclass of openenv-core's
`EnvClient`): `reset()` / `step(action)` / `state()`, `StepResult(observation, reward, done)`,
`async with` or `.sync()`. The `run_episodes` function below is the generic loop an OpenEnv user
writes for any environment -- reset, ask the policy for an action from the observation, step until
done, read the reward -- and nothing in it is avtgym-specific except the action class.

The policy is a stand-in for a chat model: it reads `observation.messages` (system prompt, the
request, the dialogue so far) and answers with the text a model would write, an AmbiTab JSON
action: one clarifying question about a random phrase of the request, then `{"type": "done"}`.
`AvtgymAction(message=text)` hands the raw text to the environment, which parses it with
`avtgym.parse_action` (malformed output becomes STOP, reported in `metadata["malformed"]`).

    pip install -e 'client/python[openenv]'
    python examples/openenv_loop.py --spawn                 # runs bin/avtgym (make build)
    python examples/openenv_loop.py --server 127.0.0.1:50051 --episodes 8

An episode that ends in ERROR (the environment failed) is done with reward None and
`metadata["dropped"]`: it is counted as dropped, not averaged in as 0.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from avtgym.openenv import AvtgymAction, AvtgymEnv


def policy(observation, rng: random.Random) -> AvtgymAction:
    """A stand-in for `model.generate(observation.messages)`: the text a chat model would answer."""
    asked = observation.questions_asked
    if asked >= 1 or observation.questions_remaining == 0:
        text = '{"type": "done"}'
    else:
        words = re.findall(r"[a-z0-9]+", observation.request.lower())
        n = rng.randint(1, min(3, len(words)))
        i = rng.randrange(len(words) - n + 1)
        phrase = " ".join(words[i:i + n])
        text = json.dumps({"type": "clarification", "question": f'What exactly do you mean by "{phrase}"?'})
    return AvtgymAction(message=text)


def run_episodes(env, resets: list[dict], rng: random.Random) -> list[float | None]:
    """The OpenEnv loop: reset, act until done, collect the reward (None: dropped)."""
    rewards: list[float | None] = []
    for kwargs in resets:
        result = env.reset(**kwargs)
        while not result.done:
            result = env.step(policy(result.observation, rng))
        state = env.state()
        dropped = result.observation.metadata.get("dropped", False)
        print(f"{state.episode_id:32s} steps {state.step_count}  reward {result.reward}"
              f"{'  (dropped: ' + state.status + ')' if dropped else ''}")
        rewards.append(None if dropped else result.reward)
    return rewards


def spawn(binary: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([binary, "serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    for line in proc.stderr:
        m = re.search(r'serving\s+(\{.*\})', line)
        if m and "addr" in m.group(1):
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, json.loads(m.group(1))["addr"]
        if time.time() > deadline:
            break
    proc.kill()
    raise SystemExit(f"{binary} did not start serving")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default="127.0.0.1:50051", help="address of a running avtgym serve")
    ap.add_argument("--spawn", action="store_true", help="start `avtgym serve` on a free port instead")
    ap.add_argument("--binary", default=str(Path(__file__).resolve().parent.parent / "bin" / "avtgym"))
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--split", default="train")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    proc = None
    addr = args.server
    if args.spawn:
        proc, addr = spawn(args.binary)
    try:
        rng = random.Random(args.seed)
        resets = [{"split": args.split, "seed": args.seed + i} for i in range(args.episodes)]
        with AvtgymEnv(base_url=addr).sync() as env:  # OpenEnv's synchronous wrapper
            rewards = run_episodes(env, resets, rng)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    kept = [r for r in rewards if r is not None]
    summary = {"episodes": len(rewards), "dropped": len(rewards) - len(kept),
               "mean_reward": sum(kept) / len(kept) if kept else None}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""avtgym vs its OpenEnv peer (bench/openenv_peer), both driven from Python (issue 20).

    python3 bench/peer_compare.py [--binary bin/avtgym] [--rounds 3] [--steps 1500] [--json]

Starts `avtgym serve` and the peer's OpenEnv server (uvicorn), then, in alternated rounds, runs the
same work on each: the full-policy question on demo task shop-001, answered by the deterministic
oracle, step after step. avtgym steps the reset token again and again (a fork: constant work);
the peer steps its WebSocket session, reset with a budget no run exhausts. At concurrency 1 with
the sync clients (avtgym.Client; the peer's EnvClient.sync()), at concurrency 16 with asyncio
(avtgym.AsyncClient, one shared channel, unary Steps, and again with coalesce=True: the steps
waiting together sent as one StepBatch; 16 peer EnvClient sessions). Reported per phase: steps/s,
p50/p99 latency, the client's CPU per step (this process, every thread) and the server's (its
/proc/PID/stat), and each server's RSS at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyclient  # noqa: E402  (puts the client on sys.path)
from avtgym import Action, AsyncClient, Client  # noqa: E402
from bench.openenv_peer.env import AskAction, AskEnv  # noqa: E402

TASK = "shop-001"
QUESTION = "Could you clarify what exactly you mean by top 5 customers?"
PEER_BUDGET = 10**9


class Peer:
    def __init__(self) -> None:
        self.port = pyclient.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.openenv_peer", "--port", str(self.port)],
                                     cwd=pyclient.REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while True:
            try:
                env = AskEnv(base_url=self.url).sync()
                env.connect()
                env.close()
                return
            except Exception:
                if time.time() > deadline or self.proc.poll() is not None:
                    self.close()
                    raise RuntimeError("the OpenEnv peer did not start")
                time.sleep(0.2)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] if xs else 0.0


def measure(pid: int, fn, n: int) -> dict:
    s0, c0, w0 = pyclient.proc_cpu(pid), time.process_time(), time.perf_counter()
    lat = fn()
    s1, c1, w1 = pyclient.proc_cpu(pid), time.process_time(), time.perf_counter()
    return {"steps_per_s": n / (w1 - w0), "p50_us": pct(lat, 0.5) * 1e6, "p99_us": pct(lat, 0.99) * 1e6,
            "client_us": (c1 - c0) / n * 1e6, "server_us": (s1 - s0) / n * 1e6}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(pyclient.REPO / "bin" / "avtgym"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=1500, help="steps per phase and round")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n, conc = args.steps, args.concurrency

    avt = pyclient.Serve(args.binary, [])
    peer = Peer()
    try:
        c = Client(avt.addr, tls=False, token="")
        ep = c.reset(task_id=TASK)
        act = Action.ask(QUESTION)
        assert c.step(ep, act).new_turns[-1].kind == "reply"
        penv = AskEnv(base_url=peer.url).sync()
        penv.connect()
        penv.reset(task_id=TASK, budget=PEER_BUDGET)
        assert not penv.step(AskAction(question=QUESTION)).observation.refused

        def avt1():
            lat = []
            for _ in range(n):
                t = time.perf_counter()
                c.step(ep, act)
                lat.append(time.perf_counter() - t)
            return lat

        def peer1():
            lat = []
            a = AskAction(question=QUESTION)
            for _ in range(n):
                t = time.perf_counter()
                penv.step(a)
                lat.append(time.perf_counter() - t)
            return lat

        loop = asyncio.new_event_loop()
        ac = AsyncClient(avt.addr, tls=False, token="")
        acc = AsyncClient(avt.addr, tls=False, token="", coalesce=True)
        peers = [AskEnv(base_url=peer.url) for _ in range(conc)]

        async def setup():
            for p in peers:
                await p.connect()
                await p.reset(task_id=TASK, budget=PEER_BUDGET)
            await ac.step(ep, act)
            await acc.step(ep, act)

        loop.run_until_complete(setup())

        async def workers(step):
            lat: list[float] = []
            per = n // conc

            async def w(i):
                for _ in range(per):
                    t = time.perf_counter()
                    await step(i)
                    lat.append(time.perf_counter() - t)
            await asyncio.gather(*(w(i) for i in range(conc)))
            return lat

        a = AskAction(question=QUESTION)
        phases = {
            "avtgym c=1": (avt.proc.pid, avt1),
            "peer c=1": (peer.proc.pid, peer1),
            f"avtgym c={conc}": (avt.proc.pid, lambda: loop.run_until_complete(workers(lambda i: ac.step(ep, act)))),
            f"peer c={conc}": (peer.proc.pid, lambda: loop.run_until_complete(workers(lambda i: peers[i].step(a)))),
            f"avtgym c={conc} coalesce": (avt.proc.pid, lambda: loop.run_until_complete(workers(lambda i: acc.step(ep, act)))),
        }
        got: dict[str, list[dict]] = {k: [] for k in phases}
        for _ in range(args.rounds):
            for k, (pid, fn) in phases.items():
                got[k].append(measure(pid, fn, n - n % conc if "c=1" not in k else n))
        med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in got.items()}
        rss = {"avtgym_mib": pyclient.proc_rss(avt.proc.pid) / 2**20, "peer_mib": pyclient.proc_rss(peer.proc.pid) / 2**20}

        async def teardown():
            for p in peers:
                await p.close()
            await ac.close()
            await acc.close()
        loop.run_until_complete(teardown())
        penv.close()
        c.close()
    finally:
        avt.close()
        peer.close()
    ratios = {}
    for cc, av in (("1", "avtgym c=1"), (str(conc), f"avtgym c={conc}"), (str(conc), f"avtgym c={conc} coalesce")):
        A, P = med[av], med[f"peer c={cc}"]
        ratios[av] = {"throughput": A["steps_per_s"] / P["steps_per_s"], "p50": P["p50_us"] / A["p50_us"],
                             "p99": P["p99_us"] / A["p99_us"], "client_cpu": P["client_us"] / A["client_us"],
                             "server_cpu": P["server_us"] / A["server_us"]}
    out = {"rounds": got, "median": med, "rss": rss, "ratios_peer_over_avtgym": ratios}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'phase':<22} {'steps/s':>9} {'p50 µs':>8} {'p99 µs':>8} {'client µs':>10} {'server µs':>10}")
    for k, m in med.items():
        print(f"{k:<22} {m['steps_per_s']:>9.0f} {m['p50_us']:>8.0f} {m['p99_us']:>8.0f} {m['client_us']:>10.1f} {m['server_us']:>10.1f}")
    print("RSS MiB:", {k: round(v) for k, v in rss.items()})
    for k, r in ratios.items():
        print(k, "avtgym's advantage (throughput: avtgym/peer; the rest: peer/avtgym):", {f: round(v, 2) for f, v in r.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CPU per call of avtgym's Python client against a running `avtgym serve` (issue 20).

    python3 bench/pyclient.py [--binary bin/avtgym] [--rounds 4] [--calls 3000] [--json]

Starts `avtgym serve` on a free loopback port (demo corpus, access log off), then measures, at
concurrency 1, in alternating rounds (A, B, C, ... A, B, C, ...) so that a busy machine slows
every phase alike:

  health      the floor: an empty grpc.health.v1.Health/Check through grpcio, bytes in and out
  raw_step    Step through the generated stub with one pre-built request (grpcio + protobuf only)
  step        Client.step(episode, Action.ask(q)): what a user pays per unary step
  raw_batch   StepBatch of --batch pre-built items through the stub (per episode)
  batch       Client.step_batch of --batch (episode, action) pairs (per episode)

For each: the client's CPU (time.process_time: every thread of this process, grpcio's included)
and the server's CPU (utime+stime of its /proc/PID/stat) per step or episode, and the wall time.
The step is the one `avtgym bench` measures: a full-policy question on the reset token of the
first demo task with a counted ambiguity, stepped again and again (a fork: constant work).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# AVTGYM_PYCLIENT_SRC: another checkout's client/python/src, to compare two versions of the client.
sys.path.insert(0, os.environ.get("AVTGYM_PYCLIENT_SRC") or str(REPO / "client" / "python" / "src"))

import grpc  # noqa: E402

from avtgym import Action, Client  # noqa: E402
from avtgym.v1 import env_service_pb2 as pb  # noqa: E402
from avtgym.v1 import env_service_pb2_grpc as pb_grpc  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Serve:
    def __init__(self, binary: str, extra: list[str]):
        self.addr = f"127.0.0.1:{free_port()}"
        self.tmp = tempfile.TemporaryDirectory()
        key = Path(self.tmp.name) / "key"
        subprocess.run([binary, "keygen", str(key)], check=True, capture_output=True)
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", self.addr, "--metrics-listen", "", "--token-key-file", str(key),
             "--access-log-sample", "0", *extra],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ready = threading.Event()
        self.log: list[str] = []

        def drain() -> None:
            for line in self.proc.stderr:  # type: ignore[union-attr]
                self.log.append(line)
                if re.search(r'\bserving\s+\{.*"addr"', line):
                    ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(30):
            self.close()
            raise RuntimeError("avtgym serve did not start:\n" + "".join(self.log))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.tmp.cleanup()


def ask_episode(c: Client):
    """The first demo task with a counted ambiguity, and its full-policy question."""
    for t in c.list_tasks():
        ep = c.reset(task_id=t.task_id, corpus=t.corpus, privileged=True)
        amb = (ep.privileged or {}).get("ambiguities") or []
        if amb:
            term = amb[0].get("term") or amb[0].get("terms", [""])[0]
            return ep, f"Could you clarify what exactly you mean by {term}?"
    raise RuntimeError("no task with an ambiguity")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(REPO / "bin" / "avtgym"))
    ap.add_argument("--server", default="", help="measure a running server (its PID for CPU: --server-pid)")
    ap.add_argument("--server-pid", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--calls", type=int, default=3000, help="unary calls per phase and round")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=40, help="batches per phase and round")
    ap.add_argument("--phases", default="health,raw_step,step,raw_batch,batch")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    srv = None
    if args.server:
        addr, pid = args.server, args.server_pid
    else:
        srv = Serve(args.binary, [])
        addr, pid = srv.addr, srv.proc.pid
    try:
        return run(args, addr, pid)
    finally:
        if srv is not None:
            srv.close()


def run(args, addr: str, pid: int) -> int:
    c = Client(addr, tls=False, token="")
    ep, q = ask_episode(c)
    action = Action.ask(q)
    chan = grpc.insecure_channel(addr)
    stub = pb_grpc.EnvServiceStub(chan)
    health = chan.unary_unary("/grpc.health.v1.Health/Check", request_serializer=None,
                              response_deserializer=None)
    step_req = pb.StepRequest(token=ep.token, action=action.to_proto())
    batch_req = pb.StepBatchRequest(steps=[step_req] * args.batch)
    items = [(ep, action)] * args.batch
    # One warm call each, and a check that the step does what is measured.
    health(b"", timeout=10)
    res = c.step(ep, action)
    assert res.new_turns and res.new_turns[-1].kind == "reply", res.new_turns
    assert all(not isinstance(r, Exception) for r in c.step_batch(items))

    def unary(fn):
        def go():
            for _ in range(args.calls):
                fn()
            return args.calls
        return go

    def batched(fn):
        def go():
            for _ in range(args.batches):
                fn()
            return args.batches * args.batch
        return go

    phases = {
        "health": unary(lambda: health(b"", timeout=10)),
        "raw_step": unary(lambda: stub.Step(step_req, timeout=10)),
        "step": unary(lambda: c.step(ep, action)),
        "raw_batch": batched(lambda: stub.StepBatch(batch_req, timeout=30)),
        "batch": batched(lambda: c.step_batch(items)),
    }
    names = [p for p in args.phases.split(",") if p]
    got: dict[str, list[dict]] = {n: [] for n in names}
    for _ in range(args.rounds):
        for n in names:
            s0, c0, w0 = (proc_cpu(pid) if pid else 0.0), time.process_time(), time.perf_counter()
            k = phases[n]()
            s1, c1, w1 = (proc_cpu(pid) if pid else 0.0), time.process_time(), time.perf_counter()
            got[n].append({"n": k, "client_us": (c1 - c0) / k * 1e6, "server_us": (s1 - s0) / k * 1e6,
                           "wall_us": (w1 - w0) / k * 1e6})
    c.close()
    chan.close()
    med = {n: {f: statistics.median(r[f] for r in rs) for f in ("client_us", "server_us", "wall_us")}
           for n, rs in got.items()}
    out = {"addr": addr, "question": q, "rounds": got, "median": med,
           "server_rss_bytes": proc_rss(pid) if pid else 0}
    if "health" in med:
        floor = med["health"]["client_us"]
        out["client_ratio_to_health"] = {n: m["client_us"] / floor for n, m in med.items()}
    if "step" in med and "batch" in med and med["batch"]["server_us"] > 0:
        out["server_step_over_batch_episode"] = med["step"]["server_us"] / med["batch"]["server_us"]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'phase':<10} {'client µs':>10} {'server µs':>10} {'wall µs':>10}   per call (unary) or per episode (batch); "
          f"median of {args.rounds} alternated rounds")
    for n, m in med.items():
        print(f"{n:<10} {m['client_us']:>10.1f} {m['server_us']:>10.1f} {m['wall_us']:>10.1f}   "
              + " ".join(f"{r['client_us']:.1f}" for r in got[n]))
    for k in ("client_ratio_to_health",):
        if k in out:
            print(k, {n: round(v, 2) for n, v in out[k].items()})
    if "server_step_over_batch_episode" in out:
        print("server CPU: unary step / batched episode =", round(out["server_step_over_batch_episode"], 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

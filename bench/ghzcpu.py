"""Server CPU per step: unary Step vs StepBatch, driven by ghz against `avtgym serve` (issue 20).

    python3 bench/ghzcpu.py [--binary bin/avtgym] [--ghz bin/ghz] [--rounds 4] [--json]

Starts `avtgym serve` (demo corpus, access log off), prepares the measured step (the one `avtgym
bench` and bench/pyclient.py measure), writes it as a binary StepRequest and a StepBatchRequest of
--batch copies, and runs ghz in alternating rounds: health (the floor), Step at --concurrency
calls in flight, StepBatch at --batch-concurrency batches in flight. Each phase reads the server's
CPU time (utime+stime of /proc/PID/stat) before and after, so the figures are the server's own
CPU per call or per batched episode, whatever the load generator costs. ghz:
GOBIN=$PWD/bin go install github.com/bojand/ghz/cmd/ghz@latest (the module proxy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyclient  # noqa: E402  (puts the client on sys.path)
from avtgym import Action, Client  # noqa: E402
from avtgym.v1 import env_service_pb2 as pb  # noqa: E402


def delimited(msg: bytes) -> bytes:
    """msg prefixed by its varint length: ghz reads a binary file as count-delimited messages first
    (a bare message whose bytes happen to parse that way would be sent as something else)."""
    n, head = len(msg), bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        head.append(b | (0x80 if n else 0))
        if not n:
            return bytes(head) + msg


def ghz(ghz_bin: str, addr: str, method: str, data: Path | None, n: int, c: int) -> dict:
    args = [ghz_bin, "--insecure", "--call", method, "-n", str(n), "-c", str(c), "--connections", "1",
            "--format", "json"]
    if data is not None:
        args += ["-B", str(data)]
    else:
        args += ["-d", "{}"]
    out = subprocess.run(args + [addr], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(pyclient.REPO / "bin" / "avtgym"))
    ap.add_argument("--ghz", default=str(pyclient.REPO / "bin" / "ghz"))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--calls", type=int, default=20000, help="unary calls per phase and round")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch-concurrency", type=int, default=2)
    ap.add_argument("--serve-arg", action="append", default=[], help="extra `avtgym serve` flag (repeatable)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    srv = pyclient.Serve(args.binary, args.serve_arg)
    tmp = tempfile.TemporaryDirectory()
    try:
        c = Client(srv.addr, tls=False, token="")
        ep, q = pyclient.ask_episode(c)
        c.close()
        step = pb.StepRequest(token=ep.token, action=Action.ask(q).to_proto())
        step_bin = Path(tmp.name) / "step.bin"
        step_bin.write_bytes(delimited(step.SerializeToString()))
        batch_bin = Path(tmp.name) / "batch.bin"
        batch_bin.write_bytes(delimited(pb.StepBatchRequest(steps=[step] * args.batch).SerializeToString()))
        phases = {
            "health": ("grpc.health.v1.Health.Check", None, args.calls, args.concurrency, 1),
            "step": ("avtgym.v1.EnvService.Step", step_bin, args.calls, args.concurrency, 1),
            "batch": ("avtgym.v1.EnvService.StepBatch", batch_bin, args.batches, args.batch_concurrency, args.batch),
        }
        got: dict[str, list[dict]] = {k: [] for k in phases}
        for _ in range(args.rounds):
            for name, (method, data, n, conc, per) in phases.items():
                s0, w0 = pyclient.proc_cpu(srv.proc.pid), time.perf_counter()
                rep = ghz(args.ghz, srv.addr, method, data, n, conc)
                s1, w1 = pyclient.proc_cpu(srv.proc.pid), time.perf_counter()
                ok = sum(v for k, v in rep.get("statusCodeDistribution", {}).items() if k == "OK")
                if ok != n:
                    raise RuntimeError(f"{name}: {rep.get('statusCodeDistribution')} {rep.get('errorDistribution')}")
                items = n * per
                got[name].append({"server_us": (s1 - s0) / items * 1e6, "per_s": items / (w1 - w0),
                                  "ghz_rps": rep["rps"] * per,
                                  "p50_us": next((d["latency"] / 1e3 for d in rep["latencyDistribution"]
                                                  if d["percentage"] == 50), 0)})
        med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in got.items()}
        out = {"rounds": got, "median": med, "rss_bytes": pyclient.proc_rss(srv.proc.pid),
               "server_cpu_ratio_step_over_batch_episode": med["step"]["server_us"] / med["batch"]["server_us"],
               "per_round_ratio": [s["server_us"] / b["server_us"] for s, b in zip(got["step"], got["batch"])]}
    finally:
        srv.close()
        tmp.cleanup()
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"{'phase':<8} {'server µs':>10} {'items/s':>10}   per call or batched episode; rounds: server µs")
    for k, m in med.items():
        print(f"{k:<8} {m['server_us']:>10.2f} {m['ghz_rps']:>10.0f}   " + " ".join(f"{r['server_us']:.2f}" for r in got[k]))
    print("server CPU, unary step / batched episode:", round(out["server_cpu_ratio_step_over_batch_episode"], 2),
          [round(x, 2) for x in out["per_round_ratio"]])
    return 0


if __name__ == "__main__":
    sys.exit(main())

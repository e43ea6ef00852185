"""`make bench-compare`: issue 20's measurements in one run, as a markdown section of ratios.

    python3 bench/compare.py [--binary bin/avtgym] [--ghz bin/ghz] [--append bench/RESULTS.md] [--quick]

Runs, each against its own fresh `avtgym serve` (demo corpus, access log off):
  1. bench/pyclient.py      the Python client's CPU per unary step vs an empty health check from
                            grpcio (the floor), and per StepBatch episode, at concurrency 1;
  2. bench/servercpu (Go)   the server's CPU per unary Step (16 in flight) vs per StepBatch(256)
                            episode (2 in flight), and a submit_sql step of equivalent-but-different
                            SQL vs an ask step vs the raw query;
     With ../shared/data/ambrosia present, the same verification comparison on an imported
                            AMBROSIA corpus (a reference wrapped as SELECT * FROM (...): equivalent,
                            not the same text);
  3. bench/ghzcpu.py        the same step/batch server-CPU comparison driven by ghz (when bin/ghz
                            exists: GOBIN=$PWD/bin go install github.com/bojand/ghz/cmd/ghz@latest);
  4. bench/peer_compare.py  avtgym vs its OpenEnv peer (bench/openenv_peer), the same ask work driven
                            from Python at concurrency 1 and 16: steps/s, p50/p99, client and
                            server CPU per step, RSS.
Every tool alternates its phases in rounds and reports medians; this machine's noise is large
(2 shared vCPUs), so read the ratios, not the absolute times.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_json(args: list[str]) -> dict:
    print("+", " ".join(args), file=sys.stderr)
    out = subprocess.run(args, cwd=REPO, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=str(REPO / "bin" / "avtgym"))
    ap.add_argument("--ghz", default=str(REPO / "bin" / "ghz"))
    ap.add_argument("--append", default="", help="append the section to this file (else print it)")
    ap.add_argument("--quick", action="store_true", help="short phases (a smoke test, not a measurement)")
    args = ap.parse_args()
    q = args.quick
    py = sys.executable

    pc = run_json([py, "bench/pyclient.py", "--binary", args.binary, "--json",
                   "--rounds", "2" if q else "8", "--calls", "200" if q else "1000",
                   "--batches", "3" if q else "15"])
    sc = run_json(["go", "run", "./bench/servercpu", "--binary", args.binary, "--json",
                   "--rounds", "1" if q else "4", "--duration", "1s" if q else "3s",
                   "--phases", "health,step,batch,submit,raw"])
    amb = ambrosia_verification(args.binary, q)
    gz = None
    if Path(args.ghz).exists():
        gz = run_json([py, "bench/ghzcpu.py", "--binary", args.binary, "--ghz", args.ghz, "--json",
                       "--rounds", "1" if q else "3", "--calls", "2000" if q else "10000",
                       "--batches", "20" if q else "100"])

    pe = run_json([py, "bench/peer_compare.py", "--binary", args.binary, "--json",
                   "--rounds", "1" if q else "3", "--steps", "320" if q else "1600"])

    pm, sm = pc["median"], sc["median"]
    r = lambda v: f"{v:.2f}"  # noqa: E731
    rounds = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    lines = [
        f"## `make bench-compare` — {datetime.date.today().isoformat()}",
        "",
        "```",
        "make bench-compare    # python3 bench/compare.py --append bench/RESULTS.md",
        "```",
        "",
        f"Load average at the start: {os.getloadavg()[0]:.1f} (2 vCPUs). Medians of alternated rounds.",
        "",
        "| goal | measured | figures |",
        "|---|---|---|",
        f"| Python client CPU per unary `step` ≤ 2× an empty health check from grpcio | "
        f"**{r(pc['client_ratio_to_health']['step'])}×** | health {pm['health']['client_us']:.0f} µs, "
        f"raw stub Step {pm['raw_step']['client_us']:.0f} µs, `Client.step` {pm['step']['client_us']:.0f} µs |",
        f"| (batch) Python client CPU per `step_batch` episode | {pm['batch']['client_us']:.1f} µs | "
        f"raw stub StepBatch {pm['raw_batch']['client_us']:.1f} µs per episode |",
        f"| server CPU per unary Step ÷ per StepBatch(256) episode ≥ 10 (Go client, 16 / 2 in flight) | "
        f"**{r(sc['ratio_step_over_batch_episode'])}×** (rounds {rounds(sc['ratio_per_round'])}) | "
        f"health {sm['health']['server_us']:.1f} µs, Step {sm['step']['server_us']:.1f} µs, "
        f"batched episode {sm['batch']['server_us']:.2f} µs |",
    ]
    if gz is not None:
        gm = gz["median"]
        lines.append(
            f"| the same, driven by ghz | **{r(gz['server_cpu_ratio_step_over_batch_episode'])}×** "
            f"(rounds {rounds(gz['per_round_ratio'])}) | health {gm['health']['server_us']:.1f} µs, "
            f"Step {gm['step']['server_us']:.1f} µs, batched episode {gm['batch']['server_us']:.2f} µs; "
            f"server RSS {gz['rss_bytes'] / 2**20:.0f} MiB |")
    lines += [
        f"| unary Step ≥ 0.5× the health check (rate, Go client) | "
        f"**{sm['step']['per_s'] / sm['health']['per_s']:.2f}×** | {sm['health']['per_s']:.0f} vs "
        f"{sm['step']['per_s']:.0f} calls/s |",
        f"| a `submit_sql` step's server CPU beyond an ask step ≤ 1.3× the raw query | "
        f"**{r(sc['verify_over_raw'])}×** (rounds {rounds(sc['verify_over_raw_per_round'])}) | "
        f"submit {sm['submit']['server_us']:.0f} µs, ask {sm['step']['server_us']:.0f} µs, "
        f"raw query {sm['raw']['server_us']:.0f} µs |",
    ]
    if amb is not None:
        am = amb["median"]
        lines.append(
            f"| the same on an imported AMBROSIA corpus ({amb['task']}) | **{r(amb['verify_over_raw'])}×** "
            f"(rounds {rounds(amb['verify_over_raw_per_round'])}) | submit {am['submit']['server_us']:.0f} µs, "
            f"ask {am['step']['server_us']:.0f} µs, raw query {am['raw']['server_us']:.0f} µs |")
    pr, pmed = pe["ratios_peer_over_avtgym"], pe["median"]
    goals = {"avtgym c=1": "≥ 1.5", "avtgym c=16": "≥ 3", "avtgym c=16 coalesce": "≥ 3"}
    for k, rr in pr.items():
        peer_k = "peer c=1" if k.endswith("c=1") else "peer c=16"
        lines.append(
            f"| steps/s from Python, {k.replace('avtgym ', '')} ÷ OpenEnv peer {goals.get(k, '')} | "
            f"**{r(rr['throughput'])}×** | {pmed[k]['steps_per_s']:.0f} vs {pmed[peer_k]['steps_per_s']:.0f} "
            f"steps/s; p50 {pmed[k]['p50_us']:.0f} vs {pmed[peer_k]['p50_us']:.0f} µs, p99 "
            f"{pmed[k]['p99_us']:.0f} vs {pmed[peer_k]['p99_us']:.0f} µs; client CPU {pmed[k]['client_us']:.0f} vs "
            f"{pmed[peer_k]['client_us']:.0f} µs/step; server CPU {pmed[k]['server_us']:.0f} vs "
            f"{pmed[peer_k]['server_us']:.0f} µs/step |")
    lines += [
        f"| server RSS after the runs, avtgym vs peer | {pe['rss']['avtgym_mib']:.0f} vs {pe['rss']['peer_mib']:.0f} MiB | |",
        "",
    ]
    text = "\n".join(lines)
    if args.append:
        with open(args.append, "a", encoding="utf-8") as f:
            f.write("\n" + text)
        print(f"appended to {args.append}", file=sys.stderr)
    print(text)
    return 0


# The AMBROSIA task whose reference the verification phase wraps: its longest single-statement
# reference (three joins) on the validation split.
AMBROSIA_TASK = "ambrosia-validation-0233-i2"


def ambrosia_verification(binary: str, quick: bool) -> dict | None:
    """servercpu's verification phases on AMBROSIA imported into a temporary directory; None when
    ../shared/data/ambrosia is absent."""
    src = REPO.parent / "shared" / "data" / "ambrosia"
    if not src.is_dir():
        print("(no ../shared/data/ambrosia: the AMBROSIA verification row is skipped)", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ambrosia"
        subprocess.run([binary, "corpus", "import", "ambrosia", "--in", str(src), "--out", str(out), "--quiet"],
                       cwd=REPO, check=True, capture_output=True)
        res = run_json(["go", "run", "./bench/servercpu", "--binary", binary, "--json",
                        "--corpus", str(out), "--task", AMBROSIA_TASK,
                        "--rounds", "1" if quick else "4", "--duration", "1s" if quick else "3s",
                        "--phases", "step,submit,raw"])
    res["task"] = AMBROSIA_TASK
    return res


if __name__ == "__main__":
    sys.exit(main())

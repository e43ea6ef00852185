#!/usr/bin/env python3
"""Independent recomputation of an evaluation report's summaries.

Reads an evaluation run's episodes file (JSON lines, one `eval.Episode` per
line) and prints, per oracle, the summaries of report.json's rows (mean,
sample SD across seeds, 95% bootstrap interval, seeds, clusters) and the
per-condition ERROR counts. It shares no code with the Go package `eval`:
the metric definitions are taken from spec/PROTOCOL.md §6-7 and the AmbiTab
paper (§A.4, §C.2, §C.3); only presentation conventions (row order, the
cluster count, the donor-component numbering, the resample RNG streams and
quantile type 7) follow the Go report so that the numbers can be compared.

Definitions (PROTOCOL.md §6, AmbiTab §C.2-C.3):
  * An episode is scored when its status is TERMINATED or TRUNCATED.
  * SR: scored episodes with an outcome; an episode that did not complete
    (ERROR, a failed call or asker: any status but TERMINATED and TRUNCATED)
    counts as a failure, SR 0 (AmbiTab §C.2; BIRD-Interact's SR is over all
    tasks).
  * Precision: scored episodes that asked (precision reported); never ERROR.
  * Recall and F1: scored episodes of tasks with counted ambiguities, except
    those that ended by a fallback stop (§C.3); an episode that did not
    complete, of a task with counted ambiguities, counts with recall and F1 0
    (§C.2: "count as failures with zero recall credit").
  * Strict precision, recall and F1: the same three, with the same
    eligibility, over the asker_strict condition's episodes (the evaluated
    asker, its episodes reset with strict_credit).
  * Within a seed, splits are pooled: a metric is the macro mean of its
    eligible episodes; a difference (gain, gap, ΔJ_resp, ΔJ_full, ΔRec_none)
    is the difference of the two runs' means, each over its own eligible
    episodes (§A.4 "differences between the means of two runs"), computed
    within each seed. Reported: the mean and sample SD across the seeds
    where the metric is defined.
  * ΔRec_spec^Q: recall of the asker_spec condition under the oracle's
    hybrid (actual matcher, reference responder); resampled by donor
    components (each AVT joined to its donor's AVT, hence AVTs sharing a
    replacement joined too).
  * "SR ... completed": SR over the (task, seed) pairs that every oracle
    that ran the condition completed (a scored episode: not ERROR, not a
    failed call or asker).
  * Bootstrap: resample r draws len(AVTs) AVTs with replacement with Go's
    math/rand/v2 Rand(PCG(seed, r)).IntN (donor components: PCG(seed,
    r ^ 0x9e3779b97f4a7c15)); a seed's value on a resample is
    Σ w·num / Σ w·den per run (undefined, and the seed dropped, when the
    weighted denominator is 0); the resample's value is the mean over its
    defined seeds; the interval is the type-7 2.5%/97.5% quantile.

TIDE (--tide tide-f|tide-p; PROTOCOL.md §9, TIDE-Bench Table 2, Tables 3,
13 and 14): DEA the reward; AR asked; L1-IR, JIR (tide-f) and L2-IRp
(tide-p) on chain-only and joint samples; DRR and DRA on drift-only and
joint samples; each per sample type and pooled over its types, and DEA,
DRR and DRA per drift subtype within drift-only samples, joint samples and
both. A metric of the other protocol, or whose types the cell excludes, is
undefined; an episode that did not complete counts 0; a scored episode
without the component is left out. Resampling unit: the anchor cluster
(the episode's cluster, else its AVT); n counts the eligible episodes.

Usage:
  recompute.py EPISODES.jsonl [--resamples N] [--bootstrap-seed S]
      [--reference NAME] [--hybrid NAME] [--hybrid-of JSON]
  recompute.py EPISODES.jsonl --tide tide-f|tide-p [--resamples N] [--bootstrap-seed S]
  recompute.py --self-test     (checks the PCG against Go's published vector)

Python 3.11, standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict

# ---------------------------------------------------------------------------
# Go's math/rand/v2 PCG (128-bit LCG, DXSM output) and Rand.IntN.

M32 = (1 << 32) - 1
M64 = (1 << 64) - 1
M128 = (1 << 128) - 1

PCG_MUL = (2549297995355413924 << 64) | 4865540595714422341
PCG_INC = (6364136223846793005 << 64) | 1442695040888963407
DXSM_MUL = 0xDA942042E4DD58B5


class PCG:
    """math/rand/v2.PCG: NewPCG(seed1, seed2) sets the state hi:lo."""

    def __init__(self, seed1: int, seed2: int) -> None:
        self.state = ((seed1 & M64) << 64) | (seed2 & M64)

    def uint64(self) -> int:
        self.state = (self.state * PCG_MUL + PCG_INC) & M128
        hi, lo = self.state >> 64, self.state & M64
        hi ^= hi >> 32
        hi = (hi * DXSM_MUL) & M64
        hi ^= hi >> 48
        hi = (hi * (lo | 1)) & M64
        return hi


class GoRand:
    """math/rand/v2.Rand's IntN over a PCG source.

    is32bit selects the code path Go takes on 32-bit platforms; both give
    the same values (Go keeps the sequences equal), amd64 takes the 64-bit
    one.
    """

    def __init__(self, src: PCG, is32bit: bool = False) -> None:
        self.src = src
        self.is32bit = is32bit

    def intn(self, n: int) -> int:
        if n <= 0:
            raise ValueError("invalid argument to IntN")
        return self.uint64n(n)

    def uint64n(self, n: int) -> int:
        if self.is32bit and (n & M32) == n:
            return self.uint32n(n)
        if n & (n - 1) == 0:  # a power of two: mask
            return self.src.uint64() & (n - 1)
        prod = self.src.uint64() * n
        hi, lo = prod >> 64, prod & M64
        if lo < n:
            thresh = ((-n) & M64) % n
            while lo < thresh:
                prod = self.src.uint64() * n
                hi, lo = prod >> 64, prod & M64
        return hi

    def uint32n(self, n: int) -> int:
        if n & (n - 1) == 0:
            return (self.src.uint64() & M32) & (n - 1)

        def mul(x: int) -> tuple[int, int, int]:
            p0 = (x & M32) * n
            lo1a, lo0 = p0 >> 32, p0 & M32
            p1 = (x >> 32) * n
            hi, lo1b = p1 >> 32, p1 & M32
            s = lo1a + lo1b
            lo1, c = s & M32, s >> 32
            return (hi + c) & M32, lo1, lo0

        hi, lo1, lo0 = mul(self.src.uint64())
        if lo1 == 0 and lo0 < n:
            thresh = ((-n) & M64) % n
            while lo1 == 0 and lo0 < thresh:
                hi, lo1, lo0 = mul(self.src.uint64())
        return hi


DONOR_STREAM = 0x9E3779B97F4A7C15


def self_test() -> None:
    # Go's math/rand/v2 TestPCG: NewPCG(1, 2).Uint64() x 5.
    want = [0xC4F5A58656EEF510, 0x9DCEC3AD077DEC6C, 0xC8D04605312F8088,
            0xCBEDC0DCB63AC19A, 0x3BF98798CAE97950]
    p = PCG(1, 2)
    got = [p.uint64() for _ in want]
    if got != want:
        sys.exit(f"PCG self-test failed: {[hex(g) for g in got]}")
    for n in (1, 2, 3, 7, 8, 12, 1000, (1 << 32) - 5, 1 << 31):
        a = GoRand(PCG(5, 9))
        b = GoRand(PCG(5, 9), is32bit=True)
        xs = [a.intn(n) for _ in range(50)]
        if xs != [b.intn(n) for _ in range(50)] or max(xs) >= n:
            sys.exit(f"IntN self-test failed for n={n}")
    print("ok")


# ---------------------------------------------------------------------------
# Episodes and eligibility.

SCORED = ("TERMINATED", "TRUNCATED")


def read_episodes(path: str) -> list[dict]:
    """The file's episodes, one per (task, condition, oracle, seed): a
    repeated cell keeps its last line (a failed episode played again)."""
    cells: dict[tuple, dict] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            e = json.loads(line)
            key = (e["task_id"], e["condition"], e["oracle"], int(e["seed"]))
            cells.pop(key, None)
            cells[key] = e
    return list(cells.values())


def is_error(e: dict) -> bool:
    return e.get("status") == "ERROR"


def is_scored(e: dict) -> bool:
    return e.get("status") in SCORED


def counted(e: dict) -> int:
    return int(e.get("counted") or 0)


def sr_value(e: dict):
    """Outcome, or None when ineligible (PROTOCOL §6; AmbiTab §C.2)."""
    if not is_scored(e):  # did not complete: a failure
        return 0.0
    if e.get("success") is not None:
        return float(e["success"])
    return None


def precision_value(e: dict):
    """Precision where defined (n >= 1, reported by the environment)."""
    if is_scored(e) and e.get("precision") is not None:
        return float(e["precision"])
    return None


def _coverage_value(e: dict, field: str):
    if counted(e) < 1:  # defined only when |Amb| >= 1
        return None
    if not is_scored(e):  # did not complete: a failure with zero recall credit
        return 0.0
    if e.get("fallback_stop"):  # §C.3: omitted
        return None
    v = e.get(field)
    return None if v is None else float(v)


def recall_value(e: dict):
    return _coverage_value(e, "recall")


def f1_value(e: dict):
    return _coverage_value(e, "f1")


# ---------------------------------------------------------------------------
# Per-seed sums by resampling unit, and the metrics built on them.


class Sums:
    """Per seed: resampling unit -> [sum of values, eligible count]."""

    def __init__(self, nseeds: int) -> None:
        self.by_seed: list[dict[int, list[float]]] = [dict() for _ in range(nseeds)]

    def add(self, seed_idx: int, unit: int, v: float) -> None:
        cell = self.by_seed[seed_idx].setdefault(unit, [0.0, 0.0])
        cell[0] += v
        cell[1] += 1.0

    def units(self) -> set[int]:
        out: set[int] = set()
        for d in self.by_seed:
            out.update(u for u, (_, den) in d.items() if den > 0)
        return out

    def value(self, seed_idx: int, weights) -> float | None:
        num = den = 0.0
        for u, (s, c) in sorted(self.by_seed[seed_idx].items()):
            w = 1.0 if weights is None else weights[u]
            num += w * s
            den += w * c
        if den == 0:
            return None
        return num / den


class Metric:
    """Σ coef · (run mean), per seed; donor selects donor components."""

    def __init__(self, terms: list[tuple[Sums, float]], donor: bool = False) -> None:
        self.terms = terms
        self.donor = donor

    def seed_values(self, nseeds: int, weights) -> list[float]:
        out = []
        for si in range(nseeds):
            total, ok = 0.0, True
            for sums, coef in self.terms:
                v = sums.value(si, weights)
                if v is None:
                    ok = False
                    break
                total += coef * v
            if ok:
                out.append(total)
        return out

    def clusters(self) -> int:
        units: set[int] = set()
        for sums, _ in self.terms:
            units |= sums.units()
        return len(units)


def quantile7(xs: list[float], q: float) -> float:
    n = len(xs)
    if n == 1:
        return xs[0]
    h = q * (n - 1)
    j = math.floor(h)
    if j >= n - 1:
        return xs[-1]
    return xs[j] + (h - j) * (xs[j + 1] - xs[j])


ROW_FIELDS = [
    "sr_none", "sr_asker", "sr_full", "precision", "recall", "f1",
    "precision_strict", "recall_strict", "f1_strict", "gain", "gap",
    "dj_resp", "drec_spec_q", "dj_full", "drec_none",
    "sr_none_completed", "sr_asker_completed", "sr_full_completed",
]

# Display order of the known oracle types; other oracles follow by name.
KNOWN_ORACLES = ["deterministic", "llm", "llm_scoped", "hybrid", "hybrid_scoped"]


def oracle_order(names) -> list[str]:
    known = [o for o in KNOWN_ORACLES if o in names]
    return known + sorted(o for o in names if o not in KNOWN_ORACLES)


def donor_components(eps: list[dict], avts: list[str], task_avt: dict[str, str]) -> list[int]:
    """Component index of each AVT (numbered by first appearance in the
    sorted AVT list) in the graph joining each asker_spec episode's AVT to
    its donor's AVT (or to the donor task when that never ran)."""
    adj: dict[tuple, set] = defaultdict(set)
    for e in eps:
        if e["condition"] != "asker_spec" or not e.get("donor"):
            continue
        a = ("avt", e["avt_id"])
        d = e["donor"]
        b = ("avt", task_avt[d]) if d in task_avt else ("task", d)
        adj[a].add(b)
        adj[b].add(a)
    comp_of: dict[tuple, int] = {}
    out = []
    for a in avts:
        node = ("avt", a)
        if node not in comp_of:
            cid = len(set(comp_of.values()))
            stack = [node]
            comp_of[node] = cid
            while stack:
                x = stack.pop()
                for y in adj[x]:
                    if y not in comp_of:
                        comp_of[y] = cid
                        stack.append(y)
        out.append(comp_of[node])
    return out


def analyze(eps: list[dict], resamples: int, boot_seed: int, reference: str,
            hybrid: str, hybrid_of: dict[str, str]) -> dict:
    task_avt = {e["task_id"]: e["avt_id"] for e in eps}
    seeds = sorted({int(e["seed"]) for e in eps})
    seed_idx = {s: i for i, s in enumerate(seeds)}
    ns = len(seeds)
    avts = sorted({e["avt_id"] for e in eps})
    avt_idx = {a: i for i, a in enumerate(avts)}
    comp = donor_components(eps, avts, task_avt)
    ncomp = len(set(comp))
    oracles = oracle_order({e["oracle"] for e in eps})

    by_run: dict[tuple[str, str], list[dict]] = defaultdict(list)
    by_cell: dict[tuple, dict] = {}
    for e in eps:
        by_run[(e["condition"], e["oracle"])].append(e)
        by_cell[(e["task_id"], e["condition"], e["oracle"], int(e["seed"]))] = e

    def sums(cond: str, oracle: str, value, donor: bool = False, keep=None) -> Sums:
        s = Sums(ns)
        for e in by_run.get((cond, oracle), []):
            if keep is not None and not keep(e):
                continue
            v = value(e)
            if v is None:
                continue
            u = avt_idx[e["avt_id"]]
            s.add(seed_idx[int(e["seed"])], comp[u] if donor else u, v)
        return s

    def completed(cond: str):
        ran = [o for o in oracles if by_run.get((cond, o))]

        def keep(e: dict) -> bool:
            for o in ran:
                other = by_cell.get((e["task_id"], cond, o, int(e["seed"])))
                if other is None or not is_scored(other):
                    return False
            return True
        return keep

    def hybrid_for(o: str) -> str:
        # The oracle with the same matcher and the reference responder:
        # the reference is its own; the others' as given per oracle (the
        # server's ListOracles), else the default hybrid.
        if o == reference:
            return o
        return hybrid_of.get(o, hybrid)

    rows = []
    for o in oracles:
        h = hybrid_for(o)
        sr = {c: sums(c, o, sr_value) for c in ("none", "asker", "full", "full_adv")}
        ms = {
            "sr_none": Metric([(sr["none"], 1)]),
            "sr_asker": Metric([(sr["asker"], 1)]),
            "sr_full": Metric([(sr["full"], 1)]),
            "precision": Metric([(sums("asker", o, precision_value), 1)]),
            "recall": Metric([(sums("asker", o, recall_value), 1)]),
            "f1": Metric([(sums("asker", o, f1_value), 1)]),
            # The same asker with strict credit: the same eligibility.
            "precision_strict": Metric([(sums("asker_strict", o, precision_value), 1)]),
            "recall_strict": Metric([(sums("asker_strict", o, recall_value), 1)]),
            "f1_strict": Metric([(sums("asker_strict", o, f1_value), 1)]),
            "gain": Metric([(sr["asker"], 1), (sr["none"], -1)]),
            "gap": Metric([(sr["full"], 1), (sr["asker"], -1)]),
            "dj_resp": Metric([(sr["asker"], 1), (sums("asker", h, sr_value), -1)]),
            "drec_spec_q": Metric([(sums("asker_spec", h, recall_value, donor=True), 1)], donor=True),
            "dj_full": Metric([(sr["full_adv"], 1), (sums("full_adv", reference, sr_value), -1)]),
            "drec_none": Metric([(sums("none_adv", o, recall_value), 1),
                                 (sums("none_adv", reference, recall_value), -1)]),
            "sr_none_completed": Metric([(sums("none", o, sr_value, keep=completed("none")), 1)]),
            "sr_asker_completed": Metric([(sums("asker", o, sr_value, keep=completed("asker")), 1)]),
            "sr_full_completed": Metric([(sums("full", o, sr_value, keep=completed("full")), 1)]),
        }
        errors: dict[str, int] = defaultdict(int)
        for (cond, oracle), es in by_run.items():
            if oracle == o:
                for e in es:
                    if is_error(e):
                        errors[cond] += 1
        rows.append({"oracle": o, "hybrid": h, "metrics": ms, "errors": dict(errors)})

    # Point estimates.
    out_rows = []
    for row in rows:
        out = {"oracle": row["oracle"], "hybrid": row["hybrid"]}
        for name in ROW_FIELDS:
            m = row["metrics"][name]
            vals = m.seed_values(ns, None)
            s = {"mean": None, "sd": None, "lo": None, "hi": None,
                 "seeds": len(vals), "clusters": m.clusters()}
            if vals:
                mean = sum(vals) / len(vals)
                s["mean"] = mean
                if len(vals) >= 2:
                    s["sd"] = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
            out[name] = s
        out["errors"] = row["errors"]
        out_rows.append(out)

    # Bootstrap: every metric sees the same resampled units.
    boots: dict[tuple[int, str], list[float]] = defaultdict(list)
    for r in range(resamples):
        w_avt = [0.0] * len(avts)
        rng = GoRand(PCG(boot_seed, r))
        for _ in range(len(avts)):
            w_avt[rng.intn(len(avts))] += 1
        w_comp = [0.0] * ncomp
        rng = GoRand(PCG(boot_seed, r ^ DONOR_STREAM))
        for _ in range(ncomp):
            w_comp[rng.intn(ncomp)] += 1
        for i, row in enumerate(rows):
            for name in ROW_FIELDS:
                if out_rows[i][name]["mean"] is None:
                    continue
                m = row["metrics"][name]
                vals = m.seed_values(ns, w_comp if m.donor else w_avt)
                if vals:
                    boots[(i, name)].append(sum(vals) / len(vals))
    for (i, name), xs in boots.items():
        xs.sort()
        out_rows[i][name]["lo"] = quantile7(xs, 0.025)
        out_rows[i][name]["hi"] = quantile7(xs, 0.975)

    return {"seeds": seeds, "avts": len(avts), "donor_components": ncomp, "rows": out_rows}



# TIDE-Bench (PROTOCOL.md §9; TIDE Table 2): each metric a proportion over
# the samples of the types its definition covers, per sample type and, for
# DEA, DRR and DRA, per drift subtype within drift-only and joint samples
# (Tables 3 and 14). The resampling unit is the anchor cluster.

TIDE_TYPES = ["chain_only", "drift_only", "joint"]
TIDE_CJ = ["chain_only", "joint"]
TIDE_DJ = ["drift_only", "joint"]
TIDE_SUBTYPES = ["value", "constraint", "projection"]


def indicator(e: dict, field: str):
    v = e.get(field)
    if v is None:
        return None
    return 1.0 if v > 0 else 0.0


def tide_jir(e: dict):
    a, b = indicator(e, "l1_identified"), indicator(e, "l2_identified")
    return None if a is None or b is None else a * b


def tide_dra(e: dict):
    a, b = indicator(e, "drift_recognized"), indicator(e, "sql2")
    return None if a is None or b is None else a * b


# (JSON field, sample types, protocol ("" both), value of a scored episode)
TIDE_METRICS = [
    ("dea", TIDE_TYPES, "", lambda e: None if e.get("reward") is None else float(e["reward"])),
    ("ar", TIDE_TYPES, "", lambda e: indicator(e, "asked")),
    ("l1_ir", TIDE_CJ, "tide-f", lambda e: indicator(e, "l1_identified")),
    ("jir", TIDE_CJ, "tide-f", tide_jir),
    ("l2_ir_p", TIDE_CJ, "tide-p", lambda e: indicator(e, "l2_identified")),
    ("l2_ir_f", TIDE_CJ, "tide-f", lambda e: indicator(e, "l2_identified")),
    ("drr", TIDE_DJ, "", lambda e: indicator(e, "drift_recognized")),
    ("dra", TIDE_DJ, "", tide_dra),
]
TIDE_DRIFT_METRICS = [m for m in TIDE_METRICS if m[0] in ("dea", "drr", "dra")]

# A TideRow's groups and a TideSubtype's scopes: JSON field, sample types.
TIDE_GROUPS = [("overall", TIDE_TYPES), ("chain_only", ["chain_only"]),
               ("drift_only", ["drift_only"]), ("joint", ["joint"])]
TIDE_SCOPES = [("drift_only", ["drift_only"]), ("joint", ["joint"]), ("all", TIDE_DJ)]


def analyze_tide(eps: list[dict], protocol: str, resamples: int, boot_seed: int) -> dict:
    seeds = sorted({int(e["seed"]) for e in eps})
    seed_idx = {s: i for i, s in enumerate(seeds)}
    ns = len(seeds)
    unit_of = lambda e: e.get("cluster") or e["avt_id"]  # noqa: E731
    units = sorted({unit_of(e) for e in eps})
    unit_idx = {u: i for i, u in enumerate(units)}
    oracles = oracle_order({e["oracle"] for e in eps})
    by_run: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for e in eps:
        by_run[(e["oracle"], e["condition"])].append(e)

    def spec(o: str, cond: str, metric, types, subtype: str):
        name, mtypes, mproto, value = metric
        eligible = [t for t in types if t in mtypes]
        s = Sums(ns)
        for e in by_run[(o, cond)]:
            if e.get("sample_type") not in eligible:
                continue
            if subtype and e.get("drift_subtype") != subtype:
                continue
            v = 0.0 if not is_scored(e) else value(e)
            if v is None:
                continue
            s.add(seed_idx[int(e["seed"])], unit_idx[unit_of(e)], v)
        defined = bool(eligible) and not (mproto and mproto != protocol) and not (
            protocol == "tide-p" and not any(t in eligible for t in TIDE_CJ))
        n = sum(int(c) for d in s.by_seed for (_, c) in d.values())
        return {"metric": Metric([(s, 1)]), "defined": defined, "n": n}

    rows, cells = [], []
    for o in oracles:
        for cond in ("none", "asker", "full", "full_adv", "none_adv", "asker_spec"):
            if not by_run.get((o, cond)):
                continue
            row = {"oracle": o, "condition": cond}
            for g, types in TIDE_GROUPS:
                row[g] = {}
                for m in TIDE_METRICS:
                    c = spec(o, cond, m, types, "")
                    row[g][m[0]] = c
                    cells.append(c)
            row["drift_subtypes"] = []
            for st in TIDE_SUBTYPES:
                sub = {"subtype": st}
                for sc, types in TIDE_SCOPES:
                    sub[sc] = {}
                    for m in TIDE_DRIFT_METRICS:
                        c = spec(o, cond, m, types, st)
                        sub[sc][m[0]] = c
                        cells.append(c)
                row["drift_subtypes"].append(sub)
            rows.append(row)

    for c in cells:
        m = c["metric"]
        vals = m.seed_values(ns, None) if c["defined"] else []
        s = {"mean": None, "sd": None, "lo": None, "hi": None, "seeds": len(vals),
             "clusters": m.clusters(), "n": c["n"]}
        if vals:
            mean = sum(vals) / len(vals)
            s["mean"] = mean
            if len(vals) >= 2:
                s["sd"] = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        c["summary"] = s
        c["boot"] = []
    for r in range(resamples):
        w = [0.0] * len(units)
        rng = GoRand(PCG(boot_seed, r))
        for _ in range(len(units)):
            w[rng.intn(len(units))] += 1
        for c in cells:
            if c["summary"]["mean"] is None:
                continue
            vals = c["metric"].seed_values(ns, w)
            if vals:
                c["boot"].append(sum(vals) / len(vals))
    for c in cells:
        if c["boot"]:
            xs = sorted(c["boot"])
            c["summary"]["lo"] = quantile7(xs, 0.025)
            c["summary"]["hi"] = quantile7(xs, 0.975)

    def out(x):
        if isinstance(x, dict) and "summary" in x:
            return x["summary"]
        if isinstance(x, dict):
            return {k: out(v) for k, v in x.items()}
        if isinstance(x, list):
            return [out(v) for v in x]
        return x
    return {"protocol": protocol, "clusters": len(units), "rows": out(rows)}

def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("episodes", nargs="?")
    p.add_argument("--resamples", type=int, default=2000)
    p.add_argument("--bootstrap-seed", type=int, default=0)
    p.add_argument("--reference", default="deterministic")
    p.add_argument("--hybrid", default="hybrid")
    p.add_argument("--hybrid-of", default="{}", help="JSON object: oracle -> its hybrid")
    p.add_argument("--tide", choices=["tide-f", "tide-p"], help="recompute a TIDE run's report (its protocol)")
    p.add_argument("--self-test", action="store_true")
    a = p.parse_args(argv)
    if a.self_test:
        self_test()
        return
    if not a.episodes:
        p.error("the episodes file is required")
    if a.resamples < 0:
        p.error("negative resamples")
    if a.resamples == 0:  # as eval.AnalyzeOptions: 0 means the default
        a.resamples = 2000
    eps = read_episodes(a.episodes)
    if not eps:
        sys.exit("no episodes")
    if a.tide:
        out = {"tide": analyze_tide(eps, a.tide, a.resamples, a.bootstrap_seed & M64)}
        json.dump(out, sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
        return
    out = analyze(eps, a.resamples, a.bootstrap_seed & M64, a.reference, a.hybrid,
                  json.loads(a.hybrid_of))
    json.dump(out, sys.stdout, indent=1, allow_nan=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])

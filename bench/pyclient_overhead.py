"""The Python client's own CPU per step, without the network (issue 20).

    python3 bench/pyclient_overhead.py            # this checkout's client
    AVTGYM_PYCLIENT_SRC=/other/client/python/src python3 bench/pyclient_overhead.py

Client.step and Client.step_batch(256) against a stand-in stub that serialises the request and
returns one fixed StepResponse (an ask answered: two turns, a budget): what the client adds to
grpcio's own cost, which bench/pyclient.py measures with the real server. Warm caches make these
figures lower than the same work inside a real call loop; compare versions, not with the floor.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, os.environ.get("AVTGYM_PYCLIENT_SRC") or str(REPO / "client" / "python" / "src"))

from avtgym import Action, Budget, Client, Episode, Turn  # noqa: E402
from avtgym.v1 import env_service_pb2 as pb  # noqa: E402
from avtgym.v1 import episode_pb2 as epb  # noqa: E402


def response() -> pb.StepResponse:
    r = pb.StepResponse(token=b"t" * 330, status=epb.EPISODE_STATUS_RUNNING)
    o = r.observation
    o.turns.add(role=epb.ROLE_POLICY, kind=epb.TURN_KIND_QUESTION,
                text="Could you clarify what exactly you mean by top 5 customers?")
    o.turns.add(role=epb.ROLE_ORACLE, kind=epb.TURN_KIND_REPLY, text="I mean the five customers whose completed "
                "orders bring in the most money, after discounts and without shipping.")
    o.phase, o.question_budget, o.questions_asked, o.questions_remaining = epb.PHASE_ASKING, 3, 1, 2
    o.protocol, o.subtask = epb.PROTOCOL_AMBITAB, 1
    b = o.budget
    b.unit, b.total_milli, b.used_milli, b.remaining_milli = epb.BUDGET_UNIT_QUESTIONS, 3000, 1000, 2000
    return r


def main() -> int:
    data = response().SerializeToString()
    bresp = pb.StepBatchResponse()
    for _ in range(256):
        bresp.results.add().response.ParseFromString(data)
    bdata = bresp.SerializeToString()

    class Stub:  # parses a fresh response per call, as grpcio's deserializer does
        def Step(self, req, timeout=None, metadata=None):
            req.SerializeToString()
            return pb.StepResponse.FromString(data)

        def StepBatch(self, req, timeout=None, metadata=None):
            req.SerializeToString()
            return pb.StepBatchResponse.FromString(bdata)

    ep = Episode(token=b"x" * 300, episode_id="e", seed=1, group_index=0, task=None,
                 turns=(Turn("environment", "request", "R"),), phase="asking", question_budget=3,
                 questions_asked=0, questions_remaining=3, done=False, status="running", reward=None,
                 privileged=None, protocol="ambitab", subtask=1, budget=Budget("questions", 3000, 0, 3000))
    a = Action.ask("Could you clarify what exactly you mean by top 5 customers?")
    c = Client("127.0.0.1:1", tls=False, token="")
    c._stub = Stub()
    items = [(ep, a)] * 256
    out = {}
    for name, f, n, per in [("step", lambda: c.step(ep, a), 20000, 1), ("step_batch(256) per episode",
                                                                         lambda: c.step_batch(items), 60, 256)]:
        xs = []
        for _ in range(5):
            t = time.process_time()
            for _ in range(n):
                f()
            xs.append((time.process_time() - t) / n / per * 1e6)
        out[name] = statistics.median(xs)
    c.close()
    print(" ".join(f"{k}: {v:.2f} µs" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

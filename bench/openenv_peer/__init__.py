"""An OpenEnv peer of avtgym's ask step, for `make bench-compare` (issue 20).

A small OpenEnv environment (openenv-core 0.3.0, its own FastAPI/WebSocket server and EnvClient)
doing the work of an avtgym AMBITAB ask step on the demo records with the deterministic oracle:
the question's policy checks, the matcher (terms and aliases as whole words, case and punctuation
ignored, longest phrases first, no overlaps), the responder (the stored resolutions of the
credited ambiguities, in annotation order; the fixed refusal otherwise) and the question budget.
Its replies equal avtgym's on every demo question (client/python/tests/test_openenv_peer.py).

    python3 -m bench.openenv_peer --port 8077          # the server (uvicorn)
"""

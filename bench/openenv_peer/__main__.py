"""python3 -m bench.openenv_peer --port PORT: the peer's OpenEnv server (FastAPI + uvicorn)."""

from __future__ import annotations

import argparse

import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app

from .env import AskAction, AskEnvironment, AskObservation, records


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8077)
    ap.add_argument("--max-sessions", type=int, default=1024)
    args = ap.parse_args()
    records()  # load before serving
    app = create_fastapi_app(AskEnvironment, AskAction, AskObservation, max_concurrent_envs=args.max_sessions)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

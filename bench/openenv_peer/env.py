"""The peer's OpenEnv types, environment and client (openenv-core 0.3.0)."""

from __future__ import annotations

import uuid
from typing import Any, Dict, List, Optional

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from .oracle import BUDGET_NOTICE, Record, load_records

_RECORDS: Dict[str, Record] | None = None


def records() -> Dict[str, Record]:
    global _RECORDS
    if _RECORDS is None:
        _RECORDS = load_records()
    return _RECORDS


class AskAction(Action):
    """One clarifying question."""

    question: str = Field(..., description="the policy's question")


class AskObservation(Observation):
    request: str = ""
    reply: str = ""
    refused: bool = False
    credits: List[int] = Field(default_factory=list)
    questions_asked: int = 0
    questions_remaining: int = 0


class AskEnvironment(Environment[AskAction, AskObservation, State]):
    """reset(task_id=...) starts an episode on a demo record; step(AskAction) answers a question as
    avtgym's deterministic oracle does, within a budget of questions (budget=None: avtgym's
    default, m + 2, or 0 without counted ambiguities); a question beyond it ends the episode with
    avtgym's notice."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = State(episode_id=None, step_count=0)
        self._rec: Optional[Record] = None
        self._budget = 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
              task_id: str = "shop-001", budget: Optional[int] = None, **kwargs: Any) -> AskObservation:
        self._rec = records()[task_id]
        self._budget = self._rec.budget if budget is None else int(budget)
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return AskObservation(request=self._rec.request, reply=self._rec.request,
                              questions_remaining=self._budget)

    def step(self, action: AskAction, timeout_s: Optional[float] = None, **kwargs: Any) -> AskObservation:
        if self._rec is None:
            raise RuntimeError("reset first")
        asked = self._state.step_count
        if asked >= self._budget:
            return AskObservation(reply=BUDGET_NOTICE, done=True, questions_asked=asked)
        text, refused, credits = self._rec.ask(action.question)
        self._state.step_count = asked + 1
        return AskObservation(reply=text, refused=refused, credits=credits, questions_asked=asked + 1,
                              questions_remaining=self._budget - asked - 1)

    @property
    def state(self) -> State:
        return self._state


class AskEnv(EnvClient[AskAction, AskObservation, State]):
    """The peer's client: OpenEnv's own WebSocket session."""

    def _step_payload(self, action: AskAction) -> Dict[str, Any]:
        return {"question": action.question}

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult[AskObservation]:
        obs = AskObservation(**payload.get("observation", {}), done=payload.get("done", False),
                             reward=payload.get("reward"))
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: Dict[str, Any]) -> State:
        return State(**payload)

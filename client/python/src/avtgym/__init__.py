"""avtgym: Python client of the avtgym environment server (RL of asking policies).

    from avtgym import Client, Action
    with Client("127.0.0.1:50051") as c:
        ep = c.reset(task_id="shop-001")
        res = c.step(ep, Action.ask("What do you mean by top 5 customers?"))
        res = c.step(res.episode, Action.stop())
        print(res.reward)

reset(..., protocol="bird-c") plays BIRD-Interact's conversational protocol (two sub-tasks, a
turn budget, a debug retry); Action.unparsed(text) reports model output that could not be parsed
(parse_action(text).or_unparsed()). protocol="tide-f" and "tide-p" play TIDE-Bench's protocols
(questions and SQL, one per turn; a user's drift after the first SQL on tasks with one).
"""

from avtgym.actions import ParsedAction, parse_action
from avtgym.chat import policy_turn_text, render_chat
from avtgym.client import TLS, AsyncClient, Client, OracleReply
from avtgym.errors import AvtgymError
from avtgym.types import (
    AGENT_ROLES,
    COMPARISONS,
    PROTOCOLS,
    SAMPLE_TYPES,
    Action,
    Budget,
    DatabaseView,
    Episode,
    KnowledgeEntry,
    ProtocolInfo,
    Reward,
    StepResult,
    TaskSummary,
    TaskView,
    TideInfo,
    Turn,
)

__version__ = "0.1.0"

__all__ = [
    "AGENT_ROLES",
    "COMPARISONS",
    "Action",
    "AsyncClient",
    "AvtgymError",
    "Budget",
    "Client",
    "DatabaseView",
    "Episode",
    "KnowledgeEntry",
    "OracleReply",
    "PROTOCOLS",
    "ParsedAction",
    "SAMPLE_TYPES",
    "ProtocolInfo",
    "Reward",
    "StepResult",
    "TLS",
    "TaskSummary",
    "TaskView",
    "TideInfo",
    "Turn",
    "parse_action",
    "policy_turn_text",
    "render_chat",
]

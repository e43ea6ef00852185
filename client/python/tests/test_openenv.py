"""avtgym.openenv against the real openenv-core (pinned in client/python's test extra) and the real
server: OpenEnv's reset / step / state, observation fields, ERROR episodes, retry-safe steps."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys

import pytest

try:
    import openenv
    from openenv.core import EnvClient, SyncEnvClient
    from openenv.core.client_types import StepResult
    from openenv.core.env_server.types import Action, Observation, State
except ImportError as e:  # make test-python installs it; a silent skip would hide a missing pin
    pytest.fail(f"openenv-core is not installed ({e}): pip install -e 'client/python[test]'", pytrace=False)

from avtgym import AvtgymError
from avtgym import Action as AvtAction
from avtgym.openenv import AvtgymAction, AvtgymEnv, AvtgymObservation, AvtgymState

from conftest import REPO

QUESTION = "What do you mean by top customers?"
ASK = json.dumps({"type": "clarification", "question": QUESTION})


def test_pinned_openenv_core():
    assert openenv.__version__ == "0.3.0"
    assert issubclass(AvtgymEnv, EnvClient)
    assert issubclass(AvtgymObservation, Observation) and issubclass(AvtgymAction, Action)
    assert issubclass(AvtgymState, State)


def test_sync_loop(addr):
    """The OpenEnv loop through OpenEnv's own SyncEnvClient wrapper (env.sync())."""
    client = AvtgymEnv(base_url=addr).sync()
    assert isinstance(client, SyncEnvClient)
    with client as env:
        result = env.reset(task_id="shop-001", seed=3)
        assert isinstance(result, StepResult) and isinstance(result.observation, AvtgymObservation)
        obs = result.observation
        assert (result.done, result.reward, obs.done, obs.reward) == (False, None, False, None)
        assert obs.request == obs.reply == "List the names of our top 5 customers."
        # The shared chat prompt: the task message (schema, budget, request) follows the system one.
        assert obs.messages[0]["role"] == "system" and obs.messages[-1]["role"] == "user"
        assert obs.messages[-1]["content"].startswith("Database: shop (sqlite)")
        assert obs.messages[-1]["content"].endswith("\n\nRequest: " + obs.request)
        assert obs.task["task_id"] == "shop-001" and "CREATE TABLE customers" in obs.task["database"]["schema"]
        assert (obs.question_budget, obs.questions_remaining, obs.phase, obs.status) == (3, 3, "asking", "running")
        assert obs.metadata["episode_id"] == "demo/shop-001/3" and obs.metadata["dropped"] is False

        result = env.step(AvtgymAction(message=ASK))  # raw model output, parsed by parse_action
        obs = result.observation
        assert not result.done and result.reward is None and obs.task is None
        assert obs.reply.startswith("I mean") and obs.questions_asked == 1
        assert [t["role"] for t in obs.turns] == ["policy", "oracle"] and obs.turns[1]["kind"] == "reply"
        assert obs.messages[-2] == {"role": "assistant", "content": ASK}
        assert obs.messages[-1] == {"role": "user", "content": obs.reply}

        state = env.state()
        assert isinstance(state, AvtgymState)
        assert (state.episode_id, state.step_count, state.task_id, state.seed) == ("demo/shop-001/3", 1, "shop-001", 3)
        assert base64.b64decode(state.token) == env.episode.token

        result = env.step(AvtgymAction.stop())
        assert result.done and result.reward == 1.0 == result.observation.reward
        meta = result.observation.metadata
        assert meta["status"] == "terminated" and meta["reward_components"]["question_f1"] == 1.0
        assert env.state().done and env.state().step_count == 2


def test_async_client_and_action_forms(addr):
    async def main():
        async with AvtgymEnv(base_url=f"grpc://{addr}", reward="question_f1") as env:
            r = await env.reset(task_id="shop-001", episode_id="ignored")  # OpenEnv's reset kwarg
            r = await env.step({"kind": "ask", "text": QUESTION})  # a dict, as OpenEnv's JSON form
            assert r.observation.questions_asked == 1
            r = await env.step(AvtAction.stop())  # an avtgym.Action
            assert r.done and r.reward == 1.0
            # malformed raw output: AmbiTab's fallback STOP, reported in metadata
            await env.reset(task_id="shop-001")
            r = await env.step("blah blah")
            assert r.done and r.reward == 0.0 and "no action found" in r.observation.metadata["malformed"]
            with pytest.raises(TypeError):
                await env.reset(nope=1)

    asyncio.run(main())
    with pytest.raises(ValueError):
        AvtgymAction(kind="ask", text="q", message="also")
    with pytest.raises(ValueError):
        AvtgymAction()


def test_bird_c_episode(addr):
    """BIRD_C through AvtgymEnv: protocol and patience pass through to reset; a malformed message
    is reported as an unparsed action (a turn spent, not STOP); the follow-up's request arrives
    as a new user message once phase 1's SQL passes; budget and sub-task are observed."""
    from avtgym import Client
    from avtgym.trainers import BIRD_C_SYSTEM_PROMPT, DEFAULT_SYSTEM_PROMPT

    with Client(addr) as c:
        task = next(t.task_id for t in c.list_tasks() if t.subtasks == 2)
        ref = ";\n".join(c.reset(task_id=task, protocol="bird-c", privileged=True).privileged["reference_sql"])
    with AvtgymEnv(base_url=addr, protocol="bird-c").sync() as env:
        obs = env.reset(task_id=task, patience=5).observation
        assert (obs.protocol, obs.subtask, obs.sql_required) == ("bird-c", 1, False)
        assert obs.budget["unit"] == "turns" and obs.budget["used"] == 0.0
        total = obs.budget["total"]
        assert obs.messages[0] == {"role": "system", "content": BIRD_C_SYSTEM_PROMPT}

        r = env.step("I am not sure what to do.\nLet me think.")
        obs = r.observation
        assert not r.done and "no action found" in obs.metadata["malformed"]
        assert [t["kind"] for t in obs.turns] == ["unparsed", "notice"]
        assert obs.budget == {"unit": "turns", "total": total, "used": 1.0, "remaining": total - 1.0}

        r = env.step(json.dumps({"type": "sql", "sql": ref}))
        obs = r.observation
        # BIRD_VARIANT_ORIGINAL (the default): the follow-up is one SQL turn, so SQL is required.
        assert not r.done and r.reward is None and obs.subtask == 2 and obs.sql_required
        assert obs.turns[-1]["role"] == "environment" and obs.turns[-1]["kind"] == "request"
        assert obs.messages[-1] == {"role": "user", "content": "New request: " + obs.turns[-1]["text"]} == {
            "role": "user", "content": obs.reply}
        assert obs.messages[-2]["role"] == "assistant"
        assert env.state().protocol == "bird-c" and env.state().subtask == 2

        r = env.step(AvtgymAction.stop())  # STOP leaves sub-task 2 unsolved: phase 1's 0.7 stays
        assert r.done and r.reward == pytest.approx(0.7)
        assert r.observation.metadata["reward_components"] == {"phase1": pytest.approx(0.7),
                                                               "phase2": 0.0}
    with AvtgymEnv(base_url=addr).sync() as env:  # AMBITAB keeps its prompt and its STOP fallback
        obs = env.reset(task_id="shop-001").observation
        assert obs.protocol == "ambitab" and obs.messages[0]["content"] == DEFAULT_SYSTEM_PROMPT
        assert obs.budget == {"unit": "questions", "total": 3.0, "used": 0.0, "remaining": 3.0}
    with AvtgymEnv(base_url=addr, on_malformed="unparsed").sync() as env:  # AMBITAB's server rule
        env.reset(task_id="shop-001")
        r = env.step("blah blah")
        assert not r.done and r.observation.turns[-1]["kind"] == "notice"
        assert env.step("blah blah").done
    assert AvtgymAction.unparsed("x").to_avtgym() == (AvtAction.unparsed("x"), None)
    with pytest.raises(ValueError):
        AvtgymEnv(base_url=addr, on_malformed="retry")


def test_json_forms_round_trip(addr):
    env = AvtgymEnv(base_url=addr)
    assert env._step_payload(AvtgymAction.ask("Which year?")) == {"kind": "ask", "text": "Which year?", "metadata": {}}
    res = env._parse_result({"observation": {"done": True, "reward": 0.5, "reply": "x"}, "reward": 0.5, "done": True})
    assert res.done and res.reward == 0.5 and res.observation.reply == "x"
    assert env._parse_state({"episode_id": "e", "step_count": 2, "token": "AA=="}).step_count == 2


def test_failed_step_leaves_episode_retryable(addr):
    """A step that fails (here: the server is unreachable) raises and leaves the episode where it
    was; the same step then succeeds on a reachable server (stateless tokens)."""
    from avtgym import AsyncClient
    from conftest import free_port

    with AvtgymEnv(base_url=addr).sync() as env:
        env.reset(task_id="shop-001", seed=1)
        inner = env.async_client  # the AvtgymEnv behind OpenEnv's SyncEnvClient
        before, good = env.episode, inner._client
        inner._client = AsyncClient(f"127.0.0.1:{free_port()}", timeout=0.5, retries=1)
        with pytest.raises(AvtgymError) as ei:
            env.step(AvtgymAction.ask(QUESTION))
        assert ei.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
        assert env.episode is before and env.state().step_count == 0
        inner._client = good
        assert env.step(AvtgymAction.ask(QUESTION)).observation.questions_asked == 1
        env.step(AvtgymAction.stop())
        with pytest.raises(AvtgymError) as ei:  # stepping a finished episode
            env.step(AvtgymAction.stop())
        assert ei.value.reason in ("EPISODE_DONE", "WRONG_PHASE")


def test_error_episode_is_dropped(error_addr):
    """An episode whose oracle fails ends done, with no reward and metadata["dropped"]."""
    with AvtgymEnv(base_url=error_addr).sync() as env:
        env.reset(task_id="shop-001", oracle="llm")
        result = env.step(AvtgymAction.ask(QUESTION))
        assert result.done and result.reward is None and result.observation.reward is None
        meta = result.observation.metadata
        assert meta["status"] == "error" and meta["dropped"] is True
        assert result.observation.turns[-1]["role"] == "environment"


def test_connect_fails_fast_on_a_closed_port():
    from conftest import free_port

    env = AvtgymEnv(base_url=f"127.0.0.1:{free_port()}", connect_timeout_s=0.5)
    with pytest.raises(ConnectionError):
        asyncio.run(env.connect())


def test_example_runs_unchanged(addr):
    """examples/openenv_loop.py: an OpenEnv-style loop, unchanged, against avtgym serve."""
    out = subprocess.run([sys.executable, str(REPO / "examples" / "openenv_loop.py"), "--server", addr,
                          "--episodes", "4"], capture_output=True, text=True, timeout=120, check=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(REPO / "client" / "python" / "src")})
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 4 and summary["dropped"] == 0
    assert 0.0 <= summary["mean_reward"] <= 1.0 and summary["mean_reward"] > 0

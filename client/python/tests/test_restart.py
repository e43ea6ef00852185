"""A client keeps stepping an episode across a server restart (stateless tokens, shared key)."""

from __future__ import annotations

import threading
import time

from avtgym import Action, Client

from conftest import Server

FULL_Q = "Could you clarify what exactly you mean by top 5 customers?"


def test_retry_after_restart_mid_episode(avtgym_binary, key_file):
    first = Server(avtgym_binary, key_file).start()
    second = Server(avtgym_binary, key_file, port=first.port)
    try:
        with Client(first.addr, timeout=30.0, retries=8) as c:
            ep = c.reset(task_id="shop-001", seed=5)
            ep = c.step(ep, Action.ask(FULL_Q)).episode
            old_pid = first.proc.pid
            first.stop()  # the episode's server is gone

            started = threading.Event()

            def restart():
                time.sleep(0.5)
                second.start()
                started.set()

            t = threading.Thread(target=restart)
            t.start()
            res = c.step(ep, Action.stop())  # fails with UNAVAILABLE, retried until the new process answers
            t.join()
            # The step was answered by the restarted process (the first is gone).
            assert started.is_set() and second.proc.pid != old_pid
            assert res.done and res.status == "terminated"
            assert res.reward.value == 1.0 and res.reward.components["recall"] == 1.0
            assert [t.kind for t in res.episode.turns] == ["request", "question", "reply", "stop"]
    finally:
        first.stop()
        second.stop()


def test_unavailable_after_retries(avtgym_binary, key_file):
    from conftest import free_port
    import pytest
    from avtgym import AvtgymError

    with Client(f"127.0.0.1:{free_port()}", timeout=10.0, retries=2) as c:
        with pytest.raises(AvtgymError) as ei:
            c.reset()
        assert ei.value.code == "UNAVAILABLE"

"""reset(comparison=...): EpisodeOptions.comparison, how a submission is compared with the
reference on records imported from BIRD-Interact ("sound", the server's default, or "harness",
BIRD-Interact's ex_base exactly). The request tests need no server; the last test plays an episode
with the option over real gRPC."""

from __future__ import annotations

import asyncio

import pytest

from avtgym.client import _reset_request
from avtgym.types import COMPARISONS, comparison_enum
from avtgym.v1 import episode_pb2 as epb


def test_names():
    # The names `avtgym eval --comparison` takes, in enum order.
    assert COMPARISONS == ("sound", "harness")


@pytest.mark.parametrize("arg, want", [
    (None, epb.COMPARISON_UNSPECIFIED),
    ("", epb.COMPARISON_UNSPECIFIED),
    ("sound", epb.COMPARISON_SOUND),
    ("harness", epb.COMPARISON_HARNESS),
    (" Harness ", epb.COMPARISON_HARNESS),
    ("COMPARISON_HARNESS", epb.COMPARISON_HARNESS),
    (epb.COMPARISON_SOUND, epb.COMPARISON_SOUND),
    (epb.COMPARISON_HARNESS, epb.COMPARISON_HARNESS),
])
def test_reset_request_carries_comparison(arg, want):
    req = _reset_request(task_id="t", comparison=arg)
    assert req.options.comparison == want
    assert comparison_enum(arg) == want
    # The option survives the wire format (a field the server reads, not a client-side note).
    again = type(req).FromString(req.SerializeToString())
    assert again.options.comparison == want


def test_unset_is_the_server_default():
    # Leaving it out sends UNSPECIFIED, which the server reads as SOUND: rollouts and training
    # keep the sound variant unless they ask.
    assert _reset_request(task_id="t").options.comparison == epb.COMPARISON_UNSPECIFIED
    assert not _reset_request(task_id="t").options.HasField("patience")


@pytest.mark.parametrize("bad", ["harnes", "bird-interact", "unspecified", "exact"])
def test_unknown_names_are_refused(bad):
    # A typo must not fall back to the default silently.
    with pytest.raises(ValueError, match="sound, harness"):
        _reset_request(task_id="t", comparison=bad)


def test_unknown_values_and_types_are_refused():
    with pytest.raises(ValueError):
        comparison_enum(7)
    with pytest.raises(TypeError):
        comparison_enum(True)
    with pytest.raises(TypeError):
        comparison_enum(1.0)


def test_other_options_unchanged():
    # The option joins the others without displacing them.
    req = _reset_request(task_id="t", protocol="bird-c", patience=5, comparison="harness")
    assert req.options.protocol == epb.PROTOCOL_BIRD_C
    assert req.options.patience == 5
    assert req.options.comparison == epb.COMPARISON_HARNESS


def test_server_accepts_comparison(client, addr):
    # Over real gRPC, sync and async: a reset with either comparison starts an episode (the demo's
    # records are not BIRD-Interact's, so the option changes no verdict there), and the episode
    # plays to its end.
    from avtgym import Action, AsyncClient

    task = "shop-001"
    for name in COMPARISONS:
        ep = client.reset(task_id=task, seed=1, comparison=name)
        res = client.step(ep, Action.stop())
        assert res.done and res.status == "terminated", (name, res.status)

    async def play():
        async with AsyncClient(addr) as ac:
            ep = await ac.reset(task_id=task, seed=2, comparison="harness")
            return await ac.step(ep, Action.stop())

    res = asyncio.run(play())
    assert res.done and res.status == "terminated"

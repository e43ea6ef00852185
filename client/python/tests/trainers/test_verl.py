"""verl adapter: AvtgymInteraction, AvtgymAgentLoop and compute_score, driven by verl 0.7.1's own
tool agent loop (a stand-in LLM server scripts the assistant turns; no GPU) and its reward manager."""

from __future__ import annotations

import asyncio
import json
import math
import os

import pytest

REASON = ("verl.interactions.base is not importable: install verl==0.7.1 (later PyPI releases, "
          "0.8.0 and 0.9.x, no longer ship verl.interactions) and cachetools")

QUESTION = "What do you mean by top customers?"
ASK = json.dumps({"type": "clarification", "question": QUESTION})
DONE = json.dumps({"type": "done"})


@pytest.fixture(scope="module")
def verl_mod():
    pytest.importorskip("verl.interactions.base", reason=REASON)
    pytest.importorskip("verl.experimental.agent_loop", reason=REASON)
    import avtgym.trainers.verl as m
    return m


def ask(q=QUESTION):
    return {"role": "assistant", "content": json.dumps({"type": "clarification", "question": q})}


def nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)


def test_interaction_episode(trainer_addr, verl_mod):
    from avtgym import AsyncClient
    from avtgym.trainers import DEFAULT_SYSTEM_PROMPT

    async def main():
        client = AsyncClient(trainer_addr)
        inter = verl_mod.AvtgymInteraction({"name": "avtgym", "client": client, "reset": {"reward": "question_f1"}})
        iid = await inter.start_interaction("req-1", name="avtgym", task_id="shop-001", seed=4)
        assert iid == "req-1" and inter.live_instances == 1
        ep = inter.episode(iid)
        msgs = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, {"role": "user", "content": ep.request}, ask()]
        stop, reply, score, meta = await inter.generate_response(iid, msgs, name="avtgym", task_id="shop-001", seed=4)
        assert (stop, score) == (False, None)  # no score before the end (verl records none)
        assert reply.startswith("I mean")  # the oracle's reply becomes verl's user turn (response_mask 0)
        assert meta["questions_asked"] == 1
        msgs += [{"role": "user", "content": reply}, {"role": "assistant", "content": DONE}]
        stop, reply, score, meta = await inter.generate_response(iid, msgs)
        assert stop and score == 1.0 and meta["status"] == "terminated" and not meta["dropped"]
        assert meta["reward_components"]["question_f1"] == 1.0
        # finished: the episode (token, task view, history) is freed, the summary kept
        assert inter.live_instances == 0 and len(inter) == 1
        with pytest.raises(KeyError):
            inter.episode(iid)
        assert await inter.calculate_score(iid) == 1.0
        assert await inter.generate_response(iid, msgs) == (True, verl_mod.DONE_TEXT, 1.0, meta)
        await inter.finalize_interaction(iid)
        assert len(inter) == 0 and nan(await inter.calculate_score(iid))

        # malformed output: STOP by default (scored); "retry" sends one corrective notice first
        iid = await inter.start_interaction(None, task_id="shop-001")
        stop, _, score, meta = await inter.generate_response(iid, [{"role": "assistant", "content": "hmm"}])
        assert stop and score == 0.0 and meta["malformed"] == 1 and meta["questions_asked"] == 0
        retry = verl_mod.AvtgymInteraction({"client": client, "on_malformed": "retry"})
        iid = await retry.start_interaction("r2", task_id="shop-001")
        stop, reply, score, _ = await retry.generate_response(iid, [{"role": "assistant", "content": "hmm"}])
        assert not stop and score is None and "not a valid action" in reply
        stop, _, _, meta = await retry.generate_response(iid, [{"role": "assistant", "content": "hmm"}])
        assert stop and meta["malformed"] == 2

        # an unknown task: the reset fails, the trajectory is dropped (NaN), never a crash or a 0.0
        iid = await inter.start_interaction("bad", task_id="no-such-task")
        stop, _, score, meta = await inter.generate_response(iid, [ask()])
        assert stop and nan(score) and meta["dropped"] and "UNKNOWN_TASK" in meta["error"]
        await client.close()

    asyncio.run(main())


def test_error_episode_is_dropped_and_freed(error_addr, verl_mod):
    """ERROR (the LLM oracle's endpoint is down): final score NaN, not 0.0; the state is freed;
    compute_score reports it dropped."""

    async def main():
        inter = verl_mod.AvtgymInteraction({"target": error_addr})
        iid = await inter.start_interaction("e1", task_id="shop-001", oracle="llm")
        stop, reply, score, meta = await inter.generate_response(iid, [ask()])
        assert stop and nan(score) and meta["status"] == "error" and meta["dropped"]
        assert "cannot be scored" in reply
        assert inter.live_instances == 0
        assert nan(await inter.calculate_score(iid))

    asyncio.run(main())
    assert verl_mod.compute_score("avtgym", "", "", {"turn_scores": [float("nan")]}) == \
        {"score": 0.0, "avtgym_dropped": 1.0}
    assert verl_mod.compute_score("avtgym", "", "", {"turn_scores": []})["avtgym_dropped"] == 1.0
    assert verl_mod.compute_score("avtgym", "", "", {"turn_scores": [0.5]}) == {"score": 0.5, "avtgym_dropped": 0.0}


def test_state_is_bounded(trainer_addr, verl_mod):
    """Without finalize_interaction: least-recently-used eviction past max_instances, and eviction
    of instances idle past state_ttl."""
    now = [1000.0]

    async def main():
        inter = verl_mod.AvtgymInteraction({"target": trainer_addr, "max_instances": 3, "state_ttl": 60,
                                             "clock": lambda: now[0]})
        for i in range(5):
            await inter.start_interaction(f"r{i}", task_id="shop-001", seed=i)
            now[0] += 1
        assert len(inter) == 3 and sorted(inter._instances) == ["r2", "r3", "r4"]
        stop, _, score, meta = await inter.generate_response("r0", [ask()])  # evicted: dropped, no crash
        assert stop and nan(score) and meta["dropped"]
        stop, _, score, _ = await inter.generate_response("r2", [ask()])  # r2 is now the most recent
        assert not stop and score is None
        now[0] += 30
        await inter.start_interaction("r5", task_id="shop-001")  # evicts r3, the least recently used
        assert sorted(inter._instances) == ["r2", "r4", "r5"]
        now[0] += 61  # everything idle past state_ttl
        await inter.start_interaction("r6", task_id="shop-001")
        assert sorted(inter._instances) == ["r6"]

    asyncio.run(main())


# verl's own agent loop ----------------------------------------------------------------------


class ScriptedServer:
    """Stands in for verl's AsyncLLMServerManager: the assistant turns, as token ids."""

    def __init__(self, tokenizer, turns):
        self.tok, self.turns, self.calls = tokenizer, turns, {}

    async def generate(self, request_id, prompt_ids, sampling_params, image_data=None, video_data=None):
        from verl.workers.rollout.replica import TokenOutput

        i = self.calls.get(request_id, 0)
        self.calls[request_id] = i + 1
        text = self.turns[min(i, len(self.turns) - 1)] + self.tok.eos_token
        return TokenOutput(token_ids=self.tok(text, add_special_tokens=False)["input_ids"])


def verl_config(overrides):
    """verl's PPO config as `python -m verl.trainer.main_ppo $(overrides)` composes it: Hydra,
    verl's own trainer/config/ppo_trainer.yaml, the overrides checked against it (struct mode)."""
    import verl
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.join(os.path.dirname(verl.__file__), "trainer/config"),
                               version_base=None):
        return compose(config_name="ppo_trainer", overrides=list(overrides))


async def run_trajectory(cfg, tokenizer, turns, row):
    """What verl's AgentLoopWorker._run_agent_loop does for one sample: instantiate the row's
    agent loop from the registry (our YAML) and run it."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap

    configs = OmegaConf.load(cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    agent_cfg = next(c for c in configs if c.name == row["agent_name"])
    loop = hydra.utils.instantiate(config=agent_cfg, trainer_config=DictConfigWrap(config=cfg),
                                   server_manager=ScriptedServer(tokenizer, turns), tokenizer=tokenizer,
                                   processor=None, dataset_cls=None, data_config=DictConfigWrap(cfg.data))
    out = await loop.run({}, raw_prompt=row["prompt"], extra_info=row["extra_info"])
    return loop, out


def split(tokenizer, out):
    ids, mask = out.response_ids, out.response_mask
    return (tokenizer.decode([t for t, m in zip(ids, mask) if m == 1]),
            tokenizer.decode([t for t, m in zip(ids, mask) if m == 0]))


def row_for(addr, verl_mod, **reset):
    from avtgym import Client

    with Client(addr) as c:
        return verl_mod.verl_row(c.reset(**reset), **reset)


def test_agent_loop_episode(trainer_addr, tokenizer, tmp_path, verl_mod):
    """verl's tool agent loop + AvtgymAgentLoop: oracle text masked, final score in turn_scores,
    interaction state freed."""
    overrides = verl_mod.write_verl_configs(str(tmp_path), trainer_addr, reset={"reward": "question_f1"})
    cfg = verl_config(overrides + ["actor_rollout_ref.rollout.prompt_length=4096",
                                   "actor_rollout_ref.rollout.response_length=4096"])
    row = row_for(trainer_addr, verl_mod, task_id="shop-001", seed=3)

    async def main():
        loop, out = await run_trajectory(cfg, tokenizer, [ASK, DONE], row)
        assert isinstance(loop, verl_mod.AvtgymAgentLoop)
        policy, env = split(tokenizer, out)
        assert policy == ASK + "<|im_end|>" + DONE + "<|im_end|>"  # only the policy's tokens are trainable
        assert "I mean the five customers" in env and "I mean" not in policy
        assert out.extra_fields["turn_scores"] == [1.0]
        assert out.extra_fields["avtgym"]["status"] == "terminated"
        inter = loop.interaction_map["avtgym"]
        assert len(inter) == 0  # AvtgymAgentLoop finalized the request: nothing kept
        return out

    out = asyncio.run(main())
    score = asyncio.run(reward_through_verl(cfg, tokenizer, row, out))
    assert score == {"reward_score": 1.0, "reward_extra_info": {"score": 1.0, "avtgym_dropped": 0.0}}


def test_agent_loop_bird_c_episode(trainer_addr, tokenizer, tmp_path, verl_mod):
    """BIRD_C through verl's loop: protocol in the row's interaction_kwargs; a malformed turn is
    reported as unparsed; the follow-up's request after phase 1 is a user turn (response_mask 0);
    the final score is 0.7 + 0.3."""
    from avtgym import Action, Client
    from avtgym.trainers import BIRD_C_SYSTEM_PROMPT

    with Client(trainer_addr) as c:
        task = next(t.task_id for t in c.list_tasks() if t.subtasks == 2)
        ep = c.reset(task_id=task, protocol="bird-c", privileged=True)
        ref = ";\n".join(ep.privileged["reference_sql"])
        res = c.step(ep, Action.submit_sql(ref), privileged=True)
        fu_ref, follow_up = ";\n".join(res.privileged["follow_up_reference_sql"]), res.new_turns[-1].text
    overrides = verl_mod.write_verl_configs(str(tmp_path), trainer_addr)
    cfg = verl_config(overrides + ["actor_rollout_ref.rollout.prompt_length=8192",
                                   "actor_rollout_ref.rollout.response_length=8192"])
    row = row_for(trainer_addr, verl_mod, task_id=task, seed=3, protocol="bird-c")
    assert row["extra_info"]["interaction_kwargs"]["protocol"] == "bird-c"
    assert row["prompt"][0] == {"role": "system", "content": BIRD_C_SYSTEM_PROMPT}
    turns = ["hmm", json.dumps({"type": "sql", "sql": ref}), json.dumps({"type": "sql", "sql": fu_ref})]

    async def main():
        loop, out = await run_trajectory(cfg, tokenizer, turns, row)
        policy, env = split(tokenizer, out)
        assert policy == "".join(t + "<|im_end|>" for t in turns)
        assert follow_up in env and "this turn is spent" in env
        assert out.extra_fields["turn_scores"] == [pytest.approx(1.0)]
        assert out.extra_fields["avtgym"]["subtask"] == 2 and out.extra_fields["avtgym"]["malformed"] == 1
        return out

    asyncio.run(main())


def test_agent_loop_tide_p_episode(trainer_addr, tokenizer, tmp_path, verl_mod):
    """TIDE_P through verl's loop: the pre-filled question is an assistant message of the prompt
    (never in the response, never trainable); the drift turn after the first SQL is a user turn
    (response_mask 0); the final score is TIDE's DEA, 1."""
    from avtgym import Client
    from avtgym.chat import chat_system_prompt
    from avtgym.trainers import TIDE_SYSTEM_PROMPT

    with Client(trainer_addr) as c:
        task = next(t.task_id for t in c.list_tasks(privileged=True) if t.sample_type == "joint")
        ep = c.reset(task_id=task, protocol="tide-p", privileged=True)
    prefilled, drift = ep.turns[1].text, ep.tide.drift_utterance
    turns = [json.dumps({"type": "sql", "sql": ";\n".join(ep.privileged["reference_sql"])}),
             json.dumps({"type": "sql", "sql": ";\n".join(ep.tide.post_drift_reference_sql)})]
    overrides = verl_mod.write_verl_configs(str(tmp_path), trainer_addr)
    cfg = verl_config(overrides + ["actor_rollout_ref.rollout.prompt_length=8192",
                                   "actor_rollout_ref.rollout.response_length=8192"])
    row = row_for(trainer_addr, verl_mod, task_id=task, seed=3, protocol="tide-p")
    assert row["extra_info"]["interaction_kwargs"]["protocol"] == "tide-p"
    # TIDE-Bench's Figure 8 prompt with the task's schema filled in: the shared prompt's
    assert row["prompt"][0] == {"role": "system", "content": chat_system_prompt("tide-p", ep.task)}
    assert row["prompt"][0]["content"] != TIDE_SYSTEM_PROMPT
    assert [m["role"] for m in row["prompt"]] == ["system", "user", "assistant", "user"]
    assert prefilled in row["prompt"][2]["content"]

    async def main():
        loop, out = await run_trajectory(cfg, tokenizer, turns, row)
        policy, env = split(tokenizer, out)
        assert policy == "".join(t + "<|im_end|>" for t in turns)
        assert drift in env and drift not in policy and prefilled not in policy + env
        assert out.extra_fields["turn_scores"] == [1.0]
        assert out.extra_fields["avtgym"]["subtask"] == 2
        assert out.extra_fields["avtgym"]["reward_components"]["l1_identified"] == 0.0
        return out

    asyncio.run(main())


def test_agent_loop_error_episode_is_dropped(error_addr, tokenizer, tmp_path, verl_mod):
    """An ERROR episode through verl's loop: NaN final score, response_mask all 0 (no gradient),
    compute_score reports it dropped, state freed."""
    overrides = verl_mod.write_verl_configs(str(tmp_path), error_addr)
    cfg = verl_config(overrides + ["actor_rollout_ref.rollout.prompt_length=4096",
                                   "actor_rollout_ref.rollout.response_length=4096"])
    row = row_for(error_addr, verl_mod, task_id="shop-001", seed=3, oracle="llm")
    assert row["extra_info"]["interaction_kwargs"]["oracle"] == "llm"

    async def main():
        loop, out = await run_trajectory(cfg, tokenizer, [ASK, DONE], row)
        scores = out.extra_fields["turn_scores"]
        assert len(scores) == 1 and nan(scores[0])
        assert set(out.response_mask) == {0} and len(out.response_mask) > 0
        assert out.extra_fields["avtgym"]["dropped"] and out.extra_fields["avtgym"]["status"] == "error"
        assert len(loop.interaction_map["avtgym"]) == 0
        return out

    out = asyncio.run(main())
    score = asyncio.run(reward_through_verl(cfg, tokenizer, row, out))
    assert score["reward_extra_info"] == {"score": 0.0, "avtgym_dropped": 1.0}


def test_agent_loop_cut_short_is_stopped_and_scored(trainer_addr, tokenizer, tmp_path, verl_mod):
    """verl ends the trajectory (max_assistant_turns) before the policy stops: AvtgymAgentLoop
    stops the episode and scores it, as the TRL adapter does at its length cap."""
    overrides = verl_mod.write_verl_configs(str(tmp_path), trainer_addr)
    cfg = verl_config(overrides + ["actor_rollout_ref.rollout.prompt_length=4096",
                                   "actor_rollout_ref.rollout.response_length=4096",
                                   "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2"])
    row = row_for(trainer_addr, verl_mod, task_id="shop-001", seed=5)

    async def main():
        loop, out = await run_trajectory(cfg, tokenizer, [ASK, ASK, ASK], row)
        assert out.extra_fields["turn_scores"] == [1.0]  # one question answered, then STOP: F1 1.0
        assert out.extra_fields["avtgym"]["questions_asked"] == 1
        assert 1 in out.response_mask
        assert len(loop.interaction_map["avtgym"]) == 0

    asyncio.run(main())


async def reward_through_verl(cfg, tokenizer, row, out):
    """Score one agent-loop output with verl's reward loop pieces: the custom reward function
    loaded from reward.custom_reward_function (pkg://avtgym.trainers.verl) and verl's naive
    reward manager, with the extra_info the agent loop hands it (tool_extra_fields)."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager
    from verl.trainer.ppo.reward import get_custom_reward_fn

    fn = get_custom_reward_fn(cfg)
    assert fn is not None
    resp = torch.tensor([out.response_ids])
    prompt = torch.tensor([out.prompt_ids])
    batch = TensorDict({"prompts": prompt, "responses": resp,
                        "attention_mask": torch.ones(1, prompt.shape[1] + resp.shape[1], dtype=torch.long),
                        "input_ids": torch.cat([prompt, resp], dim=1)}, batch_size=1)
    non_tensor = {"data_source": np.array([row["data_source"]]), "reward_model": np.array([row["reward_model"]]),
                  "extra_info": np.array([dict(row["extra_info"])]),
                  "__num_turns__": np.array([out.num_turns]),
                  "tool_extra_fields": np.array([out.extra_fields], dtype=object)}
    manager = NaiveRewardManager(cfg, tokenizer, fn)
    return await manager.run_single(DataProto(batch=batch, non_tensor_batch=non_tensor))


def test_loaded_by_verl_registry(tmp_path, trainer_addr, verl_mod):
    from verl.interactions.base import BaseInteraction
    from verl.interactions.utils.interaction_registry import initialize_interactions_from_config

    overrides = verl_mod.write_verl_configs(str(tmp_path), trainer_addr, reset={"reward": "question_f1"},
                                            state_ttl=120)
    path = next(o.split("=", 1)[1] for o in overrides if "interaction_config_path" in o)
    driver = ["algorithm.adv_estimator=avtgym_grpo",
              "++ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=avtgym.trainers.verl"]
    assert overrides[-2:] == driver
    plain = verl_mod.write_verl_configs(str(tmp_path / "plain"), trainer_addr, adv_estimator=None)
    assert not set(driver) & set(plain) and len(plain) == len(overrides) - 2
    m = initialize_interactions_from_config(path)
    inter = m["avtgym"]
    assert isinstance(inter, BaseInteraction) and inter.target == trainer_addr and inter.state_ttl == 120

    async def main():
        iid = await inter.start_interaction("x", task_id="shop-001")
        await inter.generate_response(iid, [ask()])
        stop, reply, score, _ = await inter.generate_response(iid, [{"role": "assistant", "content": "STOP"}])
        assert stop and score == 1.0

    asyncio.run(main())


def test_verl_row(trainer_addr, verl_mod):
    from avtgym import Client

    with Client(trainer_addr) as c:
        ep = c.reset(task_id="shop-001", seed=9)
    row = verl_mod.verl_row(ep, task_id="shop-001", seed=9)
    assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] == "user"
    assert row["extra_info"]["interaction_kwargs"] == {"name": "avtgym", "task_id": "shop-001", "seed": 9}
    assert row["agent_name"] == "avtgym_agent" and row["reward_model"]["ground_truth"] == ep.episode_id


# dropped samples and GRPO group statistics ---------------------------------------------------


def grpo_expected(scores, norm=True, eps=1e-6):
    """GRPO outcome advantages of one group, computed here without verl: (r - mean) / (std + eps)
    with the sample std (n - 1), as verl's compute_grpo_outcome_advantage."""
    import statistics

    mean = statistics.fmean(scores)
    std = statistics.stdev(scores)
    return [(r - mean) / (std + eps) if norm else r - mean for r in scores]


def advantage_batch(samples):
    """A padded batch as verl's agent loop hands it to the trainer: per sample (uid, response_mask,
    score), the score at the response's last token (token_level_rewards), uid the GRPO group."""
    import numpy as np
    import torch
    from tensordict import TensorDict
    from verl import DataProto

    width = max(len(mask) for _, mask, _ in samples)
    mask = torch.zeros(len(samples), width, dtype=torch.long)
    rewards = torch.zeros(len(samples), width)
    for i, (_, m, score) in enumerate(samples):
        mask[i, :len(m)] = torch.tensor(m)
        rewards[i, len(m) - 1] = score
    return DataProto(batch=TensorDict({"response_mask": mask, "token_level_rewards": rewards}, batch_size=len(samples)),
                     non_tensor_batch={"uid": np.array([uid for uid, _, _ in samples], dtype=object)})


def driver_advantages(cfg, samples, adv_estimator=None):
    """verl's driver step: ray_trainer.compute_advantage with the arguments RayPPOTrainer.fit
    passes. Returns (per-sample advantage: the value on its first trainable token, or 0.0; the
    advantages tensor; the response_mask)."""
    from verl.trainer.ppo.ray_trainer import compute_advantage

    data = compute_advantage(advantage_batch(samples),
                             adv_estimator=adv_estimator or cfg.algorithm.adv_estimator,
                             gamma=cfg.algorithm.gamma, lam=cfg.algorithm.lam,
                             num_repeat=cfg.actor_rollout_ref.rollout.n,
                             norm_adv_by_std_in_grpo=cfg.algorithm.get("norm_adv_by_std_in_grpo", True),
                             config=cfg.algorithm)
    adv, mask = data.batch["advantages"], data.batch["response_mask"]
    per_sample = [float(adv[i][mask[i].bool()][0]) if mask[i].any() else 0.0 for i in range(len(samples))]
    return per_sample, adv, mask


def test_grpo_group_leaves_out_dropped_episode(trainer_addr, error_addr, tokenizer, tmp_path, verl_mod):
    """One GRPO group (one uid, rollout.n=4) of three scored episodes and one ERROR episode, each
    run through verl's agent loop and scored by verl's reward manager, then verl's driver-side
    compute_advantage with the written overrides (algorithm.adv_estimator=avtgym_grpo): the dropped
    sample has advantage 0 and no trainable token, the others get GRPO over the three kept
    scores alone. verl's stock grpo, with the dropped sample's placeholder 0.0 in the group,
    gives the kept samples other advantages."""
    extra = ["actor_rollout_ref.rollout.prompt_length=4096", "actor_rollout_ref.rollout.response_length=4096",
             "actor_rollout_ref.rollout.n=4"]
    ok_cfg = verl_config(verl_mod.write_verl_configs(str(tmp_path / "ok"), trainer_addr,
                                                     reset={"reward": "question_f1"}) + extra)
    err_cfg = verl_config(verl_mod.write_verl_configs(str(tmp_path / "err"), error_addr) + extra)
    assert ok_cfg.algorithm.adv_estimator == "avtgym_grpo"
    ok_row = row_for(trainer_addr, verl_mod, task_id="shop-001", seed=3)
    err_row = row_for(error_addr, verl_mod, task_id="shop-001", seed=3, oracle="llm")
    other = json.dumps({"type": "clarification", "question": "Which year?"})
    scripts = [[ASK, DONE], [DONE], [ASK, other, DONE]]  # question F1: 1.0, 0.0, 2/3

    async def main():
        outs = [await run_trajectory(ok_cfg, tokenizer, turns, ok_row) for turns in scripts]
        outs.append(await run_trajectory(err_cfg, tokenizer, [ASK, DONE], err_row))
        return [out for _, out in outs]

    outs = asyncio.run(main())
    rows = [ok_row] * 3 + [err_row]
    rewards = [asyncio.run(reward_through_verl(ok_cfg, tokenizer, row, out)) for row, out in zip(rows, outs)]
    scores = [r["reward_score"] for r in rewards]
    assert [r["reward_extra_info"]["avtgym_dropped"] for r in rewards] == [0.0, 0.0, 0.0, 1.0]
    assert scores[:3] == pytest.approx([1.0, 0.0, 2 / 3]) and scores[3] == 0.0  # 0.0: the placeholder
    assert set(outs[3].response_mask) == {0}

    samples = [("group-1", list(out.response_mask), score) for out, score in zip(outs, scores)]
    adv, adv_tensor, mask = driver_advantages(ok_cfg, samples)
    # (a) the dropped sample: advantage 0 on every token, no trainable token
    assert not mask[3].any() and not adv_tensor[3].any()
    # (b) the others: GRPO over the kept scores alone, on each trainable token and 0 elsewhere
    expected = grpo_expected(scores[:3])
    assert adv[:3] == pytest.approx(expected, abs=1e-5) and adv[3] == 0.0
    for i in range(3):
        assert adv_tensor[i][mask[i].bool()].tolist() == pytest.approx([expected[i]] * int(mask[i].sum()), abs=1e-5)
        assert not adv_tensor[i][~mask[i].bool()].any()
    # verl's stock grpo: the placeholder 0.0 enters the group's mean and std
    stock, _, _ = driver_advantages(ok_cfg, samples, adv_estimator="grpo")
    assert stock[:3] == pytest.approx(grpo_expected(scores)[:3], abs=1e-5)
    assert all(abs(a - b) > 0.1 for a, b in zip(adv[:3], stock[:3]))
    print(f"\nscores {[round(x, 4) for x in scores]}; avtgym_grpo {[round(x, 4) for x in adv]}; "
          f"grpo {[round(x, 4) for x in stock]}")


def test_avtgym_grpo_estimator_cases(verl_mod):
    """The estimator alone, through verl's compute_advantage: equal to verl's grpo when nothing is
    dropped (a singleton group included: verl's convention, the score itself); a group left with
    fewer than 2 kept samples, or none, gets 0; Dr.GRPO (norm_adv_by_std_in_grpo=False) too."""
    import random

    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    assert get_adv_estimator_fn("avtgym_grpo") is verl_mod.compute_avtgym_grpo_advantage
    rng = random.Random(7)
    on, off = [1] * 5, [0] * 5
    clean = [(g, on[:rng.randint(1, 5)], round(rng.random(), 3)) for g in ("a", "a", "a", "a", "b")]
    mixed = [("c", on, 0.9), ("c", off, 0.0), ("c", off, 0.0),  # one kept of three: 0
             ("d", off, 0.0), ("d", off, 0.0),  # none kept
             ("e", off, 0.0),  # a dropped singleton
             ("f", on, 0.2), ("f", off, 0.0), ("f", on, 0.8), ("f", on[:2], 0.5)]
    for norm in (True, False):
        cfg = OmegaConf.create({"algorithm": {"adv_estimator": "avtgym_grpo", "gamma": 1.0, "lam": 1.0,
                                              "norm_adv_by_std_in_grpo": norm},
                                "actor_rollout_ref": {"rollout": {"n": 4}}})
        ours, _, _ = driver_advantages(cfg, clean + mixed)
        stock, _, _ = driver_advantages(cfg, clean, adv_estimator="grpo")
        assert ours[:5] == pytest.approx(stock, abs=1e-6)
        assert ours[4] == pytest.approx(clean[4][2] / (1 + 1e-6) if norm else clean[4][2])  # singleton
        assert ours[5:11] == [0.0] * 6
        f = grpo_expected([0.2, 0.8, 0.5], norm=norm)
        assert ours[11:] == pytest.approx([f[0], 0.0, f[1], f[2]], abs=1e-5)


def test_estimator_registered_in_verl_driver(tmp_path, trainer_addr, verl_mod):
    """verl computes advantages in its driver: the TaskRunner Ray actor that
    verl.trainer.main_ppo.run_ppo starts, which imports neither the reward function nor the agent
    loop. run_ppo with the written overrides (its own ray.init, runtime_env included) and a stand-in
    TaskRunner: in that fresh process `import verl` imports avtgym.trainers.verl
    (VERL_USE_EXTERNAL_MODULES) and verl's compute_advantage finds avtgym_grpo."""
    import ray
    from verl.trainer.main_ppo import run_ppo

    if ray.is_initialized():
        pytest.skip("Ray is already initialized in this process; run_ppo would not apply runtime_env")
    assert "VERL_USE_EXTERNAL_MODULES" not in os.environ  # only the runtime_env can carry it
    ray_init = ["ray_kwargs.ray_init.num_cpus=1", "++ray_kwargs.ray_init.include_dashboard=False"]
    cfg = verl_config(verl_mod.write_verl_configs(str(tmp_path), trainer_addr) + ray_init)
    out = str(tmp_path / "probe.json")

    class Probe:  # defined here: Ray pickles it by value, importing nothing of avtgym
        def run(self, config):
            import json
            import os
            import sys

            import numpy as np
            import torch
            from tensordict import TensorDict

            before = "avtgym.trainers.verl" in sys.modules
            from verl import DataProto
            from verl.trainer.ppo.ray_trainer import compute_advantage

            # one group: scores 1.0 and 0.0 kept, the third sample dropped (mask all 0)
            mask = torch.tensor([[1, 1], [1, 0], [0, 0]])
            rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
            data = DataProto(batch=TensorDict({"response_mask": mask, "token_level_rewards": rewards}, batch_size=3),
                             non_tensor_batch={"uid": np.array(["g", "g", "g"], dtype=object)})
            data = compute_advantage(data, adv_estimator=config.algorithm.adv_estimator, config=config.algorithm,
                                     num_repeat=3)
            with open(out, "w") as f:
                json.dump({"pid": os.getpid(), "env": os.environ.get("VERL_USE_EXTERNAL_MODULES"),
                           "imported_before_verl": before, "imported": "avtgym.trainers.verl" in sys.modules,
                           "advantages": data.batch["advantages"].tolist()}, f)

    try:
        run_ppo(cfg, task_runner_class=ray.remote(num_cpus=1)(Probe))
    finally:
        ray.shutdown()
    with open(out) as f:
        got = json.load(f)
    assert got["pid"] != os.getpid() and got["env"] == "avtgym.trainers.verl"
    assert not got["imported_before_verl"] and got["imported"]
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # kept scores 1.0 and 0.0: mean 0.5, std sqrt(0.5)
    assert sum(got["advantages"], []) == pytest.approx([a, a, -a, 0.0, 0.0, 0.0], abs=1e-5)

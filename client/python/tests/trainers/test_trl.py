"""TRL adapter: multi-turn rollouts against the real server; oracle text never in the loss mask."""

from __future__ import annotations

import json

import pytest

from avtgym.trainers.trl import (
    AvtgymRollout,
    AvtgymSQLToolEnv,
    AvtgymToolEnv,
    TransformersGenerate,
    VLLMServerGenerate,
    avtgym_reward,
    build_dataset,
    default_generate_fn,
    reset_spec,
    task_prompt,
)

QUESTION = "What do you mean by top customers?"


def scripted(tokenizer, turns):
    """A generate_fn that plays fixed assistant texts (one per turn) for every episode."""
    calls = {"n": 0}

    def gen(prompt_ids, max_new_tokens):
        assert max_new_tokens >= 1
        i = calls["n"]
        calls["n"] += 1
        text = turns[min(i, len(turns) - 1)] + tokenizer.eos_token
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return [list(ids) for _ in prompt_ids], None

    return gen


def spans(ids, mask, value):
    return [t for t, m in zip(ids, mask) if m == value]


def test_reset_spec_forms():
    assert reset_spec("shop-001") == {"task_id": "shop-001"}
    assert reset_spec([{"role": "user", "content": task_prompt(task_id="shop-002", seed=4)}]) == {
        "task_id": "shop-002", "seed": 4}
    with pytest.raises(ValueError):
        reset_spec('{"nope": 1}')
    assert build_dataset([{"task_id": "shop-001"}]) == [{"prompt": '{"task_id": "shop-001"}'}]


def test_rollout_masks_oracle_text(trainer_addr, tokenizer):
    turns = [json.dumps({"type": "clarification", "question": QUESTION}), json.dumps({"type": "done"})]
    ro = AvtgymRollout(trainer_addr)
    prompts = [task_prompt(task_id="shop-001", seed=11)] * 2 + [task_prompt(task_id="shop-002", seed=3)] * 2
    out = ro.rollout(prompts, tokenizer, scripted(tokenizer, turns), max_completion_length=4096)

    assert len(out["completion_ids"]) == len(prompts) == len(out["env_mask"]) == len(out["prompt_ids"])
    assert out["logprobs"] is None
    # GRPO groups: consecutive identical prompts share a reset group (seeds seed, seed+1).
    assert len(set(out["avtgym_episode_id"])) == 4
    for ids, mask, status in zip(out["completion_ids"], out["env_mask"], out["avtgym_status"]):
        assert len(ids) == len(mask)
        assert status in ("terminated", "truncated")
        policy = tokenizer.decode(spans(ids, mask, 1), skip_special_tokens=False)
        env = tokenizer.decode(spans(ids, mask, 0), skip_special_tokens=False)
        # exactly the policy's own generated tokens are trainable
        assert policy == turns[0] + "<|im_end|>" + turns[1] + "<|im_end|>"
        # the oracle's reply (and template glue) is present, but only as non-trainable context
        assert "<|im_start|>user" in env and env.endswith("<|im_start|>assistant\n")
        assert "I mean" not in policy
    # the reward is the episode's question-F1 and reaches the reward function unchanged
    rewards = avtgym_reward(prompts=prompts, completions=[""] * 4, avtgym_reward=out["avtgym_reward"])
    assert rewards[0] == rewards[1] == 1.0
    assert all(isinstance(r, float) for r in rewards)
    assert out["avtgym_questions"] == [1, 1, 1, 1]


def test_group_split_across_processes_stays_one_group(trainer_addr, tokenizer):
    """TRL spreads a group's copies over processes: each process's share of a seedless prompt gets
    the same derived seed (prompt + global step), hence the same task and interpretation."""
    p = task_prompt(split="train")
    ro = AvtgymRollout(trainer_addr)
    gen = scripted(tokenizer, ["STOP"])
    a = ro.rollout([p, p], tokenizer, gen, 64, seed_salt=7)  # "process 0"
    b = ro.rollout([p, p], tokenizer, gen, 64, seed_salt=7)  # "process 1", same step
    assert a["avtgym_episode_id"] == b["avtgym_episode_id"]
    ids = {ro.rollout([p], tokenizer, gen, 64, seed_salt=s)["avtgym_episode_id"][0] for s in range(8)}
    assert len(ids) > 1  # another step, another draw


def test_oracle_reply_tokens_are_masked(trainer_addr, tokenizer):
    from avtgym import Action, Client

    with Client(trainer_addr) as c:
        reply = c.step(c.reset(task_id="shop-001", seed=11), Action.ask(QUESTION)).new_turns[-1].text
    turns = [json.dumps({"type": "clarification", "question": QUESTION}), "STOP"]
    out = AvtgymRollout(trainer_addr).rollout([task_prompt(task_id="shop-001", seed=11)], tokenizer,
                                              scripted(tokenizer, turns))
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    text = tokenizer.decode(ids, skip_special_tokens=False)
    start = text.index(reply)
    # char tokenizer: token i is character i (special tokens aside), so map the reply's span
    pos, offsets = 0, []
    for t in ids:
        offsets.append(pos)
        pos += len(tokenizer.decode([t], skip_special_tokens=False))
    covered = [m for o, m in zip(offsets, mask) if start <= o < start + len(reply)]
    assert len(covered) == len(reply) and set(covered) == {0}


def test_malformed_output_stops_or_retries(trainer_addr, tokenizer):
    prompts = [task_prompt(task_id="shop-001", seed=1)]
    out = AvtgymRollout(trainer_addr).rollout(prompts, tokenizer, scripted(tokenizer, ["blah blah"]))
    assert out["avtgym_malformed"] == [1]
    assert out["avtgym_status"] == ["terminated"] and out["avtgym_questions"] == [0]
    assert set(out["env_mask"][0]) == {1}  # no environment text was added

    turns = ["blah", json.dumps({"type": "done"})]
    out = AvtgymRollout(trainer_addr, on_malformed="retry").rollout(prompts, tokenizer, scripted(tokenizer, turns))
    env = tokenizer.decode(spans(out["completion_ids"][0], out["env_mask"][0], 0))
    assert "not a valid action" in env and out["avtgym_malformed"] == [1]
    assert out["avtgym_status"] == ["terminated"]


def test_response_prefix_is_context_and_starts_each_turn(trainer_addr, tokenizer):
    # The model writes only the rest of the action; the prefix is in every turn's text (so the
    # action parses), never trainable, and last_episodes holds the episodes as they ended.
    prefix = '{"type": "'
    rest = ['clarification", "question": "' + QUESTION + '"}', 'done"}']
    prompts = [task_prompt(task_id="shop-001", seed=11)]
    ro = AvtgymRollout(trainer_addr, response_prefix=prefix)
    out = ro.rollout(prompts, tokenizer, scripted(tokenizer, rest), max_completion_length=4096)
    assert out["avtgym_malformed"] == [0] and out["avtgym_questions"] == [1]
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    policy = tokenizer.decode(spans(ids, mask, 1), skip_special_tokens=False)
    env = tokenizer.decode(spans(ids, mask, 0), skip_special_tokens=False)
    assert policy == rest[0] + "<|im_end|>" + rest[1] + "<|im_end|>"
    assert prefix not in policy and env.startswith(prefix) and env.count(prefix) == 2
    [ep] = ro.last_episodes
    assert ep.done and ep.questions_asked == 1 and ep.reward is not None
    asked = [t.text for t in ep.turns if t.role == "policy" and t.kind == "question"]
    assert asked == [QUESTION]


def bird_c_task(addr):
    """A demo task with a follow-up, its reference SQL and its follow-up's (privileged channel)."""
    from avtgym import Action, Client

    with Client(addr) as c:
        task = next(t.task_id for t in c.list_tasks() if t.subtasks == 2)
        ep = c.reset(task_id=task, protocol="bird-c", privileged=True)
        ref = ";\n".join(ep.privileged["reference_sql"])
        res = c.step(ep, Action.submit_sql(ref), privileged=True)
        return task, ref, ";\n".join(res.privileged["follow_up_reference_sql"]), res.new_turns[-1].text


def test_bird_c_rollout(trainer_addr, tokenizer):
    """protocol passes through to reset; malformed output is reported as unparsed (the server's
    notice spends a turn); the follow-up's request, released after phase 1, is appended as a user
    turn and never trainable; the reward is BIRD-Interact's (0.7 + 0.3)."""
    from avtgym.trainers import BIRD_C_SYSTEM_PROMPT

    task, ref, fu_ref, follow_up = bird_c_task(trainer_addr)
    turns = ["hmm", json.dumps({"type": "sql", "sql": ref}), json.dumps({"type": "sql", "sql": fu_ref})]
    prompts = [task_prompt(task_id=task, seed=1, protocol="bird-c", patience=3)]
    out = AvtgymRollout(trainer_addr).rollout(prompts, tokenizer, scripted(tokenizer, turns), max_completion_length=8192)
    assert out["avtgym_reward"] == [pytest.approx(1.0)] and out["avtgym_subtask"] == [2]
    assert out["avtgym_malformed"] == [1] and out["avtgym_status"] == ["terminated"]
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    policy = tokenizer.decode(spans(ids, mask, 1), skip_special_tokens=False)
    env = tokenizer.decode(spans(ids, mask, 0), skip_special_tokens=False)
    assert policy == "".join(t + "<|im_end|>" for t in turns)
    assert follow_up in env and "this turn is spent" in env and follow_up not in policy
    assert BIRD_C_SYSTEM_PROMPT in tokenizer.decode(out["prompt_ids"][0])

    # reset_kwargs carry the protocol too; an explicit on_malformed="stop" ends the episode (STOP)
    out = AvtgymRollout(trainer_addr, reset_kwargs={"protocol": "bird-c"}, on_malformed="stop").rollout(
        [task_prompt(task_id=task, seed=1)], tokenizer, scripted(tokenizer, ["hmm"]))
    assert out["avtgym_reward"] == [0.0] and out["avtgym_subtask"] == [1]
    with pytest.raises(ValueError):
        AvtgymRollout(trainer_addr, on_malformed="ignore")


def tide_joint_task(addr):
    """A TIDE joint sample's TIDE_P reset: (task, its pre-filled question, the reference SQL, the
    drift utterance, the post-drift reference SQL)."""
    from avtgym import Client

    with Client(addr) as c:
        task = next(t.task_id for t in c.list_tasks(privileged=True) if t.sample_type == "joint")
        ep = c.reset(task_id=task, protocol="tide-p", privileged=True)
    assert ep.turns[1].role == "prefilled"
    return (task, ep.turns[1].text, ";\n".join(ep.privileged["reference_sql"]), ep.tide.drift_utterance,
            ";\n".join(ep.tide.post_drift_reference_sql))


def test_tide_p_rollout(trainer_addr, tokenizer):
    """TIDE_P: the pre-filled question is in the prompt (never in the completion, never trainable);
    the drift turn after the first SQL is a user turn (env_mask 0); reward 1 (TIDE's DEA)."""
    from avtgym.trainers import TIDE_SYSTEM_PROMPT

    task, prefilled, ref, drift, post = tide_joint_task(trainer_addr)
    turns = [json.dumps({"type": "sql", "sql": ref}), json.dumps({"type": "sql", "content": post})]
    prompts = [task_prompt(task_id=task, seed=1, protocol="tide-p")]
    out = AvtgymRollout(trainer_addr).rollout(prompts, tokenizer, scripted(tokenizer, turns), max_completion_length=8192)
    assert out["avtgym_reward"] == [1.0] and out["avtgym_status"] == ["terminated"]
    assert out["avtgym_subtask"] == [2] and out["avtgym_questions"] == [0]
    prompt = tokenizer.decode(out["prompt_ids"][0], skip_special_tokens=False)
    # TIDE-Bench's prompt, filled in; the pre-filled question in TIDE's output protocol.
    assert TIDE_SYSTEM_PROMPT.split("{schema_ddl}")[0] in prompt and "{schema_ddl}" not in prompt
    assert "<|im_start|>assistant\n" + json.dumps({"type": "ask", "content": prefilled}) in prompt
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    policy = tokenizer.decode(spans(ids, mask, 1), skip_special_tokens=False)
    env = tokenizer.decode(spans(ids, mask, 0), skip_special_tokens=False)
    assert policy == "".join(t + "<|im_end|>" for t in turns)
    assert drift in env and drift not in policy and prefilled not in policy + env


def test_tide_sql_tool_env(trainer_addr):
    task, prefilled, ref, drift, post = tide_joint_task(trainer_addr)
    env = AvtgymSQLToolEnv(trainer_addr, protocol="tide-p")
    text = env.reset(task_id=task, seed=2)
    assert f"(You already asked: {prefilled})" in text and "20 turn(s)" in text
    assert env.submit_sql(ref) == drift
    assert "over" in env.submit_sql(post)
    assert env.get_reward() == 1.0


def test_ambitab_unparsed_option(trainer_addr, tokenizer):
    """on_malformed="unparsed" under AMBITAB: the server's notice, then STOP on the second."""
    out = AvtgymRollout(trainer_addr, on_malformed="unparsed").rollout(
        [task_prompt(task_id="shop-001", seed=1)], tokenizer, scripted(tokenizer, ["blah"]))
    env = tokenizer.decode(spans(out["completion_ids"][0], out["env_mask"][0], 0))
    assert "could not be read" in env and out["avtgym_malformed"] == [2]
    assert out["avtgym_status"] == ["terminated"] and out["avtgym_reward"] == [0.0]


def test_sql_tool_env(trainer_addr):
    pytest.importorskip("transformers")
    from transformers.utils import get_json_schema

    task, ref, fu_ref, follow_up = bird_c_task(trainer_addr)
    env = AvtgymSQLToolEnv(trainer_addr)
    assert "turn(s)" in env.reset(task_id=task, seed=2)
    assert env.submit_sql(ref) == "New request: " + follow_up
    assert "over" in env.submit_sql(fu_ref)
    assert env.get_reward() == pytest.approx(1.0)
    assert get_json_schema(env.submit_sql)["function"]["parameters"]["required"] == ["sql"]
    env.reset(task_id=task, seed=2, patience=0)
    assert env.get_reward() == 0.0  # never submitted: STOP at scoring time, sub-task 1 unsolved


def test_completion_budget_forces_stop(trainer_addr, tokenizer):
    long_q = json.dumps({"type": "clarification", "question": QUESTION})
    out = AvtgymRollout(trainer_addr).rollout([task_prompt(task_id="shop-001")], tokenizer,
                                              scripted(tokenizer, [long_q]), max_completion_length=60)
    assert len(out["completion_ids"][0]) <= 60
    assert out["avtgym_status"][0] in ("terminated", "truncated")
    assert out["avtgym_reward"][0] is not None


def test_bad_task_gives_none_reward(trainer_addr, tokenizer):
    out = AvtgymRollout(trainer_addr).rollout([task_prompt(task_id="no-such-task")], tokenizer,
                                              scripted(tokenizer, ["STOP"]))
    assert out["avtgym_reward"] == [None] and out["avtgym_error"][0]
    assert out["env_mask"] == [[0]]


def test_error_episode_is_dropped(error_addr, tokenizer):
    """An ERROR episode (the LLM oracle's endpoint is down) gets reward None: TRL drops it."""
    turns = [json.dumps({"type": "clarification", "question": QUESTION}), json.dumps({"type": "done"})]
    prompts = [task_prompt(task_id="shop-001", seed=1, oracle="llm"), task_prompt(task_id="shop-001", seed=2)]
    out = AvtgymRollout(error_addr).rollout(prompts, tokenizer, scripted(tokenizer, turns), max_completion_length=4096)
    assert out["avtgym_status"] == ["error", "terminated"]
    assert out["avtgym_reward"] == [None, 1.0]
    assert avtgym_reward(avtgym_reward=out["avtgym_reward"]) == [None, 1.0]
    assert out["avtgym_error"] == ["", ""]  # no call failed: the episode itself ended in ERROR
    assert set(out["env_mask"][0]) == {1}  # the episode ended at the question: nothing appended after it


def test_tool_env_error_gives_none(error_addr):
    env = AvtgymToolEnv(error_addr)
    env.reset(task_id="shop-001", oracle="llm")
    assert "cannot be scored" in env.ask_user(QUESTION)
    assert env.get_reward() is None
    env.reset(task_id="no-such-task")  # a failed reset does not crash the rollout
    with pytest.raises(ValueError):
        env.ask_user(QUESTION)
    assert env.get_reward() is None


def test_default_generate_fn_uses_public_config_only():
    from types import SimpleNamespace

    server = SimpleNamespace(args=SimpleNamespace(use_vllm=True, vllm_mode="server", vllm_server_base_url=None,
                                                  vllm_server_host="10.0.0.5", vllm_server_port=8123,
                                                  vllm_server_timeout=30.0, temperature=0.7, top_p=0.9, top_k=5,
                                                  min_p=None, repetition_penalty=1.1, generation_kwargs='{"seed": 1}'))
    g = default_generate_fn(server)
    assert isinstance(g, VLLMServerGenerate) and g.base_url == "http://10.0.0.5:8123"
    assert g.sampling == {"temperature": 0.7, "top_p": 0.9, "top_k": 5, "min_p": 0.0, "repetition_penalty": 1.1,
                          "seed": 1}
    colocate = SimpleNamespace(args=SimpleNamespace(use_vllm=True, vllm_mode="colocate"))
    with pytest.raises(ValueError, match="colocate"):
        default_generate_fn(colocate)
    assert isinstance(default_generate_fn(SimpleNamespace(args=SimpleNamespace(use_vllm=False))), TransformersGenerate)


def test_vllm_server_generate(trainer_addr, tokenizer):
    """VLLMServerGenerate against a stand-in for vLLM's OpenAI-compatible /v1/completions, then as
    the rollout's generate_fn: the server's logprobs are kept for the policy's tokens."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    seen = []
    answer = tokenizer('{"type": "done"}' + tokenizer.eos_token, add_special_tokens=False)["input_ids"]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            self._send({"data": [{"id": "policy"}]})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, req))
            ids = answer[: req["max_tokens"]]
            choices = [{"index": i, "token_ids": ids, "logprobs": {"token_logprobs": [-0.5] * len(ids)}}
                       for i in range(len(req["prompt"]))]
            self._send({"choices": choices[::-1]})  # out of order: the client sorts by index

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        gen = VLLMServerGenerate(f"http://127.0.0.1:{srv.server_port}/v1", temperature=0.5)
        comps, lps = gen([[1, 2], [3]], 4)
        assert comps == [answer[:4]] * 2 and lps == [[-0.5] * 4] * 2
        path, req = seen[0]
        assert path == "/v1/completions" and req["model"] == "policy" and req["prompt"] == [[1, 2], [3]]
        assert req["max_tokens"] == 4 and req["temperature"] == 0.5 and req["return_token_ids"] is True

        out = AvtgymRollout(trainer_addr).rollout([task_prompt(task_id="shop-001")], tokenizer, gen, 512)
        assert out["avtgym_status"] == ["terminated"] and out["avtgym_reward"] == [0.0]
        assert out["logprobs"] == [[-0.5] * len(answer)] and out["completion_ids"] == [answer]
    finally:
        srv.shutdown()


def test_tool_env(trainer_addr):
    pytest.importorskip("transformers")
    from transformers.utils import get_json_schema

    env = AvtgymToolEnv(trainer_addr, reward="question_f1")
    obs = env.reset(task_id="shop-001", seed=2, prompt="ignored column")
    assert "top 5 customers" in obs
    assert "I mean" in env.ask_user(QUESTION)
    assert "over" in env.finish_asking()
    assert env.get_reward() == 1.0
    # TRL renders tool schemas from the methods' signatures and docstrings
    assert get_json_schema(env.ask_user)["function"]["parameters"]["required"] == ["question"]
    get_json_schema(env.finish_asking)
    env.reset(task_id="shop-001", seed=2)
    assert env.get_reward() == 0.0  # never asked: STOP at scoring time, F1 0


def test_grpo_trainer_one_step(trainer_addr, tokenizer, tmp_path, monkeypatch):
    """A real GRPOTrainer step on CPU with a tiny random model: the rollout_func path, env_mask
    and the reward function are wired the way the installed TRL expects."""
    pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("trl", reason="trl is not installed")
    import torch
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")

    def private(*a, **k):
        raise AssertionError("the adapter called GRPOTrainer._generate_single_turn")

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", private)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    model = LlamaForCausalLM(cfg)

    seen = []
    turns = [json.dumps({"type": "clarification", "question": QUESTION}), json.dumps({"type": "done"})]

    class Recording(AvtgymRollout):
        def __call__(self, prompts, trainer):
            out = super().__call__(prompts, trainer)
            seen.append(out)
            return out

    # 1) the default generation (TransformersGenerate: the trainer's model, public API only):
    #    random text, malformed -> retry -> STOP
    # 2) a scripted policy through the same trainer: a real question, oracle reply masked
    for gen in (None, "scripted"):
        ro = Recording(trainer_addr, on_malformed="retry",
                       generate_fn=scripted(tokenizer, turns) if gen else None)
        args = GRPOConfig(output_dir=str(tmp_path / str(gen)), max_steps=1, per_device_train_batch_size=4,
                          num_generations=2, max_completion_length=96, learning_rate=1e-3, logging_steps=1,
                          report_to=[], use_cpu=True, bf16=False, save_strategy="no", seed=0)
        ds = Dataset.from_list(build_dataset([{"task_id": "shop-001", "seed": 1}, {"task_id": "shop-001", "seed": 2}] * 2))
        trainer = GRPOTrainer(model=model, reward_funcs=[avtgym_reward], args=args, train_dataset=ds,
                              processing_class=tokenizer, rollout_func=ro)
        result = trainer.train()
        assert result.global_step == 1
    assert len(seen) >= 2
    scripted_out = seen[-1]
    assert scripted_out["avtgym_reward"] == [1.0] * 4
    assert all(0 in m and 1 in m for m in scripted_out["env_mask"])
    assert all(r is not None for out in seen for r in out["avtgym_reward"])


def test_grpo_trainer_step_drops_error_episodes(error_addr, tokenizer, tmp_path, monkeypatch):
    """A real GRPOTrainer step where one GRPO group's episodes end in ERROR: their reward is None,
    TRL leaves them out of the baseline (advantage 0) and the step still runs."""
    pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("trl", reason="trl is not installed")
    import torch
    from datasets import Dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096,
                      pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    seen = []

    class Recording(AvtgymRollout):
        def __call__(self, prompts, trainer):
            out = super().__call__(prompts, trainer)
            seen.append(out)
            return out

    turns = [json.dumps({"type": "clarification", "question": QUESTION}), json.dumps({"type": "done"})]
    ro = Recording(error_addr, generate_fn=scripted(tokenizer, turns))
    args = GRPOConfig(output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=256, learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=True,
                      bf16=False, save_strategy="no", seed=0, shuffle_dataset=False)
    ds = Dataset.from_list(build_dataset([{"task_id": "shop-001", "seed": 1, "oracle": "llm"},
                                          {"task_id": "shop-001", "seed": 2}]))
    trainer = GRPOTrainer(model=LlamaForCausalLM(cfg), reward_funcs=[avtgym_reward], args=args, train_dataset=ds,
                          processing_class=tokenizer, rollout_func=ro)
    assert trainer.train().global_step == 1
    out = seen[-1]
    assert sorted(out["avtgym_status"]) == ["error", "error", "terminated", "terminated"]
    assert sorted(out["avtgym_reward"], key=lambda r: (r is not None, r)) == [None, None, 1.0, 1.0]


def test_rollout_tags_and_records(trainer_addr, tokenizer, tmp_path):
    """Every episode is reset with the run's tags plus the trainer step and group, and its record
    is appended to records_out (the one episode record, writer python)."""
    turns = [json.dumps({"type": "clarification", "question": QUESTION}), json.dumps({"type": "done"})]
    out_file = tmp_path / "train.jsonl"
    ro = AvtgymRollout(trainer_addr, tags={"run": "t-1"}, records_out=out_file)
    prompts = [task_prompt(task_id="shop-001")] * 2 + [task_prompt(task_id="shop-002")] * 2
    ro.rollout(prompts, tokenizer, scripted(tokenizer, turns), max_completion_length=4096, seed_salt=7)
    recs = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert len(recs) == 4 and all(r["schema"] == "avtgym.episode/1" and r["writer"] == "python" for r in recs)
    assert all(r["tags"]["run"] == "t-1" and r["tags"]["trainer/step"] == "7" for r in recs)
    groups = [r["tags"]["group"] for r in recs]
    assert groups[0] == groups[1] != groups[2] == groups[3]
    assert len({r["episode_uid"] for r in recs}) == 4

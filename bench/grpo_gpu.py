"""GRPO throughput of a Qwen2.5-3B-sized reasoning LM on one GPU, on the ``paper`` recipe's
arguments and precision route: optimizer steps per minute, and whether the weights move.

A random-initialised ``Qwen2ForCausalLM`` with Qwen2.5-3B's shape (hidden 2048, 36 layers, 16
heads, 2 KV heads, intermediate 11008, vocabulary 151936) is trained with TRL's ``GRPOTrainer``
on the arguments ``training/embodied_r_training/configs/paper.yaml`` gives (``grpo_kwargs``:
group size 8, 32
completions per optimizer step as 8 per micro-step x 4 accumulation steps, lr 5e-7, AdamW with
ms-swift's weight decay 0.1 / beta2 0.95, KL beta 0.001 so a frozen bf16 reference runs too,
full fine-tuning with activation checkpointing), loaded as the recipe loads it: fp32 master
weights, bf16 autocast (``training/embodied_r_training/rl/precision.py``). For the check the
learning rate is held at
5e-7 from the first step (no warmup). Prompts and completions are shorter than the paper's
6144 / 2048 tokens so that a few steps fit a short device slot; both are options. Random weights
never stop early, so every completion runs to its length limit (a worst case for generation).
The rewards are the core's format and accuracy rewards plus a dense length reward (random
models earn no format or accuracy reward, and a zero reward would skip the backward pass).
``--vllm colocate`` generates the rollouts with vLLM inside the trainer (needs vLLM 0.22-0.31
beside TRL 1.16; ``bench/gpu_check.py --vllm`` runs it where vLLM is installed).

After every optimizer step the fraction of sampled weights (the first 65,536 elements of every
parameter) that changed is recorded: the bound is >= 99 %; the exit status is 1 when a step
misses it.

Run on a GPU machine:  ``python bench/grpo_gpu.py [--steps 3] [--vllm colocate] [--json OUT]``
Tiny CPU mode (tests, and machines without CUDA): ``python bench/grpo_gpu.py --tiny``
``--dry-run`` builds and checks the trainer arguments only (no model, no device), importing
what the run imports.
Prints one JSON object: steps per minute over the timed steps (the first is warm-up). Bounds:
every step changes at least 99 % of the sampled weights, and at least
``--min-steps-per-minute`` (2.0 on the GPU, measured 2.4 on an H200; 0 in tiny mode) with
every step run; the script exits 1 when either is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from _figures import ROOT  # noqa: F401 - puts the project on the path where it is not installed
from transformers import Qwen2Config, Qwen2ForCausalLM, TrainerCallback

from embodied_r_ros.backends.tiny_models import build_tokenizer
from embodied_r_ros.core.reasoning import build_messages, format_question
from embodied_r_training.recipe import TrainConfig, load_train_config
from embodied_r_training.rewards import accuracy_reward, completion_text, format_reward
from embodied_r_training.rl.grpo import grpo_kwargs
from embodied_r_training.rl.policy import load_base, policy_precision

QWEN25_3B = {
    "hidden_size": 2048,
    "num_hidden_layers": 36,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "intermediate_size": 11008,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}
OPTIONS = ["A. left", "B. right", "C. up", "D. down"]
GPU_MIN_STEPS_PER_MINUTE = 2.0


def dense_length(completions: list[Any], **_: Any) -> list[float]:
    return [min(len(completion_text(c)), 4000) / 4000.0 for c in completions]


def synthetic_rows(tokenizer: Any, n: int, prompt_tokens: int) -> list[dict[str, Any]]:
    """Prompts of about ``prompt_tokens`` tokens in the shape of the dataset's rows."""
    line = "Frame {i}: After rotate left, about 30 degrees, Observe: a red box to the left. "
    rows = []
    for k in range(n):
        text = ""
        i = 0
        while len(tokenizer(text)["input_ids"]) < prompt_tokens:
            text += line.format(i=i)
            i += 1
        question = format_question(f"Which way did you turn in clip {k}?", OPTIONS)
        rows.append({
            "prompt": build_messages(f"Video content:\n<\n{text}\n>\n{question}"),
            "solution": "ABCD"[k % 4],
            "options": OPTIONS,
        })
    return rows


def build_model(tiny: bool, device: str, dtype: torch.dtype, vocab: int, tokenizer: Any,
                path: Path) -> int:
    """Save a random model of the requested shape to ``path``; returns its parameter count."""
    shape = dict(TINY, vocab_size=vocab) if tiny else QWEN25_3B
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    config = Qwen2Config(**shape, bos_token_id=None, eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"])
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM._from_config(config, dtype=dtype)
    n_params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
    return n_params


SAMPLE = 65536  # elements of each parameter watched for change
MIN_CHANGED = 0.99


class StepTimer(TrainerCallback):
    """Step times, and the fraction of sampled weights each optimizer step changed."""

    def __init__(self, model: Any) -> None:
        self.times: list[float] = []
        self.changed: list[float] = []
        self._start = 0.0
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._before: list[torch.Tensor] = []

    def _sample(self) -> list[torch.Tensor]:
        return [p.detach().reshape(-1)[:SAMPLE].clone() for p in self._params]

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
        self._before = self._sample()
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
        self.times.append(time.perf_counter() - self._start)
        after = self._sample()
        moved = sum(int((a != b).sum()) for a, b in zip(after, self._before, strict=True))
        self.changed.append(moved / sum(b.numel() for b in self._before))


def bench_config(args: argparse.Namespace, model_dir: Path) -> TrainConfig:
    """The paper recipe with the bench's model, lengths, steps and rollout engine."""
    return load_train_config("paper", {
        "policy": {"model": str(model_dir), "gradient_checkpointing": not args.tiny,
                   "dtype": "bfloat16"},
        "grpo": {
            "device": "cpu" if args.tiny else "cuda",
            "num_generations": args.num_generations,
            "completions_per_step": args.completions_per_step,
            "per_device_batch": args.per_device_batch,
            "max_completion_length": args.completion_tokens,
            "max_steps": args.steps,
            "warmup_ratio": 0.0,  # every step at the paper's 5e-7
            "lr_scheduler": "constant",
            "use_vllm": args.vllm == "colocate",
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": args.vllm_memory,
        },
        "rewards": {"stage_mode": "one_run"},
        "output": {"save_only_model": True, "tensorboard": False},
    })


def trainer_kwargs(args: argparse.Namespace, model_dir: Path, out: Path) -> dict[str, Any]:
    """GRPOConfig's arguments: the recipe's, with no saving, evaluation or warmup."""
    cfg = bench_config(args, model_dir)
    kwargs = grpo_kwargs(cfg, out, cfg.grpo.device)
    kwargs.update(save_strategy="no", eval_strategy="no", eval_steps=None, logging_steps=1,
                  report_to="none")
    if args.vllm == "colocate":
        kwargs["vllm_max_model_length"] = args.prompt_tokens + args.completion_tokens + 64
    return kwargs


def check_kwargs(kwargs: dict[str, Any]) -> list[str]:
    """Argument names GRPOConfig does not have (empty: it accepts them all). Imports what the
    run imports (the trainer, ``datasets``), so a missing package shows here too."""
    import dataclasses

    from datasets import Dataset  # noqa: F401 - imported as the run imports it
    from trl import GRPOConfig, GRPOTrainer  # noqa: F401

    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    return sorted(set(kwargs) - fields)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    device = "cpu" if args.tiny else "cuda"
    tokenizer = build_tokenizer()
    with tempfile.TemporaryDirectory(prefix="grpo-bench-") as tmp:
        t0 = time.perf_counter()
        n_params = build_model(args.tiny, device, torch.float32, len(tokenizer), tokenizer,
                               Path(tmp))
        build_s = time.perf_counter() - t0
        per_step_prompts = args.completions_per_step // args.num_generations
        rows = synthetic_rows(tokenizer, per_step_prompts * (args.steps + 1), args.prompt_tokens)
        cfg = bench_config(args, Path(tmp))
        precision = policy_precision(cfg, device)
        model, _ = load_base(cfg, device)  # fp32 master weights, as the recipe loads them
        config = GRPOConfig(**trainer_kwargs(args, Path(tmp), Path(tmp) / "run"))
        timer = StepTimer(model)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[format_reward, accuracy_reward, dense_length],
            args=config,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            callbacks=[timer],
        )
        trainer.train()
    timed = timer.times[1:] or timer.times
    steps_per_min = 60.0 / (sum(timed) / len(timed))
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history
               if "completions/mean_length" in h]
    return {
        "bench": "grpo_gpu",
        "mode": "tiny-cpu" if args.tiny else "qwen2.5-3b-shape",
        "rollouts": "vllm-colocate" if args.vllm == "colocate" else "trl-generate",
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "master_weights": precision.weights,
        "compute": precision.compute,
        "learning_rate": config.learning_rate,
        "parameters": n_params,
        "completions_per_step": args.completions_per_step,
        "num_generations": args.num_generations,
        "prompt_tokens": args.prompt_tokens,
        "max_completion_tokens": args.completion_tokens,
        "mean_completion_tokens": sum(lengths) / len(lengths) if lengths else None,
        "steps": len(timer.times),
        "step_seconds": [round(t, 2) for t in timer.times],
        "steps_per_minute": round(steps_per_min, 3),
        "completions_per_second": round(steps_per_min * args.completions_per_step / 60.0, 2),
        "weights_changed_per_step": [round(c, 5) for c in timer.changed],
        "model_build_seconds": round(build_s, 1),
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if device == "cuda" else None,
        "versions": {"torch": torch.__version__, "trl": __import__("trl").__version__},
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny random model on CPU (seconds)")
    p.add_argument("--dry-run", action="store_true",
                   help="build and check the trainer arguments only; print them")
    p.add_argument("--vllm", choices=("none", "colocate"), default="none",
                   help="rollouts by TRL's generate (none) or vLLM inside the trainer")
    p.add_argument("--vllm-memory", type=float, default=0.3,
                   help="vLLM's share of GPU memory in colocate mode")
    p.add_argument("--steps", type=int, default=None, help="optimizer steps (first = warm-up)")
    p.add_argument("--prompt-tokens", type=int, default=None)
    p.add_argument("--completion-tokens", type=int, default=None)
    p.add_argument("--completions-per-step", type=int, default=None)
    p.add_argument("--num-generations", type=int, default=None)
    p.add_argument("--per-device-batch", type=int, default=None)
    p.add_argument("--min-steps-per-minute", type=float, default=None,
                   help=f"bound, exit 1 below it (default {GPU_MIN_STEPS_PER_MINUTE}; tiny: 0)")
    p.add_argument("--json", type=Path, help="also write the result here")
    args = p.parse_args(argv)
    defaults = (
        {"steps": 2, "prompt_tokens": 64, "completion_tokens": 8, "completions_per_step": 4,
         "num_generations": 2, "per_device_batch": 4}
        if args.tiny else
        {"steps": 3, "prompt_tokens": 1024, "completion_tokens": 256, "completions_per_step": 32,
         "num_generations": 8, "per_device_batch": 8}
    )
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.dry_run:
        kwargs = trainer_kwargs(args, Path("MODEL_DIR"), Path("OUT"))
        unknown = check_kwargs(kwargs)
        result: dict[str, Any] = {"bench": "grpo_gpu", "dry_run": True, "unknown": unknown,
                                  "kwargs": kwargs}
        text = json.dumps(result, default=str)
        print(text)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(text + "\n")
        return 1 if unknown else 0
    if not args.tiny and not torch.cuda.is_available():
        print("grpo_gpu: no CUDA device, running the tiny CPU mode instead", file=sys.stderr)
        args = parse([*(argv or []), "--tiny"])
    bound = args.min_steps_per_minute
    if bound is None:
        bound = 0.0 if args.tiny else GPU_MIN_STEPS_PER_MINUTE
    result = run(args)
    changed_ok = all(c >= MIN_CHANGED for c in result["weights_changed_per_step"])
    speed_ok = result["steps"] == args.steps and result["steps_per_minute"] >= bound
    result["bound"] = {"weights_changed_per_step_min": MIN_CHANGED, "ok": changed_ok}
    result["min_steps_per_minute"] = bound
    result["bound_met"] = changed_ok and speed_ok
    text = json.dumps(result)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    if not changed_ok:
        print(f"grpo_gpu: a step changed fewer than {MIN_CHANGED:.0%} of the sampled weights",
              file=sys.stderr)
    if not speed_ok:
        print(f"grpo_gpu: bound missed: {result['steps']} of {args.steps} steps at "
              f"{result['steps_per_minute']} steps/min (bound {bound})", file=sys.stderr)
    return 0 if result["bound_met"] else 1


if __name__ == "__main__":
    sys.exit(main())

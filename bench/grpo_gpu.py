"""GRPO throughput of a Qwen2.5-3B-sized reasoning LM: optimizer steps per minute on one GPU.

A random-initialised ``Qwen2ForCausalLM`` with Qwen2.5-3B's shape (hidden 2048, 36 layers, 16
heads, 2 KV heads, intermediate 11008, vocabulary 151936) in bf16 is trained with TRL's
``GRPOTrainer`` at the paper's batch shape: group size 8, 32 completions per optimizer step
(8 per micro-step x 4 accumulation steps), KL beta 0.001 (so a reference copy runs too), full
fine-tuning with activation checkpointing. Prompts and completions are shorter than the paper's
6144 / 2048 tokens so that a few steps fit a short device slot; both are options. Random weights
never stop early, so every completion runs to its length limit (a worst case for generation).
The rewards are the core's format and accuracy rewards plus a dense length reward (random
models earn no format or accuracy reward, and a zero reward would skip the backward pass).

Run on a GPU machine:  ``python bench/grpo_gpu.py [--steps 4] [--json OUT.json]``
Tiny CPU mode (tests, and machines without CUDA): ``python bench/grpo_gpu.py --tiny``
Prints one JSON object: steps per minute over the timed steps (the first is warm-up). Bound:
at least ``--min-steps-per-minute`` (2.0 on the GPU, measured 2.4 on an H200; 0 in tiny mode)
with every step run; the script exits 1 when it is missed.
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
from transformers import Qwen2Config, Qwen2ForCausalLM, TrainerCallback

from embodied_r_ros.core.backends.offline import build_tokenizer
from embodied_r_ros.core.reasoning import build_messages, format_question
from embodied_r_ros.core.rewards import accuracy_reward, completion_text, format_reward

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


class StepTimer(TrainerCallback):
    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
        self._start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN201
        self.times.append(time.perf_counter() - self._start)


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


def run(args: argparse.Namespace) -> dict[str, Any]:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    device = "cpu" if args.tiny else "cuda"
    dtype = torch.float32 if args.tiny else torch.bfloat16
    tokenizer = build_tokenizer()
    with tempfile.TemporaryDirectory(prefix="grpo-bench-") as tmp:
        t0 = time.perf_counter()
        n_params = build_model(args.tiny, device, dtype, len(tokenizer), tokenizer, Path(tmp))
        build_s = time.perf_counter() - t0
        per_step_prompts = args.completions_per_step // args.num_generations
        rows = synthetic_rows(tokenizer, per_step_prompts * (args.steps + 1), args.prompt_tokens)
        config = GRPOConfig(
            output_dir=str(Path(tmp) / "run"),
            use_cpu=args.tiny,
            bf16=not args.tiny,
            learning_rate=5e-7,
            beta=0.001,
            temperature=1.0,
            loss_type="grpo",
            num_generations=args.num_generations,
            per_device_train_batch_size=args.per_device_batch,
            gradient_accumulation_steps=args.completions_per_step // args.per_device_batch,
            max_completion_length=args.completion_tokens,
            max_steps=args.steps,
            activation_checkpointing=not args.tiny,
            model_init_kwargs={"dtype": dtype},
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            seed=0,
        )
        timer = StepTimer()
        trainer = GRPOTrainer(
            model=tmp,
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
    result = {
        "bench": "grpo_gpu",
        "mode": "tiny-cpu" if args.tiny else "qwen2.5-3b-shape-bf16",
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
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
        "model_build_seconds": round(build_s, 1),
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 1)
        if device == "cuda" else None,
        "versions": {"torch": torch.__version__, "trl": __import__("trl").__version__},
    }
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="tiny random model on CPU (seconds)")
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
    if not args.tiny and not torch.cuda.is_available():
        print("grpo_gpu: no CUDA device, running the tiny CPU mode instead", file=sys.stderr)
        args.tiny = True
    defaults = (
        {"steps": 2, "prompt_tokens": 64, "completion_tokens": 8, "completions_per_step": 4,
         "num_generations": 2, "per_device_batch": 4}
        if args.tiny else
        {"steps": 4, "prompt_tokens": 1024, "completion_tokens": 256, "completions_per_step": 32,
         "num_generations": 8, "per_device_batch": 8}
    )
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    bound = args.min_steps_per_minute
    if bound is None:
        bound = 0.0 if args.tiny else GPU_MIN_STEPS_PER_MINUTE
    result = run(args)
    result["min_steps_per_minute"] = bound
    result["bound_met"] = result["steps"] == args.steps and result["steps_per_minute"] >= bound
    text = json.dumps(result)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    if not result["bound_met"]:
        print(f"grpo_gpu: bound missed: {result['steps']} of {args.steps} steps at "
              f"{result['steps_per_minute']} steps/min (bound {bound})", file=sys.stderr)
    return 0 if result["bound_met"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""GRPO training of the reasoning LM with TRL, exactly as Embodied-R does (digest §2-3).

The policy reads the perception text of a row and answers in ``<think>/<answer>`` form; three
binary rewards from the core (format, accuracy, logical consistency against a frozen reference
LM) are weighted by the paper's three-stage schedule, switched at epoch boundaries in one run.
Checkpoints keep the optimizer state, so a killed run resumes from the last one and continues
the same schedule (the stage is a function of the epoch). Per-reward means, completion length
and the consistency rate go to TensorBoard, and a PNG of the curves is drawn at the end.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from embodied_r_ros.core.backends.base import ChatBackend
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.prompts import PromptSet, prompts_from
from embodied_r_ros.core.rewards import (
    REFERENCE_MAX_NEW_TOKENS,
    REFERENCE_TEMPERATURE,
    REWARD_NAMES,
    ConsistencyReward,
    accuracy_reward,
    format_reward,
)

from .config import TrainConfig, device_name, world_size
from .dataset_files import load_rows
from .policy import load_policy, lora_config, save_final
from .prompts import FitReport, PromptLayout, dataset_layout, fit_rows
from .schedule import RewardSchedule

log = logging.getLogger(__name__)

#: dataset columns the trainer and the rewards use
COLUMNS = ("prompt", "solution", "options", "category", "id", "question_block")


class NamedReward:
    """A reward function under the name TRL logs it by (``rewards/<name>/mean``)."""

    def __init__(self, name: str, fn: Callable[..., list[float]]) -> None:
        self.__name__ = name
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> list[float]:
        return self.fn(*args, **kwargs)


@dataclass
class TrainResult:
    output_dir: Path
    final_model: Path
    global_step: int
    minutes: float
    resumed_from: str | None
    metrics: dict[str, float]
    curves_png: Path | None
    rows: int = 0  # training rows used
    deleted_rows: int = 0  # left out: prompts over data.max_prompt_tokens


def reference_backend(cfg: TrainConfig, device: str) -> ChatBackend:
    """The frozen reference LM: the configured one, else the policy's initial weights."""
    from embodied_r_ros.core.backends.factory import create_backend

    ref = cfg.rewards.reference or ModelConfig(
        backend="transformers",
        model=cfg.policy.model,
        dtype="auto" if device == "cpu" else cfg.policy.dtype,
        device=device,
        batch_size=32,
    )
    ref = ref.model_copy(
        update={"temperature": REFERENCE_TEMPERATURE, "max_new_tokens": REFERENCE_MAX_NEW_TOKENS}
    )
    return create_backend(ref, text_only=True)


def reference_prompts(cfg: TrainConfig, layout: PromptLayout | None = None) -> PromptSet:
    """The consistency reference's wording: ``rewards.prompts``, else the dataset's."""
    if cfg.rewards.prompts:
        return prompts_from(cfg.rewards.prompts)
    return layout.prompts if layout is not None else prompts_from(None)


def consistency_reward(
    cfg: TrainConfig, reference: ChatBackend, layout: PromptLayout | None = None
) -> ConsistencyReward:
    """The consistency reward as ``cfg.rewards`` configures it (training and evaluation)."""
    r = cfg.rewards
    return ConsistencyReward(reference, answer_mode=r.answer_mode,
                             prompts=reference_prompts(cfg, layout), fallback=r.fallback)


def paper_rewards(
    cfg: TrainConfig, reference: ChatBackend | None, layout: PromptLayout | None = None
) -> list[Callable[..., Any]]:
    """format, accuracy, consistency, in :data:`REWARD_NAMES` order."""
    mode = cfg.rewards.answer_mode
    funcs: list[Callable[..., Any]] = [
        NamedReward("format", format_reward),
        NamedReward("accuracy", partial(accuracy_reward, answer_mode=mode)),
    ]
    if reference is not None:
        funcs.append(consistency_reward(cfg, reference, layout))
    else:
        funcs.append(NamedReward("consistency", lambda completions, **_: [0.0] * len(completions)))
    return funcs


def grpo_args(cfg: TrainConfig, output_dir: Path, device: str, *, validate: bool = False) -> Any:
    """TRL's GRPOConfig for this config (the paper's values unless overridden); ``validate``:
    evaluate the validation rows every ``grpo.eval_steps``."""
    from trl import GRPOConfig

    g, o = cfg.grpo, cfg.output
    precision = cfg.policy.dtype if device == "cuda" else "float32"
    kwargs: dict[str, Any] = {}
    if g.use_vllm:
        kwargs.update(
            use_vllm=True,
            vllm_mode=g.vllm_mode,
            vllm_gpu_memory_utilization=g.vllm_gpu_memory_utilization,
            vllm_tensor_parallel_size=g.vllm_tensor_parallel_size,
        )
        if g.vllm_server_base_url:
            kwargs["vllm_server_base_url"] = g.vllm_server_base_url
    return GRPOConfig(
        output_dir=str(output_dir),
        use_cpu=device == "cpu",
        bf16=precision == "bfloat16",
        fp16=precision == "float16",
        learning_rate=g.learning_rate,
        beta=g.beta,
        temperature=g.temperature,
        top_k=g.top_k,
        top_p=g.top_p,
        num_generations=g.num_generations,
        per_device_train_batch_size=g.per_device_batch,
        gradient_accumulation_steps=g.gradient_accumulation(world_size()),
        max_completion_length=g.max_completion_length,
        num_train_epochs=g.num_epochs,
        max_steps=g.max_steps,
        warmup_steps=g.warmup_ratio,  # a float in [0, 1) is a ratio of the total steps
        lr_scheduler_type=g.lr_scheduler,
        eval_strategy="steps" if validate else "no",
        eval_steps=g.eval_steps if validate else None,
        per_device_eval_batch_size=g.per_device_batch,
        loss_type=g.loss_type,
        scale_rewards=g.scale_rewards,
        num_iterations=g.num_iterations,
        max_grad_norm=g.max_grad_norm,
        seed=g.seed,
        data_seed=g.seed,
        activation_checkpointing=cfg.policy.gradient_checkpointing,
        reward_weights=cfg.rewards.stages[0].weights(),
        logging_steps=o.logging_steps,
        save_strategy="steps",
        save_steps=o.save_steps,
        save_total_limit=o.save_total_limit,
        save_only_model=o.save_only_model,
        report_to="none",  # TensorBoard is added as a callback with an explicit directory
        log_completions=o.log_completions,
        remove_unused_columns=False,
        **kwargs,
    )


def training_rows(
    cfg: TrainConfig,
    data_dir: str | Path,
    tokenizer: Any,
    split: str | None = None,
    layout: PromptLayout | None = None,
) -> tuple[list[dict[str, Any]], FitReport]:
    """The rows of a split (default: the configured one) whose prompts fit
    ``data.max_prompt_tokens`` (``data.over_length``: longer rows deleted or shortened)."""
    name = split or cfg.data.split
    rows = load_rows(data_dir, name, cfg.data.fold)[: cfg.data.max_rows]
    if not rows:
        raise ValueError(f"split {name!r} of {data_dir} has no rows")
    fitted, report = fit_rows(rows, tokenizer, cfg.data.max_prompt_tokens,
                              layout or dataset_layout(data_dir), cfg.data.over_length)
    if report.deleted:
        log.warning("split %s: %s", name, report.summary(cfg.data.max_prompt_tokens))
    if not fitted:
        raise ValueError(
            f"split {name!r} of {data_dir}: every prompt is over data.max_prompt_tokens="
            f"{cfg.data.max_prompt_tokens}; raise it or set data.over_length=drop_oldest_frames"
        )
    return fitted, report


def validation_rows(
    cfg: TrainConfig, data_dir: str | Path, tokenizer: Any, layout: PromptLayout
) -> list[dict[str, Any]]:
    """The validation rows GRPO evaluates every ``grpo.eval_steps`` (none when off or empty)."""
    if not cfg.grpo.eval_steps or cfg.data.val_split is None or cfg.data.fold is not None:
        return []
    try:
        rows, _ = training_rows(cfg, data_dir, tokenizer, cfg.data.val_split, layout)
    except ValueError as exc:
        log.warning("no validation during training: %s", exc)
        return []
    usable = len(rows) - len(rows) % cfg.grpo.num_generations  # whole groups per eval batch
    return rows if usable > 0 else []


def _trainer_class() -> type:
    from trl import GRPOTrainer

    class EmbodiedGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that also logs the consistency rate and the current reward weights."""

        reward_stage: int = 0

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            if self.model.training and self._metrics["train"]:
                acc = _mean(self._metrics["train"].get("rewards/accuracy/mean"))
                cons = _mean(self._metrics["train"].get("rewards/consistency/mean"))
                if acc is not None and cons is not None and acc > 0:
                    logs["consistency_rate"] = cons / acc
                for name, weight in zip(self.reward_func_names, self.reward_weights.tolist(),
                                        strict=False):
                    logs[f"reward_weights/{name}"] = weight
                logs["reward_stage"] = self.reward_stage + 1
            super().log(logs, start_time)

    return EmbodiedGRPOTrainer


def _dataset(dataset_cls: Any, rows: Sequence[dict[str, Any]]) -> Any:
    return dataset_cls.from_list([{k: r[k] for k in COLUMNS if k in r} for r in rows])


def _mean(values: Sequence[float] | None) -> float | None:
    valid = [v for v in values or [] if v == v]  # drop NaN
    return sum(valid) / len(valid) if valid else None


def last_checkpoint(output_dir: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None


def run_grpo(
    cfg: TrainConfig,
    data_dir: str | Path,
    *,
    output_dir: str | Path | None = None,
    reward_funcs: Sequence[Callable[..., Any]] | None = None,
    resume: bool = True,
    callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Train with GRPO; ``reward_funcs`` (three, positionally weighted by the stages) replaces
    the paper's rewards, e.g. with a dense reward for smoke tests of random models."""
    import torch
    from datasets import Dataset
    from transformers.integrations import TensorBoardCallback

    start = time.perf_counter()
    out = Path(output_dir or cfg.output.dir)
    device = device_name(cfg.grpo.device)
    torch.manual_seed(cfg.grpo.seed)
    model, tokenizer = load_policy(cfg, device)
    layout = dataset_layout(data_dir)
    rows, fit = training_rows(cfg, data_dir, tokenizer, layout=layout)
    if cfg.grpo.max_rows is not None and cfg.grpo.max_rows < len(rows):
        import random

        rows = random.Random(cfg.grpo.seed).sample(rows, cfg.grpo.max_rows)
    val_rows = validation_rows(cfg, data_dir, tokenizer, layout)
    dataset = _dataset(Dataset, rows)

    if reward_funcs is None:
        needs_reference = any(s.consistency > 0 for s in cfg.rewards.stages)
        reference = reference_backend(cfg, device) if needs_reference else None
        funcs = paper_rewards(cfg, reference, layout)
    else:
        funcs = list(reward_funcs)
    if len(funcs) != len(REWARD_NAMES):
        raise ValueError(f"expected {len(REWARD_NAMES)} reward functions, got {len(funcs)}")

    args = grpo_args(cfg, out, device, validate=bool(val_rows))
    trainer = _trainer_class()(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=dataset,
        eval_dataset=_dataset(Dataset, val_rows) if val_rows else None,
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
        callbacks=list(callbacks),
    )
    consistency = next((f for f in funcs if isinstance(f, ConsistencyReward)), None)

    def apply(stage: int, weights: list[float]) -> None:
        trainer.reward_weights = torch.tensor(weights, dtype=torch.float32)
        trainer.reward_stage = stage
        if consistency is not None:
            consistency.enabled = weights[2] > 0 or not cfg.rewards.skip_unweighted_consistency

    trainer.add_callback(RewardSchedule(cfg.rewards.stages, apply))
    if cfg.output.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        trainer.add_callback(TensorBoardCallback(SummaryWriter(str(out / "tensorboard"))))

    checkpoint = last_checkpoint(out) if resume else None
    if checkpoint:
        log.info("resuming from %s", checkpoint)
    trainer.train(resume_from_checkpoint=checkpoint)

    final = out / "final"
    save_final(trainer, tokenizer, final, cfg)
    history = trainer.state.log_history
    (out / "log_history.json").write_text(json.dumps(history, indent=1))
    curves = None
    try:
        from .plots import training_curves

        curves = training_curves(history, out / "curves.png", title=f"GRPO ({cfg.name})")
    except Exception as exc:  # noqa: BLE001 - a plot must never lose a finished run
        log.warning("could not draw the training curves: %s", exc)
    minutes = (time.perf_counter() - start) / 60.0
    result = TrainResult(
        output_dir=out,
        final_model=final,
        global_step=trainer.state.global_step,
        minutes=minutes,
        resumed_from=checkpoint,
        metrics=summarize_history(history),
        curves_png=curves,
        rows=len(rows),
        deleted_rows=fit.deleted,
    )
    (out / "train_summary.json").write_text(
        json.dumps({**result.__dict__, "output_dir": str(out), "final_model": str(final),
                    "curves_png": str(curves) if curves else None}, indent=1)
    )
    return result


def summarize_history(history: Sequence[dict[str, Any]]) -> dict[str, float]:
    """First and last logged value of the curves the README reports."""
    keys = [
        "reward",
        *(f"rewards/{n}/mean" for n in REWARD_NAMES),
        "completions/mean_length",
        "consistency_rate",
        "loss",
    ]
    out: dict[str, float] = {}
    steps = [h for h in history if "reward" in h or "loss" in h]
    for key in keys:
        values = [h[key] for h in steps if isinstance(h.get(key), (int, float))]
        if values:
            out[f"{key}/first"] = float(values[0])
            out[f"{key}/last"] = float(values[-1])
            out[f"{key}/mean"] = float(sum(values) / len(values))
    return out

"""GRPO training of the reasoning LM with TRL, as Embodied-R's official code trains it on ms-swift.

The policy reads the perception text of a row and answers in ``<think>/<answer>`` form; three
binary rewards from the core (format, accuracy, logical consistency against a frozen reference
LM) are weighted by the paper's three-stage schedule (:mod:`.schedule`): either switched at
epoch boundaries in one run (``rewards.stage_mode: one_run``) or, as the maintainers run it, one
training per stage, each resuming the previous one's full checkpoint (``resumed_runs``, the
``paper`` recipe). The policy trains with fp32 master weights whatever ``policy.dtype`` says
(:mod:`.precision`). TRL is used through its public surface only: reward callables (which read
the stage and log their raw means through ``log_metric``) and ``TrainerCallback``s. Per-reward
means, completion length and the consistency rate go to TensorBoard, and a PNG of the curves is
drawn at the end.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from embodied_r_ros.core.chat import ChatBackend
from embodied_r_training.data.prompt_budget import PromptLayout, dataset_layout
from embodied_r_training.data.splits import seeded_draw
from embodied_r_training.recipe import TrainConfig, device_name, world_size
from embodied_r_training.rewards import (
    REWARD_NAMES,
    ConsistencyReward,
    accuracy_reward,
    format_reward,
)
from embodied_r_training.rl.policy import (
    check_adapter,
    checkpointing_flag,
    load_policy,
    lora_config,
    policy_precision,
    save_final,
)
from embodied_r_training.rl.prompt_pool import policy_sampler, prompt_pool
from embodied_r_training.rl.reference import consistency_reward, reference_backend
from embodied_r_training.rl.runs import (
    TrainResult,
    checkpoint_epoch,
    finished_run,
    last_checkpoint,
    summarize_history,
    training_rows,
    write_summary,
)
from embodied_r_training.rl.schedule import (
    StagedReward,
    StageSchedule,
    epoch_index,
    stage_at,
    stage_end_epoch,
)

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


def paper_rewards(
    cfg: TrainConfig, reference: ChatBackend | None, layout: PromptLayout | None = None
) -> list[Callable[..., Any]]:
    """format, accuracy, consistency, in :data:`REWARD_NAMES` order (raw, unweighted)."""
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


def staged_rewards(
    cfg: TrainConfig, funcs: Sequence[Callable[..., Any]], schedule: StageSchedule
) -> list[StagedReward]:
    """The three raw rewards, each weighted by the schedule's current stage; the consistency
    reference is not asked while its weight is 0 (``rewards.skip_unweighted_consistency``)."""
    if len(funcs) != len(REWARD_NAMES):
        raise ValueError(f"expected {len(REWARD_NAMES)} reward functions, got {len(funcs)}")
    skip = cfg.rewards.skip_unweighted_consistency
    return [
        StagedReward(name, fn, i, schedule,
                     skip_unweighted=skip and isinstance(fn, ConsistencyReward))
        for i, (name, fn) in enumerate(zip(REWARD_NAMES, funcs, strict=True))
    ]


class SaveAtEnd(TrainerCallback):
    """A checkpoint at the last step of a training, so the next stage can resume from it."""

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if state.max_steps > 0 and state.global_step >= state.max_steps:
            control.should_save = True


def grpo_args(
    cfg: TrainConfig,
    output_dir: Path,
    device: str,
    *,
    validate: bool = False,
    num_epochs: float | None = None,
) -> Any:
    """TRL's GRPOConfig for this config; ``validate``: evaluate the validation rows every
    ``grpo.eval_steps``; ``num_epochs``: this training's epochs (one stage of resumed runs)."""
    from trl import GRPOConfig

    return GRPOConfig(**grpo_kwargs(cfg, output_dir, device, validate=validate,
                                    num_epochs=num_epochs))


def grpo_kwargs(
    cfg: TrainConfig,
    output_dir: Path,
    device: str,
    *,
    validate: bool = False,
    num_epochs: float | None = None,
) -> dict[str, Any]:
    """The arguments of :func:`grpo_args` (checkable without the device they name)."""
    g, o = cfg.grpo, cfg.output
    precision = policy_precision(cfg, device)
    kwargs: dict[str, Any] = {}
    if g.beta > 0 and lora_config(cfg) is None and not cfg.policy.adapter:
        kwargs["model_init_kwargs"] = precision.frozen_model_kwargs() or None
    if g.use_vllm:
        kwargs.update(
            use_vllm=True,
            vllm_mode=g.vllm_mode,
            vllm_gpu_memory_utilization=g.vllm_gpu_memory_utilization,
            vllm_tensor_parallel_size=g.vllm_tensor_parallel_size,
        )
        if g.vllm_server_base_url:
            kwargs["vllm_server_base_url"] = g.vllm_server_base_url
    return dict(
        output_dir=str(output_dir),
        use_cpu=device == "cpu",
        **precision.trainer_flags(),
        learning_rate=g.learning_rate,
        weight_decay=g.weight_decay,
        adam_beta1=g.adam_beta1,
        adam_beta2=g.adam_beta2,
        adam_epsilon=g.adam_epsilon,
        beta=g.beta,
        temperature=g.temperature,
        top_k=g.top_k,
        top_p=g.top_p,
        num_generations=g.num_generations,
        per_device_train_batch_size=g.per_device_batch,
        gradient_accumulation_steps=g.gradient_accumulation(world_size()),
        max_completion_length=g.max_completion_length,
        num_train_epochs=g.num_epochs if num_epochs is None else num_epochs,
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
        **checkpointing_flag(cfg),
        reward_weights=[1.0] * len(REWARD_NAMES),  # the StagedRewards weigh themselves
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


def _dataset(dataset_cls: Any, rows: Sequence[dict[str, Any]]) -> Any:
    return dataset_cls.from_list([{k: r[k] for k in COLUMNS if k in r} for r in rows])



def _save_history(out: Path, history: list[dict[str, Any]], name: str) -> Path | None:
    (out / "log_history.json").write_text(json.dumps(history, indent=1))
    try:
        from embodied_r_training.plots import training_curves

        return training_curves(history, out / "curves.png", title=f"GRPO ({name})")
    except Exception as exc:  # noqa: BLE001 - a plot must never lose a finished run
        log.warning("could not draw the training curves: %s", exc)
        return None


def run_grpo(
    cfg: TrainConfig,
    data_dir: str | Path,
    *,
    output_dir: str | Path | None = None,
    reward_funcs: Sequence[Callable[..., Any]] | None = None,
    resume: bool = True,
    callbacks: Sequence[Any] = (),
) -> TrainResult:
    """Train with GRPO; ``reward_funcs`` (three raw rewards, weighted by the stages) replaces
    the paper's rewards, e.g. with a dense reward for smoke tests of random models.

    ``rewards.stage_mode: resumed_runs`` trains stage after stage as separate trainings over
    the cumulative epochs, each resuming the previous one's last checkpoint (weights, optimizer,
    scheduler step, RNG); the learning-rate schedule of each is rebuilt for its own length and
    continues from the restored step. A killed run resumes inside the stage it was in."""
    import torch
    from datasets import Dataset

    check_adapter(cfg)  # a missing adapter fails before data or models load
    start = time.perf_counter()
    out = Path(output_dir or cfg.output.dir)
    done = finished_run(out, cfg.grpo.max_steps) if resume else None
    if done is not None:
        return done
    device = device_name(cfg.grpo.device)
    layout = dataset_layout(data_dir)  # a dataset of an older text fails before models load
    torch.manual_seed(cfg.grpo.seed)
    model, tokenizer = load_policy(cfg, device)
    rows, fit = training_rows(cfg, data_dir, tokenizer, layout=layout)
    if cfg.experimental.prompt_pool_samples:
        from accelerate import PartialState

        # the main process samples and writes prompt_pool.json; the others then read it
        with PartialState().main_process_first():
            rows = prompt_pool(cfg, rows, out, policy_sampler(cfg, model, tokenizer, device))
    elif cfg.grpo.max_rows is not None and cfg.grpo.max_rows < len(rows):
        rows = seeded_draw(rows, cfg.grpo.max_rows, cfg.grpo.seed)
    val_rows = validation_rows(cfg, data_dir, tokenizer, layout)
    dataset = _dataset(Dataset, rows)
    eval_dataset = _dataset(Dataset, val_rows) if val_rows else None

    if reward_funcs is None:
        needs_reference = any(s.consistency > 0 for s in cfg.rewards.stages)
        reference = reference_backend(cfg, device) if needs_reference else None
        raw = paper_rewards(cfg, reference, layout)
    else:
        raw = list(reward_funcs)
    schedule = StageSchedule(cfg.rewards.stages, REWARD_NAMES)
    funcs = staged_rewards(cfg, raw, schedule)

    checkpoint = last_checkpoint(out) if resume else None
    if checkpoint:
        log.info("resuming from %s", checkpoint)
    stages = cfg.rewards.stages
    if cfg.rewards.stage_mode == "resumed_runs":
        first = stage_at(stages, epoch_index(checkpoint_epoch(checkpoint)))
        runs = [(stage_end_epoch(stages, k), k) for k in range(first, len(stages))]
    else:
        runs = [(None, None)]
    trainer: Any = None
    resume_from = checkpoint
    for epochs, stage in runs:
        if trainer is not None:  # the next stage starts from the weights just saved
            model, tokenizer = load_policy(cfg, device)
        args = grpo_args(cfg, out, device, validate=bool(val_rows), num_epochs=epochs)
        trainer = _trainer(cfg, model, tokenizer, funcs, args, dataset, eval_dataset, out,
                           [schedule, *callbacks, *([SaveAtEnd()] if stage is not None else [])])
        if stage is not None:
            log.info("reward stage %d of %d: epochs up to %d, weights %s", stage + 1,
                     len(stages), epochs, stages[stage].weights())
        trainer.train(resume_from_checkpoint=resume_from)
        if stage is not None:
            if (trainer.state.epoch or 0.0) < epochs - 1e-6:
                break  # a callback stopped the run: the remaining stages wait for a resume
            # the checkpoint SaveAtEnd just wrote (not an older run's higher-numbered one)
            resume_from = str(out / f"checkpoint-{trainer.state.global_step}")

    final = out / "final"
    save_final(trainer, tokenizer, final, cfg)
    history = trainer.state.log_history
    curves = _save_history(out, history, cfg.name)
    result = TrainResult(
        output_dir=out,
        final_model=final,
        global_step=trainer.state.global_step,
        minutes=(time.perf_counter() - start) / 60.0,
        resumed_from=checkpoint,
        metrics=summarize_history(history),
        curves_png=curves,
        rows=len(rows),
        deleted_rows=fit.deleted,
        shortened_rows=fit.shortened,
    )
    write_summary(result)
    return result


def zero_variance_trainer() -> type:
    """TRL's ``GRPOTrainer`` that counts the groups whose rewards were all equal (advantage 0:
    ``zero_variance_groups`` of ``groups_seen`` in the logs, cumulative over this trainer) and,
    with ``beta`` 0, skips the forward and backward pass of a micro-batch made only of them (it
    has no gradient, so its cost buys nothing; with ``beta`` > 0 the KL term still has one).
    Only ``compute_loss`` and ``log``, the trainer's documented override points, change."""
    from trl import GRPOTrainer

    class ZeroVarianceGRPOTrainer(GRPOTrainer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.zero_variance_groups = 0
            self.groups_seen = 0

        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            advantages = inputs["advantages"]
            whole = advantages.numel() % self.num_generations == 0  # else one unit
            groups = advantages.reshape(-1, self.num_generations if whole else advantages.numel())
            flat = groups.ne(0).any(dim=1).logical_not()
            self.groups_seen += int(flat.numel())
            self.zero_variance_groups += int(flat.sum())
            if self.beta == 0.0 and bool(flat.all()):
                weight = next(p for p in model.parameters() if p.requires_grad)
                return weight.sum() * 0.0  # a graph for backward; every gradient is zero
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

        def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
            if "loss" in logs:  # a training log, not an evaluation's
                logs["zero_variance_groups"] = float(self.zero_variance_groups)
                logs["groups_seen"] = float(self.groups_seen)
            super().log(logs, *args, **kwargs)

    return ZeroVarianceGRPOTrainer


def _trainer(
    cfg: TrainConfig,
    model: Any,
    tokenizer: Any,
    funcs: Sequence[StagedReward],
    args: Any,
    dataset: Any,
    eval_dataset: Any,
    out: Path,
    callbacks: Sequence[Any],
) -> Any:
    trainer = zero_variance_trainer()(
        model=model,
        reward_funcs=list(funcs),
        args=args,
        train_dataset=dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
        callbacks=list(callbacks),  # the schedule first: its on_log reaches TensorBoard
    )
    if cfg.output.tensorboard:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        trainer.add_callback(TensorBoardCallback(SummaryWriter(str(out / "tensorboard"))))
    return trainer

"""SFT on the built rows (TRL ``SFTTrainer``): the paper's SFT baseline, or a cold start for GRPO.

``sft.targets: template``: the rows have answers but no reasoning, so the target is a fixed,
honest think text followed by the correct option (the SFT-vs-RL comparison of the paper).
``sft.targets: rationale``: a think text written from the row's own perception text that walks
through the frames to the answer (:mod:`embodied_r_training.data.rationales`), DeepSeek-R1's
cold-start data. ``sft.targets: reference``: the consistency reference's task alone (the
question and a gold think text -> its letter), a reference of its own for GRPO. The loss covers
the completion only.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from embodied_r_ros.core.prompts import PromptSet
from embodied_r_ros.core.reasoning import parse_options
from embodied_r_training.data.prompt_budget import dataset_layout
from embodied_r_training.data.splits import seeded_draw
from embodied_r_training.recipe import SFTSettings, TrainConfig, device_name
from embodied_r_training.rl.policy import (
    check_adapter,
    checkpointing_flag,
    load_policy,
    lora_config,
    policy_precision,
    save_final,
)
from embodied_r_training.rl.reference import reference_prompts
from embodied_r_training.rl.runs import (
    TrainResult,
    finished_run,
    last_checkpoint,
    training_rows,
    write_summary,
)

log = logging.getLogger(__name__)


def target_text(row: dict[str, Any], think: str) -> str:
    """``<think>..</think>\\n<answer>B. text</answer>`` for the row's solution."""
    texts = dict(parse_options(row["options"]))
    letter = row["solution"]
    answer = f"{letter}. {texts[letter]}" if letter in texts else letter
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


def sft_rows(
    rows: list[dict[str, Any]], cfg: SFTSettings, prompts: PromptSet | None = None
) -> list[dict[str, Any]]:
    """Prompt-completion rows for TRL, conversational or, for prompts that are chat-templated
    text (``data.over_length: left``), text (rationale rows the oracle does not support are
    left out when ``cfg.supported_only``); then ``cfg.reference_share`` of reference rows.
    ``targets: reference``: reference rows only, one per gold rationale."""
    from embodied_r_training.data.rationales import Rationale, rationale

    out = []
    gold: list[tuple[dict[str, Any], Rationale]] = []
    for r in rows:
        if cfg.targets in ("rationale", "reference"):
            why = rationale(r, letter=cfg.answer_letter)
            if cfg.supported_only and not why.supported:
                continue
            gold.append((r, why))
            if cfg.targets == "reference":
                continue  # no policy row: the reference rows below are all it trains on
            target = why.completion
        else:
            target = target_text(r, cfg.think_template)
        completion: Any = target if isinstance(r["prompt"], str) else [
            {"role": "assistant", "content": target}]
        out.append({"prompt": r["prompt"], "completion": completion})
    share = 1.0 if cfg.targets == "reference" else cfg.reference_share
    return out + reference_rows(gold, cfg, prompts, share=share)


def reference_rows(
    gold: list[tuple[dict[str, Any], Any]], cfg: SFTSettings, prompts: PromptSet | None,
    *, share: float,
) -> list[dict[str, Any]]:
    """A seeded ``share`` of the gold rationales as the consistency reference sees them
    (:func:`~embodied_r_training.rewards.reference_conversation`: the question and the think
    text only), answered with the solution's letter alone, as its prompt asks."""
    from embodied_r_ros.core.reasoning import question_from_prompt
    from embodied_r_training.rewards import prompt_text, reference_conversation

    n = round(share * len(gold))
    if n == 0:
        return []
    if any(isinstance(r["prompt"], str) for r, _ in gold):
        raise ValueError("sft.reference_share needs conversational prompts (data.over_length "
                         "other than 'left')")
    picked = seeded_draw(gold, n, cfg.seed)
    return [{
        "prompt": reference_conversation(
            question_from_prompt(r.get("question_block") or prompt_text(r["prompt"])),
            why.think, prompts),
        "completion": [{"role": "assistant", "content": str(r["solution"]).strip()[:1]}],
    } for r, why in picked]


def run_sft(
    cfg: TrainConfig,
    data_dir: str | Path,
    *,
    output_dir: str | Path | None = None,
    resume: bool = True,
) -> TrainResult:
    from datasets import Dataset
    from transformers.integrations import TensorBoardCallback
    from trl import SFTConfig, SFTTrainer

    check_adapter(cfg)  # a missing adapter fails before data or models load
    layout = dataset_layout(data_dir)  # so does a dataset of an older text
    start = time.perf_counter()
    s = cfg.sft
    out = Path(output_dir or cfg.output.dir)
    done = finished_run(out, s.max_steps) if resume else None
    if done is not None:
        return done
    device = device_name(s.device)
    model, tokenizer = load_policy(cfg, device)
    rows, fit = training_rows(cfg, data_dir, tokenizer)
    targets = sft_rows(rows, s, reference_prompts(cfg, layout))
    if not targets:
        raise ValueError("no SFT rows: every rationale is unsupported (sft.supported_only)")
    log.info("SFT on %d of %d rows (%s targets)", len(targets), len(rows), s.targets)
    dataset = Dataset.from_list(targets)
    args = SFTConfig(
        output_dir=str(out),
        use_cpu=device == "cpu",
        **policy_precision(cfg, device).trainer_flags(),
        learning_rate=s.learning_rate,
        num_train_epochs=s.num_epochs,
        max_steps=s.max_steps,
        per_device_train_batch_size=s.per_device_batch,
        gradient_accumulation_steps=s.gradient_accumulation_steps,
        warmup_steps=s.warmup_ratio,  # a ratio of the total steps
        seed=s.seed,
        max_length=cfg.data.max_prompt_tokens + 512,  # prompts fit already; 512 for the target
        completion_only_loss=True,
        **checkpointing_flag(cfg),
        logging_steps=cfg.output.logging_steps,
        save_strategy="steps",
        save_steps=cfg.output.save_steps,
        save_total_limit=cfg.output.save_total_limit,
        save_only_model=cfg.output.save_only_model,
        lr_scheduler_type=cfg.grpo.lr_scheduler,
        report_to="none",
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=lora_config(cfg),
    )
    if cfg.output.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        trainer.add_callback(TensorBoardCallback(SummaryWriter(str(out / "tensorboard"))))
    checkpoint = last_checkpoint(out) if resume else None
    trainer.train(resume_from_checkpoint=checkpoint)
    final = out / "final"
    save_final(trainer, tokenizer, final, cfg)
    history = trainer.state.log_history
    (out / "log_history.json").write_text(json.dumps(history, indent=1))
    losses = [h["loss"] for h in history if isinstance(h.get("loss"), (int, float))]
    metrics = {"loss/first": losses[0], "loss/last": losses[-1]} if losses else {}
    result = TrainResult(
        output_dir=out,
        final_model=final,
        global_step=trainer.state.global_step,
        minutes=(time.perf_counter() - start) / 60.0,
        resumed_from=checkpoint,
        metrics=metrics,
        curves_png=None,
        rows=len(targets),
        deleted_rows=fit.deleted,
        shortened_rows=fit.shortened,
    )
    write_summary(result)
    return result

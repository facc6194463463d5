"""Evaluation of a reasoning LM over a built split, reported beside the paper's numbers.

The perception text is already in the rows (cached at build time), so evaluation runs only the
LM: overall (micro) accuracy as the paper's "Avg." (digest §2.5), accuracy per category, the
share of well-formed replies, and the consistency rate (of the correct answers, how many a
frozen reference LM re-derives from the think text alone). Accuracy is reported read both ways,
side by side: ``official`` (the official evaluation extractor, what the paper's numbers count)
and ``tag`` (this project's reading of the ``<answer>`` tag against the options); the answer
mode picks the headline one. Prompts are evaluated whole unless ``eval.max_prompt_tokens`` is
set. Every accuracy comes with a 95 % bootstrap interval over the questions.

Scoring lives in :mod:`.scoring`, the reports in :mod:`.eval_report`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied_r_training.data.dataset_files import first_per_category, load_rows
from embodied_r_training.data.prompt_budget import PromptLayout, dataset_layout, fit_rows
from embodied_r_training.evaluation.scoring import (
    BASELINES,
    EvalResult,
    baseline_completions,
    mean_tokens,
    score,
)
from embodied_r_training.recipe import TrainConfig, device_name

from embodied_r_ros.core.backends.base import ChatBackend
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.reasoning import AnswerMode

log = logging.getLogger(__name__)


def generation_backend(model: str, cfg: TrainConfig) -> ChatBackend:
    from embodied_r_ros.core.backends.factory import create_backend

    e = cfg.eval
    return create_backend(
        ModelConfig(
            backend=e.backend,
            quantization=e.quantization,
            model=model,
            dtype=e.dtype,
            device=device_name(e.device),
            max_new_tokens=e.max_new_tokens,
            temperature=e.temperature,
            batch_size=e.batch_size,
        ),
        text_only=True,
    )



def generate_all(backend: ChatBackend, rows: Sequence[dict[str, Any]], batch: int) -> list[str]:
    from tqdm import tqdm

    out: list[str] = []
    with tqdm(total=len(rows), desc="eval", unit="q", dynamic_ncols=True) as bar:
        for i in range(0, len(rows), batch):
            chunk = rows[i : i + batch]
            out += backend.generate([r["prompt"] for r in chunk])
            bar.update(len(chunk))
    return out


def evaluate(
    model: str,
    data_dir: str | Path,
    cfg: TrainConfig,
    *,
    split: str = "test",
    fold: int | None = None,
    reference: ChatBackend | None = None,
    backend: ChatBackend | None = None,
    answer_mode: AnswerMode | None = None,
) -> tuple[EvalResult, list[dict[str, Any]]]:
    """Run ``model`` over a split; ``reference`` (a frozen LM) enables the consistency rate.
    ``answer_mode`` (default ``rewards.answer_mode``) picks the headline accuracy."""
    from embodied_r_training.rl.reference import consistency_reward

    start = time.perf_counter()
    rows = first_per_category(load_rows(data_dir, split, fold), cfg.eval.per_category)
    if not rows:
        raise ValueError(f"split {split!r} of {data_dir} has no rows")
    mode = answer_mode or cfg.rewards.answer_mode
    if model in BASELINES and backend is None:
        from embodied_r_ros.core.reasoning import parse_options

        expected = ([1.0 / len(parse_options(r["options"])) for r in rows]
                    if model == "chance" else None)
        completions = (baseline_completions("first-option", rows) if model == "chance"
                       else baseline_completions(model, rows))
        metrics, preds = score(rows, completions, answer_mode=mode, expected=expected)
        metrics["format_rate"] = None  # a rule has no format to keep
        return EvalResult(model=model, split=split, fold=fold,
                          seconds=time.perf_counter() - start, **metrics), preds
    layout: PromptLayout = dataset_layout(data_dir)
    own = backend is None
    gen = backend or generation_backend(model, cfg)
    try:
        tokenizer = getattr(gen, "tokenizer", None)
        if tokenizer is not None and cfg.eval.max_prompt_tokens is not None:
            rows, _ = fit_rows(rows, tokenizer, cfg.eval.max_prompt_tokens, layout,
                               "drop_oldest_frames")
        completions = generate_all(gen, rows, max(cfg.eval.batch_size, 1) * 4)
        length = mean_tokens(tokenizer, completions) if tokenizer is not None else None
    finally:
        if own:
            gen.close()
    # the judge reads answers as the headline does: the rate is over the answers counted right
    judge = (consistency_reward(cfg, reference, layout, answer_mode=mode)
             if reference is not None else None)
    metrics, preds = score(rows, completions, answer_mode=mode, judge=judge)
    result = EvalResult(model=model, split=split, fold=fold,
                        seconds=time.perf_counter() - start, mean_completion_tokens=length,
                        **metrics)
    return result, preds

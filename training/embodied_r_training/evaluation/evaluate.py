"""Evaluation of reasoning LMs over built splits, reported beside the paper's numbers.

The perception text is already in the rows (cached at build time), so evaluation runs only the
LM: overall (micro) accuracy, correct answers over all questions as the official evaluation
counts them (Embodied-R.code issue #7) and the paper's "Avg." column reports, accuracy per
category, the share of well-formed replies, and the consistency rate (of the correct answers,
how many a frozen reference LM re-derives from the think text alone). Accuracy is reported read
both ways, side by side: ``official`` (the official evaluation extractor, what the paper's
numbers count) and ``tag`` (this project's reading of the ``<answer>`` tag against the
options); the answer mode picks the headline one. Prompts are evaluated whole unless
``eval.max_prompt_tokens`` is set. Every accuracy comes with a 95 % bootstrap interval over the
questions.

:func:`evaluate` runs one model over one split; :func:`evaluate_models` runs several models
over several datasets (``embodied-r-train eval``) and writes the reports. Scoring lives in
:mod:`.scoring`, the reports in :mod:`.report`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_r_ros.core.chat import ChatBackend
from embodied_r_ros.core.config import ModelConfig
from embodied_r_ros.core.reasoning import AnswerMode
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

log = logging.getLogger(__name__)


class EvalError(ValueError):
    """An evaluation that cannot run as asked (labels, pairs, an empty split): one line."""


def generation_backend(model: str, cfg: TrainConfig) -> ChatBackend:
    from embodied_r_ros.backends.factory import create_backend

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
    layout: PromptLayout = dataset_layout(data_dir)  # a dataset of an older text is refused
    rows = first_per_category(load_rows(data_dir, split, fold), cfg.eval.per_category)
    if not rows:
        raise EvalError(f"split {split!r} of {data_dir} has no rows")
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


@dataclass(frozen=True)
class Evaluation:
    """The results and per-question predictions of :func:`evaluate_models`, both keyed
    ``[data_label][model_label]``, and the report files written."""

    results: dict[str, dict[str, EvalResult]]
    predictions: dict[str, dict[str, list[dict[str, Any]]]]
    paths: dict[str, Path]

    def to_dict(self) -> dict[str, Any]:
        """As ``eval.json``: ``{model: result}`` for one dataset, else ``{data: {model: ..}}``."""
        out = {d: {k: r.to_dict() for k, r in rs.items()} for d, rs in self.results.items()}
        return next(iter(out.values())) if len(out) == 1 else out


def _check_labels(models: Sequence[tuple[str, str]], datasets: Sequence[tuple[str, Any]],
                  pairs: Sequence[tuple[str, str]]) -> None:
    if not models or not datasets:
        raise EvalError("evaluation needs at least one model and one dataset")
    if len({label for label, _ in datasets}) != len(datasets):
        raise EvalError("each dataset needs its own label (LABEL=DIR)")
    labels = {label for label, _ in models}
    for a, b in pairs:
        if a not in labels or b not in labels:
            raise EvalError(f"paired {a}:{b}: expected two of the model labels "
                            f"({', '.join(sorted(labels))})")


def evaluate_models(
    models: Sequence[tuple[str, str]],
    datasets: Sequence[tuple[str, str | Path]],
    cfg: TrainConfig,
    out: str | Path | None = None,
    *,
    split: str = "test",
    fold: int | None = None,
    kfold: int | None = None,
    consistency: bool = True,
    answer_mode: AnswerMode | None = None,
    pairs: Sequence[tuple[str, str]] = (),
) -> Evaluation:
    """Every ``(label, model)`` over every ``(label, dataset dir)``, reported to ``out``
    (default ``DATASET/eval`` of the first dataset) by
    :func:`~embodied_r_training.evaluation.report.write_reports`.

    A model is a directory, hub id or offline name, or a rule of :data:`BASELINES`; ``{fold}``
    in it is the fold number. ``fold`` evaluates the test part of that k-fold split; ``kfold``
    averages over the K folds, each fold's model trained without it. ``consistency`` (with
    ``eval.consistency``) asks the reference LM about the correct answers of LM rows.
    ``pairs``: model label pairs ``(A, B)`` reported as A's accuracy minus B's on the same
    questions, with a paired bootstrap interval."""
    from embodied_r_training.evaluation.report import write_reports
    from embodied_r_training.evaluation.scoring import average_folds
    from embodied_r_training.rl.reference import reference_backend

    if fold is not None and kfold:
        raise EvalError("fold and kfold exclude each other: one fold, or the average of K")
    _check_labels(models, datasets, pairs)
    reference = None
    if cfg.eval.consistency and consistency and any(m not in BASELINES for _, m in models):
        reference = reference_backend(cfg, device_name(cfg.eval.device))
    results: dict[str, dict[str, EvalResult]] = {d: {} for d, _ in datasets}
    predictions: dict[str, dict[str, list[dict[str, Any]]]] = {d: {} for d, _ in datasets}
    try:
        for label, model in models:
            # one load per model for every dataset (a k-fold model differs per fold)
            shared = None
            if model not in BASELINES and not kfold and "{fold}" not in model:
                shared = generation_backend(model, cfg)
            try:
                for data_label, data in datasets:
                    if kfold:
                        runs = []
                        for k in range(kfold):
                            result, preds = evaluate(
                                model.format(fold=k), data, cfg, split="test", fold=k,
                                reference=reference, answer_mode=answer_mode)
                            runs.append(result)
                            predictions[data_label][f"{label}-fold{k}"] = preds
                        results[data_label][label] = average_folds(runs)
                    else:
                        name = model.format(fold=fold) if fold is not None else model
                        judge = None if model in BASELINES else reference
                        results[data_label][label], predictions[data_label][label] = evaluate(
                            name, data, cfg, split=split, fold=fold, reference=judge,
                            answer_mode=answer_mode, backend=shared)
            finally:
                if shared is not None:
                    shared.close()
    finally:
        if reference is not None:
            reference.close()
    target = Path(out) if out is not None else Path(datasets[0][1]) / "eval"
    paths = write_reports(results, target, predictions, pairs)
    return Evaluation(results, predictions, paths)

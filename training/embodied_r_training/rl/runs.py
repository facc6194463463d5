"""What a training run (GRPO or SFT) reads and leaves: its rows, its checkpoints, its result.

Both trainers take their rows here (the configured split, fitted to ``data.max_prompt_tokens``
by ``data.over_length``), find the checkpoint to resume from here, and return a
:class:`TrainResult`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embodied_r_training.data.dataset_files import load_rows
from embodied_r_training.data.prompt_budget import FitReport, PromptLayout, dataset_layout, fit_rows
from embodied_r_training.recipe import TrainConfig
from embodied_r_training.rewards import REWARD_NAMES

log = logging.getLogger(__name__)


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
    deleted_rows: int = 0  # left out: prompts over data.max_prompt_tokens (over_length delete)
    shortened_rows: int = 0  # left-truncated or with frames dropped to fit


def training_rows(
    cfg: TrainConfig,
    data_dir: str | Path,
    tokenizer: Any,
    split: str | None = None,
    layout: PromptLayout | None = None,
) -> tuple[list[dict[str, Any]], FitReport]:
    """The rows of a split (default: the configured one) fitted to ``data.max_prompt_tokens``
    (``data.over_length``: left-truncated, deleted or with their oldest frames dropped)."""
    name = split or cfg.data.split
    rows = load_rows(data_dir, name, cfg.data.fold)[: cfg.data.max_rows]
    if not rows:
        raise ValueError(f"split {name!r} of {data_dir} has no rows")
    fitted, report = fit_rows(rows, tokenizer, cfg.data.max_prompt_tokens,
                              layout or dataset_layout(data_dir), cfg.data.over_length)
    if report.deleted or report.shortened:
        log.warning("split %s: %s", name, report.summary(cfg.data.max_prompt_tokens))
    if not fitted:
        raise ValueError(
            f"split {name!r} of {data_dir}: every prompt is over data.max_prompt_tokens="
            f"{cfg.data.max_prompt_tokens}; raise it or set data.over_length=left"
        )
    return fitted, report


def last_checkpoint(output_dir: Path) -> str | None:
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(output_dir)) if output_dir.is_dir() else None


def checkpoint_epoch(checkpoint: str | None) -> float:
    """The epoch a checkpoint was saved at (``trainer_state.json``), 0 without one."""
    if checkpoint is None:
        return 0.0
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    return float(state.get("epoch") or 0.0)


def checkpoint_step(checkpoint: str | None) -> int:
    """The step a checkpoint was saved at, 0 without one."""
    if checkpoint is None:
        return 0
    state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    return int(state.get("global_step") or 0)


def summarize_history(history: Sequence[dict[str, Any]]) -> dict[str, float]:
    """First, last and mean logged value of the curves the README reports (raw reward means)."""
    keys = [
        "reward",
        *(f"rewards/{n}/raw_mean" for n in REWARD_NAMES),
        "completions/mean_length",
        "consistency_rate",
        "learning_rate",
        "loss",
        "entropy",
        "frac_reward_zero_std",
        "zero_variance_groups",  # cumulative: /last is the run's count
        "groups_seen",
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


SUMMARY_FILE = "train_summary.json"


def write_summary(result: TrainResult) -> Path:
    """``train_summary.json`` of a finished training (what a resumed demo reads back). A resume
    that trained nothing (from the checkpoint of the recorded final step) keeps the recorded
    training's minutes, in the file and in ``result``, not the minutes of loading it again."""
    path = result.output_dir / SUMMARY_FILE
    recorded = _recorded(result.output_dir)
    if recorded is not None and recorded[1] == result.global_step \
            and checkpoint_step(result.resumed_from) == result.global_step:
        result.minutes = recorded[2]
    fields = {k: str(v) if isinstance(v, Path) else v for k, v in result.__dict__.items()}
    path.write_text(json.dumps(fields, indent=1))
    return path


def _recorded(output_dir: Path) -> tuple[dict[str, Any], int, float] | None:
    """``train_summary.json`` of the last finished training in ``output_dir`` with its step
    and minutes, if any."""
    try:
        data = json.loads((output_dir / SUMMARY_FILE).read_text())
        return data, int(data["global_step"]), float(data["minutes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def finished_run(output_dir: Path, max_steps: int) -> TrainResult | None:
    """The recorded result of a training in ``output_dir`` that already reached ``max_steps``
    (> 0) and saved its final model, else None. A finished run must not be resumed: with
    gradient accumulation the Trainer trains one step past ``max_steps`` on every resume."""
    recorded = _recorded(output_dir)
    if recorded is None or max_steps <= 0:
        return None
    data, step, _ = recorded
    checkpoint = last_checkpoint(output_dir)
    if step < max_steps or checkpoint_step(checkpoint) != step \
            or not Path(data["final_model"]).is_dir():
        return None
    log.info("the training in %s finished at step %d: nothing to resume", output_dir, step)
    paths = {"output_dir", "final_model", "curves_png"}
    fields = {k: Path(v) if k in paths and v is not None else v for k, v in data.items()
              if k in TrainResult.__dataclass_fields__}
    return TrainResult(**{**fields, "resumed_from": checkpoint})


def recorded_minutes(output_dir: Path) -> tuple[int, float] | None:
    """``(global_step, minutes)`` of the last finished training in ``output_dir``, if any."""
    recorded = _recorded(output_dir)
    return None if recorded is None else recorded[1:]

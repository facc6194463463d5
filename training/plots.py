"""PNG figures: GRPO training curves and per-category accuracy bars (matplotlib, no display)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.core.rewards import REWARD_NAMES


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _series(history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for entry in history:
        value = entry.get(key)
        if isinstance(value, (int, float)) and value == value:
            steps.append(int(entry.get("step", len(steps))))
            values.append(float(value))
    return steps, values


def training_curves(
    history: Sequence[Mapping[str, Any]], path: str | Path, title: str = "GRPO"
) -> Path:
    """Rewards per component, completion length and consistency rate against the step."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    for name in REWARD_NAMES:
        steps, values = _series(history, f"rewards/{name}/mean")
        if steps:
            ax.plot(steps, values, marker=".", label=name)
    steps, values = _series(history, "reward")
    if steps:
        ax.plot(steps, values, "k--", label="weighted total")
    ax.set(title="rewards (batch mean)", xlabel="step", ylim=(-0.05, 1.05))
    ax.legend(loc="best", fontsize=8)
    ax = axes[1]
    steps, values = _series(history, "completions/mean_length")
    ax.plot(steps, values, marker=".", color="tab:purple")
    ax.set(title="completion length (tokens)", xlabel="step")
    ax = axes[2]
    steps, values = _series(history, "consistency_rate")
    ax.plot(steps, values, marker=".", color="tab:green")
    ax.set(title="consistency rate (consistency / accuracy)", xlabel="step", ylim=(-0.05, 1.05))
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def accuracy_bars(
    runs: Mapping[str, Mapping[str, float]],
    path: str | Path,
    title: str = "accuracy per category",
) -> Path:
    """Grouped bars: ``runs[label][category] = accuracy`` in [0, 1] (missing ones left out)."""
    plt = _pyplot()
    categories: list[str] = []
    for values in runs.values():
        categories += [c for c in values if c not in categories]
    width = 0.8 / max(len(runs), 1)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(categories) + 2), 4.5))
    for i, (label, values) in enumerate(runs.items()):
        xs = [j + i * width for j, c in enumerate(categories) if c in values]
        ys = [100.0 * values[c] for c in categories if c in values]
        bars = ax.bar(xs, ys, width, label=label)
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks([j + width * (len(runs) - 1) / 2 for j in range(len(categories))])
    ax.set_xticklabels(categories, rotation=25, ha="right", fontsize=8)
    ax.set(ylabel="accuracy (%)", ylim=(0, 105), title=title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out

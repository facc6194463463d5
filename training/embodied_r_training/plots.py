"""PNG figures: GRPO training curves and per-category accuracy bars (matplotlib, no display)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from embodied_r_training.rewards import REWARD_NAMES


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
    """Rewards per component, completion length, consistency rate and KL against the step."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(19, 4))
    ax = axes[0]
    for name in REWARD_NAMES:
        steps, values = _series(history, f"rewards/{name}/raw_mean")  # unweighted
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
    ax = axes[3]
    steps, values = _series(history, "kl")
    ax.plot(steps, values, marker=".", color="tab:red")
    ax.set(title="KL to the reference policy", xlabel="step")
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def loss_curve(history: Sequence[Mapping[str, Any]], path: str | Path, title: str = "SFT") -> Path:
    """Training loss (and mean token accuracy, when logged) against the step."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key in zip(axes, ("loss", "mean_token_accuracy"), strict=True):
        steps, values = _series(history, key)
        ax.plot(steps, values, marker=".")
        ax.set(title=key.replace("_", " "), xlabel="step")
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


def summary_bars(by_data: Mapping[str, Mapping[str, Any]], path: str | Path,
                 title: str = "accuracy with 95 % bootstrap intervals") -> Path:
    """One panel per dataset: overall and per-category accuracy of each model, with the
    interval as an error bar (``by_data[data][model]`` is an ``EvalResult``)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(by_data), figsize=(7.5 * len(by_data), 4.8), squeeze=False)
    for ax, (data_label, results) in zip(axes[0], by_data.items(), strict=True):
        groups = ["overall"]
        for r in results.values():
            groups += [c for c in r.per_category if c not in groups]
        width = 0.8 / max(len(results), 1)
        for i, (label, r) in enumerate(results.items()):
            ys, lo, hi = [], [], []
            for g in groups:
                if g == "overall":
                    value, ci = r.accuracy, r.accuracy_ci
                else:
                    m = r.per_category.get(g, {})
                    value = m.get("accuracy", 0.0)
                    ci = (m["ci_low"], m["ci_high"]) if "ci_low" in m else None
                ys.append(100.0 * value)
                lo.append(100.0 * (value - ci[0]) if ci else 0.0)
                hi.append(100.0 * (ci[1] - value) if ci else 0.0)
            xs = [j + i * width for j in range(len(groups))]
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=label)
        ax.set_xticks([j + width * (len(results) - 1) / 2 for j in range(len(groups))])
        ax.set_xticklabels(groups, rotation=25, ha="right", fontsize=8)
        ax.set(ylabel="accuracy (%)", ylim=(0, 105), title=data_label)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out

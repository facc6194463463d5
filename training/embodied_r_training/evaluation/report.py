"""Evaluation reports: one summary table per dataset, each run beside the paper's Embodied-R /
o1 / Gemini-2.5-Pro rows (Zhao et al., arXiv 2504.12680, Table 1), JSON, bar charts and per-row
predictions."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from embodied_r_ros.backends.reply_cache import write_atomic
from embodied_r_training.data.dataset_files import jsonl
from embodied_r_training.evaluation.scoring import EvalResult

#: the columns of the paper's Table 1 and the category names that fill them: benchmark
#: names, and the sample world's names for the same tasks
PAPER_COLUMNS: dict[str, tuple[str, ...]] = {
    "LP": ("Landmark Position",),
    "C": ("Counterfactual",),
    "PE": ("Progress Evaluation", "progress_evaluation"),
    "AG": ("Action Generation", "action_generation"),
    "RDist": ("object_rel_distance", "relative_distance"),
    "RDir": ("object_rel_direction", "relative_direction"),
    "RP": ("route_planning",),
    "AO": ("obj_appearance_order", "appearance_order"),
}
PAPER_ROWS: dict[str, dict[str, float]] = {
    "Embodied-R (VLM-72B + LLM-3B) [paper]": {
        "Avg": 51.1, "LP": 55.1, "C": 59.9, "PE": 39.7, "AG": 47.6,
        "RDist": 50.0, "RDir": 44.3, "RP": 36.8, "AO": 72.0,
    },
    "OpenAI-o1 [paper]": {
        "Avg": 37.2, "LP": 34.6, "C": 53.3, "PE": 39.1, "AG": 28.0,
        "RDist": 39.7, "RDir": 35.8, "RP": 52.9, "AO": 39.8,
    },
    "Gemini-2.5-Pro [paper]": {
        "Avg": 40.8, "LP": 40.0, "C": 75.0, "PE": 38.7, "AG": 23.5,
        "RDist": 42.0, "RDir": 34.5, "RP": 52.4, "AO": 63.6,
    },
}



def paper_columns(per_category: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """This run's accuracy (%) in the paper's columns, where a category maps to one."""
    out: dict[str, float] = {}
    for column, names in PAPER_COLUMNS.items():
        for name in names:
            if name in per_category:
                out[column] = 100.0 * per_category[name]["accuracy"]
    return out


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100.0 * value:.1f}"


def markdown_report(results: Mapping[str, EvalResult]) -> str:
    """Per-category tables of each labelled result, then the comparison with the paper."""
    lines: list[str] = []
    for label, r in results.items():
        lines += [
            f"### {label}",
            "",
            f"Model `{r.model}`, split `{r.split}`, {r.n} questions, {r.seconds:.0f} s.",
            "",
            "| Category | n | Accuracy, official (%) | Accuracy, tag (%) |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {cat} | {int(m['n'])} | {_pct(m.get('accuracy_official'))} | "
            f"{_pct(m.get('accuracy_tag'))} |"
            for cat, m in r.per_category.items()
        ]
        lines += [
            f"| **overall (micro)** | {r.n} | **{_pct(r.accuracy_by_mode.get('official'))}** | "
            f"**{_pct(r.accuracy_by_mode.get('tag'))}** |",
            "",
            f"Headline accuracy ({r.answer_mode} mode): {100.0 * r.accuracy:.1f} %. "
            "official: the official evaluation extractor; tag: the <answer> tag against the "
            "options.",
            "",
            f"Format rate {_pct(r.format_rate)} %, consistency rate {_pct(r.consistency_rate)} %.",
            "",
        ]
    cols = list(PAPER_COLUMNS)
    lines += [
        "### Beside the paper (accuracy %, Avg. = micro average)",
        "",
        "Paper rows: UrbanVideo-Bench + VSI-Bench (Embodied-R, arXiv 2504.12680, Table 1). "
        "Rows of this project are on its own data; a category fills the column of the paper "
        "task it mirrors, so compare shapes, not numbers.",
        "",
        "| Method | Avg. | " + " | ".join(cols) + " |",
        "|---|" + "---|" * (len(cols) + 1),
    ]
    for label, r in results.items():
        mine = paper_columns(r.per_category)
        cells = [f"{mine[c]:.1f}" if c in mine else "–" for c in cols]
        lines.append(f"| {label} | {100.0 * r.accuracy:.1f} | " + " | ".join(cells) + " |")
    for label, row in PAPER_ROWS.items():
        lines.append(f"| {label} | {row['Avg']:.1f} | " + " | ".join(f"{row[c]:.1f}" for c in cols)
                     + " |")
    return "\n".join(lines) + "\n"


def _with_ci(value: float, low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return f"{100.0 * value:.1f}"
    return f"{100.0 * value:.1f} [{100.0 * low:.0f}, {100.0 * high:.0f}]"


def summary_table(data_label: str, results: Mapping[str, EvalResult]) -> str:
    """One dataset, one row per model: accuracy overall and per category with 95 % bootstrap
    intervals, format rate, consistency rate and mean completion length."""
    cats: list[str] = []
    for r in results.values():
        cats += [c for c in r.per_category if c not in cats]
    n = max((r.n for r in results.values()), default=0)
    lines = [
        f"### {data_label}: accuracy % [95 % bootstrap interval], {n} questions",
        "",
        "| Model | Overall | " + " | ".join(cats) + " | Format % | Consistency % | Tokens |",
        "|---|---|" + "---|" * len(cats) + "---|---|---|",
    ]
    for label, r in results.items():
        ci = r.accuracy_ci or (None, None)
        cells = [_with_ci(r.accuracy, *ci)]
        for c in cats:
            m = r.per_category.get(c)
            cells.append("–" if m is None else
                         _with_ci(m["accuracy"], m.get("ci_low"), m.get("ci_high")))
        length = "–" if r.mean_completion_tokens is None else f"{r.mean_completion_tokens:.0f}"
        cells += [_pct(r.format_rate), _pct(r.consistency_rate), length]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    return "\n".join(lines) + "\n"


def paired_differences(
    predictions: Mapping[str, Mapping[str, Sequence[dict[str, Any]]]],
    pairs: Sequence[tuple[str, str]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{data: {"A - B": {difference, ci, n}}}``: accuracy of model A minus model B on the
    same questions (headline reading), with the paired bootstrap interval."""
    from embodied_r_ros.intervals import paired_difference

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for data, per_model in predictions.items():
        for a, b in pairs:
            if a not in per_model or b not in per_model:
                raise ValueError(f"--paired {a}:{b}: no such model label in {data}")
            hits = {label: {p["id"]: float(p["correct"]) for p in per_model[label]}
                    for label in (a, b)}
            ids = sorted(hits[a].keys() & hits[b].keys())
            diff, low, high = paired_difference([hits[a][i] for i in ids],
                                                [hits[b][i] for i in ids])
            out.setdefault(data, {})[f"{a} - {b}"] = {
                "difference": diff, "ci": [low, high], "n": len(ids)}
    return out


def paired_table(paired: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    lines = ["### Paired differences (same questions, 95 % paired bootstrap interval)", "",
             "| Dataset | Difference | Points | 95 % interval | n |", "|---|---|---|---|---|"]
    for data, rows in paired.items():
        for name, d in rows.items():
            low, high = d["ci"]
            lines.append(f"| {data} | {name} | {100.0 * d['difference']:+.1f} | "
                         f"[{100.0 * low:+.1f}, {100.0 * high:+.1f}] | {d['n']} |")
    return "\n".join(lines) + "\n"


def write_reports(
    by_data: Mapping[str, Mapping[str, EvalResult]],
    out_dir: str | Path,
    predictions: Mapping[str, Mapping[str, Sequence[dict[str, Any]]]] | None = None,
    pairs: Sequence[tuple[str, str]] = (),
) -> dict[str, Path]:
    """``eval.json``, ``eval.md``, ``eval.png``, ``predictions-*.jsonl`` (and with ``pairs``,
    ``paired.json``: :func:`paired_differences`) of models evaluated
    on one or more datasets (``by_data[data_label][model_label]``). With one dataset the JSON is
    ``{model_label: result}`` and predictions are ``predictions-<model>.jsonl``; with more,
    ``{data_label: {model_label: result}}`` and ``predictions-<data>-<model>.jsonl``."""
    from embodied_r_training.plots import accuracy_bars, summary_bars

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "eval.json", "markdown": out / "eval.md", "png": out / "eval.png"}
    single = len(by_data) == 1
    as_json = {d: {k: r.to_dict() for k, r in rs.items()} for d, rs in by_data.items()}
    write_atomic(paths["json"], json.dumps(
        next(iter(as_json.values())) if single else as_json, indent=1))
    parts = [summary_table(d, rs) for d, rs in by_data.items()]
    if pairs:
        paired = paired_differences(predictions or {}, pairs)
        paths["paired"] = out / "paired.json"
        write_atomic(paths["paired"], json.dumps(paired, indent=1))
        parts.append(paired_table(paired))
    for d, rs in by_data.items():
        parts.append(markdown_report(rs) if single else f"## {d}\n\n{markdown_report(rs)}")
    write_atomic(paths["markdown"], "\n".join(parts))
    if single:
        results = next(iter(by_data.values()))
        bars = {label: {**{c: m["accuracy"] for c, m in r.per_category.items()},
                        "overall": r.accuracy} for label, r in results.items()}
        accuracy_bars(bars, paths["png"])
    else:
        summary_bars(by_data, paths["png"])
    for d, per_model in (predictions or {}).items():
        for label, preds in per_model.items():
            name = label if single else f"{d}-{label}"
            safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in name)
            write_atomic(out / f"predictions-{safe}.jsonl", jsonl(preds))
    return paths

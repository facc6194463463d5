"""What a text adds: one model's accuracy from two texts of the same questions, paired.

``embodied-r-train eval --data memory=DIR --data window=DIR`` scores a model on each text of
the long world's questions separately (:mod:`lab.long_world.rows` writes one row per
question and text, its id ending in ``-memory`` or ``-window``). The memory's gain is the
difference on the same questions, so it is paired by question; and the questions of one world
are asked about its few objects, so besides the paired bootstrap over questions the pooled gain
gets one over worlds (:func:`clustered_difference`). Several eval
directories (worlds evaluated in parts) pool into one table: per world, per category, pooled.

``python -m lab.analysis.text_gain RUN [RUN ...] --model long-sft``
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from embodied_r_ros.intervals import BOOTSTRAP_SAMPLES, paired_difference

_WORLD_RE = re.compile(r"^(.*)-q\d+$")


class GainError(ValueError):
    """Eval directories that do not hold the two texts' predictions of one model."""


@dataclass(frozen=True)
class Hit:
    """One question answered from both texts."""

    question: str
    world: str
    category: str
    a: bool
    b: bool


@dataclass(frozen=True)
class Gain:
    """Accuracy from text ``a`` minus text ``b`` over ``n`` questions, in points, with the
    95 % paired bootstrap interval (and, pooled, the one over worlds)."""

    group: str
    n: int
    a_pct: float
    b_pct: float
    gain: float
    low: float
    high: float
    a_only: int  # right from text a only
    b_only: int
    worlds: int = 0
    world_low: float | None = None
    world_high: float | None = None


def clustered_difference(
    a: Sequence[float], b: Sequence[float], clusters: Sequence[str],
    samples: int = BOOTSTRAP_SAMPLES, seed: int = 0,
) -> tuple[float, float, float]:
    """:func:`~embodied_r_ros.intervals.paired_difference` where questions come in
    clusters that share a cause (the questions of one world are asked about its few objects):
    the bootstrap resamples whole clusters, so the interval holds for another draw of clusters,
    not of questions from these ones. With one question a cluster it is
    :func:`~embodied_r_ros.intervals.paired_difference`'s interval, draw for
    draw (clusters are numbered in order of first appearance)."""
    if not len(a) == len(b) == len(clusters):
        raise ValueError(f"paired values and clusters differ in length: {len(a)}, {len(b)}, "
                         f"{len(clusters)}")
    if not len(a):
        return (0.0, 0.0, 0.0)
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    index = {name: i for i, name in enumerate(dict.fromkeys(clusters))}
    member = np.array([index[c] for c in clusters])
    sums = np.bincount(member, weights=diff, minlength=len(index))
    counts = np.bincount(member, minlength=len(index)).astype(np.float64)
    picks = np.random.default_rng(seed).integers(0, len(index), size=(samples, len(index)))
    means = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    return (float(diff.mean()), float(np.percentile(means, 2.5)),
            float(np.percentile(means, 97.5)))


def world_of(question: str) -> str:
    """The world a question id belongs to (``long-seed5-q009`` -> ``long-seed5``)."""
    m = _WORLD_RE.match(question)
    return m.group(1) if m else question


def _predictions(run: Path, text: str, model: str) -> list[dict[str, Any]]:
    path = run / f"predictions-{text}-{model}.jsonl"
    if not path.is_file():
        raise GainError(f"{path}: no predictions of model {model!r} on text {text!r} "
                        f"(eval with --data {text}=DIR --model {model}=...)")
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load_hits(runs: Iterable[str | Path], model: str, a: str, b: str) -> list[Hit]:
    """Every question of ``runs`` answered by ``model`` from both texts, paired by id."""
    by_text: dict[str, dict[str, dict[str, Any]]] = {a: {}, b: {}}
    for run in map(Path, runs):
        if not run.is_dir():
            raise GainError(f"{run}: not an eval directory")
        for text in (a, b):
            for p in _predictions(run, text, model):
                question = str(p["id"]).removesuffix(f"-{text}")
                if question in by_text[text]:
                    raise GainError(f"{run}: question {question} is in more than one run")
                by_text[text][question] = p
    missing = by_text[a].keys() ^ by_text[b].keys()
    if missing:
        raise GainError(f"{len(missing)} questions answered from one text only "
                        f"(e.g. {sorted(missing)[0]})")
    return [Hit(q, world_of(q), str(p.get("category")), bool(p["correct"]),
                bool(by_text[b][q]["correct"]))
            for q, p in sorted(by_text[a].items())]


def gain_of(group: str, hits: Sequence[Hit]) -> Gain:
    a = [float(h.a) for h in hits]
    b = [float(h.b) for h in hits]
    diff, low, high = paired_difference(a, b)
    n = len(hits)
    return Gain(group, n, 100.0 * sum(a) / n, 100.0 * sum(b) / n, 100.0 * diff, 100.0 * low,
                100.0 * high, sum(h.a and not h.b for h in hits),
                sum(h.b and not h.a for h in hits))


def text_gains(hits: Sequence[Hit]) -> list[Gain]:
    """Per world, per category, then pooled (with the interval over worlds)."""
    if not hits:
        raise GainError("no questions to compare")
    out = []
    for key in ("world", "category"):
        for name in sorted({getattr(h, key) for h in hits}):
            out.append(gain_of(name, [h for h in hits if getattr(h, key) == name]))
    pooled = replace(gain_of("pooled", hits), worlds=len({h.world for h in hits}))
    if pooled.worlds > 1:  # one world has no spread between worlds to resample
        _, w_low, w_high = clustered_difference([float(h.a) for h in hits],
                                                [float(h.b) for h in hits],
                                                [h.world for h in hits])
        pooled = replace(pooled, world_low=100.0 * w_low, world_high=100.0 * w_high)
    return [*out, pooled]


def gain_table(gains: Sequence[Gain], a: str, b: str) -> str:
    """The gains as a markdown table."""
    lines = [f"| group | n | {a} % | {b} % | gain, points [95 % paired] | right from {a} only "
             f"| from {b} only |", "|---|---|---|---|---|---|---|"]
    for g in gains:
        interval = f"{g.gain:+.1f} [{g.low:+.0f}, {g.high:+.0f}]"
        if g.world_low is not None and g.world_high is not None:
            interval += f"; over {g.worlds} worlds [{g.world_low:+.0f}, {g.world_high:+.0f}]"
        lines.append(f"| {g.group} | {g.n} | {g.a_pct:.1f} | {g.b_pct:.1f} | {interval} | "
                     f"{g.a_only} | {g.b_only} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import sys

    p = argparse.ArgumentParser(
        prog="python -m lab.analysis.text_gain",
        description="Pair one model's eval predictions from two texts (data labels) by question "
        "and report the difference per world, per category and pooled, with paired bootstrap "
        "intervals (pooled: also over worlds).")
    p.add_argument("runs", nargs="+", help="eval directories (their predictions pool)")
    p.add_argument("--model", required=True, help="the model label of the eval")
    p.add_argument("--texts", nargs=2, default=("memory", "window"), metavar=("A", "B"),
                   help="the two data labels, the gain being A minus B (default: memory window)")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = p.parse_args(argv)
    a, b = args.texts
    try:
        gains = text_gains(load_hits(args.runs, args.model, a, b))
    except GainError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([asdict(g) for g in gains]))
    else:
        print(gain_table(gains, a, b), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

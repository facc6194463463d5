"""Confidence intervals for accuracies over a few hundred questions (or 30, in the demo).

A percentile bootstrap over the questions: resample them with replacement, take the mean of
each resample, and read the 2.5th and 97.5th percentiles. Seeded, so a report is reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

BOOTSTRAP_SAMPLES = 2000


def bootstrap_ci(
    values: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
) -> tuple[float, float]:
    """95 % interval of the mean of per-question ``values`` (1/0 hits, or probabilities)."""
    if not len(values):
        return (0.0, 0.0)
    v = np.asarray(values, dtype=np.float64)
    idx = np.random.default_rng(seed).integers(0, len(v), size=(samples, len(v)))
    means = v[idx].mean(axis=1)
    return (float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5)))


def paired_difference(
    a: Sequence[float], b: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0
) -> tuple[float, float, float]:
    """``(mean(a - b), low, high)``: the difference of two models' per-question hits on the
    SAME questions with its 95 % paired bootstrap interval (one resample of the questions for
    both, so questions both get right or both get wrong cancel out). Narrower than two
    separate intervals, which treat the two models' samples as independent."""
    if len(a) != len(b):
        raise ValueError(f"paired values differ in length: {len(a)} and {len(b)}")
    if not len(a):
        return (0.0, 0.0, 0.0)
    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    low, high = bootstrap_ci(diff.tolist(), samples, seed)
    return (float(diff.mean()), low, high)

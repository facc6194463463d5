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

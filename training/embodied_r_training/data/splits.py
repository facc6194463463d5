"""Seeded, scene-level data splits: train/val/test and k-fold cross-validation.

Questions about the same scene (video, bag, simulated world) share frames, so splitting by
question would leak test scenes into training. The official code splits scenes 75/5/20 (the
same floor arithmetic as here) without a seed; the paper reports 5-fold cross-validation. Both
are here, reproducible from ``seed``: scenes are sorted, then shuffled with their own
``random.Random(seed)``. What a "scene" is for each benchmark is the importers' business
(:func:`embodied_r_training.data.importers.urbanvideo_scene`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

SplitBy = Literal["scene", "question"]
SPLITS = ("train", "val", "test")


class SplitError(ValueError):
    """Splits that cannot be made (too few scenes, bad fractions)."""


@dataclass(frozen=True)
class SplitOptions:
    """How a build splits its rows: by scene or by question, the seed, the validation and
    test shares (the official code's 75/5/20 by default) and the k-fold splits to record."""

    by: SplitBy = "scene"
    seed: int = 0
    val_frac: float = 0.05
    test_frac: float = 0.20
    folds: int = 5

    @property
    def fractions(self) -> tuple[float, float, float]:
        """``(train, val, test)``; the training share is what the other two leave."""
        train = 1.0 - self.val_frac - self.test_frac
        if train <= 0 or self.val_frac < 0 or self.test_frac < 0:
            raise SplitError("the validation and test fractions must be >= 0 and leave room "
                             "for training")
        return (train, self.val_frac, self.test_frac)


@dataclass(frozen=True)
class Splits:
    """Row ids per split, plus the test ids of every fold (train = every other fold)."""

    train: list[str]
    val: list[str]
    test: list[str]
    folds: list[list[str]] = field(default_factory=list)
    by: SplitBy = "scene"
    seed: int = 0

    def ids(self, split: str, fold: int | None = None) -> list[str]:
        """Ids of ``split`` (train, val, test or all); with ``fold``, of that k-fold split."""
        if fold is not None:
            if not 0 <= fold < len(self.folds):
                raise SplitError(f"fold {fold} does not exist (this dataset has {len(self.folds)})")
            if split == "test":
                return list(self.folds[fold])
            if split == "train":
                return [i for k, f in enumerate(self.folds) if k != fold for i in f]
            if split == "all":
                return [i for f in self.folds for i in f]
            raise SplitError(f"k-fold splits have train and test only, not {split!r}")
        if split == "all":
            return [*self.train, *self.val, *self.test]
        if split not in SPLITS:
            raise SplitError(f"unknown split {split!r} (train, val, test, all)")
        return list(getattr(self, split))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Splits:
        return cls(**data)


def seeded_draw(rows: Sequence[Any], k: int, seed: int) -> list[Any]:
    """``k`` of ``rows`` (all, shuffled, when ``k`` covers them) drawn by ``seed``: the same
    rows in the same order on a rerun, a resume and every process of a run."""
    return random.Random(seed).sample(list(rows), min(k, len(rows)))


def _shuffled(groups: Iterable[str], seed: int) -> list[str]:
    ordered = sorted(set(groups))
    random.Random(seed).shuffle(ordered)
    return ordered


def _advice(by: SplitBy) -> str:
    what = "scene(s)" if by == "scene" else "question(s)"
    return f"{what}; split by question instead" if by == "scene" else what


def split_groups(
    groups: Sequence[str],
    fractions: tuple[float, float, float] = (0.75, 0.05, 0.20),
    seed: int = 0,
    by: SplitBy = "scene",
) -> dict[str, str]:
    """Each distinct group -> ``train``/``val``/``test`` in the official proportions: train
    gets ``floor(n * 0.75)`` groups, val ``floor(n * 0.05)``, test the rest (so 100 scenes give
    75/5/20 exactly). Below 20 groups val would get none; it then takes one from train."""
    if any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise SplitError(f"split fractions must be >= 0 and sum to 1, got {fractions}")
    order = _shuffled(groups, seed)
    n = len(order)
    n_train = math.floor(n * fractions[0] + 1e-9)
    n_val = math.floor(n * fractions[1] + 1e-9)
    if fractions[1] > 0 and n_val == 0 and n_train > 1:
        n_train, n_val = n_train - 1, 1
    n_test = n - n_train - n_val
    if n_train < 1 or (fractions[2] > 0 and n_test == 0):
        raise SplitError(f"{n} {_advice(by)} cannot make train/val/test {fractions}")
    out = {g: "train" for g in order[:n_train]}
    out.update({g: "val" for g in order[n_train : n_train + n_val]})
    out.update({g: "test" for g in order[n_train + n_val :]})
    return out


def kfold_groups(groups: Sequence[str], k: int = 5, seed: int = 0,
                 by: SplitBy = "scene") -> list[list[str]]:
    """``k`` disjoint, near-equal lists of groups covering them all."""
    order = _shuffled(groups, seed)
    if k < 2:
        raise SplitError(f"k-fold needs k >= 2, got {k}")
    if len(order) < k:
        raise SplitError(f"{len(order)} {_advice(by)} cannot make {k} folds")
    return [order[i::k] for i in range(k)]


def feasible_folds(rows: Sequence[dict[str, Any]], by: SplitBy, folds: int) -> int:
    """``folds``, or as many as the distinct groups allow (0 when fewer than two)."""
    key = "scene" if by == "scene" else "id"
    groups = len({str(r[key]) for r in rows})
    if folds and groups < folds:
        return groups if groups >= 2 else 0
    return folds


def make_splits(
    rows: Sequence[dict[str, Any]],
    *,
    by: SplitBy = "scene",
    seed: int = 0,
    fractions: tuple[float, float, float] = (0.75, 0.05, 0.20),
    folds: int = 5,
) -> Splits:
    """Splits of ``rows`` (each with ``id`` and ``scene``); ``folds=0`` skips k-fold.

    The result depends on the set of rows and the seed only (ids are listed sorted)."""
    key = "scene" if by == "scene" else "id"
    group_of = {str(r["id"]): str(r[key]) for r in rows}
    if len(group_of) != len(rows):
        raise SplitError("row ids are not unique")
    assign = split_groups(list(group_of.values()), fractions, seed, by)
    parts: dict[str, list[str]] = {s: [] for s in SPLITS}
    for row_id, group in sorted(group_of.items()):
        parts[assign[group]].append(row_id)
    fold_ids: list[list[str]] = []
    if folds:
        fold_of = {g: k for k, fold in enumerate(kfold_groups(list(group_of.values()), folds,
                                                              seed, by))
                   for g in fold}
        fold_ids = [[] for _ in range(folds)]
        for row_id, group in sorted(group_of.items()):
            fold_ids[fold_of[group]].append(row_id)
    return Splits(parts["train"], parts["val"], parts["test"], fold_ids, by, seed)

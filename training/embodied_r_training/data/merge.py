"""One dataset from several built ones: pooled and split once over the pooled scenes, or
mixed into a training set of so many rows of each.

The official preprocessing (dataset/data_preprocess.py of Embodied-R.code) concatenates the
UrbanVideo-Bench and VSI-Bench questions, shuffles the pooled list of scene names once and splits
it 75/5/20 by the same floor arithmetic, and one model trains on all of it. ``pool`` does that to
datasets built by ``import-urbanvideo`` / ``import-vsibench`` (or ``build``): the rows are copied
as they are (perception is not redone), and the split is :func:`~.splits.make_splits` over the
pooled rows with its seed, so the result depends on the set of rows and the seed only. Each
part's own split is discarded. The parts must have been written with the same prompt wording
and perception text layout (their prompts are read and shortened alike); ids and scene names
are made distinct per part only where they collide (``<label>/<scene>``), never silently merged.

``mix`` is for fine-tuning a trained reasoner on a new kind of question without losing the old
ones: a model fine-tuned on the long world's memory questions alone stopped walking the frames
that short-clip answers rest on. It takes ``rows`` training rows of each part, drawn evenly over
the part's categories from those whose cold-start think text the oracle supports (what SFT keeps
under ``sft.supported_only``), and shuffles them together, so that every stretch of training
sees both kinds; everything goes to ``train``.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied_r_training.data.dataset_files import BuildError, load_manifest, load_rows, write_table
from embodied_r_training.data.rationales import rationale
from embodied_r_training.data.splits import SplitBy, Splits, make_splits

#: manifest keys that must agree between parts (the prompt and perception-text layout)
SAME = ("prompt_version", "prompts", "report_motion", "frame_layout")


def _part_manifests(parts: Sequence[tuple[str, Path]]) -> list[dict[str, Any]]:
    """The manifests of ``(label, dataset dir)`` parts; ``BuildError`` where two share a label
    or they differ in prompts or text layout."""
    if len({label for label, _ in parts}) != len(parts):
        raise BuildError("each dataset needs its own label (LABEL=DIR)")
    manifests = [load_manifest(path) for _, path in parts]
    for key in SAME:
        values = {str(m.get(key)) for m in manifests}
        if len(values) > 1:
            raise BuildError(f"the datasets differ in {key} ({', '.join(sorted(values))}): "
                             "build them with the same prompts and perception settings")
    return manifests


def _merged_manifest(kind: str, parts: Sequence[tuple[str, Path]],
                     manifests: Sequence[dict[str, Any]], rows: Sequence[int]) -> dict[str, Any]:
    """The manifest of a dataset merged from ``parts``: their common layout and, per part,
    where it came from and how many of its rows were taken."""
    return {
        **{key: manifests[0].get(key) for key in SAME},
        "kind": kind,
        "parts": [{"label": label, "dir": str(path.resolve()), "kind": m.get("kind"), "rows": n}
                  for (label, path), m, n in zip(parts, manifests, rows, strict=True)],
    }


def pool_rows(parts: Sequence[tuple[str, Path]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pooled rows of ``(label, dataset dir)`` parts and the pooled manifest."""
    if len(parts) < 2:
        raise BuildError("pool needs at least two datasets (--data A --data B)")
    manifests = _part_manifests(parts)
    tables = [(label, load_rows(path)) for label, path in parts]
    ids = Counter(r["id"] for _, rows in tables for r in rows)
    scene_owner: dict[str, set[str]] = {}
    for label, rows in tables:
        for r in rows:
            scene_owner.setdefault(str(r["scene"]), set()).add(label)
    pooled: list[dict[str, Any]] = []
    for label, rows in tables:
        for r in rows:
            row = {**r, "pool_part": label}
            if ids[r["id"]] > 1:
                row["id"] = f"{label}/{r['id']}"
            if len(scene_owner[str(r["scene"])]) > 1:
                row["scene"] = f"{label}/{r['scene']}"
            pooled.append(row)
    if len({r["id"] for r in pooled}) != len(pooled):
        raise BuildError("row ids repeat inside one of the datasets")
    return pooled, _merged_manifest("pool", parts, manifests, [len(rows) for _, rows in tables])


def pool_datasets(
    parts: Sequence[tuple[str, Path]],
    out: Path,
    *,
    by: SplitBy = "scene",
    seed: int = 0,
    fractions: tuple[float, float, float] = (0.75, 0.05, 0.20),
    folds: int = 5,
) -> dict[str, int]:
    """Write the pooled dataset to ``out``; returns the rows per split."""
    if (out / "data.jsonl").exists():
        raise BuildError(f"{out} already holds a dataset; pool into a new directory")
    rows, manifest = pool_rows(parts)
    splits = make_splits(rows, by=by, seed=seed, fractions=fractions, folds=folds)
    manifest.update(split_by=by, seed=seed, fractions=list(fractions))
    write_table(out, rows, splits, manifest)
    return {s: len(splits.ids(s)) for s in ("train", "val", "test")}


def balanced_rows(rows: Sequence[dict[str, Any]], n: int,
                  rng: random.Random) -> list[dict[str, Any]]:
    """``n`` of ``rows`` whose think text is supported, taken a category at a time in turn
    (fewer where the supported rows run out), each category's in ``rng``'s order."""
    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if rationale(r).supported:
            by_category[str(r["category"])].append(r)
    queues = [by_category[c] for c in sorted(by_category)]
    for queue in queues:
        rng.shuffle(queue)
    taken: list[dict[str, Any]] = []
    turn = 0
    while len(taken) < n and any(queues):
        if queue := queues[turn % len(queues)]:
            taken.append(queue.pop())
        turn += 1
    return taken


def mix_datasets(parts: Sequence[tuple[str, Path]], out: Path, rows: int,
                 seed: int = 0) -> dict[str, int]:
    """Write ``rows`` training rows of each part (:func:`balanced_rows`), shuffled together,
    to ``out`` as its ``train`` split; returns the rows taken per part."""
    if not parts:
        raise BuildError("mix needs at least one dataset (--data LABEL=DIR)")
    if rows < 1:
        raise BuildError(f"--rows must be at least 1, not {rows}")
    if (out / "data.jsonl").exists():
        raise BuildError(f"{out} already holds a dataset; mix into a new directory")
    manifests = _part_manifests(parts)
    rng = random.Random(seed)
    loaded = {label: load_rows(path, "train") for label, path in parts}
    ids = [r["id"] for part in loaded.values() for r in part]
    if len(set(ids)) != len(ids):  # of all rows, not of those drawn: the draw is by chance
        raise BuildError("row ids repeat across the datasets: mix datasets of distinct questions")
    taken = {label: balanced_rows(part, rows, rng) for label, part in loaded.items()}
    mixed = [r for part in taken.values() for r in part]
    rng.shuffle(mixed)
    manifest = {**_merged_manifest("mix", parts, manifests, [len(p) for p in taken.values()]),
                "seed": seed}
    write_table(out, mixed, Splits(train=[r["id"] for r in mixed], val=[], test=[]), manifest)
    return {label: len(part) for label, part in taken.items()}

"""One dataset from several built ones, split once over the pooled scenes.

The official preprocessing (dataset/data_preprocess.py of Embodied-R.code) concatenates the
UrbanVideo-Bench and VSI-Bench questions, shuffles the pooled list of scene names once and splits
it 75/5/20 by the same floor arithmetic, and one model trains on all of it. ``pool`` does that to
datasets built by ``import-urbanvideo`` / ``import-vsibench`` (or ``build``): the rows are copied
as they are (perception is not redone), and the split is :func:`~.splits.make_splits` over the
pooled rows with its seed, so the result depends on the set of rows and the seed only. Each
part's own split is discarded. The parts must have been written with the same prompt wording
and perception text layout (their prompts are read and shortened alike); ids and scene names
are made distinct per part only where they collide (``<label>/<scene>``), never silently merged.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from embodied_r_training.data.dataset_files import BuildError, load_manifest, load_rows, write_table
from embodied_r_training.data.splits import SplitBy, make_splits

#: manifest keys that must agree between parts (the prompt and perception-text layout)
SAME = ("prompt_version", "prompts", "report_motion", "frame_layout")


def pool_rows(parts: Sequence[tuple[str, Path]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pooled rows of ``(label, dataset dir)`` parts and the pooled manifest."""
    if len(parts) < 2:
        raise BuildError("pool needs at least two datasets (--data A --data B)")
    if len({label for label, _ in parts}) != len(parts):
        raise BuildError("each dataset needs its own label (LABEL=DIR)")
    manifests = [load_manifest(path) for _, path in parts]
    for key in SAME:
        values = {str(m.get(key)) for m in manifests}
        if len(values) > 1:
            raise BuildError(f"the datasets differ in {key} ({', '.join(sorted(values))}): "
                             "build them with the same prompts and perception settings")
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
    manifest = {
        **{key: manifests[0].get(key) for key in SAME},
        "kind": "pool",
        "parts": [{"label": label, "dir": str(path.resolve()), "kind": m.get("kind"),
                   "rows": len(rows)}
                  for (label, path), m, (_, rows) in zip(parts, manifests, tables, strict=True)],
    }
    return pooled, manifest


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

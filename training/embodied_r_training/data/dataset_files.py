"""The files of a built dataset: the table, its splits and manifest (written atomically so a
killed build never leaves a half-written one), and the reading API that grpo, sft and eval use."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from embodied_r_ros.backends.reply_cache import write_atomic
from embodied_r_training.data.splits import Splits

log = logging.getLogger(__name__)

TABLE = "data.jsonl"
SPLITS_FILE = "splits.json"
MANIFEST = "manifest.json"
DATASET_VERSION = 2  # 2: bag rows perceived as the robot does (core.odometry, stored pixels)


class BuildError(Exception):
    """A dataset that cannot be built; the message is one line."""


def jsonl(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def write_table(
    out: Path, rows: list[dict[str, Any]], splits: Splits, manifest: dict[str, Any]
) -> None:
    """``data.jsonl`` (every row), ``train/val/test.jsonl``, ``splits.json``, ``manifest.json``."""
    by_id = {r["id"]: r for r in rows}
    for split in ("train", "val", "test"):
        write_atomic(out / f"{split}.jsonl", jsonl(by_id[i] for i in splits.ids(split)))
    write_atomic(out / SPLITS_FILE, json.dumps(splits.to_dict(), indent=1))
    counts = Counter(r["category"] for r in rows)
    info = {
        **manifest,
        "version": DATASET_VERSION,
        "rows": len(rows),
        "categories": dict(sorted(counts.items())),
        "splits": {s: len(splits.ids(s)) for s in ("train", "val", "test")},
        "folds": [len(f) for f in splits.folds],
    }
    write_atomic(out / MANIFEST, json.dumps(info, indent=1, default=str))
    write_atomic(out / TABLE, jsonl(rows))  # last: its presence means the build finished


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open() as fh:
        for n, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise BuildError(f"{path}:{n}: not valid JSON ({exc.msg})") from None


def load_rows(data_dir: str | Path, split: str = "all", fold: int | None = None) -> list[dict]:
    """Rows of a built dataset: one split, or a k-fold split (``fold``)."""
    root = Path(data_dir)
    table = root / TABLE
    if not table.is_file():
        raise BuildError(f"{root} is not a built dataset (no {TABLE}; run 'build' or an importer)")
    rows = list(read_jsonl(table))
    if split == "all" and fold is None:
        return rows
    splits = Splits.from_dict(json.loads((root / SPLITS_FILE).read_text()))
    by_id = {r["id"]: r for r in rows}
    return [by_id[i] for i in splits.ids(split, fold) if i in by_id]


def load_manifest(data_dir: str | Path) -> dict[str, Any]:
    path = Path(data_dir) / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else {}


def first_per_category(rows: Iterable[dict[str, Any]], n: int | None) -> list[dict[str, Any]]:
    """The first ``n`` rows of each category in their order (all of them when ``n`` is None):
    a fixed, balanced subset (a test set's quota, an evaluation subset)."""
    if n is None:
        return list(rows)
    counts: Counter[str] = Counter()
    kept: list[dict[str, Any]] = []
    for row in rows:
        category = str(row.get("category"))
        if counts[category] < n:
            counts[category] += 1
            kept.append(row)
    return kept

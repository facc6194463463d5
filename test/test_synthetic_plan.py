"""The synthetic data plan: the same datasets whether worlds are built one at a time or several
at once in processes."""

from __future__ import annotations

import json
from pathlib import Path

from embodied_r_training.data.synthetic_worlds import SplitPlan, build_synthetic

SMALL = {"frames": 80, "width": 160, "height": 120}


def _plan() -> tuple[SplitPlan, ...]:
    return (SplitPlan("train", (1500,), spec=SMALL, questions=6),
            SplitPlan("test", (3500, 3501), spec=SMALL, questions=12, per_category=1))


def _tables(root: Path) -> dict[str, list[dict]]:
    """The rows of each split, less ``source`` (the bag's path, under ``root``)."""
    return {split: [{k: v for k, v in json.loads(line).items() if k != "source"}
                    for line in (root / "id" / f"{split}.jsonl").read_text().splitlines()]
            for split in ("train", "test")}


def test_parallel_workers_build_the_same_datasets(tmp_path: Path) -> None:
    one = build_synthetic(tmp_path / "one", _plan())
    two = build_synthetic(tmp_path / "two", _plan(), workers=2)
    assert one["rows"] == two["rows"] and one["worlds"] == two["worlds"]
    assert one["rows"]["train"] > 0 and one["rows"]["test"] > 0
    assert _tables(tmp_path / "one") == _tables(tmp_path / "two")
    # the quota's split keeps the same seeds and rows
    plan_one = json.loads((tmp_path / "one" / "id" / "manifest.json").read_text())["plan"]
    plan_two = json.loads((tmp_path / "two" / "id" / "manifest.json").read_text())["plan"]
    assert plan_one["test"]["seeds"] == plan_two["test"]["seeds"]


def test_every_question_a_world_asks_is_decided_by_its_text(tmp_path: Path) -> None:
    """The generator asks only what the world's own text decides, and counts the candidates it
    skipped by category and reason; the builder then keeps every row (and would count any it
    left out)."""
    from embodied_r_training.data.oracle import solve

    # full-length trajectories (small frames): long clips leave some candidates undecided
    spec = {"width": 160, "height": 120}
    summary = build_synthetic(tmp_path, (SplitPlan("train", (1501, 1502), spec=spec,
                                                   questions=36),))
    rows = [json.loads(line) for line in
            (tmp_path / "id" / "train.jsonl").read_text().splitlines()]
    assert rows and all(solve(r).letter == r["solution"] for r in rows)
    worlds = [tmp_path / "worlds" / "train" / f"seed-{seed}" for seed in (1501, 1502)]
    generated = [json.loads((w / "world.json").read_text())["questions_skipped"] for w in worlds]
    reasons = {why for g in generated for by_reason in g.values() for why in by_reason}
    assert reasons and reasons <= {"the text decides nothing", "the text decides another answer",
                                   "near a boundary in the text",
                                   "the text does not locate an object",
                                   "no key frame in the clip"}
    manifest = json.loads((tmp_path / "id" / "manifest.json").read_text())
    assert manifest["skipped_by_text"] == summary["skipped"]
    asked = sum(len((w / "data.jsonl").read_text().splitlines()) for w in worlds)
    assert len(rows) + sum(summary["skipped"].values()) == asked
    assert len(rows) >= 0.95 * asked
